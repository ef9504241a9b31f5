//! Held-out images that are not clothing, drawn procedurally at camera-like sizes (200–640
//! pixels a side, colour): what the familiarity check (`embed::ood`) is **measured** on and
//! never fitted or calibrated on. Eight kinds ([`KINDS`]): typed documents, drawn faces and
//! stick people, landscapes, household objects, vehicles, line drawings, charts and
//! screenshots. Each image is a pure function of its kind and seed ([`generate`]), so the
//! models suite and the evaluation draw the same set without downloading or committing any.
//!
//! The check's own calibration family is different: `eval --photos` generates noise,
//! gradients, geometric shapes and lines of glyph-like strokes at 112 pixels
//! (`eval/src/photos/ood.rs`); none of the kinds here is drawn by that code, and the check's
//! parameters are fitted on Fashion-MNIST's training images only.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The kinds, in the order [`generate`] takes them.
pub const KINDS: [&str; 8] = [
    "document",
    "face or people",
    "landscape",
    "household object",
    "vehicle",
    "line drawing",
    "chart",
    "screenshot",
];

/// A generated image: RGBA, row-major, opaque.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub rgba: Vec<u8>,
    pub width: usize,
    pub height: usize,
}

/// The image of kind `kind` (an index into [`KINDS`]) and `seed`. Deterministic.
pub fn generate(kind: usize, seed: u64) -> Image {
    let mut rng = ChaCha8Rng::seed_from_u64(0x6e6f_7463_6c6f_7468 ^ (kind as u64) << 48 ^ seed);
    let (w, h) = (rng.random_range(200..=640), rng.random_range(200..=640));
    let mut c = Canvas::new(w, h);
    match kind % KINDS.len() {
        0 => document(&mut c, &mut rng),
        1 => people(&mut c, &mut rng),
        2 => landscape(&mut c, &mut rng),
        3 => household(&mut c, &mut rng),
        4 => vehicle(&mut c, &mut rng),
        5 => line_drawing(&mut c, &mut rng),
        6 => chart(&mut c, &mut rng),
        _ => screenshot(&mut c, &mut rng),
    }
    // A camera's sensor noise, mild.
    let sigma = rng.random_range(0.0..4.0f32);
    c.finish(sigma, &mut rng)
}

type Rgb = [f32; 3];

struct Canvas {
    w: usize,
    h: usize,
    px: Vec<Rgb>,
}

fn rgb(rng: &mut impl Rng) -> Rgb {
    [
        rng.random_range(0.0..255.0),
        rng.random_range(0.0..255.0),
        rng.random_range(0.0..255.0),
    ]
}

fn light(rng: &mut impl Rng) -> Rgb {
    let base = rng.random_range(215.0..255.0f32);
    [0, 1, 2].map(|_| (base + rng.random_range(-10.0..10.0f32)).clamp(0.0, 255.0))
}

fn dark(rng: &mut impl Rng) -> Rgb {
    let base = rng.random_range(0.0..90.0f32);
    [0, 1, 2].map(|_| (base + rng.random_range(-15.0..15.0f32)).clamp(0.0, 255.0))
}

fn mix(a: Rgb, b: Rgb, t: f32) -> Rgb {
    [0, 1, 2].map(|k| a[k] * (1.0 - t) + b[k] * t)
}

impl Canvas {
    fn new(w: usize, h: usize) -> Self {
        Canvas {
            w,
            h,
            px: vec![[255.0; 3]; w * h],
        }
    }

    fn finish(self, sigma: f32, rng: &mut impl Rng) -> Image {
        let mut rgba = Vec::with_capacity(self.w * self.h * 4);
        for p in &self.px {
            for v in p {
                let n = if sigma > 0.0 {
                    sigma * gaussian(rng)
                } else {
                    0.0
                };
                rgba.push((v + n).round().clamp(0.0, 255.0) as u8);
            }
            rgba.push(255);
        }
        Image {
            rgba,
            width: self.w,
            height: self.h,
        }
    }

    /// Paints every pixel whose centre `inside(x, y)` holds, within the box `(x0, y0, x1, y1)`.
    fn paint(
        &mut self,
        bbox: (f32, f32, f32, f32),
        colour: Rgb,
        inside: impl Fn(f32, f32) -> bool,
    ) {
        let x0 = bbox.0.max(0.0) as usize;
        let y0 = bbox.1.max(0.0) as usize;
        let x1 = (bbox.2.max(0.0).ceil() as usize).min(self.w);
        let y1 = (bbox.3.max(0.0).ceil() as usize).min(self.h);
        for y in y0..y1 {
            for x in x0..x1 {
                if inside(x as f32 + 0.5, y as f32 + 0.5) {
                    self.px[y * self.w + x] = colour;
                }
            }
        }
    }

