//! A strict parser for the IDX format (MNIST, Fashion-MNIST), gzip or raw, over bytes in memory.
//! Reading files is the caller's business; this module does no I/O.
//!
//! Layout: two zero bytes, a type byte (0x08 = unsigned byte, the only type accepted), the
//! number of dimensions, then each dimension as a big-endian u32, then the data.

use std::io::Read;

use shared::error::{Error, Result};

/// Largest decompressed file accepted (Fashion-MNIST's biggest is 47 MB).
pub const MAX_IDX_BYTES: usize = 256 << 20;

/// Greyscale images, row-major, one byte per pixel.
#[derive(Debug, Clone, PartialEq)]
pub struct Images {
    pub count: usize,
    pub rows: usize,
    pub cols: usize,
    pub pixels: Vec<u8>,
}

impl Images {
    pub fn image(&self, i: usize) -> &[u8] {
        let n = self.rows * self.cols;
        &self.pixels[i * n..(i + 1) * n]
    }
}

/// Decompress if the bytes start with the gzip magic; refuse outputs over [`MAX_IDX_BYTES`].
pub fn maybe_gunzip(bytes: &[u8]) -> Result<Vec<u8>> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .take(MAX_IDX_BYTES as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| Error::Idx(format!("gzip: {e}")))?;
        if out.len() > MAX_IDX_BYTES {
            return Err(Error::Idx(format!(
                "decompressed size exceeds {MAX_IDX_BYTES} bytes"
            )));
        }
        Ok(out)
    } else {
        Ok(bytes.to_vec())
    }
}

fn parse(bytes: &[u8], want_dims: u8) -> Result<(Vec<usize>, &[u8])> {
    if bytes.len() < 4 {
        return Err(Error::Idx("truncated header".into()));
    }
    if bytes[0] != 0 || bytes[1] != 0 {
        return Err(Error::Idx(format!(
            "wrong magic {:02x}{:02x}, expected 0000",
            bytes[0], bytes[1]
        )));
    }
    if bytes[2] != 0x08 {
        return Err(Error::Idx(format!(
            "data type 0x{:02x} unsupported (only 0x08, unsigned byte)",
            bytes[2]
        )));
    }
    if bytes[3] != want_dims {
        return Err(Error::Idx(format!(
            "{} dimensions, expected {want_dims}",
            bytes[3]
        )));
    }
    let header = 4 + 4 * want_dims as usize;
    if bytes.len() < header {
        return Err(Error::Idx("truncated dimension list".into()));
    }
    let dims: Vec<usize> = (0..want_dims as usize)
        .map(|i| {
            let o = 4 + 4 * i;
            u32::from_be_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]) as usize
        })
        .collect();
    let expected = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= MAX_IDX_BYTES)
        .ok_or_else(|| Error::Idx("dimensions too large".into()))?;
    let data = &bytes[header..];
    if data.len() != expected {
        return Err(Error::Idx(format!(
            "{} data bytes, header says {expected}",
            data.len()
        )));
    }
    Ok((dims, data))
}

/// Parse an image file (3 dimensions: count, rows, cols).
pub fn parse_images(bytes: &[u8]) -> Result<Images> {
    let raw = maybe_gunzip(bytes)?;
    let (dims, data) = parse(&raw, 3)?;
    Ok(Images {
        count: dims[0],
        rows: dims[1],
        cols: dims[2],
        pixels: data.to_vec(),
    })
}

/// Parse a label file (1 dimension).
pub fn parse_labels(bytes: &[u8]) -> Result<Vec<u8>> {
    let raw = maybe_gunzip(bytes)?;
    let (_, data) = parse(&raw, 1)?;
    Ok(data.to_vec())
}

/// Parse a matching image and label file; their counts must agree.
pub fn parse_pair(images: &[u8], labels: &[u8]) -> Result<(Images, Vec<u8>)> {
    let im = parse_images(images)?;
    let lb = parse_labels(labels)?;
    if im.count != lb.len() {
        return Err(Error::Idx(format!(
            "{} images but {} labels",
            im.count,
            lb.len()
        )));
    }
    Ok((im, lb))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn idx(dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut v = vec![0, 0, 8, dims.len() as u8];
        for d in dims {
            v.extend_from_slice(&d.to_be_bytes());
        }
        v.extend_from_slice(data);
        v
    }

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn parses_raw_and_gzip() {
        let im = idx(&[2, 2, 3], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        let lb = idx(&[2], &[4, 9]);
        for (a, b) in [(im.clone(), lb.clone()), (gz(&im), gz(&lb))] {
            let (images, labels) = parse_pair(&a, &b).unwrap();
            assert_eq!((images.count, images.rows, images.cols), (2, 2, 3));
            assert_eq!(images.image(1), &[7, 8, 9, 10, 11, 12]);
            assert_eq!(labels, vec![4, 9]);
        }
    }

    #[test]
    fn malformed_files_are_typed_errors() {
        let good = idx(&[1, 2, 2], &[0, 0, 0, 0]);
        let mut bad_magic = good.clone();
        bad_magic[0] = 1;
        let mut bad_type = good.clone();
        bad_type[2] = 0x0d;
        let truncated = &good[..good.len() - 1];
        let long = [good.clone(), vec![0]].concat();
        for b in [
            &bad_magic[..],
            &bad_type[..],
            truncated,
            &long[..],
            &good[..3],
            &[][..],
        ] {
            assert!(matches!(parse_images(b), Err(Error::Idx(_))), "{b:?}");
        }
        // Labels file passed as images: wrong dimension count.
        assert!(matches!(
            parse_images(&idx(&[2], &[1, 2])),
            Err(Error::Idx(_))
        ));
        // Count mismatch between images and labels.
        assert!(matches!(
            parse_pair(&good, &idx(&[2], &[1, 2])),
            Err(Error::Idx(_))
        ));
        // Corrupt gzip.
        let mut z = gz(&good);
        let l = z.len();
        z[l / 2] ^= 0xff;
        z.truncate(l - 4);
        assert!(parse_images(&z).is_err());
        // Dimensions whose product overflows.
        assert!(matches!(
            parse_images(&idx(&[u32::MAX, u32::MAX, u32::MAX], &[])),
            Err(Error::Idx(_))
        ));
    }
}
