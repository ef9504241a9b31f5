//! Loading Fashion-MNIST from disk (the Debian package `dataset-fashion-mnist`). File I/O lives
//! here, at the edge; parsing is `shared::idx`.

use std::path::{Path, PathBuf};

use shared::idx::{parse_pair, Images};

/// Where Debian's `dataset-fashion-mnist` installs the files.
pub const DEFAULT_DIR: &str = "/usr/share/datasets/fashion-mnist";

/// The ten Fashion-MNIST class names, by label.
pub const CLASS_NAMES: [&str; 10] = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
];

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("cannot read {path}: {source} (install the Debian package dataset-fashion-mnist, or point --data-dir / FASHION_MNIST_DIR at the IDX files)")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        source: shared::Error,
    },
}

/// One split: images and labels.
pub struct Split {
    pub images: Images,
    pub labels: Vec<u8>,
}

impl Split {
    /// Pixels of image `i` scaled to [0, 1].
    pub fn pixels_f64(&self, i: usize) -> Vec<f64> {
        self.images
            .image(i)
            .iter()
            .map(|&p| p as f64 / 255.0)
            .collect()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, DataError> {
    std::fs::read(path).map_err(|source| DataError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Load `train` or `t10k` from `dir` (gzip or raw IDX).
pub fn load_split(dir: &Path, prefix: &str) -> Result<Split, DataError> {
    let find = |kind: &str| {
        let gz = dir.join(format!(
            "{prefix}-{kind}-idx{}-ubyte.gz",
            if kind == "images" { 3 } else { 1 }
        ));
        if gz.exists() {
            gz
        } else {
            gz.with_extension("")
        }
    };
    let (ip, lp) = (find("images"), find("labels"));
    let (images, labels) =
        parse_pair(&read(&ip)?, &read(&lp)?).map_err(|source| DataError::Parse {
            path: ip.clone(),
            source,
        })?;
    Ok(Split { images, labels })
}

/// Images in Fashion-MNIST (test split, then training split): gallery ids below this are the
/// dataset's own images, ids at or above it are [`augment`]ed copies.
pub const DATASET_IMAGES: usize = 70_000;

/// The demo gallery's image `id` beyond the dataset: a deterministic variant of dataset image
/// `id mod 70,000` (test split first, then training split), so galleries up to 1,000,000 items
/// hold real product photos through the real model. Variant `v = id / 70,000 ≥ 1` of a base
/// image, from a ChaCha8 stream seeded with `id`:
/// - a horizontal flip with probability ½;
/// - a shift by `(dx, dy)`, each uniform in −2…2 pixels, the uncovered border black (the
///   dataset's background);
/// - per-pixel noise: every non-background pixel moves by a uniform integer in −12…12,
///   clamped to 0…255 (background stays 0, so objects stay on a dark field).
///
/// The label is the base image's. Pure: the same id always gives the same pixels.
pub fn augment(base: &[u8], id: u64) -> Vec<u8> {
    use rand::{Rng, SeedableRng};
    const SIDE: i32 = 28;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(id ^ 0x6175_676d_656e_7421);
    let flip = rng.random::<bool>();
    let dx = rng.random_range(-2i32..=2);
    let dy = rng.random_range(-2i32..=2);
    let mut out = vec![0u8; base.len()];
    for y in 0..SIDE {
        for x in 0..SIDE {
            let (sx, sy) = (x - dx, y - dy);
            if !(0..SIDE).contains(&sx) || !(0..SIDE).contains(&sy) {
                continue;
            }
            let sx = if flip { SIDE - 1 - sx } else { sx };
            let p = base[(sy * SIDE + sx) as usize];
            let noise = rng.random_range(-12i32..=12);
            out[(y * SIDE + x) as usize] = if p == 0 {
                0
            } else {
                (p as i32 + noise).clamp(0, 255) as u8
            };
        }
    }
    out
}

/// The public anchors: the first `count` training images with at most ⌈count/10⌉ per class, in
/// index order (the evaluation uses the same ones).
pub fn balanced_anchors(train: &Split, count: usize) -> Vec<usize> {
    let per_class = count.div_ceil(10);
    let mut taken = [0usize; 10];
    (0..train.labels.len())
        .filter(|&i| {
            let c = train.labels[i] as usize;
            taken[c] += 1;
            taken[c] <= per_class
        })
        .take(count)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Vec<u8> {
        (0..784)
            .map(|i| if i % 28 > 8 && i % 28 < 20 { 200 } else { 0 })
            .collect()
    }

    #[test]
    fn augmentation_is_deterministic_varied_and_keeps_the_background() {
        let b = base();
        assert_eq!(augment(&b, 70_001), augment(&b, 70_001));
        let variants: std::collections::HashSet<Vec<u8>> =
            (1..=20).map(|v| augment(&b, 70_000 * v + 5)).collect();
        assert!(variants.len() >= 18, "{} distinct of 20", variants.len());
        for v in &variants {
            // Pixels change by at most the noise where the object stays; the object keeps
            // roughly its area (a shift of ≤ 2 columns of a 11-wide band).
            let lit = v.iter().filter(|&&p| p > 0).count();
            let base_lit = b.iter().filter(|&&p| p > 0).count();
            assert!(
                lit * 10 >= base_lit * 8 && lit <= base_lit,
                "{lit} vs {base_lit}"
            );
            assert!(v.iter().all(|&p| p == 0 || (188..=212).contains(&p)));
        }
    }
}
