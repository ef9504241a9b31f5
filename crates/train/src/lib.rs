//! Training of the on-device model (`embed::model`): AdamW on softmax cross-entropy
//! (plus the contrastive and distillation terms) with a cosine learning-rate decay, through
//! the batched network of [`batched`] (batch normalisation and dropout, folded away for
//! inference). Deterministic for a given seed, whatever the thread count: augmentation and
//! dropout are drawn in order, and [`batched`] sums in a fixed order.

use embed::model::{Arch, Model, Weights, CLASSES, EMBED, K};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

pub mod batched;

use batched::{Grads, Net};

#[derive(Debug, Clone, Copy)]
pub struct TrainConfig {
    pub epochs: usize,
    pub batch: usize,
    pub lr: f32,
    pub seed: u64,
    /// Random horizontal flips and ±1-pixel shifts of the training images (Fashion-MNIST
    /// products are roughly mirror-symmetric and not perfectly centred).
    pub augment: bool,
    /// Share of training samples drawn as product photos instead (`data::photos`: a random
    /// background, shift, scale, rotation and noise) and brought back by the client's own
    /// photo pipeline (`embed::photo`), so the model learns what that pipeline leaves
    /// of a photo: its resampling blur, rotations, noise. 0 disables it.
    pub photo_share: f32,
    /// Chance of each of what people's photos add (a soft shadow, light falling across the
    /// frame, a coloured garment: `Shot::as_people_take_them`) on a sample drawn as a photo,
    /// so the model learns what the photo pipeline leaves of them. 0 disables it.
    pub people: f32,
    /// Weight of a contrastive loss (InfoNCE, temperature [`TAU`]) that pulls each photo's
    /// unit embedding towards its clean image's (a fixed target, computed with the clean
    /// batch's own statistics) and away from the other clean images of its batch: what keeps a
    /// photo's exact nearest neighbours where the clean image's are, under the perturbations
    /// the photo pipeline cannot undo. 0 disables it.
    pub contrast: f32,
    /// Weight of a distillation loss `|u − t|²` pulling every sample's unit embedding `u` —
    /// clean, shifted or photo — towards a fixed teacher's unit embedding `t` of the clean
    /// image (mirrored with the sample): the teacher's geometry of the gallery is kept while
    /// the photos' embeddings are pulled onto their clean images' without the targets moving
    /// with them (a consistency term between the student's own views collapsed the
    /// features). 0, or no teacher given to [`train`], disables it.
    pub distill: f32,
    /// Share of the flat layer's values dropped in training (inverted dropout; none at
    /// inference).
    pub dropout: f32,
    /// Decoupled weight decay (AdamW) of the convolution and dense weights.
    pub weight_decay: f32,
    /// The convolutions' widths of a network trained from scratch; one fine-tuned from a
    /// start model is first widened to them where they are wider ([`widen`]).
    pub arch: Arch,
}

/// Temperature of the contrastive loss.
pub const TAU: f32 = 0.1;

/// The unit vector of `h` and its norm. Not `embed::model`'s normalisation: that one
/// floors the norm at `f32::MIN_POSITIVE`, this one at 1e-12, which keeps the gradient's
/// division by the norm (in [`contrastive`]) finite for a near-zero embedding.
fn unit(h: &[f32]) -> (Vec<f32>, f32) {
    let n = h.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
    (h.iter().map(|v| v / n).collect(), n)
}