    fn fill(&mut self, colour: Rgb) {
        self.px.fill(colour);
    }

    /// A vertical gradient over the rows `y0..y1`.
    fn vgradient(&mut self, y0: f32, y1: f32, top: Rgb, bottom: Rgb) {
        let (a, b) = (y0.max(0.0) as usize, (y1.max(0.0) as usize).min(self.h));
        for y in a..b {
            let c = mix(top, bottom, (y as f32 - y0) / (y1 - y0).max(1.0));
            self.px[y * self.w..(y + 1) * self.w].fill(c);
        }
    }

    fn rect(&mut self, x: f32, y: f32, w: f32, h: f32, colour: Rgb) {
        self.paint((x, y, x + w, y + h), colour, |_, _| true);
    }

    fn frame(&mut self, x: f32, y: f32, w: f32, h: f32, t: f32, colour: Rgb) {
        self.rect(x, y, w, t, colour);
        self.rect(x, y + h - t, w, t, colour);
        self.rect(x, y, t, h, colour);
        self.rect(x + w - t, y, t, h, colour);
    }

    fn ellipse(&mut self, cx: f32, cy: f32, rx: f32, ry: f32, colour: Rgb) {
        self.paint((cx - rx, cy - ry, cx + rx, cy + ry), colour, |x, y| {
            ((x - cx) / rx).powi(2) + ((y - cy) / ry).powi(2) <= 1.0
        });
    }

    fn ring(&mut self, cx: f32, cy: f32, r: f32, t: f32, colour: Rgb) {
        self.paint((cx - r, cy - r, cx + r, cy + r), colour, |x, y| {
            let d = (x - cx).hypot(y - cy);
            d <= r && d >= r - t
        });
    }

    fn line(&mut self, a: (f32, f32), b: (f32, f32), t: f32, colour: Rgb) {
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let len2 = (dx * dx + dy * dy).max(1e-6);
        let r = t / 2.0;
        self.paint(
            (
                a.0.min(b.0) - r,
                a.1.min(b.1) - r,
                a.0.max(b.0) + r,
                a.1.max(b.1) + r,
            ),
            colour,
            |x, y| {
                let s = (((x - a.0) * dx + (y - a.1) * dy) / len2).clamp(0.0, 1.0);
                (x - a.0 - s * dx).hypot(y - a.1 - s * dy) <= r
            },
        );
    }

    fn polyline(&mut self, pts: &[(f32, f32)], t: f32, colour: Rgb) {
        pts.windows(2)
            .for_each(|p| self.line(p[0], p[1], t, colour));
    }

    /// A filled polygon (even–odd rule).
    fn polygon(&mut self, pts: &[(f32, f32)], colour: Rgb) {
        let x0 = pts.iter().map(|p| p.0).fold(f32::INFINITY, f32::min);
        let y0 = pts.iter().map(|p| p.1).fold(f32::INFINITY, f32::min);
        let x1 = pts.iter().map(|p| p.0).fold(f32::NEG_INFINITY, f32::max);
        let y1 = pts.iter().map(|p| p.1).fold(f32::NEG_INFINITY, f32::max);
        self.paint((x0, y0, x1, y1), colour, |x, y| {
            let mut inside = false;
            let n = pts.len();
            for i in 0..n {
                let (a, b) = (pts[i], pts[(i + 1) % n]);
                if (a.1 > y) != (b.1 > y) && x < a.0 + (y - a.1) * (b.0 - a.0) / (b.1 - a.1) {
                    inside = !inside;
                }
            }
            inside
        });
    }

    /// A line of text of `chars` characters, each `size` tall, from `(x, y)` (top left): a
    /// character is some of a 14-segment display's strokes, words split by spaces.
    fn text(&mut self, x: f32, y: f32, size: f32, chars: usize, colour: Rgb, rng: &mut impl Rng) {
        let cw = size * 0.6;
        let t = (size / 9.0).max(1.0);
        let mut cx = x;
        for _ in 0..chars {
            if cx + cw > self.w as f32 {
                break;
            }
            if rng.random_range(0..6) == 0 {
                cx += cw;
                continue;
            }
            let (l, r, top, mid, bot) = (cx, cx + cw * 0.8, y, y + size / 2.0, y + size);
            let segs = [
                ((l, top), (r, top)),
                ((l, mid), (r, mid)),
                ((l, bot), (r, bot)),
                ((l, top), (l, mid)),
                ((l, mid), (l, bot)),
                ((r, top), (r, mid)),
                ((r, mid), (r, bot)),
                ((l, top), (r, bot)),
                ((r, top), (l, bot)),
                (((l + r) / 2.0, top), ((l + r) / 2.0, bot)),
            ];
            let mut drawn = 0;
            for s in &segs {
                if rng.random_range(0..10) < 4 {
                    self.line(s.0, s.1, t, colour);
                    drawn += 1;
                }
            }
            if drawn == 0 {
                self.line(segs[4].0, segs[4].1, t, colour);
            }
            cx += cw;
        }
    }
}

