//! Temporary probe: dumps component scores to CSV.
use data::assets::QUERY_WEIGHTS;
use data::fashion::{balanced_anchors, load_split, reserved_train, DEFAULT_DIR};
use data::not_clothing::{generate, KINDS};
use data::photos::{render, Shot};
use embed::model::Model;
use embed::ood::{distance2, fit_class_gaussians, look};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::Write;

fn stats(p: &[u8]) -> Vec<f32> {
    let mut v = Vec::new();
    for by in 0..7 {
        for bx in 0..7 {
            let mut s = 0u32;
            for y in 0..4 {
                for x in 0..4 {
                    s += p[(by * 4 + y) * 28 + bx * 4 + x] as u32;
                }
            }
            v.push(s as f32 / 16.0 / 255.0);
        }
    }
    v
}
fn hand(p: &[u8]) -> Vec<f32> {
    let ink: f32 = p.iter().map(|&x| x as f32).sum::<f32>().max(1.0);
    let fill = p.iter().filter(|&&x| x > 32).count() as f32 / 784.0;
    let mid = p.iter().filter(|&&x| x > 32 && x < 160).count() as f32 / 784.0;
    let mut tv = 0.0f32;
    for y in 0..28 {
        for x in 0..28 {
            let a = p[y * 28 + x] as f32;
            if x + 1 < 28 {
                tv += (p[y * 28 + x + 1] as f32 - a).abs();
            }
            if y + 1 < 28 {
                tv += (p[(y + 1) * 28 + x] as f32 - a).abs();
            }
        }
    }
    // components of p > 32 (4-connected)
    let mut seen = vec![false; 784];
    let mut comps = 0;
    for s in 0..784 {
        if p[s] > 32 && !seen[s] {
            comps += 1;
            let mut st = vec![s];
            seen[s] = true;
            while let Some(i) = st.pop() {
                let (x, y) = (i % 28, i / 28);
                let mut nb = vec![];
                if x > 0 {
                    nb.push(i - 1)
                }
                if x < 27 {
                    nb.push(i + 1)
                }
                if y > 0 {
                    nb.push(i - 28)
                }
                if y < 27 {
                    nb.push(i + 28)
                }
                for j in nb {
                    if p[j] > 32 && !seen[j] {
                        seen[j] = true;
                        st.push(j);
                    }
                }
            }
        }
    }
    // holes: background components (p<=32) not touching the border
    let mut seen = vec![false; 784];
    let mut holes = 0;
    for s in 0..784 {
        if p[s] <= 32 && !seen[s] {
            let mut border = false;
            let mut st = vec![s];
            seen[s] = true;
            while let Some(i) = st.pop() {
                let (x, y) = (i % 28, i / 28);
                if x == 0 || y == 0 || x == 27 || y == 27 {
                    border = true;
                }
                let mut nb = vec![];
                if x > 0 {
                    nb.push(i - 1)
                }
                if x < 27 {
                    nb.push(i + 1)
                }
                if y > 0 {
                    nb.push(i - 28)
                }
                if y < 27 {
                    nb.push(i + 28)
                }
                for j in nb {
                    if p[j] <= 32 && !seen[j] {
                        seen[j] = true;
                        st.push(j);
                    }
                }
            }
            if !border {
                holes += 1;
            }
        }
    }
    vec![
        ink / 784.0 / 255.0,
        fill,
        mid,
        tv / ink,
        (comps as f32).ln_1p(),
        (holes as f32).ln_1p(),
    ]
}

/// ring spread, box area share, mask fill in box, components, largest share
fn photo_stats(rgba: &[u8], w: usize, h: usize, fr: &embed::photo::Framing) -> Vec<f32> {
    let bg = fr.background;
    let differs = |i: usize| (0..3).any(|c| (rgba[4 * i + c] as i32 - bg[c] as i32).abs() > 24);
    let ring = (w.min(h) / 32).max(1);
    let (mut rn, mut rd) = (0, 0);
    for y in 0..h { for x in 0..w { if x < ring || y < ring || x + ring >= w || y + ring >= h { rn += 1; rd += differs(y * w + x) as usize; } } }
    let (x0, y0, x1, y1) = fr.bbox;
    let area = ((x1 - x0) * (y1 - y0)) as f32 / (w * h) as f32;
    // mask on a grid of at most 112 a side over the box
    let step = ((x1 - x0).max(y1 - y0) / 112).max(1);
    let (gw, gh) = ((x1 - x0) / step, (y1 - y0) / step);
    let m: Vec<bool> = (0..gw * gh).map(|k| differs((y0 + (k / gw) * step) * w + x0 + (k % gw) * step)).collect();
    let fill = m.iter().filter(|&&b| b).count() as f32 / m.len().max(1) as f32;
    let mut seen = vec![false; m.len()];
    let (mut comps, mut largest, mut total) = (0, 0usize, 0usize);
    for s0 in 0..m.len() { if m[s0] && !seen[s0] {
        comps += 1; let mut size = 0; let mut st = vec![s0]; seen[s0] = true;
        while let Some(i) = st.pop() { size += 1; let (x, y) = (i % gw, i / gw);
            let mut nb = vec![]; if x > 0 { nb.push(i - 1) } if x + 1 < gw { nb.push(i + 1) } if y > 0 { nb.push(i - gw) } if y + 1 < gh { nb.push(i + gw) }
            for j in nb { if m[j] && !seen[j] { seen[j] = true; st.push(j); } } }
        total += size; largest = largest.max(size);
    }}
    // edge density inside mask: fraction of mask pixels with a non-mask 4-neighbour
    let mut edge = 0;
    for i in 0..m.len() { if m[i] { let (x, y) = (i % gw, i / gw);
        if x == 0 || y == 0 || x + 1 == gw || y + 1 == gh || !m[i - 1] || !m[i + 1] || !m[i - gw] || !m[i + gw] { edge += 1; } } }
    vec![rd as f32 / rn as f32, area, fill, (comps as f32).ln_1p(), largest as f32 / total.max(1) as f32, edge as f32 / total.max(1) as f32]
}

