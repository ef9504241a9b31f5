//! The learned part of the familiarity check (`super::ood::assess`): a small network that
//! tells a garment's model input from anything else's, fitted on clothing against a family of
//! generated non-garments written for fitting only (`data::not_garments`), never on the
//! held-out kinds it is measured on (`data::not_clothing`).
//!
//! It reads what the client already has for every photo: the 28×28 model input
//! ([`shape_inputs`]: ink, the box's aspect and fill, how flat and how symmetric the object
//! is, its edges, holes and parts, how wide it is at the top, middle and bottom, and its 7×7
//! block means — the silhouette a garment has and a mug, a car, a pie chart or a face does not),
//! the familiarity model's unit features and its layer means
//! ([`crate::ood::familiarity_model`]). One hidden layer of rectified units
//! (exact in f32 on every platform: additions and multiplications in a fixed order, no
//! transcendental function), one output; a photo is unlike a garment when the output exceeds
//! [`crate::detector_weights::THRESHOLD`].
//!
//! The weights (`detector_weights.rs`) are constants of the client, written by the committed,
//! deterministic command in `crates/train/src/bin/fit_detector.rs` (docs/model.md) and never
//! by CI; the server sends none of them, so it cannot move the decision. They belong to the
//! familiarity model they were fitted with, or their threshold set with
//! ([`crate::detector_weights::FAMILIARITY_MODEL`]): refit them, or set the threshold again,
//! whenever it or the photo pipeline changes (a unit test of `ood` fails otherwise).

use crate::detector_weights as w;
use crate::weights::{PIXELS, SIDE};
use shared::error::{Error, Result};

/// How many values [`shape_inputs`] gives.
pub const SHAPE_INPUTS: usize = 15 + 49;

// The constants state their input count as a number (they import nothing); it must be ours.
const _: () = assert!(w::INPUTS == SHAPE_INPUTS + w::FEATURES + w::LAYERS);

/// A pixel of the model input counts as the object's above this level.
const OBJECT: u8 = 32;

