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

pub(crate) fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pm-scale-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `server build` with `args` (a 1,000-image gallery); panics with its output unless it
/// succeeds.
pub(crate) fn build(args: &[&str]) -> String {
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
    replica_with(store.to_str().unwrap(), key, cache, port, &[], &[])
}

/// [`replica`] of the store `spec` (a directory or `s3://…`) with `extra` arguments and `env`;
/// its lines about following the store are copied to the test's output.
fn replica_with(
    spec: &str,
    key: &Path,
    cache: &Path,
    port: u16,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Replica {
    use std::io::BufRead;
    let mut child = Command::new(workspace_bin("server"))
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .args(["--from", spec])
        .args(["--identity-key", key.to_str().unwrap()])
        .args(["--cache-dir", cache.to_str().unwrap()])
        .args(extra)
        .env("RUST_LOG", "warn,privatemail_server::replica=info")
        .envs(env.iter().copied())
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
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if line.contains("replica:") {
                eprintln!("replica :{port}: {line}");
            }
        }
    });
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

/// `deploy/haproxy.cfg` run by HAProxy in front of the replicas on `ports`, every one UP.
struct Lb {
    child: std::process::Child,
    /// `http://host:port` clients use.
    base: String,
    /// `host:port` of HAProxy's statistics.
    stats: String,
}