#[test]
#[ignore]
fn probe() {
    let model = Model::from_bytes(QUERY_WEIGHTS).unwrap();
    let dir = std::path::Path::new(DEFAULT_DIR);
    let (test, train) = (
        load_split(dir, "t10k").unwrap(),
        load_split(dir, "train").unwrap(),
    );
    let idx = balanced_anchors(&train, 1000);
    let labels: Vec<u32> = idx.iter().map(|&i| train.labels[i] as u32).collect();
    let images: Vec<&[u8]> = idx.iter().map(|&i| train.images.image(i)).collect();
    let out = model.infer_batch_with_layer_means(&images).unwrap();
    let f: Vec<f32> = out.iter().flat_map(|o| o.0.features.clone()).collect();
    let l: Vec<f32> = out.iter().flat_map(|o| o.1.clone()).collect();
    let s: Vec<f32> = images.iter().flat_map(|p| stats(p)).collect();
    let hd: Vec<f32> = images.iter().flat_map(|p| hand(p)).collect();
    let gf = fit_class_gaussians(&f, &labels, 64).unwrap();
    let gl = fit_class_gaussians(&l, &labels, l.len() / 1000).unwrap();
    let gs = fit_class_gaussians(&s, &labels, 49).unwrap();
    let gh = fit_class_gaussians(&hd, &labels, 6).unwrap();
    let mut out = std::fs::File::create("/tmp/probe.csv").unwrap();
    writeln!(
        out,
        "set,kind,f,l,s,h,ink,refused,{}",
        (0..6)
            .map(|k| format!("h{k}"))
            .collect::<Vec<_>>()
            .join(",")
    )
    .unwrap();
    let mut row =
        |set: &str, kind: &str, rgba: &[u8], w: usize, h: usize| match look(rgba, w, h).unwrap() {
            Err(_) => writeln!(out, "{set},{kind},0,0,0,0,0,1,0,0,0,0,0,0,0,0,0,0,0").unwrap(),
            Ok(fr) => {
                let p = &fr.pixels;
                let (inf, lm) = model.infer_with_layer_means(p).unwrap();
                let hv = hand(p);
                let ink: u32 = p.iter().map(|&x| x as u32).sum();
                writeln!(
                    out,
                    "{set},{kind},{},{},{},{},{ink},0,{}",
                    distance2(&gf, &inf.features) / 64.0,
                    distance2(&gl, &lm) / lm.len() as f64,
                    distance2(&gs, &stats(p)) / 49.0,
                    distance2(&gh, &hv) / 6.0,
                    hv.iter()
                        .map(|v| v.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                )
                .unwrap();
                let ph = photo_stats(rgba, w, h, &fr); writeln!(out, "#,{}", ph.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(",")).unwrap();
            }
        };
    for (kind, name) in KINDS.iter().enumerate() {
        for seed in 0..60 {
            let img = generate(kind, seed);
            row("non", name, &img.rgba, img.width, img.height);
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(6104);
    let grey = |px: &[u8]| -> Vec<u8> { px.iter().flat_map(|&v| [v, v, v, 255]).collect() };
    for part in 0..3 {
        for k in 0..160 {
            let img = test.images.image(5000 + part * 160 + k);
            match part {
                0 => row("clo", "fmnist", &grey(img), 28, 28),
                1 => {
                    let side = rng.random_range(112..=400);
                    let shot = Shot::random(side, &mut rng);
                    row("clo", "family", &render(img, &shot, &mut rng), side, side)
                }
                _ => {
                    let side = rng.random_range(112..=400);
                    let faint: Vec<u8> = img.iter().map(|&v| v / rng.random_range(2..=3)).collect();
                    let shot = Shot {
                        background: rng.random_range(225..=250),
                        ..Shot::random(side, &mut rng)
                    };
                    row("clo", "light", &render(&faint, &shot, &mut rng), side, side)
                }
            }
        }
    }
    // calibration: reserved train
    let held = reserved_train(train.labels.len(), &idx);
    for (k, &i) in held.iter().take(900).enumerate() {
        let img = train.images.image(i);
        match k % 3 {
            0 => row("cal", "fmnist", &grey(img), 28, 28),
            1 => {
                let side = rng.random_range(112..=400);
                let shot = Shot::random(side, &mut rng);
                row("cal", "family", &render(img, &shot, &mut rng), side, side)
            }
            _ => {
                let side = rng.random_range(112..=400);
                let faint: Vec<u8> = img.iter().map(|&v| v / rng.random_range(2..=3)).collect();
                let shot = Shot {
                    background: rng.random_range(225..=250),
                    ..Shot::random(side, &mut rng)
                };
                row("cal", "light", &render(&faint, &shot, &mut rng), side, side)
            }
        }
    }
}
