//! The on-device models: [`OnDeviceModel`] on its own (for tests and benchmarks), and loading the
//! user's photo into the [`Client`] (preprocess, run the retrieval model and the class model,
//! keep the features and the class). Nothing here
//! sends anything: the features and the predicted label stay in the `Client`.

use embed::model::Model;
use wasm_bindgen::prelude::*;

use crate::{js_err, Client};

/// The on-device model, loaded from its weights file.
#[wasm_bindgen]
pub struct OnDeviceModel {
    model: Model,
}

#[wasm_bindgen]
impl OnDeviceModel {
    /// Load weights (the bytes of `query.bin`, the query model); a clear error for anything
    /// else.
    #[wasm_bindgen(constructor)]
    pub fn new(weights: &[u8]) -> Result<OnDeviceModel, JsError> {
        Ok(OnDeviceModel {
            model: Model::from_bytes(weights).map_err(js_err)?,
        })
    }

    /// The search features of a 28×28 greyscale model input (784 bytes, row-major): unit
    /// length, averaged over half-pixel shifts (`embed::views`), as a photo's search
    /// uses them.
    pub fn features(&self, pixels: &[u8]) -> Result<Vec<f32>, JsError> {
        self.model.search_features(pixels).map_err(js_err)
    }

    /// The predicted class of the image.
    pub fn label(&self, pixels: &[u8]) -> Result<u32, JsError> {
        Ok(self.model.infer(pixels).map_err(js_err)?.label)
    }
}

/// What the page shows about the loaded image (`Client::load_image`).
#[derive(serde::Serialize)]
struct ImageInfo {
    /// The model's 28×28 input, for the page to show.
    pixels: Vec<u8>,
    label: u32,
    class_name: String,
    probability: f32,
    probabilities: Vec<f32>,
    /// The photo's out-of-distribution score against the anchors' reference and whether it is
    /// above the calibrated threshold (`embed::ood`): the photo does not look like
    /// clothing. `null` for an input with almost no ink (an infinite score).
    unfamiliar_score: Option<f32>,
    unfamiliar: bool,
    /// The sentence to show when `unfamiliar` (`embed::ood::UNFAMILIAR_MESSAGE`).
    unfamiliar_message: Option<&'static str>,
    /// The garment is cut off by the photo's edge (`embed::cut`), and the sentence to show
    /// then (`embed::cut::CUT_OFF_MESSAGE`, the CLI's words).
    cut_off: bool,
    cut_off_message: Option<&'static str>,
    /// Which features a search uses: `"query model"` (computed here, as for every photo) or
    /// `"published"` (a sample's gallery-model features, `Client::load_sample`).
    features: &'static str,
    /// Why a sample's published features were refused (`Client::load_sample`), if they were.
    published_error: Option<String>,
}

#[wasm_bindgen]
impl Client {
    /// Load the familiarity model (`embed::ood::FamiliarityModel`): the bytes of the page's
    /// own `pkg/familiarity.bin`, which the page fetches with its first photo so that its
    /// first load stays light (not at all when the query model's file is the same bytes:
    /// `Client::new` takes it from there). Refused unless their SHA-256 is the one this
    /// client was built with (`embed::ood::FAMILIARITY_SHA256`), so neither the gallery nor a
    /// changed file can move the familiarity warning. No photo is loaded before it.
    pub fn set_familiarity_model(&mut self, weights: &[u8]) -> Result<(), JsError> {
        self.familiar = Some(embed::ood::FamiliarityModel::from_bytes(weights).map_err(js_err)?);
        Ok(())
    }

    /// Whether [`Client::set_familiarity_model`] has been called.
    pub fn has_familiarity_model(&self) -> bool {
        self.familiar.is_some()
    }

