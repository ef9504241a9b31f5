//! The model's 28×28 input turned upright: the object's principal axis rotated onto the
//! nearest image axis, then framed again as the dataset frames its products.
//!
//! Why: a product photographed a few degrees off upright reaches the model as a different
//! input, and even 8° moved the exact 8 nearest of 10,000 gallery images by half (`eval
//! --photos`). Every image the model sees — gallery images, anchors, training images and
//! photos after [`super::photo`] — goes through this step (it is part of
//! [`super::model::preprocess`]), so a photo and a gallery image of the same product at
//! different tilts meet in one orientation.
//!
//! How: the ink's second moments about its centroid give the principal axis at angle `θ`;
//! `φ = ½·atan(2·b / (a − c))` is its offset from the nearest image axis (|φ| ≤ 45°). The
//! image is rotated by `−g·φ` about its centre, where `g` ramps from 0 to 1 as the moments'
//! anisotropy `r = √((a−c)² + 4b²) / (a + c)` goes from [`ANISOTROPY_OFF`] to
//! [`ANISOTROPY_ON`]: for a nearly round object the axis is noise, and turning it would make a
//! small change in the image a large change in the input; and `h` ramps from 1 to 0 as |φ|
//! goes from [`TILT_FULL_DEGREES`] to [`TILT_NONE_DEGREES`]: a large offset is the product's
//! own shape (a shoe's diagonal), not the camera's tilt. The rotation `g·h·φ` is continuous in
//! the image (it is 0 where `φ` wraps at ±45°).
//! Then the rotated ink's box is resampled as in [`super::photo`] (longest side 28,
//! centred), each side rounded to an even size so that a mirror image comes out as the
//! mirror image of the result (the features' mirror invariance rests on it).
//!
//! A photo whose object is larger than 28 pixels has already been turned by this rule at its
//! own resolution ([`super::photo`], step 7, with [`rotate_region`]), so this step finds
//! (nearly) nothing left to turn there: one resampling instead of two.
//!
//! Arithmetic: f64 additions, multiplications, divisions and square roots (exactly rounded
//! under IEEE 754 on every target, and Rust never fuses them), with `atan`, `sin` and `cos`
//! from the series below rather than the platform's libm — so native, wasm and training get
//! the same bytes.

use crate::place::{bounding_box, place, Fit, Floor};
use crate::weights::{PIXELS, SIDE};

/// Below this anisotropy the principal axis is not trusted (no rotation).
pub const ANISOTROPY_OFF: f64 = 0.08;
/// From this anisotropy on the full offset is undone.
pub const ANISOTROPY_ON: f64 = 0.2;
/// Offsets up to this many degrees are undone in full…
pub const TILT_FULL_DEGREES: f64 = 12.0;
/// …and from this many on, not at all (linearly between): sandals, sneakers and ankle boots
/// lie at 10–45° in the dataset itself (the ankle boot's axis is its diagonal), where the
/// tilt is the product's shape, not the camera's, and a turn near ±45° would flip between
/// two inputs. Measured on the test split: 93 % of the other seven classes' offsets are below
/// 5°, 59 % of ankle boots' above 25°; turning them all cost 1 point of test accuracy.
pub const TILT_NONE_DEGREES: f64 = 24.0;
/// Rotated ink at or below this level (of 255) is not part of the new box (bilinear
/// resampling spreads a little ink into the pixels around the object).
const BOX_FLOOR: i32 = 2;
/// Fixed-point scale of the rotated values (so the box resampling rounds once).
pub(crate) const FIX: i32 = 16;

/// The principal axis's offset from the nearest image axis and the rotation applied, for
/// tests and the evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Orientation {
    /// `φ` in radians, in [−π/4, π/4].
    pub offset: f64,
    /// The moments' anisotropy `r` in [0, 1].
    pub anisotropy: f64,
    /// The rotation undone: `g·h·φ` in radians.
    pub applied: f64,
}

