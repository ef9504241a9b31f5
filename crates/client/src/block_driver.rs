//! One private block search — a release of `L` of a level's `B` blocks, every block of a
//! level, or the whole gallery — as a sans-IO driver for the page (through the wasm client) and
//! the CLI: it checks the (public) plan against the document, names the centroids file a
//! release needs, makes the release ([`super::block_search::release_blocks`]), records its
//! receipt and only then hands out the block requests, and ranks what comes back
//! ([`super::block_search::verify_and_rank`]). The clients only move bytes.
//!
//! # The sequence
//! 1. [`BlockSearch::start`]: the plan checked against the document (its level, block count,
//!    size; the whole gallery only where the operator allows it) and against the byte budget
//!    as a ceiling: the most the plan can download, every released block at its published
//!    size ([`publish::plan::max_bytes`], recomputed from the document), must fit. Public: no
//!    photo is read.
//! 2. [`BlockSearch::centroids`]: the plan's level's centroids file, when the plan releases
//!    blocks (`L < B`) — public, the same for every client; the client fetches it (or holds
//!    it) and verifies it ([`publish::centroids::verify`]).
//! 3. [`BlockSearch::release`]: the k-subset release from the photo's features (pure ε-DP) and
//!    a fresh uniform order; nothing is sent. [`BlockSearch::receipt`] says what sending it
//!    will spend (`None`: nothing is released).
//! 4. [`BlockSearch::requests`]: the receipt is recorded in the caller's [`Ledger`], then every
//!    block `GET` is handed out at once, in the release's order, each with the sizes the
//!    document declares for it. The caller sends them all, retries none.
//! 5. [`BlockSearch::answer`] with every block's bytes in that order (or
//!    [`BlockSearch::transport_failed`]): each block checked against its published SHA-256,
//!    then the exact top `k` of their union.
//!
//! # Guarantee (the ledger rule)
//! *No block request of a release is handed to the caller unless the release's receipt is
//! recorded in the ledger first*, and a release's requests are handed out once. So a server
//! that answers them with errors, stalls or damaged bytes has the release counted all the
//! same, and no release is counted twice or fetched uncounted.
//!
//! Proof sketch: the released blocks (the only photo-dependent data) are held in the private
//! stage `Released` and become URLs only in [`BlockSearch::requests`], which calls
//! [`Ledger::record`] with the receipt first and returns the URLs only when it returned `Ok`
//! (on an error it returns the error and leaves the stage as it was); before returning them it
//! moves the stage to `Sent`, from which no URL is handed out again. A plan that downloads
//! every block of its level releases nothing (its requests are the same for every photo), so
//! it records nothing. What the release reveals is the mechanism's ([`dp::subset`]:
//! pure ε-DP; the order is independent of the photo); the bound on a search's bytes and the
//! ranking are functions of the release and public data (post-processing).

use rand::RngCore;
use zeroize::Zeroizing;

use crate::block_search::{block_url, release_blocks, verify_and_rank};
use crate::ledger::{Ledger, LedgerError};
use dp::mechanism::Receipt;
use publish::blocks::{max_transfer_len, Block, Hit};
use publish::centroids::{centroids_url, Centroids};
use publish::plan::Plan;
use shared::api::PartitionDoc;
use shared::params::limits;

