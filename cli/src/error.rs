//! What can go wrong, each with its own exit code so scripts can tell them apart.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum CliError {
    #[error("cannot reach the server at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    /// The server stopped answering in time; the search was abandoned whole (nothing retried).
    #[error("gave up on {url}: {reason}; nothing was retried")]
    TimedOut { url: String, reason: String },
    #[error("the server refused the request ({status}{code}): {message}")]
    Refused {
        status: u16,
        code: String,
        message: String,
    },
    #[error("bad photo {path}: {reason}")]
    BadPhoto { path: String, reason: String },
    /// Nothing to see in the photo (`embed::ood::NothingToSee`): not classified, not searched.
    #[error("nothing to search for in {path}: {reason}; nothing was sent")]
    NothingToSee { path: String, reason: String },
    #[error("privacy budget exceeded: this search would bring the total to ε = {total:.3} (δ = {delta:e}), above --max-epsilon {max}; nothing was sent")]
    BudgetExceeded { total: f64, max: f64, delta: f64 },
    #[error("the server's answer is unusable: {0}")]
    Malformed(String),
    #[error("{0}")]
    Privacy(#[from] shared::Error),
    #[error("budget file {path}: {reason}")]
    State { path: String, reason: String },
    #[error("{0}")]
    Usage(String),
    /// An answer the client decrypted failed its checks; searches against this server are
    /// now stopped (`privatemail clear-refusal`).
    #[error("{0}")]
    Hostile(String),
    /// An earlier such failure stopped searches against this server; nothing was sent.
    #[error("{0}")]
    Stopped(String),
    /// A served page is not this version's (`verify-page`).
    #[error("{0}")]
    PageDiffers(String),
}

impl CliError {
    /// 3 unreachable or too slow, 4 bad photo, 5 budget exceeded, 6 refused by the server, 7 a malformed
    /// or unverifiable answer, 8 a local state file, 9 invalid parameters (clap uses 2), 10 an
    /// answer that failed a check after decryption (searches against the server now stopped),
    /// 11 searches against this server stopped by such a failure earlier (nothing sent), 12 a
    /// served page that differs from this version's, 13 a photo with nothing to see (too small,
    /// one solid colour, noise).
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Unreachable { .. } | CliError::TimedOut { .. } => 3,
            CliError::BadPhoto { .. } => 4,
            CliError::BudgetExceeded { .. } => 5,
            CliError::Refused { .. } => 6,
            CliError::Malformed(_) => 7,
            CliError::State { .. } => 8,
            CliError::Privacy(_) | CliError::Usage(_) => 9,
            CliError::Hostile(_) => 10,
            CliError::Stopped(_) => 11,
            CliError::PageDiffers(_) => 12,
            CliError::NothingToSee { .. } => 13,
        }
    }
}

pub type Result<T> = std::result::Result<T, CliError>;
