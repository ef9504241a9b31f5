//! The photo preprocessing before `embed::photo` (commit afd448e's `from_rgba`), kept
//! here only so `eval --photos` can report the before/after figures on the same photos.

use embed::model::{PIXELS, SIDE};
use shared::error::{Error, Result};

/// Any decoded image (RGBA, row-major, 4 bytes a pixel, as a browser's `ImageData`) → the
/// model's 28×28 input, in integer arithmetic so every platform gets the same bytes:
/// 1. grey `l = (299·R + 587·G + 114·B + 500) / 1000`, composited over white by alpha;
/// 2. if the border is light (mean > 127: a photo on a light background), invert, because
///    Fashion-MNIST shows a light object on a dark background;
/// 3. fit the longer side into 28 pixels keeping the aspect ratio, each target pixel the exact
///    mean of the source pixels that fall in it, centred on a dark (0) canvas.
///
/// A 28×28 image with a dark border comes back unchanged.
pub(super) fn from_rgba(rgba: &[u8], width: usize, height: usize) -> Result<Vec<u8>> {
    if width == 0
        || height == 0
        || width > embed::photo::MAX_IMAGE_SIDE
        || height > embed::photo::MAX_IMAGE_SIDE
    {
        return Err(Error::InvalidParameter {
            name: "image size",
            reason: format!(
                "{width}×{height}: each side must be in 1..={}",
                embed::photo::MAX_IMAGE_SIDE
            ),
        });
    }
    if rgba.len() != width * height * 4 {
        return Err(Error::DimensionMismatch {
            what: "RGBA bytes",
            expected: width * height * 4,
            got: rgba.len(),
        });
    }
    let grey: Vec<u32> = rgba
        .chunks_exact(4)
        .map(|p| {
            let l = (299 * p[0] as u32 + 587 * p[1] as u32 + 114 * p[2] as u32 + 500) / 1000;
            let a = p[3] as u32;
            (l * a + 255 * (255 - a) + 127) / 255
        })
        .collect();
    let border: Vec<u32> = (0..width)
        .flat_map(|x| [x, (height - 1) * width + x])
        .chain((0..height).flat_map(|y| [y * width, y * width + width - 1]))
        .map(|i| grey[i])
        .collect();
    let invert = border.iter().sum::<u32>() as u64 > 127 * border.len() as u64;
    let long = width.max(height);
    let (tw, th) = (
        (width * SIDE).div_ceil(long).max(1),
        (height * SIDE).div_ceil(long).max(1),
    );
    let (mut sum, mut count) = (vec![0u64; tw * th], vec![0u64; tw * th]);
    for y in 0..height {
        let ty = y * th / height;
        for x in 0..width {
            let tx = x * tw / width;
            let v = if invert {
                255 - grey[y * width + x]
            } else {
                grey[y * width + x]
            };
            sum[ty * tw + tx] += v as u64;
            count[ty * tw + tx] += 1;
        }
    }
    let (ox, oy) = ((SIDE - tw) / 2, (SIDE - th) / 2);
    let mut out = vec![0u8; PIXELS];
    for ty in 0..th {
        for tx in 0..tw {
            let c = count[ty * tw + tx].max(1);
            out[(oy + ty) * SIDE + ox + tx] = ((sum[ty * tw + tx] + c / 2) / c) as u8;
        }
    }
    Ok(out)
}
