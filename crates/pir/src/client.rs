//! The client's side of the scheme: queries for records, and the decoding of answers.
//!
//! # Guarantee (query privacy)
//! A query for column `j` of a database with `n` columns is `A·s + e + Δ·u_j ∈ Z_q^n`, with `A`
//! the public matrix, `s` a fresh secret and `e` fresh errors, both Gaussian (normal form)
//! from the caller's CSPRNG, `u_j` the j-th unit vector. Under decision-LWE with the
//! parameters of [`super::lwe`] (128-bit by SimplePIR's lattice-estimator figure for uniform
//! secrets and at most 2²¹ samples, which normal form and a database's at most 2²⁰ columns stay
//! within: see there), `A·s + e` is indistinguishable from uniform, so
//! the query is too, whatever `j` is: the server's view of a query — and of a batch of them,
//! each with its own secret — is computationally independent of the columns asked for. On the
//! wire each value is rounded at random to the shape's precision ([`lwe::round_at_random`],
//! coins independent of everything: a randomised function of the LWE vector, so the same
//! holds); its size is [`Shape::query_bytes`] for every `j`. Secrets are never reused (a reused secret would let the server
//! subtract two queries and see `Δ·(u_j − u_j')`), and never leave [`Pending`].
//!
//! # What is not hidden
//! How many queries, against which database, and when — callers make these public (fixed
//! counts from the plan). Answers are verified after decoding (the record formats carry
//! SHA-256); a hostile server can make decoding fail on purpose for chosen columns, and learns
//! one bit if the client's next requests depend on that failure: callers send the same
//! requests whether or not a record checks out (the search protocol in `privatemail-client`,
//! `client::pir_search`, does).

use rand::RngCore;
use zeroize::{Zeroize, Zeroizing};

pub use crate::error::PirError;
use crate::error::{Error, Result};
use crate::layout::Shape;
use crate::lwe::{self, DELTA, LWE_N};

pub use crate::layout::MAX_QUERIES;

/// A hint as the client holds it: `rows × N` u32 (each the multiple of `2^(32 − HINT_BITS)`
/// the wire carried), checked against its published hash.
#[derive(Debug, Clone, PartialEq)]
pub struct Hint {
    pub rows: usize,
    pub values: Vec<u32>,
}

impl Hint {
    /// Parses the hint file ([`crate::layout::encode_hint`]'s form) after checking its length
    /// and SHA-256.
    pub fn from_bytes(shape: &Shape, bytes: &[u8], sha256_hex: &str) -> Result<Hint> {
        shape.validate()?;
        if bytes.len() != shape.hint_bytes() {
            return Err(PirError::HintSize {
                expected: shape.hint_bytes(),
                got: bytes.len(),
            }
            .into());
        }
        let got = crate::digest::sha256_hex(bytes);
        if !got.eq_ignore_ascii_case(sha256_hex) {
            return Err(PirError::HashMismatch {
                what: "hint",
                expected: sha256_hex.to_string(),
                got,
            }
            .into());
        }
        let values = crate::layout::decode_hint(bytes).ok_or(PirError::HintSize {
            expected: shape.hint_bytes(),
            got: bytes.len(),
        })?;
        Ok(Hint {
            rows: shape.rows,
            values,
        })
    }
}

/// A batch of queries sent, waiting for its answer. Holds the secrets. **The secrets, and the
/// records asked for, are zeroised on drop** ([`Drop`] below).
pub struct Pending {
    shape: Shape,
    secrets: Vec<Vec<u32>>,
    records: Vec<usize>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.secrets.zeroize();
        self.records.zeroize();
    }
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secrets or which records were asked for.
        f.debug_struct("Pending")
            .field("queries", &self.secrets.len())
            .finish()
    }
}

/// Queries for `records` (each spans `shape.queries_per_record()` columns): the request body
/// (the query vectors in [`Shape::encode_query`]'s form, in the order of `records`) and the state that
/// decodes its answer. `rng` must be a CSPRNG (in this workspace,
/// `dp::rng::secure_rng`). The same as [`prepare`] then [`Prepared::query`].
pub fn query(
    shape: &Shape,
    a_seed: &[u8; 32],
    records: &[usize],
    rng: &mut impl RngCore,
) -> Result<(Vec<u8>, Pending)> {
    shape.validate()?;
    let count = records.len() * shape.queries_per_record();
    prepare(shape, a_seed, count, rng)?.query(records)
}

/// The part of `count` queries that does not depend on what they ask for: fresh secrets and
/// their masks `A·s + e`, computed ahead (before the photo is known, so that a search's
/// requests leave without this work). **Used once**: [`Prepared::query`] consumes it; the
/// secrets and masks are zeroised on drop.
pub struct Prepared {
    shape: Shape,
    secrets: Vec<Vec<u32>>,
    /// `count × cols`: query `q`'s masks in `[q·cols, (q+1)·cols)`.
    masks: Vec<u32>,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        self.secrets.zeroize();
        self.masks.zeroize();
    }
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("queries", &self.secrets.len())
            .finish()
    }
}

