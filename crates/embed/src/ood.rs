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
//! The pipeline squeezes any photo into 28×28 pixels, where a landscape, a page on a desk or a
//! mug can look much like a garment; so for a photo the decision ([`assess`], the same
//! [`assess_scene`] in every client) also reads the photo's own statistics ([`Scene`]: whether
//! the border is plain, how much of the object's box the object fills, in how many parts, how
//! much of it is edge), each against a threshold at the tail of clothing photos
//! ([`scene_unlike_a_product`]), and a small learned detector ([`crate::detector`]: the input's
//! shape, the features and the layer means), fitted on clothing against a fitting family of
//! generated non-garments (`data::not_garments`). On held-out kinds none of it was fitted or
//! calibrated on (`data::not_clothing`: documents, faces and people, landscapes, household
//! objects, vehicles, line drawings, charts, screenshots) the decision flags 0.973 of
//! non-clothing and 0.019 of held-out clothing, and 0.942–0.952 of three further draws of the
//! same kinds (the test `familiarity_heldout::held_out_rates_per_kind`; per kind in
//! docs/model.md). The clothing budget (2 % of 3,000 reserved clothing photos) is shared
//! between the score and the detector as [`UNFAMILIAR_SCORE`] says. The thresholds and the
//! detector's weights are constants of the client, not part of the server's [`Reference`].
//!
//! **Privacy.** It runs on the client, on the photo and a [`Reference`] every client receives
//! alike (part of the public anchors file); nothing about it is sent, and nothing a search
//! sends depends on it. A server that sends an odd reference can change this warning only,
//! never what a search reveals — it is checked for shape and finiteness so it cannot make the
//! client fail either.

use crate::model::Model;
pub use crate::photo::Scene;
use shared::error::{Error, Result};
pub use shared::familiarity::{ClassGaussians, Reference, MAX_CLASSES};

/// The familiarity model: the network whose features and layer means the check reads — the
/// score's Gaussians (a server fits the [`Reference`] with it, on the anchors) and the
/// detector's inputs ([`crate::detector`]). It is not the query model. The thresholds and the
/// detector are calibrated on this network, so the query model can be trained again for
/// search (shadows, light, colour) without moving the warning, and the server, which names
/// the query model, cannot move it either: a familiarity model is made only from the bytes
/// whose SHA-256 is [`FAMILIARITY_SHA256`], a constant of every client. (Today the bytes are
/// the query model's own, `cnn-v2-cc09b0595f69ddf9`, the one the check was calibrated with.)
///
/// Natively the bytes are compiled in ([`FamiliarityModel::compiled`]). The page's wasm takes
/// them from the query model's file when that is the same bytes, and otherwise the page
/// fetches them as one of its own files with its first photo (`pkg/familiarity.bin`), so its
/// first load stays as light as before.
#[derive(Debug, Clone)]
pub struct FamiliarityModel(Model);

/// SHA-256 of the familiarity model's weights file, `crates/embed/assets/familiarity.bin`.
pub const FAMILIARITY_SHA256: &str =
    "2e61aadfea38ce4af21eaa1fed73774f331206653d7a6414df20c0376aa01c60";

/// The familiarity model's layer means' length: the detector's (one fact, stated where the
/// detector's constants are).
pub const FAMILIARITY_LAYER_DIM: usize = crate::detector_weights::LAYERS;

/// The familiarity model's weights, compiled into the native clients, the server and the
/// tools (the page fetches them instead, [`FamiliarityModel`]).
#[cfg(not(target_arch = "wasm32"))]
pub const FAMILIARITY_WEIGHTS: &[u8] = include_bytes!("../assets/familiarity.bin");

impl FamiliarityModel {
    /// The model from its weights file: refused unless its SHA-256 is [`FAMILIARITY_SHA256`].
    pub fn from_bytes(bytes: &[u8]) -> Result<FamiliarityModel> {
        if shared::digest::hash_hex(bytes) != FAMILIARITY_SHA256 {
            return Err(Error::NotPinned {
                what: "the familiarity model's weights",
            });
        }
        Ok(FamiliarityModel(Model::from_bytes(bytes)?))
    }

