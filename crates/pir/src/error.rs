//! The lattice code's errors: every bad input is a typed variant, never a panic.
//!
//! The wire's `shared::Error` takes them variant by variant with the same messages
//! (`publish::pir::from_lattice`), so a client, the server and the tests read one message for
//! one refusal.

/// Why a PIR answer or hint was refused. Never a wrong record: every path ends in a check.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PirError {
    #[error("PIR answer has {got} bytes, expected {expected}")]
    AnswerSize { expected: usize, got: usize },
    #[error("PIR hint has {got} bytes, expected {expected}")]
    HintSize { expected: usize, got: usize },
    #[error("PIR {what} does not match its published SHA-256 (expected {expected}, got {got})")]
    HashMismatch {
        what: &'static str,
        expected: String,
        got: String,
    },
    #[error("PIR record is malformed: {0}")]
    Malformed(String),
}

/// Everything the lattice code can refuse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// A parameter, shape or input outside what the scheme serves.
    #[error("invalid parameter `{name}`: {reason}")]
    InvalidParameter { name: &'static str, reason: String },
    /// A count above a bound of the scheme.
    #[error("{what}: {count} exceeds the limit of {limit}")]
    TooLarge {
        what: &'static str,
        count: usize,
        limit: usize,
    },
    /// An answer, hint, upload or key that failed its checks.
    #[error("invalid parameter `pir`: {0}")]
    Pir(#[from] PirError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
