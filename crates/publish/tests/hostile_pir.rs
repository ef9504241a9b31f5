//! What a hostile server can send a PIR client, thrown at its decoders: property tests
//! (bounded case counts, run by `cargo test` and CI) for the PIR answer decoder, hints, ranking
//! records and the PIR document's validation. Nothing may panic; a damaged answer never yields
//! the record asked for under a passing check; whatever validates is within the limits.

use ::pir::client::{query, Hint};
use ::pir::layout::{encode_hint, Database, Shape};
use ::pir::lwe::matrix_a;
use proptest::prelude::*;
use publish::blocks::hash_hex;
use publish::pir::doc::{validate, FileDoc, PirDbDoc, PirDoc, SchemeDoc};
use publish::pir::records::{decode_rank_record, encode_rank_record, RankItem};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

fn served() -> (Shape, Vec<Vec<u8>>, Database, Hint, [u8; 32]) {
    let shape = Shape::new(48, 20, 96).unwrap();
    let recs: Vec<Vec<u8>> = (0..20)
        .map(|r| (0..48).map(|b| (r * 7 + b * 13) as u8).collect())
        .collect();
    let db = Database::build(shape, recs.iter().map(|r| r.as_slice())).unwrap();
    let seed = [2u8; 32];
    let hint = encode_hint(&db.hint_rows(&matrix_a(&seed, shape.cols), 0..shape.rows));
    let h = Hint::from_bytes(&shape, &hint, &hash_hex(&hint)).unwrap();
    (shape, recs, db, h, seed)
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary answer bytes of any length: a typed error or some bytes — never a panic.
    #[test]
    fn any_answer_decodes_or_is_refused(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let (shape, _, _, hint, seed) = served();
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let (_, pending) = query(&shape, &seed, &[4], &mut rng).unwrap();
        let r = pending.decode(&hint, &bytes);
        // The right length may still be refused (stray bits past the packed entries).
        prop_assert!(r.is_err() || bytes.len() == pending.answer_bytes());
    }

    /// A damaged entry of a real answer either decodes to the same record (a change within the
    /// rounding margin) or to another one, which the record's hash then refuses: a decoded
    /// record that differs is never accepted as the record.
    #[test]
    fn damaged_answers_never_pass_the_hash(word in 0usize..96, flip in 1u16..u16::MAX) {
        let (shape, recs, db, hint, seed) = served();
        let mut rng = ChaCha20Rng::seed_from_u64(4);
        let (body, pending) = query(&shape, &seed, &[5], &mut rng).unwrap();
        let mut entries = shape.decode_answer(&answer(&db, &body)).unwrap();
        entries[word] ^= u32::from(flip) << 16;
        let ans = shape.encode_answer(&entries);
        let got = pending.decode(&hint, &ans).unwrap().pop().unwrap();
        let ok = hash_hex(&got) == hash_hex(&recs[5]);
        prop_assert_eq!(ok, got == recs[5]);
    }

    /// Arbitrary hint files: refused unless exactly the published bytes.
    #[test]
    fn any_hint_is_refused_unless_it_matches(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
        let (shape, _, _, hint, _) = served();
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
