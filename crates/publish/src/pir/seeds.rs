//! Every public mask a PIR client encrypts against, derived by the client itself.
//!
//! # Why the client derives them
//! The server is the adversary, and it writes the PIR document. If the client took the
//! document's seeds as given, a server could publish related seeds — e.g. the hintless
//! ranking's packing-key seed equal to its query seed — so that a query chunk and a key body
//! are encrypted under the same mask `a`; subtracting the two exposes the client's secret and
//! with it the photo's block and features, from one upload. So no seed is taken from the
//! server: the client computes each one from public data it holds ([`derive`]) and refuses a
//! document whose seeds differ ([`check`]) before any query exists.
//!
//! # Guarantee
//! For a partition document `part` and two distinct purposes `p ≠ p'`,
//! `derive(part, p)` and `derive(part, p')` are SHA-256 outputs over inputs that differ in
//! their prefix-free purpose label, so they are equal only with a SHA-256 collision. Each seed
//! keys a ChaCha20 expansion; within one seed, uses are told apart by ChaCha20's stream number
//! (the query's row chunk, the packing key's level) and by position in the stream (a key's
//! digits, one after the other), so no two masks a client encrypts against share key, stream
//! and position. Under the usual PRF assumption on ChaCha20 every mask is then an independent
//! uniform value, which is what the (R)LWE security arguments of [`super::lwe`] and
//! [`::lattice::rlwe`] assume of a public `a`.
//!
//! The seeds are bound to the partition version and to the content digests the partition
//! document publishes (every block's and centroids file's SHA-256 and size, per level,
//! [`partition_digest`]), so one seed serves exactly one database of one version. The server
//! derives the same values ([`derive`] is public and deterministic) to build its hints and
//! plans. What binding does *not* give: a server may still hand each client its own version,
//! and so link that client's searches with each other (as its address or connection already
//! do); it learns nothing about the photo from that (ARCHITECTURE.md, "Threat model").

use sha2::{Digest, Sha256};

use crate::pir::doc::{seed_hex, PirDoc};
use shared::api::PartitionDoc;
use shared::error::{Error, Result};

/// What a seed is for: one database's matrix `A` (SimplePIR), or the hintless ranking's query
/// masks or packing-key masks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The thumbnail database's `A`.
    Thumbs,
    /// Level `l`'s ranking database's `A`.
    Level(usize),
    /// The hintless ranking's query masks (stream = row chunk).
    ScoresQuery,
    /// The hintless ranking's packing-key masks (stream = key level, digits in sequence).
    ScoresPacking,
}

impl Purpose {
    /// A prefix-free label: a tag byte, then the level as 8 bytes where there is one.
    fn label(self) -> Vec<u8> {
        match self {
            Purpose::Thumbs => vec![1],
            Purpose::Level(l) => {
                let mut v = vec![2];
                v.extend_from_slice(&(l as u64).to_le_bytes());
                v
            }
            Purpose::ScoresQuery => vec![3],
            Purpose::ScoresPacking => vec![4],
        }
    }
}

const DOMAIN: &[u8] = b"PrivateMail PIR public masks v2\0";

/// SHA-256 over what the partition document publishes of its content: the version, the
/// gallery's shape, and for every level its block count, the centroids file's size and
/// SHA-256, and every block's item count, size and SHA-256 (length-prefixed, so the encoding is
/// injective). Hashes are taken as written, lower-cased.
pub fn partition_digest(part: &PartitionDoc) -> [u8; 32] {
    let mut h = Sha256::new();
    let put_str = |h: &mut Sha256, s: &str| {
        h.update((s.len() as u64).to_le_bytes());
        h.update(s.to_ascii_lowercase().as_bytes());
    };
    h.update(b"PrivateMail partition digest v1\0");
    put_str(&mut h, &part.version);
    for v in [
        part.gallery_size,
        part.feature_dim,
        part.thumb_side,
        part.levels.len(),
    ] {
        h.update((v as u64).to_le_bytes());
    }
    for level in &part.levels {
        h.update(u64::from(level.blocks).to_le_bytes());
        h.update(level.centroids_bytes.to_le_bytes());
        put_str(&mut h, &level.centroids_hash);
        h.update((level.hashes.len() as u64).to_le_bytes());
        for ((size, bytes), hash) in level.sizes.iter().zip(&level.bytes).zip(&level.hashes) {
            h.update(u64::from(*size).to_le_bytes());
            h.update(bytes.to_le_bytes());
            put_str(&mut h, hash);
        }
    }
    h.finalize().into()
}

/// The seed for `purpose` in the version `part` describes (module docs: distinct purposes give
/// independent seeds). The server builds with these; the client uses these, never the
/// document's.
pub fn derive(part: &PartitionDoc, purpose: Purpose) -> [u8; 32] {
    derive_from(&partition_digest(part), purpose)
}

/// [`derive`] from a precomputed [`partition_digest`].
pub fn derive_from(digest: &[u8; 32], purpose: Purpose) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(DOMAIN);
    h.update(digest);
    h.update(purpose.label());
    h.finalize().into()
}

/// Refuses a PIR document any of whose published seeds is not the one the client derives for
/// it: a server that follows the protocol publishes exactly [`derive`]'s values, so a
/// difference is a hostile or broken server. Run before any query is made.
pub fn check(part: &PartitionDoc, pir: &PirDoc) -> Result<()> {
    let digest = partition_digest(part);
    let mut published: Vec<(&'static str, &str, Purpose)> =
        vec![("pir thumbs a_seed", &pir.thumbs.a_seed, Purpose::Thumbs)];
    for (l, db) in pir.levels.iter().enumerate() {
        if let Some(db) = db {
            published.push(("pir level a_seed", &db.a_seed, Purpose::Level(l)));
        }
    }
    if let Some(s) = &pir.scores {
        published.push(("pir scores query_seed", &s.query_seed, Purpose::ScoresQuery));
        published.push((
            "pir scores packing_seed",
            &s.packing_seed,
            Purpose::ScoresPacking,
        ));
    }
    for (what, hex_seed, purpose) in published {
        check_one(what, hex_seed, derive_from(&digest, purpose))?;
    }
    Ok(())
}

/// One published seed against the derived one: the derived seed, or the refusal.
pub fn check_one(what: &'static str, hex_seed: &str, derived: [u8; 32]) -> Result<[u8; 32]> {
    if seed_hex(what, hex_seed)? != derived {
        return Err(Error::InvalidParameter {
            name: what,
            reason: "is not the seed derived from the published version and content; this \
                     server's document could expose a query's secret, so nothing was sent"
                .into(),
        });
    }
    Ok(derived)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purposes_give_distinct_seeds_and_labels_are_prefix_free() {
        let d = [7u8; 32];
        let all = [
            Purpose::Thumbs,
            Purpose::Level(0),
            Purpose::Level(1),
            Purpose::Level(256),
            Purpose::ScoresQuery,
            Purpose::ScoresPacking,
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(derive_from(&d, *a), derive_from(&d, *b), "{a:?} vs {b:?}");
                let (la, lb) = (a.label(), b.label());
                assert!(!la.starts_with(&lb) && !lb.starts_with(&la));
            }
        }
        // Bound to the content: another digest, another seed.
        assert_ne!(
            derive_from(&d, Purpose::Thumbs),
            derive_from(&[8u8; 32], Purpose::Thumbs)
        );
    }
}
