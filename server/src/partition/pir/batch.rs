//! Concurrent hintless answers computed together (issue #31's throughput).
//!
//! A scores request that holds an answer slot (`net::admission`) joins its version's queue;
//! the first to find no leader running becomes the leader and, on a blocking thread, answers
//! the queue batch by batch ([`ScoresServe::lead`]) with [`ScoreDb::answer_many`]: one pass over
//! the planes and one read of each plan's digits for the whole batch, the two reads that bound
//! a single answer. Requests arriving while a batch runs form the next one, so a lone search
//! waits for nothing and concurrent ones share the passes.
//!
//! What stays as it was: the operator's cap (every queued request holds its slot until its
//! answer is computed — the slot travels with the query, so a client that goes away does not
//! free it early — and at most `pir_concurrency` answers are queued or running, batched or
//! not);
//! each answer is exactly what it would be alone (`answer_many`'s contract), and a malformed
//! query gets its own error without holding up the others. A panic while computing a batch
//! fails that batch's requests (500), never the leader's later batches.
//!
//! [`ScoreDb::answer_many`]: ::pir::scores::ScoreDb::answer_many

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use ::lattice::rlwe::Ring;
use ::pir::inspiring::InspiringBodies;
use ::pir::scores::{decode_upload, encode_answer, ScoreDb};
use axum::body::Bytes;
use tokio::sync::oneshot;

use super::counters::PirCounters;

/// Queries answered in one pass at most: a batch's work (and the first request's wait) grows
/// with its size, while the reads it saves are shared once a few queries share them
/// (`--bench hintless`: 0.24 core-s a query alone, 0.17 in a batch of 4).
pub const MAX_BATCH: usize = 8;

/// What a queued request receives: its encoded answer, or why its query was refused. A
/// dropped sender (a batch that panicked) reads as an internal error.
pub type Reply = oneshot::Receiver<Result<Vec<u8>, QueryError>>;

/// One version's queue of scores queries waiting for a batch.
#[derive(Default)]
pub struct Batcher {
    state: Mutex<Queue>,
}

/// A queued query, what it holds until it is answered (its admission slot and upload), and
/// where its answer goes.
struct Waiting {
    query: ScoresQuery,
    _holds: Box<dyn Send>,
    reply: oneshot::Sender<Result<Vec<u8>, QueryError>>,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiting>,
    /// A leader is running (it takes every batch until the queue is empty).
    leading: bool,
}

impl Batcher {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `query`, holding `holds` (dropped once its answer is computed). With `true`, the
    /// caller must run [`ScoresServe::lead`] (on a blocking thread): no leader is running to
    /// take it.
    pub fn join(&self, query: ScoresQuery, holds: Box<dyn Send>) -> (Reply, bool) {
        let (reply, rx) = oneshot::channel();
        let mut q = self.lock();
        q.waiting.push_back(Waiting {
            query,
            _holds: holds,
            reply,
        });
        let lead = !q.leading;
        q.leading = true;
        (rx, lead)
    }

    /// The next batch (oldest first, at most [`MAX_BATCH`]); empty when none is waiting, in
    /// which case the caller is no longer the leader (decided under the same lock as
    /// [`Batcher::join`], so no request is left without one).
    fn take(&self) -> Vec<Waiting> {
        let mut q = self.lock();
        let n = q.waiting.len().min(MAX_BATCH);
        if n == 0 {
            q.leading = false;
        }
        q.waiting.drain(..n).collect()
    }

    /// Queries waiting for a batch now.
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }
}

