//! The anchor frame against a server that chose it: whether a release is made must not depend
//! on the photo.

use nalgebra::DMatrix;
use paper::frame::{privatize_in_frame, AnchorFrame};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use shared::params::{Mechanism, PrivacyParams};

const D: usize = 64;

/// A unit vector at `angle` on the circle of the first two axes.
fn on_circle(angle: f64) -> Vec<f64> {
    let mut v = vec![0.0; D];
    v[0] = angle.cos();
    v[1] = angle.sin();
    v
}

/// A frame built to split photos: every row far from the origin (near 2¹⁹) with a tiny spread
/// (7·10⁻⁴), so the noise — and with it the mechanism's grid — is small while every placement
/// is large; one anchor (at angle 0.3) sits slightly above the rest, so placements of photos
/// near it differ from the others'. Before values too large for the grid were clamped, photos at
/// angles 0–0.3 were released and photos at 0.35–1.5 refused ("too large for the noise
/// grid") every time: a bit about the photo for the server, from the searches that never came.
#[test]
fn a_frame_chosen_to_split_photos_releases_every_photo() {
    let mut rng = ChaCha20Rng::seed_from_u64(61);
    let mut features: Vec<Vec<f64>> = vec![on_circle(0.0), on_circle(0.3)];
    for _ in 0..58 {
        // The rest in the far hemisphere.
        let mut v: Vec<f64> = (0..D).map(|_| rng.random::<f64>() - 0.5).collect();
        v[0] = -3.0 * v[0].abs();
        let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        features.push(v);
    }
    let n = features.len();
    let base = 2f64.powi(19);
    let low = base - 6.96e-4;
    let features = DMatrix::from_fn(n, D, |i, j| features[i][j]);
    let rows = DMatrix::from_fn(n, 2, |i, j| match (i, j) {
        (_, 1) => base - 1.0,
        (1, _) => low + 7e-4,
        _ => low,
    });
    let frame = AnchorFrame::new(&features, &rows, 0.02).expect("a frame within the limits");
    let privacy = PrivacyParams {
        epsilon: 1.0,
        delta: shared::params::DELTA,
        mechanism: Mechanism::DiscreteGaussian,
    };
    for angle in [0.0, 0.15, 0.3, 0.35, 0.5, 0.7, 1.0, 1.5, 3.0] {
        for _ in 0..10 {
            let out = privatize_in_frame(&on_circle(angle), &frame, 9, &privacy, &mut rng)
                .unwrap_or_else(|e| panic!("angle {angle}: {e}"));
            assert!(out.rows.iter().all(|v| v.is_finite()), "angle {angle}");
        }
    }
}

/// A kernel scale whose least weight nears f64's underflow is refused when the frame is built
/// (before any photo): at 0.00537 the least weight is subnormal, and at 0.005 it is 0, where a
/// photo far from every anchor placed at 0/0 and was refused alone.
#[test]
fn a_kernel_scale_near_underflow_is_refused_before_any_photo() {
    let features = DMatrix::from_fn(2, D, |i, j| f64::from(i == j));
    let rows = DMatrix::from_fn(2, 2, |i, j| f64::from(i == j));
    for s in [0.005, 0.00537, 0.0096] {
        assert!(AnchorFrame::new(&features, &rows, s).is_err(), "{s}");
    }
    assert!(AnchorFrame::new(&features, &rows, 0.0097).is_ok());
}

/// Placements where the products of weights and rows underflow (rows near 10⁻²⁹⁷ at the
/// default scale: a far photo's weight near 10⁻²⁶ times 10⁻³⁰⁰ is subnormal) stay within the
/// sensitivity the frame states. Before underflow was counted (and the diameter squared to 0),
/// they differed by 128 to 1,000 times it.
#[test]
fn placements_stay_within_the_bound_where_products_underflow() {
    let u = on_circle(0.0);
    let features = DMatrix::from_fn(2, D, |_, j| u[j]);
    let rows = DMatrix::from_row_slice(2, 2, &[0.0, 1e-297, 1e-300, 1e-297]);
    let frame = AnchorFrame::new(&features, &rows, 0.02).unwrap();
    let bound = frame.sensitivity().value;
    assert!(
        frame.sensitivity().diameter >= 1e-300,
        "{:?}",
        frame.sensitivity()
    );
    let angles: Vec<f64> = (0..=64)
        .map(|i| std::f64::consts::PI * i as f64 / 64.0)
        .collect();
    let photos = DMatrix::from_fn(angles.len(), D, |i, j| on_circle(angles[i])[j]);
    let placed = frame.place(&photos).unwrap();
    for a in 0..angles.len() {
        for b in 0..angles.len() {
            // Scaled, so squares of differences near 10⁻³⁰⁰ do not underflow to 0.
            let diff: Vec<f64> = (0..2).map(|j| placed[(a, j)] - placed[(b, j)]).collect();
            let m = diff.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            let d = if m == 0.0 {
                0.0
            } else {
                m * diff.iter().map(|x| (x / m).powi(2)).sum::<f64>().sqrt()
            };
            assert!(
                d <= bound,
                "angles {} and {}: {d:e} > {bound:e}",
                angles[a],
                angles[b]
            );
        }
    }
}
