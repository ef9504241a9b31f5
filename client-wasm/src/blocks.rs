//! Private block retrieval in the browser (`publish::plan`, `publish::blocks`,
//! `dp::subset`): load the public partition, plan, release the blocks to download with
//! the k-subset mechanism, and rank what was downloaded. Design and leakage rules:
//! `shared/spec/blocks.md`.

use client::block_driver::{BlockSearch, BlockSearchError};
use dp::mechanism::Receipt;
use publish::plan::Plan;
use shared::api::PartitionDoc;
use wasm_bindgen::prelude::*;

use crate::budget::JsLedger;
use crate::{js_err, Client};

/// What JavaScript receives from a block release: what sending it will spend, not yet the
/// URLs ([`Client::block_requests`] hands them out once the spend is recorded).
#[derive(serde::Serialize)]
struct BlockRelease {
    /// The receipt to add to the spent budget; `null` when every block of the level (or the
    /// whole gallery) is downloaded, which releases nothing.
    receipt: Option<Receipt>,
    /// ε spent (0 when nothing is released).
    epsilon: f64,
}

/// The block requests, in the order to make them (all at once).
#[derive(serde::Serialize)]
struct BlockRequests {
    urls: Vec<String>,
    /// For each URL, the bytes the partition declares for the block uncompressed and on the
    /// wire: the page stops reading past them.
    max_bytes: Vec<u64>,
    max_wire_bytes: Vec<u64>,
}

/// Where and how much to fetch for a level's centroids file.
#[derive(serde::Serialize)]
struct CentroidsRequest {
    url: String,
    /// Its exact size uncompressed (the page stops reading past it) and the most gzip can take
    /// for it on the wire.
    max_bytes: u64,
    max_wire_bytes: u64,
}

/// One ranked result, for the user's screen.
#[derive(serde::Serialize)]
pub(crate) struct BlockHit {
    pub(crate) id: u64,
    pub(crate) label: u8,
    pub(crate) class_name: String,
    /// Squared L2 distance between the photo's features and the item's (dequantised) features.
    pub(crate) distance: f32,
    /// `thumb_side × thumb_side` grey bytes, row-major (light object on dark).
    pub(crate) thumbnail: Vec<u8>,
}

/// The ranking of the downloaded blocks.
#[derive(serde::Serialize)]
struct BlockRanking {
    results: Vec<BlockHit>,
    thumb_side: usize,
    /// Distinct gallery items in the downloaded pool.
    pool_items: usize,
    /// Blocks ranked.
    blocks: usize,
    /// The level searched and the blocks downloaded there, sorted: the release, all the server
    /// saw (the rings on the page's block map).
    level: usize,
    released: Vec<u32>,
    /// The photo's own block at that level (its nearest centroid), for the user's screen only:
    /// handed out with the ranking, after every request of the search has been made, so
    /// nothing the page requests can depend on it. `None` where nothing was released and the
    /// level's centroids were not loaded (the whole gallery, every block).
    own_block: Option<u32>,
}

/// A level's blocks drawn flat (`publish::map::block_map`) with their sizes.
#[derive(serde::Serialize)]
struct BlockMap {
    level: usize,
    /// `[x, y]` for each block, in `[-1, 1]`.
    points: Vec<[f64; 2]>,
    /// Items in each block.
    sizes: Vec<u32>,
}

/// Private block retrieval (design: `shared/spec/blocks.md`, leakage rules there).
///
/// What leaves the browser: the partition request (identical for every client) and, per
/// search, the URLs [`Client::block_requests`] returns (after the page's ledger recorded the
/// release) — the set the k-subset mechanism released, in a fresh uniformly random order, at
/// the level the (public) plan names. Every
/// request is therefore a function of the release alone (post-processing of an ε-DP output).
/// The page fetches them all at once by one code path, never retries one, and fetches nothing
/// after [`Client::rank_blocks`] (thumbnails come from the blocks).
/// A plan as the page hands it back, with the budget it was chosen within (none for the
/// whole gallery asked for by name).
#[derive(serde::Deserialize)]
struct BudgetedPlan {
    #[serde(flatten)]
    plan: Plan,
    #[serde(default)]
    budget: Option<u64>,
}

