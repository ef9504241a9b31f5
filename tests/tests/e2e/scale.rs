//! The build as a batch job and stateless replicas (`server build`, `server serve --from`;
//! `privatemail_server::batch`): a worker run twice writes the same bytes; three workers
//! joined announce the very manifest one worker does; replicas started from the store serve
//! that version with one shared key and write nothing to the store; a damaged object or a
//! missing key stops a replica before it listens.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use privatemail_e2e::{start_server_logged, workspace_bin};
use serde_json::Value;

const SIZE: &str = "1000";
const ANCHORS: &str = "200";

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pm-scale-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `server build` with `args`; panics with its output unless it succeeds.
fn build(args: &[&str]) -> String {
    let out = Command::new(workspace_bin("server"))
        .arg("build")
        .args(args)
        .args(["--gallery-size", SIZE, "--anchors", ANCHORS])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run server build");
    assert!(
        out.status.success(),
        "server build {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every file under `dir` by relative path, with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, d: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn current(out: &Path) -> String {
    let c: Value =
        serde_json::from_slice(&std::fs::read(out.join("CURRENT.json")).unwrap()).unwrap();
    c["manifest"].as_str().unwrap().to_string()
}

/// One store built by three workers and the join, shared by the replica tests: its path
/// and its announced manifest.
fn built() -> &'static (PathBuf, String) {
    static BUILT: OnceLock<(PathBuf, String)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = tmp("three");
        let o = out.to_str().unwrap();
        for i in 0..3 {
            build(&["--out", o, "--shard", &format!("{i}/3")]);
        }
        let work = tmp("three-work");
        build(&[
            "--out",
            o,
            "--join",
            "3",
            "--work-dir",
            work.to_str().unwrap(),
        ]);
        let sha = current(&out);
        (out, sha)
    })
}

#[test]
fn a_worker_run_again_writes_the_same_bytes_and_three_workers_join_to_one_workers_manifest() {
    let one = tmp("one");
    let o = one.to_str().unwrap();
    build(&["--out", o, "--shard", "0/1"]);
    let first = files(&one);
    assert_eq!(
        first.keys().filter(|k| k.starts_with("objects/")).count(),
        1,
        "{:?}",
        first.keys()
    );
    build(&["--out", o, "--shard", "0/1"]);
    assert_eq!(files(&one), first, "a re-run worker wrote other bytes");
    let work = tmp("one-work");
    build(&[
        "--out",
        o,
        "--join",
        "1",
        "--work-dir",
        work.to_str().unwrap(),
    ]);
    let sha = current(&one);
    let manifest = std::fs::read(one.join(format!("manifests/{sha}.json"))).unwrap();
    let m: Value = serde_json::from_slice(&manifest).unwrap();
    assert_eq!(m["items"], 1000);
    // Every object the manifest names exists, and the partition is announced in its prefix.
    assert!(one.join(m["catalogue"].as_str().unwrap()).is_file());
    let blocks = one.join(m["blocks"].as_str().unwrap());
    let announced: Value =
        serde_json::from_slice(&std::fs::read(blocks.join("CURRENT.json")).unwrap()).unwrap();
    assert_eq!(announced["version"], m["partition_version"]);

    let (three, sha3) = built();
    assert_eq!(&sha, sha3, "N=1 and N=3 announce different manifests");
    assert_eq!(
        std::fs::read(three.join(format!("manifests/{sha3}.json"))).unwrap(),
        manifest
    );
    // The joined catalogue is the same object whatever N was.
    let cat = m["catalogue"].as_str().unwrap();
    assert_eq!(
        std::fs::read(three.join(cat)).unwrap(),
        std::fs::read(one.join(cat)).unwrap()
    );
}

fn key_file(dir: &Path) -> PathBuf {
    let p = dir.join("gallery.key");
    // A fixed test key: what matters is that the replicas share it.
    std::fs::write(&p, [7u8; 32]).unwrap();
    p
}

fn get(base: &str, path: &str) -> Value {
    let r = reqwest::blocking::get(format!("{base}{path}")).unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.json().unwrap()
}

