//! The familiarity warning on real images that are not clothing (`--real-images DIR`,
//! `real-images.md` in `--out`): photographs, faces and drawn objects made by people, from
//! Debian's and scikit-image's packages (`scripts/real-images.sh` puts them in `DIR`, one
//! folder a kind). Each file goes through the CLI's own decoder (`embed::photo_file`, bounded)
//! and the client's decision (`data::familiarity::decide`: the score, the learned detector,
//! the photo's own statistics, nothing to see refused), against the server's default
//! reference. Nothing here was fitted or calibrated on these images: they measure how the
//! generated held-out kinds (`data::not_clothing`) stand for what people photograph.

use std::fmt::Write as _;
use std::path::Path;

use data::familiarity::{decide, reference, Decision};
use data::fashion::load_split;
use embed::model::weights_version;
use rayon::prelude::*;

use super::Res;
use crate::args::Args;

/// One kind's outcome: images read, flagged (refused included), refused as nothing to see,
/// files the decoder refused.
#[derive(Default)]
struct Kind {
    images: usize,
    flagged: usize,
    refused: usize,
    unreadable: usize,
}

pub(crate) fn run(args: &Args, dir: &Path) -> Res<()> {
    let train = load_split(&args.data_dir, "train")?;
    let reference = reference(&train);
    let mut kinds: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    kinds.sort();
    if kinds.is_empty() {
        return Err(format!(
            "{}: no folder of images (scripts/real-images.sh fills it)",
            dir.display()
        )
        .into());
    }
    let mut md = format!(
        "# The familiarity warning on real images that are not clothing\n\n\
         `bash scripts/real-images.sh DIR && bash scripts/eval.sh --real-images DIR` \
         (familiarity model {}). Each image is read by the CLI's decoder and judged by the client's \
         decision (`embed::ood::assess_scene`), as a person's photo is. None of these images \
         was used to fit or calibrate anything.\n\n\
         | kind | images | flagged | share | refused (nothing to see) | not decoded |\n\
         |---|---:|---:|---:|---:|---:|\n",
        weights_version(embed::ood::FAMILIARITY_WEIGHTS)
    );
    // A folder named `…clothing` holds clothing (drawn), which the warning should not flag:
    // reported on its own, outside the total.
    let mut all = Kind::default();
    let mut clothing = Vec::new();
    for kind_dir in kinds {
        let name = kind_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut files: Vec<_> = std::fs::read_dir(&kind_dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        tracing::info!("{name}: {} images", files.len());
        let outcomes: Vec<Option<Decision>> = files
            .par_iter()
            .map(|p| {
                let bytes = std::fs::read(p).ok()?;
                let (rgba, w, h) = embed::photo_file::decode_rgba(&bytes).ok()?;
                Some(decide(&reference, &rgba, w, h))
            })
            .collect();
        let mut k = Kind::default();
        for o in &outcomes {
            match o {
                None => k.unreadable += 1,
                Some(d) => {
                    k.images += 1;
                    k.flagged += d.flagged as usize;
                    k.refused += d.refused as usize;
                }
            }
        }
        if name.ends_with("clothing") {
            clothing.push((name, k));
            continue;
        }
        row(&mut md, &name, &k)?;
        all.images += k.images;
        all.flagged += k.flagged;
        all.refused += k.refused;
        all.unreadable += k.unreadable;
    }
    row(&mut md, "**all not clothing**", &all)?;
    for (name, k) in &clothing {
        row(
            &mut md,
            &format!("{name} (clothing: should not be flagged)"),
            k,
        )?;
    }
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(args.out.join("real-images.md"), &md)?;
    print!("{md}");
    Ok(())
}

fn row(md: &mut String, name: &str, k: &Kind) -> Res<()> {
    let share = k.flagged as f64 / k.images.max(1) as f64;
    writeln!(
        md,
        "| {name} | {} | {} | {share:.3} | {} | {} |",
        k.images, k.flagged, k.refused, k.unreadable
    )?;
    Ok(())
}
