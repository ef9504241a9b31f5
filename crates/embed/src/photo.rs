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
//!    then light falling unevenly across the frame divided out ([`super::light`]; a photo
//!    under even light keeps its bytes);
//! 2. the **background** is the per-channel median of a border ring, taken again over the
//!    values within 24 levels of it (so an object touching the edge does not pull it); a light
//!    background (grey > 127) means a dark object, which is inverted, as in the dataset (light
//!    object on dark);
//! 3. the **noise level** is the border's upper quartile of differences towards the object
//!    (0.674σ; 0 on a clean image; object pixels on the border left out);
//! 4. the **object** is every pixel darker (light background) or lighter (dark background)
//!    than the background in some channel by more than [`MASK_FLOOR`] ([`PHOTO_MASK_FLOOR`] in
//!    a photo larger than 28 pixels; scaled to the background's range) and 8 × the noise
//!    level, so neither noise nor JPEG ringing widens the box — in a noisy photo larger than
//!    28 pixels, by more than the floor and 3σ itself
//!    and by more than 8 × the noise level of a mean over its k×k window (k photo pixels to a
//!    model pixel), so noise neither widens the box nor shrinks it past the object's faint
//!    edges; at the dataset's own resolution (≤ 28 pixels) a one-pixel fringe of faint
//!    pixels joins it; the box is cropped (the whole image if nothing differs);
//! 5. the box is resampled by exact area averaging so its longest side is 28 pixels, keeping
//!    its aspect ratio exactly (the short side not rounded to whole pixels), and placed
//!    centred by its box on a 0 canvas (at the dataset's own resolution with the dataset's
//!    rounding: an odd margin puts the extra pixel before the box) — [`Fit::Continuous`];
//! 6. each pixel becomes its difference from the background, scaled so the background's full
//!    range (its level for a dark object, 255 − its level for a light one) maps to 255 — an
//!    exposure change scales object and background together, so this removes it — after a
//!    knee at 3 × the noise left after averaging: 0 below it, stretched linearly from 0 to
//!    twice it, unchanged above (a soft threshold, which subtracted it everywhere, lowered
//!    every level of a noisy photo against its clean twin: whole-family agreement 0.653 →
//!    0.666 and noise with JPEG 0.891 → 0.911 with the knee, `eval --photos`); a coloured or
//!    dark grey garment of one colour is read along its own colour axis instead of in grey
//!    ([`colour_axis`], [`ONE_COLOUR_SHARE`]);
//! 7. when the object is larger than 28 pixels, a **tilt is undone at the photo's resolution**:
//!    the turn the model's own step ([`super::upright`]) would make of that input is made on
//!    the photo's amounts instead (repeated on the result up to [`TURN_STEPS`] times), and the
//!    turned object is framed again as in step 5 — see [`upright_at_photo_resolution`]; an
//!    object whose axis is a diagonal that step keeps as the shape (a shoe's) has its base
//!    levelled instead ([`super::base`], `photo_turn`). This
//!    is the retrieval model's input; the class model reads the input before the turn, with
//!    the threshold of step 6 subtracted instead of the knee ([`Framing::class_pixels`]), on
//!    which it measured better.
//!
//! Integer arithmetic, except the light (step 1), the colour axis (step 6) and step 7's turn
//! (f64 additions, multiplications, divisions and square roots, with the series `sin`/`cos` of
//! [`super::upright`]), so native, wasm and training get the same
//! bytes (the wasm test `a_tilted_photo_gives_the_native_model_input`). On a Fashion-MNIST
//! image (28×28, 0 background, box longest side 28, box-centred) every step is the identity;
//! the evaluation (`eval --photos`) measures how many dataset images come back unchanged.

use crate::place::{bounding_box, place, Fit, Floor};
use crate::upright::rotate_region;
use crate::weights::SIDE;
use shared::error::{Error, Result};

/// Largest side of an image accepted by [`to_model_input`].
pub const MAX_IMAGE_SIDE: usize = 4_096;

/// Most turns [`upright_at_photo_resolution`] makes: each re-estimates the axis on the turned
/// result (the model's step only partly undoes an offset in its ramps, and a turned object's
/// axis or base is re-measured at 28×28). Measured with `eval --photos`: whole-family
/// agreement 0.608 after one turn, 0.619 after two, 0.625 after four, 0.623 after eight.
const TURN_STEPS: usize = 4;
/// A turn left to make below this (radians, 0.006°) is done.
const TURN_DONE: f64 = 1e-4;
/// Longest side of the box's working copy that [`upright_at_photo_resolution`] turns.
const WORK_SIDE: usize = 4 * SIDE;

/// Smallest colour difference from the background (for a full range of 255) that counts as the
/// object when finding its box, in an image at the dataset's own resolution (≤ 28 pixels a
/// side). Measured with `eval --photos`: at 2, JPEG (q60) ringing widened the box and the top-8
/// agreement of JPEG photos with the clean ones fell to 0.69; at 8 it is 0.92–0.95, while 94 %
/// of the dataset's own images still come back unchanged (their fainter edge pixels are taken
/// in by the one-pixel fringe at 28×28).
pub const MASK_FLOOR: i32 = 8;
/// [`MASK_FLOOR`] in a larger photo. There the faint pixels at the object's edge are a ramp
/// several photo pixels wide (the optics' or the resampling's blur, JPEG ringing), and where
/// it crosses a low floor moves with the noise, the background and the scale, so the box does
/// too. Measured with `eval --photos`: whole-family agreement 0.650 at 8, 0.712
/// at 24 (scale 0.852 → 0.863, rotation 0.668 → 0.696, noise 0.914 → 0.923), 0.721 at 32;
/// but at 32 the class shown on background 240 fell to 0.926, below the 0.93 (0.930
/// at 24). The cost: an edge fainter than this is left out of the box (a clean photo of a
/// gallery image finds that image first for 0.912 of 2,000 against 0.919 at 8), and a product
/// fainter than this everywhere is not boxed at all (the whole photo is taken).
pub const PHOTO_MASK_FLOOR: i32 = 24;

