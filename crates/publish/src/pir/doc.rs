//! The published PIR document (`GET /api/v1/pir`), its validation by a client that does not
//! trust the server, and the geometry rules the server builds with.
//!
//! Everything here is public: the same document for every client, and the plan chosen from it
//! reads neither the photo nor anything derived from it.

use serde::{Deserialize, Serialize};

use ::pir::layout::Shape;
use ::pir::lwe;
use shared::error::{Error, Result};
use shared::params::limits;

/// The scheme's name and constants, so a client refuses parameters it was not built for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchemeDoc {
    pub name: String,
    pub lwe_n: usize,
    pub log_q: u32,
    pub sigma: f64,
    pub plaintext_bits: u32,
    pub security_bits: u32,
}

/// The only scheme this code speaks.
pub const SCHEME: &str = "simplepir-lwe-v1";

impl SchemeDoc {
    pub fn ours() -> SchemeDoc {
        SchemeDoc {
            name: SCHEME.into(),
            lwe_n: lwe::LWE_N,
            log_q: lwe::LOG_Q,
            sigma: ::lattice::lwe::SIGMA,
            plaintext_bits: lwe::PLAINTEXT_BITS,
            security_bits: lwe::SECURITY_BITS,
        }
    }
}

/// One PIR database: its shape, the seed of its public matrix, its hint file and (for ranking
/// databases) each record's hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PirDbDoc {
    pub shape: Shape,
    /// 32 bytes, hex: the seed of `A` (see [`lwe::matrix_a`]).
    pub a_seed: String,
    /// SHA-256 (hex) of the hint file; the file is `{answer_url}/{db}/hint`.
    pub hint_sha256: String,
    /// SHA-256 (hex) of each record without padding (ranking databases; empty for thumbnails,
    /// whose digests are inside the ranking records).
    pub record_hashes: Vec<String>,
    /// log2 of the probability that one query decodes wrongly.
    pub failure_log2: f64,
}

impl PirDbDoc {
    /// The decoded seed.
    pub fn seed(&self) -> Result<[u8; 32]> {
        seed_hex("pir a_seed", &self.a_seed)
    }
}

/// A public file fetched once per version (the whole ranking table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileDoc {
    /// Uncompressed bytes.
    pub bytes: u64,
    /// Bytes on the wire (gzip).
    pub transfer_bytes: u64,
    /// SHA-256 (hex) of the uncompressed bytes.
    pub sha256: String,
}

/// The hintless ranking of a capped level (`pir::hintless`): encrypted exact scores of every
/// item of the photo's block, with no hint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoresDoc {
    /// The partition level whose blocks are scored.
    pub level: usize,
    /// The ring degree (only [`::lattice::N`] is spoken).
    pub ring_n: usize,
    pub blocks: usize,
    pub dim: usize,
    /// Rows of the database: at least the level's largest block.
    pub rows: usize,
    /// 32 bytes, hex: the seed of the query's public masks.
    pub query_seed: String,
    /// 32 bytes, hex: the seed of the packing keys' public masks.
    pub packing_seed: String,
    /// `GET {answer_url}/scores/hint`: the answers' public parts, each block's gallery indices,
    /// each item's id and label, and each thumbnail unit's digest
    /// (`pir::hintless::ScoresPublic`).
    pub public: FileDoc,
    /// Units of the thumbnail database (`pir::Shape::units`): the public file's digests.
    pub thumb_units: usize,
    /// Bytes of a query (`POST {answer_url}/scores`) and of its answer.
    pub upload_bytes: u64,
    pub answer_bytes: u64,
    /// log2 of the probability that one query decodes wrongly.
    pub failure_log2: f64,
}

/// A 32-byte seed from its hex form.
pub fn seed_hex(what: &'static str, hex_seed: &str) -> Result<[u8; 32]> {
    let v = hex::decode(hex_seed).ok().filter(|v| v.len() == 32);
    v.map(|v| v.try_into().expect("32 bytes"))
        .ok_or_else(|| Error::InvalidParameter {
            name: what,
            reason: "must be 32 bytes of hex".into(),
        })
}

