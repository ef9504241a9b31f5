//! The gallery cut into blocks for private block retrieval (see `shared/spec/blocks.md`).
//!
//! A *level* is a seeded k-means clustering of the gallery's unit-norm features into `B`
//! clusters; its *blocks* are the clusters made to hold their members' neighbours, because a
//! query's nearest neighbours often straddle a cluster boundary:
//! - [`Overlap::Spill`]: every item also goes into the blocks of its `r` nearest centroids;
//! - [`Overlap::Closure`]: every block also receives the `m` nearest gallery items of each of
//!   its members.
//!
//! Everything here is a function of the gallery snapshot and a public seed — never of a query.
//! A client's *true block* is its nearest centroid ([`nearest_centroid`]); only the release
//! mechanism ([`dp::subset`]) turns that into something the server sees.
//!
//! Cost: k-means is O(iterations·n·B·d) time, O(n + B·d) memory, up to
//! [`KMEANS_SAMPLE_ABOVE`] items; above, [`kmeans_sampled`] trains on a sample and assigns by
//! matrix products. Neighbours are exact blocked brute force up to [`EXACT_NEIGHBOURS_MAX`]
//! items (O(n²·d) time, O(n·m) memory) and an inverted-file search over a coarse k-means above
//! it (O(n·probe·n/lists·d); list against list by matrix products,
//! [`InvertedFile::neighbours_by_list`], for the largest galleries). Approximate neighbours
//! and matrix-product distances only change which items a block holds — public data — never a
//! ranking, and never the client's true block, which [`nearest_centroid`] computes exactly.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use shared::error::{Error, Result};
use shared::params::limits;

use crate::topk::TopK;
pub use shared::api::{Coverage, Overlap};

