//! Choosing among the points: Pareto fronts, their thinning, the least pool reaching a target,
//! the variants' ranking and the recommended levels.

use super::reference::{ISSUE_TARGETS, TARGETS};
use super::result::{GalleryResult, Point};

/// Variants by the geometric mean, over the (ε, target) cells, of their least pool reaching
/// the target (best first).
pub fn rank_variants(r: &GalleryResult) -> Vec<(String, f64)> {
    let cells = (r.eps.len() * TARGETS.len()).max(1);
    let mut ranking: Vec<(String, f64)> = r
        .variants
        .iter()
        .map(|v| {
            let logsum: f64 = r
                .variant_least
                .iter()
                .filter(|x| &x.0 == v)
                .map(|x| x.3.as_ref().map_or(0.0, |p| p.pool.ln()))
                .sum();
            (v.clone(), (logsum / cells as f64).exp())
        })
        .collect();
    ranking.sort_by(|a, b| a.1.total_cmp(&b.1));
    ranking
}

/// How many of the issue's targets a variant meets on its own (of those whose ε was run).
pub(super) fn targets_met(r: &GalleryResult, v: &str) -> (usize, usize) {
    let mut met = (0, 0);
    for (eps, t, max) in ISSUE_TARGETS {
        if let Some(x) = r
            .variant_least
            .iter()
            .find(|x| x.0 == v && x.1 == eps && x.2 == t)
        {
            met.1 += 1;
            met.0 += usize::from(x.3.as_ref().is_some_and(|p| p.pool <= max));
        }
    }
    met
}

/// The recommended levels: the variant meeting most of the issue's targets on the first
/// gallery (ties: smallest geometric-mean least pool), with every B its least-pool points use
/// on any gallery.
pub fn recommend(results: &[&GalleryResult]) -> Option<(String, Vec<u32>)> {
    let r = results.first()?;
    let ranked = rank_variants(r);
    let best = ranked
        .iter()
        .enumerate()
        .max_by(|(i, a), (j, b)| {
            targets_met(r, &a.0)
                .0
                .cmp(&targets_met(r, &b.0).0)
                .then(j.cmp(i))
        })?
        .1
         .0
        .clone();
    let mut bs: Vec<u32> = results
        .iter()
        .flat_map(|g| g.variant_least.iter())
        .filter(|x| x.0 == best)
        .filter_map(|x| x.3.as_ref().map(|p| p.blocks))
        .collect();
    bs.sort_unstable();
    bs.dedup();
    Some((best, bs))
}

/// Points not dominated in (pool ↓, fidelity ↑), by pool.
pub(super) fn pareto_front(mut pts: Vec<Point>) -> Vec<Point> {
    pts.sort_by(|a, b| {
        a.pool
            .total_cmp(&b.pool)
            .then(b.fidelity.total_cmp(&a.fidelity))
    });
    let mut out: Vec<Point> = Vec::new();
    for p in pts {
        if out.last().is_none_or(|q| p.fidelity > q.fidelity + 1e-12) {
            out.push(p);
        }
    }
    out
}

/// Fidelity step below which a Pareto point is not listed (nor simulated): the front of all
/// (level, L) has hundreds of points within 10⁻⁶ of each other near fidelity 1.
pub const THIN_STEP: f64 = 0.005;

/// The front thinned to fidelity steps of at least [`THIN_STEP`] (the cheapest point of each
/// step), with the `keep` points (the least pools reaching the targets) always listed.
pub(super) fn thin(front: Vec<Point>, keep: &[Point]) -> Vec<Point> {
    let mut out: Vec<Point> = Vec::new();
    for p in front {
        let kept = keep.iter().any(|k| k.level == p.level && k.size == p.size);
        if kept
            || out
                .last()
                .is_none_or(|q| p.fidelity >= q.fidelity + THIN_STEP)
        {
            out.push(p);
        }
    }
    out
}

/// The least expected pool with fidelity ≥ t.
pub(super) fn least_reaching(pts: &[Point], t: f64) -> Option<Point> {
    pts.iter()
        .filter(|p| p.fidelity >= t)
        .min_by(|a, b| {
            a.pool
                .total_cmp(&b.pool)
                .then(b.fidelity.total_cmp(&a.fidelity))
        })
        .cloned()
}
