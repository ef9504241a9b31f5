//! The on-device networks' parameters ([`Weights`]), their shape ([`Arch`]) and their files.
//!
//! One network shape ([`super::model`]) with two convolution widths to choose from: the
//! gallery model and the class model are [`Arch::SMALL`] (32 and 64 channels), the query
//! model — the one a photo runs through in the browser — is wider ([`Arch::WIDE`], 64 and 128),
//! since what it must learn is harder (a photo's features landing where its clean image's
//! gallery features are) and its weights are shipped in 8 bits.
//!
//! Files (little-endian):
//! - `PMCNN2`: `MAGIC ‖ f32 …` in [`Weights::tensors`] order, [`Arch::SMALL`] only. The
//!   gallery model's format, unchanged, so its stored features stay its own.
//! - `PMCNN3`: `MAGIC ‖ c1: u16 ‖ c2: u16 ‖ encoding: u8 ‖ 0 0 0 ‖ body`, any admitted
//!   [`Arch`]; the body is the f32 tensors (encoding 0) or [`EightBit`] (encoding 1).
//!
//! Trust: the page receives its query model from the server, which may write any bytes. A
//! file parses only if its shape is admitted (each width 1…[`MAX_CHANNELS`]), its length is
//! exactly its shape's, and every value is finite and within [`MAX_WEIGHT`] / [`MAX_BIAS`]:
//! the bounds under which inference is proven total (`Model::infer`).

use shared::error::{Error, Result};

pub const SIDE: usize = 28;
pub const PIXELS: usize = SIDE * SIDE;
pub const K: usize = 5;
pub(crate) const S1: usize = SIDE - K + 1; // 24
pub(crate) const P1: usize = S1 / 2; // 12
pub(crate) const S2: usize = P1 - K + 1; // 8
pub(crate) const P2: usize = S2 / 2; // 4
pub use shared::params::EMBED;
pub const CLASSES: usize = 10;

/// Widest convolution a weights file may have: bounds a file's size (2.2 MB in f32, 0.55 MB in
/// 8 bits) and the totality proof's fan-ins.
pub const MAX_CHANNELS: usize = 128;

/// Largest |weight| a model file may hold (the committed gallery model's largest is 1.8, the
/// query model's 2.7).
pub const MAX_WEIGHT: f32 = 127.0;
/// Largest |bias| a model file may hold (the committed gallery model's largest is 0.53, the
/// query model's 2.1).
pub const MAX_BIAS: f32 = 1.0e3;

const MAGIC_V2: &[u8; 8] = b"PMCNN2\0\0";
const MAGIC_V3: &[u8; 8] = b"PMCNN3\0\0";
const HEADER_V3: usize = 16;

/// The widths of the two convolutions; everything else of the network is fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arch {
    pub c1: usize,
    pub c2: usize,
}

impl Arch {
    /// The gallery model's and the class model's network.
    pub const SMALL: Arch = Arch { c1: 32, c2: 64 };
    /// The query model's network.
    pub const WIDE: Arch = Arch { c1: 64, c2: 128 };

    /// The flat layer's length (the second convolution's pooled maps).
    pub const fn flat(self) -> usize {
        self.c2 * P2 * P2
    }

    /// Length of [`super::model::Trace::channel_means`]: one mean per pooled channel.
    pub const fn layer_dim(self) -> usize {
        self.c1 + self.c2
    }

    /// Output rows of each weight matrix, in [`Weights::tensors`] order (w1, w2, w3, w4).
    pub const fn rows(self) -> [usize; 4] {
        [self.c1, self.c2, EMBED, CLASSES]
    }

    /// Lengths of the tensors, in [`Weights::tensors`] order.
    pub const fn sizes(self) -> [usize; 8] {
        [
            self.c1 * K * K,
            self.c1,
            self.c2 * self.c1 * K * K,
            self.c2,
            EMBED * self.flat(),
            EMBED,
            CLASSES * EMBED,
            CLASSES,
        ]
    }

    /// Fan-in of each weight matrix (w1, w2, w3, w4).
    pub const fn fans(self) -> [usize; 4] {
        [K * K, self.c1 * K * K, self.flat(), EMBED]
    }

    /// Each width within 1…[`MAX_CHANNELS`].
    pub fn check(self) -> Result<()> {
        for (name, c) in [("first", self.c1), ("second", self.c2)] {
            if !(1..=MAX_CHANNELS).contains(&c) {
                return Err(bad(format!(
                    "{c} channels in the {name} convolution (1 to {MAX_CHANNELS})"
                )));
            }
        }
        Ok(())
    }

    const fn params(self) -> usize {
        let s = self.sizes();
        let mut n = 0;
        let mut i = 0;
        while i < s.len() {
            n += s[i];
            i += 1;
        }
        n
    }
}

fn bad(reason: impl Into<String>) -> Error {
    Error::InvalidParameter {
        name: "model weights",
        reason: reason.into(),
    }
}

fn f32_at(bytes: &[u8], o: usize) -> f32 {
    f32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"))
}

