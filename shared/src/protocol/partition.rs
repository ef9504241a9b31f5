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
//! mechanism ([`crate::dp::subset`]) turns that into something the server sees.
//!
//! Cost: k-means is O(iterations·n·B·d) time, O(n + B·d) memory; neighbours are exact blocked
//! brute force up to [`EXACT_NEIGHBOURS_MAX`] items (O(n²·d) time, O(n·m) memory) and an
//! inverted-file search over a coarse k-means above it (O(n·probe·n/lists·d)). Approximate
//! neighbours only change which items a block holds — public data — never a ranking.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::params::limits;

/// How a level's blocks overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum Overlap {
    /// Each item only in its own cluster's block.
    None,
    /// Each item in the blocks of its `r` nearest centroids.
    Spill(u32),
    /// Each block also holds the `m` nearest gallery items of each member.
    Closure(u32),
}

impl Overlap {
    /// The evaluation's name for the variant: `none`, `spill-3`, `closure-16`.
    pub fn name(&self) -> String {
        match self {
            Overlap::None => "none".into(),
            Overlap::Spill(r) => format!("spill-{r}"),
            Overlap::Closure(m) => format!("closure-{m}"),
        }
    }
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
    /// `B × d`, row-major.
    pub centroids: Vec<f32>,
    /// Each item's own cluster.
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

/// The `k` nearest rows of `rows` (`n × d`) to `query`, nearest first, ties to the lower index.
pub fn nearest_k(rows: &[f32], dim: usize, query: &[f32], k: usize) -> Vec<u32> {
    let mut best = TopK::new(k);
    for (i, r) in rows.chunks_exact(dim).enumerate() {
        best.push(sq_dist(r, query), i as u32);
    }
    best.into_ids()
}

/// A bounded list of the `k` smallest `(distance, id)` pairs, ties to the lower id.
#[derive(Debug, Clone)]
pub struct TopK {
    k: usize,
    items: Vec<(f32, u32)>,
}

impl TopK {
    pub fn new(k: usize) -> Self {
        Self {
            k,
            items: Vec::with_capacity(k + 1),
        }
    }
    #[inline]
    pub fn push(&mut self, d: f32, id: u32) {
        if self.items.len() == self.k {
            let (wd, wid) = self.items[self.k - 1];
            if d > wd || (d == wd && id >= wid) {
                return;
            }
            self.items.pop();
        }
        let pos = self
            .items
            .partition_point(|&(bd, bid)| bd < d || (bd == d && bid < id));
        self.items.insert(pos, (d, id));
    }
    pub fn into_ids(self) -> Vec<u32> {
        self.items.into_iter().map(|(_, i)| i).collect()
    }
    pub fn into_pairs(self) -> Vec<(f32, u32)> {
        self.items
    }
}

/// Seeded k-means (k-means++ initialisation, then Lloyd): returns `(centroids, assignment)`.
/// Deterministic for a seed. Empty clusters are re-seeded with the point farthest from its
/// centroid, so every cluster ends non-empty when `k ≤ n`.
pub fn kmeans(features: &[f32], dim: usize, k: usize, seed: u64) -> Result<(Vec<f32>, Vec<u32>)> {
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
    let (centroids, home) = kmeans(features, dim, spec.blocks as usize, seed)?;
    let b = spec.blocks as usize;
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
            for (i, &h) in home.iter().enumerate() {
                let block = &mut members[h as usize];
                block.push(i as u32);
                block.extend_from_slice(&nb[i][..(m as usize).min(nb[i].len())]);
            }
        }
    }
    for block in &mut members {
        block.sort_unstable();
        block.dedup();
    }
    Ok(Level {
        spec,
        centroids,
        home,
        members,
    })
}

/// Indices of the `probes` (`p × d`) that are not copies of a gallery item (no gallery item
/// within squared distance 1e-9). Coverage must be measured on such held-out probes: a gallery
/// member's own neighbours sit in its block by construction under closure, so probes inside the
/// gallery overstate it.
pub fn held_out_probes(features: &[f32], dim: usize, probes: &[f32]) -> Vec<usize> {
    probes
        .chunks_exact(dim)
        .enumerate()
        .filter(|(_, p)| features.chunks_exact(dim).all(|f| sq_dist(f, p) > 1e-9))
        .map(|(i, _)| i)
        .collect()
}

/// How well a level's blocks hold their queries' neighbours, measured on probe points (the
/// server uses the public anchors, never a query).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Coverage {
    /// Mean share of a probe's true top-k gallery items inside its own block.
    pub own: f64,
    /// Mean share inside one other block, averaged over the other blocks.
    pub other: f64,
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
    fn held_out_probes_skip_gallery_copies() {
        let x = blobs(50, 3, 5, 9);
        let mut probes = x[3..6].to_vec(); // item 1
        probes.extend_from_slice(&[9.0, 9.0, 9.0]);
        probes.extend_from_slice(&x[30..33]); // item 10
        assert_eq!(held_out_probes(&x, 3, &probes), vec![1]);
    }

    #[test]
    fn topk_orders_and_breaks_ties_by_id() {
        let mut t = TopK::new(3);
        for (d, i) in [(1.0, 5), (0.5, 9), (1.0, 2), (3.0, 1), (0.5, 4)] {
            t.push(d, i);
        }
        assert_eq!(t.into_ids(), vec![4, 9, 2]);
    }
}
