//! Light evened out before a photo is framed ([`super::photo`], step 1½): light falling
//! unevenly across the frame estimated and divided out, so the background is one level again
//! and the garment is framed (and its contrast measured) as under even light.
//!
//! Why: the pipeline takes the background's level from the border ring and counts every pixel
//! darker than it by more than a floor as the object. Light 30 % dimmer on one side makes that
//! side "object", so the model input changes scale and place and the exact top 8 with it
//! (`eval --photos`: uneven light).
//!
//! How, on a grid of at most [`GRID`] cells a side (block means of the grey level, then a 3×3
//! mean):
//! 1. the **background's cells** are flooded from the border ring's cells at its level: a
//!    neighbour joins when it differs from the cell it is reached from by at most
//!    [`SMOOTH_STEP`] of the level, is no darker than [`DARKEST`] of it, and keeps the
//!    background's colour (its channels' gains within [`CHROMA`] of each other). Light changes
//!    smoothly and scales every channel alike; a garment's edge is a step (at this grid's
//!    scale) and a coloured garment changes the colour, so the flood stops there. A garment
//!    from edge to edge splits the ring, and under light falling across it the far part is
//!    off the level: the flood starts again from the ring's cells that the plane through the
//!    cells flooded so far reaches (within the same step);
//! 2. the **light** is a plane fitted to those cells by least squares, again and again
//!    without the cells more than [`TRIMS`] below the last fit (a faint edge, a shaded part
//!    of the garment the flood leaked into): how the garment itself is lit; a quadratic
//!    surface, fitted the same way, replaces it only where the plane leaves the background
//!    curved (a vignette, a lamp close by) and the quadratic halves what it leaves
//!    ([`CURVED`]);
//! 3. light that falls across the frame shows along its border (checked before the light is
//!    fitted; under even light nothing on the border is above the level): when the middle
//!    half of the flooded border cells spans less than [`MIN_VARIATION`] of the level, or
//!    their upper quartile is less than half that above it, or the surface differs from it
//!    by less than that everywhere, the photo is left exactly as it is (a photo under even
//!    light, every clean photo, the committed parity fixtures); otherwise each pixel's
//!    channels are scaled by `level / estimate` (bilinear between cell centres), which keeps
//!    the colours' ratios (white light).
//!
//! **A soft shadow beside the garment is not divided out.** A model of it (the garment's core
//! moved and blurred, fitted to the flooded cells' darkness) found 0.4–0.9 of the shadows
//! drawn, depending on its gates, but also "found" one in up to 15 % of photos with no shadow
//! (the flood leaks into a garment's light parts), and where it was right the garment's box
//! still moved a pixel or two (top-8 agreement about 0.77–0.80 of the unshadowed photo's):
//! left out until it is right (`git log -S fit_shadow`). Two estimators without a model of
//! the shadow's shape misfired too (2026-12-06; 100–200 held-out photos of the models test's
//! setup, 2,000-image gallery, where the shadow keeps 0.672 of the top 8 and the same photos
//! without it 0.924):
//! - the flooded cells darker than the level, divided by their own light: the flood reaches
//!   into a light garment's smooth inside (a pale pullover or bag, whole) through its faint
//!   edge. Kept only where they lie a model pixel or more outside the convex hull of the cells
//!   not flooded, they found 0.64 of the shadows, and also 1.5–3.5 % of photos without one and
//!   8 % of light garments, where it divides out the part of the garment the flood reached;
//! - the object's pixels of a gentle slope (darkness at most 40 %, a slope of at most 16 % of
//!   the level a model pixel), flooded from the border through an opening of ¾ model pixel
//!   (so no narrow gap lets it inside): 0.672 → 0.748 with a shadow, but a garment's own pale
//!   smooth part at its edge (a sneaker's sole) has a shadow's darkness and slope, so 11 of
//!   200 clean photos changed, and photos of the family lost 0.882 → 0.863, coloured ones
//!   0.941 → 0.917.
//!
//! Both the box a shadow widens and the darkness it leaves on the garment's edge cost top-8 places
//! (docs/model.md, "Photos as people take them", measures each; 2026-12-06, ef836c6, 200 held-out
//! photos of the models test's setup, where a shadow keeps 0.681 and the same photos without it
//! 0.915). A second model of it — offset (within 10 % of the garment's longest side), blur
//! (binomial kernels, σ in half-cell steps) and darkness fitted by least squares to the cells
//! outside a ring around the garment's core (darkness ≥ 0.45), the pale parts the fit leaves
//! unexplained added to the silhouette and fitted again, divided out where a flood from the plain
//! background reaches through cells the fit explains within 0.04 — kept 0.804 when taken only where
//! it explains 0.9 of those cells' darkness (it explains 0.98 of a drawn shadow's at the median).
//! Not adopted: it still brightens a garment's pale fringe beside the shadow or leaves the shadow's
//! outer edge (whichever the match's tolerance favours), changed 1 of 200 clean photos, 4 of 200
//! coloured ones and 1 of 200 with a margin, and took 250 ms a 112-pixel photo natively. What it
//! lacks is the garment's silhouette, not the shadow's parameters: given the drawn ones, its
//! division (in the variants tried) kept only 0.72–0.73, while the shade they predict from the
//! garment's true silhouette matches the drawn shadow on the background within 0.035 of the level
//! (0.001 on average).
//!
//! Even a perfect one would stop at the framing's own loss: the same photos without the shadow
//! keep 0.885 of the top 8 in `eval --photos`, under the 0.9. A query model trained on
//! shadowed photos reads past part of a shadow instead; it is not adopted either (docs/model.md,
//! "Photos as people take them", has its figures).
//!
//! f64 additions, multiplications, divisions and comparisons only (no transcendental
//! functions), so native and wasm give the same bytes.

