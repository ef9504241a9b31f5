//! The gallery's identity on the wire: `GET /api/v1/identity` names the gallery's Ed25519 key
//! and signs the SHA-256 of the configuration it serves (`GET /api/v1/config`), which in turn
//! names the anchors by their SHA-256 ([`crate::api::AnchorsResponse::check_named`]); so the
//! signature covers the configuration and, through it, the anchors. Clients pin the key on
//! first use and key a refusal by it (`client::identity`), so a server cannot shed a refusal by
//! answering under another name.

use serde::{Deserialize, Serialize};

/// Domain separation for the signed message: a signature made for anything else is never
/// one of these.
pub const DOMAIN: &[u8] = b"privatemail gallery identity v1\0";

/// Largest identity document a client reads (three hex strings and their names).
pub const MAX_IDENTITY_DOC_BYTES: u64 = 1_024;

/// `GET /api/v1/identity`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityDoc {
    /// The gallery's Ed25519 public key, 32 bytes as 64 lower-case hex digits.
    pub key: String,
    /// SHA-256 (64 hex digits) of the `GET /api/v1/config` body this key signs.
    pub config_sha256: String,
    /// Ed25519 signature (128 hex digits) of [`signed_message`] over `config_sha256`.
    pub signature: String,
}

/// The bytes the gallery signs: [`DOMAIN`] followed by the configuration's 32-byte SHA-256.
pub fn signed_message(config_sha256: &[u8; 32]) -> Vec<u8> {
    let mut m = DOMAIN.to_vec();
    m.extend_from_slice(config_sha256);
    m
}
