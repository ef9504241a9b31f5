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
