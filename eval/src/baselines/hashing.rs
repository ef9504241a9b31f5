//! Private hashing baselines (evaluation issue; the MM 2020 private-hashing paper's Random
//! Flipping): the query's `c`-bit code — signs of public projections (LSH), or ITQ codes
//! learned on the public anchors — released by randomized response, retrieval by Hamming
//! distance.
//!
//! The privacy unit is the whole code: a different query may change ALL `c` bits, so flipping
//! each bit with probability `1/(1 + e^{ε/c})` (each bit (ε/c)-DP) gives ε-DP for the code by
//! basic composition — the paper's per-bit ε is not the record-level ε, and we always state
//! the record-level one.

use nalgebra::DMatrix;
use rand::{Rng, RngCore};
use rand_distr::StandardNormal;

use crate::baselines::projection::Projection;
use paper::laplacian::normalize_rows;
use shared::error::{Error, Result};

/// ITQ's rounds (also the most PITQ epochs).
pub const ITQ_ROUNDS: usize = 50;

/// A public hash: `code(x) = sign(R·P·(x − μ))` (LSH: `P` random, `R = I`; ITQ: `P` PCA of
/// the anchors, `R` the learned rotation).
#[derive(Debug, Clone)]
pub struct Hash {
    projection: Option<Projection>,
    planes: DMatrix<f64>,
}

impl Hash {
    /// LSH: `bits` random hyperplanes through the origin (sign random projections).
    pub fn lsh(d: usize, bits: usize, rng: &mut impl Rng) -> Result<Self> {
        if bits == 0 || bits > 1024 || d == 0 {
            return Err(Error::InvalidParameter {
                name: "bits",
                reason: "need 1..=1024 bits and d ≥ 1".into(),
            });
        }
        Ok(Hash {
            projection: None,
            planes: DMatrix::from_fn(bits, d, |_, _| rng.sample::<f64, _>(StandardNormal)),
        })
    }

    /// ITQ (Gong & Lazebnik 2011) on public rows: PCA to `bits` dimensions, then 50 rounds of
    /// alternating `B = sign(V·R)`, `R = argmin ‖B − V·R‖` (orthogonal Procrustes).
    pub fn itq(public: &DMatrix<f64>, bits: usize, rng: &mut impl RngCore) -> Result<Self> {
        Self::iterative_quantization(public, bits, ITQ_ROUNDS, None, rng)
    }

    /// PITQ (the private-hashing paper's Algorithm 3): ITQ whose codes `B` are randomly flipped
    /// (each bit with probability `β = e^{−ε/E}`, the paper's parameterisation) in every one of
    /// its `epochs` rounds before the rotation update.
    ///
    /// What this does and does not protect. The paper's Theorem 8 claims ε-DP for the DATABASE
    /// `Y`. As printed, Algorithm 3 does not give it: the rotation update `R = N·Nᵀ` with
    /// `Bᵀ·(Y·W) = N·Ω·Nᵀ` reads the raw `Y·W`, `W` is a non-private PCA of `Y`, and the returned
    /// codes `U = sign(Y·W·R)` are recomputed from the raw data with no flipping at all — given
    /// `R` each returned bit is a deterministic function of its record (infinite privacy loss;
    /// `pitq_returns_unflipped_codes` shows it). In this project the rows PITQ is trained on are
    /// the PUBLIC anchors, so that defect costs nothing, and the flipping inside the rounds only
    /// perturbs the learned rotation. The private object is the QUERY, whose code must still go
    /// through [`randomized_response`] with the record-level ε — that is how `eval` runs it.
    pub fn pitq(
        public: &DMatrix<f64>,
        bits: usize,
        epochs: usize,
        epsilon: f64,
        rng: &mut impl RngCore,
    ) -> Result<Self> {
        if !(epsilon.is_finite() && epsilon > 0.0) || epochs == 0 || epochs > ITQ_ROUNDS {
            return Err(Error::InvalidParameter {
                name: "epsilon",
                reason: format!("PITQ needs ε > 0 (finite) and 1..={ITQ_ROUNDS} epochs"),
            });
        }
        let beta = (-epsilon / epochs as f64).exp();
        Self::iterative_quantization(public, bits, epochs, Some(beta), rng)
    }

    fn iterative_quantization(
        public: &DMatrix<f64>,
        bits: usize,
        rounds: usize,
        flip: Option<f64>,
        rng: &mut impl RngCore,
    ) -> Result<Self> {
        let pca = Projection::pca(public, bits)?;
        let v = pca.apply(public)?;
        let c = v.ncols();
        // A random orthogonal start.
        let g = DMatrix::from_fn(c, c, |_, _| rng.sample::<f64, _>(StandardNormal));
        let mut r = g.qr().q();
        for _ in 0..rounds {
            let vr = &v * &r;
            let mut b = vr.map(|x| if x >= 0.0 { 1.0 } else { -1.0 });
            if let Some(beta) = flip {
                b.iter_mut().for_each(|x| {
                    if rng.random::<f64>() < beta {
                        *x = -*x;
                    }
                });
            }
            let svd = (b.transpose() * &v).svd(true, true);
            let (u, vt) = (svd.u.unwrap(), svd.v_t.unwrap());
            // Minimise ‖B − V·R‖: R = (U·Vᵀ of Bᵀ·V)ᵀ.
            r = (u * vt).transpose();
        }
        Ok(Hash {
            projection: Some(pca),
            planes: r.transpose(),
        })
    }

