//! Placing an object in the model's 28×28 frame: its bounding box, resampled by exact area
//! averaging (integer arithmetic, the same bytes on every platform), the noise of each mean
//! removed. The photo pipeline ([`crate::photo`]) and the model's upright step
//! ([`crate::upright`]) both frame with it.

use crate::weights::{PIXELS, SIDE};

/// How [`place`] removes the noise left in a mean: its threshold (3σ of a mean's noise, in the
/// same units as the amounts; 0 on a clean photo, where both are the identity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Floor {
    /// 0 up to the threshold, `2·(mean − threshold)` up to twice it, unchanged above: the noise
    /// around the object goes while the object's own levels stay as in the clean photo.
    /// `range` maps to 255.
    Knee(i64),
    /// The threshold subtracted from every mean (a soft threshold), `range − threshold` mapping
    /// to 255: what the class model was trained on.
    Subtract(i64),
}

/// How [`place`] sizes the resampled box.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    /// The short side keeps its exact length (`n·28/long` model pixels, not rounded) and the box
    /// is centred exactly: a continuous function of the box, so a box a photo pixel wider
    /// squeezes the input by a fraction of a model pixel rather than flipping its width by a
    /// whole one. At the dataset's own resolution (`long ≤ 28`) an odd margin puts the extra
    /// pixel before the box, as the dataset does (blended linearly between whole sizes), so a
    /// dataset image comes back unchanged. Measured against rounding the short side to whole
    /// pixels (`eval --photos`): whole-family top-8 agreement 0.625 → 0.639 (0.633
    /// → 0.653 on a second draw of the family), and a clean photo of a gallery image finds that
    /// image first for 0.919 of 2,000 (0.888 before); with the dataset's rounding of the margin
    /// kept for photos too, 0.624 and 0.882 (second draw).
    Continuous,
    /// Each side rounded to the nearest even size (ties up, at least 2) and centred, so the box
    /// sits in the middle and a mirror image is placed as the mirror image ([`crate::upright`]).
    EvenSizes,
}

/// Steps 5–6 on any image of amounts (difference from the background, towards the object):
/// the box `(x0, y0, x1, y1)` resampled by exact area averaging so its longest side is 28
/// (aspect kept), sized as `fit` says, on a 0 canvas; each mean's noise removed as `floor`
/// says (its threshold taken over the share of the pixel the box covers) and the result scaled
/// so the rest of `range` maps to 255. Integer arithmetic throughout.
pub(crate) fn place(
    amounts: &[i32],
    width: usize,
    (x0, y0, x1, y1): (usize, usize, usize, usize),
    floor: Floor,
    range: i64,
    fit: Fit,
) -> Vec<u8> {
    let (bw, bh) = (x1 - x0, y1 - y0);
    let long = bw.max(bh);
    let axis = |n: usize| match fit {
        Fit::Continuous => continuous_weights(n, long),
        Fit::EvenSizes => {
            // The nearest even size (ties up), at least 2.
            let t = (2 * ((n * SIDE + long) / (2 * long))).clamp(2, SIDE);
            let mut ws = vec![Vec::new(); SIDE];
            for (k, w) in area_weights(n, t).into_iter().enumerate() {
                ws[(SIDE - t) / 2 + k] = w;
            }
            (ws, n as i64)
        }
    };
    let ((wx, dx), (wy, dy)) = (axis(bw), axis(bh));
    // Horizontal pass: each box row → 28 weighted sums.
    let mut rows = vec![0i64; bh * SIDE];
    for y in 0..bh {
        let src = &amounts[(y0 + y) * width + x0..(y0 + y) * width + x1];
        for (t, ws) in wx.iter().enumerate() {
            rows[y * SIDE + t] = ws.iter().map(|&(s, w)| w * i64::from(src[s])).sum();
        }
    }
    let covered = |ws: &[(usize, i64)]| ws.iter().map(|&(_, w)| w).sum::<i64>();
    let cover_x: Vec<i64> = wx.iter().map(|ws| covered(ws)).collect();
    let (threshold, top) = match floor {
        Floor::Knee(t) => (t, range),
        Floor::Subtract(t) => (t.min(range - 1), range - t.min(range - 1)),
    };
    let scale = top * dx * dy;
    let mut pixels = vec![0u8; PIXELS];
    for (ty, ws) in wy.iter().enumerate() {
        let cover_y = covered(ws);
        for tx in 0..SIDE {
            let num: i64 = ws.iter().map(|&(s, w)| w * rows[s * SIDE + tx]).sum();
            let t = threshold * cover_x[tx] * cover_y;
            let num = match floor {
                // 0 up to the threshold, stretched back onto itself up to twice it.
                Floor::Knee(_) if num <= t => 0,
                Floor::Knee(_) if num < 2 * t => 2 * (num - t),
                Floor::Knee(_) => num,
                Floor::Subtract(_) => num - t,
            };
            let v = (num * 255 + scale / 2).div_euclid(scale);
            pixels[ty * SIDE + tx] = v.clamp(0, 255) as u8;
        }
    }
    pixels
}

/// [`Fit::Continuous`] along one axis: for each of the 28 target pixels, the source pixels it
/// covers and the overlap, in units of `1/(2·long)` of a target pixel (a whole target pixel
/// is `2·long`: the second value). Each source pixel spans `28/long` target pixels (56 units);
/// the `n` of them start at `m/2` for the margin `m = 28 − n·28/long`, or, when `long ≤ 28`,
/// at `m/2 + tri(m)`, where `tri(m)` (half the distance of `m` from the nearest even number:
/// 0 for an even margin, ½ for an odd one) is the dataset's extra pixel before the box, made
/// continuous. Exact: every boundary is a whole number of units.
fn continuous_weights(n: usize, long: usize) -> (Vec<Vec<(usize, i64)>>, i64) {
    let (n, d) = (n as i64, 2 * long as i64);
    let span = 2 * SIDE as i64;
    let margin = span * (long as i64 - n);
    let start = if long > SIDE {
        margin / 2
    } else {
        let nearest_even = (margin + d).div_euclid(2 * d) * 2 * d;
        margin / 2 + (margin - nearest_even).abs() / 2
    };
    let ws = (0..SIDE as i64)
        .map(|t| {
            let (lo, hi) = (t * d, (t + 1) * d);
            let first = (lo - start).div_euclid(span).max(0);
            let last = (hi - start).div_euclid(span).min(n - 1);
            (first..=last)
                .filter_map(|s| {
                    let a = start + s * span;
                    let w = hi.min(a + span) - lo.max(a);
                    (w > 0).then_some((s as usize, w))
                })
                .collect()
        })
        .collect();
    (ws, d)
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

/// Exact area weights of resampling `n` source pixels to `t` target pixels: for each target
/// pixel, the source pixels it covers and the overlap in units of `1/t` of a source pixel
/// (each target's weights sum to `n`).
fn area_weights(n: usize, t: usize) -> Vec<Vec<(usize, i64)>> {
    (0..t)
        .map(|k| {
            let (lo, hi) = (k * n, (k + 1) * n);
            (lo / t..hi.div_ceil(t))
                .filter_map(|s| {
                    let w = hi.min((s + 1) * t).saturating_sub(lo.max(s * t));
                    (w > 0).then_some((s, w as i64))
                })
                .collect()
        })
        .collect()
}
