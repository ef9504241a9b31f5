//! The gallery's identity and the refusal, for the page: `client::identity`'s rules behind
//! free functions over the book's JSON, which the page keeps in `localStorage`
//! (`web/identity.js`). The page passes the book in and stores what comes back; it decides
//! nothing. A browser does not tell a page which address it reached, so the page's refusal is
//! keyed by the gallery's key and normalised origin only.

use client::identity::{self as rules, Book, Stop};
use client::pir_search::driver::Refusal;
use shared::identity::IdentityDoc;
use wasm_bindgen::prelude::*;

use crate::js_err;

fn book(json: &str) -> Result<Book, JsError> {
    if json.trim().is_empty() {
        return Ok(Book::default());
    }
    serde_json::from_str(json)
        .map_err(|e| js_err(format!("the stored identities are unreadable: {e}")))
}

fn text(b: &Book) -> String {
    serde_json::to_string(b).unwrap_or_default()
}

/// What a check returns: the book to store back and, when nothing may be sent, why.
#[derive(serde::Serialize)]
struct Checked {
    book: String,
    /// `null`, or `{"kind": "refused" | "new_key", "message", "presented"?}`.
    stop: Option<StopJson>,
}

#[derive(serde::Serialize)]
struct StopJson {
    kind: &'static str,
    message: String,
    presented: Option<String>,
}

fn checked(b: &Book, result: Result<(), Stop>) -> String {
    let stop = result.err().map(|s| StopJson {
        kind: match s {
            Stop::Refused(_) => "refused",
            Stop::NewKey { .. } => "new_key",
        },
        message: s.message(),
        presented: match &s {
            Stop::NewKey { presented, .. } => Some(presented.clone()),
            Stop::Refused(_) => None,
        },
    });
    serde_json::to_string(&Checked {
        book: text(b),
        stop,
    })
    .unwrap_or_default()
}

/// The normalised origin of a gallery URL (`client::identity::origin`).
#[wasm_bindgen]
pub fn gallery_origin(url: &str) -> Result<String, JsError> {
    rules::origin(url).map_err(js_err)
}

/// The gallery's key (hex) once `identity_json` (`GET /api/v1/identity`) verifies over
/// `config` (the bytes of `GET /api/v1/config`); an error otherwise.
#[wasm_bindgen]
pub fn identity_verify(identity_json: &str, config: &[u8]) -> Result<String, JsError> {
    let doc: IdentityDoc = serde_json::from_str(identity_json)
        .map_err(|e| js_err(format!("the gallery's identity document is malformed: {e}")))?;
    rules::verify(&doc, config).map_err(js_err)
}

/// Before any request to the gallery at `origin`: [`Checked`] JSON.
#[wasm_bindgen]
pub fn identity_before(book_json: &str, origin: &str) -> Result<String, JsError> {
    let mut b = book(book_json)?;
    let r = b.before_contact(origin, &[]);
    Ok(checked(&b, r))
}

/// After the identity verified and before any search: [`Checked`] JSON (the key is pinned on
/// first use).
#[wasm_bindgen]
pub fn identity_meet(book_json: &str, origin: &str, key: &str) -> Result<String, JsError> {
    let mut b = book(book_json)?;
    let r = b.meet(origin, &[], key).map(|_| ());
    Ok(checked(&b, r))
}

/// The refusal standing against this gallery (JSON, as `pir_start` takes it), if any.
#[wasm_bindgen]
pub fn identity_refusal(
    book_json: &str,
    origin: &str,
    key: Option<String>,
) -> Result<Option<String>, JsError> {
    Ok(book(book_json)?
        .refusal(origin, &[], key.as_deref())
        .map(|r| serde_json::to_string(&r).unwrap_or_default()))
}

/// The book with `refusal_json` (from a failed search) recorded against the key and origin.
#[wasm_bindgen]
pub fn identity_record(
    book_json: &str,
    origin: &str,
    key: Option<String>,
    refusal_json: &str,
) -> Result<String, JsError> {
    let refusal: Refusal = serde_json::from_str(refusal_json)
        .map_err(|e| js_err(format!("the refusal is unreadable: {e}")))?;
    let mut b = book(book_json)?;
    b.record(origin, &[], key.as_deref(), &refusal);
    Ok(text(&b))
}

/// The book with `key` accepted for `origin` (the person's answer to a new key).
#[wasm_bindgen]
pub fn identity_accept(book_json: &str, origin: &str, key: &str) -> Result<String, JsError> {
    let key = rules::parse_key(key).map_err(js_err)?;
    let mut b = book(book_json)?;
    b.accept(origin, &key);
    Ok(text(&b))
}

/// The book with every refusal naming `origin` (or its pinned key) lifted.
#[wasm_bindgen]
pub fn identity_clear(book_json: &str, origin: &str) -> Result<String, JsError> {
    let mut b = book(book_json)?;
    b.clear(origin);
    Ok(text(&b))
}
