//! Is a photo something the gallery holds? An out-of-distribution score for the on-device
//! model, so a client can say when its results may mean little (a photo of a cat, a screenshot
//! of text): the model always names one of its ten classes, often with high probability.
//!
//! The score is a Mahalanobis distance (Lee et al., *A simple unified framework for detecting
//! out-of-distribution samples and adversarial attacks*, 2018) under class-conditional
//! Gaussians with one shared covariance, fitted to the public anchors (training images the
//! server publishes), taken twice and added per dimension:
//! - on the features (the unit embedding every search uses), and
//! - on the pooled channel means of both convolution layers
//!   ([`crate::model::Model::layer_means`]), because the embedding keeps only what tells
//!   the ten classes apart: a drawn rectangle or a line of text can land near a bag there,
//!   while its edges and strokes look like no garment's in the layers below.
//!
//! `eval --photos` compared it with the nearest anchor's cosine distance (the previous
//! decision), the logits' energy and the top class probability on procedurally generated noise,
//! gradients, geometric shapes and text-like images against held-out clothing photos; this one
//! separates best (figures at [`UNFAMILIAR_SCORE`]; the table in `docs/eval/photos.md`). An
//! input the photo pipeline left (nearly) empty — pure noise, a blank page — is unfamiliar too
//! ([`MIN_INK`]).
//!
//! **Privacy.** It runs on the client, on the photo and a [`Reference`] every client receives
//! alike (part of the public anchors file); nothing about it is sent, and nothing a search
//! sends depends on it. A server that sends an odd reference can change this warning only,
//! never what a search reveals — it is checked for shape and finiteness so it cannot make the
//! client fail either.

use shared::error::{Error, Result};
pub use shared::familiarity::{ClassGaussians, Reference, MAX_CLASSES};

/// Above this score a photo is called unfamiliar. Calibrated by `eval --photos` for the
/// committed query model (cnn-v2-cc09b0595f69ddf9, the one a client scores its photo with; the
/// reference is fitted with it too) and the server's default anchors
/// (`data::balanced_anchors(train, 1000)`): it flags 1 % of 1,000 family photos of test-split
/// images (backgrounds 200–255, shifts ≤ 10 %, scale 0.7–1.0, rotations ≤ 10°, noise σ = 5,
/// JPEG q60). On photos of the 1,000 reserved training images (never trained on) it flags
/// 0.8 % of family photos and 0.9 % of clean ones. Against 1,000 generated non-clothing images
/// the deployed decision ([`assess_input`]) has AUROC 0.978 (noise 0.990, gradients 0.996,
/// geometric shapes 0.973, text-like 0.955); the nearest anchor's distance reached 0.917, the
/// features' Mahalanobis distance alone 0.922 and the logits' energy 0.879
/// (`docs/eval/photos.md`). The threshold is the query model's own (earlier query models'
/// ranged from 2.79 to 3.26): recalibrate it with `bash scripts/eval.sh --photos` whenever
/// the query model or the photo pipeline change.
pub const UNFAMILIAR_SCORE: f32 = 2.740_0;

/// Below this much ink (the sum of the model input's 784 bytes) there is no object to speak
/// of: the photo pipeline found nothing but background or removed it as noise (a blank
/// image, pure noise). The sparsest of 20,000 Fashion-MNIST training images (every third)
/// holds 5,188, the 0.1 % quantile 8,749. Such an input is called unfamiliar whatever its
/// features, which for an empty input are an artefact of the model's biases.
pub const MIN_INK: u32 = 4_000;

/// What a client tells the person when a photo is unfamiliar.
pub const UNFAMILIAR_MESSAGE: &str =
    "This photo does not look like a clothing product the gallery holds; results may mean little.";

/// Shrinkage of the shared covariance towards a multiple of the identity
/// (`(1 − α)·S + α·tr(S)/d·I`), so 1,000 anchors in 64 dimensions give a well-conditioned
/// precision.
pub const SHRINKAGE: f64 = 0.1;

