//! Images that are not clothing, generated procedurally as 112×112 RGBA photos: noise,
//! gradients, geometric shapes and text-like lines of glyphs — what the out-of-distribution
//! score must tell apart from product photos.

use rand::Rng;

/// The kinds of non-clothing image.
pub(super) const KINDS: [&str; 4] = ["noise", "gradient", "shapes", "text"];

pub(super) const SIDE: usize = 112;

fn rgba(px: impl Iterator<Item = [u8; 3]>) -> Vec<u8> {
    px.flat_map(|[r, g, b]| [r, g, b, 255]).collect()
}

fn colour(rng: &mut impl Rng) -> [u8; 3] {
    [rng.random(), rng.random(), rng.random()]
}

/// One image of `kind` (an index into [`KINDS`]).
pub(super) fn generate(kind: usize, rng: &mut impl Rng) -> Vec<u8> {
    match kind {
        0 => noise(rng),
        1 => gradient(rng),
        2 => shapes(rng),
        _ => text(rng),
    }
}

/// Per-pixel noise (grey or colour), or smooth noise (a random 4…12-cell grid, bilinear).
fn noise(rng: &mut impl Rng) -> Vec<u8> {
    let grey = rng.random::<bool>();
    if rng.random::<bool>() {
        return rgba((0..SIDE * SIDE).map(|_| {
            if grey {
                [rng.random(); 3].map(|v: u8| v)
            } else {
                colour(rng)
            }
        }));
    }
    let cells = rng.random_range(4..=12usize);
    let grid: Vec<f32> = (0..(cells + 1) * (cells + 1))
        .map(|_| rng.random_range(0.0..255.0))
        .collect();
    let tint = colour(rng);
    rgba((0..SIDE * SIDE).map(|i| {
        let (x, y) = (i % SIDE, i / SIDE);
        let (u, v) = (
            x as f32 * cells as f32 / SIDE as f32,
            y as f32 * cells as f32 / SIDE as f32,
        );
        let (cx, cy) = (u as usize, v as usize);
        let (fx, fy) = (u - cx as f32, v - cy as f32);
        let g = |a: usize, b: usize| grid[b * (cells + 1) + a];
        let val = (1.0 - fy) * ((1.0 - fx) * g(cx, cy) + fx * g(cx + 1, cy))
            + fy * ((1.0 - fx) * g(cx, cy + 1) + fx * g(cx + 1, cy + 1));
        if grey {
            [val as u8; 3]
        } else {
            tint.map(|t| (val * t as f32 / 255.0) as u8)
        }
    }))
}

/// A linear gradient at a random angle, or a radial one, between two random colours.
fn gradient(rng: &mut impl Rng) -> Vec<u8> {
    let (a, b) = (colour(rng), colour(rng));
    let radial = rng.random::<bool>();
    let angle: f32 = rng.random_range(0.0..std::f32::consts::TAU);
    let (cx, cy) = (
        rng.random_range(0.0..SIDE as f32),
        rng.random_range(0.0..SIDE as f32),
    );
    rgba((0..SIDE * SIDE).map(|i| {
        let (x, y) = ((i % SIDE) as f32, (i / SIDE) as f32);
        let t = if radial {
            ((x - cx).hypot(y - cy) / (SIDE as f32 * 1.2)).min(1.0)
        } else {
            let p = (x - SIDE as f32 / 2.0) * angle.cos() + (y - SIDE as f32 / 2.0) * angle.sin();
            (p / SIDE as f32 + 0.5).clamp(0.0, 1.0)
        };
        [0, 1, 2].map(|k| (a[k] as f32 * (1.0 - t) + b[k] as f32 * t) as u8)
    }))
}