/// The principal axis of a 28×28 image's ink (`None` for a blank image).
pub fn orientation(pixels: &[u8]) -> Option<Orientation> {
    debug_assert_eq!(pixels.len(), PIXELS);
    // Moments in integers (exact: at most 784·255 · 27² < 2^28 each, products < 2^56), so a
    // mirror image gets exactly the opposite offset and the features stay mirror-invariant.
    let (mut m, mut sx, mut sy, mut sxx, mut sxy, mut syy) = (0i64, 0i64, 0i64, 0i64, 0i64, 0i64);
    for (i, &p) in pixels.iter().enumerate() {
        let (w, x, y) = (p as i64, (i % SIDE) as i64, (i / SIDE) as i64);
        m += w;
        sx += w * x;
        sy += w * y;
        sxx += w * x * x;
        sxy += w * x * y;
        syy += w * y * y;
    }
    // m² times the central second moments.
    let (a, b, c) = (m * sxx - sx * sx, m * sxy - sx * sy, m * syy - sy * sy);
    if m == 0 || a + c == 0 {
        return None;
    }
    let (a, b, c) = (a as f64, b as f64, c as f64);
    let r = ((a - c) * (a - c) + 4.0 * b * b).sqrt() / (a + c);
    // tan 2φ = 2b / (a − c), 2φ in [−π/2, π/2]: the nearest axis, whichever is the major one.
    let offset = if a == c {
        if b == 0.0 {
            0.0
        } else {
            b.signum() * std::f64::consts::FRAC_PI_4
        }
    } else {
        0.5 * atan(2.0 * b / (a - c))
    };
    let g = ((r - ANISOTROPY_OFF) / (ANISOTROPY_ON - ANISOTROPY_OFF)).clamp(0.0, 1.0);
    let (full, none) = (
        TILT_FULL_DEGREES * std::f64::consts::PI / 180.0,
        TILT_NONE_DEGREES * std::f64::consts::PI / 180.0,
    );
    let h = ((none - offset.abs()) / (none - full)).clamp(0.0, 1.0);
    Some(Orientation {
        offset,
        anisotropy: r,
        applied: g * h * offset,
    })
}

/// The 28×28 image (light object on 0) upright (see the module doc). A blank image, or one
/// whose axis is not trusted, is returned unchanged.
pub fn upright(pixels: &[u8]) -> Vec<u8> {
    debug_assert_eq!(pixels.len(), PIXELS);
    let Some(o) = orientation(pixels) else {
        return pixels.to_vec();
    };
    if o.applied == 0.0 {
        return pixels.to_vec();
    }
    let values: Vec<i32> = pixels.iter().map(|&p| i32::from(p)).collect();
    let (out, side, _) = rotate_region(&values, SIDE, (0, 0, SIDE, SIDE), o.applied, FIX);
    let Some(bbox) = bounding_box(side, side, |x, y| out[y * side + x] > BOX_FLOOR * FIX) else {
        return pixels.to_vec();
    };
    place(
        &out,
        side,
        bbox,
        Floor::Knee(0),
        255 * FIX as i64,
        Fit::EvenSizes,
    )
}

