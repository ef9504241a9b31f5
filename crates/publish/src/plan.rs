//! Planning a block search: which level and how many blocks, from public facts only.
//!
//! # Leakage rule
//! A plan is a function of ε, the byte budget and the published [`PartitionDoc`] — never of
//! the photo (the functions here take no features; a test gives two photos the same plan). So
//! the number of blocks fetched, and the level they come from, reveal nothing beyond what the
//! release itself does.
//!
//! # Prediction
//! With `L` of `B` blocks released by the k-subset mechanism, the true block is in the release
//! with `p = L·e^ε/(L·e^ε + B − L)` ([`dp::subset::inclusion_probability`]). Coverage
//! measured on the public anchors gives `own` (share of the top-k inside the true block) and
//! `other` (inside one other block); the predicted fidelity is
//! `p·min(1, own + (L−1)·other) + (1 − p)·min(1, L·other)` (a union bound for the other
//! blocks). The expected pool is `Σ_c m_c·(1 − C(B−c, L)/C(B, L))` items for `m_c` items held
//! by `c` blocks (exact for a uniformly random set of `L` blocks), and the expected bytes are `L`
//! times the mean block size on the wire.
//!
//! # The byte budget is a ceiling
//! A plan is chosen on [`Plan::max_bytes`], the most it can download: its level's `L` largest
//! blocks at their published sizes on the wire (a client reads no block past that size). Which
//! `L` blocks a release names is random, so the expectation can be passed by any one search;
//! the ceiling cannot. A plan that releases nothing (the whole gallery, or every block of a
//! level: ε = 0) always wins over one that spends ε when its ceiling fits ([`choose`], [`Why`]).

use serde::{Deserialize, Serialize};

use crate::blocks::{file_len, max_transfer_len};
use crate::centroids;
use dp::posterior::{block_posterior, yes_no_bound};
use dp::subset::inclusion_probability;
use shared::api::{LevelDoc, PartitionDoc};
use shared::error::{Error, Result};
use shared::params::limits;

/// What a search will do.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Index into the partition's levels.
    pub level: usize,
    /// B of that level.
    pub blocks: u32,
    /// L, the number of blocks released and downloaded.
    pub size: u32,
    /// ε the release spends (0 when every block of the level is downloaded: nothing is
    /// released).
    pub epsilon: f64,
    /// Chance that the release holds the photo's own block.
    pub inclusion: f64,
    /// Predicted fidelity@k (share of the exact top-k returned).
    pub predicted_fidelity: f64,
    /// Expected bytes on the wire.
    pub expected_bytes: f64,
    /// The most this plan can download on the wire: the level's `L` largest blocks at their
    /// published sizes ([`max_bytes`]). Plans are chosen on this, so a byte budget is a
    /// ceiling for every search, not an average.
    #[serde(default)]
    pub max_bytes: u64,
    /// The level's centroids file (on the wire at most), fetched once a gallery version when
    /// the plan releases blocks (0 when it downloads every block: no centroids needed). Not
    /// part of a search's budget, like PIR's public files.
    #[serde(default)]
    pub one_time_bytes: u64,
    /// Expected distinct items downloaded / gallery size.
    pub expected_pool_fraction: f64,
    /// The whole gallery (no release).
    pub whole: bool,
}

/// What a search with a plan tells the server about the photo, in figures (the page's words).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Disclosure {
    /// Nothing about the photo is released: every block of the level (or the whole gallery) is
    /// downloaded, so the requests are the same for every photo.
    pub learns_nothing: bool,
    /// ε of the release (0 when nothing is released).
    pub epsilon: f64,
    /// The best chance of answering a yes/no question about the photo correctly from what the
    /// server sees, both answers equally likely beforehand ([`yes_no_bound`], δ = 0): 0.5
    /// when nothing is released.
    pub yes_no: f64,
    /// L: the photo is said to be in one of these released blocks ("regions")…
    pub regions: u32,
    /// …of B…
    pub of: u32,
    /// …with this posterior probability ([`block_posterior`], uniform prior over blocks; equal
    /// to the plan's inclusion probability): 1 when nothing is released.
    pub posterior: f64,
    /// …where chance alone (the prior) says L/B.
    pub prior: f64,
}

