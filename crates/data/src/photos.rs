//! Fashion-MNIST images drawn as product photos: a dark object on a light background, at some
//! scale, shift and rotation, with sensor noise. Training augments with these (through the
//! client's own photo pipeline, `embed::photo`), and `eval --photos` measures the
//! pipeline and the model on them, so both use one definition of the perturbation family.

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
}

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
        }
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
        }
    }
}

/// The photo of the 28×28 dataset image `img` (light object on 0) as RGBA, grey in every
/// channel, opaque. Bilinear sampling of the image; outside it is background. `rng` draws the
/// noise only.
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
    let bg = shot.background as f32;
    let mut out = Vec::with_capacity(n * n * 4);
    for py in 0..n {
        for px in 0..n {
            // The photo pixel's centre, relative to the frame's centre, rotated back and in
            // dataset pixels; then as a position among the dataset's pixel centres.
            let (dx, dy) = (px as f32 + 0.5 - cx, py as f32 + 0.5 - cy);
            let u = (cos * dx + sin * dy) / px_per + SIDE as f32 / 2.0 - 0.5;
            let v = (-sin * dx + cos * dy) / px_per + SIDE as f32 / 2.0 - 0.5;
            let (x0, y0) = (u.floor(), v.floor());
            let (fx, fy) = (u - x0, v - y0);
            let (x0, y0) = (x0 as i32, y0 as i32);
            let value = (1.0 - fy) * ((1.0 - fx) * at(x0, y0) + fx * at(x0 + 1, y0))
                + fy * ((1.0 - fx) * at(x0, y0 + 1) + fx * at(x0 + 1, y0 + 1));
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