    /// [`FAMILIARITY_WEIGHTS`], parsed once.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn compiled() -> &'static FamiliarityModel {
        static MODEL: std::sync::OnceLock<FamiliarityModel> = std::sync::OnceLock::new();
        MODEL.get_or_init(|| {
            FamiliarityModel::from_bytes(FAMILIARITY_WEIGHTS)
                .expect("the compiled-in familiarity weights are the pinned ones (tested)")
        })
    }

    /// The network (for fitting a reference, and for measurements).
    pub fn model(&self) -> &Model {
        &self.0
    }
}

/// Above this score a photo is called unfamiliar. Calibrated for the familiarity model
/// ([`FamiliarityModel`], the one a client scores its photo with; the reference is fitted
/// with it too) and the server's default anchors (`data::balanced_anchors(train, 1000)`).
///
/// The whole decision may flag 2 % of 3,000 reserved clothing photos (the reserved training
/// images, never trained on, each as it is, photographed at 112–400 pixels, and faint on a
/// light ground); the score, the photo's statistics and the detector share that budget. For
/// each score threshold of 3.5–5.5 the detector's threshold is set to spend what is left
/// (`fit_detector --recalibrate`), and this one flags the most of a fresh stretch of the
/// detector's fitting family (433 of 464; 415 at 3.5, the 99th percentile of 900 clothing
/// photos it was before). It was chosen on that family only, never on the held-out kinds; on
/// them the detector carries over better than the score (docs/model.md, "Familiarity on
/// held-out kinds"). Against the generated noise, gradients, shapes and text-like images of
/// `eval --photos` it separates as measured there. The threshold is the familiarity model's
/// own: recalibrate it whenever that model or the photo pipeline change.
pub const UNFAMILIAR_SCORE: f32 = 4.25;

/// The photo's own statistics ([`Scene`], thousandths) beyond which a photo is called
/// unfamiliar whatever its score: each at the 0.4 % tail of 600 clothing photos of the
/// reserved training images (300 family photos, 300 light garments on light backgrounds, 112–400
/// pixels), never fitted on non-clothing. Most of a product photo's border ring is plain.
pub const MAX_RING_DIFFERS: u16 = 220;
/// At least this share of a product's box differs from the background (text, line art,
/// charts fill far less).
pub const MIN_BOX_FILLED: u16 = 182;
/// At least this share of what differs is one part (a page of text is hundreds).
pub const MIN_LARGEST_PART: u16 = 246;
/// At most this share of what differs is edge (strokes are all edge).
pub const MAX_EDGE_SHARE: u16 = 549;

/// Whether a photo's [`Scene`] is unlike any product photo's: one of its statistics beyond
/// [`MAX_RING_DIFFERS`], [`MIN_BOX_FILLED`], [`MIN_LARGEST_PART`] or [`MAX_EDGE_SHARE`].
pub fn scene_unlike_a_product(scene: &Scene) -> bool {
    scene.ring_differs > MAX_RING_DIFFERS
        || scene.box_filled < MIN_BOX_FILLED
        || scene.largest_part < MIN_LARGEST_PART
        || scene.edge_share > MAX_EDGE_SHARE
}

/// Below this much ink (the sum of the model input's 784 bytes) there is no object to speak
/// of: the photo pipeline found nothing but background or removed it as noise (a blank
/// image, pure noise). The sparsest of 20,000 Fashion-MNIST training images (every third)
/// holds 5,188, the 0.1 % quantile 8,749. Such an input is called unfamiliar whatever its
/// features, which for an empty input are an artefact of the model's biases.
pub const MIN_INK: u32 = 4_000;

/// What a client tells the person when a photo is unfamiliar.
/// It can still be searched; the words say what the results then are.
pub const UNFAMILIAR_MESSAGE: &str = "This photo does not look like a clothing product the \
     gallery holds. You can still search with it: the results are the gallery's clothing items \
     the model finds closest to it, and they may look nothing like your photo.";

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
/// rows of `layer_dim`, the familiarity model's [`crate::weights::Arch::layer_dim`]) and
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
    /// The learned detector's output ([`crate::detector::output`]; above
    /// [`crate::detector_weights::THRESHOLD`]: unlike a garment; NaN for features of other
    /// lengths than the familiarity model's).
    pub detector: f32,
    /// The decision: `score > UNFAMILIAR_SCORE`, or the detector above its threshold, or (for
    /// a photo, [`assess`]) its [`Scene`] unlike a product photo's.
    pub unfamiliar: bool,
}