/// InfoNCE of the view `h` against clean unit `targets` (its own at `own`): the loss and its
/// gradient with respect to `h`, both scaled by `weight`.
fn contrastive(h: &[f32], targets: &[Vec<f32>], own: usize, weight: f32) -> (f32, Vec<f32>) {
    let (u, norm) = unit(h);
    let logits: Vec<f32> = targets
        .iter()
        .map(|t| t.iter().zip(&u).map(|(a, b)| a * b).sum::<f32>() / TAU)
        .collect();
    let p = embed::model::softmax(&logits);
    let loss = -p[own].max(1e-12).ln();
    // dL/du = Σ_j (p_j − [j = own]) t_j / τ; through the normalisation: (I − u uᵀ)/|h|.
    let mut du = vec![0.0f32; u.len()];
    for (j, t) in targets.iter().enumerate() {
        let c = (p[j] - if j == own { 1.0 } else { 0.0 }) / TAU;
        du.iter_mut().zip(t).for_each(|(d, v)| *d += c * v);
    }
    let dot: f32 = du.iter().zip(&u).map(|(a, b)| a * b).sum();
    let dh = du
        .iter()
        .zip(&u)
        .map(|(d, v)| weight * (d - dot * v) / norm)
        .collect();
    (weight * loss, dh)
}

/// Distillation loss `weight · |u − t|²` of the embedding `h` (`u` its unit vector) against a
/// unit target `t`, and its gradient with respect to `h`.
fn distill(h: &[f32], t: &[f32], weight: f32) -> (f32, Vec<f32>) {
    let (u, norm) = unit(h);
    let du: Vec<f32> = u
        .iter()
        .zip(t)
        .map(|(a, b)| 2.0 * weight * (a - b))
        .collect();
    let loss = weight * u.iter().zip(t).map(|(a, b)| (a - b) * (a - b)).sum::<f32>();
    // Through the normalisation: (I − u uᵀ)/|h|.
    let dot: f32 = du.iter().zip(&u).map(|(a, b)| a * b).sum();
    let dh = du
        .iter()
        .zip(&u)
        .map(|(d, v)| (d - dot * v) / norm)
        .collect();
    (loss, dh)
}

/// The teacher's unit embeddings of every image, as is and mirrored.
fn teacher_targets(teacher: &Model, xs: &[Vec<f32>]) -> Vec<[Vec<f32>; 2]> {
    xs.par_iter()
        .map(|x| {
            [
                unit(&teacher.forward(x).h).0,
                unit(&teacher.forward(&embed::model::mirror(x)).h).0,
            ]
        })
        .collect()
}

/// How one training sample is drawn.
#[derive(Debug, Clone, Copy)]
enum Draw {
    Plain,
    /// Mirrored if the flag is set, shifted by `(dx, dy)`.
    Shifted(bool, i32, i32),
    /// A photo taken with `Shot` (noise from a stream seeded with the `u64`), mirrored if set.
    Photo(data::photos::Shot, u64, bool),
}

/// The model input of a photo of the preprocessed image `x` (values `p / 255`).
fn photo_input(x: &[f32], shot: &data::photos::Shot, seed: u64, flip: bool) -> Vec<f32> {
    let img: Vec<u8> = x.iter().map(|v| (v * 255.0).round() as u8).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let photo = data::photos::render(&img, shot, &mut rng);
    let pixels = embed::photo::to_model_input(&photo, shot.side, shot.side)
        .expect("a rendered photo has a valid size");
    let x = embed::model::preprocess(&pixels).expect("28×28");
    if flip {
        embed::model::mirror(&x)
    } else {
        x
    }
}

/// One augmented copy of a preprocessed image: mirrored if `flip`, shifted by `(dx, dy)`
/// pixels with zero (background) fill.
pub fn augment(x: &[f32], flip: bool, dx: i32, dy: i32) -> Vec<f32> {
    let side = embed::model::SIDE as i32;
    let mut out = vec![0.0f32; x.len()];
    for r in 0..side {
        for c in 0..side {
            let (sr, sc0) = (r - dy, c - dx);
            let sc = if flip { side - 1 - sc0 } else { sc0 };
            if (0..side).contains(&sr) && (0..side).contains(&sc) {
                out[(r * side + c) as usize] = x[(sr * side + sc) as usize];
            }
        }
    }
    out
}

/// He-uniform initialisation of a network of widths `arch`, biases zero.
pub fn init(rng: &mut impl Rng, arch: Arch) -> Weights {
    let mut w = Weights::zeros(arch);
    for (k, t) in w.tensors_mut().into_iter().enumerate() {
        if k % 2 == 0 {
            let a = (6.0 / arch.fans()[k / 2] as f32).sqrt();
            t.iter_mut().for_each(|v| *v = rng.random_range(-a..a));
        }
    }
    w
}

