//! The on-device model's network as training sees it: whole batches at once (im2col and one
//! matrix product a layer, `matrixmultiply`), with batch normalisation after each convolution
//! and dropout before the embedding layer.
//!
//! Why batches: batch normalisation needs the batch's statistics, and one product a layer is
//! several times faster on two cores than the per-image loops of `embed::model`.
//! Neither changes what the browser runs: dropout is off at inference, and
//! [`Net::fold`] folds each normalisation (with its running statistics) into its convolution's
//! weights and bias, so the result is `embed::model`'s network exactly (conv · ReLU ·
//! max-pool twice, dense, ReLU, dense). [`tests`] check the fold against that forward pass and
//! every gradient against finite differences.
//!
//! Layout: activations are row-major matrices with one row per (image, position) and one
//! column per channel; the flat layer uses the shared model's channel-major order.
//!
//! Determinism: every matrix product is split into row blocks of a fixed size (whatever the
//! thread count), and every sum over the batch runs in a fixed order, so a seed gives the same
//! weights on one thread or many.

use embed::model::{Arch, Weights, CLASSES, EMBED, K, PIXELS, SIDE};
use rayon::prelude::*;

const S1: usize = SIDE - K + 1; // 24
const P1: usize = S1 / 2; // 12
const S2: usize = P1 - K + 1; // 8
const P2: usize = S2 / 2; // 4
const KK: usize = K * K;
/// Batch normalisation's variance floor.
const BN_EPS: f32 = 1e-5;
/// Weight of the newest batch in the running statistics.
const MOMENTUM: f32 = 0.1;
/// Rows of a matrix product computed by one task.
const BLOCK: usize = 256;

/// Trainable parameters (batch normalisation's scale `g` and shift `s` replace the
/// convolutions' biases, which it would cancel) and the running statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct Net {
    pub w1: Vec<f32>, // [c1][K·K]
    pub g1: Vec<f32>,
    pub s1: Vec<f32>,
    pub w2: Vec<f32>, // [c2][c1·K·K]
    pub g2: Vec<f32>,
    pub s2: Vec<f32>,
    pub w3: Vec<f32>, // [EMBED][flat]
    pub b3: Vec<f32>,
    pub w4: Vec<f32>, // [CLASSES][EMBED]
    pub b4: Vec<f32>,
    /// Running mean and variance of each convolution's output, per channel.
    pub mean1: Vec<f32>,
    pub var1: Vec<f32>,
    pub mean2: Vec<f32>,
    pub var2: Vec<f32>,
}

/// Gradients (and Adam's moments) have the trainable tensors' shapes.
#[derive(Debug, Clone, PartialEq)]
pub struct Grads(pub Vec<Vec<f32>>);

impl Net {
    /// He-uniform convolution and dense weights (from `w`), unit scales, zero shifts.
    pub fn new(w: &Weights) -> Self {
        let Arch { c1, c2 } = w.arch;
        Net {
            w1: w.w1.clone(),
            g1: vec![1.0; c1],
            s1: vec![0.0; c1],
            w2: w.w2.clone(),
            g2: vec![1.0; c2],
            s2: vec![0.0; c2],
            w3: w.w3.clone(),
            b3: w.b3.clone(),
            w4: w.w4.clone(),
            b4: w.b4.clone(),
            mean1: vec![0.0; c1],
            var1: vec![1.0; c1],
            mean2: vec![0.0; c2],
            var2: vec![1.0; c2],
        }
    }

    /// The network whose [`Net::fold`] is `w` and whose batch statistics on `sample` (images ×
    /// 784) are its running ones: each normalisation's scale and shift are set so that, at
    /// `sample`'s statistics, it adds the folded bias and nothing else. A folded model is
    /// fine-tuned from here without the jump a fresh normalisation would make.
    pub fn unfold(w: &Weights, sample: &[f32]) -> Self {
        let mut net = Net::new(w);
        // Layer 1's statistics do not depend on its own scale and shift; layer 2's do, so they
        // are read after layer 1 is set.
        for layer in 0..2 {
            let c = net.forward(sample, Vec::new());
            let (n, b) = if layer == 0 {
                (&c.n1, &w.b1)
            } else {
                (&c.n2, &w.b2)
            };
            let g: Vec<f32> = n.var.iter().map(|v| (v + BN_EPS).sqrt()).collect();
            let s: Vec<f32> = n.mean.iter().zip(b).map(|(m, b)| m + b).collect();
            let (mean, var) = (n.mean.clone(), n.var.clone());
            if layer == 0 {
                (net.g1, net.s1, net.mean1, net.var1) = (g, s, mean, var);
            } else {
                (net.g2, net.s2, net.mean2, net.var2) = (g, s, mean, var);
            }
        }
        net
    }