/// Why a block search stopped.
#[derive(Debug, thiserror::Error)]
pub enum BlockSearchError {
    /// The plan is not one this document allows.
    #[error("the search plan {0}")]
    Plan(&'static str),
    /// This server does not allow downloading the whole gallery.
    #[error("this server does not allow downloading the whole gallery")]
    WholeNotAllowed,
    /// The release could not be made (no or wrong centroids, bad features or ε).
    #[error("{0}")]
    Release(shared::Error),
    /// The released blocks together declare more bytes than a search may download.
    #[error("the plan would download {declared} bytes, more than {limit}")]
    TooLarge { declared: u64, limit: u64 },
    /// The plan can download more than the byte budget (at its most, every released block at
    /// its published size on the wire).
    #[error("the plan can download up to {most} bytes, more than the budget of {budget}")]
    OverBudget { most: u64, budget: u64 },
    /// The receipt was not recorded, so no request was handed out.
    #[error("the privacy spend could not be recorded, so nothing was sent: {0}")]
    Ledger(#[from] LedgerError),
    #[error("this search's step is out of order: {0}")]
    Order(&'static str),
    /// A downloaded block failed its checks (size, SHA-256, shape) or `k` is out of range.
    #[error("{0}")]
    Blocks(shared::Error),
}

/// A public file to `GET`: at most `bytes` uncompressed and `wire_bytes` on the wire, checked
/// against `sha256`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PublicGet {
    pub level: usize,
    pub url: String,
    pub bytes: u64,
    pub wire_bytes: u64,
    pub sha256: String,
}

/// One block to `GET`: at most `max_bytes` uncompressed and `max_wire_bytes` on the wire.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlockGet {
    pub block: u32,
    pub url: String,
    pub max_bytes: u64,
    pub max_wire_bytes: u64,
}

/// What a finished search found.
#[derive(Debug, Clone)]
pub struct Ranked {
    /// The exact top `k` of the downloaded blocks' union; `block` indexes `blocks`.
    pub hits: Vec<Hit>,
    /// The downloaded blocks, decoded, in request order.
    pub blocks: Vec<Block>,
    pub level: usize,
    /// The blocks downloaded, sorted: the release, all the server saw.
    pub released: Vec<u32>,
}

enum Stage {
    Planned,
    /// Made, not handed out: the order is private until recorded.
    Released {
        fetch: Vec<u32>,
        receipt: Option<Receipt>,
    },
    Sent {
        fetch: Vec<u32>,
    },
    Over,
}

/// One block search (module docs).
pub struct BlockSearch {
    doc: PartitionDoc,
    plan: Plan,
    /// The byte budget on the wire (a ceiling), if the search has one.
    budget: Option<u64>,
    features: Zeroizing<Vec<f32>>,
    stage: Stage,
}

impl std::fmt::Debug for BlockSearch {
    // Neither the features nor the release go to logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockSearch")
            .field("plan", &self.plan)
            .finish()
    }
}

impl BlockSearch {
    /// A search of the photo with exact `features` under `plan`, made from `doc` (validated
    /// when it was loaded, `publish::plan::validate_doc`), within `budget` bytes on the wire
    /// (`None`: no budget, as for the whole gallery asked for by name). Refuses a plan the
    /// document does not allow, or one that can download more than the budget at its most;
    /// sends nothing.
    pub fn start(
        doc: &PartitionDoc,
        plan: &Plan,
        features: &[f32],
        budget: Option<u64>,
    ) -> Result<BlockSearch, BlockSearchError> {
        let level = doc.levels.get(plan.level).ok_or(BlockSearchError::Plan(
            "names a level the partition does not have",
        ))?;
        if plan.blocks != level.blocks || plan.size == 0 || plan.size > level.blocks {
            return Err(BlockSearchError::Plan(
                "does not match the partition's blocks",
            ));
        }
        if plan.whole != level.whole || (level.whole && !doc.allow_full_download) {
            return Err(BlockSearchError::WholeNotAllowed);
        }
        // The ceiling is recomputed from the document: a plan handed back by a page's script
        // could say anything of itself.
        let most = publish::plan::max_bytes(doc, plan.level, plan.size).unwrap_or(u64::MAX);
        if let Some(budget) = budget.filter(|&b| most > b) {
            return Err(BlockSearchError::OverBudget { most, budget });
        }
        shared::error::ensure_query_f32(features, doc.feature_dim)
            .map_err(BlockSearchError::Release)?;
        Ok(BlockSearch {
            doc: doc.clone(),
            plan: *plan,
            budget,
            features: Zeroizing::new(features.to_vec()),
            stage: Stage::Planned,
        })
    }