/// The most gallery neighbours any of these overlaps needs (closure's `m`; 0 for none):
/// neighbours are searched once, for the largest, and each level takes its prefix.
pub fn max_closure(overlaps: impl IntoIterator<Item = Overlap>) -> usize {
    overlaps
        .into_iter()
        .filter_map(|o| match o {
            Overlap::Closure(m) | Overlap::Capped { m, .. } => Some(m as usize),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// What to build at one level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LevelSpec {
    pub blocks: u32,
    pub overlap: Overlap,
}

/// One level: centroids and the items of every block.
#[derive(Debug, Clone, PartialEq)]
pub struct Level {
    pub spec: LevelSpec,
    /// `B × d`, row-major, as the level's centroids file decodes them (`publish::centroids`).
    pub centroids: Vec<f32>,
    /// Each item's own cluster: its [`nearest_centroid`] among `centroids`.
    pub home: Vec<u32>,
    /// Item indices of every block, ascending.
    pub members: Vec<Vec<u32>>,
}

/// Items above which [`gallery_neighbours`] uses the inverted file instead of brute force.
pub const EXACT_NEIGHBOURS_MAX: usize = 20_000;
/// Lloyd iterations at most (it usually settles well before).
const KMEANS_ITERATIONS: usize = 30;

fn check_rows(features: &[f32], dim: usize) -> Result<usize> {
    if dim == 0 || dim > limits::MAX_FEATURE_DIM || !features.len().is_multiple_of(dim) {
        return Err(Error::InvalidParameter {
            name: "features",
            reason: format!(
                "length {} is not a multiple of dimension {dim}",
                features.len()
            ),
        });
    }
    if features.iter().any(|v| !v.is_finite()) {
        return Err(Error::NonFinite {
            what: "gallery features",
        });
    }
    Ok(features.len() / dim)
}

#[inline]
fn sq_dist(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// The nearest of `centroids` (`B × d`) to `query`, ties to the lowest index.
pub fn nearest_centroid(centroids: &[f32], dim: usize, query: &[f32]) -> u32 {
    nearest_k(centroids, dim, query, 1)[0]
}

/// [`nearest_centroid`] by the same work wherever `query` lies
/// ([`crate::topk::nearest_fixed`]): for a client, whose next request follows it (a level's
/// ranking query, the block release); the server's own searches use the faster one. 0 for no
/// centroids (a client checks their count first).
pub fn nearest_centroid_fixed(centroids: &[f32], dim: usize, query: &[f32]) -> u32 {
    crate::topk::nearest_fixed(centroids, dim, query, 1, |i| i as u64)
        .first()
        .map_or(0, |&(_, i)| i as u32)
}

/// The `k` nearest rows of `rows` (`n × d`) to `query`, nearest first, ties to the lower index.
pub fn nearest_k(rows: &[f32], dim: usize, query: &[f32], k: usize) -> Vec<u32> {
    let mut best = TopK::new(k);
    for (i, r) in rows.chunks_exact(dim).enumerate() {
        best.push(sq_dist(r, query), i as u32);
    }
    best.into_ids()
}

/// Each query's `k` nearest rows exactly as [`nearest_k`] finds them (ties to the lower
/// index), for many queries at GEMM speed: row chunks on every core give each query its
/// `k + 8` best `a_j = ‖r_j‖² − 2·q·r_j`, and [`sq_dist`] orders those. Both `a_j + ‖q‖²` and
/// [`sq_dist`] are within `B = (d + 2)·u·(‖q‖ + max‖r‖)²` of the true squared distance
/// (u = 2⁻²⁴; [`nearest_centroids_exact`]). A row outside the candidates has `a_j` at least
/// the last candidate's; when that exceeds the k-th candidate's by more than the margin
/// (16·B ≥ 4·B), such a row is strictly farther by [`sq_dist`] than k candidates, so the exact
/// top k is among them. Otherwise that query is scanned in full. 1,000 coverage probes at
/// 1,000,000 items: 2.4 s on two cores, where a scan a probe took about 19 s.
pub fn nearest_k_many(rows: &[f32], dim: usize, queries: &[f32], k: usize) -> Vec<Vec<u32>> {
    const ITEMS: usize = 4096;
    let (n, p) = (rows.len() / dim.max(1), queries.len() / dim.max(1));
    let kk = (k + EXACT_CANDIDATES).min(n);
    if k == 0 || n == 0 || dim == 0 {
        return vec![Vec::new(); p];
    }
    let norm2 = |r: &[f32]| r.iter().map(|v| v * v).sum::<f32>();
    let norms: Vec<f32> = rows.chunks_exact(dim).map(norm2).collect();
    let rmax = norms.iter().copied().fold(0f32, f32::max).sqrt();
    // Per row chunk, each query's best candidates in that chunk.
    let mut parts: Vec<Vec<Candidates>> = vec![Vec::new(); n.div_ceil(ITEMS)];
    let chunks: Vec<(usize, &mut [Vec<Candidates>])> = parts.chunks_mut(1).enumerate().collect();
    paper::nystrom::run_blocks(chunks, &|ci, out: &mut [Vec<Candidates>]| {
        let (lo, hi) = (ci * ITEMS, ((ci + 1) * ITEMS).min(n));
        let c = hi - lo;
        let mut g = vec![0f32; p * c];
        products(queries, &rows[lo * dim..hi * dim], dim, &mut g);
        out[0] = g
            .chunks_exact(c)
            .map(|gi| {
                let mut t = TopK::new(kk);
                for (j, &dot) in gi.iter().enumerate() {
                    t.push(norms[lo + j] - 2.0 * dot, (lo + j) as u32);
                }
                t.into_pairs()
            })
            .collect();
    });
    queries
        .chunks_exact(dim)
        .enumerate()
        .map(|(i, q)| {
            let mut t = TopK::new(kk);
            for part in &parts {
                for &(a, j) in &part[i] {
                    t.push(a, j);
                }
            }
            let cands = t.into_pairs();
            let margin =
                16.0 * (dim as f32 + 2.0) * f32::EPSILON * (norm2(q).sqrt() + rmax).powi(2);
            let all = cands.len() == n;
            // A NaN gap (never for finite rows) falls back to the full scan too.
            let clear = cands.len() > k
                && (cands[cands.len() - 1].0 - cands[k - 1].0).partial_cmp(&margin)
                    == Some(std::cmp::Ordering::Greater);
            if !(all || clear) {
                return nearest_k(rows, dim, q, k);
            }
            let mut best = TopK::new(k);
            for &(_, j) in &cands {
                best.push(sq_dist(&rows[j as usize * dim..][..dim], q), j);
            }
            best.into_ids()
        })
        .collect()
}

/// The row count, once `k` clusters of these rows make sense.
fn check_k(features: &[f32], dim: usize, k: usize) -> Result<usize> {
    let n = check_rows(features, dim)?;
    if k == 0 || k > n || k > limits::MAX_BLOCKS {
        return Err(Error::InvalidParameter {
            name: "blocks",
            reason: format!(
                "must be in 1..={} (and at most the gallery size {n})",
                limits::MAX_BLOCKS
            ),
        });
    }
    Ok(n)
}

/// [`kmeans`]'s centroids alone: above [`KMEANS_SAMPLE_ABOVE`] items the assignment of every
/// item to them (one O(n·k·d) pass) is skipped, since [`build_level`] assigns to the quantised
/// centroids instead.
pub fn kmeans_centroids(features: &[f32], dim: usize, k: usize, seed: u64) -> Result<Vec<f32>> {
    let n = check_k(features, dim, k)?;
    if n > KMEANS_SAMPLE_ABOVE {
        return Ok(sampled_centroids(features, dim, k, seed));
    }
    Ok(kmeans(features, dim, k, seed)?.0)
}

/// Seeded k-means (k-means++ initialisation, then Lloyd): returns `(centroids, assignment)`.
/// Deterministic for a seed. Empty clusters are re-seeded with the point farthest from its
/// centroid, so every cluster ends non-empty when `k ≤ n`.
pub fn kmeans(features: &[f32], dim: usize, k: usize, seed: u64) -> Result<(Vec<f32>, Vec<u32>)> {
    let n = check_k(features, dim, k)?;
    if n > KMEANS_SAMPLE_ABOVE {
        return Ok(kmeans_sampled(features, dim, k, seed));
    }
    let row = |i: usize| &features[i * dim..(i + 1) * dim];
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (k as u64).rotate_left(32));
    // k-means++.
    let mut centroids = Vec::with_capacity(k * dim);
    centroids.extend_from_slice(row(rng.random_range(0..n)));
    let mut d2: Vec<f64> = (0..n)
        .map(|i| sq_dist(row(i), &centroids[..dim]) as f64)
        .collect();
    for _ in 1..k {
        let total: f64 = d2.iter().sum();
        let pick = if total > 0.0 {
            let mut t = rng.random::<f64>() * total;
            let mut pick = n - 1;
            for (i, &w) in d2.iter().enumerate() {
                if t < w {
                    pick = i;
                    break;
                }
                t -= w;
            }
            pick
        } else {
            rng.random_range(0..n)
        };
        let c = row(pick).to_vec();
        for (i, v) in d2.iter_mut().enumerate() {
            *v = v.min(sq_dist(row(i), &c) as f64);
        }
        centroids.extend_from_slice(&c);
    }
    // Lloyd.
    let mut assign = vec![u32::MAX; n];
    for _ in 0..KMEANS_ITERATIONS {
        let mut changed = false;
        let mut dist = vec![0f32; n];
        for i in 0..n {
            let (mut bd, mut bc) = (f32::INFINITY, 0u32);
            for (c, cr) in centroids.chunks_exact(dim).enumerate() {
                let d = sq_dist(row(i), cr);
                if d < bd {
                    bd = d;
                    bc = c as u32;
                }
            }
            dist[i] = bd;
            if assign[i] != bc {
                assign[i] = bc;
                changed = true;
            }
        }
        let mut sums = vec![0f64; k * dim];
        let mut counts = vec![0usize; k];
        for (i, &c) in assign.iter().enumerate() {
            let c = c as usize;
            counts[c] += 1;
            for (s, &v) in sums[c * dim..(c + 1) * dim].iter_mut().zip(row(i)) {
                *s += v as f64;
            }
        }
        for c in 0..k {
            if counts[c] == 0 {
                // Re-seed with the worst-served point (ties to the lowest index).
                let far = (0..n)
                    .max_by(|&a, &b| dist[a].total_cmp(&dist[b]).then(b.cmp(&a)))
                    .unwrap_or(0);
                centroids[c * dim..(c + 1) * dim].copy_from_slice(row(far));
                dist[far] = 0.0;
                assign[far] = c as u32;
                changed = true;
                continue;
            }
            for (j, s) in sums[c * dim..(c + 1) * dim].iter().enumerate() {
                centroids[c * dim + j] = (*s / counts[c] as f64) as f32;
            }
        }
        if !changed {
            break;
        }
    }
    Ok((centroids, assign))
}

/// Above this many items [`kmeans`] trains on a seeded sample and assigns by matrix products
/// ([`kmeans_sampled`]); up to it (every evaluated gallery) it is exact Lloyd on all items.
pub const KMEANS_SAMPLE_ABOVE: usize = 100_000;
/// Sample points per centroid for [`kmeans_sampled`] (at least [`KMEANS_SAMPLE_ABOVE`]).
const SAMPLE_PER_CENTROID: usize = 40;
/// Lloyd iterations on the sample.
const SAMPLED_ITERATIONS: usize = 12;
/// Rows per matrix product in [`nearest_by_products`] (bounds its scratch memory).
const PRODUCT_ROWS: usize = 512;

/// `a` (`r × dim`, row-major) times `bᵀ` (`b`: `c × dim`, row-major) into `out` (`r × c`,
/// row-major), by `matrixmultiply`'s blocked SIMD kernels.
fn products(a: &[f32], b: &[f32], dim: usize, out: &mut [f32]) {
    let (r, c) = (a.len() / dim, b.len() / dim);
    debug_assert_eq!(out.len(), r * c);
    if r == 0 || c == 0 {
        return;
    }
    // SAFETY: `a` holds r·dim, `b` c·dim and `out` r·c elements (checked above / by the
    // callers' slicing); the strides address exactly those row-major layouts.
    unsafe {
        matrixmultiply::sgemm(
            r,
            dim,
            c,
            1.0,
            a.as_ptr(),
            dim as isize,
            1,
            b.as_ptr(),
            1,
            dim as isize,
            0.0,
            out.as_mut_ptr(),
            c as isize,
            1,
        );
    }
}

/// For every row of `rows` (`n × dim`), its `k` nearest rows of `centres` (`c × dim`) by
/// squared distance computed as `‖c‖² − 2·x·c` from matrix products, nearest first: O(n·c·d)
/// time at GEMM speed, on every core, O(threads·[`PRODUCT_ROWS`]·c) scratch. Rounding can
/// order near-ties differently from [`sq_dist`]; callers use it only for public structure
/// (which items a block holds), never for a ranking.
pub fn nearest_by_products(rows: &[f32], centres: &[f32], dim: usize, k: usize) -> Vec<Vec<u32>> {
    candidates_by_products(rows, centres, dim, k)
        .into_iter()
        .map(|c| c.into_iter().map(|(_, j)| j).collect())
        .collect()
}

/// One row's candidates: `(‖c‖² − 2·x·c as computed, index)`, nearest first.
type Candidates = Vec<(f32, u32)>;

/// [`nearest_by_products`] with each candidate's `‖c‖² − 2·x·c` as computed.
fn candidates_by_products(rows: &[f32], centres: &[f32], dim: usize, k: usize) -> Vec<Candidates> {
    let n = rows.len() / dim;
    let c = centres.len() / dim;
    let norms: Vec<f32> = centres
        .chunks_exact(dim)
        .map(|r| r.iter().map(|v| v * v).sum())
        .collect();
    let mut out: Vec<Candidates> = vec![Vec::new(); n];
    let chunks: Vec<(usize, &mut [Candidates])> = out
        .chunks_mut(PRODUCT_ROWS)
        .enumerate()
        .map(|(i, ch)| (i * PRODUCT_ROWS, ch))
        .collect();
    paper::nystrom::run_blocks(chunks, &|start, outs: &mut [Candidates]| {
        let r = outs.len();
        let mut g = vec![0f32; r * c];
        products(&rows[start * dim..(start + r) * dim], centres, dim, &mut g);
        for (o, gr) in outs.iter_mut().zip(g.chunks_exact(c)) {
            let mut top = TopK::new(k);
            for (j, (&dot, &nc)) in gr.iter().zip(&norms).enumerate() {
                top.push(nc - 2.0 * dot, j as u32);
            }
            *o = top.into_pairs();
        }
    });
    out
}

/// Candidates per row that [`nearest_centroids_exact`] takes from the matrix products.
const EXACT_CANDIDATES: usize = 8;

/// Each row's nearest centroid exactly as [`nearest_centroid`] finds it — the client's rule:
/// [`sq_dist`] in f32, ties to the lowest index — at GEMM speed. The products give each row's
/// [`EXACT_CANDIDATES`] best `a_j = ‖c_j‖² − 2·x·c_j`; both that and [`sq_dist`] are within
/// `(d + 2)·u·(‖x‖ + max‖c‖)²` of the true values (u = 2⁻²⁴, any summation order), so a
/// centroid [`sq_dist`] finds no farther than the products' best has `a_j` within four such
/// bounds of the best (`margin` is eight times that). When the last candidate is beyond the
/// margin, the exact minimum is among the candidates and no other centroid can tie it;
/// otherwise the row is scanned in full. So the result equals [`nearest_centroid`] for every
/// row, at O(n·B·d) GEMM plus O(n·8·d) scalar work.
pub fn nearest_centroids_exact(features: &[f32], centroids: &[f32], dim: usize) -> Vec<u32> {
    let b = centroids.len() / dim;
    let cmax = centroids
        .chunks_exact(dim)
        .map(|c| c.iter().map(|v| v * v).sum::<f32>().sqrt())
        .fold(0f32, f32::max);
    let cands = candidates_by_products(features, centroids, dim, EXACT_CANDIDATES.min(b));
    features
        .chunks_exact(dim)
        .zip(cands)
        .map(|(x, c)| {
            let norm = x.iter().map(|v| v * v).sum::<f32>().sqrt();
            let margin = 16.0 * (dim as f32 + 2.0) * f32::EPSILON * (norm + cmax).powi(2);
            let (first, last) = (c[0].0, c[c.len() - 1].0);
            // A NaN gap (never for finite rows) falls back to the full scan too.
            let clear = (last - first).partial_cmp(&margin) == Some(std::cmp::Ordering::Greater);
            if c.len() < b && !clear {
                return nearest_centroid(centroids, dim, x);
            }
            let mut best = (f32::INFINITY, u32::MAX);
            for &(_, j) in &c {
                let d = sq_dist(x, &centroids[j as usize * dim..(j as usize + 1) * dim]);
                if d < best.0 || (d == best.0 && j < best.1) {
                    best = (d, j);
                }
            }
            best.1
        })
        .collect()
}

/// k-means for large galleries: Lloyd on a seeded sample of `max(40·k, 100,000)` items
/// (initialised with `k` distinct sample points, [`SAMPLED_ITERATIONS`] rounds, empty clusters
/// re-seeded with the sample point farthest from its centroid), then every item assigned to
/// its nearest centroid — all distances by matrix products ([`nearest_by_products`]).
/// O(iterations·s·k·d + n·k·d) time at GEMM speed instead of O(30·n·k·d) scalar, O(n + k·d)
/// memory. Deterministic for a seed on a given machine (the GEMM kernel is chosen per CPU).
pub fn kmeans_sampled(features: &[f32], dim: usize, k: usize, seed: u64) -> (Vec<f32>, Vec<u32>) {
    let centroids = sampled_centroids(features, dim, k, seed);
    let home: Vec<u32> = nearest_by_products(features, &centroids, dim, 1)
        .into_iter()
        .map(|a| a[0])
        .collect();
    (centroids, home)
}

/// [`kmeans_sampled`]'s centroids (Lloyd on the sample), without assigning every item.
fn sampled_centroids(features: &[f32], dim: usize, k: usize, seed: u64) -> Vec<f32> {
    let n = features.len() / dim;
    let row = |i: usize| &features[i * dim..(i + 1) * dim];
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (k as u64).rotate_left(32) ^ 0x5a);
    let s = (SAMPLE_PER_CENTROID * k).max(KMEANS_SAMPLE_ABOVE).min(n);
    let mut pick = rand::seq::index::sample(&mut rng, n, s).into_vec();
    pick.sort_unstable();
    let sample: Vec<f32> = pick.iter().flat_map(|&i| row(i).iter().copied()).collect();
    let srow = |i: usize| &sample[i * dim..(i + 1) * dim];
    let mut init = rand::seq::index::sample(&mut rng, s, k).into_vec();
    init.sort_unstable();
    let mut centroids: Vec<f32> = init.iter().flat_map(|&i| srow(i).iter().copied()).collect();
    for _ in 0..SAMPLED_ITERATIONS {
        let assign = nearest_by_products(&sample, &centroids, dim, 1);
        let mut sums = vec![0f64; k * dim];
        let mut counts = vec![0usize; k];
        for (i, a) in assign.iter().enumerate() {
            let c = a[0] as usize;
            counts[c] += 1;
            for (acc, &v) in sums[c * dim..(c + 1) * dim].iter_mut().zip(srow(i)) {
                *acc += v as f64;
            }
        }
        let mut far: Option<Vec<(f32, usize)>> = None;
        for c in 0..k {
            if counts[c] == 0 {
                // Re-seed with the worst-served sample points, worst first.
                let order = far.get_or_insert_with(|| {
                    let mut d: Vec<(f32, usize)> = assign
                        .iter()
                        .enumerate()
                        .map(|(i, a)| {
                            let c = a[0] as usize;
                            (sq_dist(srow(i), &centroids[c * dim..(c + 1) * dim]), i)
                        })
                        .collect();
                    d.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                    d
                });
                let (_, i) = order.remove(0);
                centroids[c * dim..(c + 1) * dim].copy_from_slice(srow(i));
                continue;
            }
            for (j, acc) in sums[c * dim..(c + 1) * dim].iter().enumerate() {
                centroids[c * dim + j] = (*acc / counts[c] as f64) as f32;
            }
        }
    }
    centroids
}

/// Each gallery item's `m` nearest other gallery items, nearest first (for
/// [`Overlap::Closure`]). Exact up to [`EXACT_NEIGHBOURS_MAX`] items; above, an inverted file
/// over a seeded coarse k-means, probing each item's 8 nearest lists (approximate; see the
/// module docs). `rows` restricts the work to a range of items so callers can split it across
/// threads; the result has one entry per item of `rows`.
pub fn gallery_neighbours(
    features: &[f32],
    dim: usize,
    m: usize,
    rows: std::ops::Range<usize>,
    index: Option<&InvertedFile>,
) -> Result<Vec<Vec<u32>>> {
    let n = check_rows(features, dim)?;
    let row = |i: usize| &features[i * dim..(i + 1) * dim];
    let mut out = Vec::with_capacity(rows.len());
    for i in rows {
        let mut top = TopK::new(m);
        match index {
            Some(ivf) => {
                for list in nearest_k(&ivf.centroids, dim, row(i), ivf.probe) {
                    for &j in &ivf.lists[list as usize] {
                        if j as usize != i {
                            top.push(sq_dist(row(i), row(j as usize)), j);
                        }
                    }
                }
            }
            None => {
                for j in 0..n {
                    if j != i {
                        top.push(sq_dist(row(i), row(j)), j as u32);
                    }
                }
            }
        }
        out.push(top.into_ids());
    }
    Ok(out)
}

/// A coarse k-means with the items of each list, for approximate neighbour search.
#[derive(Debug, Clone)]
pub struct InvertedFile {
    pub centroids: Vec<f32>,
    pub lists: Vec<Vec<u32>>,
    pub probe: usize,
}

impl InvertedFile {
    /// `None` when the gallery is small enough for exact neighbours.
    pub fn for_gallery(features: &[f32], dim: usize, seed: u64) -> Result<Option<Self>> {
        let n = check_rows(features, dim)?;
        if n <= EXACT_NEIGHBOURS_MAX {
            return Ok(None);
        }
        let lists_n = (n / 256).clamp(16, limits::MAX_BLOCKS);
        let (centroids, assign) = kmeans(features, dim, lists_n, seed ^ 0x1f)?;
        let mut lists = vec![Vec::new(); lists_n];
        for (i, &c) in assign.iter().enumerate() {
            lists[c as usize].push(i as u32);
        }
        Ok(Some(Self {
            centroids,
            lists,
            probe: 8,
        }))
    }
}

impl InvertedFile {
    /// Every item's `m` nearest other items, list by list: the members of a list are compared,
    /// by one matrix product ([`products`]), with the members of the `probe` lists nearest its
    /// centroid (its own included). For large galleries (above [`KMEANS_SAMPLE_ABOVE`]): the
    /// same candidates as probing per item at list granularity, at GEMM speed, on every core;
    /// approximate, like [`gallery_neighbours`] with an index (public structure only).
    pub fn neighbours_by_list(&self, features: &[f32], dim: usize, m: usize) -> Vec<Vec<u32>> {
        let n = features.len() / dim;
        let row = |i: u32| &features[i as usize * dim..(i as usize + 1) * dim];
        let probes = nearest_by_products(&self.centroids, &self.centroids, dim, self.probe);
        let mut out: Vec<Vec<u32>> = vec![Vec::new(); n];
        let lists: Vec<usize> = (0..self.lists.len()).collect();
        // Per list: each member with its neighbours.
        type Found = Vec<(u32, Vec<u32>)>;
        let mut per_list: Vec<Found> = vec![Vec::new(); lists.len()];
        let chunks: Vec<(usize, &mut [Found])> = per_list
            .chunks_mut(8)
            .enumerate()
            .map(|(i, c)| (i * 8, c))
            .collect();
        paper::nystrom::run_blocks(chunks, &|start, outs: &mut [Found]| {
            for (li, slot) in outs.iter_mut().enumerate() {
                let l = start + li;
                let members = &self.lists[l];
                if members.is_empty() {
                    continue;
                }
                let cand: Vec<u32> = probes[l]
                    .iter()
                    .flat_map(|&p| self.lists[p as usize].iter().copied())
                    .collect();
                let a: Vec<f32> = members
                    .iter()
                    .flat_map(|&i| row(i).iter().copied())
                    .collect();
                let b: Vec<f32> = cand.iter().flat_map(|&i| row(i).iter().copied()).collect();
                let norms: Vec<f32> = b
                    .chunks_exact(dim)
                    .map(|r| r.iter().map(|v| v * v).sum())
                    .collect();
                let mut g = vec![0f32; members.len() * cand.len()];
                products(&a, &b, dim, &mut g);
                *slot = members
                    .iter()
                    .zip(g.chunks_exact(cand.len()))
                    .map(|(&i, gr)| {
                        let mut top = TopK::new(m);
                        for ((&j, &dot), &nj) in cand.iter().zip(gr).zip(&norms) {
                            if j != i {
                                top.push(nj - 2.0 * dot, j);
                            }
                        }
                        (i, top.into_ids())
                    })
                    .collect();
            }
        });
        for (i, nb) in per_list.into_iter().flatten() {
            out[i as usize] = nb;
        }
        out
    }
}

/// Build one level. `neighbours` (each item's nearest gallery items, from
/// [`gallery_neighbours`]) is needed for [`Overlap::Closure`] and must hold at least `m` per
/// item.
pub fn build_level(
    features: &[f32],
    dim: usize,
    spec: LevelSpec,
    seed: u64,
    neighbours: Option<&[Vec<u32>]>,
) -> Result<Level> {
    let n = check_rows(features, dim)?;
    // Clients find their true block with the centroids as the centroids file decodes them, so
    // the level is built with exactly those: each item's home is its nearest decoded centroid
    // by the client's own rule, and spill and coverage use them too.
    let raw = kmeans_centroids(features, dim, spec.blocks as usize, seed)?;
    let mut centroids = crate::centroids::quantised(&raw, dim)?;
    drop(raw);
    let mut home = nearest_centroids_exact(features, &centroids, dim);
    if let Overlap::Capped { rows, .. } = spec.overlap {
        (centroids, home) = split_cells(features, dim, centroids, home, rows as usize / 2, seed)?;
    }
    let b = centroids.len() / dim;
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); b];
    match spec.overlap {
        Overlap::None => {
            for (i, &h) in home.iter().enumerate() {
                members[h as usize].push(i as u32);
            }
        }
        Overlap::Spill(r) => {
            if r == 0 || r > spec.blocks {
                return Err(Error::InvalidParameter {
                    name: "spill",
                    reason: format!("must be in 1..={}", spec.blocks),
                });
            }
            for i in 0..n {
                let row = &features[i * dim..(i + 1) * dim];
                for c in nearest_k(&centroids, dim, row, r as usize) {
                    members[c as usize].push(i as u32);
                }
            }
        }
        Overlap::Closure(m) => {
            let nb = checked_neighbours(neighbours, n, m)?;
            for (i, &h) in home.iter().enumerate() {
                let block = &mut members[h as usize];
                block.push(i as u32);
                block.extend_from_slice(&nb[i][..(m as usize).min(nb[i].len())]);
            }
        }
        Overlap::Capped { m, rows } => {
            let nb = checked_neighbours(neighbours, n, m)?;
            members = capped_members(
                features,
                dim,
                &centroids,
                &home,
                nb,
                m as usize,
                rows as usize,
            );
        }
    }
    for block in &mut members {
        block.sort_unstable();
        block.dedup();
    }
    if matches!(spec.overlap, Overlap::Closure(_) | Overlap::Capped { .. }) {
        fill_small_blocks(features, dim, &centroids, &home, &mut members);
    }
    Ok(Level {
        // Capped levels split cells: the level has as many blocks as centroids.
        spec: LevelSpec {
            blocks: b as u32,
            ..spec
        },
        centroids,
        home,
        members,
    })
}

