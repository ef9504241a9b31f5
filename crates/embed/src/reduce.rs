//! A decoded photo of any size → the pipeline's working image, in one pass over its rows, for
//! both clients: the CLI feeds it the rows its decoder (`embed::photo_file`) gives, the page
//! the rows the browser's decoder gives (drawn strip by strip at full resolution, through the
//! wasm client's `PhotoReducer`). Everything after the decode is this code in both, so a file
//! both decoders read to the same pixels (any PNG) gives the same working image, hence the same
//! model input and features, in both; a JPEG differs only by the decoders' rounding.
//!
//! # Bounds (one place for both clients)
//! At most [`MAX_PHOTO_BYTES`] of file, [`MAX_PHOTO_SIDE`] pixels a side and
//! [`MAX_PHOTO_PIXELS`] in all, checked from the dimensions before any pixel is read
//! ([`check_size`]). The reducer holds one band of block sums (`3 × ⌈w/f⌉` integers) and the
//! output, never the photo.
//!
//! # The reduction
//! The least whole factor `f` that brings the longer side to at most [`WORK_SIDE`] (`f = 1`:
//! unchanged); each output pixel is the rounded mean of its `f×f` block (the last row and
//! column of blocks may be smaller), every pixel composited over white first, as
//! [`crate::photo::analyse`] would. The rows are those of the image as it is shown (EXIF
//! orientation applied first), so blocks fall on the same pixels whichever client turned it.
//! Integer arithmetic only: every platform gets the same bytes.

use shared::error::{Error, Result};

use crate::photo::MAX_IMAGE_SIDE;

/// Largest photo file read (bytes): 64 MiB.
pub const MAX_PHOTO_BYTES: usize = 64 << 20;
/// Largest width or height read.
pub const MAX_PHOTO_SIDE: u32 = 16_384;
/// Most pixels read: 100 megapixels (a 50-megapixel camera's 8,160 × 6,120 fits twice).
pub const MAX_PHOTO_PIXELS: u64 = 100_000_000;
/// Longest side of the image the pipeline reads; a larger photo is averaged down to it.
pub const WORK_SIDE: usize = 1_024;

const _: () = assert!(WORK_SIDE <= MAX_IMAGE_SIDE);
// The block sums fit a u32: f ≤ ⌈MAX_PHOTO_SIDE / WORK_SIDE⌉ and f² · 255 < 2³².
const _: () = assert!((MAX_PHOTO_SIDE as u64).div_ceil(WORK_SIDE as u64).pow(2) * 255 < 1 << 32);

/// The limits in words, for `--help` and the page.
pub fn limits_words() -> String {
    format!(
        "at most {} MiB and {} megapixels ({} pixels a side)",
        MAX_PHOTO_BYTES >> 20,
        MAX_PHOTO_PIXELS / 1_000_000,
        MAX_PHOTO_SIDE
    )
}

fn bad(reason: String) -> Error {
    Error::InvalidParameter {
        name: "photo",
        reason,
    }
}

/// A typed error unless `w×h` is within [`MAX_PHOTO_SIDE`] and [`MAX_PHOTO_PIXELS`] and not
/// empty; the reason in the words both clients show.
pub fn check_size(w: u64, h: u64) -> Result<()> {
    if w == 0 || h == 0 {
        return Err(bad("the image is empty".into()));
    }
    if w * h > MAX_PHOTO_PIXELS {
        return Err(bad(format!(
            "{w}×{h} is more than {} megapixels",
            MAX_PHOTO_PIXELS / 1_000_000
        )));
    }
    if w.max(h) > MAX_PHOTO_SIDE as u64 {
        return Err(bad(format!(
            "{w}×{h} is more than {MAX_PHOTO_SIDE} pixels a side"
        )));
    }
    Ok(())
}

/// The reduction factor for a `w×h` image: the least `f` with `⌈max(w, h) / f⌉ ≤ WORK_SIDE`.
pub fn factor(w: usize, h: usize) -> usize {
    w.max(h).div_ceil(WORK_SIDE).max(1)
}

/// `c·a + 255·(255 − a)`, rounded, over 255: a pixel composited over white.
fn over_white(c: u8, a: u32) -> u32 {
    (c as u32 * a + 255 * (255 - a) + 127) / 255
}

/// The streaming reducer: fed the image's rows top to bottom (RGBA, any number of whole rows
/// at a time), it gives the reduced image ([`Reducer::finish`]).
#[derive(Debug, Clone)]
pub struct Reducer {
    w: usize,
    h: usize,
    f: usize,
    ow: usize,
    /// Rows received so far.
    rows: usize,
    /// The current band's block sums, 3 a block.
    sums: Vec<u32>,
    /// The reduced image (RGBA, opaque), filled band by band.
    out: Vec<u8>,
}

impl Reducer {
    /// A reducer for a `w×h` image, refused past the bounds ([`check_size`]).
    pub fn new(w: usize, h: usize) -> Result<Self> {
        check_size(w as u64, h as u64)?;
        let f = factor(w, h);
        let (ow, oh) = (w.div_ceil(f), h.div_ceil(f));
        Ok(Reducer {
            w,
            h,
            f,
            ow,
            rows: 0,
            sums: vec![0; 3 * ow],
            out: vec![255; 4 * ow * oh],
        })
    }

    /// The reduction factor `f` (a strip of a multiple of `f` rows fills whole bands).
    pub fn factor(&self) -> usize {
        self.f
    }

    /// The image's width and height.
    pub fn dimensions(&self) -> (usize, usize) {
        (self.w, self.h)
    }