/// The `region` `(x0, y0, x1, y1)` of a `width`-wide image of `values`, rotated by `angle`
/// (radians, |angle| ≤ π/4) about the region's centre so that an axis at `angle` lands on the
/// image axis, into a canvas just holding the rotated region (its centre on the region's):
/// bilinear, 0 outside the region, each value times `scale` and rounded. Returns the canvas and
/// its width and height. f64 arithmetic in a fixed order with the series [`sin_cos`]: the same
/// bytes on every target.
pub(crate) fn rotate_region(
    values: &[i32],
    width: usize,
    (x0, y0, x1, y1): (usize, usize, usize, usize),
    angle: f64,
    scale: i32,
) -> (Vec<i32>, usize, usize) {
    let (sin, cos) = sin_cos(angle);
    let (bw, bh) = ((x1 - x0) as f64, (y1 - y0) as f64);
    let cw = ((bw * cos.abs() + bh * sin.abs()) - 1e-9).ceil() as usize;
    let ch = ((bw * sin.abs() + bh * cos.abs()) - 1e-9).ceil() as usize;
    let (cx_in, cy_in) = (x0 as f64 + bw / 2.0, y0 as f64 + bh / 2.0);
    let (cx_out, cy_out) = (cw as f64 / 2.0, ch as f64 / 2.0);
    let at = |x: i64, y: i64| -> f64 {
        if (x0 as i64..x1 as i64).contains(&x) && (y0 as i64..y1 as i64).contains(&y) {
            values[y as usize * width + x as usize] as f64
        } else {
            0.0
        }
    };
    let mut out = vec![0i32; cw * ch];
    for py in 0..ch {
        for px in 0..cw {
            // Output pixel centre → source position: rotated by the angle, as a position among
            // the source's pixel centres.
            let (dx, dy) = (px as f64 + 0.5 - cx_out, py as f64 + 0.5 - cy_out);
            let u = cos * dx - sin * dy + cx_in - 0.5;
            let v = sin * dx + cos * dy + cy_in - 0.5;
            let (fx0, fy0) = (u.floor(), v.floor());
            let (fx, fy) = (u - fx0, v - fy0);
            let (sx, sy) = (fx0 as i64, fy0 as i64);
            let value = (1.0 - fy) * ((1.0 - fx) * at(sx, sy) + fx * at(sx + 1, sy))
                + fy * ((1.0 - fx) * at(sx, sy + 1) + fx * at(sx + 1, sy + 1));
            out[py * cw + px] = (value * scale as f64).round() as i32;
        }
    }
    (out, cw, ch)
}

/// `atan(t)` for any finite `t`, to about 1e-15: `atan t = π/2·sign t − atan(1/t)` brings
/// |t| ≤ 1, two halvings `atan t = 2·atan(t / (1 + √(1 + t²)))` bring |t| ≤ tan(π/16) < 0.2,
/// then the Taylor series to t²¹.
pub(crate) fn atan(t: f64) -> f64 {
    if t.abs() > 1.0 {
        return std::f64::consts::FRAC_PI_2 * t.signum() - atan(1.0 / t);
    }
    let mut t = t;
    for _ in 0..2 {
        t /= 1.0 + (1.0 + t * t).sqrt();
    }
    let t2 = t * t;
    let mut sum = 0.0;
    let mut k = 21.0;
    while k >= 1.0 {
        // Horner on the alternating series: Σ (−1)^j t^(2j+1) / (2j+1).
        sum = 1.0 / k - t2 * sum;
        k -= 2.0;
    }
    4.0 * t * sum
}

