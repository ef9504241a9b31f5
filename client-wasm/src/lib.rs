//! The browser client: the on-device model (and, with the browser-client issue, the
//! PrivateMail privatization) compiled to WebAssembly with wasm-bindgen.

use shared::model::Model;
use wasm_bindgen::prelude::*;

/// The on-device model, loaded from its weights file.
#[wasm_bindgen]
pub struct OnDeviceModel {
    model: Model,
}

#[wasm_bindgen]
impl OnDeviceModel {
    /// Load weights (the bytes of `model.bin`); a clear error for anything else.
    #[wasm_bindgen(constructor)]
    pub fn new(weights: &[u8]) -> Result<OnDeviceModel, JsError> {
        Ok(OnDeviceModel {
            model: Model::from_bytes(weights).map_err(|e| JsError::new(&e.to_string()))?,
        })
    }

    /// Unit-norm features of a 28×28 greyscale image (784 bytes, row-major).
    pub fn features(&self, pixels: &[u8]) -> Result<Vec<f32>, JsError> {
        Ok(self.infer(pixels)?.features)
    }

    /// The predicted class of the image.
    pub fn label(&self, pixels: &[u8]) -> Result<u32, JsError> {
        Ok(self.infer(pixels)?.label)
    }
}

impl OnDeviceModel {
    fn infer(&self, pixels: &[u8]) -> Result<shared::model::Inference, JsError> {
        self.model
            .infer(pixels)
            .map_err(|e| JsError::new(&e.to_string()))
    }
}