impl Drop for Lb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Lb {
    fn start(ports: &[u16]) -> Lb {
        let haproxy = ["/usr/sbin/haproxy", "/usr/bin/haproxy"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("haproxy (scripts/setup.sh installs it)");
        let (lb, stats) = (
            format!("127.0.0.1:{}", privatemail_e2e::browser::free_port()),
            format!("127.0.0.1:{}", privatemail_e2e::browser::free_port()),
        );
        let cfg = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/haproxy.cfg");
        let child = Command::new(haproxy)
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
        let lb = Lb {
            child,
            base: format!("http://{lb}"),
            stats,
        };
        let up = std::time::Instant::now();
        while std::net::TcpStream::connect(&lb.stats).is_err() {
            assert!(up.elapsed().as_secs() < 30, "haproxy did not start");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        while (0..ports.len()).any(|i| lb_server(&lb.stats, &format!("r{i}")).0 != "UP") {
            assert!(
                up.elapsed().as_secs() < 30,
                "replicas not UP behind HAProxy"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        lb
    }
}

/// `deploy/haproxy.cfg` in front of three replicas, eight CLI clients running PIR searches
/// through it; one replica is killed with SIGKILL mid-load and started again: at least 99 %
/// of the searches succeed, every result is the same gallery's, and HAProxy sends requests to
/// the restarted replica again.
#[test]
fn haproxy_over_three_replicas_keeps_searches_through_a_kill_9() {
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
    let lb = Lb::start(&ports);
    let (base, stats) = (lb.base.clone(), lb.stats.clone());

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
                    let out = cli.pir_search(&photo, base, &[]);
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

/// A copy of the directory `from` at `to` (a store to change without touching the shared one).
fn copy_tree(from: &Path, to: &Path) {
    for (rel, bytes) in files(from) {
        let p = to.join(&rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
}

/// `GET /api/v1/status` → `replica` of the server at `base`.
fn replica_status(base: &str) -> Value {
    get(base, "/api/v1/status")["replica"].clone()
}

/// A new version announced with its catalogue object damaged is refused: the replica says so
/// in its status and keeps serving — and answering PIR searches on — the version it had.
#[test]
fn a_replica_refuses_a_damaged_next_version_and_keeps_serving_its_own() {
    let (out, sha) = built();
    let dir = tmp("refuse");
    let store = dir.join("store");
    copy_tree(out, &store);
    let key = key_file(&dir);
    let srv = start_server_logged(
        &[
            "--from",
            store.to_str().unwrap(),
            "--identity-key",
            key.to_str().unwrap(),
            "--cache-dir",
            dir.join("cache").to_str().unwrap(),
            "--follow-interval-ms",
            "200",
            "--switch-delay-secs",
            "0",
        ],
        &[],
    );
    let before = get(&srv.base, "/api/v1/partition")["version"].clone();
    let m: Value = serde_json::from_slice(
        &std::fs::read(store.join(format!("manifests/{sha}.json"))).unwrap(),
    )
    .unwrap();
    // The next version: the catalogue without its last item (another object), written with
    // one byte changed, and a manifest naming its true hash.
    let rows = std::fs::read(store.join(m["catalogue"].as_str().unwrap())).unwrap();
    let n = u64::from_le_bytes(rows[8..16].try_into().unwrap());
    let (px, fd) = (
        u32::from_le_bytes(rows[16..20].try_into().unwrap()) as usize,
        u32::from_le_bytes(rows[20..24].try_into().unwrap()) as usize,
    );
    let mut next = rows[..rows.len() - (12 + px + 4 * fd)].to_vec();
    next[8..16].copy_from_slice(&(n - 1).to_le_bytes());
    let next_sha = publish::blocks::hash_hex(&next);
    let at = next.len() / 2;
    next[at] ^= 1;
    let object = format!("objects/{next_sha}.rows");
    std::fs::write(store.join(&object), &next).unwrap();
    let mut m2 = m.clone();
    m2["catalogue"] = Value::from(object);
    m2["catalogue_sha256"] = Value::from(next_sha);
    m2["items"] = Value::from(n - 1);
    let m2 = serde_json::to_vec_pretty(&m2).unwrap();
    let sha2 = publish::blocks::hash_hex(&m2);
    std::fs::write(store.join(format!("manifests/{sha2}.json")), &m2).unwrap();
    std::fs::write(
        store.join("CURRENT.json"),
        serde_json::to_vec(&serde_json::json!({ "manifest": sha2 })).unwrap(),
    )
    .unwrap();
    let t = std::time::Instant::now();
    let r = loop {
        let r = replica_status(&srv.base);
        if r["announced"] == sha2.as_str() && r["state"] == "refused" {
            break r;
        }
        assert!(
            t.elapsed().as_secs() < 60,
            "the damaged version was not refused: {r}\n{}",
            srv.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(
        r["refused"]
            .as_str()
            .is_some_and(|e| e.contains("does not match its hash")),
        "{r}"
    );
    assert_eq!(r["serving"], sha.as_str());
    assert!(
        srv.log_text().contains("the announced version is refused"),
        "the refusal is logged"
    );
    // Still serving its own version: documents and a whole PIR search.
    assert_eq!(get(&srv.base, "/api/v1/partition")["version"], before);
    let cli = crate::cli::Cli::new("refuse");
    let photo = privatemail_e2e::photo_png(&cli.state.join("photos"), 5100);
    let out = cli.pir_search(&photo, &srv.base, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["pir"]["version"], before);
    // Nothing of the refused version is in the cache.
    assert!(!dir.join("cache").join(&sha2).exists());
}

/// One search through the balancer: whether it succeeded, when it started and ended (seconds
/// since `t0`), the version its answers named, its error output.
struct Searched {
    ok: bool,
    start: f64,
    end: f64,
    version: String,
    err: String,
}

/// The store of a switch test: a directory, or a bucket on `s3s-fs` (its root holds the
/// bucket `pm-bucket`, the store at `pm-bucket/store`).
struct Bucket {
    spec: String,
    env: Vec<(String, String)>,
    _s3: Option<crate::object_store::Killed>,
    /// Where the store's objects are on disk (the directory, or in s3s-fs's root).
    dir: PathBuf,
}

impl Bucket {
    fn env(&self) -> Vec<(&str, &str)> {
        self.env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }
}

/// `server build` of a gallery of `size` into `spec` with `env`; panics unless it succeeds.
fn build_into(spec: &str, env: &[(&str, &str)], args: &[&str], size: &str) {
    let out = Command::new(workspace_bin("server"))
        .arg("build")
        .args(["--out", spec])
        .args(args)
        .args(["--gallery-size", size, "--anchors", ANCHORS])
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .output()
        .expect("run server build");
    assert!(
        out.status.success(),
        "server build {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Three replicas following the store behind `deploy/haproxy.cfg`, eight CLI clients running
/// PIR searches through it without pause; mid-load a new version (a larger gallery) is built
/// into the same store by a worker and the join, whose last write switches `CURRENT.json`.
/// Every search succeeds; every search that starts once all three replicas switched names
/// the new version; the searches before the announcement name the old one.
/// With `shard`, a row shard (`--shard-rows 0/1`, beside the load balancer) follows the same
/// store: it switches too, and holds none of the gallery's items after the switch as before.
fn switch_under_load(bucket: Bucket, tag: &str, shard: bool) {
    let (_, sha_a) = built();
    let dir = tmp(tag);
    let key = key_file(&dir);
    let env = bucket.env();
    let ports: Vec<u16> = (0..3)
        .map(|_| privatemail_e2e::browser::free_port())
        .collect();
    let public = format!(
        "{}/pm-bucket/store",
        bucket
            .env
            .iter()
            .find(|(k, _)| k == "AWS_ENDPOINT")
            .map_or("", |(_, v)| v.as_str())
    );
    let mut extra = vec!["--follow-interval-ms", "500", "--switch-delay-secs", "60"];
    if bucket.spec.starts_with("s3://") {
        extra.extend(["--blocks-public-url", public.as_str()]);
    }
    let t = std::time::Instant::now();
    let _replicas: Vec<Replica> = ports
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            replica_with(
                &bucket.spec,
                &key,
                &dir.join(format!("cache-{i}")),
                p,
                &extra,
                &env,
            )
        })
        .collect();
    let shard_base = shard.then(|| {
        let port = privatemail_e2e::browser::free_port();
        let args: Vec<&str> = extra
            .iter()
            .copied()
            .chain(["--shard-rows", "0/1"])
            .collect();
        let r = replica_with(
            &bucket.spec,
            &key,
            &dir.join("cache-shard"),
            port,
            &args,
            &env,
        );
        (r, format!("http://127.0.0.1:{port}"))
    });
    eprintln!(
        "{tag}: three replicas listening after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let bases: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let version_a = get(&bases[0], "/api/v1/partition")["version"]
        .as_str()
        .unwrap()
        .to_string();
    let lb = Lb::start(&ports);

    const CLIENTS: usize = 8;
    let t0 = std::time::Instant::now();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let results: std::sync::Mutex<Vec<Searched>> = Default::default();
    let (mut announced, mut switched) = (0.0, 0.0);
    let mut sha_b = String::new();
    std::thread::scope(|s| {
        for c in 0..CLIENTS {
            let (base, stop, results) = (&lb.base, &stop, &results);
            s.spawn(move || {
                let cli = crate::cli::Cli::new(&format!("{tag}-{c}"));
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let photo = privatemail_e2e::photo_png(
                        &cli.state.join("photos"),
                        6000 + c * 100 + n % 100,
                    );
                    n += 1;
                    let start = t0.elapsed().as_secs_f64();
                    let out = cli.pir_search(&photo, base, &[]);
                    let v = serde_json::from_slice::<Value>(&out.stdout).ok();
                    let ok = out.status.success()
                        && v.as_ref()
                            .is_some_and(|v| v["results"].as_array().is_some_and(|r| r.len() == 8));
                    results.lock().unwrap().push(Searched {
                        ok,
                        start,
                        end: t0.elapsed().as_secs_f64(),
                        version: v
                            .as_ref()
                            .and_then(|v| v["pir"]["version"].as_str())
                            .unwrap_or("")
                            .to_string(),
                        err: String::from_utf8_lossy(&out.stderr).into_owned(),
                    });
                    // A person's pace, not a benchmark's: the machine is shared.
                    std::thread::sleep(std::time::Duration::from_millis(500));
                }
            });
        }
        let done = || results.lock().unwrap().len();
        while done() < CLIENTS {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        // Mid-load: the next version, a larger gallery, built into the same store.
        let work = dir.join("work");
        let tb = std::time::Instant::now();
        build_into(&bucket.spec, &env, &["--shard", "0/1"], "1200");
        build_into(
            &bucket.spec,
            &env,
            &["--join", "1", "--work-dir", work.to_str().unwrap()],
            "1200",
        );
        announced = t0.elapsed().as_secs_f64();
        sha_b = current(&bucket.dir);
        eprintln!(
            "{tag}: version {sha_b} built and announced in {:.1} s, {} searches done",
            tb.elapsed().as_secs_f64(),
            done()
        );
        assert_ne!(sha_b, *sha_a);
        // Every replica switches (at the announcement's time plus the switch delay).
        while bases
            .iter()
            .any(|b| replica_status(b)["serving"] != sha_b.as_str())
        {
            assert!(
                t0.elapsed().as_secs_f64() - announced < 600.0,
                "the replicas did not switch: {:?}",
                bases.iter().map(|b| replica_status(b)).collect::<Vec<_>>()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        switched = t0.elapsed().as_secs_f64();
        eprintln!(
            "{tag}: all replicas switched {:.1} s after the announcement; {:?}",
            switched - announced,
            bases
                .iter()
                .map(|b| replica_status(b)["last_prepare_secs"].clone())
                .collect::<Vec<_>>()
        );
        // Searches go on until every client has run one that started after the switch.
        while results
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.start > switched)
            .count()
            < CLIENTS
        {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let results = results.into_inner().unwrap();
    let version_b = get(&bases[0], "/api/v1/partition")["version"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(version_a, version_b);
    let failed: Vec<&Searched> = results.iter().filter(|r| !r.ok).collect();
    let on = |v: &str| results.iter().filter(|r| r.version == v).count();
    // Searches in flight when the switch was seen, finished on the version they started with.
    let across = results
        .iter()
        .filter(|r| r.start < switched && r.end > switched && r.version == version_a)
        .count();
    let mut secs: Vec<f64> = results.iter().map(|r| r.end - r.start).collect();
    secs.sort_by(f64::total_cmp);
    eprintln!(
        "{tag}: {} searches, {} failed; {} on the old version, {} on the new; {across} in flight at the switch finished on the old version; switch {:.1} s after the announcement; latency p50 {:.2} s, max {:.2} s",
        results.len(),
        failed.len(),
        on(&version_a),
        on(&version_b),
        switched - announced,
        secs[secs.len() / 2],
        secs[secs.len() - 1]
    );
    for r in &failed {
        eprintln!(
            "failed search from {:.1} s to {:.1} s after the announcement (the switch at {:.1} s): {}",
            r.start - announced,
            r.end - announced,
            switched - announced,
            r.err.lines().last().unwrap_or("")
        );
    }
    assert!(failed.is_empty(), "{} searches failed", failed.len());
    if let Some((_shard, base)) = &shard_base {
        let t = std::time::Instant::now();
        while replica_status(base)["serving"] != sha_b.as_str() {
            assert!(
                t.elapsed().as_secs_f64() < 600.0,
                "the shard did not switch: {}",
                replica_status(base)
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let st = get(base, "/api/v1/status");
        assert_eq!(st["pir"]["version"], version_b.as_str(), "{st}");
        assert_eq!(
            (&st["catalogue_items"], &st["snapshot_items"]),
            (&serde_json::json!(0), &serde_json::json!(0)),
            "a shard keeps the next version's items: {st}"
        );
    }
    for r in &results {
        if r.start > switched {
            assert_eq!(r.version, version_b, "a search after the switch");
        }
        if r.end < announced {
            assert_eq!(r.version, version_a, "a search before the announcement");
        }
        assert!(
            r.version == version_a || r.version == version_b,
            "{}",
            r.version
        );
    }
}

#[test]
fn haproxy_over_three_replicas_switches_versions_under_load_without_a_failed_search() {
    let (out, _) = built();
    let dir = tmp("switch-store");
    copy_tree(out, &dir);
    switch_under_load(
        Bucket {
            spec: dir.to_str().unwrap().to_string(),
            env: Vec::new(),
            _s3: None,
            dir,
        },
        "switch",
        true,
    );
}

/// [`switch_under_load`] with the store in an S3-compatible bucket (`s3s-fs`), configured
/// through the `object_store` environment variables as an operator would.
#[test]
fn a_version_switch_under_load_from_an_s3s_fs_bucket() {
    let (out, _) = built();
    let root = tmp("s3-root");
    let dir = root.join("pm-bucket/store");
    copy_tree(out, &dir);
    let (s3, endpoint) = crate::object_store::s3s_fs(&root);
    switch_under_load(
        Bucket {
            spec: "s3://pm-bucket/store".into(),
            env: vec![
                ("AWS_ENDPOINT".into(), endpoint),
                ("AWS_ALLOW_HTTP".into(), "true".into()),
                ("AWS_SKIP_SIGNATURE".into(), "true".into()),
                ("AWS_REGION".into(), "us-east-1".into()),
            ],
            _s3: Some(s3),
            dir,
        },
        "switch-s3",
        false,
    );
}
