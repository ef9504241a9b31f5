//! Lattice-based single-server private information retrieval (PIR): a client fetches records
//! of a public database, or scores against it, while the server, which computes the answer,
//! learns nothing about which ones (computationally, under LWE and Ring-LWE).
//!
//! **This crate knows nothing about galleries.** Its databases are matrices of small integers
//! (bytes, `i16` features) with public shapes; its inputs are seeds, shapes, records and
//! vectors, never partitions, block files, centroids or documents. The crates above it
//! (`publish::pir`, `client::pir_search`) lay a gallery out as these databases,
//! derive the seeds, publish and check the documents, and rank.
//!
//! The first scheme follows SimplePIR (Henzinger et al., USENIX Security 2023), written here
//! from the paper: the database is a byte matrix `D` (`m` rows × `n` columns), the server
//! publishes a one-time *hint* `H = D·A` for a public random matrix `A` (`n × N`), a query for
//! column `j` is `A·s + e + Δ·u_j` with a fresh secret `s`, the answer is `D·query`, and the
//! client removes `H·s` and rounds to get column `j`. The server's work per query is one pass
//! over the database (`m·n` byte × word products); the client's is `(m + n)·N`.
//!
//! - [`lwe`] — parameters (128-bit security by SimplePIR's lattice-estimator run for at most
//!   2²⁰ samples; failure ≤ 2⁻⁴⁰ per query, proven in its docs),
//!   the public matrix;
//! - [`layout`] — records as columns, the server's hint and answers;
//! - [`bits`] — fixed-width values packed end to end on the wire;
//! - [`client`] — queries and decoding, with the query-privacy guarantee;
//! - [`inspiring`] — packing LWE answers into RLWE with one key (InspiRING);
//! - [`scores`] — encrypted exact scores `2⟨q, f⟩ − ‖f‖²` of every row of one privately chosen
//!   block of an `i16` matrix, no hint;
//! - [`cpu`] — the calling thread's CPU time, for the work servers report;
//! - [`held`] — numbers held in memory or read in place from bytes the server mapped;
//! - [`error`] — what the code refuses ([`Error`], and [`PirError`] for answers and hints that
//!   fail their checks).
//!
//! The lattice maths beneath the schemes — arithmetic modulo `Q` and `P`, the NTT, Ring-LWE
//! keys, key switching and automorphisms, the error sampler — is the crate `lattice`.

pub mod bits;
pub mod client;
pub mod cpu;
pub mod digest;
pub mod error;
pub mod held;
pub mod inspiring;
pub mod layout;
pub mod lwe;
mod par;
pub mod scores;
pub mod shard;
#[cfg(target_arch = "x86_64")]
mod vnni;

pub use error::{Error, PirError, Result};