/// Longest side of the grid the light is estimated on. At 112 photo pixels a cell is a pixel;
/// a larger photo is averaged down first, so a garment's edge stays a step of a cell or two
/// whatever the photo's size.
pub const GRID: usize = 128;
/// Most a background cell differs from the neighbour the flood reached it from, as a share of
/// the level: light falling 40 % across the frame changes by less per cell, a garment's edge
/// by more.
pub const SMOOTH_STEP: f64 = 0.035;
/// Most the gains of a background cell's three channels (against the background's colour)
/// may differ: white light scales them alike.
pub const CHROMA: f64 = 0.06;
/// The darkest the background may be lit, as a share of the level.
pub const DARKEST: f64 = 0.55;
/// Cells more than these shares below the fitted light are left out of the next fit, in
/// turn: a garment's shaded part the flood leaked into pulls the first fit down, and is
/// left out step by step as the surface rises to the background's upper envelope.
pub const TRIMS: [f64; 6] = [0.3, 0.2, 0.12, 0.08, 0.05, 0.03];
/// The plane's median residual (of the level) over its background cells above which a
/// quadratic is tried; it is taken when it halves that residual. A quadratic's three curvature
/// terms also bend to the shaded garment cells the flood leaked into, which the trims then
/// keep: on photos of garments filling the frame under light falling in a line it missed the
/// light by 20–30 levels where the plane missed it by 1–3 (while leaving a median residual
/// above the plane's), so curvature must earn its place.
pub const CURVED: f64 = 0.005;
/// The light is evened out only where it varies by at least this share of the level.
pub const MIN_VARIATION: f64 = 0.04;

/// The photo (`rgb`, composited, `width × height`) with its light evened out to `level` (the
/// border ring's grey level), or `None` when the light is even (within [`MIN_VARIATION`]),
/// the background is dark (`level` ≤ 127: a light object, nothing this models), or too little
/// background is seen to estimate it.
pub fn even_out(rgb: &[[u8; 3]], width: usize, height: usize, level: i32) -> Option<Vec<[u8; 3]>> {
    if level <= 127 || width < 3 || height < 3 {
        return None;
    }
    let level = level as f64;
    let light = estimate(rgb, width, height, level)?;
    Some(apply(rgb, width, height, level, &light))
}