#[wasm_bindgen]
impl Client {
    /// Load the body of `GET /api/v1/partition`: validated with `plan::validate_doc` (an
    /// untrusted server's document) and checked against the model's feature dimension.
    /// Replaces any earlier partition and forgets a pending block release. Sends nothing.
    pub fn load_partition(&mut self, partition_json: &str) -> Result<(), JsError> {
        let max = shared::params::limits::MAX_PARTITION_DOC_BYTES;
        if partition_json.len() as u64 > max {
            return Err(js_err(format!(
                "the server's partition is larger than {max} bytes"
            )));
        }
        let doc: PartitionDoc = serde_json::from_str(partition_json)
            .map_err(|e| js_err(format!("the server's partition is malformed: {e}")))?;
        publish::plan::validate_doc(&doc).map_err(js_err)?;
        if doc.feature_dim != self.config.feature_dim {
            return Err(js_err(format!(
                "the server's partition has {}-dimensional features, but the model computes {}",
                doc.feature_dim, self.config.feature_dim
            )));
        }
        if doc.thumb_side == 0 || doc.thumb_side > shared::params::limits::MAX_THUMB_SIDE {
            return Err(js_err("the server's partition has a bad thumbnail size"));
        }
        // Centroids stay for the levels the new document still lists (the same version).
        self.centroids
            .retain(|h, _| doc.levels.iter().any(|l| l.centroids_hash == *h));
        self.partition = Some(doc);
        self.pending_blocks = None;
        Ok(())
    }

    /// What to fetch for `level`'s centroids (JSON `{url, max_bytes, max_wire_bytes}`), or
    /// `undefined` when they are already loaded for this version. The level comes from the
    /// (public) plan, so the request reveals nothing about the photo. Sends nothing.
    pub fn centroids_request(&self, level: usize) -> Result<Option<String>, JsError> {
        let p = self.partition()?;
        let l = p
            .levels
            .get(level)
            .ok_or_else(|| js_err("the plan names a level the partition does not have"))?;
        if self
            .centroids
            .contains_key(&l.centroids_hash.to_ascii_lowercase())
        {
            return Ok(None);
        }
        let req = CentroidsRequest {
            url: publish::centroids::centroids_url(p, level),
            max_bytes: l.centroids_bytes,
            max_wire_bytes: publish::blocks::max_transfer_len(l.centroids_bytes),
        };
        serde_json::to_string(&req).map(Some).map_err(js_err)
    }

    /// Keep `level`'s centroids file (its uncompressed bytes), once its size, SHA-256 and
    /// header agree with the partition (`publish::centroids::verify`); an error
    /// otherwise, and nothing is kept. Sends nothing.
    pub fn set_centroids(&mut self, level: usize, bytes: &[u8]) -> Result<(), JsError> {
        let c = publish::centroids::verify(self.partition()?, level, bytes).map_err(|e| {
            js_err(format!(
                "the gallery's centroids do not match what it published (the server sent \
                 different data, or the gallery changed): {e}"
            ))
        })?;
        self.centroids.insert(c.hash.to_ascii_lowercase(), c);
        Ok(())
    }

    /// The plan for a search at `epsilon` within `max_bytes` on the wire, a ceiling (JSON
    /// `publish::plan::Choice`: the `Plan`'s fields, `why` it was chosen and the `budget`).
    /// Public: a function of ε, the byte budget and the partition only — it reads no photo,
    /// so the number of blocks and their level reveal nothing. Sends nothing.
    pub fn plan(&self, epsilon: f64, max_bytes: f64) -> Result<String, JsError> {
        let p = self.partition()?;
        let choice = publish::plan::choose(p, epsilon, max_bytes).map_err(js_err)?;
        serde_json::to_string(&choice).map_err(js_err)
    }

    /// Every plan on the fidelity-vs-bytes Pareto curve at `epsilon`, cheapest first (JSON
    /// array of `Plan`), for the plot. Public, like [`Client::plan`]. Sends nothing.
    pub fn plans(&self, epsilon: f64) -> Result<String, JsError> {
        let p = self.partition()?;
        let all = publish::plan::candidates(p, epsilon).map_err(js_err)?;
        serde_json::to_string(&publish::plan::pareto(all)).map_err(js_err)
    }

