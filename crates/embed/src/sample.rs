//! The page's sample images and the features published with them.
//!
//! A sample is a 28×28 Fashion-MNIST image. Through the query model (trained on photos) it
//! keeps only about three quarters of the gallery model's own top 8 of that image, so the page
//! publishes, with each sample, the gallery model's features of it (`web/samples.js`, written
//! by `crates/data/tests/models/wasm_parity_fixture.rs`) and the gallery model's version. A client searches
//! a sample with those features when the version is the one the server's configuration names
//! (the gallery's), and with the query model's otherwise, as for any photo.
//!
//! **Privacy.** The features are public data the server wrote, like the sample itself. Every
//! protocol's guarantee holds for any unit query vector, so a search for a sample is exactly as
//! private as a search for a photo: the server learns from it what the mechanism allows, and
//! nothing more, whichever vectors it published. A server that publishes wrong vectors changes
//! what a sample finds, nothing about what a search reveals — it writes the answers anyway.
//! [`published_features`] refuses anything that is not a finite vector of the model's length
//! and (near) unit length; a client then searches the sample with the query model's features,
//! as any photo, so a refusal changes which vector is searched, never whether a search follows
//! (a search that never came would tell the server which sample was chosen).

use crate::model::EMBED;
use shared::error::{Error, Result};

/// How far from 1 a published vector's length may be: the gallery model's features are unit
/// length to f32 rounding (about 10⁻⁷); anything further was not written by it.
pub const UNIT_TOLERANCE: f32 = 1e-3;

/// A sample's published features, checked and normalised to unit length as the model
/// normalises its own (each value divided by the f32 norm), so every protocol gets the same
/// kind of query it gets from a photo.
///
/// Errors: a length other than [`EMBED`], a NaN or infinity, or a length further than
/// [`UNIT_TOLERANCE`] from 1.
pub fn published_features(v: &[f32]) -> Result<Vec<f32>> {
    if v.len() != EMBED {
        return Err(Error::DimensionMismatch {
            what: "a sample's published features",
            expected: EMBED,
            got: v.len(),
        });
    }
    if v.iter().any(|x| !x.is_finite()) {
        return Err(Error::NonFinite {
            what: "a sample's published features",
        });
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if (norm - 1.0).abs() > UNIT_TOLERANCE {
        return Err(Error::InvalidParameter {
            name: "sample features",
            reason: format!("length {norm}, not unit length"),
        });
    }
    Ok(v.iter().map(|x| x / norm).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_vectors_pass_normalised_and_anything_else_is_refused() {
        let mut v = vec![0.0f32; EMBED];
        v[3] = 0.6;
        v[7] = 0.8;
        let got = published_features(&v).unwrap();
        let n = got.iter().map(|x| x * x).sum::<f32>();
        assert!((n - 1.0).abs() < 1e-6);
        assert!((got[7] - 0.8).abs() < 1e-6);
        // Slightly off unit length (within the tolerance): normalised.
        let w: Vec<f32> = v.iter().map(|x| x * 1.0005).collect();
        let got = published_features(&w).unwrap();
        assert!((got.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(matches!(
            published_features(&v[..EMBED - 1]),
            Err(Error::DimensionMismatch { .. })
        ));
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut b = v.clone();
            b[0] = bad;
            assert!(matches!(
                published_features(&b),
                Err(Error::NonFinite { .. })
            ));
        }
        for scale in [0.0f32, 0.5, 1.01, 1e30] {
            let b: Vec<f32> = v.iter().map(|x| x * scale).collect();
            assert!(
                matches!(published_features(&b), Err(Error::InvalidParameter { .. })),
                "scale {scale}"
            );
        }
    }
}
