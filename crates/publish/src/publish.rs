//! Publishing a partition: the block files and the [`PartitionDoc`] that lists them. Pure: a
//! function of the gallery snapshot, the level specs, the seed and the public anchors (the
//! coverage probes) — never of a query. The server serves what this returns; the evaluation
//! measures it.
//!
//! Each level is independent, so callers may build levels on several threads
//! ([`publish_level`]); [`version`] then hashes the levels in order.

use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use sha2::{Digest, Sha256};

use crate::blocks::{encode, hash_hex, BlockItem};
use crate::centroids;
use crate::partition::{coverage, Coverage, Level, LevelSpec, Overlap};
use shared::api::{LevelDoc, PartitionDoc};
use shared::error::{Error, Result};

/// The k of the published coverage (and of the evaluation's fidelity@k).
pub const COVERAGE_K: usize = 8;

/// The gallery as the partition sees it: columns over the same `n` items.
#[derive(Debug, Clone, Copy)]
pub struct GalleryView<'a> {
    pub ids: &'a [u64],
    pub labels: &'a [u8],
    /// `n × dim`, unit-norm.
    pub features: &'a [f32],
    pub dim: usize,
    /// `n × thumb_side²` grey bytes.
    pub thumbnails: Thumbnails<'a>,
    pub thumb_side: usize,
}

/// The gallery's thumbnails: one packed buffer, or one slice per item (so a server holding
/// its items' pixels need not copy them all — 784 MB at 1,000,000 items).
#[derive(Debug, Clone, Copy)]
pub enum Thumbnails<'a> {
    /// `n × thumb_side²` bytes.
    Packed(&'a [u8]),
    /// One `thumb_side²` slice per item.
    Rows(&'a [&'a [u8]]),
}

impl<'a> Thumbnails<'a> {
    fn fits(&self, n: usize, t2: usize) -> bool {
        match self {
            Thumbnails::Packed(b) => b.len() == n * t2,
            Thumbnails::Rows(r) => r.len() == n && r.iter().all(|x| x.len() == t2),
        }
    }
    fn row(&self, i: usize, t2: usize) -> &'a [u8] {
        match *self {
            Thumbnails::Packed(b) => &b[i * t2..(i + 1) * t2],
            Thumbnails::Rows(r) => r[i],
        }
    }
}

impl GalleryView<'_> {
    pub fn len(&self) -> usize {
        self.ids.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
    fn check(&self) -> Result<()> {
        let n = self.ids.len();
        let t2 = self.thumb_side * self.thumb_side;
        if self.labels.len() != n
            || self.features.len() != n * self.dim
            || !self.thumbnails.fits(n, t2)
        {
            return Err(Error::DimensionMismatch {
                what: "gallery columns",
                expected: n,
                got: self.labels.len(),
            });
        }
        Ok(())
    }
    fn item(&self, i: usize) -> BlockItem<'_> {
        let t2 = self.thumb_side * self.thumb_side;
        BlockItem {
            id: self.ids[i],
            label: self.labels[i],
            features: &self.features[i * self.dim..(i + 1) * self.dim],
            thumbnail: self.thumbnails.row(i, t2),
        }
    }
}

/// One level, published: its document entry and its files.
#[derive(Debug, Clone)]
pub struct PublishedLevel {
    pub doc: LevelDoc,
    /// Uncompressed block files, one per block.
    pub files: Vec<Vec<u8>>,
    /// The same, gzip-compressed (what is sent to clients that accept gzip).
    pub gzipped: Vec<Vec<u8>>,
    /// The level's centroids file (`publish::centroids`), plain and gzip; kept even when the
    /// blocks go to a sink (one small file a level).
    pub centroids: Vec<u8>,
    pub centroids_gzip: Vec<u8>,
}