/// Fits the Gaussians to `rows` (flat, `dim` values each) with their `labels`: each
/// present label's mean, and the within-class covariance shrunk by [`SHRINKAGE`] and
/// inverted (Cholesky). Fewer than two rows, a length mismatch, non-finite values or rows
/// without spread are typed errors.
pub fn fit_class_gaussians(rows: &[f32], labels: &[u32], dim: usize) -> Result<ClassGaussians> {
    if dim == 0 || labels.len() < 2 || rows.len() != labels.len() * dim {
        return Err(Error::DimensionMismatch {
            what: "labelled feature rows",
            expected: labels.len().max(2) * dim.max(1),
            got: rows.len(),
        });
    }
    if rows.iter().any(|v| !v.is_finite()) {
        return Err(Error::NonFinite {
            what: "anchor rows",
        });
    }
    let mut classes: Vec<u32> = labels.to_vec();
    classes.sort_unstable();
    classes.dedup();
    let index = |l: u32| classes.binary_search(&l).expect("a label of the rows");
    let mut sums = vec![vec![0.0f64; dim]; classes.len()];
    let mut counts = vec![0usize; classes.len()];
    for (r, &l) in rows.chunks_exact(dim).zip(labels) {
        let c = index(l);
        counts[c] += 1;
        sums[c].iter_mut().zip(r).for_each(|(s, &v)| *s += v as f64);
    }
    let means: Vec<Vec<f64>> = sums
        .iter()
        .zip(&counts)
        .map(|(s, &n)| s.iter().map(|v| v / n as f64).collect())
        .collect();
    let mut cov = nalgebra::DMatrix::<f64>::zeros(dim, dim);
    for (r, &l) in rows.chunks_exact(dim).zip(labels) {
        let mu = &means[index(l)];
        let d = nalgebra::DVector::from_iterator(dim, r.iter().zip(mu).map(|(&v, m)| v as f64 - m));
        cov += &d * d.transpose();
    }
    cov /= labels.len() as f64;
    let mut mean_var = cov.trace() / dim as f64;
    if mean_var <= 0.0 {
        // Every class a single row (the server's smallest setting, 10 anchors): no spread
        // within a class to measure, so the rows' spread around their overall mean
        // stands in for it.
        let n = labels.len() as f64;
        let all: Vec<f64> = (0..dim)
            .map(|j| sums.iter().map(|s| s[j]).sum::<f64>() / n)
            .collect();
        cov.fill(0.0);
        for r in rows.chunks_exact(dim) {
            let d = nalgebra::DVector::from_iterator(
                dim,
                r.iter().zip(&all).map(|(&v, m)| v as f64 - m),
            );
            cov += &d * d.transpose();
        }
        cov /= n;
        mean_var = cov.trace() / dim as f64;
    }
    if !(mean_var > 0.0 && mean_var.is_finite()) {
        return Err(Error::ZeroRow {
            what: "anchor rows (no spread)",
        });
    }
    let shrunk = cov * (1.0 - SHRINKAGE)
        + nalgebra::DMatrix::<f64>::identity(dim, dim) * (SHRINKAGE * mean_var);
    let precision = shrunk
        .cholesky()
        .ok_or(Error::ZeroRow {
            what: "anchor rows (singular covariance)",
        })?
        .inverse();
    Ok(ClassGaussians {
        means: means
            .iter()
            .map(|m| m.iter().map(|&v| v as f32).collect())
            .collect(),
        // Row-major; the matrix is symmetric, so nalgebra's column order is the same.
        precision: precision.iter().map(|&v| v as f32).collect(),
    })
}

