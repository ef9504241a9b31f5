//! Wire types of the REST API (`/api/v1`), shared by the server and the browser client so both
//! sides use one definition.

use serde::{Deserialize, Serialize};

use crate::params::{PrivacyParams, SmlqParams};

/// Upper bounds the server advertises and enforces.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ApiLimits {
    /// Largest `k` a search may ask for.
    pub max_k: usize,
    /// Largest number of query rows (real + dummies) in one search.
    pub max_query_rows: usize,
    /// Largest request body in bytes.
    pub max_body_bytes: usize,
}

/// `GET /api/v1/config`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigResponse {
    pub smlq: SmlqParams,
    /// Suggested privacy defaults for clients (each client chooses its own budget; neither
    /// client reads its δ, which is theirs: [`crate::params::DELTA`]).
    pub privacy_defaults: PrivacyParams,
    pub class_names: Vec<String>,
    pub feature_dim: usize,
    /// Entries of a query row in the anchor-frame protocol (`frame_rows` of the anchors).
    pub frame_dim: usize,
    /// Kernel scale of the placement in the anchor frame (client and server must agree).
    pub frame_kernel_scale: f64,
    pub anchor_count: usize,
    /// SHA-256 (lower-case hex) of the `GET /anchors` body: both clients refuse anchors
    /// other than these ([`AnchorsResponse::check_named`]), and the CLI keeps the anchors by
    /// content, as it keeps PIR hints, reading its copy without asking the server again.
    pub anchors_sha256: String,
    /// Version ([`embed::model::weights_version`]) of the gallery model, whose features
    /// of the gallery and the anchors the server holds.
    pub model_version: String,
    /// Version of the query model, the one a client must run on a photo: trained to put a
    /// photo's features where the gallery model puts its clean image. (The anchors'
    /// familiarity reference is fitted with the familiarity model whose SHA-256 every client
    /// pins, `embed::ood::FamiliarityModel`.)
    pub query_model_version: String,
    pub limits: ApiLimits,
}

/// `GET /api/v1/anchors`: the public anchors the client embeds with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnchorsResponse {
    pub ids: Vec<u64>,
    pub labels: Vec<u32>,
    pub features: Vec<Vec<f32>>,
    /// The public anchor frame (see `paper::frame`), one row per anchor.
    pub frame_rows: Vec<Vec<f64>>,
    /// Gaussians fitted to the anchors' features and layer means, for the client's
    /// out-of-distribution check (`embed::ood`).
    pub familiarity: crate::familiarity::Reference,
}

impl AnchorsResponse {
    /// Checks that `body`, the bytes of a `GET /api/v1/anchors` answer, are the anchors the
    /// configuration names by content ([`ConfigResponse::anchors_sha256`], compared without
    /// regard to case), before they are parsed. Both clients call it: the CLI keeps the anchors
    /// by that name, and the page would otherwise run with anchors the configuration does not
    /// describe (the anchors are public and the server's choice either way, so this keeps the
    /// two clients alike and a server's documents consistent; it is not what any privacy
    /// guarantee rests on).
    pub fn check_named(body: &[u8], config: &ConfigResponse) -> crate::error::Result<()> {
        if crate::digest::hash_hex(body).eq_ignore_ascii_case(&config.anchors_sha256) {
            Ok(())
        } else {
            Err(crate::error::Error::NotAsNamed {
                what: "the anchors",
            })
        }
    }

