//! PIR in the browser's WebAssembly: the same queries, answers and decoded records as the
//! native build (fixed transcripts' digests, also checked natively in the `privatemail-pir`
//! crate), the query generation and decoding speed at the 10,000-image thumbnail shape, and the
//! hintless scores' client work at the deployed ring degree (reported, not asserted).

use ::pir::client::{query, Hint};
use ::pir::layout::{encode_hint, Database, Shape};
use ::pir::lwe::matrix_a;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use wasm_bindgen_test::*;

/// `pir::tests::TRANSCRIPT_7` (crate `privatemail-pir`), computed natively.
const NATIVE_TRANSCRIPT_7: &str =
    "aa08063f8cbb07becb4374093eb085daa72aba988bf154fa370e683a1ec63760";

/// `pir::tests::HINTLESS_TRANSCRIPT_7` (crate `privatemail-pir`), computed natively.
const NATIVE_HINTLESS_TRANSCRIPT_7: &str =
    "ddd9e5e332bf3a568cef1c56daa48172e6ee5fbc31f1a498657bc0c9484793b5";

#[wasm_bindgen_test]
fn wasm_queries_answers_and_decoding_equal_the_native_ones() {
    assert_eq!(::pir::selftest::transcript(7), NATIVE_TRANSCRIPT_7);
    assert_eq!(
        ::pir::selftest::hintless_transcript(7),
        NATIVE_HINTLESS_TRANSCRIPT_7
    );
}

#[wasm_bindgen_test]
fn hintless_scores_at_the_deployed_degree_in_wasm() {
    use ::lattice::rlwe::{uniform, Ring};
    use ::lattice::N;
    use ::pir::scores::{
        decode, packing_masks, plaintext_scores, prepare, query, ScoreDb, ScoreShape,
    };
    let ring = Ring::new(N);
    let mut rng = ChaCha20Rng::seed_from_u64(2);
    // Exact scores end to end on a small database at N = 4,096.
    let small = ScoreShape {
        blocks: 3,
        dim: 8,
        rows: 40,
    };
    let masks = packing_masks(&ring, &small, &[3; 32]);
    let blocks: Vec<Vec<i16>> = (0..3)
        .map(|b| {
            (0..40 * 8)
                .map(|i| (((i * 337 + b * 91) % 20_001) - 10_000) as i16)
                .collect()
        })
        .collect();
    let db = ScoreDb::build(&ring, small, &blocks, &[4; 32], &masks).unwrap();
    let q: Vec<i16> = (0..8).map(|j| 3_000 * j - 9_000).collect();
    let (up, bodies, sk) = query(&ring, &small, &[4; 32], &masks, 1, &q, &mut rng).unwrap();
    let answer = db.answer(&ring, &up, &bodies, None).unwrap();
    let scores = decode(&ring, &small, &sk, &db.public_a(), &answer).unwrap();
    assert_eq!(&scores[..40], &plaintext_scores(&q, &blocks[1], 8)[..]);
    // The client's work at the million-image shape (256 blocks, 11,000 rows): the query and
    // key bodies, and decoding 6 packed ciphertexts (their content does not change the cost).
    let shape = ScoreShape {
        blocks: 256,
        dim: 64,
        rows: 11_000,
    };
    let q: Vec<i16> = (0..64).map(|j| 130 * j - 4_160).collect();
    let masks = packing_masks(&ring, &shape, &[3; 32]);
    let t0 = js_sys::Date::now();
    let prepared = prepare(&ring, &shape, &[4; 32], &masks, &mut rng).unwrap();
    let tp = js_sys::Date::now();
    let (up, _bodies, sk) = prepared.query(200, &q).unwrap();
    let t1 = js_sys::Date::now();
    // An answer of all-zero scores (b = a·s exactly) stands in for the server's: decoding
    // reads and checks every coefficient whatever the scores are.
    let polys = shape.ciphertexts(N);
    let a_parts: Vec<Vec<u64>> = (0..polys)
        .map(|_| (0..N).map(|_| uniform(&mut rng)).collect())
        .collect();
    // Only the first `packing_width` coefficients of each `b` are sent (they carry the rows).
    let answer: Vec<Vec<u64>> = a_parts
        .iter()
        .map(|a| {
            let mut b = ring.mul(a, sk.coeffs());
            b.truncate(shape.packing_width(N));
            b
        })
        .collect();
    let public_a: Vec<&[u64]> = a_parts.iter().map(|p| p.as_slice()).collect();
    let t2 = js_sys::Date::now();
    let zeros = decode(&ring, &shape, &sk, &public_a, &answer).unwrap();
    let t3 = js_sys::Date::now();
    assert!(zeros.iter().all(|&t| t == 0));
    assert_eq!(up.len(), shape.cols(N));
    console_log!(
        "hintless scores in wasm at the 1M shape: query + key bodies {:.0} ms (prepared before \
         the photo {:.0} ms, then the photo's part {:.0} ms), decode {:.0} ms",
        t1 - t0,
        tp - t0,
        t1 - tp,
        t3 - t2
    );
}

#[wasm_bindgen_test]
fn a_thumbnail_batch_round_trips_in_wasm() {
    // 1,000 thumbnails, two per column (the server's layout), eight fetched at once.
    let shape = Shape::new(784, 1_000, 1_568).unwrap();
    let recs: Vec<Vec<u8>> = (0..1_000)
        .map(|r| (0..784).map(|b| ((r * 13 + b) % 251) as u8).collect())
        .collect();
    let db = Database::build(shape, recs.iter().map(|r| r.as_slice())).unwrap();
    let seed = [5u8; 32];
    let hint = encode_hint(&db.hint_rows(&matrix_a(&seed, shape.cols), 0..shape.rows));
    let h = Hint::from_bytes(&shape, &hint, &publish::blocks::hash_hex(&hint)).unwrap();
    let want = [0usize, 999, 500, 501, 3, 3, 77, 640];
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let (body, pending) = query(&shape, &seed, &want, &mut rng).unwrap();
    let q: Vec<u32> = shape.decode_queries(&body).unwrap();
    let answer = shape.encode_answer(&db.answer_rows(&q, 0..shape.rows));
    let got = pending.decode(&h, &answer).unwrap();
    for (r, g) in want.iter().zip(&got) {
        assert_eq!(g, &recs[*r]);
    }
}