/// A standard normal draw (Box–Muller).
fn gaussian(rng: &mut impl Rng) -> f32 {
    let u1: f32 = rng.random_range(f32::EPSILON..1.0);
    let u2: f32 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}

/// A typed page (an invoice, a letter, a form): paragraphs, a table's rules, a heading; the
/// page fills the photo or lies on a desk.
fn document(c: &mut Canvas, rng: &mut impl Rng) {
    let (w, h) = (c.w as f32, c.h as f32);
    let paper = light(rng);
    let (px, py, pw, ph) = if rng.random::<bool>() {
        c.fill(paper);
        (0.0, 0.0, w, h)
    } else {
        c.fill(mix(rgb(rng), [120.0; 3], 0.4));
        let m = rng.random_range(0.05..0.15);
        let (px, py) = (w * m, h * m * 0.5);
        c.rect(px, py, w - 2.0 * px, h - 2.0 * py, paper);
        (px, py, w - 2.0 * px, h - 2.0 * py)
    };
    let ink = dark(rng);
    let size = rng.random_range(0.025..0.06) * ph.min(pw * 1.4);
    let margin = pw * rng.random_range(0.06..0.12);
    let mut y = py + ph * rng.random_range(0.05..0.1);
    // Heading.
    c.text(
        px + margin,
        y,
        size * 1.6,
        rng.random_range(5..14),
        ink,
        rng,
    );
    y += size * 3.0;
    let table = rng.random::<bool>();
    while y + size < py + ph * 0.92 {
        if table && rng.random_range(0..4) == 0 {
            c.rect(
                px + margin,
                y,
                pw - 2.0 * margin,
                (size / 8.0).max(1.0),
                ink,
            );
            y += size * 0.6;
        }
        let chars = ((pw - 2.0 * margin) / (size * 0.6)) as usize;
        let n = if rng.random_range(0..5) == 0 {
            rng.random_range(chars / 4..chars.max(2))
        } else {
            chars
        };
        c.text(px + margin, y, size, n, ink, rng);
        y += size * rng.random_range(1.5..2.2);
    }
}

/// A drawn face (head, hair, eyes, nose, mouth) or stick people, on a coloured or light
/// background.
fn people(c: &mut Canvas, rng: &mut impl Rng) {
    let (w, h) = (c.w as f32, c.h as f32);
    let bg = if rng.random::<bool>() {
        light(rng)
    } else {
        rgb(rng)
    };
    c.fill(bg);
    let pen = dark(rng);
    if rng.random::<bool>() {
        let (cx, cy) = (
            w * rng.random_range(0.4..0.6),
            h * rng.random_range(0.45..0.6),
        );
        let r = w.min(h) * rng.random_range(0.25..0.4);
        let skin = [
            rng.random_range(120.0..250.0),
            rng.random_range(80.0..210.0),
            rng.random_range(60.0..180.0),
        ];
        let hair = dark(rng);
        // Shoulders.
        c.ellipse(cx, cy + r * 1.9, r * 1.5, r * 0.9, rgb(rng));
        c.ellipse(cx, cy - r * 0.25, r * 1.05, r * 0.95, hair);
        c.ellipse(cx, cy, r * 0.85, r * 1.05, skin);
        let eye = r * 0.12;
        for s in [-1.0, 1.0] {
            c.ellipse(cx + s * r * 0.35, cy - r * 0.15, eye * 1.6, eye, [250.0; 3]);
            c.ellipse(cx + s * r * 0.35, cy - r * 0.15, eye * 0.7, eye * 0.7, pen);
            c.line(
                (cx + s * r * 0.2, cy - r * 0.38),
                (cx + s * r * 0.5, cy - r * 0.4),
                eye * 0.5,
                hair,
            );
        }
        c.line(
            (cx, cy - r * 0.05),
            (cx - r * 0.08, cy + r * 0.25),
            eye * 0.4,
            pen,
        );
        let smile: Vec<(f32, f32)> = (0..=8)
            .map(|k| {
                let t = k as f32 / 8.0 - 0.5;
                (cx + t * r * 0.8, cy + r * 0.5 + (0.25 - t * t) * r * 0.4)
            })
            .collect();
        c.polyline(&smile, eye * 0.5, [150.0, 40.0, 50.0]);
    } else {
        let n = rng.random_range(1..=4);
        let t = w.min(h) * rng.random_range(0.01..0.025);
        for k in 0..n {
            let cx = w * (k as f32 + 0.5) / n as f32 + rng.random_range(-0.05..0.05) * w;
            let s = h * rng.random_range(0.5..0.85);
            let top = (h - s) * rng.random_range(0.2..0.8);
            let head = s * 0.12;
            c.ring(cx, top + head, head, t, pen);
            let (neck, hip) = (top + 2.0 * head, top + s * 0.6);
            c.line((cx, neck), (cx, hip), t, pen);
            let arm = top + s * 0.35;
            c.line(
                (cx, arm),
                (cx - s * 0.2, arm + s * rng.random_range(-0.2..0.2)),
                t,
                pen,
            );
            c.line(
                (cx, arm),
                (cx + s * 0.2, arm + s * rng.random_range(-0.2..0.2)),
                t,
                pen,
            );
            c.line((cx, hip), (cx - s * 0.15, top + s), t, pen);
            c.line((cx, hip), (cx + s * 0.15, top + s), t, pen);
        }
        c.rect(0.0, h * 0.95, w, h * 0.05, mix(pen, bg, 0.5));
    }
}

