//! The same photo file in both clients (issue 61, point 5): the page decodes with the browser
//! and reduces with the CLI's code (`embed::reduce`, through the wasm client), so a PNG gives
//! the CLI's model input bit for bit and a JPEG the same top 8; a 50-megapixel camera JPEG is
//! taken by both; a photo past the limits is refused by the page in the CLI's words.

use std::path::{Path, PathBuf};

use privatemail_e2e::browser::{
    browser, choose, js, load_photo, open_page, result_ids, search, server, text, top8, upload,
    wait_for, whole_gallery,
};
use privatemail_e2e::test_image;

use crate::cli::Cli;

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("pm-decode-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Test image `i` as a camera photo, `w×h`, with a fine texture of `grain` levels (so every
/// block's mean depends on every pixel, and a JPEG's rounding shows as it does in a real
/// photo's grain), dark garment on a light ground.
fn textured(i: usize, w: u32, h: u32, grain: u32) -> image::RgbImage {
    let (px, _) = test_image(i);
    // The garment fills 9/10 of the shorter side (a portrait photo too).
    let scale = (w.min(h) as usize * 9 / 10) / 28;
    let (ox, oy) = ((w as usize - 28 * scale) / 2, (h as usize - 28 * scale) / 2);
    image::RgbImage::from_fn(w, h, |x, y| {
        let (xu, yu) = (x as usize, y as usize);
        let v = if xu >= ox && yu >= oy && xu < ox + 28 * scale && yu < oy + 28 * scale {
            px[((yu - oy) / scale) * 28 + (xu - ox) / scale]
        } else {
            0
        };
        let noise = ((x.wrapping_mul(2_654_435_761) ^ y.wrapping_mul(40_503)) >> 7) % grain;
        let g = 236 - (v as u32 * 200 / 255) as u8 + noise as u8;
        image::Rgb([g, g.saturating_sub(4), g.saturating_sub(9)])
    })
}

/// [`textured`] as a PNG file.
fn camera_png(dir: &Path, i: usize, w: u32, h: u32, grain: u32) -> PathBuf {
    let path = dir.join(format!("camera-{i}-{w}x{h}.png"));
    textured(i, w, h, grain).save(&path).unwrap();
    path
}

/// [`textured`] as a 16-bit PNG whose low bytes are 200 (so a sample read by rounding comes
/// out a level above its high byte, and one read by its high byte does not).
fn camera_png16(dir: &Path, i: usize, w: u32, h: u32) -> PathBuf {
    let path = dir.join(format!("camera16-{i}-{w}x{h}.png"));
    let img = textured(i, w, h, 13);
    let wide: image::ImageBuffer<image::Rgb<u16>, Vec<u16>> =
        image::ImageBuffer::from_fn(w, h, |x, y| {
            image::Rgb(img.get_pixel(x, y).0.map(|v| {
                if v == 255 {
                    65535
                } else {
                    u16::from(v) << 8 | 200
                }
            }))
        });
    image::DynamicImage::ImageRgb16(wide).save(&path).unwrap();
    path
}

/// [`textured`] as a JPEG file (quality 90, the `image` encoder's 4:2:0 chroma).
fn textured_jpeg(dir: &Path, i: usize, w: u32, h: u32) -> PathBuf {
    let img = textured(i, w, h, 13);
    let path = dir.join(format!("textured-{i}-{w}x{h}.jpg"));
    crate::ceilings_cli::write_jpeg(&path, &img);
    path
}

/// Upload a photo and wait until the model has run on it: the search button, enabled by the
/// previous photo, is disabled first, so the wait ends on this photo's result, not the last.
async fn load_new_photo(c: &fantoccini::Client, path: &Path) {
    js(
        c,
        "document.getElementById('search').disabled = true; return null;",
    )
    .await;
    load_photo(c, path).await;
}

/// The model input the page shows (its 28×28 preview, drawn from the wasm client's pixels).
async fn page_pixels(c: &fantoccini::Client) -> Vec<u8> {
    let v = js(
        c,
        "const d = document.getElementById('preview').getContext('2d').getImageData(0, 0, 28, 28).data;
         return [...d].filter((_, i) => i % 4 === 0);",
    )
    .await;
    serde_json::from_value(v).unwrap()
}

fn features(pixels: &[u8]) -> Vec<f32> {
    embed::model::Model::from_bytes(data::assets::QUERY_WEIGHTS)
        .unwrap()
        .search_features(pixels)
        .unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let n = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

/// A PNG (odd size, so the last blocks are partial; the reducer's factor 3; one of 50
/// megapixels, factor 9; and one of 16 bits a sample, which both read by the high byte) gives
/// in the page exactly the model input the CLI's decoder gives, hence the same features, and
/// the whole gallery's exact top 8 of them.
#[tokio::test(flavor = "multi_thread")]
async fn a_png_gives_the_clis_model_input_bit_for_bit() {
    let srv = server();
    let (_driver, c) = browser().await;
    open_page(&c, &srv.base).await;
    choose(&c, "protocol", "whole").await;
    let whole = whole_gallery(&srv.base).await;
    let d = dir();
    // The last at 50 megapixels, its grain coarser so the file stays within 64 MiB.
    for (i, w, h, grain) in [
        (5003, 3001, 1999, 13),
        (17, 3001, 1999, 13),
        (321, 3001, 1999, 13),
        (42, 8660, 5800, 2),
        (5003, 1201, 799, 0),
    ] {
        // Grain 0: the 16-bit file.
        let path = if grain == 0 {
            camera_png16(&d, i, w, h)
        } else {
            camera_png(&d, i, w, h, grain)
        };
        let cli = embed::photo_file::decode(&std::fs::read(&path).unwrap()).unwrap();
        load_new_photo(&c, &path).await;
        let page = page_pixels(&c).await;
        assert_eq!(
            page, cli.pixels,
            "image {i}: the page's model input differs"
        );
        search(&c).await;
        assert_eq!(
            result_ids(&c).await,
            top8(&whole, &features(&cli.pixels)),
            "image {i}"
        );
    }
}

/// The least cosine between the features the two clients compute for one JPEG file.
///
/// Why not 1: the page decodes with Chromium's libjpeg-turbo, the CLI with zune-jpeg, and the
/// JPEG standard does not fix the decoded values: its inverse DCT need only be within the
/// accuracy of ISO/IEC 10918-2 (IEEE 1180: each sample within ±1 of the exact transform), and
/// the chroma upsampling and YCbCr→RGB rounding are each decoder's own. So the decoded pixels
/// differ by a level or so here and there; averaging `f×f` blocks (`embed::reduce`) shrinks
/// that, but a reduced pixel on a rounding edge still moves one level, and the framing
/// (`embed::photo::analyse`: thresholds, stretch) and the 28×28 resampling carry such steps
/// into a few model-input pixels, by one level. Measured (2026-12-05, a56e59f + fa8d1de, the
/// nine files of the tests below): model inputs differ in 0–25 of 784 pixels, never by more
/// than 1 level ([`JPEG_MOST_LEVELS`]), and the lowest feature cosine was 0.999992. The bound
/// leaves 1 − cosine ten times the largest measured (8e-6), not room for a real difference: a
/// wrongly turned, cropped or scaled photo falls far below it.
const JPEG_MIN_COSINE: f64 = 0.9999;

/// The most a model-input pixel may differ between the clients for a JPEG: the one level of
/// rounding the decoders' allowed differences leave after averaging (see [`JPEG_MIN_COSINE`]).
const JPEG_MOST_LEVELS: u8 = 1;

/// One file in the page and in the CLI's decoder: the features' cosine, the model-input
/// pixels that differ and by how much at most, and the CLI's features.
async fn both_clients(c: &fantoccini::Client, path: &Path) -> (f64, usize, u8, Vec<f32>) {
    let p = path.to_path_buf();
    let cli = tokio::task::spawn_blocking(move || {
        embed::photo_file::decode(&std::fs::read(&p).unwrap()).unwrap()
    })
    .await
    .unwrap();
    load_new_photo(c, path).await;
    let page = page_pixels(c).await;
    let (fp, fc) = (features(&page), features(&cli.pixels));
    let diff: Vec<u8> = page
        .iter()
        .zip(&cli.pixels)
        .map(|(a, b)| a.abs_diff(*b))
        .collect();
    (
        cosine(&fp, &fc),
        diff.iter().filter(|&&d| d > 0).count(),
        diff.iter().copied().max().unwrap_or(0),
        fc,
    )
}

/// JPEGs (4:2:0, quality 90) of several sizes, flat and grainy, give features in the page and
/// in the CLI within [`JPEG_MIN_COSINE`] of each other and the same top 8. Every file's
/// figures are printed before any is asserted, so one run measures them all.
#[tokio::test(flavor = "multi_thread")]
async fn a_jpeg_gives_the_same_features_in_both_clients() {
    let srv = server();
    let (_driver, c) = browser().await;
    open_page(&c, &srv.base).await;
    choose(&c, "protocol", "whole").await;
    let whole = whole_gallery(&srv.base).await;
    let d = dir();
    let mut files = Vec::new();
    for (i, w, h) in [(5003, 640, 480), (17, 3000, 2000), (321, 6000, 4000)] {
        files.push(crate::ceilings_cli::camera_jpeg(&d, i, w, h));
        files.push(textured_jpeg(&d, i, w, h));
    }
    for (i, w, h) in [(42, 2999, 2001), (1000, 4000, 6000)] {
        files.push(textured_jpeg(&d, i, w, h));
    }
    let mut measured = Vec::new();
    for path in &files {
        let (cos, n, most, fc) = both_clients(&c, path).await;
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        eprintln!(
            "JPEG {name}: model inputs differ in {n} of 784 pixels, at most {most} levels; feature cosine {cos:.6}"
        );
        search(&c).await;
        let same_top8 = result_ids(&c).await == top8(&whole, &fc);
        measured.push((name, cos, most, same_top8));
    }
    for (name, cos, most, same_top8) in measured {
        assert!(cos >= JPEG_MIN_COSINE, "{name}: cosine {cos}");
        assert!(
            most <= JPEG_MOST_LEVELS,
            "{name}: a model-input pixel differs by {most} levels"
        );
        assert!(same_top8, "{name}: the page's top 8 is not the CLI's");
    }
}

/// A 50-megapixel camera JPEG (8,660 × 5,800, grainy) is taken by the page (read in strips,
/// reduced by the wasm client) and by the CLI, with features within [`JPEG_MIN_COSINE`], each
/// client's results the exact top 8 of its own model input over the published gallery (their
/// two decoders' pixels differ a little, so a near tie may fall either way); a photo past the
/// limits is refused by
/// the page with the reducer's words (the CLI's).
#[tokio::test(flavor = "multi_thread")]
async fn a_50_megapixel_jpeg_is_taken_by_both_and_the_limits_hold_in_the_page() {
    let srv = server();
    let (_driver, c) = browser().await;
    open_page(&c, &srv.base).await;
    choose(&c, "protocol", "whole").await;
    let cli = Cli::new("decode-50mp");
    let d = cli.state.join("photos");
    std::fs::create_dir_all(&d).unwrap();
    let path = textured_jpeg(&d, 5003, 8660, 5800);
    let p = path.clone();
    let t = std::time::Instant::now();
    let framing = tokio::task::spawn_blocking(move || {
        embed::photo_file::decode(&std::fs::read(&p).unwrap()).unwrap()
    })
    .await
    .unwrap();
    let cli_secs = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    load_photo(&c, &path).await;
    let page_secs = t.elapsed().as_secs_f64();
    let page = page_pixels(&c).await;
    let cos = cosine(&features(&page), &features(&framing.pixels));
    eprintln!(
        "50-megapixel JPEG ({} bytes): the CLI's decoder read it in {cli_secs:.1} s, the page in {page_secs:.1} s; feature cosine {cos:.6}",
        std::fs::metadata(&path).unwrap().len()
    );
    assert!(cos >= JPEG_MIN_COSINE, "cosine {cos}");
    assert_eq!(text(&c, "error").await, "");
    search(&c).await;
    let page_ids = result_ids(&c).await;
    let ids = cli.whole_search_ids(&path, &srv.base).await;
    let whole = whole_gallery(&srv.base).await;
    assert_eq!(page_ids, top8(&whole, &features(&page)), "the page");
    assert_eq!(ids, top8(&whole, &features(&framing.pixels)), "the CLI");
    eprintln!("the same top 8 in both: {}", ids == page_ids);
    // `privatemail --help` states the limits (the words `search --help` gives PHOTO too).
    let help = String::from_utf8(cli.run(&["--help"]).stdout).unwrap();
    assert!(help.contains(&embed::photo_file::limits_words()), "{help}");
    assert!(help.contains(embed::photo_file::HEIC_NOT_READ), "{help}");

    // Past each limit: refused by both with the reason (the page before its reducer reads
    // any pixel; the CLI from the header), the limits named.
    let d = dir();
    let side = embed::reduce::MAX_PHOTO_SIDE + 1;
    let wide = d.join("too-wide.png");
    image::RgbImage::from_pixel(side, 8, image::Rgb([200, 200, 200]))
        .save(&wide)
        .unwrap();
    // 108 megapixels of one grey, a small file.
    let (w, h) = (12_000u32, 9_000u32);
    let many = d.join("too-many-pixels.png");
    image::GrayImage::from_pixel(w, h, image::Luma([200]))
        .save(&many)
        .unwrap();
    let heavy = d.join("too-heavy.jpg");
    std::fs::File::create(&heavy)
        .unwrap()
        .set_len(embed::reduce::MAX_PHOTO_BYTES as u64 + 1)
        .unwrap();
    let mib = format!("larger than {} MiB", embed::reduce::MAX_PHOTO_BYTES >> 20);
    for (file, why) in [
        (
            &wide,
            embed::reduce::check_size(side as u64, 8)
                .unwrap_err()
                .to_string(),
        ),
        (
            &many,
            embed::reduce::check_size(w as u64, h as u64)
                .unwrap_err()
                .to_string(),
        ),
    ] {
        upload(&c, file).await;
        let name = file.file_name().unwrap().to_str().unwrap().to_owned();
        wait_for(
            &c,
            &format!("document.getElementById('error').textContent.includes('{name}')"),
            "the refusal",
        )
        .await;
        let shown = text(&c, "error").await;
        assert!(shown.contains(&why), "{shown:?} lacks {why:?}");
        assert!(shown.contains(&embed::reduce::limits_words()), "{shown}");
        assert_eq!(
            js(&c, "return document.getElementById('search').disabled;").await,
            serde_json::json!(true)
        );
    }
    upload(&c, &heavy).await;
    wait_for(
        &c,
        "document.getElementById('error').textContent.includes('too-heavy.jpg')",
        "the refusal",
    )
    .await;
    let shown = text(&c, "error").await;
    assert!(shown.contains(&mib), "{shown:?} lacks {mib:?}");
    for (file, why) in [
        (&wide, "pixels a side"),
        (&many, "megapixels"),
        (&heavy, mib.as_str()),
    ] {
        let out = cli.run(&["search", file.to_str().unwrap(), "--server", &srv.base]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{file:?} was taken");
        assert!(err.contains(why), "{file:?}: {err}");
    }
}
