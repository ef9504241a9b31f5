//! The page as a static release bundle, so that its code need not come from the gallery.
//!
//! [`build`] turns the page's source tree (`web/`, with the wasm client and models that
//! `scripts/build-web.sh` puts in `web/pkg/`) into a directory any static host can serve:
//!
//! - every file but `index.html` is named by its content (`app.<16 hex of SHA-256>.js`);
//! - every ES module is loaded with Subresource Integrity: the entry by its `<script>` tag, every
//!   other module by a `<link rel="modulepreload" integrity>` in `index.html` (the browser
//!   keeps the checked module and a module imports it from there), and each module's imports
//!   name their targets' hashed files, so a module's hash covers the names of what it imports;
//! - the files the page fetches itself (the wasm client, the two models, the evaluation's
//!   table) are listed with their SHA-384 in `assets.js` (the line [`ASSETS_LINE`] is
//!   replaced), which the page passes to `fetch(…, {integrity})`: the browser refuses other
//!   bytes before the page uses them;
//! - `index.html` carries the Content-Security-Policy [`CSP`] in a `<meta>`: scripts only from
//!   the page's own origin (no inline script, no `eval`; WebAssembly compiles under
//!   `'wasm-unsafe-eval'`), no DOM sinks fed strings (Trusted Types), no forms, no `<base>`.
//!
//! So `index.html`'s SHA-256 pins every byte the page runs: checking that one file checks the
//! page. `manifest.json` lists every file's SHA-256 and length, for `privatemail verify-page`
//! and for the CLI's copy of the bundle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256, Sha384};

/// The page's Content-Security-Policy, in `index.html`'s `<meta>` (and sent as a header by the
/// CLI's page server). `connect-src` admits any http(s) origin here because the gallery is a
/// setting of the page; the page narrows it to the gallery's origins with a second policy
/// once it has read the setting and the gallery's documents (`web/gallery.js`), and the
/// browser enforces both.
pub const CSP: &str = "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; \
     style-src 'self'; img-src 'self' data: blob:; connect-src 'self' https: http:; \
     base-uri 'none'; form-action 'none'; require-trusted-types-for 'script'; \
     trusted-types 'none'";

/// The line of `assets.js` the bundle replaces with the table of checked files.
pub const ASSETS_LINE: &str = "export const FILES = null;";

/// The module holding [`ASSETS_LINE`].
pub const ASSETS_MODULE: &str = "assets.js";

/// The page's entry document.
pub const ENTRY: &str = "index.html";

/// The manifest's file name in the bundle (not itself listed).
pub const MANIFEST: &str = "manifest.json";

/// The largest file the bundle takes (the wasm client is about 1 MB).
pub const MAX_FILE_BYTES: u64 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Source { path: String, reason: String },
    #[error("manifest: {0}")]
    Manifest(String),
}

pub type Result<T> = std::result::Result<T, Error>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.display().to_string(),
        source,
    }
}

fn bad(path: &str, reason: impl Into<String>) -> Error {
    Error::Source {
        path: path.to_string(),
        reason: reason.into(),
    }
}

/// One file of the bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// SHA-256 of the bytes, lower-case hex.
    pub sha256: String,
    pub bytes: u64,
}

/// `manifest.json`: every file of the bundle (paths relative to its root, `/`-separated) with
/// its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// 1.
    pub format: u32,
    /// The entry document (`index.html`), whose SHA-256 pins the whole page.
    pub entry: String,
    /// The policy in the entry's `<meta>`.
    pub csp: String,
    pub files: BTreeMap<String, FileEntry>,
}

impl Manifest {
    /// Parse and check a manifest: format 1, the entry listed, every path relative and plain.
    pub fn parse(text: &[u8]) -> Result<Self> {
        let m: Manifest =
            serde_json::from_slice(text).map_err(|e| Error::Manifest(e.to_string()))?;
        if m.format != 1 {
            return Err(Error::Manifest(format!("format {} is not 1", m.format)));
        }
        if !m.files.contains_key(&m.entry) {
            return Err(Error::Manifest(format!(
                "the entry {} is not listed",
                m.entry
            )));
        }
        for (name, f) in &m.files {
            if !plain_path(name) {
                return Err(Error::Manifest(format!(
                    "{name:?} is not a plain relative path"
                )));
            }
            if f.sha256.len() != 64 || !f.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(Error::Manifest(format!(
                    "{name}: sha256 is not 64 hex digits"
                )));
            }
            if f.bytes > MAX_FILE_BYTES {
                return Err(Error::Manifest(format!("{name}: {} bytes", f.bytes)));
            }
        }
        Ok(m)
    }

    /// The `index.html` SHA-256: the one figure that names this page.
    pub fn page_sha256(&self) -> &str {
        &self.files[&self.entry].sha256
    }
}

