//! `eval --blocks-served 10000,70000,1000000`: the plans a client is actually offered, gallery by
//! gallery, predicted against measured (`blocks-served.md` and `blocks-served.csv`).
//!
//! The sweep (`eval --blocks`) explores every variant and level; this measures what is served:
//! the server's demo gallery of each size (`data::fashion::demo_gallery`), its default levels
//! (`publish::publish::default_specs`) built with the server's own neighbour search and probe choice
//! (`partition::closure_neighbours`, `partition::coverage_probes`) and published with coverage
//! on the held-out anchors, then, for each ε and byte budget, the plan `plan::plan` picks from
//! that document — its predicted fidelity against the exact expected fidelity@8 over the
//! k-subset mechanism on held-out queries (`data::reserved_train`, never in the gallery). Block
//! files are encoded (their sizes and gzip sizes are the document's) and dropped as they are
//! made, so a million-image gallery needs no disk.

use std::fmt::Write as _;
use std::time::Instant;

use embed::model::Model;
use publish::partition::{
    build_level, max_closure, nearest_centroid, nearest_k_many, LevelSpec, Overlap,
};
use publish::plan::{plan, validate_doc};
use publish::publish::{
    default_specs, document, publish_level_to, publish_whole, BlockFiles, GalleryView, Thumbnails,
    COVERAGE_K, DEFAULT_CLOSURE,
};
use rayon::prelude::*;

use data::assets::{MODEL_WEIGHTS, QUERY_WEIGHTS};
use data::fashion::{balanced_anchors, demo_gallery, load_split, reserved_train};
use publish::partition::{closure_neighbours, coverage_probes};
use publish::publish::{DEFAULT_MAX_SHARE, WHOLE_MAX_ITEMS};

use super::level::{evaluate_level, Coef};
use super::setup::{exact_top, infer, infer_rows, search_rows, Res, K, THUMB};
use crate::args::Args;

/// ε of the served table.
const EPS: [f64; 5] = [8.0, 6.0, 4.0, 2.0, 1.0];
/// Byte budgets: the page's choices.
const BUDGETS_KIB: [u32; 8] = [128, 256, 512, 1024, 2048, 4096, 8192, 16384];

/// One (ε, budget) plan on one gallery.
struct Row {
    eps: f64,
    budget_kib: u32,
    /// `None`: no plan fits the budget.
    plan: Option<Served>,
}

struct Served {
    blocks: u32,
    size: u32,
    whole: bool,
    spent: f64,
    inclusion: f64,
    predicted: f64,
    measured: f64,
    kib: f64,
}

struct GalleryServed {
    n: usize,
    levels: Vec<u32>,
    overlap: String,
    coverage_probes: usize,
    doc_bytes: usize,
    secs: f64,
    rows: Vec<Row>,
}

pub(crate) fn run(args: &Args) -> Res<()> {
    let t0 = Instant::now();
    let log = |m: &str| eprintln!("[served {:>7.1} s] {m}", t0.elapsed().as_secs_f64());
    let test = load_split(&args.data_dir, "t10k")?;
    let train = load_split(&args.data_dir, "train")?;
    let model = Model::from_bytes(MODEL_WEIGHTS)?;
    let anchor_idx = balanced_anchors(&train, args.anchors);
    let query_idx: Vec<usize> = reserved_train(train.labels.len(), &anchor_idx)
        .into_iter()
        .take(args.blocks_queries)
        .collect();
    if query_idx.is_empty() {
        return Err("no held-out queries".into());
    }
    let a_features = infer(&model, &train, &anchor_idx)?;
    // The queries are photos a client embeds: the query model's features.
    let q_features = search_rows(&Model::from_bytes(QUERY_WEIGHTS)?, &train, &query_idx)?;
    let dim = q_features.len() / query_idx.len();
    let mut out = Vec::new();
    for &n in &args.blocks_served {
        log(&format!(
            "gallery {n}: images and model features ({} held-out queries)",
            query_idx.len()
        ));
        let demo = demo_gallery(&test, &train, &anchor_idx, n);
        let ids: Vec<u64> = demo.iter().map(|d| d.id).collect();
        let labels: Vec<u8> = demo.iter().map(|d| d.label).collect();
        let thumbs: Vec<u8> = demo.iter().flat_map(|d| d.pixels.iter().copied()).collect();
        drop(demo);
        let features = infer_rows(&model, &thumbs)?;
        let g = GalleryView {
            ids: &ids,
            labels: &labels,
            features: &features,
            dim,
            thumbnails: Thumbnails::Packed(&thumbs),
            thumb_side: THUMB,
        };
        for specs in study_specs(args, n) {
            let t = Instant::now();
            out.push(served_gallery(
                &g,
                &specs,
                &a_features,
                &q_features,
                args.seed,
                &log,
            )?);
            out.last_mut().expect("pushed").secs = t.elapsed().as_secs_f64();
        }
    }
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(args.out.join("blocks-served.csv"), csv(&out))?;
    let md = report(&out, query_idx.len(), t0.elapsed().as_secs_f64());
    print!("{md}");
    std::fs::write(args.out.join("blocks-served.md"), md)?;
    log(&format!(
        "wrote {0}/blocks-served.md and {0}/blocks-served.csv",
        args.out.display()
    ));
    Ok(())
}

