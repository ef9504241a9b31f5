//! A photo file as a camera or phone writes it (JPEG or PNG, up to [`MAX_PHOTO_PIXELS`]) →
//! the pipeline's input ([`super::photo::analyse`]), with one bounded decoder for both
//! clients: the CLI reads the file, the page hands the wasm client the file's bytes, and both
//! call [`decode`], so one file gives the same features in both.
//!
//! # Bounds
//! At most [`MAX_PHOTO_BYTES`] of file, [`MAX_PHOTO_SIDE`] pixels a side and
//! [`MAX_PHOTO_PIXELS`] pixels in all (checked from the header before any pixel is decoded),
//! and at most [`MAX_DECODE_ALLOC`] bytes allocated by the decoder. Then the image is reduced
//! to at most [`WORK_SIDE`] pixels a side by whole-block averaging in integers (each output
//! pixel the mean of an `f×f` block, composited over white first, as `analyse` would), and its
//! EXIF orientation is applied, as a camera viewer shows it.
//!
//! HEIC is not read: no pure-Rust decoder exists to bound and build for wasm. The page falls
//! back on the browser's own decoder for other formats (the features may then differ from the
//! CLI's, which refuses them).

use image::{DynamicImage, ImageDecoder, ImageReader, Limits, RgbaImage};
use shared::error::{Error, Result};

use crate::photo::{analyse, Framing, MAX_IMAGE_SIDE};

/// Largest photo file read (bytes): 64 MiB.
pub const MAX_PHOTO_BYTES: usize = 64 << 20;
/// Largest width or height decoded.
pub const MAX_PHOTO_SIDE: u32 = 16_384;
/// Most pixels decoded: 100 megapixels (a 50-megapixel camera's 8,160 × 6,120 fits twice).
pub const MAX_PHOTO_PIXELS: u64 = 100_000_000;
/// Most bytes the decoder may allocate: the largest photo at 4 bytes a pixel, and some.
pub const MAX_DECODE_ALLOC: u64 = MAX_PHOTO_PIXELS * 4 + (64 << 20);
/// Longest side of the image the pipeline reads; a larger photo is averaged down to it.
pub const WORK_SIDE: usize = 1_024;

const _: () = assert!(WORK_SIDE <= MAX_IMAGE_SIDE);

/// The limits in words, for `--help` and the page.
pub fn limits_words() -> String {
    format!(
        "JPEG or PNG, at most {} MiB and {} megapixels ({} pixels a side)",
        MAX_PHOTO_BYTES >> 20,
        MAX_PHOTO_PIXELS / 1_000_000,
        MAX_PHOTO_SIDE
    )
}

fn bad(reason: String) -> Error {
    Error::InvalidParameter {
        name: "photo",
        reason,
    }
}

/// Decode a JPEG or PNG file's bytes within the bounds above, reduce it to at most
/// [`WORK_SIDE`] a side, turn it as its EXIF orientation says, and frame it
/// ([`analyse`]). A typed error for anything else: too large, not JPEG or PNG, damaged.
pub fn decode(bytes: &[u8]) -> Result<Framing> {
    let (rgba, w, h) = decode_rgba(bytes)?;
    analyse(&rgba, w, h)
}