impl ScoresServe {
    /// The leader's loop: answers the queue batch by batch on `pool` until it is empty.
    pub fn lead(&self, pool: &rayon::ThreadPool, counters: &PirCounters) {
        loop {
            let batch = self.batch.take();
            if batch.is_empty() {
                return;
            }
            let inputs: Vec<(&[u64], &InspiringBodies)> = batch
                .iter()
                .map(|w| (w.query.query.as_slice(), &w.query.bodies))
                .collect();
            let micros = Some(&counters.core_us);
            let answers = std::panic::catch_unwind(AssertUnwindSafe(|| {
                pool.install(|| {
                    if self.shard {
                        self.db
                            .part_many(&self.ring, &inputs, micros)
                            .into_iter()
                            .map(|p| p.map(|p| p.encode()))
                            .collect()
                    } else {
                        self.db
                            .answer_many(&self.ring, &inputs, micros)
                            .into_iter()
                            .map(|a| a.map(|a| encode_answer(&a)))
                            .collect::<Vec<_>>()
                    }
                })
            }));
            // A panic drops the replies: those requests read it as an internal error.
            let Ok(answers) = answers else { continue };
            let answered = answers.iter().filter(|a| a.is_ok()).count() as u64;
            counters.score_batches.fetch_add(1, Ordering::Relaxed);
            for c in [
                &counters.requests,
                &counters.queries,
                &counters.score_queries,
            ] {
                c.fetch_add(answered, Ordering::Relaxed);
            }
            for (answer, w) in answers.into_iter().zip(batch) {
                let _ = w
                    .reply
                    .send(answer.map_err(|e| QueryError::Scores(e.to_string())));
            }
        }
    }
}

/// Why a query body was refused.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("the body must be 1..={max} query vectors of {per} bytes each; got {got} bytes")]
    Size { per: usize, max: usize, got: usize },
    #[error("the scores query is malformed: {0}")]
    Scores(String),
    #[error("the query is malformed: {0}")]
    Malformed(String),
}

/// A scores query decoded (cheap next to its answer: done before it takes an answer slot, so
/// a malformed one is refused without waiting for one).
pub struct ScoresQuery {
    pub(super) query: Vec<u64>,
    pub(super) bodies: InspiringBodies,
}

/// The hintless ranking, ready to answer (`publish::pir::hintless`).
pub struct ScoresServe {
    pub ring: Ring,
    pub db: ScoreDb,
    /// The public file, plain and gzip.
    pub public: (Bytes, Bytes),
    /// Queries waiting to be answered together (below).
    pub batch: Batcher,
    /// A row shard's (`server serve --shard-rows`): answers are its parts
    /// ([`::pir::scores::ScorePart`]), for a front to combine.
    pub shard: bool,
}

impl std::fmt::Debug for ScoresServe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScoresServe")
            .field("shape", &self.db.shape())
            .field("bytes", &self.db.bytes())
            .finish()
    }
}