/// Sky, sun, mountains or hills, ground, trees.
fn landscape(c: &mut Canvas, rng: &mut impl Rng) {
    let (w, h) = (c.w as f32, c.h as f32);
    let horizon = h * rng.random_range(0.4..0.7);
    let sky = [
        rng.random_range(90.0..200.0),
        rng.random_range(140.0..220.0),
        rng.random_range(200.0..255.0),
    ];
    c.vgradient(0.0, horizon, sky, mix(sky, [255.0; 3], 0.6));
    if rng.random::<bool>() {
        let r = w.min(h) * rng.random_range(0.04..0.1);
        c.ellipse(
            w * rng.random_range(0.1..0.9),
            horizon * rng.random_range(0.15..0.5),
            r,
            r,
            [255.0, 230.0, 120.0],
        );
    }
    for _ in 0..rng.random_range(1..=3) {
        let shade: Rgb = [
            rng.random_range(60.0..140.0),
            rng.random_range(70.0..150.0),
            rng.random_range(80.0..170.0),
        ];
        let mut pts = vec![(0.0, horizon)];
        let peaks = rng.random_range(2..=6);
        for k in 0..=peaks {
            let x = w * k as f32 / peaks as f32;
            pts.push((x, horizon - h * rng.random_range(0.05..0.35)));
        }
        pts.push((w, horizon));
        c.polygon(&pts, shade);
    }
    let ground = [
        rng.random_range(40.0..120.0),
        rng.random_range(90.0..170.0),
        rng.random_range(30.0..90.0),
    ];
    c.vgradient(horizon, h, ground, mix(ground, [0.0; 3], 0.4));
    if rng.random::<bool>() {
        // A lake.
        c.ellipse(
            w * rng.random_range(0.2..0.8),
            horizon + (h - horizon) * 0.4,
            w * 0.3,
            (h - horizon) * 0.2,
            mix(sky, [0.0, 0.0, 80.0], 0.3),
        );
    }
    for _ in 0..rng.random_range(0..=6) {
        let x = rng.random_range(0.0..w);
        let base = rng.random_range(horizon..h);
        let s = (base - horizon + h * 0.1) * rng.random_range(0.3..0.6);
        c.rect(
            x - s * 0.05,
            base - s * 0.4,
            s * 0.1,
            s * 0.4,
            [90.0, 60.0, 30.0],
        );
        c.ellipse(
            x,
            base - s * 0.6,
            s * 0.25,
            s * 0.35,
            mix(ground, [0.0, 60.0, 0.0], 0.5),
        );
    }
}