#[test]
fn replicas_from_the_store_serve_its_version_with_one_key_and_write_nothing_there() {
    let (out, sha) = built();
    let before = files(out);
    let dir = tmp("replicas");
    let key = key_file(&dir);
    let m: Value =
        serde_json::from_slice(&std::fs::read(out.join(format!("manifests/{sha}.json"))).unwrap())
            .unwrap();
    let replicas: Vec<_> = (0..2)
        .map(|i| {
            let cache = dir.join(format!("cache-{i}"));
            let t = std::time::Instant::now();
            let s = start_server_logged(
                &[
                    "--from",
                    out.to_str().unwrap(),
                    "--identity-key",
                    key.to_str().unwrap(),
                    "--cache-dir",
                    cache.to_str().unwrap(),
                ],
                &[],
            );
            eprintln!(
                "replica {i} listening {:.2} s after start",
                t.elapsed().as_secs_f64()
            );
            s
        })
        .collect();
    let ids: Vec<Value> = replicas
        .iter()
        .map(|s| get(&s.base, "/api/v1/identity"))
        .collect();
    assert_eq!(ids[0], ids[1], "replicas of one origin sign with one key");
    for s in &replicas {
        let part = get(&s.base, "/api/v1/partition");
        assert_eq!(part["version"], m["partition_version"]);
        assert_eq!(part["gallery_size"], 1000);
        assert_eq!(
            get(&s.base, "/api/v1/config"),
            get(&replicas[0].base, "/api/v1/config")
        );
    }
    // Adding images is off on a replica: the gallery changes only by a new build.
    let r = reqwest::blocking::Client::new()
        .delete(format!("{}/api/v1/gallery/1", replicas[0].base))
        .bearer_auth("x")
        .send()
        .unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());
    drop(replicas);
    assert_eq!(
        files(out),
        before,
        "a replica wrote to the store it follows"
    );
}

#[test]
fn a_replica_refuses_a_damaged_catalogue_and_a_missing_key() {
    let (out, sha) = built();
    let dir = tmp("damaged");
    let key = key_file(&dir);
    // A copy of the store whose catalogue object has one byte changed.
    let copy = dir.join("store");
    for (rel, bytes) in files(out) {
        let p = copy.join(&rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    let m: Value =
        serde_json::from_slice(&std::fs::read(out.join(format!("manifests/{sha}.json"))).unwrap())
            .unwrap();
    let cat = copy.join(m["catalogue"].as_str().unwrap());
    let mut b = std::fs::read(&cat).unwrap();
    let at = b.len() / 2;
    b[at] ^= 1;
    std::fs::write(&cat, b).unwrap();
    let run = |from: &Path, extra: &[&str]| {
        Command::new(workspace_bin("server"))
            .args([
                "serve",
                "--bind",
                "127.0.0.1:0",
                "--from",
                from.to_str().unwrap(),
            ])
            .args(["--cache-dir", dir.join("cache").to_str().unwrap()])
            .args(extra)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    };
    let damaged = run(&copy, &["--identity-key", key.to_str().unwrap()]);
    assert!(!damaged.status.success());
    let err = String::from_utf8_lossy(&damaged.stderr);
    assert!(err.contains("does not match its hash"), "{err}");
    // The intact store: only the key is missing.
    let missing = run(
        out,
        &["--identity-key", dir.join("no.key").to_str().unwrap()],
    );
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("no.key"), "{err}");
    let none = run(out, &[]);
    assert!(
        !none.status.success(),
        "a replica without --identity-key started"
    );
}

/// A replica on a fixed port (HAProxy's configuration names it), its output read by a thread.
struct Replica {
    child: std::process::Child,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn replica(store: &Path, key: &Path, cache: &Path, port: u16) -> Replica {
    use std::io::BufRead;
    let mut child = Command::new(workspace_bin("server"))
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .args(["--from", store.to_str().unwrap()])
        .args(["--identity-key", key.to_str().unwrap()])
        .args(["--cache-dir", cache.to_str().unwrap()])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start a replica");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = lines
            .next()
            .expect("the replica exited before listening")
            .unwrap();
        if line.starts_with("listening on ") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines.by_ref() {});
    Replica { child }
}

/// HAProxy's row for server `name` in its CSV statistics: (status, total sessions).
fn lb_server(stats: &str, name: &str) -> (String, u64) {
    let csv = reqwest::blocking::get(format!("http://{stats}/stats;csv"))
        .unwrap()
        .text()
        .unwrap();
    let head: Vec<&str> = csv
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("# ")
        .split(',')
        .collect();
    let col = |c: &str| head.iter().position(|h| *h == c).unwrap();
    let row: Vec<&str> = csv
        .lines()
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|r| r[0] == "replicas" && r[1] == name)
        .unwrap_or_else(|| panic!("no {name} in {csv}"));
    (
        row[col("status")].to_string(),
        row[col("stot")].parse().unwrap(),
    )
}

