//! A replica following its store (`server serve --from STORE`): the live version switch.
//!
//! Every `interval` the replica asks the store for the stamp of `CURRENT.json` (one HEAD:
//! ETag, last-modified, size) and reads the announcement only when the stamp changed. When it
//! names a manifest other than the one serving, the replica prepares that version beside the
//! serving one: the manifest and the catalogue are fetched into the local cache and checked
//! against their SHA-256 (`batch::materialize`), the partition is loaded from the version's
//! own prefix and must be the one the manifest names, the embedding and the PIR databases
//! are built (`AppState::prepare_version`). A version that fails any check is refused and
//! logged, the old one keeps serving, and it is tried again after `RETRY_POLLS` polls (an
//! operator may have replaced the damaged object). A whole version is staged — answerable by
//! name, not current — and made current at the switch moment: the announcement's
//! last-modified time (the store's clock, the same for every replica) plus `switch_delay`,
//! or at once when ready later. So the replicas of one fleet switch together, and until then
//! a search started on any replica finds its version on every replica that prepared it; the
//! replaced version stays answerable for the partitions' grace period, so a search in flight
//! finishes on the version it started with. A replica never serves a half-fetched version:
//! nothing changes before the switch.
//!
//! A version whose anchors, seed or partition settings differ from the ones serving is
//! refused: those shape what every client checks (the signed configuration) and need a
//! rolling restart, which starts each replica on the announced version.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::batch::{self, GalleryManifest};
use crate::partition::blockstore::{BlockStore, ObjectStamp};
use crate::state::{AppState, StateError};

/// Polls after which a refused version is tried again.
pub const RETRY_POLLS: u32 = 30;

/// What a replica follows and how.
pub struct Follow {
    /// The store (`--from`).
    pub from: String,
    /// Where versions are copied (`--cache-dir`).
    pub cache_dir: PathBuf,
    /// Between two looks at the announcement.
    pub interval: Duration,
    /// From the announcement's last-modified time to the switch.
    pub switch_delay: Duration,
    /// `--blocks-public-url` as given (a version's prefix is appended).
    pub blocks_public_url: Option<String>,
    /// The manifest serving at start.
    pub serving: String,
}

