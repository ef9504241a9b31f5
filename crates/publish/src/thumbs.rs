//! Thumbnails as block files and PIR records carry them: 3 bits a pixel (8 grey levels).
//!
//! # Format
//! A `t×t` grey thumbnail (row-major, light object on dark) is quantised to levels
//! `q = round(7·v / 255)`; each row after the first is replaced by its difference from the row
//! above, modulo 8 (the "up" filter of PNG: rows of clothing repeat, so the differences are
//! mostly 0 and compress well); the `t²` 3-bit values are packed most significant bit first,
//! and the last byte is padded with zero bits: [`packed_len`]`(t) = ⌈3·t²/8⌉` bytes (294 at
//! `t = 28`). A decoder refuses any other length and non-zero padding, so every thumbnail has
//! exactly one encoding (hashes and digests are over these bytes).
//!
//! # Why 3 bits
//! Measured on the 70,000-image gallery's blocks (gzip level 6, as served): the thumbnail
//! column costs 443 bytes an item at 8 bits, 197 at 4 bits packed, 141 at 3 bits with the up
//! filter; the rest of an item (id, label, 64 i16 features) 122. 8 grey levels still draw each
//! article recognisably at the page's size (see the README), and ranking never reads a
//! thumbnail, so fidelity is unchanged.

use shared::error::{Error, Result};

/// Bits a pixel.
pub const BITS: usize = 3;
/// Grey levels.
const LEVELS: u16 = 1 << BITS;
const MAX_LEVEL: u16 = LEVELS - 1;

/// Bytes of one packed `side × side` thumbnail.
pub fn packed_len(side: usize) -> usize {
    (side * side * BITS).div_ceil(8)
}

/// The level of a grey byte (round to nearest).
#[inline]
pub fn level(v: u8) -> u8 {
    ((v as u16 * MAX_LEVEL + 127) / 255) as u8
}

/// The grey byte a level is drawn as (round to nearest; 0 → 0, 7 → 255).
#[inline]
pub fn grey(q: u8) -> u8 {
    ((q as u16 * 255 + MAX_LEVEL / 2) / MAX_LEVEL) as u8
}

/// Appends the packed form of `pixels` (`side²` grey bytes) to `out`.
pub fn pack_into(pixels: &[u8], side: usize, out: &mut Vec<u8>) -> Result<()> {
    if pixels.len() != side * side {
        return Err(Error::DimensionMismatch {
            what: "thumbnail",
            expected: side * side,
            got: pixels.len(),
        });
    }
    let mut acc: u32 = 0;
    let mut bits = 0usize;
    for (i, &v) in pixels.iter().enumerate() {
        let q = level(v) as u16;
        let d = if i < side {
            q
        } else {
            (q + LEVELS - level(pixels[i - side]) as u16) & MAX_LEVEL
        };
        acc = (acc << BITS) | d as u32;
        bits += BITS;
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    if bits > 0 {
        out.push((acc << (8 - bits)) as u8);
    }
    Ok(())
}

/// The packed form of `pixels` (`side²` grey bytes).
pub fn pack(pixels: &[u8], side: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(packed_len(side));
    pack_into(pixels, side, &mut out)?;
    Ok(out)
}

/// Appends the `side²` grey bytes of a packed thumbnail to `out`. Refuses a wrong length and
/// non-zero padding bits (never panics).
pub fn unpack_into(bytes: &[u8], side: usize, out: &mut Vec<u8>) -> Result<()> {
    let bad = |reason: String| Error::InvalidParameter {
        name: "thumbnail",
        reason,
    };
    if bytes.len() != packed_len(side) {
        return Err(bad(format!(
            "{} bytes, expected {} for a {side}×{side} thumbnail",
            bytes.len(),
            packed_len(side)
        )));
    }
    let n = side * side;
    let start = out.len();
    out.reserve(n);
    let mut acc: u32 = 0;
    let mut bits = 0usize;
    let mut bytes_iter = bytes.iter();
    for i in 0..n {
        if bits < BITS {
            // The length check guarantees the byte is there.
            let b = *bytes_iter.next().unwrap_or(&0);
            acc = (acc << 8) | b as u32;
            bits += 8;
        }
        bits -= BITS;
        let d = ((acc >> bits) as u16) & MAX_LEVEL;
        let q = if i < side {
            d
        } else {
            // The level above, recovered from the grey byte already written.
            (d + level(out[start + i - side]) as u16) & MAX_LEVEL
        };
        out.push(grey(q as u8));
    }
    if acc & ((1u32 << bits) - 1) != 0 {
        out.truncate(start);
        return Err(bad("non-zero padding bits".into()));
    }
    Ok(())
}

/// The `side²` grey bytes of a packed thumbnail.
pub fn unpack(bytes: &[u8], side: usize) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    unpack_into(bytes, side, &mut out)?;
    Ok(out)
}

/// `pixels` as they are drawn after a round trip (each byte moved to its level's grey).
pub fn requantise(pixels: &[u8]) -> Vec<u8> {
    pixels.iter().map(|&v| grey(level(v))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_round_trip_and_cover_the_range() {
        for q in 0..8u8 {
            assert_eq!(level(grey(q)), q);
        }
        assert_eq!((grey(0), grey(7)), (0, 255));
        // Every grey byte goes to its nearest level.
        for v in 0..=255u8 {
            let q = level(v);
            for other in 0..8u8 {
                let (a, b) = (grey(q) as i32 - v as i32, grey(other) as i32 - v as i32);
                assert!(a.abs() <= b.abs(), "{v}: {q} vs {other}");
            }
        }
    }

    #[test]
    fn pack_unpack_is_requantisation_and_unique() {
        for side in [0usize, 1, 2, 3, 5, 28] {
            let px: Vec<u8> = (0..side * side)
                .map(|i| ((i * 37 + i / 3 * 11) % 256) as u8)
                .collect();
            let p = pack(&px, side).unwrap();
            assert_eq!(p.len(), packed_len(side));
            let back = unpack(&p, side).unwrap();
            assert_eq!(back, requantise(&px));
            // Drawn pixels pack to the same bytes: one encoding per thumbnail.
            assert_eq!(pack(&back, side).unwrap(), p);
        }
        assert_eq!(packed_len(28), 294);
    }

    #[test]
    fn bad_lengths_and_padding_are_refused() {
        let px = vec![200u8; 9];
        let p = pack(&px, 3).unwrap(); // 27 bits: 5 padding bits
        assert_eq!(p.len(), 4);
        assert!(unpack(&p[..3], 3).is_err());
        let mut q = p.clone();
        q.push(0);
        assert!(unpack(&q, 3).is_err());
        let mut r = p;
        *r.last_mut().unwrap() |= 1;
        assert!(unpack(&r, 3).is_err());
        assert!(pack(&px, 2).is_err());
    }

    #[test]
    fn any_bytes_of_the_right_length_unpack_without_panicking() {
        let mut seed = 1u64;
        for _ in 0..2_000 {
            let b: Vec<u8> = (0..packed_len(28))
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (seed >> 56) as u8
                })
                .collect();
            if let Ok(px) = unpack(&b, 28) {
                assert_eq!(pack(&px, 28).unwrap(), b);
            }
        }
    }
}