/// What a search with `plan` tells the server (public: a function of the plan only).
///
/// Guarantee: the server sees only the released set (and what is computed from it), an
/// ε-DP output with ε = `plan.epsilon`, so (i) no yes/no question about the photo with even
/// odds is answered correctly with probability above `yes_no` = e^ε/(1 + e^ε), and (ii) under a
/// uniform prior over the level's blocks its posterior that the photo's block is among the L
/// released is `posterior` = L·e^ε/(L·e^ε + B − L), the plan's inclusion probability.
///
/// Proof: (i) is [`yes_no_bound`] at δ = 0 (a block release is pure ε-DP,
/// [`dp::subset`]); (ii) is [`block_posterior`] (Bayes with the mechanism's two
/// likelihood values). A plan that downloads every block of its level releases nothing: every
/// photo makes the same requests, so the server's posterior is its prior and any guess is a
/// coin toss (ε = 0, `yes_no` = 1/2). ∎
pub fn disclosure(plan: &Plan) -> Disclosure {
    let learns_nothing = plan.whole || plan.size >= plan.blocks || plan.epsilon == 0.0;
    let epsilon = if learns_nothing { 0.0 } else { plan.epsilon };
    Disclosure {
        learns_nothing,
        epsilon,
        yes_no: yes_no_bound(epsilon, 0.0),
        regions: plan.size,
        of: plan.blocks,
        posterior: if learns_nothing {
            1.0
        } else {
            block_posterior(plan.blocks, plan.size, epsilon)
        },
        prior: if plan.blocks == 0 {
            1.0
        } else {
            (plan.size as f64 / plan.blocks as f64).min(1.0)
        },
    }
}

/// Check a partition document from an untrusted server before planning with it: shapes, finite
/// values, and sizes that agree with each other — every block's declared bytes are those of
/// its declared item count in the block format, its bytes on the wire at most what gzip can
/// take for them, and the multiplicities count the gallery exactly once — so a client can
/// hold the server to them while it downloads (`limits::MAX_BLOCK_BYTES` bounds each).
pub fn validate_doc(doc: &PartitionDoc) -> Result<()> {
    let bad = |reason: String| Error::InvalidParameter {
        name: "partition",
        reason,
    };
    if doc.levels.is_empty() || doc.levels.len() > limits::MAX_LEVELS {
        return Err(bad(format!("must have 1..={} levels", limits::MAX_LEVELS)));
    }
    if !(doc.max_share > 0.0 && doc.max_share <= 1.0) {
        return Err(bad("max_share must be in (0, 1]".into()));
    }
    if doc.feature_dim == 0 || doc.feature_dim > limits::MAX_FEATURE_DIM || doc.gallery_size == 0 {
        return Err(bad("feature_dim or gallery_size out of range".into()));
    }
    if doc.thumb_side > limits::MAX_THUMB_SIDE {
        return Err(bad("thumb_side out of range".into()));
    }
    check_names(doc).map_err(|r| bad(r.into()))?;
    for (i, l) in doc.levels.iter().enumerate() {
        let b = l.blocks as usize;
        let lens_ok = [
            l.sizes.len(),
            l.bytes.len(),
            l.transfer_bytes.len(),
            l.hashes.len(),
        ]
        .iter()
        .all(|&n| n == b);
        if b == 0 || b > limits::MAX_BLOCKS || !lens_ok {
            return Err(bad(format!("level {i}: inconsistent block count")));
        }
        if l.whole && b != 1 {
            return Err(bad(format!(
                "level {i}: a whole-gallery level has one block"
            )));
        }
        // The centroids file's size is fixed by B and the dimension, and bounded by them.
        let want = centroids::file_len(b as u64, doc.feature_dim as u64);
        if want != Some(l.centroids_bytes)
            || l.centroids_bytes > centroids::MAX_FILE_BYTES
            || !is_hash(&l.centroids_hash)
        {
            return Err(bad(format!(
                "level {i}: the centroids file must be {} bytes with a SHA-256 hash",
                want.unwrap_or(u64::MAX)
            )));
        }
        if !l.hashes.iter().all(|h| is_hash(h)) {
            return Err(bad(format!("level {i}: bad block hash")));
        }
        let cov = [l.coverage.own, l.coverage.other];
        if cov.iter().any(|c| !(0.0..=1.0).contains(c)) || l.multiplicity.len() > b + 1 {
            return Err(bad(format!("level {i}: bad coverage or multiplicity")));
        }
        check_sizes(doc, l).map_err(|r| bad(format!("level {i}: {r}")))?;
    }
    Ok(())
}

