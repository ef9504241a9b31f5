//! One published level (B, overlap variant) and the exact coefficients of its expectations over
//! the k-subset mechanism.

use shared::api::LevelDoc;
use shared::protocol::partition::LevelSpec;

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
