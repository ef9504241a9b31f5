//! The house's rules, checked on the source: no import circle between the files of a crate or
//! between the page's scripts, the wire crate (`shared`) and the lattice maths (`lattice`)
//! depend on no other crate of the workspace, and every path and module ARCHITECTURE.md names
//! exists.
//!
//! Imports are read as text: every `crate::…`, `super::…` and `self::…` path in code
//! (comments, strings and `#[cfg(test)]` modules left out; `use` groups expanded) is an arrow
//! from its file to the file of the longest module prefix it names. A root file's `pub use`
//! re-exports are followed to the module they name, so `crate::Error` points at `error.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The workspace's member folders, from the root manifest's `members = [...]`.
fn members() -> Vec<PathBuf> {
    let manifest = fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let start = manifest.find("members = [").expect("a members list");
    let list = &manifest[start..][..manifest[start..].find(']').unwrap()];
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(|m| root().join(m))
        .collect()
}

/// Code without comments, string and char literals (their contents blanked, lengths kept).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    out.extend(b"  ");
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    out.extend(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(if b[i] == b'\n' { b'\n' } else { b' ' });
                    i += 1;
                }
            }
        } else if b[i] == b'r' && (b[i + 1..].starts_with(b"\"") || b[i + 1..].starts_with(b"#")) {
            // A raw string r"…" or r#"…"#.
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                out.push(b[i]);
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = i + 2 + hashes;
            let end = b[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| body + p + close.len());
            out.extend(std::iter::repeat_n(b' ', end - i));
            i = end;
        } else if b[i] == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                let step = if b[i] == b'\\' { 2 } else { 1 };
                for _ in 0..step.min(b.len() - i) {
                    out.push(if b[i] == b'\n' { b'\n' } else { b' ' });
                    i += 1;
                }
            }
            out.push(b' ');
            i += 1;
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            out.extend(b"   ");
            i += 3;
        } else if b[i] == b'\'' && b.get(i + 1) == Some(&b'\\') {
            let end = b[i + 2..]
                .iter()
                .position(|&c| c == b'\'')
                .map_or(b.len(), |p| i + 3 + p);
            out.extend(std::iter::repeat_n(b' ', end - i));
            i = end;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `code` without its `#[cfg(test)]` items (test modules and test-only functions).
fn without_tests(code: &str) -> String {
    let mut out = code.to_string();
    while let Some(at) = out.find("#[cfg(test)]") {
        let Some(open) = out[at..].find(['{', ';']).map(|p| at + p) else {
            break;
        };
        let end = if out.as_bytes()[open] == b';' {
            open + 1
        } else {
            let mut depth = 0;
            let mut end = out.len();
            for (j, c) in out[open..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = open + j + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            end
        };
        out.replace_range(at..end, "");
    }
    out
}

fn ident(s: &str) -> usize {
    s.find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len())
}

/// The paths a path expression starting at `s` names (after its leading `crate::`, `super::` or
/// `self::`), `use` groups expanded: each as its segments.
fn paths_at(s: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut prefix = Vec::new();
    let mut rest = s;
    loop {
        let n = ident(rest);
        if n == 0 {
            if rest.starts_with('{') {
                // A group: split its items at top-level commas.
                let mut depth = 0;
                let mut items = Vec::new();
                let mut start = 1;
                for (j, c) in rest.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                items.push(&rest[start..j]);
                                break;
                            }
                        }
                        ',' if depth == 1 => {
                            items.push(&rest[start..j]);
                            start = j + 1;
                        }
                        _ => {}
                    }
                }
                for item in items {
                    let item = item.trim();
                    if item.is_empty() || item == "*" {
                        out.push(prefix.clone());
                        continue;
                    }
                    for p in paths_at(item) {
                        let mut full = prefix.clone();
                        full.extend(p.into_iter().filter(|s| s != "self"));
                        out.push(full);
                    }
                }
                return out;
            }
            break;
        }
        prefix.push(rest[..n].to_string());
        rest = &rest[n..];
        let trimmed = rest.trim_start();
        if let Some(r) = trimmed.strip_prefix("::") {
            rest = r.trim_start();
        } else {
            break;
        }
    }
    out.push(prefix);
    out
}