/// `GET /api/v1/pir`: the PIR databases of a partition version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PirDoc {
    /// The partition version these databases were built from.
    pub version: String,
    pub scheme: SchemeDoc,
    /// `POST {answer_url}/thumbs` and `POST {answer_url}/{level}` answer queries;
    /// `GET {answer_url}/{db}/hint` and `GET {answer_url}/rank` are immutable files.
    pub answer_url: String,
    /// Thumbnail records, one per gallery item, in gallery order.
    pub thumbs: PirDbDoc,
    /// The whole ranking table (one ranking record of every item) as a public file, where it
    /// is small enough to fetch once: exact ranking with no query at all.
    pub rank_table: Option<FileDoc>,
    /// Per partition level: a database whose records are its blocks' ranking records (`None`
    /// where the level's shape is too costly to offer).
    pub levels: Vec<Option<PirDbDoc>>,
    /// The hintless ranking, where the partition has a capped level.
    #[serde(default)]
    pub scores: Option<ScoresDoc>,
    /// Whether each thumbnail record also carries its item's `i16` features (`2·dim` bytes,
    /// little-endian, after the packed thumbnail; covered by the digest): then a client checks
    /// the hintless ranking's decrypted scores of the items it returns against them (the
    /// operator's choice: `--pir-verified-scores`, thumbnail records 1.4× as large).
    #[serde(default)]
    pub thumb_features: bool,
    /// The codebook the thumbnail records are coded with (`publish::thumbcode`), where the
    /// 3-bit form would not fit the thumbnails' bytes ([`thumbs_plan`]): `GET
    /// {answer_url}/thumbs/code`, once a version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thumbs_code: Option<FileDoc>,
}

fn check_db(db: &PirDbDoc, what: &'static str, with_hashes: bool) -> Result<()> {
    db.shape.validate().map_err(crate::pir::from_lattice)?;
    db.seed()?;
    let hex64 = crate::plan::is_hash;
    if !hex64(&db.hint_sha256) {
        return Err(Error::InvalidParameter {
            name: what,
            reason: "hint hash is not SHA-256 hex".into(),
        });
    }
    if with_hashes
        && (db.record_hashes.len() != db.shape.records
            || !db.record_hashes.iter().all(|h| hex64(h)))
    {
        return Err(Error::InvalidParameter {
            name: what,
            reason: "one SHA-256 per record is required".into(),
        });
    }
    if db.shape.hint_bytes() > limits::MAX_PIR_HINT_BYTES {
        return Err(Error::TooLarge {
            what: "PIR hint bytes",
            count: db.shape.hint_bytes(),
            limit: limits::MAX_PIR_HINT_BYTES,
        });
    }
    Ok(())
}

/// Checks a document from an untrusted server before anything is allocated from it. Its
/// `answer_url` must be a path on the server that sent it (queries go nowhere else), of
/// URL-safe characters.
pub fn validate(doc: &PirDoc, gallery_size: usize, levels: usize) -> Result<()> {
    let u = &doc.answer_url;
    if !u.starts_with('/')
        || u.starts_with("//")
        || u.len() > limits::MAX_URL_CHARS
        || u.contains("..")
        || !u
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"-_./".contains(&c))
    {
        return Err(Error::InvalidParameter {
            name: "pir answer_url",
            reason: "must be a path on this server".into(),
        });
    }
    if doc.scheme != SchemeDoc::ours() {
        return Err(Error::InvalidParameter {
            name: "pir scheme",
            reason: format!("unsupported: {}", doc.scheme.name),
        });
    }
    check_db(&doc.thumbs, "pir thumbnails", false)?;
    if doc.thumbs.shape.records != gallery_size {
        return Err(Error::DimensionMismatch {
            what: "PIR thumbnail records",
            expected: gallery_size,
            got: doc.thumbs.shape.records,
        });
    }
    if doc.levels.len() != levels {
        return Err(Error::DimensionMismatch {
            what: "PIR levels",
            expected: levels,
            got: doc.levels.len(),
        });
    }
    for db in doc.levels.iter().flatten() {
        check_db(db, "pir level", true)?;
    }
    if let Some(t) = &doc.rank_table {
        check_file(t, "PIR ranking table bytes")?;
    }
    Ok(())
}

/// A public file's declared sizes, bounded before it is fetched.
pub fn check_file(t: &FileDoc, what: &'static str) -> Result<()> {
    let hex64 = crate::plan::is_hash(&t.sha256);
    if t.bytes > limits::MAX_PIR_TABLE_BYTES as u64
        || t.transfer_bytes > t.bytes.saturating_mul(2).saturating_add(1024)
    {
        return Err(Error::TooLarge {
            what,
            count: t.bytes as usize,
            limit: limits::MAX_PIR_TABLE_BYTES,
        });
    }
    if !hex64 {
        return Err(Error::InvalidParameter {
            name: what,
            reason: "the hash is not SHA-256 hex".into(),
        });
    }
    Ok(())
}