/// The default levels: closure under each member's 24 nearest items at B = 8 … 256, capped so
/// a block keeps ≥ 20 members on average. (B = 192 was added for large galleries: at 1,000,000
/// items its block is the largest that fits 4 MiB, where ε = 8 reaches fidelity 0.9 —
/// `eval --blocks-served`.) Chosen by the evaluation (`eval --blocks`,
/// `docs/eval/blocks.md`): closure needs the least pool in 14 of its 15 (ε, target) cells
/// (spill-1 is narrowly best at ε = 2, fidelity 0.85) and on the geometric mean, and
/// closure-24 is the one variant that reaches every fidelity target on the 10,000-image
/// gallery, with these levels too. (Its run with the upright weights recommends B = 8, 16, 32,
/// 48, 64, 128, 256 — 48 where these have 96; the levels were left as they are.)
///
/// Larger galleries add finer levels, B = 512 … 8,192, each once the gallery holds 64 items
/// per block: block sizes grow with n at a fixed B (at 70,000 items the finest B = 256 block is
/// 530 KB gzip, more than the page's default budget of 512 KiB), and a finer level keeps the
/// cheapest search small. (10,000 items get none of them, so the evaluated levels are
/// unchanged.)
///
/// Levels whose blocks would average more than [`MAX_BLOCK_ITEMS`] members are left out: one
/// such block costs more than the page's largest budget on its own. At 70,000 items the levels
/// are B = 8 … 1,024; at 1,000,000, B = 64 … 8,192.
pub fn default_specs(gallery_size: usize) -> Vec<LevelSpec> {
    const FINE: [u32; 5] = [512, 1024, 2048, 4096, 8192];
    [8u32, 16, 32, 64, 96, 128, 192, 256]
        .into_iter()
        .filter(|&b| gallery_size >= 20 * b as usize)
        .filter(|&b| gallery_size <= MAX_BLOCK_ITEMS * b as usize)
        .chain(
            FINE.into_iter()
                .filter(|&b| gallery_size >= 64 * b as usize),
        )
        .map(|blocks| LevelSpec {
            blocks,
            overlap: Overlap::Closure(DEFAULT_CLOSURE),
        })
        .collect()
}

/// The level the hintless ranking serves (`pir::scores`: a per-block database has as
/// many rows as its largest block), or `None` below 256 items: blocks of at most
/// `max(3n/250, min(c, n/4))` items, `c` = 2,048 from 65,536 items and 1,024 below — above
/// 1,024 rounded up to a multiple of 2,048, the packing width, since a partly filled packed
/// ciphertext costs as much as a full one — ([`Overlap::Capped`], drawing on
/// [`RANKING_CLOSURE`] neighbours), from `2n/rows` clusters split until each holds at most half
/// a block. With the committed weights (cnn-v2-c8361eac547fbb43), at 1,000,000 items: 12,288
/// rows in 323 blocks, own-block coverage 0.983 on the held-out anchors and 0.974 on held-out
/// photos (0.963 filled without the Voronoi-region bound of f546ab5); at 70,000: 2,048 rows
/// in 128 blocks, 0.984 and 0.978. With cnn-v1, 8,000 rows and 96 neighbours had given 0.957
/// at 1,000,000 and 1,024 rows 0.967 at 70,000 (`partbench`, `docs/eval/pir.md`).
pub fn ranking_spec(gallery_size: usize) -> Option<LevelSpec> {
    // From 65,536 items at least one full packed ciphertext (2,048 rows): at 70,000 items
    // 2,048 rows reached coverage 0.989 on held-out photos where 1,024 reached 0.967–0.969
    // (cnn-v1), and the fewer blocks shorten the query as much as the rows lengthen the answer.
    let floor = if gallery_size >= 1 << 16 { 2048 } else { 1024 };
    let rows = (3 * gallery_size / 250).max((gallery_size / 4).min(floor));
    let rows = if rows > 1024 {
        rows.next_multiple_of(2048)
    } else {
        rows
    };
    (rows >= 64).then(|| LevelSpec {
        blocks: (2 * gallery_size / rows) as u32,
        overlap: Overlap::Capped {
            m: RANKING_CLOSURE,
            rows: rows as u32,
        },
    })
}

/// Neighbours each member of a [`ranking_spec`] level offers its block: the cap decides how
/// many are taken, so more candidates only help (at 1,000,000 items and 8,000 rows, 48 give
/// coverage 0.956 and 96 give 0.960; at 12,288 rows 96 give 0.977 and 192 give 0.982).
pub const RANKING_CLOSURE: u32 = 192;

/// Mean members per block above which a default level is not built: such a block (about
/// 16,000 items of 263 bytes on the wire, about 4.2 MB, and its closure adds about a tenth at
/// these coarse levels) is then a large part of the page's largest budget, 16 MiB, on its own.
pub const MAX_BLOCK_ITEMS: usize = 16_000;

