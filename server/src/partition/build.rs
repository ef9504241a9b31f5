//! Building a partition version from a gallery snapshot: its fingerprint, the levels (in
//! parallel), the files written to the block store before the version is announced.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use publish::partition::LevelSpec;
use publish::partition::{
    build_level, closure_neighbours, coverage_probes, max_closure, nearest_k_many,
};
use publish::publish::{
    default_specs, document, publish_level, publish_level_to, publish_whole, ranking_spec,
    GalleryView, PublishedLevel, Thumbnails, COVERAGE_K, WHOLE_MAX_ITEMS,
};
use rayon::prelude::*;
use sha2::{Digest, Sha256};

use super::blockstore::{BlockStore, BlockStoreError, Checksums, LevelFile};
use super::published::*;
use crate::item::{GalleryItem, SIDE};
use crate::ops::mapped::Pages;

/// Bumped whenever the partition code changes what it builds from the same gallery, so a
/// stored version built by older code is not served as current.
const PARTITION_FORMAT: &str = "privatemail-partition-6";

/// Items a fingerprint's chunk hashes (its digests, in order, are the fingerprint's input).
const FINGERPRINT_CHUNK: usize = 4_096;

/// The levels a gallery of `n` gets after the whole gallery: the default closure levels for
/// block retrieval, then the capped level the hintless ranking serves.
pub fn level_specs(n: usize) -> Vec<LevelSpec> {
    default_specs(n)
        .into_iter()
        .chain(ranking_spec(n))
        .collect()
}

/// What a partition is a function of: the gallery (ids, labels, features, thumbnails, in id
/// order), the anchors its coverage is measured on, the seed, the operator's settings and the
/// code's format. Equal fingerprints build byte-identical versions, so a restart whose
/// fingerprint matches the announced version serves it without rebuilding. `inputs`: the
/// mapped catalogue's pages, let go as the items are read.
pub fn fingerprint(
    items: &[Arc<GalleryItem>],
    anchor_features: &[Vec<f32>],
    seed: u64,
    settings: &PartitionSettings,
    inputs: &Pages,
) -> String {
    let mut h = Sha256::new();
    h.update(PARTITION_FORMAT.as_bytes());
    h.update(seed.to_le_bytes());
    h.update(settings.max_share.to_bits().to_le_bytes());
    h.update([u8::from(settings.allow_full_download)]);
    h.update(format!("{:?}", level_specs(items.len())).as_bytes());
    h.update((items.len() as u64).to_le_bytes());
    // Chunks hashed in parallel (1 GB of pixels and features at 1,000,000 items), then their
    // digests in order; the mapped catalogue's pages let go after each slice of chunks.
    let hashed = inputs.read_in_slices(items, FINGERPRINT_CHUNK * 16, |slice| {
        let chunks: Vec<[u8; 32]> = slice
            .par_chunks(FINGERPRINT_CHUNK)
            .map(|chunk| {
                // One update per item (the same bytes as a field at a time, 30 times faster).
                let mut c = Sha256::new();
                let mut buf = Vec::new();
                for it in chunk {
                    buf.clear();
                    buf.extend_from_slice(&it.id.to_le_bytes());
                    buf.extend_from_slice(&it.label.to_le_bytes());
                    buf.extend(it.features.iter().flat_map(|x| x.to_le_bytes()));
                    buf.extend_from_slice(&it.pixels);
                    c.update(&buf);
                }
                c.finalize().into()
            })
            .collect();
        for c in &chunks {
            h.update(c);
        }
        Ok::<_, std::convert::Infallible>(())
    });
    let Ok(()) = hashed;
    h.update((anchor_features.len() as u64).to_le_bytes());
    for a in anchor_features {
        for x in a {
            h.update(x.to_le_bytes());
        }
    }
    hex::encode(h.finalize())
}

