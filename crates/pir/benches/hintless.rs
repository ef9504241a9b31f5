//! Hintless encrypted scores at the million-image shape, end to end on one core: 256 blocks of
//! 11,000 items (B = 256 at 1M with each block's closure), 64 `i16` features. Random features:
//! the costs depend only on the shape. Prints the server's build (plans) and per-query work,
//! the client's, the bytes, and checks the decoded scores against the plaintext ones.
//! `cargo bench -p privatemail-pir --bench hintless [-- blocks rows]` (the real 1M partition's
//! largest block at B = 256 is 21,046 rows; `docs/eval/pir.md`).

use std::time::Instant;

use lattice::rlwe::{Gadget, Ring};
use lattice::N;
use pir::inspiring::InspiringBodies;
use pir::scores::{self, decode, failure_log2, query, ScoreDb, ScoreShape};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<usize> = raw.iter().filter_map(|a| a.parse().ok()).collect();
    // `cargo bench` passes `--bench`; under `cargo test --all-targets` this runs once at a
    // small shape, as a smoke test.
    let bench = raw.iter().any(|a| a == "--bench");
    let shape = ScoreShape {
        blocks: args.first().copied().unwrap_or(if bench { 256 } else { 8 }),
        dim: 64,
        rows: args
            .get(1)
            .copied()
            .unwrap_or(if bench { 11_000 } else { 300 }),
    };
    let ring = Ring::new(N);
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let blocks = pir::selftest::random_blocks(&shape, &mut rng);
    let (qseed, pseed) = ([1u8; 32], [2u8; 32]);
    let masks = scores::packing_masks(&ring, &shape, &pseed);
    println!("shape {shape:?}, {} query columns", shape.cols(N));
    let t = Instant::now();
    let db = ScoreDb::build(&ring, shape, &blocks, &qseed, &masks).expect("builds");
    println!(
        "server build: {:.1} s, plans {:.2} GiB",
        t.elapsed().as_secs_f64(),
        db.plan_bytes() as f64 / (1u64 << 30) as f64
    );
    let public_a = db.public_a();
    // Three searches (three blocks); the median is reported, each checked exactly.
    let mut runs = Vec::new();
    let (mut upload_len, mut answer_len) = (0, 0);
    for block in [shape.blocks / 2, 0, shape.blocks - 1] {
        let q: Vec<i16> = pir::selftest::capped_features(shape.dim, &mut rng);
        let t = Instant::now();
        let (upload, bodies, sk) =
            query(&ring, &shape, &qseed, &masks, block, &q, &mut rng).expect("query");
        let client_query = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let sums = db.plane_sums(&ring, &upload, None).expect("scoring pass");
        let scoring = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let answer = db.pack_sums(&ring, &sums, &bodies, None);
        let packing = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let scores = decode(&ring, &shape, &sk, &public_a, &answer).expect("decode");
        let client_decode = t.elapsed().as_secs_f64();
        let exact = scores[..] == scores::plaintext_scores(&q, &blocks[block], shape.dim)[..];
        assert!(
            exact,
            "decoded scores differ from the plaintext ones (block {block})"
        );
        println!(
            "block {block}: server {:.1} core-ms = scoring {:.1} + packing {:.1}; \
             client query {client_query:.3} s, decode {client_decode:.3} s; all {} scores exact",
            (scoring + packing) * 1e3,
            scoring * 1e3,
            packing * 1e3,
            shape.rows
        );
        runs.push((scoring + packing, scoring, packing));
        (upload_len, answer_len) = (upload.len(), answer.iter().map(Vec::len).sum::<usize>());
    }
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (server, scoring, packing) = runs[1];
    // The wire sizes (`scores::upload_len`, `answer_len`: 37 bits a sent coefficient); the
    // packed `a` parts are 8 bytes a value.
    let up_query = upload_len * 8;
    let up_keys = InspiringBodies::wire_len(N, Gadget::DEFAULT);
    assert_eq!(up_query + up_keys, scores::upload_len(&shape, N));
    let down = scores::answer_len(&shape, N);
    assert_eq!(down, pir::bits::packed_len(answer_len, scores::ANSWER_BITS));
    let once = public_a.len() * N * 8;
    println!(
        "server per query (median of 3): {:.1} core-ms = scoring pass {:.1} + packing online \
         {:.1}",
        server * 1e3,
        scoring * 1e3,
        packing * 1e3
    );
    println!(
        "bytes: up {:.0} KiB query + {:.0} KiB key bodies, down {:.0} KiB, once {:.0} KiB",
        up_query as f64 / 1024.0,
        up_keys as f64 / 1024.0,
        down as f64 / 1024.0,
        once as f64 / 1024.0
    );
    println!("failure bound 2^{:.0} per query", failure_log2(&shape, N));
    // Concurrent searches answered together (`ScoreDb::answer_many`): the planes and each
    // plan's digits read once for the batch.
    let batch = if bench { 4 } else { 2 };
    let jobs: Vec<_> = (0..batch)
        .map(|i| {
            let block = i * (shape.blocks - 1) / batch.max(2).saturating_sub(1).max(1);
            let q: Vec<i16> = pir::selftest::capped_features(shape.dim, &mut rng);
            let (upload, bodies, sk) =
                query(&ring, &shape, &qseed, &masks, block, &q, &mut rng).expect("query");
            (block, q, upload, bodies, sk)
        })
        .collect();
    let inputs: Vec<(&[u64], &InspiringBodies)> = jobs.iter().map(|j| (&j.2[..], &j.3)).collect();
    let t = Instant::now();
    let answers = db.answer_many(&ring, &inputs, None);
    let secs = t.elapsed().as_secs_f64();
    for ((block, q, _, _, sk), answer) in jobs.iter().zip(answers) {
        let scores =
            decode(&ring, &shape, sk, &public_a, &answer.expect("answers")).expect("decode");
        assert!(
            scores[..] == scores::plaintext_scores(q, &blocks[*block], shape.dim)[..],
            "a batched answer's scores differ from the plaintext ones (block {block})"
        );
    }
    println!(
        "a batch of {batch}: {secs:.2} core-s, {:.2} core-s a query (alone: {server:.2}); all exact",
        secs / batch as f64
    );
}