    /// Checks anchors received from a server against the configuration they came with and
    /// the model this client runs, once, where a client loads them: every later use (the
    /// anchor frame, Algorithm 1, the out-of-distribution score) may then rely on their shape.
    /// One place for the rule, so the browser client and the CLI cannot drift apart (a
    /// feature-length check was once lost when it lived at one use). Refuses: a configured
    /// feature length other than the model's ([`crate::params::EMBED`]), lists of
    /// different lengths (ids, labels, features, frame rows), a feature row or frame row of the
    /// wrong length, a non-finite value, a label outside the configuration's classes, and a
    /// [`crate::familiarity::Reference`] of the wrong shape for the model's features and
    /// `layer_dim` layer means ([`Reference::check`]).
    ///
    /// [`Reference::check`]: crate::familiarity::Reference::check
    pub fn check(&self, config: &ConfigResponse, layer_dim: usize) -> crate::error::Result<()> {
        use crate::error::Error;
        let (dim, n) = (config.feature_dim, self.features.len());
        if dim != crate::params::EMBED {
            return Err(Error::DimensionMismatch {
                what: "the configuration's feature length (the model's)",
                expected: crate::params::EMBED,
                got: dim,
            });
        }
        for (what, got) in [
            ("anchor ids", self.ids.len()),
            ("anchor labels", self.labels.len()),
            ("anchor frame rows", self.frame_rows.len()),
        ] {
            if got != n {
                return Err(Error::DimensionMismatch {
                    what,
                    expected: n,
                    got,
                });
            }
        }
        if let Some(f) = self.features.iter().find(|f| f.len() != dim) {
            return Err(Error::DimensionMismatch {
                what: "anchor features (the configuration's feature length)",
                expected: dim,
                got: f.len(),
            });
        }
        if let Some(r) = self.frame_rows.iter().find(|r| r.len() != config.frame_dim) {
            return Err(Error::DimensionMismatch {
                what: "anchor frame rows (the configuration's frame length)",
                expected: config.frame_dim,
                got: r.len(),
            });
        }
        if self.features.iter().flatten().any(|v| !v.is_finite()) {
            return Err(Error::NonFinite {
                what: "anchor features",
            });
        }
        if self.frame_rows.iter().flatten().any(|v| !v.is_finite()) {
            return Err(Error::NonFinite {
                what: "anchor frame rows",
            });
        }
        if let Some(&label) = self.labels.iter().find(|&&l| l >= config.smlq.num_classes) {
            return Err(Error::LabelOutOfRange {
                label,
                max: config.smlq.num_classes.saturating_sub(1),
            });
        }
        self.familiarity.check(dim, layer_dim)
    }
}

/// The resolution of [`GalleryMap::rows`].
pub const GALLERY_MAP_STEP: f64 = 1e-3;

/// `GET /api/v1/gallery-map`: a class-balanced sample of the gallery in the anchor frame, so
/// a page can draw it (the same for every client; fetching it reveals nothing about a query).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GalleryMap {
    pub ids: Vec<u64>,
    pub labels: Vec<u32>,
    /// The items' frame rows rounded to [`GALLERY_MAP_STEP`]: drawn only (the class vertices
    /// are a unit apart, a plot a few hundred pixels wide), and a third of the digits on the
    /// wire (the page's first load is held under 1.5 MB).
    pub rows: Vec<Vec<f32>>,
}

/// `POST /api/v1/search`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// The real query row among the dummy rows, in the client's private order.
    pub query_rows: Vec<Vec<f64>>,
    /// Algorithm 1 (aligned): the anchor rows of the client's embedding, in the public anchor
    /// order; the server aligns them onto its own. `None` for the anchor-frame protocol, whose
    /// query rows are already in the public frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor_rows: Option<Vec<Vec<f64>>>,
    pub k: usize,
    /// Frame protocol only: the std of the noise the client added (public — a function of ε,
    /// δ and the frame). With it the server ranks by the posterior probability of each item's
    /// class (`paper::retrieve::posterior_ranking`) instead of by distance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_std: Option<f64>,
    /// Frame protocol with `noise_std` only: how the `k` results are chosen (default
    /// [`Ranking::Posterior`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranking: Option<Ranking>,
}

/// How the server orders frame-protocol results when it knows the noise std.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ranking {
    /// The most probable class's items first (`paper::retrieve::posterior_ranking`): the
    /// most relevant items expected at every depth (best mAP).
    #[default]
    Posterior,
    /// The `k` results shared among the probable classes in proportion to their probability
    /// (`paper::retrieve::proportional_ranking`): under heavy noise the page shows several
    /// likely categories instead of betting on one (best Recall@k). The page's choice.
    Proportional,
}