/// Follow the store until the process ends (run on a thread of its own: the store's calls
/// block).
pub fn follow(state: Arc<AppState>, f: Follow) {
    let store = match BlockStore::open_objects(&f.from) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "replica: the store cannot be opened; not following it");
            return;
        }
    };
    let mut serving = f.serving.clone();
    state.set_replica_status(|r| {
        r.serving = serving.clone();
        r.announced = serving.clone();
        r.state = "serving".into();
    });
    let mut stamp: Option<ObjectStamp> = None;
    // The announced manifest and when it was written (ms, the store's clock).
    let mut announced: Option<(String, i64)> = None;
    let mut refused: Option<(String, u32)> = None;
    let mut failing = false;
    tracing::info!(
        store = store.describe(),
        every_ms = f.interval.as_millis() as u64,
        switch_delay_secs = f.switch_delay.as_secs_f64(),
        "replica: following the store's announcement"
    );
    loop {
        std::thread::sleep(f.interval);
        match look(&store, &mut stamp) {
            Ok(Some(a)) => {
                if announced.as_ref().map(|x| &x.0) != Some(&a.0) {
                    state.set_replica_status(|r| r.announced = a.0.clone());
                }
                announced = Some(a);
                failing = false;
            }
            Ok(None) => failing = false,
            Err(e) => {
                // Logged once per run of failures, not at every poll.
                if !failing {
                    tracing::warn!(error = %e, "replica: reading the announcement failed; still serving {serving}");
                }
                failing = true;
                continue;
            }
        }
        let Some((sha, at_ms)) = announced.clone() else {
            continue;
        };
        if sha == serving {
            continue;
        }
        if let Some((r, polls)) = &mut refused {
            if *r == sha && *polls < RETRY_POLLS {
                *polls += 1;
                continue;
            }
        }
        let t = Instant::now();
        tracing::info!(manifest = %sha, serving = %serving, "replica: a new version is announced; preparing it");
        state.set_replica_status(|r| r.state = "preparing".into());
        match prepare(&state, &f, &sha) {
            Ok(prepared) => {
                let prepare_secs = t.elapsed().as_secs_f64();
                state.set_replica_status(|r| {
                    r.state = "staged".into();
                    r.last_prepare_secs = Some(prepare_secs);
                });
                let moment = at_ms + f.switch_delay.as_millis() as i64;
                let wait_ms = moment - now_ms();
                if wait_ms > 0 {
                    tracing::info!(
                        manifest = %sha,
                        prepare_secs,
                        switch_in_secs = wait_ms as f64 / 1e3,
                        "replica: next version staged (answerable by name); switching at the fleet's moment"
                    );
                    std::thread::sleep(Duration::from_millis(wait_ms as u64));
                } else {
                    tracing::warn!(
                        manifest = %sha,
                        prepare_secs,
                        late_secs = -wait_ms as f64 / 1e3,
                        "replica: next version ready after the switch moment; switching now (raise --switch-delay-secs above the preparation time)"
                    );
                }
                let partition = prepared.partition.clone();
                match state.switch_to(prepared) {
                    Ok(()) => {
                        tracing::info!(
                            manifest = %sha,
                            partition = %partition,
                            previous = %serving,
                            secs = t.elapsed().as_secs_f64(),
                            "replica: switched; the previous version answers its searches in flight for the grace period"
                        );
                        serving = sha.clone();
                        refused = None;
                        state.set_replica_status(|r| {
                            r.serving = sha.clone();
                            r.state = "serving".into();
                            r.refused = None;
                            r.switches += 1;
                        });
                    }
                    Err(e) => {
                        tracing::error!(manifest = %sha, error = %e, "replica: the switch failed; still serving {serving}");
                        refused = Some((sha.clone(), 0));
                        state.set_replica_status(|r| {
                            r.state = "refused".into();
                            r.refused = Some(e.to_string());
                        });
                    }
                }
            }
            Err(e) => {
                tracing::error!(
                    manifest = %sha,
                    error = %e,
                    retry_in_polls = RETRY_POLLS,
                    "replica: the announced version is refused; still serving {serving}"
                );
                refused = Some((sha.clone(), 0));
                state.set_replica_status(|r| {
                    r.state = "refused".into();
                    r.refused = Some(e.to_string());
                });
            }
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The announcement, read only when its stamp changed since `stamp`: `Ok(None)` when it did
/// not (or there is none).
fn look(
    store: &BlockStore,
    stamp: &mut Option<ObjectStamp>,
) -> Result<Option<(String, i64)>, StateError> {
    let Some(now) = store.head_object(batch::CURRENT)? else {
        return Ok(None);
    };
    if stamp.as_ref() == Some(&now) {
        return Ok(None);
    }
    let Some(body) = store.get_object(batch::CURRENT)? else {
        return Ok(None);
    };
    let c: batch::Current = serde_json::from_slice(&body)
        .map_err(|e| StateError::Invalid(format!("{}: {e}", batch::CURRENT)))?;
    let at = now.modified_ms;
    *stamp = Some(now);
    Ok(Some((c.manifest, at)))
}

/// Fetch, check and prepare manifest `sha` (staged on success).
fn prepare(state: &AppState, f: &Follow, sha: &str) -> Result<crate::state::Prepared, StateError> {
    let t = Instant::now();
    let (sha, m, store_path) = batch::materialize(&f.from, Some(sha), &f.cache_dir)?;
    tracing::info!(manifest = %sha, items = m.items, secs = t.elapsed().as_secs_f64(), "replica: next version fetched and checked");
    fits(state, &m)?;
    let items = batch::cached_items(&store_path)?;
    let blocks = Arc::new(BlockStore::open(
        &batch::sub_spec(&f.from, &m.blocks),
        f.blocks_public_url
            .as_deref()
            .map(|u| format!("{}/{}", u.trim_end_matches('/'), m.blocks)),
    )?);
    let p = state
        .partitions
        .load_from(blocks)
        .map_err(|e| StateError::Invalid(e.to_string()))?;
    if p.doc.version != m.partition_version || p.fingerprint != m.partition_fingerprint {
        return Err(StateError::Invalid(format!(
            "manifest {sha} names partition {}, its store announces {}",
            m.partition_version, p.doc.version
        )));
    }
    state.prepare_version(items, p)
}

/// A version a running replica can switch to: the same anchors, seed and partition settings.
fn fits(state: &AppState, m: &GalleryManifest) -> Result<(), StateError> {
    let s = &state.partitions.settings;
    let same = m.anchors == state.config.anchor_count
        && m.seed == state.seed
        && m.settings.max_share == s.max_share
        && m.settings.allow_full_download == s.allow_full_download
        && m.settings.verified_scores == s.verified_scores
        && m.settings.thumb_code_bytes == s.thumb_code_bytes;
    if same {
        Ok(())
    } else {
        Err(StateError::Invalid(
            "the version's anchors, seed or partition settings differ from the ones serving: \
             restart the replicas on it (a rolling restart)"
                .into(),
        ))
    }
}
