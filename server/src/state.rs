//! The server's read-only state: gallery items, public anchors and the embedding snapshot.

use std::collections::HashMap;
use std::path::Path;

use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use shared::api::{AnchorsResponse, ApiLimits, ConfigResponse};
use shared::privatemail::embed_dense;
use shared::{DMatrix, Params};

use crate::data::{load_split, DataError, Split, CLASS_NAMES};
use crate::thumbnail::{base64, png_grey};

/// One gallery image.
pub struct GalleryItem {
    pub id: u64,
    pub label: u32,
    pub png: Vec<u8>,
    pub thumbnail_b64: String,
}

/// The non-private embedding the server answers from.
pub struct Snapshot {
    /// Gallery rows of the embedding, row-major.
    pub gallery_rows: Vec<Vec<f64>>,
    /// Anchor rows of the embedding (the alignment target).
    pub anchor_rows: DMatrix<f64>,
}

pub struct AppState {
    pub config: ConfigResponse,
    pub anchors: AnchorsResponse,
    pub items: Vec<GalleryItem>,
    pub by_id: HashMap<u64, usize>,
    pub snapshot: Snapshot,
}

/// What the demo gallery is built from.
pub struct DemoOptions<'a> {
    pub data_dir: &'a Path,
    pub gallery_size: usize,
    pub anchor_count: usize,
    pub seed: u64,
    pub limits: ApiLimits,
}

/// Anchor ids live above the test split's ids so the two never collide.
pub const ANCHOR_ID_BASE: u64 = 1_000_000;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error("embedding failed: {0}")]
    Embed(#[from] shared::Error),
    #[error("thumbnail encoding failed: {0}")]
    Png(#[from] png::EncodingError),
    #[error("{0}")]
    Invalid(String),
}

fn pixels(split: &Split, i: usize) -> impl Iterator<Item = f64> + '_ {
    split.images.image(i).iter().map(|&p| p as f64 / 255.0)
}

/// The Fashion-MNIST demo: the first `gallery_size` test images as the gallery, the first
/// `anchor_count / 10` training images of each class as public anchors, pixels as features.
pub fn build_demo(opts: &DemoOptions) -> Result<AppState, StateError> {
    let test = load_split(opts.data_dir, "t10k")?;
    let train = load_split(opts.data_dir, "train")?;
    let g = opts.gallery_size.min(test.labels.len());
    let per_class = opts.anchor_count.div_ceil(10);
    let mut taken = [0usize; 10];
    let anchor_idx: Vec<usize> = (0..train.labels.len())
        .filter(|&i| {
            let c = train.labels[i] as usize;
            taken[c] += 1;
            taken[c] <= per_class
        })
        .take(opts.anchor_count)
        .collect();
    if g < 2 || anchor_idx.len() < 10 {
        return Err(StateError::Invalid(
            "need at least 2 gallery images and 10 anchors".into(),
        ));
    }
    let d = test.images.rows * test.images.cols;
    let params = Params::default();
    let n = g + anchor_idx.len();
    let mut feats = DMatrix::<f64>::zeros(n, d);
    let mut labels = Vec::with_capacity(n);
    for i in 0..g {
        for (j, v) in pixels(&test, i).enumerate() {
            feats[(i, j)] = v;
        }
        labels.push(test.labels[i] as u32);
    }
    for (r, &i) in anchor_idx.iter().enumerate() {
        for (j, v) in pixels(&train, i).enumerate() {
            feats[(g + r, j)] = v;
        }
        labels.push(train.labels[i] as u32);
    }
    let mut rng = ChaCha20Rng::seed_from_u64(opts.seed);
    let emb = embed_dense(&feats, &labels, &params.smlq, &mut rng)?;
    let gallery_rows = (0..g)
        .map(|i| emb.row(i).iter().copied().collect())
        .collect();
    let anchor_rows = emb.rows(g, anchor_idx.len()).into_owned();

    let (w, h) = (test.images.cols as u32, test.images.rows as u32);
    let mut items = Vec::with_capacity(g);
    for i in 0..g {
        let png = png_grey(test.images.image(i), w, h)?;
        items.push(GalleryItem {
            id: i as u64,
            label: test.labels[i] as u32,
            thumbnail_b64: base64(&png),
            png,
        });
    }
    let by_id = items.iter().enumerate().map(|(i, it)| (it.id, i)).collect();
    let anchors = AnchorsResponse {
        ids: anchor_idx
            .iter()
            .map(|&i| ANCHOR_ID_BASE + i as u64)
            .collect(),
        labels: anchor_idx.iter().map(|&i| train.labels[i] as u32).collect(),
        features: anchor_idx
            .iter()
            .map(|&i| pixels(&train, i).map(|v| v as f32).collect())
            .collect(),
    };
    let config = ConfigResponse {
        smlq: params.smlq,
        privacy_defaults: params.privacy,
        class_names: CLASS_NAMES.iter().map(|s| s.to_string()).collect(),
        feature_dim: d,
        anchor_count: anchor_idx.len(),
        model_version: "pixels-v1".into(),
        limits: opts.limits,
    };
    Ok(AppState {
        config,
        anchors,
        items,
        by_id,
        snapshot: Snapshot {
            gallery_rows,
            anchor_rows,
        },
    })
}
