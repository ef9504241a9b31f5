//! The anchors' model outputs, kept beside the store so that a start does not run both models
//! over the anchors again (two thirds of a 1,000-anchor start).
//!
//! What is kept: each anchor's features under the gallery model, and its features and layer
//! means under the familiarity model — pure functions of the weights and the anchor images. The
//! file is used only when its key matches: the SHA-256 of a format tag, both models' weight
//! versions and every anchor image's bytes in order, so other weights, other anchors or a
//! different count never read it. A SHA-256 of the payload catches a damaged file; anything
//! that does not match is ignored (the outputs are computed again and the file rewritten).
//! Everything derived from the outputs (the frame, the familiarity reference) is computed on
//! every start from them, so a change to that code never meets a stale file.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

const MAGIC: &[u8; 8] = b"PMANCH1\n";
/// The largest count and widths a file may declare (the anchors are at most a few thousand).
const MAX_ROWS: usize = 1 << 20;
const MAX_WIDTH: usize = 1 << 16;

/// The anchors' model outputs, one row an anchor.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AnchorOutputs {
    pub features: Vec<Vec<f32>>,
    pub familiarity_features: Vec<Vec<f32>>,
    pub layer_means: Vec<Vec<f32>>,
}

/// The file beside the store at `store_path`.
pub(crate) fn path_for(store_path: &Path) -> PathBuf {
    store_path.with_extension("anchors")
}

/// The key of the outputs of these weights over these images, in order.
pub(crate) fn key(weights: &str, familiarity_weights: &str, images: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [
        MAGIC.as_slice(),
        weights.as_bytes(),
        familiarity_weights.as_bytes(),
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.update((images.len() as u64).to_le_bytes());
    for img in images {
        h.update((img.len() as u64).to_le_bytes());
        h.update(img);
    }
    h.finalize().into()
}

/// The kept outputs if the file exists, is whole and has this key; `None` otherwise.
pub(crate) fn read(path: &Path, key: &[u8; 32]) -> Option<AnchorOutputs> {
    let bytes = std::fs::read(path).ok()?;
    let rest = bytes.strip_prefix(MAGIC.as_slice())?;
    let (file_key, rest) = rest.split_at_checked(32)?;
    let (digest, payload) = rest.split_at_checked(32)?;
    if file_key != key || digest != Sha256::digest(payload).as_slice() {
        return None;
    }
    let word = |i: usize| -> Option<usize> {
        let b = payload.get(4 * i..4 * i + 4)?;
        Some(u32::from_le_bytes(b.try_into().ok()?) as usize)
    };
    let (n, fd, qd, ld) = (word(0)?, word(1)?, word(2)?, word(3)?);
    if n > MAX_ROWS || fd > MAX_WIDTH || qd > MAX_WIDTH || ld > MAX_WIDTH {
        return None;
    }
    let floats = &payload[16..];
    if floats.len() != 4 * n * (fd + qd + ld) {
        return None;
    }
    let mut values = floats
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    let mut rows = |width: usize| -> Vec<Vec<f32>> {
        (0..n)
            .map(|_| values.by_ref().take(width).collect())
            .collect()
    };
    let features = rows(fd);
    let familiarity_features = rows(qd);
    let layer_means = rows(ld);
    Some(AnchorOutputs {
        features,
        familiarity_features,
        layer_means,
    })
}

/// Keep `outputs` under `key` (written aside and renamed, so a reader sees a whole file or
/// none). Rows of one kind must share one width.
pub(crate) fn write(path: &Path, key: &[u8; 32], outputs: &AnchorOutputs) -> std::io::Result<()> {
    let n = outputs.features.len();
    let width = |rows: &[Vec<f32>]| -> std::io::Result<u32> {
        let w = rows.first().map_or(0, Vec::len);
        if rows.len() != n || rows.iter().any(|r| r.len() != w) {
            return Err(std::io::Error::other("anchor outputs of uneven shape"));
        }
        Ok(w as u32)
    };
    let dims = [
        n as u32,
        width(&outputs.features)?,
        width(&outputs.familiarity_features)?,
        width(&outputs.layer_means)?,
    ];
    let mut payload = Vec::new();
    for d in dims {
        payload.extend_from_slice(&d.to_le_bytes());
    }
    for rows in [
        &outputs.features,
        &outputs.familiarity_features,
        &outputs.layer_means,
    ] {
        for v in rows.iter().flatten() {
            payload.extend_from_slice(&v.to_le_bytes());
        }
    }
    let aside = path.with_extension("anchors.tmp");
    let mut f = std::fs::File::create(&aside)?;
    f.write_all(MAGIC)?;
    f.write_all(key)?;
    f.write_all(&Sha256::digest(&payload))?;
    f.write_all(&payload)?;
    f.sync_all()?;
    std::fs::rename(&aside, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outputs() -> AnchorOutputs {
        AnchorOutputs {
            features: vec![vec![1.0, -2.5], vec![0.25, f32::MIN_POSITIVE]],
            familiarity_features: vec![vec![3.0, 4.0], vec![5.0, 6.0]],
            layer_means: vec![vec![7.0, 8.0, 9.0], vec![0.0, -0.0, 1e-30]],
        }
    }

    #[test]
    fn outputs_come_back_only_under_their_key_and_whole() {
        let dir = std::env::temp_dir().join(format!("pm-anchor-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = path_for(&dir.join("gallery.redb"));
        let imgs: [&[u8]; 2] = [&[1, 2, 3], &[4, 5, 6]];
        let k = key("w1", "q1", &imgs);
        write(&path, &k, &outputs()).unwrap();
        assert_eq!(read(&path, &k), Some(outputs()));
        // Other weights, other images, other order: another key, nothing read.
        for other in [
            key("w2", "q1", &imgs),
            key("w1", "q2", &imgs),
            key("w1", "q1", &[&[1, 2, 3], &[4, 5, 7]]),
            key("w1", "q1", &[imgs[1], imgs[0]]),
            key("w1", "q1", &imgs[..1]),
        ] {
            assert_ne!(other, k);
            assert_eq!(read(&path, &other), None);
        }
        // Any byte changed, or the file cut or grown: nothing read.
        let good = std::fs::read(&path).unwrap();
        for i in [0, 9, 45, 80, good.len() - 1] {
            let mut bad = good.clone();
            bad[i] ^= 1;
            std::fs::write(&path, &bad).unwrap();
            assert_eq!(read(&path, &k), None, "byte {i} flipped");
        }
        for bad in [
            &good[..good.len() - 4],
            &[good.as_slice(), &[0; 4]].concat(),
        ] {
            std::fs::write(&path, bad).unwrap();
            assert_eq!(read(&path, &k), None);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn uneven_rows_are_not_written() {
        let mut o = outputs();
        o.layer_means[1].pop();
        let path = std::env::temp_dir().join(format!("pm-anchor-uneven-{}", std::process::id()));
        assert!(write(&path, &[0; 32], &o).is_err());
    }
}
