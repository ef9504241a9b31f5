//! Parameters with validation and serde: one definition for the client, the server and `eval`.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Length of the model's features: every document and request that carries features carries
/// this many (the on-device model's output, `embed::weights::EMBED`).
pub const EMBED: usize = 64;

/// The δ of every (ε, δ) release a client makes (the anchor frame, Algorithm 1) and of the
/// privacy total it reports: the page's always, the CLI's unless `--delta` says otherwise.
///
/// Why here and not the server's: a larger δ calibrates less noise for the same ε (at ε = 1
/// and the class simplex's sensitivity √2, σ = 5.72 at δ = 10⁻⁵ but 0.26 at δ = 0.999999), so
/// a δ taken from the gallery's configuration (`ConfigResponse::privacy_defaults`) would let
/// the server shrink the noise on the photo's numbers. Neither client reads that field's δ.
pub const DELTA: f64 = 1e-5;

/// Hard limits that bound every size the shared code accepts.
pub mod limits {
    /// Rows of one client embedding (query + dummies + anchors). The client keeps an n×n kernel,
    /// so this bounds its memory (4,096² f64 = 128 MiB worst case).
    pub const MAX_CLIENT_ROWS: usize = 4_096;
    /// Feature dimension.
    pub const MAX_FEATURE_DIM: usize = 4_096;
    /// Rows of one search (the real query and its dummies).
    pub const MAX_QUERY_ROWS: usize = 64;
    /// Embedding dimension `k` of SMLQ.
    pub const MAX_EMBED_DIM: usize = 16;
    /// SMLQ iterations.
    pub const MAX_ITERATIONS: usize = 100;
    /// Number of classes.
    pub const MAX_CLASSES: u32 = 256;
    /// Largest epsilon accepted. Far beyond any meaningful privacy (from about ε = 10 a
    /// release protects little), but allowed so a user — and the end-to-end tests — can see
    /// what the pipeline returns when the noise is small.
    pub const MAX_EPSILON: f64 = 100.0;
    /// Largest |value| in a search request's rows (`SearchRequest::validate`): a release's
    /// values are far smaller (frame rows at most 10⁶, noise at most 10⁶ a coordinate), and
    /// squares and sums over every anchor row stay finite, so the alignment's covariance and
    /// distances are numbers (rows of ±1.7·10³⁰⁸ made its SVD panic).
    pub const MAX_ROW_ABS: f64 = 1e12;
    /// Blocks in one partition level (the k-subset release draws over them).
    pub const MAX_BLOCKS: usize = 8_192;
    /// Levels in one partition.
    pub const MAX_LEVELS: usize = 16;
    /// Items in one block file (the whole-gallery block of a million images included).
    pub const MAX_BLOCK_ITEMS: usize = 1_048_576;
    /// Items a client ranks at once, and the `k` of a block ranking.
    pub const MAX_RANK_K: usize = 100;
    /// PIR query vectors in one request (a ranking record of many columns plus the
    /// thumbnails of one search): the lattice code's own bound, `pir::client::MAX_QUERIES`.
    pub const MAX_PIR_QUERIES: usize = 128;
    /// Bytes of one PIR hint a client accepts (a 4,096-row database has 16 MiB).
    pub const MAX_PIR_HINT_BYTES: usize = 32 << 20;
    /// Bytes of the whole ranking table a client accepts (157 B an item: 1,000,000 items are
    /// 157 MB).
    pub const MAX_PIR_TABLE_BYTES: usize = 192 << 20;
    /// Side of a block's square thumbnails.
    pub const MAX_THUMB_SIDE: usize = 256;

    // What a client accepts from a server, a hostile one included: every answer is read as a
    // stream and abandoned past its limit, every wait has a deadline. The CLI and the page
    // (through the wasm client's `limits()`) read them from here.

