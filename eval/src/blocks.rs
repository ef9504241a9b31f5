//! `eval --blocks`: private block retrieval (`shared/spec/blocks.md`, issue #12 point 7).
//!
//! Gallery: the first 10,000 test images (the server's demo gallery), and — for the large run —
//! the test split then the first 59,000 training images (69,000, as the server seeds it).
//! Queries: held-out training images, outside every gallery and outside the public anchors
//! (the server's: the first `--anchors` class-balanced training images), the same queries for
//! both galleries. Features: the on-device model's, as the server computes them.
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

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use rand_chacha::ChaCha20Rng;
use rayon::prelude::*;
use shared::api::LevelDoc;
use shared::dp::subset::{inclusion_probability, release};
use shared::embed::model::Model;
use shared::metrics::{average_precision, recall_at_k};
use shared::protocol::blocks::{decode, encode, rank, BlockItem};
use shared::protocol::frame::{privatize_in_frame, AnchorFrame, DEFAULT_KERNEL_SCALE};
use shared::protocol::partition::{
    build_level, gallery_neighbours, held_out_probes, kmeans, nearest_centroid, nearest_k,
    InvertedFile, Level, LevelSpec, Overlap, TopK,
};
use shared::protocol::plan::candidates;
use shared::protocol::publish::{
    default_specs, document, publish_level, publish_whole, GalleryView, Thumbnails, COVERAGE_K,
};
use shared::protocol::retrieve::{full_ranking, gallery_rows, posterior_ranking, LabelledRows};
use shared::{DMatrix, Params, PrivacyParams};

use privatemail_server::gallery::data::{load_split, Split};
use privatemail_server::state::balanced_anchors;
use privatemail_server::MODEL_WEIGHTS;

use super::blocks_plot;
use crate::args::Args;
use crate::rng::query_rng;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// k of fidelity@k, Recall@k and mAP@k (the published coverage's k).
const K: usize = COVERAGE_K;
/// ε of the 10,000 gallery, and of the large one.
pub const EPSILONS: [f64; 5] = [1.0, 2.0, 4.0, 6.0, 8.0];
pub const LARGE_EPSILONS: [f64; 3] = [4.0, 6.0, 8.0];
/// Fidelity targets of the issue.
pub const TARGETS: [f64; 3] = [0.95, 0.90, 0.85];
/// Pool fractions of the frame-release pools.
const FRAME_FRACTIONS: [f64; 5] = [0.05, 0.12, 0.3, 0.55, 0.83];
/// Length of each query's precomputed exact ranking (the pool's top 8 are found by walking it;
/// a full scan of the pool when it holds fewer than 8 of them).
const NEAR_M: usize = 1024;
/// Thumbnail side (the 28×28 image itself).
const THUMB: usize = 28;
/// Queries re-ranked over decoded block files per chosen point.
const QUANT_QUERIES: usize = 100;
/// Test-split size: the small gallery.
const SMALL: usize = 10_000;

/// The reference curve: the least expected share of blocks any symmetric
/// randomized-response-type mechanism must release to hold the true block with probability P.
pub fn reference_pool(p: f64, eps: f64) -> f64 {
    p / (p + eps.exp() * (1.0 - p))
}

/// The lower bound for any ε-DP pool: P·e^(−ε).
pub fn reference_lower(p: f64, eps: f64) -> f64 {
    p * (-eps).exp()
}

fn parse_overlap(s: &str) -> Res<Overlap> {
    let bad = || format!("unknown variant {s:?} (none, spill-R, closure-M)");
    if s == "none" {
        return Ok(Overlap::None);
    }
    let (kind, v) = s.split_once('-').ok_or_else(bad)?;
    let v: u32 = v.parse().map_err(|_| bad())?;
    match kind {
        "spill" if v > 0 => Ok(Overlap::Spill(v)),
        "closure" if v > 0 => Ok(Overlap::Closure(v)),
        _ => Err(bad().into()),
    }
}

#[inline]
fn sq_dist(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// Model features of images `idx` of a split, flat (unit rows, as the server stores them).
fn infer(model: &Model, split: &Split, idx: &[usize]) -> Res<Vec<f32>> {
    let rows: Vec<Vec<f32>> = idx
        .par_iter()
        .map(|&i| model.infer(split.images.image(i)).map(|r| r.features))
        .collect::<Result<_, _>>()?;
    Ok(rows.concat())
}

/// One gallery: ids (= index, as the server numbers the demo gallery), labels, features,
/// thumbnails.
pub struct Gallery {
    ids: Vec<u64>,
    labels: Vec<u8>,
    features: Vec<f32>,
    thumbs: Vec<u8>,
    dim: usize,
}

impl Gallery {
    fn n(&self) -> usize {
        self.ids.len()
    }
    fn row(&self, i: usize) -> &[f32] {
        &self.features[i * self.dim..(i + 1) * self.dim]
    }
    fn view(&self) -> GalleryView<'_> {
        GalleryView {
            ids: &self.ids,
            labels: &self.labels,
            features: &self.features,
            dim: self.dim,
            thumbnails: Thumbnails::Packed(&self.thumbs),
            thumb_side: THUMB,
        }
    }
}