    /// The plan's level.
    pub fn level(&self) -> usize {
        self.plan.level
    }

    /// The centroids file the release needs (the plan's level's), or `None` when the plan
    /// downloads every block of its level (nothing is released, no centroids needed).
    pub fn centroids(&self) -> Option<PublicGet> {
        let level = self.plan.level;
        let l = &self.doc.levels[level];
        (self.plan.size < l.blocks).then(|| PublicGet {
            level,
            url: centroids_url(&self.doc, level),
            bytes: l.centroids_bytes,
            wire_bytes: max_transfer_len(l.centroids_bytes),
            sha256: l.centroids_hash.to_ascii_lowercase(),
        })
    }

    /// Makes the release with the plan's level's verified `centroids` (none when
    /// [`BlockSearch::centroids`] names none) and `rng`, a CSPRNG seeded from the operating
    /// system. Returns what sending it will spend (`None`: nothing is released). Sends nothing.
    pub fn release(
        &mut self,
        centroids: Option<&Centroids>,
        rng: &mut impl RngCore,
    ) -> Result<Option<Receipt>, BlockSearchError> {
        if !matches!(self.stage, Stage::Planned) {
            return Err(BlockSearchError::Order("the blocks were already released"));
        }
        let req = release_blocks(&self.doc, &self.plan, centroids, &self.features, rng)
            .map_err(BlockSearchError::Release)?;
        // Each block's size is bounded by the document; the search as a whole is bounded too,
        // before anything is recorded or sent.
        let l = &self.doc.levels[req.level];
        let declared: u64 = req
            .fetch
            .iter()
            .map(|&b| l.bytes.get(b as usize).copied().unwrap_or(u64::MAX))
            .fold(0u64, u64::saturating_add);
        if declared > limits::MAX_SEARCH_BYTES {
            self.stage = Stage::Over;
            return Err(BlockSearchError::TooLarge {
                declared,
                limit: limits::MAX_SEARCH_BYTES,
            });
        }
        // What these blocks can take on the wire is within the budget (it follows from the
        // check in `start`; checked again on the very blocks, before anything is recorded).
        let wire: u64 = req
            .fetch
            .iter()
            .map(|&b| {
                l.transfer_bytes
                    .get(b as usize)
                    .copied()
                    .unwrap_or(u64::MAX)
            })
            .fold(0u64, u64::saturating_add);
        if let Some(budget) = self.budget.filter(|&b| wire > b) {
            self.stage = Stage::Over;
            return Err(BlockSearchError::OverBudget { most: wire, budget });
        }
        self.stage = Stage::Released {
            fetch: req.fetch,
            receipt: req.receipt,
        };
        Ok(req.receipt)
    }

    /// What sending the release will spend: `None` before [`BlockSearch::release`] and when
    /// nothing is released.
    pub fn receipt(&self) -> Option<&Receipt> {
        match &self.stage {
            Stage::Released { receipt, .. } => receipt.as_ref(),
            _ => None,
        }
    }

    /// Whether the requests were handed out (and so the receipt recorded).
    pub fn sent(&self) -> bool {
        matches!(self.stage, Stage::Sent { .. } | Stage::Over)
    }

    /// Records the receipt in `ledger` (when something is released), then hands out every
    /// block request, in the release's random order (the guarantee in the module docs). A
    /// ledger error hands out nothing and leaves the release unsent.
    pub fn requests(&mut self, ledger: &mut dyn Ledger) -> Result<Vec<BlockGet>, BlockSearchError> {
        let Stage::Released { fetch, receipt } = &self.stage else {
            return Err(BlockSearchError::Order(match self.stage {
                Stage::Planned => "nothing is released yet",
                _ => "the requests were already handed out",
            }));
        };
        if let Some(r) = receipt {
            ledger.record(r)?;
        }
        let fetch = fetch.clone();
        let l = &self.doc.levels[self.plan.level];
        let gets = fetch
            .iter()
            .map(|&b| BlockGet {
                block: b,
                url: block_url(&self.doc, self.plan.level, b),
                max_bytes: l.bytes.get(b as usize).copied().unwrap_or(0),
                max_wire_bytes: l.transfer_bytes.get(b as usize).copied().unwrap_or(0),
            })
            .collect();
        self.stage = Stage::Sent { fetch };
        Ok(gets)
    }

