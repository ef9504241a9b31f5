//! The client pipeline end to end on synthetic clustered data, plus its error paths.

use nalgebra::DMatrix;
use paper::align::umeyama;
use paper::privatemail::{embed_dense, privatize, Anchors};
use paper::retrieve::knn;
use rand::{Rng, SeedableRng};
use rand_chacha::{ChaCha20Rng, ChaCha8Rng};
use rand_distr::StandardNormal;
use shared::{Error, Params};

/// `n` points in `classes` clusters on the unit sphere in `d` dims, labels round-robin.
fn blobs(
    rng: &mut impl Rng,
    centers: &DMatrix<f64>,
    n: usize,
    spread: f64,
) -> (DMatrix<f64>, Vec<u32>) {
    let (classes, d) = centers.shape();
    let labels: Vec<u32> = (0..n).map(|i| (i % classes) as u32).collect();
    let x = DMatrix::from_fn(n, d, |i, j| {
        centers[(labels[i] as usize, j)] + spread * rng.sample::<f64, _>(StandardNormal)
    });
    (x, labels)
}

fn params(classes: u32, epsilon: f64) -> Params {
    let mut p = Params::default();
    p.smlq.num_classes = classes;
    p.privacy.epsilon = epsilon;
    p
}

fn setup(classes: u32) -> (DMatrix<f64>, Vec<u32>, DMatrix<f64>, Vec<u32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let centers = DMatrix::from_fn(classes as usize, 16, |_, _| {
        rng.sample::<f64, _>(StandardNormal) / 4.0
    });
    let (g, gl) = blobs(&mut rng, &centers, 200, 0.15);
    let (a, al) = blobs(&mut rng, &centers, 60, 0.15);
    (g, gl, a, al)
}

#[test]
fn release_has_the_right_shape_and_a_uniform_real_position() {
    let (_, _, a, al) = setup(10);
    let p = params(10, 1.0);
    let anchors = Anchors::new(&a, &al, &p.smlq).unwrap();
    let mut rng = ChaCha20Rng::from_seed([1; 32]);
    let mut counts = [0usize; 10];
    let runs = 2_000;
    for i in 0..runs {
        let r = privatize(
            a.row(i % 60).transpose().as_slice(),
            al[i % 60],
            &anchors,
            &p,
            &mut rng,
        )
        .unwrap();
        assert_eq!(r.query_rows.shape(), (10, 2));
        assert_eq!(r.anchor_rows.shape(), (60, 2));
        assert!(r
            .query_rows
            .iter()
            .chain(r.anchor_rows.iter())
            .all(|v| v.is_finite()));
        counts[r.real_position()] += 1;
    }
    // χ² with 9 degrees of freedom; 33.7 is the 1e-4 critical value.
    let e = runs as f64 / 10.0;
    let chi2: f64 = counts.iter().map(|&c| (c as f64 - e).powi(2) / e).sum();
    assert!(chi2 < 33.7, "real position not uniform: {counts:?}");
}

/// Post-processing reads only the release (with the labels and public parameters), never the
/// query's features: two queries privatized with the same randomness whose releases are the
/// same — features 1e-12 apart, which move the private iteration's values far less than the
/// release's grid step — get the same rows, bit for bit, though their features differ; a
/// query whose release differs (features 1e-3 apart) gets other rows, so the rows do follow
/// the release. A kernel scale of 4 and ε = 100 keep the noise below the signal (at the
/// defaults the release is nearly all noise, and would not tell the two cases apart).
#[test]
fn post_processing_reads_only_the_release() {
    let (_, _, a, al) = setup(10);
    let mut p = params(10, 100.0);
    p.smlq.kernel_scale = 4.0;
    let anchors = Anchors::new(&a, &al, &p.smlq).unwrap();
    let q: Vec<f64> = a.row(0).iter().copied().collect();
    let nudged = |by: f64| {
        let mut v = q.clone();
        v[3] += by;
        v
    };
    let unit = |v: &[f64]| {
        let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        v.iter().map(|x| x / n).collect::<Vec<f64>>()
    };
    let run = |x: &[f64]| {
        let mut rng = ChaCha20Rng::from_seed([4; 32]);
        privatize(x, al[0], &anchors, &p, &mut rng).unwrap()
    };
    let base = run(&q);
    // The premise: the release's grid step is far coarser than what 1e-12 moves.
    assert!(base.receipt.grid > 1e-9, "{:?}", base.receipt);
    let near = nudged(1e-12);
    assert_ne!(unit(&near), unit(&q), "the unit features must differ");
    let same = run(&near);
    assert_eq!(same.query_rows, base.query_rows);
    assert_eq!(same.anchor_rows, base.anchor_rows);
    assert_eq!(same.real_position(), base.real_position());
    let other = run(&nudged(1e-3));
    assert_ne!(other.query_rows, base.query_rows);
}

