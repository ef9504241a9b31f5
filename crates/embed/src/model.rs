//! The on-device feature model, defined once for inference (native and wasm): a small CNN for
//! 28×28 greyscale images. Training (`train`) runs the same
//! network on whole batches with batch normalisation, folded into these convolutions' weights
//! when it writes them; its tests check the folded weights against [`Model::forward`].
//!
//! conv 5×5 (1→c1) · ReLU · max-pool 2 → conv 5×5 (c1→c2) · ReLU · max-pool 2 → dense
//! 16·c2→64 (the **embedding**; its unit-normalised value is the feature vector) → ReLU →
//! dense 64→10 (class logits; softmax gives the probabilities). The widths `c1`, `c2` are the
//! weights' [`Arch`] (32 and 64 for the gallery model, 64 and 128 for the query model); the
//! weights and their files are [`super::weights`].
//!
//! Preprocessing (the same everywhere): 28×28 pixels, row-major, one byte each, 0 = background,
//! as in Fashion-MNIST (light object on a dark background), turned upright
//! ([`super::upright`]: the object's principal axis onto the nearest image axis, reframed) and
//! scaled to `p / 255` as f32. All arithmetic is f32 in a fixed order, so native and wasm builds give the same results.

use shared::error::{Error, Result};

pub use super::weights::{
    Arch, Weights, CLASSES, EMBED, K, MAX_BIAS, MAX_CHANNELS, MAX_WEIGHT, PIXELS, SIDE,
};
use super::weights::{P1, P2};

/// What one forward pass leaves: the pooled maps of both convolutions (for the
/// out-of-distribution check's channel means), the embedding and the logits.
pub struct Trace {
    p1: Vec<f32>,
    p2: Vec<f32>,
    /// The embedding (pre-activation).
    pub h: Vec<f32>,
    pub logits: Vec<f32>,
}

impl Trace {
    /// The mean of each pooled channel of both convolution layers (`c1 + c2` values, [`Arch::layer_dim`]): what the
    /// out-of-distribution check compares besides the embedding, since the embedding keeps
    /// only what tells the ten classes apart.
    pub fn channel_means(&self) -> Vec<f32> {
        channel_means(&self.p1, &self.p2, |&v| v)
    }
}

/// [`Trace::channel_means`] of pooled maps `p1` (`[c1][P1][P1]`) and `p2` (`[c2][P2][P2]`)
/// whose values are `value(&p[i])`: the scalar pass's maps with the identity, and one lane of
/// [`Lanes8`]'s maps (the same layout) with that lane's value. One code for both, so each
/// channel is summed in the same order (first to last, as `Iterator::sum` folds) and divided
/// by the same f32 — the batched means are the scalar ones bit for bit.
fn channel_means<T>(p1: &[T], p2: &[T], value: impl Fn(&T) -> f32) -> Vec<f32> {
    let mean = |v: &[T], side: usize| {
        v.chunks_exact(side * side)
            .map(|c| c.iter().map(&value).sum::<f32>() / (side * side) as f32)
            .collect::<Vec<f32>>()
    };
    let mut out = mean(p1, P1);
    out.extend(mean(p2, P2));
    out
}

/// What inference returns.
#[derive(Debug, Clone, PartialEq)]
pub struct Inference {
    /// Unit-norm feature vector (the embedding, normalised).
    pub features: Vec<f32>,
    pub label: u32,
    pub probabilities: Vec<f32>,
    /// The logits' free energy `−log Σ exp(logit)` (of the mirrored pair's averaged logits):
    /// low for inputs like the training data, high for inputs unlike any class
    /// (Liu et al., *Energy-based out-of-distribution detection*, 2020); see
    /// [`super::ood`].
    pub energy: f32,
}

/// The model's input: the image turned upright ([`super::upright`]), scaled to `p / 255`.
pub fn preprocess(pixels: &[u8]) -> Result<Vec<f32>> {
    if pixels.len() != PIXELS {
        return Err(Error::DimensionMismatch {
            what: "image pixels",
            expected: PIXELS,
            got: pixels.len(),
        });
    }
    Ok(super::upright::upright(pixels)
        .iter()
        .map(|&p| p as f32 / 255.0)
        .collect())
}

/// The mirror image (left–right) of a preprocessed 28×28 input.
pub fn mirror(x: &[f32]) -> Vec<f32> {
    x.chunks_exact(SIDE)
        .flat_map(|row| row.iter().rev().copied())
        .collect()
}

fn conv_relu_pool(
    input: &[f32],
    cin: usize,
    side: usize,
    w: &[f32],
    b: &[f32],
    cout: usize,
) -> Vec<f32> {
    let s = side - K + 1;
    let p = s / 2;
    let mut z = vec![0.0f32; cout * s * s];
    for o in 0..cout {
        let zo = &mut z[o * s * s..(o + 1) * s * s];
        zo.iter_mut().for_each(|v| *v = b[o]);
        for c in 0..cin {
            let ic = &input[c * side * side..(c + 1) * side * side];
            for ky in 0..K {
                for kx in 0..K {
                    let wv = w[((o * cin + c) * K + ky) * K + kx];
                    for i in 0..s {
                        let row = &ic[(i + ky) * side + kx..(i + ky) * side + kx + s];
                        let zr = &mut zo[i * s..(i + 1) * s];
                        for (zv, &xv) in zr.iter_mut().zip(row) {
                            *zv += wv * xv;
                        }
                    }
                }
            }
        }
    }
    let mut pooled = vec![0.0f32; cout * p * p];
    for o in 0..cout {
        for i in 0..p {
            for j in 0..p {
                let at = |dy: usize, dx: usize| z[o * s * s + (2 * i + dy) * s + 2 * j + dx];
                let best = at(0, 0).max(at(0, 1)).max(at(1, 0)).max(at(1, 1));
                pooled[o * p * p + i * p + j] = best.max(0.0);
            }
        }
    }
    pooled
}

