//! What a hostile server can send, thrown at the client's decoders: property tests (bounded
//! case counts, so they run in `cargo test` and CI) for the block and centroids decoders and
//! the partition document's parsing and validation, and the planner's running time on the largest document
//! the limits allow. Nothing may panic; whatever is accepted must be consistent.

use std::time::Instant;

use proptest::prelude::*;
use publish::blocks::{decode, encode, file_len, hash_hex, BlockItem};
use publish::centroids;
use publish::partition::{Coverage, Overlap};
use publish::plan::{candidates, plan, validate_doc, whole_plan};
use shared::api::{LevelDoc, PartitionDoc};
use shared::params::limits;

const DIM: usize = 4;
const THUMB: usize = 2;
const N: usize = 12;

fn item_features(i: usize) -> Vec<f32> {
    (0..DIM)
        .map(|j| ((i * 5 + j * 3) % 7) as f32 / 7.0 - 0.4)
        .collect()
}

/// A block file holding `ids`.
fn block(ids: &[usize]) -> Vec<u8> {
    let feats: Vec<Vec<f32>> = ids.iter().map(|&i| item_features(i)).collect();
    let thumbs: Vec<Vec<u8>> = ids.iter().map(|&i| vec![i as u8; THUMB * THUMB]).collect();
    let items: Vec<BlockItem> = ids
        .iter()
        .zip(feats.iter().zip(&thumbs))
        .map(|(&i, (f, t))| BlockItem {
            id: i as u64,
            label: (i % 10) as u8,
            features: f,
            thumbnail: t,
        })
        .collect();
    encode(&items, DIM, THUMB).unwrap()
}

/// The centroids file of a level whose centroid `b` is the features of block `b`'s first item.
fn centroids_file(blocks: &[Vec<usize>]) -> Vec<u8> {
    let flat: Vec<f32> = blocks.iter().flat_map(|b| item_features(b[0])).collect();
    centroids::encode(&flat, DIM).unwrap()
}

fn level(blocks: Vec<Vec<usize>>, whole: bool, multiplicity: Vec<u64>) -> LevelDoc {
    let files: Vec<Vec<u8>> = blocks.iter().map(|b| block(b)).collect();
    let cents = centroids_file(&blocks);
    LevelDoc {
        blocks: blocks.len() as u32,
        overlap: if whole {
            Overlap::None
        } else {
            Overlap::Closure(2)
        },
        whole,
        centroids_bytes: cents.len() as u64,
        centroids_hash: hash_hex(&cents),
        sizes: blocks.iter().map(|b| b.len() as u32).collect(),
        bytes: files.iter().map(|f| f.len() as u64).collect(),
        transfer_bytes: files.iter().map(|f| f.len() as u64).collect(),
        hashes: files.iter().map(|f| hash_hex(f)).collect(),
        multiplicity,
        coverage: Coverage {
            own: 0.8,
            other: 0.1,
        },
    }
}

/// A small valid document: the whole gallery, 3 disjoint blocks, 4 blocks holding every item
/// twice.
fn doc() -> PartitionDoc {
    let disjoint = (0..3).map(|b| (b * 4..b * 4 + 4).collect()).collect();
    let twice = (0..4)
        .map(|b| (0..6).map(|j| (b * 3 + j) % N).collect())
        .collect();
    PartitionDoc {
        version: "test-1".into(),
        gallery_size: N,
        feature_dim: DIM,
        thumb_side: THUMB,
        blocks_url: "/api/v1/blocks/test-1".into(),
        max_share: 1.0,
        allow_full_download: true,
        coverage_k: 8,
        coverage_probes: 10,
        levels: vec![
            level(vec![(0..N).collect()], true, vec![0, N as u64]),
            level(disjoint, false, vec![0, N as u64]),
            level(twice, false, vec![0, 0, N as u64]),
        ],
    }
}

#[test]
fn the_fixture_is_valid_and_plans() {
    let d = doc();
    validate_doc(&d).unwrap();
    assert!(!candidates(&d, 4.0).unwrap().is_empty());
    whole_plan(&d).unwrap();
}

type Mutation = Box<dyn Fn(&mut PartitionDoc)>;