/// 64 hex digits: a SHA-256. Every hash a server names is checked with this before it is used
/// (as a cache file name, a URL part).
pub fn is_hash(h: &str) -> bool {
    h.len() == 64 && h.bytes().all(|c| c.is_ascii_hexdigit())
}

/// The version goes into block URLs and `blocks_url` says where they are fetched: a URL-safe
/// version, and a path on the server or an absolute `http(s)` URL without user info, query
/// or fragment.
fn check_names(doc: &PartitionDoc) -> std::result::Result<(), &'static str> {
    let v = &doc.version;
    if v.is_empty()
        || v.len() > limits::MAX_VERSION_CHARS
        || !v
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(&c))
    {
        return Err("bad version");
    }
    let u = &doc.blocks_url;
    let host = u
        .strip_prefix("https://")
        .or_else(|| u.strip_prefix("http://"))
        .map(|r| r.split('/').next().unwrap_or(""));
    let path_ok = u.is_empty() || (u.starts_with('/') && !u.starts_with("//"));
    let ok = u.len() <= limits::MAX_URL_CHARS
        && (path_ok || host.is_some_and(|h| !h.is_empty() && !h.contains('@')))
        && !u
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || matches!(c, '?' | '#' | '\\'));
    if ok {
        Ok(())
    } else {
        Err("bad blocks_url")
    }
}

/// Declared sizes agree with each other and with the block format.
fn check_sizes(doc: &PartitionDoc, l: &LevelDoc) -> std::result::Result<(), String> {
    let (dim, t) = (doc.feature_dim as u64, doc.thumb_side as u64);
    let mut items: u64 = 0;
    for (b, (&n, (&bytes, &wire))) in l
        .sizes
        .iter()
        .zip(l.bytes.iter().zip(&l.transfer_bytes))
        .enumerate()
    {
        if n as usize > limits::MAX_BLOCK_ITEMS || n as usize > doc.gallery_size {
            return Err(format!("block {b} declares {n} items"));
        }
        let need = file_len(n as u64, dim, t);
        if need != Some(bytes) || bytes > limits::MAX_BLOCK_BYTES {
            return Err(format!(
                "block {b} declares {bytes} bytes for {n} items (the format needs {})",
                need.unwrap_or(u64::MAX)
            ));
        }
        if wire == 0 || wire > max_transfer_len(bytes) {
            return Err(format!(
                "block {b} declares {wire} bytes on the wire for {bytes} bytes"
            ));
        }
        items += n as u64;
    }
    let mut held: u64 = 0;
    let mut memberships: u128 = 0;
    for (c, &m) in l.multiplicity.iter().enumerate() {
        held = held.checked_add(m).ok_or("multiplicities overflow")?;
        memberships += c as u128 * m as u128;
    }
    if held != doc.gallery_size as u64 || memberships != items as u128 {
        return Err(format!(
            "multiplicities count {held} items in {memberships} places; the gallery has {} \
             and the blocks hold {items}",
            doc.gallery_size
        ));
    }
    Ok(())
}

/// `C(B − c, L) / C(B, L)`: the chance that a uniformly random set of L of B blocks misses all
/// of c given blocks (the direct product; [`expected_pool`] builds it up instead).
#[cfg(test)]
fn miss_all(b: u32, c: usize, l: u32) -> f64 {
    let mut p = 1.0;
    for j in 0..c as u32 {
        if b < l + j + 1 {
            return 0.0;
        }
        p *= (b - l - j) as f64 / (b - j) as f64;
    }
    p
}

