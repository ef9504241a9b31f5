//! `partbench`: how a level's blocks trade coverage for size, on the demo gallery's real
//! features — the measurement behind the capped levels the hintless ranking needs (#18: a
//! per-block encrypted-score database has as many rows as its largest block).
//!
//! For each block count it prints the default level (closure-24) and capped levels
//! ([`publish::partition::Overlap::Capped`]): own-block coverage on the held-out
//! anchors, the largest and mean block, the largest own cell. The gallery's features can be
//! cached to a file (`--cache`), since computing them is most of a run at 1,000,000 images.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use embed::model::{Model, EMBED};
use publish::centroids::quantised;
use publish::partition::{
    build_level, capped_members, coverage, kmeans_centroids, nearest_centroids_exact,
    nearest_k_many, split_cells, Level, LevelSpec, Overlap,
};
use publish::publish::{ranking_spec, COVERAGE_K, DEFAULT_CLOSURE, RANKING_CLOSURE};
use rayon::prelude::*;

use data::fashion::{balanced_anchors, demo_gallery, load_split, reserved_train, DEFAULT_DIR};
use publish::partition::{closure_neighbours, coverage_probes};

#[derive(Parser)]
#[command(about = "Coverage against block size of the partition's levels")]
struct Args {
    #[arg(long, env = "FASHION_MNIST_DIR", default_value = DEFAULT_DIR)]
    data_dir: PathBuf,
    #[arg(long, default_value_t = 1_000_000)]
    gallery_size: usize,
    #[arg(long, default_value_t = 1_000)]
    anchors: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Block counts to build.
    #[arg(long, value_delimiter = ',', default_value = "256")]
    blocks: Vec<u32>,
    /// Row caps to try at each block count (0: none, the default closure).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    caps: Vec<u32>,
    /// Split cells holding more than this share of the cap (the study's capped levels; the
    /// server's ranking level, always measured first, splits at one half).
    #[arg(long, value_delimiter = ',', default_value = "0.5")]
    shares: Vec<f32>,
    /// Closure neighbours the study's capped levels draw from.
    #[arg(long, default_value_t = RANKING_CLOSURE as usize)]
    m: usize,
    /// Held-out photos (reserved training images) coverage is also measured on.
    #[arg(long, default_value_t = 1_000)]
    photos: usize,
    /// Read the features from (or write them to) this file.
    #[arg(long)]
    cache: Option<PathBuf>,
    /// The model's weights (default: the committed ones the server embeds).
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Also say, for the ranking level, why a held-out photo's top-8 items are missing from
    /// its block: never among the block's members' neighbours, or among them but past the cap.
    #[arg(long)]
    misses: bool,
}

type Features = (Vec<f32>, Vec<f32>);

fn model(args: &Args) -> Result<Model, Box<dyn std::error::Error>> {
    Ok(match &args.weights {
        Some(path) => Model::from_bytes(&std::fs::read(path)?)?,
        None => Model::from_bytes(data::assets::MODEL_WEIGHTS)?,
    })
}

fn compute(args: &Args) -> Result<Features, Box<dyn std::error::Error>> {
    let train = load_split(&args.data_dir, "train")?;
    let test = load_split(&args.data_dir, "t10k")?;
    let anchor_idx = balanced_anchors(&train, args.anchors);
    let model = model(args)?;
    let infer = |images: Vec<&[u8]>| -> Result<Vec<f32>, shared::Error> {
        let rows: Vec<Vec<f32>> = images
            .par_chunks(256)
            .map(|c| model.infer_batch(c))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .flatten()
            .map(|r| r.features)
            .collect();
        Ok(rows.concat())
    };
    let t = Instant::now();
    let gallery = demo_gallery(&test, &train, &anchor_idx, args.gallery_size);
    let features = infer(gallery.iter().map(|g| g.pixels.as_slice()).collect())?;
    let anchors = infer(anchor_idx.iter().map(|&i| train.images.image(i)).collect())?;
    eprintln!(
        "partbench: features of {} items in {:.1} s",
        gallery.len(),
        t.elapsed().as_secs_f64()
    );
    Ok((features, anchors))
}

fn write_f32s(w: &mut impl Write, v: &[f32]) -> std::io::Result<()> {
    w.write_all(&(v.len() as u64).to_le_bytes())?;
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    w.write_all(&bytes)
}