/// `a/b.c`: no empty, `.` or `..` component, no leading `/`, only URL-safe characters.
fn plain_path(p: &str) -> bool {
    !p.is_empty()
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

/// SHA-256, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Subresource Integrity metadata: `sha384-<base64>`.
pub fn sri(bytes: &[u8]) -> String {
    format!(
        "sha384-{}",
        base64::engine::general_purpose::STANDARD.encode(Sha384::digest(bytes))
    )
}

/// `dir/name.ext` → `dir/name.<16 hex>.ext`.
fn hashed_name(path: &str, bytes: &[u8]) -> String {
    let h = &sha256_hex(bytes)[..16];
    let (dir, file) = match path.rsplit_once('/') {
        Some((d, f)) => (format!("{d}/"), f),
        None => (String::new(), path),
    };
    match file.rsplit_once('.') {
        Some((stem, ext)) => format!("{dir}{stem}.{h}.{ext}"),
        None => format!("{dir}{file}.{h}"),
    }
}

/// The source files under `web`, `/`-separated and relative, without hidden files and without
/// `skip` (the bundle's own directory when it sits inside `web`).
fn sources(web: &Path, skip: Option<&Path>) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![web.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let entry = entry.map_err(io(&dir))?;
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if skip.is_some_and(|s| same_path(s, &path)) {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(web)
                .expect("walked from web")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            if !plain_path(&rel) {
                return Err(bad(&rel, "a file name the bundle cannot carry"));
            }
            let len = entry.metadata().map_err(io(&path))?.len();
            if len > MAX_FILE_BYTES {
                return Err(bad(&rel, format!("{len} bytes, above {MAX_FILE_BYTES}")));
            }
            out.insert(rel, std::fs::read(&path).map_err(io(&path))?);
        }
    }
    Ok(out)
}

