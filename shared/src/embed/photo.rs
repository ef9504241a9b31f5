//! A photo → the model's 28×28 input, framed the way Fashion-MNIST frames its products.
//!
//! Why: the model and the gallery's features come from Fashion-MNIST, whose images were made
//! by trimming the product photo to its bounding box, resizing the longest side to 28 pixels,
//! centring the box and negating the intensities, on a background of exactly 0. A photo that
//! differs only by its background level (240 instead of 255), its framing (shifted, smaller)
//! or sensor noise must reach the model as (nearly) the same 28×28 input, or the exact
//! nearest neighbours change. So this module repeats the dataset's own framing on any photo:
//!
//! 1. composite over white by alpha; grey `l = (299·R + 587·G + 114·B + 500) / 1000`;
//! 2. the **background** is the per-channel median of a border ring, taken again over the
//!    values within 24 levels of it (so an object touching the edge does not pull it); a light
//!    background (grey > 127) means a dark object, which is inverted, as in the dataset (light
//!    object on dark);
//! 3. the **noise level** is the border's upper quartile of differences towards the object
//!    (0.674σ; 0 on a clean image; object pixels on the border left out);
//! 4. the **object** is every pixel darker (light background) or lighter (dark background)
//!    than the background in some channel by more than [`MASK_FLOOR`] (scaled to the
//!    background's range) and 8 × the noise level, so neither noise nor JPEG ringing widens
//!    the box — in a noisy photo larger than 28 pixels, by more than the floor and 3σ itself
//!    and by more than 8 × the noise level of a mean over its k×k window (k photo pixels to a
//!    model pixel), so noise neither widens the box nor shrinks it past the object's faint
//!    edges; at the dataset's own resolution (≤ 28 pixels) a one-pixel fringe of faint
//!    pixels joins it; the box is cropped (the whole image if nothing differs);
//! 5. the box is resampled by exact area averaging so its longest side is 28 pixels, keeping
//!    its aspect ratio, and placed centred by its box on a 0 canvas (the dataset's rounding:
//!    an odd margin puts the extra pixel before the box);
//! 6. each pixel becomes its difference from the background, scaled so the background's full
//!    range (its level for a dark object, 255 − its level for a light one) maps to 255 — an
//!    exposure change scales object and background together, so this removes it — after a
//!    soft threshold of 3 × the noise left after averaging.
//!
//! All integer arithmetic, so native, wasm and training get the same bytes. On a Fashion-MNIST
//! image (28×28, 0 background, box longest side 28, box-centred) every step is the identity;
//! the evaluation (`eval --photos`) measures how many dataset images come back unchanged.

use crate::embed::model::{PIXELS, SIDE};
use crate::error::{Error, Result};

/// Largest side of an image accepted by [`to_model_input`].
pub const MAX_IMAGE_SIDE: usize = 4_096;

/// Smallest colour difference from the background (for a full range of 255) that counts as the
/// object when finding its box. Measured with `eval --photos`: at 2, JPEG (q60) ringing
/// widened the box and the top-8 agreement of JPEG photos with the clean ones fell to 0.69;
/// at 8 it is 0.92–0.95, while 94 % of the dataset's own images still come back unchanged
/// (their fainter edge pixels are taken in by the one-pixel fringe at 28×28).
pub const MASK_FLOOR: i32 = 8;

/// What [`analyse`] found in a photo besides the model input (for tests and the evaluation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framing {
    /// The model's 28×28 input.
    pub pixels: Vec<u8>,
    /// The background colour (per-channel median of the border ring), after alpha compositing.
    pub background: [u8; 3],
    /// Whether the background is light (the object was inverted).
    pub light_background: bool,
    /// The border's upper quartile of grey-level differences towards the object (the noise
    /// estimate, about 0.674σ).
    pub noise_level: u32,
    /// The object's bounding box in the photo: `(x0, y0, x1, y1)`, end exclusive.
    pub bbox: (usize, usize, usize, usize),
}