/// `deploy/haproxy.cfg` in front of three replicas, eight CLI clients running PIR searches
/// through it; one replica is killed with SIGKILL mid-load and started again: at least 99 %
/// of the searches succeed, every result is the same gallery's, and HAProxy sends requests to
/// the restarted replica again.
#[test]
fn haproxy_over_three_replicas_keeps_searches_through_a_kill_9() {
    let haproxy = ["/usr/sbin/haproxy", "/usr/bin/haproxy"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("haproxy (scripts/setup.sh installs it)");
    let (store, _) = built();
    let dir = tmp("lb");
    let key = key_file(&dir);
    let ports: Vec<u16> = (0..3)
        .map(|_| privatemail_e2e::browser::free_port())
        .collect();
    let t = std::time::Instant::now();
    let mut replicas: Vec<Option<Replica>> = ports
        .iter()
        .enumerate()
        .map(|(i, &p)| Some(replica(store, &key, &dir.join(format!("cache-{i}")), p)))
        .collect();
    eprintln!(
        "three replicas listening after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let (lb, stats) = (
        format!("127.0.0.1:{}", privatemail_e2e::browser::free_port()),
        format!("127.0.0.1:{}", privatemail_e2e::browser::free_port()),
    );
    let cfg = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/haproxy.cfg");
    let mut proxy = Command::new(haproxy)
        .args(["-f", cfg, "-db"])
        .env("PM_LB_BIND", &lb)
        .env("PM_LB_STATS_BIND", &stats)
        .envs(
            ports
                .iter()
                .enumerate()
                .map(|(i, p)| (format!("PM_REPLICA_{i}"), format!("127.0.0.1:{p}"))),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start haproxy");
    struct Kill<'a>(&'a mut std::process::Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _proxy = Kill(&mut proxy);
    let base = format!("http://{lb}");
    let up = std::time::Instant::now();
    while std::net::TcpStream::connect(&stats).is_err() {
        assert!(up.elapsed().as_secs() < 30, "haproxy did not start");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    while (0..3).any(|i| lb_server(&stats, &format!("r{i}")).0 != "UP") {
        assert!(
            up.elapsed().as_secs() < 30,
            "replicas not UP behind HAProxy"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }

    const CLIENTS: usize = 8;
    const EACH: usize = 4;
    let done = std::sync::atomic::AtomicUsize::new(0);
    let results: std::sync::Mutex<Vec<(bool, f64, String)>> = Default::default();
    std::thread::scope(|s| {
        for c in 0..CLIENTS {
            let (base, done, results) = (&base, &done, &results);
            s.spawn(move || {
                let cli = crate::cli::Cli::new(&format!("lb-{c}"));
                for n in 0..EACH {
                    let photo =
                        privatemail_e2e::photo_png(&cli.state.join("photos"), 5000 + c * EACH + n);
                    let t = std::time::Instant::now();
                    let out = cli.run(&[
                        "search",
                        photo.to_str().unwrap(),
                        "--server",
                        base,
                        "--protocol",
                        "pir",
                        "--json",
                    ]);
                    let ok = out.status.success()
                        && serde_json::from_slice::<Value>(&out.stdout)
                            .is_ok_and(|v| v["results"].as_array().is_some_and(|r| r.len() == 8));
                    results.lock().unwrap().push((
                        ok,
                        t.elapsed().as_secs_f64(),
                        String::from_utf8_lossy(&out.stderr).into_owned(),
                    ));
                    done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
        }
        // Mid-load: SIGKILL replica 1 once a quarter of the searches are done, start it again
        // (same port, same cache) at half.
        let total = CLIENTS * EACH;
        while done.load(std::sync::atomic::Ordering::SeqCst) < total / 4 {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        replicas[1] = None;
        eprintln!(
            "replica 1 killed with {} searches done",
            done.load(std::sync::atomic::Ordering::SeqCst)
        );
        while done.load(std::sync::atomic::Ordering::SeqCst) < total / 2 {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        replicas[1] = Some(replica(store, &key, &dir.join("cache-1"), ports[1]));
        eprintln!("replica 1 restarted");
    });
    let results = results.into_inner().unwrap();
    let ok = results.iter().filter(|r| r.0).count();
    let mut secs: Vec<f64> = results.iter().map(|r| r.1).collect();
    secs.sort_by(f64::total_cmp);
    eprintln!(
        "HAProxy over 3 replicas, kill -9 of one: {ok}/{} searches succeeded; latency p50 {:.2} s, p95 {:.2} s, max {:.2} s",
        results.len(),
        secs[secs.len() / 2],
        secs[secs.len() * 95 / 100],
        secs[secs.len() - 1]
    );
    for r in results.iter().filter(|r| !r.0) {
        eprintln!("failed search: {}", r.2.lines().last().unwrap_or(""));
    }
    assert!(
        ok * 100 >= results.len() * 99,
        "{ok}/{} searches succeeded",
        results.len()
    );
    // The restarted replica is back in rotation: UP, and it takes requests again.
    let up = std::time::Instant::now();
    while lb_server(&stats, "r1").0 != "UP" {
        assert!(
            up.elapsed().as_secs() < 30,
            "the restarted replica did not rejoin"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let before = lb_server(&stats, "r1").1;
    for _ in 0..6 {
        reqwest::blocking::get(format!("{base}/api/v1/partition")).unwrap();
    }
    assert!(
        lb_server(&stats, "r1").1 >= before + 2,
        "no request reached the restarted replica"
    );
}
