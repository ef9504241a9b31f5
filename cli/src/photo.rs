//! A photo file → the model's 28×28 inputs, through the bounded decoder
//! (`embed::photo_file`), the reducer the page's wasm client uses too (`embed::reduce`), then
//! `embed::photo::analyse`: a PNG gives the page's inputs bit for bit, a JPEG up to the two
//! decoders' rounding.

use std::io::Read;
use std::path::Path;

use embed::photo_file::MAX_PHOTO_BYTES;

use crate::error::{CliError, Result};

/// Read a JPEG or PNG within `embed::photo_file`'s bounds (file bytes, pixels) and reduce it
/// to the models' 28×28 grey inputs (the retrieval model's `pixels`, the class model's
/// `class_pixels`). An image with nothing to see (`embed::ood::look`) is
/// [`CliError::NothingToSee`].
pub fn load(path: &Path) -> Result<embed::photo::Framing> {
    let bad = |reason: String| CliError::BadPhoto {
        path: path.display().to_string(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    let mut bytes = Vec::new();
    // One byte past the limit is enough to know the file is too large.
    file.take(MAX_PHOTO_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(e.to_string()))?;
    let (rgba, w, h) = embed::photo_file::decode_rgba(&bytes).map_err(|e| bad(e.to_string()))?;
    // An image with nothing to see (too small, one colour, noise) is
    // refused here, before any model reads it: never classified, never searched.
    match embed::ood::look(&rgba, w, h).map_err(|e| bad(e.to_string()))? {
        Ok(framing) => Ok(framing),
        Err(why) => Err(CliError::NothingToSee {
            path: path.display().to_string(),
            reason: why.to_string(),
        }),
    }
}
