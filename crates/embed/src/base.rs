//! The tilt of the line an object stands on, for the photo pipeline's turn
//! ([`super::photo`], step 7).
//!
//! Why: the principal-axis turn ([`super::upright`]) leaves an object whose axis lies 12–45°
//! off the image axes as it is, or only partly turned — for sandals, sneakers and ankle boots
//! that diagonal is the product's shape, and the gallery model was trained with it left alone.
//! So a shoe photographed 10° off level reached the query model 10° off (or, in the partial
//! turn's ramp, up to three times that), and its exact top 8 over 10,000 gallery images kept
//! 0.31 of the level photo's (ankle boots, `eval --photos`, without this step). But the dataset
//! photographs every such product standing on its sole, level: the **base** — the edge of the
//! object's lower convex hull, the line it would rest on — is a cue a tilt moves and the shape
//! does not. Levelling it turns a tilted shoe back to where the dataset (and the gallery)
//! has it, and leaves a level one (nearly) alone, so a clean photo still finds the gallery's
//! own neighbours.
//!
//! How: on the 28×28 input (light object on 0), each column's lowest pixel above [`INK`], at
//! the sub-pixel depth where the column's ink ends (the pixel's row, plus its own level and
//! the level of the pixel below it, each of 255: exact for a sharp edge, and as exact in the
//! input's last row, where no pixel lies below); the lower convex hull of those points; its
//! longest edge within [`MAX_DEGREES`] of level and spanning at least [`MIN_SPAN`] of the
//! points' width. Exact integer arithmetic up to the one division and
//! series arctangent of the result, so a mirror image gets exactly the opposite tilt and
//! native, wasm and training get the same bytes.

use crate::weights::{PIXELS, SIDE};

/// A column's lowest pixel brighter than this (of 255) is its bottom: fainter pixels are the
/// object's anti-aliased rim, which noise and resampling move.
pub const INK: u8 = 64;
/// The base's edge spans at least this share of the object's bottom width (a toe's or a
/// heel's short facet is not a base)…
pub const MIN_SPAN: f64 = 0.25;
/// …and lies within this many degrees of level (a steeper edge is a side, not a base; the
/// tilts undone are the camera's, up to 10° in the evaluation).
pub const MAX_DEGREES: f64 = 15.0;

