//! The CLI against a real server, on what it states (issue 61): a byte budget is a ceiling on
//! what a block search downloads and the plan says why it was chosen; every word about a
//! release is its receipt's (`client::words`), for each mechanism; the help says what the
//! default releases and what photos are read; a camera-sized JPEG is searched.

use std::path::{Path, PathBuf};

use privatemail_e2e::browser::{native_features_of, top8, whole_gallery};
use privatemail_e2e::{demo_server, test_image};

use crate::cli::Cli;

/// Test image `i` as a camera would take it: `w×h`, the garment (dark on a light ground, as
/// the dataset's bright-on-black inverted) scaled up to most of the frame, written as a JPEG.
pub(crate) fn camera_jpeg(dir: &Path, i: usize, w: u32, h: u32) -> PathBuf {
    let (px, _) = test_image(i);
    let scale = (h as usize * 9 / 10) / 28;
    let (ox, oy) = ((w as usize - 28 * scale) / 2, (h as usize - 28 * scale) / 2);
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        let (x, y) = (x as usize, y as usize);
        let v = if x >= ox && y >= oy && x < ox + 28 * scale && y < oy + 28 * scale {
            px[((y - oy) / scale) * 28 + (x - ox) / scale]
        } else {
            0
        };
        let g = 240 - (v as u32 * 200 / 255) as u8;
        image::Rgb([g, g.saturating_sub(4), g.saturating_sub(8)])
    });
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!("camera-{i}-{w}x{h}.jpg"));
    write_jpeg(&path, &img);
    path
}

/// `img` as a JPEG file (quality 90, the `image` encoder's 4:2:0 chroma).
pub(crate) fn write_jpeg(path: &Path, img: &image::RgbImage) {
    let mut out = Vec::new();
    image::ImageEncoder::write_image(
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90),
        img.as_raw(),
        img.width(),
        img.height(),
        image::ExtendedColorType::Rgb8,
    )
    .unwrap();
    std::fs::write(path, out).unwrap();
}

fn partition(base: &str) -> shared::api::PartitionDoc {
    reqwest::blocking::get(format!("{base}/api/v1/partition"))
        .unwrap()
        .json()
        .unwrap()
}

/// `--max-kib` is a ceiling: block searches below the whole gallery's size download at most
/// the budget (and at most the plan's `max_bytes`), and the plan says why it was chosen; at a
/// budget the whole gallery fits, it is taken (nothing released) even at ε = 30.
#[test]
fn block_searches_stay_within_the_budget_and_say_why() {
    let s = demo_server("ceil-cli", &[]);
    let cli = Cli::new("budget");
    let doc = partition(&s.base);
    let whole = publish::plan::whole_plan(&doc).unwrap();
    let photo = camera_jpeg(&cli.state.join("photos"), 5003, 640, 480);
    let p = photo.to_str().unwrap();
    for (kib, eps) in [(128u64, "8"), (256, "1"), (256, "30")] {
        assert!(kib * 1024 < whole.max_bytes, "the test gallery is larger");
        for _ in 0..3 {
            let out = cli.json(&[
                "search",
                p,
                "--server",
                &s.base,
                "--protocol",
                "blocks",
                "--epsilon",
                eps,
                "--max-kib",
                &kib.to_string(),
                "--json",
            ]);
            let moved = out["block_bytes_downloaded"].as_u64().unwrap();
            let most = out["plan"]["max_bytes"].as_u64().unwrap();
            assert!(
                moved <= most && most <= kib * 1024,
                "{moved} {most} {kib}: {out}"
            );
            eprintln!(
                "--max-kib {kib} at ε = {eps}: moved {moved} bytes of blocks, plan at most {most}, expected {:.0}",
                out["plan"]["expected_bytes"].as_f64().unwrap()
            );
            assert_eq!(out["plan"]["budget"].as_u64(), Some(kib * 1024));
            assert_eq!(out["plan"]["why"]["kind"], "best_within_budget", "{out}");
            assert_eq!(
                out["plan"]["why"]["free_needs"].as_u64(),
                Some(whole.max_bytes)
            );
            assert!(out["receipt"]["epsilon"].as_f64().unwrap() > 0.0);
        }
    }
    let text = cli.ok(&[
        "search",
        p,
        "--server",
        &s.base,
        "--protocol",
        "blocks",
        "--max-kib",
        "128",
    ]);
    for want in [
        "(at most ",
        "within the limit of 128 KiB",
        "why this plan: the best predicted result among the plans that can never download more than 128 KiB",
    ] {
        assert!(text.contains(want), "{want:?} not in {text}");
    }
    let fits = whole.max_bytes.div_ceil(1024).to_string();
    let out = cli.json(&[
        "search",
        p,
        "--server",
        &s.base,
        "--protocol",
        "blocks",
        "--epsilon",
        "30",
        "--max-kib",
        &fits,
        "--json",
    ]);
    assert_eq!(out["plan"]["whole"], true, "{out}");
    assert_eq!(out["plan"]["why"]["kind"], "nothing_released");
    assert!(out["receipt"].is_null());
    assert!(out["block_bytes_downloaded"].as_u64().unwrap() <= whole.max_bytes);
    let plan = cli.ok(&[
        "plan",
        "--server",
        &s.base,
        "--epsilon",
        "30",
        "--max-kib",
        &fits,
    ]);
    assert!(
        plan.contains("releases nothing about the photo (privacy loss ε = 0)")
            && plan.contains("why this plan: it releases nothing"),
        "{plan}"
    );
}

