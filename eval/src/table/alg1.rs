//! PrivateMail's Algorithm 1 (and the extended paper's multi-step protocol) for one
//! parameter set.

use paper::align::umeyama;
use paper::privatemail::{embed_dense, privatize, privatize_multi, Anchors};
use paper::retrieve::{full_ranking, gallery_rows};
use shared::{DMatrix, Params, PrivacyParams};

use super::report::Triple;
use super::setting::{score, Setting};
use crate::args::Args;
use crate::rng::query_rng;

/// Algorithm 1 for one parameter set: the server's SMLQ embedding of `[gallery ; anchors]`
/// and the client's view of the anchors.
pub(super) struct Alg1 {
    params: Params,
    gallery: Vec<Vec<f64>>,
    server_anchors: DMatrix<f64>,
    client: Anchors,
}

impl Alg1 {
    pub(super) fn new(
        s: &Setting,
        params: &Params,
        rng: &mut impl rand::Rng,
    ) -> Result<Self, shared::Error> {
        let g = s.gallery.nrows();
        let all = DMatrix::from_fn(g + s.anchors.nrows(), s.gallery.ncols(), |i, j| {
            if i < g {
                s.gallery[(i, j)]
            } else {
                s.anchors[(i - g, j)]
            }
        });
        let all_labels: Vec<u32> = s.labels.iter().chain(&s.anchor_labels).copied().collect();
        let server = embed_dense(&all, &all_labels, &params.smlq, rng)?;
        Ok(Alg1 {
            params: *params,
            gallery: gallery_rows(&server.rows(0, g).into_owned()),
            server_anchors: server.rows(g, s.anchors.nrows()).into_owned(),
            client: Anchors::new(&s.anchors, &s.anchor_labels, &params.smlq)?,
        })
    }

    /// SMLQ without noise: the gallery's own rows.
    pub(super) fn non_private(&self, s: &Setting, k: usize) -> Result<Triple, shared::Error> {
        score(s, k, |q| {
            Ok(full_ranking(&self.gallery, &self.gallery[q], Some(q)))
        })
    }

    /// Each query privatized (`steps` = 1: Algorithm 1; more: the extended protocol), aligned
    /// on the anchors and ranked by distance.
    pub(super) fn private(
        &self,
        s: &Setting,
        privacy: &PrivacyParams,
        steps: usize,
        seed: u64,
        id: u64,
        k: usize,
    ) -> Result<Triple, shared::Error> {
        let mut pm = self.params;
        pm.privacy = *privacy;
        score(s, k, |q| {
            let mut rng = query_rng(seed, q, id, privacy.epsilon);
            let feats: Vec<f64> = s.gallery.row(q).iter().copied().collect();
            let r = if steps == 1 {
                privatize(&feats, s.predicted[q], &self.client, &pm, &mut rng)?
            } else {
                privatize_multi(&feats, s.predicted[q], &self.client, &pm, steps, &mut rng)?
            };
            let t = umeyama(&r.anchor_rows, &self.server_anchors)?;
            let row: Vec<f64> = t
                .apply(&r.query_rows)?
                .row(r.real_position())
                .iter()
                .copied()
                .collect();
            Ok(full_ranking(&self.gallery, &row, Some(q)))
        })
    }
}

/// Algorithm 1's parameters: the defaults with the flags' δ, mechanism and SMLQ overrides.
pub(super) fn alg1_params(args: &Args) -> Params {
    let mut params = Params::default();
    params.privacy.delta = args.delta;
    params.privacy.mechanism = args.mechanism;
    if let Some(s) = args.kernel_scale {
        params.smlq.kernel_scale = s;
    }
    if let Some(a) = args.alpha {
        params.smlq.alpha = a;
    }
    if let Some(t) = args.iterations {
        params.smlq.iterations = t;
    }
    params
}