/// All parameters, flat, in a fixed layout (see [`Arch::sizes`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    pub arch: Arch,
    pub w1: Vec<f32>, // [c1][K][K]
    pub b1: Vec<f32>, // [c1]
    pub w2: Vec<f32>, // [c2][c1][K][K]
    pub b2: Vec<f32>, // [c2]
    pub w3: Vec<f32>, // [EMBED][flat]
    pub b3: Vec<f32>, // [EMBED]
    pub w4: Vec<f32>, // [CLASSES][EMBED]
    pub b4: Vec<f32>, // [CLASSES]
}

impl Weights {
    pub fn zeros(arch: Arch) -> Self {
        let s = arch.sizes();
        Weights {
            arch,
            w1: vec![0.0; s[0]],
            b1: vec![0.0; s[1]],
            w2: vec![0.0; s[2]],
            b2: vec![0.0; s[3]],
            w3: vec![0.0; s[4]],
            b3: vec![0.0; s[5]],
            w4: vec![0.0; s[6]],
            b4: vec![0.0; s[7]],
        }
    }

    pub fn tensors(&self) -> [&Vec<f32>; 8] {
        [
            &self.w1, &self.b1, &self.w2, &self.b2, &self.w3, &self.b3, &self.w4, &self.b4,
        ]
    }

    pub fn tensors_mut(&mut self) -> [&mut Vec<f32>; 8] {
        [
            &mut self.w1,
            &mut self.b1,
            &mut self.w2,
            &mut self.b2,
            &mut self.w3,
            &mut self.b3,
            &mut self.w4,
            &mut self.b4,
        ]
    }

    /// The longest file [`Weights::from_bytes`] accepts (f32 at the widest shape): a client
    /// reads no more than this from a server.
    pub const fn max_file_len() -> usize {
        let widest = Arch {
            c1: MAX_CHANNELS,
            c2: MAX_CHANNELS,
        };
        HEADER_V3 + 4 * widest.params()
    }

    /// The weights in full precision: `PMCNN2` for [`Arch::SMALL`] (the gallery model's
    /// bytes, unchanged), `PMCNN3` with f32 values for any other shape.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = if self.arch == Arch::SMALL {
            MAGIC_V2.to_vec()
        } else {
            self.header(0)
        };
        for t in self.tensors() {
            for v in t {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// The weights in 8 bits (`PMCNN3`, encoding 1, [`EightBit`]): a quarter of the size.
    pub fn to_bytes_8bit(&self) -> Vec<u8> {
        let mut out = self.header(1);
        EightBit::encode(self, &mut out);
        out
    }

    fn header(&self, encoding: u8) -> Vec<u8> {
        let mut out = MAGIC_V3.to_vec();
        out.extend_from_slice(&(self.arch.c1 as u16).to_le_bytes());
        out.extend_from_slice(&(self.arch.c2 as u16).to_le_bytes());
        out.extend_from_slice(&[encoding, 0, 0, 0]);
        out
    }

    /// Parse [`Weights::to_bytes`] or [`Weights::to_bytes_8bit`]; a wrong magic, shape,
    /// encoding or length, non-finite values, a weight above [`MAX_WEIGHT`] or a bias above
    /// [`MAX_BIAS`] in magnitude are typed errors.
    ///
    /// The bounds are what makes inference total (`Model::infer`): the server sends the
    /// page its model, and weights that could overflow for some photos only would make the
    /// photo decide whether a search follows — the server would learn that bit by waiting.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        if bytes.len() > Self::max_file_len() {
            return Err(bad(format!(
                "{} bytes, more than any model file ({})",
                bytes.len(),
                Self::max_file_len()
            )));
        }
        let w = if bytes.len() >= 8 && &bytes[..8] == MAGIC_V2 {
            Self::from_f32(&bytes[8..], Arch::SMALL, 8)?
        } else if bytes.len() >= HEADER_V3 && &bytes[..8] == MAGIC_V3 {
            let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
            let arch = Arch {
                c1: u16_at(8),
                c2: u16_at(10),
            };
            arch.check()?;
            if bytes[13..16] != [0, 0, 0] {
                return Err(bad("a header with nonzero padding"));
            }
            let body = &bytes[HEADER_V3..];
            match bytes[12] {
                0 => Self::from_f32(body, arch, HEADER_V3)?,
                1 => EightBit::decode(body, arch).map_err(bad)?,
                e => return Err(bad(format!("unknown encoding {e}"))),
            }
        } else {
            return Err(bad("not a PrivateMail model file (wrong magic)"));
        };
        if w.tensors().iter().any(|t| t.iter().any(|v| !v.is_finite())) {
            return Err(bad("non-finite parameter"));
        }
        w.check_bounds().map_err(bad)?;
        Ok(w)
    }

    fn from_f32(body: &[u8], arch: Arch, header: usize) -> Result<Self> {
        if body.len() != 4 * arch.params() {
            return Err(bad(format!(
                "{} bytes, expected {}",
                body.len() + header,
                4 * arch.params() + header
            )));
        }
        let mut w = Self::zeros(arch);
        let mut off = 0;
        for t in w.tensors_mut() {
            for v in t.iter_mut() {
                *v = f32_at(body, off);
                off += 4;
            }
        }
        Ok(w)
    }

    /// Every weight within ±[`MAX_WEIGHT`] and every bias within ±[`MAX_BIAS`] (NaN fails):
    /// the bounds under which `Model::infer` is total.
    pub fn check_bounds(&self) -> std::result::Result<(), String> {
        for (k, t) in self.tensors().into_iter().enumerate() {
            let (limit, what) = if k % 2 == 0 {
                (MAX_WEIGHT, "weight")
            } else {
                (MAX_BIAS, "bias")
            };
            if let Some(v) = t.iter().find(|v| v.is_nan() || v.abs() > limit) {
                return Err(format!("a {what} of {v} (at most {limit} in magnitude)"));
            }
        }
        Ok(())
    }
}