/// The shape descriptors of a 28×28 model input (the object light on 0), each about 0..1 or
/// a log-ratio. An empty input gives zeros.
pub fn shape_inputs(pixels: &[u8]) -> Result<[f32; SHAPE_INPUTS]> {
    if pixels.len() != PIXELS {
        return Err(Error::DimensionMismatch {
            what: "model input pixels",
            expected: PIXELS,
            got: pixels.len(),
        });
    }
    let mut out = [0.0f32; SHAPE_INPUTS];
    let p = |x: usize, y: usize| f32::from(pixels[y * SIDE + x]);
    let obj = |x: usize, y: usize| pixels[y * SIDE + x] > OBJECT;
    let ink: f32 = pixels.iter().map(|&v| f32::from(v)).sum();
    let n = pixels.iter().filter(|&&v| v > OBJECT).count();
    // The 7×7 block means come last, whatever the object.
    for by in 0..7 {
        for bx in 0..7 {
            let mut s = 0.0f32;
            for y in 4 * by..4 * by + 4 {
                for x in 4 * bx..4 * bx + 4 {
                    s += p(x, y);
                }
            }
            out[15 + by * 7 + bx] = s / (16.0 * 255.0);
        }
    }
    if n == 0 || ink <= 0.0 {
        return Ok(out);
    }
    let (mut x0, mut y0, mut x1, mut y1) = (SIDE, SIDE, 0, 0);
    for y in 0..SIDE {
        for x in 0..SIDE {
            if obj(x, y) {
                x0 = x0.min(x);
                y0 = y0.min(y);
                x1 = x1.max(x + 1);
                y1 = y1.max(y + 1);
            }
        }
    }
    let (bw, bh) = ((x1 - x0) as f32, (y1 - y0) as f32);
    let mut levels: Vec<u8> = pixels.iter().copied().filter(|&v| v > OBJECT).collect();
    levels.sort_unstable();
    let median = levels[levels.len() / 2];
    let nf = n as f32;
    let mean = levels.iter().map(|&v| f32::from(v)).sum::<f32>() / nf;
    let var = levels
        .iter()
        .map(|&v| (f32::from(v) - mean) * (f32::from(v) - mean))
        .sum::<f32>()
        / nf;
    let flat = levels
        .iter()
        .filter(|&&v| (i32::from(v) - i32::from(median)).abs() <= 12)
        .count() as f32
        / nf;
    let (mut lr, mut tb, mut edge) = (0.0f32, 0.0f32, 0.0f32);
    for y in 0..SIDE {
        for x in 0..SIDE {
            lr += (p(x, y) - p(SIDE - 1 - x, y)).abs();
            tb += (p(x, y) - p(x, SIDE - 1 - y)).abs();
            if x + 1 < SIDE {
                edge += (p(x + 1, y) - p(x, y)).abs();
            }
            if y + 1 < SIDE {
                edge += (p(x, y + 1) - p(x, y)).abs();
            }
        }
    }
    // Holes: background cells of the box not reachable from the box's rim; parts: the largest
    // 4-connected part of the object.
    let inside = |x: usize, y: usize| (x0..x1).contains(&x) && (y0..y1).contains(&y);
    let mut outside = vec![false; PIXELS];
    let mut stack: Vec<(usize, usize)> = Vec::new();
    for y in y0..y1 {
        for x in x0..x1 {
            if (x == x0 || y == y0 || x + 1 == x1 || y + 1 == y1) && !obj(x, y) {
                outside[y * SIDE + x] = true;
                stack.push((x, y));
            }
        }
    }
    let neighbours = |x: usize, y: usize| {
        [
            (x.wrapping_sub(1), y),
            (x + 1, y),
            (x, y.wrapping_sub(1)),
            (x, y + 1),
        ]
    };
    while let Some((x, y)) = stack.pop() {
        for (a, b) in neighbours(x, y) {
            if inside(a, b) && !obj(a, b) && !outside[b * SIDE + a] {
                outside[b * SIDE + a] = true;
                stack.push((a, b));
            }
        }
    }
    let box_cells = (x1 - x0) * (y1 - y0);
    let holes = box_cells - n - outside.iter().filter(|&&o| o).count();
    let mut seen = vec![false; PIXELS];
    let mut largest = 0usize;
    for start in 0..PIXELS {
        let (sx, sy) = (start % SIDE, start / SIDE);
        if seen[start] || !obj(sx, sy) {
            continue;
        }
        seen[start] = true;
        stack.push((sx, sy));
        let mut size = 0;
        while let Some((x, y)) = stack.pop() {
            size += 1;
            for (a, b) in neighbours(x, y) {
                if a < SIDE && b < SIDE && obj(a, b) && !seen[b * SIDE + a] {
                    seen[b * SIDE + a] = true;
                    stack.push((a, b));
                }
            }
        }
        largest = largest.max(size);
    }
    // Widths (object cells a row) in the box's top, middle and bottom thirds.
    let third = |k: usize| {
        let (a, b) = (
            y0 + (y1 - y0) * k / 3,
            (y0 + (y1 - y0) * (k + 1) / 3).max(y0 + (y1 - y0) * k / 3 + 1),
        );
        let cells = (a..b.min(y1))
            .map(|y| (0..SIDE).filter(|&x| obj(x, y)).count())
            .sum::<usize>();
        (cells as f32 / (b.min(y1) - a).max(1) as f32).max(0.5)
    };
    let (top, mid, bottom) = (third(0), third(1), third(2));
    out[0] = ink / (PIXELS as f32 * 255.0);
    out[1] = nf / PIXELS as f32;
    out[2] = (bw / bh).ln();
    out[3] = nf / (bw * bh);
    out[4] = mean / 255.0;
    out[5] = var.sqrt() / 255.0;
    out[6] = flat;
    out[7] = lr / (2.0 * ink);
    out[8] = tb / (2.0 * ink);
    out[9] = edge / ink;
    out[10] = holes as f32 / box_cells as f32;
    out[11] = largest as f32 / nf;
    out[12] = (top / mid).ln();
    out[13] = (bottom / mid).ln();
    out[14] = (bw.max(bh) / SIDE as f32).min(1.0);
    Ok(out)
}

