//! A photo file → the model's 28×28 inputs, with the page's preprocessing
//! (`embed::photo::analyse`, as `from_rgba`), so one photo gives the same inputs
//! everywhere.

use std::path::Path;

use crate::error::{CliError, Result};

/// Largest photo file read.
const MAX_FILE: u64 = 64 << 20;
/// Largest width or height decoded.
const MAX_SIDE: u32 = 16_384;

/// Decode a PNG or JPEG of any size and reduce it to the models' 28×28 grey inputs (the
/// retrieval model's `pixels`, the class model's `class_pixels`).
pub fn load(path: &Path) -> Result<embed::photo::Framing> {
    let bad = |reason: String| CliError::BadPhoto {
        path: path.display().to_string(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    if meta.len() > MAX_FILE {
        return Err(bad(format!("larger than {} MiB", MAX_FILE >> 20)));
    }
    let mut reader = image::ImageReader::open(path)
        .map_err(|e| bad(e.to_string()))?
        .with_guessed_format()
        .map_err(|e| bad(e.to_string()))?;
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    reader.limits(limits);
    let img = reader
        .decode()
        .map_err(|e| bad(format!("not a PNG or JPEG image this tool can read: {e}")))?;
    let rgba = img.to_rgba8();
    let (w, h) = rgba.dimensions();
    embed::photo::analyse(rgba.as_raw(), w as usize, h as usize).map_err(|e| bad(e.to_string()))
}
