//! The `privatemail` command-line client against a real server: every protocol, the budget
//! file and its guard, the exit codes, and exactness — with the whole gallery downloaded its
//! top 8 equals the non-private kNN top 8 on the exact features.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use privatemail_e2e::{demo_server, test_image, Server};
use serde_json::Value;

const TOKEN: &str = "cli-token";

fn cli_bin() -> PathBuf {
    privatemail_e2e::workspace_bin("privatemail")
}

/// The `privatemail` binary with a state directory of its own (the CLI suites' one helper).
pub(crate) struct Cli {
    pub(crate) bin: PathBuf,
    pub(crate) state: PathBuf,
}

impl Cli {
    pub(crate) fn new(tag: &str) -> Self {
        let state = std::env::temp_dir().join(format!("pm-cli-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&state);
        std::fs::create_dir_all(&state).unwrap();
        Cli {
            bin: cli_bin(),
            state,
        }
    }
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .args(args)
            .env("PRIVATEMAIL_STATE_DIR", &self.state)
            .env_remove("PRIVATEMAIL_SERVER")
            .env_remove("PM_ADMIN_TOKEN")
            .output()
            .expect("run privatemail")
    }
    /// Its standard output, where it succeeded.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
    pub(crate) fn json(&self, args: &[&str]) -> Value {
        serde_json::from_str(&self.ok(args)).expect("JSON output")
    }
    /// `privatemail search PHOTO --server BASE --protocol pir --json` and `extra` arguments:
    /// its output, whether it succeeded or not.
    pub(crate) fn pir_search(&self, photo: &Path, base: &str, extra: &[&str]) -> Output {
        let photo = photo.to_str().unwrap();
        let mut args = vec![
            "search",
            photo,
            "--server",
            base,
            "--protocol",
            "pir",
            "--json",
        ];
        args.extend_from_slice(extra);
        self.run(&args)
    }
    /// The result ids of `privatemail search PHOTO --whole --json` against `base`, run off the
    /// async runtime (the suites drive a browser beside it).
    pub(crate) async fn whole_search_ids(&self, photo: &Path, base: &str) -> Vec<u64> {
        let (bin, state) = (self.bin.clone(), self.state.clone());
        let (photo, base) = (photo.to_path_buf(), base.to_string());
        let out = tokio::task::spawn_blocking(move || {
            Cli { bin, state }.json(&[
                "search",
                photo.to_str().unwrap(),
                "--server",
                &base,
                "--whole",
                "--json",
            ])
        })
        .await
        .unwrap();
        out["results"]
            .as_array()
            .unwrap_or_else(|| panic!("no results: {out}"))
            .iter()
            .map(|r| r["id"].as_u64().unwrap())
            .collect()
    }
    /// The receipts it recorded (none before its first release).
    pub(crate) fn receipts(&self) -> Vec<dp::mechanism::Receipt> {
        let bytes = std::fs::read(self.state.join("receipts.json")).unwrap_or_default();
        if bytes.is_empty() {
            return vec![];
        }
        serde_json::from_slice(&bytes).expect("the receipts file")
    }
}

/// Test image `i` scaled up 3× (any size must work), as RGB.
fn photo_rgb(i: usize) -> Vec<u8> {
    let (px, _) = test_image(i);
    let side = 84;
    let mut rgb = Vec::with_capacity(side * side * 3);
    for y in 0..side {
        for x in 0..side {
            let v = px[(y / 3) * 28 + x / 3];
            rgb.extend_from_slice(&[v, v, v]);
        }
    }
    rgb
}

/// The model input the client computes from [`photo`] `i` (`from_rgba`, the photo pipeline:
/// at 84×84 its box leaves out edge pixels fainter than the pipeline's threshold, so it is not
/// always the 28×28 image itself).
fn photo_input(i: usize) -> Vec<u8> {
    let rgba: Vec<u8> = photo_rgb(i)
        .chunks_exact(3)
        .flat_map(|p| [p[0], p[1], p[2], 255])
        .collect();
    embed::photo::to_model_input(&rgba, 84, 84).unwrap()
}

/// [`photo_rgb`] `i` written as a PNG in `dir`.
fn photo(dir: &Path, i: usize) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let side = 84;
    let rgb = photo_rgb(i);
    let path = dir.join(format!("photo-{i}.png"));
    let file = std::fs::File::create(&path).unwrap();
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), side as u32, side as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.write_header().unwrap().write_image_data(&rgb).unwrap();
    path
}