fn same_path(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// `from` (a module's path) + a relative specifier → the target's path, or `None` when it
/// climbs above the root.
fn resolve(from: &str, spec: &str) -> Option<String> {
    let mut parts: Vec<&str> = from.split('/').collect();
    parts.pop();
    for c in spec.split('/') {
        match c {
            "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

/// The string literals after `from` and bare `import` in a module, with their byte ranges
/// (quotes excluded). Dynamic `import(` is refused: every module must be known here to be
/// preloaded with its integrity.
fn specifiers(path: &str, text: &str) -> Result<Vec<(std::ops::Range<usize>, String)>> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    for key in ["from", "import"] {
        let mut at = 0;
        while let Some(i) = text[at..].find(key) {
            let start = at + i;
            at = start + key.len();
            let word_before =
                start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
            if word_before {
                continue;
            }
            let mut j = at;
            while j < b.len() && b[j] == b' ' {
                j += 1;
            }
            if key == "import" && j < b.len() && b[j] == b'(' {
                return Err(bad(path, "a dynamic import(), which the bundle cannot pin"));
            }
            if j < b.len() && (b[j] == b'"' || b[j] == b'\'') {
                let q = b[j];
                let Some(len) = b[j + 1..].iter().position(|&c| c == q) else {
                    continue;
                };
                let range = j + 1..j + 1 + len;
                let spec = text[range.clone()].to_string();
                if spec.starts_with("./") || spec.starts_with("../") {
                    out.push((range, spec));
                }
            }
        }
    }
    out.sort_by_key(|(r, _)| r.start);
    Ok(out)
}

/// The bundle written to `out` (emptied first) from the page's sources in `web`; returns its
/// manifest, also written as `out/manifest.json`.
pub fn build(web: &Path, out: &Path) -> Result<Manifest> {
    let src = sources(web, Some(out))?;
    if !src.contains_key(ENTRY) {
        return Err(bad(ENTRY, "missing"));
    }
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    // Source path → bundle path.
    let mut renamed: BTreeMap<String, String> = BTreeMap::new();

    // 1. Files that are not modules or the entry: named by their hash as they are.
    for (path, bytes) in &src {
        if path == ENTRY || path.ends_with(".js") {
            continue;
        }
        let name = hashed_name(path, bytes);
        renamed.insert(path.clone(), name.clone());
        files.insert(name, bytes.clone());
    }

    // 2. The table of files the page fetches itself (everything under pkg/ but modules).
    let table: BTreeMap<&str, serde_json::Value> = src
        .iter()
        .filter(|(p, _)| p.starts_with("pkg/") && !p.ends_with(".js"))
        .map(|(p, bytes)| {
            (
                p.as_str(),
                serde_json::json!({ "url": renamed[p], "integrity": sri(bytes) }),
            )
        })
        .collect();
    let mut modules: BTreeMap<String, String> = BTreeMap::new();
    for (path, bytes) in &src {
        if !path.ends_with(".js") {
            continue;
        }
        let text = String::from_utf8(bytes.clone()).map_err(|_| bad(path, "not UTF-8"))?;
        let text = if path == ASSETS_MODULE {
            if text.matches(ASSETS_LINE).count() != 1 {
                return Err(bad(path, format!("needs the line {ASSETS_LINE:?} once")));
            }
            let json = serde_json::to_string(&table).expect("a map of strings");
            text.replace(ASSETS_LINE, &format!("export const FILES = {json};"))
        } else {
            text
        };
        modules.insert(path.clone(), text);
    }
    if !modules.contains_key(ASSETS_MODULE) {
        return Err(bad(ASSETS_MODULE, "missing"));
    }

    // 3. Modules, imports first: each import renamed to its target's hashed file.
    let mut deps: BTreeMap<String, Vec<(std::ops::Range<usize>, String, String)>> = BTreeMap::new();
    for (path, text) in &modules {
        let mut list = Vec::new();
        for (range, spec) in specifiers(path, text)? {
            let target = resolve(path, &spec)
                .filter(|t| modules.contains_key(t))
                .ok_or_else(|| bad(path, format!("imports {spec:?}, not a module of the page")))?;
            list.push((range, spec, target));
        }
        deps.insert(path.clone(), list);
    }
    let mut done: BTreeSet<String> = BTreeSet::new();
    while done.len() < modules.len() {
        let ready: Vec<String> = modules
            .keys()
            .filter(|p| !done.contains(*p))
            .filter(|p| deps[*p].iter().all(|(_, _, t)| done.contains(t)))
            .cloned()
            .collect();
        if ready.is_empty() {
            let left: Vec<&String> = modules.keys().filter(|p| !done.contains(*p)).collect();
            return Err(bad(
                &format!("{left:?}"),
                "an import cycle: modules named by their hashes must import without cycles",
            ));
        }
        for path in ready {
            let text = &modules[&path];
            let mut outtext = String::with_capacity(text.len());
            let mut at = 0;
            for (range, spec, target) in &deps[&path] {
                outtext.push_str(&text[at..range.start]);
                let new_file = renamed[target].rsplit('/').next().expect("a file name");
                let keep = spec.rsplit_once('/').map(|(d, _)| d).unwrap_or(".");
                outtext.push_str(&format!("{keep}/{new_file}"));
                at = range.end;
            }
            outtext.push_str(&text[at..]);
            let name = hashed_name(&path, outtext.as_bytes());
            renamed.insert(path.clone(), name.clone());
            files.insert(name, outtext.into_bytes());
            done.insert(path);
        }
    }

    // 4. The entry: hashed names, integrity, every module preloaded, the policy.
    let html = String::from_utf8(src[ENTRY].clone()).map_err(|_| bad(ENTRY, "not UTF-8"))?;
    let html = entry(&html, &renamed, &files)?;
    files.insert(ENTRY.to_string(), html.into_bytes());

    // 5. Written out, with the manifest.
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(io(out))?;
    }
    for (name, bytes) in &files {
        let path: PathBuf = out.join(name);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        std::fs::write(&path, bytes).map_err(io(&path))?;
    }
    let manifest = Manifest {
        format: 1,
        entry: ENTRY.to_string(),
        csp: CSP.to_string(),
        files: files
            .iter()
            .map(|(n, b)| {
                (
                    n.clone(),
                    FileEntry {
                        sha256: sha256_hex(b),
                        bytes: b.len() as u64,
                    },
                )
            })
            .collect(),
    };
    let text = serde_json::to_string_pretty(&manifest).expect("plain data");
    let path = out.join(MANIFEST);
    std::fs::write(&path, text + "\n").map_err(io(&path))?;
    Ok(manifest)
}

/// A tag's attributes (`name="value"` or bare `name`), in order.
fn attributes(tag: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut rest = tag.trim();
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(rest.len());
        let name = rest[..end].to_string();
        rest = rest[end..].trim_start();
        if let Some(r) = rest.strip_prefix('=') {
            let r = r.trim_start();
            let (value, after) = match r.chars().next() {
                Some(q @ ('"' | '\'')) => match r[1..].find(q) {
                    Some(i) => (r[1..1 + i].to_string(), &r[2 + i..]),
                    None => (r[1..].to_string(), ""),
                },
                _ => {
                    let i = r.find(char::is_whitespace).unwrap_or(r.len());
                    (r[..i].to_string(), &r[i..])
                }
            };
            out.push((name, Some(value)));
            rest = after.trim_start();
        } else {
            out.push((name, None));
        }
    }
    out
}

fn attr<'a>(attrs: &'a [(String, Option<String>)], name: &str) -> Option<&'a str> {
    attrs
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| v.as_deref())
}