/// One gallery match, with what the page needs to show it inline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Match {
    pub id: u64,
    pub label: u32,
    pub distance: f64,
    /// PNG thumbnail, base64, so the client fetches nothing afterwards that could reveal
    /// which row was real.
    pub thumbnail_png_base64: String,
}

/// `POST /api/v1/search` answer: one list per submitted query row, in the submitted order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchResponse {
    pub results: Vec<Vec<Match>>,
    /// The submitted rows where the server placed them (aligned, or as sent in the frame),
    /// in the submitted order, for plotting.
    pub rows_in_frame: Vec<Vec<f64>>,
}

/// `GET /api/v1/gallery/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemMeta {
    pub id: u64,
    pub label: u32,
    pub class_name: String,
}

/// One image to add: a greyscale image of the gallery's size, row-major, one byte a pixel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewItem {
    pub label: u32,
    pub pixels: Vec<u8>,
}

/// `POST /api/v1/gallery` (bearer token required).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddItemsRequest {
    pub items: Vec<NewItem>,
}

/// Answer to a change of the gallery: the change is stored; the embedding is recomputed in the
/// background and swapped in atomically (watch `GET /api/v1/status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeResponse {
    pub ids: Vec<u64>,
    pub catalogue_version: u64,
}

/// `GET /api/v1/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusResponse {
    /// Version of the catalogue the current search snapshot was embedded from.
    pub snapshot_version: u64,
    /// Version of the stored catalogue (bumped by every add or delete).
    pub catalogue_version: u64,
    pub snapshot_items: usize,
    pub catalogue_items: usize,
    pub reembedding: bool,
    /// Server-side latency of `POST /search` since start (parse to response), microseconds.
    pub search_latency: LatencySummary,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct LatencySummary {
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
}

/// `GET /api/v1/partition`: the gallery cut into blocks (see `publish::partition`).
/// The same document for every client; fetching it reveals nothing about a query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionDoc {
    /// Content hash of the partition (its parameters and every block's hash).
    #[serde(deserialize_with = "doc_bounds::version")]
    pub version: String,
    pub gallery_size: usize,
    pub feature_dim: usize,
    /// Side of the t×t thumbnails inside the blocks.
    pub thumb_side: usize,
    /// Where blocks are fetched: `{blocks_url}/{level}/{block}`.
    #[serde(deserialize_with = "doc_bounds::url")]
    pub blocks_url: String,
    /// The largest expected share of the gallery one search may download (set by the operator).
    pub max_share: f64,
    /// Whether the operator allows downloading the whole gallery at once (the level with
    /// `whole: true`).
    pub allow_full_download: bool,
    /// The k of the coverage figures.
    pub coverage_k: usize,
    /// How many public anchors outside the gallery the coverage was measured on; 0 means it
    /// had to be measured on anchors that are gallery members, which overstates it.
    #[serde(default)]
    pub coverage_probes: usize,
    #[serde(deserialize_with = "doc_bounds::levels")]
    pub levels: Vec<LevelDoc>,
}

/// One level of a [`PartitionDoc`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelDoc {
    /// B, the number of blocks.
    pub blocks: u32,
    pub overlap: Overlap,
    /// The whole gallery as one block (B = 1): no release needed, no privacy spent.
    #[serde(default)]
    pub whole: bool,
    /// Bytes of the level's centroids file (`{blocks_url}/{level}/centroids`, the format of
    /// `publish::centroids`: B rows of `feature_dim`; a client's true block is its nearest
    /// centroid), exactly the format's size for B and `feature_dim`.
    pub centroids_bytes: u64,
    /// SHA-256 (hex) of the centroids file.
    #[serde(deserialize_with = "doc_bounds::hash")]
    pub centroids_hash: String,
    /// Items in each block.
    #[serde(deserialize_with = "doc_bounds::per_block")]
    pub sizes: Vec<u32>,
    /// Uncompressed bytes of each block file.
    #[serde(deserialize_with = "doc_bounds::per_block")]
    pub bytes: Vec<u64>,
    /// Bytes on the wire (gzip) of each block file.
    #[serde(deserialize_with = "doc_bounds::per_block")]
    pub transfer_bytes: Vec<u64>,
    /// SHA-256 (hex) of each block file's uncompressed bytes.
    #[serde(deserialize_with = "doc_bounds::hashes")]
    pub hashes: Vec<String>,
    /// `multiplicity[c]`: gallery items held by exactly `c` blocks (predicts the pool size).
    #[serde(deserialize_with = "doc_bounds::multiplicity")]
    pub multiplicity: Vec<u64>,
    /// Coverage measured on the public anchors.
    pub coverage: Coverage,
}

