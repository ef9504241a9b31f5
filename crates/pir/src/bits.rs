//! Fixed-width values packed end to end on the wire: what lets a value that carries `b` bits
//! cost `b` bits, not the next whole number of bytes.
//!
//! Values are written least significant bit first, each `bits` wide, the first value at bit 0
//! of byte 0; the last byte's unused high bits are zero. A reader refuses any other length and
//! non-zero unused bits, so every value sequence has exactly one encoding.

use crate::error::PirError;

/// Bytes that `count` values of `bits` bits take.
pub const fn packed_len(count: usize, bits: u32) -> usize {
    (count * bits as usize).div_ceil(8)
}

/// Packs `values` (each below `2^bits`, `1 ≤ bits ≤ 64`; higher bits are dropped).
pub fn pack(values: impl ExactSizeIterator<Item = u64>, bits: u32) -> Vec<u8> {
    debug_assert!((1..=64).contains(&bits));
    let mut out = Vec::with_capacity(packed_len(values.len(), bits));
    let mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    // Bits not yet written, low bits first; at most 7 + 64 of them.
    let (mut acc, mut held) = (0u128, 0u32);
    for v in values {
        acc |= u128::from(v & mask) << held;
        held += bits;
        while held >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            held -= 8;
        }
    }
    if held > 0 {
        out.push(acc as u8);
    }
    out
}

/// Reads exactly `count` values of `bits` bits from `bytes`, which must be exactly
/// [`packed_len`] long with its unused high bits zero.
pub fn unpack(bytes: &[u8], count: usize, bits: u32) -> Result<Vec<u64>, PirError> {
    debug_assert!((1..=64).contains(&bits));
    let expected = packed_len(count, bits);
    if bytes.len() != expected {
        return Err(PirError::Malformed(format!(
            "{} bytes of packed values, expected {expected}",
            bytes.len()
        )));
    }
    let mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let mut out = Vec::with_capacity(count);
    let (mut acc, mut held) = (0u128, 0u32);
    let mut next = bytes.iter();
    for _ in 0..count {
        while held < bits {
            acc |= u128::from(*next.next().expect("the length was checked")) << held;
            held += 8;
        }
        out.push(acc as u64 & mask);
        acc >>= bits;
        held -= bits;
    }
    if acc != 0 {
        return Err(PirError::Malformed(
            "the packed values' unused bits are not zero".into(),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn values_round_trip_at_every_width_and_count() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
        for bits in 1..=64u32 {
            for count in [0usize, 1, 2, 7, 8, 9, 63, 100] {
                let mask = if bits == 64 {
                    u64::MAX
                } else {
                    (1u64 << bits) - 1
                };
                let vals: Vec<u64> = (0..count).map(|_| rng.random::<u64>() & mask).collect();
                let bytes = pack(vals.iter().copied(), bits);
                assert_eq!(bytes.len(), packed_len(count, bits));
                assert_eq!(
                    unpack(&bytes, count, bits).unwrap(),
                    vals,
                    "{bits} × {count}"
                );
            }
        }
    }

    #[test]
    fn other_lengths_and_stray_bits_are_refused() {
        let bytes = pack([5u64, 1, 7].into_iter(), 3); // 9 bits: 2 bytes, 7 unused
        assert_eq!(bytes, vec![0b1100_1101, 0b1]);
        assert!(unpack(&bytes[..1], 3, 3).is_err());
        assert!(unpack(&[bytes.clone(), vec![0]].concat(), 3, 3).is_err());
        let mut stray = bytes.clone();
        stray[1] |= 0b10;
        assert!(unpack(&stray, 3, 3).is_err());
        // The same bytes read as fewer values leave bits over: refused as well.
        assert!(unpack(&bytes, 2, 3).is_err());
    }
}