/// A mug, a lamp, a bottle, a chair, a bowl or a clock, on a table against a wall or on a
/// plain light ground.
fn household(c: &mut Canvas, rng: &mut impl Rng) {
    let (w, h) = (c.w as f32, c.h as f32);
    let plain = rng.random_range(0..3) == 0;
    let table = h * rng.random_range(0.6..0.8);
    if plain {
        c.fill(light(rng));
    } else {
        c.fill(mix(rgb(rng), [230.0; 3], 0.6));
        c.rect(
            0.0,
            table,
            w,
            h - table,
            mix(rgb(rng), [110.0, 80.0, 50.0], 0.6),
        );
    }
    let body = mix(rgb(rng), [0.0; 3], 0.2);
    let s = w.min(h) * rng.random_range(0.3..0.55);
    let (cx, base) = (
        w * rng.random_range(0.35..0.65),
        if plain { h * 0.8 } else { table + s * 0.1 },
    );
    match rng.random_range(0..6) {
        0 => {
            // Mug: body, handle, rim.
            c.ring(cx + s * 0.4, base - s * 0.45, s * 0.22, s * 0.07, body);
            c.rect(cx - s * 0.4, base - s * 0.8, s * 0.8, s * 0.8, body);
            c.ellipse(
                cx,
                base - s * 0.8,
                s * 0.4,
                s * 0.08,
                mix(body, [0.0; 3], 0.5),
            );
        }
        1 => {
            // Lamp: base, stem, shade.
            c.ellipse(cx, base - s * 0.05, s * 0.25, s * 0.06, body);
            c.rect(cx - s * 0.03, base - s * 1.1, s * 0.06, s * 1.05, [60.0; 3]);
            c.polygon(
                &[
                    (cx - s * 0.2, base - s * 1.5),
                    (cx + s * 0.2, base - s * 1.5),
                    (cx + s * 0.4, base - s * 1.05),
                    (cx - s * 0.4, base - s * 1.05),
                ],
                mix(body, [255.0, 240.0, 200.0], 0.5),
            );
        }
        2 => {
            // Bottle with a label.
            c.rect(cx - s * 0.2, base - s * 1.0, s * 0.4, s * 1.0, body);
            c.polygon(
                &[
                    (cx - s * 0.2, base - s * 1.0),
                    (cx + s * 0.2, base - s * 1.0),
                    (cx + s * 0.07, base - s * 1.3),
                    (cx - s * 0.07, base - s * 1.3),
                ],
                body,
            );
            c.rect(
                cx - s * 0.07,
                base - s * 1.45,
                s * 0.14,
                s * 0.15,
                [40.0; 3],
            );
            c.rect(cx - s * 0.2, base - s * 0.7, s * 0.4, s * 0.3, light(rng));
        }
        3 => {
            // Chair: seat, back, legs.
            let t = s * 0.06;
            c.rect(cx - s * 0.35, base - s * 0.55, s * 0.7, t * 1.5, body);
            c.rect(cx - s * 0.35, base - s * 1.3, t, s * 0.75, body);
            c.rect(cx + s * 0.35 - t, base - s * 1.3, t, s * 0.75, body);
            c.rect(cx - s * 0.35, base - s * 1.3, s * 0.7, t * 2.0, body);
            c.rect(cx - s * 0.35, base - s * 0.55, t, s * 0.55, body);
            c.rect(cx + s * 0.35 - t, base - s * 0.55, t, s * 0.55, body);
        }
        4 => {
            // Bowl of fruit.
            for k in 0..rng.random_range(2..=5) {
                let r = s * rng.random_range(0.12..0.2);
                c.ellipse(
                    cx + s * (k as f32 * 0.15 - 0.3),
                    base - s * 0.4 - r * 0.5,
                    r,
                    r,
                    rgb(rng),
                );
            }
            c.paint(
                (cx - s * 0.6, base - s * 0.45, cx + s * 0.6, base),
                body,
                |x, y| {
                    let (u, v) = ((x - cx) / (s * 0.6), (y - (base - s * 0.45)) / (s * 0.45));
                    v >= 0.0 && u * u + v * v <= 1.0
                },
            );
        }
        _ => {
            // Wall clock.
            let (cy, r) = (h * 0.4, s * 0.5);
            c.ellipse(cx, cy, r, r, body);
            c.ellipse(cx, cy, r * 0.85, r * 0.85, [245.0; 3]);
            for k in 0..12 {
                let a = k as f32 * std::f32::consts::TAU / 12.0;
                c.line(
                    (cx + a.cos() * r * 0.7, cy + a.sin() * r * 0.7),
                    (cx + a.cos() * r * 0.8, cy + a.sin() * r * 0.8),
                    r * 0.04,
                    [20.0; 3],
                );
            }
            let (a, b) = (rng.random_range(0.0..6.3f32), rng.random_range(0.0..6.3f32));
            c.line(
                (cx, cy),
                (cx + a.cos() * r * 0.45, cy + a.sin() * r * 0.45),
                r * 0.06,
                [20.0; 3],
            );
            c.line(
                (cx, cy),
                (cx + b.cos() * r * 0.7, cy + b.sin() * r * 0.7),
                r * 0.04,
                [20.0; 3],
            );
        }
    }
}