fn render(tag: &str, attrs: &[(String, Option<String>)]) -> String {
    let mut s = format!("<{tag}");
    for (n, v) in attrs {
        match v {
            Some(v) => s.push_str(&format!(" {n}=\"{v}\"")),
            None => s.push_str(&format!(" {n}")),
        }
    }
    s.push('>');
    s
}

/// `index.html` for the bundle: its `<script>` and `<link>` tags renamed (with integrity for
/// scripts and style sheets), a modulepreload with integrity for every other module before the
/// entry script, and the policy's `<meta>` first in `<head>`. An inline script is refused (the
/// policy would block it).
fn entry(
    html: &str,
    renamed: &BTreeMap<String, String>,
    files: &BTreeMap<String, Vec<u8>>,
) -> Result<String> {
    let mut out = String::with_capacity(html.len() + 8192);
    let mut rest = html;
    let mut entry_module: Option<String> = None;
    loop {
        let next = ["<script", "<link"]
            .iter()
            .filter_map(|t| rest.find(t).map(|i| (i, *t)))
            .min();
        let Some((i, t)) = next else {
            out.push_str(rest);
            break;
        };
        out.push_str(&rest[..i]);
        let close = rest[i..]
            .find('>')
            .ok_or_else(|| bad(ENTRY, "an unclosed tag"))?;
        let inner = &rest[i + t.len()..i + close];
        let inner = inner.trim_end().trim_end_matches('/');
        let mut attrs = attributes(inner);
        let key = if t == "<script" { "src" } else { "href" };
        let Some(target) = attr(&attrs, key).map(str::to_string) else {
            return Err(bad(
                ENTRY,
                format!("{t}> without {key} (inline code is not allowed)"),
            ));
        };
        let Some(new) = renamed.get(&target) else {
            return Err(bad(
                ENTRY,
                format!("{t}> names {target:?}, not a file of the page"),
            ));
        };
        for (n, v) in attrs.iter_mut() {
            if n == key {
                *v = Some(new.clone());
            }
        }
        let checked = t == "<script"
            || attr(&attrs, "rel").is_some_and(|r| r.eq_ignore_ascii_case("stylesheet"));
        if checked {
            attrs.retain(|(n, _)| n != "integrity");
            attrs.push(("integrity".into(), Some(sri(&files[new]))));
        }
        if t == "<script" {
            if entry_module.is_some() {
                return Err(bad(ENTRY, "more than one script: one entry module"));
            }
            if attr(&attrs, "type") != Some("module") {
                return Err(bad(ENTRY, "the script must be a module"));
            }
            // Every other module, preloaded with its integrity, before the entry runs.
            for (src, name) in renamed {
                if src.ends_with(".js") && src != &target {
                    out.push_str(&format!(
                        "<link rel=\"modulepreload\" href=\"{name}\" integrity=\"{}\">\n",
                        sri(&files[name])
                    ));
                }
            }
            entry_module = Some(target.clone());
        }
        out.push_str(&render(&t[1..], &attrs));
        rest = &rest[i + close + 1..];
    }
    if entry_module.is_none() {
        return Err(bad(ENTRY, "no entry module"));
    }
    let meta = format!("<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n");
    let at = out
        .find("<meta charset=\"utf-8\">\n")
        .map(|i| i + "<meta charset=\"utf-8\">\n".len())
        .ok_or_else(|| bad(ENTRY, "needs <meta charset=\"utf-8\"> on its own line"))?;
    out.insert_str(at, &meta);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> PathBuf {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("pagebundle-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (p, t) in files {
            let path = dir.join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, t).unwrap();
        }
        dir
    }

    const HTML: &str = "<!doctype html>\n<head>\n<meta charset=\"utf-8\">\n\
        <link rel=\"stylesheet\" href=\"style.css\">\n<script type=\"module\" src=\"app.js\"></script>\n</head>\n";

    fn page() -> Vec<(&'static str, &'static str)> {
        vec![
            ("index.html", HTML),
            ("style.css", "body{}"),
            (
                "app.js",
                "import { a } from \"./lib/a.js\";\nimport \"./assets.js\";\n",
            ),
            (
                "lib/a.js",
                "import { b } from '../b.js';\nexport const a = b;\n",
            ),
            ("b.js", "export const b = 1;\n"),
            ("assets.js", "export const FILES = null;\n"),
            ("pkg/model.bin", "weights"),
        ]
    }

    #[test]
    fn every_file_is_named_by_its_hash_and_pinned_by_the_entry() {
        let web = tree(&page());
        let out = web.join("dist");
        let m = build(&web, &out).unwrap();
        // Every file but the entry carries the first 16 hex digits of its own SHA-256.
        for (name, f) in &m.files {
            let bytes = std::fs::read(out.join(name)).unwrap();
            assert_eq!(sha256_hex(&bytes), f.sha256, "{name}");
            if name != ENTRY {
                assert!(name.contains(&f.sha256[..16]), "{name}");
            }
        }
        assert!(!m.files.keys().any(|n| n.starts_with("dist/")));
        let html = std::fs::read_to_string(out.join(ENTRY)).unwrap();
        assert!(html.contains(&format!("content=\"{CSP}\"")));
        // Every module and the style sheet appear with their integrity.
        for (name, f) in &m.files {
            if name.ends_with(".js") || name.ends_with(".css") {
                let bytes = std::fs::read(out.join(name)).unwrap();
                let want = format!("href=\"{name}\" integrity=\"{}\"", sri(&bytes));
                let want_src = format!("src=\"{name}\" integrity=\"{}\"", sri(&bytes));
                assert!(
                    html.contains(&want) || html.contains(&want_src),
                    "{name}: {html}"
                );
                let _ = f;
            }
        }
        // Imports name the hashed files; the assets table names the model with its SRI.
        let a = m.files.keys().find(|n| n.starts_with("lib/a.")).unwrap();
        let b = m.files.keys().find(|n| n.starts_with("b.")).unwrap();
        let a_text = std::fs::read_to_string(out.join(a)).unwrap();
        assert!(a_text.contains(&format!("'../{b}'")), "{a_text}");
        let assets = m.files.keys().find(|n| n.starts_with("assets.")).unwrap();
        let assets_text = std::fs::read_to_string(out.join(assets)).unwrap();
        assert!(assets_text.contains(&sri(b"weights")), "{assets_text}");
        assert_eq!(
            Manifest::parse(&std::fs::read(out.join(MANIFEST)).unwrap()).unwrap(),
            m
        );
        // The same sources give the same bundle; a changed import changes its importers' names.
        let again = build(&web, &out).unwrap();
        assert_eq!(again, m);
        std::fs::write(web.join("b.js"), "export const b = 2;\n").unwrap();
        let changed = build(&web, &out).unwrap();
        assert!(
            !changed.files.contains_key(a),
            "a's import changed, so a's name must"
        );
        assert_ne!(changed.page_sha256(), m.page_sha256());
        let _ = std::fs::remove_dir_all(&web);
    }

    #[test]
    fn what_the_bundle_cannot_pin_is_refused() {
        let cases: [(&str, &str, &str); 4] = [
            ("app.js", "import(\"./b.js\");", "dynamic import"),
            (
                "app.js",
                "import { x } from \"./missing.js\";",
                "not a module",
            ),
            ("b.js", "import { a } from \"./app.js\";", "cycle"),
            (
                "index.html",
                "<head>\n<meta charset=\"utf-8\">\n<script>alert(1)</script>\n</head>",
                "inline",
            ),
        ];
        for (file, text, why) in cases {
            let mut files = page();
            for f in files.iter_mut() {
                if f.0 == file {
                    f.1 = text;
                }
            }
            if file == "b.js" {
                files.retain(|f| f.0 != "app.js");
                files.push((
                    "app.js",
                    "import { b } from \"./b.js\";\nimport \"./assets.js\";",
                ));
            }
            let web = tree(&files);
            let e = build(&web, &web.join("dist")).unwrap_err().to_string();
            assert!(e.contains(why), "{why}: {e}");
            let _ = std::fs::remove_dir_all(&web);
        }
    }

    #[test]
    fn a_manifest_with_unsafe_paths_is_refused() {
        for name in ["../x.js", "/x.js", "a//b.js", "a b.js"] {
            let m = serde_json::json!({
                "format": 1, "entry": "index.html", "csp": "",
                "files": {
                    "index.html": { "sha256": "0".repeat(64), "bytes": 1 },
                    name: { "sha256": "0".repeat(64), "bytes": 1 }
                }
            });
            assert!(Manifest::parse(m.to_string().as_bytes()).is_err(), "{name}");
        }
    }
}