/// `w` in a network at least as wide (each width the larger of `w`'s and `arch`'s) that
/// computes exactly what `w` does: the old channels keep their weights, the new ones get
/// He-uniform incoming weights and zero outgoing ones (so nothing they compute reaches the
/// embedding until training moves them). How a wider query model starts from the gallery
/// model: its geometry of the gallery, kept from the first step.
pub fn widen(w: &Weights, arch: Arch, rng: &mut impl Rng) -> Weights {
    let (old, new) = (
        w.arch,
        Arch {
            c1: arch.c1.max(w.arch.c1),
            c2: arch.c2.max(w.arch.c2),
        },
    );
    if new == old {
        return w.clone();
    }
    let fresh = init(rng, new);
    let mut out = Weights::zeros(new);
    let kk = K * K;
    // First convolution: old rows, then fresh ones.
    out.w1 = fresh.w1.clone();
    out.w1[..old.c1 * kk].copy_from_slice(&w.w1);
    out.b1[..old.c1].copy_from_slice(&w.b1);
    // Second: an old output reads its old inputs only; a new output reads every input.
    out.w2 = fresh.w2.clone();
    for o in 0..old.c2 {
        let row = &mut out.w2[o * new.c1 * kk..(o + 1) * new.c1 * kk];
        row[..old.c1 * kk].copy_from_slice(&w.w2[o * old.c1 * kk..(o + 1) * old.c1 * kk]);
        row[old.c1 * kk..].fill(0.0);
    }
    out.b2[..old.c2].copy_from_slice(&w.b2);
    // Embedding: the old channels' columns (channel-major), zero for the new channels'.
    let per = old.flat() / old.c2;
    for e in 0..EMBED {
        out.w3[e * new.flat()..e * new.flat() + old.c2 * per]
            .copy_from_slice(&w.w3[e * old.flat()..e * old.flat() + old.c2 * per]);
    }
    out.b3.copy_from_slice(&w.b3);
    out.w4.copy_from_slice(&w.w4);
    out.b4.copy_from_slice(&w.b4);
    out
}

/// Adam with decoupled weight decay (AdamW) over the batched network's trainable tensors.
struct Adam {
    m: Grads,
    v: Grads,
    t: i32,
}

impl Adam {
    fn step(&mut self, net: &mut Net, g: &Grads, lr: f32, decay: f32) {
        let (b1, b2, eps) = (0.9f32, 0.999f32, 1e-8f32);
        self.t += 1;
        let c1 = 1.0 - b1.powi(self.t);
        let c2 = 1.0 - b2.powi(self.t);
        for (k, wt) in net.params_mut().into_iter().enumerate() {
            let (gt, mt, vt) = (&g.0[k], &mut self.m.0[k], &mut self.v.0[k]);
            let d = if Net::DECAYS[k] { decay } else { 0.0 };
            for i in 0..wt.len() {
                mt[i] = b1 * mt[i] + (1.0 - b1) * gt[i];
                vt[i] = b2 * vt[i] + (1.0 - b2) * gt[i] * gt[i];
                wt[i] -= lr * ((mt[i] / c1) / ((vt[i] / c2).sqrt() + eps) + d * wt[i]);
            }
        }
    }
}

/// The model input of one drawn sample of the preprocessed image `x`.
fn draw_input(x: &[f32], draw: &Draw) -> Vec<f32> {
    match *draw {
        Draw::Plain => x.to_vec(),
        Draw::Shifted(flip, dx, dy) => augment(x, flip, dx, dy),
        Draw::Photo(ref shot, seed, flip) => photo_input(x, shot, seed, flip),
    }
}

