//! Pools from the Gaussian anchor-frame release, for comparison with the blocks.

use paper::frame::{privatize_in_frame, AnchorFrame, DEFAULT_KERNEL_SCALE};
use paper::retrieve::{full_ranking, gallery_rows, posterior_ranking, LabelledRows};
use rayon::prelude::*;
use shared::{DMatrix, Params, PrivacyParams};

use super::page::{add3, page, page_metrics};
use super::result::FramePoint;
use super::setup::{Ctx, Gallery, Res, K};
use crate::rng::query_rng;

/// Pool fractions of the frame-release pools.
pub(super) const FRAME_FRACTIONS: [f64; 5] = [0.05, 0.12, 0.3, 0.55, 0.83];

/// Pools from the Gaussian anchor-frame release at the same ε (δ from `--delta`, the eval's
/// mechanism): the first `fraction·N` gallery items by distance to the released row, or by the
/// class-posterior ranking; the client then ranks the pool exactly.
pub(super) fn frame_pools(
    ctx: &Ctx,
    g: &Gallery,
    eps_list: &[f64],
    near: &[Vec<u32>],
    class_count: &[usize; 256],
    whole_kib: f64,
) -> Res<Vec<FramePoint>> {
    let (n, dim, nq) = (g.n(), ctx.dim, ctx.nq());
    let args = ctx.args;
    ctx.log(format!("gallery {n}: frame-release pools"));
    let anchors = DMatrix::from_fn(ctx.a_labels.len(), dim, |i, j| {
        ctx.a_features[i * dim + j] as f64
    });
    let frame = AnchorFrame::class_simplex(&anchors, &ctx.a_labels, 10, DEFAULT_KERNEL_SCALE)?;
    let gm = DMatrix::from_fn(n, dim, |i, j| g.features[i * dim + j] as f64);
    let placed = gallery_rows(&frame.place(&gm)?);
    drop(gm);
    let flat = placed.concat();
    let labels: Vec<u32> = g.labels.iter().map(|&l| l as u32).collect();
    let labelled = LabelledRows {
        flat: &flat,
        labels: &labels,
        num_classes: 10,
    };
    let mut base: PrivacyParams = Params::default().privacy;
    base.delta = args.delta;
    base.mechanism = args.mechanism;
    let draws = args.blocks_frame_draws.max(1);
    let cuts: Vec<usize> = FRAME_FRACTIONS
        .iter()
        .map(|f| ((f * n as f64).round() as usize).clamp(1, n))
        .collect();
    let rankings = ["nearest", "posterior"];
    let mut out = Vec::new();
    for &eps in eps_list {
        let p = PrivacyParams {
            epsilon: eps,
            ..base
        };
        let per: Vec<Vec<[f64; 3]>> = (0..nq)
            .into_par_iter()
            .map(|q| -> Result<Vec<[f64; 3]>, shared::Error> {
                let feats: Vec<f64> = ctx.query(q).iter().map(|&v| v as f64).collect();
                let ql = ctx.q_labels[q];
                let mut acc = vec![[0.0; 3]; rankings.len() * cuts.len()];
                let mut pos = vec![u32::MAX; n];
                for d in 0..draws {
                    let mut rng = query_rng(args.seed, q, 0xf4a3e + d as u64, eps);
                    let r = privatize_in_frame(&feats, &frame, 9, &p, &mut rng)?;
                    let row: Vec<f64> = r.rows.row(r.real_position()).iter().copied().collect();
                    let sigma = r.receipt.noise_scale;
                    for (ri, _) in rankings.iter().enumerate() {
                        let ranking = if ri == 0 {
                            full_ranking(&placed, &row, None)
                        } else {
                            posterior_ranking(&labelled, &row, sigma, usize::MAX, None)
                        };
                        for (r, &i) in ranking.iter().enumerate() {
                            pos[i] = r as u32;
                        }
                        for (ci, &cut) in cuts.iter().enumerate() {
                            let top = page(
                                g,
                                &near[q],
                                ctx.query(q),
                                |i| (pos[i] as usize) < cut,
                                || ranking[..cut].iter().map(|&i| i as u32).collect(),
                            );
                            let m = page_metrics(
                                &top,
                                &near[q][..K],
                                &g.labels,
                                ql,
                                class_count[ql as usize],
                            );
                            // Fidelity: the share of the truth in the pool (the page ranks it exactly).
                            let idx = ri * cuts.len() + ci;
                            acc[idx] = add3(acc[idx], m);
                        }
                    }
                }
                Ok(acc)
            })
            .collect::<Result<_, _>>()?;
        for (ri, name) in rankings.iter().enumerate() {
            for (ci, &f) in FRAME_FRACTIONS.iter().enumerate() {
                let idx = ri * cuts.len() + ci;
                let s = per.iter().fold([0.0; 3], |a, v| add3(a, v[idx]));
                let d = (nq * draws) as f64;
                out.push(FramePoint {
                    eps,
                    ranking: name,
                    fraction: cuts[ci] as f64 / n as f64,
                    m: [s[0] / d, s[1] / d, s[2] / d],
                    kib: f * whole_kib,
                });
            }
        }
    }
    Ok(out)
}
