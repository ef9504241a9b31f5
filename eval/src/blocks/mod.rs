//! `eval --blocks`: private block retrieval (`shared/spec/blocks.md`, issue #12 point 7).
//!
//! Gallery: the first 10,000 test images (the server's demo gallery), and — for the large run —
//! the server's demo gallery of `--blocks-large` images (`data::fashion::demo_gallery`: the test split,
//! the training split without the public anchors and the reserved queries, then variants).
//! Queries: the reserved training images (`data::reserved_train`), outside every gallery and
//! the public anchors (the first `--anchors` class-balanced training images), the same queries
//! for both galleries; the anchors are held out too, so coverage is measured on held-out
//! probes at both sizes. Features: the gallery model's of the gallery and the anchors (as the
//! server computes them), the query model's of the queries (as a client does).
//!
//! Levels are the same k-means levels the server publishes (`partition::kmeans` with the
//! server's seed), made to overlap by spill (each item in its `r` nearest centroids' blocks) or
//! closure (each block also holds each member's `m` nearest gallery items); one k-means per B
//! is shared by every variant (the membership rules are `partition::build_level`'s, checked
//! against it on one level). Each level is published with `publish::publish_level` (block
//! files, gzip sizes, coverage on the public anchors), so the predicted fidelity is what a real
//! client reads from `plan::candidates`.
//!
//! Exact expectations over the k-subset mechanism (no simulation) for fidelity@8, pool and
//! bytes: with `p = L·e^ε/(L·e^ε + B − L)`, given `x ∈ S` the other `L − 1` released blocks are
//! uniform among the `B − 1` others, given `x ∉ S` all `L` are; an item held by `c` blocks other
//! than `x` is then downloaded with probability `1 − C(B−1−c, L−1)/C(B−1, L−1)` (or 1 if `x`
//! holds it) resp. `1 − C(B−1−c, L)/C(B−1, L)`. Ranking over the pool is exact, so fidelity@8
//! is the expected share of the true 8-NN in the pool. Recall@8 and mAP@8 of the returned page
//! are Monte Carlo with the real release (`dp::subset::release`, seeded ChaCha20) and each
//! query's exact ranking restricted to the pool; a subset is re-ranked with `blocks::rank` over
//! encoded and decoded block files to measure the i16 quantisation.

mod csv;
mod frame;
mod level;
mod page;
mod plot;
mod reference;
mod report;
mod result;
mod select;
pub(crate) mod served;
mod setup;
mod sweep;

use std::collections::HashSet;
use std::time::Instant;

use embed::model::Model;
use publish::partition::Overlap;

use data::assets::{MODEL_WEIGHTS, QUERY_WEIGHTS};
use data::fashion::{balanced_anchors, demo_gallery, load_split, reserved_train};

use crate::args::Args;
use csv::write_csv;
use plot::plot;
use reference::{EPSILONS, LARGE_EPSILONS};
use report::report;
use result::GalleryResult;
use select::rank_variants;
use setup::{infer, infer_rows, parse_overlap, search_rows, Ctx, Gallery, Res, SMALL};
use sweep::eval_gallery;

