//! A garment cut by the photo's edge is said to be (`embed::cut`, issue 61 point 6), in the
//! CLI (a line of text, and `"cut_off"` in `--json`) and on the page (`#cut-off`), in the same
//! words; a whole garment — framed tightly from edge to edge, or with a margin — is not, and
//! the page clears the words on the next photo and on an error.

use std::path::{Path, PathBuf};

use privatemail_e2e::browser::{
    browser, js, load_photo, open_page, server, text, upload, wait_for,
};
use rand::SeedableRng;
use serde_json::json;

use crate::cli::Cli;

const SIDE: usize = 112;

/// Test image `i` drawn as a 112-pixel photo by `shot`, written as an RGB PNG.
fn photo(dir: &Path, name: &str, i: usize, shot: impl Fn(&[u8]) -> data::photos::Shot) -> PathBuf {
    let (img, _) = privatemail_e2e::test_image(i);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(i as u64);
    let rgba = data::photos::render(&img, &shot(&img), &mut rng);
    let side = SIDE as u32;
    crate::nothing_to_see::png(&dir.join(format!("{name}-{i}.png")), side, side, |x, y| {
        let p = 4 * (y * side + x) as usize;
        [rgba[p], rgba[p + 1], rgba[p + 2]]
    })
}

/// Three photos of test image 5003: cut by an edge, framed tightly (the clean photo), and with
/// a margin; each checked against the pipeline, so the clients' words are tested on photos
/// that are what they claim.
fn photos(dir: &Path) -> [PathBuf; 3] {
    use data::photos::Shot;
    let i = 5003;
    let cut = photo(dir, "cut", i, |img| {
        Shot::cut(img, SIDE, &mut rand_chacha::ChaCha8Rng::seed_from_u64(7))
    });
    let tight = photo(dir, "tight", i, |_| Shot::clean(SIDE));
    let margin = photo(dir, "margin", i, |_| Shot {
        scale: 0.8,
        ..Shot::clean(SIDE)
    });
    for (p, want) in [(&cut, true), (&tight, false), (&margin, false)] {
        let f = embed::photo_file::decode(&std::fs::read(p).unwrap()).unwrap();
        assert_eq!(f.cut_off, want, "{}: {:?}", p.display(), f.bbox);
    }
    [cut, tight, margin]
}

#[test]
fn the_cli_says_when_the_item_is_cut_off() {
    let s = crate::cli::server();
    let cli = Cli::new("cut-off");
    let [cut, tight, margin] = photos(&cli.state.join("photos"));
    let cut = cut.to_str().unwrap();
    let text = cli.ok(&["search", cut, "--server", &s.base]);
    assert!(text.contains(embed::cut::CUT_OFF_MESSAGE), "{text}");
    let out = cli.json(&["search", cut, "--server", &s.base, "--json"]);
    assert_eq!(out["cut_off"], true, "{out}");
    assert_eq!(out["results"].as_array().map(Vec::len), Some(8), "{out}");
    for whole in [&tight, &margin] {
        let whole = whole.to_str().unwrap();
        let text = cli.ok(&["search", whole, "--server", &s.base]);
        assert!(
            !text.contains(embed::cut::CUT_OFF_MESSAGE),
            "{whole}: {text}"
        );
        let out = cli.json(&["search", whole, "--server", &s.base, "--json"]);
        assert_eq!(out["cut_off"], false, "{whole}: {out}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_says_when_the_item_is_cut_off() {
    let srv = server();
    let (_driver, c) = browser().await;
    open_page(&c, &srv.base).await;
    let dir = std::env::temp_dir().join(format!("pm-cut-off-{}", std::process::id()));
    let [cut, tight, margin] = photos(&dir);
    let shown = || async {
        js(
            &c,
            "const e = document.getElementById('cut-off'); return [e.hidden, e.textContent, e.getAttribute('role')];",
        )
        .await
    };
    // Each photo loaded with the search button disabled first, so the wait ends on that
    // photo's result and not the one before.
    let load = |p: PathBuf| {
        let c = &c;
        async move {
            js(
                c,
                "document.getElementById('search').disabled = true; return null;",
            )
            .await;
            load_photo(c, &p).await;
        }
    };
    let said = json!([false, embed::cut::CUT_OFF_MESSAGE, "status"]);
    load(cut.clone()).await;
    assert_eq!(shown().await, said);
    // The next photo, whole, clears it.
    for whole in [&tight, &margin] {
        load(whole.clone()).await;
        assert_eq!(
            shown().await,
            json!([true, "", "status"]),
            "{}",
            whole.display()
        );
        load(cut.clone()).await;
        assert_eq!(shown().await, said);
    }
    // A file that is not an image clears it with everything else of the photo before.
    let bad = dir.join("not-a-photo.png");
    std::fs::write(&bad, b"not a PNG").unwrap();
    upload(&c, &bad).await;
    wait_for(&c, "!document.getElementById('error').hidden", "the error").await;
    assert!(text(&c, "error").await.contains("cannot be used"));
    assert_eq!(shown().await, json!([true, "", "status"]));
}