/// [`decode`] up to the pipeline: the reduced, turned RGBA image, its width and height.
pub fn decode_rgba(bytes: &[u8]) -> Result<(Vec<u8>, usize, usize)> {
    if bytes.len() > MAX_PHOTO_BYTES {
        return Err(bad(format!(
            "the file is larger than {} MiB",
            MAX_PHOTO_BYTES >> 20
        )));
    }
    let reader = ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| bad(e.to_string()))?;
    match reader.format() {
        Some(image::ImageFormat::Jpeg | image::ImageFormat::Png) => {}
        _ => return Err(bad("not a JPEG or PNG image".into())),
    }
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_PHOTO_SIDE);
    limits.max_image_height = Some(MAX_PHOTO_SIDE);
    limits.max_alloc = Some(MAX_DECODE_ALLOC);
    let mut reader = reader;
    reader.limits(limits);
    let mut decoder = reader
        .into_decoder()
        .map_err(|e| bad(format!("cannot be read: {e}")))?;
    let (w, h) = decoder.dimensions();
    if w as u64 * h as u64 > MAX_PHOTO_PIXELS {
        return Err(bad(format!(
            "{w}×{h} is more than {} megapixels",
            MAX_PHOTO_PIXELS / 1_000_000
        )));
    }
    let orientation = decoder
        .orientation()
        .unwrap_or(image::metadata::Orientation::NoTransforms);
    let img =
        DynamicImage::from_decoder(decoder).map_err(|e| bad(format!("cannot be read: {e}")))?;
    let small = reduce(&img)?;
    let mut turned = DynamicImage::ImageRgba8(small);
    turned.apply_orientation(orientation);
    let out = turned.into_rgba8();
    let (w, h) = out.dimensions();
    Ok((out.into_raw(), w as usize, h as usize))
}

/// The image averaged down by the least whole factor `f` that brings its longer side to at
/// most [`WORK_SIDE`] (`f = 1`: unchanged): each output pixel is the rounded mean of its `f×f`
/// block (the last row and column of blocks may be smaller), composited over white first.
/// Integer arithmetic only: every platform gets the same bytes.
fn reduce(img: &DynamicImage) -> Result<RgbaImage> {
    let (w, h) = (img.width() as usize, img.height() as usize);
    if w == 0 || h == 0 {
        return Err(bad("the image is empty".into()));
    }
    let f = w.max(h).div_ceil(WORK_SIDE);
    // A pixel composited over white, from any layout the decoders give.
    let px: Box<dyn Fn(usize, usize) -> [u32; 3] + '_> = match img {
        DynamicImage::ImageRgb8(b) => {
            let raw = b.as_raw();
            Box::new(move |x, y| {
                let i = 3 * (y * w + x);
                [raw[i] as u32, raw[i + 1] as u32, raw[i + 2] as u32]
            })
        }
        DynamicImage::ImageLuma8(b) => {
            let raw = b.as_raw();
            Box::new(move |x, y| {
                let v = raw[y * w + x] as u32;
                [v, v, v]
            })
        }
        DynamicImage::ImageRgba8(b) => {
            let raw = b.as_raw();
            Box::new(move |x, y| {
                let i = 4 * (y * w + x);
                over_white([raw[i], raw[i + 1], raw[i + 2]], raw[i + 3])
            })
        }
        other => {
            // 16-bit and grey-with-alpha PNGs: to 8-bit RGBA first (bounded by the limits).
            let rgba = other.to_rgba8();
            let raw = rgba.into_raw();
            Box::new(move |x, y| {
                let i = 4 * (y * w + x);
                over_white([raw[i], raw[i + 1], raw[i + 2]], raw[i + 3])
            })
        }
    };
    let (ow, oh) = (w.div_ceil(f), h.div_ceil(f));
    let mut out = vec![255u8; ow * oh * 4];
    for oy in 0..oh {
        let ys = oy * f..((oy + 1) * f).min(h);
        for ox in 0..ow {
            let xs = ox * f..((ox + 1) * f).min(w);
            let n = (ys.len() * xs.len()) as u32;
            let mut sum = [0u32; 3];
            for y in ys.clone() {
                for x in xs.clone() {
                    let p = px(x, y);
                    sum[0] += p[0];
                    sum[1] += p[1];
                    sum[2] += p[2];
                }
            }
            let o = 4 * (oy * ow + ox);
            for c in 0..3 {
                out[o + c] = ((sum[c] + n / 2) / n) as u8;
            }
        }
    }
    RgbaImage::from_raw(ow as u32, oh as u32, out).ok_or_else(|| bad("reduction failed".into()))
}