/// The partition document decodes into bounded structures (`params::limits`): a hostile
/// server's oversized lists fail while they are read, before they are allocated.
mod doc_bounds {
    use serde::{Deserialize, Deserializer};

    use crate::bounded;
    use crate::params::limits::{MAX_BLOCKS, MAX_LEVELS, MAX_URL_CHARS, MAX_VERSION_CHARS};

    pub fn version<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        bounded::string(d, MAX_VERSION_CHARS, "version")
    }
    pub fn url<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        bounded::string(d, MAX_URL_CHARS, "blocks_url")
    }
    pub fn levels<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Vec<T>, D::Error> {
        bounded::seq(d, MAX_LEVELS, "levels")
    }
    pub fn hash<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        bounded::string(d, 64, "centroids hash")
    }
    pub fn per_block<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Vec<T>, D::Error> {
        bounded::seq(d, MAX_BLOCKS, "blocks")
    }
    pub fn hashes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        bounded::strings(d, MAX_BLOCKS, 64, "block hashes")
    }
    pub fn multiplicity<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        bounded::seq(d, MAX_BLOCKS + 1, "multiplicities")
    }
}

/// Machine-readable error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidJson,
    InvalidInput,
    NonFinite,
    DimensionMismatch,
    KOutOfRange,
    TooLarge,
    PayloadTooLarge,
    DegenerateAnchors,
    NotFound,
    /// A partition version that is no longer served; the message names the current one.
    Gone,
    Unauthorized,
    Forbidden,
    Conflict,
    /// Not ready yet (e.g. PIR databases still being built); retry later.
    Unavailable,
    /// The server is at its limit of concurrent work; retry later.
    Busy,
    /// The request (its body, or its answer) did not complete within the server's time
    /// limit (408).
    Timeout,
    /// The URI or the header section is over the server's limits (414, 431).
    HeadTooLarge,
    Internal,
}

/// The body of every error: `{ "error": { "code", "message" } }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorResponse {
    pub error: ErrorBody,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
}

impl ErrorResponse {
    /// An error body; the message is cut to `limits::MAX_SERVER_MESSAGE_CHARS` characters
    /// without control characters, whatever input it quotes.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorResponse {
            error: ErrorBody {
                code,
                message: crate::text::excerpt(
                    &message.into(),
                    crate::params::limits::MAX_SERVER_MESSAGE_CHARS,
                ),
            },
        }
    }
}