/// Every word about a release is its receipt's: for each mechanism the CLI prints
/// `client::words::release` of the receipt it recorded (the page prints the same), and
/// `budget` prints the composition the total came from.
#[test]
fn each_mechanism_is_worded_from_its_receipt() {
    let s = demo_server("ceil-words", &[]);
    let cli = Cli::new("words");
    let photo = camera_jpeg(&cli.state.join("photos"), 5003, 320, 240);
    let p = photo.to_str().unwrap();
    let runs: [(&[&str], dp::mechanism::ReleaseKind); 4] = [
        (
            &["--protocol", "frame", "--epsilon", "4"],
            dp::mechanism::ReleaseKind::DiscreteGaussian,
        ),
        (
            &[
                "--protocol",
                "frame",
                "--epsilon",
                "4",
                "--mechanism",
                "analytic-gaussian",
            ],
            dp::mechanism::ReleaseKind::AnalyticGaussian,
        ),
        (
            &[
                "--protocol",
                "frame",
                "--epsilon",
                "0.5",
                "--mechanism",
                "classic-gaussian",
            ],
            dp::mechanism::ReleaseKind::ClassicGaussian,
        ),
        (
            &["--protocol", "blocks", "--epsilon", "2", "--max-kib", "128"],
            dp::mechanism::ReleaseKind::BlockSubset,
        ),
    ];
    for (n, (args, kind)) in runs.iter().enumerate() {
        let mut all = vec!["search", p, "--server", &s.base];
        all.extend_from_slice(args);
        let text = cli.ok(&all);
        let receipts = cli.receipts();
        assert_eq!(receipts.len(), n + 1);
        let r = receipts[n];
        assert_eq!(r.mechanism, *kind);
        let words = client::words::release(&r);
        assert!(
            text.contains(&format!("released: {words}")),
            "{words:?} not in {text}"
        );
        if *kind == dp::mechanism::ReleaseKind::AnalyticGaussian {
            // The analytic calibration proves a larger δ than asked for, and says so.
            assert!(r.proven_delta > r.delta, "{r:?}");
            assert!(text.contains("δ = 1e-5 was asked for"), "{text}");
            assert!(!text.contains("discrete Gaussian noise"), "{text}");
        }
        let t = dp::budget::compose(&receipts, 1e-5).unwrap();
        let tw = client::words::total(&t, &receipts);
        assert!(text.contains(&tw.text), "{:?} not in {text}", tw.text);
        let budget = cli.ok(&["budget"]);
        assert!(
            budget.contains(&format!("{} ({})", tw.short, tw.method)),
            "{budget}"
        );
    }
    // The top-level help says what the default (PIR) releases.
    let help = String::from_utf8(cli.run(&["--help"]).stdout).unwrap();
    assert!(
        !help.contains("only a differentially private release"),
        "{help}"
    );
    assert!(help.contains("learns nothing about the photo"), "{help}");
}

/// A 6000×4000 camera JPEG (refused before with "each side must be in 1..=4096") is searched,
/// with the exact top 8 of the input the shared decoder gives it; `search --help` states the
/// decoder's limits.
#[tokio::test(flavor = "multi_thread")]
async fn a_camera_jpeg_is_searched_exactly() {
    let s = demo_server("ceil-camera", &[]);
    let cli = Cli::new("camera");
    let photo = camera_jpeg(&cli.state.join("photos"), 5003, 6000, 4000);
    let bytes = std::fs::read(&photo).unwrap();
    let want = top8(&whole_gallery(&s.base).await, &native_features_of(&bytes));
    let ids = cli.whole_search_ids(&photo, &s.base).await;
    assert_eq!(ids, want);
    let help = String::from_utf8(cli.run(&["search", "--help"]).stdout).unwrap();
    assert!(help.contains(&embed::photo_file::limits_words()), "{help}");
}
