//! The block store: partition versions are written before they are announced, a restart
//! serves the announced version without rebuilding, a process killed anywhere in a rebuild
//! leaves one whole version served after restart (never a mix), and a replaced version's
//! files leave the store only after the grace period.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use privatemail_e2e::{
    add_test_image, get_json, gunzip, start_server_env, status_json, temp_store, Server,
};
use reqwest::blocking::Client;
use serde_json::Value;
use shared::api::PartitionDoc;

const TOKEN: &str = "t";

fn args(store: &Path, grace: &str) -> Vec<String> {
    [
        "--gallery-size",
        "600",
        "--anchors",
        "100",
        "--store",
        store.to_str().unwrap(),
        "--admin-token",
        TOKEN,
        "--partition-grace-secs",
        grace,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// [`args`] with the blocks' memory budget set to `mib`.
fn budget_args(store: &Path, mib: &str) -> Vec<String> {
    let mut a = args(store, "600");
    a.extend(["--blocks-cache-mib".to_string(), mib.to_string()]);
    a
}

fn start(store: &Path, grace: &str, env: &[(&str, &str)]) -> Server {
    let a = args(store, grace);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    start_server_env(&a, env)
}

fn blocks_dir(store: &Path) -> PathBuf {
    store.with_extension("blocks")
}

fn doc(http: &Client, base: &str) -> PartitionDoc {
    get_json(http, base, "/api/v1/partition")
}

/// Fetch every block of the served document and check each against the document's hash:
/// the server serves one whole version. Returns the document.
fn assert_whole_version(http: &Client, base: &str) -> PartitionDoc {
    let d = doc(http, base);
    let mut items = 0;
    for (li, level) in d.levels.iter().enumerate() {
        for b in 0..level.blocks {
            let url = format!("{base}{}", client::block_search::block_url(&d, li, b));
            let r = http.get(&url).send().unwrap();
            assert_eq!(r.status().as_u16(), 200, "{url}");
            let bytes = r.bytes().unwrap();
            let block = publish::blocks::decode(&bytes, Some(&level.hashes[b as usize]))
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            if level.whole {
                items = block.ids.len();
            }
        }
    }
    assert_eq!(items, d.gallery_size, "the whole level holds the gallery");
    d
}

fn add_image(http: &Client, base: &str, i: usize) {
    add_test_image(http, base, TOKEN, i);
}

/// Wait until the served partition has `size` items.
fn wait_for_size(http: &Client, base: &str, size: usize) -> PartitionDoc {
    let t = Instant::now();
    loop {
        let d = doc(http, base);
        if d.gallery_size == size {
            return d;
        }
        assert!(
            t.elapsed() < Duration::from_secs(180),
            "no partition of {size} items: {}",
            d.gallery_size
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Bytes of block files the server keeps mapped (`/status`).
fn kept_map_bytes(http: &Client, base: &str) -> u64 {
    status_json(http, base)["partition"]["kept_map_bytes"]
        .as_u64()
        .expect("kept_map_bytes in /status")
}

fn startup(http: &Client, base: &str) -> Value {
    status_json(http, base)["startup"].clone()
}

fn version_dirs(store: &Path) -> Vec<(String, bool)> {
    let mut v: Vec<(String, bool)> = std::fs::read_dir(blocks_dir(store))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| {
            let complete = e.path().join("partition.json").exists();
            (e.file_name().to_string_lossy().into_owned(), complete)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_restart_serves_the_announced_version_without_rebuilding() {
    let store = temp_store("bs-restart");
    // Responses as sent: no automatic gzip decoding (the workspace's reqwest has the `gzip`
    // feature, which the CLI uses).
    let http = Client::builder().no_gzip().build().unwrap();
    let first = {
        let s = start(&store, "600", &[]);
        let st = startup(&http, &s.base);
        assert_eq!(st["partition_reused"], false, "{st}");
        assert_whole_version(&http, &s.base)
    };
    let s = start(&store, "600", &[]);
    let st = startup(&http, &s.base);
    assert_eq!(st["partition_reused"], true, "{st}");
    assert_eq!(st["partition_stale"], false, "{st}");
    let again = assert_whole_version(&http, &s.base);
    assert_eq!(again, first, "the same document, byte for byte in meaning");
    drop(s);
    // Over the memory budget: every block is read from the store per request (only the file
    // asked for, checked against the version's CRC-32), the same bytes plain and gzip.
    let over = budget_args(&store, "0");
    let over: Vec<&str> = over.iter().map(String::as_str).collect();
    let s = start_server_env(&over, &[]);
    assert_eq!(assert_whole_version(&http, &s.base), first);
    let v = &first.version;
    let level = first.levels.iter().position(|l| !l.whole).unwrap();
    let get = |base: &str, block: usize, gzip: bool, etag: Option<&str>| {
        let mut r = http.get(format!("{base}/api/v1/blocks/{v}/{level}/{block}"));
        if gzip {
            r = r.header("accept-encoding", "gzip");
        }
        if let Some(e) = etag {
            r = r.header("if-none-match", e);
        }
        r.send().unwrap()
    };
    let gz = get(&s.base, 0, true, None);
    assert_eq!(gz.status().as_u16(), 200);
    assert_eq!(gz.headers()["content-encoding"], "gzip");
    let plain = gunzip(&gz.bytes().unwrap());
    publish::blocks::decode(&plain, Some(&first.levels[level].hashes[0])).unwrap();
    assert_eq!(
        kept_map_bytes(&http, &s.base),
        0,
        "a budget of 0 keeps no mapping"
    );
    drop(s);
    // A budget of 1 MiB, below the version's block bytes: the PIR build at start-up read every
    // block of its levels without keeping a mapping, and a GET of every block file keeps at
    // most 1 MiB mapped; every file is still served, checked, past the bound.
    let budget = budget_args(&store, "1");
    let budget: Vec<&str> = budget.iter().map(String::as_str).collect();
    let s = start_server_env(&budget, &[]);
    let part = status_json(&http, &s.base)["partition"].clone();
    let total = part["bytes"].as_u64().unwrap() + part["transfer_bytes"].as_u64().unwrap();
    assert!(total > 2 << 20, "twice the budget at least: {total} bytes");
    assert_eq!(
        kept_map_bytes(&http, &s.base),
        0,
        "nothing kept by the start-up"
    );
    // Every file of every level: more than 2 MiB, so the bound is reached.
    for (l, ld) in first.levels.iter().enumerate() {
        for (block, hash) in ld.hashes.iter().enumerate() {
            for gzip in [false, true] {
                let mut r = http.get(format!("{}/api/v1/blocks/{v}/{l}/{block}", s.base));
                if gzip {
                    r = r.header("accept-encoding", "gzip");
                }
                let r = r.send().unwrap();
                assert_eq!(r.status().as_u16(), 200, "level {l} block {block}");
                let body = r.bytes().unwrap();
                let plain = if gzip { gunzip(&body) } else { body.to_vec() };
                publish::blocks::decode(&plain, Some(hash)).unwrap();
            }
        }
    }
    let kept = kept_map_bytes(&http, &s.base);
    assert!(kept > 0 && kept <= 1 << 20, "kept {kept} bytes");
    drop(s);
    // A damaged stored file is never served. Block 0's plain file and block 1's gzip file
    // are damaged; each request is checked on exactly the file it sends.
    let dir = blocks_dir(&store).join(v).join(level.to_string());
    for name in ["0", "1.gz"] {
        let mut bytes = std::fs::read(dir.join(name)).unwrap();
        bytes[40] ^= 0xff;
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    let refused = |r: reqwest::blocking::Response, check: &str| {
        assert_eq!(r.status().as_u16(), 500);
        // An error is JSON like every answer: compressed too when the client takes gzip.
        let gzipped = r
            .headers()
            .get("content-encoding")
            .is_some_and(|v| v == "gzip");
        let body = r.bytes().unwrap();
        let body = if gzipped {
            gunzip(&body)
        } else {
            body.to_vec()
        };
        let e: Value = serde_json::from_slice(&body).unwrap();
        let msg = e["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains(check), "{e}");
    };
    // (A budget of 1 MiB: the files asked for here fit in it, so their mappings are kept.)
    let s = start_server_env(&budget, &[]);
    refused(get(&s.base, 0, false, None), "CRC-32");
    assert_eq!(get(&s.base, 0, true, None).status().as_u16(), 200);
    refused(get(&s.base, 1, true, None), "CRC-32");
    assert_eq!(get(&s.base, 1, false, None).status().as_u16(), 200);
    // Checked when first sent, then sent from the kept mapping: a file replaced afterwards
    // (written aside and renamed, as the store writes) does not change what is sent; a new
    // process checks the new file and refuses it.
    let sent = get(&s.base, 3, true, None).bytes().unwrap();
    let mut bytes = sent.to_vec();
    bytes[40] ^= 0xff;
    std::fs::write(dir.join("3.gz.new"), bytes).unwrap();
    std::fs::rename(dir.join("3.gz.new"), dir.join("3.gz")).unwrap();
    assert_eq!(get(&s.base, 3, true, None).bytes().unwrap(), sent);
    // A revalidation is answered from the document: 304, no file read.
    let etag = format!("\"{}\"", first.levels[level].hashes[0]);
    assert_eq!(get(&s.base, 0, false, Some(&etag)).status().as_u16(), 304);
    drop(s);
    let s = start_server_env(&over, &[]);
    refused(get(&s.base, 3, true, None), "CRC-32");
    drop(s);
    // Held in memory once read: both files read, the plain one SHA-256-checked and the gzip
    // one CRC-32-checked.
    let s = start(&store, "600", &[]);
    refused(get(&s.base, 0, true, None), "SHA-256");
    refused(get(&s.base, 3, false, None), "CRC-32");
    drop(s);
    // A version stored without checksums (older code): SHA-256 per read, still refused.
    std::fs::remove_file(blocks_dir(&store).join(v).join("checksums.json")).unwrap();
    let s = start_server_env(&over, &[]);
    assert_eq!(startup(&http, &s.base)["partition_reused"], true);
    refused(get(&s.base, 0, true, None), "SHA-256");
    let ok = get(&s.base, 2, true, None);
    assert_eq!(ok.status().as_u16(), 200);
    let plain = gunzip(&ok.bytes().unwrap());
    publish::blocks::decode(&plain, Some(&first.levels[level].hashes[2])).unwrap();
    std::fs::remove_dir_all(store.parent().unwrap()).ok();
}

/// A version over the memory budget is streamed to the store while it is built (a staging
/// prefix, renamed to the version once its hash is known): the same document and the same
/// blocks as a build held in memory, nothing left under a staging prefix, and the streamed
/// version is what a restart serves.
#[test]
fn a_version_over_the_memory_budget_is_streamed_to_the_store_identically() {
    let http = Client::new();
    let held = {
        let store = temp_store("bs-held");
        let s = start(&store, "600", &[]);
        let d = assert_whole_version(&http, &s.base);
        drop(s);
        std::fs::remove_dir_all(store.parent().unwrap()).ok();
        d
    };
    let store = temp_store("bs-stream");
    let a = budget_args(&store, "0");
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let s = start_server_env(&a, &[]);
    assert_eq!(startup(&http, &s.base)["partition_reused"], false);
    assert_eq!(assert_whole_version(&http, &s.base), held);
    assert_eq!(
        version_dirs(&store),
        vec![(held.version.clone(), true)],
        "one complete version, no staging prefix left"
    );
    drop(s);
    let s = start_server_env(&a, &[]);
    assert_eq!(startup(&http, &s.base)["partition_reused"], true);
    assert_eq!(assert_whole_version(&http, &s.base), held);
    std::fs::remove_dir_all(store.parent().unwrap()).ok();
}

/// A rebuild crashed (abort, as kill -9) after the new version's blocks were written, and
/// after its document was written but before it was announced; and real SIGKILLs at
/// several moments of a rebuild. Each time the restart serves one whole version — the old
/// one at once (the gallery changed, so it is stale), then the rebuilt one — never a mix.
#[test]
fn a_crash_during_a_rebuild_leaves_one_whole_version_served() {
    let store = temp_store("bs-crash");
    let http = Client::new();
    let mut size = 600;
    let v1 = {
        let s = start(&store, "600", &[]);
        assert_whole_version(&http, &s.base).version
    };
    let mut served = v1.clone();
    for (n, point) in ["blocks-written", "document-written"].iter().enumerate() {
        let mut s = start(&store, "600", &[("PM_CRASH_AT", point)]);
        add_image(&http, &s.base, 7000 + n);
        size += 1;
        let exit = s
            .wait_exit(Duration::from_secs(180))
            .expect("the rebuild reaches the crash point");
        assert!(!exit.success(), "{point}: aborted");
        // The new version's files are there but it was never announced.
        let dirs = version_dirs(&store);
        assert!(dirs.len() >= 2, "{point}: {dirs:?}");
        let s = start(&store, "600", &[]);
        let st = startup(&http, &s.base);
        assert_eq!(st["partition_stale"], true, "{point}: {st}");
        let d = assert_whole_version(&http, &s.base);
        assert_eq!(
            d.version, served,
            "{point}: the announced version is served"
        );
        let d = wait_for_size(&http, &s.base, size);
        served = assert_whole_version(&http, &s.base).version;
        assert_eq!(d.version, served);
    }
    // SIGKILL at several moments of a rebuild (the partition of 600 items takes about a
    // second to build and write).
    for (n, ms) in [150u64, 500, 900, 1400].iter().enumerate() {
        let mut s = start(&store, "600", &[]);
        add_image(&http, &s.base, 7100 + n);
        size += 1;
        std::thread::sleep(Duration::from_millis(*ms));
        s.kill9();
        let s = start(&store, "600", &[]);
        let d = assert_whole_version(&http, &s.base);
        assert!(
            d.gallery_size == size || d.gallery_size == size - 1,
            "after kill at {ms} ms: {} items",
            d.gallery_size
        );
        wait_for_size(&http, &s.base, size);
        assert_whole_version(&http, &s.base);
    }
    std::fs::remove_dir_all(store.parent().unwrap()).ok();
}

/// A replaced version is served (and kept in the store) for the grace period from its
/// replacement, then answered 410 and deleted from the store; the current one never is.
#[test]
fn replaced_versions_leave_the_store_after_the_grace_period() {
    let store = temp_store("bs-gc");
    let http = Client::new();
    let s = start(&store, "2", &[]);
    let v1 = assert_whole_version(&http, &s.base).version;
    add_image(&http, &s.base, 7200);
    let v2 = wait_for_size(&http, &s.base, 601).version;
    assert_ne!(v1, v2);
    // Within the grace period: both kept and served.
    let names: Vec<String> = version_dirs(&store).into_iter().map(|(v, _)| v).collect();
    assert!(names.contains(&v1) && names.contains(&v2), "{names:?}");
    std::thread::sleep(Duration::from_millis(2500));
    // The next rebuild collects the expired version.
    add_image(&http, &s.base, 7201);
    let v3 = wait_for_size(&http, &s.base, 602).version;
    let t = Instant::now();
    loop {
        let names: Vec<String> = version_dirs(&store).into_iter().map(|(v, _)| v).collect();
        if !names.contains(&v1) {
            assert!(names.contains(&v2) && names.contains(&v3), "{names:?}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{v1} not deleted: {names:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = http
        .get(format!("{}/api/v1/blocks/{v1}/1/0", s.base))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 410);
    assert_whole_version(&http, &s.base);
    std::fs::remove_dir_all(store.parent().unwrap()).ok();
}
