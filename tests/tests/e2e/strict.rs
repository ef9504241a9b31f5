//! Strict requests: a misspelled or unknown field is a typed 422 naming the field, never
//! silently ignored (for a privacy request, a setting the user believes applied but did not).

use privatemail_e2e::demo_server;
use serde_json::{json, Value};

#[test]
fn unknown_fields_are_typed_422_naming_the_field() {
    let s = demo_server("strict", &["--admin-token", "t"]);
    let http = reqwest::blocking::Client::new();
    let row = vec![0.1f64; 10];
    let cases = [
        (
            "/api/v1/search",
            json!({"query_rows": [row], "k": 8, "noise_std": 0.5, "rankng": "posterior"}),
            "rankng",
        ),
        (
            "/api/v1/search",
            json!({"query_rows": [row], "k": 8, "epsilon": 1.0}),
            "epsilon",
        ),
        (
            "/api/v1/gallery",
            json!({"items": [{"label": 1, "pixels": vec![0u8; 784], "colour": "red"}]}),
            "colour",
        ),
        (
            "/api/v1/gallery",
            json!({"items": [], "force": true}),
            "force",
        ),
    ];
    for (path, body, field) in cases {
        let resp = http
            .post(format!("{}{path}", s.base))
            .bearer_auth("t")
            .json(&body)
            .send()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 422, "{path} {body}");
        let v: Value = resp.json().unwrap();
        assert_eq!(v["error"]["code"], "invalid_input", "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(&format!("unknown field `{field}`")), "{msg}");
    }
}
