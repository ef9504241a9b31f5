//! Row shards behind a front (`server serve --shard-rows i/S`, `server front --shards …
//! --public …`; `pir::shard`, `privatemail_server::front`): the CLI's PIR searches through a
//! front over three shards and a whole replica return what one process returns, with the same
//! bytes up and down, by the table and by the encrypted scores; a shard holds its rows and no
//! public file (no hint, no route but answers and `/status`) and, once they are built, none
//! of the gallery's items; a shard killed makes the front
//! answer a 502 JSON error and the CLI say so, never a wrong result.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use privatemail_e2e::{photo_png, start_server_logged, workspace_bin, Server};
use serde_json::Value;

use crate::cli::{ids, Cli};
use crate::scale::{build, tmp};

const SHARDS: usize = 3;

/// A replica of `store` with `extra` arguments.
fn replica(store: &Path, key: &Path, cache: &Path, extra: &[&str]) -> Server {
    let mut args = vec![
        "--from",
        store.to_str().unwrap(),
        "--identity-key",
        key.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    start_server_logged(&args, &[])
}

/// `server front` over `shards`, killed on drop; its base URL.
struct Front {
    _child: crate::object_store::Killed,
    base: String,
}

fn front(shards: &[&Server], public: &Server) -> Front {
    let list: Vec<&str> = shards.iter().map(|s| s.base.as_str()).collect();
    let mut child = Command::new(workspace_bin("server"))
        .args([
            "front",
            "--bind",
            "127.0.0.1:0",
            "--shards",
            &list.join(","),
            "--public",
            &public.base,
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the front");
    // The server logs to stdout: the line naming its address comes there.
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let base = loop {
        let line = lines
            .next()
            .expect("the front exited before listening")
            .unwrap();
        if let Some(b) = line.trim().strip_prefix("listening on ") {
            break b.to_string();
        }
    };
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    Front {
        _child: crate::object_store::Killed(child),
        base,
    }
}

/// `privatemail search PHOTO --protocol pir --json` against `base` with `extra` arguments.
fn pir_search(cli: &Cli, photo: &Path, base: &str, extra: &[&str]) -> Value {
    let out = cli.pir_search(photo, base, extra);
    assert!(
        out.status.success(),
        "{extra:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

#[test]
fn a_front_over_row_shards_answers_as_one_process_and_a_shard_down_is_a_502() {
    let store = tmp("shards-store");
    let s = store.to_str().unwrap();
    build(&["--out", s, "--shard", "0/1"]);
    let work = tmp("shards-work");
    build(&[
        "--out",
        s,
        "--join",
        "1",
        "--work-dir",
        work.to_str().unwrap(),
    ]);
    let dir = tmp("shards-run");
    let key = dir.join("gallery.key");
    std::fs::write(&key, [7u8; 32]).unwrap();
    let one = replica(&store, &key, &dir.join("cache-one"), &[]);
    let mut shards: Vec<Server> = (0..SHARDS)
        .map(|i| {
            let slice = format!("{i}/{SHARDS}");
            replica(
                &store,
                &key,
                &dir.join(format!("cache-{i}")),
                &["--shard-rows", &slice],
            )
        })
        .collect();
    // Given in reverse order: the parts say which rows they hold. The one process is the
    // whole replica that serves everything but the answers.
    let f = front(&shards.iter().rev().collect::<Vec<_>>(), &one);

    // Each shard holds a third of the rows and none of the public files: no hint, no scores'
    // public file, and no route to any (a JSON 404); it answers only parts, which no client
    // can read.
    let status = |base: &str| -> Value {
        reqwest::blocking::get(format!("{base}/api/v1/status"))
            .unwrap()
            .json()
            .unwrap()
    };
    let (whole, public) = {
        let pir = &status(&one.base)["pir"];
        (
            pir["database_bytes"].as_u64().unwrap(),
            pir["hint_bytes"].as_u64().unwrap(),
        )
    };
    assert!(public > 0, "the whole replica holds the hints");
    let version = status(&one.base)["pir"]["version"]
        .as_str()
        .unwrap()
        .to_string();
    let items = status(&one.base)["catalogue_items"].as_u64().unwrap();
    assert!(items > 0, "the whole replica holds the catalogue");
    for sh in &shards {
        // Once its databases are built a shard lets go of the gallery's items and embedding
        // (`AppState::shed_gallery_if_shard`), just after it starts listening.
        let t = std::time::Instant::now();
        let held = loop {
            let st = status(&sh.base);
            let held = (
                st["catalogue_items"].as_u64(),
                st["snapshot_items"].as_u64(),
            );
            if held == (Some(0), Some(0)) || t.elapsed() > Duration::from_secs(60) {
                break held;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(
            held,
            (Some(0), Some(0)),
            "a shard keeps the gallery's items (the whole replica's: {items})"
        );
        let pir = &status(&sh.base)["pir"];
        let held = pir["database_bytes"].as_u64().unwrap();
        assert!(
            held * 2 < whole,
            "a shard holds {held} of the databases' {whole} bytes"
        );
        assert_eq!(
            pir["hint_bytes"], 0,
            "a shard holds public files (the whole replica's: {public} bytes)"
        );
        for path in [
            "/api/v1/pir".to_string(),
            format!("/api/v1/pir/{version}/thumbs/hint"),
            format!("/api/v1/pir/{version}/scores/hint"),
            "/api/v1/partition".to_string(),
        ] {
            let r = reqwest::blocking::get(format!("{}{path}", sh.base)).unwrap();
            assert_eq!(r.status().as_u16(), 404, "a shard's {path}");
            let body: Value = r.json().unwrap();
            assert_eq!(body["error"]["code"], "not_found", "{path}: {body}");
        }
    }

    let (cli_one, cli_front) = (Cli::new("shards-one"), Cli::new("shards-front"));
    let photos = cli_one.state.join("photos");
    for i in [5000usize, 7777, 9001] {
        let p = photo_png(&photos, i);
        for extra in [
            &[][..],
            &["--pir-ranking", "scores", "--max-kib", "4096"][..],
        ] {
            let want = pir_search(&cli_one, &p, &one.base, extra);
            let got = pir_search(&cli_front, &p, &f.base, extra);
            assert_eq!(ids(&got), ids(&want), "photo {i} {extra:?}");
            assert_eq!(
                got["pir"]["plan"], want["pir"]["plan"],
                "photo {i} {extra:?}"
            );
            for k in ["bytes_up", "bytes_down"] {
                assert_eq!(got["pir"][k], want["pir"][k], "photo {i} {extra:?}: {k}");
            }
            if !extra.is_empty() {
                assert_eq!(want["pir"]["plan"]["ranking"]["kind"], "scores");
            }
        }
    }

    // A shard down: the front answers 502 with a JSON error, and the CLI says so.
    shards[1].kill9();
    let p = photo_png(&photos, 5000);
    let out = cli_front.run(&[
        "search",
        p.to_str().unwrap(),
        "--server",
        &f.base,
        "--protocol",
        "pir",
        "--json",
    ]);
    assert!(
        !out.status.success(),
        "a search with a shard down succeeded"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("502"), "{err}");
    assert!(err.contains("shard"), "{err}");
    let pir: Value = reqwest::blocking::get(format!("{}/api/v1/pir", f.base))
        .unwrap()
        .json()
        .unwrap();
    let url = format!(
        "{}/api/v1/pir/{}/thumbs",
        f.base,
        pir["version"].as_str().unwrap()
    );
    // Any body: the shards still up refuse it, but the one down decides.
    let r = reqwest::blocking::Client::new()
        .post(url)
        .header("content-type", "application/octet-stream")
        .body(vec![0u8; 8])
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 502);
    let body: Value = r.json().unwrap();
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
}