/// The tilt of the object's base in radians, in the convention of
/// [`super::upright::Orientation::offset`] (image y pointing down: `atan` of the base's slope),
/// so that [`super::upright::rotate_region`] by it levels the base. `None` when no edge of the
/// lower hull qualifies (fewer than three columns hold ink, the bottom is rounded or steep),
/// or when two equally long edges tilt by exactly opposite angles (a symmetric bottom has no
/// tilt to take: `None` keeps the mirror image's answer the mirror of this one's).
///
/// Arithmetic: points are integers (x in half pixels, depth in 510ths of a pixel), the hull's
/// turn tests are exact in i64, and the slope is one f64 division, so the hull of a mirror
/// image is exactly the mirror of this one's.
pub fn tilt(pixels: &[u8]) -> Option<f64> {
    debug_assert_eq!(pixels.len(), PIXELS);
    // (2x + 1, 510·y + 2·level + 2·below): the pixel's centre, and where its column's ink
    // ends — a sharp edge a share f down a pixel leaves that pixel at 255·f (or a full pixel
    // and the one below at 255·f). Why not the pixel's middle plus the level below: the
    // framing puts an object's lowest ink in the input's last row, where nothing lies below,
    // so a tilted hem's bottom run read as level and a garment turned 10° was not turned back
    // (held-out photos turned ±10°: 0.801 → 0.805 of the exact top 8, the whole family
    // 0.789 → 0.797 over five draws, `eval --photos`).
    let points: Vec<(i64, i64)> = (0..SIDE)
        .filter_map(|x| {
            let y = (0..SIDE).rev().find(|&y| pixels[y * SIDE + x] > INK)?;
            let below = if y + 1 < SIDE {
                i64::from(pixels[(y + 1) * SIDE + x])
            } else {
                0
            };
            let level = i64::from(pixels[y * SIDE + x]);
            Some((2 * x as i64 + 1, 510 * y as i64 + 2 * level + 2 * below))
        })
        .collect();
    if points.len() < 3 {
        return None;
    }
    let width = points[points.len() - 1].0 - points[0].0;
    // The hull below the points (image y down: the chain every point lies above), left to
    // right; collinear points are dropped, so the hull is unique and mirrors exactly.
    let cross = |o: (i64, i64), a: (i64, i64), b: (i64, i64)| {
        (a.0 - o.0) * (b.1 - o.1) - (a.1 - o.1) * (b.0 - o.0)
    };
    let mut hull: Vec<(i64, i64)> = Vec::with_capacity(points.len());
    for &p in &points {
        while hull.len() >= 2 && cross(hull[hull.len() - 2], hull[hull.len() - 1], p) >= 0 {
            hull.pop();
        }
        hull.push(p);
    }
    let limit = MAX_DEGREES * std::f64::consts::PI / 180.0;
    // (span, angle) of the longest qualifying edge, and whether an equally long one tilts
    // the exactly opposite way.
    let mut best: Option<(i64, f64)> = None;
    let mut opposed = false;
    for e in hull.windows(2) {
        let (dx, dy) = (e[1].0 - e[0].0, e[1].1 - e[0].1);
        if (dx as f64) < MIN_SPAN * width as f64 {
            continue;
        }
        // Depth is in 510ths of a pixel and x in halves: slope = dy / (255·dx).
        let angle = super::upright::atan(dy as f64 / (255 * dx) as f64);
        if angle.abs() > limit {
            continue;
        }
        match best {
            Some((span, a)) if span == dx => {
                if angle == -a && angle != 0.0 {
                    opposed = true;
                } else if angle.abs() < a.abs() {
                    (best, opposed) = (Some((dx, angle)), false);
                }
            }
            Some((span, _)) if span > dx => {}
            _ => (best, opposed) = (Some((dx, angle)), false),
        }
    }
    match best {
        Some((_, angle)) if !opposed => Some(angle),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A boot-like silhouette (a shaft standing on a longer foot, level 200 with an
    /// anti-aliased rim, 4×4 supersampled) turned by `degrees` about the centre (image y
    /// down: positive turns clockwise on screen), `mirrored` left–right.
    fn boot(degrees: f64, mirrored: bool) -> Vec<u8> {
        let (s, c) = degrees.to_radians().sin_cos();
        let inside = |u: f64, v: f64| {
            let u = if mirrored { -u } else { u };
            let shaft = (-9.0..-1.0).contains(&u) && (-10.0..4.0).contains(&v);
            let foot = (-9.0..11.0).contains(&u) && (2.0..8.0).contains(&v);
            shaft || foot
        };
        (0..PIXELS)
            .map(|i| {
                let mut ink = 0.0f64;
                for k in 0..16 {
                    let x = (i % SIDE) as f64 + (k % 4) as f64 / 4.0 + 0.125 - 14.0;
                    let y = (i / SIDE) as f64 + (k / 4) as f64 / 4.0 + 0.125 - 14.0;
                    // Back to the boot's own frame.
                    let (u, v) = (c * x + s * y, -s * x + c * y);
                    ink += if inside(u, v) { 200.0 / 16.0 } else { 0.0 };
                }
                ink.round() as u8
            })
            .collect()
    }

    /// A garment-like slab (a quarter of the width short of its height) photographed dark on
    /// white at 112 pixels, turned by `degrees`, and framed by the photo pipeline: the input
    /// before its turn (`Framing::class_pixels`), where the framing has put the slab's lowest
    /// ink in the last row.
    fn slab_photo(degrees: f64) -> Vec<u8> {
        const N: usize = 112;
        let (s, c) = degrees.to_radians().sin_cos();
        let rgba: Vec<u8> = (0..N * N)
            .flat_map(|i| {
                let mut dark = 0.0f64;
                for k in 0..16 {
                    let x = (i % N) as f64 + (k % 4) as f64 / 4.0 + 0.125 - 56.0;
                    let y = (i / N) as f64 + (k / 4) as f64 / 4.0 + 0.125 - 56.0;
                    let (u, v) = (c * x + s * y, -s * x + c * y);
                    if u.abs() < 30.0 && v.abs() < 40.0 {
                        dark += 1.0 / 16.0;
                    }
                }
                let g = (255.0 - 215.0 * dark).round() as u8;
                [g, g, g, 255]
            })
            .collect();
        crate::photo::analyse(&rgba, N, N).unwrap().class_pixels
    }

    #[test]
    fn a_tilted_base_is_measured() {
        // Level: (nearly) no tilt.
        let level = tilt(&boot(0.0, false)).unwrap();
        assert!(level.to_degrees().abs() < 1.0, "{}", level.to_degrees());
        for degrees in [-10.0, -6.0, 4.0, 9.0] {
            let t = tilt(&boot(degrees, false)).unwrap().to_degrees();
            // Turned clockwise on screen by `degrees`, the base's slope (y down) is
            // tan(degrees), and `rotate_region` by that angle levels it.
            assert!((t - degrees).abs() < 1.5, "{degrees}: {t}");
        }
    }

    /// Within half a degree, where the framing puts the base in the last row (the pixel's
    /// middle plus the level below as the depth read 5.7° for 4° here).
    #[test]
    fn a_base_in_the_last_row_is_measured() {
        for degrees in [-12.0, -10.0, -7.0, 0.0, 4.0, 10.0, 12.0] {
            let img = slab_photo(degrees);
            // The framing's placement: ink in the last row, none below the image.
            assert!(
                img[(SIDE - 1) * SIDE..].iter().any(|&p| p > INK),
                "{degrees}"
            );
            let t = tilt(&img).unwrap().to_degrees();
            assert!((t - degrees).abs() < 0.5, "{degrees}: {t}");
        }
    }

    #[test]
    fn a_mirror_image_has_exactly_the_opposite_tilt() {
        for degrees in [-7.0, 0.0, 3.0, 8.5] {
            let (a, b) = (boot(degrees, false), boot(-degrees, true));
            // The renderings are exact mirror images of each other…
            let mirror: Vec<u8> = b
                .chunks_exact(SIDE)
                .flat_map(|r| r.iter().rev().copied())
                .collect();
            assert_eq!(a, mirror);
            // …and so are their tilts, bit for bit.
            assert_eq!(tilt(&a).map(|t| -t), tilt(&b), "{degrees}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
        /// Any input: a tilt within the stated bound or none, and a mirror image's exactly
        /// the opposite (the features' mirror invariance rests on it).
        #[test]
        fn any_input_has_a_bounded_mirrored_tilt(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), PIXELS),
        ) {
            // Sparse ink (a fifth of the pixels down to one in fifty), so the hulls vary.
            let floor = 200 + bytes[0] % 50;
            let img: Vec<u8> = bytes.iter().map(|&b| if b > floor { b } else { 0 }).collect();
            let mirror: Vec<u8> = img
                .chunks_exact(SIDE)
                .flat_map(|r| r.iter().rev().copied())
                .collect();
            let t = tilt(&img);
            if let Some(a) = t {
                proptest::prop_assert!(a.abs() <= MAX_DEGREES.to_radians() + 1e-12, "{a}");
            }
            proptest::prop_assert_eq!(tilt(&mirror), t.map(|a| -a));
        }
    }

    #[test]
    fn a_symmetric_v_has_no_tilt() {
        // Bottoms on two edges of exactly opposite slope and equal span (columns 5–13 and
        // 14–22), every other column's above them: no tilt to take, whichever edge comes first.
        let mut img = vec![0u8; PIXELS];
        for x in 5..=22 {
            let bottom = match x {
                5 | 22 => 20,
                9 | 18 => 21,
                13 | 14 => 22,
                _ => 19,
            };
            for y in 6..=bottom {
                img[y * SIDE + x] = 255;
            }
        }
        assert_eq!(tilt(&img), None);
        // With its first column lowered to the bottom, the left edge is level and the
        // longest: that is the base.
        for y in 21..=22 {
            img[y * SIDE + 5] = 255;
        }
        assert_eq!(tilt(&img), Some(0.0));
    }

    #[test]
    fn no_base_no_tilt() {
        assert_eq!(tilt(&[0; PIXELS]), None);
        // A single column, and a diamond (its lower edges are 45° steep).
        let mut column = vec![0u8; PIXELS];
        for y in 4..24 {
            column[y * SIDE + 14] = 255;
        }
        assert_eq!(tilt(&column), None);
        let diamond: Vec<u8> = (0..PIXELS)
            .map(|i| {
                let (x, y) = ((i % SIDE) as i32 - 14, (i / SIDE) as i32 - 14);
                if x.abs() + y.abs() <= 10 {
                    255
                } else {
                    0
                }
            })
            .collect();
        assert_eq!(tilt(&diamond), None);
    }
}