    /// Load a decoded image (RGBA bytes, e.g. `ImageData.data`) as the query: preprocess
    /// (`embed::photo::analyse`, as `from_rgba`), run the models, keep the features.
    /// Returns JSON `{pixels, label, class_name, probability, probabilities,
    /// unfamiliar_score, unfamiliar, unfamiliar_message, cut_off, cut_off_message}`; for an image with nothing to see
    /// (`embed::ood::look`: too small, one colour, noise) `{refused}`,
    /// the reason in plain words, and no query is kept: it is neither classified nor searched.
    pub fn load_image(&mut self, rgba: &[u8], width: u32, height: u32) -> Result<String, JsError> {
        let framing = match self.look(rgba, width, height)? {
            Ok(f) => f,
            Err(refused) => return Ok(refused),
        };
        self.load(
            &framing.pixels,
            &framing.class_pixels,
            framing.scene,
            framing.cut_off,
            Ok(None),
        )
    }

    /// As [`Client::load_image`] for a photo the page drew strip by strip into a
    /// [`PhotoReducer`] (consumed): the reduced image, framed, through the models. The CLI
    /// reduces with the same reducer (`embed::photo_file`), so a file both decoders read to
    /// the same pixels gives the same features in both clients.
    pub fn load_photo(&mut self, photo: PhotoReducer) -> Result<String, JsError> {
        let (rgba, w, h) = photo.reducer.finish().map_err(js_err)?;
        self.load_image(&rgba, w as u32, h as u32)
    }

    /// As [`Client::load_image`] for a 28×28 greyscale image (784 bytes).
    pub fn load_pixels(&mut self, pixels: &[u8]) -> Result<String, JsError> {
        self.load(pixels, pixels, None, false, Ok(None))
    }

    /// As [`Client::load_image`] for one of the page's samples (`web/samples.js`), which
    /// carries the gallery model's features of itself and that model's version
    /// (`embed::sample`): a search uses those features when `model_version` is the
    /// gallery's (the configuration's `model_version`), and the query model's otherwise.
    /// Published features that are not a finite unit vector of the model's length are
    /// refused: the sample is then searched with the query model's features, as any photo,
    /// and `published_error` says why.
    ///
    /// Privacy: the features are public data from the server, checked like any query
    /// (`embed::sample::published_features`); every protocol's guarantee holds for
    /// any unit vector, so a sample's search reveals what a photo's would. A refusal changes
    /// only which features are searched, never whether a search follows, so malformed
    /// features cannot tell the server which sample was chosen by a search that never came.
    pub fn load_sample(
        &mut self,
        rgba: &[u8],
        width: u32,
        height: u32,
        features: &[f32],
        model_version: &str,
    ) -> Result<String, JsError> {
        let framing = match self.look(rgba, width, height)? {
            Ok(f) => f,
            Err(refused) => return Ok(refused),
        };
        let published = match embed::sample::published_features(features) {
            Ok(f) => Ok((model_version == self.config.model_version).then_some(f)),
            Err(e) => Err(e.to_string()),
        };
        self.load(
            &framing.pixels,
            &framing.class_pixels,
            framing.scene,
            framing.cut_off,
            published,
        )
    }
}

impl Client {
    /// The photo pipeline's framing, or — nothing to see in the image — the `{refused}` JSON,
    /// with any earlier query forgotten (nothing of the previous photo stays searchable).
    fn look(
        &mut self,
        rgba: &[u8],
        width: u32,
        height: u32,
    ) -> Result<std::result::Result<embed::photo::Framing, String>, JsError> {
        match embed::ood::look(rgba, width as usize, height as usize).map_err(js_err)? {
            Ok(framing) => Ok(Ok(framing)),
            Err(why) => {
                self.query = None;
                self.query_f32 = None;
                self.query_label = None;
                self.pending = None;
                self.pending_blocks = None;
                let refused = serde_json::json!({ "refused": why.to_string() });
                Ok(Err(refused.to_string()))
            }
        }
    }