/// The fewest items a block of a closure or capped level holds (or the whole gallery, if
/// smaller): the most results a PIR search may ask (`publish::pir::doc::MAX_THUMB_QUERIES` is
/// this). (The server ranks by PIR over those
/// levels; a level without overlap or with spill is kept as specified, and not offered for
/// ranking where a block is smaller.) A client refuses a PIR document whose ranking blocks
/// hold fewer than its `k` (`client::pir_search::check_blocks`): with fewer, the client's
/// ranking work — and so when its next request leaves — would depend on the size of the
/// photo's block, which the server chooses.
pub const MIN_BLOCK_ITEMS: usize = 32;

/// Tops up every block of fewer than [`MIN_BLOCK_ITEMS`] (or `n`) items with the items nearest
/// its centroid that it lacks, ties to the lower index: candidates are the cells of the
/// centroid's [`NEAR_CENTROIDS`] nearest centroids, or the whole gallery where those hold too
/// few. Adding items to a block never removes its own, so coverage only rises; a function of
/// the features and centroids only. Blocks stay ascending.
pub fn fill_small_blocks(
    features: &[f32],
    dim: usize,
    centroids: &[f32],
    home: &[u32],
    members: &mut [Vec<u32>],
) {
    let n = home.len();
    let least = MIN_BLOCK_ITEMS.min(n);
    if members.iter().all(|b| b.len() >= least) {
        return;
    }
    let b = centroids.len() / dim.max(1);
    let mut cells: Vec<Vec<u32>> = vec![Vec::new(); b];
    for (i, &h) in home.iter().enumerate() {
        cells[h as usize].push(i as u32);
    }
    let row = |i: u32| &features[i as usize * dim..][..dim];
    for (c, block) in members.iter_mut().enumerate() {
        if block.len() >= least {
            continue;
        }
        let centre = &centroids[c * dim..][..dim];
        let want = least - block.len();
        let fill = |cands: &mut dyn Iterator<Item = u32>| {
            let mut top = TopK::new(want);
            for i in cands {
                if block.binary_search(&i).is_err() {
                    top.push(sq_dist(row(i), centre), i);
                }
            }
            top.into_ids()
        };
        let near = nearest_k(centroids, dim, centre, NEAR_CENTROIDS.min(b));
        let mut extra = fill(&mut near.iter().flat_map(|&h| cells[h as usize].iter().copied()));
        if extra.len() < want {
            extra = fill(&mut (0..n as u32));
        }
        block.extend(extra);
        block.sort_unstable();
    }
}

