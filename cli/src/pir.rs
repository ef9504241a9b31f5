//! A PIR search from the command line: the flow of `client::pir_search` over HTTP.
//! Hints and the ranking table are public, immutable files: cached on disk by their SHA-256
//! (under the state directory's `pir-cache/`), so only the first search of a version pays for
//! them.

use std::path::PathBuf;
use std::time::Instant;

use client::pir_search::driver::{FailureKind, PirCache, PirSearch, Request, Step};
use client::pir_search::{plan_of, PirPlan, Ranked, RankingKind};
use publish::pir::doc::PirDoc;
use rand_chacha::ChaCha20Rng;
use serde::Serialize;
use shared::api::PartitionDoc;
use shared::params::limits;

use crate::error::{CliError, Result};
use crate::http::{BodyLimit, Server};

/// What a PIR search cost.
#[derive(Debug, Clone, Serialize)]
pub struct PirCosts {
    /// The gallery (partition) version every request of the search named.
    pub version: String,
    pub plan: PirPlan,
    /// Query bodies sent and answers received by this search.
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Public files this search downloaded (0 when they were cached).
    pub one_time_bytes_downloaded: u64,
    /// Query generation, decoding and verification in this process.
    pub client_ms: f64,
}

fn cache_dir() -> Option<PathBuf> {
    crate::budget::path()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("pir-cache")))
}

/// A public file by its SHA-256 (hints, the ranking table, a level's centroids): from the
/// cache, else fetched within `limit` (and cached). Returns the bytes and how many were
/// downloaded. The caller checks the bytes against the hash; a name that is not 64 hex digits
/// is refused here, before it becomes a path (a server could name `../../dev/zero`).
pub(crate) fn public_file(
    server: &Server,
    url: &str,
    sha256: &str,
    limit: BodyLimit,
) -> Result<(Vec<u8>, u64)> {
    if !publish::plan::is_hash(sha256) {
        return Err(CliError::Malformed(format!(
            "{url}: the server names its SHA-256 as `{}`, not 64 hex digits",
            shared::text::excerpt(sha256, 80)
        )));
    }
    let cached = cache_dir().map(|d| d.join(sha256.to_ascii_lowercase()));
    if let Some(bytes) = cached.as_ref().and_then(|p| std::fs::read(p).ok()) {
        if publish::blocks::hash_hex(&bytes).eq_ignore_ascii_case(sha256) {
            return Ok((bytes, 0));
        }
    }
    let got = server.get_bounded(url, limit)?;
    let (bytes, n) = (got.bytes, got.wire);
    if let Some(p) = cached {
        if publish::blocks::hash_hex(&bytes).eq_ignore_ascii_case(sha256) {
            let _ = std::fs::create_dir_all(p.parent().expect("a file in a directory"));
            let tmp = p.with_extension("part");
            if std::fs::write(&tmp, &bytes).is_ok() {
                let _ = std::fs::rename(&tmp, &p);
            }
        }
    }
    Ok((bytes, n))
}

/// The ranked top k (ids, labels, distances) with their thumbnails checked: the sequence of
/// `client::pir_search::driver` over HTTP. This function only moves bytes; the
/// order, sizes and failure handling are the driver's. A hostile failure is persisted
/// against every identifier of `gallery` ([`crate::identity::record`]) before it is reported.
pub fn search(
    server: &Server,
    gallery: &crate::identity::Gallery,
    features: &[f32],
    k: usize,
    max_bytes: f64,
    ranking: Option<RankingKind>,
    rng: ChaCha20Rng,
) -> Result<(Ranked, PirCosts)> {
    let part: PartitionDoc =
        server.get_json_within("/api/v1/partition", limits::MAX_PARTITION_DOC_BYTES)?;
    // The PIR document of the partition's very version: the current version may change
    // between the two requests (a replica switching, or two replicas behind a balancer).
    if !part
        .version
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        || part.version.is_empty()
        || part.version.len() > 128
    {
        return Err(CliError::Malformed(format!(
            "the partition names its version `{}`, not a URL-safe name",
            shared::text::excerpt(&part.version, 80)
        )));
    }
    let doc: PirDoc = server.get_json(&format!("/api/v1/pir/{}", part.version))?;
    let p = plan_of(&part, &doc, k, max_bytes, ranking)
        .map_err(|e| CliError::Malformed(e.to_string()))?;
    let refusal = gallery.refusal()?;
    let mut cache = PirCache::default();
    let (mut once, mut client_ms) = (0u64, 0.0);
    let t0 = Instant::now();
    let (mut search, mut step) =
        PirSearch::start(&part, &doc, &p, features, &cache, refusal.as_ref(), rng);
    client_ms += t0.elapsed().as_secs_f64() * 1e3;
    let found = loop {
        let req = match step {
            Step::Done(out) => break out,
            Step::Send(req) => req,
        };
        let answer = match &req {
            Request::Get {
                url,
                bytes,
                wire_bytes,
                sha256,
                ..
            } => public_file(
                server,
                url,
                sha256,
                BodyLimit {
                    wire: *wire_bytes,
                    decoded: *bytes,
                },
            )
            .map(|(b, n)| {
                once += n;
                b
            }),
            Request::Post {
                url, answer_bytes, ..
            } => server.post_bytes(url, search.body().to_vec(), *answer_bytes as usize),
        };
        let t0 = Instant::now();
        step = match answer {
            Ok(bytes) => search.answer(&mut cache, &bytes),
            Err(e) => {
                // Nothing follows a transport failure; its error keeps its exit code.
                let _ = search.transport_failed(&e.to_string());
                return Err(e);
            }
        };
        client_ms += t0.elapsed().as_secs_f64() * 1e3;
    };
    let traffic = search.traffic();
    match found {
        Ok(found) => Ok((
            found.ranked,
            PirCosts {
                version: part.version.clone(),
                plan: p,
                bytes_up: traffic.up,
                bytes_down: traffic.down,
                one_time_bytes_downloaded: once,
                client_ms,
            },
        )),
        Err(failure) => {
            if let (FailureKind::Hostile, Some(r)) = (failure.kind, &failure.refusal) {
                crate::identity::record(gallery, r)?;
            }
            Err(match failure.kind {
                FailureKind::Hostile => CliError::Hostile(failure.message),
                FailureKind::Locked => CliError::Stopped(failure.message),
                _ => CliError::Malformed(failure.message),
            })
        }
    }
}
