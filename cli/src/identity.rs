//! The gallery's identity and the refusals, in one file of the state directory,
//! `identities.json`: the rules are `client::identity`'s ([`Book`]); this module reads and
//! writes the file and makes the two requests the rules need.
//!
//! Before any search: [`gate`] refuses on the normalised origin or a resolved address (no
//! request yet), then reads the gallery's identity and configuration (public, the same for every
//! photo), verifies the signature, and refuses on a refused key or a key other than the one
//! pinned for the origin. After a hostile PIR failure, [`record`] refuses the key, the origin and
//! the addresses before the failure is reported. `privatemail clear-refusal` and
//! `privatemail accept-key` are the person's only ways past either.

use std::collections::BTreeMap;
use std::path::PathBuf;

use client::identity::{self as rules, Book, Stop};
use client::pir_search::driver::Refusal;
use shared::identity::{IdentityDoc, MAX_IDENTITY_DOC_BYTES};
use shared::params::limits;

use crate::error::{CliError, Result};
use crate::http::{BodyLimit, Server};

fn path() -> Result<PathBuf> {
    Ok(crate::budget::path()?.with_file_name("identities.json"))
}

/// The refusals of earlier releases, keyed by the URL as typed (`refusals.json`): each is
/// kept, under its normalised origin.
fn legacy_path() -> Result<PathBuf> {
    Ok(crate::budget::path()?.with_file_name("refusals.json"))
}

/// The book. A file that cannot be read is an error, never "no refusal": losing the record
/// would let a hostile server ask again.
fn load() -> Result<Book> {
    let mut book: Book = crate::budget::read_json(&path()?)?.unwrap_or_default();
    let legacy: Option<BTreeMap<String, Refusal>> = crate::budget::read_json(&legacy_path()?)?;
    for (url, refusal) in legacy.unwrap_or_default() {
        if let Ok(origin) = rules::origin(&url) {
            book.record(&origin, &[], None, &refusal);
        }
    }
    Ok(book)
}

fn store(book: &Book) -> Result<()> {
    crate::budget::write_json(&path()?, book)?;
    // Its refusals are in the book now.
    let legacy = legacy_path()?;
    match std::fs::remove_file(&legacy) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(CliError::State {
            path: legacy.display().to_string(),
            reason: e.to_string(),
        }),
        _ => Ok(()),
    }
}

fn origin_of(url: &str) -> Result<String> {
    rules::origin(url).map_err(|e| CliError::Usage(e.to_string()))
}

/// A gallery met through [`gate`]: who it is, and the configuration its key signed.
pub struct Gallery {
    pub origin: String,
    pub addresses: Vec<String>,
    pub key: String,
    /// The `GET /api/v1/config` body whose SHA-256 the key signed.
    pub config_body: Vec<u8>,
}

impl Gallery {
    /// The refusal to hand to a search driver (none once [`gate`] passed; the drivers check
    /// it again).
    pub fn refusal(&self) -> Result<Option<Refusal>> {
        Ok(load()?.refusal(&self.origin, &self.addresses, Some(&self.key)))
    }
}

fn stopped(stop: &Stop, server: &Server) -> CliError {
    let how = match stop {
        Stop::Refused(_) => "`privatemail clear-refusal` lifts it.".to_string(),
        Stop::NewKey { presented, .. } => format!(
            "If you know why the gallery's key changed (ask its operator for the key), accept it \
             with `privatemail accept-key --server {} --key {presented}`.",
            server.base
        ),
    };
    CliError::Stopped(format!("{} {how}", stop.message()))
}

/// What this machine already knows of `server` without contacting it: a refusal standing by
/// its origin or addresses. `privatemail page` checks this before serving a page that would
/// search it (the page makes the identity checks itself, in the browser).
pub fn guard(server: &Server) -> Result<()> {
    known(server).map(|_| ())
}

/// [`guard`]'s check; the gallery's normalised origin and addresses where nothing stands.
fn known(server: &Server) -> Result<(String, Vec<String>)> {
    let origin = origin_of(&server.base)?;
    let addresses: Vec<String> = server
        .addresses()
        .iter()
        .map(|&a| rules::address(a))
        .collect();
    let before = crate::budget::locked(|| {
        let mut book = load()?;
        let before = book.before_contact(&origin, &addresses);
        if before.is_err() {
            store(&book)?;
        }
        Ok(before)
    })?;
    before.map_err(|stop| stopped(&stop, server))?;
    Ok((origin, addresses))
}

/// Before any search against `server`: the checks of the module docs, in order. Returns the
/// gallery and its verified configuration, or the reason nothing more may be sent.
pub fn gate(server: &Server) -> Result<Gallery> {
    let (origin, addresses) = known(server)?;
    let doc: IdentityDoc = server.get_json_within("/api/v1/identity", MAX_IDENTITY_DOC_BYTES)?;
    let config_body = server
        .get_bounded("/api/v1/config", BodyLimit::both(limits::MAX_JSON_BYTES))?
        .bytes;
    let key = rules::verify(&doc, &config_body)
        .map_err(|e| CliError::Malformed(format!("{}: {e}; no search was sent", server.base)))?;
    let met = crate::budget::locked(|| {
        let mut book = load()?;
        let met = book.meet(&origin, &addresses, &key);
        store(&book)?;
        Ok(met)
    })?;
    if let Err(stop) = met {
        return Err(stopped(&stop, server));
    }
    Ok(Gallery {
        origin,
        addresses,
        key,
        config_body,
    })
}

/// Refuse every later search against this gallery, by key, origin and addresses (recorded
/// before the failure is reported).
pub fn record(gallery: &Gallery, refusal: &Refusal) -> Result<()> {
    crate::budget::locked(|| {
        let mut book = load()?;
        book.record(
            &gallery.origin,
            &gallery.addresses,
            Some(&gallery.key),
            refusal,
        );
        store(&book)
    })
}

/// Lift the refusal against `server` (by any URL of it: every identifier it is known by goes
/// with it); returns whether there was one. Sends nothing.
pub fn clear(server: &str) -> Result<bool> {
    let origin = origin_of(server)?;
    crate::budget::locked(|| {
        let mut book = load()?;
        let had = book.clear(&origin);
        store(&book)?;
        Ok(had)
    })
}

/// Pin `key` for `server`'s origin (the person's answer to a new key); returns the key it
/// replaces. Sends nothing.
pub fn accept(server: &str, key: &str) -> Result<Option<String>> {
    let key = rules::parse_key(key).map_err(|e| CliError::Usage(e.to_string()))?;
    let origin = origin_of(server)?;
    crate::budget::locked(|| {
        let mut book = load()?;
        let old = book.accept(&origin, &key);
        store(&book)?;
        Ok(old)
    })
}