/// The inline modules (`mod name { … }`) of `code`: each name with the span of its body.
fn inline_modules(code: &str) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    let mut open: Vec<(String, usize, usize)> = Vec::new();
    let mut depth = 0usize;
    let b = code.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' => depth += 1,
            b'}' => {
                if open.last().is_some_and(|(_, _, d)| *d == depth) {
                    let (name, start, _) = open.pop().unwrap();
                    out.push((name, start, i));
                }
                depth = depth.saturating_sub(1);
            }
            b'm' if code[i..].starts_with("mod ")
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let rest = &code[i + 4..];
                let n = ident(rest.trim_start());
                let name = rest.trim_start()[..n].to_string();
                let after = rest.trim_start()[n..].trim_start();
                if n > 0 && after.starts_with('{') {
                    let brace = code.len() - after.len();
                    open.push((name, brace, depth + 1));
                    depth += 1;
                    i = brace + 1;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The names of the inline modules around byte `at`, outermost first.
fn inline_at(inline: &[(String, usize, usize)], at: usize) -> Vec<String> {
    let mut around: Vec<&(String, usize, usize)> = inline
        .iter()
        .filter(|(_, start, end)| *start < at && at < *end)
        .collect();
    around.sort_by_key(|(_, start, _)| *start);
    around.into_iter().map(|(n, _, _)| n.clone()).collect()
}

/// One crate root's files by module path (`a::b` for `src/a/b.rs` or `src/a/b/mod.rs`).
struct Crate {
    root: PathBuf,
    modules: BTreeMap<Vec<String>, PathBuf>,
}

impl Crate {
    fn of(root_file: &Path, src: &Path) -> Crate {
        let mut modules = BTreeMap::new();
        modules.insert(Vec::new(), root_file.to_path_buf());
        let is_lib_or_main = matches!(
            root_file.file_name().and_then(|n| n.to_str()),
            Some("lib.rs" | "main.rs")
        );
        if is_lib_or_main {
            let mut stack = vec![src.to_path_buf()];
            while let Some(dir) = stack.pop() {
                for e in fs::read_dir(&dir).unwrap().flatten() {
                    let p = e.path();
                    let rel: Vec<String> = p
                        .strip_prefix(src)
                        .unwrap()
                        .iter()
                        .map(|s| s.to_string_lossy().into_owned())
                        .collect();
                    if rel.first().map(String::as_str) == Some("bin") {
                        continue;
                    }
                    if p.is_dir() {
                        stack.push(p);
                    } else if p.extension().is_some_and(|x| x == "rs") && p != root_file {
                        let mut m = rel.clone();
                        let last = m.pop().unwrap();
                        if last != "mod.rs" {
                            m.push(last.trim_end_matches(".rs").to_string());
                        }
                        if m.len() == 1 && (m[0] == "lib" || m[0] == "main") {
                            continue;
                        }
                        modules.insert(m, p);
                    }
                }
            }
        }
        Crate {
            root: root_file.to_path_buf(),
            modules,
        }
    }

    /// The root file's `pub use a::b::{C, D as E}` re-exports: name → module path.
    fn reexports(&self) -> BTreeMap<String, Vec<String>> {
        let code = without_tests(&code_only(&fs::read_to_string(&self.root).unwrap()));
        let mut out = BTreeMap::new();
        for (at, _) in code.match_indices("pub use ") {
            let stmt = &code[at + 8..][..code[at + 8..].find(';').unwrap_or(0)];
            for p in paths_at(stmt) {
                if let Some((name, module)) = p.split_last() {
                    let module: Vec<String> = module
                        .iter()
                        .skip_while(|s| s.as_str() == "crate")
                        .cloned()
                        .collect();
                    out.insert(name.clone(), module);
                }
            }
        }
        out
    }

    /// The file the longest module prefix of `path` names.
    fn file_of(&self, path: &[String], reexports: &BTreeMap<String, Vec<String>>) -> &Path {
        for n in (1..=path.len()).rev() {
            if let Some(f) = self.modules.get(&path[..n]) {
                return f;
            }
        }
        match path.first().and_then(|name| reexports.get(name)) {
            Some(module) if !module.is_empty() => self.file_of(module, &BTreeMap::new()),
            _ => &self.root,
        }
    }

    /// The file-to-file import arrows.
    fn arrows(&self) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
        let reexports = self.reexports();
        let mut out: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
        for (module, file) in &self.modules {
            let code = without_tests(&code_only(&fs::read_to_string(file).unwrap()));
            let mut seen = BTreeSet::new();
            let bytes = code.as_bytes();
            let inline = inline_modules(&code);
            for kw in ["crate", "super", "self"] {
                for (at, _) in code.match_indices(kw) {
                    let before = at.checked_sub(1).map(|i| bytes[i]);
                    if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':') {
                        continue;
                    }
                    let after = &code[at + kw.len()..];
                    let Some(rest) = after.strip_prefix("::") else {
                        continue;
                    };
                    for p in paths_at(rest.trim_start()) {
                        // The module the path is written in: the file's, and the inline
                        // modules around it.
                        let mut here = module.clone();
                        here.extend(inline_at(&inline, at));
                        let mut full: Vec<String> = match kw {
                            "crate" => Vec::new(),
                            "self" => here,
                            _ => here[..here.len().saturating_sub(1)].to_vec(),
                        };
                        // `super::super::…` climbs further.
                        let mut segs = p.into_iter().peekable();
                        while segs.peek().map(String::as_str) == Some("super") {
                            segs.next();
                            full.pop();
                        }
                        full.extend(segs);
                        let target = self.file_of(&full, &reexports);
                        if target != file.as_path() {
                            seen.insert(target.to_path_buf());
                        }
                    }
                }
            }
            out.insert(file.clone(), seen);
        }
        out
    }
}

