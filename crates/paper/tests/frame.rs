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