pub(crate) fn ids(v: &Value) -> Vec<u64> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect()
}

/// The exact non-private top 8 of the demo gallery (test images 0..1000, ids = indices) for
/// each photo: the gallery model's features of the gallery as the server publishes them
/// (quantised to i16, `publish::blocks::quantise`, and read back as a client reads them), the
/// query model's of the photo (as the CLI computes them), ranked by squared distance with ties
/// to the lower id (`publish::blocks::rank`).
fn exact_top8(photos: &[&[u8]]) -> Vec<Vec<u64>> {
    let model = embed::model::Model::from_bytes(data::assets::MODEL_WEIGHTS).unwrap();
    let query = embed::model::Model::from_bytes(data::assets::QUERY_WEIGHTS).unwrap();
    let dir = Path::new(data::fashion::DEFAULT_DIR);
    let test = data::fashion::load_split(dir, "t10k").expect("Fashion-MNIST");
    let published = |v: f32| publish::blocks::quantise(v) as f32 / publish::blocks::FEATURE_SCALE;
    let gallery: Vec<Vec<f32>> = (0..1000)
        .map(|i| {
            let f = model.infer(test.images.image(i)).unwrap().features;
            f.into_iter().map(published).collect()
        })
        .collect();
    photos
        .iter()
        .map(|px| {
            let q = query.search_features(px).unwrap();
            let mut d: Vec<(f32, u64)> = gallery
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let dist: f32 = f.iter().zip(&q).map(|(a, b)| (a - b) * (a - b)).sum();
                    (dist, i as u64)
                })
                .collect();
            d.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            d.iter().take(8).map(|x| x.1).collect()
        })
        .collect()
}

pub(crate) fn server() -> Server {
    demo_server("cli", &["--admin-token", TOKEN])
}

#[test]
fn whole_gallery_search_is_the_exact_top_8_and_spends_nothing() {
    let s = server();
    let cli = Cli::new("whole");
    // Held-out photos (test images outside the 1,000-image gallery).
    let held_out = [5000, 5001, 7777];
    let pixels: Vec<Vec<u8>> = held_out.iter().map(|&i| photo_input(i)).collect();
    let want = exact_top8(&pixels.iter().map(Vec::as_slice).collect::<Vec<_>>());
    for (n, &i) in held_out.iter().enumerate() {
        let p = photo(&cli.state.join("photos"), i);
        let out = cli.json(&[
            "search",
            p.to_str().unwrap(),
            "--server",
            &s.base,
            "--whole",
            "--json",
        ]);
        // The exact top 8 of the input the client computes from the 84×84 PNG.
        assert_eq!(ids(&out), want[n], "photo {i}");
        assert!(out["receipt"].is_null());
        assert_eq!(out["plan"]["whole"], true);
        assert_eq!(out["budget"]["releases"], 0);
    }
}