/// What [`analyse`] found in a photo besides the model input (for tests and the evaluation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framing {
    /// The model's 28×28 input.
    pub pixels: Vec<u8>,
    /// The input before step 7's turn, its noise removed by subtracting the threshold
    /// ([`Floor::Subtract`]) rather than by the knee (the same as `pixels` for a clean photo
    /// that was not turned): what the class model ([`super::classify`]) reads, as it was
    /// trained. Measured with `eval --photos`: on it the class shown is right for 0.931 / 0.930
    /// of held-out photos on backgrounds 240 / 230, on the turned input for 0.926 / 0.926 (one
    /// retrained on the turned photos reached 0.921 / 0.922); on the whole family 0.926, with
    /// the knee 0.912 (without [`PHOTO_MASK_FLOOR`]; with it 0.930 / 0.930 and
    /// 0.922). The retrieval features gain from the turn and the knee (whole-family top-8
    /// agreement 0.524 → 0.625 → 0.650), the class does not, so each network reads the input
    /// it does best on.
    pub class_pixels: Vec<u8>,
    /// The background colour (per-channel median of the border ring), after alpha compositing.
    pub background: [u8; 3],
    /// Whether the background is light (the object was inverted).
    pub light_background: bool,
    /// The border's upper quartile of grey-level differences towards the object (the noise
    /// estimate, about 0.674σ).
    pub noise_level: u32,
    /// The object's bounding box in the photo: `(x0, y0, x1, y1)`, end exclusive.
    pub bbox: (usize, usize, usize, usize),
    /// The photo's own statistics, which the 28×28 input loses ([`Scene`]); `None` for an
    /// image of at most [`SCENE_MIN_SIDE`] pixels a side.
    pub scene: Option<Scene>,
    /// The object's box is cut off by the photo's edge ([`super::cut::cut_off`]): the clients
    /// then say [`super::cut::CUT_OFF_MESSAGE`].
    pub cut_off: bool,
    /// The light was evened out ([`super::light`]): it varied across the photo.
    pub light_evened: bool,
}

/// Smallest side (exclusive) of a photo whose [`Scene`] is measured: at the dataset's own
/// resolution (28) the border ring is a garment's own edge and the mask its pixels, so its
/// statistics say nothing about a scene.
pub const SCENE_MIN_SIDE: usize = 2 * SIDE;

/// A pixel differs from the background, for [`Scene`], by more than this in some channel
/// ([`PHOTO_MASK_FLOOR`]'s level).
pub const SCENE_LEVELS: i32 = 24;

/// Longest side of the grid over the object's box on which [`Scene`] counts parts.
const SCENE_GRID: usize = 4 * SIDE;

/// What a photo looks like around and inside the object's box, in thousandths: what tells a
/// product photo (one object on a plain background, filling much of its box as one solid
/// part) from a scene, a page of text, a chart or a drawing once the pipeline has squeezed
/// either into 28×28 pixels. The familiarity check reads it (`super::ood`). A pixel counts
/// when it differs from [`Framing::background`] by more than [`SCENE_LEVELS`] in some
/// channel; the box's pixels are taken on a grid of at most [`SCENE_GRID`] cells a side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scene {
    /// The border ring's pixels (the ring the background is taken from) that differ: a
    /// product photo's ring is plain.
    pub ring_differs: u16,
    /// The box's pixels that differ: a garment fills its box; text and line art do not.
    pub box_filled: u16,
    /// The largest 4-connected part's share of the differing pixels: a garment is one part,
    /// a page of text a thousand.
    pub largest_part: u16,
    /// The differing pixels with a 4-neighbour that does not differ (or on the box's edge):
    /// strokes are all edge, a garment's body is not.
    pub edge_share: u16,
}

/// [`Scene`] of a composited photo (`rgb`, `width × height`) with its `background` and the
/// object's `bbox`; `None` when a side is at most [`SCENE_MIN_SIDE`].
fn scene(
    rgb: &[[u8; 3]],
    width: usize,
    height: usize,
    background: [u8; 3],
    bbox: (usize, usize, usize, usize),
) -> Option<Scene> {
    if width.min(height) <= SCENE_MIN_SIDE {
        return None;
    }
    let differs =
        |i: usize| (0..3).any(|c| (rgb[i][c] as i32 - background[c] as i32).abs() > SCENE_LEVELS);
    let ring = (width.min(height) / 32).max(1);
    let (mut ring_n, mut ring_differs) = (0usize, 0usize);
    for y in 0..height {
        for x in 0..width {
            if x < ring || y < ring || x + ring >= width || y + ring >= height {
                ring_n += 1;
                ring_differs += differs(y * width + x) as usize;
            }
        }
    }
    let (x0, y0, x1, y1) = bbox;
    let step = ((x1 - x0).max(y1 - y0) / SCENE_GRID).max(1);
    let (gw, gh) = (((x1 - x0) / step).max(1), ((y1 - y0) / step).max(1));
    let mask: Vec<bool> = (0..gw * gh)
        .map(|k| differs((y0 + (k / gw) * step) * width + x0 + (k % gw) * step))
        .collect();
    let (mut seen, mut largest, mut total, mut edge) = (vec![false; mask.len()], 0, 0, 0);
    for start in 0..mask.len() {
        if !mask[start] || seen[start] {
            continue;
        }
        let (mut size, mut stack) = (0, vec![start]);
        seen[start] = true;
        while let Some(i) = stack.pop() {
            size += 1;
            let near = crate::light::neighbours(i, gw, gh);
            if near.iter().any(|j| j.is_none_or(|j| !mask[j])) {
                edge += 1;
            }
            for j in near.into_iter().flatten() {
                if mask[j] && !seen[j] {
                    seen[j] = true;
                    stack.push(j);
                }
            }
        }
        total += size;
        largest = largest.max(size);
    }
    let per_mille = |a: usize, b: usize| (1000 * a / b.max(1)) as u16;
    Some(Scene {
        ring_differs: per_mille(ring_differs, ring_n),
        box_filled: per_mille(total, mask.len()),
        largest_part: per_mille(largest, total),
        edge_share: per_mille(edge, total),
    })
}