/// The 8-bit body shared by the query model's `PMCNN3` files and the class model's
/// (`super::classify`): each weight matrix as `i8` per output row with one f32 scale
/// (`w = q · scale`, `scale = max |w| / 127`), the biases in f32 —
/// `for w1, w2, w3, w4: rows × f32 scale, then rows × cols i8 ‖ for b1, b2, b3, b4: f32`.
/// Decoding is one exactly rounded f32 product per weight, so native, wasm and the evaluation
/// run the same network; encoding the decoded weights gives the same bytes.
pub struct EightBit;

/// Largest per-row scale accepted (so |w| ≤ 127 = [`MAX_WEIGHT`]).
pub const MAX_SCALE: f32 = MAX_WEIGHT / 127.0;

impl EightBit {
    /// Length of the body for `arch`.
    pub const fn len(arch: Arch) -> usize {
        let s = arch.sizes();
        let rows = arch.rows();
        let mut n = 0;
        let mut i = 0;
        while i < 4 {
            n += rows[i] * 4 + s[2 * i] + s[2 * i + 1] * 4;
            i += 1;
        }
        n
    }

    /// Appends the body of `w` to `out`.
    pub fn encode(w: &Weights, out: &mut Vec<u8>) {
        let t = w.tensors();
        for (m, rows) in [t[0], t[2], t[4], t[6]].into_iter().zip(w.arch.rows()) {
            let cols = m.len() / rows;
            let scales: Vec<f32> = m
                .chunks_exact(cols)
                .map(|r| r.iter().fold(0.0f32, |a, v| a.max(v.abs())) / 127.0)
                .collect();
            for s in &scales {
                out.extend_from_slice(&s.to_le_bytes());
            }
            for (r, s) in m.chunks_exact(cols).zip(&scales) {
                out.extend(r.iter().map(|v| {
                    let q = if *s > 0.0 { (v / s).round() } else { 0.0 };
                    q.clamp(-127.0, 127.0) as i8 as u8
                }));
            }
        }
        for b in [t[1], t[3], t[5], t[7]] {
            for v in b {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }

    /// Parses a body of `arch`: a wrong length, a scale that is not finite, negative or above
    /// [`MAX_SCALE`], or a bias that is not finite or above [`MAX_BIAS`] in magnitude is an
    /// error (its reason).
    pub fn decode(body: &[u8], arch: Arch) -> std::result::Result<Weights, String> {
        if body.len() != Self::len(arch) {
            return Err(format!(
                "an 8-bit body of {} bytes, expected {}",
                body.len(),
                Self::len(arch)
            ));
        }
        let mut w = Weights::zeros(arch);
        let mut off = 0;
        let mut t = w.tensors_mut();
        for (k, rows) in [0usize, 2, 4, 6].into_iter().zip(arch.rows()) {
            let m = &mut t[k];
            let cols = m.len() / rows;
            let scales: Vec<f32> = (0..rows).map(|r| f32_at(body, off + 4 * r)).collect();
            if let Some(s) = scales
                .iter()
                .find(|s| !(s.is_finite() && (0.0..=MAX_SCALE).contains(*s)))
            {
                return Err(format!("a weight scale of {s}"));
            }
            off += 4 * rows;
            for (r, row) in m.chunks_exact_mut(cols).enumerate() {
                for (v, &q) in row.iter_mut().zip(&body[off + r * cols..]) {
                    *v = (q as i8) as f32 * scales[r];
                }
            }
            off += rows * cols;
        }
        for k in [1usize, 3, 5, 7] {
            for v in t[k].iter_mut() {
                *v = f32_at(body, off);
                off += 4;
            }
        }
        if let Some(b) = [&w.b1, &w.b2, &w.b3, &w.b4]
            .iter()
            .flat_map(|b| b.iter())
            .find(|b| !(b.is_finite() && b.abs() <= MAX_BIAS))
        {
            return Err(format!("a bias of {b}"));
        }
        debug_assert!(w.check_bounds().is_ok());
        Ok(w)
    }
}

// The wire's limits name these files' lengths; they are the format's.
const _: () = assert!(Weights::max_file_len() == shared::params::limits::MAX_MODEL_BYTES);