/// The expected number of distinct items in a uniformly random set of `l` of `b` blocks,
/// `Σ_c m_c·(1 − C(b − c, l)/C(b, l))`, with the ratio built up over `c` (one product a step,
/// not `c`). Once it is below 2⁻⁵⁴ every later `1 − ratio` rounds to 1 in f64, so the rest of
/// the sum is taken whole from `tail` (`tail[c] = Σ_{c' ≥ c} m_c'`): O(b/l) steps for each
/// `l`, O(b log b) for a level, so a hostile document cannot make planning slow.
fn expected_pool(multiplicity: &[u64], tail: &[f64], b: u32, l: u32) -> f64 {
    let mut miss = 1.0f64;
    let mut pool = 0.0;
    for (c, &m) in multiplicity.iter().enumerate() {
        if miss < f64::EPSILON / 4.0 {
            return pool + tail[c];
        }
        pool += m as f64 * (1.0 - miss);
        let c = c as u32;
        miss = if b < l + c + 1 {
            0.0
        } else {
            miss * (b - l - c) as f64 / (b - c) as f64
        };
    }
    pool
}

fn check_epsilon(epsilon: f64) -> Result<()> {
    if epsilon.is_finite() && epsilon > 0.0 && epsilon <= limits::MAX_EPSILON {
        Ok(())
    } else {
        Err(Error::InvalidParameter {
            name: "epsilon",
            reason: format!("must be in (0, {}]", limits::MAX_EPSILON),
        })
    }
}

/// Every plan the operator permits at ε: each level with each `L` whose expected pool is within
/// `max_share` (or the whole gallery where allowed).
pub fn candidates(doc: &PartitionDoc, epsilon: f64) -> Result<Vec<Plan>> {
    validate_doc(doc)?;
    check_epsilon(epsilon)?;
    let n = doc.gallery_size as f64;
    let mut out = Vec::new();
    for (li, l) in doc.levels.iter().enumerate() {
        let mean_bytes = l.transfer_bytes.iter().sum::<u64>() as f64 / l.blocks as f64;
        let most = largest_first_sums(l);
        if l.whole {
            if doc.allow_full_download {
                out.push(Plan {
                    level: li,
                    blocks: 1,
                    size: 1,
                    epsilon: 0.0,
                    inclusion: 1.0,
                    predicted_fidelity: 1.0,
                    expected_bytes: mean_bytes,
                    max_bytes: most[1],
                    one_time_bytes: 0,
                    expected_pool_fraction: 1.0,
                    whole: true,
                });
            }
            continue;
        }
        let (own, other) = (l.coverage.own, l.coverage.other);
        let mut tail = vec![0.0; l.multiplicity.len() + 1];
        for c in (0..l.multiplicity.len()).rev() {
            tail[c] = tail[c + 1] + l.multiplicity[c] as f64;
        }
        for size in 1..=l.blocks {
            let pool = expected_pool(&l.multiplicity, &tail, l.blocks, size);
            let pool_fraction = (pool / n).min(1.0);
            if pool_fraction > doc.max_share + 1e-12 {
                break;
            }
            let all = size == l.blocks;
            let p = inclusion_probability(l.blocks, size, epsilon);
            let fid = p * (own + (size - 1) as f64 * other).min(1.0)
                + (1.0 - p) * (size as f64 * other).min(1.0);
            out.push(Plan {
                level: li,
                blocks: l.blocks,
                size,
                epsilon: if all { 0.0 } else { epsilon },
                inclusion: p,
                predicted_fidelity: fid,
                expected_bytes: size as f64 * mean_bytes,
                max_bytes: most[size as usize],
                one_time_bytes: if all {
                    0
                } else {
                    max_transfer_len(l.centroids_bytes)
                },
                expected_pool_fraction: pool_fraction,
                whole: false,
            });
        }
    }
    Ok(out)
}