/// The model's 28×28 input for a decoded image (RGBA, row-major, 4 bytes a pixel, as a
/// browser's `ImageData`). Bad sizes are typed errors.
pub fn to_model_input(rgba: &[u8], width: usize, height: usize) -> Result<Vec<u8>> {
    Ok(analyse(rgba, width, height)?.pixels)
}

/// [`to_model_input`] with what it found along the way.
pub fn analyse(rgba: &[u8], width: usize, height: usize) -> Result<Framing> {
    if width == 0 || height == 0 || width > MAX_IMAGE_SIDE || height > MAX_IMAGE_SIDE {
        return Err(Error::InvalidParameter {
            name: "image size",
            reason: format!("{width}×{height}: each side must be in 1..={MAX_IMAGE_SIDE}"),
        });
    }
    if rgba.len() != width * height * 4 {
        return Err(Error::DimensionMismatch {
            what: "RGBA bytes",
            expected: width * height * 4,
            got: rgba.len(),
        });
    }
    // 1. Composite over white; grey.
    let rgb: Vec<[u8; 3]> = rgba
        .chunks_exact(4)
        .map(|p| {
            let a = p[3] as u32;
            let c = |v: u8| ((v as u32 * a + 255 * (255 - a) + 127) / 255) as u8;
            [c(p[0]), c(p[1]), c(p[2])]
        })
        .collect();
    let grey: Vec<i32> = rgb.iter().map(|c| luma(*c)).collect();
    // 2. Background from the border ring.
    let ring = (width.min(height) / 32).max(1);
    let border: Vec<usize> = (0..height)
        .flat_map(|y| (0..width).map(move |x| (x, y)))
        .filter(|&(x, y)| x < ring || y < ring || x + ring >= width || y + ring >= height)
        .map(|(x, y)| y * width + x)
        .collect();
    let channel = |c: usize| level(border.iter().map(|&i| rgb[i][c] as u32)) as u8;
    let background = [channel(0), channel(1), channel(2)];
    let bg_grey = level(border.iter().map(|&i| grey[i] as u32)) as i32;
    let light = bg_grey > 127;
    // Signed difference from the background, positive towards the object.
    let amount = |g: i32| if light { bg_grey - g } else { g - bg_grey };
    let range = if light { bg_grey } else { 255 - bg_grey };
    // 3. Noise: the border's upper quartile of differences towards the object. It is 0.674σ
    // for symmetric noise around the median, and stays so when the background is white and
    // the noise clipped on its far side (where a median absolute deviation would be ~0).
    // Object pixels on the border (amounts beyond any plausible noise) are left out.
    let mad = quartile3(
        border
            .iter()
            .map(|&i| amount(grey[i]).max(0) as u32)
            .filter(|&a| a <= NOISE_CAP),
    );
    // 4. The object's box: pixels darker (light background) or lighter (dark background) than
    // the background in some channel, beyond the noise and beyond JPEG ringing (which grows
    // with the object's contrast: a share of the range).
    let mask_threshold = (MASK_FLOOR * range / 255).max(8 * mad as i32).max(2);
    let differs_by =
        |i: usize, threshold: i32| towards_object(rgb[i], background, light) > threshold;
    // With noise, a pixel is the object's if it differs by more than the floor and 3σ, and
    // the mean over the k×k window around it (k photo pixels to a model pixel when the object
    // fills the photo) differs by more than 8 × the MAD of such a mean: an isolated noise
    // pixel passes the first test but not the second. Requiring 8 × MAD of each pixel instead
    // (σ = 5: 27 levels) shrank the box by a pixel a side against the clean photo's, which
    // changed the model input's scale. A clean photo (no noise) is unaffected.
    let k = (width.min(height) / SIDE).max(1);
    let (x0, y0, x1, y1) = if mad == 0 || k == 1 {
        bounding_box(width, height, |x, y| {
            differs_by(y * width + x, mask_threshold)
        })
        .unwrap_or((width, height, 0, 0))
    } else {
        let pixel_threshold = (MASK_FLOOR * range / 255)
            .max((3 * 14_826 * mad).div_ceil(10_000) as i32)
            .max(2);
        let mean_threshold = ((8 * mad as usize).div_ceil(k) as i32).max(2);
        noisy_box(
            &rgb,
            width,
            height,
            background,
            light,
            k,
            pixel_threshold,
            mean_threshold,
        )
        .unwrap_or((width, height, 0, 0))
    };
    let (mut x0, mut y0, mut x1, mut y1) = (x0, y0, x1, y1);
    if x0 >= x1 {
        (x0, y0, x1, y1) = (0, 0, width, height);
    } else if mad == 0 && width.max(height) <= SIDE {
        // A clean image at the model's own resolution (as the dataset's): take in a one-pixel
        // fringe of faint pixels on each side — there a pixel is a whole model pixel and a
        // faint one at the box's edge is the object's anti-aliased edge. (In a larger photo
        // it is as often JPEG ringing or resampling blur, which would change the scale.)
        let row = |y: usize, x0: usize, x1: usize| (x0..x1).any(|x| differs_by(y * width + x, 2));
        let col = |x: usize, y0: usize, y1: usize| (y0..y1).any(|y| differs_by(y * width + x, 2));
        if y0 > 0 && row(y0 - 1, x0, x1) {
            y0 -= 1;
        }
        if y1 < height && row(y1, x0, x1) {
            y1 += 1;
        }
        if x0 > 0 && col(x0 - 1, y0, y1) {
            x0 -= 1;
        }
        if x1 < width && col(x1, y0, y1) {
            x1 += 1;
        }
    }
    // 5–6. Resample the box (longest side 28), remove the background, scale the contrast and
    // soft-threshold the noise of a mean over (long/28)² pixels: σ ≈ 1.4826·MAD·28/long; 3σ.
    let amounts: Vec<i32> = grey.iter().map(|&g| amount(g)).collect();
    let long = (x1 - x0).max(y1 - y0);
    let threshold = ((3 * 14_826 * mad as u64 * SIDE as u64).div_ceil(10_000 * long as u64)) as i64;
    let pixels = place(
        &amounts,
        width,
        (x0, y0, x1, y1),
        threshold,
        range as i64,
        false,
    );
    Ok(Framing {
        pixels,
        background,
        light_background: light,
        noise_level: mad,
        bbox: (x0, y0, x1, y1),
    })
}