fn dense(w: &[f32], b: &[f32], x: &[f32], out: usize) -> Vec<f32> {
    (0..out)
        .map(|o| {
            b[o] + w[o * x.len()..(o + 1) * x.len()]
                .iter()
                .zip(x)
                .map(|(a, b)| a * b)
                .sum::<f32>()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Batched inference: eight inputs at once, one per lane.
//
// Every value of every lane is computed by exactly the operations of the scalar forward pass,
// in the same order (`acc = acc + w * x`, no fused multiply-add, no reassociation; ReLU and
// max-pool with the same `max` and comparisons), so each lane is bit-identical to
// [`Model::forward`]; only the loop order *across* outputs differs. The lanes are plain
// `[f32; 8]` arrays that LLVM vectorises (256-bit AVX where the CPU has it, see
// [`Model::infer_batch`]).

/// Inputs processed together by [`Model::infer_batch`].
pub const BATCH_LANES: usize = 8;
type L = [f32; BATCH_LANES];

/// The start value of `Iterator::sum::<f32>()` (the standard library folds from it), so the
/// dense layers' lanes sum exactly as [`dense`] does; a test checks it against `std`.
const SUM_START: f32 = -0.0;

#[inline(always)]
fn splat(v: f32) -> L {
    [v; BATCH_LANES]
}

/// `acc = acc + w * x` per lane (the product rounded, then the sum: never fused).
#[inline(always)]
fn mac(acc: &mut L, w: f32, x: &L) {
    for (a, v) in acc.iter_mut().zip(x) {
        *a += w * *v;
    }
}

/// One pooled value from the four pre-activations of a 2×2 window, in the order
/// (0,0), (0,1), (1,0), (1,1): ReLU, then the first strict maximum, as [`conv_relu_pool`].
#[inline(always)]
fn relu_pool(window: [&L; 4]) -> L {
    let mut best = splat(f32::NEG_INFINITY);
    for z in window {
        for (b, &v) in best.iter_mut().zip(z) {
            let v = v.max(0.0);
            *b = if v > *b { v } else { *b };
        }
    }
    best
}

/// Output columns computed together by [`conv_relu_pool8`] (in each of two rows).
const CONV_BLOCK: usize = 4;

/// [`conv_relu_pool`] without the argmax, on lanes: `input` is `[cin][side][side]`, `out`
/// `[cout][p][p]` with `p = (side - K + 1) / 2`. Each step computes a 2×`CONV_BLOCK` block of
/// pre-activations (two rows, so the block pools into `CONV_BLOCK / 2` outputs) in registers.
#[inline(always)]
fn conv_relu_pool8(
    input: &[L],
    cin: usize,
    side: usize,
    w: &[f32],
    b: &[f32],
    cout: usize,
    out: &mut [L],
) {
    let s = side - K + 1;
    let p = s / 2;
    debug_assert!(s.is_multiple_of(CONV_BLOCK));
    debug_assert_eq!(input.len(), cin * side * side);
    debug_assert_eq!(out.len(), cout * p * p);
    for o in 0..cout {
        let wo = &w[o * cin * K * K..(o + 1) * cin * K * K];
        for pi in 0..p {
            for j0 in (0..s).step_by(CONV_BLOCK) {
                let mut acc = [[splat(b[o]); CONV_BLOCK]; 2];
                for c in 0..cin {
                    let ic = &input[c * side * side..(c + 1) * side * side];
                    for ky in 0..K {
                        for kx in 0..K {
                            let wv = wo[(c * K + ky) * K + kx];
                            for (dy, row) in acc.iter_mut().enumerate() {
                                let start = (2 * pi + dy + ky) * side + j0 + kx;
                                let xs = &ic[start..start + CONV_BLOCK];
                                for (a, x) in row.iter_mut().zip(xs) {
                                    mac(a, wv, x);
                                }
                            }
                        }
                    }
                }
                for q in 0..CONV_BLOCK / 2 {
                    out[o * p * p + pi * p + j0 / 2 + q] = relu_pool([
                        &acc[0][2 * q],
                        &acc[0][2 * q + 1],
                        &acc[1][2 * q],
                        &acc[1][2 * q + 1],
                    ]);
                }
            }
        }
    }
}

/// Dense outputs computed together by [`dense8`] (one pass over the input for each block).
const DENSE_BLOCK: usize = 8;

/// [`dense`] on lanes: `out[o] = b[o] + (SUM_START + w[o][0]·x[0] + w[o][1]·x[1] + …)`.
#[inline(always)]
fn dense8(w: &[f32], b: &[f32], x: &[L], out: &mut [L]) {
    let n = x.len();
    for (o0, block) in out.chunks_mut(DENSE_BLOCK).enumerate() {
        let o0 = o0 * DENSE_BLOCK;
        let mut acc = [splat(SUM_START); DENSE_BLOCK];
        for (k, xk) in x.iter().enumerate() {
            for (d, a) in acc.iter_mut().enumerate().take(block.len()) {
                mac(a, w[(o0 + d) * n + k], xk);
            }
        }
        for (d, (h, a)) in block.iter_mut().zip(&acc).enumerate() {
            for (v, &s) in h.iter_mut().zip(a) {
                *v = b[o0 + d] + s;
            }
        }
    }
}

/// Working memory of one batched forward pass.
struct Lanes8 {
    x: Vec<L>,      // [SIDE][SIDE]
    p1: Vec<L>,     // [c1][P1][P1]
    p2: Vec<L>,     // [c2][P2][P2] = flat
    h: Vec<L>,      // [EMBED]
    r: Vec<L>,      // [EMBED]
    logits: Vec<L>, // [CLASSES]
}

impl Lanes8 {
    fn new(arch: Arch) -> Self {
        Lanes8 {
            x: vec![splat(0.0); PIXELS],
            p1: vec![splat(0.0); arch.c1 * P1 * P1],
            p2: vec![splat(0.0); arch.flat()],
            h: vec![splat(0.0); EMBED],
            r: vec![splat(0.0); EMBED],
            logits: vec![splat(0.0); CLASSES],
        }
    }
}

/// The forward pass of [`Model::forward`] (embedding and logits only) on the eight inputs in
/// `t.x`, into `t.h` and `t.logits`.
#[inline(always)]
fn forward8_body(w: &Weights, t: &mut Lanes8) {
    let Arch { c1, c2 } = w.arch;
    conv_relu_pool8(&t.x, 1, SIDE, &w.w1, &w.b1, c1, &mut t.p1);
    conv_relu_pool8(&t.p1, c1, P1, &w.w2, &w.b2, c2, &mut t.p2);
    dense8(&w.w3, &w.b3, &t.p2, &mut t.h);
    for (r, h) in t.r.iter_mut().zip(&t.h) {
        for (rv, &hv) in r.iter_mut().zip(h) {
            *rv = hv.max(0.0);
        }
    }
    dense8(&w.w4, &w.b4, &t.r, &mut t.logits);
}

/// [`forward8_body`] compiled for AVX (256-bit vectors: one register per lane array). Only AVX,
/// never FMA: the multiplies and adds must round separately, as in the scalar code.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
fn forward8_avx(w: &Weights, t: &mut Lanes8) {
    forward8_body(w, t)
}

fn forward8(w: &Weights, t: &mut Lanes8) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU supports AVX (checked at run time just above), the only target
        // feature `forward8_avx` enables.
        unsafe { forward8_avx(w, t) };
        return;
    }
    forward8_body(w, t)
}

/// The model: weights plus the forward pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub w: Weights,
}

