//! A gallery's configuration held against this client's own models, before any photo is read.
//!
//! Why: a configuration that disagrees with the client's models must be refused alike for
//! every photo, at start. Left to a search, a disagreement fails for some photos only — a
//! configuration naming nine classes makes Algorithm 1 refuse a photo of the tenth
//! (`Error::LabelOutOfRange`) and send for the rest — and the server learns which photos
//! failed from the searches that never came. Both clients (the page's wasm client and the
//! CLI) call [`check`] once, with the configuration the gallery's key signed.

use embed::model::weights_version;
use embed::weights::CLASSES;
use paper::laplacian::check_kernel_scale;
use shared::api::ConfigResponse;

/// How a configuration disagrees with this client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigMismatch {
    /// The gallery's features are the gallery model's, and the query model the configuration
    /// names is the one trained to land a photo among them; features from any other weights
    /// would rank nonsense.
    #[error(
        "the server's gallery expects the query model {expected}, but this client runs {ours}"
    )]
    QueryModel { expected: String, ours: String },
    /// The class model names one of [`CLASSES`] classes; Algorithm 1 hides that label among
    /// one decoy of every other class the configuration names.
    #[error(
        "the server's configuration names {got} classes, but this client's class model has {CLASSES}"
    )]
    Classes { got: u32 },
    /// A kernel scale under which no release's noise can be bounded
    /// ([`paper::laplacian::check_kernel_scale`]).
    #[error("the server's configuration is refused: {0}")]
    KernelScale(String),
}

/// Whether `config` agrees with this client: the query model it names is `query_weights`
/// (their [`weights_version`]), it names the class model's [`CLASSES`] classes, and its kernel
/// scales (Algorithm 1's and the frame's) admit a bound.
///
/// Guarantee: a function of the configuration and the client's own files only — never of a
/// photo — so a configuration is accepted or refused alike for every photo.
pub fn check(config: &ConfigResponse, query_weights: &[u8]) -> Result<(), ConfigMismatch> {
    let ours = weights_version(query_weights);
    if config.query_model_version != ours {
        return Err(ConfigMismatch::QueryModel {
            expected: config.query_model_version.clone(),
            ours,
        });
    }
    if config.smlq.num_classes as usize != CLASSES {
        return Err(ConfigMismatch::Classes {
            got: config.smlq.num_classes,
        });
    }
    for (name, s) in [
        ("kernel_scale", config.smlq.kernel_scale),
        ("frame_kernel_scale", config.frame_kernel_scale),
    ] {
        check_kernel_scale(name, s).map_err(|e| ConfigMismatch::KernelScale(e.to_string()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(weights: &[u8]) -> ConfigResponse {
        ConfigResponse {
            query_model_version: weights_version(weights),
            ..crate::frame_search::tests::config()
        }
    }

    #[test]
    fn the_query_model_and_the_classes_must_be_this_clients() {
        let weights = b"any bytes: the version is their hash";
        let honest = config(weights);
        assert_eq!(honest.smlq.num_classes as usize, CLASSES);
        assert_eq!(check(&honest, weights), Ok(()));
        assert!(matches!(
            check(&honest, b"other weights"),
            Err(ConfigMismatch::QueryModel { .. })
        ));
        for got in [2, 9, 11, 256] {
            let mut c = honest.clone();
            c.smlq.num_classes = got;
            assert_eq!(check(&c, weights), Err(ConfigMismatch::Classes { got }));
        }
        // Scales whose least weight nears f64's underflow (at 0.00537 it is subnormal).
        for s in [0.00537, 0.009] {
            let mut c = honest.clone();
            c.smlq.kernel_scale = s;
            assert!(matches!(
                check(&c, weights),
                Err(ConfigMismatch::KernelScale(_))
            ));
            let mut c = honest.clone();
            c.frame_kernel_scale = s;
            assert!(matches!(
                check(&c, weights),
                Err(ConfigMismatch::KernelScale(_))
            ));
        }
    }
}