/// A car, a truck or a bicycle, on a road or a plain ground.
fn vehicle(c: &mut Canvas, rng: &mut impl Rng) {
    let (w, h) = (c.w as f32, c.h as f32);
    let road = h * rng.random_range(0.65..0.85);
    if rng.random::<bool>() {
        c.fill(light(rng));
    } else {
        let sky = [
            rng.random_range(120.0..200.0),
            rng.random_range(160.0..220.0),
            rng.random_range(200.0..255.0),
        ];
        c.vgradient(0.0, road, sky, [230.0; 3]);
        c.rect(0.0, road, w, h - road, [rng.random_range(60.0..110.0); 3]);
        for k in 0..8 {
            c.rect(
                w * k as f32 / 8.0,
                road + (h - road) * 0.5,
                w / 16.0,
                (h - road) * 0.06,
                [240.0, 230.0, 200.0],
            );
        }
    }
    let paint = mix(rgb(rng), [0.0; 3], 0.1);
    let len = w * rng.random_range(0.5..0.85);
    let x0 = (w - len) * rng.random_range(0.2..0.8);
    let ground = road - (h - road) * 0.1;
    match rng.random_range(0..3) {
        0 => {
            // Car.
            let body_h = len * 0.22;
            c.rect(x0, ground - body_h * 1.2, len, body_h, paint);
            c.polygon(
                &[
                    (x0 + len * 0.2, ground - body_h * 1.2),
                    (x0 + len * 0.3, ground - body_h * 2.0),
                    (x0 + len * 0.7, ground - body_h * 2.0),
                    (x0 + len * 0.82, ground - body_h * 1.2),
                ],
                paint,
            );
            c.polygon(
                &[
                    (x0 + len * 0.27, ground - body_h * 1.25),
                    (x0 + len * 0.33, ground - body_h * 1.85),
                    (x0 + len * 0.49, ground - body_h * 1.85),
                    (x0 + len * 0.49, ground - body_h * 1.25),
                ],
                [170.0, 200.0, 230.0],
            );
            c.polygon(
                &[
                    (x0 + len * 0.52, ground - body_h * 1.25),
                    (x0 + len * 0.52, ground - body_h * 1.85),
                    (x0 + len * 0.68, ground - body_h * 1.85),
                    (x0 + len * 0.77, ground - body_h * 1.25),
                ],
                [170.0, 200.0, 230.0],
            );
            for fx in [0.2, 0.8] {
                c.ellipse(
                    x0 + len * fx,
                    ground - body_h * 0.2,
                    body_h * 0.5,
                    body_h * 0.5,
                    [25.0; 3],
                );
                c.ellipse(
                    x0 + len * fx,
                    ground - body_h * 0.2,
                    body_h * 0.22,
                    body_h * 0.22,
                    [180.0; 3],
                );
            }
        }
        1 => {
            // Truck: cab and box.
            let bh = len * 0.35;
            c.rect(
                x0,
                ground - bh * 1.1,
                len * 0.7,
                bh,
                mix(paint, [255.0; 3], 0.5),
            );
            c.rect(
                x0 + len * 0.72,
                ground - bh * 0.8,
                len * 0.28,
                bh * 0.7,
                paint,
            );
            c.rect(
                x0 + len * 0.8,
                ground - bh * 0.75,
                len * 0.15,
                bh * 0.25,
                [170.0, 200.0, 230.0],
            );
            for fx in [0.15, 0.55, 0.86] {
                c.ellipse(
                    x0 + len * fx,
                    ground - bh * 0.08,
                    bh * 0.18,
                    bh * 0.18,
                    [25.0; 3],
                );
            }
        }
        _ => {
            // Bicycle.
            let r = len * 0.2;
            let t = (r * 0.06).max(2.0);
            let (a, b) = ((x0 + r, ground - r), (x0 + len - r, ground - r));
            c.ring(a.0, a.1, r, t, [30.0; 3]);
            c.ring(b.0, b.1, r, t, [30.0; 3]);
            let (seat, bar) = (
                (x0 + len * 0.4, ground - r * 2.0),
                (x0 + len * 0.7, ground - r * 2.1),
            );
            let crank = (x0 + len * 0.45, ground - r);
            c.polyline(&[a, seat, crank, a], t, paint);
            c.polyline(&[seat, bar, crank], t, paint);
            c.line(bar, b, t, paint);
            c.line(
                seat,
                (seat.0 - r * 0.2, seat.1 - r * 0.2),
                t * 2.0,
                [30.0; 3],
            );
            c.line(bar, (bar.0 + r * 0.2, bar.1 - r * 0.3), t, [30.0; 3]);
        }
    }
}

