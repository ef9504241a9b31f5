//! One error type for every layer: every bad input is a typed variant, never a panic.

use thiserror::Error;

/// Everything the shared code can refuse.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum Error {
    #[error("invalid parameter `{name}`: {reason}")]
    InvalidParameter { name: &'static str, reason: String },
    #[error("dimension mismatch in {what}: expected {expected}, got {got}")]
    DimensionMismatch {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("{what} contains a non-finite value (NaN or infinity)")]
    NonFinite { what: &'static str },
    #[error("{what} has a row with zero norm, which cannot be normalised to unit length")]
    ZeroRow { what: &'static str },
    #[error("label {label} is outside 0..={max}")]
    LabelOutOfRange { label: u32, max: u32 },
    #[error("{what}: {count} exceeds the limit of {limit}")]
    TooLarge {
        what: &'static str,
        count: usize,
        limit: usize,
    },
    #[error("{what}: need at least {min}, got {got}")]
    TooSmall {
        what: &'static str,
        min: usize,
        got: usize,
    },
    #[error("no public anchor of class {class} to use as a dummy query")]
    MissingClass { class: u32 },
    #[error("the classic Gaussian mechanism is only proven for epsilon < 1 (got {epsilon}); use the analytic or discrete Gaussian mechanism")]
    ClassicEpsilonTooLarge { epsilon: f64 },
    #[error("degenerate alignment: {reason}")]
    DegenerateAlignment { reason: &'static str },
    #[error("{what} do not match the SHA-256 the configuration names")]
    NotAsNamed { what: &'static str },
    #[error("{what} are not the file this client was built with (another SHA-256)")]
    NotPinned { what: &'static str },
    #[error("malformed IDX data: {0}")]
    Idx(String),
    #[error("the operating system's random number generator failed: {0}")]
    Rng(String),
}

pub type Result<T> = std::result::Result<T, Error>;

/// A query feature vector at the boundary: the expected length, and finite.
pub fn ensure_query(features: &[f64], dim: usize) -> Result<()> {
    if features.len() != dim {
        return Err(Error::DimensionMismatch {
            what: "query features",
            expected: dim,
            got: features.len(),
        });
    }
    ensure_finite(features, "query features")
}

/// [`ensure_query`] for f32 features (the model's), without a copy.
pub fn ensure_query_f32(features: &[f32], dim: usize) -> Result<()> {
    if features.len() != dim {
        return Err(Error::DimensionMismatch {
            what: "query features",
            expected: dim,
            got: features.len(),
        });
    }
    if features.iter().all(|v| v.is_finite()) {
        Ok(())
    } else {
        Err(Error::NonFinite {
            what: "query features",
        })
    }
}

/// Rejects NaN and infinities at the boundary.
pub fn ensure_finite(values: &[f64], what: &'static str) -> Result<()> {
    if values.iter().all(|v| v.is_finite()) {
        Ok(())
    } else {
        Err(Error::NonFinite { what })
    }
}