    /// Every block's bytes (uncompressed), in the order of [`BlockSearch::requests`]: each
    /// checked against the document, then the exact top `k`. The search is over either way;
    /// a spend stays recorded.
    pub fn answer(&mut self, blocks: &[&[u8]], k: usize) -> Result<Ranked, BlockSearchError> {
        let fetch = match std::mem::replace(&mut self.stage, Stage::Over) {
            Stage::Sent { fetch } => fetch,
            other => {
                let over = matches!(other, Stage::Over);
                self.stage = other;
                return Err(BlockSearchError::Order(if over {
                    "the search is over"
                } else {
                    "no request was handed out"
                }));
            }
        };
        if blocks.len() != fetch.len() {
            return Err(BlockSearchError::Blocks(shared::Error::InvalidParameter {
                name: "blocks",
                reason: format!(
                    "{} blocks were released but {} were given",
                    fetch.len(),
                    blocks.len()
                ),
            }));
        }
        let fetched: Vec<(u32, &[u8])> =
            fetch.iter().copied().zip(blocks.iter().copied()).collect();
        let level = self.plan.level;
        let (hits, decoded) = verify_and_rank(&self.doc, level, &fetched, &self.features, k)
            .map_err(BlockSearchError::Blocks)?;
        let mut released = fetch;
        released.sort_unstable();
        Ok(Ranked {
            hits,
            blocks: decoded,
            level,
            released,
        })
    }