/// The smallest squared Mahalanobis distance of `x` to a class mean (`x` must have the
/// fitted length; [`ClassGaussians::check`] first for a received value).
pub fn distance2(g: &ClassGaussians, x: &[f32]) -> f64 {
    let dim = x.len();
    let mut d = vec![0.0f64; dim];
    g.means
        .iter()
        .map(|mu| {
            d.iter_mut()
                .zip(x.iter().zip(mu))
                .for_each(|(o, (&a, &m))| *o = a as f64 - m as f64);
            g.precision
                .chunks_exact(dim)
                .zip(&d)
                .map(|(row, di)| {
                    di * row
                        .iter()
                        .zip(&d)
                        .map(|(&p, dj)| p as f64 * dj)
                        .sum::<f64>()
                })
                .sum::<f64>()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Fits both to the anchors: `features` (flat rows of `feature_dim`), `layer_means` (flat
/// rows of `layer_dim`, the query model's [`crate::weights::Arch::layer_dim`]) and
/// their `labels`.
pub fn fit(
    features: &[f32],
    layer_means: &[f32],
    labels: &[u32],
    feature_dim: usize,
    layer_dim: usize,
) -> Result<Reference> {
    Ok(Reference {
        features: fit_class_gaussians(features, labels, feature_dim)?,
        layers: fit_class_gaussians(layer_means, labels, layer_dim)?,
    })
}

/// The score: each squared Mahalanobis distance divided by its dimension, added (about 1
/// each for a photo like the anchors). Lengths that do not match the reference's, or
/// non-finite values, are typed errors.
pub fn score(reference: &Reference, features: &[f32], layer_means: &[f32]) -> Result<f32> {
    let (fd, ld) = (
        reference.features.precision.len(),
        reference.layers.precision.len(),
    );
    if features.len() * features.len() != fd || layer_means.len() * layer_means.len() != ld {
        return Err(Error::DimensionMismatch {
            what: "features and layer means (the reference's lengths)",
            expected: fd,
            got: features.len() * features.len(),
        });
    }
    if features.iter().chain(layer_means).any(|v| !v.is_finite()) {
        return Err(Error::NonFinite {
            what: "features or layer means",
        });
    }
    let s = distance2(&reference.features, features) / features.len() as f64
        + distance2(&reference.layers, layer_means) / layer_means.len() as f64;
    Ok(s as f32)
}

/// A photo's out-of-distribution score and decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Familiarity {
    /// [`score`] (∞ for an input with less than [`MIN_INK`]).
    pub score: f32,
    /// `score > UNFAMILIAR_SCORE`.
    pub unfamiliar: bool,
}

/// The decision for a model input (`pixels`, 28×28), its unit `features` and its
/// `layer_means`: unfamiliar when the input holds less than [`MIN_INK`] or its score exceeds
/// [`UNFAMILIAR_SCORE`].
pub fn assess_input(
    pixels: &[u8],
    features: &[f32],
    layer_means: &[f32],
    reference: &Reference,
) -> Result<Familiarity> {
    let score = score(reference, features, layer_means)?;
    let ink: u32 = pixels.iter().map(|&p| p as u32).sum();
    let score = if ink < MIN_INK { f32::INFINITY } else { score };
    Ok(Familiarity {
        score,
        unfamiliar: score > UNFAMILIAR_SCORE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The query model's layer means' length.
    const LAYER_DIM: usize = crate::weights::Arch::WIDE.layer_dim();

    /// Two classes of 3-d rows around (±1, 0, 0), spread by a fixed pattern.
    fn rows() -> (Vec<f32>, Vec<u32>) {
        let mut rows = Vec::new();
        let mut labels = Vec::new();
        for i in 0..200 {
            let c = (i % 2) as u32;
            let s = if c == 0 { 1.0 } else { -1.0 };
            let j = ((i * 37) % 11) as f32 / 11.0 - 0.5;
            let k = ((i * 53) % 7) as f32 / 7.0 - 0.5;
            rows.extend([s + 0.1 * j, 0.1 * k, 0.01 * j * k]);
            labels.push(c);
        }
        (rows, labels)
    }

    #[test]
    fn near_a_class_is_close_and_off_every_class_is_far() {
        let (rows, labels) = rows();
        let g = fit_class_gaussians(&rows, &labels, 3).unwrap();
        g.check(3).unwrap();
        assert_eq!(g.means.len(), 2);
        let near = distance2(&g, &[1.0, 0.0, 0.0]);
        let between = distance2(&g, &[0.0, 0.0, 0.0]);
        // Off the data's plane: the third coordinate barely varies, so a small step there is
        // far — what the cosine distance to the nearest anchor could not see.
        let off = distance2(&g, &[1.0, 0.0, 0.2]);
        assert!(near < 0.5, "{near}");
        assert!(between > 10.0 * near.max(0.01), "{between}");
        assert!(off > 10.0, "{off}");
    }

    /// One row a class (the server's smallest anchor setting): the rows' overall spread
    /// stands in for the within-class one, so a reference can still be fitted.
    #[test]
    fn one_row_a_class_still_fits() {
        let rows = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
        let g = fit_class_gaussians(&rows, &[0, 1, 2], 3).unwrap();
        g.check(3).unwrap();
        assert!(distance2(&g, &[1.0, 0.0, 0.0]) < 1e-9);
        assert!(distance2(&g, &[-1.0, -1.0, -1.0]) > 1.0);
    }

    #[test]
    fn the_score_adds_both_distances_per_dimension() {
        let (rows, labels) = rows();
        let layer_rows: Vec<f32> = rows
            .chunks_exact(3)
            .flat_map(|r| (0..LAYER_DIM).map(move |k| r[k % 3] * (1.0 + k as f32 / 10.0)))
            .collect();
        let reference = fit(&rows, &layer_rows, &labels, 3, LAYER_DIM).unwrap();
        reference.check(3, LAYER_DIM).unwrap();
        assert!(reference.check(3, LAYER_DIM - 1).is_err());
        let f = [1.0, 0.0, 0.0];
        let l: Vec<f32> = (0..LAYER_DIM)
            .map(|k| f[k % 3] * (1.0 + k as f32 / 10.0))
            .collect();
        let s = score(&reference, &f, &l).unwrap() as f64;
        let expect = distance2(&reference.features, &f) / 3.0
            + distance2(&reference.layers, &l) / LAYER_DIM as f64;
        assert!((s - expect).abs() < 1e-4 * expect.max(1.0), "{s} {expect}");
        // An empty input is unfamiliar whatever its features.
        let full = [60u8; 784];
        let ok = assess_input(&full, &f, &l, &reference).unwrap();
        assert!(!ok.unfamiliar, "{}", ok.score);
        let mut sparse = [0u8; 784];
        sparse[..15].fill(255); // 3,825 < MIN_INK
        assert!(
            assess_input(&sparse, &f, &l, &reference)
                .unwrap()
                .unfamiliar
        );
        // Far from both classes: unfamiliar.
        let far: Vec<f32> = l.iter().map(|v| v + 5.0).collect();
        assert!(
            assess_input(&full, &[0.0, 3.0, 1.0], &far, &reference)
                .unwrap()
                .unfamiliar
        );
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let (rows, labels) = rows();
        assert!(fit_class_gaussians(&rows[..5], &labels, 3).is_err());
        assert!(fit_class_gaussians(&rows, &labels, 0).is_err());
        assert!(fit_class_gaussians(&[1.0, 2.0, 3.0], &[0], 3).is_err());
        let mut nan = rows.clone();
        nan[4] = f32::NAN;
        assert!(fit_class_gaussians(&nan, &labels, 3).is_err());
        // Every row the same: no spread.
        assert!(fit_class_gaussians(&[0.5; 30], &[0; 10], 3).is_err());
        let g = fit_class_gaussians(&rows, &labels, 3).unwrap();
        assert!(g.check(4).is_err());
        let mut bad = g.clone();
        bad.precision[2] = f32::INFINITY;
        assert!(bad.check(3).is_err());
        let mut none = g.clone();
        none.means.clear();
        assert!(none.check(3).is_err());
        let identity: Vec<f32> = (0..LAYER_DIM * LAYER_DIM)
            .map(|i| if i % (LAYER_DIM + 1) == 0 { 1.0 } else { 0.0 })
            .collect();
        let reference = Reference {
            features: g,
            layers: ClassGaussians {
                means: vec![vec![0.0; LAYER_DIM]],
                precision: identity,
            },
        };
        reference.check(3, LAYER_DIM).unwrap();
        assert!(score(&reference, &[1.0, 0.0, 0.0], &[0.0; LAYER_DIM]).is_ok());
        assert!(score(&reference, &[1.0, 0.0], &[0.0; LAYER_DIM]).is_err());
        assert!(score(&reference, &[1.0, 0.0, 0.0], &[0.0; 3]).is_err());
        assert!(score(&reference, &[f32::NAN, 0.0, 0.0], &[0.0; LAYER_DIM]).is_err());
    }
}
