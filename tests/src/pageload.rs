//! The whole page flow of a block search under load: many concurrent clients, each in a loop
//! fetching the partition document (revalidated with its ETag, as a browser's cache does),
//! planning, releasing its blocks for a random photo, downloading exactly those blocks of the
//! document's version and checking every block against the document's hash (a block of any
//! other version fails that check: a client that saw a mixed version is counted as an error).
//! Optionally an operator adds and removes gallery images meanwhile, checking after each
//! change that nothing was lost. Used by the load test and by `loadgen --protocol page`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::block_search::{block_url, release_blocks, verify_and_rank};
use publish::centroids::{centroids_url, verify, Centroids};
use publish::plan::plan;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use reqwest::blocking::Client;
use shared::api::PartitionDoc;

#[derive(Debug, Clone)]
pub struct LoadSettings {
    pub base: String,
    pub clients: usize,
    /// Run at least this long…
    pub duration: Duration,
    /// …and then on until clients together have seen this many partition versions (a swap
    /// under load takes as long as the machine needs to rebuild), but no longer than
    /// `max_duration`. 0 or 1: stop at `duration`.
    pub until_versions: usize,
    pub max_duration: Duration,
    pub epsilon: f64,
    /// The byte budget of one search (the page's default: 512 KiB).
    pub max_bytes: f64,
    /// With a token: add one image and remove it again, every `churn_every`.
    pub churn_token: Option<String>,
    pub churn_every: Duration,
}

#[derive(Debug, Default, Clone)]
pub struct LoadReport {
    /// Whole searches (document, plan, release, blocks, verify, rank) completed.
    pub searches: usize,
    /// HTTP requests made (documents, including 304s, and blocks).
    pub requests: usize,
    /// Errors: a failed request, a non-200/304 status, a block that fails its hash check.
    pub errors: usize,
    /// The first few error messages.
    pub error_samples: Vec<String>,
    pub bytes: u64,
    /// Latency of every request and of every whole search, milliseconds, sorted.
    pub request_ms: Vec<f64>,
    pub search_ms: Vec<f64>,
    /// Partition versions seen by clients, in order of first sight.
    pub versions: Vec<String>,
    /// Gallery changes made and checked (an add and its removal are two).
    pub changes: usize,
    pub secs: f64,
}

impl LoadReport {
    pub fn pct(sorted: &[f64], q: f64) -> f64 {
        if sorted.is_empty() {
            return f64::NAN;
        }
        sorted[((q * sorted.len() as f64) as usize).min(sorted.len() - 1)]
    }

    pub fn summary(&self) -> String {
        format!(
            "searches {} in {:.1} s ({:.1}/s); requests {} ({:.0}/s), p50 {:.2} ms, p99 {:.2} ms; search p50 {:.1} ms, p99 {:.1} ms; {:.1} MiB/s; errors {}; versions seen {}; gallery changes {}",
            self.searches,
            self.secs,
            self.searches as f64 / self.secs,
            self.requests,
            self.requests as f64 / self.secs,
            Self::pct(&self.request_ms, 0.5),
            Self::pct(&self.request_ms, 0.99),
            Self::pct(&self.search_ms, 0.5),
            Self::pct(&self.search_ms, 0.99),
            self.bytes as f64 / self.secs / (1 << 20) as f64,
            self.errors,
            self.versions.len(),
            self.changes
        )
    }

    fn error(&mut self, e: String) {
        self.errors += 1;
        if self.error_samples.len() < 10 {
            self.error_samples.push(e);
        }
    }

    fn merge(&mut self, o: LoadReport) {
        self.searches += o.searches;
        self.requests += o.requests;
        self.errors += o.errors;
        for e in o.error_samples {
            if self.error_samples.len() < 10 {
                self.error_samples.push(e);
            }
        }
        self.bytes += o.bytes;
        self.request_ms.extend(o.request_ms);
        self.search_ms.extend(o.search_ms);
        for v in o.versions {
            if !self.versions.contains(&v) {
                self.versions.push(v);
            }
        }
        self.changes += o.changes;
    }
}

