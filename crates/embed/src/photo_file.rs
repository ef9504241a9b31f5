//! A photo file as a camera or phone writes it (JPEG or PNG, up to [`MAX_PHOTO_PIXELS`]) →
//! the pipeline's input ([`super::photo::analyse`]): the CLI's bounded decoder. The page keeps
//! this decoder out of its wasm (it would more than double the first load) and decodes with
//! the browser's; from the decoded pixels on, both run the same code: the image turned as its
//! EXIF orientation says, its rows through [`crate::reduce::Reducer`], then the pipeline. A PNG
//! gives the same pixels, hence the same features, in both; a JPEG may differ by the decoders'
//! rounding (libjpeg-turbo in Chromium, zune-jpeg here; measured by the e2e `photo_decode`).
//!
//! # Bounds
//! At most [`MAX_PHOTO_BYTES`] of file, [`MAX_PHOTO_SIDE`] pixels a side and
//! [`MAX_PHOTO_PIXELS`] pixels in all (checked from the header before any pixel is decoded,
//! [`crate::reduce::check_size`]), and at most [`MAX_DECODE_ALLOC`] bytes for the decoded image
//! (and, for a progressive JPEG, its coefficients), checked from the header too
//! ([`decode_bytes`]): an 8-bit photo of the most pixels fits; a 16-bit or progressive one of
//! many megapixels is refused with the reason. The decoded image is read into the reducer a
//! row at a time, never converted whole.
//!
//! A 16-bit PNG's samples are read by their high byte, as Chromium draws them (511 → 1, not
//! the rounded 2), so the two clients give the same pixels.
//!
//! HEIC is not read ([`HEIC_NOT_READ`] says why; the CLI refuses such a file in those words).
//! The page reads whatever the browser decodes (HEIC only where the browser does, as Safari),
//! with the same limits and reduction.

use image::metadata::Orientation;
use image::{DynamicImage, ImageDecoder, ImageReader, Limits};
use shared::error::{Error, Result};

use crate::photo::{analyse, Framing};
use crate::reduce::{check_size, Reducer};
pub use crate::reduce::{MAX_PHOTO_BYTES, MAX_PHOTO_PIXELS, MAX_PHOTO_SIDE, WORK_SIDE};

/// Most bytes the decoder may allocate: the largest photo at 4 bytes a pixel, and some.
pub const MAX_DECODE_ALLOC: u64 = MAX_PHOTO_PIXELS * 4 + (64 << 20);

/// Why a HEIC file is refused, for `--help`, the refusal and the docs. The pure-Rust HEIC
/// decoders (heic-rs, heifer) are young 0.x crates of one author each with no record yet on
/// hostile files, and an HEVC decoder is a large attack surface: too new to trust with the
/// one input an attacker may craft. The C library (libheif with libde265) is not pure Rust and
/// would not build into the page. Revisit when one of them has matured.
pub const HEIC_NOT_READ: &str = "HEIC (iPhone) photos are not read: no mature pure-Rust HEIC decoder exists yet; share or export the photo as JPEG";

/// A HEIC/HEIF file: an ISO-BMFF `ftyp` box with one of HEIF's image brands.
fn is_heic(bytes: &[u8]) -> bool {
    bytes.len() >= 12
        && &bytes[4..8] == b"ftyp"
        && matches!(
            &bytes[8..12],
            b"heic" | b"heix" | b"hevc" | b"hevx" | b"heim" | b"heis" | b"mif1" | b"msf1"
        )
}

/// The limits in words, for `--help`.
pub fn limits_words() -> String {
    format!("JPEG or PNG, {}", crate::reduce::limits_words())
}

fn bad(reason: String) -> Error {
    Error::InvalidParameter {
        name: "photo",
        reason,
    }
}

/// Decode a JPEG or PNG file's bytes within the bounds above, turn it as its EXIF orientation
/// says, reduce it to at most [`WORK_SIDE`] a side, and frame it ([`analyse`]). A typed error
/// for anything else: too large, not JPEG or PNG, damaged.
pub fn decode(bytes: &[u8]) -> Result<Framing> {
    let (rgba, w, h) = decode_rgba(bytes)?;
    analyse(&rgba, w, h)
}