/// The whole-gallery plan (one block, nothing released, zero privacy cost), or a typed error
/// when the operator does not allow it. Public, like every plan.
pub fn whole_plan(doc: &PartitionDoc) -> Result<Plan> {
    validate_doc(doc)?;
    let refuse = |reason: &str| Error::InvalidParameter {
        name: "whole",
        reason: reason.into(),
    };
    if !doc.allow_full_download {
        return Err(refuse(
            "this server does not allow downloading the whole gallery",
        ));
    }
    let level = doc
        .levels
        .iter()
        .position(|l| l.whole)
        .ok_or_else(|| refuse("this server publishes no whole-gallery download"))?;
    let l = &doc.levels[level];
    Ok(Plan {
        level,
        blocks: l.blocks,
        size: l.blocks,
        epsilon: 0.0,
        inclusion: 1.0,
        predicted_fidelity: 1.0,
        expected_bytes: l.transfer_bytes.iter().sum::<u64>() as f64,
        max_bytes: largest_first_sums(l)[l.blocks as usize],
        one_time_bytes: 0,
        expected_pool_fraction: 1.0,
        whole: true,
    })
}

/// `out[L]`: the most `L` blocks of the level can take on the wire — the sum of its `L` largest
/// published `transfer_bytes` (saturating). `out[0] = 0`, `out[B]` is the whole level.
fn largest_first_sums(l: &LevelDoc) -> Vec<u64> {
    let mut sizes = l.transfer_bytes.clone();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let mut out = Vec::with_capacity(sizes.len() + 1);
    out.push(0u64);
    for s in sizes {
        out.push(out.last().copied().unwrap_or(0).saturating_add(s));
    }
    out
}

/// The most a plan of `size` blocks at `level` can download on the wire (the `size` largest
/// blocks at their published sizes), recomputed from the document alone — what a driver holds
/// a plan to, whatever the plan says of itself. `None` for a level or size the document does
/// not have.
pub fn max_bytes(doc: &PartitionDoc, level: usize, size: u32) -> Option<u64> {
    let l = doc.levels.get(level)?;
    largest_first_sums(l).get(size as usize).copied()
}

/// The plans no other plan beats on both fidelity and the most bytes they can download,
/// cheapest first (for the plot).
pub fn pareto(mut plans: Vec<Plan>) -> Vec<Plan> {
    plans.sort_by(|a, b| {
        a.max_bytes
            .cmp(&b.max_bytes)
            .then(b.predicted_fidelity.total_cmp(&a.predicted_fidelity))
    });
    let mut out: Vec<Plan> = Vec::new();
    for p in plans {
        if out
            .last()
            .is_none_or(|q| p.predicted_fidelity > q.predicted_fidelity + 1e-12)
        {
            out.push(p);
        }
    }
    out
}

/// Why [`choose`] chose its plan, for the page's and the CLI's words.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Why {
    /// A plan that releases nothing (ε = 0) fits the budget at its most, so it is taken over
    /// every plan that spends ε, whatever their predicted fidelity.
    NothingReleased,
    /// No plan that releases nothing fits: the best predicted fidelity among the plans whose
    /// most bytes fit. `free_needs`: the least budget a plan releasing nothing needs (`None`
    /// when this server offers none within its share).
    BestWithinBudget { free_needs: Option<u64> },
    /// The whole gallery was asked for by name ([`Choice::asked`]): no budget applies.
    Asked,
}

/// A plan and why it was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    #[serde(flatten)]
    pub plan: Plan,
    pub why: Why,
    /// The budget it was chosen within (bytes on the wire, a ceiling); `None` when asked for
    /// by name.
    pub budget: Option<u64>,
}

impl Choice {
    /// The whole gallery, asked for by name.
    pub fn asked(doc: &PartitionDoc) -> Result<Choice> {
        Ok(Choice {
            plan: whole_plan(doc)?,
            why: Why::Asked,
            budget: None,
        })
    }
}