/// Held-out queries and the public anchors.
struct Ctx<'a> {
    args: &'a Args,
    dim: usize,
    q_features: Vec<f32>,
    q_labels: Vec<u8>,
    a_features: Vec<f32>,
    a_labels: Vec<u32>,
    t0: Instant,
}

impl Ctx<'_> {
    fn nq(&self) -> usize {
        self.q_labels.len()
    }
    fn query(&self, q: usize) -> &[f32] {
        &self.q_features[q * self.dim..(q + 1) * self.dim]
    }
    fn log(&self, msg: impl AsRef<str>) {
        eprintln!(
            "[blocks {:>6.1} s] {}",
            self.t0.elapsed().as_secs_f64(),
            msg.as_ref()
        );
    }
}

/// Per-L coefficients of a level: every expectation is `p·(…in) + (1 − p)·(…out)`.
#[derive(Debug, Clone, Copy, Default)]
struct Coef {
    /// Fidelity given the true block is released / is not.
    f_in: f64,
    f_out: f64,
    /// Pool fraction given in / out.
    a_in: f64,
    a_out: f64,
    /// Transfer bytes given in / out.
    b_in: f64,
    b_out: f64,
}

/// One evaluated level (B, variant).
struct LevelEval {
    spec: LevelSpec,
    members: Vec<Vec<u32>>,
    /// Blocks holding each item (CSR).
    offsets: Vec<u32>,
    lists: Vec<u32>,
    /// `coef[L − 1]`.
    coef: Vec<Coef>,
    doc: LevelDoc,
    /// Each query's true block (its nearest centroid).
    true_block: Vec<u32>,
}

