//! Transform-coded thumbnails: fixed-length records much shorter than [`super::thumbs`]'
//! 3-bit form, for galleries whose thumbnail database would otherwise not fit #31's bytes.
//!
//! # Why
//! A search fetches 8 thumbnails by SimplePIR, and for a database of `E` bytes its hint and its
//! queries trade against each other (`hint × queries ∝ E`, `docs/eval/pir.md`, "One digest a
//! column"). At 1,000,000 items the 3-bit records (294 bytes) need either 903 KiB of queries
//! a search or a 46 MiB hint; 1 MiB a search and 16 MiB once a version hold together only
//! with records of at most about 96 bytes. Of the codes measured at that length (on the
//! 10,000 Fashion-MNIST test images), a transform on the gallery's own principal components
//! draws best: 24.9 dB PSNR at 98 bytes, against 22.3 on a DCT basis and 18.0 for 14×14
//! pixels at 4 bits; this code, fitted on the training split, draws them at 24.8 dB at
//! 94 bytes (the length served at 1,000,000 items), against the 3-bit form's 30.9 at 294.
//! Smaller galleries keep the 3-bit records, which are exact at their levels and which a
//! codebook of at most [`MAX_COMPONENTS`] components does not beat at their length (27.1 dB
//! at 294 bytes; `pir::doc::thumbs_plan` decides).
//!
//! # The code
//! A *codebook* (fitted by the server on its own gallery, published once a version as a file
//! named by its SHA-256) holds the mean thumbnail `μ`, `k` basis vectors `v_j` (the leading
//! principal components of the gallery's thumbnails, each stored as `i8` times a scale) and
//! for each a uniform quantiser of `b_j` bits (`lo_j`, `step_j`). A record is the `k` codes
//! `c_j = clamp(⌊(⟨x − μ, v_j⟩ − lo_j)/step_j⌋, 0, 2^b_j − 1)`, packed most significant bit
//! first, zero-padded to the record's length; a thumbnail is drawn as
//! `round(clamp(μ + Σ_j (lo_j + (c_j + ½)·step_j)·v_j, 0, 255))`. Bits go to components
//! greedily, one at a time to the component whose remaining error is largest (each bit
//! quarters it: the classic high-rate allocation), at most [`MAX_BITS`] a component and
//! [`MAX_COMPONENTS`] components; each quantiser's range is the one of seven widths
//! (±1.5 to ±5 standard deviations) with the least squared error on the fitting sample.
//!
//! # What it changes for privacy
//! Nothing. The codebook is fitted on the gallery (public to the server, which holds it), is
//! the same file for every client and is fetched whole; the client decodes records it already
//! fetched by PIR and checked against their digests. A hostile codebook can only draw wrong
//! pictures, which a hostile server could already do by publishing wrong thumbnails.
//! Decoding is bounded: every number is checked finite and within range when the file is read,
//! so no record decodes to a NaN, and the work is `k·t²` multiply-adds a thumbnail.
//!
//! # File (little-endian)
//! ```text
//! offset  size      field
//! 0       4         magic "PMTC"
//! 4       2         format (1)
//! 6       2         side t
//! 8       2         components k
//! 10      2         record length, bytes
//! 12      4·t²      mean μ, f32
//! ..      13·k      per component: bits u8, lo f32, step f32, scale f32
//! ..      k·t²      basis, i8 (component j's vector is scale_j times its row)
//! ```

use nalgebra::{DMatrix, SymmetricEigen};

use shared::error::{Error, Result};

/// The file's first bytes.
pub const MAGIC: &[u8; 4] = b"PMTC";
/// The format this code reads and writes.
pub const FORMAT: u16 = 1;
/// Most components: bounds the file (`k·t²` bytes of basis: 245 KiB at `t = 28`) and a
/// client's work a thumbnail. Measured at 96 bytes: 467 components would earn bits, and
/// capping them at 320 costs 0.1 dB.
pub const MAX_COMPONENTS: usize = 320;
/// Most bits a component.
pub const MAX_BITS: u8 = 12;
/// Largest thumbnail side a codebook describes.
pub const MAX_SIDE: usize = 64;
/// Shortest and longest records.
pub const MIN_RECORD: usize = 8;
pub const MAX_RECORD: usize = 4096;
/// Thumbnails a fit reads at most (an even stride through the gallery): the covariance costs
/// `n·t⁴` multiply-adds, 1.2·10¹⁰ at 20,000 (about a second), and more samples change the
/// leading components little.
pub const FIT_SAMPLE: usize = 20_000;
/// The thumbnails [`Codebook::fit`] reads of `thumbs`: at most [`FIT_SAMPLE`], at an even
/// stride. Fitting to them alone gives the same codebook (a caller whose thumbnails are
/// costly to hold can copy out just these).
pub fn fit_sample<T>(thumbs: &[T]) -> impl Iterator<Item = &T> {
    thumbs
        .iter()
        .step_by(thumbs.len().div_ceil(FIT_SAMPLE).max(1))
}