fn url(base: &str, path: &str) -> String {
    if path.starts_with("http") {
        path.to_string()
    } else {
        format!("{base}{path}")
    }
}

/// One client: search in a loop until `stop`.
fn client(s: &LoadSettings, seed: u64, stop: &AtomicBool, seen: &Mutex<Vec<String>>) -> LoadReport {
    let mut r = LoadReport::default();
    let http = Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("http client");
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let mut cached: Option<(String, PartitionDoc)> = None; // (ETag, document)
                                                           // Verified centroids by their SHA-256: each level's fetched once per version, like a page.
    let mut centroids: std::collections::HashMap<String, Centroids> = Default::default();
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        // The document, revalidated.
        let mut req = http.get(url(&s.base, "/api/v1/partition"));
        if let Some((etag, _)) = &cached {
            req = req.header("If-None-Match", etag);
        }
        let t0 = Instant::now();
        let resp = match req.send() {
            Ok(x) => x,
            Err(e) => {
                r.error(format!("partition: {e}"));
                continue;
            }
        };
        r.requests += 1;
        let status = resp.status().as_u16();
        let etag = resp
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        match status {
            304 if cached.is_some() => {}
            200 => match (resp.bytes(), etag) {
                (Ok(b), Some(etag)) => match serde_json::from_slice::<PartitionDoc>(&b) {
                    Ok(d) => {
                        r.bytes += b.len() as u64;
                        cached = Some((etag, d));
                    }
                    Err(e) => {
                        r.error(format!("partition JSON: {e}"));
                        continue;
                    }
                },
                _ => {
                    r.error("partition: no body or no ETag".into());
                    continue;
                }
            },
            other => {
                r.error(format!("partition: status {other}"));
                continue;
            }
        }
        r.request_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        let doc = &cached.as_ref().expect("set above").1;
        if !r.versions.contains(&doc.version) {
            r.versions.push(doc.version.clone());
            let mut all = seen.lock().unwrap_or_else(|e| e.into_inner());
            if !all.contains(&doc.version) {
                all.push(doc.version.clone());
            }
        }
        // A random photo's features (unit norm), the plan, the release.
        let mut f: Vec<f32> = (0..doc.feature_dim)
            .map(|_| rng.random::<f32>() - 0.5)
            .collect();
        let norm = f.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
        f.iter_mut().for_each(|x| *x /= norm);
        let released = match plan(doc, s.epsilon, s.max_bytes) {
            Ok(p) if p.size < p.blocks => {
                let hash = &doc.levels[p.level].centroids_hash;
                if !centroids.contains_key(hash) {
                    let u = url(&s.base, &centroids_url(doc, p.level));
                    let got = http
                        .get(&u)
                        .send()
                        .and_then(|r| r.error_for_status())
                        .and_then(|r| r.bytes());
                    match got {
                        Ok(bytes) => {
                            r.requests += 1;
                            r.bytes += bytes.len() as u64;
                            match verify(doc, p.level, &bytes) {
                                Ok(c) => {
                                    centroids.insert(hash.clone(), c);
                                }
                                Err(e) => {
                                    r.error(format!("centroids: {e}"));
                                    continue;
                                }
                            }
                        }
                        Err(e) => {
                            r.error(format!("centroids: {e}"));
                            continue;
                        }
                    }
                }
                release_blocks(doc, &p, centroids.get(hash), &f, &mut rng)
            }
            Ok(p) => release_blocks(doc, &p, None, &f, &mut rng),
            Err(e) => Err(e),
        };
        let req = match released {
            Ok(x) => x,
            Err(e) => {
                r.error(format!("plan/release: {e}"));
                continue;
            }
        };
        let mut fetched: Vec<(u32, Vec<u8>)> = Vec::with_capacity(req.fetch.len());
        let mut ok = true;
        for &b in &req.fetch {
            let t0 = Instant::now();
            let u = url(&s.base, &block_url(doc, req.level, b));
            match http.get(&u).send() {
                Ok(resp) if resp.status().as_u16() == 200 => match resp.bytes() {
                    Ok(bytes) => {
                        r.requests += 1;
                        r.bytes += bytes.len() as u64;
                        r.request_ms.push(t0.elapsed().as_secs_f64() * 1e3);
                        fetched.push((b, bytes.to_vec()));
                    }
                    Err(e) => {
                        r.requests += 1;
                        r.error(format!("{u}: {e}"));
                        ok = false;
                    }
                },
                Ok(resp) => {
                    r.requests += 1;
                    r.error(format!("{u}: status {}", resp.status()));
                    ok = false;
                }
                Err(e) => {
                    r.error(format!("{u}: {e}"));
                    ok = false;
                }
            }
        }
        if !ok {
            continue;
        }
        let pairs: Vec<(u32, &[u8])> = fetched.iter().map(|(b, v)| (*b, v.as_slice())).collect();
        match verify_and_rank(doc, req.level, &pairs, &f, 8) {
            Ok(_) => {
                r.searches += 1;
                r.search_ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
            Err(e) => r.error(format!("verify (mixed or damaged version?): {e}")),
        }
    }
    r
}

