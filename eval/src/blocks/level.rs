//! One published level (B, overlap variant) and the exact coefficients of its expectations over
//! the k-subset mechanism.

use publish::partition::LevelSpec;
use shared::api::LevelDoc;

use super::setup::K;

/// Per-L coefficients of a level: every expectation is `p·(…in) + (1 − p)·(…out)`.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Coef {
    /// Fidelity given the true block is released / is not.
    pub(super) f_in: f64,
    pub(super) f_out: f64,
    /// Pool fraction given in / out.
    pub(super) a_in: f64,
    pub(super) a_out: f64,
    /// Transfer bytes given in / out.
    pub(super) b_in: f64,
    pub(super) b_out: f64,
}

/// One evaluated level (B, variant).
pub(super) struct LevelEval {
    pub(super) spec: LevelSpec,
    pub(super) members: Vec<Vec<u32>>,
    /// Blocks holding each item (CSR).
    pub(super) offsets: Vec<u32>,
    pub(super) lists: Vec<u32>,
    /// `coef[L − 1]`.
    pub(super) coef: Vec<Coef>,
    pub(super) doc: LevelDoc,
    /// Each query's true block (its nearest centroid).
    pub(super) true_block: Vec<u32>,
}

impl LevelEval {
    pub(super) fn blocks_of(&self, i: usize) -> &[u32] {
        &self.lists[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
}

/// `q(c) = C(B−1−c, K)/C(B−1, K)` for c = 0..B: the chance that K blocks drawn uniformly from
/// the B − 1 non-true blocks miss c given ones.
pub(super) fn miss_probs(b: usize, k: usize) -> Vec<f64> {
    let mut q = vec![0.0; b + 1];
    if k > b - 1 {
        return q;
    }
    q[0] = 1.0;
    for c in 0..b {
        let num = (b - 1) as f64 - k as f64 - c as f64;
        let den = (b - 1) as f64 - c as f64;
        q[c + 1] = if num > 0.0 && den > 0.0 {
            q[c] * num / den
        } else {
            0.0
        };
    }
    q
}

/// A published level's exact expectations: the blocks holding each item (CSR) and the
/// coefficients for every L, from its members, its document's transfer bytes, each query's
/// true block and each query's true 8-NN (`truth`) among the `n` gallery items.
pub(super) fn evaluate_level(
    spec: LevelSpec,
    members: Vec<Vec<u32>>,
    doc: LevelDoc,
    n: usize,
    nq: usize,
    true_block: &[u32],
    truth: &[&[u32]],
) -> LevelEval {
    let b = spec.blocks as usize;
    // Blocks of every item.
    let mut mult = vec![0u32; n];
    for block in &members {
        for &i in block {
            mult[i as usize] += 1;
        }
    }
    let mut offsets = vec![0u32; n + 1];
    for i in 0..n {
        offsets[i + 1] = offsets[i] + mult[i];
    }
    let mut lists = vec![0u32; offsets[n] as usize];
    let mut fill = offsets.clone();
    for (bx, block) in members.iter().enumerate() {
        for &i in block {
            lists[fill[i as usize] as usize] = bx as u32;
            fill[i as usize] += 1;
        }
    }
    // Query weight of each true block.
    let mut w = vec![0f64; b];
    for &x in true_block {
        w[x as usize] += 1.0 / nq as f64;
    }
    // Items by multiplicity, and weighted by the true block holding them.
    let mut h = vec![0f64; b + 1];
    for &m in &mult {
        h[m as usize] += 1.0;
    }
    let mut gw = vec![0f64; b + 1];
    for (x, block) in members.iter().enumerate() {
        if w[x] > 0.0 {
            for &i in block {
                gw[mult[i as usize] as usize] += w[x];
            }
        }
    }
    // Items in x with c others (w1[c]), not in x with c holders (w0[c]).
    let w1: Vec<f64> = (0..=b)
        .map(|c| if c < b { gw[c + 1] } else { 0.0 })
        .collect();
    let w0: Vec<f64> = (0..=b).map(|c| h[c] - gw[c]).collect();
    // Truth pairs.
    let (mut t1, mut t0) = (vec![0f64; b + 1], vec![0f64; b + 1]);
    for (q, tr) in truth.iter().enumerate() {
        let x = true_block[q];
        for &i in tr.iter() {
            let bl = &lists[offsets[i as usize] as usize..offsets[i as usize + 1] as usize];
            if bl.binary_search(&x).is_ok() {
                t1[bl.len() - 1] += 1.0;
            } else {
                t0[bl.len()] += 1.0;
            }
        }
    }
    let pairs = (nq * K) as f64;
    let tb: Vec<f64> = doc.transfer_bytes.iter().map(|&v| v as f64).collect();
    let total: f64 = tb.iter().sum();
    let wb: f64 = (0..b).map(|x| w[x] * tb[x]).sum();
    let coef = (1..=b)
        .map(|l| {
            let qin = miss_probs(b, l - 1);
            let qout = miss_probs(b, l);
            let (mut f_in, mut f_out, mut a_in, mut a_out) = (0.0, 0.0, 0.0, 0.0);
            for c in 0..=b {
                f_in += t1[c] + t0[c] * (1.0 - qin[c]);
                f_out += (t1[c] + t0[c]) * (1.0 - qout[c]);
                a_in += w1[c] + w0[c] * (1.0 - qin[c]);
                a_out += (w1[c] + w0[c]) * (1.0 - qout[c]);
            }
            let others = (total - wb) / (b - 1) as f64;
            Coef {
                f_in: f_in / pairs,
                f_out: f_out / pairs,
                a_in: a_in / n as f64,
                a_out: a_out / n as f64,
                b_in: wb + (l - 1) as f64 * others,
                b_out: l as f64 * others,
            }
        })
        .collect();
    LevelEval {
        spec,
        members,
        offsets,
        lists,
        coef,
        doc,
        true_block: true_block.to_vec(),
    }
}
