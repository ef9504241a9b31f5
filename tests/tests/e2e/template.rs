//! The shared gallery build (`privatemail_e2e::stored_gallery_server`): a server opened on a
//! copy of the template store serves exactly what a server that builds its own store serves —
//! the same configuration, anchors, partition version and documents, the same blocks and the
//! same PIR databases — under an identity key of its own.

use privatemail_e2e::{building_server, small_server};
use reqwest::blocking::Client;
use shared::api::PartitionDoc;

fn body(http: &Client, base: &str, path: &str) -> Vec<u8> {
    let r = http.get(format!("{base}{path}")).send().unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.bytes().unwrap().to_vec()
}

#[test]
fn a_copied_store_serves_what_a_built_one_does() {
    let built = building_server("template-built", 1000, 200, &[]);
    let copied = small_server("template-copied", &[]);
    let http = Client::builder().no_gzip().build().unwrap();
    let part: PartitionDoc =
        serde_json::from_slice(&body(&http, &built.base, "/api/v1/partition")).unwrap();
    for path in [
        "/api/v1/config",
        "/api/v1/anchors",
        "/api/v1/partition",
        "/api/v1/pir",
    ] {
        assert_eq!(
            body(&http, &built.base, path),
            body(&http, &copied.base, path),
            "{path} differs between the built and the copied store"
        );
    }
    // Every block of every level, and the PIR databases' public files.
    for (l, level) in part.levels.iter().enumerate() {
        for b in 0..level.blocks {
            let path = format!("{}/{l}/{b}", part.blocks_url);
            assert_eq!(
                body(&http, &built.base, &path),
                body(&http, &copied.base, &path),
                "{path} differs"
            );
        }
    }
    let pir: serde_json::Value =
        serde_json::from_slice(&body(&http, &built.base, "/api/v1/pir")).unwrap();
    let answer = pir["answer_url"].as_str().unwrap();
    for db in ["thumbs", "scores"] {
        let path = format!("{answer}/{db}/hint");
        assert_eq!(
            body(&http, &built.base, &path),
            body(&http, &copied.base, &path),
            "{path} differs"
        );
    }
    // Each store its own identity key, as on a fresh store.
    assert_ne!(
        body(&http, &built.base, "/api/v1/identity"),
        body(&http, &copied.base, "/api/v1/identity"),
        "the copy kept the template's identity key"
    );
}
