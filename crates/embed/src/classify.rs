//! The class shown for a photo: a second network of the retrieval model's shape
//! ([`super::model`]), used for the class alone and shipped with 8-bit weights.
//!
//! Why a second network: the retrieval model's embedding is trained to keep a photo's exact
//! nearest neighbours where its clean image's are and to cluster well for the partitions every
//! private plan reads. A batch-normalised network (cnn-v2-2f44aea4358eea24) names the class of
//! held-out photos better (0.931 against 0.916 on a background of 240, `docs/eval/photos.md`),
//! but its features cluster worse: the PIR ranking found less of the exact top 8 with them
//! (README). So it only names the class — the page's and the CLI's "this looks like …" and
//! Algorithm 1's query label — and the retrieval features never come from it.
//!
//! Why 8 bits: the page loads this file besides the retrieval model's, and f32 weights would
//! add 473 KB to a first load held under 1.5 MB. Each weight matrix is stored as `i8` per
//! output row with one f32 scale (`w = q · scale`, `scale = max |w| / 127`); biases stay f32.
//! Decoding is one exactly rounded f32 product per weight, so native, wasm and the evaluation
//! run the same network.
//!
//! Format `PMCLS1`: `MAGIC ‖ for w1, w2, w3, w4: rows × f32 scale, then rows × cols i8 ‖ for b1,
//! b2, b3, b4: f32` (little-endian), 119 KB.
//!
//! Trust: the page receives this file from the server, which may write any network into it.
//! What it decides is the label shown and Algorithm 1's query label (whose guarantee is stated
//! given the label, as the paper's, `paper::privatemail`); nothing any protocol releases
//! for PIR, the blocks or the frame depends on it. A file that does not parse is refused when
//! the page starts, before any photo. A file that parses classifies every photo: its weights
//! and biases are bounded ([`MAX_SCALE`], [`MAX_BIAS`]) so that no photo can make a score
//! overflow ([`Classifier::classify`]), so no photo can make the class model fail — a failure
//! that depended on the photo would tell the server something by the search that never came.

use crate::model::{Model, Weights};
use crate::weights::{Arch, EightBit};
use shared::error::{Error, Result};

const MAGIC: &[u8; 8] = b"PMCLS1\0\0";

/// Largest per-row scale accepted (so |w| ≤ 127): the committed network's largest is 0.03.
pub use crate::weights::MAX_SCALE;
/// Largest |bias| accepted (the retrieval model's bound): the committed network's largest
/// is 1.4.
pub const MAX_BIAS: f32 = crate::model::MAX_BIAS;

/// What the classifier says about one image.
#[derive(Debug, Clone, PartialEq)]
pub struct Class {
    pub label: u32,
    /// Softmax of the logits averaged over the image and its mirror image.
    pub probabilities: Vec<f32>,
}

/// The class network.
#[derive(Debug, Clone, PartialEq)]
pub struct Classifier {
    model: Model,
}

/// A short, stable name for a class model file (FNV-1a of its bytes), for reports.
pub fn version(bytes: &[u8]) -> String {
    format!("cls-v1-{:016x}", crate::model::fnv1a(bytes))
}

fn bad(reason: impl Into<String>) -> Error {
    Error::InvalidParameter {
        name: "class model",
        reason: reason.into(),
    }
}

impl Classifier {
    /// The weights as stored (decoded from their 8-bit form).
    pub fn weights(&self) -> &Weights {
        &self.model.w
    }

    /// Quantise f32 weights (of [`Arch::SMALL`]) to the file format (see the module's notes).
    pub fn encode(w: &Weights) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        EightBit::encode(w, &mut out);
        out
    }

    /// The exact length of a class model file: the magic, one f32 scale per output row, one
    /// byte per weight and one f32 per bias (a client reads no more than this from a server).
    pub const fn file_len() -> usize {
        8 + EightBit::len(Arch::SMALL)
    }

    /// Parse [`Classifier::encode`]: wrong magic or length, a scale that is not finite, negative
    /// or above [`MAX_SCALE`], or a bias that is not finite or above [`MAX_BIAS`] in magnitude
    /// are typed errors.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        if bytes.len() < 8 || &bytes[..8] != MAGIC {
            return Err(bad("not a PrivateMail class model file (wrong magic)"));
        }
        if bytes.len() != Self::file_len() {
            return Err(bad(format!(
                "{} bytes, expected {}",
                bytes.len(),
                Self::file_len()
            )));
        }
        let w = EightBit::decode(&bytes[8..], Arch::SMALL).map_err(bad)?;
        Ok(Classifier { model: Model { w } })
    }

    /// The class of a 28×28 image (preprocessed as for the retrieval model: upright, `p / 255`),
    /// its logits averaged with its mirror image's (as in [`Model::infer`]). Only a wrong-sized
    /// image is an error.
    ///
    /// Total for every file [`Classifier::from_bytes`] accepts: its weights decode to
    /// |w| ≤ 127 × [`MAX_SCALE`] = 127 and its biases are at most [`MAX_BIAS`], the bounds
    /// of [`Weights::check_bounds`] under which [`Model::infer`] is proven total and finite
    /// (the proof is there). Tested at the bound.
    pub fn classify(&self, pixels: &[u8]) -> Result<Class> {
        // The retrieval model's inference, run with these weights: the same mirrored-pair
        // logits.
        let inference = self.model.infer(pixels)?;
        Ok(Class {
            label: inference.label,
            probabilities: inference.probabilities,
        })
    }
}