impl LevelEval {
    fn blocks_of(&self, i: usize) -> &[u32] {
        &self.lists[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
}

/// One (level, L) at one ε.
#[derive(Debug, Clone)]
pub struct Point {
    pub eps: f64,
    pub level: usize,
    pub variant: String,
    pub blocks: u32,
    pub size: u32,
    pub pool: f64,
    pub fidelity: f64,
    pub miss: f64,
    pub kib: f64,
    pub predicted: f64,
    /// Monte Carlo: [fidelity, Recall@8, mAP@8] of the returned page.
    pub mc: Option<[f64; 3]>,
    /// Quantised check: (top-8 identical share, fidelity with decoded blocks, fast-path
    /// fidelity on the same searches, searches).
    pub quant: Option<(f64, f64, f64, usize)>,
}

/// A frame-release pool row.
#[derive(Debug, Clone)]
pub struct FramePoint {
    pub eps: f64,
    pub ranking: &'static str,
    pub fraction: f64,
    /// [fidelity, Recall@8, mAP@8].
    pub m: [f64; 3],
    pub kib: f64,
}

/// Everything one gallery's run produced.
pub struct GalleryResult {
    pub n: usize,
    pub suffix: String,
    pub eps: Vec<f64>,
    pub variants: Vec<String>,
    /// Overall Pareto points per ε (MC filled).
    pub pareto: Vec<(f64, Vec<Point>)>,
    /// Per variant, per ε: its own Pareto front.
    pub variant_pareto: Vec<(String, f64, Vec<Point>)>,
    /// (ε, target) → least-pool point overall.
    pub least: Vec<(f64, f64, Option<Point>)>,
    /// (variant, ε, target) → least pool of that variant.
    pub variant_least: Vec<(String, f64, f64, Option<Point>)>,
    pub frame: Vec<FramePoint>,
    /// Download everything: (kib, [fidelity, Recall@8, mAP@8] with the quantised ranking).
    pub whole: (f64, [f64; 3]),
    /// (variant, B, own coverage exact on the queries, true block share, anchors' coverage).
    pub own: Vec<(String, u32, f64, f64, f64)>,
    pub mc_searches: usize,
    /// (ε, target) → least pool with the server's current default levels
    /// (`publish::default_specs`), when they were evaluated.
    pub default_least: Vec<(f64, f64, Option<Point>)>,
    /// The current default levels, by name.
    pub default_name: String,
    /// Public anchors that are themselves items of this gallery.
    pub anchors_in_gallery: usize,
}

pub fn run(args: &Args) -> Res<()> {
    let t0 = Instant::now();
    let test = load_split(&args.data_dir, "t10k")?;
    let train = load_split(&args.data_dir, "train")?;
    let model = Model::from_bytes(MODEL_WEIGHTS)?;
    let anchor_idx = balanced_anchors(&train, args.anchors);
    let anchor_set: HashSet<usize> = anchor_idx.iter().copied().collect();
    let small_n = SMALL.min(test.labels.len());
    let extra = args
        .blocks_large
        .saturating_sub(small_n)
        .min(train.labels.len());
    let query_idx: Vec<usize> = (extra..train.labels.len())
        .filter(|i| !anchor_set.contains(i))
        .take(args.blocks_queries)
        .collect();
    if query_idx.len() < args.blocks_queries {
        eprintln!(
            "eval --blocks: only {} held-out training images remain outside the galleries and anchors",
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
        if extra > 0 { format!(" and {} (test + training 0..{extra})", small_n + extra) } else { String::new() },
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
    let q_features = infer(&model, &train, &query_idx)?;
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
    let large_res = if extra > 0 {
        log(&format!("model features: training 0..{extra}"));
        let train_idx: Vec<usize> = (0..extra).collect();
        let train_feats = infer(&model, &train, &train_idx)?;
        let mut g = small;
        g.ids = (0..(small_n + extra) as u64).collect();
        g.labels.extend_from_slice(&train.labels[..extra]);
        g.features.extend_from_slice(&train_feats);
        drop(train_feats);
        for i in 0..extra {
            g.thumbs.extend_from_slice(train.images.image(i));
        }
        let suffix = format!("-{}k", (small_n + extra) / 1000);
        let mut r = eval_gallery(&ctx, &g, &LARGE_EPSILONS, &large_variants, &suffix)?;
        r.anchors_in_gallery = anchor_idx.iter().filter(|&&i| i < extra).count();
        Some(r)
    } else {
        None
    };
    let results: Vec<&GalleryResult> = std::iter::once(&small_res)
        .chain(large_res.as_ref())
        .collect();
    std::fs::create_dir_all(&args.out)?;
    write_csv(&args.out.join("blocks.csv"), &results)?;
    blocks_plot::plot(&args.out.join("blocks.svg"), &results)?;
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

/// The `m` nearest gallery rows to `query`, nearest first, ties to the lower index (the same
/// order as `partition::nearest_k`).
fn exact_top(rows: &[f32], dim: usize, query: &[f32], m: usize) -> Vec<u32> {
    let mut d: Vec<(f32, u32)> = rows
        .chunks_exact(dim)
        .enumerate()
        .map(|(i, r)| (sq_dist(r, query), i as u32))
        .collect();
    let cmp = |a: &(f32, u32), b: &(f32, u32)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
    let m = m.min(d.len());
    if m < d.len() {
        d.select_nth_unstable_by(m, cmp);
        d.truncate(m);
    }
    d.sort_unstable_by(cmp);
    d.into_iter().map(|(_, i)| i).collect()
}

/// `q(c) = C(B−1−c, K)/C(B−1, K)` for c = 0..B: the chance that K blocks drawn uniformly from
/// the B − 1 non-true blocks miss c given ones.
fn miss_probs(b: usize, k: usize) -> Vec<f64> {
    let mut q = vec![0.0; b + 1];
    if k > b - 1 {
        return q;
    }
    q[0] = 1.0;
    for c in 0..b {
        let num = (b - 1) as f64 - k as f64 - c as f64;
        let den = (b - 1) as f64 - c as f64;
        q[c + 1] = if num > 0.0 && den > 0.0 {
            q[c] * num / den
        } else {
            0.0
        };
    }
    q
}

/// The top 8 of the pool in the exact ranking: walk the query's precomputed ranking, then —
/// if the pool holds fewer than 8 of those — rank the pool's items (`pool_items`, duplicates
/// allowed) by exact distance.
fn page(
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
fn page_metrics(
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

fn add3(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}

/// A stable tag for a point's RNG stream.
fn tag(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn eval_gallery(
    ctx: &Ctx,
    g: &Gallery,
    eps_list: &[f64],
    variants: &[Overlap],
    suffix: &str,
) -> Res<GalleryResult> {
    let (n, dim, nq) = (g.n(), ctx.dim, ctx.nq());
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
    // Coverage probes as the server picks them: the anchors outside this gallery when at least
    // 100 are (else all of them, flagged with coverage_probes = 0 in the document).
    let held = held_out_probes(&g.features, dim, &ctx.a_features);
    let (probe_features, coverage_probes): (Vec<f32>, usize) = if held.len() >= 100 {
        let p = held
            .iter()
            .flat_map(|&i| ctx.a_features[i * dim..(i + 1) * dim].iter().copied())
            .collect();
        (p, held.len())
    } else {
        (ctx.a_features.clone(), 0)
    };
    let anchor_truth: Vec<Vec<u32>> = probe_features
        .par_chunks(dim)
        .map(|a| nearest_k(&g.features, dim, a, K))
        .collect();
    let mut class_count = [0usize; 256];
    for &l in &g.labels {
        class_count[l as usize] += 1;
    }

    // Neighbours for closure.
    let m_max = variants
        .iter()
        .filter_map(|v| match v {
            Overlap::Closure(m) => Some(*m as usize),
            _ => None,
        })
        .max();
    let neighbours: Option<Vec<Vec<u32>>> = match m_max {
        Some(m) => {
            let ivf = InvertedFile::for_gallery(&g.features, dim, seed)?;
            ctx.log(format!(
                "gallery {n}: {m} nearest gallery items of every item ({})",
                if ivf.is_some() {
                    "inverted file"
                } else {
                    "exact"
                }
            ));
            let chunks: Vec<std::ops::Range<usize>> =
                (0..n).step_by(256).map(|s| s..(s + 256).min(n)).collect();
            let parts: Vec<Vec<Vec<u32>>> = chunks
                .into_par_iter()
                .map(|r| gallery_neighbours(&g.features, dim, m, r, ivf.as_ref()))
                .collect::<Result<_, _>>()?;
            Some(parts.concat())
        }
        None => None,
    };

    // One k-means per B, shared by the variants (build_level would recompute it per variant).
    let bs: Vec<u32> = args
        .blocks_levels
        .iter()
        .copied()
        .filter(|&b| b >= 2 && (b as usize) <= n)
        .collect();
    ctx.log(format!("gallery {n}: k-means at B = {bs:?}"));
    let km: Vec<(Vec<f32>, Vec<u32>)> = bs
        .par_iter()
        .map(|&b| kmeans(&g.features, dim, b as usize, seed))
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
            }
        }
        for block in &mut members {
            block.sort_unstable();
            block.dedup();
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
            // Blocks of every item.
            let mut mult = vec![0u32; n];
            for block in &members {
                for &i in block {
                    mult[i as usize] += 1;
                }
            }
            let mut offsets = vec![0u32; n + 1];
            for i in 0..n {
                offsets[i + 1] = offsets[i] + mult[i];
            }
            let mut lists = vec![0u32; offsets[n] as usize];
            let mut fill = offsets.clone();
            for (bx, block) in members.iter().enumerate() {
                for &i in block {
                    lists[fill[i as usize] as usize] = bx as u32;
                    fill[i as usize] += 1;
                }
            }
            // Query weight of each true block.
            let mut w = vec![0f64; b];
            for &x in &true_block[bi] {
                w[x as usize] += 1.0 / nq as f64;
            }
            // Items by multiplicity, and weighted by the true block holding them.
            let mut h = vec![0f64; b + 1];
            for &m in &mult {
                h[m as usize] += 1.0;
            }
            let mut gw = vec![0f64; b + 1];
            for (x, block) in members.iter().enumerate() {
                if w[x] > 0.0 {
                    for &i in block {
                        gw[mult[i as usize] as usize] += w[x];
                    }
                }
            }
            // Items in x with c others (w1[c]), not in x with c holders (w0[c]).
            let w1: Vec<f64> = (0..=b)
                .map(|c| if c < b { gw[c + 1] } else { 0.0 })
                .collect();
            let w0: Vec<f64> = (0..=b).map(|c| h[c] - gw[c]).collect();
            // Truth pairs.
            let (mut t1, mut t0) = (vec![0f64; b + 1], vec![0f64; b + 1]);
            for (q, tr) in truth.iter().enumerate() {
                let x = true_block[bi][q];
                for &i in tr.iter() {
                    let bl = &lists[offsets[i as usize] as usize..offsets[i as usize + 1] as usize];
                    if bl.binary_search(&x).is_ok() {
                        t1[bl.len() - 1] += 1.0;
                    } else {
                        t0[bl.len()] += 1.0;
                    }
                }
            }
            let pairs = (nq * K) as f64;
            let tb: Vec<f64> = doc.transfer_bytes.iter().map(|&v| v as f64).collect();
            let total: f64 = tb.iter().sum();
            let wb: f64 = (0..b).map(|x| w[x] * tb[x]).sum();
            let coef = (1..=b)
                .map(|l| {
                    let qin = miss_probs(b, l - 1);
                    let qout = miss_probs(b, l);
                    let (mut f_in, mut f_out, mut a_in, mut a_out) = (0.0, 0.0, 0.0, 0.0);
                    for c in 0..=b {
                        f_in += t1[c] + t0[c] * (1.0 - qin[c]);
                        f_out += (t1[c] + t0[c]) * (1.0 - qout[c]);
                        a_in += w1[c] + w0[c] * (1.0 - qin[c]);
                        a_out += (w1[c] + w0[c]) * (1.0 - qout[c]);
                    }
                    let others = (total - wb) / (b - 1) as f64;
                    Coef {
                        f_in: f_in / pairs,
                        f_out: f_out / pairs,
                        a_in: a_in / n as f64,
                        a_out: a_out / n as f64,
                        b_in: wb + (l - 1) as f64 * others,
                        b_out: l as f64 * others,
                    }
                })
                .collect();
            Ok(LevelEval {
                spec,
                members,
                offsets,
                lists,
                coef,
                doc,
                true_block: true_block[bi].clone(),
            })
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

/// The issue's targets: (ε, fidelity, largest pool).
pub const ISSUE_TARGETS: [(f64, f64, f64); 4] = [
    (8.0, 0.95, 0.05),
    (6.0, 0.95, 0.12),
    (4.0, 0.90, 0.30),
    (2.0, 0.85, 0.55),
];

/// How many of the issue's targets a variant meets on its own (of those whose ε was run).
fn targets_met(r: &GalleryResult, v: &str) -> (usize, usize) {
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
fn pareto_front(mut pts: Vec<Point>) -> Vec<Point> {
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
fn thin(front: Vec<Point>, keep: &[Point]) -> Vec<Point> {
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
fn least_reaching(pts: &[Point], t: f64) -> Option<Point> {
    pts.iter()
        .filter(|p| p.fidelity >= t)
        .min_by(|a, b| {
            a.pool
                .total_cmp(&b.pool)
                .then(b.fidelity.total_cmp(&a.fidelity))
        })
        .cloned()
}

fn point_rng(ctx: &Ctx, q: usize, p: &Point, suffix: &str) -> ChaCha20Rng {
    let t = tag(&format!("{suffix}|{}|{}|{}", p.variant, p.blocks, p.size));
    query_rng(ctx.args.seed, q, t, p.eps)
}

/// The items of the released blocks (with repeats).
fn pool_of(lv: &LevelEval, set: &[u32]) -> Vec<u32> {
    set.iter()
        .flat_map(|&s| lv.members[s as usize].iter().copied())
        .collect()
}

/// The real mechanism, `draws` releases per query: mean [fidelity, Recall@8, mAP@8].
#[allow(clippy::too_many_arguments)]
fn monte_carlo(
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
fn quantised(
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

/// Pools from the Gaussian anchor-frame release at the same ε (δ from `--delta`, the eval's
/// mechanism): the first `fraction·N` gallery items by distance to the released row, or by the
/// class-posterior ranking; the client then ranks the pool exactly.
fn frame_pools(
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

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or(String::new(), |x| format!("{x:.prec$}"))
}

/// One CSV row's writer: method, ε, B, partition, L, pool, fidelity, Recall@8, mAP@8, miss
/// rate, KiB.
type RowWriter<'a> = dyn FnMut(
        &str,
        Option<f64>,
        Option<u32>,
        &str,
        Option<u32>,
        f64,
        f64,
        Option<f64>,
        Option<f64>,
        Option<f64>,
        Option<f64>,
    ) + 'a;

/// A block-retrieval point's row with the given fidelity column (measured or predicted) and,
/// with `mc`, its Monte Carlo Recall@8 and mAP@8.
fn point_row(row: &mut RowWriter<'_>, method: &str, eps: f64, p: &Point, fid: f64, mc: bool) {
    let (recall, map) = if mc {
        let m = p.mc.unwrap_or([f64::NAN; 3]);
        (Some(m[1]), Some(m[2]))
    } else {
        (None, None)
    };
    row(
        method,
        Some(eps),
        Some(p.blocks),
        &p.variant,
        Some(p.size),
        p.pool,
        fid,
        recall,
        map,
        Some(p.miss),
        Some(p.kib),
    );
}

fn write_csv(path: &Path, results: &[&GalleryResult]) -> std::io::Result<()> {
    let mut out = String::from(
        "method,epsilon,blocks,partition,released,pool_fraction,fidelity_at_8,recall_at_8,map_at_8,miss_rate,kib_per_search\n",
    );
    let mut row = |method: &str,
                   eps: Option<f64>,
                   blocks: Option<u32>,
                   partition: &str,
                   released: Option<u32>,
                   pool: f64,
                   fid: f64,
                   recall: Option<f64>,
                   map: Option<f64>,
                   miss: Option<f64>,
                   kib: Option<f64>| {
        let _ = writeln!(
            out,
            "{method},{},{},{partition},{},{pool:.6},{fid:.5},{},{},{},{}",
            opt(eps, 0),
            blocks.map_or(String::new(), |b| b.to_string()),
            released.map_or(String::new(), |b| b.to_string()),
            opt(recall, 5),
            opt(map, 5),
            opt(miss, 6),
            opt(kib, 1),
        );
    };
    for r in results {
        let s = &r.suffix;
        for (eps, pts) in &r.pareto {
            for p in pts {
                point_row(&mut row, &format!("blocks{s}"), *eps, p, p.fidelity, true);
            }
            for p in pts {
                point_row(
                    &mut row,
                    &format!("blocks{s}-predicted"),
                    *eps,
                    p,
                    p.predicted,
                    false,
                );
            }
        }
        for (eps, t, p) in &r.least {
            if let Some(p) = p {
                point_row(
                    &mut row,
                    &format!("blocks{s}-least-{t:.2}"),
                    *eps,
                    p,
                    p.fidelity,
                    true,
                );
            }
        }
        for (v, eps, pts) in &r.variant_pareto {
            for p in pts {
                row(
                    &format!("blocks{s}-variant"),
                    Some(*eps),
                    Some(p.blocks),
                    v,
                    Some(p.size),
                    p.pool,
                    p.fidelity,
                    None,
                    None,
                    Some(p.miss),
                    Some(p.kib),
                );
            }
        }
        for f in &r.frame {
            row(
                &format!("frame-pool-{}{s}", f.ranking),
                Some(f.eps),
                None,
                "",
                None,
                f.fraction,
                f.m[0],
                Some(f.m[1]),
                Some(f.m[2]),
                None,
                Some(f.kib),
            );
        }
        let (kib, m) = r.whole;
        row(
            &format!("download-all{s}"),
            None,
            Some(1),
            "whole",
            Some(1),
            1.0,
            m[0],
            Some(m[1]),
            Some(m[2]),
            Some(0.0),
            Some(kib),
        );
    }
    for &eps in &EPSILONS {
        for &t in &TARGETS {
            row(
                "reference",
                Some(eps),
                None,
                "",
                None,
                reference_pool(t, eps),
                t,
                None,
                None,
                Some(1.0 - t),
                None,
            );
            row(
                "reference-lower",
                Some(eps),
                None,
                "",
                None,
                reference_lower(t, eps),
                t,
                None,
                None,
                None,
                None,
            );
        }
    }
    std::fs::write(path, out)
}

/// The report: stdout and `blocks.md` (markdown tables).
fn report(results: &[&GalleryResult], args: &Args, secs: f64) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# Private block retrieval — evaluation (generated by `eval --blocks`)\n"
    );
    let _ = writeln!(
        o,
        "{} held-out queries (training images outside every gallery and the {} public anchors); fidelity@8, miss rate, pool and KiB/search are exact expectations over the k-subset mechanism; Recall@8, mAP@8 and the Monte Carlo fidelity use {} release(s) per query and point (the real `dp::subset::release`, seeded ChaCha20); the quantised check re-ranks the first {} queries (one release each) over encoded and decoded block files with `blocks::rank`. Frame-release pools: {} frame release(s) per query, δ = {}. Seed {}. Total {:.0} s.\n",
        args.blocks_queries, args.anchors, args.blocks_draws, QUANT_QUERIES, args.blocks_frame_draws, args.delta, args.seed, secs
    );
    for r in results {
        let _ = writeln!(
            o,
            "## Gallery {} — least expected pool reaching each fidelity target\n",
            r.n
        );
        let _ = writeln!(o, "Ratio: pool ÷ the reference P/(P + e^ε(1 − P)) at P = the target. Pred.: `plan::candidates` on the published document (coverage on the anchors). MC: Monte Carlo fidelity of the returned page. Quant. / f32: fidelity of the page ranked by `blocks::rank` over decoded i16 block files, and of the exact f32 page, on the same {QUANT_QUERIES} searches (one release for each of the first queries), with the share of identical pages. Pareto rows in the CSV: the front over every (variant, B, L), thinned to fidelity steps ≥ {THIN_STEP} (plus the points below).\n");
        let _ = writeln!(o, "| ε | target | variant | B | L | pool | fidelity | pred. | MC | quant. / f32 (same page) | miss | ratio to ref. | KiB/search | Recall@8 | mAP@8 |");
        let _ = writeln!(
            o,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for (eps, t, p) in &r.least {
            match p {
                Some(p) => {
                    let mc = p.mc.unwrap_or([f64::NAN; 3]);
                    let qt = p.quant.unwrap_or((f64::NAN, f64::NAN, f64::NAN, 0));
                    let _ = writeln!(
                        o,
                        "| {eps} | {t:.2} | {} | {} | {} | {:.2} % | {:.4} | {:.4} | {:.4} | {:.3} / {:.3} ({:.0} %) | {:.4} | {:.2} | {:.0} | {:.3} | {:.3} |",
                        p.variant, p.blocks, p.size, 100.0 * p.pool, p.fidelity, p.predicted, mc[0], qt.1, qt.2, 100.0 * qt.0,
                        p.miss, p.pool / reference_pool(*t, *eps), p.kib, mc[1], mc[2]
                    );
                }
                None => {
                    let _ = writeln!(
                        o,
                        "| {eps} | {t:.2} | – (not reached) | | | | | | | | | | | | |"
                    );
                }
            }
        }
        let (kib, m) = r.whole;
        let _ = writeln!(
            o,
            "\nDownload everything: {kib:.0} KiB, fidelity@8 {:.4} with the quantised ranking (Recall@8 {:.3}, mAP@8 {:.3}). Monte Carlo searches: {}.\n",
            m[0], m[1], m[2], r.mc_searches
        );
        // Predicted against exact over the listed Pareto points.
        let _ = writeln!(o, "Predicted (`plan::candidates`, coverage on the public anchors) minus exact fidelity@8 over the listed Pareto points:\n");
        let _ = writeln!(
            o,
            "| ε | points | mean | mean abs. | max abs. |\n|---|---|---|---|---|"
        );
        for (eps, pts) in &r.pareto {
            let d: Vec<f64> = pts
                .iter()
                .filter(|p| p.predicted.is_finite())
                .map(|p| p.predicted - p.fidelity)
                .collect();
            let m = d.len().max(1) as f64;
            let _ = writeln!(
                o,
                "| {eps} | {} | {:+.4} | {:.4} | {:.4} |",
                d.len(),
                d.iter().sum::<f64>() / m,
                d.iter().map(|x| x.abs()).sum::<f64>() / m,
                d.iter().fold(0.0f64, |a, x| a.max(x.abs()))
            );
        }
        if r.anchors_in_gallery > 0 {
            let _ = writeln!(
                o,
                "\nNote: {} of the public anchors are themselves items of this gallery (the server seeds it with the training split, where the anchors come from), so the coverage measured on them — each anchor finds itself and, under closure, its own neighbours in its block — overstates what a held-out photo gets, and the prediction runs high.",
                r.anchors_in_gallery
            );
        }
        let _ = writeln!(o);
        // The server's current default levels.
        if !r.default_least.is_empty() {
            let _ = writeln!(
                o,
                "With the server's current default levels only ({}):\n",
                r.default_name
            );
            let _ = writeln!(o, "| ε | target | B | L | pool | fidelity | miss | KiB/search |\n|---|---|---|---|---|---|---|---|");
            for (eps, t, p) in &r.default_least {
                if let Some(p) = p {
                    let _ = writeln!(
                        o,
                        "| {eps} | {t:.2} | {} | {} | {:.2} % | {:.4} | {:.4} | {:.0} |",
                        p.blocks,
                        p.size,
                        100.0 * p.pool,
                        p.fidelity,
                        p.miss,
                        p.kib
                    );
                }
            }
            let _ = writeln!(o);
        }
        // Variant comparison.
        let _ = writeln!(o, "### Variants: least pool per (ε, target)\n");
        let mut head = String::from("| variant |");
        let mut sep = String::from("|---|");
        for &eps in &r.eps {
            for &t in &TARGETS {
                let _ = write!(head, " ε={eps} ≥{t:.2} |");
                sep.push_str("---|");
            }
        }
        let _ = writeln!(
            o,
            "{head} geo-mean | best in | issue targets met |\n{sep}---|---|---|"
        );
        let cells = r.eps.len() * TARGETS.len();
        let mut best_count: HashMap<&str, usize> = HashMap::new();
        for &eps in &r.eps {
            for &t in &TARGETS {
                let best = r
                    .variant_least
                    .iter()
                    .filter(|(_, e, tt, p)| *e == eps && *tt == t && p.is_some())
                    .min_by(|a, b| {
                        a.3.as_ref()
                            .unwrap()
                            .pool
                            .total_cmp(&b.3.as_ref().unwrap().pool)
                    });
                if let Some((v, ..)) = best {
                    *best_count.entry(v.as_str()).or_default() += 1;
                }
            }
        }
        let ranking = rank_variants(r);
        for v in &r.variants {
            let mut line = format!("| {v} |");
            for (_, _, _, p) in r.variant_least.iter().filter(|x| &x.0 == v) {
                match p {
                    Some(p) => {
                        let _ = write!(
                            line,
                            " {:.2} % (B {} L {}) |",
                            100.0 * p.pool,
                            p.blocks,
                            p.size
                        );
                    }
                    None => line.push_str(" – |"),
                }
            }
            let gm = ranking.iter().find(|x| &x.0 == v).map_or(f64::NAN, |x| x.1);
            let met = targets_met(r, v);
            let _ = writeln!(
                o,
                "{line} {:.2} % | {}/{cells} | {} |",
                100.0 * gm,
                best_count.get(v.as_str()).copied().unwrap_or(0),
                if met.1 == 0 {
                    "–".to_string()
                } else {
                    format!("{}/{}", met.0, met.1)
                }
            );
        }
        if let Some((best, gm)) = ranking.first() {
            let spill = ranking.iter().find(|(v, _)| v.starts_with("spill"));
            let closure = ranking.iter().find(|(v, _)| v.starts_with("closure"));
            let _ = writeln!(
                o,
                "\nBest overall (smallest geometric-mean least pool over the cells): **{best}** ({:.2} %); best spill: {}; best closure: {}.\n",
                100.0 * gm,
                spill.map_or("–".into(), |(v, g)| format!("{v} ({:.2} %)", 100.0 * g)),
                closure.map_or("–".into(), |(v, g)| format!("{v} ({:.2} %)", 100.0 * g)),
            );
            // Which B the best variant uses.
            let mut bs: Vec<u32> = r
                .variant_least
                .iter()
                .filter(|x| &x.0 == best)
                .filter_map(|x| x.3.as_ref().map(|p| p.blocks))
                .collect();
            bs.sort_unstable();
            bs.dedup();
            let _ = writeln!(o, "Levels B used by {best}'s least-pool points: {bs:?}.\n");
        }
        // The true block alone.
        let _ = writeln!(
            o,
            "### The true block alone (no privacy: L = 1 and the true block released)\n"
        );
        let _ = writeln!(o, "Share of the queries' true 8-NN in their own block (exact, held-out queries) / block share of the gallery / the published coverage on the anchors.\n");
        let bset: Vec<u32> = {
            let mut v: Vec<u32> = r.own.iter().map(|x| x.1).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let mut head = String::from("| variant |");
        let mut sep = String::from("|---|");
        for b in &bset {
            let _ = write!(head, " B={b} |");
            sep.push_str("---|");
        }
        let _ = writeln!(o, "{head}\n{sep}");
        for v in &r.variants {
            let mut line = format!("| {v} |");
            for b in &bset {
                if let Some((_, _, f, a, c)) = r.own.iter().find(|x| &x.0 == v && x.1 == *b) {
                    let _ = write!(line, " {f:.3} / {:.2} % / {c:.3} |", 100.0 * a);
                } else {
                    line.push_str(" |");
                }
            }
            let _ = writeln!(o, "{line}");
        }
        // Frame pools.
        let _ = writeln!(o, "\n### Pools from the Gaussian frame release (fidelity@8 = share of the true 8-NN in the pool)\n");
        let _ = writeln!(
            o,
            "| ε | ranking | {} |",
            FRAME_FRACTIONS
                .map(|f| format!("pool {:.0} %", 100.0 * f))
                .join(" | ")
        );
        let _ = writeln!(o, "|---|---|{}", "---|".repeat(FRAME_FRACTIONS.len()));
        for &eps in &r.eps {
            for rk in ["nearest", "posterior"] {
                let vals: Vec<String> = r
                    .frame
                    .iter()
                    .filter(|f| f.eps == eps && f.ranking == rk)
                    .map(|f| format!("{:.3}", f.m[0]))
                    .collect();
                let _ = writeln!(o, "| {eps} | {rk} | {} |", vals.join(" | "));
            }
        }
        let _ = writeln!(o);
    }
    // Large vs small.
    if results.len() > 1 {
        let (s, l) = (results[0], results[1]);
        let _ = writeln!(
            o,
            "## Gallery {} against {}: pool fraction no larger at the same fidelity?\n",
            l.n, s.n
        );
        let _ = writeln!(
            o,
            "| ε | target | pool at {} | pool at {} | no larger |",
            s.n, l.n
        );
        let _ = writeln!(o, "|---|---|---|---|---|");
        for (eps, t, pl) in &l.least {
            let ps = s
                .least
                .iter()
                .find(|(e, tt, _)| e == eps && tt == t)
                .and_then(|x| x.2.as_ref());
            let f =
                |p: Option<&Point>| p.map_or("–".into(), |p| format!("{:.2} %", 100.0 * p.pool));
            let ok = match (ps, pl) {
                (Some(a), Some(b)) => {
                    if b.pool <= a.pool + 1e-12 {
                        "yes"
                    } else {
                        "no"
                    }
                }
                _ => "–",
            };
            let _ = writeln!(
                o,
                "| {eps} | {t:.2} | {} | {} | {ok} |",
                f(ps),
                f(pl.as_ref())
            );
        }
        let _ = writeln!(o);
    }
    // Targets of the issue.
    let s = results[0];
    let _ = writeln!(o, "## The issue's targets (gallery {})\n", s.n);
    for (eps, t, max) in ISSUE_TARGETS {
        let p = s
            .least
            .iter()
            .find(|(e, tt, _)| *e == eps && *tt == t)
            .and_then(|x| x.2.as_ref());
        let _ = writeln!(
            o,
            "- ε = {eps}, fidelity ≥ {t}: pool ≤ {:.0} % wanted; {}",
            100.0 * max,
            p.map_or("not reached".into(), |p| format!(
                "least {:.2} % ({} B = {} L = {}) — {}",
                100.0 * p.pool,
                p.variant,
                p.blocks,
                p.size,
                if p.pool <= max { "met" } else { "missed" }
            ))
        );
    }
    if let Some(p) = s
        .least
        .iter()
        .find(|(e, tt, _)| *e == 8.0 && *tt == 0.95)
        .and_then(|x| x.2.as_ref())
    {
        let _ = writeln!(
            o,
            "- bytes per search at ε = 8 (that point, thumbnails included, gzip): {:.0} KiB (≤ 400 wanted: {})",
            p.kib,
            if p.kib <= 400.0 { "met" } else { "missed" }
        );
    }
    let _ = writeln!(o, "\n## The CSV (`blocks.csv`)\n");
    let _ = writeln!(o, "Header `method,epsilon,blocks,partition,released,pool_fraction,fidelity_at_8,recall_at_8,map_at_8,miss_rate,kib_per_search`; a suffix `-69k` marks the large gallery. `blocks`: the Pareto front over every (variant, B, L) — pool, fidelity@8, miss rate and KiB exact, Recall@8 and mAP@8 by Monte Carlo; `blocks-predicted`: the same points with the fidelity `plan::candidates` predicts; `blocks-least-T`: the least pool reaching fidelity T; `blocks-variant`: each variant's own front (exact columns only); `frame-pool-nearest` / `frame-pool-posterior`: the first `pool_fraction·N` gallery items by distance to the released frame row / by class posterior, ranked exactly by the client (KiB: that share of the whole gallery's gzip size; miss rate undefined); `download-all`: the whole gallery, ranked over its decoded block file; `reference`: P/(P + e^ε(1 − P)) at P = fidelity_at_8, `reference-lower`: P·e^(−ε).");
    if let Some((v, bs)) = recommend(results) {
        let _ = writeln!(
            o,
            "\n**Recommended default levels** (the variant meeting most of the issue's targets on gallery {}, ties by the geometric-mean least pool; B = every level its least-pool points use on any gallery): {v} at B = {bs:?}.",
            s.n
        );
    }
    let _ = writeln!(o);
    o
}