impl Model {
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Ok(Model {
            w: Weights::from_bytes(bytes)?,
        })
    }

    pub fn forward(&self, x: &[f32]) -> Trace {
        let w = &self.w;
        let Arch { c1, c2 } = w.arch;
        let p1 = conv_relu_pool(x, 1, SIDE, &w.w1, &w.b1, c1);
        let p2 = conv_relu_pool(&p1, c1, P1, &w.w2, &w.b2, c2);
        let h = dense(&w.w3, &w.b3, &p2, EMBED);
        let r: Vec<f32> = h.iter().map(|v| v.max(0.0)).collect();
        let logits = dense(&w.w4, &w.b4, &r, CLASSES);
        Trace { p1, p2, h, logits }
    }

    /// Features, predicted label and class probabilities for one image. Only a wrong-sized
    /// image is an error.
    ///
    /// Guarantee: total and finite for every weights file [`Weights::from_bytes`] accepts —
    /// no photo can make inference fail, so none can decide by a failure whether a search
    /// follows. Proof: inputs lie in [0, 1], |w| ≤ 127 and |b| ≤ 1,000, so each layer's
    /// outputs are bounded by its fan-in × 127 × the previous bound + 1,000 (ReLU and
    /// max-pooling do not grow them). At the widest shape a file may have (both widths
    /// [`MAX_CHANNELS`] = 128): 4,175 after the first convolution (fan-in 25), 1.7·10⁹ after
    /// the second (3,200), 4.5·10¹⁴ in the embedding (2,048) and 3.6·10¹⁸ in the logits (64).
    /// The mirrored pair's embedding sums stay below 9·10¹⁴ and their 64 squares below
    /// 5.2·10³¹; the logits' softmax and energy are shifted by the largest logit — every
    /// value finite in f32 (≤ 3.4·10³⁸). The features are unit-length for any weights (see
    /// `unit_features`: a vanishing embedding is normalised in f64, a zero one becomes the
    /// first axis). Tested at the bound.
    pub fn infer(&self, pixels: &[u8]) -> Result<Inference> {
        // Test-time mirroring: the image and its mirror image (the model is trained on both),
        // embeddings and logits averaged — a steadier descriptor for retrieval.
        let x = preprocess(pixels)?;
        let (a, b) = (self.forward(&x), self.forward(&mirror(&x)));
        Ok(combine(&a.h, &b.h, &a.logits, &b.logits))
    }

    /// The pooled channel means of both convolution layers ([`Trace::channel_means`]) of one
    /// image (upright, as [`Model::infer`] sees it): what the out-of-distribution check
    /// ([`super::ood`]) compares besides the features.
    pub fn layer_means(&self, pixels: &[u8]) -> Result<Vec<f32>> {
        Ok(self.forward(&preprocess(pixels)?).channel_means())
    }

    /// [`Model::infer`] and [`Model::layer_means`] of one image together, bit-identical to
    /// the two calls: the layer means come from the upright image's forward pass that
    /// inference runs anyway, so a client scoring a photo's familiarity ([`super::ood`])
    /// runs two passes instead of three.
    pub fn infer_with_layer_means(&self, pixels: &[u8]) -> Result<(Inference, Vec<f32>)> {
        let x = preprocess(pixels)?;
        let (a, b) = (self.forward(&x), self.forward(&mirror(&x)));
        let inference = combine(&a.h, &b.h, &a.logits, &b.logits);
        Ok((inference, a.channel_means()))
    }

    /// [`Model::infer`] for many images, bit-identical to it image by image and several times
    /// faster: the images go through the network eight at a time, one per SIMD lane (a last
    /// partial group is padded). A wrong-sized image is an error (nothing is computed).
    pub fn infer_batch(&self, images: &[&[u8]]) -> Result<Vec<Inference>> {
        Ok(self
            .infer_batch_then(images, |_, _| ())?
            .into_iter()
            .map(|(inference, ())| inference)
            .collect())
    }

    /// [`Model::infer_with_layer_means`] for many images, bit-identical to it image by image
    /// (as [`Model::infer_batch`] is to [`Model::infer`]): each image's [`Inference`] and the
    /// `c1 + c2` means of its upright pass's pooled channels ([`Trace::channel_means`]), taken
    /// from the lanes' pooled maps, which hold the scalar pass's values in the same layout,
    /// and summed by the same code. The server fits the out-of-distribution reference
    /// ([`super::ood::Reference::fit`]) on the features and layer means of its 1,000 anchors
    /// under the query model at start-up: batched, that takes about a fifth of the time
    /// (0.9 s instead of 4.8 s on two cores), and a client scoring a photo with
    /// `infer_with_layer_means` still gets exactly the values the reference was fitted on. A
    /// wrong-sized image is an error (nothing is computed).
    pub fn infer_batch_with_layer_means(
        &self,
        images: &[&[u8]],
    ) -> Result<Vec<(Inference, Vec<f32>)>> {
        self.infer_batch_then(images, |t, l| channel_means(&t.p1, &t.p2, |v: &L| v[l]))
    }

    /// The body of the batched calls: each image's [`Inference`] with `upright(t, lane)`, what
    /// that image's lane of the upright pass (before the mirror images' pass overwrites it)
    /// gives.
    fn infer_batch_then<M>(
        &self,
        images: &[&[u8]],
        upright: impl Fn(&Lanes8, usize) -> M,
    ) -> Result<Vec<(Inference, M)>> {
        if let Some(bad) = images.iter().find(|px| px.len() != PIXELS) {
            return Err(Error::DimensionMismatch {
                what: "image pixels",
                expected: PIXELS,
                got: bad.len(),
            });
        }
        let mut t = Lanes8::new(self.w.arch);
        let (mut ha, mut la) = (t.h.clone(), t.logits.clone());
        let mut out = Vec::with_capacity(images.len());
        for group in images.chunks(BATCH_LANES) {
            // The images, as `preprocess` makes them, then their mirror images.
            let group: Vec<Vec<u8>> = group.iter().map(|px| super::upright::upright(px)).collect();
            for (i, x) in t.x.iter_mut().enumerate() {
                for (lane, v) in x.iter_mut().enumerate() {
                    *v = group.get(lane).map_or(0.0, |px| px[i] as f32 / 255.0);
                }
            }
            forward8(&self.w, &mut t);
            let extra: Vec<M> = (0..group.len()).map(|l| upright(&t, l)).collect();
            ha.copy_from_slice(&t.h);
            la.copy_from_slice(&t.logits);
            t.x.chunks_exact_mut(SIDE).for_each(|row| row.reverse());
            forward8(&self.w, &mut t);
            let lane = |v: &[L], l: usize| -> Vec<f32> { v.iter().map(|x| x[l]).collect() };
            out.extend(extra.into_iter().enumerate().map(|(l, m)| {
                let inference = combine(
                    &lane(&ha, l),
                    &lane(&t.h, l),
                    &lane(&la, l),
                    &lane(&t.logits, l),
                );
                (inference, m)
            }));
        }
        Ok(out)
    }

    /// The embeddings of preprocessed 28×28 inputs (values in [0, 1], as [`preprocess`] and
    /// [`mirror`] make them), eight to a pass through the lanes: bit-identical to
    /// `forward(x).h` input by input (the lanes compute every value as the scalar pass does).
    /// For [`super::views`], whose views are inputs rather than images.
    pub(crate) fn embed_inputs(&self, inputs: &[Vec<f32>]) -> Vec<Vec<f32>> {
        debug_assert!(inputs.iter().all(|x| x.len() == PIXELS));
        let mut t = Lanes8::new(self.w.arch);
        let mut out = Vec::with_capacity(inputs.len());
        for group in inputs.chunks(BATCH_LANES) {
            for (i, x) in t.x.iter_mut().enumerate() {
                for (lane, v) in x.iter_mut().enumerate() {
                    *v = group.get(lane).map_or(0.0, |g| g[i]);
                }
            }
            forward8(&self.w, &mut t);
            out.extend((0..group.len()).map(|l| t.h.iter().map(|v| v[l]).collect()));
        }
        out
    }
}