/// Decodes a hintless scores query (exactly the document's `upload_bytes`).
pub fn decode_scores(s: &ScoresServe, body: &[u8]) -> Result<ScoresQuery, QueryError> {
    let (query, bodies) = decode_upload(&s.db.shape(), s.ring.n(), body)
        .map_err(|e| QueryError::Scores(e.to_string()))?;
    Ok(ScoresQuery { query, bodies })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ::lattice::rlwe::Ring;
    use ::pir::inspiring::InspiringMasks;
    use ::pir::scores::{
        decode, decode_answer, packing_masks, plaintext_scores, query, ScoreDb, ScoreShape,
    };
    use axum::body::Bytes;
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    use super::*;

    /// A served score database of `shape` (blocks' features from `feats`) and its masks; the
    /// query seed is `[5; 32]`.
    fn served(
        shape: ScoreShape,
        feats: impl Fn(usize) -> Vec<i16>,
    ) -> (ScoresServe, InspiringMasks) {
        let ring = Ring::new(64);
        let masks = packing_masks(&ring, &shape, &[3; 32]);
        let blocks: Vec<Vec<i16>> = (0..shape.blocks).map(feats).collect();
        let db = ScoreDb::build(&ring, shape, &blocks, &[5; 32], &masks).unwrap();
        let serve = ScoresServe {
            ring,
            db,
            public: (Bytes::new(), Bytes::new()),
            batch: Batcher::default(),
            shard: false,
        };
        (serve, masks)
    }

    /// Queries queued before a leader runs are answered in one batch, each exactly as the
    /// plaintext scores of its own block; a malformed one gets its own error; what each held
    /// is let go once it is answered; and the queue then has no leader, so the next query
    /// leads again.
    #[test]
    fn queued_queries_are_answered_together_each_exactly() {
        let shape = ScoreShape {
            blocks: 3,
            dim: 4,
            rows: 40,
        };
        let feats = |b: usize| -> Vec<i16> {
            (0..4 * (40 - b))
                .map(|i| ((i * 37 + b * 11) % 401) as i16 - 200)
                .collect()
        };
        let (serve, masks) = served(shape, feats);
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        let held = Arc::new(());
        let mut pending = Vec::new();
        for i in 0..5usize {
            let (block, q) = (i % 3, [(i as i16) * 50 - 90, 7, -300, 120]);
            let (mut upload, bodies, sk) =
                query(&serve.ring, &shape, &[5; 32], &masks, block, &q, &mut rng).unwrap();
            if i == 3 {
                upload[0] = u64::MAX; // not reduced: malformed
            }
            let (reply, lead) = serve.batch.join(
                ScoresQuery {
                    query: upload,
                    bodies,
                },
                Box::new(Arc::clone(&held)),
            );
            assert_eq!(lead, i == 0, "only the first finds no leader");
            pending.push((block, q, sk, reply));
        }
        assert_eq!(serve.batch.waiting(), 5);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let counters = PirCounters::default();
        serve.lead(&pool, &counters);
        assert_eq!(serve.batch.waiting(), 0);
        assert_eq!(Arc::strong_count(&held), 1, "every hold let go");
        assert_eq!(counters.score_batches.load(Ordering::Relaxed), 1);
        assert_eq!(counters.score_queries.load(Ordering::Relaxed), 4);
        let public_a = serve.db.public_a();
        for (i, (block, q, sk, mut reply)) in pending.into_iter().enumerate() {
            let got = reply.try_recv().expect("answered");
            if i == 3 {
                let e = got.unwrap_err();
                assert!(e.to_string().contains("score query"), "{e}");
                continue;
            }
            let bytes = got.unwrap();
            let answer = decode_answer(&shape, serve.ring.n(), &bytes).unwrap();
            let scores = decode(&serve.ring, &shape, &sk, &public_a, &answer).unwrap();
            let want = plaintext_scores(&q, &feats(block), shape.dim);
            assert_eq!(&scores[..want.len()], &want[..], "query {i}");
        }
        let (q, bodies, _) = query(
            &serve.ring,
            &shape,
            &[5; 32],
            &masks,
            0,
            &[1, 2, 3, 4],
            &mut rng,
        )
        .unwrap();
        let (_, lead) = serve
            .batch
            .join(ScoresQuery { query: q, bodies }, Box::new(()));
        assert!(lead, "a queue whose leader finished has none");
    }

    /// More queued than a batch holds: answered in batches of at most `MAX_BATCH`, in order.
    #[test]
    fn a_long_queue_is_answered_in_bounded_batches() {
        let shape = ScoreShape {
            blocks: 2,
            dim: 4,
            rows: 8,
        };
        let (serve, masks) = served(shape, |_| vec![1i16; 32]);
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        let n = 2 * MAX_BATCH + 1;
        let replies: Vec<Reply> = (0..n)
            .map(|_| {
                let (q, bodies, _) = query(
                    &serve.ring,
                    &shape,
                    &[5; 32],
                    &masks,
                    1,
                    &[1, 1, 1, 1],
                    &mut rng,
                )
                .unwrap();
                serve
                    .batch
                    .join(ScoresQuery { query: q, bodies }, Box::new(()))
                    .0
            })
            .collect();
        let counters = PirCounters::default();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        serve.lead(&pool, &counters);
        assert_eq!(counters.score_batches.load(Ordering::Relaxed), 3);
        assert_eq!(counters.score_queries.load(Ordering::Relaxed), n as u64);
        for mut r in replies {
            assert!(r.try_recv().unwrap().is_ok());
        }
    }
}