/// The level sets to evaluate on a gallery of `n`: the server's defaults, or for a study the
/// levels and closure sizes asked for (one set per closure size).
fn study_specs(args: &Args, n: usize) -> Vec<Vec<LevelSpec>> {
    let defaults = default_specs(n);
    let bs: Vec<u32> = if args.blocks_served_levels.is_empty() {
        defaults.iter().map(|s| s.blocks).collect()
    } else {
        args.blocks_served_levels.clone()
    };
    let ms: Vec<Overlap> = if args.blocks_served_closure.is_empty() {
        vec![defaults
            .first()
            .map_or(Overlap::Closure(DEFAULT_CLOSURE), |s| s.overlap)]
    } else {
        args.blocks_served_closure
            .iter()
            .map(|&m| Overlap::Closure(m))
            .collect()
    };
    ms.into_iter()
        .map(|overlap| {
            bs.iter()
                .map(|&blocks| LevelSpec { blocks, overlap })
                .collect()
        })
        .collect()
}

/// Build and publish `g`'s levels (`specs`) as the server does, then evaluate every offered plan.
fn served_gallery(
    g: &GalleryView<'_>,
    specs: &[LevelSpec],
    anchors: &[f32],
    queries: &[f32],
    seed: u64,
    log: &dyn Fn(&str),
) -> Res<GalleryServed> {
    let (n, dim) = (g.len(), g.dim);
    let nq = queries.len() / dim;
    let (probes, n_probes) = coverage_probes(g.features, dim, anchors);
    let probe_truth = nearest_k_many(g.features, dim, &probes, COVERAGE_K);
    let near: Vec<Vec<u32>> = queries
        .par_chunks(dim)
        .map(|q| exact_top(g.features, dim, q, K))
        .collect();
    let truth: Vec<&[u32]> = near.iter().map(Vec::as_slice).collect();
    let m = max_closure(specs.iter().map(|s| s.overlap)).min(n - 1);
    log(&format!(
        "gallery {n}: {m} nearest items of each (closure), {n_probes} held-out probes"
    ));
    let neighbours = if m > 0 {
        Some(closure_neighbours(g.features, dim, m, seed)?.0)
    } else {
        None
    };
    let whole = n <= WHOLE_MAX_ITEMS;
    let mut docs = Vec::new();
    let mut coefs: Vec<Vec<Coef>> = Vec::new();
    if whole {
        docs.push(publish_whole(g)?.doc);
        coefs.push(Vec::new());
    }
    for spec in specs {
        let t = Instant::now();
        let level = build_level(g.features, dim, *spec, seed, neighbours.as_deref())?;
        let mut drop_files = |_: BlockFiles| Ok(());
        let p = publish_level_to(g, &level, &probes, &probe_truth, Some(&mut drop_files))?;
        let true_block: Vec<u32> = queries
            .par_chunks(dim)
            .map(|q| nearest_centroid(&level.centroids, dim, q))
            .collect();
        let e = evaluate_level(
            *spec,
            level.members,
            p.doc.clone(),
            n,
            nq,
            &true_block,
            &truth,
        );
        coefs.push(e.coef);
        log(&format!(
            "gallery {n}: level B = {} ({:.0} MiB on the wire) in {:.1} s",
            spec.blocks,
            p.doc.transfer_bytes.iter().sum::<u64>() as f64 / 1048576.0,
            t.elapsed().as_secs_f64()
        ));
        docs.push(p.doc);
    }
    let max_share = DEFAULT_MAX_SHARE;
    let doc = document(docs, g, String::new(), max_share, whole, n_probes);
    validate_doc(&doc)?;
    let doc_bytes = serde_json::to_vec(&doc)?.len();
    let mut rows = Vec::new();
    for &eps in &EPS {
        for &kib in &BUDGETS_KIB {
            let plan = plan(&doc, eps, kib as f64 * 1024.0).ok().map(|p| {
                let measured = if p.whole {
                    1.0
                } else {
                    let c = coefs[p.level][p.size as usize - 1];
                    p.inclusion * c.f_in + (1.0 - p.inclusion) * c.f_out
                };
                Served {
                    blocks: p.blocks,
                    size: p.size,
                    whole: p.whole,
                    spent: p.epsilon,
                    inclusion: p.inclusion,
                    predicted: p.predicted_fidelity,
                    measured,
                    kib: p.expected_bytes / 1024.0,
                }
            });
            rows.push(Row {
                eps,
                budget_kib: kib,
                plan,
            });
        }
    }
    Ok(GalleryServed {
        n,
        levels: specs.iter().map(|s| s.blocks).collect(),
        overlap: specs.first().map_or(String::new(), |s| s.overlap.name()),
        coverage_probes: n_probes,
        doc_bytes,
        secs: 0.0,
        rows,
    })
}