/// Steps 5–6 on any image of amounts (difference from the background, towards the object):
/// the box `(x0, y0, x1, y1)` resampled by exact area averaging so its longest side is 28
/// (aspect kept), box-centred on a 0 canvas (an odd margin puts the extra pixel before the
/// box); each mean, less `threshold`, scaled so `range − threshold` maps to 255. With
/// `even_margins` each side of the target is rounded to the parity of 28, so the box sits in
/// the middle and a mirror image is placed as the mirror image. Integer arithmetic throughout.
pub(crate) fn place(
    amounts: &[i32],
    width: usize,
    (x0, y0, x1, y1): (usize, usize, usize, usize),
    threshold: i64,
    range: i64,
    even_margins: bool,
) -> Vec<u8> {
    let (bw, bh) = (x1 - x0, y1 - y0);
    let long = bw.max(bh);
    let fit = |n: usize| {
        if even_margins {
            // The nearest even size (ties up), at least 2.
            (2 * ((n * SIDE + long) / (2 * long))).clamp(2, SIDE)
        } else {
            ((2 * n * SIDE + long) / (2 * long)).clamp(1, SIDE)
        }
    };
    let (tw, th) = (fit(bw), fit(bh));
    let wx = area_weights(bw, tw);
    let wy = area_weights(bh, th);
    // Horizontal pass: each box row → tw sums (weights in units of 1/tw of a source pixel).
    let mut rows = vec![0i64; bh * tw];
    for y in 0..bh {
        let src = &amounts[(y0 + y) * width + x0..(y0 + y) * width + x1];
        for (t, ws) in wx.iter().enumerate() {
            rows[y * tw + t] = ws.iter().map(|&(s, w)| w as i64 * src[s] as i64).sum();
        }
    }
    let threshold = threshold.min(range - 1);
    let den = (bw * bh) as i64;
    let scale = (range - threshold) * den;
    let (ox, oy) = ((SIDE - tw).div_ceil(2), (SIDE - th).div_ceil(2));
    let mut pixels = vec![0u8; PIXELS];
    for (ty, ws) in wy.iter().enumerate() {
        for tx in 0..tw {
            let num: i64 = ws.iter().map(|&(s, w)| w as i64 * rows[s * tw + tx]).sum();
            let v = ((num - threshold * den) * 255 + scale / 2).div_euclid(scale);
            pixels[(oy + ty) * SIDE + ox + tx] = v.clamp(0, 255) as u8;
        }
    }
    pixels
}