/// The plan for a search at ε within `max_bytes` on the wire, as a ceiling: only plans whose
/// [`Plan::max_bytes`] fit are considered; among them, one that releases nothing (ε = 0) if
/// any fits (the best predicted fidelity of those, then the cheapest), else the best predicted
/// fidelity, the cheapest among equals. A typed error names the least budget any plan needs
/// when none fits. Public: a function of ε, the budget and the document only.
///
/// Guarantee: the returned plan's `max_bytes` ≤ `max_bytes` (the budget, rounded down to a
/// whole byte), and its `epsilon` is 0 whenever some plan with ε = 0 fits.
pub fn choose(doc: &PartitionDoc, epsilon: f64, max_bytes: f64) -> Result<Choice> {
    if !(max_bytes.is_finite() && max_bytes > 0.0) {
        return Err(Error::InvalidParameter {
            name: "max_bytes",
            reason: "must be finite and > 0".into(),
        });
    }
    let budget = max_bytes.floor().min(u64::MAX as f64) as u64;
    let all = candidates(doc, epsilon)?;
    let cheapest = all.iter().map(|p| p.max_bytes).min().unwrap_or(u64::MAX);
    let free = |p: &&Plan| p.epsilon == 0.0;
    let free_needs = all.iter().filter(free).map(|p| p.max_bytes).min();
    let best = |plans: Vec<Plan>| pareto(plans).into_iter().rfind(|p| p.max_bytes <= budget);
    let fitting_free: Vec<Plan> = all.iter().filter(free).copied().collect();
    if let Some(plan) = best(fitting_free) {
        return Ok(Choice {
            plan,
            why: Why::NothingReleased,
            budget: Some(budget),
        });
    }
    best(all)
        .map(|plan| Choice {
            plan,
            why: Why::BestWithinBudget { free_needs },
            budget: Some(budget),
        })
        .ok_or(Error::InvalidParameter {
            name: "max_bytes",
            reason: format!(
                "no plan fits {budget} bytes at its most; the cheapest can download \
                 {cheapest} bytes"
            ),
        })
}

