//! Fashion-MNIST images drawn as product photos: a dark object on a light background, at some
//! scale, shift and rotation, with sensor noise — and, as people take them, under light that
//! falls unevenly, with a soft shadow beside the garment, a coloured garment, or a garment cut
//! by the frame's edge ([`Shot::uneven_light`], [`Shot::shadowed`], [`Shot::coloured`],
//! [`Shot::cut`]). Training augments with these (through the
//! client's own photo pipeline, `embed::photo`), and `eval --photos` measures the
//! pipeline and the model on them, so both use one definition of the perturbation family.

use std::ops::RangeInclusive;

use embed::model::SIDE;
use rand::Rng;

/// How one photo is taken.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shot {
    /// Width and height of the photo, in pixels.
    pub side: usize,
    /// Background grey level (the object's reflectance scales it: a dataset value `v` is drawn
    /// as `background·(255 − v)/255`).
    pub background: u8,
    /// The dataset's 28×28 frame as a fraction of the photo's side (1.0: the frame fills it).
    pub scale: f32,
    /// Shift of the frame's centre, as fractions of the photo's side (right, down).
    pub shift: (f32, f32),
    /// Rotation about the frame's centre, in degrees (counter-clockwise).
    pub degrees: f32,
    /// Standard deviation of additive Gaussian noise, in grey levels.
    pub noise: f32,
    /// Light falling unevenly across the frame: the share of it lost from the frame's near
    /// side to its far side (linearly; 0: even light), along `light_degrees`.
    pub light_fall: f32,
    /// The direction the light falls along, in degrees (0: it dims to the right).
    pub light_degrees: f32,
    /// A soft shadow the garment casts beside itself.
    pub shadow: Option<Shadow>,
    /// The garment's colour at full strength (`None`: black, as the dataset draws it).
    pub colour: Option<[u8; 3]>,
}

/// A soft shadow: the garment's silhouette moved by `offset` (fractions of the photo's side,
/// right and down), blurred (a Gaussian of standard deviation `blur` of the side), taking
/// `darkness` of the light where it is full; it falls on the background, not the garment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shadow {
    pub offset: (f32, f32),
    pub blur: f32,
    pub darkness: f32,
}

impl Shadow {
    /// A shadow as a lamp to one side makes: offset 3–6 % of the side in any direction,
    /// blur 4–6 %, darkness 15–35 %.
    pub fn random(rng: &mut impl Rng) -> Self {
        Shadow::drawn(rng, 0.03..=0.06, 0.04..=0.06, 0.15..=0.35)
    }

    /// A shadow in any direction, its offset's length, blur and darkness drawn from these
    /// ranges (in that order, after the direction).
    fn drawn(
        rng: &mut impl Rng,
        offset: RangeInclusive<f32>,
        blur: RangeInclusive<f32>,
        darkness: RangeInclusive<f32>,
    ) -> Self {
        let (s, c) = rng.random_range(0.0f32..360.0).to_radians().sin_cos();
        let d = rng.random_range(offset);
        Shadow {
            offset: (c * d, s * d),
            blur: rng.random_range(blur),
            darkness: rng.random_range(darkness),
        }
    }
}

/// Garment colours for [`Shot::colour`]: saturated and muted, light and dark.
pub const COLOURS: [[u8; 3]; 10] = [
    [200, 30, 40],   // red
    [30, 60, 170],   // blue
    [20, 30, 80],    // navy
    [40, 140, 60],   // green
    [230, 200, 40],  // yellow
    [240, 130, 30],  // orange
    [120, 50, 140],  // purple
    [230, 120, 160], // pink
    [30, 140, 140],  // teal
    [120, 80, 50],   // brown
];

impl Shot {
    /// The clean photo: white, the frame filling the photo, no shift, rotation or noise.
    pub const fn clean(side: usize) -> Self {
        Shot {
            side,
            background: 255,
            scale: 1.0,
            shift: (0.0, 0.0),
            degrees: 0.0,
            noise: 0.0,
            light_fall: 0.0,
            light_degrees: 0.0,
            shadow: None,
            colour: None,
        }
    }

    /// Light falling unevenly across the clean photo: 20–40 % lost across the frame, in any
    /// direction.
    pub fn uneven_light(side: usize, rng: &mut impl Rng) -> Self {
        Shot {
            light_fall: rng.random_range(0.2..=0.4),
            light_degrees: rng.random_range(0.0..360.0),
            ..Shot::clean(side)
        }
    }

