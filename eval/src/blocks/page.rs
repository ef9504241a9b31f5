//! The page a client gets from a released pool, and its metrics: Monte Carlo with the real
//! release, and the quantised check over encoded and decoded block files.

use dp::subset::release;
use paper::metrics::{average_precision, recall_at_k};
use publish::blocks::{decode, encode, rank, BlockItem};
use publish::topk::TopK;
use rand_chacha::ChaCha20Rng;
use rayon::prelude::*;

use super::level::LevelEval;
use super::result::Point;
use super::setup::{sq_dist, Ctx, Gallery, Res, K, THUMB};
use crate::rng::query_rng;

/// Queries re-ranked over decoded block files per chosen point.
pub(super) const QUANT_QUERIES: usize = 100;

/// The top 8 of the pool in the exact ranking: walk the query's precomputed ranking, then —
/// if the pool holds fewer than 8 of those — rank the pool's items (`pool_items`, duplicates
/// allowed) by exact distance.
pub(super) fn page(
    g: &Gallery,
    near: &[u32],
    query: &[f32],
    in_pool: impl Fn(usize) -> bool,
    pool_items: impl FnOnce() -> Vec<u32>,
) -> Vec<u32> {
    let mut out = Vec::with_capacity(K);
    for &i in near {
        if in_pool(i as usize) {
            out.push(i);
            if out.len() == K {
                return out;
            }
        }
    }
    if near.len() == g.n() {
        return out;
    }
    let mut items = pool_items();
    items.sort_unstable();
    items.dedup();
    let mut top = TopK::new(K);
    for i in items {
        top.push(sq_dist(g.row(i as usize), query), i);
    }
    top.into_ids()
}

/// [fidelity, Recall@8, mAP@8] of a page. mAP@8: precision at each relevant place of the
/// first 8, summed, over min(8, relevant items in the gallery).
pub(super) fn page_metrics(
    page: &[u32],
    truth: &[u32],
    labels: &[u8],
    q_label: u8,
    relevant: usize,
) -> [f64; 3] {
    let ls: Vec<u32> = page.iter().map(|&i| labels[i as usize] as u32).collect();
    let fid = truth.iter().filter(|t| page.contains(t)).count() as f64 / truth.len() as f64;
    [
        fid,
        recall_at_k(&ls, q_label as u32, K),
        average_precision(&ls, q_label as u32, relevant.min(K)),
    ]
}

pub(super) fn add3(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}

/// A stable tag for a point's RNG stream.
pub(super) fn tag(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

pub(super) fn point_rng(ctx: &Ctx, q: usize, p: &Point, suffix: &str) -> ChaCha20Rng {
    let t = tag(&format!("{suffix}|{}|{}|{}", p.variant, p.blocks, p.size));
    query_rng(ctx.args.seed, q, t, p.eps)
}

/// The items of the released blocks (with repeats).
pub(super) fn pool_of(lv: &LevelEval, set: &[u32]) -> Vec<u32> {
    set.iter()
        .flat_map(|&s| lv.members[s as usize].iter().copied())
        .collect()
}

/// The real mechanism, `draws` releases per query: mean [fidelity, Recall@8, mAP@8].
#[allow(clippy::too_many_arguments)]
pub(super) fn monte_carlo(
    ctx: &Ctx,
    g: &Gallery,
    lv: &LevelEval,
    p: &Point,
    eps: f64,
    near: &[Vec<u32>],
    class_count: &[usize; 256],
    draws: usize,
    suffix: &str,
) -> Res<[f64; 3]> {
    let nq = ctx.nq();
    let b = lv.spec.blocks;
    let per: Vec<[f64; 3]> = (0..nq)
        .into_par_iter()
        .map(|q| -> Result<[f64; 3], shared::Error> {
            let mut rng = point_rng(ctx, q, p, suffix);
            let x = lv.true_block[q];
            let mut in_set = vec![false; b as usize];
            let mut acc = [0.0; 3];
            let ql = ctx.q_labels[q];
            for _ in 0..draws {
                let set = release(&mut rng, x, b, p.size, eps)?;
                for &s in &set {
                    in_set[s as usize] = true;
                }
                let top = page(
                    g,
                    &near[q],
                    ctx.query(q),
                    |i| lv.blocks_of(i).iter().any(|&bk| in_set[bk as usize]),
                    || pool_of(lv, &set),
                );
                acc = add3(
                    acc,
                    page_metrics(&top, &near[q][..K], &g.labels, ql, class_count[ql as usize]),
                );
                for &s in &set {
                    in_set[s as usize] = false;
                }
            }
            Ok(acc)
        })
        .collect::<Result<_, _>>()?;
    let s = per.iter().fold([0.0; 3], |a, &b| add3(a, b));
    let d = (nq * draws) as f64;
    Ok([s[0] / d, s[1] / d, s[2] / d])
}

/// The client's real path on the first queries (first release of each): encode the released
/// blocks, decode them, `blocks::rank` with the exact query features; compare with the fast
/// path (exact f32 ranking restricted to the pool).
pub(super) fn quantised(
    ctx: &Ctx,
    g: &Gallery,
    lv: &LevelEval,
    p: &Point,
    near: &[Vec<u32>],
    suffix: &str,
) -> Res<(f64, f64, f64, usize)> {
    let nv = QUANT_QUERIES.min(ctx.nq());
    let b = lv.spec.blocks;
    let per: Vec<(bool, f64, f64)> = (0..nv)
        .into_par_iter()
        .map(|q| -> Result<(bool, f64, f64), shared::Error> {
            let mut rng = point_rng(ctx, q, p, suffix);
            let x = lv.true_block[q];
            let set = release(&mut rng, x, b, p.size, p.eps)?;
            let mut in_set = vec![false; b as usize];
            let mut blocks = Vec::with_capacity(set.len());
            for &s in &set {
                in_set[s as usize] = true;
                let items: Vec<BlockItem> = lv.members[s as usize]
                    .iter()
                    .map(|&i| {
                        let i = i as usize;
                        BlockItem {
                            id: g.ids[i],
                            label: g.labels[i],
                            features: g.row(i),
                            thumbnail: &g.thumbs[i * THUMB * THUMB..(i + 1) * THUMB * THUMB],
                        }
                    })
                    .collect();
                blocks.push(decode(&encode(&items, ctx.dim, THUMB)?, None)?);
            }
            let hits = rank(ctx.query(q), &blocks, K)?;
            let slow: Vec<u32> = hits.iter().map(|h| h.id as u32).collect();
            let fast = page(
                g,
                &near[q],
                ctx.query(q),
                |i| lv.blocks_of(i).iter().any(|&bk| in_set[bk as usize]),
                || pool_of(lv, &set),
            );
            let tr = &near[q][..K];
            let fid = |v: &[u32]| tr.iter().filter(|t| v.contains(t)).count() as f64 / K as f64;
            Ok((slow == fast, fid(&slow), fid(&fast)))
        })
        .collect::<Result<_, _>>()?;
    let m = per.len() as f64;
    Ok((
        per.iter().filter(|r| r.0).count() as f64 / m,
        per.iter().map(|r| r.1).sum::<f64>() / m,
        per.iter().map(|r| r.2).sum::<f64>() / m,
        per.len(),
    ))
}