/// Prepares `count` queries (1 ≤ `count` ≤ [`MAX_QUERIES`]) against `shape` under the public
/// matrix of `a_seed`: the masks `A·s + e`, each with its own fresh secret and errors from
/// `rng` (a CSPRNG), the same distribution as [`query`]'s. Reads nothing private.
pub fn prepare(
    shape: &Shape,
    a_seed: &[u8; 32],
    count: usize,
    rng: &mut impl RngCore,
) -> Result<Prepared> {
    shape.validate()?;
    if count == 0 || count > MAX_QUERIES {
        return Err(Error::TooLarge {
            what: "PIR queries in one request",
            count,
            limit: MAX_QUERIES,
        });
    }
    let secrets: Vec<Vec<u32>> = (0..count)
        .map(|_| lattice::lwe::sample_secret(LWE_N, rng))
        .collect();
    let n = shape.cols;
    let drop = shape.query_drop();
    let mut masks = vec![0u32; count * n];
    lwe::for_each_row_of_a(a_seed, n, |j, a_j| {
        for (q, s) in secrets.iter().enumerate() {
            let m = lattice::lwe::dot(a_j, s).wrapping_add(lattice::lwe::sample_error(rng));
            // Rounded here, ahead: `Δ·u` never touches the dropped bits.
            masks[q * n + j] = lwe::round_at_random(m, drop, rng);
        }
    });
    Ok(Prepared {
        shape: *shape,
        secrets,
        masks,
    })
}

impl Prepared {
    /// How many queries this holds (records × queries a record).
    pub fn count(&self) -> usize {
        self.secrets.len()
    }

    /// The database shape it was prepared for.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The queries for `records` from these masks: `Δ` added at each query's selected column,
    /// by a pass over every column (the records decide no branch and no memory address).
    /// `records` must need exactly [`Prepared::count`] queries.
    pub fn query(mut self, records: &[usize]) -> Result<(Vec<u8>, Pending)> {
        let shape = self.shape;
        let per = shape.queries_per_record();
        let c = records.len() * per;
        if records.is_empty() || c != self.secrets.len() {
            return Err(Error::InvalidParameter {
                name: "pir records",
                reason: format!("{c} queries asked of {} prepared", self.secrets.len()),
            });
        }
        if let Some(&r) = records.iter().find(|&&r| r >= shape.records) {
            return Err(Error::InvalidParameter {
                name: "pir record",
                reason: format!("{r} is not below {}", shape.records),
            });
        }
        // Which column each query selects: as private as the records (wiped when done).
        let columns: Zeroizing<Vec<usize>> = Zeroizing::new(
            records
                .iter()
                .flat_map(|&r| (0..per).map(move |k| shape.first_column(r) + k))
                .collect(),
        );
        let n = shape.cols;
        let mut out = Vec::with_capacity(c * shape.query_bytes());
        let mut values = Zeroizing::new(vec![0u32; n]);
        for (q, row) in self.masks.chunks_exact(n).enumerate() {
            for (j, (v, &m)) in values.iter_mut().zip(row).enumerate() {
                // Branch-free: the selected column gets Δ.
                let sel = DELTA.wrapping_mul(u32::from(columns[q] == j));
                *v = m.wrapping_add(sel);
            }
            out.extend_from_slice(&shape.encode_query(&values));
        }
        let secrets = std::mem::take(&mut self.secrets);
        Ok((
            out,
            Pending {
                shape,
                secrets,
                records: records.to_vec(),
            },
        ))
    }
}

impl Pending {
    /// The records asked for, in order (client-local: never sent).
    pub fn records(&self) -> &[usize] {
        &self.records
    }

    /// The database shape it was asked of.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Bytes the answer must have.
    pub fn answer_bytes(&self) -> usize {
        self.secrets.len() * self.shape.answer_bytes()
    }

    /// Decodes the answer into the records asked for, in order (padded to `record_len`).
    /// A wrong size is refused here; wrong contents (a damaged answer, a wrong hint or key)
    /// decode to bytes that the record's hash check refuses.
    pub fn decode(&self, hint: &Hint, answer: &[u8]) -> Result<Vec<Vec<u8>>> {
        // Wiped when done: the other records of a unit reveal which unit was asked for.
        let units = Zeroizing::new(self.decode_units(hint, answer)?);
        self.records
            .iter()
            .zip(units.iter())
            .map(|(&r, unit)| Ok(self.shape.extract(r, unit)?.to_vec()))
            .collect()
    }

    /// Decodes the answer into each asked record's whole unit ([`Shape::unit_of`]: every
    /// column decoded for it, concatenated), in order: what a unit digest is checked over.
    pub fn decode_units(&self, hint: &Hint, answer: &[u8]) -> Result<Vec<Vec<u8>>> {
        if answer.len() != self.answer_bytes() {
            return Err(PirError::AnswerSize {
                expected: self.answer_bytes(),
                got: answer.len(),
            }
            .into());
        }
        let m = self.shape.rows;
        if hint.rows != m || hint.values.len() != m * LWE_N {
            return Err(PirError::HintSize {
                expected: self.shape.hint_bytes(),
                got: hint.values.len() / 2 * 5,
            }
            .into());
        }
        let per = self.shape.queries_per_record();
        let answers = self.shape.decode_answer(answer)?;
        let mut out = Vec::with_capacity(self.records.len());
        for ri in 0..self.records.len() {
            let mut columns = vec![0u8; m * per];
            for k in 0..per {
                let q = ri * per + k;
                let s = &self.secrets[q];
                let ans = &answers[q * m..(q + 1) * m];
                for (i, (a, h)) in ans.iter().zip(hint.values.chunks_exact(LWE_N)).enumerate() {
                    let v = a.wrapping_sub(lattice::lwe::dot(h, s));
                    // Round to the nearest multiple of Δ; the plaintext is centered (d − 128).
                    columns[k * m + i] = (v.wrapping_add(DELTA / 2) >> 24) as u8 ^ 0x80;
                }
            }
            out.push(columns);
        }
        Ok(out)
    }
}