#[test]
fn inconsistent_declared_sizes_are_refused() {
    let base = doc();
    let cases: Vec<(&str, Mutation)> = vec![
        ("bytes of 1", Box::new(|d| d.levels[1].bytes[0] = 1)),
        (
            "wire bytes of 0",
            Box::new(|d| d.levels[1].transfer_bytes[0] = 0),
        ),
        (
            "wire bytes far above the bytes",
            Box::new(|d| d.levels[1].transfer_bytes[0] = 10 * d.levels[1].bytes[0] + 5_000),
        ),
        (
            "a huge item count",
            Box::new(|d| d.levels[1].sizes[0] = u32::MAX),
        ),
        (
            "huge bytes",
            Box::new(|d| {
                d.levels[1].bytes = vec![u64::MAX / 2; 3];
                d.levels[1].transfer_bytes = vec![u64::MAX / 2; 3];
            }),
        ),
        (
            "multiplicities that overflow",
            Box::new(|d| d.levels[2].multiplicity = vec![u64::MAX, u64::MAX, 1]),
        ),
        (
            "multiplicities of another gallery",
            Box::new(|d| d.levels[2].multiplicity = vec![0, 0, 13]),
        ),
        (
            "a block larger than the gallery",
            Box::new(|d| d.gallery_size = 3),
        ),
        (
            "a version with a slash",
            Box::new(|d| d.version = "../x".into()),
        ),
        (
            "blocks_url with user info",
            Box::new(|d| d.blocks_url = "http://user@evil.example/b".into()),
        ),
        (
            "a protocol-relative blocks_url",
            Box::new(|d| d.blocks_url = "//evil.example/b".into()),
        ),
        ("thumbnails of 300²", Box::new(|d| d.thumb_side = 300)),
        (
            "centroids one row short",
            Box::new(|d| d.levels[1].centroids_bytes -= DIM as u64 * 2),
        ),
        (
            "centroids with a trailing byte",
            Box::new(|d| d.levels[1].centroids_bytes += 1),
        ),
        (
            "huge centroids",
            Box::new(|d| d.levels[1].centroids_bytes = u64::MAX),
        ),
        (
            "a centroids hash that is not hex",
            Box::new(|d| d.levels[2].centroids_hash = "g".repeat(64)),
        ),
    ];
    for (what, mutate) in cases {
        let mut d = base.clone();
        mutate(&mut d);
        assert!(validate_doc(&d).is_err(), "{what} was accepted");
        assert!(candidates(&d, 4.0).is_err(), "{what}: planned");
    }
    let mut cdn = base.clone();
    cdn.blocks_url = "https://cdn.example:8443/blocks/test-1".into();
    validate_doc(&cdn).unwrap();
}

