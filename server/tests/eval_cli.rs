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
    let out = Command::new(env!("CARGO_BIN_EXE_eval"))
        .args([
            "--data-dir",
            dir.to_str().unwrap(),
            "--gallery",
            "200",
            "--anchors",
            "50",
            "--queries",
            "20",
            "--epsilons",
            "1,8",
            "--features",
            "pixels",
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
            && first.contains("anchors 50")
            && first.contains("queries 20")
            && first.contains("seed 1"),
        "{first}"
    );
    let row = |name: &str| -> f64 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no row {name}:\n{stdout}"));
        line.split_whitespace()
            .rev()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap()
    };
    // The bands make classes trivially separable in feature space.
    assert!(row("kNN on features") > 0.99, "{stdout}");
    for name in [
        "SMLQ (non-private)",
        "PrivateMail eps=1 ",
        "PrivateMail eps=8 ",
    ] {
        let r = row(name);
        assert!((0.0..=1.0).contains(&r), "{name}: {r}");
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