/// The object's box in a noisy photo: pixels whose largest per-channel difference from the
/// background (towards the object) exceeds `pixel_threshold` and whose k×k window mean of
/// that difference exceeds `mean_threshold`. `None` if no pixel qualifies.
#[allow(clippy::too_many_arguments)]
fn noisy_box(
    rgb: &[[u8; 3]],
    width: usize,
    height: usize,
    background: [u8; 3],
    light: bool,
    k: usize,
    pixel_threshold: i32,
    mean_threshold: i32,
) -> Option<(usize, usize, usize, usize)> {
    let diff: Vec<i32> = rgb
        .iter()
        .map(|&c| towards_object(c, background, light))
        .collect();
    // Integral image (a row and a column of zeros in front).
    let w1 = width + 1;
    let mut sum = vec![0i64; w1 * (height + 1)];
    for y in 0..height {
        let mut row = 0i64;
        for x in 0..width {
            row += diff[y * width + x] as i64;
            sum[(y + 1) * w1 + x + 1] = sum[y * w1 + x + 1] + row;
        }
    }
    let half = k / 2;
    bounding_box(width, height, |x, y| {
        if diff[y * width + x] <= pixel_threshold {
            return false;
        }
        let (ya, yb) = (y.saturating_sub(half), (y + k - half).min(height));
        let (xa, xb) = (x.saturating_sub(half), (x + k - half).min(width));
        let total = sum[yb * w1 + xb] - sum[ya * w1 + xb] - sum[yb * w1 + xa] + sum[ya * w1 + xa];
        total > mean_threshold as i64 * ((yb - ya) * (xb - xa)) as i64
    })
}

/// The smallest box `(x0, y0, x1, y1)` (end exclusive) holding every pixel `inside` accepts;
/// `None` if it accepts none.
pub(crate) fn bounding_box(
    width: usize,
    height: usize,
    inside: impl Fn(usize, usize) -> bool,
) -> Option<(usize, usize, usize, usize)> {
    let (mut x0, mut y0, mut x1, mut y1) = (width, height, 0, 0);
    for y in 0..height {
        for x in 0..width {
            if inside(x, y) {
                x0 = x0.min(x);
                x1 = x1.max(x + 1);
                y0 = y0.min(y);
                y1 = y1.max(y + 1);
            }
        }
    }
    (x0 < x1).then_some((x0, y0, x1, y1))
}

/// The largest per-channel difference of `c` from the background, towards the object (darker
/// on a light background, lighter on a dark one).
fn towards_object(c: [u8; 3], background: [u8; 3], light: bool) -> i32 {
    (0..3)
        .map(|k| {
            let d = c[k] as i32 - background[k] as i32;
            if light {
                -d
            } else {
                d
            }
        })
        .max()
        .unwrap_or(0)
}

fn luma(c: [u8; 3]) -> i32 {
    ((299 * c[0] as u32 + 587 * c[1] as u32 + 114 * c[2] as u32 + 500) / 1000) as i32
}

/// Differences from the background larger than this are never noise (σ ≤ 16 would put
/// three deviations below it), so they do not count in the noise estimate.
const NOISE_CAP: u32 = 48;

/// The background level of border values: their median, then the median of those within 24
/// levels of it, so an object covering part of the border does not pull the level.
fn level(values: impl Iterator<Item = u32> + Clone) -> u32 {
    let m = median(values.clone());
    median(values.filter(|v| v.abs_diff(m) <= 24))
}

