//! A PIR search from the command line: the flow of `shared::protocol::pir_search` over HTTP.
//! Hints and the ranking table are public, immutable files: cached on disk by their SHA-256
//! (under the state directory's `pir-cache/`), so only the first search of a version pays for
//! them.

use std::path::PathBuf;
use std::time::Instant;

use rand::RngCore;
use serde::Serialize;
use shared::api::PartitionDoc;
use shared::params::limits;
use shared::pir::client::Hint;
use shared::pir::doc::{PirDbDoc, PirDoc};
use shared::pir::hintless::{self, ScoresKeys, ScoresPublic};
use shared::protocol::pir_search::{
    plan_of, rank_level, rank_query, rank_table, thumbs_decode, thumbs_query, PirPlan, PirRanking,
    Ranked, RankingKind,
};

use crate::error::{CliError, Result};
use crate::http::{BodyLimit, Server};

/// What a PIR search cost.
#[derive(Debug, Clone, Serialize)]
pub struct PirCosts {
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

/// The hintless ranking's path segment (`{answer_url}/scores`, its public file `…/scores/hint`).
const SCORES: &str = "scores";

/// A public file by its SHA-256 (hints, the ranking table, a level's centroids): from the
/// cache, else fetched within `limit` (and cached). Returns the bytes and how many were
/// downloaded. The caller checks the hash.
pub(crate) fn public_file(
    server: &Server,
    url: &str,
    sha256: &str,
    limit: BodyLimit,
) -> Result<(Vec<u8>, u64)> {
    let cached = cache_dir().map(|d| d.join(sha256.to_ascii_lowercase()));
    if let Some(bytes) = cached.as_ref().and_then(|p| std::fs::read(p).ok()) {
        if shared::protocol::blocks::hash_hex(&bytes).eq_ignore_ascii_case(sha256) {
            return Ok((bytes, 0));
        }
    }
    let got = server.get_bounded(url, limit)?;
    let (bytes, n) = (got.bytes, got.wire);
    if let Some(p) = cached {
        if shared::protocol::blocks::hash_hex(&bytes).eq_ignore_ascii_case(sha256) {
            let _ = std::fs::create_dir_all(p.parent().expect("a file in a directory"));
            let tmp = p.with_extension("part");
            if std::fs::write(&tmp, &bytes).is_ok() {
                let _ = std::fs::rename(&tmp, &p);
            }
        }
    }
    Ok((bytes, n))
}

fn hint(server: &Server, doc: &PirDoc, name: &str, db: &PirDbDoc) -> Result<(Hint, u64)> {
    let (bytes, n) = public_file(
        server,
        &format!("{}/{name}/hint", doc.answer_url),
        &db.hint_sha256,
        BodyLimit::both(db.shape.hint_bytes() as u64),
    )?;
    let h = Hint::from_bytes(&db.shape, &bytes, &db.hint_sha256)
        .map_err(|e| CliError::Malformed(e.to_string()))?;
    Ok((h, n))
}

/// The ranked top k (ids, labels, distances) with their thumbnails checked.
pub fn search(
    server: &Server,
    features: &[f32],
    k: usize,
    max_bytes: f64,
    ranking: Option<RankingKind>,
    rng: &mut impl RngCore,
) -> Result<(Ranked, PirCosts)> {
    let part: PartitionDoc =
        server.get_json_within("/api/v1/partition", limits::MAX_PARTITION_DOC_BYTES)?;
    let doc: PirDoc = server.get_json("/api/v1/pir")?;
    let p = plan_of(&part, &doc, k, max_bytes, ranking)
        .map_err(|e| CliError::Malformed(e.to_string()))?;
    let (mut up, mut down, mut once, mut client_ms) = (0u64, 0u64, 0u64, 0.0);
    let mal = |e: shared::Error| CliError::Malformed(e.to_string());
    // The public files first: every search fetches the same ones.
    let (thumb_hint, n) = hint(server, &doc, "thumbs", &doc.thumbs)?;
    once += n;
    // 1. The ranking payload. A failure is kept until the thumbnail request has gone out.
    let ranked: std::result::Result<Ranked, CliError> = match p.ranking {
        PirRanking::Table => {
            let t = doc
                .rank_table
                .as_ref()
                .expect("the plan chose an offered table");
            let (bytes, n) = public_file(
                server,
                &format!("{}/rank", doc.answer_url),
                &t.sha256,
                BodyLimit::both(t.bytes),
            )?;
            once += n;
            let t0 = Instant::now();
            let r = rank_table(&doc, &bytes, features, k).map_err(mal);
            client_ms += t0.elapsed().as_secs_f64() * 1e3;
            r
        }
        PirRanking::Level { level } => {
            let db = doc.levels[level]
                .as_ref()
                .expect("the plan chose an offered level");
            let (level_hint, n) = hint(server, &doc, &level.to_string(), db)?;
            once += n;
            let (centroids, n) = crate::search::level_centroids(server, &part, level)?;
            once += n;
            let t0 = Instant::now();
            let (body, pending) =
                rank_query(&part, &doc, level, &centroids, features, rng).map_err(mal)?;
            client_ms += t0.elapsed().as_secs_f64() * 1e3;
            up += body.len() as u64;
            let answer = server.post_bytes(
                &format!("{}/{level}", doc.answer_url),
                body,
                pending.answer_bytes(),
            )?;
            down += answer.len() as u64;
            let t0 = Instant::now();
            let r =
                rank_level(&doc, level, &pending, &level_hint, &answer, features, k).map_err(mal);
            client_ms += t0.elapsed().as_secs_f64() * 1e3;
            r
        }
        PirRanking::Scores { .. } => {
            let sd = doc.scores.as_ref().expect("the plan chose offered scores");
            let (bytes, n) = public_file(
                server,
                &format!("{}/{SCORES}/hint", doc.answer_url),
                &sd.public.sha256,
                BodyLimit::both(sd.public.bytes),
            )?;
            once += n;
            let (centroids, n) = crate::search::level_centroids(server, &part, sd.level)?;
            once += n;
            let t0 = Instant::now();
            let public = ScoresPublic::decode(sd, &part, &bytes).map_err(mal)?;
            let keys = ScoresKeys::new(sd).map_err(mal)?;
            let (body, pending) =
                hintless::query(&part, sd, &keys, &centroids, features, rng).map_err(mal)?;
            client_ms += t0.elapsed().as_secs_f64() * 1e3;
            up += body.len() as u64;
            let answer = server.post_bytes(
                &format!("{}/{SCORES}", doc.answer_url),
                body,
                sd.answer_bytes as usize,
            )?;
            down += answer.len() as u64;
            let t0 = Instant::now();
            let r = hintless::rank(sd, &keys, &public, &pending, &answer, k).map_err(mal);
            client_ms += t0.elapsed().as_secs_f64() * 1e3;
            r
        }
    };
    // 2. Exactly k thumbnail queries, whether or not the ranking checked out.
    let t0 = Instant::now();
    let (body, pending) = thumbs_query(&doc, ranked.as_ref().ok(), k, rng).map_err(mal)?;
    client_ms += t0.elapsed().as_secs_f64() * 1e3;
    up += body.len() as u64;
    let answer = server.post_bytes(
        &format!("{}/thumbs", doc.answer_url),
        body,
        pending.answer_bytes(),
    )?;
    down += answer.len() as u64;
    let ranked = ranked?;
    let t0 = Instant::now();
    thumbs_decode(&pending, &thumb_hint, &answer, &ranked, part.thumb_side).map_err(mal)?;
    client_ms += t0.elapsed().as_secs_f64() * 1e3;
    Ok((
        ranked,
        PirCosts {
            plan: p,
            bytes_up: up,
            bytes_down: down,
            one_time_bytes_downloaded: once,
            client_ms,
        },
    ))
}