impl SearchRequest {
    /// Check shape, sizes and finiteness against what the server expects: `embed_dim` entries
    /// a row with anchor rows (aligned protocol), `frame_dim` without (frame protocol).
    pub fn validate(
        &self,
        anchor_count: usize,
        embed_dim: usize,
        frame_dim: usize,
        limits: &ApiLimits,
    ) -> Result<(), ErrorResponse> {
        use ErrorCode::*;
        if self.k == 0 || self.k > limits.max_k {
            return Err(ErrorResponse::new(
                KOutOfRange,
                format!("k must be in 1..={}, got {}", limits.max_k, self.k),
            ));
        }
        if self.query_rows.is_empty() || self.query_rows.len() > limits.max_query_rows {
            return Err(ErrorResponse::new(
                TooLarge,
                format!(
                    "query_rows must hold 1..={} rows, got {}",
                    limits.max_query_rows,
                    self.query_rows.len()
                ),
            ));
        }
        if let Some(sigma) = self.noise_std {
            if self.anchor_rows.is_some() {
                return Err(ErrorResponse::new(
                    InvalidInput,
                    "noise_std belongs to the frame protocol; omit it with anchor_rows",
                ));
            }
            if !(sigma.is_finite() && sigma > 0.0 && sigma <= 1e6) {
                return Err(ErrorResponse::new(
                    InvalidInput,
                    "noise_std must be finite and in (0, 1e6]",
                ));
            }
        }
        if self.ranking.is_some() && self.noise_std.is_none() {
            return Err(ErrorResponse::new(
                InvalidInput,
                "ranking needs noise_std (it ranks by the class posterior)",
            ));
        }
        let anchor_rows = self.anchor_rows.as_deref().unwrap_or(&[]);
        if self.anchor_rows.is_some() && anchor_rows.len() != anchor_count {
            return Err(ErrorResponse::new(
                DimensionMismatch,
                format!(
                    "anchor_rows must hold {anchor_count} rows, got {}",
                    anchor_rows.len()
                ),
            ));
        }
        let dim = if self.anchor_rows.is_some() {
            embed_dim
        } else {
            frame_dim
        };
        for row in self.query_rows.iter().chain(anchor_rows) {
            if row.len() != dim {
                return Err(ErrorResponse::new(
                    DimensionMismatch,
                    format!("every row must have {dim} entries, got {}", row.len()),
                ));
            }
            if !row.iter().all(|v| v.is_finite()) {
                return Err(ErrorResponse::new(
                    NonFinite,
                    "rows must not contain NaN or infinity",
                ));
            }
            if !row
                .iter()
                .all(|v| v.abs() <= crate::params::limits::MAX_ROW_ABS)
            {
                return Err(ErrorResponse::new(
                    InvalidInput,
                    format!(
                        "row values must be at most {:e} in magnitude",
                        crate::params::limits::MAX_ROW_ABS
                    ),
                ));
            }
        }
        Ok(())
    }
}

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
    /// Blocks of at most `rows` items (a per-block PIR database has as many rows as its largest
    /// block): clusters whose own members exceed half of `rows` are split, then each block is
    /// filled with its members' `m`-nearest items and the items near its cell, those nearest
    /// the cell first, until it holds `rows` ([`capped_members`]).
    Capped { m: u32, rows: u32 },
}