    /// A request failed in transport or was refused (an HTTP error, a timeout, a size past
    /// the document's): the search is over, nothing is retried, and a release that was handed
    /// out stays recorded.
    pub fn transport_failed(&mut self) {
        self.stage = Stage::Over;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{Full, Receipts};
    use publish::centroids::verify;
    use publish::fixture::small_partition;
    use publish::plan::{plan, whole_plan};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn the_receipt_is_recorded_before_the_requests_are_handed_out() {
        let (doc, files, cents, features) = small_partition();
        let dim = doc.feature_dim;
        let q = &features[5 * dim..6 * dim];
        let p = plan(&doc, 6.0, 0.5 * doc.levels[0].transfer_bytes[0] as f64).expect("a plan");
        assert!(!p.whole && p.size < p.blocks, "{p:?}");
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut s = BlockSearch::start(&doc, &p, q, None).expect("the plan fits");
        // Nothing released yet: no requests.
        assert!(matches!(
            s.requests(&mut Receipts::default()),
            Err(BlockSearchError::Order(_))
        ));
        let want = s.centroids().expect("a release needs centroids");
        assert_eq!(want.level, p.level);
        let c = verify(&doc, p.level, &cents[p.level]).expect("the centroids");
        let receipt = s
            .release(Some(&c), &mut rng)
            .expect("released")
            .expect("a receipt");
        assert_eq!(s.receipt(), Some(&receipt));
        // A ledger that cannot record: no request, the release unsent and still whole.
        assert!(matches!(
            s.requests(&mut Full),
            Err(BlockSearchError::Ledger(_))
        ));
        assert!(!s.sent());
        let mut ledger = Receipts::default();
        let gets = s.requests(&mut ledger).expect("recorded, then handed out");
        assert_eq!(ledger.0, vec![receipt]);
        assert_eq!(gets.len(), p.size as usize);
        for g in &gets {
            let l = &doc.levels[p.level];
            assert_eq!(g.url, block_url(&doc, p.level, g.block));
            assert_eq!(g.max_bytes, l.bytes[g.block as usize]);
            assert_eq!(g.max_wire_bytes, l.transfer_bytes[g.block as usize]);
        }
        // Handed out once; nothing more recorded.
        assert!(matches!(
            s.requests(&mut ledger),
            Err(BlockSearchError::Order(_))
        ));
        assert_eq!(ledger.0.len(), 1);
        let bytes: Vec<&[u8]> = gets
            .iter()
            .map(|g| files[p.level][g.block as usize].as_slice())
            .collect();
        let ranked = s.answer(&bytes, 8).expect("ranked");
        assert_eq!(ranked.hits.len(), 8);
        let mut sorted: Vec<u32> = gets.iter().map(|g| g.block).collect();
        sorted.sort_unstable();
        assert_eq!(ranked.released, sorted);
        assert!(matches!(
            s.answer(&bytes, 8),
            Err(BlockSearchError::Order(_))
        ));
    }

    /// The byte budget is a ceiling: 200 searches at each ε and budget, through the planner and
    /// the driver on the fixture gallery, never name blocks that can take more than the budget
    /// on the wire, and never download more than it (the bytes on the
    /// wire: each file gzipped as the server sends it). A plan that releases nothing is taken
    /// whenever one fits.
    #[test]
    fn two_hundred_searches_at_each_epsilon_and_budget_stay_within_it() {
        let (doc, files, cents, features) = small_partition();
        let dim = doc.feature_dim;
        let whole = whole_plan(&doc).expect("allowed here");
        let smallest = doc
            .levels
            .iter()
            .flat_map(|l| l.transfer_bytes.iter())
            .min()
            .copied();
        let smallest = smallest.expect("blocks");
        let budgets = [
            smallest + smallest / 2,
            whole.max_bytes / 8,
            whole.max_bytes / 3,
            whole.max_bytes - 1,
            whole.max_bytes,
        ];
        let centroids: Vec<_> = (0..doc.levels.len())
            .map(|l| verify(&doc, l, &cents[l]).ok())
            .collect();
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut searched = 0;
        for eps in [0.5, 1.0, 4.0, 8.0, 30.0] {
            for &budget in &budgets {
                let Ok(c) = publish::plan::choose(&doc, eps, budget as f64) else {
                    continue;
                };
                let free = publish::plan::candidates(&doc, eps)
                    .unwrap()
                    .iter()
                    .any(|p| p.epsilon == 0.0 && p.max_bytes <= budget);
                assert_eq!(c.plan.epsilon == 0.0, free, "{c:?}");
                for i in 0..200 {
                    let row = (i * 37) % (features.len() / dim);
                    let q = &features[row * dim..(row + 1) * dim];
                    let mut s = BlockSearch::start(&doc, &c.plan, q, Some(budget)).expect("fits");
                    s.release(centroids[c.plan.level].as_ref(), &mut rng)
                        .expect("released");
                    let gets = s.requests(&mut Receipts::default()).expect("handed out");
                    let most: u64 = gets.iter().map(|g| g.max_wire_bytes).sum();
                    assert!(most <= budget, "ε {eps}: {most} > {budget}");
                    let bytes: Vec<&[u8]> = gets
                        .iter()
                        .map(|g| files[c.plan.level][g.block as usize].as_slice())
                        .collect();
                    let moved: usize = bytes.iter().map(|b| publish::publish::gzip(b).len()).sum();
                    assert!(moved as u64 <= budget, "ε {eps}: moved {moved} > {budget}");
                    s.answer(&bytes, 8).expect("ranked");
                    searched += 1;
                }
            }
        }
        assert!(searched >= 200 * 5 * 3, "{searched}");
        // A plan claiming to fit is held to the document's sizes: one byte less is refused.
        let p = plan(&doc, 4.0, whole.max_bytes as f64 / 3.0).expect("a plan");
        let q = &features[..dim];
        let most = publish::plan::max_bytes(&doc, p.level, p.size).unwrap();
        assert!(matches!(
            BlockSearch::start(&doc, &p, q, Some(most - 1)),
            Err(BlockSearchError::OverBudget { .. })
        ));
        assert!(BlockSearch::start(&doc, &p, q, Some(most)).is_ok());
    }

    /// A refused or failed download (HTTP 500, a stall) or a damaged block ends the search and
    /// leaves the spend recorded.
    #[test]
    fn a_failed_download_leaves_the_spend_recorded() {
        let (doc, files, cents, features) = small_partition();
        let dim = doc.feature_dim;
        let q = &features[2 * dim..3 * dim];
        let p = plan(&doc, 4.0, 0.5 * doc.levels[0].transfer_bytes[0] as f64).expect("a plan");
        let c = verify(&doc, p.level, &cents[p.level]).expect("the centroids");
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut ledger = Receipts::default();
        for damaged in [false, true] {
            let mut s = BlockSearch::start(&doc, &p, q, None).expect("the plan fits");
            s.release(Some(&c), &mut rng).expect("released");
            let gets = s.requests(&mut ledger).expect("handed out");
            if damaged {
                let mut bad: Vec<Vec<u8>> = gets
                    .iter()
                    .map(|g| files[p.level][g.block as usize].clone())
                    .collect();
                if let Some(last) = bad[0].last_mut() {
                    *last ^= 1;
                }
                let refs: Vec<&[u8]> = bad.iter().map(Vec::as_slice).collect();
                assert!(matches!(
                    s.answer(&refs, 8),
                    Err(BlockSearchError::Blocks(_))
                ));
            } else {
                s.transport_failed();
            }
            assert!(s.sent());
            assert!(s.requests(&mut ledger).is_err());
        }
        assert_eq!(ledger.0.len(), 2, "both releases that left are counted");
    }

    #[test]
    fn the_whole_gallery_records_nothing_and_plans_are_checked() {
        let (doc, files, _, features) = small_partition();
        let q = &features[..doc.feature_dim];
        let whole = whole_plan(&doc).expect("allowed here");
        let mut s = BlockSearch::start(&doc, &whole, q, None).expect("the plan fits");
        assert!(s.centroids().is_none());
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        assert_eq!(s.release(None, &mut rng).expect("nothing released"), None);
        // Nothing released, so even a ledger that cannot record lets it go.
        let gets = s.requests(&mut Full).expect("no receipt to record");
        assert_eq!(gets.len(), 1);
        let got = s
            .answer(&[files[whole.level][0].as_slice()], 1)
            .expect("ranked");
        assert_eq!(got.hits[0].id, 1000, "the query is gallery item 0");
        // Plans the document does not allow.
        let mut bad = whole;
        bad.level = 99;
        assert!(matches!(
            BlockSearch::start(&doc, &bad, q, None),
            Err(BlockSearchError::Plan(_))
        ));
        let mut bad = whole;
        bad.size = 0;
        assert!(BlockSearch::start(&doc, &bad, q, None).is_err());
        let mut closed = doc.clone();
        closed.allow_full_download = false;
        assert!(matches!(
            BlockSearch::start(&closed, &whole, q, None),
            Err(BlockSearchError::WholeNotAllowed)
        ));
        assert!(BlockSearch::start(&doc, &whole, &q[..2], None).is_err());
        // A release needs the plan's level's centroids.
        let p = plan(&doc, 6.0, 0.5 * doc.levels[0].transfer_bytes[0] as f64).expect("a plan");
        let mut s = BlockSearch::start(&doc, &p, q, None).expect("the plan fits");
        assert!(matches!(
            s.release(None, &mut rng),
            Err(BlockSearchError::Release(_))
        ));
    }
}