    /// Codes of rows (normalised here).
    pub fn codes(&self, x: &DMatrix<f64>) -> Result<Vec<Vec<bool>>> {
        let y = match &self.projection {
            Some(p) => p.apply(x)?,
            None => normalize_rows(x, "features to hash")?,
        };
        if y.ncols() != self.planes.ncols() {
            return Err(Error::DimensionMismatch {
                what: "features to hash",
                expected: self.planes.ncols(),
                got: y.ncols(),
            });
        }
        let s = y * self.planes.transpose();
        Ok(s.row_iter()
            .map(|r| r.iter().map(|&v| v >= 0.0).collect())
            .collect())
    }
}

/// Randomized response on every bit with total budget `epsilon` for the whole code.
///
/// Guarantee: ε-DP with respect to replacing the code by any other code of the same length
/// (so for any change of the query). Proof: each bit is kept with probability
/// `e^{ε/c}/(1 + e^{ε/c})`, so its output likelihood ratio is at most `e^{ε/c}`; the bits are
/// flipped independently, so ratios multiply: at most `e^ε` over all `c` bits. (The flip
/// probability is compared with a 53-bit uniform from a CSPRNG, so it is realised to within
/// 2⁻⁵³; the resulting ε is larger than nominal by a relative 2⁻⁴⁰ at most.)
pub fn randomized_response(
    code: &[bool],
    epsilon: f64,
    rng: &mut impl RngCore,
) -> Result<Vec<bool>> {
    if !(epsilon.is_finite() && epsilon > 0.0) || code.is_empty() {
        return Err(Error::InvalidParameter {
            name: "epsilon",
            reason: "must be finite and > 0, with a non-empty code".into(),
        });
    }
    let per_bit = epsilon / code.len() as f64;
    let flip = 1.0 / (1.0 + per_bit.exp());
    Ok(code
        .iter()
        .map(|&b| if rng.random::<f64>() < flip { !b } else { b })
        .collect())
}

/// Hamming distance.
pub fn hamming(a: &[bool], b: &[bool]) -> usize {
    a.iter().zip(b).filter(|(x, y)| x != y).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn randomized_response_flips_at_the_stated_rate() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let code = vec![true; 64];
        let (eps, trials) = (16.0, 2_000);
        let flips: usize = (0..trials)
            .map(|_| {
                let out = randomized_response(&code, eps, &mut rng).unwrap();
                out.iter().filter(|&&b| !b).count()
            })
            .sum();
        let want = 1.0 / (1.0 + (eps / 64.0f64).exp());
        let got = flips as f64 / (64.0 * trials as f64);
        // SE ≈ 0.0014; allow 6 SE.
        assert!((got - want).abs() < 0.0085, "{got} vs {want}");
        assert!(randomized_response(&code, 0.0, &mut rng).is_err());
    }

    #[test]
    fn itq_codes_are_balanced_and_similar_points_share_bits() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let centres = DMatrix::from_fn(4, 16, |_, _| rng.random::<f64>() - 0.5);
        let x = DMatrix::from_fn(200, 16, |i, j| {
            centres[(i % 4, j)] + 0.05 * (rng.random::<f64>() - 0.5)
        });
        let h = Hash::itq(&x, 8, &mut rng).unwrap();
        let codes = h.codes(&x).unwrap();
        let same = hamming(&codes[0], &codes[4]);
        let other = hamming(&codes[0], &codes[1]);
        assert!(same < other, "{same} vs {other}");
        let lsh = Hash::lsh(16, 32, &mut rng).unwrap();
        assert_eq!(lsh.codes(&x).unwrap()[0].len(), 32);
        assert!(Hash::lsh(16, 0, &mut rng).is_err());
    }

    #[test]
    fn pitq_flips_inside_its_rounds_only() {
        // The flips act inside the rounds (the rotation differs from plain ITQ's from the same
        // start), but nothing flips the codes a hash returns: they stay sign(Y·W·R) — which is
        // why Algorithm 3's database "privacy" is void and the query needs randomized response.
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let x = DMatrix::from_fn(120, 12, |_, _| rng.random::<f64>() - 0.5);
        let start = || ChaCha8Rng::seed_from_u64(6);
        let plain = Hash::iterative_quantization(&x, 8, 10, None, &mut start()).unwrap();
        let noisy = Hash::pitq(&x, 8, 10, 0.5, &mut start()).unwrap();
        assert!((plain.planes.clone() - noisy.planes.clone()).norm() > 1e-3);
        let y = noisy.projection.as_ref().unwrap().apply(&x).unwrap() * noisy.planes.transpose();
        let signs: Vec<Vec<bool>> = y
            .row_iter()
            .map(|r| r.iter().map(|&v| v >= 0.0).collect())
            .collect();
        assert_eq!(noisy.codes(&x).unwrap(), signs);
        // With ε large, β ≈ 0: PITQ is ITQ.
        let quiet = Hash::pitq(&x, 8, 10, 1e4, &mut start()).unwrap();
        assert!((plain.planes - quiet.planes).norm() < 1e-9);
        assert!(Hash::pitq(&x, 8, 0, 1.0, &mut rng).is_err());
        assert!(Hash::pitq(&x, 8, 10, f64::NAN, &mut rng).is_err());
    }
}