    /// The clean photo with a soft shadow beside the garment ([`Shadow::random`]), the
    /// garment at 0.8–0.9 of the frame so the shadow falls on the background.
    pub fn shadowed(side: usize, rng: &mut impl Rng) -> Self {
        Shot {
            scale: rng.random_range(0.8..=0.9),
            shadow: Some(Shadow::random(rng)),
            ..Shot::clean(side)
        }
    }

    /// The clean photo of a coloured garment (one of [`COLOURS`]).
    pub fn coloured(side: usize, rng: &mut impl Rng) -> Self {
        Shot {
            colour: Some(COLOURS[rng.random_range(0..COLOURS.len())]),
            ..Shot::clean(side)
        }
    }

    /// The garment of `img` at 0.7–0.9 of the frame, cut by one of the frame's edges (drawn)
    /// by 10–15 % of its extent across that edge, and inside the frame with a margin along the
    /// other axis. The garment's extent is the box of its pixels of at least 32.
    pub fn cut(img: &[u8], side: usize, rng: &mut impl Rng) -> Self {
        let scale = rng.random_range(0.7f32..=0.9);
        let cut = rng.random_range(0.10f32..=0.15);
        let edge = rng.random_range(0..4);
        let (mut u0, mut u1, mut v0, mut v1) = (SIDE, 0, SIDE, 0);
        for (i, &p) in img.iter().enumerate() {
            if p >= 32 {
                let (x, y) = (i % SIDE, i / SIDE);
                (u0, u1, v0, v1) = (u0.min(x), u1.max(x + 1), v0.min(y), v1.max(y + 1));
            }
        }
        if u0 >= u1 {
            (u0, u1, v0, v1) = (0, SIDE, 0, SIDE);
        }
        // Photo position of dataset coordinate u (pixel edges) = side·(½ + shift) + (u − 14)·ppd.
        let k = scale / SIDE as f32;
        let half = SIDE as f32 / 2.0;
        let (a0, a1, b0, b1) = if edge < 2 {
            (u0, u1, v0, v1)
        } else {
            (v0, v1, u0, u1)
        };
        let (a0, a1, b0, b1) = (a0 as f32, a1 as f32, b0 as f32, b1 as f32);
        let w = a1 - a0;
        let along = if edge % 2 == 0 {
            // The near edge (left or top) at a0 + cut·w.
            -0.5 - (a0 + cut * w - half) * k
        } else {
            0.5 - (a1 - cut * w - half) * k
        };
        let m = 0.03;
        let (lo, hi) = (m - 0.5 - (b0 - half) * k, 0.5 - m - (b1 - half) * k);
        let across = if lo < hi {
            rng.random_range(lo..=hi)
        } else {
            (lo + hi) / 2.0
        };
        Shot {
            scale,
            shift: if edge < 2 {
                (along, across)
            } else {
                (across, along)
            },
            ..Shot::clean(side)
        }
    }

    /// `self` with what people's photos add to it, for training: each of a soft shadow, light
    /// falling across the frame and a garment of one colour, with chance `p` each. Drawn wider
    /// than the evaluation's conditions ([`Shot::shadowed`], [`Shot::uneven_light`],
    /// [`Shot::coloured`]), so a model trained on them learns the kind, not the evaluation's
    /// ranges: the shadow offset 0–8 % of the side, blur 2–8 %, darkness 10–45 %; the light
    /// falling 0–50 %; the colour any whose darkest channel is at most 160 of 255 (a paler one
    /// barely shows on white), not [`COLOURS`]. With `p` = 0 nothing is drawn from `rng`.
    pub fn as_people_take_them(self, p: f32, rng: &mut impl Rng) -> Self {
        if p <= 0.0 {
            return self;
        }
        let mut shot = self;
        if rng.random::<f32>() < p {
            shot.shadow = Some(Shadow::drawn(rng, 0.0..=0.08, 0.02..=0.08, 0.10..=0.45));
        }
        if rng.random::<f32>() < p {
            shot.light_fall = rng.random_range(0.0..=0.5);
            shot.light_degrees = rng.random_range(0.0..360.0);
        }
        if rng.random::<f32>() < p {
            let mut colour = [0u8; 3];
            colour
                .iter_mut()
                .for_each(|ch| *ch = rng.random_range(0..=230));
            let darkest = rng.random_range(0..3);
            colour[darkest] = colour[darkest].min(160);
            shot.colour = Some(colour);
        }
        shot
    }