/// Every crate root of the workspace: `lib.rs`, `main.rs` and each `src/bin/*.rs`.
fn crates() -> Vec<Crate> {
    let mut out = Vec::new();
    for m in members() {
        let src = m.join("src");
        if src.join("lib.rs").exists() {
            out.push(Crate::of(&src.join("lib.rs"), &src));
            if src.join("main.rs").exists() {
                // A binary beside a library reaches the library by its name, not `crate::`.
                out.push(Crate {
                    root: src.join("main.rs"),
                    modules: BTreeMap::from([(Vec::new(), src.join("main.rs"))]),
                });
            }
        } else if src.join("main.rs").exists() {
            out.push(Crate::of(&src.join("main.rs"), &src));
        }
        if let Ok(bins) = fs::read_dir(src.join("bin")) {
            for b in bins.flatten() {
                if b.path().extension().is_some_and(|x| x == "rs") {
                    out.push(Crate::of(&b.path(), &src));
                }
            }
        }
    }
    out
}

/// The strongly connected components of more than one file (Tarjan).
fn circles(arrows: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct T<'a> {
        arrows: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a Path, usize>,
        low: BTreeMap<&'a Path, usize>,
        stack: Vec<&'a Path>,
        on: BTreeSet<&'a Path>,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a Path) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.arrows.get(v).into_iter().flatten() {
            let w = w.as_path();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                scc.push(w.to_path_buf());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                t.out.push(scc);
            }
        }
    }
    let mut t = T {
        arrows,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in arrows.keys() {
        if !t.index.contains_key(v.as_path()) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn rel(p: &Path) -> String {
    let root = root().canonicalize().unwrap();
    p.canonicalize()
        .unwrap()
        .strip_prefix(&root)
        .unwrap()
        .display()
        .to_string()
}

#[test]
fn no_import_circle_between_files() {
    let mut found = Vec::new();
    let crates = crates();
    assert!(crates.len() >= 10, "the workspace's crates were not found");
    for c in &crates {
        for scc in circles(&c.arrows()) {
            found.push(scc.iter().map(|p| rel(p)).collect::<Vec<_>>().join(" ↔ "));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

/// The checker sees a circle where there is one: two files that import each other, through a
/// `use` group and a `super::` path.
#[test]
fn the_circle_check_finds_a_planted_circle() {
    let dir = std::env::temp_dir().join(format!("pm-house-{}", std::process::id()));
    let src = dir.join("src");
    fs::create_dir_all(src.join("a")).unwrap();
    fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\n").unwrap();
    fs::write(src.join("a/mod.rs"), "pub mod c;\n").unwrap();
    fs::write(
        src.join("a/c.rs"),
        "// crate::b is named in a comment only\nuse crate::{b::{self, B}};\npub struct C;\n",
    )
    .unwrap();
    fs::write(
        src.join("b.rs"),
        "pub struct B;\nfn f() -> crate::a::c::C { let _s = \"crate::a\"; todo!() }\n",
    )
    .unwrap();
    let c = Crate::of(&src.join("lib.rs"), &src);
    let found = circles(&c.arrows());
    assert_eq!(found, vec![vec![src.join("a/c.rs"), src.join("b.rs")]]);
    // Only a comment or a test module naming the other file: no circle.
    fs::write(
        src.join("b.rs"),
        "pub struct B;\n// crate::a::c\n#[cfg(test)]\nmod tests { use crate::a::c::C; }\n",
    )
    .unwrap();
    assert!(circles(&c.arrows()).is_empty());
    fs::remove_dir_all(&dir).unwrap();
}

/// The relative modules a page script imports: every string after `from`, `import` or
/// `import(` in code (comments skipped, other strings and template literals not read as imports)
/// that starts with `.`.
fn js_imports(src: &str) -> Vec<String> {
    let b = src.as_bytes();
    let (mut i, mut code, mut found) = (0, String::new(), Vec::new());
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if matches!(b[i], b'"' | b'\'' | b'`') {
            let q = b[i];
            let start = i + 1;
            i = start;
            while i < b.len() && b[i] != q {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            let text = &src[start..i.min(b.len())];
            let before = code.trim_end();
            let after_import = before.ends_with("from")
                || before.ends_with("import")
                || before.ends_with("import(");
            if q != b'`' && after_import && text.starts_with('.') {
                found.push(text.to_string());
            }
            code.push_str(" \"\" ");
            i += 1;
        } else {
            code.push(b[i] as char);
            i += 1;
        }
    }
    found
}

/// Arrows between the page's own scripts under `dir` (generated `pkg/` files are leaves).
fn js_arrows(dir: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && p.file_name().is_some_and(|n| n != "pkg") {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "js") {
                files.push(p);
            }
        }
    }
    let mut arrows = BTreeMap::new();
    for f in files {
        let to = js_imports(&fs::read_to_string(&f).unwrap())
            .into_iter()
            .map(|m| {
                let mut p = f.parent().unwrap().to_path_buf();
                for part in m.split('/') {
                    match part {
                        "." => {}
                        ".." => {
                            p.pop();
                        }
                        _ => p.push(part),
                    }
                }
                p
            })
            .collect();
        arrows.insert(f, to);
    }
    arrows
}

#[test]
fn no_import_circle_between_the_pages_scripts() {
    let arrows = js_arrows(&root().join("web"));
    assert!(arrows.len() >= 10, "the page's scripts were not found");
    assert!(
        arrows.values().map(BTreeSet::len).sum::<usize>() >= 20,
        "the page's imports were not read"
    );
    let found: Vec<String> = circles(&arrows)
        .iter()
        .map(|scc| scc.iter().map(|p| rel(p)).collect::<Vec<_>>().join(" ↔ "))
        .collect();
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

/// The page's checker sees a circle where there is one (a multi-line import and a dynamic
/// one), and none where the other file is named only in a comment or an ordinary string.
#[test]
fn the_page_circle_check_finds_a_planted_circle() {
    let dir = std::env::temp_dir().join(format!("pm-house-js-{}", std::process::id()));
    fs::create_dir_all(dir.join("flows")).unwrap();
    fs::write(
        dir.join("a.js"),
        "import {\n  x,\n  y,\n} from \"./flows/b.js\";\nexport const a = 1;\n",
    )
    .unwrap();
    fs::write(
        dir.join("flows/b.js"),
        "export const x = 1, y = 2;\nconst m = await import('../a.js');\n",
    )
    .unwrap();
    assert_eq!(
        circles(&js_arrows(&dir)),
        vec![vec![dir.join("a.js"), dir.join("flows/b.js")]]
    );
    fs::write(
        dir.join("flows/b.js"),
        "// import { a } from \"../a.js\";\nexport const x = 1, y = \"../a.js\";\n",
    )
    .unwrap();
    assert!(circles(&js_arrows(&dir)).is_empty());
    fs::remove_dir_all(&dir).unwrap();
}

/// The crates of the workspace other than `own` that the manifest at `manifest` (from the
/// repository's root) names: by their workspace name (`pir.workspace = true`, `pir = {…}`) or
/// by any `path =` dependency.
fn workspace_crates_named(manifest: &str, own: &str) -> Vec<String> {
    let manifest = fs::read_to_string(root().join(manifest)).unwrap();
    let workspace = fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let ours: Vec<&str> = workspace
        .lines()
        .filter(|l| l.contains("path = \"") && l.contains("package = \"privatemail-"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(ours.len() >= 6, "the workspace's own crates: {ours:?}");
    assert!(ours.contains(&own), "{own} is not a crate of the workspace");
    let mut named: Vec<String> = ours
        .into_iter()
        .filter(|&dep| dep != own)
        .filter(|dep| {
            manifest
                .lines()
                .any(|l| l.starts_with(&format!("{dep}.")) || l.starts_with(&format!("{dep} =")))
        })
        .map(String::from)
        .collect();
    named.extend(
        manifest
            .lines()
            .filter(|l| l.contains("path ="))
            .map(|l| l.trim().to_string()),
    );
    named
}

/// The wire is the bottom layer: its manifest names no other crate of the workspace.
#[test]
fn the_wire_depends_on_no_other_crate_of_the_workspace() {
    let named = workspace_crates_named("shared/Cargo.toml", "shared");
    assert!(named.is_empty(), "shared depends on {named:?}");
}

/// The lattice maths sits beneath the PIR schemes: its manifest names no other crate of the
/// workspace.
#[test]
fn the_lattice_maths_depends_on_no_other_crate_of_the_workspace() {
    let named = workspace_crates_named("crates/lattice/Cargo.toml", "lattice");
    assert!(named.is_empty(), "lattice depends on {named:?}");
    // The check sees a dependency where there is one: pir's manifest names lattice.
    assert_eq!(
        workspace_crates_named("crates/pir/Cargo.toml", "pir"),
        vec!["lattice".to_string()]
    );
}

/// Every file path and every module ARCHITECTURE.md names in backticks exists.
#[test]
fn every_path_and_module_architecture_names_exists() {
    let doc = fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let crates = crates();
    // Library name → its crate (lib roots only).
    let libs: BTreeMap<String, &Crate> = members()
        .iter()
        .filter_map(|m| {
            let manifest = fs::read_to_string(m.join("Cargo.toml")).ok()?;
            let lib = manifest.split("[lib]").nth(1).and_then(|s| {
                s.lines().find(|l| l.starts_with("name = ")).map(|l| {
                    l.trim_start_matches("name = ")
                        .trim_matches('"')
                        .to_string()
                })
            });
            let name =
                lib.unwrap_or_else(|| m.file_name().unwrap().to_string_lossy().replace('-', "_"));
            let c = crates.iter().find(|c| c.root == m.join("src/lib.rs"))?;
            Some((name, c))
        })
        .collect();
    assert!(libs.contains_key("shared") && libs.contains_key("pir"));
    let mut missing = Vec::new();
    let (mut paths, mut modules) = (0, 0);
    for span in doc.split('`').skip(1).step_by(2) {
        let span = span.trim();
        let is_path = !span.contains(' ')
            && (span.ends_with('/')
                || [
                    ".rs", ".md", ".sh", ".js", ".toml", ".html", ".bin", ".json",
                ]
                .iter()
                .any(|x| span.ends_with(x)))
            && !span.starts_with("http")
            && !span.contains('*')
            && !span.contains('{');
        if is_path {
            paths += 1;
            // Paths are from the repository's root, or (for a file a crate holds) from the
            // crate's folder, as the code map writes them under a crate's heading.
            let found = root().join(span).exists()
                || members().iter().any(|m| m.join(span).exists())
                || root()
                    .join("..")
                    .join(span.trim_start_matches("../"))
                    .exists();
            if !found {
                missing.push(span.to_string());
            }
            continue;
        }
        let segs: Vec<&str> = span.split("::").collect();
        let is_module = segs.len() >= 2
            && segs
                .iter()
                .all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
        if let (true, Some(c)) = (is_module, libs.get(segs[0])) {
            modules += 1;
            let path: Vec<String> = segs[1..].iter().map(|s| s.to_string()).collect();
            let module = c.modules.contains_key(&path);
            // Or an item (a function, a constant's module) of the module before it.
            let item = path.len() >= 2
                && c.modules.get(&path[..path.len() - 1]).is_some_and(|f| {
                    let code = fs::read_to_string(f).unwrap();
                    let last = &path[path.len() - 1];
                    code.contains(&format!("fn {last}"))
                        || code.contains(&format!("mod {last}"))
                        || code.contains(&format!("const {last}"))
                });
            let root_item = path.len() == 1 && {
                let code = fs::read_to_string(&c.root).unwrap();
                code.contains(&format!("fn {}", path[0]))
                    || code.contains(&format!("mod {}", path[0]))
            };
            if !(module || item || root_item) {
                missing.push(span.to_string());
            }
        }
    }
    assert!(
        paths >= 20 && modules >= 20,
        "{paths} paths, {modules} modules read"
    );
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names what does not exist: {missing:?}"
    );
}