    /// Bytes of a partition document (the 1,000,000-image gallery's is about 0.68 MB since its
    /// centroids moved to per-level files; it was 6.8 MB).
    pub const MAX_PARTITION_DOC_BYTES: u64 = 32 << 20;
    /// Bytes of any other JSON answer: configuration, anchors, gallery map, search results.
    pub const MAX_JSON_BYTES: u64 = 16 << 20;
    /// Bytes of an error answer a client reads.
    pub const MAX_ERROR_BODY_BYTES: u64 = 64 << 10;
    /// Characters of a server's error message a client shows.
    pub const MAX_ERROR_MESSAGE_CHARS: usize = 300;
    /// Characters of a client's input a server's error message quotes.
    pub const MAX_ECHO_CHARS: usize = 64;
    /// Characters of any error message a server sends.
    pub const MAX_SERVER_MESSAGE_CHARS: usize = 512;
    /// Bytes of one block file, uncompressed (the whole-gallery block of 100,000 images is 92 MB).
    pub const MAX_BLOCK_BYTES: u64 = 512 << 20;
    /// Bytes of all the blocks of one search, uncompressed.
    pub const MAX_SEARCH_BYTES: u64 = 512 << 20;
    /// Redirects a client follows for one request, each within the origin it asked.
    pub const MAX_REDIRECTS: usize = 5;
    /// Characters of the document's `version` and `blocks_url`.
    pub const MAX_VERSION_CHARS: usize = 128;
    pub const MAX_URL_CHARS: usize = 2_048;
    /// Default seconds to connect to a server.
    pub const CONNECT_TIMEOUT_SECS: u64 = 5;
    /// Default seconds to wait for an answer to start, and for each later piece of it.
    pub const FIRST_BYTE_TIMEOUT_SECS: u64 = 10;
    /// Default seconds for a whole search, every request included (the CLI overshoots by at
    /// most one first-byte wait: a hostile server is given up within 60 s).
    pub const TOTAL_TIMEOUT_SECS: u64 = 45;

    /// The limits a client applies to what a server sends, as one value (the page gets it as
    /// JSON from the wasm client).
    #[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
    pub struct ClientLimits {
        pub max_partition_doc_bytes: u64,
        pub max_json_bytes: u64,
        pub max_error_body_bytes: u64,
        pub max_error_message_chars: usize,
        pub max_block_bytes: u64,
        pub max_search_bytes: u64,
        pub max_redirects: usize,
        /// The longest query model file (its format admits several widths, each of one exact
        /// length, checked when it is parsed) and the class model file's exact length: a page
        /// reads no byte more.
        pub max_model_bytes: usize,
        pub class_model_bytes: usize,
        pub connect_timeout_secs: u64,
        pub first_byte_timeout_secs: u64,
        pub total_timeout_secs: u64,
    }

    /// Bytes of the longest query model file a client accepts (two convolutions of the widest
    /// admitted width in f32; `embed::weights::Weights::max_file_len`, checked there).
    pub const MAX_MODEL_BYTES: usize = 2_179_384;
    /// Bytes of the class model's file (`embed::classify::Classifier::file_len`, checked
    /// there).
    pub const CLASS_MODEL_BYTES: usize = 119_544;

    pub const CLIENT: ClientLimits = ClientLimits {
        max_partition_doc_bytes: MAX_PARTITION_DOC_BYTES,
        max_json_bytes: MAX_JSON_BYTES,
        max_error_body_bytes: MAX_ERROR_BODY_BYTES,
        max_error_message_chars: MAX_ERROR_MESSAGE_CHARS,
        max_block_bytes: MAX_BLOCK_BYTES,
        max_search_bytes: MAX_SEARCH_BYTES,
        max_redirects: MAX_REDIRECTS,
        max_model_bytes: MAX_MODEL_BYTES,
        class_model_bytes: CLASS_MODEL_BYTES,
        connect_timeout_secs: CONNECT_TIMEOUT_SECS,
        first_byte_timeout_secs: FIRST_BYTE_TIMEOUT_SECS,
        total_timeout_secs: TOTAL_TIMEOUT_SECS,
    };
}

