//! One gallery's sweep: every level (B, variant) built, published and evaluated exactly at every
//! ε and L, the Pareto points simulated, the frame pools and the download-everything point.

use std::collections::{HashMap, HashSet};

use dp::subset::inclusion_probability;
use publish::blocks::{decode, rank};
use publish::partition::{
    build_level, fill_small_blocks, kmeans_centroids, max_closure, nearest_centroid,
    nearest_centroids_exact, nearest_k, Level, LevelSpec, Overlap,
};
use publish::partition::{closure_neighbours, coverage_probes};
use publish::plan::candidates;
use publish::publish::{default_specs, document, publish_level, publish_whole};
use rayon::prelude::*;

use super::frame::frame_pools;
use super::level::{evaluate_level, LevelEval};
use super::page::{add3, monte_carlo, page_metrics, quantised};
use super::reference::TARGETS;
use super::result::{GalleryResult, Point};
use super::select::{least_reaching, pareto_front, thin};
use super::setup::{exact_top, Ctx, Gallery, Res, K, SMALL};

/// Length of each query's precomputed exact ranking (the pool's top 8 are found by walking it;
/// a full scan of the pool when it holds fewer than 8 of them).
pub(super) const NEAR_M: usize = 1024;

pub(super) fn eval_gallery(
    ctx: &Ctx,
    g: &Gallery,
    eps_list: &[f64],
    variants: &[Overlap],
    suffix: &str,
) -> Res<GalleryResult> {
    let (n, dim, nq) = (g.n(), ctx.dim, ctx.nq());
    // The sweep shares one k-means per block count; capped levels split cells and have their
    // own (partbench measures them).
    if let Some(v) = variants
        .iter()
        .find(|v| matches!(v, Overlap::Capped { .. }))
    {
        return Err(format!("the sweep does not evaluate {}", v.name()).into());
    }
    let args = ctx.args;
    let seed = args.seed;
    ctx.log(format!(
        "gallery {n}: exact rankings of {nq} queries and truth of {} anchors",
        ctx.a_labels.len()
    ));
    let near: Vec<Vec<u32>> = (0..nq)
        .into_par_iter()
        .map(|q| exact_top(&g.features, dim, ctx.query(q), NEAR_M))
        .collect();
    let truth: Vec<&[u32]> = near.iter().map(|r| &r[..K]).collect();
    // Coverage probes as the server picks them.
    let (probe_features, coverage_probes) = coverage_probes(&g.features, dim, &ctx.a_features);
    let anchor_truth: Vec<Vec<u32>> = probe_features
        .par_chunks(dim)
        .map(|a| nearest_k(&g.features, dim, a, K))
        .collect();
    let mut class_count = [0usize; 256];
    for &l in &g.labels {
        class_count[l as usize] += 1;
    }

    // Neighbours for closure.
    let neighbours: Option<Vec<Vec<u32>>> = match max_closure(variants.iter().copied()) {
        0 => None,
        m => {
            ctx.log(format!(
                "gallery {n}: {m} nearest gallery items of every item"
            ));
            let (nb, exact) = closure_neighbours(&g.features, dim, m, seed)?;
            ctx.log(format!(
                "gallery {n}: neighbours {}",
                if exact { "exact" } else { "by inverted file" }
            ));
            Some(nb)
        }
    };

    // One k-means per B, shared by the variants (build_level would recompute it per variant),
    // with build_level's quantised centroids and exact homes.
    let bs: Vec<u32> = args
        .blocks_levels
        .iter()
        .copied()
        .filter(|&b| b >= 2 && (b as usize) <= n)
        .collect();
    ctx.log(format!("gallery {n}: k-means at B = {bs:?}"));
    let km: Vec<(Vec<f32>, Vec<u32>)> = bs
        .par_iter()
        .map(|&b| -> Result<_, shared::Error> {
            let raw = kmeans_centroids(&g.features, dim, b as usize, seed)?;
            let c = publish::centroids::quantised(&raw, dim)?;
            let home = nearest_centroids_exact(&g.features, &c, dim);
            Ok((c, home))
        })
        .collect::<Result<_, _>>()?;
    let true_block: Vec<Vec<u32>> = km
        .iter()
        .map(|(c, _)| {
            (0..nq)
                .into_par_iter()
                .map(|q| nearest_centroid(c, dim, ctx.query(q)))
                .collect()
        })
        .collect();
    let r_max = variants
        .iter()
        .filter_map(|v| match v {
            Overlap::Spill(r) => Some(*r as usize),
            _ => None,
        })
        .max();
    let spill: Vec<Vec<Vec<u32>>> = match r_max {
        Some(r) => km
            .iter()
            .map(|(c, _)| {
                (0..n)
                    .into_par_iter()
                    .map(|i| nearest_k(c, dim, g.row(i), r))
                    .collect()
            })
            .collect(),
        None => vec![],
    };
    let members_of = |bi: usize, overlap: Overlap| -> Vec<Vec<u32>> {
        let b = bs[bi] as usize;
        let home = &km[bi].1;
        let mut members: Vec<Vec<u32>> = vec![Vec::new(); b];
        for i in 0..n {
            match overlap {
                Overlap::None => members[home[i] as usize].push(i as u32),
                Overlap::Spill(r) => {
                    for &c in &spill[bi][i][..r as usize] {
                        members[c as usize].push(i as u32);
                    }
                }
                Overlap::Closure(m) => {
                    let nb = &neighbours.as_ref().expect("closure neighbours")[i];
                    let block = &mut members[home[i] as usize];
                    block.push(i as u32);
                    block.extend_from_slice(&nb[..(m as usize).min(nb.len())]);
                }
                Overlap::Capped { .. } => unreachable!("refused on entry"),
            }
        }
        for block in &mut members {
            block.sort_unstable();
            block.dedup();
        }
        // As `partition::build_level` does: closure blocks hold at least MIN_BLOCK_ITEMS.
        if matches!(overlap, Overlap::Closure(_)) {
            fill_small_blocks(&g.features, dim, &km[bi].0, home, &mut members);
        }
        members
    };
    // Check the shared k-means + membership against partition::build_level on one level.
    if n <= SMALL {
        let bi = bs.len() / 2;
        for v in [
            variants.iter().find(|v| matches!(v, Overlap::Spill(_))),
            variants.iter().find(|v| matches!(v, Overlap::Closure(_))),
        ]
        .into_iter()
        .flatten()
        {
            let spec = LevelSpec {
                blocks: bs[bi],
                overlap: *v,
            };
            let lv = build_level(&g.features, dim, spec, seed, neighbours.as_deref())?;
            if lv.members != members_of(bi, *v) || lv.centroids != km[bi].0 {
                return Err(format!("level {spec:?} differs from partition::build_level").into());
            }
            ctx.log(format!(
                "B = {} {}: identical to partition::build_level",
                spec.blocks,
                v.name()
            ));
        }
    }

    // Publish every level and compute its exact coefficients.
    let view = g.view();
    let jobs: Vec<(usize, Overlap)> = variants
        .iter()
        .flat_map(|&v| (0..bs.len()).map(move |bi| (bi, v)))
        .collect();
    ctx.log(format!(
        "gallery {n}: publishing {} levels (block files, gzip, coverage on anchors) and exact expectations",
        jobs.len()
    ));
    let levels: Vec<LevelEval> = jobs
        .into_par_iter()
        .map(|(bi, overlap)| -> Result<LevelEval, shared::Error> {
            let b = bs[bi] as usize;
            let spec = LevelSpec {
                blocks: b as u32,
                overlap,
            };
            let members = members_of(bi, overlap);
            let level = Level {
                spec,
                centroids: km[bi].0.clone(),
                home: km[bi].1.clone(),
                members,
            };
            let published = publish_level(&view, &level, &probe_features, &anchor_truth)?;
            let doc = published.doc;
            let members = level.members;
            Ok(evaluate_level(
                spec,
                members,
                doc,
                n,
                nq,
                &true_block[bi],
                &truth,
            ))
        })
        .collect::<Result<_, _>>()?;
    drop(spill);

    // The whole gallery (download everything), published as the server would.
    ctx.log(format!(
        "gallery {n}: whole-gallery block and its quantised ranking"
    ));
    let whole = publish_whole(&view)?;
    let whole_doc = whole.doc.clone();
    let whole_kib = whole.gzipped[0].len() as f64 / 1024.0;
    let whole_block = decode(&whole.files[0], Some(&whole_doc.hashes[0]))?;
    drop(whole);
    let whole_m: [f64; 3] = {
        let per: Vec<[f64; 3]> = (0..nq)
            .into_par_iter()
            .map(|q| -> Result<[f64; 3], shared::Error> {
                let hits = rank(ctx.query(q), std::slice::from_ref(&whole_block), K)?;
                let ids: Vec<u32> = hits.iter().map(|h| h.id as u32).collect();
                let ql = ctx.q_labels[q];
                Ok(page_metrics(
                    &ids,
                    truth[q],
                    &g.labels,
                    ql,
                    class_count[ql as usize],
                ))
            })
            .collect::<Result<_, _>>()?;
        let s = per.iter().fold([0.0; 3], |a, &b| add3(a, b));
        [s[0] / nq as f64, s[1] / nq as f64, s[2] / nq as f64]
    };
    drop(whole_block);

    // Predicted fidelity: one partition document per variant, as a server publishing that
    // variant would serve it (whole gallery + its levels), planned by plan::candidates.
    let variant_names: Vec<String> = variants.iter().map(Overlap::name).collect();
    let mut predicted: HashMap<(String, u32, u32, u64), f64> = HashMap::new();
    for (vi, v) in variants.iter().enumerate() {
        let mut docs = vec![whole_doc.clone()];
        docs.extend(
            levels
                .iter()
                .filter(|l| l.spec.overlap == *v)
                .map(|l| l.doc.clone()),
        );
        let doc = document(
            docs,
            &view,
            "/api/v1/blocks".into(),
            1.0,
            true,
            coverage_probes,
        );
        for &eps in eps_list {
            for p in candidates(&doc, eps)? {
                if !p.whole {
                    predicted.insert(
                        (variant_names[vi].clone(), p.blocks, p.size, eps.to_bits()),
                        p.predicted_fidelity,
                    );
                }
            }
        }
    }

    // Every (level, L) at every ε.
    let points_at = |eps: f64| -> Vec<Point> {
        let mut out = Vec::new();
        for (li, lv) in levels.iter().enumerate() {
            let b = lv.spec.blocks;
            let name = lv.spec.overlap.name();
            for (l0, c) in lv.coef.iter().enumerate() {
                let l = l0 as u32 + 1;
                let p = inclusion_probability(b, l, eps);
                out.push(Point {
                    eps,
                    level: li,
                    variant: name.clone(),
                    blocks: b,
                    size: l,
                    pool: p * c.a_in + (1.0 - p) * c.a_out,
                    fidelity: p * c.f_in + (1.0 - p) * c.f_out,
                    miss: 1.0 - p,
                    kib: (p * c.b_in + (1.0 - p) * c.b_out) / 1024.0,
                    predicted: predicted
                        .get(&(name.clone(), b, l, eps.to_bits()))
                        .copied()
                        .unwrap_or(f64::NAN),
                    mc: None,
                    quant: None,
                });
            }
        }
        out
    };
    let mut pareto: Vec<(f64, Vec<Point>)> = Vec::new();
    let mut variant_pareto: Vec<(String, f64, Vec<Point>)> = Vec::new();
    let mut least: Vec<(f64, f64, Option<Point>)> = Vec::new();
    let mut variant_least: Vec<(String, f64, f64, Option<Point>)> = Vec::new();
    let defaults = default_specs(n);
    let default_name = format!(
        "{} at B = {:?}",
        defaults
            .iter()
            .map(|s| s.overlap.name())
            .collect::<HashSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join("+"),
        defaults.iter().map(|s| s.blocks).collect::<Vec<_>>()
    );
    let mut default_least: Vec<(f64, f64, Option<Point>)> = Vec::new();
    for &eps in eps_list {
        let all = points_at(eps);
        let front = pareto_front(all.clone());
        let mut chosen: Vec<Point> = Vec::new();
        for &t in &TARGETS {
            let p = least_reaching(&front, t);
            least.push((eps, t, p.clone()));
            chosen.extend(p);
        }
        pareto.push((eps, thin(front, &chosen)));
        let in_defaults: Vec<Point> = all
            .iter()
            .filter(|p| defaults.contains(&levels[p.level].spec))
            .cloned()
            .collect();
        if !in_defaults.is_empty() {
            for &t in &TARGETS {
                default_least.push((eps, t, least_reaching(&in_defaults, t)));
            }
        }
        for v in &variant_names {
            let mine: Vec<Point> = all.iter().filter(|p| &p.variant == v).cloned().collect();
            let mut vchosen = Vec::new();
            for &t in &TARGETS {
                let p = least_reaching(&mine, t);
                variant_least.push((v.clone(), eps, t, p.clone()));
                vchosen.extend(p);
            }
            variant_pareto.push((v.clone(), eps, thin(pareto_front(mine), &vchosen)));
        }
    }

    // Monte Carlo (Recall@8, mAP@8, and fidelity as a check) on the (thinned) Pareto points.
    let draws = args.blocks_draws.max(1);
    let total_points: usize = pareto.iter().map(|(_, v)| v.len()).sum();
    ctx.log(format!(
        "gallery {n}: Monte Carlo on {total_points} Pareto points × {nq} queries × {draws} releases"
    ));
    let mut mc_searches = 0;
    for (eps, pts) in pareto.iter_mut() {
        for p in pts.iter_mut() {
            p.mc = Some(monte_carlo(
                ctx,
                g,
                &levels[p.level],
                p,
                *eps,
                &near,
                &class_count,
                draws,
                suffix,
            )?);
            mc_searches += nq * draws;
        }
    }
    for (eps, _, p) in least.iter_mut() {
        if let Some(p) = p {
            p.mc = pareto
                .iter()
                .find(|(e, _)| e == eps)
                .and_then(|(_, pts)| pts.iter().find(|q| q.level == p.level && q.size == p.size))
                .and_then(|q| q.mc);
        }
    }
    // Quantised check on the chosen points.
    ctx.log(format!(
        "gallery {n}: quantised ranking over decoded block files on the chosen points"
    ));
    for (_, _, p) in least.iter_mut() {
        if let Some(p) = p {
            p.quant = Some(quantised(ctx, g, &levels[p.level], p, &near, suffix)?);
        }
    }

    // Frame-release pools.
    let frame = frame_pools(ctx, g, eps_list, &near, &class_count, whole_kib)?;

    let own = levels
        .iter()
        .map(|lv| {
            (
                lv.spec.overlap.name(),
                lv.spec.blocks,
                lv.coef[0].f_in,
                lv.coef[0].a_in,
                lv.doc.coverage.own,
            )
        })
        .collect();
    ctx.log(format!("gallery {n}: done"));
    Ok(GalleryResult {
        n,
        suffix: suffix.to_string(),
        eps: eps_list.to_vec(),
        variants: variant_names,
        pareto,
        variant_pareto,
        least,
        variant_least,
        frame,
        whole: (whole_kib, whole_m),
        own,
        mc_searches,
        default_least,
        default_name,
        anchors_in_gallery: 0,
    })
}