/// The decision for a model input (`pixels`, 28×28), its unit `features` and its
/// `layer_means` under the familiarity model ([`FamiliarityModel`]'s
/// [`Model::infer_with_layer_means`]; [`assess_scene`] computes them): unfamiliar when the
/// input holds less than [`MIN_INK`], its score exceeds [`UNFAMILIAR_SCORE`], or the learned
/// detector ([`crate::detector`], constants of the client) calls it unlike a garment.
pub fn assess_input(
    pixels: &[u8],
    features: &[f32],
    layer_means: &[f32],
    reference: &Reference,
) -> Result<Familiarity> {
    let score = score(reference, features, layer_means)?;
    let ink: u32 = pixels.iter().map(|&p| p as u32).sum();
    let score = if ink < MIN_INK { f32::INFINITY } else { score };
    // Lengths other than the familiarity model's (a caller's features of another model): the
    // detector's constants mean nothing for them, so it is left out (NaN, never above its
    // threshold) rather than failing the photo. The warning is advice either way.
    let detector = crate::detector::output(pixels, features, layer_means).unwrap_or(f32::NAN);
    Ok(Familiarity {
        score,
        detector,
        unfamiliar: score > UNFAMILIAR_SCORE || detector > crate::detector_weights::THRESHOLD,
    })
}

/// The decision for a photo the pipeline framed ([`look`]): [`assess_scene`] of its model
/// input and [`Scene`].
pub fn assess(
    framing: &crate::photo::Framing,
    reference: &Reference,
    familiar: &FamiliarityModel,
) -> Result<Familiarity> {
    assess_scene(&framing.pixels, framing.scene.as_ref(), reference, familiar)
}

/// The decision every client makes of a photo: [`assess_input`] of its model input under the
/// familiarity model, and unfamiliar too when the photo's `scene` (none for a photo of at most
/// [`crate::photo::SCENE_MIN_SIDE`] pixels a side) is unlike a product photo's
/// ([`scene_unlike_a_product`]; the score stays [`score`]'s).
pub fn assess_scene(
    pixels: &[u8],
    scene: Option<&Scene>,
    reference: &Reference,
    familiar: &FamiliarityModel,
) -> Result<Familiarity> {
    let (inf, layer_means) = familiar.model().infer_with_layer_means(pixels)?;
    let f = assess_input(pixels, &inf.features, &layer_means, reference)?;
    Ok(Familiarity {
        unfamiliar: f.unfamiliar || scene.is_some_and(scene_unlike_a_product),
        ..f
    })
}

/// Smallest side of a photo a client looks at: the model's own input is 28×28 pixels, and a
/// smaller image holds less than one model pixel a pixel — a 5×5 image is not a photo of
/// anything. Refused as [`NothingToSee::TooSmall`].
pub const MIN_PHOTO_SIDE: usize = 28;

/// Most a channel may vary (between the 0.5 % and 99.5 % quantiles of its levels) in an image
/// of one solid colour ([`NothingToSee::SolidColour`]). A photographed product differs from
/// its background by far more (the photo pipeline boxes an object only beyond 24 levels,
/// [`crate::photo::PHOTO_MASK_FLOOR`]).
pub const SOLID_SPREAD: u32 = 12;

/// Above this ratio an image is noise ([`NothingToSee::Noise`]): the mean absolute difference
/// of neighbouring pixels (grey, after 2×2 averaging in an image of 56 pixels a side or more)
/// over the mean absolute deviation from the image's mean. Independent pixels give √2 ≈ 1.41
/// whatever their distribution's width (Gaussian; 1.33 uniform); in a photo neighbours are
/// alike and the ratio is far below 1 (a garment on a plain background, noise σ = 8 included,
/// about 0.1).
pub const NOISE_RATIO: f64 = 1.0;