/// A pen drawing on paper: a house, a flower, a spiral, or scribbled curves.
fn line_drawing(c: &mut Canvas, rng: &mut impl Rng) {
    let (w, h) = (c.w as f32, c.h as f32);
    c.fill(light(rng));
    let pen = if rng.random::<bool>() {
        dark(rng)
    } else {
        mix(rgb(rng), [0.0; 3], 0.3)
    };
    let t = w.min(h) * rng.random_range(0.006..0.02);
    let (cx, cy, s) = (
        w * rng.random_range(0.4..0.6),
        h * rng.random_range(0.4..0.6),
        w.min(h) * rng.random_range(0.25..0.42),
    );
    match rng.random_range(0..4) {
        0 => {
            // House: walls, roof, door, windows.
            c.polyline(
                &[
                    (cx - s, cy + s),
                    (cx - s, cy),
                    (cx, cy - s * 0.8),
                    (cx + s, cy),
                    (cx + s, cy + s),
                    (cx - s, cy + s),
                ],
                t,
                pen,
            );
            c.line((cx - s, cy), (cx + s, cy), t, pen);
            c.polyline(
                &[
                    (cx - s * 0.2, cy + s),
                    (cx - s * 0.2, cy + s * 0.4),
                    (cx + s * 0.2, cy + s * 0.4),
                    (cx + s * 0.2, cy + s),
                ],
                t,
                pen,
            );
            for dx in [-0.65, 0.45] {
                let x = cx + s * dx;
                c.polyline(
                    &[
                        (x, cy + s * 0.2),
                        (x + s * 0.2, cy + s * 0.2),
                        (x + s * 0.2, cy + s * 0.45),
                        (x, cy + s * 0.45),
                        (x, cy + s * 0.2),
                    ],
                    t,
                    pen,
                );
            }
        }
        1 => {
            // Flower: petals, centre, stem, leaves.
            let petals = rng.random_range(5..=9);
            let r = s * 0.3;
            for k in 0..petals {
                let a = k as f32 * std::f32::consts::TAU / petals as f32;
                let (px, py) = (cx + a.cos() * r * 1.3, cy - s * 0.4 + a.sin() * r * 1.3);
                let pts: Vec<(f32, f32)> = (0..=16)
                    .map(|j| {
                        let b = j as f32 * std::f32::consts::TAU / 16.0;
                        (px + b.cos() * r * 0.6, py + b.sin() * r * 0.6)
                    })
                    .collect();
                c.polyline(&pts, t, pen);
            }
            c.ring(cx, cy - s * 0.4, r * 0.7, t, pen);
            c.line((cx, cy - s * 0.4 + r), (cx, cy + s), t, pen);
            c.polyline(
                &[
                    (cx, cy + s * 0.5),
                    (cx + s * 0.3, cy + s * 0.3),
                    (cx, cy + s * 0.6),
                ],
                t,
                pen,
            );
        }
        2 => {
            // Spiral.
            let turns = rng.random_range(2.0..5.0f32);
            let pts: Vec<(f32, f32)> = (0..=200)
                .map(|j| {
                    let f = j as f32 / 200.0;
                    let a = f * turns * std::f32::consts::TAU;
                    (cx + a.cos() * s * f, cy + a.sin() * s * f)
                })
                .collect();
            c.polyline(&pts, t, pen);
        }
        _ => {
            // Scribbled curves.
            for _ in 0..rng.random_range(2..=6) {
                let mut p = (
                    rng.random_range(0.1..0.9) * w,
                    rng.random_range(0.1..0.9) * h,
                );
                let mut a: f32 = rng.random_range(0.0..6.3);
                let mut pts = vec![p];
                for _ in 0..60 {
                    a += rng.random_range(-0.5..0.5);
                    p = (
                        (p.0 + a.cos() * s * 0.08).clamp(0.0, w),
                        (p.1 + a.sin() * s * 0.08).clamp(0.0, h),
                    );
                    pts.push(p);
                }
                c.polyline(&pts, t, pen);
            }
        }
    }
}

