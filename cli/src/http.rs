//! The server, over HTTP: typed errors for unreachable servers, refusals and malformed answers.

use std::time::Duration;

use serde::de::DeserializeOwned;
use shared::api::ErrorResponse;

use crate::error::{CliError, Result};

/// Largest body the client accepts (the whole-gallery block of a large gallery fits).
const MAX_BODY: u64 = 512 << 20;

pub struct Server {
    pub base: String,
    http: reqwest::blocking::Client,
}

impl Server {
    pub fn new(base: &str) -> Result<Self> {
        let base = base.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(CliError::Usage(format!(
                "--server must be an http:// or https:// URL, got {base:?}"
            )));
        }
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(120))
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| CliError::Usage(e.to_string()))?;
        Ok(Server { base, http })
    }

    /// An absolute URL for a server path or an absolute URL the server published.
    pub fn url(&self, path: &str) -> String {
        if path.starts_with("http://") || path.starts_with("https://") {
            path.to_string()
        } else {
            format!("{}{}", self.base, path)
        }
    }

    fn check(
        &self,
        url: &str,
        r: reqwest::Result<reqwest::blocking::Response>,
    ) -> Result<reqwest::blocking::Response> {
        let resp = r.map_err(|e| CliError::Unreachable {
            url: url.to_string(),
            reason: e.without_url().to_string(),
        })?;
        if resp.status().is_success() {
            if resp.content_length().is_some_and(|n| n > MAX_BODY) {
                return Err(CliError::Malformed(format!(
                    "{url}: body larger than {MAX_BODY} bytes"
                )));
            }
            return Ok(resp);
        }
        let status = resp.status().as_u16();
        let text = resp.text().unwrap_or_default();
        Err(match serde_json::from_str::<ErrorResponse>(&text) {
            Ok(e) => CliError::Refused {
                status,
                code: format!(
                    ", {}",
                    serde_json::to_value(e.error.code)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                ),
                message: e.error.message,
            },
            Err(_) => CliError::Refused {
                status,
                code: String::new(),
                message: text.chars().take(200).collect(),
            },
        })
    }

    pub fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let url = self.url(path);
        let resp = self.check(&url, self.http.get(&url).send())?;
        resp.json()
            .map_err(|e| CliError::Malformed(format!("{url}: {e}")))
    }

    pub fn get_bytes(&self, path: &str) -> Result<Vec<u8>> {
        let url = self.url(path);
        let resp = self.check(&url, self.http.get(&url).send())?;
        let bytes = resp
            .bytes()
            .map_err(|e| CliError::Malformed(format!("{url}: {e}")))?;
        Ok(bytes.to_vec())
    }

    /// `POST` raw bytes; the answer must be exactly `expect` bytes (a PIR answer's size is
    /// fixed by the query, so anything else is refused without reading past it).
    pub fn post_bytes(&self, path: &str, body: Vec<u8>, expect: usize) -> Result<Vec<u8>> {
        let url = self.url(path);
        let req = self
            .http
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(body);
        let resp = self.check(&url, req.send())?;
        if resp.content_length().is_some_and(|n| n != expect as u64) {
            return Err(CliError::Malformed(format!(
                "{url}: answer of {:?} bytes, expected {expect}",
                resp.content_length()
            )));
        }
        use std::io::Read;
        let mut out = Vec::with_capacity(expect);
        resp.take(expect as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| CliError::Malformed(format!("{url}: {e}")))?;
        if out.len() != expect {
            return Err(CliError::Malformed(format!(
                "{url}: answer of {} bytes, expected {expect}",
                out.len()
            )));
        }
        Ok(out)
    }

    pub fn post_json<B: serde::Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        token: Option<&str>,
    ) -> Result<T> {
        let url = self.url(path);
        let mut req = self.http.post(&url).json(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = self.check(&url, req.send())?;
        resp.json()
            .map_err(|e| CliError::Malformed(format!("{url}: {e}")))
    }

    pub fn delete_json<T: DeserializeOwned>(&self, path: &str, token: Option<&str>) -> Result<T> {
        let url = self.url(path);
        let mut req = self.http.delete(&url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = self.check(&url, req.send())?;
        resp.json()
            .map_err(|e| CliError::Malformed(format!("{url}: {e}")))
    }
}