fn read_f32s(r: &mut impl Read) -> std::io::Result<Vec<f32>> {
    let mut len = [0u8; 8];
    r.read_exact(&mut len)?;
    let mut bytes = vec![0u8; u64::from_le_bytes(len) as usize * 4];
    r.read_exact(&mut bytes)?;
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

fn features(args: &Args) -> Result<Features, Box<dyn std::error::Error>> {
    if let Some(path) = &args.cache {
        if let Ok(f) = std::fs::File::open(path) {
            let mut r = std::io::BufReader::new(f);
            let g = read_f32s(&mut r)?;
            let a = read_f32s(&mut r)?;
            if g.len() == args.gallery_size * EMBED && a.len() == args.anchors * EMBED {
                return Ok((g, a));
            }
        }
    }
    let (g, a) = compute(args)?;
    if let Some(path) = &args.cache {
        let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
        write_f32s(&mut w, &g)?;
        write_f32s(&mut w, &a)?;
    }
    Ok((g, a))
}

/// Features of the held-out photos `pirbench` searches with (the first `--photos` reserved
/// training images).
fn reserved_features(args: &Args) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    let train = load_split(&args.data_dir, "train")?;
    let model = model(args)?;
    let idx: Vec<usize> = reserved_train(train.labels.len(), &[])
        .into_iter()
        .take(args.photos)
        .collect();
    let images: Vec<&[u8]> = idx.iter().map(|&i| train.images.image(i)).collect();
    Ok(model
        .infer_batch(&images)?
        .into_iter()
        .flat_map(|r| r.features)
        .collect())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let (features, anchors) = features(&args)?;
    let dim = EMBED;
    let n = features.len() / dim;
    let (mut probes, held_out) = coverage_probes(&features, dim, &anchors);
    // Also `pirbench`'s held-out photos (the reserved training images), which the fidelity
    // figures are measured on: coverage on both, reported apart.
    let photos = reserved_features(&args)?;
    let n_anchor_probes = probes.len() / dim;
    probes.extend_from_slice(&photos);
    let truth = nearest_k_many(&features, dim, &probes, COVERAGE_K);
    let t = Instant::now();
    let m = args.m.max(RANKING_CLOSURE as usize);
    let (nb, exact) = closure_neighbours(&features, dim, m, args.seed)?;
    eprintln!(
        "partbench: {n} items, {held_out} held-out probes, neighbours (exact: {exact}) in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    println!("blocks,overlap,share,coverage_own,coverage_photos,largest,mean,largest_own,secs");
    // The level the server builds for the hintless ranking, then the study's variants.
    let mut runs: Vec<(u32, Overlap, f32)> = ranking_spec(n)
        .map(|s| (s.blocks, s.overlap, 0.0))
        .into_iter()
        .collect();
    for &b in &args.blocks {
        for &cap in &args.caps {
            if cap == 0 {
                runs.push((b, Overlap::Closure(DEFAULT_CLOSURE), 0.0));
            }
            for &share in args.shares.iter().filter(|_| cap > 0) {
                let m = args.m as u32;
                runs.push((b, Overlap::Capped { m, rows: cap }, share));
            }
        }
    }
    for (b, overlap, share) in runs {
        {
            let t = Instant::now();
            let spec = LevelSpec { blocks: b, overlap };
            let level = match overlap {
                Overlap::Capped { m, rows } if share > 0.0 => {
                    let raw = kmeans_centroids(&features, dim, b as usize, args.seed)?;
                    let c = quantised(&raw, dim)?;
                    let home = nearest_centroids_exact(&features, &c, dim);
                    let own_max = (rows as f32 * share) as usize;
                    let (c, home) = split_cells(&features, dim, c, home, own_max, args.seed)?;
                    let members =
                        capped_members(&features, dim, &c, &home, &nb, m as usize, rows as usize);
                    Level {
                        spec,
                        centroids: c,
                        home,
                        members,
                    }
                }
                _ => build_level(&features, dim, spec, args.seed, Some(&nb))?,
            };
            let split = n_anchor_probes * dim;
            let cov = coverage(&level, dim, &probes[..split], &truth[..n_anchor_probes]);
            let photo_cov = coverage(&level, dim, &probes[split..], &truth[n_anchor_probes..]);
            let sizes: Vec<usize> = level.members.iter().map(Vec::len).collect();
            let mut own = vec![0usize; level.members.len()];
            for &h in &level.home {
                own[h as usize] += 1;
            }
            if let (true, 0.0, Overlap::Capped { m, .. }) = (args.misses, share, overlap) {
                misses(
                    &level,
                    &nb,
                    m as usize,
                    &probes[split..],
                    &truth[n_anchor_probes..],
                );
            }
            println!(
                "{},{},{share},{:.4},{:.4},{},{},{},{:.1}",
                level.members.len(),
                overlap.name(),
                cov.own,
                photo_cov.own,
                sizes.iter().max().unwrap_or(&0),
                sizes.iter().sum::<usize>() / sizes.len().max(1),
                own.iter().max().unwrap_or(&0),
                t.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}

/// For each held-out photo's top-k items missing from its own block: was the item among the
/// `m` nearest neighbours of some member of the block's cell (a candidate the cap left out) or
/// not (no fill order could have taken it)? Printed to stderr as shares of all top-k items.
fn misses(level: &Level, nb: &[Vec<u32>], m: usize, probes: &[f32], truth: &[Vec<u32>]) {
    let dim = EMBED;
    let mut cells: Vec<Vec<u32>> = vec![Vec::new(); level.members.len()];
    for (i, &h) in level.home.iter().enumerate() {
        cells[h as usize].push(i as u32);
    }
    let (mut listed, mut unlisted, mut total) = (0usize, 0usize, 0usize);
    for (p, t) in probes.chunks_exact(dim).zip(truth) {
        let x = publish::partition::nearest_centroid(&level.centroids, dim, p) as usize;
        total += t.len();
        let missing: Vec<u32> = t
            .iter()
            .copied()
            .filter(|i| level.members[x].binary_search(i).is_err())
            .collect();
        for i in missing {
            let cand = cells[x]
                .iter()
                .any(|&j| nb[j as usize].iter().take(m).any(|&y| y == i));
            if cand {
                listed += 1;
            } else {
                unlisted += 1;
            }
        }
    }
    let share = |c: usize| c as f64 / total.max(1) as f64;
    eprintln!(
        "partbench: of {total} top-{} items of held-out photos, missing from the photo's block: {:.4} among its members' {m} neighbours but past the cap, {:.4} never among them",
        truth.first().map_or(0, Vec::len),
        share(listed),
        share(unlisted)
    );
}