/// Most thumbnail queries the server answers in one request (and the largest `k` of a PIR
/// search): the fewest items a publisher puts in a ranking block, so every `k` a client may
/// ask is ranked over full blocks (`client::pir_search::check_blocks`).
pub const MAX_THUMB_QUERIES: usize = crate::partition::MIN_BLOCK_ITEMS;

/// Thumbnail records stacked per column, `g` (a power of two): a search's thumbnail bytes are
/// `k` queries of `cols = items/g` entries up and `k` answers of `rows = record·g` entries down
/// ([`Shape::query_bytes`], [`Shape::answer_bytes`]), least near `g = √(c·items/record)`
/// (`c` = a query entry's bits over an answer entry's: 24–26 bits against 9–12 at our
/// sizes, as [`::pir::lwe::wire_bits`] allows), while the hint ([`Shape::hint_bytes`])
/// grows with `g`. So: the least `g` whose bytes a search are within 5 % or 16 KiB of the
/// least any `g` with a hint of at most 32 MiB gives. At 1,000 items `g = 1` (26 KiB a search
/// for 8 thumbnails; stacking would save 10 KiB for four times the hint); at 10,000, `g = 8`
/// (54 KiB, a 7.9 MiB hint at LWE `N` = 1,408); at 70,000, `g = 16` (157 KiB, 15.8 MiB); at
/// 1,000,000 the hint's cap decides (`g = 32`: 903 KiB a search, a 31.6 MiB hint).
pub fn thumbs_shape(items: usize, thumb_bytes: usize) -> Result<Shape> {
    let shape = |g: usize| Shape::new(thumb_bytes, items, thumb_bytes * g);
    let per_search = thumbs_search_bytes;
    let slack = 16 << 10;
    let mut candidates = vec![shape(1).map_err(crate::pir::from_lattice)?];
    for g in (1..usize::BITS).map(|b| 1usize << b) {
        match shape(g) {
            Ok(s) if g <= items && s.hint_bytes() <= 32 << 20 => candidates.push(s),
            _ => break,
        }
    }
    let least = candidates
        .iter()
        .map(per_search)
        .min()
        .expect("g = 1 is a candidate");
    Ok(candidates
        .into_iter()
        .find(|s| 20 * per_search(s) <= 21 * least || per_search(s) <= least + slack)
        .expect("the least is within 5 % of itself"))
}

/// The thumbnails' share of #31's bytes at the largest galleries: 1 MiB a search less the
/// hintless ranking's 344 KiB at 1,000,000 items (its query, key body and answer), rounded
/// down.
pub const THUMBS_SEARCH_BYTES: usize = 672 << 10;
/// The thumbnails' hint's share of #31's 16 MiB once a version: what the hintless ranking's
/// public file (6.1 MiB at 1,000,000 items) and a codebook (at most 0.25 MiB,
/// `thumbcode::max_file_len`) leave, rounded down.
pub const THUMBS_HINT_BYTES: usize = (9 << 20) + (512 << 10);

/// How a gallery's thumbnails are laid out for PIR: the database's shape and, where the 3-bit
/// records do not fit, the length of the coded pictures (`publish::thumbcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThumbPlan {
    pub shape: Shape,
    /// `Some(bytes)`: each record starts with a coded picture of `bytes` bytes.
    pub coded: Option<usize>,
}

impl ThumbPlan {
    /// The bytes a search moves for its thumbnails: [`COVERAGE_K`](crate::publish::COVERAGE_K)
    /// queries and their answers (what [`THUMBS_SEARCH_BYTES`] bounds).
    pub fn search_bytes(&self) -> usize {
        thumbs_search_bytes(&self.shape)
    }
}

fn thumbs_search_bytes(s: &Shape) -> usize {
    crate::publish::COVERAGE_K * (s.query_bytes() + s.answer_bytes())
}

/// The thumbnail plan for `items` records of a `raw`-byte 3-bit picture and `extra` bytes
/// more (features, with verified scores). The 3-bit records with [`thumbs_shape`] where their
/// bytes a search fit [`THUMBS_SEARCH_BYTES`] (every gallery up to a few hundred thousand
/// items: they are exact at their 8 levels); otherwise coded pictures, the longest (the best
/// picture) for which some column height keeps both a search within
/// [`THUMBS_SEARCH_BYTES`] and the hint within [`THUMBS_HINT_BYTES`], at the height with the
/// fewest bytes a search. If not even the shortest record fits, the 3-bit plan (the budgets
/// cannot be met; the server logs it).
pub fn thumbs_plan(items: usize, raw: usize, extra: usize) -> Result<ThumbPlan> {
    thumbs_plan_with(items, raw, extra, None)
}