/// Neighbours each member brings into its block in the default levels.
pub const DEFAULT_CLOSURE: u32 = 24;

/// Gzip at level 6: the compressed form a server sends to clients that accept it.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    gzip_at(bytes, 6)
}

/// Galleries above this many items compress their blocks at gzip level 1: blocks are mostly
/// f32 features and grey thumbnails, where level 1 is about 2 % larger than level 6
/// (measured on a 5 MB block: 73 % vs 71.5 % of plain) and much faster, and a 1,000,000-item
/// partition holds ~16 GB of plain files.
pub const FAST_GZIP_ABOVE: usize = 100_000;

/// Gzip at `level` (0–9).
pub fn gzip_at(bytes: &[u8], level: u32) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::with_capacity(bytes.len() / 2), Compression::new(level));
    enc.write_all(bytes).expect("writing to a Vec cannot fail");
    enc.finish().expect("writing to a Vec cannot fail")
}

/// Block files (plain, gzip) and the multiplicity histogram of one level. A level published
/// through a sink ([`publish_level_to`]) keeps only the sizes and hashes.
struct Files {
    plain: Vec<Vec<u8>>,
    gzipped: Vec<Vec<u8>>,
    bytes: Vec<u64>,
    transfer_bytes: Vec<u64>,
    hashes: Vec<String>,
    multiplicity: Vec<u64>,
}

/// Encoded block files `(block index, plain, gzip)`, as handed to a sink.
pub type BlockFiles = Vec<(usize, Vec<u8>, Vec<u8>)>;
/// Where [`publish_level_to`] hands each batch of encoded files.
pub type BlockSink<'a> = &'a mut dyn FnMut(BlockFiles) -> Result<()>;

/// Blocks encoded per call of a sink (bounds a streamed level's memory to this many files).
pub const SINK_BATCH: usize = 8;

/// Encode every block; each batch of up to [`SINK_BATCH`] `(block, plain, gzip)` files goes to
/// `sink` if there is one (and is then dropped), else is kept in the result.
fn publish_blocks(
    g: &GalleryView<'_>,
    members: &[Vec<u32>],
    mut sink: Option<BlockSink<'_>>,
) -> Result<Files> {
    let b = members.len();
    let mut out = Files {
        plain: Vec::new(),
        gzipped: Vec::new(),
        bytes: Vec::with_capacity(b),
        transfer_bytes: Vec::with_capacity(b),
        hashes: Vec::with_capacity(b),
        multiplicity: vec![0u64; b + 1],
    };
    let mut count = vec![0u32; g.len()];
    let mut batch = Vec::new();
    let level = if g.len() > FAST_GZIP_ABOVE { 1 } else { 6 };
    for (bi, block) in members.iter().enumerate() {
        let items: Vec<BlockItem> = block.iter().map(|&i| g.item(i as usize)).collect();
        let f = encode(&items, g.dim, g.thumb_side)?;
        let gz = gzip_at(&f, level);
        out.bytes.push(f.len() as u64);
        out.transfer_bytes.push(gz.len() as u64);
        out.hashes.push(hash_hex(&f));
        for &i in block {
            count[i as usize] += 1;
        }
        match sink.as_mut() {
            Some(s) => {
                batch.push((bi, f, gz));
                if batch.len() == SINK_BATCH {
                    s(std::mem::take(&mut batch))?;
                }
            }
            None => {
                out.plain.push(f);
                out.gzipped.push(gz);
            }
        }
    }
    if let Some(s) = sink.as_mut() {
        if !batch.is_empty() {
            s(batch)?;
        }
    }
    for c in count {
        out.multiplicity[c as usize] += 1;
    }
    while out.multiplicity.len() > 2 && out.multiplicity.last() == Some(&0) {
        out.multiplicity.pop();
    }
    Ok(out)
}