/// Why a client will not classify or search an image: there is nothing in it to see. Typed,
/// and worded for the person (the CLI prints it and exits 13; the page shows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NothingToSee {
    /// Either side below [`MIN_PHOTO_SIDE`].
    TooSmall { width: usize, height: usize },
    /// Every channel within [`SOLID_SPREAD`] levels.
    SolidColour,
    /// Neighbouring pixels as unlike as random ones ([`NOISE_RATIO`]).
    Noise,
}

impl std::fmt::Display for NothingToSee {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NothingToSee::TooSmall { width, height } => write!(
                f,
                "the image is only {width}×{height} pixels; it needs at least \
                 {MIN_PHOTO_SIDE}×{MIN_PHOTO_SIDE} to show an item"
            ),
            NothingToSee::SolidColour => write!(
                f,
                "the image is one solid colour; there is no item in it to search for"
            ),
            NothingToSee::Noise => write!(
                f,
                "the image is random noise (like static); there is no item in it to search for"
            ),
        }
    }
}

impl std::error::Error for NothingToSee {}

/// The image's statistics before the photo pipeline: [`NothingToSee::TooSmall`],
/// [`NothingToSee::SolidColour`] or [`NothingToSee::Noise`], if it is one of them. `rgba` must
/// hold `width × height` pixels (a shorter buffer is only read as far as it goes).
pub fn nothing_to_see(rgba: &[u8], width: usize, height: usize) -> Option<NothingToSee> {
    if width < MIN_PHOTO_SIDE || height < MIN_PHOTO_SIDE {
        return Some(NothingToSee::TooSmall { width, height });
    }
    let n = (width * height).min(rgba.len() / 4);
    if n == 0 {
        return Some(NothingToSee::TooSmall { width, height });
    }
    // Composite over white (as the pipeline does), so a transparent image is white.
    let rgb = |i: usize| -> [u32; 3] {
        let p = &rgba[4 * i..4 * i + 4];
        let a = p[3] as u32;
        [0, 1, 2].map(|c| (p[c] as u32 * a + 255 * (255 - a) + 127) / 255)
    };
    // 1. Solid colour: each channel's 0.5 %–99.5 % range.
    let solid = (0..3).all(|c| {
        let mut hist = [0usize; 256];
        (0..n).for_each(|i| hist[rgb(i)[c] as usize] += 1);
        let cut = n / 200;
        let quantile = |from_top: bool| {
            let mut seen = 0;
            let order: Vec<usize> = if from_top {
                (0..256).rev().collect()
            } else {
                (0..256).collect()
            };
            for v in order {
                seen += hist[v];
                if seen > cut {
                    return v as u32;
                }
            }
            0
        };
        quantile(true).saturating_sub(quantile(false)) <= SOLID_SPREAD
    });
    if solid {
        return Some(NothingToSee::SolidColour);
    }
    // 2. Noise: neighbours as unlike as random pixels, on 2×2 means where the image allows
    // (so a one-pixel pattern — fine print, a checkerboard — is not taken for noise).
    let grey = |i: usize| {
        let [r, g, b] = rgb(i);
        (299 * r + 587 * g + 114 * b) as f64 / 1000.0
    };
    let step = if width.min(height) >= 2 * MIN_PHOTO_SIDE {
        2
    } else {
        1
    };
    let (w, h) = (width / step, height / step);
    let cell = |x: usize, y: usize| {
        let mut s = 0.0;
        for dy in 0..step {
            for dx in 0..step {
                let i = (y * step + dy) * width + x * step + dx;
                s += if i < n { grey(i) } else { 255.0 };
            }
        }
        s / (step * step) as f64
    };
    let g: Vec<f64> = (0..h)
        .flat_map(|y| (0..w).map(move |x| (x, y)))
        .map(|(x, y)| cell(x, y))
        .collect();
    let mean = g.iter().sum::<f64>() / g.len() as f64;
    let deviation = g.iter().map(|v| (v - mean).abs()).sum::<f64>() / g.len() as f64;
    let (mut diff, mut pairs) = (0.0, 0usize);
    for y in 0..h {
        for x in 0..w {
            let v = g[y * w + x];
            if x + 1 < w {
                diff += (g[y * w + x + 1] - v).abs();
                pairs += 1;
            }
            if y + 1 < h {
                diff += (g[(y + 1) * w + x] - v).abs();
                pairs += 1;
            }
        }
    }
    if deviation > 0.0 && diff / pairs.max(1) as f64 > NOISE_RATIO * deviation {
        return Some(NothingToSee::Noise);
    }
    None
}