    /// The convolutions' widths.
    pub fn arch(&self) -> Arch {
        Arch {
            c1: self.g1.len(),
            c2: self.g2.len(),
        }
    }

    /// The trainable tensors, in the order of [`Grads`].
    pub fn params_mut(&mut self) -> [&mut Vec<f32>; 10] {
        [
            &mut self.w1,
            &mut self.g1,
            &mut self.s1,
            &mut self.w2,
            &mut self.g2,
            &mut self.s2,
            &mut self.w3,
            &mut self.b3,
            &mut self.w4,
            &mut self.b4,
        ]
    }

    /// Which trainable tensors are weights that decay (not scales, shifts or biases).
    pub const DECAYS: [bool; 10] = [
        true, false, false, true, false, false, true, false, true, false,
    ];

    pub fn zero_grads(&self) -> Grads {
        let mut n = self.clone();
        Grads(n.params_mut().iter().map(|t| vec![0.0; t.len()]).collect())
    }

    /// The shared model's weights: each normalisation, with the running statistics, folded
    /// into its convolution (`z ↦ g·(z − mean)/√(var + ε) + s` is affine in `z`).
    pub fn fold(&self) -> Weights {
        let fold = |w: &[f32], g: &[f32], s: &[f32], mean: &[f32], var: &[f32]| {
            let per = w.len() / g.len();
            let scale: Vec<f32> = (0..g.len())
                .map(|c| g[c] / (var[c] + BN_EPS).sqrt())
                .collect();
            let w: Vec<f32> = w
                .iter()
                .enumerate()
                .map(|(i, v)| v * scale[i / per])
                .collect();
            let b: Vec<f32> = (0..g.len()).map(|c| s[c] - mean[c] * scale[c]).collect();
            (w, b)
        };
        let (w1, b1) = fold(&self.w1, &self.g1, &self.s1, &self.mean1, &self.var1);
        let (w2, b2) = fold(&self.w2, &self.g2, &self.s2, &self.mean2, &self.var2);
        Weights {
            arch: self.arch(),
            w1,
            b1,
            w2,
            b2,
            w3: self.w3.clone(),
            b3: self.b3.clone(),
            w4: self.w4.clone(),
            b4: self.b4.clone(),
        }
    }
}

/// `c = a·b` (or `c += a·b` if `accumulate`), `a` m×k and `b` k×n given by their row and column
/// strides, `c` m×n row-major; rows in fixed blocks of [`BLOCK`], in parallel.
#[allow(clippy::too_many_arguments)]
fn gemm(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    (rsa, csa): (usize, usize),
    b: &[f32],
    (rsb, csb): (usize, usize),
    c: &mut [f32],
    accumulate: bool,
) {
    assert_eq!(c.len(), m * n);
    assert!(m == 0 || k == 0 || (m - 1) * rsa + (k - 1) * csa < a.len());
    assert!(k == 0 || n == 0 || (k - 1) * rsb + (n - 1) * csb < b.len());
    let beta = if accumulate { 1.0 } else { 0.0 };
    c.par_chunks_mut(BLOCK * n)
        .enumerate()
        .for_each(|(blk, cb)| {
            let rows = cb.len() / n;
            let a0 = &a[blk * BLOCK * rsa..];
            // SAFETY: the asserts above bound every element the strides reach (rows of this
            // block start at `blk·BLOCK`), and `cb` is this task's own rows·n block.
            unsafe {
                matrixmultiply::sgemm(
                    rows,
                    k,
                    n,
                    1.0,
                    a0.as_ptr(),
                    rsa as isize,
                    csa as isize,
                    b.as_ptr(),
                    rsb as isize,
                    csb as isize,
                    beta,
                    cb.as_mut_ptr(),
                    n as isize,
                    1,
                );
            }
        });
}