/// `neighbours`, checked to hold at least `m` (or all `n − 1`) items for each of `n` items.
fn checked_neighbours(neighbours: Option<&[Vec<u32>]>, n: usize, m: u32) -> Result<&[Vec<u32>]> {
    let nb = neighbours.ok_or(Error::InvalidParameter {
        name: "neighbours",
        reason: "closure needs each item's nearest gallery items".into(),
    })?;
    if nb.len() != n || nb.iter().any(|v| v.len() < (m as usize).min(n - 1)) {
        return Err(Error::InvalidParameter {
            name: "neighbours",
            reason: format!("need {m} neighbours for each of {n} items"),
        });
    }
    Ok(nb)
}

/// Rounds of [`split_cells`] at most (each reassigns every item; two usually suffice).
const SPLIT_ROUNDS: usize = 8;

/// Splits every cell holding more than `own_max` items: its members are clustered
/// ([`kmeans`], `⌈size/own_max⌉ + 1` parts, seeded by the cell) and their centroids replace
/// the cell's, then every item is reassigned to its nearest quantised centroid, until no cell is
/// over (or [`SPLIT_ROUNDS`] pass; a cell still over is then refused). Returns the new
/// centroids (quantised, as clients decode them) and homes. A function of the gallery, `own_max`
/// and the seed only.
pub fn split_cells(
    features: &[f32],
    dim: usize,
    mut centroids: Vec<f32>,
    mut home: Vec<u32>,
    own_max: usize,
    seed: u64,
) -> Result<(Vec<f32>, Vec<u32>)> {
    let own_max = own_max.max(1);
    for _ in 0..SPLIT_ROUNDS {
        let b = centroids.len() / dim;
        let mut cells: Vec<Vec<u32>> = vec![Vec::new(); b];
        for (i, &h) in home.iter().enumerate() {
            cells[h as usize].push(i as u32);
        }
        if cells.iter().all(|c| c.len() <= own_max) {
            return Ok((centroids, home));
        }
        let mut raw = centroids.clone();
        for (c, cell) in cells.iter().enumerate().filter(|(_, c)| c.len() > own_max) {
            let parts = cell.len().div_ceil(own_max) + 1;
            let sub: Vec<f32> = cell
                .iter()
                .flat_map(|&i| features[i as usize * dim..][..dim].iter().copied())
                .collect();
            let (sc, _) = kmeans(&sub, dim, parts, seed ^ (c as u64) << 20 ^ b as u64)?;
            raw[c * dim..(c + 1) * dim].copy_from_slice(&sc[..dim]);
            raw.extend_from_slice(&sc[dim..]);
        }
        centroids = crate::centroids::quantised(&raw, dim)?;
        home = nearest_centroids_exact(features, &centroids, dim);
    }
    Err(Error::InvalidParameter {
        name: "rows",
        reason: format!("cells still hold more than {own_max} items after {SPLIT_ROUNDS} splits"),
    })
}