/// [`decode`] up to the pipeline: the turned, reduced RGBA image, its width and height.
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
        _ if is_heic(bytes) => return Err(bad(HEIC_NOT_READ.into())),
        _ => return Err(bad("not a JPEG or PNG image".into())),
    }
    // The sides and pixels are checked by `check_size` below, from the header, in the words
    // both clients give (the decoder's own side limit would answer "Image size exceeds
    // limit" first); the decoder keeps the allocation bound.
    let mut limits = Limits::no_limits();
    limits.max_alloc = Some(MAX_DECODE_ALLOC);
    let mut reader = reader;
    reader.limits(limits);
    let mut decoder = reader
        .into_decoder()
        .map_err(|e| bad(format!("cannot be read: {e}")))?;
    let (w, h) = decoder.dimensions();
    check_size(w as u64, h as u64)?;
    // `from_decoder` does not hold the decoder to `max_alloc`: the bound is checked here, from
    // the header, before the image is allocated.
    let need = decode_bytes(decoder.total_bytes(), w as u64 * h as u64, bytes);
    if need > MAX_DECODE_ALLOC {
        return Err(bad(format!(
            "decoding it would take about {} MiB, more than the {} MiB this client allows \
             (a 16-bit or progressive photo of many megapixels): save it as an ordinary JPEG",
            need >> 20,
            MAX_DECODE_ALLOC >> 20
        )));
    }
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let img =
        DynamicImage::from_decoder(decoder).map_err(|e| bad(format!("cannot be read: {e}")))?;
    reduce_turned(&img, orientation)
}

/// The bytes decoding a photo takes: its image (`image_bytes`, the decoder's `total_bytes`)
/// and, for a progressive JPEG, the coefficients the decoder keeps until the last scan (two
/// bytes a coefficient, up to three components at full resolution: 6 bytes a pixel; a
/// 100-megapixel one measured 884 MB in all).
fn decode_bytes(image_bytes: u64, pixels: u64, file: &[u8]) -> u64 {
    let coefficients = if progressive_jpeg(file) {
        6 * pixels
    } else {
        0
    };
    image_bytes.saturating_add(coefficients)
}

/// Whether `file` is a progressive JPEG: its first start-of-frame marker is SOF2, SOF6, SOF10
/// or SOF14 (the progressive ones). Reads only the markers' lengths; anything malformed is
/// "not progressive" (the decoder then refuses it).
fn progressive_jpeg(file: &[u8]) -> bool {
    if !file.starts_with(&[0xFF, 0xD8]) {
        return false;
    }
    let mut at = 2;
    while at + 4 <= file.len() {
        if file[at] != 0xFF {
            return false;
        }
        let marker = file[at + 1];
        match marker {
            // Fill bytes before a marker.
            0xFF => at += 1,
            0xC2 | 0xC6 | 0xCA | 0xCE => return true,
            // Any other start of frame, or the start of the scan: not progressive.
            0xC0 | 0xC1 | 0xC3 | 0xC5 | 0xC7 | 0xC9 | 0xCB | 0xCD | 0xCF | 0xDA => return false,
            _ => {
                let len = u16::from_be_bytes([file[at + 2], file[at + 3]]) as usize;
                at += 2 + len;
            }
        }
    }
    false
}