fn level_doc(
    spec: LevelSpec,
    whole: bool,
    centroids: &[u8],
    members: &[Vec<u32>],
    files: &Files,
    coverage: Coverage,
) -> LevelDoc {
    LevelDoc {
        blocks: members.len() as u32,
        overlap: spec.overlap,
        whole,
        centroids_bytes: centroids.len() as u64,
        centroids_hash: hash_hex(centroids),
        sizes: members.iter().map(|m| m.len() as u32).collect(),
        bytes: files.bytes.clone(),
        transfer_bytes: files.transfer_bytes.clone(),
        hashes: files.hashes.clone(),
        multiplicity: files.multiplicity.clone(),
        coverage,
    }
}

/// Publish one built level; coverage is measured on `probes` (`p × dim`, the public anchors)
/// whose true top-[`COVERAGE_K`] gallery items are `truth`.
pub fn publish_level(
    g: &GalleryView<'_>,
    level: &Level,
    probes: &[f32],
    truth: &[Vec<u32>],
) -> Result<PublishedLevel> {
    publish_level_to(g, level, probes, truth, None)
}

/// [`publish_level`], handing the block files to `sink` in batches instead of keeping them
/// (the result's `files` and `gzipped` are then empty): a level of a large gallery is written
/// out as it is encoded, in O([`SINK_BATCH`]) block files of memory.
pub fn publish_level_to(
    g: &GalleryView<'_>,
    level: &Level,
    probes: &[f32],
    truth: &[Vec<u32>],
    sink: Option<BlockSink<'_>>,
) -> Result<PublishedLevel> {
    g.check()?;
    let files = publish_blocks(g, &level.members, sink)?;
    let cov = coverage(level, g.dim, probes, truth);
    let centroids = centroids::encode(&level.centroids, g.dim)?;
    let doc = level_doc(level.spec, false, &centroids, &level.members, &files, cov);
    Ok(PublishedLevel {
        doc,
        files: files.plain,
        gzipped: files.gzipped,
        centroids_gzip: gzip(&centroids),
        centroids,
    })
}

/// The whole gallery as one block (B = 1): downloading it needs no release.
pub fn publish_whole(g: &GalleryView<'_>) -> Result<PublishedLevel> {
    g.check()?;
    let members = vec![(0..g.len() as u32).collect::<Vec<u32>>()];
    let files = publish_blocks(g, &members, None)?;
    let mean: Vec<f32> = (0..g.dim)
        .map(|j| g.features.iter().skip(j).step_by(g.dim).sum::<f32>() / g.len().max(1) as f32)
        .collect();
    let spec = LevelSpec {
        blocks: 1,
        overlap: Overlap::None,
    };
    let cov = Coverage {
        own: 1.0,
        other: 0.0,
    };
    let centroids = centroids::encode(&mean, g.dim)?;
    let doc = level_doc(spec, true, &centroids, &members, &files, cov);
    Ok(PublishedLevel {
        doc,
        files: files.plain,
        gzipped: files.gzipped,
        centroids_gzip: gzip(&centroids),
        centroids,
    })
}

/// The partition's version: SHA-256 over every level's parameters, centroids hash and block
/// hashes, in order (first 16 hex digits): every file under the version is bound by it. Equal galleries and settings give equal versions.
pub fn version(levels: &[LevelDoc], gallery_size: usize) -> String {
    let mut h = Sha256::new();
    h.update((gallery_size as u64).to_le_bytes());
    for l in levels {
        h.update(l.blocks.to_le_bytes());
        h.update(l.overlap.name().as_bytes());
        h.update([u8::from(l.whole)]);
        h.update(l.centroids_hash.as_bytes());
        for x in &l.hashes {
            h.update(x.as_bytes());
        }
    }
    hex::encode(h.finalize())[..16].to_string()
}

/// Assemble the document (the server fills in where blocks are fetched and its limits).
pub fn document(
    levels: Vec<LevelDoc>,
    g: &GalleryView<'_>,
    blocks_url: String,
    max_share: f64,
    allow_full_download: bool,
    coverage_probes: usize,
) -> PartitionDoc {
    PartitionDoc {
        version: version(&levels, g.len()),
        gallery_size: g.len(),
        feature_dim: g.dim,
        thumb_side: g.thumb_side,
        blocks_url,
        max_share,
        allow_full_download,
        coverage_k: COVERAGE_K,
        coverage_probes,
        levels,
    }
}

/// Above this many items the whole gallery is not published as one block (at 100,000 items
/// it is already about 100 MB; at 1,000,000 a 1 GB file nobody should download per search).
pub const WHOLE_MAX_ITEMS: usize = 100_000;

