//! Builds the page's release bundle (`web/dist/`, written by `scripts/build-web.sh`) into the
//! CLI for `privatemail page` and `privatemail verify-page`. Without it (a fresh clone before
//! that script) the CLI still builds, and those two commands say how to get the page; with a
//! bundle whose files do not match its manifest the build fails.

use std::fmt::Write;
use std::path::{Path, PathBuf};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dist = root.join("web/dist");
    let out =
        PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("bundle.rs");
    // A directory is watched whole (any file's change reruns this); `web/` while there is no
    // bundle, so that the script's first run is seen.
    let watch = if dist.is_dir() {
        &dist
    } else {
        &root.join("web")
    };
    println!("cargo:rerun-if-changed={}", watch.display());
    let manifest_path = dist.join(pagebundle::MANIFEST);
    let code = match std::fs::read(&manifest_path) {
        Err(_) => {
            println!(
                "cargo:warning=no page bundle at {}: `privatemail page` and `verify-page` are unavailable in this build (run scripts/build-web.sh, then build again)",
                dist.display()
            );
            "pub const MANIFEST: Option<&[u8]> = None;\npub const FILES: &[(&str, &[u8])] = &[];\n"
                .to_string()
        }
        Ok(text) => {
            let manifest = pagebundle::Manifest::parse(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", manifest_path.display()));
            let mut code = format!(
                "pub const MANIFEST: Option<&[u8]> = Some(include_bytes!({:?}));\npub const FILES: &[(&str, &[u8])] = &[\n",
                manifest_path.canonicalize().expect("read above")
            );
            for (name, entry) in &manifest.files {
                let path = dist.join(name);
                let bytes = std::fs::read(&path).unwrap_or_else(|e| {
                    panic!("{}: {e} (run scripts/build-web.sh again)", path.display())
                });
                assert_eq!(
                    pagebundle::sha256_hex(&bytes),
                    entry.sha256,
                    "{} does not match web/dist/manifest.json: run scripts/build-web.sh again",
                    path.display()
                );
                writeln!(
                    code,
                    "    ({name:?}, include_bytes!({:?})),",
                    path.canonicalize().expect("read above")
                )
                .expect("a String");
            }
            code.push_str("];\n");
            code
        }
    };
    std::fs::write(&out, code).expect("OUT_DIR is writable");
}