fn csv(out: &[GalleryServed]) -> String {
    let mut s = String::from(
        "gallery,epsilon,budget_kib,blocks,released,whole,epsilon_spent,inclusion,predicted_fidelity_at_8,fidelity_at_8,kib_per_search\n",
    );
    for g in out {
        for r in &g.rows {
            match &r.plan {
                Some(p) => writeln!(
                    s,
                    "{},{},{},{},{},{},{},{:.4},{:.4},{:.4},{:.1}",
                    g.n,
                    r.eps,
                    r.budget_kib,
                    p.blocks,
                    p.size,
                    p.whole,
                    p.spent,
                    p.inclusion,
                    p.predicted,
                    p.measured,
                    p.kib
                ),
                None => writeln!(s, "{},{},{},,,,,,,,", g.n, r.eps, r.budget_kib),
            }
            .expect("writing to a String");
        }
    }
    s
}

fn report(out: &[GalleryServed], nq: usize, secs: f64) -> String {
    let mut o = String::new();
    let w = &mut o;
    let _ = writeln!(w, "# Block retrieval as served — predicted against measured (generated by `eval --blocks-served`)\n");
    let _ = writeln!(w, "For each gallery: the server's demo gallery (`data::fashion::demo_gallery`: the public anchors and the reserved training images stay out), its default levels (closure-24, `publish::publish::default_specs`) built and published as the server builds them, coverage measured on the held-out anchors. For each ε and byte budget, the plan a client gets (`plan::plan` on that document): its predicted fidelity@8 and the exact expected fidelity@8 over the k-subset mechanism on {nq} held-out queries (training images no gallery holds). KiB: the plan's expected bytes on the wire. Total {secs:.0} s.\n");
    for g in out {
        let _ = writeln!(
            w,
            "## Gallery {}\n\nLevels B = {:?} ({}); coverage on {} held-out probes; document {:.2} MB (JSON); built and measured in {:.0} s.\n",
            g.n,
            g.levels,
            g.overlap,
            g.coverage_probes,
            g.doc_bytes as f64 / 1e6,
            g.secs
        );
        let _ = writeln!(w, "| ε | budget | plan | KiB | own block released | predicted | measured | pred. − meas. |");
        let _ = writeln!(w, "|---|---|---|---|---|---|---|---|");
        let mut diffs = Vec::new();
        for r in &g.rows {
            let budget = if r.budget_kib >= 1024 {
                format!("{} MiB", r.budget_kib / 1024)
            } else {
                format!("{} KiB", r.budget_kib)
            };
            match &r.plan {
                None => {
                    let _ = writeln!(w, "| {} | {budget} | none fits | | | | | |", r.eps);
                }
                Some(p) => {
                    let what = if p.whole {
                        "whole gallery, ε = 0".to_string()
                    } else if p.spent == 0.0 {
                        format!("all {} blocks, ε = 0", p.blocks)
                    } else {
                        format!("{} of {} blocks", p.size, p.blocks)
                    };
                    let d = p.predicted - p.measured;
                    if !p.whole && p.spent > 0.0 {
                        diffs.push((r.eps, d));
                    }
                    let _ = writeln!(
                        w,
                        "| {} | {budget} | {what} | {:.0} | {:.3} | {:.4} | {:.4} | {:+.4} |",
                        r.eps, p.kib, p.inclusion, p.predicted, p.measured, d
                    );
                }
            }
        }
        if !diffs.is_empty() {
            let mean = diffs.iter().map(|d| d.1).sum::<f64>() / diffs.len() as f64;
            let abs = diffs.iter().map(|d| d.1.abs()).sum::<f64>() / diffs.len() as f64;
            let max = diffs.iter().map(|d| d.1.abs()).fold(0.0, f64::max);
            let _ = writeln!(
                w,
                "\nPredicted minus measured over the {} plans that release blocks: mean {mean:+.4}, mean absolute {abs:.4}, largest absolute {max:.4}.\n",
                diffs.len()
            );
        } else {
            let _ = writeln!(w);
        }
    }
    o
}