/// The operator: add one image, check it is there, remove it, check it is gone — until
/// `stop`. Every step that fails is an error (nothing may be lost or left behind).
fn operator(s: &LoadSettings, token: &str, stop: &AtomicBool) -> LoadReport {
    let mut r = LoadReport::default();
    let http = Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("http client");
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(s.churn_every);
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let (pixels, label) = crate::test_image(6000 + i % 1000);
        i += 1;
        let added: serde_json::Value = match http
            .post(url(&s.base, "/api/v1/gallery"))
            .bearer_auth(token)
            .json(&serde_json::json!({"items": [{"label": label, "pixels": pixels}]}))
            .send()
            .and_then(|x| x.error_for_status())
            .and_then(|x| x.json())
        {
            Ok(v) => v,
            Err(e) => {
                r.error(format!("add: {e}"));
                continue;
            }
        };
        let Some(id) = added["ids"][0].as_u64() else {
            r.error(format!("add: no id in {added}"));
            continue;
        };
        r.changes += 1;
        let there = http
            .get(url(&s.base, &format!("/api/v1/gallery/{id}")))
            .send()
            .map(|x| x.status().as_u16());
        if there.as_ref().ok() != Some(&200) {
            r.error(format!("added item {id} not found: {there:?}"));
        }
        std::thread::sleep(s.churn_every);
        match http
            .delete(url(&s.base, &format!("/api/v1/gallery/{id}")))
            .bearer_auth(token)
            .send()
            .map(|x| x.status())
        {
            Ok(st) if st.is_success() => r.changes += 1,
            other => r.error(format!("remove {id}: {other:?}")),
        }
        let gone = http
            .get(url(&s.base, &format!("/api/v1/gallery/{id}")))
            .send()
            .map(|x| x.status().as_u16());
        if gone.as_ref().ok() != Some(&404) {
            r.error(format!("removed item {id} still there: {gone:?}"));
        }
    }
    r
}

/// Run the load; blocks the calling thread for `s.duration`, then on until clients have seen
/// `s.until_versions` partition versions or `s.max_duration` has passed.
pub fn run(s: &LoadSettings) -> LoadReport {
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let t = Instant::now();
    let mut handles = Vec::new();
    for c in 0..s.clients {
        let (s, stop, seen) = (s.clone(), Arc::clone(&stop), Arc::clone(&seen));
        handles.push(std::thread::spawn(move || {
            client(&s, 1000 + c as u64, &stop, &seen)
        }));
    }
    if let Some(token) = s.churn_token.clone() {
        let (s, stop) = (s.clone(), Arc::clone(&stop));
        handles.push(std::thread::spawn(move || operator(&s, &token, &stop)));
    }
    std::thread::sleep(s.duration);
    while seen.lock().unwrap_or_else(|e| e.into_inner()).len() < s.until_versions
        && t.elapsed() < s.max_duration
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    let mut total = LoadReport::default();
    for h in handles {
        match h.join() {
            Ok(r) => total.merge(r),
            Err(_) => total.error("a client thread panicked".into()),
        }
    }
    total.secs = t.elapsed().as_secs_f64();
    total.request_ms.sort_by(f64::total_cmp);
    total.search_ms.sort_by(f64::total_cmp);
    total
}