/// Batch normalisation of the columns of `z` (rows × channels): the normalised values `x̂`,
/// and each channel's batch mean and variance (biased), summed in f64 in row order.
fn bn_stats(z: &[f32], ch: usize) -> (Vec<f32>, Vec<f32>) {
    let rows = z.len() / ch;
    let mut sum = vec![0.0f64; ch];
    let mut sq = vec![0.0f64; ch];
    for r in z.chunks_exact(ch) {
        for c in 0..ch {
            sum[c] += r[c] as f64;
            sq[c] += (r[c] as f64) * (r[c] as f64);
        }
    }
    let mean: Vec<f64> = sum.iter().map(|s| s / rows as f64).collect();
    let var = (0..ch)
        .map(|c| (sq[c] / rows as f64 - mean[c] * mean[c]).max(0.0) as f32)
        .collect();
    (mean.iter().map(|&m| m as f32).collect(), var)
}

/// One layer's normalisation in training mode.
struct Norm {
    xhat: Vec<f32>,
    inv_std: Vec<f32>,
    mean: Vec<f32>,
    var: Vec<f32>,
}

fn normalise(z: &[f32], ch: usize) -> Norm {
    let (mean, var) = bn_stats(z, ch);
    let inv_std: Vec<f32> = var.iter().map(|v| 1.0 / (v + BN_EPS).sqrt()).collect();
    let mut xhat = z.to_vec();
    xhat.par_chunks_mut(BLOCK * ch).for_each(|blk| {
        for r in blk.chunks_exact_mut(ch) {
            for c in 0..ch {
                r[c] = (r[c] - mean[c]) * inv_std[c];
            }
        }
    });
    Norm {
        xhat,
        inv_std,
        mean,
        var,
    }
}

/// `g·x̂ + s`, then ReLU, then 2×2 max-pool of each image's `side`×`side` map (rows
/// image-major, then position): the pooled values and, for each, the row of the winner.
fn affine_relu_pool(
    xhat: &[f32],
    g: &[f32],
    s: &[f32],
    ch: usize,
    side: usize,
) -> (Vec<f32>, Vec<u32>) {
    let per = side * side;
    let images = xhat.len() / (per * ch);
    let p = side / 2;
    let mut pooled = vec![0.0f32; images * p * p * ch];
    let mut arg = vec![0u32; images * p * p * ch];
    pooled
        .par_chunks_mut(p * p * ch)
        .zip(arg.par_chunks_mut(p * p * ch))
        .enumerate()
        .for_each(|(b, (po, ar))| {
            for i in 0..p {
                for j in 0..p {
                    for c in 0..ch {
                        let mut best = f32::NEG_INFINITY;
                        let mut bi = 0u32;
                        for (dy, dx) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                            let row = b * per + (2 * i + dy) * side + 2 * j + dx;
                            let v = (g[c] * xhat[row * ch + c] + s[c]).max(0.0);
                            if v > best {
                                best = v;
                                bi = row as u32;
                            }
                        }
                        po[(i * p + j) * ch + c] = best;
                        ar[(i * p + j) * ch + c] = bi;
                    }
                }
            }
        });
    (pooled, arg)
}

/// Every (patch-matrix index, input index) pair of one image, for [`im2col`] and its adjoint:
/// a patch row per output position, its columns ordered (channel, ky, kx) as the shared
/// model's weights are; the input is side × side × cin (channel last).
#[inline(always)]
fn patch_pairs(cin: usize, side: usize, mut f: impl FnMut(usize, usize)) {
    let s = side - K + 1;
    let width = cin * KK;
    for oy in 0..s {
        for ox in 0..s {
            let row = (oy * s + ox) * width;
            for ky in 0..K {
                for kx in 0..K {
                    let px = ((oy + ky) * side + ox + kx) * cin;
                    for c in 0..cin {
                        f(row + c * KK + ky * K + kx, px + c);
                    }
                }
            }
        }
    }
}

/// Rows of 5×5 patches of each image (images × side × side × cin, channel last).
fn im2col(x: &[f32], cin: usize, side: usize) -> Vec<f32> {
    let (per_in, per_out) = (side * side * cin, (side - K + 1).pow(2) * cin * KK);
    let mut cols = vec![0.0f32; x.len() / per_in * per_out];
    cols.par_chunks_mut(per_out)
        .zip(x.par_chunks(per_in))
        .for_each(|(out, img)| patch_pairs(cin, side, |o, i| out[o] = img[i]));
    cols
}