/// The largest expected share of the gallery one search may download, by default (the
/// server's `--max-share`).
pub const DEFAULT_MAX_SHARE: f64 = 0.25;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::decode;
    use crate::fixture::*;
    use crate::partition::{build_level, gallery_neighbours};
    use crate::plan::{plan, validate_doc};

    #[test]
    fn a_level_published_to_a_sink_equals_the_held_one() {
        with_gallery(|g, probes, truth| {
            let nb = gallery_neighbours(g.features, DIM, 8, 0..N, None).unwrap();
            let spec = LevelSpec {
                blocks: 100,
                overlap: Overlap::Closure(8),
            };
            let level = build_level(g.features, DIM, spec, 2, Some(&nb)).unwrap();
            let held = publish_level(g, &level, probes, truth).unwrap();
            let mut got: Vec<(usize, Vec<u8>, Vec<u8>)> = Vec::new();
            let mut batches = 0;
            let mut sink = |b: Vec<(usize, Vec<u8>, Vec<u8>)>| {
                assert!(b.len() <= SINK_BATCH);
                batches += 1;
                got.extend(b);
                Ok(())
            };
            let streamed = publish_level_to(g, &level, probes, truth, Some(&mut sink)).unwrap();
            assert_eq!(batches, 13, "100 blocks in batches of {SINK_BATCH}");
            assert_eq!(streamed.doc, held.doc);
            assert!(streamed.files.is_empty() && streamed.gzipped.is_empty());
            assert_eq!(got.len(), 100);
            for (i, (b, raw, gz)) in got.into_iter().enumerate() {
                assert_eq!(b, i);
                assert_eq!((raw, gz), (held.files[i].clone(), held.gzipped[i].clone()));
            }
            // A failing sink fails the level.
            let mut bad = |_: Vec<(usize, Vec<u8>, Vec<u8>)>| {
                Err(Error::InvalidParameter {
                    name: "sink",
                    reason: "full".into(),
                })
            };
            assert!(publish_level_to(g, &level, probes, truth, Some(&mut bad)).is_err());
        });
    }

    #[test]
    fn default_levels_by_gallery_size() {
        let bs = |n| {
            default_specs(n)
                .iter()
                .map(|s| s.blocks)
                .collect::<Vec<_>>()
        };
        assert_eq!(bs(10_000), vec![8, 16, 32, 64, 96, 128, 192, 256]);
        assert_eq!(
            bs(70_000),
            vec![8, 16, 32, 64, 96, 128, 192, 256, 512, 1024]
        );
        assert_eq!(
            bs(1_000_000),
            vec![64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192]
        );
        // No default level averages more than MAX_BLOCK_ITEMS members.
        for n in [10_000, 70_000, 200_000, 1_000_000] {
            assert!(bs(n).iter().all(|&b| n <= MAX_BLOCK_ITEMS * b as usize));
        }
    }

    #[test]
    fn published_partition_is_valid_deterministic_and_verifiable() {
        let (doc, files, cents, _) = small_partition();
        assert_eq!(doc, small_partition().0);
        validate_doc(&doc).unwrap();
        // Every level's centroids file verifies against the document, and no other level's.
        for (li, l) in doc.levels.iter().enumerate() {
            let c = centroids::verify(&doc, li, &cents[li]).unwrap();
            assert_eq!(c.len(), l.blocks as usize);
            c.check_for(&doc, l).unwrap();
            let other = (li + 1) % doc.levels.len();
            assert!(centroids::verify(&doc, other, &cents[li]).is_err());
            assert!(c.check_for(&doc, &doc.levels[other]).is_err());
        }
        // Probes that are gallery items find their own neighbours in their own block.
        assert!(
            doc.levels[1].coverage.own > 0.9,
            "{:?}",
            doc.levels[1].coverage
        );
        for l in &doc.levels {
            let total: u64 = l.multiplicity.iter().sum();
            assert_eq!(total, N as u64);
        }
        plan(&doc, 4.0, 1e6).unwrap();
        let b = decode(&files[0][0], Some(&doc.levels[0].hashes[0])).unwrap();
        assert_eq!(b.ids, gallery().0);
    }
}
