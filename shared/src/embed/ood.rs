//! Is a photo something the gallery holds? An out-of-distribution score for the on-device
//! model, so a client can say when its results may mean little (a photo of a cat, a screenshot
//! of text): the model always names one of its ten classes, often with high probability.
//!
//! The score is the cosine distance from the photo's features to the nearest public anchor
//! (training images the server publishes, whose features every client already holds):
//! `1 − max_a ⟨f, a⟩` over unit rows. `eval --photos` compared it with the logits' energy and
//! with the top class probability on procedurally generated noise, gradients, geometric shapes
//! and text-like images against held-out clothing photos, and this one separates best (figures
//! at [`UNFAMILIAR_DISTANCE`]; the full table in `docs/eval/photos.md`). An input the photo
//! pipeline left (nearly) empty — pure noise, a blank page — is unfamiliar too ([`MIN_INK`]).
//!
//! It runs on the client with data the client already has; nothing about it is sent. A server
//! choosing odd anchors can only change this warning, never what a search reveals.

use crate::error::{Error, Result};

/// Above this distance to the nearest anchor a photo is called unfamiliar. Calibrated by
/// `eval --photos` for the committed weights (cnn-v1-6135bf58efcc9c0c) and the server's
/// default anchors (`data::balanced_anchors(train, 1000)`): it flags 1 % of 1,000 family
/// photos of test-split images (backgrounds 200–255, shifts ≤ 10 %, scale 0.7–1.0, rotations
/// ≤ 10°, noise σ = 5, JPEG q60). On photos of the 1,000 reserved training images (never
/// trained on) it flags 1.1 % of family photos and 1.4 % of clean ones. Against 1,000 generated
/// non-clothing images the deployed decision ([`assess_input`]) has AUROC 0.940 (noise 0.985,
/// gradients 0.986, geometric shapes 0.898, text-like 0.890) and flags 54.7 % of them — shapes
/// and text often look like bags and sandals to this model. The logits' energy reached 0.858
/// and the top probability 0.766 (`docs/eval/photos.md`, weights cnn-v1-eac955909847049e).
/// Recalibrate with `bash scripts/eval.sh --photos` whenever the weights change.
pub const UNFAMILIAR_DISTANCE: f32 = 0.107_844_23;

/// Below this much ink (the sum of the model input's 784 bytes) there is no object to speak
/// of: the photo pipeline found nothing but background or removed it as noise (a blank
/// image, pure noise). The sparsest of 20,000 Fashion-MNIST training images (every third)
/// holds 5,188, the 0.1 % quantile 8,749. Such an input is called unfamiliar whatever its
/// features, which for an empty input are an artefact of the model's biases.
pub const MIN_INK: u32 = 4_000;

/// What a client tells the person when a photo is unfamiliar.
pub const UNFAMILIAR_MESSAGE: &str =
    "This photo does not look like a clothing product the gallery holds; results may mean little.";

/// A photo's out-of-distribution score and decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Familiarity {
    /// Cosine distance to the nearest anchor, in [0, 2].
    pub distance: f32,
    /// `distance > UNFAMILIAR_DISTANCE`.
    pub unfamiliar: bool,
}

/// The decision for a model input (`pixels`, 28×28) and its unit `features`: unfamiliar when
/// the input holds less than [`MIN_INK`] or its features are farther than
/// [`UNFAMILIAR_DISTANCE`] from every anchor ([`assess`]).
pub fn assess_input(pixels: &[u8], features: &[f32], anchors: &[f32]) -> Result<Familiarity> {
    let f = assess(features, anchors)?;
    let ink: u32 = pixels.iter().map(|&p| p as u32).sum();
    Ok(Familiarity {
        unfamiliar: f.unfamiliar || ink < MIN_INK,
        ..f
    })
}

/// The score of unit `features` against `anchors` (flat rows of `features.len()` values).
/// No anchors, only zero rows, a length that is not whole rows or non-finite values are typed
/// errors.
pub fn assess(features: &[f32], anchors: &[f32]) -> Result<Familiarity> {
    let dim = features.len();
    if dim == 0 || anchors.is_empty() || !anchors.len().is_multiple_of(dim) {
        return Err(Error::DimensionMismatch {
            what: "anchor features (rows of the photo's feature length)",
            expected: dim.max(1) * (anchors.len() / dim.max(1)).max(1),
            got: anchors.len(),
        });
    }
    if features.iter().chain(anchors).any(|v| !v.is_finite()) {
        return Err(Error::NonFinite {
            what: "features or anchor features",
        });
    }
    // Each anchor normalised here (zero rows skipped), so rows of any length cannot make
    // every photo look familiar.
    let nearest = anchors
        .chunks_exact(dim)
        .filter_map(|a| {
            let norm = a.iter().map(|v| v * v).sum::<f32>().sqrt();
            (norm > 0.0).then(|| a.iter().zip(features).map(|(x, y)| x * y).sum::<f32>() / norm)
        })
        .fold(f32::NEG_INFINITY, f32::max);
    if nearest == f32::NEG_INFINITY {
        return Err(Error::ZeroRow {
            what: "anchor features",
        });
    }
    let distance = (1.0 - nearest).clamp(0.0, 2.0);
    Ok(Familiarity {
        distance,
        unfamiliar: distance > UNFAMILIAR_DISTANCE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn near_an_anchor_is_familiar_and_far_from_all_is_not() {
        let anchors = [unit(&[1.0, 0.0, 0.0]), unit(&[0.0, 1.0, 0.0])].concat();
        let close = assess(&unit(&[1.0, 0.01, 0.0]), &anchors).unwrap();
        assert!(close.distance < 1e-3 && !close.unfamiliar);
        let far = assess(&[0.0, 0.0, 1.0], &anchors).unwrap();
        assert!((far.distance - 1.0).abs() < 1e-6 && far.unfamiliar);
    }

    #[test]
    fn an_empty_input_is_unfamiliar_whatever_its_features() {
        let anchors = unit(&[1.0, 0.0, 0.0]);
        let q = unit(&[1.0, 0.001, 0.0]);
        let full = [60u8; 784];
        assert!(!assess_input(&full, &q, &anchors).unwrap().unfamiliar);
        let mut sparse = [0u8; 784];
        sparse[..15].fill(255); // 3,825 < MIN_INK
        assert!(assess_input(&sparse, &q, &anchors).unwrap().unfamiliar);
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        assert!(assess(&[1.0, 0.0], &[]).is_err());
        assert!(assess(&[1.0, 0.0], &[1.0, 0.0, 1.0]).is_err());
        assert!(assess(&[], &[1.0]).is_err());
        assert!(assess(&[f32::NAN, 0.0], &[1.0, 0.0]).is_err());
        assert!(assess(&[1.0, 0.0], &[0.0, 0.0]).is_err());
        // A long anchor counts by its direction only.
        assert!(
            assess(&[0.0, 1.0], &[0.0, 0.0, 100.0, 1.0])
                .unwrap()
                .unfamiliar
        );
    }
}