/// The estimated light on the grid, with its geometry.
struct Light {
    /// Photo pixels to a cell (a side).
    f: usize,
    gw: usize,
    gh: usize,
    /// The light at each cell's centre.
    cells: Vec<f64>,
}

fn luma(c: [u8; 3]) -> f64 {
    (299.0 * c[0] as f64 + 587.0 * c[1] as f64 + 114.0 * c[2] as f64) / 1000.0
}

fn estimate(rgb: &[[u8; 3]], width: usize, height: usize, level: f64) -> Option<Light> {
    let f = width.max(height).div_ceil(GRID);
    let (gw, gh) = (width.div_ceil(f), height.div_ceil(f));
    let n = gw * gh;
    // Block means of the grey level and of each channel.
    let (mut sum, mut count) = (vec![[0.0f64; 4]; n], vec![0u32; n]);
    for y in 0..height {
        for x in 0..width {
            let c = (y / f) * gw + x / f;
            let p = rgb[y * width + x];
            let s = &mut sum[c];
            s[0] += luma(p);
            for k in 0..3 {
                s[k + 1] += p[k] as f64;
            }
            count[c] += 1;
        }
    }
    let mean: Vec<[f64; 4]> = sum
        .iter()
        .zip(&count)
        .map(|(s, &k)| s.map(|v| v / k as f64))
        .collect();
    // A 3×3 mean (over the cells that exist): noise averaged, a step kept a step.
    let smooth: Vec<[f64; 4]> = (0..n)
        .map(|i| {
            let (x, y) = (i % gw, i / gw);
            let (mut s, mut k) = ([0.0; 4], 0.0);
            for yy in y.saturating_sub(1)..(y + 2).min(gh) {
                for xx in x.saturating_sub(1)..(x + 2).min(gw) {
                    for (a, b) in s.iter_mut().zip(mean[yy * gw + xx]) {
                        *a += b;
                    }
                    k += 1.0;
                }
            }
            s.map(|v| v / k)
        })
        .collect();
    let sm: Vec<f64> = smooth.iter().map(|s| s[0]).collect();
    // 1. Flood the background from the ring's cells at its level.
    let step = SMOOTH_STEP * level;
    let darkest = DARKEST * level;
    let mut flooded = vec![false; n];
    let on_border = |i: usize| {
        let (x, y) = (i % gw, i / gw);
        x == 0 || y == 0 || x + 1 == gw || y + 1 == gh
    };
    let stack: Vec<usize> = (0..n)
        .filter(|&i| on_border(i) && (sm[i] - level).abs() <= step)
        .collect();
    for &i in &stack {
        flooded[i] = true;
    }
    // The background's colour (the seeds' mean): light and shadow scale its channels alike,
    // a coloured garment does not, so a cell whose channels' gains differ by more than
    // [`CHROMA`] is not the background however smoothly its grey level changes.
    let mut colour = [0.0f64; 3];
    for &i in &stack {
        for (c, v) in colour.iter_mut().zip(&smooth[i][1..]) {
            *c += v / stack.len() as f64;
        }
    }
    if colour.iter().any(|&c| c < 1.0) {
        return None;
    }
    let plain = |i: usize| {
        let gains = [0, 1, 2].map(|k| smooth[i][k + 1] / colour[k]);
        let (lo, hi) = gains
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &g| (lo.min(g), hi.max(g)));
        hi - lo <= CHROMA
    };
    let flood = |flooded: &mut Vec<bool>, mut stack: Vec<usize>| {
        while let Some(i) = stack.pop() {
            for j in neighbours(i, gw, gh).into_iter().flatten() {
                if !flooded[j] && sm[j] >= darkest && (sm[j] - sm[i]).abs() <= step && plain(j) {
                    flooded[j] = true;
                    stack.push(j);
                }
            }
        }
    };
    flood(&mut flooded, stack);
    // The surface's terms at a cell's centre (−½…½ across the grid).
    let basis = |i: usize| -> [f64; 6] {
        let u = ((i % gw) as f64 + 0.5) / gw as f64 - 0.5;
        let v = ((i / gw) as f64 + 0.5) / gh as f64 - 0.5;
        [1.0, u, v, u * u, u * v, v * v]
    };
    // A garment from edge to edge splits the border ring, and under light falling across it
    // the far part of the ring is off the level, where no seed is: it is seeded again where
    // the plane through what was flooded meets it. Under even light that plane is the level,
    // which seeded the ring already.
    if let Some(plane) = fit(&flooded, &sm, basis, 3) {
        let more: Vec<usize> = (0..n)
            .filter(|&i| {
                on_border(i)
                    && !flooded[i]
                    && sm[i] >= darkest
                    && (sm[i] - dot(&plane, &basis(i))).abs() <= step
                    && plain(i)
            })
            .collect();
        for &i in &more {
            flooded[i] = true;
        }
        flood(&mut flooded, more);
    }
    let seen = flooded.iter().filter(|&&b| b).count();
    if seen * 20 < n {
        return None;
    }
    // 2. Light that falls across the frame shows along its border: light falling by f across
    // it spreads the flooded border cells' middle half over about f/2, and lights a quarter
    // of them above the ring's level (its median) by about f/4. Even light leaves that half
    // within [`MIN_VARIATION`] and nothing above the level, whatever a garment touching the
    // border lets the flood leak into (always darker) or a surface fitted to a garment's
    // light parts says inside: left alone, before the light is fitted (every clean photo
    // stops here).
    let mut border: Vec<f64> = (0..n)
        .filter(|&i| on_border(i) && flooded[i])
        .map(|i| sm[i])
        .collect();
    border.sort_by(f64::total_cmp);
    let quartile = |q: usize| border[(q * (border.len() - 1)) / 4];
    if border.is_empty()
        || quartile(3) - quartile(1) < MIN_VARIATION * level
        || quartile(3) - level < MIN_VARIATION / 2.0 * level
    {
        return None;
    }
    // 3. The light: a plane, or a quadratic where the plane leaves the background curved,
    // each fitted again for each of [`TRIMS`] with the cells well below the last fit left out.
    // The surface on the first `dims` terms, and its cells' median residual (of the level).
    let trimmed = |dims: usize| -> Option<([f64; 6], f64)> {
        let mut coef = fit(&flooded, &sm, basis, dims)?;
        let mut used = flooded.clone();
        for trim in TRIMS {
            let next: Vec<bool> = (0..n)
                .map(|i| flooded[i] && sm[i] >= (1.0 - trim) * dot(&coef, &basis(i)))
                .collect();
            if next.iter().filter(|&&b| b).count() * 20 < n {
                break;
            }
            used = next;
            coef = fit(&used, &sm, basis, dims)?;
        }
        let mut residual: Vec<f64> = (0..n)
            .filter(|&i| used[i])
            .map(|i| (sm[i] - dot(&coef, &basis(i))).abs() / level)
            .collect();
        residual.sort_by(f64::total_cmp);
        Some((coef, residual[residual.len() / 2]))
    };
    let (plane, off_plane) = trimmed(3)?;
    // The quadratic is fitted only when the plane leaves enough to halve.
    let curved = (off_plane > CURVED).then(|| trimmed(6)).flatten();
    let coef = match curved {
        Some((curved, off_curved)) if off_curved * 2.0 <= off_plane => curved,
        _ => plane,
    };
    // Between the darkest light a background may have and white: the ring's level is its
    // median, which light falling across the frame can put well below the bright side.
    let cells: Vec<f64> = (0..n)
        .map(|i| dot(&coef, &basis(i)).clamp(darkest, 255.0))
        .collect();
    // 4. Light varying less than that anywhere is even too.
    let varies = cells
        .iter()
        .any(|&b| (b - level).abs() >= MIN_VARIATION * level);
    varies.then_some(Light { f, gw, gh, cells })
}