/// What a client makes of a decoded photo: the photo pipeline's framing, or why there is
/// nothing to see ([`nothing_to_see`]). Such an image is never classified or searched. (An
/// input the pipeline leaves nearly empty is not refused but flagged, [`MIN_INK`]: one of the
/// 10,000 test images, number 320, keeps less than 1,000 of ink through it.) Bad sizes are typed errors, as in
/// [`crate::photo::analyse`].
pub fn look(
    rgba: &[u8],
    width: usize,
    height: usize,
) -> Result<std::result::Result<crate::photo::Framing, NothingToSee>> {
    // The sides first, as `analyse` bounds them: on wasm32 `width · height · 4` of two large
    // sides wraps, and a wrapped length could match a short buffer.
    crate::photo::check_sides(width, height)?;
    if rgba.len() != width * height * 4 {
        return Err(Error::DimensionMismatch {
            what: "RGBA bytes",
            expected: width * height * 4,
            got: rgba.len(),
        });
    }
    if let Some(why) = nothing_to_see(rgba, width, height) {
        return Ok(Err(why));
    }
    Ok(Ok(crate::photo::analyse(rgba, width, height)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The familiarity model's layer means' length.
    const LAYER_DIM: usize = crate::weights::Arch::WIDE.layer_dim();

    /// The compiled-in familiarity model is the pinned file, has the lengths the detector
    /// reads, and is the one the detector was fitted with or its threshold set with; other
    /// bytes are refused; a photo's decision is [`assess_input`] of that model's outputs.
    #[test]
    fn the_familiarity_model_is_the_pinned_one_and_the_detectors() {
        let familiar = FamiliarityModel::compiled();
        let model = familiar.model();
        assert_eq!(model.w.arch.layer_dim(), FAMILIARITY_LAYER_DIM);
        assert_eq!(
            crate::model::weights_version(FAMILIARITY_WEIGHTS),
            crate::detector_weights::FAMILIARITY_MODEL
        );
        let mut other = FAMILIARITY_WEIGHTS.to_vec();
        *other.last_mut().unwrap() ^= 1;
        assert!(matches!(
            FamiliarityModel::from_bytes(&other),
            Err(Error::NotPinned { .. })
        ));
        let px: Vec<u8> = (0..784).map(|i| ((i * 37) % 251) as u8).collect();
        let (inf, layers) = model.infer_with_layer_means(&px).unwrap();
        assert_eq!(inf.features.len(), crate::detector_weights::FEATURES);
        let labels: Vec<u32> = (0..40).map(|i| i % 4).collect();
        let feats: Vec<f32> = (0..40 * inf.features.len())
            .map(|i| ((i * 7919) % 97) as f32 / 97.0)
            .collect();
        let lm: Vec<f32> = (0..40 * LAYER_DIM)
            .map(|i| ((i * 104_729) % 89) as f32 / 89.0)
            .collect();
        let reference = fit(&feats, &lm, &labels, inf.features.len(), LAYER_DIM).unwrap();
        assert_eq!(
            assess_scene(&px, None, &reference, familiar).unwrap(),
            assess_input(&px, &inf.features, &layers, &reference).unwrap()
        );
    }

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
        // The decision, with features of the deployed length (the rows padded with zeros):
        // near a class the score does not flag, and the decision is then the detector's.
        let pad = |r: &[f32]| {
            let mut v = r.to_vec();
            v.resize(crate::weights::EMBED, 0.0);
            v
        };
        let rows64: Vec<f32> = rows.chunks_exact(3).flat_map(pad).collect();
        let reference = fit(
            &rows64,
            &layer_rows,
            &labels,
            crate::weights::EMBED,
            LAYER_DIM,
        )
        .unwrap();
        let f = pad(&f);
        let full = [60u8; 784];
        let ok = assess_input(&full, &f, &l, &reference).unwrap();
        assert!(ok.score <= UNFAMILIAR_SCORE, "{}", ok.score);
        assert_eq!(
            ok.unfamiliar,
            ok.detector > crate::detector_weights::THRESHOLD
        );
        // An empty input is unfamiliar whatever its features.
        let mut sparse = [0u8; 784];
        sparse[..15].fill(255); // 3,825 < MIN_INK
        let empty = assess_input(&sparse, &f, &l, &reference).unwrap();
        assert!(empty.unfamiliar && empty.score == f32::INFINITY);
        // Far from both classes: unfamiliar by the score.
        let far: Vec<f32> = l.iter().map(|v| v + 5.0).collect();
        let off = assess_input(&full, &pad(&[0.0, 3.0, 1.0]), &far, &reference).unwrap();
        assert!(
            off.unfamiliar && off.score > UNFAMILIAR_SCORE,
            "{}",
            off.score
        );
    }

    fn rgba(w: usize, h: usize, f: impl Fn(usize, usize) -> [u8; 3]) -> Vec<u8> {
        (0..w * h)
            .flat_map(|i| {
                let [r, g, b] = f(i % w, i / w);
                [r, g, b, 255]
            })
            .collect()
    }

    /// A garment-like photo: a dark rounded box on a light background, with mild noise.
    fn product(w: usize, h: usize) -> Vec<u8> {
        rgba(w, h, |x, y| {
            let (u, v) = (x as f32 / w as f32 - 0.5, y as f32 / h as f32 - 0.5);
            let n = ((x * 7919 + y * 104_729) % 9) as u8;
            if u.abs() < 0.3 && v.abs() < 0.35 && (u * u + v * v) < 0.15 {
                [60 + n, 40 + n, 50 + n]
            } else {
                [236 + n, 236 + n, 236 + n]
            }
        })
    }

    #[test]
    fn nothing_to_see_is_refused_with_its_reason() {
        // Too small: 5×5 and a 27-pixel side; 28×28 (the dataset's own size) is looked at.
        assert_eq!(
            nothing_to_see(&[9u8; 100], 5, 5),
            Some(NothingToSee::TooSmall {
                width: 5,
                height: 5
            })
        );
        assert!(matches!(
            nothing_to_see(&product(27, 60), 27, 60),
            Some(NothingToSee::TooSmall { .. })
        ));
        assert_eq!(nothing_to_see(&product(28, 28), 28, 28), None);
        // A solid colour, with JPEG-like wobble of a few levels.
        let solid = rgba(80, 60, |x, y| [30 + ((x + y) % 5) as u8, 120, 200]);
        assert_eq!(
            nothing_to_see(&solid, 80, 60),
            Some(NothingToSee::SolidColour)
        );
        // Noise, grey and colour, at two sizes.
        let mut z = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            (z >> 56) as u8
        };
        for side in [40, 200] {
            let colour: Vec<u8> = (0..side * side)
                .flat_map(|_| [next(), next(), next(), 255])
                .collect();
            assert_eq!(
                nothing_to_see(&colour, side, side),
                Some(NothingToSee::Noise)
            );
            let grey: Vec<u8> = (0..side * side)
                .flat_map(|_| {
                    let v = next() / 4 + 100;
                    [v, v, v, 255]
                })
                .collect();
            assert_eq!(nothing_to_see(&grey, side, side), Some(NothingToSee::Noise));
        }
        // A product photo is looked at, framed and not refused.
        assert_eq!(nothing_to_see(&product(112, 112), 112, 112), None);
        assert!(look(&product(112, 112), 112, 112).unwrap().is_ok());
        // Each reason is its own sentence.
        let words: Vec<String> = [
            NothingToSee::TooSmall {
                width: 5,
                height: 5,
            },
            NothingToSee::SolidColour,
            NothingToSee::Noise,
        ]
        .iter()
        .map(|w| w.to_string())
        .collect();
        assert!(words[0].contains("5×5") && words[0].contains("28×28"));
        assert!(words[1].contains("solid colour"));
        assert!(words[2].contains("noise"));
        // Bad sizes stay typed errors: sides past the limit are refused before their product
        // is taken (65,537 × 16,384 × 4 wraps to 65,536 on wasm32), and a side of 0 too.
        assert!(look(&[0u8; 12], 40, 40).is_err());
        assert!(look(&[0u8; 65_536], 65_537, 16_384).is_err());
        assert!(look(&[], 0, 16_384).is_err());
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
