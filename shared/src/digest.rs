//! The one digest of the wire: every published file, the anchors and the query model are
//! named by their SHA-256.

use sha2::{Digest, Sha256};

/// SHA-256 of `bytes`, lower-case hex.
pub fn hash_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