/// The longest file for thumbnails of `side` (at most [`MAX_COMPONENTS`] components).
pub fn max_file_len(side: usize) -> usize {
    let d = side * side;
    let k = MAX_COMPONENTS.min(d);
    12 + 4 * d + 13 * k + k * d
}

/// Bound on every stored number's magnitude (the mean, `lo` and a quantiser's span): keeps
/// every decoded sum finite.
const VALUE_LIMIT: f32 = 1.0e6;
/// Quantiser half-widths tried, in standard deviations.
const WIDTHS: [f64; 7] = [1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0];

/// One component's quantiser.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Quant {
    bits: u8,
    lo: f32,
    step: f32,
    scale: f32,
}

/// A fitted or published codebook (module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Codebook {
    side: usize,
    record_len: usize,
    mean: Vec<f32>,
    quant: Vec<Quant>,
    /// `k × t²`, row `j` = component `j`.
    basis: Vec<i8>,
    /// The same as `f32` (the encoder's operand: converting on the fly doubles its time).
    wide: Vec<f32>,
}

fn invalid(reason: String) -> Error {
    Error::InvalidParameter {
        name: "thumbnail codebook",
        reason,
    }
}

impl Codebook {
    /// Fits a codebook of `record_len`-byte records to `thumbs` (`side²` grey bytes each; at
    /// most [`FIT_SAMPLE`] of them are read, at an even stride). Deterministic: the same
    /// thumbnails give the same bytes.
    pub fn fit(thumbs: &[&[u8]], side: usize, record_len: usize) -> Result<Codebook> {
        let d = side * side;
        if side == 0 || side > MAX_SIDE || !(MIN_RECORD..=MAX_RECORD).contains(&record_len) {
            return Err(invalid(format!(
                "side {side} and {record_len}-byte records are outside the format"
            )));
        }
        if thumbs.is_empty() {
            return Err(invalid("no thumbnails to fit".into()));
        }
        if let Some(t) = thumbs.iter().find(|t| t.len() != d) {
            return Err(Error::DimensionMismatch {
                what: "thumbnail",
                expected: d,
                got: t.len(),
            });
        }
        let sample: Vec<&[u8]> = fit_sample(thumbs).copied().collect();
        let m = sample.len();
        let mut mean = vec![0f64; d];
        for t in &sample {
            for (a, &v) in mean.iter_mut().zip(t.iter()) {
                *a += f64::from(v);
            }
        }
        mean.iter_mut().for_each(|a| *a /= m as f64);
        let mean32: Vec<f32> = mean.iter().map(|&v| v as f32).collect();
        // Centred on the stored (f32) mean: what the encoder subtracts.
        let x =
            DMatrix::<f64>::from_fn(m, d, |r, c| f64::from(sample[r][c]) - f64::from(mean32[c]));
        let cov = x.transpose() * &x / m as f64;
        let eig = SymmetricEigen::new(cov);
        let mut order: Vec<usize> = (0..d).collect();
        // Largest variance first; ties to the lower index (deterministic).
        order.sort_by(|&a, &b| {
            eig.eigenvalues[b]
                .total_cmp(&eig.eigenvalues[a])
                .then(a.cmp(&b))
        });
        order.truncate(MAX_COMPONENTS.min(d));
        let bits = allocate(
            &order
                .iter()
                .map(|&i| eig.eigenvalues[i].max(0.0))
                .collect::<Vec<_>>(),
            record_len * 8,
        );
        // The stored vectors (`i8` times a scale), then every sample's projections on them —
        // what the encoder will compute — in one product.
        let mut scales = Vec::new();
        let mut basis: Vec<i8> = Vec::new();
        let mut kept = Vec::new();
        for (&i, &b) in order.iter().zip(&bits) {
            if b == 0 {
                continue;
            }
            let v = eig.eigenvectors.column(i);
            let peak = v.iter().fold(0f64, |a, &x| a.max(x.abs()));
            let scale = (peak / 127.0).max(f64::from(f32::MIN_POSITIVE)) as f32;
            basis.extend(
                v.iter()
                    .map(|&x| (x / f64::from(scale)).round().clamp(-127.0, 127.0) as i8),
            );
            scales.push(scale);
            kept.push(b);
        }
        let k = kept.len();
        let stored = DMatrix::<f64>::from_fn(d, k, |p, j| {
            f64::from(basis[j * d + p]) * f64::from(scales[j])
        });
        let ys = &x * stored;
        let quant = (0..k)
            .map(|j| {
                let col: Vec<f64> = ys.column(j).iter().copied().collect();
                let (lo, step) = fit_quantiser(&col, kept[j]);
                Quant {
                    bits: kept[j],
                    lo: lo as f32,
                    step: step as f32,
                    scale: scales[j],
                }
            })
            .collect();
        let book = Codebook {
            side,
            record_len,
            mean: mean32,
            quant,
            wide: Vec::new(),
            basis,
        };
        // What is published must read back (every bound checked once, here too).
        Codebook::from_bytes(&book.to_bytes())
    }

