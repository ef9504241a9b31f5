//! What a hostile server can send a PIR client, thrown at its decoders: property tests
//! (bounded case counts, run by `cargo test` and CI) for the PIR answer decoder, hints, ranking
//! records and the PIR document's validation. Nothing may panic; the client's record check
//! refuses a damaged answer unless it decodes to the record as published; whatever validates
//! is within the limits.

use ::pir::client::{query, Hint, Pending};
use ::pir::layout::{encode_hint, Database, Shape};
use ::pir::lwe::matrix_a;
use client::pir_search::rank_level;
use proptest::prelude::*;
use publish::blocks::hash_hex;
use publish::pir::doc::{validate, FileDoc, PirDbDoc, PirDoc, SchemeDoc};
use publish::pir::records::{
    decode_rank_record, encode_rank_record, rank_record_len, RankItem, Ranked,
};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

fn served() -> (Shape, Hint, [u8; 32]) {
    let shape = Shape::new(48, 20, 96).unwrap();
    let recs: Vec<Vec<u8>> = (0..20)
        .map(|r| (0..48).map(|b| (r * 7 + b * 13) as u8).collect())
        .collect();
    let db = Database::build(shape, recs.iter().map(|r| r.as_slice())).unwrap();
    let seed = [2u8; 32];
    let hint = encode_hint(&db.hint_rows(&matrix_a(&seed, shape.cols), 0..shape.rows));
    let h = Hint::from_bytes(&shape, &hint, &hash_hex(&hint)).unwrap();
    (shape, h, seed)
}

fn answer(db: &Database, body: &[u8]) -> Vec<u8> {
    let q: Vec<u32> = db.shape.decode_queries(body).unwrap();
    db.shape
        .encode_answer(&db.answer_rows(&q, 0..db.shape.rows))
}

fn rank_record() -> Vec<u8> {
    let f = [[0.6f32, 0.8], [1.0, 0.0], [0.0, 1.0]];
    let items: Vec<RankItem> = (0..3)
        .map(|i| RankItem {
            id: 10 + i as u64,
            label: i as u8,
            features: &f[i],
            index: i as u32,
            digest: [i as u8 + 1; 16],
        })
        .collect();
    encode_rank_record(&items, 2).unwrap()
}

fn db_doc(shape: Shape) -> PirDbDoc {
    PirDbDoc {
        shape,
        a_seed: "00".repeat(32),
        hint_sha256: "ab".repeat(32),
        record_hashes: Vec::new(),
        failure_log2: shape.failure_log2(),
    }
}

/// Records of the level database below: 1 to 4 items each.
const LEVEL_RECORDS: usize = 4;
const QUERY: [f32; 2] = [0.6, 0.8];
/// Unit features at distances from `QUERY` far enough apart that quantisation keeps the order.
const FEATURES: [[f32; 2]; 4] = [[0.6, 0.8], [1.0, 0.0], [-0.6, 0.8], [-0.8, -0.6]];

/// A level's ranking database as a server publishes it: record `r` holds items `0..=r`
/// (ids `100·r + i`, features `FEATURES[i]`), each record zero-padded to the longest, two
/// stacked in a column, and the document naming each record's SHA-256 (unpadded).
struct Level {
    shape: Shape,
    records: Vec<Vec<u8>>,
    db: Database,
    hint: Hint,
    seed: [u8; 32],
    pir: PirDoc,
}

fn level() -> Level {
    let records: Vec<Vec<u8>> = (0..LEVEL_RECORDS)
        .map(|r| {
            let items: Vec<RankItem> = (0..=r)
                .map(|i| RankItem {
                    id: (100 * r + i) as u64,
                    label: i as u8,
                    features: &FEATURES[i],
                    index: (4 * r + i) as u32,
                    digest: [(16 * r + i) as u8; 16],
                })
                .collect();
            encode_rank_record(&items, 2).unwrap()
        })
        .collect();
    let len = rank_record_len(LEVEL_RECORDS, 2);
    let shape = Shape::new(len, LEVEL_RECORDS, 2 * len).unwrap();
    let db = Database::build(shape, records.iter().map(|r| r.as_slice())).unwrap();
    let seed = [7u8; 32];
    let hint = encode_hint(&db.hint_rows(&matrix_a(&seed, shape.cols), 0..shape.rows));
    let hint_sha256 = hash_hex(&hint);
    let pir = PirDoc {
        version: "v".into(),
        scheme: SchemeDoc::ours(),
        answer_url: "/api/v1/pir/v".into(),
        // Thumbnail records 0..20: every item's index is one.
        thumbs: db_doc(Shape::new(48, 20, 96).unwrap()),
        rank_table: None,
        levels: vec![Some(PirDbDoc {
            shape,
            a_seed: hex::encode(seed),
            hint_sha256: hint_sha256.clone(),
            record_hashes: records.iter().map(|r| hash_hex(r)).collect(),
            failure_log2: shape.failure_log2(),
        })],
        scores: None,
        thumb_features: false,
        thumbs_code: None,
    };
    let hint = Hint::from_bytes(&shape, &hint, &hint_sha256).unwrap();
    Level {
        shape,
        records,
        db,
        hint,
        seed,
        pir,
    }
}