impl Overlap {
    /// The evaluation's name for the variant: `none`, `spill-3`, `closure-16`.
    pub fn name(&self) -> String {
        match self {
            Overlap::None => "none".into(),
            Overlap::Spill(r) => format!("spill-{r}"),
            Overlap::Closure(m) => format!("closure-{m}"),
            Overlap::Capped { m, rows } => format!("capped-{m}-{rows}"),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    /// The familiarity model's layer means' length (its convolutions' widths, 64 + 128).
    const LAYER_DIM: usize = 192;

    fn limits() -> ApiLimits {
        ApiLimits {
            max_k: 50,
            max_query_rows: 32,
            max_body_bytes: 1 << 20,
        }
    }

    fn good() -> SearchRequest {
        SearchRequest {
            query_rows: vec![vec![0.0, 1.0]; 10],
            anchor_rows: Some(vec![vec![1.0, 0.0]; 5]),
            k: 8,
            noise_std: None,
            ranking: None,
        }
    }

    #[test]
    fn frame_requests_need_frame_rows_and_no_anchor_rows() {
        let r = SearchRequest {
            query_rows: vec![vec![0.0; 10]; 4],
            anchor_rows: None,
            k: 8,
            noise_std: Some(0.5),
            ranking: None,
        };
        assert!(r.validate(5, 2, 10, &limits()).is_ok());
        let proportional = SearchRequest {
            ranking: Some(Ranking::Proportional),
            ..r.clone()
        };
        assert!(proportional.validate(5, 2, 10, &limits()).is_ok());
        assert_eq!(
            serde_json::to_value(&proportional).unwrap()["ranking"],
            "proportional"
        );
        // A ranking without the noise std it needs.
        let orphan = SearchRequest {
            noise_std: None,
            ..proportional
        };
        assert_eq!(
            orphan.validate(5, 2, 10, &limits()).unwrap_err().error.code,
            ErrorCode::InvalidInput
        );
        for bad in [0.0, -1.0, f64::NAN, 1e7] {
            let b = SearchRequest {
                noise_std: Some(bad),
                ..r.clone()
            };
            assert_eq!(
                b.validate(5, 2, 10, &limits()).unwrap_err().error.code,
                ErrorCode::InvalidInput
            );
        }
        let mixed = SearchRequest {
            noise_std: Some(0.5),
            ..good()
        };
        assert_eq!(
            mixed.validate(5, 2, 10, &limits()).unwrap_err().error.code,
            ErrorCode::InvalidInput
        );
        let short = SearchRequest {
            query_rows: vec![vec![0.0; 2]; 4],
            ..r.clone()
        };
        assert_eq!(
            short.validate(5, 2, 10, &limits()).unwrap_err().error.code,
            ErrorCode::DimensionMismatch
        );
        // The field is omitted on the wire, not sent as null.
        let v = serde_json::to_value(&r).unwrap();
        assert!(v.get("anchor_rows").is_none());
        assert!(serde_json::to_value(good())
            .unwrap()
            .get("noise_std")
            .is_none());
    }

    #[test]
    fn validates_shapes_limits_and_finiteness() {
        assert!(good().validate(5, 2, 10, &limits()).is_ok());
        let code = |r: SearchRequest| r.validate(5, 2, 10, &limits()).unwrap_err().error.code;
        assert_eq!(
            code(SearchRequest { k: 0, ..good() }),
            ErrorCode::KOutOfRange
        );
        assert_eq!(
            code(SearchRequest { k: 51, ..good() }),
            ErrorCode::KOutOfRange
        );
        let mut r = good();
        r.anchor_rows.as_mut().unwrap().pop();
        assert_eq!(code(r), ErrorCode::DimensionMismatch);
        let mut r = good();
        r.query_rows[3] = vec![1.0];
        assert_eq!(code(r), ErrorCode::DimensionMismatch);
        let mut r = good();
        r.anchor_rows.as_mut().unwrap()[0][1] = f64::INFINITY;
        assert_eq!(code(r), ErrorCode::NonFinite);
        // Finite, but beyond any release (rows of ±1.7e308 overflowed the alignment).
        for v in [1.7e308, -1.0e13] {
            let mut r = good();
            r.anchor_rows.as_mut().unwrap()[1][0] = v;
            assert_eq!(code(r), ErrorCode::InvalidInput, "{v}");
            let mut r = good();
            r.query_rows[0][0] = v;
            assert_eq!(code(r), ErrorCode::InvalidInput, "{v}");
        }
        let mut r = good();
        r.query_rows = vec![vec![0.0, 0.0]; 33];
        assert_eq!(code(r), ErrorCode::TooLarge);
    }

    /// Anchors as a server publishes them (two a class, pseudo-random features and layer
    /// means, one-hot frame rows) and the configuration naming them.
    fn anchors() -> (AnchorsResponse, ConfigResponse) {
        use crate::familiarity::{ClassGaussians, Reference};
        use crate::params::EMBED;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        let n = 20;
        let labels: Vec<u32> = (0..n as u32).map(|i| i % 10).collect();
        let features: Vec<Vec<f32>> = (0..n)
            .map(|_| (0..EMBED).map(|_| next()).collect())
            .collect();
        let layers: Vec<f32> = (0..n * LAYER_DIM).map(|_| next()).collect();
        // Well-formed Gaussians: each class's mean of the right length, identity precisions.
        let gaussians = |dim: usize, rows: &[f32]| ClassGaussians {
            means: (0..10).map(|c| rows[c * dim..][..dim].to_vec()).collect(),
            precision: (0..dim * dim)
                .map(|i| f32::from(u8::from(i % (dim + 1) == 0)))
                .collect(),
        };
        let familiarity = Reference {
            features: gaussians(EMBED, &features.concat()),
            layers: gaussians(LAYER_DIM, &layers),
        };
        let frame_rows = labels
            .iter()
            .map(|&l| (0..10).map(|j| f64::from(j == l)).collect())
            .collect();
        let anchors = AnchorsResponse {
            ids: (0..n as u64).collect(),
            labels,
            features,
            frame_rows,
            familiarity,
        };
        let config = ConfigResponse {
            smlq: SmlqParams::default(),
            privacy_defaults: PrivacyParams::default(),
            class_names: (0..10).map(|c| format!("class {c}")).collect(),
            feature_dim: EMBED,
            frame_dim: 10,
            frame_kernel_scale: 0.02,
            anchor_count: n,
            anchors_sha256: "ab".repeat(32),
            model_version: "test".into(),
            query_model_version: "test-query".into(),
            limits: limits(),
        };
        (anchors, config)
    }

    /// Each malformed part of an anchors file is refused with a typed error, and the
    /// well-formed file passes.
    /// The body the configuration names passes, in either case of hex; one byte changed, or
    /// a configuration naming other bytes, does not.
    #[test]
    fn anchors_named_by_content() {
        let (_, mut config) = anchors();
        let body = br#"{"ids":[]}"#;
        config.anchors_sha256 = crate::digest::hash_hex(body).to_uppercase();
        assert_eq!(AnchorsResponse::check_named(body, &config), Ok(()));
        let other = br#"{"ids":[1]}"#;
        assert_eq!(
            AnchorsResponse::check_named(other, &config),
            Err(Error::NotAsNamed {
                what: "the anchors"
            })
        );
        config.anchors_sha256 = "ab".repeat(32);
        assert!(AnchorsResponse::check_named(body, &config).is_err());
    }

    #[test]
    fn anchors_check_refuses_every_malformed_part() {
        let (good, config) = anchors();
        assert_eq!(good.check(&config, LAYER_DIM), Ok(()));
        assert!(
            good.check(&config, LAYER_DIM - 1).is_err(),
            "another model's layers"
        );
        let refused = |change: &dyn Fn(&mut AnchorsResponse, &mut ConfigResponse)| {
            let (mut a, mut c) = (good.clone(), config.clone());
            change(&mut a, &mut c);
            a.check(&c, LAYER_DIM).unwrap_err()
        };
        let mismatch = |e: Error| matches!(e, Error::DimensionMismatch { .. });
        // Features of another width, named consistently by the configuration (the hostile
        // suite's `mismatched-anchors`): the model's width decides.
        assert!(mismatch(refused(&|a, c| {
            a.features.iter_mut().for_each(|f| f.truncate(3));
            c.feature_dim = 3;
        })));
        assert!(mismatch(refused(&|a, _| a.features[7].push(0.0))));
        assert!(mismatch(refused(&|a, _| {
            a.frame_rows[0].pop();
        })));
        assert!(mismatch(refused(&|a, _| {
            a.frame_rows.pop();
        })));
        assert!(mismatch(refused(&|a, _| {
            a.labels.pop();
        })));
        assert!(mismatch(refused(&|a, _| {
            a.ids.pop();
        })));
        assert!(matches!(
            refused(&|a, _| a.features[3][5] = f32::NAN),
            Error::NonFinite { .. }
        ));
        assert!(matches!(
            refused(&|a, _| a.frame_rows[2][1] = f64::INFINITY),
            Error::NonFinite { .. }
        ));
        assert!(matches!(
            refused(&|a, _| a.labels[4] = 10),
            Error::LabelOutOfRange { label: 10, max: 9 }
        ));
        // The out-of-distribution reference of the wrong shape (`malformed-reference`).
        assert!(mismatch(refused(&|a, _| {
            a.familiarity.layers.precision = vec![1.0, 0.0, 1.0]
        })));
        assert!(matches!(
            refused(&|a, _| a.familiarity.features.means[0][0] = f32::NAN),
            Error::NonFinite { .. }
        ));
    }

    #[test]
    fn error_body_has_the_documented_shape() {
        let e = ErrorResponse::new(ErrorCode::KOutOfRange, "k too big");
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["error"]["code"], "k_out_of_range");
        assert_eq!(v["error"]["message"], "k too big");
    }
}