    /// The side of the thumbnails it codes.
    pub fn side(&self) -> usize {
        self.side
    }

    /// Bytes of one record.
    pub fn record_len(&self) -> usize {
        self.record_len
    }

    /// Components (basis vectors) it holds.
    pub fn components(&self) -> usize {
        self.quant.len()
    }

    /// Appends the record of `pixels` (`side²` grey bytes) to `out`.
    pub fn encode_into(&self, pixels: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let d = self.side * self.side;
        if pixels.len() != d {
            return Err(Error::DimensionMismatch {
                what: "thumbnail",
                expected: d,
                got: pixels.len(),
            });
        }
        let centred: Vec<f32> = pixels
            .iter()
            .zip(&self.mean)
            .map(|(&p, &m)| f32::from(p) - m)
            .collect();
        let mut w = BitWriter::new(out, self.record_len);
        for (q, row) in self.quant.iter().zip(self.wide.chunks_exact(d)) {
            let y = q.scale * dot(&centred, row);
            let top = (1u32 << q.bits) - 1;
            let code = ((y - q.lo) / q.step).floor().clamp(0.0, top as f32) as u32;
            w.put(code, q.bits);
        }
        w.finish();
        Ok(())
    }

    /// The record of `pixels`.
    pub fn encode(&self, pixels: &[u8]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.record_len);
        self.encode_into(pixels, &mut out)?;
        Ok(out)
    }

    /// The thumbnail a record draws (`side²` grey bytes). Refuses a record of another length
    /// or with non-zero padding, so each picture has one record.
    pub fn decode(&self, record: &[u8]) -> Result<Vec<u8>> {
        if record.len() != self.record_len {
            return Err(Error::DimensionMismatch {
                what: "coded thumbnail",
                expected: self.record_len,
                got: record.len(),
            });
        }
        let d = self.side * self.side;
        let mut acc = self.mean.clone();
        let mut r = BitReader {
            bytes: record,
            at: 0,
        };
        for (q, row) in self.quant.iter().zip(self.basis.chunks_exact(d)) {
            let code = r.take(q.bits);
            let y = q.scale * (q.lo + (code as f32 + 0.5) * q.step);
            for (a, &b) in acc.iter_mut().zip(row) {
                *a += y * f32::from(b);
            }
        }
        if !r.rest_is_zero() {
            return Err(invalid("a record's padding is not zero".into()));
        }
        Ok(acc
            .into_iter()
            .map(|v| v.round().clamp(0.0, 255.0) as u8)
            .collect())
    }

    /// The published file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let d = self.side * self.side;
        let mut out = Vec::with_capacity(12 + 4 * d + 13 * self.quant.len() + self.basis.len());
        out.extend_from_slice(MAGIC);
        for v in [
            FORMAT,
            self.side as u16,
            self.quant.len() as u16,
            self.record_len as u16,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for m in &self.mean {
            out.extend_from_slice(&m.to_le_bytes());
        }
        for q in &self.quant {
            out.push(q.bits);
            for v in [q.lo, q.step, q.scale] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out.extend(self.basis.iter().map(|&b| b as u8));
        out
    }

    /// Reads a published file, checking every bound (module docs, "What it changes for
    /// privacy"): the exact length, the format, finite numbers within range, positive steps
    /// and scales, bits that fit the record.
    pub fn from_bytes(bytes: &[u8]) -> Result<Codebook> {
        let u16_at = |o: usize| {
            bytes
                .get(o..o + 2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
        };
        if bytes.len() < 12 || &bytes[..4] != MAGIC || u16_at(4) != Some(FORMAT) {
            return Err(invalid("not a format-1 codebook".into()));
        }
        let side = usize::from(u16_at(6).unwrap_or(0));
        let k = usize::from(u16_at(8).unwrap_or(0));
        let record_len = usize::from(u16_at(10).unwrap_or(0));
        let d = side * side;
        if side == 0
            || side > MAX_SIDE
            || k > MAX_COMPONENTS.min(d)
            || !(MIN_RECORD..=MAX_RECORD).contains(&record_len)
        {
            return Err(invalid(format!(
                "side {side}, {k} components, {record_len}-byte records"
            )));
        }
        let want = 12 + 4 * d + 13 * k + k * d;
        if bytes.len() != want {
            return Err(invalid(format!("{} bytes, expected {want}", bytes.len())));
        }
        let f32_at =
            |o: usize| f32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
        let bounded = |v: f32| v.is_finite() && v.abs() <= VALUE_LIMIT;
        let mean: Vec<f32> = (0..d).map(|i| f32_at(12 + 4 * i)).collect();
        if !mean.iter().all(|&v| bounded(v)) {
            return Err(invalid("the mean is not finite and bounded".into()));
        }
        let at = 12 + 4 * d;
        let quant: Vec<Quant> = (0..k)
            .map(|j| {
                let o = at + 13 * j;
                Quant {
                    bits: bytes[o],
                    lo: f32_at(o + 1),
                    step: f32_at(o + 5),
                    scale: f32_at(o + 9),
                }
            })
            .collect();
        let mut total = 0usize;
        for q in &quant {
            total += usize::from(q.bits);
            let ok = (1..=MAX_BITS).contains(&q.bits)
                && bounded(q.lo)
                && q.step > 0.0
                && bounded(q.step * (1u32 << q.bits) as f32)
                && q.scale > 0.0
                && q.scale <= 1.0;
            if !ok {
                return Err(invalid("a component's quantiser is out of range".into()));
            }
        }
        if total > record_len * 8 {
            return Err(invalid(format!(
                "{total} bits do not fit {record_len}-byte records"
            )));
        }
        let basis: Vec<i8> = bytes[at + 13 * k..].iter().map(|&b| b as i8).collect();
        Ok(Codebook {
            side,
            record_len,
            mean,
            quant,
            wide: basis.iter().map(|&b| f32::from(b)).collect(),
            basis,
        })
    }
}

/// `⟨a, b⟩` in 16 independent partial sums, so the compiler vectorises it: one running sum
/// is a chain of dependent additions (measured on a 28×28 picture at 320 components: 210 µs
/// with one sum over the `i8` basis, 28 µs with this over its `f32` copy). The same order on
/// every target and no fused multiply-add, so the same picture gives the same record.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 16;
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(&x, &y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Greedy bit allocation (module docs): `variances` in rank order, `budget` bits.
fn allocate(variances: &[f64], budget: usize) -> Vec<u8> {
    let mut bits = vec![0u8; variances.len()];
    let mut left: Vec<f64> = variances.to_vec();
    for _ in 0..budget {
        // The largest remaining error among components that can take a bit; ties to the
        // lower rank.
        let best =
            (0..left.len())
                .filter(|&j| bits[j] < MAX_BITS)
                .fold(None, |best: Option<usize>, j| match best {
                    Some(b) if left[b] >= left[j] => Some(b),
                    _ => Some(j),
                });
        match best {
            Some(j) if left[j] > 0.0 => {
                bits[j] += 1;
                left[j] /= 4.0;
            }
            _ => break,
        }
    }
    bits
}

/// The uniform quantiser of `bits` bits with the least squared error on `ys` among the
/// widths tried: `(lo, step)`.
fn fit_quantiser(ys: &[f64], bits: u8) -> (f64, f64) {
    let n = ys.len() as f64;
    let mu = ys.iter().sum::<f64>() / n;
    let sd = (ys.iter().map(|y| (y - mu).powi(2)).sum::<f64>() / n).sqrt();
    let levels = f64::from(1u32 << bits);
    let top = levels - 1.0;
    let mut best = (f64::INFINITY, mu - 0.5, 1.0 / levels);
    if sd <= 0.0 {
        return (best.1, best.2);
    }
    for c in WIDTHS {
        let (lo, step) = (mu - c * sd, 2.0 * c * sd / levels);
        let err: f64 = ys
            .iter()
            .map(|&y| {
                let code = ((y - lo) / step).floor().clamp(0.0, top);
                (y - (lo + (code + 0.5) * step)).powi(2)
            })
            .sum();
        if err < best.0 {
            best = (err, lo, step);
        }
    }
    (best.1, best.2)
}

/// Bits written most significant first, then zero padding to `len` bytes.
struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    end: usize,
    acc: u64,
    n: u32,
}

impl<'a> BitWriter<'a> {
    fn new(out: &'a mut Vec<u8>, len: usize) -> BitWriter<'a> {
        let end = out.len() + len;
        BitWriter {
            out,
            end,
            acc: 0,
            n: 0,
        }
    }

    fn put(&mut self, v: u32, bits: u8) {
        self.acc = (self.acc << bits) | u64::from(v);
        self.n += u32::from(bits);
        while self.n >= 8 {
            self.n -= 8;
            self.out.push((self.acc >> self.n) as u8);
        }
    }

    fn finish(self) {
        if self.n > 0 {
            self.out.push((self.acc << (8 - self.n)) as u8);
        }
        self.out.resize(self.end, 0);
    }
}

struct BitReader<'a> {
    bytes: &'a [u8],
    /// Bits read.
    at: usize,
}

impl BitReader<'_> {
    fn take(&mut self, bits: u8) -> u32 {
        let mut v = 0u32;
        for _ in 0..bits {
            let bit = (self.bytes[self.at / 8] >> (7 - self.at % 8)) & 1;
            v = (v << 1) | u32::from(bit);
            self.at += 1;
        }
        v
    }

    fn rest_is_zero(&self) -> bool {
        let (byte, bit) = (self.at / 8, self.at % 8);
        let partial = bit == 0 || self.bytes[byte] & (0xff >> bit) == 0;
        let whole_from = if bit == 0 { byte } else { byte + 1 };
        partial && self.bytes[whole_from..].iter().all(|&b| b == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` smooth random-ish 8×8 pictures (a few blobs each), seeded.
    fn pictures(n: usize, seed: u64) -> Vec<Vec<u8>> {
        let mut s = seed;
        let mut next = move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as f64 / (1u64 << 31) as f64
        };
        (0..n)
            .map(|_| {
                let (cx, cy, r, v) = (next() * 8.0, next() * 8.0, 1.0 + next() * 3.0, next());
                (0..64)
                    .map(|p| {
                        let (x, y) = ((p % 8) as f64, (p / 8) as f64);
                        let d = ((x - cx).powi(2) + (y - cy).powi(2)).sqrt();
                        (255.0 * v * (1.0 - d / r).max(0.0) + 20.0 * next()) as u8
                    })
                    .collect()
            })
            .collect()
    }

    fn psnr(a: &[Vec<u8>], b: &[Vec<u8>]) -> f64 {
        let (mut se, mut n) = (0f64, 0usize);
        for (x, y) in a.iter().zip(b) {
            for (&p, &q) in x.iter().zip(y) {
                se += (f64::from(p) - f64::from(q)).powi(2);
                n += 1;
            }
        }
        10.0 * (255f64.powi(2) / (se / n as f64)).log10()
    }

    #[test]
    fn records_have_the_length_decode_and_improve_with_bytes() {
        let pics = pictures(600, 7);
        let refs: Vec<&[u8]> = pics.iter().map(Vec::as_slice).collect();
        let mut last = 0.0;
        for len in [8, 16, 32, 64] {
            let book = Codebook::fit(&refs, 8, len).unwrap();
            let drawn: Vec<Vec<u8>> = pics
                .iter()
                .map(|p| {
                    let r = book.encode(p).unwrap();
                    assert_eq!(r.len(), len);
                    book.decode(&r).unwrap()
                })
                .collect();
            let q = psnr(&pics, &drawn);
            assert!(q > last + 1.0, "{len} bytes: {q:.1} dB after {last:.1}");
            last = q;
        }
        // 64 bytes for 64 pixels: close to the pictures.
        assert!(last > 30.0, "{last}");
    }

    #[test]
    fn the_file_round_trips_and_fitting_is_deterministic() {
        let pics = pictures(300, 3);
        let refs: Vec<&[u8]> = pics.iter().map(Vec::as_slice).collect();
        let a = Codebook::fit(&refs, 8, 24).unwrap();
        let b = Codebook::fit(&refs, 8, 24).unwrap();
        assert_eq!(a.to_bytes(), b.to_bytes());
        assert_eq!(Codebook::from_bytes(&a.to_bytes()).unwrap(), a);
        assert!(a.components() > 0 && a.components() <= 64);
    }

    #[test]
    fn a_constant_gallery_is_coded_exactly() {
        let pics = vec![vec![77u8; 64]; 5];
        let refs: Vec<&[u8]> = pics.iter().map(Vec::as_slice).collect();
        let book = Codebook::fit(&refs, 8, 8).unwrap();
        assert_eq!(book.components(), 0);
        let r = book.encode(&pics[0]).unwrap();
        assert_eq!(r, vec![0u8; 8]);
        assert_eq!(book.decode(&r).unwrap(), pics[0]);
    }

    #[test]
    fn hostile_files_and_records_are_refused() {
        let pics = pictures(200, 5);
        let refs: Vec<&[u8]> = pics.iter().map(Vec::as_slice).collect();
        let book = Codebook::fit(&refs, 8, 16).unwrap();
        let good = book.to_bytes();
        let k = book.components();
        assert!(Codebook::from_bytes(&good[..good.len() - 1]).is_err());
        let mut longer = good.clone();
        longer.push(0);
        assert!(Codebook::from_bytes(&longer).is_err());
        // A NaN or an infinite mean, a zero step, too many bits, a scale above 1.
        let q0 = 12 + 4 * 64;
        for (at, bytes) in [
            (12, f32::NAN.to_le_bytes().to_vec()),
            (12, f32::INFINITY.to_le_bytes().to_vec()),
            (q0 + 5, 0f32.to_le_bytes().to_vec()),
            (q0, vec![MAX_BITS + 1]),
            (q0, vec![0]),
            (q0 + 9, 2f32.to_le_bytes().to_vec()),
            (q0 + 1, 1e30f32.to_le_bytes().to_vec()),
        ] {
            let mut bad = good.clone();
            bad[at..at + bytes.len()].copy_from_slice(&bytes);
            assert!(Codebook::from_bytes(&bad).is_err(), "byte {at}");
        }
        // More bits than the record holds.
        let mut bad = good.clone();
        for j in 0..k {
            bad[q0 + 13 * j] = MAX_BITS;
        }
        if k * usize::from(MAX_BITS) > 16 * 8 {
            assert!(Codebook::from_bytes(&bad).is_err());
        }
        // Records: another length, non-zero padding (where the bits leave some).
        let r = book.encode(&pics[0]).unwrap();
        assert!(book.decode(&r[1..]).is_err());
        let used: usize = book.quant.iter().map(|q| usize::from(q.bits)).sum();
        if used < 16 * 8 {
            let mut p = r.clone();
            *p.last_mut().unwrap() |= 1;
            assert!(book.decode(&p).is_err());
        }
        assert!(Codebook::fit(&refs, 8, MIN_RECORD - 1).is_err());
        assert!(Codebook::fit(&[&[0u8; 63][..]], 8, 16).is_err());
    }

    #[test]
    fn allocation_spends_the_budget_on_the_largest_errors() {
        // 16 : 4 : 1 — a bit quarters an error, so the first goes to 16, then 4 and 4 tie
        // (lower rank first), and so on.
        assert_eq!(allocate(&[16.0, 4.0, 1.0], 3), vec![2, 1, 0]);
        assert_eq!(allocate(&[16.0, 4.0, 1.0], 6), vec![3, 2, 1]);
        // Zero variance earns nothing; the cap holds.
        assert_eq!(allocate(&[0.0, 0.0], 5), vec![0, 0]);
        assert_eq!(allocate(&[1.0], 100), vec![MAX_BITS]);
    }

    /// A caller may fit to the sample alone (the server copies it out of its mapped
    /// catalogue): the same codebook, byte for byte.
    #[test]
    fn fitting_the_sample_alone_gives_the_same_codebook() {
        let (side, len) = (6, 12);
        let thumbs: Vec<Vec<u8>> = (0..2 * FIT_SAMPLE + 7)
            .map(|i| {
                (0..side * side)
                    .map(|j| ((i * 31 + j * 7) % 251) as u8)
                    .collect()
            })
            .collect();
        let all: Vec<&[u8]> = thumbs.iter().map(Vec::as_slice).collect();
        let sample: Vec<&[u8]> = fit_sample(&all).copied().collect();
        assert!(sample.len() <= FIT_SAMPLE && 2 * sample.len() > FIT_SAMPLE);
        assert_eq!(
            Codebook::fit(&sample, side, len).unwrap().to_bytes(),
            Codebook::fit(&all, side, len).unwrap().to_bytes()
        );
    }
}