/// The adjoint of [`im2col`]: patch gradients summed back onto the input positions.
fn col2im(dcols: &[f32], cin: usize, side: usize) -> Vec<f32> {
    let (per_in, per_out) = (side * side * cin, (side - K + 1).pow(2) * cin * KK);
    let mut dx = vec![0.0f32; dcols.len() / per_out * per_in];
    dx.par_chunks_mut(per_in)
        .zip(dcols.par_chunks(per_out))
        .for_each(|(out, d)| patch_pairs(cin, side, |o, i| out[i] += d[o]));
    dx
}

/// What the backward pass needs of a forward pass.
pub struct Cache {
    images: usize,
    cols1: Vec<f32>,
    n1: Norm,
    arg1: Vec<u32>,
    cols2: Vec<f32>,
    n2: Norm,
    arg2: Vec<u32>,
    /// The flat layer after dropout (images × nflat, channel-major per image).
    flat: Vec<f32>,
    /// Dropout's multipliers (0 or 1/(1 − p)); empty: none.
    keep: Vec<f32>,
    /// Embeddings (pre-activation), images × EMBED.
    pub h: Vec<f32>,
    pub logits: Vec<f32>,
}

impl Net {
    /// The batch `xs` (images × 784, the shared model's input) through the network in
    /// training mode: batch statistics, and dropout multipliers `keep` (images × nflat; empty
    /// for none).
    pub fn forward(&self, xs: &[f32], keep: Vec<f32>) -> Cache {
        let Arch { c1, c2 } = self.arch();
        let nflat = self.arch().flat();
        let images = xs.len() / PIXELS;
        assert_eq!(xs.len(), images * PIXELS);
        assert!(keep.is_empty() || keep.len() == images * nflat);
        let cols1 = im2col(xs, 1, SIDE);
        let mut z1 = vec![0.0f32; images * S1 * S1 * c1];
        gemm(
            images * S1 * S1,
            KK,
            c1,
            &cols1,
            (KK, 1),
            &self.w1,
            (1, KK),
            &mut z1,
            false,
        );
        let n1 = normalise(&z1, c1);
        drop(z1);
        let (p1, arg1) = affine_relu_pool(&n1.xhat, &self.g1, &self.s1, c1, S1);
        let cols2 = im2col(&p1, c1, P1);
        let w = c1 * KK;
        let mut z2 = vec![0.0f32; images * S2 * S2 * c2];
        gemm(
            images * S2 * S2,
            w,
            c2,
            &cols2,
            (w, 1),
            &self.w2,
            (1, w),
            &mut z2,
            false,
        );
        let n2 = normalise(&z2, c2);
        let (p2, arg2) = affine_relu_pool(&n2.xhat, &self.g2, &self.s2, c2, S2);
        // Channel-major flat layer, as the shared model's dense weights read it.
        let mut flat = vec![0.0f32; images * nflat];
        for b in 0..images {
            for pos in 0..P2 * P2 {
                for c in 0..c2 {
                    flat[b * nflat + c * P2 * P2 + pos] = p2[(b * P2 * P2 + pos) * c2 + c];
                }
            }
        }
        if !keep.is_empty() {
            flat.iter_mut().zip(&keep).for_each(|(v, k)| *v *= k);
        }
        let h = dense(&flat, images, nflat, &self.w3, &self.b3, EMBED);
        let r: Vec<f32> = h.iter().map(|v| v.max(0.0)).collect();
        let logits = dense(&r, images, EMBED, &self.w4, &self.b4, CLASSES);
        Cache {
            images,
            cols1,
            n1,
            arg1,
            cols2,
            n2,
            arg2,
            flat,
            keep,
            h,
            logits,
        }
    }

    /// Moves the running statistics towards a training batch's.
    pub fn track(&mut self, c: &Cache) {
        let update = |run: &mut [f32], batch: &[f32]| {
            run.iter_mut()
                .zip(batch)
                .for_each(|(r, b)| *r = (1.0 - MOMENTUM) * *r + MOMENTUM * b);
        };
        update(&mut self.mean1, &c.n1.mean);
        update(&mut self.var1, &c.n1.var);
        update(&mut self.mean2, &c.n2.mean);
        update(&mut self.var2, &c.n2.var);
    }

