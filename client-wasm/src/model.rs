//! The on-device models: [`OnDeviceModel`] on its own (for tests and benchmarks), and loading the
//! user's photo into the [`Client`] (preprocess, run the retrieval model and the class model,
//! keep the features and the class). Nothing here
//! sends anything: the features and the predicted label stay in the `Client`.

use shared::embed::model::Model;
use shared::embed::photo::analyse;
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

    /// Unit-norm features of a 28×28 greyscale image (784 bytes, row-major).
    pub fn features(&self, pixels: &[u8]) -> Result<Vec<f32>, JsError> {
        Ok(self.model.infer(pixels).map_err(js_err)?.features)
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
    /// above the calibrated threshold (`shared::embed::ood`): the photo does not look like
    /// clothing. `null` for an input with almost no ink (an infinite score).
    unfamiliar_score: Option<f32>,
    unfamiliar: bool,
    /// The sentence to show when `unfamiliar` (`shared::embed::ood::UNFAMILIAR_MESSAGE`).
    unfamiliar_message: Option<&'static str>,
}

#[wasm_bindgen]
impl Client {
    /// Load a decoded image (RGBA bytes, e.g. `ImageData.data`) as the query: preprocess
    /// (`shared::embed::photo::analyse`, as `from_rgba`), run the models, keep the features.
    /// Returns JSON `{pixels, label, class_name, probability, probabilities,
    /// unfamiliar_score, unfamiliar, unfamiliar_message}`.
    pub fn load_image(&mut self, rgba: &[u8], width: u32, height: u32) -> Result<String, JsError> {
        let framing = analyse(rgba, width as usize, height as usize).map_err(js_err)?;
        self.load(&framing.pixels, &framing.class_pixels)
    }

    /// As [`Client::load_image`] for a 28×28 greyscale image (784 bytes).
    pub fn load_pixels(&mut self, pixels: &[u8]) -> Result<String, JsError> {
        self.load(pixels, pixels)
    }
}

impl Client {
    /// The query from the retrieval model's input and the class model's (the photo pipeline
    /// gives each its own: `shared::embed::photo::Framing::class_pixels`).
    fn load(&mut self, pixels: &[u8], class_pixels: &[u8]) -> Result<String, JsError> {
        // One pass over the upright image gives the features and the layer means.
        let (inf, layers) = self.model.infer_with_layer_means(pixels).map_err(js_err)?;
        // The class shown (and Algorithm 1's label) is the class model's; the features are
        // the retrieval model's.
        let class = self.classifier.classify(class_pixels).map_err(js_err)?;
        let class_name = self.class_name(class.label);
        let ood =
            shared::embed::ood::assess_input(pixels, &inf.features, &layers, &self.familiarity)
                .map_err(js_err)?;
        let info = ImageInfo {
            pixels: pixels.to_vec(),
            label: class.label,
            class_name,
            probability: class.probabilities[class.label as usize],
            probabilities: class.probabilities,
            unfamiliar_score: ood.score.is_finite().then_some(ood.score),
            unfamiliar: ood.unfamiliar,
            unfamiliar_message: ood
                .unfamiliar
                .then_some(shared::embed::ood::UNFAMILIAR_MESSAGE),
        };
        self.query = Some(inf.features.iter().map(|&v| v as f64).collect());
        self.query_f32 = Some(inf.features);
        self.query_label = Some(class.label);
        self.pending = None;
        self.pending_blocks = None;
        serde_json::to_string(&info).map_err(js_err)
    }
}
