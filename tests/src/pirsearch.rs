//! Whole hintless-scores PIR searches from native code, for the benches (`pirbench
//! --throughput`, `hostilebench`): the public file, the keys' masks and the thumbnail hint
//! fetched once, as the page keeps them; then per search the scores query, its answer, the
//! ranking, 8 thumbnail queries and their checks.

use ::pir::client::Hint;
use ::pir::client::{Pending, Prepared};
use client::pir_search::{
    thumbs_decode, thumbs_prepare, thumbs_query, thumbs_query_prepared, ThumbCode,
};
use publish::centroids::Centroids;
use publish::pir::doc::{PirDoc, ScoresDoc};
use publish::pir::hintless::{self, ScoresKeys, ScoresPublic};
use publish::pir::records::Ranked;
use publish::thumbcode::Codebook;
use rand_chacha::ChaCha20Rng;
use reqwest::blocking::Client;
use shared::api::PartitionDoc;

/// `GET`, panicking on failure (setup only).
pub fn get(http: &Client, url: &str) -> Vec<u8> {
    let r = http.get(url).send().expect("GET");
    assert!(r.status().is_success(), "{url}: {}", r.status());
    r.bytes().expect("body").to_vec()
}

/// An answer's body, or `None` for a failed request or a non-success status.
pub fn try_post(http: &Client, url: &str, body: Vec<u8>) -> Option<Vec<u8>> {
    let r = http
        .post(url)
        .header("content-type", "application/octet-stream")
        .body(body)
        .send()
        .ok()?;
    r.status()
        .is_success()
        .then(|| r.bytes().ok().map(|b| b.to_vec()))?
}

/// The thumbnails' codebook where `pir` publishes one (checked against its SHA-256).
pub fn thumb_codebook(http: &Client, base: &str, pir: &PirDoc) -> Option<Codebook> {
    let doc = pir.thumbs_code.as_ref()?;
    let bytes = get(http, &format!("{base}{}/thumbs/code", pir.answer_url));
    assert_eq!(publish::blocks::hash_hex(&bytes), doc.sha256);
    Some(Codebook::from_bytes(&bytes).expect("a valid codebook"))
}

/// How `pir`'s thumbnail records draw (`book`: [`thumb_codebook`]'s).
pub fn thumb_code<'b>(part: &PartitionDoc, book: &'b Option<Codebook>) -> ThumbCode<'b> {
    match book {
        Some(b) => ThumbCode::Coded(b),
        None => ThumbCode::Raw {
            side: part.thumb_side,
        },
    }
}

/// What a client keeps between searches.
pub struct ScoresSearch<'a> {
    pub part: &'a PartitionDoc,
    pub pir: &'a PirDoc,
    pub sd: &'a ScoresDoc,
    public: ScoresPublic,
    keys: ScoresKeys,
    thumbs_hint: Hint,
    code: Option<Codebook>,
    cents: Centroids,
    pub scores_url: String,
    pub thumbs_url: String,
}

impl<'a> ScoresSearch<'a> {
    /// Fetches and checks the public files; panics if the server offers no hintless ranking.
    pub fn new(http: &Client, base: &str, part: &'a PartitionDoc, pir: &'a PirDoc) -> Self {
        let sd = pir
            .scores
            .as_ref()
            .expect("the server offers the hintless ranking");
        let public = ScoresPublic::decode(
            sd,
            part,
            &get(http, &format!("{base}{}/scores/hint", pir.answer_url)),
        )
        .unwrap();
        let keys = ScoresKeys::new(part, sd).unwrap();
        let thumbs_hint = Hint::from_bytes(
            &pir.thumbs.shape,
            &get(http, &format!("{base}{}/thumbs/hint", pir.answer_url)),
            &pir.thumbs.hint_sha256,
        )
        .unwrap();
        let cents = crate::level_centroids(http, base, part, sd.level);
        let code = thumb_codebook(http, base, pir);
        ScoresSearch {
            code,
            part,
            pir,
            sd,
            public,
            keys,
            thumbs_hint,
            cents,
            scores_url: format!("{base}{}/scores", pir.answer_url),
            thumbs_url: format!("{base}{}/thumbs", pir.answer_url),
        }
    }

