//! One gallery image (pixels, label, the model's features, a thumbnail made on first use):
//! the type the catalogue holds and the partition publishes, below both.

pub mod mapped;

use embed::model::Model;

pub use mapped::{Features, Pixels};

use publish::png::{base64, png_grey};

/// Image side (Fashion-MNIST).
pub const SIDE: u32 = 28;

/// One gallery image; its thumbnail is encoded on first use and kept (encoding 70,000 PNGs
/// at start-up would cost a second of every restart).
pub struct GalleryItem {
    pub id: u64,
    pub label: u32,
    /// Held, or read in place from the catalogue's mapped file ([`mapped`]).
    pub pixels: Pixels,
    /// The on-device model's unit-norm features of the image (what the embedding uses).
    pub features: Features,
    /// Boxed: most items never make one, and at 1,000,000 items the cell's 40 bytes more
    /// would be 40 MB of every process (a row shard's build included).
    thumbnail: std::sync::OnceLock<Box<(Vec<u8>, String)>>,
}

impl GalleryItem {
    pub fn new(id: u64, label: u32, pixels: Vec<u8>, model: &Model) -> Result<Self, ItemError> {
        let features = model.infer(&pixels)?.features;
        Self::with_features(id, label, pixels, features)
    }

    /// An item whose features are already known (stored with the same weights version).
    pub fn with_features(
        id: u64,
        label: u32,
        pixels: Vec<u8>,
        features: Vec<f32>,
    ) -> Result<Self, ItemError> {
        Self::from_parts(id, label, pixels.into(), features.into())
    }

    /// An item of these pixels and features: held, or read in place from the catalogue's
    /// mapped file ([`mapped::map_read`]).
    pub fn from_parts(
        id: u64,
        label: u32,
        pixels: Pixels,
        features: Features,
    ) -> Result<Self, ItemError> {
        if pixels.len() != (SIDE * SIDE) as usize {
            return Err(ItemError::Pixels(format!(
                "item {id} has {} pixels, not {}",
                pixels.len(),
                SIDE * SIDE
            )));
        }
        Ok(GalleryItem {
            id,
            label,
            pixels,
            features,
            thumbnail: std::sync::OnceLock::new(),
        })
    }

    fn thumbnail(&self) -> &(Vec<u8>, String) {
        self.thumbnail.get_or_init(|| {
            // 28×28 grey pixels (checked at construction) always encode into memory.
            let png = png_grey(&self.pixels, SIDE, SIDE).unwrap_or_else(|e| {
                tracing::error!(id = self.id, error = %e, "thumbnail encoding failed");
                Vec::new()
            });
            let b64 = base64(&png);
            Box::new((png, b64))
        })
    }

    /// The thumbnail as PNG bytes.
    pub fn png(&self) -> &[u8] {
        &self.thumbnail().0
    }

    /// The thumbnail's PNG, base64 (what search responses carry inline).
    pub fn thumbnail_b64(&self) -> &str {
        &self.thumbnail().1
    }
}

/// Why an item cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ItemError {
    #[error("{0}")]
    Pixels(String),
    #[error("embedding failed: {0}")]
    Model(#[from] shared::Error),
}
