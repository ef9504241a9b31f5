//! The large-gallery path (Nyström kernel) against the exact dense path on a 3,000-image
//! Fashion-MNIST gallery: Recall@8 within 0.01, the aligned embeddings close, and most of
//! each item's 8 nearest neighbours the same.

use paper::align::umeyama;
use paper::metrics::{mean, recall_at_k};
use paper::privatemail::{embed_dense, embed_nystrom};
use paper::retrieve::{gallery_rows, knn_rows};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use shared::{DMatrix, Params};

#[test]
fn nystrom_matches_dense_on_3000_images() {
    let dir = std::path::Path::new(data::fashion::DEFAULT_DIR);
    let test = data::fashion::load_split(dir, "t10k").unwrap();
    let n = 3000;
    // The server's features: the on-device model's.
    let model = embed::model::Model::from_bytes(data::assets::MODEL_WEIGHTS).unwrap();
    let feats: Vec<Vec<f32>> = (0..n)
        .map(|i| model.infer(test.images.image(i)).unwrap().features)
        .collect();
    let x = DMatrix::from_fn(n, feats[0].len(), |i, j| feats[i][j] as f64);
    let labels: Vec<u32> = (0..n).map(|i| test.labels[i] as u32).collect();
    let p = Params::default().smlq;
    let dense = embed_dense(&x, &labels, &p, &mut ChaCha20Rng::seed_from_u64(1)).unwrap();
    let fast = embed_nystrom(
        x.clone(),
        &labels,
        &p,
        paper::privatemail::NYSTROM_LANDMARKS,
        &mut ChaCha20Rng::seed_from_u64(1),
    )
    .unwrap();
    let recall = |e: &DMatrix<f64>| {
        let rows = gallery_rows(e);
        mean(
            &(0..n)
                .map(|i| {
                    let res: Vec<u32> = knn_rows(&rows, &rows[i], 8, Some(i))
                        .iter()
                        .map(|m| labels[m.index])
                        .collect();
                    recall_at_k(&res, labels[i], 8)
                })
                .collect::<Vec<_>>(),
        )
    };
    let (rd, rf) = (recall(&dense), recall(&fast));
    let t = umeyama(&fast, &dense).unwrap();
    let residual = (t.apply(&fast).unwrap() - &dense).norm() / dense.norm();
    let dense2 = embed_dense(&x, &labels, &p, &mut ChaCha20Rng::seed_from_u64(2)).unwrap();
    let t2 = umeyama(&dense2, &dense).unwrap();
    let seed_residual = (t2.apply(&dense2).unwrap() - &dense).norm() / dense.norm();
    // Do the two embeddings return the same neighbours? (What retrieval sees, unlike the
    // residual, which a few outlying rows dominate.)
    let (dr, fr) = (gallery_rows(&dense), gallery_rows(&fast));
    let agree = mean(
        &(0..n)
            .map(|i| {
                let a: Vec<usize> = knn_rows(&dr, &dr[i], 8, Some(i))
                    .iter()
                    .map(|m| m.index)
                    .collect();
                let b: Vec<usize> = knn_rows(&fr, &fr[i], 8, Some(i))
                    .iter()
                    .map(|m| m.index)
                    .collect();
                paper::metrics::overlap(&b, &a)
            })
            .collect::<Vec<_>>(),
    );
    println!("Recall@8 dense {rd:.4}, nystrom {rf:.4}; shared 8-NN {agree:.4}; aligned relative residual {residual:.4} (dense vs dense from another seed: {seed_residual:.4})");
    assert!((rd - rf).abs() <= 0.01, "recall dense {rd} vs nystrom {rf}");
    assert!(residual < 0.2, "aligned residual {residual}");
    assert!(
        agree >= 0.8,
        "only {agree:.3} of the 8 nearest neighbours agree"
    );
}