/// A pessimistic size of a version's files (plain + gzip): every item in each level about
/// 2.5 times (closure overlap), gzip about 60 % of plain.
fn estimated_bytes(n: usize, levels: usize, dim: usize, side: usize) -> u64 {
    let item = (8 + 1 + 4 * dim + publish::thumbs::packed_len(side)) as f64;
    (n as f64 * levels as f64 * item * 2.5 * 1.6) as u64
}

/// Where a build writes its files, and the mapped pages it reads its items from.
#[derive(Clone, Copy)]
pub struct BuildIo<'a> {
    /// The store, and the staging prefix files are streamed under before the version is known.
    pub store: Option<&'a BlockStore>,
    pub staging: Option<&'a str>,
    /// The pages the items' pixels and features are mapped from (`item::mapped`). Let go once
    /// the features are copied and after every batch of streamed files: a build then holds in
    /// its resident set only the pixels of the blocks it is encoding, not the whole catalogue
    /// (1 GB at 1,000,000 items) on top of the version that is serving. Empty when the items
    /// hold their own bytes.
    pub inputs: &'a Pages,
}

/// Cut every neighbour list to its nearest `m` (lists are nearest first). Into new
/// allocations, the old freed and handed back: shrinking each in place would leave a million
/// small holes between live lists that the allocator can give back to the system none of.
fn cut_lists(lists: &mut Vec<Vec<u32>>, m: usize) {
    *lists = lists
        .par_iter()
        .map(|l| l[..m.min(l.len())].to_vec())
        .collect();
    data::progress::release_freed_memory();
}