// The wire's limits name this file's length; it is the format's.
const _: () = assert!(Classifier::file_len() == shared::params::limits::CLASS_MODEL_BYTES);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{random_weights, PIXELS};

    const ROWS: [usize; 4] = Arch::SMALL.rows();
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn eight_bit_weights_round_trip_within_half_a_step() {
        let w = random_weights(&mut ChaCha8Rng::seed_from_u64(3), Arch::SMALL);
        let bytes = Classifier::encode(&w);
        assert_eq!(bytes.len(), Classifier::file_len());
        let c = Classifier::from_bytes(&bytes).unwrap();
        let t = w.tensors();
        let d = c.weights().tensors();
        for (k, &rows) in [0usize, 2, 4, 6].iter().zip(&ROWS) {
            let cols = t[*k].len() / rows;
            for (a, b) in t[*k].chunks_exact(cols).zip(d[*k].chunks_exact(cols)) {
                let step = a.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
                for (x, y) in a.iter().zip(b) {
                    assert!((x - y).abs() <= 0.5 * step * 1.0001 + 1e-12, "{x} vs {y}");
                }
            }
        }
        for k in [1usize, 3, 5, 7] {
            assert_eq!(t[k], d[k], "biases are kept exactly");
        }
        // Encoding the decoded weights gives the same file (the format is a fixed point).
        assert_eq!(Classifier::encode(c.weights()), bytes);
        let class = c.classify(&[9u8; PIXELS]).unwrap();
        assert!((class.probabilities.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        assert_eq!(
            class.label as usize,
            crate::model::argmax(&class.probabilities)
        );
    }

    #[test]
    fn hostile_files_are_refused() {
        let w = random_weights(&mut ChaCha8Rng::seed_from_u64(4), Arch::SMALL);
        let bytes = Classifier::encode(&w);
        assert!(Classifier::from_bytes(&bytes[..bytes.len() - 1]).is_err());
        assert!(Classifier::from_bytes(b"PMCLS1\0\0").is_err());
        assert!(
            Classifier::from_bytes(&w.to_bytes()).is_err(),
            "an f32 model file"
        );
        for bad_scale in [f32::NAN, f32::INFINITY, -1.0, 2.0 * MAX_SCALE] {
            let mut b = bytes.clone();
            b[8..12].copy_from_slice(&bad_scale.to_le_bytes());
            assert!(Classifier::from_bytes(&b).is_err(), "scale {bad_scale}");
        }
        let mut b = bytes.clone();
        let last = b.len() - 4;
        b[last..].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(Classifier::from_bytes(&b).is_err(), "a NaN bias");
        for bad_bias in [2.0 * MAX_BIAS, -2.0 * MAX_BIAS, f32::INFINITY] {
            let mut b = bytes.clone();
            b[last..].copy_from_slice(&bad_bias.to_le_bytes());
            assert!(Classifier::from_bytes(&b).is_err(), "bias {bad_bias}");
        }
        // The largest network the format admits (every weight 127 × MAX_SCALE, every bias
        // MAX_BIAS: nothing cancels) gives finite probabilities for the brightest input.
        let mut b = bytes.clone();
        let mut off = 8;
        for (k, &rows) in [0usize, 2, 4, 6].iter().zip(&ROWS) {
            for r in 0..rows {
                b[off + 4 * r..off + 4 * r + 4].copy_from_slice(&MAX_SCALE.to_le_bytes());
            }
            off += 4 * rows;
            let n = w.tensors()[*k].len();
            b[off..off + n].fill(127);
            off += n;
        }
        while off < b.len() {
            b[off..off + 4].copy_from_slice(&MAX_BIAS.to_le_bytes());
            off += 4;
        }
        let c = Classifier::from_bytes(&b).unwrap();
        assert!(c
            .weights()
            .tensors()
            .iter()
            .all(|t| t.iter().all(|v| v.is_finite())));
        for px in [[255u8; PIXELS], [0u8; PIXELS]] {
            let class = c.classify(&px).unwrap();
            assert!(class.probabilities.iter().all(|p| p.is_finite()));
            assert!((class.probabilities.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        }
        assert!(c.classify(&[0u8; 10]).is_err(), "a wrong-sized image");
    }
}