/// One pixel of `img` as 8-bit RGBA, as the browser draws it: grey replicated, no alpha
/// opaque, a 16-bit sample by its high byte.
fn rgba_at(img: &DynamicImage, x: u32, y: u32) -> [u8; 4] {
    let hi = |v: u16| (v >> 8) as u8;
    match img {
        DynamicImage::ImageRgb8(b) => {
            let p = b.get_pixel(x, y).0;
            [p[0], p[1], p[2], 255]
        }
        DynamicImage::ImageRgba8(b) => b.get_pixel(x, y).0,
        DynamicImage::ImageLuma8(b) => {
            let l = b.get_pixel(x, y).0[0];
            [l, l, l, 255]
        }
        DynamicImage::ImageLumaA8(b) => {
            let [l, a] = b.get_pixel(x, y).0;
            [l, l, l, a]
        }
        DynamicImage::ImageRgb16(b) => {
            let p = b.get_pixel(x, y).0;
            [hi(p[0]), hi(p[1]), hi(p[2]), 255]
        }
        DynamicImage::ImageRgba16(b) => b.get_pixel(x, y).0.map(hi),
        DynamicImage::ImageLuma16(b) => {
            let l = hi(b.get_pixel(x, y).0[0]);
            [l, l, l, 255]
        }
        DynamicImage::ImageLumaA16(b) => {
            let [l, a] = b.get_pixel(x, y).0.map(hi);
            [l, l, l, a]
        }
        // Not a layout a JPEG or PNG decodes to.
        other => image::GenericImageView::get_pixel(other, x, y).0,
    }
}

/// The image as it is shown (turned by `orientation`), row by row through the [`Reducer`]:
/// the page feeds it the browser's rows of the turned image, so both reduce the same pixels.
fn reduce_turned(img: &DynamicImage, orientation: Orientation) -> Result<(Vec<u8>, usize, usize)> {
    let (w, h) = (img.width() as usize, img.height() as usize);
    let turned = turned_to_source(orientation, w, h);
    let (tw, th) = turned.size;
    let mut reducer = Reducer::new(tw, th)?;
    let mut row = vec![255u8; 4 * tw];
    for ty in 0..th {
        for tx in 0..tw {
            let (x, y) = (turned.map)(tx, ty);
            row[4 * tx..4 * tx + 4].copy_from_slice(&rgba_at(img, x as u32, y as u32));
        }
        reducer.push_rows(&row)?;
    }
    reducer.finish()
}

/// For a pixel of the turned image, the source pixel it shows.
type SourceOf = Box<dyn Fn(usize, usize) -> (usize, usize)>;

/// The turned image's size and, for a pixel of it, the source pixel it shows.
struct Turned {
    size: (usize, usize),
    map: SourceOf,
}