/// How the noise scale is calibrated. All three add exact discrete Gaussian noise on a fine
/// power-of-two grid (see [`dp::mechanism`]); they differ in how σ is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// Dwork–Roth: σ = √(2 ln(1.25/δ))·Δ/ε, proven only for ε < 1 (refused otherwise).
    ClassicGaussian,
    /// Balle & Wang 2018 analytic calibration: the least σ for which the continuous Gaussian is
    /// (ε, δ)-DP.
    AnalyticGaussian,
    /// OpenDP-style: σ chosen so that the discrete Gaussian's ρ-zCDP (Canonne, Kamath, Steinke
    /// 2020) converts to (ε, δ)-DP. The only choice whose guarantee is proven for the bits we
    /// actually sample; the default.
    #[default]
    DiscreteGaussian,
}

/// Bandwidth of the kernel that post-processing rebuilds from the noisy embedding.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum PostBandwidth {
    /// A fixed kernel scale `s`.
    Fixed(f64),
    /// `s` = median squared distance between rows of the (renormalised) noisy embedding,
    /// times the given factor. Reads only the noisy embedding, so it is post-processing.
    Median(f64),
}

impl Default for PostBandwidth {
    fn default() -> Self {
        PostBandwidth::Median(1.0)
    }
}

/// SMLQ parameters (eq. 4). Client and server must use the same values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SmlqParams {
    /// `s` in `w = exp(-‖u − v‖² / s)`, for features and labels alike.
    pub kernel_scale: f64,
    /// Weight `α` of the label Laplacian.
    pub alpha: f64,
    /// Embedding dimension `k`.
    pub embed_dim: usize,
    /// Std of the initial embedding `Q`. SMLQ is linear in `Q`, so this only sets units.
    pub sigma_q: f64,
    /// Post-processing iterations `T` (the server runs `T + 1` plain ones).
    pub iterations: usize,
    /// Centre, orthonormalise and rescale the iterate after each iteration (post-processing;
    /// see `paper::smlq::renormalize`).
    pub renormalize: bool,
    /// Number of classes `C`; labels are `0..C`, so the largest label is `c = C − 1`. Public.
    pub num_classes: u32,
}

impl Default for SmlqParams {
    fn default() -> Self {
        SmlqParams {
            // Chosen for the non-private embedding of the on-device model's features from a
            // small grid (s ∈ {0.05, 0.1, 0.3, 1}, α ∈ {0.05, 0.5, 2}, T ∈ {30, 60}) on a
            // 2,000-image gallery; the paper's σ = 5–6, T = 5 give chance there. Raised to 0.2
            // for the contrastive-trained weights (cnn-v2), whose neighbours lie farther apart:
            // at 0.1 the kernel is so local that the large-gallery path (Nyström, 2,500
            // landmarks) shared 73 % of the dense path's 8 nearest neighbours on 3,000 test
            // images; at 0.2 it shares 89 %, at a dense Recall@8 of 0.935 against 0.945
            // (0.3: 92 % at 0.936; 0.5: 91 % at 0.889). To be retuned on the training split
            // only (evaluation issue).
            kernel_scale: 0.2,
            alpha: 0.5,
            embed_dim: 2,
            sigma_q: 1.0,
            iterations: 30,
            renormalize: true,
            num_classes: 10,
        }
    }
}

impl SmlqParams {
    /// The largest label `c` (a public constant, never counted from data).
    pub fn max_label(&self) -> u32 {
        self.num_classes - 1
    }

    pub fn validate(&self) -> Result<()> {
        positive_finite("kernel_scale", self.kernel_scale)?;
        if !(self.alpha.is_finite() && self.alpha >= 0.0 && self.alpha <= 100.0) {
            return Err(invalid("alpha", "must be finite and in [0, 100]"));
        }
        if self.embed_dim == 0 || self.embed_dim > limits::MAX_EMBED_DIM {
            return Err(invalid(
                "embed_dim",
                format!("must be in 1..={}", limits::MAX_EMBED_DIM),
            ));
        }
        positive_finite("sigma_q", self.sigma_q)?;
        if self.iterations > limits::MAX_ITERATIONS {
            return Err(invalid(
                "iterations",
                format!("must be at most {}", limits::MAX_ITERATIONS),
            ));
        }
        if self.num_classes < 2 || self.num_classes > limits::MAX_CLASSES {
            return Err(invalid(
                "num_classes",
                format!("must be in 2..={}", limits::MAX_CLASSES),
            ));
        }
        Ok(())
    }
}