/// The blocks of [`Overlap::Capped`]: each cell's own members, then, while the block holds
/// fewer than `rows`, the candidates nearest the cell — the members' `m` nearest items from
/// other cells, and the items that have the cell among their [`SPILL_CENTROIDS`] nearest
/// centroids — ties to the lower index.
///
/// **Nearest the cell.** A query homed in cell `c` lies in `c`'s Voronoi region, the
/// intersection of the half-spaces `{y : ‖y − c‖ ≤ ‖y − h‖}`. An item `x` is
/// `(‖x − c‖² − ‖x − h‖²) / (2‖c − h‖)` from the bisector of `c` and `h` (positive on `h`'s
/// side), so the largest of these over any set of other centroids `h` is a lower bound on
/// `x`'s distance to every point of the region, hence to every query homed there: an item is
/// one of such a query's nearest only if that bound is below the query's `k`-th neighbour
/// distance. The bound is taken over `x`'s [`NEAR_CENTROIDS`] nearest centroids (its own among
/// them), the bisectors that can bind near `x`; with `x`'s own centroid alone it would ignore
/// the cell's other sides.
///
/// **Why also the spill candidates.** At 1,000,000 items (the demo gallery, `partbench
/// --misses`), up to 3.2 % of held-out photos' top-8 items were among no member's 192
/// nearest; items whose second to fourth nearest centroid is the cell add the rest of the
/// region's margin. Own-block coverage on held-out photos with the committed weights, against
/// the rule before: 0.963 → 0.974 at 1,000,000; within 0.001 at 1,000–70,000, where members'
/// neighbours already list the margin (`docs/eval/pir.md`). (Ranking candidates by how many
/// members list them, weighted by rank, gained 0.011 at 1,000 items but lost 0.013 at
/// 1,000,000, where a member's nearest are its own near-duplicates, which no held-out photo
/// has.)
///
/// Memory: each item's [`NEAR_CENTROIDS`] nearest centroids, the spill lists (at most
/// [`SPILL_CENTROIDS`] − 1 entries an item) and, per core, one cell's candidates.
///
/// A function of its inputs only. Blocks come out ascending; a block whose own members exceed
/// `rows` keeps them all.
pub fn capped_members(
    features: &[f32],
    dim: usize,
    centroids: &[f32],
    home: &[u32],
    neighbours: &[Vec<u32>],
    m: usize,
    rows: usize,
) -> Vec<Vec<u32>> {
    let b = centroids.len() / dim.max(1);
    let row = |i: u32| &features[i as usize * dim..][..dim];
    let centroid = |c: u32| &centroids[c as usize * dim..][..dim];
    // Each item's nearest centroids (its home first but for exact ties, which the bound does
    // not need: every listed centroid other than the block's own gives a valid bisector), a
    // slice of items at a time on every core: one call over 1,000,000 items held a 1.3 GB
    // product matrix.
    const NEAR_CHUNK: usize = 8192;
    let mut near: Vec<Vec<u32>> = vec![Vec::new(); home.len()];
    let chunks: Vec<(usize, &mut [Vec<u32>])> = near
        .chunks_mut(NEAR_CHUNK)
        .enumerate()
        .map(|(i, c)| (i * NEAR_CHUNK, c))
        .collect();
    paper::nystrom::run_blocks(chunks, &|start, out: &mut [Vec<u32>]| {
        let rows = &features[start * dim..(start + out.len()) * dim];
        for (o, n) in
            out.iter_mut()
                .zip(nearest_k_many(centroids, dim, rows, NEAR_CENTROIDS.min(b)))
        {
            *o = n;
        }
    });
    let mut cells: Vec<Vec<u32>> = vec![Vec::new(); b];
    let mut spill: Vec<Vec<u32>> = vec![Vec::new(); b];
    for (i, &h) in home.iter().enumerate() {
        cells[h as usize].push(i as u32);
        for &c in near[i].iter().take(SPILL_CENTROIDS).filter(|&&c| c != h) {
            spill[c as usize].push(i as u32);
        }
    }
    // One cell at a time, on every core: each block is a function of the shared inputs.
    let fill = |c: usize| -> Vec<u32> {
        // This centroid's distance to every other: a candidate's bound then costs one
        // distance and a few look-ups.
        let gap: Vec<f32> = (0..b as u32)
            .map(|h| {
                sq_dist(centroid(c as u32), centroid(h))
                    .sqrt()
                    .max(f32::MIN_POSITIVE)
            })
            .collect();
        let mut block = cells[c].clone();
        let mut cands: Vec<u32> = block
            .iter()
            .flat_map(|&i| neighbours[i as usize].iter().take(m).copied())
            .chain(spill[c].iter().copied())
            .filter(|&x| home[x as usize] != c as u32)
            .collect();
        cands.sort_unstable();
        cands.dedup();
        let mut keyed: Vec<(f32, u32)> = cands
            .into_iter()
            .map(|x| {
                let to_c = sq_dist(row(x), centroid(c as u32));
                let bound = std::iter::once(home[x as usize])
                    .chain(near[x as usize].iter().copied())
                    .filter(|&h| h as usize != c)
                    .map(|h| (to_c - sq_dist(row(x), centroid(h))) / (2.0 * gap[h as usize]))
                    .fold(f32::NEG_INFINITY, f32::max);
                (bound, x)
            })
            .collect();
        keyed.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let room = rows.saturating_sub(block.len());
        block.extend(keyed.into_iter().take(room).map(|(_, x)| x));
        block.sort_unstable();
        block
    };
    let mut blocks: Vec<Vec<u32>> = vec![Vec::new(); b];
    let chunks: Vec<(usize, &mut [Vec<u32>])> = blocks.chunks_mut(1).enumerate().collect();
    paper::nystrom::run_blocks(chunks, &|c, out: &mut [Vec<u32>]| out[0] = fill(c));
    blocks
}

/// Centroids nearest an item whose bisectors with a block's centroid bound its distance to
/// that block's cell in [`capped_members`].
pub const NEAR_CENTROIDS: usize = 8;

/// An item is a candidate for the blocks of its nearest centroids up to this many (its own
/// first), besides its neighbours' blocks ([`capped_members`]). 4 and 8 were within 0.001 of
/// each other at 1,000,000 items, 2 lost 0.005.
pub const SPILL_CENTROIDS: usize = 4;

/// Indices of the `probes` (`p × d`) that are not copies of a gallery item (no gallery item
/// within squared distance 1e-9 by [`sq_dist`]). Coverage must be measured on such held-out
/// probes: a gallery member's own neighbours sit in its block by construction under closure, so
/// probes inside the gallery overstate it.
///
/// A probe is a copy exactly when its nearest item by [`sq_dist`] is within 1e-9, and
/// [`nearest_k_many`] finds that item exactly at GEMM speed (1,000 probes at 1,000,000 items:
/// 1.9 s on two cores, where the pairwise scan took 35 s).
pub fn held_out_probes(features: &[f32], dim: usize, probes: &[f32]) -> Vec<usize> {
    const COPY: f32 = 1e-9;
    if dim == 0 {
        return (0..probes.len()).collect();
    }
    nearest_k_many(features, dim, probes, 1)
        .iter()
        .zip(probes.chunks_exact(dim.max(1)))
        .enumerate()
        .filter(|(_, (near, p))| {
            near.first()
                .is_none_or(|&j| sq_dist(&features[j as usize * dim..][..dim], p) > COPY)
        })
        .map(|(i, _)| i)
        .collect()
}

/// Coverage of `level` for `probes` (`p × d`), with each probe's true top-`k` gallery items
/// given in `truth` (from [`nearest_k`] over the gallery).
pub fn coverage(level: &Level, dim: usize, probes: &[f32], truth: &[Vec<u32>]) -> Coverage {
    let b = level.members.len();
    // Which blocks hold each item (sorted block ids).
    let mut blocks_of: Vec<Vec<u32>> = vec![Vec::new(); level.home.len()];
    for (bi, block) in level.members.iter().enumerate() {
        for &i in block {
            blocks_of[i as usize].push(bi as u32);
        }
    }
    let (mut own, mut other) = (0.0, 0.0);
    let p = truth.len().max(1);
    for (probe, t) in probes.chunks_exact(dim).zip(truth) {
        let x = nearest_centroid(&level.centroids, dim, probe);
        let k = t.len().max(1) as f64;
        let mut in_own = 0usize;
        let mut in_others = 0usize;
        for &i in t {
            let bs = &blocks_of[i as usize];
            let has_own = bs.binary_search(&x).is_ok();
            in_own += usize::from(has_own);
            in_others += bs.len() - usize::from(has_own);
        }
        own += in_own as f64 / k;
        if b > 1 {
            other += in_others as f64 / k / (b - 1) as f64;
        }
    }
    Coverage {
        own: own / p as f64,
        other: other / p as f64,
    }
}