/// `c·a + 255·(255 − a)`, rounded, over 255: a pixel composited over white.
fn over_white(c: [u8; 3], a: u8) -> [u32; 3] {
    let a = a as u32;
    c.map(|v| (v as u32 * a + 255 * (255 - a) + 127) / 255)
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{ImageEncoder, Rgb, RgbImage};

    /// A dark garment-like blob on a light background, `w×h`.
    fn photo(w: u32, h: u32) -> RgbImage {
        RgbImage::from_fn(w, h, |x, y| {
            let (cx, cy) = (w as f64 / 2.0, h as f64 / 2.0);
            let (dx, dy) = (
                (x as f64 - cx) / (0.3 * w as f64),
                (y as f64 - cy) / (0.4 * h as f64),
            );
            if dx * dx + dy * dy < 1.0 {
                Rgb([40, 30, 90])
            } else {
                Rgb([235, 232, 228])
            }
        })
    }

    fn jpeg(img: &RgbImage) -> Vec<u8> {
        let mut out = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 85)
            .write_image(
                img.as_raw(),
                img.width(),
                img.height(),
                image::ExtendedColorType::Rgb8,
            )
            .unwrap();
        out
    }

    /// A 6000×4000 camera JPEG (24 megapixels, the size the CLI used to refuse) is read and
    /// framed; so is a 50-megapixel one (8,160 × 6,120).
    #[test]
    fn camera_sized_jpegs_are_read() {
        for (w, h) in [(6000, 4000), (8160, 6120)] {
            let file = jpeg(&photo(w, h));
            let (rgba, rw, rh) = decode_rgba(&file).expect("a camera photo");
            assert!(
                rw.max(rh) <= WORK_SIDE && rw.max(rh) > WORK_SIDE / 2,
                "{rw}×{rh}"
            );
            let f = analyse(&rgba, rw, rh).expect("framed");
            assert_eq!(f.pixels.len(), 28 * 28);
            assert!(f.light_background);
        }
    }

    #[test]
    fn files_past_the_bounds_are_refused_with_the_reason() {
        // More pixels than allowed, refused from the header alone (a grey PNG of one level).
        let (w, h) = (12_000u32, 9_000u32);
        let grey = vec![200u8; (w * h) as usize];
        let mut png = Vec::new();
        image::codecs::png::PngEncoder::new_with_quality(
            &mut png,
            image::codecs::png::CompressionType::Default,
            image::codecs::png::FilterType::NoFilter,
        )
        .write_image(&grey, w, h, image::ExtendedColorType::L8)
        .unwrap();
        let e = decode(&png).unwrap_err().to_string();
        assert!(e.contains("megapixels"), "{e}");
        // A damaged PNG (its pixel data cut short).
        let mut cut = Vec::new();
        image::codecs::png::PngEncoder::new(&mut cut)
            .write_image(
                photo(64, 48).as_raw(),
                64,
                48,
                image::ExtendedColorType::Rgb8,
            )
            .unwrap();
        cut.truncate(cut.len() / 2);
        assert!(decode(&cut).is_err());
        assert!(decode(b"GIF89a not a photo").is_err());
        assert!(decode(&vec![0u8; MAX_PHOTO_BYTES + 1])
            .unwrap_err()
            .to_string()
            .contains("MiB"));
    }

    /// Reduction averages whole blocks: a photo already within the working side is unchanged,
    /// and one twice as large gives the mean of each 2×2 block.
    #[test]
    fn reduction_averages_whole_blocks() {
        let small = photo(300, 200);
        let r = reduce(&DynamicImage::ImageRgb8(small.clone())).unwrap();
        assert_eq!(r.dimensions(), (300, 200));
        assert!(r.pixels().zip(small.pixels()).all(|(a, b)| a.0[..3] == b.0));
        let big = RgbImage::from_fn(2 * WORK_SIDE as u32, 4, |x, _| {
            Rgb([(x % 2) as u8 * 100, 0, 0])
        });
        let r = reduce(&DynamicImage::ImageRgb8(big)).unwrap();
        assert_eq!(r.dimensions(), (WORK_SIDE as u32, 2));
        assert!(r.pixels().all(|p| p.0 == [50, 0, 0, 255]));
    }
}
