//! Runs the real `eval` binary on small hand-made IDX files and checks the table it prints,
//! and that a missing data directory is a clear error, not a panic.

use std::io::Write;
use std::process::Command;

fn idx_gz(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 0, 8, dims.len() as u8];
    for d in dims {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v.extend_from_slice(data);
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(&v).unwrap();
    e.finish().unwrap()
}

/// `n` 28×28 images whose class `c` lights up column band `c` (plus deterministic speckle).
fn write_split(dir: &std::path::Path, prefix: &str, n: usize) {
    let mut pixels = Vec::with_capacity(n * 784);
    let mut labels = Vec::with_capacity(n);
    for i in 0..n {
        let c = i % 10;
        labels.push(c as u8);
        for p in 0..784 {
            let col = p % 28;
            let band = (col * 10 / 28) == c;
            let speckle = ((i * 31 + p * 17) % 97) as u8;
            pixels.push(if band { 200 } else { speckle / 4 });
        }
    }
    std::fs::write(
        dir.join(format!("{prefix}-images-idx3-ubyte.gz")),
        idx_gz(&[n as u32, 28, 28], &pixels),
    )
    .unwrap();
    std::fs::write(
        dir.join(format!("{prefix}-labels-idx1-ubyte.gz")),
        idx_gz(&[n as u32], &labels),
    )
    .unwrap();
}

#[test]
fn eval_prints_the_table_on_idx_files() {
    let dir = std::env::temp_dir().join(format!("pm-eval-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    write_split(&dir, "t10k", 300);
    write_split(&dir, "train", 300);
    let out_dir = dir.join("out");
    let out = Command::new(env!("CARGO_BIN_EXE_eval"))
        .args([
            "--data-dir",
            dir.to_str().unwrap(),
            "--gallery",
            "200",
            "--anchors",
            "100",
            "--queries",
            "20",
            "--epsilons",
            "1,8",
            "--features",
            "pixels",
            "--seeds",
            "2",
            "--out",
            out_dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "eval failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = stdout.lines().next().unwrap();
    assert!(
        first.contains("gallery 200")
            && first.contains("anchors 100")
            && first.contains("queries 20")
            && first.contains("seeds 1..2"),
        "{first}"
    );
    // Recall@8, mAP and fidelity (means) of a row, by method and ε column.
    let row = |name: &str, eps: &str| -> Vec<f64> {
        let line = stdout
            .lines()
            .find(|l| {
                l.len() > 34
                    && l[..34].trim_end() == name
                    && l[34..].split_whitespace().next() == Some(eps)
            })
            .unwrap_or_else(|| panic!("no row {name} {eps}:\n{stdout}"));
        let f: Vec<&str> = line[34..].split_whitespace().collect();
        vec![
            f[1].parse().unwrap(),
            f[4].parse().unwrap(),
            f[7].parse().unwrap(),
        ]
    };
    // The bands make classes trivially separable in feature space; kNN is its own truth.
    let knn = row("kNN on features", "-");
    assert!(knn[0] > 0.99 && knn[2] == 1.0, "{stdout}");
    for (name, eps) in [
        ("PrivateMail (Algorithm 1)", "-"),
        ("anchor frame", "-"),
        ("chance: random order", "-"),
        ("chance: random class blocks", "-"),
        ("chance: random proportional page", "-"),
        ("PrivateMail (Algorithm 1)", "1"),
        ("PrivateMail extended (3 steps)", "8"),
        ("anchor frame", "8"),
        ("anchor frame + posterior ranking", "1"),
        ("random projection-16", "1"),
        ("PCA-16 + kNN", "8"),
        ("LSH-64 (random flipping)", "1"),
        ("ITQ-32 (random flipping)", "8"),
        ("PITQ-32 (random flipping)", "1"),
        ("t-SNE of the gallery", "-"),
        ("DP-dSNE", "-"),
        ("DP-dSNE", "8"),
        ("anchor frame + proportional page", "1"),
        ("anchor frame + one per class", "8"),
    ] {
        let r = row(name, eps);
        assert!(
            r.iter().all(|v| (0.0..=1.0).contains(v)),
            "{name} {eps}: {r:?}"
        );
    }
    // The CSV has one line per method and ε, and both plots are SVG.
    let csv = std::fs::read_to_string(out_dir.join("results.csv")).unwrap();
    assert!(csv.starts_with("method,epsilon,seeds,recall_mean"));
    assert_eq!(csv.lines().count(), 1 + 12 + 12 * 2, "{csv}");
    assert!(csv
        .lines()
        .skip(1)
        .all(|l| l.split(',').nth(2) == Some("2")));
    // Algorithm 1's study: 13 parameter settings and, of the anchor counts, the one this run
    // has (100), × 2 series × 2 metrics, over both seeds.
    let study = std::fs::read_to_string(out_dir.join("algorithm1-study.csv")).unwrap();
    assert!(study.starts_with("parameter,series,metric,value,seeds,mean,std"));
    assert_eq!(study.lines().count(), 1 + 14 * 4, "{study}");
    assert!(study
        .lines()
        .skip(1)
        .all(|l| l.split(',').nth(4) == Some("2")));
    for svg in [
        "privacy-utility.svg",
        "frame-study.svg",
        "algorithm1-study.svg",
    ] {
        let text = std::fs::read_to_string(out_dir.join(svg)).unwrap();
        assert!(text.contains("<svg") && text.contains("polyline"), "{svg}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn missing_data_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_eval"))
        .args(["--data-dir", "/nonexistent/fashion"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("dataset-fashion-mnist"), "{err}");
}

#[test]
fn eval_blocks_writes_the_csv_the_issue_names() {
    let dir = std::env::temp_dir().join(format!("pm-eval-blocks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    write_split(&dir, "t10k", 400);
    write_split(&dir, "train", 300);
    let out_dir = dir.join("out");
    let out = Command::new(env!("CARGO_BIN_EXE_eval"))
        .args([
            "--data-dir",
            dir.to_str().unwrap(),
            "--blocks",
            "--anchors",
            "100",
            "--blocks-queries",
            "60",
            "--blocks-draws",
            "2",
            "--blocks-large",
            "0",
            "--blocks-levels",
            "8,16",
            "--blocks-variants",
            "spill-2,closure-8",
            "--out",
            out_dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "eval --blocks failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = std::fs::read_to_string(out_dir.join("blocks.csv")).unwrap();
    let mut lines = csv.lines().filter(|l| !l.starts_with('#'));
    assert_eq!(
        lines.next().unwrap(),
        "method,epsilon,blocks,partition,released,pool_fraction,fidelity_at_8,recall_at_8,map_at_8,miss_rate,kib_per_search"
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == 11), "{csv}");
    for method in ["blocks", "blocks-predicted", "download-all", "reference"] {
        assert!(
            rows.iter().any(|r| r[0] == method),
            "no {method} rows:\n{csv}"
        );
    }
    // Every block row's fidelity and pool are shares, and the miss rate fits the mechanism.
    for r in rows.iter().filter(|r| r[0] == "blocks") {
        let (pool, fid, miss): (f64, f64, f64) = (
            r[5].parse().unwrap(),
            r[6].parse().unwrap(),
            r[9].parse().unwrap(),
        );
        assert!(
            (0.0..=1.0).contains(&pool) && (0.0..=1.0).contains(&fid),
            "{r:?}"
        );
        assert!((0.0..1.0).contains(&miss), "{r:?}");
    }
    for f in ["blocks.svg", "blocks.md"] {
        assert!(out_dir.join(f).exists(), "{f}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