/// The model's 28×28 input for any decoded image (RGBA, row-major, 4 bytes a pixel, as a
/// browser's `ImageData`), framed the way Fashion-MNIST frames its products (background level
/// and colour removed, cropped to the object, longest side 28, centred, dark background), in
/// integer arithmetic so every platform gets the same bytes. A Fashion-MNIST image comes back
/// unchanged. Bad sizes are typed errors.
pub fn to_model_input(rgba: &[u8], width: usize, height: usize) -> Result<Vec<u8>> {
    Ok(analyse(rgba, width, height)?.pixels)
}

/// Each side in `1..=`[`MAX_IMAGE_SIDE`]: checked before any length is computed from them
/// (`width · height · 4` of larger sides could wrap on wasm32).
pub(crate) fn check_sides(width: usize, height: usize) -> Result<()> {
    if width == 0 || height == 0 || width > MAX_IMAGE_SIDE || height > MAX_IMAGE_SIDE {
        return Err(Error::InvalidParameter {
            name: "image size",
            reason: format!("{width}×{height}: each side must be in 1..={MAX_IMAGE_SIDE}"),
        });
    }
    Ok(())
}

/// [`to_model_input`] with what it found along the way.
pub fn analyse(rgba: &[u8], width: usize, height: usize) -> Result<Framing> {
    check_sides(width, height)?;
    if rgba.len() != width * height * 4 {
        return Err(Error::DimensionMismatch {
            what: "RGBA bytes",
            expected: width * height * 4,
            got: rgba.len(),
        });
    }
    // 1. Composite over white; grey.
    let mut rgb: Vec<[u8; 3]> = rgba
        .chunks_exact(4)
        .map(|p| {
            let a = p[3] as u32;
            let c = |v: u8| ((v as u32 * a + 255 * (255 - a) + 127) / 255) as u8;
            [c(p[0]), c(p[1]), c(p[2])]
        })
        .collect();
    let ring = (width.min(height) / 32).max(1);
    let border: Vec<usize> = (0..height)
        .flat_map(|y| (0..width).map(move |x| (x, y)))
        .filter(|&(x, y)| x < ring || y < ring || x + ring >= width || y + ring >= height)
        .map(|(x, y)| y * width + x)
        .collect();
    // 1½. Uneven light divided out (`super::light`; even light left as it is).
    let ring_level = level(border.iter().map(|&i| luma(rgb[i]) as u32)) as i32;
    let light_evened = match crate::light::even_out(&rgb, width, height, ring_level) {
        Some(even) => {
            rgb = even;
            true
        }
        None => false,
    };
    let grey: Vec<i32> = rgb.iter().map(|c| luma(*c)).collect();
    // 2. Background from the border ring.
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
    // Object pixels on the border (amounts beyond any plausible noise, in grey or in some
    // channel: a yellow garment's edge is faint in grey alone) are left out.
    let mad = quartile3(
        border
            .iter()
            .filter(|&&i| towards_object(rgb[i], background, light) <= NOISE_CAP as i32)
            .map(|&i| amount(grey[i]).max(0) as u32)
            .filter(|&a| a <= NOISE_CAP),
    );
    // Light divided out leaves slow residues on the border (a level or a few over tens of
    // pixels) that are not noise: there the noise is read from neighbouring border pixels'
    // differences instead, which a slow residue does not reach (their upper quartile is
    // 0.674·√2·σ for noise of σ).
    let mad = if light_evened {
        mad.min(neighbour_noise(&grey, width, height, ring, |i| {
            towards_object(rgb[i], background, light) <= NOISE_CAP as i32
        }))
    } else {
        mad
    };
    // 4. The object's box: pixels darker (light background) or lighter (dark background) than
    // the background in some channel, beyond the noise and beyond JPEG ringing (which grows
    // with the object's contrast: a share of the range).
    let floor = if width.max(height) <= SIDE {
        MASK_FLOOR
    } else {
        PHOTO_MASK_FLOOR
    };
    let mask_threshold = (floor * range / 255).max(8 * mad as i32).max(2);
    let differs_by =
        |i: usize, threshold: i32| towards_object(rgb[i], background, light) > threshold;
    // With noise, a pixel is the object's if it differs by more than the floor and 3σ, and
    // the mean over the k×k window around it (k photo pixels to a model pixel when the object
    // fills the photo) differs by more than 8 × the MAD of such a mean: an isolated noise
    // pixel passes the first test but not the second. Requiring 8 × MAD of each pixel instead
    // (σ = 5: 27 levels) shrank the box by a pixel a side against the clean photo's, which
    // changed the model input's scale. A clean photo (no noise) is unaffected.
    let k = (width.min(height) / SIDE).max(1);
    let mask: Vec<bool> = if mad == 0 || k == 1 {
        (0..width * height)
            .map(|i| differs_by(i, mask_threshold))
            .collect()
    } else {
        let pixel_threshold = (floor * range / 255)
            .max((3 * 14_826 * mad).div_ceil(10_000) as i32)
            .max(2);
        let mean_threshold = ((8 * mad as usize).div_ceil(k) as i32).max(2);
        noisy_mask(
            &rgb,
            width,
            height,
            background,
            light,
            k,
            pixel_threshold,
            mean_threshold,
        )
    };
    let (x0, y0, x1, y1) =
        bounding_box(width, height, |x, y| mask[y * width + x]).unwrap_or((width, height, 0, 0));
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
    // put a knee at the noise of a mean over (long/28)² pixels: σ ≈ 1.4826·MAD·28/long; 3σ.
    let amounts: Vec<i32> =
        match light.then(|| colour_axis(&rgb, &mask, width, background, mad == 0)) {
            Some(Some(axis)) => rgb.iter().map(|&c| axis.amount(c, range)).collect(),
            _ => grey.iter().map(|&g| amount(g)).collect(),
        };
    let long = (x1 - x0).max(y1 - y0);
    let threshold = ((3 * 14_826 * mad as u64 * SIDE as u64).div_ceil(10_000 * long as u64)) as i64;
    let bbox = (x0, y0, x1, y1);
    let framed = |floor| place(&amounts, width, bbox, floor, range as i64, Fit::Continuous);
    let class_pixels = framed(Floor::Subtract(threshold));
    let level = if threshold == 0 {
        class_pixels.clone()
    } else {
        framed(Floor::Knee(threshold))
    };
    let pixels = if long > SIDE {
        upright_at_photo_resolution(&amounts, &mask, width, bbox, threshold, range, level)
    } else {
        level
    };
    Ok(Framing {
        pixels,
        class_pixels,
        background,
        light_background: light,
        noise_level: mad,
        bbox: (x0, y0, x1, y1),
        scene: scene(&rgb, width, height, background, (x0, y0, x1, y1)),
        cut_off: crate::cut::cut_off(&amounts, &mask, width, height, bbox),
        light_evened,
    })
}