    /// A random member of the family the issue names: background 200–255, shifts up to 10 %,
    /// scale 0.7–1.0, rotations up to 10°, Gaussian noise σ = 5.
    pub fn random(side: usize, rng: &mut impl Rng) -> Self {
        Shot {
            side,
            background: rng.random_range(200..=255),
            scale: rng.random_range(0.7..=1.0),
            shift: (rng.random_range(-0.1..=0.1), rng.random_range(-0.1..=0.1)),
            degrees: rng.random_range(-10.0..=10.0),
            noise: 5.0,
            ..Shot::clean(side)
        }
    }
}

/// The photo of the 28×28 dataset image `img` (light object on 0) as RGBA, opaque: grey in
/// every channel unless the garment is coloured. Bilinear sampling of the image; outside it is
/// background; then the light, the shadow and the colour the shot names. `rng` draws the
/// noise only (one draw a pixel, as before those were added: a shot without them gives the
/// same photo as it did).
pub fn render(img: &[u8], shot: &Shot, rng: &mut impl Rng) -> Vec<u8> {
    let n = shot.side;
    let half = n as f32 / 2.0;
    let px_per = shot.scale * n as f32 / SIDE as f32;
    let (sin, cos) = shot.degrees.to_radians().sin_cos();
    let (cx, cy) = (
        half + shot.shift.0 * n as f32,
        half + shot.shift.1 * n as f32,
    );
    let at = |x: i32, y: i32| -> f32 {
        if (0..SIDE as i32).contains(&x) && (0..SIDE as i32).contains(&y) {
            img[y as usize * SIDE + x as usize] as f32
        } else {
            0.0
        }
    };
    // The dataset's value at a photo pixel's centre: relative to the frame's centre, rotated
    // back and in dataset pixels; then as a position among the dataset's pixel centres.
    let value_at = |px: usize, py: usize| -> f32 {
        let (dx, dy) = (px as f32 + 0.5 - cx, py as f32 + 0.5 - cy);
        let u = (cos * dx + sin * dy) / px_per + SIDE as f32 / 2.0 - 0.5;
        let v = (-sin * dx + cos * dy) / px_per + SIDE as f32 / 2.0 - 0.5;
        let (x0, y0) = (u.floor(), v.floor());
        let (fx, fy) = (u - x0, v - y0);
        let (x0, y0) = (x0 as i32, y0 as i32);
        (1.0 - fy) * ((1.0 - fx) * at(x0, y0) + fx * at(x0 + 1, y0))
            + fy * ((1.0 - fx) * at(x0, y0 + 1) + fx * at(x0 + 1, y0 + 1))
    };
    let bg = shot.background as f32;
    let plain = shot.light_fall == 0.0 && shot.shadow.is_none() && shot.colour.is_none();
    let values: Vec<f32> = (0..n * n).map(|i| value_at(i % n, i / n)).collect();
    let shadow = shot.shadow.map(|s| shadow_map(&values, n, &s));
    let (ls, lc) = shot.light_degrees.to_radians().sin_cos();
    let mut out = Vec::with_capacity(n * n * 4);
    for py in 0..n {
        for px in 0..n {
            let value = values[py * n + px];
            if !plain {
                // Light: full on the near side, `light_fall` less on the far side.
                let along =
                    (lc * (px as f32 + 0.5) + ls * (py as f32 + 0.5)) / n as f32 - (lc + ls) / 2.0;
                let light = 1.0 - shot.light_fall * (0.5 + along).clamp(0.0, 1.0);
                // The shadow falls on the background, not on the garment (covering it from
                // 16 levels up).
                let cover = (value / 16.0).min(1.0);
                let shade = shadow.as_ref().map_or(1.0, |s| s[py * n + px]);
                let lit = bg * light * (cover + (1.0 - cover) * shade);
                let colour = shot.colour.unwrap_or([0, 0, 0]);
                let noise = if shot.noise > 0.0 {
                    shot.noise * gaussian(rng)
                } else {
                    0.0
                };
                // Each channel reflects the garment's colour where it is full strength.
                let p = colour.map(|ch| {
                    let reflect = 1.0 - value / 255.0 * (1.0 - ch as f32 / 255.0);
                    (lit * reflect + noise).round().clamp(0.0, 255.0) as u8
                });
                out.extend_from_slice(&[p[0], p[1], p[2], 255]);
                continue;
            }
            let mut g = bg * (255.0 - value) / 255.0;
            if shot.noise > 0.0 {
                g += shot.noise * gaussian(rng);
            }
            let g = g.round().clamp(0.0, 255.0) as u8;
            out.extend_from_slice(&[g, g, g, 255]);
        }
    }
    out
}