impl Level {
    /// The client's check and ranking of a level answer: every item of the record.
    fn rank(&self, pending: &Pending, answer: &[u8]) -> Result<Ranked, shared::Error> {
        let k = pending.records()[0] + 1;
        rank_level(&self.pir, 0, pending, &self.hint, answer, &QUERY, k)
    }

    /// Record `r` as the database holds it (zero-padded).
    fn padded(&self, r: usize) -> Vec<u8> {
        let mut p = self.records[r].clone();
        p.resize(self.shape.record_len, 0);
        p
    }

    /// `ranked` is record `r`'s items nearest `QUERY` first, with their indices and digests.
    fn assert_is_the_ranking_of(&self, r: usize, ranked: &Ranked) {
        let mut order: Vec<usize> = (0..=r).collect();
        let d = |i: usize| {
            let f = FEATURES[i];
            (f[0] - QUERY[0]).powi(2) + (f[1] - QUERY[1]).powi(2)
        };
        order.sort_by(|&a, &b| d(a).total_cmp(&d(b)));
        let ids: Vec<u64> = ranked.hits.iter().map(|h| h.id).collect();
        let want: Vec<u64> = order.iter().map(|&i| (100 * r + i) as u64).collect();
        assert_eq!(ids, want, "record {r}");
        let want: Vec<u32> = order.iter().map(|&i| (4 * r + i) as u32).collect();
        assert_eq!(ranked.indices, want, "record {r}");
        let want: Vec<[u8; 16]> = order.iter().map(|&i| [(16 * r + i) as u8; 16]).collect();
        assert_eq!(ranked.digests, want, "record {r}");
    }
}

/// The refusals of a ranking record's check: its hash, or its format and padding.
fn refused_by_the_record_check(e: &str) -> bool {
    e.contains("PIR ranking record does not match its published SHA-256")
        || e.contains("PIR record is malformed")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary answer bytes of any length: a typed error or some bytes — never a panic.
    #[test]
    fn any_answer_decodes_or_is_refused(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let (shape, hint, seed) = served();
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let (_, pending) = query(&shape, &seed, &[4], &mut rng).unwrap();
        let r = pending.decode(&hint, &bytes);
        // The right length may still be refused (stray bits past the packed entries).
        prop_assert!(r.is_err() || bytes.len() == pending.answer_bytes());
    }

    /// A damaged entry of a real answer to a level's ranking query, through the client's own
    /// accept/refuse code (`rank_level`: the record checked against its published SHA-256, its
    /// padding and format): the honest answer is accepted with the record's ranking; a damaged
    /// one either decodes to the same record (a change within the rounding margin, or in the
    /// other record of the column) and gives the same ranking, or is refused — never another
    /// ranking.
    #[test]
    fn damaged_level_answers_are_refused_by_the_record_check(
        record in 0usize..LEVEL_RECORDS,
        word in any::<proptest::sample::Index>(),
        flip in 1u16..u16::MAX,
    ) {
        let lv = level();
        let mut rng = ChaCha20Rng::seed_from_u64(4);
        let (body, pending) = query(&lv.shape, &lv.seed, &[record], &mut rng).unwrap();
        let honest = answer(&lv.db, &body);
        let want = lv.rank(&pending, &honest).unwrap();
        lv.assert_is_the_ranking_of(record, &want);
        let mut entries = lv.shape.decode_answer(&honest).unwrap();
        let at = word.index(entries.len());
        entries[at] ^= u32::from(flip) << 16;
        let damaged = lv.shape.encode_answer(&entries);
        let decoded = pending.decode(&lv.hint, &damaged).unwrap().pop().unwrap();
        let got = lv.rank(&pending, &damaged);
        if decoded == lv.padded(record) {
            prop_assert_eq!(got.unwrap(), want);
        } else {
            let e = got.expect_err("a changed record was accepted").to_string();
            prop_assert!(refused_by_the_record_check(&e), "{}", e);
        }
    }

    /// Arbitrary hint files: refused unless exactly the published bytes.
    #[test]
    fn any_hint_is_refused_unless_it_matches(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
        let (shape, hint, _) = served();
        let real = encode_hint(&hint.values);
        let h = hash_hex(&real);
        prop_assert!(Hint::from_bytes(&shape, &bytes, &h).is_err() || bytes == real);
    }

    /// Ranking records: any bytes, or a real record with bytes changed, decode only when they
    /// are the published record (plus zero padding).
    #[test]
    fn ranking_records_decode_only_as_published(
        junk in proptest::collection::vec(any::<u8>(), 0..400),
        at in 0usize..400,
        x in 1u8..=255,
        pad in 0usize..64,
    ) {
        let rec = rank_record();
        let h = hash_hex(&rec);
        prop_assert!(decode_rank_record(&junk, &h).is_err() || junk.starts_with(&rec));
        let mut padded = rec.clone();
        padded.resize(rec.len() + pad, 0);
        prop_assert!(decode_rank_record(&padded, &h).is_ok());
        let i = at % padded.len();
        padded[i] ^= x;
        prop_assert!(decode_rank_record(&padded, &h).is_err());
    }

    /// Documents with arbitrary shapes and sizes: validation refuses anything that does not
    /// tile, is over the limits or has a failure bound above 2⁻⁴⁰, and never panics.
    #[test]
    fn pir_documents_with_arbitrary_shapes_are_validated(
        record_len in 0usize..5000, records in 0usize..3_000_000, rows in 0usize..2_000_000,
        cols in 0usize..3_000_000, table in proptest::option::of(0u64..u64::MAX),
    ) {
        let shape = Shape { record_len, records, rows, cols };
        let doc = PirDoc {
            version: "v".into(),
            scheme: SchemeDoc::ours(),
            answer_url: "/api/v1/pir/v".into(),
            thumbs: db_doc(shape),
            rank_table: table.map(|b| FileDoc { bytes: b, transfer_bytes: b / 2, sha256: "cd".repeat(32) }),
            levels: vec![None],
            scores: None,
            thumb_features: false,
            thumbs_code: None,
        };
        if validate(&doc, records, 1).is_ok() {
            prop_assert!(shape.validate().is_ok());
            prop_assert!(shape.hint_bytes() <= shared::params::limits::MAX_PIR_HINT_BYTES);
            prop_assert!(shape.failure_log2() <= -40.0);
        }
    }
}