/// [`Inference`] from the embeddings and logits of an image (`a`) and its mirror image (`b`):
/// the logits averaged, the embeddings summed and normalised.
pub(crate) fn combine(ha: &[f32], hb: &[f32], la: &[f32], lb: &[f32]) -> Inference {
    let logits: Vec<f32> = la.iter().zip(lb).map(|(p, q)| 0.5 * (p + q)).collect();
    let h: Vec<f32> = ha.iter().zip(hb).map(|(p, q)| p + q).collect();
    let probabilities = softmax(&logits);
    let label = argmax(&probabilities) as u32;
    let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let energy = -(m + logits.iter().map(|v| (v - m).exp()).sum::<f32>().ln());
    Inference {
        features: unit_features(&h),
        label,
        probabilities,
        energy,
    }
}

/// The embedding `h` scaled to unit length. An embedding whose squares sum below the smallest
/// normal f32 is normalised in f64 instead, and one that is exactly zero becomes the first
/// axis: the same unit vector for every such image. So the features are unit-length for every
/// input, whatever the weights: the frame and Algorithm 1 refuse a zero row, and a hostile model
/// whose embedding vanished for some photos only would otherwise make those photos' searches
/// fail. Ordinary embeddings take the first branch, bit for bit as before.
pub(crate) fn unit_features(h: &[f32]) -> Vec<f32> {
    let s = h.iter().map(|v| v * v).sum::<f32>();
    if s >= f32::MIN_POSITIVE {
        let norm = s.sqrt();
        return h.iter().map(|v| v / norm).collect();
    }
    let norm = h.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt();
    if norm > 0.0 {
        h.iter().map(|&v| (f64::from(v) / norm) as f32).collect()
    } else {
        let mut e = vec![0.0; h.len()];
        e[0] = 1.0;
        e
    }
}