/// [`thumbs_plan`], or with `coded = Some(len)` coded pictures of `len` bytes (shorter than
/// `raw`, at least `thumbcode::MIN_RECORD`) in [`thumbs_shape`]'s layout: the operator's
/// choice.
pub fn thumbs_plan_with(
    items: usize,
    raw: usize,
    extra: usize,
    coded: Option<usize>,
) -> Result<ThumbPlan> {
    if let Some(len) = coded {
        if !(crate::thumbcode::MIN_RECORD..raw).contains(&len) {
            return Err(Error::InvalidParameter {
                name: "coded thumbnail bytes",
                reason: format!("{len} is not below the 3-bit record's {raw} and at least 8"),
            });
        }
        return Ok(ThumbPlan {
            shape: thumbs_shape(items, len + extra)?,
            coded,
        });
    }
    let per_search = thumbs_search_bytes;
    let plain = ThumbPlan {
        shape: thumbs_shape(items, raw + extra)?,
        coded: None,
    };
    if plain.search_bytes() <= THUMBS_SEARCH_BYTES {
        return Ok(plain);
    }
    for len in (crate::thumbcode::MIN_RECORD..raw).rev() {
        let record = len + extra;
        let best = (1..=(THUMBS_HINT_BYTES / (record * lwe::LWE_N * 5 / 2)).min(items))
            .filter_map(|g| Shape::new(record, items, record * g).ok())
            .filter(|s| s.hint_bytes() <= THUMBS_HINT_BYTES)
            .min_by_key(|s| (per_search(s), s.rows));
        if let Some(shape) = best.filter(|s| per_search(s) <= THUMBS_SEARCH_BYTES) {
            return Ok(ThumbPlan {
                shape,
                coded: Some(len),
            });
        }
    }
    Ok(plain)
}

/// Columns of 4,096 bytes (a 16 MiB hint) for ranking records longer than that; shorter records
/// get one column each, of their length rounded up to a power of two.
pub fn level_shape(blocks: usize, longest_record: usize) -> Result<Shape> {
    let rows = longest_record.max(1).next_power_of_two().min(4096);
    Shape::new(longest_record.max(1).next_multiple_of(rows), blocks, rows)
        .map_err(crate::pir::from_lattice)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_shapes_give_no_more_samples_than_the_estimate_assumes() {
        // Thumbnails at a million images (294-byte records), and level databases of many
        // blocks with long and short records (`lwe`'s own test covers every validated shape).
        for (items, stacked) in [(10_000, 8), (70_000, 16), (1_000_000, 32)] {
            let s = thumbs_shape(items, 294).unwrap();
            assert!(s.cols <= lwe::MAX_COLS, "{items}: {s:?}");
            assert_eq!(s.rows, 294 * stacked, "{items}");
        }
        // Small galleries: one record a column (stacking would save little).
        assert_eq!(thumbs_shape(3, 294).unwrap().rows, 294);
        assert_eq!(thumbs_shape(1_000, 294).unwrap().rows, 294);
        for (blocks, longest) in [(256, 57_344), (64, 110_592), (64, 100)] {
            let s = level_shape(blocks, longest).unwrap();
            assert!(s.cols <= lwe::MAX_COLS, "{blocks}: {s:?}");
        }
        // The plans: 3-bit records up to 70,000 items (their shapes unchanged), coded ones at
        // 1,000,000 that fit both shares of #31's bytes.
        for items in [1_000, 10_000, 70_000] {
            let p = thumbs_plan(items, 294, 0).unwrap();
            assert_eq!(
                p,
                ThumbPlan {
                    shape: thumbs_shape(items, 294).unwrap(),
                    coded: None
                }
            );
        }
        let per_search = |s: &Shape| 8 * (s.query_bytes() + s.answer_bytes());
        let p = thumbs_plan(1_000_000, 294, 0).unwrap();
        let len = p.coded.expect("coded at a million");
        assert!(per_search(&p.shape) <= THUMBS_SEARCH_BYTES, "{p:?}");
        assert!(p.shape.hint_bytes() <= THUMBS_HINT_BYTES, "{p:?}");
        assert!(p.shape.cols <= lwe::MAX_COLS);
        // The longest record that fits: one byte more fits at no height (90–120 bytes at
        // LWE N = 1,024; the hint is 1.375× longer a row at N = 1,408, so 70).
        assert!((64..90).contains(&len), "{p:?}");
        eprintln!(
            "{p:?}: {} B a search, hint {} B",
            per_search(&p.shape),
            p.shape.hint_bytes()
        );
        // A level whose records would need more columns is refused, not served.
        assert!(level_shape(4_096, 1_700_000).is_err());
    }
}