/// The 4-neighbours of cell `i` of a `gw × gh` grid (left, right, up, down; `None` past an
/// edge).
pub(crate) fn neighbours(i: usize, gw: usize, gh: usize) -> [Option<usize>; 4] {
    let (x, y) = (i % gw, i / gw);
    [
        (x > 0).then(|| i - 1),
        (x + 1 < gw).then(|| i + 1),
        (y > 0).then(|| i - gw),
        (y + 1 < gh).then(|| i + gw),
    ]
}

fn dot(a: &[f64; 6], b: &[f64; 6]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Least squares of `values` on the first `dims` terms of `basis` over the `used` cells (normal
/// equations, Gaussian elimination with partial pivoting; the other terms' coefficients 0);
/// `None` if singular.
fn fit(
    used: &[bool],
    values: &[f64],
    basis: impl Fn(usize) -> [f64; 6],
    dims: usize,
) -> Option<[f64; 6]> {
    let mut a = [[0.0f64; 7]; 6];
    for i in (0..used.len()).filter(|&i| used[i]) {
        let b = basis(i);
        for r in 0..dims {
            for c in 0..dims {
                a[r][c] += b[r] * b[c];
            }
            a[r][6] += b[r] * values[i];
        }
    }
    for col in 0..dims {
        let pivot = (col..dims).max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))?;
        if a[pivot][col].abs() < 1e-9 {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col];
        for (r, row) in a.iter_mut().enumerate().take(dims) {
            if r != col {
                let k = row[col] / pivot_row[col];
                for (x, p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                    *x -= k * p;
                }
            }
        }
    }
    let mut out = [0.0; 6];
    for (r, o) in out.iter_mut().enumerate().take(dims) {
        *o = a[r][6] / a[r][r];
    }
    Some(out)
}