/// The object's pixels in a noisy photo: those whose largest per-channel difference from the
/// background (towards the object) exceeds `pixel_threshold` and whose k×k window mean of
/// that difference exceeds `mean_threshold`.
#[allow(clippy::too_many_arguments)]
fn noisy_mask(
    rgb: &[[u8; 3]],
    width: usize,
    height: usize,
    background: [u8; 3],
    light: bool,
    k: usize,
    pixel_threshold: i32,
    mean_threshold: i32,
) -> Vec<bool> {
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
    (0..width * height)
        .map(|i| {
            let (x, y) = (i % width, i / width);
            if diff[i] <= pixel_threshold {
                return false;
            }
            let (ya, yb) = (y.saturating_sub(half), (y + k - half).min(height));
            let (xa, xb) = (x.saturating_sub(half), (x + k - half).min(width));
            let total =
                sum[yb * w1 + xb] - sum[ya * w1 + xb] - sum[yb * w1 + xa] + sum[ya * w1 + xa];
            total > mean_threshold as i64 * ((yb - ya) * (xb - xa)) as i64
        })
        .collect()
}

/// Step 7 (an object larger than the model's input): a tilt undone at the photo's
/// resolution. The turn the model's own step ([`super::upright`]) would make of `pixels` (the
/// object's principal axis onto the nearest image axis, by the same rule; for a diagonal
/// shape, its base levelled: [`photo_turn`]) is made here instead,
/// on the photo's amounts inside the object's box, and the turned object's box (the mask turned
/// the same way, more than half in) is resampled as in step 5; then the axis is measured again
/// on the result, up to [`TURN_STEPS`] times. Why: turning the 28×28 input interpolates between
/// model pixels, so a tilted photo and the same photo upright reached the model blurred
/// differently; turned at the photo's resolution, only the final area averaging resamples, and
/// the model's step finds (nearly) nothing left to turn. A box longer than [`WORK_SIDE`] is
/// first reduced by whole-block means to at most that (so the turns cost O(`WORK_SIDE`²)
/// whatever the photo's size; four photo pixels to a model pixel is ample).
fn upright_at_photo_resolution(
    amounts: &[i32],
    mask: &[bool],
    width: usize,
    (x0, y0, x1, y1): (usize, usize, usize, usize),
    threshold: i64,
    range: i32,
    pixels: Vec<u8>,
) -> Vec<u8> {
    // Most photos need no turn (an upright or round object, a level shoe): no working copy
    // is built for them.
    let first = photo_turn(&pixels);
    if first.abs() < TURN_DONE {
        return pixels;
    }
    let fix = super::upright::FIX;
    // The box's working copy: block sums of f×f photo pixels (a partial block at the far edge
    // counts its missing pixels as 0, as outside the box), as FIX × the block mean, and the
    // blocks holding any of the object's pixels (as a 112-pixel photo's mask holds any pixel
    // the object touches: the same box across photo sizes, `a_large_photo_is_turned_like_…`).
    let f = ((x1 - x0).max(y1 - y0) / WORK_SIDE).max(1);
    let (rw, rh) = ((x1 - x0).div_ceil(f), (y1 - y0).div_ceil(f));
    let (mut values, mut inside) = (vec![0i64; rw * rh], vec![0i64; rw * rh]);
    for y in y0..y1 {
        for x in x0..x1 {
            let block = (y - y0) / f * rw + (x - x0) / f;
            values[block] += i64::from(amounts[y * width + x]);
            inside[block] += i64::from(mask[y * width + x]);
        }
    }
    let area = (f * f) as i64;
    let values: Vec<i32> = values
        .iter()
        .map(|&v| (2 * v * fix as i64 + area).div_euclid(2 * area) as i32)
        .collect();
    let inside: Vec<i32> = inside.iter().map(|&n| i32::from(n > 0)).collect();
    let turn = |angle: f64| -> Option<Vec<u8>> {
        let (turned, cw, ch) = rotate_region(&values, rw, (0, 0, rw, rh), angle, 1);
        let (turned_mask, _, _) = rotate_region(&inside, rw, (0, 0, rw, rh), angle, 2);
        let turned_box = bounding_box(cw, ch, |x, y| turned_mask[y * cw + x] > 1)?;
        Some(place(
            &turned,
            cw,
            turned_box,
            Floor::Knee(threshold * fix as i64),
            range as i64 * fix as i64,
            Fit::Continuous,
        ))
    };
    // The model's step, repeated on its own result: the axis is measured again on the turned
    // object each time, and an offset the step only partly turns (in its ramps) is turned on.
    let mut total = 0.0;
    let mut out = pixels;
    for step in 0..TURN_STEPS {
        // The first turn was measured above, on this very input.
        let applied = if step == 0 { first } else { photo_turn(&out) };
        let next = total + applied;
        if applied.abs() < TURN_DONE || next.abs() > std::f64::consts::FRAC_PI_4 {
            break;
        }
        let Some(turned) = turn(next) else {
            break;
        };
        (out, total) = (turned, next);
    }
    out
}

/// The turn (radians) step 7 makes of a 28×28 input: the model's own step's
/// ([`super::upright::orientation`]), except for an object whose principal axis lies more than
/// [`super::upright::TILT_FULL_DEGREES`] off the image axes — a diagonal the model's step
/// keeps, at least in part, as the product's shape (a shoe's) — whose base is levelled instead
/// ([`super::base::tilt`]; the model's step's turn when it has no base). Why: at the model's
/// step's ramp a 10° tilt came out as up to 30°, and beyond it as 10°, so held-out ankle boots
/// turned 10° kept 0.31 of their exact top 8 and sandals 0.65; with the base levelled (and the
/// query model retrained for it) 0.62 and 0.81, the whole family 0.742 → 0.771, and a clean
/// photo finds 0.686 of the gallery model's own top 8 (0.681 before; with the principal axis
/// turned in full instead: 0.781 but 0.622, since a shoe's diagonal is what the gallery model
/// ranks by — `eval --photos`). 0 for a blank input.
fn photo_turn(pixels: &[u8]) -> f64 {
    let Some(o) = super::upright::orientation(pixels) else {
        return 0.0;
    };
    if o.offset.abs() * 180.0 / std::f64::consts::PI > super::upright::TILT_FULL_DEGREES {
        super::base::tilt(pixels).unwrap_or(o.applied)
    } else {
        o.applied
    }
}