    /// Add the next rows: `rgba` is whole rows of the image (`4·w` bytes each), not past its
    /// last row.
    pub fn push_rows(&mut self, rgba: &[u8]) -> Result<()> {
        let row_bytes = 4 * self.w;
        if !rgba.len().is_multiple_of(row_bytes) {
            return Err(bad(format!(
                "{} bytes are not whole rows of {row_bytes}",
                rgba.len()
            )));
        }
        let n = rgba.len() / row_bytes;
        if self.rows + n > self.h {
            return Err(bad(format!(
                "{} rows past the image's {}",
                self.rows + n,
                self.h
            )));
        }
        for row in rgba.chunks_exact(row_bytes) {
            for (x, p) in row.chunks_exact(4).enumerate() {
                let s = &mut self.sums[3 * (x / self.f)..][..3];
                let a = p[3] as u32;
                s[0] += over_white(p[0], a);
                s[1] += over_white(p[1], a);
                s[2] += over_white(p[2], a);
            }
            self.rows += 1;
            if self.rows.is_multiple_of(self.f) || self.rows == self.h {
                self.flush_band();
            }
        }
        Ok(())
    }

    /// The finished band's means into the output; the sums back to zero.
    fn flush_band(&mut self) {
        let oy = (self.rows - 1) / self.f;
        let band = self.rows - oy * self.f;
        for ox in 0..self.ow {
            let cols = (self.w - ox * self.f).min(self.f);
            let n = (band * cols) as u32;
            let o = 4 * (oy * self.ow + ox);
            let sums = &mut self.sums[3 * ox..][..3];
            for (v, s) in self.out[o..o + 3].iter_mut().zip(sums) {
                *v = ((*s + n / 2) / n) as u8;
                *s = 0;
            }
        }
    }

    /// The reduced image (RGBA, opaque), its width and height; an error unless every row was
    /// given.
    pub fn finish(self) -> Result<(Vec<u8>, usize, usize)> {
        if self.rows != self.h {
            return Err(bad(format!(
                "{} of the image's {} rows were given",
                self.rows, self.h
            )));
        }
        let oh = self.h.div_ceil(self.f);
        Ok((self.out, self.ow, oh))
    }
}

/// A whole RGBA image through the [`Reducer`].
pub fn reduce(rgba: &[u8], w: usize, h: usize) -> Result<(Vec<u8>, usize, usize)> {
    if rgba.len() != 4 * w * h {
        return Err(Error::DimensionMismatch {
            what: "RGBA bytes",
            expected: 4 * w * h,
            got: rgba.len(),
        });
    }
    let mut r = Reducer::new(w, h)?;
    r.push_rows(rgba)?;
    r.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reduction as first written (block by block over the whole image): the reference
    /// the streaming reducer must equal.
    fn block_means(rgba: &[u8], w: usize, h: usize) -> Vec<u8> {
        let f = factor(w, h);
        let (ow, oh) = (w.div_ceil(f), h.div_ceil(f));
        let mut out = vec![255u8; ow * oh * 4];
        for oy in 0..oh {
            let ys = oy * f..((oy + 1) * f).min(h);
            for ox in 0..ow {
                let xs = ox * f..((ox + 1) * f).min(w);
                let n = (ys.len() * xs.len()) as u32;
                let mut sum = [0u32; 3];
                for y in ys.clone() {
                    for x in xs.clone() {
                        let p = &rgba[4 * (y * w + x)..][..4];
                        for (s, &v) in sum.iter_mut().zip(&p[..3]) {
                            *s += over_white(v, p[3] as u32);
                        }
                    }
                }
                let o = &mut out[4 * (oy * ow + ox)..][..3];
                for (v, s) in o.iter_mut().zip(sum) {
                    *v = ((s + n / 2) / n) as u8;
                }
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Fed in strips of any height, the reducer gives the block means exactly, on odd
        /// sizes past the working side (partial last blocks) and within it (unchanged).
        #[test]
        fn streaming_equals_the_block_means(
            w in 1usize..2_600,
            h in 1usize..40,
            tall in any::<bool>(),
            strip in 1usize..9,
            seed in any::<u64>(),
        ) {
            let (w, h) = if tall { (h, w) } else { (w, h) };
            let mut s = seed | 1;
            let rgba: Vec<u8> = (0..4 * w * h)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (s >> 24) as u8
                })
                .collect();
            let mut r = Reducer::new(w, h).unwrap();
            for rows in rgba.chunks(4 * w * strip) {
                r.push_rows(rows).unwrap();
            }
            let (out, ow, oh) = r.finish().unwrap();
            prop_assert_eq!(ow, w.div_ceil(factor(w, h)));
            prop_assert_eq!(oh, h.div_ceil(factor(w, h)));
            prop_assert!(ow.max(oh) <= WORK_SIDE);
            prop_assert_eq!(out, block_means(&rgba, w, h));
        }
    }

    #[test]
    fn bounds_and_misuse_are_typed_errors() {
        assert!(Reducer::new(0, 5).is_err());
        let e = Reducer::new(12_000, 9_000).unwrap_err().to_string();
        assert!(e.contains("megapixels"), "{e}");
        let e = Reducer::new(20_000, 10).unwrap_err().to_string();
        assert!(e.contains("a side"), "{e}");
        let mut r = Reducer::new(3, 2).unwrap();
        assert!(r.push_rows(&[0; 5]).is_err());
        r.push_rows(&[0; 12]).unwrap();
        assert!(r.clone().finish().is_err());
        assert!(r.push_rows(&[0; 24]).is_err());
        r.push_rows(&[0; 12]).unwrap();
        assert_eq!(r.finish().unwrap(), (vec![255; 24], 3, 2));
    }
}
