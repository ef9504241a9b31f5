//! Images with nothing to see (too small, one solid colour, random noise) are refused with the
//! reason, before any model reads them — never classified, never searched — in the CLI (exit
//! 13) and on the page (plain words); a photo that is merely unlike clothing is still searched,
//! with words about what its results mean (issue 61, point 4).

use std::path::{Path, PathBuf};

use privatemail_e2e::browser::{
    browser, js, load_photo, open_page, search, server, text, upload, wait_for,
};
use serde_json::json;

use crate::cli::Cli;

/// An RGB image `w×h` from `f(x, y)`, written as a PNG at `path`.
pub(crate) fn png(path: &Path, w: u32, h: u32, f: impl Fn(u32, u32) -> [u8; 3]) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let rgb: Vec<u8> = (0..h)
        .flat_map(|y| (0..w).map(move |x| (x, y)))
        .flat_map(|(x, y)| f(x, y))
        .collect();
    let file = std::fs::File::create(path).unwrap();
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.write_header().unwrap().write_image_data(&rgb).unwrap();
    path.to_path_buf()
}

/// Colour noise, from a fixed xorshift seed.
fn noise(path: &Path, side: u32) -> PathBuf {
    let state = std::cell::Cell::new(0x2545_f491_4f6c_dd1du64);
    let next = || {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        (x >> 56) as u8
    };
    png(path, side, side, |_, _| [next(), next(), next()])
}

/// The three kinds of nothing to see: each search exits 13 naming its reason, prints no class
/// and no match; the same photo kinds through `gallery add` are refused alike.
#[test]
fn the_cli_refuses_an_image_with_nothing_to_see_with_exit_13() {
    let s = crate::cli::server();
    let cli = Cli::new("nothing-to-see");
    let dir = cli.state.join("photos");
    let cases = [
        (
            png(&dir.join("tiny.png"), 5, 5, |x, y| {
                [(x * 50) as u8, (y * 50) as u8, 90]
            }),
            "5×5",
        ),
        (
            png(&dir.join("solid.png"), 200, 150, |_, _| [40, 120, 200]),
            "one solid colour",
        ),
        (noise(&dir.join("noise.png"), 64), "random noise"),
    ];
    for (path, reason) in &cases {
        let path = path.to_str().unwrap();
        for args in [
            vec!["search", path, "--server", &s.base],
            vec!["search", path, "--server", &s.base, "--json"],
        ] {
            let out = cli.run(&args);
            let (stdout, stderr) = (
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
            assert_eq!(out.status.code(), Some(13), "{args:?}: {stdout} {stderr}");
            assert!(stderr.contains(reason), "{reason}: {stderr}");
            assert!(stderr.contains("nothing was sent"), "{stderr}");
            assert!(!stdout.contains("photo:"), "classified: {stdout}");
            assert!(stdout.trim().is_empty(), "printed a result: {stdout}");
        }
    }
}

/// On the page: a solid colour and a 5×5 image are refused in plain words (the reason, and
/// that it was not classified or searched), with search disabled and no class shown; a
/// product photo loaded after works as before.
#[tokio::test(flavor = "multi_thread")]
async fn the_page_refuses_an_image_with_nothing_to_see_in_plain_words() {
    let srv = server();
    let (_driver, c) = browser().await;
    open_page(&c, &srv.base).await;
    let dir = std::env::temp_dir().join(format!("pm-nothing-{}", std::process::id()));
    // A product photo first, so a refusal must also clear it.
    load_photo(&c, &privatemail_e2e::photo_png(&dir, 5003)).await;
    let cases = [
        (
            png(&dir.join("solid.png"), 300, 200, |_, _| [250, 250, 248]),
            "one solid colour",
        ),
        (
            png(&dir.join("tiny.png"), 5, 5, |x, _| [(x * 60) as u8, 20, 20]),
            "only 5×5 pixels",
        ),
        (noise(&dir.join("noise.png"), 96), "random noise"),
    ];
    for (path, reason) in &cases {
        js(
            &c,
            "document.getElementById('error').hidden = true; return 0;",
        )
        .await;
        upload(&c, path).await;
        wait_for(
            &c,
            "!document.getElementById('error').hidden",
            "the refusal",
        )
        .await;
        let error = text(&c, "error").await;
        assert!(error.contains(reason), "{error}");
        assert!(
            error.contains("It was not classified or searched"),
            "{error}"
        );
        let state = js(
            &c,
            "return [document.getElementById('search').disabled, document.getElementById('query').hidden,
                     document.getElementById('prediction').textContent];",
        )
        .await;
        assert_eq!(state, json!([true, true, ""]), "{state}");
    }
    load_photo(&c, &privatemail_e2e::photo_png(&dir, 5003)).await;
    assert!(text(&c, "prediction").await.contains("The model thinks"));
}

/// On the page, a photo that is merely unlike clothing (the CLI's faint square outline on
/// white, `cli::a_photo_that_is_not_clothing_is_said_so`) is classified and said so in plain
/// words — what its results are — and can still be searched (eight matches); a product photo
/// chosen after it clears the words.
#[tokio::test(flavor = "multi_thread")]
async fn the_page_says_a_photo_is_not_clothing_and_still_searches_it() {
    let srv = server();
    let (_driver, c) = browser().await;
    open_page(&c, &srv.base).await;
    let dir = std::env::temp_dir().join(format!("pm-unfamiliar-{}", std::process::id()));
    let outline = png(&dir.join("outline.png"), 64, 64, |x, y| {
        let edge = (4..60).contains(&x)
            && (4..60).contains(&y)
            && (x == 4 || x == 59 || y == 4 || y == 59);
        [if edge { 215 } else { 255 }; 3]
    });
    load_photo(&c, &outline).await;
    assert!(text(&c, "prediction").await.contains("The model thinks"));
    let shown = js(
        &c,
        "return [document.getElementById('unfamiliar').hidden, document.getElementById('unfamiliar').textContent];",
    )
    .await;
    assert_eq!(
        shown,
        json!([false, embed::ood::UNFAMILIAR_MESSAGE]),
        "{shown}"
    );
    assert_eq!(
        search(&c).await.len(),
        8,
        "the flagged photo is still searched"
    );
    // The search button is still enabled by the outline: disabled first, so the wait for the
    // model ends on the product photo's result, not the outline's.
    js(
        &c,
        "document.getElementById('search').disabled = true; return null;",
    )
    .await;
    load_photo(&c, &privatemail_e2e::photo_png(&dir, 5003)).await;
    let hidden = js(&c, "return document.getElementById('unfamiliar').hidden;").await;
    assert_eq!(hidden, json!(true), "a product photo is not flagged");
}