/// Train on preprocessed images `xs` with `labels` (distilling from `teacher` if given and
/// `cfg.distill > 0`), from `start`'s weights if given (unfolded at the statistics of the first
/// 2,000 images, [`Net::unfold`]: how the query model is fine-tuned from the gallery model) or
/// from [`init`]; `after_epoch(epoch, model, mean_loss)` is called after each epoch (for progress reports). Shows each epoch's batches and running loss
/// (`crate::ops::progress`: a bar on a terminal, log lines otherwise).
pub fn train(
    xs: &[Vec<f32>],
    labels: &[u8],
    cfg: &TrainConfig,
    teacher: Option<&Model>,
    start: Option<&Model>,
    mut after_epoch: impl FnMut(usize, &Model, f64),
) -> Model {
    let taught = match teacher {
        Some(t) if cfg.distill > 0.0 => {
            tracing::info!(images = xs.len(), "the teacher's embeddings");
            teacher_targets(t, xs)
        }
        _ => Vec::new(),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut net = match start {
        Some(m) => {
            let w = widen(&m.w, cfg.arch, &mut rng);
            Net::unfold(&w, &xs[..xs.len().min(2000)].concat())
        }
        None => Net::new(&init(&mut rng, cfg.arch)),
    };
    let mut adam = Adam {
        m: net.zero_grads(),
        v: net.zero_grads(),
        t: 0,
    };
    let mut order: Vec<usize> = (0..xs.len()).collect();
    let batches = order.len().div_ceil(cfg.batch);
    for epoch in 0..cfg.epochs {
        order.shuffle(&mut rng);
        let mut loss_sum = 0.0f64;
        let mut seen = 0usize;
        let bar = data::progress::Progress::new(
            format!("epoch {}/{}", epoch + 1, cfg.epochs),
            batches as u64,
            "batches",
        );
        for (bi, batch) in order.chunks(cfg.batch).enumerate() {
            // Drawn sequentially, so the augmentation is the same whatever the thread count.
            let aug: Vec<Draw> = batch
                .iter()
                .map(|_| {
                    if cfg.photo_share > 0.0 && rng.random::<f32>() < cfg.photo_share {
                        let side = if rng.random::<bool>() { 56 } else { 112 };
                        let mut shot = data::photos::Shot::random(side, &mut rng);
                        shot.noise = rng.random_range(0.0..8.0);
                        let shot = shot.as_people_take_them(cfg.people, &mut rng);
                        Draw::Photo(shot, rng.random(), rng.random())
                    } else if cfg.augment {
                        Draw::Shifted(
                            rng.random::<bool>(),
                            rng.random_range(-1..=1),
                            rng.random_range(-1..=1),
                        )
                    } else {
                        Draw::Plain
                    }
                })
                .collect();
            let keep: Vec<f32> = if cfg.dropout > 0.0 {
                let k = 1.0 / (1.0 - cfg.dropout);
                (0..batch.len() * net.arch().flat())
                    .map(|_| {
                        if rng.random::<f32>() < cfg.dropout {
                            0.0
                        } else {
                            k
                        }
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let progress = (epoch * batches + bi) as f32 / (cfg.epochs * batches) as f32;
            let lr = cfg.lr * 0.5 * (1.0 + (std::f32::consts::PI * progress).cos());
            let inputs: Vec<f32> = batch
                .par_iter()
                .zip(&aug)
                .flat_map_iter(|(&i, draw)| draw_input(&xs[i], draw))
                .collect();
            // The clean images' unit embeddings, the contrastive loss's fixed targets.
            let targets: Vec<Vec<f32>> = if cfg.contrast > 0.0 {
                let clean: Vec<f32> = batch
                    .par_iter()
                    .zip(&aug)
                    .flat_map_iter(|(&i, draw)| match *draw {
                        Draw::Photo(_, _, true) | Draw::Shifted(true, _, _) => {
                            embed::model::mirror(&xs[i])
                        }
                        _ => xs[i].clone(),
                    })
                    .collect();
                let c = net.forward(&clean, Vec::new());
                c.h.chunks_exact(EMBED).map(|h| unit(h).0).collect()
            } else {
                Vec::new()
            };
            let cache = net.forward(&inputs, keep);
            net.track(&cache);
            let scale = 1.0 / batch.len() as f32;
            let mut dlogits = vec![0.0f32; batch.len() * CLASSES];
            let mut dh = vec![0.0f32; batch.len() * EMBED];
            for (j, (&i, draw)) in batch.iter().zip(&aug).enumerate() {
                let p = embed::model::softmax(&cache.logits[j * CLASSES..][..CLASSES]);
                loss_sum -= (p[labels[i] as usize].max(1e-12) as f64).ln();
                for (c, (d, pc)) in dlogits[j * CLASSES..][..CLASSES]
                    .iter_mut()
                    .zip(&p)
                    .enumerate()
                {
                    *d = scale * (pc - if c == labels[i] as usize { 1.0 } else { 0.0 });
                }
                if matches!(draw, Draw::Photo(..)) && cfg.contrast > 0.0 {
                    let h = &cache.h[j * EMBED..][..EMBED];
                    let (cl, g) = contrastive(h, &targets, j, cfg.contrast);
                    loss_sum += cl as f64;
                    dh[j * EMBED..][..EMBED]
                        .iter_mut()
                        .zip(g)
                        .for_each(|(d, v)| *d += scale * v);
                }
                if let Some(t) = taught.get(i) {
                    let flip = matches!(draw, Draw::Photo(_, _, true) | Draw::Shifted(true, _, _));
                    let h = &cache.h[j * EMBED..][..EMBED];
                    let (dl, g) = distill(h, &t[usize::from(flip)], cfg.distill);
                    loss_sum += dl as f64;
                    dh[j * EMBED..][..EMBED]
                        .iter_mut()
                        .zip(g)
                        .for_each(|(d, v)| *d += scale * v);
                }
            }
            let mut g = net.zero_grads();
            net.backward(&cache, &dlogits, &dh, &mut g);
            adam.step(&mut net, &g, lr, cfg.weight_decay);
            seen += batch.len();
            bar.set_message(format!("loss {:.4}", loss_sum / seen as f64));
            bar.inc(1);
        }
        bar.finish();
        after_epoch(
            epoch,
            &Model { w: net.fold() },
            loss_sum / order.len() as f64,
        );
    }
    Model { w: net.fold() }
}

#[cfg(test)]
mod tests {
    /// A widened network computes what its start computes (features, probabilities, energy,
    /// for random images): the new channels reach nothing until trained; its new weights are
    /// not all zero.
    #[test]
    fn widening_keeps_what_the_network_computes() {
        let mut rng = ChaCha8Rng::seed_from_u64(31);
        let small = Model {
            w: init(&mut rng, Arch::SMALL),
        };
        let wide = Model {
            w: widen(&small.w, Arch::WIDE, &mut rng),
        };
        assert_eq!(wide.w.arch, Arch::WIDE);
        assert!(wide.w.w2.iter().skip(64 * 64 * 25).any(|v| *v != 0.0));
        assert_eq!(widen(&small.w, Arch::SMALL, &mut rng), small.w);
        for k in 0..6 {
            let px: Vec<u8> = (0..784).map(|i| ((i * (k + 3) * 37) % 256) as u8).collect();
            let (a, b) = (small.infer(&px).unwrap(), wide.infer(&px).unwrap());
            assert_eq!(a.features, b.features, "image {k}");
            assert_eq!(a.probabilities, b.probabilities, "image {k}");
            assert_eq!(a.energy, b.energy, "image {k}");
        }
    }
    use super::*;

    /// The contrastive loss's gradient is its derivative (central differences).
    #[test]
    fn contrastive_gradient_matches_finite_differences() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let h: Vec<f32> = (0..8).map(|_| rng.random_range(-1.0..1.0)).collect();
        let targets: Vec<Vec<f32>> = (0..5)
            .map(|_| {
                unit(
                    &(0..8)
                        .map(|_| rng.random_range(-1.0..1.0))
                        .collect::<Vec<f32>>(),
                )
                .0
            })
            .collect();
        let (_, grad) = contrastive(&h, &targets, 2, 0.7);
        for k in 0..h.len() {
            let step = 1e-3f32;
            let at = |d: f32| {
                let mut x = h.clone();
                x[k] += d;
                contrastive(&x, &targets, 2, 0.7).0
            };
            let numeric = (at(step) - at(-step)) / (2.0 * step);
            assert!(
                (numeric - grad[k]).abs() <= 2e-2 * numeric.abs().max(1.0),
                "coordinate {k}: {numeric} against {}",
                grad[k]
            );
        }
        // At its own target's direction with the others far, the loss is near 0.
        let own = contrastive(&targets[2], &targets, 2, 1.0).0;
        assert!(own < contrastive(&targets[0], &targets, 2, 1.0).0);
    }

    /// The distillation loss's gradient is its derivative (central differences), and the loss
    /// is 0 exactly at the target's direction, whatever the embedding's length.
    #[test]
    fn distill_gradient_matches_finite_differences() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let h: Vec<f32> = (0..8).map(|_| rng.random_range(-1.0..1.0)).collect();
        let t = unit(
            &(0..8)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect::<Vec<f32>>(),
        )
        .0;
        let (_, grad) = distill(&h, &t, 3.0);
        for k in 0..h.len() {
            let step = 1e-3f32;
            let at = |d: f32| {
                let mut x = h.clone();
                x[k] += d;
                distill(&x, &t, 3.0).0
            };
            let numeric = (at(step) - at(-step)) / (2.0 * step);
            assert!(
                (numeric - grad[k]).abs() <= 2e-2 * numeric.abs().max(1.0),
                "coordinate {k}: {numeric} against {}",
                grad[k]
            );
        }
        let long: Vec<f32> = t.iter().map(|v| 5.0 * v).collect();
        let (loss, g) = distill(&long, &t, 3.0);
        assert!(
            loss.abs() < 1e-10 && g.iter().all(|v| v.abs() < 1e-6),
            "{loss} {g:?}"
        );
    }

    /// Same seed, same data → the same weights, with one thread or two.
    #[test]
    fn training_is_deterministic_across_thread_counts() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let xs: Vec<Vec<f32>> = (0..96)
            .map(|_| (0..784).map(|_| rng.random::<f32>()).collect())
            .collect();
        let labels: Vec<u8> = (0..96).map(|i| (i % 10) as u8).collect();
        let cfg = TrainConfig {
            epochs: 1,
            batch: 32,
            lr: 1e-3,
            seed: 9,
            augment: true,
            photo_share: 0.5,
            people: 0.5,
            contrast: 0.5,
            distill: 0.5,
            dropout: 0.25,
            weight_decay: 1e-3,
            arch: Arch::SMALL,
        };
        // A teacher to distil from: every loss term runs.
        let teacher = Model {
            w: init(&mut ChaCha8Rng::seed_from_u64(6), Arch::SMALL),
        };
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                train(&xs, &labels, &cfg, Some(&teacher), None, |_, _, _| {})
                    .w
                    .to_bytes()
            })
        };
        let a = run(1);
        assert_eq!(a, run(2));
        assert_eq!(a, run(1));
        let other = TrainConfig { seed: 10, ..cfg };
        assert_ne!(
            a,
            train(&xs, &labels, &other, None, None, |_, _, _| {})
                .w
                .to_bytes()
        );
    }

    #[test]
    fn augment_flips_and_shifts_with_background_fill() {
        let x: Vec<f32> = (0..784).map(|i| i as f32).collect();
        assert_eq!(augment(&x, false, 0, 0), x);
        let f = augment(&x, true, 0, 0);
        assert_eq!(f[0], 27.0);
        assert_eq!(f[28 + 5], (28 + 22) as f32);
        assert_eq!(augment(&f, true, 0, 0), x);
        let s = augment(&x, false, 1, -1); // right by one, up by one
        assert_eq!(s[0], 0.0); // filled: its source (row 1, col -1) is outside
        assert_eq!(s[1], x[28]); // (0,1) ← (1,0)
        assert_eq!(s[27 * 28 + 5], 0.0); // bottom row: source row 28 is outside
    }
}