/// The detector's whole input: [`shape_inputs`], the unit `features` and the `layer_means`,
/// in that order. Lengths other than the fitted ones, and non-finite values, are typed errors.
pub fn inputs(pixels: &[u8], features: &[f32], layer_means: &[f32]) -> Result<Vec<f32>> {
    if features.len() != w::FEATURES || layer_means.len() != w::LAYERS {
        return Err(Error::DimensionMismatch {
            what: "detector inputs (features and layer means)",
            expected: w::FEATURES + w::LAYERS,
            got: features.len() + layer_means.len(),
        });
    }
    if features.iter().chain(layer_means).any(|v| !v.is_finite()) {
        return Err(Error::NonFinite {
            what: "features or layer means",
        });
    }
    let mut x = shape_inputs(pixels)?.to_vec();
    x.extend_from_slice(features);
    x.extend_from_slice(layer_means);
    Ok(x)
}

/// A network of the detector's shape: standardise (`(x − mean)·scale`), one hidden layer of
/// rectified units, one output. The first layer is stored compactly (a quarter of f32's bytes
/// in the page's wasm): each hidden unit's weights as signed bytes and one f32 scale
/// ([`quantize`]). What [`output`] runs with the committed constants and what the fitting
/// command sets its threshold with.
#[derive(Debug, Clone, PartialEq)]
pub struct Net<'a> {
    pub mean: &'a [f32],
    pub scale: &'a [f32],
    /// Hidden × inputs, row-major, in units of the row's `w1_scale`.
    pub w1: &'a [i8],
    /// Each hidden unit's weight per unit of `w1`.
    pub w1_scale: &'a [f32],
    pub b1: &'a [f32],
    pub w2: &'a [f32],
    pub b2: f32,
}

impl Net<'_> {
    /// The output for an input `x` of the fitted length (higher: less like a garment).
    pub fn run(&self, x: &[f32]) -> f32 {
        let z: Vec<f32> = x
            .iter()
            .zip(self.mean)
            .zip(self.scale)
            .map(|((v, m), s)| (v - m) * s)
            .collect();
        let mut out = self.b2;
        for (h, row) in self.w1.chunks_exact(z.len()).enumerate() {
            let dot = row
                .iter()
                .zip(&z)
                .fold(0.0f32, |s, (&w, v)| s + f32::from(w) * v);
            let a = self.b1[h] + self.w1_scale[h] * dot;
            out += self.w2[h] * a.max(0.0);
        }
        out
    }
}

/// A hidden × `inputs` first layer (row-major f32) as [`Net`] stores it: each row scaled so
/// its largest magnitude is 127 and rounded to the nearest integer, with the row's scale
/// (largest magnitude / 127; 0 for a row of zeros). Each weight moves by at most half its
/// row's scale.
pub fn quantize(w1: &[f32], inputs: usize) -> (Vec<i8>, Vec<f32>) {
    let (mut q, mut scales) = (Vec::with_capacity(w1.len()), Vec::new());
    for row in w1.chunks_exact(inputs) {
        let top = row.iter().fold(0.0f32, |m, w| m.max(w.abs()));
        let s = top / 127.0;
        scales.push(s);
        q.extend(row.iter().map(|&w| {
            if s > 0.0 {
                (w / s).round().clamp(-127.0, 127.0) as i8
            } else {
                0
            }
        }));
    }
    (q, scales)
}

/// The committed network (statics: the arrays are too large to copy into every use).
pub static NET: Net<'static> = Net {
    mean: &w::MEAN,
    scale: &w::SCALE,
    w1: &w::W1,
    w1_scale: &w::W1_SCALE,
    b1: &w::B1,
    w2: &w::W2,
    b2: w::B2,
};