/// The whole protocol runs: privatize, align on the anchors, retrieve k valid gallery items for
/// every submitted row. (Retrieval quality is measured by `eval`, not asserted here: with
/// correctly calibrated noise PrivateMail as specified sits near chance, see the README.)
#[test]
fn protocol_runs_end_to_end() {
    let classes = 4;
    let (g, gl, a, al) = setup(classes);
    let p = params(classes, 2.0);
    let anchors = Anchors::new(&a, &al, &p.smlq).unwrap();
    let mut rng = ChaCha20Rng::from_seed([2; 32]);
    let all = DMatrix::from_fn(
        260,
        16,
        |i, j| if i < 200 { g[(i, j)] } else { a[(i - 200, j)] },
    );
    let labels: Vec<u32> = gl.iter().chain(&al).copied().collect();
    let server = embed_dense(&all, &labels, &p.smlq, &mut rng).unwrap();
    let gallery = server.rows(0, 200).into_owned();
    let server_anchors = server.rows(200, 60).into_owned();
    let r = privatize(
        g.row(0).transpose().as_slice(),
        gl[0],
        &anchors,
        &p,
        &mut rng,
    )
    .unwrap();
    let t = umeyama(&r.anchor_rows, &server_anchors).unwrap();
    let aligned = t.apply(&r.query_rows).unwrap();
    for row in aligned.row_iter() {
        let q: Vec<f64> = row.iter().copied().collect();
        let res = knn(&gallery, &q, 8, None);
        assert_eq!(res.len(), 8);
        assert!(res.iter().all(|n| n.index < 200 && n.distance.is_finite()));
    }
    assert!(r.receipt.proven_delta <= p.privacy.delta);
}

#[test]
fn bad_queries_are_typed_errors() {
    let (_, _, a, al) = setup(4);
    let p = params(4, 1.0);
    let anchors = Anchors::new(&a, &al, &p.smlq).unwrap();
    let mut rng = ChaCha20Rng::from_seed([3; 32]);
    let q: Vec<f64> = a.row(0).iter().copied().collect();
    assert!(matches!(
        privatize(&q[..5], 0, &anchors, &p, &mut rng),
        Err(Error::DimensionMismatch { .. })
    ));
    let mut nan = q.clone();
    nan[2] = f64::NAN;
    assert!(matches!(
        privatize(&nan, 0, &anchors, &p, &mut rng),
        Err(Error::NonFinite { .. })
    ));
    assert!(matches!(
        privatize(&[0.0; 16], 0, &anchors, &p, &mut rng),
        Err(Error::ZeroRow { .. })
    ));
    assert!(matches!(
        privatize(&q, 4, &anchors, &p, &mut rng),
        Err(Error::LabelOutOfRange { .. })
    ));
    let mut bad = p;
    bad.privacy.delta = 0.0;
    assert!(matches!(
        privatize(&q, 0, &anchors, &bad, &mut rng),
        Err(Error::InvalidParameter { .. })
    ));
    // Anchors lacking a class cannot supply every dummy.
    let only_three: Vec<u32> = al.iter().map(|&y| y.min(2)).collect();
    assert_eq!(
        Anchors::new(&a, &only_three, &p.smlq).unwrap_err(),
        Error::MissingClass { class: 3 }
    );
}