/// Items a neighbour task takes at a time.
const NEIGHBOUR_CHUNK: usize = 256;

/// One neighbour task's lists, or why it failed.
type Lists = Result<Vec<Vec<u32>>>;

/// Fewest anchors outside the gallery that coverage is measured on.
const MIN_HELD_OUT_PROBES: usize = 100;

/// The probes coverage is measured on, and how many there are: the public anchors outside the
/// gallery (coverage predicts a held-out photo's fidelity), or — when fewer than
/// [`MIN_HELD_OUT_PROBES`] are — all of them, counted as 0 (the document then says the
/// prediction rests on gallery members and runs high). The demo gallery never holds the
/// anchors (`data::fashion::demo_gallery`), so it always has the first case. A count of 0 is
/// the caller's to report.
pub fn coverage_probes(features: &[f32], dim: usize, anchors: &[f32]) -> (Vec<f32>, usize) {
    let held_out = held_out_probes(features, dim, anchors);
    if held_out.len() >= MIN_HELD_OUT_PROBES {
        let p = held_out
            .iter()
            .flat_map(|&i| anchors[i * dim..(i + 1) * dim].iter().copied())
            .collect();
        (p, held_out.len())
    } else {
        (anchors.to_vec(), 0)
    }
}

/// Every item's `m` nearest other gallery items (for closure), on every core: exact for small
/// galleries, the inverted file probed per item above [`EXACT_NEIGHBOURS_MAX`], list
/// against list by matrix products above [`KMEANS_SAMPLE_ABOVE`], on every core where threads
/// exist. Returns whether it was exact. The server's build and the evaluation both call this,
/// so they measure the same levels.
pub fn closure_neighbours(
    features: &[f32],
    dim: usize,
    m: usize,
    seed: u64,
) -> Result<(Vec<Vec<u32>>, bool)> {
    let n = features.len() / dim.max(1);
    let ivf = InvertedFile::for_gallery(features, dim, seed)?;
    let exact = ivf.is_none();
    let nb = match &ivf {
        Some(ivf) if n > KMEANS_SAMPLE_ABOVE => ivf.neighbours_by_list(features, dim, m),
        _ => {
            let mut chunks: Vec<Lists> = (0..n.div_ceil(NEIGHBOUR_CHUNK))
                .map(|_| Ok(Vec::new()))
                .collect();
            let slots: Vec<(usize, &mut [Lists])> = chunks.chunks_mut(1).enumerate().collect();
            paper::nystrom::run_blocks(slots, &|c, out: &mut [Lists]| {
                let rows = c * NEIGHBOUR_CHUNK..((c + 1) * NEIGHBOUR_CHUNK).min(n);
                out[0] = gallery_neighbours(features, dim, m, rows, ivf.as_ref());
            });
            chunks
                .into_iter()
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .flatten()
                .collect()
        }
    };
    Ok((nb, exact))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blobs(n: usize, dim: usize, centres: usize, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let cs: Vec<f32> = (0..centres * dim)
            .map(|_| rng.random::<f32>() * 4.0)
            .collect();
        let mut out = Vec::with_capacity(n * dim);
        for i in 0..n {
            let c = i % centres;
            for j in 0..dim {
                out.push(cs[c * dim + j] + rng.random::<f32>() * 0.1);
            }
        }
        out
    }

    #[test]
    fn kmeans_is_deterministic_and_finds_separated_clusters() {
        let x = blobs(400, 5, 4, 1);
        let (c1, a1) = kmeans(&x, 5, 4, 7).unwrap();
        let (c2, a2) = kmeans(&x, 5, 4, 7).unwrap();
        assert_eq!((c1, a1.clone()), (c2, a2));
        // Points generated from the same centre share a cluster.
        for i in 0..400 {
            assert_eq!(a1[i], a1[i % 4], "{i}");
        }
        let mut distinct = a1[..4].to_vec();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 4);
    }

    #[test]
    fn kmeans_rejects_bad_input() {
        assert!(kmeans(&[0.0; 10], 5, 3, 0).is_err());
        assert!(kmeans(&[0.0; 10], 3, 1, 0).is_err());
        assert!(kmeans(&[f32::NAN; 10], 5, 1, 0).is_err());
        assert!(kmeans(&[0.0; 10], 5, 0, 0).is_err());
    }

    #[test]
    fn overlaps_cover_every_item_and_hold_neighbours() {
        let dim = 6;
        let x = blobs(300, dim, 10, 2);
        let n = 300;
        let nb = gallery_neighbours(&x, dim, 5, 0..n, None).unwrap();
        let none = build_level(
            &x,
            dim,
            LevelSpec {
                blocks: 8,
                overlap: Overlap::None,
            },
            3,
            None,
        )
        .unwrap();
        assert_eq!(none.members.iter().map(Vec::len).sum::<usize>(), n);
        let spill = build_level(
            &x,
            dim,
            LevelSpec {
                blocks: 8,
                overlap: Overlap::Spill(2),
            },
            3,
            None,
        )
        .unwrap();
        assert_eq!(spill.members.iter().map(Vec::len).sum::<usize>(), 2 * n);
        let closure = build_level(
            &x,
            dim,
            LevelSpec {
                blocks: 8,
                overlap: Overlap::Closure(5),
            },
            3,
            Some(&nb),
        )
        .unwrap();
        for (i, near) in nb.iter().enumerate() {
            let block = &closure.members[closure.home[i] as usize];
            assert!(block.binary_search(&(i as u32)).is_ok());
            for &j in near {
                assert!(block.binary_search(&j).is_ok());
            }
        }
        // Coverage with the items themselves as probes: closure holds all 5 neighbours.
        let c = coverage(&closure, dim, &x, &nb);
        assert!((c.own - 1.0).abs() < 1e-12, "{c:?}");
        assert!(c.other >= 0.0 && c.other <= 1.0);
        assert!(build_level(
            &x,
            dim,
            LevelSpec {
                blocks: 8,
                overlap: Overlap::Closure(5)
            },
            3,
            None
        )
        .is_err());
    }

    /// Issue #60, point 3: a closure level whose k-means leaves a cell of 2 items (two points
    /// far from the rest) tops that block up to [`MIN_BLOCK_ITEMS`] with the items nearest its
    /// centroid, keeps its own, and leaves full blocks alone; a level without overlap keeps
    /// its small cell (such a level is not offered for PIR ranking).
    #[test]
    fn closure_blocks_hold_at_least_the_most_results_a_search_asks() {
        let dim = 3;
        // (Values within the centroids file's range, which is the features'.)
        let mut x: Vec<f32> = blobs(198, dim, 1, 4).iter().map(|v| v / 8.0).collect();
        x.extend([0.9, 0.9, 0.9, 0.9, 0.85, 0.9]);
        let n = 200;
        let nb = gallery_neighbours(&x, dim, 3, 0..n, None).unwrap();
        let spec = |overlap| LevelSpec { blocks: 2, overlap };
        let none = build_level(&x, dim, spec(Overlap::None), 1, None).unwrap();
        assert!(
            none.members.iter().any(|b| b.len() == 2),
            "{:?}",
            none.members.iter().map(Vec::len).collect::<Vec<_>>()
        );
        let closure = build_level(&x, dim, spec(Overlap::Closure(3)), 1, Some(&nb)).unwrap();
        let far = closure.home[198] as usize;
        let block = &closure.members[far];
        assert_eq!(block.len(), MIN_BLOCK_ITEMS, "{block:?}");
        assert!(block.contains(&198) && block.contains(&199));
        assert!(block.windows(2).all(|w| w[0] < w[1]), "ascending");
        // The added items are the nearest to the block's centroid: none outside is nearer.
        let centre = &closure.centroids[far * dim..][..dim];
        let row = |i: u32| &x[i as usize * dim..][..dim];
        let farthest_in = block
            .iter()
            .map(|&i| sq_dist(row(i), centre))
            .fold(0f32, f32::max);
        for i in (0..n as u32).filter(|i| block.binary_search(i).is_err()) {
            assert!(sq_dist(row(i), centre) >= farthest_in, "item {i}");
        }
        // The other block was full already: unchanged from its closure.
        let other = &closure.members[1 - far];
        assert!(other.len() >= 198);
        assert!(closure.members.iter().all(|b| b.len() >= MIN_BLOCK_ITEMS));
    }

    #[test]
    fn inverted_file_neighbours_agree_with_exact_on_clustered_data() {
        let dim = 4;
        let x = blobs(EXACT_NEIGHBOURS_MAX + 500, dim, 50, 5);
        let ivf = InvertedFile::for_gallery(&x, dim, 1).unwrap().unwrap();
        let approx = gallery_neighbours(&x, dim, 4, 0..50, Some(&ivf)).unwrap();
        let exact = gallery_neighbours(&x, dim, 4, 0..50, None).unwrap();
        let agree: usize = approx
            .iter()
            .zip(&exact)
            .map(|(a, e)| a.iter().filter(|i| e.contains(i)).count())
            .sum();
        assert!(agree as f64 >= 0.95 * 200.0, "{agree}");
    }

    #[test]
    fn products_give_the_exact_nearest_rows() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let dim = 8;
        let rows: Vec<f32> = (0..700 * dim).map(|_| rng.random::<f32>()).collect();
        let centres: Vec<f32> = (0..90 * dim).map(|_| rng.random::<f32>()).collect();
        let fast = nearest_by_products(&rows, &centres, dim, 3);
        assert_eq!(fast.len(), 700);
        for (r, got) in rows.chunks_exact(dim).zip(&fast) {
            let want = nearest_k(&centres, dim, r, 3);
            // Same distances (rounding may swap a near-tie, never pick a farther row).
            for (g, w) in got.iter().zip(&want) {
                let dg = sq_dist(r, &centres[*g as usize * dim..][..dim]);
                let dw = sq_dist(r, &centres[*w as usize * dim..][..dim]);
                assert!((dg - dw).abs() <= 1e-5 * dw.max(1.0), "{got:?} vs {want:?}");
            }
        }
    }

    #[test]
    fn sampled_kmeans_is_deterministic_finds_clusters_and_assigns_to_the_nearest() {
        let dim = 5;
        let x = blobs(3_000, dim, 12, 4);
        let (c1, a1) = kmeans_sampled(&x, dim, 12, 9);
        assert_eq!((c1.clone(), a1.clone()), kmeans_sampled(&x, dim, 12, 9));
        // Each item sits with its nearest centroid.
        for (r, &a) in x.chunks_exact(dim).zip(&a1) {
            let best = nearest_centroid(&c1, dim, r);
            let (da, db) = (
                sq_dist(r, &c1[a as usize * dim..][..dim]),
                sq_dist(r, &c1[best as usize * dim..][..dim]),
            );
            assert!(da <= db + 1e-4, "{da} vs {db}");
        }
        // Points generated from the same centre share a cluster, most of the time (random
        // initialisation can split a blob when another pair shares a centroid).
        let same = (0..3_000).filter(|&i| a1[i] == a1[i % 12]).count();
        assert!(same >= 2_500, "{same}");
    }

    #[test]
    fn list_neighbours_agree_with_exact_on_clustered_data() {
        let dim = 4;
        let x = blobs(EXACT_NEIGHBOURS_MAX + 500, dim, 50, 5);
        let ivf = InvertedFile::for_gallery(&x, dim, 1).unwrap().unwrap();
        let by_list = ivf.neighbours_by_list(&x, dim, 4);
        let exact = gallery_neighbours(&x, dim, 4, 0..50, None).unwrap();
        let agree: usize = by_list[..50]
            .iter()
            .zip(&exact)
            .map(|(a, e)| a.iter().filter(|i| e.contains(i)).count())
            .sum();
        assert!(agree as f64 >= 0.95 * 200.0, "{agree}");
        assert!(by_list
            .iter()
            .enumerate()
            .all(|(i, nb)| nb.len() == 4 && !nb.contains(&(i as u32))));
    }

    #[test]
    fn held_out_probes_equal_the_pairwise_scan() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let (dim, n) = (16, 9000); // three gallery chunks
        let x: Vec<f32> = (0..n * dim).map(|_| rng.random::<f32>() - 0.5).collect();
        let mut probes = Vec::new();
        for i in 0..60 {
            let src = &x[(i * 149 % n) * dim..][..dim];
            // A copy, one at squared distance 4e-10 (a copy), one at 1.6e-9 (held out), a new point.
            let shift = [0.0, 2e-5, 4e-5][i % 4 % 3];
            if i % 4 == 3 {
                probes.extend((0..dim).map(|_| rng.random::<f32>() - 0.5));
            } else {
                probes.extend(
                    src.iter()
                        .enumerate()
                        .map(|(k, v)| v + if k == 0 { shift } else { 0.0 }),
                );
            }
        }
        let pairwise: Vec<usize> = probes
            .chunks_exact(dim)
            .enumerate()
            .filter(|(_, p)| x.chunks_exact(dim).all(|f| sq_dist(f, p) > 1e-9))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(pairwise.len(), 30, "the cases are what they say");
        assert_eq!(held_out_probes(&x, dim, &probes), pairwise);
    }

    #[test]
    fn nearest_k_many_equals_a_scan_per_query() {
        let mut rng = ChaCha8Rng::seed_from_u64(12);
        let (dim, n) = (16, 9000); // three row chunks
        let mut x: Vec<f32> = (0..n * dim).map(|_| rng.random::<f32>() - 0.5).collect();
        // Exact duplicates across chunks: ties the lower index must win.
        for (a, b) in [(10usize, 5000usize), (11, 8999), (4095, 4096)] {
            let row = x[a * dim..(a + 1) * dim].to_vec();
            x[b * dim..(b + 1) * dim].copy_from_slice(&row);
        }
        let mut queries: Vec<f32> = (0..40 * dim).map(|_| rng.random::<f32>() - 0.5).collect();
        queries.extend_from_slice(&x[5000 * dim..5001 * dim]);
        queries.extend_from_slice(&x[4096 * dim..4097 * dim]);
        let many = nearest_k_many(&x, dim, &queries, 8);
        for (q, got) in queries.chunks_exact(dim).zip(&many) {
            assert_eq!(got, &nearest_k(&x, dim, q, 8));
        }
        assert_eq!(many[40][..2], [10, 5000]);
        assert_eq!(
            nearest_k_many(&x[..3 * dim], dim, &queries[..dim], 8)[0].len(),
            3
        );
    }

    #[test]
    fn held_out_probes_skip_gallery_copies() {
        let x = blobs(50, 3, 5, 9);
        let mut probes = x[3..6].to_vec(); // item 1
        probes.extend_from_slice(&[9.0, 9.0, 9.0]);
        probes.extend_from_slice(&x[30..33]); // item 10
        assert_eq!(held_out_probes(&x, 3, &probes), vec![1]);
    }

    /// Unit-norm rows (as gallery features are).
    fn unit(mut x: Vec<f32>, dim: usize) -> Vec<f32> {
        for r in x.chunks_mut(dim) {
            let n = r.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-6);
            r.iter_mut().for_each(|v| *v /= n);
        }
        x
    }

    #[test]
    fn homes_are_the_clients_nearest_decoded_centroid() {
        use crate::centroids;
        let none = |blocks| LevelSpec {
            blocks,
            overlap: Overlap::None,
        };
        // Exact Lloyd (small) and the sampled path (above KMEANS_SAMPLE_ABOVE).
        for (n, dim, b) in [(2_000, 6, 24), (KMEANS_SAMPLE_ABOVE + 3_000, 4, 48)] {
            let x = unit(blobs(n, dim, 2 * b as usize, 11), dim);
            let level = build_level(&x, dim, none(b), 3, None).unwrap();
            // The level's centroids are exactly what the published file decodes to.
            let file = centroids::encode(&level.centroids, dim).unwrap();
            let (_, decoded) = centroids::decode(&file).unwrap();
            assert_eq!(
                decoded.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                level
                    .centroids
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>()
            );
            for (i, r) in x.chunks_exact(dim).enumerate() {
                assert_eq!(
                    level.home[i],
                    nearest_centroid(&decoded, dim, r),
                    "{n}: {i}"
                );
            }
            let spill = build_level(
                &x[..200 * dim],
                dim,
                LevelSpec {
                    blocks: 8,
                    overlap: Overlap::Spill(2),
                },
                3,
                None,
            )
            .unwrap();
            let (_, sd) =
                centroids::decode(&centroids::encode(&spill.centroids, dim).unwrap()).unwrap();
            for (i, r) in x[..200 * dim].chunks_exact(dim).enumerate() {
                for c in nearest_k(&sd, dim, r, 2) {
                    assert!(spill.members[c as usize].binary_search(&(i as u32)).is_ok());
                }
            }
        }
    }

    #[test]
    fn exact_assignment_breaks_near_ties_like_the_client() {
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        let dim = 16;
        let x = unit(
            (0..3_000 * dim)
                .map(|_| rng.random::<f32>() - 0.5)
                .collect(),
            dim,
        );
        // Centroids: copies (exact ties), near-copies and rows of x itself (distance 0).
        let mut c: Vec<f32> = x[..40 * dim].to_vec();
        c.extend_from_slice(&x[..10 * dim]);
        c.extend(x[10 * dim..20 * dim].iter().map(|v| v + 1e-7));
        let got = nearest_centroids_exact(&x, &c, dim);
        for (r, g) in x.chunks_exact(dim).zip(&got) {
            assert_eq!(*g, nearest_centroid(&c, dim, r));
        }
        // Fewer centroids than candidates: all of them compared.
        let few = &c[..3 * dim];
        let got = nearest_centroids_exact(&x, few, dim);
        for (r, g) in x.chunks_exact(dim).zip(&got) {
            assert_eq!(*g, nearest_centroid(few, dim, r));
        }
    }

    #[test]
    fn topk_orders_and_breaks_ties_by_id() {
        let mut t = TopK::new(3);
        for (d, i) in [(1.0, 5), (0.5, 9), (1.0, 2), (3.0, 1), (0.5, 4)] {
            t.push(d, i);
        }
        assert_eq!(t.into_ids(), vec![4, 9, 2]);
    }

    #[test]
    fn topk_ids_hold_no_spare_capacity() {
        // A million items keep their neighbour lists for the whole partition build.
        let mut t = TopK::new(192);
        for i in 0..1_000u32 {
            t.push(i as f32, i);
        }
        let ids = t.into_ids();
        assert_eq!(ids.len(), 192);
        assert_eq!(ids.capacity(), 192);
    }

    #[test]
    fn capped_levels_bound_every_block_and_keep_each_item_home() {
        let (n, dim, rows) = (2_000, 6, 300u32);
        // Five tight blobs of 400 items, unit-norm as the gallery's features (the centroids file
        // quantises within ±1): every starting cell is over half a block.
        let unit = |v: Vec<f32>| -> Vec<f32> {
            v.chunks(dim)
                .flat_map(|r| {
                    let norm = r.iter().map(|a| a * a).sum::<f32>().sqrt();
                    r.iter().map(move |a| a / norm)
                })
                .collect()
        };
        let x = unit(blobs(n, dim, 5, 3));
        let nb = gallery_neighbours(&x, dim, 32, 0..n, None).unwrap();
        let spec = LevelSpec {
            blocks: 4,
            overlap: Overlap::Capped { m: 32, rows },
        };
        let level = build_level(&x, dim, spec, 9, Some(&nb)).unwrap();
        let b = level.members.len();
        assert!(b > 4, "cells were split: {b} blocks");
        assert_eq!(level.spec.blocks as usize, b);
        assert_eq!(level.centroids.len(), b * dim);
        let mut own = vec![0usize; b];
        for (i, &h) in level.home.iter().enumerate() {
            assert_eq!(
                h,
                nearest_centroid(&level.centroids, dim, &x[i * dim..][..dim])
            );
            assert!(level.members[h as usize].binary_search(&(i as u32)).is_ok());
            own[h as usize] += 1;
        }
        assert!(own.iter().all(|&o| o <= rows as usize / 2), "{own:?}");
        for block in &level.members {
            assert!(block.len() <= rows as usize);
            assert!(block.windows(2).all(|w| w[0] < w[1]));
        }
        // Blocks were filled beyond their own cells, and the build is a function of its inputs.
        assert!(level.members.iter().zip(&own).any(|(m, &o)| m.len() > o));
        assert_eq!(build_level(&x, dim, spec, 9, Some(&nb)).unwrap(), level);
        // Filling only adds items: coverage is at least that of the bare cells.
        let probes = unit(blobs(200, dim, 5, 4));
        let truth: Vec<Vec<u32>> = probes
            .chunks(dim)
            .map(|p| nearest_k(&x, dim, p, 8))
            .collect();
        let mut cells = vec![Vec::new(); b];
        for (i, &h) in level.home.iter().enumerate() {
            cells[h as usize].push(i as u32);
        }
        let bare = Level {
            members: cells,
            ..level.clone()
        };
        let (capped, none) = (
            coverage(&level, dim, &probes, &truth).own,
            coverage(&bare, dim, &probes, &truth).own,
        );
        assert!(capped >= none && capped > 0.0, "{capped} {none}");
    }

    #[test]
    fn capped_blocks_take_the_items_nearest_their_cell_first() {
        // One dimension: cell 0 around 1.5, cell 1 around 8 (the bisector at 4.75).
        let x = [0.0f32, 1.0, 2.0, 3.0, 6.0, 9.0, 10.0];
        let centroids = [1.5f32, 8.0];
        let home = [0u32, 0, 0, 0, 1, 1, 1];
        let everyone: Vec<Vec<u32>> = (0..7u32)
            .map(|i| (0..7).filter(|&j| j != i).collect())
            .collect();
        let blocks = capped_members(&x, 1, &centroids, &home, &everyone, 6, 5);
        // Cell 0 has room for one more: 6.0 (1.25 past the bisector), not 9 or 10.
        assert_eq!(blocks[0], vec![0, 1, 2, 3, 4]);
        // Cell 1 has room for two: 3.0 then 2.0.
        assert_eq!(blocks[1], vec![2, 3, 4, 5, 6]);
        // With no neighbour lists at all, the items that have the cell among their nearest
        // centroids are still candidates.
        let none: Vec<Vec<u32>> = vec![Vec::new(); 7];
        assert_eq!(
            capped_members(&x, 1, &centroids, &home, &none, 0, 5),
            blocks
        );

        // Two dimensions: cell 0's region is cut short by centroid 3 at (1, 0), whose bisector
        // x = 0.5 the rule before (the item's own centroid's bisector only) did not see. Items
        // 2 at (8, 0) and 3 at (7, 6) both belong to centroid 1 at (5, 4). Past that bisector,
        // item 2 is nearer (3.05 against 6.01), but every point of cell 0 is at least 7.5 from
        // it (bisector with centroid 3) and only 6.5 from item 3: item 3 comes first.
        let centroids = [0.0f32, 0.0, 5.0, 4.0, 3.0, -6.0, 1.0, 0.0];
        let x = [-1.0f32, 0.0, -1.0, 1.0, 8.0, 0.0, 7.0, 6.0];
        let home = [0u32, 0, 1, 1];
        assert_eq!(nearest_centroids_exact(&x, &centroids, 2), home);
        let everyone: Vec<Vec<u32>> = (0..4u32)
            .map(|i| (0..4).filter(|&j| j != i).collect())
            .collect();
        let blocks = capped_members(&x, 2, &centroids, &home, &everyone, 3, 3);
        assert_eq!(blocks[0], vec![0, 1, 3]);
        // Room for both: both, in a block that comes out ascending.
        let blocks = capped_members(&x, 2, &centroids, &home, &everyone, 3, 4);
        assert_eq!(blocks[0], vec![0, 1, 2, 3]);
    }

    /// The bound [`capped_members`] ranks by is a lower bound on an item's distance to every
    /// point of the cell: on random data, no point homed in a cell is nearer an item of
    /// another cell than the largest of its bisector distances to the other centroids.
    #[test]
    fn the_bisector_bound_never_exceeds_the_distance_to_the_cell() {
        let dim = 3;
        let centroids = blobs(12, dim, 12, 21);
        let items = blobs(300, dim, 6, 22);
        let points = blobs(4000, dim, 12, 23);
        let home_of = |v: &[f32]| nearest_centroids_exact(v, &centroids, dim);
        let (item_home, point_home) = (home_of(&items), home_of(&points));
        let c = |i: u32| &centroids[i as usize * dim..][..dim];
        for (x, &hx) in items.chunks(dim).zip(&item_home) {
            for cell in (0..12u32).filter(|&k| k != hx) {
                let bound = (0..12u32)
                    .filter(|&h| h != cell)
                    .map(|h| {
                        (sq_dist(x, c(cell)) - sq_dist(x, c(h)))
                            / (2.0 * sq_dist(c(cell), c(h)).sqrt())
                    })
                    .fold(f32::NEG_INFINITY, f32::max);
                for (q, _) in points
                    .chunks(dim)
                    .zip(&point_home)
                    .filter(|(_, &h)| h == cell)
                {
                    assert!(sq_dist(x, q).sqrt() >= bound - 1e-3, "{bound}");
                }
            }
        }
    }

    #[test]
    fn cells_that_cannot_be_split_are_refused() {
        // Ten copies of one point cannot be cut into cells of three.
        let x = vec![0.5f32; 10 * 2];
        let centroids = crate::centroids::quantised(&[0.5, 0.5], 2).unwrap();
        let home = vec![0u32; 10];
        assert!(split_cells(&x, 2, centroids, home, 3, 1).is_err());
    }
}