/// [`choose`]'s plan.
pub fn plan(doc: &PartitionDoc, epsilon: f64, max_bytes: f64) -> Result<Plan> {
    choose(doc, epsilon, max_bytes).map(|c| c.plan)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::partition::{Coverage, Overlap};

    pub(crate) fn doc() -> PartitionDoc {
        let level = |b: u32, own: f64, whole: bool| LevelDoc {
            blocks: b,
            overlap: if whole {
                Overlap::None
            } else {
                Overlap::Closure(8)
            },
            whole,
            centroids_bytes: centroids::file_len(b as u64, 2).unwrap(),
            centroids_hash: "cd".repeat(32),
            // 1,000 items, each in one block (whole) or two: sizes add up to 1,000 or 2,000.
            sizes: (0..b)
                .map(|i| {
                    let total = if whole { 1000 } else { 2000 };
                    total / b + u32::from(i < total % b)
                })
                .collect(),
            bytes: vec![],
            transfer_bytes: vec![],
            hashes: vec!["ab".repeat(32); b as usize],
            multiplicity: if whole {
                vec![0, 1000]
            } else {
                vec![0, 0, 1000]
            },
            coverage: Coverage {
                own,
                other: (1.0 - own) / (b as f64),
            },
        };
        let mut levels = vec![
            level(1, 1.0, true),
            level(8, 0.9, false),
            level(32, 0.8, false),
        ];
        for l in &mut levels {
            // Block files of dimension 2 with 2×2 thumbnails, sent uncompressed.
            l.bytes = l
                .sizes
                .iter()
                .map(|&n| file_len(n as u64, 2, 2).unwrap())
                .collect();
            l.transfer_bytes = l.bytes.clone();
        }
        PartitionDoc {
            version: "v".into(),
            gallery_size: 1000,
            feature_dim: 2,
            thumb_side: 2,
            blocks_url: "/b".into(),
            max_share: 0.5,
            allow_full_download: true,
            coverage_k: 8,
            coverage_probes: 100,
            levels,
        }
    }

    #[test]
    fn plans_respect_budget_and_share_and_improve_with_epsilon() {
        let d = doc();
        for eps in [1.0, 4.0, 8.0] {
            for p in candidates(&d, eps).unwrap() {
                assert!(p.whole || p.expected_pool_fraction <= 0.5 + 1e-12, "{p:?}");
                assert!((0.0..=1.0).contains(&p.predicted_fidelity));
            }
        }
        let lo = plan(&d, 1.0, 10_000.0).unwrap();
        let hi = plan(&d, 8.0, 10_000.0).unwrap();
        assert!(lo.max_bytes <= 10_000 && hi.max_bytes <= 10_000);
        assert!(lo.expected_bytes <= lo.max_bytes as f64);
        assert!(hi.predicted_fidelity > lo.predicted_fidelity);
        // A budget that fits the whole gallery takes it: fidelity 1, nothing released.
        let whole = plan(&d, 1.0, 1e9).unwrap();
        assert!(whole.whole && whole.epsilon == 0.0 && whole.predicted_fidelity == 1.0);
        assert!(plan(&d, 1.0, 1.0).is_err());
        assert!(plan(&d, f64::NAN, 1e4).is_err());
        assert!(plan(&d, 1.0, f64::INFINITY).is_err());
        assert_eq!(whole_plan(&d).unwrap(), whole);
        let mut no_full = d.clone();
        no_full.allow_full_download = false;
        assert!(!plan(&no_full, 1.0, 1e9).unwrap().whole);
        assert!(whole_plan(&no_full).is_err());
    }

    /// The budget is a ceiling and a plan that releases nothing wins whenever it fits: for
    /// every ε and every budget from below the cheapest plan to above the whole gallery.
    #[test]
    fn the_budget_is_a_ceiling_and_nothing_released_wins_when_it_fits() {
        let mut d = doc();
        // Blocks of unequal sizes, so the largest L differ from L mean blocks.
        for l in d.levels.iter_mut().skip(1) {
            for (i, w) in l.transfer_bytes.iter_mut().enumerate() {
                *w += (i as u64 % 3) * 400;
            }
        }
        validate_doc(&d).unwrap();
        let whole = whole_plan(&d).unwrap();
        assert_eq!(whole.max_bytes, d.levels[0].transfer_bytes[0]);
        for eps in [0.5, 1.0, 4.0, 8.0, 30.0] {
            let all = candidates(&d, eps).unwrap();
            for p in &all {
                let mut sizes = d.levels[p.level].transfer_bytes.clone();
                sizes.sort_unstable();
                let most: u64 = sizes.iter().rev().take(p.size as usize).sum();
                assert_eq!(p.max_bytes, most, "{p:?}");
                assert_eq!(max_bytes(&d, p.level, p.size), Some(most));
                assert!(p.expected_bytes <= p.max_bytes as f64 + 1e-9, "{p:?}");
            }
            let mut fitted = 0;
            for budget in (500..=whole.max_bytes + 2_000).step_by(250) {
                match choose(&d, eps, budget as f64) {
                    Ok(c) => {
                        fitted += 1;
                        assert!(c.plan.max_bytes <= budget, "{c:?} over {budget}");
                        let free_fits = all
                            .iter()
                            .any(|p| p.epsilon == 0.0 && p.max_bytes <= budget);
                        assert_eq!(free_fits, c.why == Why::NothingReleased, "{c:?}");
                        if free_fits {
                            assert_eq!(c.plan.epsilon, 0.0, "{c:?}");
                        } else {
                            assert_eq!(
                                c.why,
                                Why::BestWithinBudget {
                                    free_needs: Some(whole.max_bytes)
                                }
                            );
                        }
                    }
                    Err(_) => assert!(all.iter().all(|p| p.max_bytes > budget), "{budget}"),
                }
            }
            assert!(fitted > 10, "{fitted}");
        }
        // One byte short of the whole gallery: a release, and the reason names the whole's need.
        let short = choose(&d, 30.0, (whole.max_bytes - 1) as f64).unwrap();
        assert!(short.plan.epsilon > 0.0 && !short.plan.whole, "{short:?}");
        let exact = choose(&d, 30.0, whole.max_bytes as f64).unwrap();
        assert!(exact.plan.whole && exact.why == Why::NothingReleased);
    }

    #[test]
    fn disclosure_follows_the_plan() {
        let d = doc();
        for eps in [0.1, 1.0, 4.0, 8.0] {
            for p in candidates(&d, eps).unwrap() {
                let w = disclosure(&p);
                if p.whole || p.size == p.blocks {
                    assert!(
                        w.learns_nothing && w.epsilon == 0.0 && w.yes_no == 0.5,
                        "{p:?}"
                    );
                    assert_eq!(w.posterior, 1.0);
                } else {
                    assert!(!w.learns_nothing, "{p:?}");
                    // The posterior the page states is the plan's inclusion probability.
                    assert!((w.posterior - p.inclusion).abs() < 1e-12, "{p:?}");
                    assert_eq!((w.regions, w.of), (p.size, p.blocks));
                    assert!(w.posterior >= w.prior, "{p:?}");
                    assert_eq!(w.yes_no, yes_no_bound(eps, 0.0));
                }
            }
        }
        // ε = 8: 0.99966; ε = 1: 0.731 (3 of the 32 blocks).
        let at = |eps: f64| {
            let p = candidates(&d, eps)
                .unwrap()
                .into_iter()
                .find(|p| p.blocks == 32 && p.size == 3)
                .unwrap();
            disclosure(&p)
        };
        assert!((at(8.0).yes_no - 0.999_665).abs() < 1e-6);
        assert!((at(1.0).yes_no - 0.731_059).abs() < 1e-6);
        let want = 3.0 * 8f64.exp() / (3.0 * 8f64.exp() + 29.0);
        assert!((at(8.0).posterior - want).abs() < 1e-12);
        assert!((at(8.0).prior - 3.0 / 32.0).abs() < 1e-15);
        // The whole gallery: nothing released, nothing learned.
        let w = disclosure(&whole_plan(&d).unwrap());
        assert!(w.learns_nothing);
        assert_eq!((w.epsilon, w.yes_no, w.posterior), (0.0, 0.5, 1.0));
    }

    #[test]
    fn the_expected_pool_counts_overlap_exactly() {
        // Every item in exactly 2 of B blocks: P(in pool) = 1 − C(B−2, L)/C(B, L).
        let b = 8u32;
        for l in 1..=b {
            let want = 1.0
                - ((b - l) as f64 * (b - l).saturating_sub(1) as f64) / (b as f64 * (b - 1) as f64);
            assert!((1.0 - miss_all(b, 2, l) - want).abs() < 1e-12, "{l}");
        }
    }

    #[test]
    fn the_incremental_pool_equals_the_direct_sum() {
        for b in 1..=60u32 {
            let mult: Vec<u64> = (0..=b as u64).map(|c| (c * 7919 + b as u64) % 13).collect();
            let mut tail = vec![0.0; mult.len() + 1];
            for c in (0..mult.len()).rev() {
                tail[c] = tail[c + 1] + mult[c] as f64;
            }
            for l in 1..=b {
                let direct: f64 = mult
                    .iter()
                    .enumerate()
                    .map(|(c, &m)| m as f64 * (1.0 - miss_all(b, c, l)))
                    .sum();
                let fast = expected_pool(&mult, &tail, b, l);
                assert!((fast - direct).abs() <= 1e-9 * direct.max(1.0), "{b} {l}");
            }
        }
    }

    #[test]
    fn hostile_documents_are_refused() {
        let mut d = doc();
        d.levels[1].hashes[0] = "zz".into();
        assert!(validate_doc(&d).is_err());
        validate_doc(&doc()).unwrap();
        // A centroids file one byte off its format's size, or without a SHA-256.
        let mut d = doc();
        d.levels[2].centroids_bytes += 1;
        assert!(validate_doc(&d).is_err());
        let mut d = doc();
        d.levels[2].centroids_bytes -= 2;
        assert!(validate_doc(&d).is_err());
        let mut d = doc();
        d.levels[2].centroids_hash = "z".repeat(64);
        assert!(validate_doc(&d).is_err());
        let mut d = doc();
        d.levels[2].centroids_hash.pop();
        assert!(validate_doc(&d).is_err());
        let mut d = doc();
        d.levels[1].sizes.pop();
        assert!(validate_doc(&d).is_err());
        let mut d = doc();
        d.max_share = 2.0;
        assert!(validate_doc(&d).is_err());
        let mut d = doc();
        d.levels[1].coverage.own = 1.5;
        assert!(validate_doc(&d).is_err());
    }
}