    /// The whole-gallery plan (one block, nothing released, zero privacy cost), or an error
    /// when the operator does not allow it. Public. Sends nothing.
    pub fn whole_plan(&self) -> Result<String, JsError> {
        let plan = publish::plan::whole_plan(self.partition()?).map_err(js_err)?;
        serde_json::to_string(&plan).map_err(js_err)
    }

    /// Release the blocks to download for the loaded photo under `plan_json` (a plan as
    /// [`Client::plan`] or [`Client::whole_plan`] returned it; a `budget` in it is held as a
    /// ceiling by the driver) with the shared driver (`client::block_driver`, the CLI's
    /// too). Returns JSON `{receipt, epsilon}`; the URLs come from
    /// [`Client::block_requests`].
    ///
    /// The photo's true block (its nearest centroid at the plan's level) is computed here and
    /// never leaves wasm. `client::block_search::release_blocks` draws `L` of the
    /// level's `B` blocks with the k-subset mechanism (`dp::subset`: pure ε-DP, δ = 0,
    /// ρ = ε²/2 — the receipt) from the crypto RNG, then puts the set in a fresh uniformly random
    /// order (the same RNG), so neither the set nor the order depends on the photo beyond the
    /// mechanism's output. When the plan downloads every block of its level (`L = B`, or the
    /// whole gallery), nothing is released: all blocks, random order, no receipt. Sends nothing.
    pub fn release_blocks(&mut self, plan_json: &str) -> Result<String, JsError> {
        let BudgetedPlan { plan, budget } = serde_json::from_str(plan_json)
            .map_err(|e| js_err(format!("the search plan is malformed: {e}")))?;
        let query = self.block_query()?;
        let p = self.partition()?;
        let mut search = BlockSearch::start(p, &plan, query, budget).map_err(js_err)?;
        let cents = match search.centroids() {
            Some(c) => Some(self.level_centroids(c.level)?),
            None => None,
        };
        let mut rng = dp::rng::secure_rng().map_err(js_err)?;
        let receipt = search.release(cents, &mut rng).map_err(js_err)?;
        let out = BlockRelease {
            epsilon: receipt.map_or(0.0, |r| r.epsilon),
            receipt,
        };
        self.pending_blocks = Some(search);
        serde_json::to_string(&out).map_err(js_err)
    }

    /// Record the held release's receipt (if it has one) with `record` — the page's ledger:
    /// called with the receipt's JSON, it must store it before it returns and throw if it
    /// cannot — and only then return the requests, JSON `{urls, max_bytes, max_wire_bytes}`:
    /// every URL to fetch, all at once, in this order. If `record` throws, nothing is returned
    /// and the release stays unsent. A release's requests are handed out once.
    pub fn block_requests(&mut self, record: &js_sys::Function) -> Result<String, JsError> {
        let search = self
            .pending_blocks
            .as_mut()
            .ok_or_else(|| js_err("no block search is pending"))?;
        let gets = search.requests(&mut JsLedger(record)).map_err(js_err)?;
        let out = BlockRequests {
            max_bytes: gets.iter().map(|g| g.max_bytes).collect(),
            max_wire_bytes: gets.iter().map(|g| g.max_wire_bytes).collect(),
            urls: gets.into_iter().map(|g| g.url).collect(),
        };
        serde_json::to_string(&out).map_err(js_err)
    }

    /// A block request failed (no answer, an HTTP error, a size past the document's): the
    /// search is over, nothing is retried, and its spend stays recorded.
    pub fn blocks_failed(&mut self) {
        if let Some(mut s) = self.pending_blocks.take() {
            s.transport_failed();
        }
    }