/// The lower median of byte-range values (a counting sort: O(n)).
fn median(values: impl Iterator<Item = u32>) -> u32 {
    quantile(values, 1, 2)
}

/// The upper quartile of byte-range values.
fn quartile3(values: impl Iterator<Item = u32>) -> u32 {
    quantile(values, 3, 4)
}

/// The smallest value with at least `num/den` of the values at or below it (0 if none).
fn quantile(values: impl Iterator<Item = u32>, num: usize, den: usize) -> u32 {
    let mut hist = [0usize; 256];
    let mut n = 0;
    for v in values {
        hist[v.min(255) as usize] += 1;
        n += 1;
    }
    let mut seen = 0;
    for (v, &c) in hist.iter().enumerate() {
        seen += c;
        if den * seen >= num * n && c > 0 {
            return v as u32;
        }
    }
    0
}

/// Exact area weights of resampling `n` source pixels to `t` target pixels: for each target
/// pixel, the source pixels it covers and the overlap in units of `1/t` of a source pixel
/// (each target's weights sum to `n`).
fn area_weights(n: usize, t: usize) -> Vec<Vec<(usize, usize)>> {
    (0..t)
        .map(|k| {
            let (lo, hi) = (k * n, (k + 1) * n);
            (lo / t..hi.div_ceil(t))
                .filter_map(|s| {
                    let w = hi.min((s + 1) * t).saturating_sub(lo.max(s * t));
                    (w > 0).then_some((s, w))
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grey_rgba(grey: &[u8]) -> Vec<u8> {
        grey.iter().flat_map(|&g| [g, g, g, 255]).collect()
    }

    /// A dataset-like image: a 28-tall, 16-wide light object, box-centred, its first and last
    /// columns at level `edge`.
    fn dataset_like(edge: u8) -> Vec<u8> {
        (0..PIXELS)
            .map(|i| {
                let (x, y) = (i % SIDE, i / SIDE);
                if (6..22).contains(&x) {
                    if x == 6 || x == 21 {
                        edge
                    } else {
                        (40 + (x * 13 + y * 7) % 200) as u8
                    }
                } else {
                    0
                }
            })
            .collect()
    }

    /// A dark-on-light photo of `img` (28×28, light object on 0), each dataset pixel drawn as
    /// `ppp`×`ppp` photo pixels at `(dx, dy)` on a `side`×`side` background of level `bg`
    /// (reflectance model: the photo's value is `bg·(255 − v)/255`).
    fn photo(img: &[u8], side: usize, ppp: usize, dx: usize, dy: usize, bg: u32) -> Vec<u8> {
        let mut out = vec![bg as u8; side * side];
        for y in 0..SIDE * ppp {
            for x in 0..SIDE * ppp {
                let v = img[(y / ppp) * SIDE + x / ppp] as u32;
                out[(y + dy) * side + x + dx] = (bg * (255 - v) / 255) as u8;
            }
        }
        grey_rgba(&out)
    }

    fn worst(a: &[u8], b: &[u8]) -> i32 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (*x as i32 - *y as i32).abs())
            .max()
            .unwrap()
    }

    #[test]
    fn dataset_images_come_back_unchanged() {
        // Faint edges (below the box's threshold) too: the one-pixel fringe at 28×28.
        for edge in [5, 40] {
            let img = dataset_like(edge);
            let f = analyse(&grey_rgba(&img), SIDE, SIDE).unwrap();
            assert_eq!(f.pixels, img);
            assert!(!f.light_background);
            assert_eq!(f.noise_level, 0);
            assert_eq!(f.bbox, (6, 0, 22, 28));
        }
    }

    #[test]
    fn background_level_and_framing_are_removed() {
        let img = dataset_like(20);
        let white = analyse(&photo(&img, 112, 4, 0, 0, 255), 112, 112).unwrap();
        assert_eq!(white.pixels, img, "a white 4× photo is the image itself");
        assert!(white.light_background);
        // Off-white backgrounds: the same input up to the rounding of the background scaling.
        for bg in [240, 230, 200] {
            let f = analyse(&photo(&img, 112, 4, 0, 0, bg), 112, 112).unwrap();
            assert_eq!(f.background, [bg as u8; 3]);
            assert!(worst(&f.pixels, &img) <= 2, "background {bg}");
        }
        // The object smaller (70 % of the frame, or half) and off-centre: the same input.
        let f = analyse(&photo(&img, 160, 4, 37, 21, 245), 160, 160).unwrap();
        assert_eq!(f.bbox, (37 + 24, 21, 37 + 88, 21 + 112));
        assert!(worst(&f.pixels, &img) <= 2, "70 %, shifted");
        let f = analyse(&photo(&img, 112, 2, 50, 3, 250), 112, 112).unwrap();
        assert!(worst(&f.pixels, &img) <= 2, "half, shifted");
    }

    #[test]
    fn noise_does_not_shrink_the_box_past_faint_edges() {
        // Edge columns at 20 (about 19 levels below a 240 background): above the floor, below
        // 8 × the noise's MAD. Each pixel alone cannot tell them from noise; their window can.
        let img = dataset_like(20);
        let mut state = 99u64;
        let mut photo = Vec::with_capacity(112 * 112 * 4);
        for y in 0..112 {
            for x in 0..112 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let n = (state % 13) as i32 - 6;
                let v = img[(y / 4) * SIDE + x / 4] as i32;
                let g = (240 * (255 - v) / 255 + n).clamp(0, 255) as u8;
                photo.extend_from_slice(&[g, g, g, 255]);
            }
        }
        let f = analyse(&photo, 112, 112).unwrap();
        assert!(f.noise_level >= 2, "{}", f.noise_level);
        assert_eq!(f.bbox, (24, 0, 88, 112));
    }

    #[test]
    fn a_coloured_background_and_noise_do_not_move_the_box() {
        let img = dataset_like(60);
        // Beige background, the object darkening each channel by its reflectance.
        let bg = [240u32, 228, 205];
        let mut state = 12345u64;
        let mut noise = || {
            // Uniform in −6..=6: a crude sensor noise, reproducible.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 13) as i32 - 6
        };
        let mut photo = Vec::with_capacity(112 * 112 * 4);
        for y in 0..112 {
            for x in 0..112 {
                let v = img[(y / 4) * SIDE + x / 4] as u32;
                for c in bg {
                    let clean = (c * (255 - v) / 255) as i32;
                    photo.push((clean + noise()).clamp(0, 255) as u8);
                }
                photo.push(255);
            }
        }
        let f = analyse(&photo, 112, 112).unwrap();
        assert!(f.light_background);
        assert!(f.noise_level > 0, "the noise is seen");
        for (c, want) in f.background.iter().zip(bg) {
            assert!((*c as i32 - want as i32).abs() <= 2, "{:?}", f.background);
        }
        assert_eq!(f.bbox, (24, 0, 88, 112), "noise does not widen the box");
        // What noise is left after 4×4 averaging and the soft threshold is small.
        let mean_err = f
            .pixels
            .iter()
            .zip(&img)
            .map(|(a, b)| (*a as i32 - *b as i32).abs())
            .sum::<i32>() as f64
            / PIXELS as f64;
        assert!(mean_err < 4.0, "{mean_err}");
    }

    #[test]
    fn blank_and_bad_images() {
        // Uniform: no object, nothing to show (the out-of-distribution check flags it).
        let f = analyse(&[250u8; 4 * 50 * 40], 50, 40).unwrap();
        assert!(f.pixels.iter().all(|&v| v == 0));
        assert_eq!(f.bbox, (0, 0, 50, 40));
        assert!(to_model_input(&[0u8; 12], 2, 2).is_err());
        assert!(to_model_input(&[], 0, 5).is_err());
        assert!(to_model_input(&[0u8; 4], MAX_IMAGE_SIDE + 1, 1).is_err());
        // Tiny images are upscaled, never an error.
        assert!(to_model_input(&[0, 0, 0, 255], 1, 1).is_ok());
        let out = to_model_input(&[0, 0, 0, 255, 255, 255, 255, 255], 2, 1).unwrap();
        assert!(out.iter().any(|&v| v > 0));
    }
}