/// A bar chart, a line plot or a pie chart, with axes, grid, ticks and labels.
fn chart(c: &mut Canvas, rng: &mut impl Rng) {
    let (w, h) = (c.w as f32, c.h as f32);
    c.fill(if rng.random::<bool>() {
        [255.0; 3]
    } else {
        light(rng)
    });
    let ink = dark(rng);
    let label = (h * 0.035).max(6.0);
    c.text(
        w * 0.2,
        h * 0.03,
        label * 1.3,
        rng.random_range(8..20),
        ink,
        rng,
    );
    let (x0, y0, x1, y1) = (w * 0.14, h * 0.12, w * 0.95, h * 0.85);
    let kind = rng.random_range(0..3);
    if kind == 2 {
        let (cx, cy, r) = (
            (x0 + x1) / 2.0,
            (y0 + y1) / 2.0,
            (x1 - x0).min(y1 - y0) * 0.45,
        );
        let n = rng.random_range(3..=7);
        let cuts: Vec<f32> = {
            let mut v: Vec<f32> = (0..n)
                .map(|_| rng.random_range(0.0..std::f32::consts::TAU))
                .collect();
            v.sort_by(f32::total_cmp);
            v
        };
        for k in 0..n {
            let (a, b) = (
                cuts[k],
                if k + 1 < n {
                    cuts[k + 1]
                } else {
                    cuts[0] + std::f32::consts::TAU
                },
            );
            let col = rgb(rng);
            c.paint((cx - r, cy - r, cx + r, cy + r), col, |x, y| {
                let (dx, dy) = (x - cx, y - cy);
                let mut t = dy.atan2(dx);
                while t < a {
                    t += std::f32::consts::TAU;
                }
                dx.hypot(dy) <= r && t <= b
            });
        }
        return;
    }
    let t = (w.min(h) * 0.005).max(1.0);
    let grid = mix(ink, [255.0; 3], 0.8);
    for k in 1..=5 {
        let y = y1 - (y1 - y0) * k as f32 / 5.0;
        c.line((x0, y), (x1, y), t * 0.6, grid);
        c.text(w * 0.02, y - label / 2.0, label, 3, ink, rng);
    }
    let n = rng.random_range(4..=14);
    let step = (x1 - x0) / n as f32;
    let values: Vec<f32> = (0..n).map(|_| rng.random_range(0.1..0.95)).collect();
    let col = rgb(rng);
    if kind == 0 {
        for (k, v) in values.iter().enumerate() {
            let x = x0 + step * (k as f32 + 0.15);
            c.rect(x, y1 - (y1 - y0) * v, step * 0.7, (y1 - y0) * v, col);
        }
    } else {
        for _ in 0..rng.random_range(1..=3) {
            let col = mix(rgb(rng), [0.0; 3], 0.2);
            let mut v = rng.random_range(0.2..0.8f32);
            let pts: Vec<(f32, f32)> = (0..=n * 3)
                .map(|k| {
                    v = (v + rng.random_range(-0.12..0.12)).clamp(0.02, 0.98);
                    (x0 + step * k as f32 / 3.0, y1 - (y1 - y0) * v)
                })
                .collect();
            c.polyline(&pts, t * 2.0, col);
        }
    }
    c.line((x0, y0), (x0, y1), t * 1.5, ink);
    c.line((x0, y1), (x1, y1), t * 1.5, ink);
    for k in 0..n {
        c.text(
            x0 + step * (k as f32 + 0.2),
            y1 + label * 0.5,
            label,
            2,
            ink,
            rng,
        );
    }
}

/// An application window: a title bar, a side bar of entries, buttons, text and an image
/// placeholder.
fn screenshot(c: &mut Canvas, rng: &mut impl Rng) {
    let (w, h) = (c.w as f32, c.h as f32);
    let dark_mode = rng.random_range(0..3) == 0;
    let (bg, ink) = if dark_mode {
        ([35.0, 37.0, 42.0], [220.0; 3])
    } else {
        ([250.0; 3], dark(rng))
    };
    c.fill(bg);
    let accent = rgb(rng);
    let bar = h * rng.random_range(0.06..0.1);
    c.rect(0.0, 0.0, w, bar, mix(accent, bg, 0.3));
    c.text(
        w * 0.03,
        bar * 0.25,
        bar * 0.5,
        rng.random_range(5..20),
        [255.0; 3],
        rng,
    );
    let side = if rng.random::<bool>() {
        w * rng.random_range(0.18..0.3)
    } else {
        0.0
    };
    if side > 0.0 {
        c.rect(0.0, bar, side, h - bar, mix(bg, [128.0; 3], 0.15));
        let mut y = bar + h * 0.04;
        while y < h * 0.9 {
            c.text(w * 0.02, y, h * 0.03, rng.random_range(4..12), ink, rng);
            y += h * 0.06;
        }
    }
    let left = side + w * 0.04;
    let mut y = bar + h * 0.05;
    while y < h * 0.92 {
        match rng.random_range(0..4) {
            0 => {
                // Buttons.
                let bw = w * 0.16;
                for k in 0..rng.random_range(1..=3) {
                    let x = left + k as f32 * bw * 1.2;
                    c.rect(x, y, bw, h * 0.06, accent);
                    c.text(x + bw * 0.15, y + h * 0.015, h * 0.03, 6, [255.0; 3], rng);
                }
                y += h * 0.1;
            }
            1 => {
                // An image placeholder and a caption.
                let ih = h * rng.random_range(0.15..0.3);
                c.rect(left, y, (w - left) * 0.5, ih, mix(rgb(rng), bg, 0.3));
                c.text(left + (w - left) * 0.55, y, h * 0.03, 14, ink, rng);
                y += ih + h * 0.04;
            }
            2 => {
                // A text field.
                c.frame(left, y, (w - left) * 0.8, h * 0.06, 1.5, mix(ink, bg, 0.5));
                c.text(
                    left + 6.0,
                    y + h * 0.015,
                    h * 0.03,
                    10,
                    mix(ink, bg, 0.4),
                    rng,
                );
                y += h * 0.1;
            }
            _ => {
                let chars = ((w - left - w * 0.04) / (h * 0.03 * 0.6)) as usize;
                c.text(left, y, h * 0.03, chars, ink, rng);
                y += h * 0.05;
            }
        }
    }
}