    /// One whole search of features `q`: `Some` when every answer came back and was checked.
    pub fn search(&self, http: &Client, q: &[f32], rng: &mut ChaCha20Rng) -> Option<()> {
        let (body, pending) =
            hintless::query(self.part, self.sd, &self.keys, &self.cents, q, rng).ok()?;
        let ans = try_post(http, &self.scores_url, body)?;
        let r = self.rank(&pending, &ans)?;
        let (body, pending) = thumbs_query(self.part, self.pir, Some(&r), 8, rng).ok()?;
        self.pictures(http, body, &pending, &r)
    }

    /// The thumbnail round: its queries `body` sent, the answer decoded and checked.
    fn pictures(&self, http: &Client, body: Vec<u8>, pending: &Pending, r: &Ranked) -> Option<()> {
        let ans = try_post(http, &self.thumbs_url, body)?;
        let code = thumb_code(self.part, &self.code);
        thumbs_decode(pending, &self.thumbs_hint, &ans, r, &code)
            .ok()
            .map(|_| ())
    }

    /// The top 8 from a scores answer (checked), as a client ranks them.
    fn rank(&self, pending: &hintless::ScoresPending, answer: &[u8]) -> Option<Ranked> {
        let thumbs = &self.pir.thumbs.shape;
        hintless::rank(
            self.sd,
            thumbs,
            &self.keys,
            &self.public,
            pending,
            answer,
            8,
        )
        .ok()
    }

    /// The photo-independent parts of one search (the scores query's secret, key bodies and
    /// masks; the 8 thumbnail queries' masks), computed before the photo is known, as the
    /// page does.
    pub fn prepare(&self, rng: &mut ChaCha20Rng) -> Ahead {
        Ahead {
            scores: hintless::prepare(self.part, self.sd, &self.keys, rng).unwrap(),
            thumbs: thumbs_prepare(self.part, self.pir, 8, rng).unwrap(),
        }
    }

    /// [`ScoresSearch::search`] from a preparation: only the photo-dependent work is left.
    pub fn search_prepared(
        &self,
        http: &Client,
        q: &[f32],
        ahead: Ahead,
        rng: &mut ChaCha20Rng,
    ) -> Option<()> {
        let (body, pending) =
            hintless::query_prepared(self.part, self.sd, ahead.scores, &self.cents, q).ok()?;
        let ans = try_post(http, &self.scores_url, body)?;
        let r = self.rank(&pending, &ans)?;
        let (body, pending) =
            thumbs_query_prepared(self.pir, ahead.thumbs, Some(&r), 8, rng).ok()?;
        self.pictures(http, body, &pending, &r)
    }

    /// A scores query of `q` (the heaviest answer the server computes), without its keys.
    pub fn scores_body(&self, q: &[f32], rng: &mut ChaCha20Rng) -> Vec<u8> {
        hintless::query(self.part, self.sd, &self.keys, &self.cents, q, rng)
            .unwrap()
            .0
    }
}

/// What [`ScoresSearch::prepare`] computes ahead for one search.
pub struct Ahead {
    scores: hintless::ScoresPrepared,
    thumbs: Prepared,
}

/// The on-device model's features of the first `count` held-out photos: Fashion-MNIST training
/// images the demo gallery never holds, at any size (`data::reserved_train`).
pub fn held_out_features(count: usize) -> Vec<Vec<f32>> {
    let model = embed::model::Model::from_bytes(data::assets::QUERY_WEIGHTS).unwrap();
    let dir = std::path::Path::new(data::fashion::DEFAULT_DIR);
    let train = data::fashion::load_split(dir, "train").expect("Fashion-MNIST");
    data::fashion::reserved_train(train.labels.len(), &[])
        .into_iter()
        .take(count)
        .map(|i| model.search_features(train.images.image(i)).unwrap())
        .collect()
}