pub fn softmax(logits: &[f32]) -> Vec<f32> {
    let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let e: Vec<f32> = logits.iter().map(|v| (v - m).exp()).collect();
    let s: f32 = e.iter().sum();
    e.iter().map(|v| v / s).collect()
}

pub fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &x)| {
            if x > bv {
                (i, x)
            } else {
                (bi, bv)
            }
        })
        .0
}

/// A short, stable version string for model weights (FNV-1a of the bytes): the server
/// publishes it in its configuration so a client can check it runs the same model.
pub fn weights_version(weights: &[u8]) -> String {
    format!("cnn-v2-{:016x}", fnv1a(weights))
}

/// FNV-1a (64 bits) of `bytes`: a file's short name, not a check against an adversary.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Random weights of a plausible scale (uniform within ±1/√fan), for tests.
#[cfg(test)]
pub(crate) fn random_weights(rng: &mut impl rand::Rng, arch: Arch) -> Weights {
    let mut w = Weights::zeros(arch);
    for t in w.tensors_mut() {
        let fan = (t.len() as f32).sqrt();
        for v in t.iter_mut() {
            *v = (rng.random::<f32>() - 0.5) * 2.0 / fan.max(1.0);
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::photo::to_model_input as from_rgba;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// The widest network a file may hold.
    const WIDEST: Arch = Arch {
        c1: MAX_CHANNELS,
        c2: MAX_CHANNELS,
    };

    /// A file past the bounds is refused; at the bounds — every weight ±127, every bias
    /// ±1,000, signs chosen so nothing cancels, in the widest network a file may hold —
    /// inference is finite for the brightest, the darkest and a random input (the guarantee
    /// of `Model::infer`).
    #[test]
    fn weights_past_the_bounds_are_refused_and_inference_at_them_is_finite() {
        let base = random_weights(&mut ChaCha8Rng::seed_from_u64(21), Arch::SMALL);
        assert!(Weights::from_bytes(&base.to_bytes()).is_ok());
        for (k, bad) in [
            (0, 128.0f32),
            (2, -200.0),
            (4, 1e30),
            (6, 127.5),
            (1, 1001.0),
            (7, -1e4),
        ] {
            let mut w = base.clone();
            w.tensors_mut()[k][0] = bad;
            let err = Weights::from_bytes(&w.to_bytes()).unwrap_err().to_string();
            assert!(err.contains("at most"), "tensor {k}, {bad}: {err}");
        }
        let mut rng = ChaCha8Rng::seed_from_u64(22);
        let random: Vec<u8> = (0..PIXELS).map(|_| rng.random()).collect();
        for sign in [1.0f32, -1.0] {
            let mut w = Weights::zeros(WIDEST);
            for (k, t) in w.tensors_mut().into_iter().enumerate() {
                let v = if k % 2 == 0 {
                    MAX_WEIGHT
                } else {
                    sign * MAX_BIAS
                };
                t.fill(v);
            }
            let m = Model::from_bytes(&w.to_bytes()).unwrap();
            assert_eq!(m.w.arch, WIDEST);
            for px in [vec![255u8; PIXELS], vec![0u8; PIXELS], random.clone()] {
                let inf = m.infer(&px).unwrap();
                assert!(inf.features.iter().all(|v| v.is_finite()), "{sign}");
                assert!(inf.probabilities.iter().all(|v| v.is_finite()));
                assert!(inf.energy.is_finite(), "{sign}: {}", inf.energy);
                assert!(m.layer_means(&px).unwrap().iter().all(|v| v.is_finite()));
                let batch = m.infer_batch(&[&px[..]]).unwrap();
                assert!(batch[0].features.iter().all(|v| v.is_finite()));
            }
        }
    }

    /// Whatever the weights, the features are unit-length: an embedding that is exactly zero
    /// (here for every photo; a hostile model could arrange it for some) gives the first axis,
    /// one too small for f32 squares is normalised in f64 — on both inference paths.
    #[test]
    fn vanishing_embeddings_still_give_unit_features() {
        let base = random_weights(&mut ChaCha8Rng::seed_from_u64(23), Arch::WIDE);
        let mut px: Vec<u8> = (0..PIXELS).map(|i| (i * 7 % 256) as u8).collect();
        px[0] = 255;
        for (scale, bias) in [(0.0f32, 0.0f32), (0.0, 1e-30), (1e-30, 0.0)] {
            let mut w = base.clone();
            w.w3.iter_mut().for_each(|v| *v *= scale);
            w.b3.fill(bias);
            let m = Model::from_bytes(&w.to_bytes()).unwrap();
            for inf in [
                m.infer(&px).unwrap(),
                m.infer_batch(&[&px[..]]).unwrap().remove(0),
            ] {
                let norm: f32 = inf.features.iter().map(|v| v * v).sum::<f32>().sqrt();
                assert!((norm - 1.0).abs() < 1e-5, "{scale} {bias}: norm {norm}");
                if scale == 0.0 && bias == 0.0 {
                    assert_eq!(inf.features[0], 1.0);
                }
            }
        }
    }

    fn random_model(rng: &mut impl Rng, arch: Arch) -> Model {
        Model {
            w: random_weights(rng, arch),
        }
    }

    /// Both shapes round-trip in f32 (the small one in the gallery model's `PMCNN2` format);
    /// the 8-bit encoding is within half a step of every weight, keeps the biases exactly and
    /// is a fixed point; a header the format does not admit is refused.
    #[test]
    fn every_format_round_trips_and_bad_headers_are_refused() {
        let mut rng = ChaCha8Rng::seed_from_u64(12);
        for arch in [Arch::SMALL, Arch::WIDE, Arch { c1: 3, c2: 5 }] {
            let w = random_weights(&mut rng, arch);
            let f32_bytes = w.to_bytes();
            assert_eq!(
                &f32_bytes[..6],
                if arch == Arch::SMALL {
                    b"PMCNN2"
                } else {
                    b"PMCNN3"
                }
            );
            assert_eq!(Weights::from_bytes(&f32_bytes).unwrap(), w);
            let bytes = w.to_bytes_8bit();
            let q = Weights::from_bytes(&bytes).unwrap();
            assert_eq!(q.arch, arch);
            assert_eq!(q.to_bytes_8bit(), bytes, "{arch:?}: a fixed point");
            for k in 0..8 {
                let (a, b) = (&w.tensors()[k], &q.tensors()[k]);
                if k % 2 == 1 {
                    assert_eq!(a, b, "biases are kept exactly");
                    continue;
                }
                let cols = a.len() / arch.rows()[k / 2];
                for (ra, rb) in a.chunks_exact(cols).zip(b.chunks_exact(cols)) {
                    let step = ra.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
                    for (x, y) in ra.iter().zip(rb) {
                        assert!((x - y).abs() <= 0.5 * step * 1.0001, "{x} vs {y}");
                    }
                }
            }
            assert!(Weights::from_bytes(&bytes[..bytes.len() - 1]).is_err());
        }
        let good = random_weights(&mut rng, Arch::WIDE).to_bytes_8bit();
        let edit = |at: usize, v: &[u8]| {
            let mut b = good.clone();
            b[at..at + v.len()].copy_from_slice(v);
            Weights::from_bytes(&b).unwrap_err().to_string()
        };
        assert!(edit(8, &0u16.to_le_bytes()).contains("0 channels"));
        assert!(edit(10, &129u16.to_le_bytes()).contains("129 channels"));
        assert!(
            edit(8, &32u16.to_le_bytes()).contains("expected"),
            "a shape the body is not"
        );
        assert!(edit(12, &[2]).contains("encoding 2"));
        assert!(edit(13, &[1]).contains("padding"));
        assert!(edit(16, &f32::NAN.to_le_bytes()).contains("scale"));
        assert!(edit(16, &2.0f32.to_le_bytes()).contains("scale"));
        let last = good.len() - 4;
        assert!(edit(last, &f32::INFINITY.to_le_bytes()).contains("bias"));
        let mut long = good.clone();
        long.resize(Weights::max_file_len() + 1, 0);
        assert!(Weights::from_bytes(&long).is_err());
        assert!(
            Weights::from_bytes(b"PMCNN3\0\0\x40").is_err(),
            "a short header"
        );
    }

    #[test]
    fn weights_round_trip_and_reject_garbage() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let m = random_model(&mut rng, Arch::SMALL);
        let bytes = m.w.to_bytes();
        assert_eq!(Model::from_bytes(&bytes).unwrap(), m);
        assert!(Model::from_bytes(&bytes[..bytes.len() - 1]).is_err());
        assert!(Model::from_bytes(b"nonsense").is_err());
        let mut nan = bytes.clone();
        nan[8..12].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(Model::from_bytes(&nan).is_err());
        assert!(m.infer(&[0u8; 10]).is_err());
        let inf = m.infer(&[7u8; PIXELS]).unwrap();
        let norm: f32 = inf.features.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
        assert!((inf.probabilities.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }

    #[test]
    fn from_rgba_is_identity_on_dataset_images_and_handles_photos() {
        // Dataset-like: a 20-wide object spanning all 28 rows, box-centred, on 0.
        let grey: Vec<u8> = (0..PIXELS)
            .map(|i| {
                if (4..24).contains(&(i % SIDE)) {
                    (i * 7 % 256) as u8
                } else {
                    0
                }
            })
            .collect();
        let rgba: Vec<u8> = grey.iter().flat_map(|&g| [g, g, g, 255]).collect();
        assert_eq!(from_rgba(&rgba, SIDE, SIDE).unwrap(), grey);
        // A dark 16×32 rectangle on a white 56×112 photo: cropped to it, inverted, fitted to
        // 14×28 and centred.
        let (w, h) = (56, 112);
        let photo: Vec<u8> = (0..w * h)
            .flat_map(|i| {
                let (x, y) = (i % w, i / w);
                let v = if (20..36).contains(&x) && (40..72).contains(&y) {
                    0
                } else {
                    255
                };
                [v, v, v, 255]
            })
            .collect();
        let out = from_rgba(&photo, w, h).unwrap();
        assert_eq!(out[14 * SIDE + 6], 0); // left of the fitted box: padding
        assert_eq!(out[14 * SIDE + 7], 255); // the rectangle's first column
        assert_eq!(out[27 * SIDE + 20], 255); // its last column, last row
        assert_eq!(out[14 * SIDE + 21], 0); // right of it
                                            // Fully transparent pixels count as white background.
        let clear = vec![0u8; 30 * 30 * 4];
        assert!(from_rgba(&clear, 30, 30).unwrap().iter().all(|&v| v == 0));
        assert!(from_rgba(&[0u8; 12], 2, 2).is_err());
        assert!(from_rgba(&[], 0, 5).is_err());
        assert!(from_rgba(&[0u8; 4], 1, 1).is_ok());
    }

    /// Test images: uniform noise, sparse noise (mostly background, as in the dataset), and
    /// the constant extremes.
    fn test_images(rng: &mut impl Rng, n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|k| match k % 4 {
                0 => (0..PIXELS).map(|_| rng.random()).collect(),
                1 => (0..PIXELS)
                    .map(|_| {
                        if rng.random::<f32>() < 0.7 {
                            0
                        } else {
                            rng.random()
                        }
                    })
                    .collect(),
                2 => vec![(k % 2) as u8 * 255; PIXELS],
                _ => (0..PIXELS).map(|i| (i * 31 + k) as u8).collect(),
            })
            .collect()
    }

    fn assert_bits_eq(a: &[f32], b: &[f32], what: &str) {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(a), bits(b), "{what}");
    }

    fn assert_batch_equals_infer(model: &Model, images: &[Vec<u8>]) {
        let refs: Vec<&[u8]> = images.iter().map(|v| v.as_slice()).collect();
        let batch = model.infer_batch(&refs).unwrap();
        assert_eq!(batch.len(), images.len());
        for (k, (img, b)) in images.iter().zip(&batch).enumerate() {
            let one = model.infer(img).unwrap();
            assert_bits_eq(
                &b.features,
                &one.features,
                &format!("features of image {k}"),
            );
            assert_bits_eq(
                &b.probabilities,
                &one.probabilities,
                &format!("probabilities of image {k}"),
            );
            assert_eq!(b.label, one.label, "label of image {k}");
            assert_eq!(b, &one);
        }
    }

    /// The batched dense layers start their sums where `Iterator::sum::<f32>` does.
    #[test]
    fn sum_start_is_the_standard_librarys() {
        assert_eq!(
            std::iter::empty::<f32>().sum::<f32>().to_bits(),
            SUM_START.to_bits()
        );
        assert_eq!([-0.0f32].iter().sum::<f32>().to_bits(), (-0.0f32).to_bits());
    }

    /// `infer_batch` equals `infer` bit for bit: random weights, full and partial groups.
    #[test]
    fn infer_batch_equals_infer_random_weights() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for (seed, n, arch) in [
            (0u64, 19usize, Arch::SMALL),
            (1, 8, Arch::WIDE),
            (2, 1, Arch::SMALL),
            (3, 0, Arch::WIDE),
            (4, 11, Arch::WIDE),
        ] {
            let model = random_model(&mut ChaCha8Rng::seed_from_u64(100 + seed), arch);
            assert_batch_equals_infer(&model, &test_images(&mut rng, n));
        }
    }

    /// The same with the weights the server ships: the gallery model and the query model.
    #[test]
    fn infer_batch_equals_infer_shipped_weights() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        for bytes in [
            &include_bytes!("../../../server/assets/model.bin")[..],
            &include_bytes!("../../../server/assets/query.bin")[..],
        ] {
            let model = Model::from_bytes(bytes).unwrap();
            assert_batch_equals_infer(&model, &test_images(&mut rng, 37));
        }
    }

    /// The portable lane code (what runs without AVX, and in wasm) equals `forward` per lane.
    #[test]
    fn portable_lanes_equal_forward() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let model = random_model(&mut rng, Arch::WIDE);
        let xs: Vec<Vec<f32>> = (0..BATCH_LANES)
            .map(|_| (0..PIXELS).map(|_| rng.random::<f32>()).collect())
            .collect();
        let mut t = Lanes8::new(model.w.arch);
        for (i, x) in t.x.iter_mut().enumerate() {
            for (lane, v) in x.iter_mut().enumerate() {
                *v = xs[lane][i];
            }
        }
        forward8_body(&model.w, &mut t);
        for (lane, x) in xs.iter().enumerate() {
            let f = model.forward(x);
            let h: Vec<f32> = t.h.iter().map(|v| v[lane]).collect();
            let logits: Vec<f32> = t.logits.iter().map(|v| v[lane]).collect();
            assert_bits_eq(&h, &f.h, "h");
            assert_bits_eq(&logits, &f.logits, "logits");
        }
    }

    #[test]
    fn infer_batch_rejects_wrong_sizes() {
        let model = random_model(&mut ChaCha8Rng::seed_from_u64(6), Arch::SMALL);
        let good = vec![9u8; PIXELS];
        let short = vec![9u8; PIXELS - 1];
        assert!(model.infer_batch(&[&good, &short]).is_err());
        assert!(model.infer_batch(&[&[]]).is_err());
        assert!(model.infer_batch(&[]).unwrap().is_empty());
    }

    /// The Fashion-MNIST images of the browser client's parity fixture.
    fn fixture_images() -> Vec<Vec<u8>> {
        let fixture: Vec<serde_json::Value> = serde_json::from_str(include_str!(
            "../../../client-wasm/tests/fixtures/parity.json"
        ))
        .unwrap();
        fixture
            .iter()
            .map(|c| serde_json::from_value(c["pixels"].clone()).unwrap())
            .collect()
    }

    /// `infer_with_layer_means` equals `infer` and `layer_means` bit for bit: the shipped
    /// weights on the Fashion-MNIST images of the browser client's parity fixture and on
    /// synthetic ones, and random weights; a wrong-sized image is refused.
    #[test]
    fn infer_with_layer_means_equals_the_separate_calls() {
        let mut images = fixture_images();
        assert!(images.len() >= 4);
        images.extend(test_images(&mut ChaCha8Rng::seed_from_u64(8), 8));
        let shipped =
            Model::from_bytes(include_bytes!("../../../server/assets/model.bin")).unwrap();
        let random = random_model(&mut ChaCha8Rng::seed_from_u64(9), Arch::WIDE);
        for model in [&shipped, &random] {
            for (k, img) in images.iter().enumerate() {
                let (inf, layers) = model.infer_with_layer_means(img).unwrap();
                let one = model.infer(img).unwrap();
                assert_bits_eq(&inf.features, &one.features, &format!("features of {k}"));
                assert_bits_eq(
                    &inf.probabilities,
                    &one.probabilities,
                    &format!("probabilities of {k}"),
                );
                assert_eq!(inf.energy.to_bits(), one.energy.to_bits(), "energy of {k}");
                assert_eq!(inf.label, one.label, "label of {k}");
                assert_bits_eq(
                    &layers,
                    &model.layer_means(img).unwrap(),
                    &format!("layer means of {k}"),
                );
            }
            assert!(model.infer_with_layer_means(&[0; PIXELS - 1]).is_err());
        }
    }

    /// `infer_batch_with_layer_means` equals `infer_with_layer_means` bit for bit, image by
    /// image: random weights of odd widths and of the query model's, and the two shipped
    /// models on the parity fixture's Fashion-MNIST images and synthetic ones, in full groups
    /// and a partial last one; a wrong-sized image is refused.
    #[test]
    fn infer_batch_with_layer_means_equals_infer_with_layer_means() {
        let check = |model: &Model, images: &[Vec<u8>]| {
            let refs: Vec<&[u8]> = images.iter().map(|v| v.as_slice()).collect();
            let batch = model.infer_batch_with_layer_means(&refs).unwrap();
            assert_eq!(batch.len(), images.len());
            for (k, (img, (inf, layers))) in images.iter().zip(&batch).enumerate() {
                let (one, one_layers) = model.infer_with_layer_means(img).unwrap();
                assert_eq!(layers.len(), model.w.arch.layer_dim());
                assert_bits_eq(layers, &one_layers, &format!("layer means of image {k}"));
                assert_bits_eq(&inf.features, &one.features, &format!("features of {k}"));
                assert_bits_eq(
                    &inf.probabilities,
                    &one.probabilities,
                    &format!("probabilities of {k}"),
                );
                assert_eq!(inf.energy.to_bits(), one.energy.to_bits(), "energy of {k}");
                assert_eq!(inf, &one);
            }
            let mut bad = refs.clone();
            bad.push(&[0; PIXELS - 1]);
            assert!(model.infer_batch_with_layer_means(&bad).is_err());
        };
        let mut rng = ChaCha8Rng::seed_from_u64(10);
        for (seed, n, arch) in [
            (0u64, 13usize, Arch { c1: 5, c2: 7 }),
            (1, 21, Arch::WIDE),
            (2, 3, Arch::SMALL),
            (3, 0, Arch::WIDE),
        ] {
            let model = random_model(&mut ChaCha8Rng::seed_from_u64(200 + seed), arch);
            check(&model, &test_images(&mut rng, n));
        }
        let mut images = fixture_images();
        images.extend(test_images(&mut rng, 29 - images.len()));
        assert!(!images.len().is_multiple_of(BATCH_LANES));
        for bytes in [
            &include_bytes!("../../../server/assets/model.bin")[..],
            &include_bytes!("../../../server/assets/query.bin")[..],
        ] {
            check(&Model::from_bytes(bytes).unwrap(), &images);
        }
    }

    /// Test-time mirroring makes the descriptor exactly mirror-invariant.
    #[test]
    fn mirrored_images_get_identical_features() {
        let model = Model {
            w: Weights::zeros(Arch::SMALL),
        };
        let mut w = model.w.clone();
        for (k, t) in w.tensors_mut().into_iter().enumerate() {
            t.iter_mut()
                .enumerate()
                .for_each(|(i, v)| *v = ((i * 37 + k * 11) % 23) as f32 / 23.0 - 0.4);
        }
        let model = Model { w };
        let img: Vec<u8> = (0..PIXELS).map(|i| (i * 13 % 251) as u8).collect();
        let flipped: Vec<u8> = img
            .chunks_exact(SIDE)
            .flat_map(|r| r.iter().rev().copied())
            .collect();
        let (a, b) = (model.infer(&img).unwrap(), model.infer(&flipped).unwrap());
        assert_eq!(a.features, b.features);
        assert_eq!(a.probabilities, b.probabilities);
        assert_ne!(img, flipped);
        let x = preprocess(&img).unwrap();
        assert_eq!(mirror(&mirror(&x)), x);
    }
}