pub(crate) fn run(args: &Args) -> Res<()> {
    let t0 = Instant::now();
    let test = load_split(&args.data_dir, "t10k")?;
    let train = load_split(&args.data_dir, "train")?;
    let model = Model::from_bytes(MODEL_WEIGHTS)?;
    let anchor_idx = balanced_anchors(&train, args.anchors);
    let small_n = SMALL.min(test.labels.len());
    // Held out at every size: the demo gallery never holds these (`data::reserved_train`).
    let query_idx: Vec<usize> = reserved_train(train.labels.len(), &anchor_idx)
        .into_iter()
        .take(args.blocks_queries)
        .collect();
    if query_idx.len() < args.blocks_queries {
        eprintln!(
            "eval --blocks: only {} reserved training images are held out",
            query_idx.len()
        );
    }
    if query_idx.is_empty() {
        return Err("no held-out queries".into());
    }
    let variants: Vec<Overlap> = args
        .blocks_variants
        .iter()
        .map(|s| parse_overlap(s))
        .collect::<Res<_>>()?;
    eprintln!(
        "eval --blocks: gallery {small_n} (test split){}, {} held-out queries (training images {}..{}), {} anchors, {} Monte Carlo releases per query, seed {}",
        if args.blocks_large > small_n { format!(" and the server's demo gallery of {}", args.blocks_large) } else { String::new() },
        query_idx.len(),
        query_idx[0],
        query_idx[query_idx.len() - 1] + 1,
        anchor_idx.len(),
        args.blocks_draws,
        args.seed
    );
    let log = |m: &str| eprintln!("[blocks {:>6.1} s] {m}", t0.elapsed().as_secs_f64());
    log("model features: test split, queries, anchors");
    let test_idx: Vec<usize> = (0..small_n).collect();
    let test_feats = infer(&model, &test, &test_idx)?;
    // The queries are photos a client embeds: the query model's features.
    let q_features = search_rows(&Model::from_bytes(QUERY_WEIGHTS)?, &train, &query_idx)?;
    let a_features = infer(&model, &train, &anchor_idx)?;
    let dim = q_features.len() / query_idx.len();
    let ctx = Ctx {
        args,
        dim,
        q_features,
        q_labels: query_idx.iter().map(|&i| train.labels[i]).collect(),
        a_features,
        a_labels: anchor_idx.iter().map(|&i| train.labels[i] as u32).collect(),
        t0,
    };
    let small = Gallery {
        ids: (0..small_n as u64).collect(),
        labels: test.labels[..small_n].to_vec(),
        features: test_feats,
        thumbs: (0..small_n)
            .flat_map(|i| test.images.image(i).to_vec())
            .collect(),
        dim,
    };
    let small_res = eval_gallery(&ctx, &small, &EPSILONS, &variants, "")?;
    let large_variants: Vec<Overlap> = if args.blocks_large_variants == ["auto"] {
        let ranked = rank_variants(&small_res);
        let spill = ranked.iter().filter(|v| v.0.starts_with("spill")).take(1);
        let closure = ranked.iter().filter(|v| v.0.starts_with("closure")).take(2);
        spill
            .chain(closure)
            .map(|v| parse_overlap(&v.0))
            .collect::<Res<_>>()?
    } else {
        args.blocks_large_variants
            .iter()
            .map(|s| parse_overlap(s))
            .collect::<Res<_>>()?
    };
    let large_res = if args.blocks_large > small_n {
        let n = args.blocks_large;
        log(&format!(
            "the server's demo gallery of {n}: images and model features"
        ));
        let demo = demo_gallery(&test, &train, &anchor_idx, n);
        let held: HashSet<u64> = demo.iter().map(|d| d.id).collect();
        let mut g = Gallery {
            // Numbered by index, as the sweep reads them back (the server's ids have holes
            // where the anchors and reserved images are; the block bytes are the same size).
            ids: (0..demo.len() as u64).collect(),
            labels: demo.iter().map(|d| d.label).collect(),
            features: Vec::new(),
            thumbs: demo.iter().flat_map(|d| d.pixels.iter().copied()).collect(),
            dim,
        };
        drop(demo);
        g.features = infer_rows(&model, &g.thumbs)?;
        let suffix = format!("-{}k", n / 1000);
        let mut r = eval_gallery(&ctx, &g, &LARGE_EPSILONS, &large_variants, &suffix)?;
        r.anchors_in_gallery = anchor_idx
            .iter()
            .filter(|&&i| held.contains(&((test.labels.len() + i) as u64)))
            .count();
        Some(r)
    } else {
        None
    };
    let results: Vec<&GalleryResult> = std::iter::once(&small_res)
        .chain(large_res.as_ref())
        .collect();
    std::fs::create_dir_all(&args.out)?;
    write_csv(&args.out.join("blocks.csv"), &results)?;
    plot(&args.out.join("blocks.svg"), &results)?;
    let report = report(&results, args, t0.elapsed().as_secs_f64());
    print!("{report}");
    std::fs::write(args.out.join("blocks.md"), &report)?;
    println!(
        "wrote {0}/blocks.csv, {0}/blocks.svg, {0}/blocks.md; total {1:.1} s",
        args.out.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