/// EXIF orientation as [`DynamicImage::apply_orientation`] applies it (tested against it).
fn turned_to_source(o: Orientation, w: usize, h: usize) -> Turned {
    let (size, map): ((usize, usize), SourceOf) = match o {
        Orientation::NoTransforms => ((w, h), Box::new(|x, y| (x, y))),
        Orientation::Rotate90 => ((h, w), Box::new(move |x, y| (y, h - 1 - x))),
        Orientation::Rotate180 => ((w, h), Box::new(move |x, y| (w - 1 - x, h - 1 - y))),
        Orientation::Rotate270 => ((h, w), Box::new(move |x, y| (w - 1 - y, x))),
        Orientation::FlipHorizontal => ((w, h), Box::new(move |x, y| (w - 1 - x, y))),
        Orientation::FlipVertical => ((w, h), Box::new(move |x, y| (x, h - 1 - y))),
        Orientation::Rotate90FlipH => ((h, w), Box::new(|x, y| (y, x))),
        Orientation::Rotate270FlipH => ((h, w), Box::new(move |x, y| (w - 1 - y, h - 1 - x))),
    };
    Turned { size, map }
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
        // A HEIC file's start (an iPhone's `ftyp` box): refused with the reason.
        let heic = b"\0\0\0\x18ftypheic\0\0\0\0mif1heic";
        assert!(decode(heic)
            .unwrap_err()
            .to_string()
            .contains(HEIC_NOT_READ));
        assert!(decode(&vec![0u8; MAX_PHOTO_BYTES + 1])
            .unwrap_err()
            .to_string()
            .contains("MiB"));
    }

    /// PNG chunk CRC (CRC-32/ISO-HDLC), bit by bit: for a header the test rewrites.
    fn crc32(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    (c >> 1) ^ 0xEDB8_8320
                } else {
                    c >> 1
                };
            }
        }
        !c
    }

    fn png16(img: image::ImageBuffer<image::Rgba<u16>, Vec<u16>>) -> Vec<u8> {
        let mut out = std::io::Cursor::new(Vec::new());
        DynamicImage::ImageRgba16(img)
            .write_to(&mut out, image::ImageFormat::Png)
            .unwrap();
        out.into_inner()
    }

    /// A 16-bit PNG's samples are read by their high byte, as Chromium draws them (the
    /// page's pixels): 511 → 1, 1,000 → 3, 255 → 0 (rounding gave 2, 4 and 1).
    #[test]
    fn a_16_bit_png_is_read_as_the_browser_draws_it() {
        let px = [511u16, 1000, 255, 65535, 65280, 256, 0, 65535];
        let img = image::ImageBuffer::from_raw(2, 1, px.to_vec()).unwrap();
        let (rgba, w, h) = decode_rgba(&png16(img)).unwrap();
        assert_eq!((w, h), (2, 1));
        assert_eq!(rgba, px.map(|v| (v >> 8) as u8).to_vec());
    }

    /// The decoded image's bytes are bounded from the header, before it is allocated: a 16-bit
    /// RGBA PNG declaring 10,000 × 10,000 (800 MB decoded) is refused with the reason, and a
    /// progressive JPEG's coefficients count (6 bytes a pixel).
    #[test]
    fn the_decoded_size_is_bounded_before_decoding() {
        let mut png = png16(image::ImageBuffer::from_raw(1, 1, vec![9u16; 4]).unwrap());
        // IHDR: after the 8-byte signature, length (4) and type (4); width and height, then
        // its CRC over type and data.
        png[16..20].copy_from_slice(&10_000u32.to_be_bytes());
        png[20..24].copy_from_slice(&10_000u32.to_be_bytes());
        let crc = crc32(&png[12..29]);
        png[29..33].copy_from_slice(&crc.to_be_bytes());
        let e = decode(&png).unwrap_err().to_string();
        assert!(e.contains("MiB") && e.contains("16-bit"), "{e}");
        // Progressive: a start-of-frame SOF2 after an APP0 segment; baseline: SOF0.
        let jpeg = |sof: u8| [0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 0, 0, 0xFF, sof, 0, 8].to_vec();
        assert!(progressive_jpeg(&jpeg(0xC2)));
        assert!(!progressive_jpeg(&jpeg(0xC0)));
        assert!(!progressive_jpeg(&super::tests::jpeg(&photo(16, 16))));
        let pixels = 50_000_000;
        assert_eq!(decode_bytes(3 * pixels, pixels, &jpeg(0xC0)), 3 * pixels);
        assert_eq!(decode_bytes(3 * pixels, pixels, &jpeg(0xC2)), 9 * pixels);
    }

    /// The turned image's rows are those `apply_orientation` gives, for each EXIF
    /// orientation, so blocks fall where the page's (the browser turns first) fall: small
    /// (unreduced) and past the working side (partial last blocks, f = 3).
    #[test]
    fn rows_are_turned_as_exif_says_before_reducing() {
        use Orientation::*;
        for (w, h) in [(37u32, 23u32), (2_100, 7)] {
            let img = DynamicImage::ImageRgb8(RgbImage::from_fn(w, h, |x, y| {
                Rgb([(x * 7 + y * 13) as u8, (x ^ y) as u8, (x * y) as u8])
            }));
            for o in [
                NoTransforms,
                Rotate90,
                Rotate180,
                Rotate270,
                FlipHorizontal,
                FlipVertical,
                Rotate90FlipH,
                Rotate270FlipH,
            ] {
                let mut turned = img.clone();
                turned.apply_orientation(o);
                let t = turned.to_rgba8();
                let want =
                    crate::reduce::reduce(t.as_raw(), t.width() as usize, t.height() as usize)
                        .unwrap();
                assert_eq!(reduce_turned(&img, o).unwrap(), want, "{w}×{h} {o:?}");
            }
        }
    }
}