    /// The query from the retrieval model's input and the class model's (the photo pipeline
    /// gives each its own: `embed::photo::Framing::class_pixels`); `published`, if
    /// `Ok(Some)`, replaces the retrieval model's features as the query (a sample's, checked;
    /// `Err`: why they were refused).
    fn load(
        &mut self,
        pixels: &[u8],
        class_pixels: &[u8],
        scene: Option<embed::photo::Scene>,
        cut_off: bool,
        published: std::result::Result<Option<Vec<f32>>, String>,
    ) -> Result<String, JsError> {
        let (published, published_error) = match published {
            Ok(p) => (p, None),
            Err(e) => (None, Some(e)),
        };
        // The search features over the half-pixel views (`embed::views`).
        let photo = self.model.infer_photo(pixels).map_err(js_err)?;
        // The class shown (and Algorithm 1's label) is the class model's; the features are
        // the retrieval model's.
        let class = self.classifier.classify(class_pixels).map_err(js_err)?;
        let class_name = self.class_name(class.label);
        // The decision the CLI makes (`embed::ood::assess`, the familiarity model's): the
        // score, the learned detector and the photo's own statistics (a 28×28 image has none).
        let familiar = self.familiar.as_ref().ok_or_else(|| {
            js_err("the familiarity model is not loaded yet (Client::set_familiarity_model)")
        })?;
        let ood = embed::ood::assess_scene(pixels, scene.as_ref(), &self.familiarity, familiar)
            .map_err(js_err)?;
        let info = ImageInfo {
            pixels: pixels.to_vec(),
            label: class.label,
            class_name,
            probability: class.probabilities[class.label as usize],
            probabilities: class.probabilities,
            unfamiliar_score: ood.score.is_finite().then_some(ood.score),
            unfamiliar: ood.unfamiliar,
            unfamiliar_message: ood.unfamiliar.then_some(embed::ood::UNFAMILIAR_MESSAGE),
            cut_off,
            cut_off_message: cut_off.then_some(embed::cut::CUT_OFF_MESSAGE),
            features: if published.is_some() {
                "published"
            } else {
                "query model"
            },
            published_error,
        };
        // The familiarity check above reads the photo itself (the familiarity model's
        // features); only the search's features are the published ones.
        let features = published.unwrap_or(photo.search);
        self.query = Some(features.iter().map(|&v| v as f64).collect());
        self.query_f32 = Some(features);
        self.query_label = Some(class.label);
        self.pending = None;
        self.pending_blocks = None;
        serde_json::to_string(&info).map_err(js_err)
    }
}

/// A decoded photo at full resolution, fed to `embed::reduce::Reducer` strip by strip (the
/// page draws the browser's decoded bitmap into a canvas a strip at a time, so memory stays
/// bounded at 100 megapixels), then loaded with [`Client::load_photo`].
#[wasm_bindgen]
pub struct PhotoReducer {
    reducer: embed::reduce::Reducer,
}

#[wasm_bindgen]
impl PhotoReducer {
    /// A reducer for a `width×height` photo; refused past the limits ([`photo_limits`]) with
    /// the reason in the words the CLI gives.
    #[wasm_bindgen(constructor)]
    pub fn new(width: u32, height: u32) -> Result<PhotoReducer, JsError> {
        Ok(PhotoReducer {
            reducer: embed::reduce::Reducer::new(width as usize, height as usize)
                .map_err(js_err)?,
        })
    }

    /// The reduction factor `f`: strips of a multiple of `f` rows fill whole blocks.
    pub fn factor(&self) -> u32 {
        self.reducer.factor() as u32
    }

    /// The next whole rows of the photo (RGBA, e.g. `ImageData.data` of a strip), top to
    /// bottom.
    pub fn push_rows(&mut self, rgba: &[u8]) -> Result<(), JsError> {
        self.reducer.push_rows(rgba).map_err(js_err)
    }
}

/// The photo limits both clients apply (`embed::reduce`), as JSON `{max_bytes, max_pixels,
/// max_side, work_side, words}`.
#[wasm_bindgen]
pub fn photo_limits() -> String {
    use embed::reduce::*;
    serde_json::json!({
        "max_bytes": MAX_PHOTO_BYTES,
        "max_pixels": MAX_PHOTO_PIXELS,
        "max_side": MAX_PHOTO_SIDE,
        "work_side": WORK_SIDE,
        "words": limits_words(),
    })
    .to_string()
}
