//! The privacy budget this user has spent from this machine: every release's receipt, kept in
//! a file under the user's state directory and composed as the page composes its own
//! (`dp::budget::compose`).

use std::path::PathBuf;

use client::ledger::LedgerError;
use dp::budget::{compose, Total};
use dp::mechanism::Receipt;

use crate::error::{CliError, Result};

/// Where receipts are kept: `$PRIVATEMAIL_STATE_DIR`, else the platform's state directory
/// (`$XDG_STATE_HOME` or `~/.local/state` on Linux), else its local data directory.
pub fn path() -> Result<PathBuf> {
    let dir = std::env::var_os("PRIVATEMAIL_STATE_DIR")
        .map(PathBuf::from)
        .or_else(|| dirs::state_dir().map(|d| d.join("privatemail")))
        .or_else(|| dirs::data_local_dir().map(|d| d.join("privatemail")))
        .ok_or_else(|| CliError::State {
            path: "?".into(),
            reason: "no state directory; set PRIVATEMAIL_STATE_DIR".into(),
        })?;
    Ok(dir.join("receipts.json"))
}

fn state_err(path: &std::path::Path, e: impl std::fmt::Display) -> CliError {
    CliError::State {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// The receipts, each one a release could have written (a file edited to lower the total is
/// an error, never read as spent).
pub fn load() -> Result<Vec<Receipt>> {
    let p = path()?;
    let all: Vec<Receipt> = read_json(&p)?.unwrap_or_default();
    all.iter()
        .try_for_each(Receipt::check)
        .map_err(|e| state_err(&p, e))?;
    Ok(all)
}

/// A state file's JSON, or `None` if there is none yet (any other failure is an error: a
/// state file that cannot be read is never taken as empty).
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(p: &std::path::Path) -> Result<Option<T>> {
    match std::fs::read(p) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| state_err(p, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(state_err(p, e)),
    }
}

/// Write a state file atomically (a temporary file renamed over the old one), so a crash
/// never loses what it held (the receipts already spent, a refusal).
pub(crate) fn write_json(p: &std::path::Path, value: &impl serde::Serialize) -> Result<()> {
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir).map_err(|e| state_err(dir, e))?;
    }
    let tmp = p.with_extension("json.tmp");
    let json = serde_json::to_vec_pretty(value).map_err(|e| state_err(p, e))?;
    std::fs::write(&tmp, json).map_err(|e| state_err(&tmp, e))?;
    std::fs::rename(&tmp, p).map_err(|e| state_err(p, e))
}

/// Runs `f` holding the state directory's lock (`state.lock`, an exclusive advisory lock on a
/// file of its own), so CLI runs that overlap take turns at a state file's read, change and
/// write: none loses another's receipt or refusal, and a release's check against
/// `--max-epsilon` and its record are one step. `f` must not take the lock again.
pub(crate) fn locked<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    let p = path()?.with_file_name("state.lock");
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir).map_err(|e| state_err(dir, e))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&p)
        .map_err(|e| state_err(&p, e))?;
    file.lock().map_err(|e| state_err(&p, e))?;
    // Unlocked when `file` is dropped (closed), after `f`.
    f()
}

fn store(receipts: &[Receipt]) -> Result<()> {
    write_json(&path()?, &receipts)
}

pub fn total(receipts: &[Receipt], delta: f64) -> Result<Total> {
    Ok(compose(receipts, delta)?)
}

/// Refuse (before anything is sent) a release that would bring the total above `max_epsilon`.
pub fn guard(receipt: Option<&Receipt>, max_epsilon: Option<f64>, delta: f64) -> Result<()> {
    let (Some(r), Some(max)) = (receipt, max_epsilon) else {
        return Ok(());
    };
    let mut all = load()?;
    all.push(*r);
    let t = total(&all, delta)?;
    if t.epsilon > max {
        return Err(CliError::BudgetExceeded {
            total: t.epsilon,
            max,
            delta,
        });
    }
    Ok(())
}

/// Record a release that is about to be sent (recorded first: a crash after sending must not
/// forget what was spent).
pub fn record(receipt: &Receipt) -> Result<()> {
    let mut all = load()?;
    all.push(*receipt);
    store(&all)
}

pub fn reset() -> Result<()> {
    locked(|| store(&[]))
}

/// The receipts file as the search drivers' ledger (`client::ledger`): a release is
/// guarded against `--max-epsilon`, then recorded, before the driver hands out the request that
/// carries it. The CLI error behind a refusal is kept, so its exit code survives the driver.
pub struct Spend {
    pub max_epsilon: Option<f64>,
    pub delta: f64,
    pub error: Option<CliError>,
}

impl Spend {
    pub fn new(max_epsilon: Option<f64>, delta: f64) -> Self {
        Spend {
            max_epsilon,
            delta,
            error: None,
        }
    }

    /// The CLI error that stopped a record, else `fallback` (the driver's own error).
    pub fn error_or(&mut self, fallback: CliError) -> CliError {
        self.error.take().unwrap_or(fallback)
    }
}

impl client::ledger::Ledger for Spend {
    fn record(&mut self, receipt: &Receipt) -> std::result::Result<(), LedgerError> {
        let done = locked(|| {
            guard(Some(receipt), self.max_epsilon, self.delta)?;
            record(receipt)
        });
        done.map_err(|e| {
            let words = LedgerError(e.to_string());
            self.error = Some(e);
            words
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writers that overlap lose no receipt: eight threads (each lock taken through a file
    /// handle of its own, as separate runs of the CLI take it) add 40 receipts each, by the
    /// read, add and write a release's record makes, under [`locked`]. (Without the lock, 24
    /// CLI searches at once left 27 receipts of 34.)
    #[test]
    fn overlapping_writers_lose_no_receipt() {
        let dir = std::env::temp_dir().join(format!("pm-cli-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // The only test of this binary that reads the state directory.
        std::env::set_var("PRIVATEMAIL_STATE_DIR", &dir);
        let receipt = Receipt::pure(1.0, dp::mechanism::ReleaseKind::BlockSubset);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..40 {
                        locked(|| {
                            let mut all = load()?;
                            all.push(receipt);
                            store(&all)
                        })
                        .unwrap();
                    }
                });
            }
        });
        assert_eq!(load().unwrap().len(), 8 * 40);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