#[doc(hidden)]
pub mod selftest;

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    use super::client::{query, Hint, PirError};
    use super::layout::{Database, Shape};
    use super::lwe::matrix_a;
    use crate::digest::sha256_hex as hash_hex;

    fn served(shape: Shape, records: &[Vec<u8>], seed: [u8; 32]) -> (Database, Hint) {
        let db = Database::build(shape, records.iter().map(|r| r.as_slice())).unwrap();
        let a = matrix_a(&seed, shape.cols);
        let values = db.hint_rows(&a, 0..shape.rows);
        let bytes = super::layout::encode_hint(&values);
        let hint = Hint::from_bytes(&shape, &bytes, &hash_hex(&bytes)).unwrap();
        (db, hint)
    }

    fn answer(db: &Database, body: &[u8]) -> Vec<u8> {
        let q: Vec<u32> = db.shape.decode_queries(body).unwrap();
        let c = q.len() / db.shape.cols;
        let rows = db.shape.rows;
        // Two halves, as a server splitting rows over threads would.
        let top = db.answer_rows(&q, 0..rows / 2);
        let bottom = db.answer_rows(&q, rows / 2..rows);
        let mut out = Vec::new();
        for k in 0..c {
            out.extend_from_slice(&top[k * (rows / 2)..(k + 1) * (rows / 2)]);
            out.extend_from_slice(&bottom[k * (rows - rows / 2)..(k + 1) * (rows - rows / 2)]);
        }
        db.shape.encode_answer(&out)
    }

    fn random_records(rng: &mut ChaCha20Rng, count: usize, len: usize) -> Vec<Vec<u8>> {
        use rand::RngCore;
        (0..count)
            .map(|r| {
                // Edge contents: all zeros, all 0xFF, and random bytes of every length.
                let l = if r % 3 == 0 {
                    len
                } else {
                    1 + (rng.next_u32() as usize % len)
                };
                match r % 5 {
                    0 => vec![0u8; l],
                    1 => vec![0xFF; l],
                    _ => (0..l).map(|_| rng.next_u32() as u8).collect(),
                }
            })
            .collect()
    }

    #[test]
    fn round_trip_on_random_databases_stacked_and_split() {
        let mut rng = ChaCha20Rng::seed_from_u64(11);
        // (record_len, records, rows): stacked records, one per column, and split records.
        for (len, count, rows) in [
            (16usize, 37usize, 64usize),
            (64, 20, 64),
            (96, 9, 32),
            (5, 1, 5),
        ] {
            let shape = Shape::new(len, count, rows).unwrap();
            let recs = random_records(&mut rng, count, len);
            let seed = [count as u8; 32];
            let (db, hint) = served(shape, &recs, seed);
            // First, last, and a repeat in one batch.
            let want = [0, count - 1, count / 2, 0];
            let (body, pending) = query(&shape, &seed, &want, &mut rng).unwrap();
            assert_eq!(
                body.len(),
                want.len() * shape.queries_per_record() * shape.query_bytes()
            );
            let got = pending.decode(&hint, &answer(&db, &body)).unwrap();
            for (r, g) in want.iter().zip(&got) {
                let mut expect = recs[*r].clone();
                expect.resize(len, 0);
                assert_eq!(g, &expect, "record {r} of {shape:?}");
            }
            let units = pending.decode_units(&hint, &answer(&db, &body)).unwrap();
            for (r, u) in want.iter().zip(&units) {
                let unit = shape.unit_bytes(shape.unit_of(*r), |i| &recs[i]);
                assert_eq!(u, &unit, "record {r}'s unit of {shape:?}");
            }
        }
    }

    #[test]
    fn a_wrong_key_or_damaged_answer_never_yields_the_record() {
        let mut rng = ChaCha20Rng::seed_from_u64(12);
        let shape = Shape::new(32, 50, 64).unwrap();
        let recs = random_records(&mut rng, 50, 32);
        let seed = [9u8; 32];
        let (db, hint) = served(shape, &recs, seed);
        let (body, pending) = query(&shape, &seed, &[7], &mut rng).unwrap();
        let good = answer(&db, &body);
        // Wrong size: typed error.
        let err = pending.decode(&hint, &good[..good.len() - 2]).unwrap_err();
        assert!(err.to_string().contains("PIR answer has"));
        // Damaged answer: decodes, but to other bytes (the record hash then refuses it).
        let mut bad = good.clone();
        // Record 7 is the second of its column (rows 32..64): damage its row 35 (the top byte
        // of its 16-bit entry).
        bad[2 * 35 + 1] ^= 0x40;
        let mut want = recs[7].clone();
        want.resize(32, 0);
        assert_ne!(pending.decode(&hint, &bad).unwrap()[0], want);
        // Another query's key (its secret) cannot decode this answer.
        let (_, other) = query(&shape, &seed, &[7], &mut rng).unwrap();
        assert_ne!(other.decode(&hint, &good).unwrap()[0], want);
        // A hint for another seed.
        let (_, wrong_hint) = served(shape, &recs, [8u8; 32]);
        assert_ne!(pending.decode(&wrong_hint, &good).unwrap()[0], want);
        // A damaged hint file is refused by its hash.
        let mut hb = super::layout::encode_hint(&hint.values);
        let h = hash_hex(&hb);
        hb[0] ^= 1;
        assert!(matches!(
            Hint::from_bytes(&shape, &hb, &h).map_err(|e| e.to_string()),
            Err(e) if e.contains("hint")
        ));
        let _ = PirError::Malformed(String::new());
    }

    #[test]
    fn queries_for_different_records_have_the_same_size_and_look_uniform() {
        let mut rng = ChaCha20Rng::seed_from_u64(13);
        let shape = Shape::new(784, 10_000, 1568).unwrap();
        let seed = [1u8; 32];
        let (a, _) = query(&shape, &seed, &[0, 1, 2], &mut rng).unwrap();
        let (b, _) = query(&shape, &seed, &[9_999, 5_000, 4_321], &mut rng).unwrap();
        assert_eq!(a.len(), b.len());
        // Chi-square of the byte histogram against uniform (255 degrees of freedom: the 99.9 %
        // quantile is ≈ 330). A sanity check, not a proof.
        for body in [&a, &b] {
            let mut hist = [0f64; 256];
            body.iter().for_each(|&x| hist[x as usize] += 1.0);
            let e = body.len() as f64 / 256.0;
            let chi: f64 = hist.iter().map(|o| (o - e) * (o - e) / e).sum();
            assert!(chi < 330.0, "chi-square {chi}");
        }
        // The selected column does not stand out: its word is not more often near Δ-shifted
        // values than any other (the mean of the top byte is uniform's 127.5 ± noise).
        let words: Vec<u32> = shape.decode_queries(&a).unwrap()[..shape.cols].to_vec();
        let mean = words.iter().map(|w| (w >> 24) as f64).sum::<f64>() / words.len() as f64;
        assert!((mean - 127.5).abs() < 3.0, "mean top byte {mean}");
    }

    /// The digest the wasm test (`client-wasm/tests/browser/pir_search.rs`) compares against.
    pub const TRANSCRIPT_7: &str =
        "aa08063f8cbb07becb4374093eb085daa72aba988bf154fa370e683a1ec63760";

    #[test]
    fn the_transcript_is_stable() {
        assert_eq!(super::selftest::transcript(7), TRANSCRIPT_7);
    }

    /// The digest the wasm test compares the hintless scores' transcript against.
    pub const HINTLESS_TRANSCRIPT_7: &str =
        "ddd9e5e332bf3a568cef1c56daa48172e6ee5fbc31f1a498657bc0c9484793b5";

    #[test]
    fn the_hintless_transcript_is_stable() {
        assert_eq!(
            super::selftest::hintless_transcript(7),
            HINTLESS_TRANSCRIPT_7
        );
    }

    #[test]
    fn bounds_are_enforced() {
        let mut rng = ChaCha20Rng::seed_from_u64(14);
        let shape = Shape::new(8, 4, 8).unwrap();
        assert!(query(&shape, &[0; 32], &[4], &mut rng).is_err());
        assert!(query(&shape, &[0; 32], &[], &mut rng).is_err());
        let many = vec![0usize; crate::layout::MAX_QUERIES + 1];
        assert!(query(&shape, &[0; 32], &many, &mut rng).is_err());
        // A preparation answers for exactly its count of queries.
        let p = || crate::client::prepare(&shape, &[0; 32], 2, &mut ChaCha20Rng::seed_from_u64(1));
        assert!(p().unwrap().query(&[1]).is_err());
        assert!(p().unwrap().query(&[1, 2, 3]).is_err());
        assert!(p().unwrap().query(&[1, 4]).is_err());
        assert!(p().unwrap().query(&[1, 3]).is_ok());
        assert!(crate::client::prepare(&shape, &[0; 32], 0, &mut rng).is_err());
    }

    /// Queries made from masks prepared before the records were known decode to the records
    /// asked for, and two preparations never share a mask.
    #[test]
    fn prepared_masks_query_any_records() {
        let mut rng = ChaCha20Rng::seed_from_u64(15);
        let shape = Shape::new(24, 30, 48).unwrap();
        let recs = random_records(&mut rng, 30, 24);
        let seed = [9; 32];
        let (db, hint) = served(shape, &recs, seed);
        let a = crate::client::prepare(&shape, &seed, 3, &mut rng).unwrap();
        let b = crate::client::prepare(&shape, &seed, 3, &mut rng).unwrap();
        let want = [29, 0, 17];
        let (qa, pa) = a.query(&want).unwrap();
        let (qb, pb) = b.query(&want).unwrap();
        assert_ne!(qa, qb, "fresh secrets for every preparation");
        for (body, pending) in [(qa, pa), (qb, pb)] {
            let got = pending.decode(&hint, &answer(&db, &body)).unwrap();
            for (r, g) in want.iter().zip(&got) {
                let mut expect = recs[*r].clone();
                expect.resize(24, 0);
                assert_eq!(g, &expect);
            }
        }
    }
}