/// The committed detector's output for a photo's model input, features and layer means.
pub fn output(pixels: &[u8], features: &[f32], layer_means: &[f32]) -> Result<f32> {
    Ok(NET.run(&inputs(pixels, features, layer_means)?))
}

/// Whether the committed detector calls the input unlike a garment
/// ([`output`] above [`crate::detector_weights::THRESHOLD`]).
pub fn unlike_a_garment(pixels: &[u8], features: &[f32], layer_means: &[f32]) -> Result<bool> {
    Ok(output(pixels, features, layer_means)? > w::THRESHOLD)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_inputs_see_a_filled_box_and_an_outline() {
        let mut filled = vec![0u8; PIXELS];
        let mut ring = vec![0u8; PIXELS];
        for y in 4..24 {
            for x in 8..20 {
                filled[y * SIDE + x] = 200;
                if x == 8 || x == 19 || y == 4 || y == 23 {
                    ring[y * SIDE + x] = 200;
                }
            }
        }
        let f = shape_inputs(&filled).unwrap();
        let r = shape_inputs(&ring).unwrap();
        assert!((f[3] - 1.0).abs() < 1e-6, "a filled box fills its box");
        assert!(f[10] == 0.0 && r[10] > 0.5, "the outline has a hole");
        assert!((f[2] - (12.0f32 / 20.0).ln()).abs() < 1e-6, "aspect");
        assert!(f[6] == 1.0, "one flat level");
        assert!(f[7] < 1e-6, "mirror-symmetric");
        assert!(r[9] > f[9], "an outline is more edge");
        assert_eq!(shape_inputs(&[0u8; PIXELS]).unwrap(), [0.0; SHAPE_INPUTS]);
        assert!(shape_inputs(&[0u8; 10]).is_err());
    }

    #[test]
    fn quantized_weights_stay_within_half_a_step() {
        let w1: Vec<f32> = (0..24)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.013)
            .collect();
        let (q, s) = quantize(&w1, 8);
        assert_eq!((q.len(), s.len()), (24, 3));
        for (h, row) in w1.chunks_exact(8).enumerate() {
            assert!(q[h * 8..(h + 1) * 8].iter().any(|v| v.abs() == 127));
            for (j, w) in row.iter().enumerate() {
                let back = f32::from(q[h * 8 + j]) * s[h];
                assert!((back - w).abs() <= 0.5 * s[h] + 1e-7, "{w} → {back}");
            }
        }
        assert_eq!(quantize(&[0.0; 4], 4), (vec![0; 4], vec![0.0]));
        // The network reads the stored rows as their weights.
        let (mean, scale, b1, w2) = ([0.0f32; 8], [1.0f32; 8], [0.1f32; 3], [1.0f32; 3]);
        let net = Net {
            mean: &mean,
            scale: &scale,
            w1: &q,
            w1_scale: &s,
            b1: &b1,
            w2: &w2,
            b2: 0.5,
        };
        let x: Vec<f32> = (0..8).map(|i| i as f32 * 0.25).collect();
        let want = 0.5
            + w1.chunks_exact(8)
                .map(|row| (0.1 + row.iter().zip(&x).map(|(w, v)| w * v).sum::<f32>()).max(0.0))
                .sum::<f32>();
        assert!(
            (net.run(&x) - want).abs() < 0.01,
            "{} vs {want}",
            net.run(&x)
        );
    }

    #[test]
    fn bad_lengths_and_values_are_typed_errors() {
        let px = [0u8; PIXELS];
        assert!(inputs(&px, &[0.0; 3], &[0.0; 3]).is_err());
        let (f, l) = (vec![0.0f32; w::FEATURES], vec![0.0f32; w::LAYERS]);
        assert_eq!(inputs(&px, &f, &l).unwrap().len(), w::INPUTS);
        let mut nan = f.clone();
        nan[0] = f32::NAN;
        assert!(inputs(&px, &nan, &l).is_err());
    }
}