/// The privacy budget of one release.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PrivacyParams {
    pub epsilon: f64,
    pub delta: f64,
    #[serde(default)]
    pub mechanism: Mechanism,
}

impl Default for PrivacyParams {
    fn default() -> Self {
        PrivacyParams {
            epsilon: 1.0,
            delta: DELTA,
            mechanism: Mechanism::default(),
        }
    }
}

impl PrivacyParams {
    pub fn validate(&self) -> Result<()> {
        if !(self.epsilon.is_finite() && self.epsilon > 0.0 && self.epsilon <= limits::MAX_EPSILON)
        {
            return Err(invalid(
                "epsilon",
                format!("must be in (0, {}]", limits::MAX_EPSILON),
            ));
        }
        if !(self.delta.is_finite() && self.delta > 0.0 && self.delta < 1.0) {
            return Err(invalid("delta", "must be in (0, 1)"));
        }
        if self.mechanism == Mechanism::ClassicGaussian && self.epsilon >= 1.0 {
            return Err(Error::ClassicEpsilonTooLarge {
                epsilon: self.epsilon,
            });
        }
        Ok(())
    }
}

/// Everything the client needs to privatize one query.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Params {
    pub smlq: SmlqParams,
    pub privacy: PrivacyParams,
    #[serde(default)]
    pub post_bandwidth: PostBandwidth,
}

impl Params {
    pub fn validate(&self) -> Result<()> {
        self.smlq.validate()?;
        self.privacy.validate()?;
        match self.post_bandwidth {
            PostBandwidth::Fixed(s) => positive_finite("post_bandwidth", s),
            PostBandwidth::Median(f) => positive_finite("post_bandwidth", f),
        }
    }
}

fn invalid(name: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidParameter {
        name,
        reason: reason.into(),
    }
}

fn positive_finite(name: &'static str, v: f64) -> Result<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(invalid(name, "must be finite and > 0"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_round_trip_through_json() {
        let p = Params::default();
        p.validate().unwrap();
        let json = serde_json::to_string(&p).unwrap();
        let back: Params = serde_json::from_str(&json).unwrap();
        assert_eq!(p, back);
    }

    #[test]
    fn bad_values_are_refused() {
        let mut p = Params::default();
        p.smlq.kernel_scale = f64::NAN;
        assert!(matches!(
            p.validate(),
            Err(Error::InvalidParameter {
                name: "kernel_scale",
                ..
            })
        ));
        let mut p = Params::default();
        p.privacy.epsilon = 0.0;
        assert!(p.validate().is_err());
        p.privacy.epsilon = f64::INFINITY;
        assert!(p.validate().is_err());
        let mut p = Params::default();
        p.privacy.delta = 1.0;
        assert!(p.validate().is_err());
        let mut p = Params::default();
        p.smlq.embed_dim = 0;
        assert!(p.validate().is_err());
        let mut p = Params::default();
        p.smlq.num_classes = 1;
        assert!(p.validate().is_err());
    }

    #[test]
    fn classic_gaussian_refuses_epsilon_at_least_one() {
        let p = PrivacyParams {
            epsilon: 1.0,
            delta: 1e-5,
            mechanism: Mechanism::ClassicGaussian,
        };
        assert_eq!(
            p.validate(),
            Err(Error::ClassicEpsilonTooLarge { epsilon: 1.0 })
        );
        let ok = PrivacyParams { epsilon: 0.99, ..p };
        ok.validate().unwrap();
    }
}