/// Build the partition of `items` (a gallery snapshot): the whole gallery as level 0 (only if
/// allowed), then [`level_specs`]; coverage measured on the public anchors' features.
/// CPU-heavy (seconds at 10k items): call off the async runtime. Levels build in parallel.
pub fn build(
    items: &[Arc<GalleryItem>],
    anchor_features: &[Vec<f32>],
    seed: u64,
    catalogue_version: u64,
    settings: &PartitionSettings,
    io: BuildIo<'_>,
) -> Result<Published, PartitionError> {
    let BuildIo { store, staging, .. } = io;
    let t0 = Instant::now();
    let fingerprint = fingerprint(items, anchor_features, seed, settings, io.inputs);
    let n = items.len();
    let dim = items.first().map_or(0, |it| it.features.len());
    let side = SIDE as usize;
    if n == 0 || dim == 0 {
        return Err(PartitionError::Invalid("the gallery is empty".into()));
    }
    let ids: Vec<u64> = items.iter().map(|it| it.id).collect();
    let labels: Vec<u8> = items
        .iter()
        .map(|it| u8::try_from(it.label).ok().filter(|&l| l < 10))
        .collect::<Option<_>>()
        .ok_or_else(|| PartitionError::Invalid("a label is outside 0..10".into()))?;
    let mut features = Vec::with_capacity(n * dim);
    let mut thumbnails: Vec<&[u8]> = Vec::with_capacity(n);
    for it in items {
        if it.features.len() != dim || it.pixels.len() != side * side {
            return Err(PartitionError::Invalid(format!(
                "item {} has the wrong shape",
                it.id
            )));
        }
        features.extend_from_slice(&it.features);
        thumbnails.push(&it.pixels);
    }
    // The features are copied; the levels read the pixels block by block.
    io.inputs.release();
    let g = GalleryView {
        ids: &ids,
        labels: &labels,
        features: &features,
        dim,
        thumbnails: Thumbnails::Rows(&thumbnails),
        thumb_side: side,
    };
    let anchors: Vec<f32> = anchor_features
        .iter()
        .filter(|a| a.len() == dim)
        .flatten()
        .copied()
        .collect();
    let (probes, coverage_probes) = coverage_probes(&features, dim, &anchors);
    if coverage_probes == 0 {
        tracing::warn!(
            "partition: too few anchors outside the gallery; coverage measured on gallery members overstates the predicted fidelity"
        );
    }
    let truth = nearest_k_many(&features, dim, &probes, COVERAGE_K);
    let specs = level_specs(n);
    let whole = settings.allow_full_download && n <= WHOLE_MAX_ITEMS;
    if settings.allow_full_download && !whole {
        tracing::warn!(
            items = n,
            max = WHOLE_MAX_ITEMS,
            "partition: the gallery is too large to offer as one download; the whole-gallery level is not published"
        );
    }
    // Stream the files to the store as they are encoded when the version would not fit the
    // memory budget (a staging prefix, renamed to the version once its hash is known).
    let stream = match (store, staging) {
        (Some(st), Some(prefix))
            if estimated_bytes(n, specs.len() + usize::from(whole), dim, side)
                > settings.cache_bytes =>
        {
            Some((st, prefix))
        }
        _ => None,
    };
    if specs.is_empty() && !whole {
        return Err(PartitionError::Invalid(format!(
            "{n} items are too few for a partition and full download is off"
        )));
    }
    // Closure neighbours once, for the largest m any level needs, rows split across threads.
    let m = max_closure(specs.iter().map(|s| s.overlap)).min(n - 1);
    let mut neighbours: Option<Vec<Vec<u32>>> = if m > 0 {
        let t = Instant::now();
        let (nb, exact) = closure_neighbours(&features, dim, m, seed)?;
        tracing::info!(
            items = n,
            m,
            exact,
            secs = t.elapsed().as_secs_f64(),
            "partition: gallery neighbours"
        );
        Some(nb)
    } else {
        None
    };
    let offset = usize::from(whole);
    // Checksums of streamed files, `(level, file, [plain, gzip])`, as they are written.
    let streamed_sums: Mutex<Vec<(usize, LevelFile, [u32; 2])>> = Mutex::new(Vec::new());
    let write_streamed = |st: &BlockStore,
                          prefix: &str,
                          li: usize,
                          files: Vec<(LevelFile, Vec<u8>, Vec<u8>)>|
     -> Result<(), BlockStoreError> {
        let sums: Vec<_> = files
            .par_iter()
            .map(|(b, raw, gz)| (li, *b, [crc32fast::hash(raw), crc32fast::hash(gz)]))
            .collect();
        let files = files
            .into_iter()
            .map(|(b, raw, gz)| (b, Bytes::from(raw), Bytes::from(gz)))
            .collect();
        st.write_blocks(prefix, li, files)?;
        io.inputs.release();
        streamed_sums
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(sums);
        Ok(())
    };
    let build_one = |(li, spec): (usize, LevelSpec),
                     neighbours: Option<&[Vec<u32>]>|
     -> Result<PublishedLevel, PartitionError> {
        let t = Instant::now();
        let level = build_level(&features, dim, spec, seed, neighbours)?;
        let p = match stream {
            Some((st, prefix)) => {
                let mut sink = |files: Vec<(usize, Vec<u8>, Vec<u8>)>| {
                    let files = files
                        .into_iter()
                        .map(|(b, raw, gz)| (LevelFile::Block(b), raw, gz))
                        .collect();
                    write_streamed(st, prefix, li, files).map_err(|e| {
                        shared::Error::InvalidParameter {
                            name: "block store",
                            reason: e.to_string(),
                        }
                    })
                };
                let mut p = publish_level_to(&g, &level, &probes, &truth, Some(&mut sink))?;
                let (raw, gz) = (
                    std::mem::take(&mut p.centroids),
                    std::mem::take(&mut p.centroids_gzip),
                );
                write_streamed(st, prefix, li, vec![(LevelFile::Centroids, raw, gz)])?;
                p
            }
            None => publish_level(&g, &level, &probes, &truth)?,
        };
        drop(level);
        tracing::info!(
            blocks = p.doc.blocks,
            overlap = %spec.overlap.name(),
            coverage_own = p.doc.coverage.own,
            bytes = p.doc.bytes.iter().sum::<u64>(),
            transfer_bytes = p.doc.transfer_bytes.iter().sum::<u64>(),
            // The largest block sets the row count of any per-block PIR database.
            largest_items = p.doc.sizes.iter().max().copied().unwrap_or(0),
            mean_items = p.doc.sizes.iter().map(|&s| u64::from(s)).sum::<u64>()
                / p.doc.sizes.len().max(1) as u64,
            secs = t.elapsed().as_secs_f64(),
            "partition: level built"
        );
        Ok(p)
    };
    let (whole_level, levels) = rayon::join(
        || {
            whole.then(|| {
                let t = Instant::now();
                let mut p = publish_whole(&g)?;
                if let Some((st, prefix)) = stream {
                    let files = std::mem::take(&mut p.files)
                        .into_iter()
                        .zip(std::mem::take(&mut p.gzipped))
                        .enumerate()
                        .map(|(b, (raw, gz))| (LevelFile::Block(b), raw, gz))
                        .chain([(
                            LevelFile::Centroids,
                            std::mem::take(&mut p.centroids),
                            std::mem::take(&mut p.centroids_gzip),
                        )])
                        .collect();
                    write_streamed(st, prefix, 0, files)?;
                }
                tracing::info!(
                    bytes = p.doc.bytes[0],
                    transfer_bytes = p.doc.transfer_bytes[0],
                    secs = t.elapsed().as_secs_f64(),
                    "partition: whole-gallery level built"
                );
                Ok::<_, PartitionError>(p)
            })
        },
        || {
            // The levels that need the most neighbours first; then every list is cut to what
            // the others need (192 → 24 at 1,000,000 items: 0.67 GB less while they build).
            let need = |s: &LevelSpec| max_closure([s.overlap]).min(n - 1);
            let rest = specs.iter().map(need).filter(|&k| k < m).max().unwrap_or(0);
            let (first, later): (Vec<_>, Vec<_>) = specs
                .iter()
                .copied()
                .enumerate()
                .partition(|(_, s)| need(s) > rest);
            let run = |part: &[(usize, LevelSpec)], nb: Option<&[Vec<u32>]>| {
                part.par_iter()
                    .map(|&(i, s)| Ok((i, build_one((offset + i, s), nb)?)))
                    .collect::<Result<Vec<_>, PartitionError>>()
            };
            let mut built = run(&first, neighbours.as_deref())?;
            if !later.is_empty() {
                if let Some(nb) = neighbours.as_mut() {
                    cut_lists(nb, rest);
                }
                built.extend(run(&later, neighbours.as_deref())?);
            }
            built.sort_unstable_by_key(|&(i, _)| i);
            Ok::<_, PartitionError>(built.into_iter().map(|(_, p)| p).collect::<Vec<_>>())
        },
    );
    let levels: Vec<PublishedLevel> = whole_level
        .transpose()?
        .into_iter()
        .chain(levels?)
        .collect();
    // Streamed levels hold no files (they are in the store); held ones become `BlockFile`s,
    // the blocks then the centroids (`LevelFile::slot`).
    let mut files = Vec::with_capacity(levels.len());
    let mut docs = Vec::with_capacity(levels.len());
    for l in levels {
        files.push(
            l.files
                .into_iter()
                .zip(l.gzipped)
                .chain([(l.centroids, l.centroids_gzip)])
                .map(|(raw, gz)| BlockFile {
                    raw: Bytes::from(raw),
                    gzip: Bytes::from(gz),
                })
                .collect(),
        );
        docs.push(l.doc);
    }
    let doc = document(
        docs,
        &g,
        String::new(),
        settings.max_share,
        whole,
        coverage_probes,
    );
    if let Some((st, prefix)) = stream {
        let t = Instant::now();
        let files = st.rename_prefix(prefix, &doc.version)?;
        tracing::info!(version = %doc.version, files, secs = t.elapsed().as_secs_f64(), "partition: streamed files moved to the version");
    }
    let checksums = stream.is_some().then(|| {
        let mut crc32: Vec<Vec<[u32; 2]>> = doc
            .levels
            .iter()
            .map(|l| vec![[0; 2]; l.blocks as usize + 1])
            .collect();
        for (li, f, sum) in streamed_sums
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
        {
            if let Some(slot) = f.slot(doc.levels[li].blocks as usize) {
                crc32[li][slot] = sum;
            }
        }
        Checksums { crc32 }
    });
    let mut published = assemble(
        doc,
        stream.is_none().then_some(files),
        checksums,
        store,
        catalogue_version,
        fingerprint,
        t0.elapsed().as_secs_f64(),
    )?;
    if stream.is_some() {
        published.keep = false;
        published.written = true;
    }
    let (raw, gz) = published.total_bytes();
    tracing::info!(
        version = %published.doc.version,
        items = n,
        levels = published.doc.levels.len(),
        blocks = published.doc.levels.iter().map(|l| l.blocks as usize).sum::<usize>(),
        bytes = raw,
        transfer_bytes = gz,
        doc_bytes = published.doc_json.len(),
        secs = published.build_secs,
        streamed = stream.is_some(),
        "partition built"
    );
    Ok(published)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::mapped::map_items;

    #[test]
    fn cut_lists_keep_each_nearest_prefix() {
        let mut lists: Vec<Vec<u32>> = (0..50u32).map(|i| (i..i + 30).collect()).collect();
        lists.push(vec![7, 8]);
        cut_lists(&mut lists, 24);
        for (i, l) in lists[..50].iter().enumerate() {
            assert_eq!(*l, (i as u32..i as u32 + 24).collect::<Vec<_>>());
            assert_eq!(l.capacity(), 24);
        }
        assert_eq!(lists[50], vec![7, 8], "a shorter list stays whole");
    }

    /// Letting the mapped inputs go once the features are copied and after every streamed
    /// batch changes nothing that is built: the same version (a hash over every block file) and
    /// the same checksums of the files written.
    #[test]
    fn inputs_let_go_while_streaming_build_the_same_version() {
        let dir = std::env::temp_dir().join(format!("pm-build-io-{}", std::process::id()));
        let dim = 8;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        let mut unit = || {
            let v: Vec<f32> = (0..dim).map(|_| next()).collect();
            let norm = v.iter().map(|a| a * a).sum::<f32>().sqrt();
            v.into_iter().map(|a| a / norm).collect::<Vec<f32>>()
        };
        let mut items: Vec<GalleryItem> = (0..600u64)
            .map(|i| {
                let px = (0..SIDE as usize * SIDE as usize)
                    .map(|j| (i as usize * 7 + j) as u8)
                    .collect();
                GalleryItem::with_features(i, (i % 10) as u32, px, unit()).unwrap()
            })
            .collect();
        let anchors: Vec<Vec<f32>> = (0..150).map(|_| unit()).collect();
        let pages = Pages::default();
        map_items(&dir.join("items"), &mut items, &pages).unwrap();
        let items: Vec<Arc<GalleryItem>> = items.into_iter().map(Arc::new).collect();
        // Nothing fits the memory budget: every level is streamed to the store.
        let settings = PartitionSettings {
            cache_bytes: 0,
            ..Default::default()
        };
        let version = |name: &str, inputs: &Pages| {
            let store = BlockStore::local(&dir.join(name)).unwrap();
            let io = BuildIo {
                store: Some(&store),
                staging: Some("staging"),
                inputs,
            };
            let p = build(&items, &anchors, 7, 1, &settings, io).unwrap();
            assert!(p.written, "streamed");
            (p.doc.version.clone(), p.checksums.clone())
        };
        assert_eq!(
            version("held", &Pages::default()),
            version("let-go", &pages)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