    /// Gradients of a loss whose derivatives are `dlogits` (images × CLASSES) and `dh`
    /// (images × EMBED, added to what flows back from the logits), added into `g`.
    pub fn backward(&self, c: &Cache, dlogits: &[f32], dh: &[f32], g: &mut Grads) {
        let Arch { c1, c2 } = self.arch();
        let nflat = self.arch().flat();
        let n = c.images;
        let r: Vec<f32> = c.h.iter().map(|v| v.max(0.0)).collect();
        // Dense layers.
        dense_backward(dlogits, &r, n, EMBED, CLASSES, &mut g.0, 8);
        let mut dr = vec![0.0f32; n * EMBED];
        gemm(
            n,
            CLASSES,
            EMBED,
            dlogits,
            (CLASSES, 1),
            &self.w4,
            (EMBED, 1),
            &mut dr,
            false,
        );
        let dhh: Vec<f32> = dr
            .iter()
            .zip(&c.h)
            .zip(dh)
            .map(|((d, h), e)| if *h > 0.0 { d + e } else { *e })
            .collect();
        dense_backward(&dhh, &c.flat, n, nflat, EMBED, &mut g.0, 6);
        let mut dflat = vec![0.0f32; n * nflat];
        gemm(
            n,
            EMBED,
            nflat,
            &dhh,
            (EMBED, 1),
            &self.w3,
            (nflat, 1),
            &mut dflat,
            false,
        );
        if !c.keep.is_empty() {
            dflat.iter_mut().zip(&c.keep).for_each(|(v, k)| *v *= k);
        }
        // Second convolution: unpool onto its winners, through ReLU and the normalisation.
        let mut dy2 = vec![0.0f32; n * S2 * S2 * c2];
        for b in 0..n {
            for pos in 0..P2 * P2 {
                for ch in 0..c2 {
                    let i = (b * P2 * P2 + pos) * c2 + ch;
                    dy2[c.arg2[i] as usize * c2 + ch] += dflat[b * nflat + ch * P2 * P2 + pos];
                }
            }
        }
        let dz2 = norm_backward(&mut dy2, &c.n2, &self.g2, &self.s2, c2, &mut g.0, 4);
        let w = c1 * KK;
        // dW2 = dZ2ᵀ · cols2.
        gemm(
            c2,
            n * S2 * S2,
            w,
            &dz2,
            (1, c2),
            &c.cols2,
            (w, 1),
            &mut g.0[3],
            true,
        );
        let mut dcols2 = vec![0.0f32; n * S2 * S2 * w];
        gemm(
            n * S2 * S2,
            c2,
            w,
            &dz2,
            (c2, 1),
            &self.w2,
            (w, 1),
            &mut dcols2,
            false,
        );
        let dp1 = col2im(&dcols2, c1, P1);
        drop(dcols2);
        // First convolution.
        let mut dy1 = vec![0.0f32; n * S1 * S1 * c1];
        for (i, d) in dp1.iter().enumerate() {
            dy1[c.arg1[i] as usize * c1 + i % c1] += d;
        }
        let dz1 = norm_backward(&mut dy1, &c.n1, &self.g1, &self.s1, c1, &mut g.0, 1);
        gemm(
            c1,
            n * S1 * S1,
            KK,
            &dz1,
            (1, c1),
            &c.cols1,
            (KK, 1),
            &mut g.0[0],
            true,
        );
    }
}

/// `x·Wᵀ + b` for a batch (`x` images × `inp`, `w` out × inp).
fn dense(x: &[f32], images: usize, inp: usize, w: &[f32], b: &[f32], out: usize) -> Vec<f32> {
    let mut y: Vec<f32> = (0..images).flat_map(|_| b.iter().copied()).collect();
    gemm(images, inp, out, x, (inp, 1), w, (1, inp), &mut y, true);
    y
}

/// A dense layer's weight and bias gradients from its output gradient `dy` (images × out) and
/// input `x` (images × inp), added into `g[at]` and `g[at + 1]`.
fn dense_backward(
    dy: &[f32],
    x: &[f32],
    images: usize,
    inp: usize,
    out: usize,
    g: &mut [Vec<f32>],
    at: usize,
) {
    gemm(
        out,
        images,
        inp,
        dy,
        (1, out),
        x,
        (inp, 1),
        &mut g[at],
        true,
    );
    for row in dy.chunks_exact(out) {
        g[at + 1].iter_mut().zip(row).for_each(|(a, b)| *a += b);
    }
}