/// A garment's colour is read along its own axis when the mean colour difference of its
/// strongest tenth leans from the background's own direction (a black or grey garment's) by
/// more than this cosine.
pub const COLOUR_COS: f64 = 0.998;
/// …or when its full strength (along its axis, [`colour_axis`]) is below this share of the
/// background's: a dark but not black garment. Every Fashion-MNIST image reaches at least 240
/// of 255, so a black garment's photo is never read this way.
pub const LOW_CONTRAST: f64 = 0.75;

/// A garment is read along its colour's axis only when it is of one colour: at least this
/// share of its strong pixels (a difference from the background of at least
/// [`ONE_COLOUR_STRONG`] of the background's length) lie within [`ONE_COLOUR_OFF`] of their
/// difference of the plane through the background's direction and the axis. One colour under
/// white light, however shaded, lies in that plane (a pixel is the colour's reflectance times
/// its light, so its difference from the background is a mix of the two directions); an
/// object of several colours (a pie chart, a print of two inks) does not, and reaches the
/// model in grey, as Fashion-MNIST's own conversion made its garments. Measured on the
/// held-out non-clothing (`familiarity_heldout`): read along one axis, a chart's coloured
/// slices reached the model as one black garment's shape, and charts flagged fell from 53 to
/// 46 of 60 when the axis came in; with this gate 53 again. Coloured garments with noise
/// (σ = 5) and JPEG (quality 75) pass it (200 of 200 held out).
pub const ONE_COLOUR_SHARE: f64 = 0.95;
/// How far (a share of its difference) a strong pixel may lie off the one colour's plane.
pub const ONE_COLOUR_OFF: f64 = 0.1;
/// A strong pixel's least difference from the background, a share of the background's length.
pub const ONE_COLOUR_STRONG: f64 = 0.2;

/// The axis a garment's colour is read along ([`colour_axis`]).
struct ColourAxis {
    /// Unit direction from the background colour towards the garment's.
    unit: [f64; 3],
    background: [f64; 3],
    /// The garment's strongest difference along `unit` (its strongest pixel; a 2×2 mean in a
    /// noisy photo): full strength.
    full: f64,
}

impl ColourAxis {
    /// `c`'s amount: its difference from the background along the axis, as a share of the
    /// garment's full strength, times `range` (the amount a black garment's darkest pixel has).
    fn amount(&self, c: [u8; 3], range: i32) -> i32 {
        let p: f64 = (0..3)
            .map(|k| (self.background[k] - c[k] as f64) * self.unit[k])
            .sum();
        (p / self.full * range as f64).round() as i32
    }
}

