//! The familiarity reference every client receives with the public anchors
//! (`api::AnchorsResponse::familiarity`): class-conditional Gaussians over the anchors'
//! features and over their layer means. Here is its wire form and the checks a received one
//! must pass; fitting it and scoring a photo against it are the on-device model's
//! (`embed::ood`).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Most classes a [`ClassGaussians`] received from a server may hold.
pub const MAX_CLASSES: usize = 256;

/// Class-conditional Gaussians with one shared covariance: each class's mean and the precision
/// (inverse covariance, row-major `dim × dim`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassGaussians {
    pub means: Vec<Vec<f32>>,
    pub precision: Vec<f32>,
}

impl ClassGaussians {
    /// Checks a received value: `1..=MAX_CLASSES` means of `dim` finite values and a finite
    /// `dim × dim` precision.
    pub fn check(&self, dim: usize) -> Result<()> {
        if self.means.is_empty()
            || self.means.len() > MAX_CLASSES
            || self.means.iter().any(|m| m.len() != dim)
            || self.precision.len() != dim * dim
        {
            return Err(Error::DimensionMismatch {
                what: "out-of-distribution reference (class means and precision)",
                expected: dim * dim,
                got: self.precision.len(),
            });
        }
        if self
            .means
            .iter()
            .flatten()
            .chain(&self.precision)
            .any(|v| !v.is_finite())
        {
            return Err(Error::NonFinite {
                what: "out-of-distribution reference",
            });
        }
        Ok(())
    }
}

/// What a photo is compared with: Gaussians over the anchors' features and over their layer
/// means. The server fits it from its anchors and publishes it with them
/// (`api::AnchorsResponse::familiarity`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    pub features: ClassGaussians,
    pub layers: ClassGaussians,
}

impl Reference {
    /// Checks a received reference against the model's feature length and layer means'
    /// length.
    pub fn check(&self, feature_dim: usize, layer_dim: usize) -> Result<()> {
        self.features.check(feature_dim)?;
        self.layers.check(layer_dim)
    }
}