/// Each pixel's channels scaled by `level` over the light at it (bilinear between the cells'
/// centres, clamped at the grid's edge).
fn apply(rgb: &[[u8; 3]], width: usize, height: usize, level: f64, light: &Light) -> Vec<[u8; 3]> {
    let Light { f, gw, gh, cells } = light;
    let (f, gw, gh) = (*f, *gw, *gh);
    let coord = |p: usize, cellsn: usize| -> (usize, usize, f64) {
        let c = ((p as f64 + 0.5) / f as f64 - 0.5).clamp(0.0, (cellsn - 1) as f64);
        let c0 = c.floor() as usize;
        let c1 = (c0 + 1).min(cellsn - 1);
        (c0, c1, c - c0 as f64)
    };
    let mut out = Vec::with_capacity(rgb.len());
    for y in 0..height {
        let (y0, y1, fy) = coord(y, gh);
        for x in 0..width {
            let (x0, x1, fx) = coord(x, gw);
            let at = |cx: usize, cy: usize| cells[cy * gw + cx];
            let b = (1.0 - fy) * ((1.0 - fx) * at(x0, y0) + fx * at(x1, y0))
                + fy * ((1.0 - fx) * at(x0, y1) + fx * at(x1, y1));
            let k = level / b;
            let p = rgb[y * width + x];
            let c = |v: u8| (v as f64 * k).round().clamp(0.0, 255.0) as u8;
            out.push([c(p[0]), c(p[1]), c(p[2])]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 112-pixel photo: a dark rectangle (level 60) on a background of 240, the light
    /// falling by `fall` from left to right, and a shadow of `shadow` darkness: the rectangle
    /// moved 8 right and 5 down, blurred (the share of a 13×13 square around the pixel in it).
    fn scene(fall: f64, shadow: f64) -> Vec<[u8; 3]> {
        lit(|x, _| 1.0 - fall * x as f64 / 111.0, shadow, garment)
    }

    fn garment(x: i32, y: i32) -> bool {
        (30..70).contains(&x) && (20..92).contains(&y)
    }

    /// [`scene`] under the light `light(x, y)`, the garment where `garment(x, y)`.
    fn lit(
        light: impl Fn(i32, i32) -> f64,
        shadow: f64,
        garment: fn(i32, i32) -> bool,
    ) -> Vec<[u8; 3]> {
        let mut out = Vec::new();
        for y in 0..112 {
            for x in 0..112 {
                let light = light(x, y);
                let v = if garment(x, y) {
                    60.0 * light
                } else {
                    let mut inside = 0;
                    for dy in -6..=6 {
                        for dx in -6..=6 {
                            inside += i32::from(garment(x - 8 + dx, y - 5 + dy));
                        }
                    }
                    240.0 * light * (1.0 - shadow * inside as f64 / 169.0)
                };
                let g = v.round() as u8;
                out.push([g, g, g]);
            }
        }
        out
    }

    #[test]
    fn even_light_is_left_alone() {
        assert!(even_out(&scene(0.0, 0.0), 112, 112, 240).is_none());
        // A dark background: nothing is done.
        assert!(even_out(&vec![[20u8; 3]; 112 * 112], 112, 112, 20).is_none());
        // A shadow under even light: the border is even, so the light is (see the module's
        // note on shadows).
        assert!(even_out(&scene(0.0, 0.3), 112, 112, 240).is_none());
    }

    #[test]
    fn uneven_light_is_divided_out() {
        let clean = scene(0.0, 0.0);
        for fall in [0.2, 0.3, 0.4] {
            let photo = scene(fall, 0.0);
            let level = 240 - (240.0 * fall / 2.0) as i32;
            let even = even_out(&photo, 112, 112, level).expect("uneven");
            // The background is one level again, and the garment keeps its contrast
            // against it.
            for y in [5, 50, 100] {
                for x in [5, 20, 50, 72, 85, 100] {
                    if (30..70).contains(&x) && (20..92).contains(&y) {
                        continue;
                    }
                    let v = even[y * 112 + x][0] as i32;
                    assert!((v - level).abs() <= 6, "{fall}: ({x}, {y}) {v} vs {level}");
                }
            }
            let ratio = even[56 * 112 + 50][0] as f64 / level as f64;
            let want = clean[56 * 112 + 50][0] as f64 / 240.0;
            assert!((ratio - want).abs() < 0.03, "{fall}: {ratio} vs {want}");
        }
    }

    /// How many levels the background of `photo` (where `garment` is false) spans after
    /// [`even_out`] at the border ring's median, as the photo pipeline takes it (on a 6-pixel
    /// lattice).
    fn evened_spread(photo: &[[u8; 3]], garment: fn(i32, i32) -> bool) -> u8 {
        let mut ring: Vec<u8> = (0..112 * 112)
            .filter(|i| [i % 112, i / 112].iter().any(|&c| !(3..109).contains(&c)))
            .map(|i| photo[i][0])
            .collect();
        ring.sort();
        let level = ring[ring.len() / 2] as i32;
        let even = even_out(photo, 112, 112, level).expect("uneven");
        let (mut lo, mut hi) = (255, 0);
        for y in (2..110).step_by(6) {
            for x in (2..110).step_by(6) {
                if !garment(x, y) {
                    let v = even[y as usize * 112 + x as usize][0];
                    (lo, hi) = (lo.min(v), hi.max(v));
                }
            }
        }
        hi - lo
    }

    /// Light falling off towards the corners (a vignette, 30 % at the corners) is curved:
    /// the quadratic is taken and the background is one level again (a plane leaves it 20
    /// levels and more apart).
    #[test]
    fn a_vignette_is_divided_out() {
        let light = |x: i32, y: i32| {
            let (u, v) = ((x as f64 - 55.5) / 55.5, (y as f64 - 55.5) / 55.5);
            1.0 - 0.15 * (u * u + v * v)
        };
        let spread = evened_spread(&lit(light, 0.0, garment), garment);
        assert!(spread <= 6, "the background spreads over {spread} levels");
    }

    /// A garment from the top edge to the bottom splits the border ring in two; light falling
    /// across it from the left puts the two parts 25 % apart, so the ring's level seeds one
    /// of them only: the other is seeded again where the plane through the first meets it,
    /// and the whole background is one level again.
    #[test]
    fn a_garment_from_edge_to_edge_keeps_the_far_side_of_the_border() {
        fn tall(x: i32, _: i32) -> bool {
            (36..76).contains(&x)
        }
        let photo = lit(|x, _| 1.0 - 0.35 * x as f64 / 111.0, 0.0, tall);
        let spread = evened_spread(&photo, tall);
        assert!(spread <= 6, "the background spreads over {spread} levels");
    }
}
