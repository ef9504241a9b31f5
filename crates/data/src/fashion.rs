//! Loading Fashion-MNIST from disk (the Debian package `dataset-fashion-mnist`). File I/O lives
//! here, at the edge; parsing is `embed::idx`.

use std::path::{Path, PathBuf};

use embed::idx::{parse_pair, Images};

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

/// Training images reserved as held-out photos: see [`reserved_train`].
pub const RESERVED: usize = 1_000;

/// Training images the demo gallery never holds, at any size: held-out photos for evaluation
/// (the block evaluation's queries and `pirbench`'s photos), so measured fidelity is always on
/// photos outside the gallery. The last [`RESERVED`] of a training split of `train_len` images
/// that are not public `anchors` (in Fashion-MNIST: 59,000..60,000, far from the anchors).
pub fn reserved_train(train_len: usize, anchors: &[usize]) -> Vec<usize> {
    (train_len.saturating_sub(RESERVED)..train_len)
        .filter(|i| !anchors.contains(i))
        .collect()
}

/// One image of the demo gallery.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoImage {
    pub id: u64,
    pub label: u8,
    pub pixels: Vec<u8>,
}

/// The demo gallery of `size` images, in id order: the test split (ids `0..10,000`), then the
/// training split (ids `10,000 + index`) without the public `anchors` and
/// [`reserved_train`], then — past those 68,000 or so — deterministic variants of them
/// ([`augment`], ids from [`DATASET_IMAGES`] up, variant `id` of member
/// `(id − 70,000) mod members`).
///
/// Why the anchors stay out: the server measures the coverage that every predicted fidelity
/// rests on with the anchors as probes, and a probe that is a gallery member (or has variants
/// in it) finds itself in its own block, which overstates what a new photo gets. Leaving them
/// and their variants out makes the probes held out at every size (`coverage_probes` in the
/// partition document is then the anchor count).
pub fn demo_gallery(test: &Split, train: &Split, anchors: &[usize], size: usize) -> Vec<DemoImage> {
    use rayon::prelude::*;
    let skip: std::collections::HashSet<usize> = anchors
        .iter()
        .copied()
        .chain(reserved_train(train.labels.len(), anchors))
        .collect();
    let tests = (0..test.labels.len()).map(|i| (i as u64, test.labels[i], test.images.image(i)));
    let trains = (0..train.labels.len())
        .filter(|i| !skip.contains(i))
        .map(|i| {
            (
                (test.labels.len() + i) as u64,
                train.labels[i],
                train.images.image(i),
            )
        });
    let mut out: Vec<DemoImage> = tests
        .chain(trains)
        .take(size)
        .map(|(id, label, px)| DemoImage {
            id,
            label,
            pixels: px.to_vec(),
        })
        .collect();
    let members = out.len();
    // Variants only once the whole dataset (as loaded) is in: a partial split makes no ids clash.
    if size > members && test.labels.len() + train.labels.len() == DATASET_IMAGES {
        let more: Vec<DemoImage> = (0..size - members)
            .into_par_iter()
            .map(|v| {
                let id = (DATASET_IMAGES + v) as u64;
                let base = &out[v % members];
                DemoImage {
                    id,
                    label: base.label,
                    pixels: augment(&base.pixels, id),
                }
            })
            .collect();
        out.extend(more);
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

    fn split(n: usize, seed: u8) -> Split {
        let mut bytes = vec![0u8, 0, 8, 3, 0, 0, 0, 0, 0, 0, 0, 28, 0, 0, 0, 28];
        bytes[4..8].copy_from_slice(&(n as u32).to_be_bytes());
        bytes.extend((0..n * 784).map(|i| (i as u8).wrapping_mul(seed)));
        let mut labels = vec![0u8, 0, 8, 1];
        labels.extend_from_slice(&(n as u32).to_be_bytes());
        labels.extend((0..n).map(|i| (i % 10) as u8));
        let (images, labels) = embed::idx::parse_pair(&bytes, &labels).unwrap();
        Split { images, labels }
    }

    #[test]
    fn demo_gallery_leaves_out_anchors_and_reserved_images_at_every_size() {
        let test = split(10_000, 3);
        let train = split(60_000, 7);
        let anchors = balanced_anchors(&train, 1000);
        let reserved = reserved_train(60_000, &anchors);
        assert_eq!(reserved, (59_000..60_000).collect::<Vec<_>>());
        let members = 10_000 + 60_000 - 1000 - RESERVED;
        let small = demo_gallery(&test, &train, &anchors, 10_000);
        assert_eq!(small.len(), 10_000);
        assert!(small.iter().enumerate().all(|(i, d)| d.id == i as u64));
        let big = demo_gallery(&test, &train, &anchors, members + 2_500);
        assert_eq!(big.len(), members + 2_500);
        let ids: std::collections::HashSet<u64> = big.iter().map(|d| d.id).collect();
        assert_eq!(ids.len(), big.len(), "ids are unique");
        for &a in &anchors {
            assert!(
                !ids.contains(&(10_000 + a as u64)),
                "anchor {a} is held out"
            );
        }
        for r in reserved {
            assert!(
                !ids.contains(&(10_000 + r as u64)),
                "reserved {r} is held out"
            );
        }
        // Variants are of members only: each equals `augment` of the member it names.
        for d in &big[members..] {
            let v = d.id as usize - DATASET_IMAGES;
            assert_eq!(d.pixels, augment(&big[v % members].pixels, d.id));
            assert_eq!(d.label, big[v % members].label);
        }
        // The same gallery every time.
        assert_eq!(
            demo_gallery(&test, &train, &anchors, members + 10)[members..],
            big[members..members + 10]
        );
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

    /// The transform code the largest galleries' PIR thumbnails use, on the real photos: a
    /// codebook fitted on the training split draws the held-out test images at least as well
    /// as measured when the code was chosen (`publish::thumbcode`).
    #[test]
    fn coded_thumbnails_of_fashion_mnist_keep_their_measured_quality() {
        use publish::{thumbcode::Codebook, thumbs};
        let dir = Path::new(DEFAULT_DIR);
        let (train, test) = (
            load_split(dir, "train").unwrap(),
            load_split(dir, "t10k").unwrap(),
        );
        let fit: Vec<&[u8]> = (0..train.images.count)
            .map(|i| train.images.image(i))
            .collect();
        let held: Vec<&[u8]> = (0..test.images.count)
            .map(|i| test.images.image(i))
            .collect();
        let psnr = |draw: &dyn Fn(&[u8]) -> Vec<u8>| {
            let se: f64 = held
                .iter()
                .flat_map(|&x| {
                    let y = draw(x);
                    x.iter()
                        .zip(y)
                        .map(|(&a, b)| (f64::from(a) - f64::from(b)).powi(2))
                        .collect::<Vec<_>>()
                })
                .sum();
            10.0 * (255f64.powi(2) * (held.len() * 784) as f64 / se).log10()
        };
        let three_bit = psnr(&|x| thumbs::unpack(&thumbs::pack(x, 28).unwrap(), 28).unwrap());
        let mut got = Vec::new();
        for len in [94, 128] {
            let book = Codebook::fit(&fit, 28, len).unwrap();
            let t = std::time::Instant::now();
            let coded: Vec<Vec<u8>> = held.iter().map(|x| book.encode(x).unwrap()).collect();
            let ms = t.elapsed().as_secs_f64() * 1e3;
            eprintln!("{len} B: {} pictures coded in {ms:.0} ms", coded.len());
            got.push(psnr(&|x| book.decode(&book.encode(x).unwrap()).unwrap()));
        }
        eprintln!(
            "3-bit {three_bit:.2} dB; coded 94 B {:.2} dB, 128 B {:.2} dB",
            got[0], got[1]
        );
        assert!((30.5..31.5).contains(&three_bit), "{three_bit}");
        assert!(got[0] >= 24.5, "94 bytes: {} dB", got[0]);
        assert!(got[1] >= got[0] + 1.0, "128 bytes: {} dB", got[1]);
    }
}