/// `--protocol pir`: the exact top 8 (f32 features; the i16 table swaps near-ties at most),
/// nothing spent, bytes up, down and one-time in the JSON; the public files are cached, so the
/// second search downloads none.
#[test]
fn pir_search_is_the_exact_top_8_spends_nothing_and_caches_public_files() {
    let s = server();
    let cli = Cli::new("pir");
    let held_out = [5000, 7777];
    let pixels: Vec<Vec<u8>> = held_out.iter().map(|&i| photo_input(i)).collect();
    let want = exact_top8(&pixels.iter().map(Vec::as_slice).collect::<Vec<_>>());
    for (n, &i) in held_out.iter().enumerate() {
        let p = photo(&cli.state.join("photos"), i);
        let out = cli.json(&[
            "search",
            p.to_str().unwrap(),
            "--server",
            &s.base,
            "--protocol",
            "pir",
            "--json",
        ]);
        assert_eq!(ids(&out), want[n], "photo {i}");
        assert!(out["receipt"].is_null());
        assert_eq!(out["budget"]["releases"], 0);
        let pir = &out["pir"];
        assert_eq!(pir["plan"]["ranking"]["kind"], "table");
        assert!(pir["bytes_up"].as_u64().unwrap() > 0);
        assert_eq!(pir["bytes_up"], pir["plan"]["up_bytes"]);
        assert_eq!(pir["bytes_down"], pir["plan"]["down_bytes"]);
        let once = pir["one_time_bytes_downloaded"].as_u64().unwrap();
        let anchors = out["anchors_bytes_downloaded"].as_u64().unwrap();
        if n == 0 {
            assert!(once > 0);
            assert!(anchors > 0);
        } else {
            assert_eq!(once, 0, "hints and table come from the cache");
            assert_eq!(anchors, 0, "the anchors come from the cache");
        }
        // The hintless ranking, chosen by name: the photo's block scored encrypted; nothing
        // spent; the bytes the plan names.
        let out = cli.json(&[
            "search",
            p.to_str().unwrap(),
            "--server",
            &s.base,
            "--protocol",
            "pir",
            "--pir-ranking",
            "scores",
            "--max-kib",
            "4096",
            "--json",
        ]);
        let pir = &out["pir"];
        assert_eq!(pir["plan"]["ranking"]["kind"], "scores");
        assert!(out["receipt"].is_null());
        assert_eq!(pir["bytes_up"], pir["plan"]["up_bytes"]);
        assert_eq!(pir["bytes_down"], pir["plan"]["down_bytes"]);
        // Exactly the top 8 of the photo's block by the client's rule (its nearest centroid
        // of the capped level), by integer score from the block's own file: the decryption
        // and the ranking are exact. How much of the gallery's top 8 that block holds is the
        // level's coverage, a property of the features measured on 1,000 held-out photos
        // (`crates/data/tests/models/ranking_coverage.rs`, `partbench`), not of two photos.
        let got = ids(&out);
        let block = scores_block(&s.base, &pixels[n]);
        assert_eq!(
            got,
            privatemail_e2e::block_top8_by_scores(&features(&pixels[n]), &block),
            "photo {i}"
        );
        let found = got.iter().filter(|id| want[n].contains(id)).count();
        eprintln!("photo {i}: scores found {found} of the gallery's exact 8");
    }
}

/// The query model's features of a model input (what the CLI computes).
fn features(input: &[u8]) -> Vec<f32> {
    embed::model::Model::from_bytes(data::assets::QUERY_WEIGHTS)
        .unwrap()
        .search_features(input)
        .unwrap()
}

/// The block of the hintless ranking's level a photo (its model input) is scored in: its
/// nearest centroid of that level, as the client finds it, decoded from the block's file and
/// checked against the partition document's hash.
fn scores_block(base: &str, input: &[u8]) -> publish::blocks::Block {
    let http = reqwest::blocking::Client::new();
    let part: shared::api::PartitionDoc =
        privatemail_e2e::get_json(&http, base, "/api/v1/partition");
    let pir: publish::pir::doc::PirDoc = privatemail_e2e::get_json(&http, base, "/api/v1/pir");
    let level = pir.scores.expect("the hintless ranking is offered").level;
    let cents = privatemail_e2e::level_centroids(&http, base, &part, level);
    let x = publish::partition::nearest_centroid(&cents.values, part.feature_dim, &features(input));
    let url = format!("{base}{}/{level}/{x}", part.blocks_url);
    let bytes = http.get(&url).send().unwrap().bytes().unwrap();
    publish::blocks::decode(&bytes, Some(&part.levels[level].hashes[x as usize])).unwrap()
}