/// The light left by `shadow` at each of the `n × n` photo pixels: the garment's silhouette
/// (its values, full from 32 up) moved and blurred (separable Gaussian, cut at 3σ).
fn shadow_map(values: &[f32], n: usize, shadow: &Shadow) -> Vec<f32> {
    let sigma = (shadow.blur * n as f32).max(0.5);
    let r = (3.0 * sigma).ceil() as i32;
    let kernel: Vec<f32> = (-r..=r)
        .map(|d| (-(d * d) as f32 / (2.0 * sigma * sigma)).exp())
        .collect();
    let total: f32 = kernel.iter().sum();
    let (ox, oy) = (
        (shadow.offset.0 * n as f32).round() as i32,
        (shadow.offset.1 * n as f32).round() as i32,
    );
    let at = |x: i32, y: i32| -> f32 {
        let (sx, sy) = (x - ox, y - oy);
        if (0..n as i32).contains(&sx) && (0..n as i32).contains(&sy) {
            (values[sy as usize * n + sx as usize] / 32.0).min(1.0)
        } else {
            0.0
        }
    };
    let blur = |get: &dyn Fn(i32, i32) -> f32, horizontal: bool| -> Vec<f32> {
        (0..n * n)
            .map(|i| {
                let (x, y) = ((i % n) as i32, (i / n) as i32);
                kernel
                    .iter()
                    .zip(-r..=r)
                    .map(|(k, d)| {
                        k * if horizontal {
                            get(x + d, y)
                        } else {
                            get(x, y + d)
                        }
                    })
                    .sum::<f32>()
                    / total
            })
            .collect()
    };
    let across = blur(&at, true);
    let get = |x: i32, y: i32| -> f32 {
        if (0..n as i32).contains(&x) && (0..n as i32).contains(&y) {
            across[y as usize * n + x as usize]
        } else {
            0.0
        }
    };
    blur(&get, false)
        .into_iter()
        .map(|s| 1.0 - shadow.darkness * s)
        .collect()
}

/// A standard normal draw (Box–Muller).
fn gaussian(rng: &mut impl Rng) -> f32 {
    let u1: f32 = rng.random_range(f32::EPSILON..1.0);
    let u2: f32 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// Training's draw of people's conditions: none drawn (nor any randomness used) at
    /// chance 0, all three within their stated ranges at chance 1.
    #[test]
    fn people_s_conditions_are_drawn_within_their_ranges() {
        let base = Shot::random(112, &mut rand_chacha::ChaCha8Rng::seed_from_u64(2));
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        assert_eq!(base.as_people_take_them(0.0, &mut rng), base);
        assert_eq!(rng.random::<u64>(), {
            let mut fresh = rand_chacha::ChaCha8Rng::seed_from_u64(3);
            fresh.random::<u64>()
        });
        for _ in 0..500 {
            let shot = base.as_people_take_them(1.0, &mut rng);
            let s = shot.shadow.expect("a shadow at chance 1");
            let d = (s.offset.0 * s.offset.0 + s.offset.1 * s.offset.1).sqrt();
            assert!(d <= 0.08 + 1e-6, "{d}");
            assert!((0.02..=0.08).contains(&s.blur) && (0.10..=0.45).contains(&s.darkness));
            assert!((0.0..=0.5).contains(&shot.light_fall));
            let c = shot.colour.expect("a colour at chance 1");
            assert!(c.iter().all(|&ch| ch <= 230) && *c.iter().min().unwrap() <= 160);
            // Nothing else of the shot changes.
            let without = Shot {
                shadow: None,
                light_fall: 0.0,
                light_degrees: 0.0,
                colour: None,
                ..shot
            };
            assert_eq!(without, base);
        }
    }

    #[test]
    fn the_clean_photo_is_the_image_through_the_pipeline() {
        // A dataset-like image: box 28 tall, centred.
        let img: Vec<u8> = (0..SIDE * SIDE)
            .map(|i| {
                if (8..20).contains(&(i % SIDE)) {
                    200
                } else {
                    0
                }
            })
            .collect();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let photo = render(&img, &Shot::clean(112), &mut rng);
        let back = embed::photo::to_model_input(&photo, 112, 112).unwrap();
        let diff: i32 = back
            .iter()
            .zip(&img)
            .map(|(a, b)| (*a as i32 - *b as i32).abs())
            .sum();
        // Bilinear upsampling blurs the object's two vertical edges only.
        assert!(diff <= 2 * 28 * 120, "{diff}");
        assert_eq!(back[14 * SIDE + 14], 200);
        assert_eq!(back[14 * SIDE + 2], 0);
    }
}