#[test]
fn answers_are_asked_only_of_the_server_itself() {
    let shape = Shape::new(784, 10, 784).unwrap();
    let doc = |url: &str| PirDoc {
        version: "v".into(),
        scheme: SchemeDoc::ours(),
        answer_url: url.into(),
        thumbs: db_doc(shape),
        rank_table: None,
        levels: vec![],
        scores: None,
        thumb_features: false,
        thumbs_code: None,
    };
    assert!(validate(&doc("/api/v1/pir/v1"), 10, 0).is_ok());
    for bad in [
        "https://evil.example/pir",
        "//evil.example/pir",
        "api/v1/pir",
        "/api/../../x",
        "/api/v1/pir?x=1",
        "/api v1",
        "",
    ] {
        assert!(validate(&doc(bad), 10, 0).is_err(), "{bad}");
    }
}

#[test]
fn a_document_for_another_scheme_is_refused() {
    let shape = Shape::new(784, 10, 784).unwrap();
    let mut scheme = SchemeDoc::ours();
    scheme.sigma = 0.5; // too little noise: not the scheme whose security was estimated
    let doc = PirDoc {
        version: "v".into(),
        scheme,
        answer_url: "/x".into(),
        thumbs: db_doc(shape),
        rank_table: None,
        levels: vec![],
        scores: None,
        thumb_features: false,
        thumbs_code: None,
    };
    assert!(validate(&doc, 10, 0).is_err());
}

/// Every byte of the asked record changed in turn (the top bit of its answer entry: a change
/// the rounding cannot absorb) is refused by the client's record check; a change to the
/// other record of the column leaves the asked one as published, accepted with its ranking.
#[test]
fn every_changed_byte_of_a_level_record_is_refused() {
    let lv = level();
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    for record in 0..LEVEL_RECORDS {
        let (body, pending) = query(&lv.shape, &lv.seed, &[record], &mut rng).unwrap();
        let honest = answer(&lv.db, &body);
        let want = lv.rank(&pending, &honest).unwrap();
        lv.assert_is_the_ranking_of(record, &want);
        let entries = lv.shape.decode_answer(&honest).unwrap();
        let mut refused = 0;
        for at in 0..entries.len() {
            let mut bad = entries.clone();
            bad[at] ^= 1 << 31;
            let damaged = lv.shape.encode_answer(&bad);
            let decoded = pending.decode(&lv.hint, &damaged).unwrap().pop().unwrap();
            match lv.rank(&pending, &damaged) {
                Err(e) => {
                    let e = e.to_string();
                    assert!(
                        refused_by_the_record_check(&e),
                        "record {record}, entry {at}: {e}"
                    );
                    assert_ne!(decoded, lv.padded(record), "entry {at}");
                    refused += 1;
                }
                Ok(got) => {
                    assert_eq!(decoded, lv.padded(record), "record {record}, entry {at}");
                    assert_eq!(got, want, "record {record}, entry {at}");
                }
            }
        }
        // One refusal for each byte of the padded record, the padding included.
        assert_eq!(refused, lv.shape.record_len, "record {record}");
    }
}