    /// Rank the downloaded blocks (their uncompressed bytes, in the order of the URLs
    /// [`Client::release_blocks`] returned) for the loaded photo and return the exact top `k`
    /// of their union as JSON `{results: [{id, label, class_name, distance, thumbnail}],
    /// thumb_side, pool_items, blocks}` — thumbnails come from the blocks, so nothing more is
    /// fetched. Each block is checked against the SHA-256 the partition lists for its
    /// (level, block) first; a mismatch, a malformed block or a wrong count is an error.
    /// Nothing leaves the browser: this is for the user's screen only.
    pub fn rank_blocks(
        &mut self,
        blocks: Vec<js_sys::Uint8Array>,
        k: usize,
    ) -> Result<String, JsError> {
        let mut search = self
            .pending_blocks
            .take()
            .ok_or_else(|| js_err("no block search is pending"))?;
        let bytes: Vec<Vec<u8>> = blocks.iter().map(js_sys::Uint8Array::to_vec).collect();
        let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        let answered = search.answer(&refs, k);
        if !search.sent() {
            // Nothing was handed out yet: the release is still the pending one.
            self.pending_blocks = Some(search);
        }
        let ranked = answered.map_err(|e| match e {
            BlockSearchError::Blocks(shared::Error::InvalidParameter { name: "block", .. }) => {
                js_err(format!(
                    "a downloaded block does not match the fingerprint the gallery \
                     published (the server sent different data, or the gallery changed), \
                     so nothing is shown: {e}"
                ))
            }
            other => js_err(other),
        })?;
        let query = self.block_query()?;
        let p = self.partition()?;
        let (hits, decoded) = (ranked.hits, ranked.blocks);
        let n = decoded.len();
        if decoded.iter().any(|b| b.thumb_side != p.thumb_side) {
            return Err(js_err(
                "a downloaded block does not have the partition's thumbnail size",
            ));
        }
        let mut ids: Vec<u64> = decoded.iter().flat_map(|b| b.ids.iter().copied()).collect();
        ids.sort_unstable();
        ids.dedup();
        let results = hits
            .iter()
            .map(|h| BlockHit {
                id: h.id,
                label: h.label,
                class_name: self.class_name(h.label as u32),
                distance: h.distance,
                thumbnail: decoded[h.block].thumbnail(h.index).to_vec(),
            })
            .collect();
        let released = ranked.released;
        // Where nothing was released (the whole gallery, or every block) the centroids were
        // never needed, so they may not be loaded: then there is no own block to show.
        let own_block = self
            .level_centroids(ranked.level)
            .ok()
            .map(|c| publish::partition::nearest_centroid_fixed(&c.values, p.feature_dim, query));
        let out = BlockRanking {
            results,
            thumb_side: p.thumb_side,
            pool_items: ids.len(),
            blocks: n,
            level: ranked.level,
            released,
            own_block,
        };
        serde_json::to_string(&out).map_err(js_err)
    }
}

#[wasm_bindgen]
impl Client {
    /// The blocks of `level` drawn flat for the page's block map: JSON `{level, points, sizes}`
    /// (`points[b]` = block `b`'s centroid on the top two principal components of the level's
    /// centroids, scaled into `[-1, 1]`; `sizes[b]` its items). Public data only. Sends nothing.
    pub fn block_map(&self, level: usize) -> Result<String, JsError> {
        let p = self.partition()?;
        let l = p
            .levels
            .get(level)
            .ok_or_else(|| js_err(format!("the partition has no level {level}")))?;
        let points = publish::map::block_map(&self.level_centroids(level)?.values, p.feature_dim)
            .map_err(js_err)?;
        let out = BlockMap {
            level,
            points,
            sizes: l.sizes.clone(),
        };
        serde_json::to_string(&out).map_err(js_err)
    }
}

impl Client {
    /// The loaded partition, or an error when there is none yet.
    pub(crate) fn partition(&self) -> Result<&PartitionDoc, JsError> {
        self.partition
            .as_ref()
            .ok_or_else(|| js_err("the gallery's partition is not loaded yet"))
    }

    /// The loaded centroids of `level` ([`Client::set_centroids`]), or an error: the one place
    /// this client reads centroids (the release, the block map, the photo's own block, PIR).
    pub(crate) fn level_centroids(
        &self,
        level: usize,
    ) -> Result<&publish::centroids::Centroids, JsError> {
        let l = self
            .partition()?
            .levels
            .get(level)
            .ok_or_else(|| js_err("the plan names a level the partition does not have"))?;
        self.centroids
            .get(&l.centroids_hash.to_ascii_lowercase())
            .ok_or_else(|| js_err("the level's centroids are not loaded yet"))
    }

    /// The loaded photo's features as the model computed them (f32), the blocks' query.
    fn block_query(&self) -> Result<&[f32], JsError> {
        self.query_f32
            .as_deref()
            .ok_or_else(|| js_err("load an image before searching"))
    }
}