/// Step 6's amounts for a coloured (or dark grey) garment on a light background: why, the
/// model knows Fashion-MNIST's garments, each at full strength (every image reaches 240 or
/// more) as a darkening; a red or yellow garment is much lighter in grey than a black one
/// (yellow: a quarter of the contrast), and a navy one a little, so its grey levels reach the
/// model faint. Read along the garment's own axis — the mean difference from the background
/// of the object's strongest tenth (by the sum of channel differences) — and scaled so its
/// strongest pixel (its strongest 2×2 mean when `clean` is false: noise) is full strength,
/// the garment reaches the model as the black garment of the same shape. `None` (grey as
/// before) for a garment whose axis is the background's own direction within [`COLOUR_COS`]
/// and whose contrast is at least [`LOW_CONTRAST`] (every black garment, so clean photos keep
/// their bytes), and for an object of more than one colour ([`ONE_COLOUR_SHARE`]). f64
/// additions, multiplications, divisions and square roots only: the same on every platform.
fn colour_axis(
    rgb: &[[u8; 3]],
    mask: &[bool],
    width: usize,
    background: [u8; 3],
    clean: bool,
) -> Option<ColourAxis> {
    let bg = background.map(f64::from);
    let diff = |c: [u8; 3]| {
        [
            bg[0] - c[0] as f64,
            bg[1] - c[1] as f64,
            bg[2] - c[2] as f64,
        ]
    };
    let mut strength: Vec<(i32, usize)> = (0..rgb.len())
        .filter(|&i| mask[i])
        .map(|i| {
            let d = diff(rgb[i]);
            ((d[0] + d[1] + d[2]) as i32, i)
        })
        .collect();
    if strength.is_empty() {
        return None;
    }
    let top = strength.len().div_ceil(10);
    strength.select_nth_unstable_by(top - 1, |a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut m = [0.0f64; 3];
    for &(_, i) in &strength[..top] {
        for (mk, dk) in m.iter_mut().zip(diff(rgb[i])) {
            *mk += dk;
        }
    }
    let norm = |v: [f64; 3]| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    let (nm, nb) = (norm(m), norm(bg));
    if nm == 0.0 || nb == 0.0 {
        return None;
    }
    let unit = m.map(|v| v / nm);
    let cos = (0..3).map(|k| unit[k] * bg[k]).sum::<f64>() / nb;
    // The strongest pixel (or 2×2 mean) along the axis, over the object's pixels.
    let along = |i: usize| -> f64 {
        let d = diff(rgb[i]);
        (0..3).map(|k| d[k] * unit[k]).sum()
    };
    let height = rgb.len() / width;
    let mut full = 0.0f64;
    for y in 0..height.saturating_sub(1) {
        for x in 0..width.saturating_sub(1) {
            let i = y * width + x;
            if mask[i] {
                // Without noise the strongest pixel itself: a 2×2 mean sits a few levels below
                // it wherever the garment's strongest part is a pixel or two wide, which left
                // the colour's garment a tenth stronger than the same garment in black.
                let strength = if clean {
                    along(i)
                } else {
                    (along(i) + along(i + 1) + along(i + width) + along(i + width + 1)) / 4.0
                };
                full = full.max(strength);
            }
        }
    }
    // A black garment's full strength along the background's direction is the background's
    // own length; its grey reading is right.
    if full <= 0.0 || (cos >= COLOUR_COS && full >= LOW_CONTRAST * nb) {
        return None;
    }
    // One colour, shaded or not, keeps every difference in the plane of the background's
    // direction and the axis; its normal is their cross product (none for a grey garment).
    let normal = [
        bg[1] * unit[2] - bg[2] * unit[1],
        bg[2] * unit[0] - bg[0] * unit[2],
        bg[0] * unit[1] - bg[1] * unit[0],
    ];
    let nn = norm(normal);
    if nn > 1e-9 * nb {
        let (mut strong, mut off) = (0usize, 0usize);
        for i in (0..rgb.len()).filter(|&i| mask[i]) {
            let d = diff(rgb[i]);
            let nd = norm(d);
            if nd >= ONE_COLOUR_STRONG * nb {
                strong += 1;
                let across: f64 = (0..3).map(|k| d[k] * normal[k]).sum::<f64>() / nn;
                off += (across.abs() > ONE_COLOUR_OFF * nd) as usize;
            }
        }
        if (off as f64) > (1.0 - ONE_COLOUR_SHARE) * strong as f64 {
            return None;
        }
    }
    Some(ColourAxis {
        unit,
        background: bg,
        full,
    })
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

/// The noise's upper-quartile deviation ([`level`]'s step 3 measure) from the differences of
/// horizontally neighbouring pixels in the top and bottom `ring` rows and vertically
/// neighbouring ones in the left and right `ring` columns, pairs `usable` on both sides.
fn neighbour_noise(
    grey: &[i32],
    width: usize,
    height: usize,
    ring: usize,
    usable: impl Fn(usize) -> bool,
) -> u32 {
    let rows = (0..height).filter(|&y| y < ring || y + ring >= height);
    let across = rows.flat_map(|y| (1..width).map(move |x| (y * width + x - 1, y * width + x)));
    let cols = (0..width).filter(|&x| x < ring || x + ring >= width);
    let down = cols.flat_map(|x| (1..height).map(move |y| ((y - 1) * width + x, y * width + x)));
    let q = quartile3(
        across
            .chain(down)
            .filter(|&(a, b)| usable(a) && usable(b))
            .map(|(a, b)| grey[a].abs_diff(grey[b]))
            .filter(|&d| d <= NOISE_CAP),
    );
    // q / √2, rounded down.
    (q as u64 * 10_000 / 14_143) as u32
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::PIXELS;

    fn grey_rgba(grey: &[u8]) -> Vec<u8> {
        grey.iter().flat_map(|&g| [g, g, g, 255]).collect()
    }

    /// A dataset-like image: a 28-tall, 16-wide light object, box-centred, its first and last
    /// columns at level `edge`, symmetric about its middle column (its axis upright: nothing
    /// to turn).
    fn dataset_like(edge: u8) -> Vec<u8> {
        (0..PIXELS)
            .map(|i| {
                let (x, y) = (i % SIDE, i / SIDE);
                if (6..22).contains(&x) {
                    if x == 6 || x == 21 {
                        edge
                    } else {
                        (40 + ((2 * x).abs_diff(27) * 13 + y * 7) % 200) as u8
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
    fn the_short_side_keeps_its_exact_length_and_centre() {
        // A full-strength rectangle 112 photo pixels tall and n wide: its input is 28 tall and
        // n/4 wide (not rounded to whole model pixels), centred on the canvas, for every n.
        let long = 112;
        for n in 30..=long {
            let amounts = vec![255; n * long];
            let px = place(
                &amounts,
                n,
                (0, 0, n, long),
                Floor::Knee(0),
                255,
                Fit::Continuous,
            );
            let ink: i64 = px.iter().map(|&v| i64::from(v)).sum();
            let want = 255 * 28 * 28 * n as i64 / long as i64;
            // Only the two edge columns are partly covered: each rounds by at most ½ a level.
            assert!(
                (ink - want).abs() <= 28,
                "width {n}: ink {ink}, exact {want}"
            );
            let moment: i64 = px
                .iter()
                .enumerate()
                .map(|(i, &v)| (i % SIDE) as i64 * i64::from(v))
                .sum();
            let centre = moment as f64 / ink as f64;
            assert!((centre - 13.5).abs() < 0.01, "width {n}: centre {centre}");
        }
        // At the dataset's own resolution, an odd margin puts the extra pixel before the box.
        let img: Vec<u8> = (0..PIXELS)
            .map(|i| if (7..22).contains(&(i % SIDE)) { 90 } else { 0 })
            .collect();
        assert_eq!(analyse(&grey_rgba(&img), SIDE, SIDE).unwrap().pixels, img);
    }

    #[test]
    fn background_level_and_framing_are_removed() {
        let img = dataset_like(40);
        let white = analyse(&photo(&img, 112, 4, 0, 0, 255), 112, 112).unwrap();
        assert_eq!(white.pixels, img, "a white 4× photo is the image itself");
        assert!(white.light_background);
        let want = &img;
        // Off-white backgrounds: the same input up to the rounding of the background scaling.
        for bg in [240, 230, 200] {
            let f = analyse(&photo(&img, 112, 4, 0, 0, bg), 112, 112).unwrap();
            assert_eq!(f.background, [bg as u8; 3]);
            assert!(worst(&f.pixels, want) <= 2, "background {bg}");
        }
        // The object smaller (70 % of the frame, or half) and off-centre: the same input.
        let f = analyse(&photo(&img, 160, 4, 37, 21, 245), 160, 160).unwrap();
        assert_eq!(f.bbox, (37 + 24, 21, 37 + 88, 21 + 112));
        assert!(worst(&f.pixels, want) <= 2, "70 %, shifted");
        let f = analyse(&photo(&img, 112, 2, 50, 3, 250), 112, 112).unwrap();
        assert!(worst(&f.pixels, want) <= 2, "half, shifted");
        // Edge columns fainter than the photo's floor (20 < 24) are left out of a photo's box,
        // but not at the dataset's own resolution (the fringe there).
        let faint = dataset_like(20);
        let f = analyse(&photo(&faint, 112, 4, 0, 0, 255), 112, 112).unwrap();
        assert_eq!(f.bbox, (28, 0, 84, 112));
        assert_eq!(
            analyse(&grey_rgba(&faint), SIDE, SIDE).unwrap().pixels,
            faint
        );
    }

    #[test]
    fn noise_does_not_shrink_the_box_past_faint_edges() {
        // Edge columns at 25 (24 levels below a 240 background): above the photo's floor (22
        // at this range), not above 8 × the noise's MAD. Each pixel alone cannot tell them from
        // noise; their window can.
        let img = dataset_like(25);
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
        assert!(f.noise_level >= 3, "{}", f.noise_level);
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
        let (mut photo, mut without_noise) = (Vec::new(), Vec::new());
        for y in 0..112 {
            for x in 0..112 {
                let v = img[(y / 4) * SIDE + x / 4] as u32;
                for c in bg {
                    let clean = (c * (255 - v) / 255) as i32;
                    photo.push((clean + noise()).clamp(0, 255) as u8);
                    without_noise.push(clean as u8);
                }
                photo.push(255);
                without_noise.push(255);
            }
        }
        let f = analyse(&photo, 112, 112).unwrap();
        assert!(f.light_background);
        assert!(f.noise_level > 0, "the noise is seen");
        for (c, want) in f.background.iter().zip(bg) {
            assert!((*c as i32 - want as i32).abs() <= 2, "{:?}", f.background);
        }
        assert_eq!(f.bbox, (24, 0, 88, 112), "noise does not widen the box");
        // What noise is left after 4×4 averaging and the knee is small: against the
        // same photo without noise (both turned as in step 7, by nearly the same angle).
        let clean = analyse(&without_noise, 112, 112).unwrap().pixels;
        let mean_err = f
            .pixels
            .iter()
            .zip(&clean)
            .map(|(a, b)| (*a as i32 - *b as i32).abs())
            .sum::<i32>() as f64
            / PIXELS as f64;
        assert!(mean_err < 4.0, "{mean_err}");
        // The object's own levels are not lowered by the noise estimate (the knee leaves
        // means above twice the threshold as they are; subtracting it, ~4 levels here).
        let object: Vec<i32> = (0..PIXELS)
            .filter(|&i| clean[i] >= 16)
            .map(|i| f.pixels[i] as i32 - clean[i] as i32)
            .collect();
        let bias = object.iter().sum::<i32>() as f64 / object.len() as f64;
        assert!(bias.abs() < 1.0, "{bias}");
    }

    /// A `side`-pixel photo of a dark dress-like shape (a trapezoid, upright, with a notch at
    /// the top) on white, turned by `degrees` about the photo's centre, 4×4 supersampled.
    fn tilted_shape(side: usize, degrees: f64) -> Vec<u8> {
        tilted_photo(side, degrees, |u, v| {
            // Half-width 0.12 at the top (v = −0.4), 0.3 at the bottom (v = 0.4).
            let half = 0.12 + 0.18 * (v + 0.4) / 0.8;
            let notch = u.abs() < 0.04 && v < -0.3;
            (-0.4..0.4).contains(&v) && u.abs() < half && !notch
        })
    }

    /// The same for a boot-like shape: a shaft standing on a longer foot, whose principal
    /// axis is diagonal, as an ankle boot's is.
    fn tilted_boot(side: usize, degrees: f64) -> Vec<u8> {
        tilted_photo(side, degrees, |u, v| {
            let shaft = (-0.32..-0.04).contains(&u) && (-0.36..0.14).contains(&v);
            let foot = (-0.32..0.39).contains(&u) && (0.07..0.29).contains(&v);
            shaft || foot
        })
    }

    /// A `side`-pixel photo of the shape `inside` (in the photo's frame, −0.5 to 0.5) dark on
    /// white, turned by `degrees` about the photo's centre, 4×4 supersampled.
    fn tilted_photo(side: usize, degrees: f64, inside: impl Fn(f64, f64) -> bool) -> Vec<u8> {
        let (s, c) = degrees.to_radians().sin_cos();
        let mut out = Vec::with_capacity(side * side * 4);
        for y in 0..side {
            for x in 0..side {
                let mut ink = 0.0f64;
                for sy in 0..4 {
                    for sx in 0..4 {
                        let px = (x as f64 + (sx as f64 + 0.5) / 4.0) / side as f64 - 0.5;
                        let py = (y as f64 + (sy as f64 + 0.5) / 4.0) / side as f64 - 0.5;
                        // Back to the shape's own frame.
                        let (u, v) = (c * px + s * py, -s * px + c * py);
                        ink += if inside(u, v) { 1.0 / 16.0 } else { 0.0 };
                    }
                }
                let g = (255.0 - 200.0 * ink).round() as u8;
                out.extend_from_slice(&[g, g, g, 255]);
            }
        }
        out
    }

    fn mean_abs(a: &[u8], b: &[u8]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (*x as i32 - *y as i32).abs() as f64)
            .sum::<f64>()
            / a.len() as f64
    }

    #[test]
    fn a_tilted_photo_is_turned_at_its_own_resolution() {
        use crate::upright::{orientation, upright};
        let level = analyse(&tilted_shape(112, 0.0), 112, 112).unwrap().pixels;
        for degrees in [-9.0, 6.0] {
            let framing = analyse(&tilted_shape(112, degrees), 112, 112).unwrap();
            let tilted = framing.pixels;
            // Nothing (nearly) is left for the model's own step to turn…
            let o = orientation(&tilted).unwrap();
            assert!(o.applied.to_degrees().abs() < 0.1, "{degrees}: {o:?}");
            // …and what the model sees is nearly the level photo's input: closer than turning
            // the 28×28 input itself gets (the input before the turn, which the class model
            // reads; the level photo is not turned at all). Mean absolute difference at −9° /
            // 6°: 11.0 / 9.6 against 12.1 / 19.2 turned at 28×28 (with the short side rounded
            // to whole pixels in step 5: 12.3 / 9.7 against 15.2 / 18.3).
            let before_turn = &framing.class_pixels;
            let tilt = orientation(before_turn).unwrap().applied.to_degrees();
            assert!(
                (tilt.abs() - f64::abs(degrees)).abs() < 1.5,
                "{degrees}: {tilt}"
            );
            let at_28 = upright(before_turn);
            let (now, before) = (
                mean_abs(&upright(&tilted), &upright(&level)),
                mean_abs(&at_28, &upright(&level)),
            );
            assert!(
                now < 0.95 * before && now < 11.5,
                "{degrees}: {now} vs {before} turned at 28×28"
            );
        }
    }

    #[test]
    fn a_tilted_shoe_is_levelled_by_its_base() {
        // Its axis is a diagonal the model's step keeps as the shape; the base is levelled
        // instead, so the model sees (nearly) the level photo's input, and the level photo
        // is (nearly) not turned at all.
        use crate::{base, upright::orientation};
        let level = analyse(&tilted_boot(112, 0.0), 112, 112).unwrap();
        let o = orientation(&level.class_pixels).unwrap();
        assert!(
            o.offset.to_degrees().abs() > crate::upright::TILT_FULL_DEGREES,
            "{o:?}"
        );
        assert!(mean_abs(&level.pixels, &level.class_pixels) < 1.0);
        for degrees in [-9.0, 6.0] {
            let framing = analyse(&tilted_boot(112, degrees), 112, 112).unwrap();
            let before = base::tilt(&framing.class_pixels).unwrap().to_degrees();
            assert!((before - degrees).abs() < 1.5, "{degrees}: {before}");
            let after = base::tilt(&framing.pixels).unwrap().to_degrees();
            assert!(after.abs() < 0.5, "{degrees}: {after}");
            let (now, untouched) = (
                mean_abs(&framing.pixels, &level.pixels),
                mean_abs(&framing.class_pixels, &level.pixels),
            );
            assert!(
                now < 0.5 * untouched,
                "{degrees}: {now} against {untouched}"
            );
        }
    }

    #[test]
    fn a_large_photo_is_turned_like_a_small_one() {
        // The same scenes at 112 and 560 pixels (the turn then works on a copy reduced 5×) and
        // at 2,048: the tilted ones differ across sizes little more than the level ones do
        // (whose inputs differ by the rendering and the box's rounding alone), and every one
        // comes out upright.
        use crate::upright::orientation;
        let input = |side: usize, degrees: f64| {
            analyse(&tilted_shape(side, degrees), side, side)
                .unwrap()
                .pixels
        };
        let level = mean_abs(&input(112, 0.0), &input(560, 0.0));
        let small = input(112, 7.0);
        for side in [560, 2048] {
            let large = input(side, 7.0);
            let tilted = mean_abs(&small, &large);
            assert!(tilted < level + 1.5, "{side}: {tilted} (level: {level})");
            let o = orientation(&large).unwrap();
            assert!(o.applied.to_degrees().abs() < 0.25, "{side}: {o:?}");
        }
    }

    #[test]
    fn a_coloured_garment_reaches_the_model_as_a_black_one() {
        // A garment at full strength somewhere (as every Fashion-MNIST image is), drawn black
        // and in five colours, on white and on beige.
        let mut img = dataset_like(40);
        img[14 * SIDE + 13] = 255;
        img[14 * SIDE + 14] = 255;
        let draw = |bg: [u8; 3], colour: [u8; 3]| -> Vec<u8> {
            let mut out = Vec::with_capacity(112 * 112 * 4);
            for y in 0..112 {
                for x in 0..112 {
                    let v = img[(y / 4) * SIDE + x / 4] as f64 / 255.0;
                    for (b, c) in bg.iter().zip(colour) {
                        let reflect = 1.0 - v * (1.0 - c as f64 / 255.0);
                        out.push((*b as f64 * reflect).round() as u8);
                    }
                    out.push(255);
                }
            }
            out
        };
        for bg in [[255, 255, 255], [240, 228, 205]] {
            let black = analyse(&draw(bg, [0, 0, 0]), 112, 112).unwrap();
            for colour in [
                [200, 30, 40],
                [230, 200, 40],
                [20, 30, 80],
                [40, 140, 60],
                [120, 80, 50],
            ] {
                let f = analyse(&draw(bg, colour), 112, 112).unwrap();
                assert_eq!(f.bbox, black.bbox, "{colour:?}");
                let err = mean_abs(&f.pixels, &black.pixels);
                assert!(err < 2.0, "{bg:?} {colour:?}: {err}");
            }
        }
    }

    #[test]
    fn only_a_garment_of_one_colour_is_read_along_it() {
        // A 60×60 object on white: `paint(x, y)` its colour at full strength there and how
        // much light falls on it.
        let axis = |paint: &dyn Fn(usize, usize) -> ([u8; 3], f64)| {
            let (w, bg) = (80, [255u8; 3]);
            let (mut rgb, mut mask) = (vec![bg; w * w], vec![false; w * w]);
            for y in 10..70 {
                for x in 10..70 {
                    let (c, light) = paint(x, y);
                    rgb[y * w + x] = c.map(|v| (v as f64 * light).round() as u8);
                    mask[y * w + x] = true;
                }
            }
            colour_axis(&rgb, &mask, w, bg, true).is_some()
        };
        let (red, blue, green) = ([200, 30, 40], [30, 60, 170], [40, 140, 60]);
        assert!(axis(&|_, _| (red, 1.0)));
        // Shaded across from full light to 0.55 of it: still one colour.
        assert!(axis(&|x, _| (red, 1.0 - 0.45 * (x - 10) as f64 / 59.0)));
        assert!(axis(&|_, y| (blue, 1.0 - 0.3 * (y - 10) as f64 / 59.0)));
        // Two colours, or three (a pie chart): grey.
        assert!(!axis(&|x, _| (if x < 40 { red } else { blue }, 1.0)));
        assert!(!axis(&|x, y| {
            let c = if y < 30 {
                red
            } else if x < 40 {
                blue
            } else {
                green
            };
            (c, 1.0)
        }));
        // A small label of another colour (a fortieth of it) is within the gate's share.
        assert!(axis(&|x, y| (
            if x < 13 && y < 40 { blue } else { red },
            1.0
        )));
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