/// One to three filled or outlined circles, rectangles and triangles in random colours on a
/// light background.
fn shapes(rng: &mut impl Rng) -> Vec<u8> {
    let bg = [rng.random_range(200..=255u8); 3];
    let mut px = vec![bg; SIDE * SIDE];
    for _ in 0..rng.random_range(1..=3) {
        let c = [
            rng.random_range(0..180u8),
            rng.random_range(0..180u8),
            rng.random_range(0..180u8),
        ];
        let (x0, y0) = (
            rng.random_range(10.0..100.0f32),
            rng.random_range(10.0..100.0f32),
        );
        let r = rng.random_range(10.0..45.0f32);
        let outline = rng.random::<bool>();
        let kind = rng.random_range(0..3);
        let (p1, p2) = (
            (
                rng.random_range(0.0..112.0f32),
                rng.random_range(0.0..112.0f32),
            ),
            (
                rng.random_range(0.0..112.0f32),
                rng.random_range(0.0..112.0f32),
            ),
        );
        for (i, p) in px.iter_mut().enumerate() {
            let (x, y) = ((i % SIDE) as f32 + 0.5, (i / SIDE) as f32 + 0.5);
            // A signed distance-like value: negative inside.
            let d = match kind {
                0 => (x - x0).hypot(y - y0) - r,
                1 => ((x - x0).abs() - r).max((y - y0).abs() - 0.6 * r),
                _ => {
                    let edge = |(ax, ay): (f32, f32), (bx, by): (f32, f32)| {
                        ((bx - ax) * (y - ay) - (by - ay) * (x - ax)).signum()
                    };
                    let s = [edge((x0, y0), p1), edge(p1, p2), edge(p2, (x0, y0))];
                    if s.iter().all(|&v| v >= 0.0) || s.iter().all(|&v| v <= 0.0) {
                        -1.0
                    } else {
                        1.0
                    }
                }
            };
            let inside = if outline && kind < 2 {
                d.abs() < 2.0
            } else {
                d < 0.0
            };
            if inside {
                *p = c;
            }
        }
    }
    rgba(px.into_iter())
}

/// Lines of glyph-like strokes (each glyph two to four strokes in its cell), dark on light.
fn text(rng: &mut impl Rng) -> Vec<u8> {
    let bg = [rng.random_range(210..=255u8); 3];
    let ink = [rng.random_range(0..90u8); 3];
    let mut px = vec![bg; SIDE * SIDE];
    let size = rng.random_range(8..=18usize);
    let lines = rng.random_range(1..=(SIDE - 8) / (size + 4)).min(6);
    let mut strokes = Vec::new();
    for line in 0..lines {
        let top = 6 + line * (size + 4);
        let glyphs = rng.random_range(3..=(SIDE - 12) / (size * 2 / 3 + 1));
        for g in 0..glyphs {
            let left = 6 + g * (size * 2 / 3 + 1);
            for _ in 0..rng.random_range(2..=4) {
                let p = |rng: &mut dyn rand::RngCore| {
                    (
                        left as f32 + rng.random_range(0.0..(size * 2 / 3) as f32),
                        top as f32 + rng.random_range(0.0..size as f32),
                    )
                };
                strokes.push((p(rng), p(rng)));
            }
        }
    }
    let width = (size as f32 / 8.0).max(1.0);
    for ((ax, ay), (bx, by)) in strokes {
        let (x_lo, x_hi) = (ax.min(bx) - width, ax.max(bx) + width);
        let (y_lo, y_hi) = (ay.min(by) - width, ay.max(by) + width);
        for y in (y_lo.max(0.0) as usize)..(y_hi.min(SIDE as f32 - 1.0) as usize + 1) {
            for x in (x_lo.max(0.0) as usize)..(x_hi.min(SIDE as f32 - 1.0) as usize + 1) {
                let (px_, py_) = (x as f32 + 0.5, y as f32 + 0.5);
                let (dx, dy) = (bx - ax, by - ay);
                let len2 = (dx * dx + dy * dy).max(1e-6);
                let t = (((px_ - ax) * dx + (py_ - ay) * dy) / len2).clamp(0.0, 1.0);
                if (px_ - ax - t * dx).hypot(py_ - ay - t * dy) <= width / 2.0 + 0.3 {
                    px[y * SIDE + x] = ink;
                }
            }
        }
    }
    rgba(px.into_iter())
}