#[test]
fn oversized_lists_fail_while_they_are_read() {
    // 904 block hashes past the limit in one level: refused by the bounded decoder at the first
    // one past it, whatever the rest.
    let rows = vec![r#""""#; limits::MAX_BLOCKS + 904].join(",");
    let json = format!(r#"{{"version":"v","levels":[{{"hashes":[{rows}]}}]}}"#);
    let e = serde_json::from_str::<PartitionDoc>(&json).unwrap_err();
    let want = format!("more than {} block hashes", limits::MAX_BLOCKS);
    assert!(e.to_string().contains(&want), "{e}");
    let long = "a".repeat(100_000);
    let json = format!(r#"{{"version":"v","levels":[{{"centroids_hash":"{long}"}}]}}"#);
    let e = serde_json::from_str::<PartitionDoc>(&json).unwrap_err();
    assert!(e.to_string().contains("longer than"), "{e}");
    let long = "a".repeat(limits::MAX_VERSION_CHARS + 1);
    let json = format!(r#"{{"version":"{long}"}}"#);
    let e = serde_json::from_str::<PartitionDoc>(&json).unwrap_err();
    assert!(e.to_string().contains("longer than"), "{e}");
}

/// The largest document the limits allow: 16 levels of 4,096 blocks, every multiplicity set.
/// Planning was O(B³) a level (23 s for one such level); it must take well under a second.
#[test]
fn planning_the_largest_document_is_fast() {
    let b = limits::MAX_BLOCKS;
    let gallery = b + 1;
    let memberships: u64 = (0..=b as u64).sum();
    let per = memberships / b as u64;
    let extra = (memberships % b as u64) as usize;
    let sizes: Vec<u32> = (0..b)
        .map(|i| (per + u64::from(i < extra)) as u32)
        .collect();
    let bytes: Vec<u64> = sizes
        .iter()
        .map(|&n| file_len(n as u64, 1, 0).unwrap())
        .collect();
    let level = LevelDoc {
        blocks: b as u32,
        overlap: Overlap::Closure(24),
        whole: false,
        centroids_bytes: centroids::file_len(b as u64, 1).unwrap(),
        centroids_hash: "cd".repeat(32),
        sizes,
        transfer_bytes: bytes.clone(),
        bytes,
        hashes: vec!["ab".repeat(32); b],
        multiplicity: vec![1; b + 1],
        coverage: Coverage {
            own: 0.5,
            other: 0.01,
        },
    };
    let d = PartitionDoc {
        version: "big".into(),
        gallery_size: gallery,
        feature_dim: 1,
        thumb_side: 0,
        blocks_url: "/b".into(),
        max_share: 1.0,
        allow_full_download: false,
        coverage_k: 8,
        coverage_probes: 0,
        levels: vec![level; limits::MAX_LEVELS],
    };
    validate_doc(&d).unwrap();
    let t = Instant::now();
    let all = candidates(&d, 8.0).unwrap();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{} plans over 16 levels of 4,096 blocks in {secs:.3} s",
        all.len()
    );
    assert_eq!(all.len(), limits::MAX_LEVELS * b);
    assert!(secs < 2.0, "planning took {secs:.1} s");
    // All blocks hold every item but the one in no block.
    let want = b as f64 / gallery as f64;
    assert!((all[b - 1].expected_pool_fraction - want).abs() < 1e-9);
    plan(&d, 8.0, 1e9).unwrap();
}

/// A valid block, then one header field overwritten and the bytes cut anywhere.
fn mutated_block() -> impl Strategy<Value = Vec<u8>> {
    let valid = block(&[0, 3, 5, 7]);
    let len = valid.len();
    (0usize..16, any::<u32>(), 0..=len + 8).prop_map(move |(field, value, cut)| {
        let mut b = valid.clone();
        match field {
            0..=3 => b[field] = value as u8,
            4..=11 => b[4 + 2 * ((field - 4) % 4)..6 + 2 * ((field - 4) % 4)]
                .copy_from_slice(&(value as u16).to_le_bytes()),
            _ => b[12..16].copy_from_slice(&value.to_le_bytes()),
        }
        b.resize(cut, 0);
        b
    })
}

/// The fixture's level-2 centroids file, then one header field overwritten and the bytes cut
/// or extended anywhere.
fn mutated_centroids() -> impl Strategy<Value = Vec<u8>> {
    let d = doc();
    let twice: Vec<Vec<usize>> = (0..4)
        .map(|b| (0..6).map(|j| (b * 3 + j) % N).collect())
        .collect();
    let valid = centroids_file(&twice);
    assert_eq!(hash_hex(&valid), d.levels[2].centroids_hash);
    let len = valid.len();
    (0usize..8, any::<u32>(), 0..=len + 8, any::<u8>()).prop_map(
        move |(field, value, cut, fill)| {
            let mut b = valid.clone();
            match field {
                0..=3 => b[field] = value as u8,
                4..=6 => b[4 + 2 * (field - 4)..6 + 2 * (field - 4)]
                    .copy_from_slice(&(value as u16).to_le_bytes()),
                7 => b[8..12].copy_from_slice(&value.to_le_bytes()),
                _ => {}
            }
            b.resize(cut, fill);
            b
        },
    )
}

#[test]
fn damaged_centroids_files_are_refused_with_a_typed_error() {
    use centroids::CentroidsError;
    let d = doc();
    let twice: Vec<Vec<usize>> = (0..4)
        .map(|b| (0..6).map(|j| (b * 3 + j) % N).collect())
        .collect();
    let good = centroids_file(&twice);
    let c = centroids::verify(&d, 2, &good).unwrap();
    assert_eq!(c.len(), 4);
    // Level 1's file (3 rows) served for level 2: wrong size.
    let other = centroids_file(
        &(0..3)
            .map(|b| (b * 4..b * 4 + 4).collect())
            .collect::<Vec<_>>(),
    );
    assert!(matches!(
        centroids::verify(&d, 2, &other),
        Err(CentroidsError::Size { .. })
    ));
    // Same size, one value changed: wrong hash.
    let mut flipped = good.clone();
    *flipped.last_mut().unwrap() ^= 1;
    assert!(matches!(
        centroids::verify(&d, 2, &flipped),
        Err(CentroidsError::HashMismatch { .. })
    ));
    // A document that lists a damaged file's own hash: the header is still refused.
    let mut bad_header = good.clone();
    bad_header[4] = 9;
    let mut lying = d.clone();
    lying.levels[2].centroids_hash = hash_hex(&bad_header);
    assert!(matches!(
        centroids::verify(&lying, 2, &bad_header),
        Err(CentroidsError::Malformed(_))
    ));
    // A well-formed file of another dimension, listed by a lying document: wrong shape.
    let wide = centroids::encode(&[0.0; 4 * (DIM + 1)], DIM + 1).unwrap();
    let mut lying = d.clone();
    lying.levels[2].centroids_hash = hash_hex(&wide);
    lying.levels[2].centroids_bytes = wide.len() as u64;
    assert!(centroids::verify(&lying, 2, &wide).is_err());
    assert!(centroids::verify(&d, 7, &good).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// `blocks::decode` never panics and never accepts bytes its header does not describe.
    #[test]
    fn block_decode_is_total(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(b) = decode(&bytes, None) {
            prop_assert_eq!(
                Some(bytes.len() as u64),
                file_len(b.len() as u64, b.dim as u64, b.thumb_side as u64)
            );
        }
    }

    /// `centroids::decode` never panics, accepts only bytes its header describes exactly, and
    /// what it accepts is canonical (encodes back to the same bytes).
    #[test]
    fn centroids_decode_is_total(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok((dim, values)) = centroids::decode(&bytes) {
            prop_assert_eq!(
                Some(bytes.len() as u64),
                centroids::file_len((values.len() / dim) as u64, dim as u64)
            );
            prop_assert_eq!(centroids::encode(&values, dim).unwrap(), bytes);
        }
    }

    #[test]
    fn mutated_centroids_decode_or_fail_cleanly(bytes in mutated_centroids()) {
        let d = doc();
        match centroids::decode(&bytes) {
            Ok((dim, values)) => {
                prop_assert!(values.iter().all(|v| v.is_finite() && v.abs() <= 1.0));
                prop_assert_eq!(centroids::encode(&values, dim).unwrap(), bytes.clone());
            }
            Err(_) => prop_assert!(centroids::verify(&d, 2, &bytes).is_err()),
        }
        // Verified only if it is the listed file itself.
        if centroids::verify(&d, 2, &bytes).is_ok() {
            prop_assert_eq!(hash_hex(&bytes), d.levels[2].centroids_hash.clone());
        }
    }

    /// Random rows round-trip within half a quantisation step, and bit-exactly once quantised.
    #[test]
    fn centroids_round_trip(rows in 1usize..20, dim in 1usize..20, seed in any::<u64>()) {
        let values: Vec<f32> = (0..rows * dim)
            .map(|i| ((seed.wrapping_mul(i as u64 + 1) >> 40) as f32 / (1u64 << 23) as f32) - 1.0)
            .collect();
        let once = centroids::quantised(&values, dim).unwrap();
        for (a, b) in values.iter().zip(&once) {
            prop_assert!((a - b).abs() <= 0.5 / 32767.0 + 1e-7);
        }
        prop_assert_eq!(centroids::quantised(&once, dim).unwrap(), once);
    }

    #[test]
    fn mutated_blocks_decode_or_fail_cleanly(bytes in mutated_block()) {
        if let Ok(b) = decode(&bytes, None) {
            prop_assert_eq!(b.features.len(), b.len() * b.dim);
            prop_assert_eq!(b.thumbnails.len(), b.len() * b.thumb_side * b.thumb_side);
        }
    }

    /// Any number in any field: validation refuses or the planner works, never a panic, and
    /// an accepted document's sizes agree with the block format.
    #[test]
    fn partition_validation_is_total(
        level in 0usize..3,
        field in 0usize..10,
        index in 0usize..5,
        value in prop_oneof![any::<u64>(), 0u64..64, Just(u64::MAX), Just(0)],
    ) {
        let mut d = doc();
        let l = &mut d.levels[level];
        let i = index % l.sizes.len();
        match field {
            0 if index == 4 => l.centroids_bytes = value,
            0 => l.sizes[i] = value as u32,
            1 => l.bytes[i] = value,
            2 => l.transfer_bytes[i] = value,
            3 => {
                let c = index % l.multiplicity.len();
                l.multiplicity[c] = value;
            }
            4 => l.blocks = value as u32,
            5 => d.feature_dim = value as usize,
            6 => d.thumb_side = value as usize,
            7 => d.gallery_size = value as usize,
            8 => l.multiplicity.push(value),
            _ => d.max_share = f64::from_bits(value),
        }
        if validate_doc(&d).is_ok() {
            for l in &d.levels {
                for (&n, &bytes) in l.sizes.iter().zip(&l.bytes) {
                    prop_assert_eq!(
                        file_len(n as u64, d.feature_dim as u64, d.thumb_side as u64),
                        Some(bytes)
                    );
                }
                prop_assert_eq!(
                    centroids::file_len(l.blocks as u64, d.feature_dim as u64),
                    Some(l.centroids_bytes)
                );
            }
            let _ = candidates(&d, 2.0).unwrap();
            let _ = plan(&d, 2.0, 1e6);
        } else {
            prop_assert!(candidates(&d, 2.0).is_err());
        }
    }

    /// Any prefix of a valid document, or bytes flipped in it, parses or fails cleanly.
    #[test]
    fn partition_parsing_is_total(cut in 0usize..4_000, flip in 0usize..4_000, byte in any::<u8>()) {
        let mut json = serde_json::to_vec(&doc()).unwrap();
        let f = flip % json.len();
        json[f] = byte;
        json.truncate(cut.min(json.len()));
        if let Ok(d) = serde_json::from_slice::<PartitionDoc>(&json) {
            let _ = validate_doc(&d);
        }
    }
}