/// Through ReLU (`dy` is the gradient of the pooled-layer input, i.e. after ReLU) and batch
/// normalisation: adds the scale's and shift's gradients into `g[at]`, `g[at + 1]` and
/// returns the gradient of the convolution's output.
fn norm_backward(
    dy: &mut [f32],
    n: &Norm,
    gamma: &[f32],
    shift: &[f32],
    ch: usize,
    g: &mut [Vec<f32>],
    at: usize,
) -> Vec<f32> {
    let rows = dy.len() / ch;
    // ReLU: only where g·x̂ + s > 0 (the unpooled gradient is already 0 off the winners).
    for (d, x) in dy.chunks_exact_mut(ch).zip(n.xhat.chunks_exact(ch)) {
        for c in 0..ch {
            if gamma[c] * x[c] + shift[c] <= 0.0 {
                d[c] = 0.0;
            }
        }
    }
    let mut sum = vec![0.0f64; ch];
    let mut dot = vec![0.0f64; ch];
    for (d, x) in dy.chunks_exact(ch).zip(n.xhat.chunks_exact(ch)) {
        for c in 0..ch {
            sum[c] += d[c] as f64;
            dot[c] += (d[c] * x[c]) as f64;
        }
    }
    for c in 0..ch {
        g[at][c] += dot[c] as f32;
        g[at + 1][c] += sum[c] as f32;
    }
    // dz = g/σ · (dy − mean(dy) − x̂·mean(dy·x̂)).
    let m = rows as f64;
    let mean_d: Vec<f32> = sum.iter().map(|s| (s / m) as f32).collect();
    let mean_dx: Vec<f32> = dot.iter().map(|s| (s / m) as f32).collect();
    let mut dz = dy.to_vec();
    dz.par_chunks_mut(BLOCK * ch)
        .zip(n.xhat.par_chunks(BLOCK * ch))
        .for_each(|(d, x)| {
            for (dr, xr) in d.chunks_exact_mut(ch).zip(x.chunks_exact(ch)) {
                for c in 0..ch {
                    dr[c] = gamma[c] * n.inv_std[c] * (dr[c] - mean_d[c] - xr[c] * mean_dx[c]);
                }
            }
        });
    dz
}

#[cfg(test)]
mod tests {
    use super::*;
    use embed::model::Model;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn random_net(seed: u64) -> Net {
        random_net_of(seed, Arch::SMALL)
    }

    fn random_net_of(seed: u64, arch: Arch) -> Net {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut net = Net::new(&super::super::init(&mut rng, arch));
        for t in [&mut net.g1, &mut net.g2] {
            t.iter_mut().for_each(|v| *v = rng.random_range(0.5..1.5));
        }
        for t in [&mut net.s1, &mut net.s2, &mut net.b3, &mut net.b4] {
            t.iter_mut().for_each(|v| *v = rng.random_range(-0.2..0.2));
        }
        for t in [&mut net.mean1, &mut net.mean2] {
            t.iter_mut().for_each(|v| *v = rng.random_range(-0.3..0.3));
        }
        for t in [&mut net.var1, &mut net.var2] {
            t.iter_mut().for_each(|v| *v = rng.random_range(0.2..2.0));
        }
        net
    }

