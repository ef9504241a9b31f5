//! The gallery's identity: an Ed25519 key kept beside the store (`gallery.key` next to
//! `gallery.redb`, created on first start from the operating system's CSPRNG, mode 0600), and
//! the `GET /api/v1/identity` document signing the configuration this server serves
//! (`shared::identity`). Clients pin the key on first use and key their refusals by it
//! (`client::identity`); a gallery that lost or changed its key is a new key at a known URL,
//! which clients refuse until each person accepts it, so the file is kept across restarts and
//! never replaced when it cannot be read.

use std::path::{Path, PathBuf};

use ed25519_dalek::{Signer, SigningKey};
use sha2::{Digest, Sha256};
use shared::api::ConfigResponse;
use shared::identity::{signed_message, IdentityDoc};

use super::StateError;

/// Where the key of the store at `store_path` lives.
pub fn key_path(store_path: &Path) -> PathBuf {
    store_path.with_extension("key")
}

/// The gallery's signing key: read from `path`, or created there if there is none. A file of
/// any other length is an error, never a reason to make a new key.
pub fn load_or_create(path: &Path) -> Result<SigningKey, StateError> {
    let bad = |e: String| StateError::Invalid(format!("the gallery key {}: {e}", path.display()));
    match std::fs::read(path) {
        Ok(bytes) => {
            let seed: [u8; 32] = bytes
                .try_into()
                .map_err(|b: Vec<u8>| bad(format!("{} bytes, not 32", b.len())))?;
            Ok(SigningKey::from_bytes(&seed))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed).map_err(|e| bad(e.to_string()))?;
            let tmp = path.with_extension("key.part");
            write_private(&tmp, &seed).map_err(|e| bad(e.to_string()))?;
            std::fs::rename(&tmp, path).map_err(|e| bad(e.to_string()))?;
            tracing::info!(path = %path.display(), "created the gallery's identity key");
            Ok(SigningKey::from_bytes(&seed))
        }
        Err(e) => Err(bad(e.to_string())),
    }
}

/// The signing key in `path`, which must exist and hold exactly 32 bytes: a replica's key is
/// provisioned (shared by every replica answering one origin), so a missing file is an error,
/// never a reason to make a key that would differ from the other replicas'.
pub fn load_existing(path: &Path) -> Result<SigningKey, StateError> {
    let bytes = std::fs::read(path)
        .map_err(|e| StateError::Invalid(format!("the gallery key {}: {e}", path.display())))?;
    let seed: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
        StateError::Invalid(format!(
            "the gallery key {}: {} bytes, not 32",
            path.display(),
            b.len()
        ))
    })?;
    Ok(SigningKey::from_bytes(&seed))
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// The identity document for `config`, signed over the SHA-256 of the bytes
/// `GET /api/v1/config` serves (`http::cache::json_revalidated` writes the same bytes).
pub fn document(key: &SigningKey, config: &ConfigResponse) -> Result<IdentityDoc, StateError> {
    let body = serde_json::to_vec(config)
        .map_err(|e| StateError::Invalid(format!("the configuration could not be written: {e}")))?;
    let digest: [u8; 32] = Sha256::digest(&body).into();
    Ok(IdentityDoc {
        key: hex::encode(key.verifying_key().as_bytes()),
        config_sha256: hex::encode(digest),
        signature: hex::encode(key.sign(&signed_message(&digest)).to_bytes()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_made_once_and_kept() {
        let dir = std::env::temp_dir().join(format!("pm-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = key_path(&dir.join("gallery.redb"));
        let _ = std::fs::remove_file(&path);
        let a = load_or_create(&path).unwrap();
        let b = load_or_create(&path).unwrap();
        assert_eq!(a.to_bytes(), b.to_bytes());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "readable by others: {mode:o}");
        }
        std::fs::write(&path, [1u8; 31]).unwrap();
        assert!(
            load_or_create(&path).is_err(),
            "a damaged key is not replaced"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
