//! The persisted refusal after a hostile PIR failure (`client::pir_search::driver`):
//! one file in the state directory, `refusals.json`, mapping a server's base URL to the
//! refusal. While a server has one, every search against it (every protocol: no fallback to a
//! less private mode) is refused before anything is sent, until `privatemail clear-refusal`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use client::pir_search::driver::Refusal;

use crate::error::{CliError, Result};

fn path() -> Result<PathBuf> {
    Ok(crate::budget::path()?.with_file_name("refusals.json"))
}

/// The servers' refusals. A file that cannot be read is an error, never "no refusal": losing
/// the record would let a hostile server ask again.
fn load_all() -> Result<BTreeMap<String, Refusal>> {
    Ok(crate::budget::read_json(&path()?)?.unwrap_or_default())
}

fn store(all: &BTreeMap<String, Refusal>) -> Result<()> {
    crate::budget::write_json(&path()?, all)
}

fn key(server: &str) -> String {
    server.trim_end_matches('/').to_ascii_lowercase()
}

/// The refusal standing against `server`, if any.
pub fn load(server: &str) -> Result<Option<Refusal>> {
    Ok(load_all()?.remove(&key(server)))
}

/// Refuse every later search against `server` (recorded before the failure is reported).
pub fn record(server: &str, refusal: &Refusal) -> Result<()> {
    let mut all = load_all()?;
    all.insert(key(server), refusal.clone());
    store(&all)
}

/// Lift the refusal against `server`; returns whether there was one.
pub fn clear(server: &str) -> Result<bool> {
    let mut all = load_all()?;
    let had = all.remove(&key(server)).is_some();
    if had {
        store(&all)?;
    }
    Ok(had)
}

/// Before any search: the refusal's error while one stands against `server`.
pub fn guard(server: &str) -> Result<()> {
    match load(server)? {
        Some(r) => Err(CliError::Stopped(r.failure().message)),
        None => Ok(()),
    }
}