    fn images(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n * PIXELS).map(|_| rng.random::<f32>()).collect()
    }

    /// The folded weights in the shared model give what the network gives with its
    /// normalisations at their running statistics (a batch whose statistics are the running
    /// ones is emulated by setting the running statistics to the batch's).
    #[test]
    fn folding_gives_the_shared_model() {
        // The gallery model's widths, and others (the query model's are a multiple of them).
        for arch in [Arch::SMALL, Arch { c1: 5, c2: 7 }] {
            folding_gives_the_shared_model_of(arch);
        }
    }

    fn folding_gives_the_shared_model_of(arch: Arch) {
        let mut net = random_net_of(1, arch);
        let xs = images(6, 2);
        let c = net.forward(&xs, Vec::new());
        (net.mean1, net.var1) = (c.n1.mean.clone(), c.n1.var.clone());
        (net.mean2, net.var2) = (c.n2.mean.clone(), c.n2.var.clone());
        let model = Model { w: net.fold() };
        assert_eq!(model.w.arch, arch);
        for (b, x) in xs.chunks_exact(PIXELS).enumerate() {
            let t = model.forward(x);
            for (got, want) in t.logits.iter().zip(&c.logits[b * CLASSES..]) {
                assert!((got - want).abs() < 1e-3, "{got} vs {want}");
            }
            for (got, want) in t.h.iter().zip(&c.h[b * EMBED..]) {
                assert!((got - want).abs() < 1e-3, "{got} vs {want}");
            }
        }
    }

    /// Unfolding a folded model and folding it again gives the same weights, and the unfolded
    /// network in training mode on its calibration sample computes the folded model.
    #[test]
    fn unfolding_inverts_folding_at_the_samples_statistics() {
        let w = random_net(7).fold();
        let xs = images(40, 8);
        let net = Net::unfold(&w, &xs);
        let back = net.fold();
        for (a, b) in w.tensors().into_iter().zip(back.tensors()) {
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() < 1e-4 * (1.0 + x.abs()), "{x} vs {y}");
            }
        }
        let c = net.forward(&xs, Vec::new());
        let model = Model { w };
        for (b, x) in xs.chunks_exact(PIXELS).enumerate() {
            for (got, want) in model.forward(x).h.iter().zip(&c.h[b * EMBED..]) {
                assert!((got - want).abs() < 1e-3, "{got} vs {want}");
            }
        }
    }

    /// A loss that reads every output: Σ a·logits + Σ e·h with fixed random weights.
    fn loss(net: &Net, xs: &[f32], keep: &[f32], a: &[f32], e: &[f32]) -> f64 {
        let c = net.forward(xs, keep.to_vec());
        let l: f64 = c.logits.iter().zip(a).map(|(x, y)| (x * y) as f64).sum();
        l + c.h.iter().zip(e).map(|(x, y)| (x * y) as f64).sum::<f64>()
    }

    /// Every trainable tensor's gradient equals central differences of the loss, in training
    /// mode with dropout, at sampled coordinates where the step crosses no ReLU or max-pool
    /// decision (there the loss is not differentiable).
    #[test]
    fn gradients_match_finite_differences() {
        let net = random_net(3);
        let n = 2;
        let xs = images(n, 4);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let keep: Vec<f32> = (0..n * net.arch().flat())
            .map(|_| {
                if rng.random::<f32>() < 0.25 {
                    0.0
                } else {
                    1.0 / 0.75
                }
            })
            .collect();
        let a: Vec<f32> = (0..n * CLASSES)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let e: Vec<f32> = (0..n * EMBED)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let c = net.forward(&xs, keep.clone());
        let mut g = net.zero_grads();
        net.backward(&c, &a, &e, &mut g);
        // Every max-pool winner, whether each winner passes its ReLU, and the embedding's ReLU.
        let decisions = |net: &Net| {
            let c = net.forward(&xs, keep.clone());
            let live = |arg: &[u32], n: &Norm, g: &[f32], s: &[f32], ch: usize| -> Vec<bool> {
                arg.iter()
                    .enumerate()
                    .map(|(i, &row)| {
                        let k = i % ch;
                        g[k] * n.xhat[row as usize * ch + k] + s[k] > 0.0
                    })
                    .collect::<Vec<bool>>()
            };
            let relu: Vec<bool> = c.h.iter().map(|v| *v > 0.0).collect();
            let l1 = live(&c.arg1, &c.n1, &net.g1, &net.s1, net.arch().c1);
            let l2 = live(&c.arg2, &c.n2, &net.g2, &net.s2, net.arch().c2);
            (c.arg1, c.arg2, l1, l2, relu)
        };
        let base = decisions(&net);
        for t in 0..10 {
            let len = net.clone().params_mut()[t].len();
            let mut checked = 0;
            let mut tries = 0;
            while checked < 6 && tries < 200 {
                tries += 1;
                let i = rng.random_range(0..len);
                let step = 2e-3f32;
                let at = |d: f32| {
                    let mut m = net.clone();
                    m.params_mut()[t][i] += d;
                    m
                };
                let (up, down) = (at(step), at(-step));
                if decisions(&up) != base || decisions(&down) != base {
                    continue;
                }
                let numeric = (loss(&up, &xs, &keep, &a, &e) - loss(&down, &xs, &keep, &a, &e))
                    / (2.0 * step as f64);
                let analytic = g.0[t][i] as f64;
                assert!(
                    (numeric - analytic).abs() <= 2e-2 * numeric.abs().max(0.05),
                    "tensor {t}, coordinate {i}: numeric {numeric}, analytic {analytic}"
                );
                checked += 1;
            }
            assert_eq!(checked, 6, "tensor {t}: too few coordinates off the kinks");
        }
    }
}