/// Without `--protocol` the CLI searches as the page does by default: PIR, nothing released,
/// nothing spent; `--whole` alone is block download of the whole gallery; `--whole` with
/// another protocol is a usage error. The help says so.
#[test]
fn the_default_protocol_is_the_pages_pir() {
    let s = server();
    let cli = Cli::new("default-pir");
    let p = photo(&cli.state.join("photos"), 5003);
    let p = p.to_str().unwrap();
    let out = cli.json(&["search", p, "--server", &s.base, "--json"]);
    assert_eq!(ids(&out).len(), 8);
    assert!(out["pir"].is_object(), "not a PIR search: {out}");
    assert!(out["receipt"].is_null(), "{out}");
    assert_eq!(cli.json(&["budget", "--json"])["releases"], 0);
    let text = cli.run(&["search", p, "--server", &s.base]);
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(text.contains("PIR (the server learns nothing"), "{text}");
    assert!(
        text.contains("released nothing about the photo (privacy loss ε = 0)"),
        "{text}"
    );
    let whole = cli.json(&["search", p, "--server", &s.base, "--whole", "--json"]);
    assert!(whole["pir"].is_null(), "{whole}");
    assert!(whole["plan"]["whole"].as_bool().unwrap(), "{whole}");
    let bad = cli.run(&[
        "search",
        p,
        "--server",
        &s.base,
        "--whole",
        "--protocol",
        "pir",
    ]);
    assert_eq!(bad.status.code(), Some(9));
    let help = cli.run(&["search", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    assert!(help.contains("Default: pir, as on the page"), "{help}");
}

#[test]
fn every_protocol_searches_and_the_budget_composes_and_guards() {
    let s = server();
    let cli = Cli::new("protocols");
    let p = photo(&cli.state.join("photos"), 5002);
    let p = p.to_str().unwrap();
    // Below the whole test gallery's size (about 300 KB), so the plan releases blocks.
    let blocks = cli.json(&[
        "search",
        p,
        "--server",
        &s.base,
        "--protocol",
        "blocks",
        "--epsilon",
        "8",
        "--max-kib",
        "128",
        "--json",
    ]);
    assert_eq!(ids(&blocks).len(), 8);
    assert_eq!(blocks["receipt"]["mechanism"], "block_subset");
    assert_eq!(blocks["receipt"]["epsilon"], 8.0);
    assert!(blocks["bytes_downloaded"].as_u64().unwrap() > 0);
    for proto in ["frame", "paper"] {
        let out = cli.json(&[
            "search",
            p,
            "--server",
            &s.base,
            "--protocol",
            proto,
            "--epsilon",
            "1",
            "-k",
            "5",
            "--json",
        ]);
        assert_eq!(ids(&out).len(), 5, "{proto}");
        assert_eq!(out["receipt"]["mechanism"], "discrete_gaussian");
    }
    let total = cli.json(&["budget", "--json"]);
    assert_eq!(total["releases"], 3);
    let rho = total["zcdp_rho"].as_f64().unwrap();
    assert!(rho > 32.0, "{rho}"); // ε = 8 alone is ρ = 32

    // The guard refuses before sending anything and records nothing.
    let out = cli.run(&[
        "search",
        p,
        "--server",
        &s.base,
        "--protocol",
        "blocks",
        "--epsilon",
        "2",
        "--max-epsilon",
        "10",
        "--max-kib",
        "128",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(cli.json(&["budget", "--json"])["releases"], 3);

    let reset = cli.json(&["budget", "--reset", "--json"]);
    assert_eq!(reset["releases"], 0);

    let plan = cli.json(&["plan", "--server", &s.base, "--epsilon", "8", "--json"]);
    assert!(plan["plan"]["predicted_fidelity"].as_f64().unwrap() > 0.0);
    assert!(!plan["pareto"].as_array().unwrap().is_empty());
}

#[test]
fn failures_have_distinct_exit_codes_and_one_line_messages() {
    let s = server();
    let cli = Cli::new("errors");
    let p = photo(&cli.state.join("photos"), 3);
    let p = p.to_str().unwrap();
    let code = |args: &[&str]| {
        let out = cli.run(args);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(err.starts_with("privatemail: "), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        out.status.code()
    };
    // Nothing listens on port 9 of loopback.
    assert_eq!(
        code(&["search", p, "--server", "http://127.0.0.1:9"]),
        Some(3)
    );
    let not_image = cli.state.join("photos/notes.png");
    std::fs::write(&not_image, b"not an image").unwrap();
    assert_eq!(
        code(&["search", not_image.to_str().unwrap(), "--server", &s.base]),
        Some(4)
    );
    assert_eq!(
        code(&["search", "/nonexistent.png", "--server", &s.base]),
        Some(4)
    );
    assert_eq!(
        code(&["gallery", "add", p, "--label", "1", "--server", &s.base, "--token", "wrong"]),
        Some(6)
    );
    assert_eq!(
        code(&["search", p, "--server", &s.base, "--epsilon", "NaN"]),
        Some(9)
    );
    assert_eq!(
        code(&["search", p, "--server", &s.base, "--epsilon", "0"]),
        Some(9)
    );
    // Usage refused before anything is released or sent: a cap that is not a number (it
    // would cap nothing), and a k the protocol cannot give.
    for args in [
        vec!["--protocol", "blocks", "--max-epsilon", "NaN"],
        vec!["--protocol", "blocks", "-k", "0"],
        vec!["--protocol", "blocks", "-k", "101"],
        vec!["--protocol", "frame", "-k", "0"],
        vec!["--protocol", "pir", "-k", "33"],
    ] {
        let mut all = vec!["search", p, "--server", "http://127.0.0.1:9"];
        all.extend(&args);
        assert_eq!(code(&all), Some(9), "{args:?}");
    }
    assert!(cli.receipts().is_empty(), "a refused usage spent nothing");
    // Operators: add and remove with the token.
    let added = cli.json(&[
        "gallery", "add", p, "--label", "1", "--server", &s.base, "--token", TOKEN,
    ]);
    let id = added["ids"][0].as_u64().unwrap();
    cli.json(&[
        "gallery",
        "remove",
        &id.to_string(),
        "--server",
        &s.base,
        "--token",
        TOKEN,
    ]);
    // --help works on every command.
    for args in [
        vec!["--help"],
        vec!["search", "--help"],
        vec!["plan", "--help"],
        vec!["budget", "--help"],
        vec!["gallery", "add", "--help"],
        vec!["gallery", "remove", "--help"],
    ] {
        assert!(cli.run(&args).status.success(), "{args:?}");
    }
}

/// A photo that is not clothing is said so under the predicted class, in words that say what
/// its results are, and in `--json` as `unfamiliar`, and is still searched (eight matches); a
/// product photo is not flagged. The flagged photo: a faint one-pixel square outline on white
/// (the model input keeps about 2,000 of ink: more than the refusal's 1,000, less than the
/// check's 4,000). Noise is refused outright (`nothing_to_see`).
#[test]
fn a_photo_that_is_not_clothing_is_said_so() {
    let s = server();
    let cli = Cli::new("unfamiliar");
    let dir = cli.state.join("photos");
    let outline = dir.join("outline.png");
    let rgb: Vec<u8> = (0..64 * 64)
        .flat_map(|i| {
            let (x, y) = (i % 64, i / 64);
            let edge = (4..60).contains(&x)
                && (4..60).contains(&y)
                && (x == 4 || x == 59 || y == 4 || y == 59);
            let g = if edge { 215 } else { 255 };
            [g, g, g]
        })
        .collect();
    std::fs::create_dir_all(&dir).unwrap();
    let file = std::fs::File::create(&outline).unwrap();
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), 64, 64);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.write_header().unwrap().write_image_data(&rgb).unwrap();
    let outline = outline.to_str().unwrap();
    let out = cli.run(&["search", outline, "--server", &s.base]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains(embed::ood::UNFAMILIAR_MESSAGE), "{text}");
    assert!(text.contains("You can still search with it"), "{text}");
    let out = cli.json(&["search", outline, "--server", &s.base, "--json"]);
    assert_eq!(out["unfamiliar"], true, "{out}");
    assert_eq!(out["results"].as_array().map(Vec::len), Some(8), "{out}");
    let p = photo(&dir, 5003);
    let p = p.to_str().unwrap();
    let out = cli.json(&["search", p, "--server", &s.base, "--json"]);
    assert_eq!(out["unfamiliar"], false, "{out}");
    let text = cli.run(&["search", p, "--server", &s.base]);
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(!text.contains(embed::ood::UNFAMILIAR_MESSAGE), "{text}");
}