/// `(sin x, cos x)` for |x| ≤ π/4, Taylor series to x¹⁸ (error below 1e-16).
fn sin_cos(x: f64) -> (f64, f64) {
    let x2 = x * x;
    let (mut s, mut c) = (1.0f64, 1.0f64);
    // Horner from the highest term: sin = x(1 − x²/(2·3)(1 − x²/(4·5)(…))).
    for k in (1..=9).rev() {
        let k = k as f64;
        s = 1.0 - x2 / ((2.0 * k) * (2.0 * k + 1.0)) * s;
        c = 1.0 - x2 / ((2.0 * k - 1.0) * (2.0 * k)) * c;
    }
    (x * s, c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_match_libm() {
        for i in -400..=400 {
            let t = i as f64 / 37.0;
            assert!((atan(t) - t.atan()).abs() < 1e-14, "atan {t}");
        }
        for i in -100..=100 {
            let x = i as f64 / 100.0 * std::f64::consts::FRAC_PI_4;
            let (s, c) = sin_cos(x);
            assert!(
                (s - x.sin()).abs() < 1e-15 && (c - x.cos()).abs() < 1e-15,
                "{x}"
            );
        }
    }

    /// A bar of `len`×`thick` pixels at `degrees` from vertical, centred, level 200.
    fn bar(len: f64, thick: f64, degrees: f64) -> Vec<u8> {
        let (s, c) = (degrees.to_radians().sin(), degrees.to_radians().cos());
        (0..PIXELS)
            .map(|i| {
                let (x, y) = (
                    (i % SIDE) as f64 + 0.5 - 14.0,
                    (i / SIDE) as f64 + 0.5 - 14.0,
                );
                // Coordinates along and across the bar.
                let (along, across) = (s * x + c * y, c * x - s * y);
                if along.abs() <= len / 2.0 && across.abs() <= thick / 2.0 {
                    200
                } else {
                    0
                }
            })
            .collect()
    }

    #[test]
    fn a_tilted_bar_is_turned_upright() {
        for deg in [-12.0, -6.0, 4.0, 10.0] {
            let o = orientation(&bar(22.0, 6.0, deg)).unwrap();
            assert!(o.anisotropy > ANISOTROPY_ON);
            // Image y points down: a bar at +deg from vertical (clockwise on screen) has its
            // axis offset by −deg in these coordinates.
            assert!((o.applied.to_degrees() + deg).abs() < 1.5, "{deg}: {:?}", o);
            let up = upright(&bar(22.0, 6.0, deg));
            let after = orientation(&up).unwrap();
            assert!(after.offset.to_degrees().abs() < 1.5, "{deg}: {after:?}");
        }
    }

    #[test]
    fn a_product_s_own_diagonal_is_left_alone() {
        // 30° (past TILT_NONE_DEGREES): the shape's own; 18°: half turned back.
        let o = orientation(&bar(22.0, 6.0, 30.0)).unwrap();
        assert_eq!(o.applied, 0.0);
        assert_eq!(upright(&bar(22.0, 6.0, 30.0)), bar(22.0, 6.0, 30.0));
        let o = orientation(&bar(22.0, 6.0, 18.0)).unwrap();
        assert!((o.applied / o.offset - 0.5).abs() < 0.15, "{o:?}");
    }

    #[test]
    fn a_mirror_image_gets_the_mirrored_result() {
        for deg in [-9.0, 7.0] {
            let img = bar(20.0, 7.0, deg);
            let mirrored: Vec<u8> = img
                .chunks_exact(SIDE)
                .flat_map(|row| row.iter().rev().copied())
                .collect();
            let (o, om) = (orientation(&img).unwrap(), orientation(&mirrored).unwrap());
            assert_eq!(o.applied, -om.applied);
            let back: Vec<u8> = upright(&mirrored)
                .chunks_exact(SIDE)
                .flat_map(|row| row.iter().rev().copied())
                .collect();
            let diff = back
                .iter()
                .zip(upright(&img))
                .filter(|(x, y)| **x != *y)
                .count();
            assert!(diff <= 4, "{deg}: {diff} pixels differ");
        }
    }

    #[test]
    fn upright_and_round_images_are_unchanged() {
        let upright_bar = bar(24.0, 8.0, 0.0);
        assert_eq!(upright(&upright_bar), upright_bar);
        // A disc: no trusted axis.
        let disc: Vec<u8> = (0..PIXELS)
            .map(|i| {
                let (x, y) = ((i % SIDE) as f64 - 13.5, (i / SIDE) as f64 - 13.5);
                if x * x + y * y <= 100.0 {
                    180
                } else {
                    0
                }
            })
            .collect();
        assert_eq!(upright(&disc), disc);
        assert_eq!(upright(&[0u8; PIXELS]), vec![0u8; PIXELS]);
    }

    #[test]
    fn tilts_of_one_image_meet() {
        // The same bar at −8° and +8°: once upright, the inputs nearly agree.
        let (a, b) = (
            upright(&bar(22.0, 7.0, -8.0)),
            upright(&bar(22.0, 7.0, 8.0)),
        );
        let diff: i32 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (*x as i32 - *y as i32).abs())
            .sum();
        let before: i32 = bar(22.0, 7.0, -8.0)
            .iter()
            .zip(&bar(22.0, 7.0, 8.0))
            .map(|(x, y)| (*x as i32 - *y as i32).abs())
            .sum();
        assert!(diff * 3 < before, "{diff} vs {before}");
    }
}
