//! `eval`: PrivateMail (Algorithm 1), the anchor-frame protocol and the paper's baselines on
//! Fashion-MNIST, over several seeds. Prints the table (mean ± std over seeds), writes it as
//! CSV and draws the privacy–utility plot (like the paper's Figure 7) and a hyper-parameter
//! study of the frame protocol, as SVG, into `--out`.
//!
//! Gallery: a random subset of the chosen split (`--split test`, or `--split train` for tuning:
//! training images that are not anchors); anchors: a class-balanced random subset of the
//! training split; queries: gallery images, each retrieved leave-one-out (the paper's
//! protocol). `--seed` makes a run reproducible; production noise always comes from OS entropy.
//! Metrics per query: Recall@k (any of the first k shares the query's class), average
//! precision over the full ranking, and fine-grained fidelity (the share of the query's true k
//! nearest gallery neighbours in feature space that the method returns in its first k).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use rand::seq::SliceRandom;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use rayon::prelude::*;
use shared::baselines::dsne::{self, DsneParams, Reference};
use shared::baselines::hashing::{hamming, randomized_response, Hash};
use shared::baselines::projection::Projection;
use shared::embed::laplacian::normalize_rows;
use shared::metrics::{average_precision, mean, overlap, recall_at_k};
use shared::protocol::align::umeyama;
use shared::protocol::frame::{privatize_in_frame, AnchorFrame};
use shared::protocol::privatemail::{embed_dense, privatize, privatize_multi, Anchors};
use shared::protocol::retrieve::{
    full_ranking, gallery_rows, posterior_ranking, proportional_ranking, LabelledRows,
};
use shared::{DMatrix, Mechanism, Params, PrivacyParams, SmlqParams};

use privatemail_server::gallery::data::{load_split, Split, DEFAULT_DIR};

mod blocks;
mod blocks_plot;
mod plot;
use privatemail_server::ops::progress::Progress;
use privatemail_server::MODEL_WEIGHTS;
use shared::embed::model::Model;

#[derive(Parser, Debug)]
#[command(about = "Privacy–utility table and plots of PrivateMail and baselines on Fashion-MNIST")]
struct Args {
    /// Directory with the Fashion-MNIST IDX files.
    #[arg(long, env = "FASHION_MNIST_DIR", default_value = DEFAULT_DIR)]
    data_dir: PathBuf,
    /// Which split the gallery and queries come from (`train`: for tuning, anchors excluded).
    #[arg(long, value_enum, default_value_t = EvalSplit::Test)]
    split: EvalSplit,
    /// Gallery size.
    #[arg(long, default_value_t = 2000)]
    gallery: usize,
    /// Public anchors (from the training split, class-balanced).
    #[arg(long, default_value_t = 1000)]
    anchors: usize,
    /// Queries (gallery images, leave-one-out).
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// First seed; seeds `seed .. seed + seeds` are run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 5)]
    seeds: u64,
    /// k of Recall@k and of the fidelity.
    #[arg(long, default_value_t = 8)]
    k: usize,
    #[arg(long, value_delimiter = ',', default_value = "0.1,0.25,0.5,1,2,4,8")]
    epsilons: Vec<f64>,
    #[arg(long, default_value_t = 1e-5)]
    delta: f64,
    #[arg(long, value_parser = parse_mechanism, default_value = "discrete_gaussian")]
    mechanism: Mechanism,
    /// Algorithm 1's kernel scale.
    #[arg(long)]
    kernel_scale: Option<f64>,
    #[arg(long)]
    alpha: Option<f64>,
    #[arg(long)]
    iterations: Option<usize>,
    /// Kernel scale of the anchor-frame placement.
    #[arg(long, default_value_t = shared::protocol::frame::DEFAULT_KERNEL_SCALE)]
    frame_kernel_scale: f64,
    /// Feature vectors: the on-device model's (64-d; the query's label is then the model's
    /// prediction, as on a real client) or raw pixels (784-d, true labels).
    #[arg(long, value_enum, default_value_t = Features::Model)]
    features: Features,
    /// Where the CSV and SVG files go.
    #[arg(long, default_value = "docs/eval")]
    out: PathBuf,
    /// Skip Algorithm 1 (the slowest method).
    #[arg(long)]
    skip_algorithm1: bool,
    /// Skip the hyper-parameter studies.
    #[arg(long)]
    no_study: bool,
    /// Seeds (the first ones) that run Algorithm 1's hyper-parameter study.
    #[arg(long, default_value_t = 3)]
    study_seeds: u64,
    /// Run the private block retrieval evaluation instead (`blocks.csv`, `blocks.svg` and
    /// `blocks.md` in `--out`; see `blocks.rs`). Uses `--anchors`, `--seed`, `--delta`,
    /// `--mechanism` and the `--blocks-*` flags; ignores the others.
    #[arg(long)]
    blocks: bool,
    /// Block evaluation: held-out queries (training images outside the galleries and anchors).
    #[arg(long, default_value_t = 1000)]
    blocks_queries: usize,
    /// Block evaluation: Monte Carlo releases per query (Recall@8, mAP@8) per Pareto point.
    #[arg(long, default_value_t = 20)]
    blocks_draws: usize,
    /// Block evaluation: frame releases per query for the frame-release pools.
    #[arg(long, default_value_t = 1)]
    blocks_frame_draws: usize,
    /// Block evaluation: the large gallery (the test split, then the training split, as the
    /// server seeds it; 0 skips it).
    #[arg(long, default_value_t = 69_000)]
    blocks_large: usize,
    /// Block evaluation: the levels (numbers of blocks B).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "8,16,32,48,64,96,128,256"
    )]
    blocks_levels: Vec<u32>,
    /// Block evaluation: the overlap variants on the 10,000 gallery.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "spill-1,spill-2,spill-3,spill-4,closure-8,closure-16,closure-24,closure-32"
    )]
    blocks_variants: Vec<String>,
    /// Block evaluation: the overlap variants on the large gallery (`auto`: the best spill and
    /// the two best closures on the 10,000 gallery).
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    blocks_large_variants: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
enum Features {
    Model,
    Pixels,
}

#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
enum EvalSplit {
    Test,
    Train,
}

fn parse_mechanism(s: &str) -> Result<Mechanism, String> {
    serde_json::from_value(serde_json::Value::String(s.into()))
        .map_err(|_| "one of classic_gaussian, analytic_gaussian, discrete_gaussian".into())
}

/// Method names: each private method and its noise-free counterpart share one (the table's ε
/// column tells them apart; the plot draws both in one colour).
const KNN: &str = "kNN on features";
const ALG1: &str = "PrivateMail (Algorithm 1)";
const EXTENDED: &str = "PrivateMail extended (3 steps)";
const FRAME: &str = "anchor frame";
const FRAME_PR: &str = "anchor frame + posterior ranking";
const FRAME_PROP: &str = "anchor frame + proportional page";
/// The Recall@k-optimal page for a release: one item of each of the k most probable classes
/// (a second item of a shown class cannot raise "any of the first k is relevant"), the rest
/// as the posterior ranking. A reference for what no ranking of the release can beat.
const FRAME_ONE_PER_CLASS: &str = "anchor frame + one per class";
const JL: &str = "random projection-16";
const PCA: &str = "PCA-16 + kNN";
const LSH: &str = "LSH-64 (random flipping)";
const ITQ: &str = "ITQ-32 (random flipping)";
const PITQ: &str = "PITQ-32 (random flipping)";
const TSNE: &str = "t-SNE of the gallery";
const DSNE: &str = "DP-dSNE";
/// Chance levels: what a ranking that knows nothing scores. They differ with the ranking's
/// shape: a uniformly random order interleaves classes (high Recall@8, low mAP); a random
/// order of whole classes (what a class-level ranking degenerates to without signal) has low
/// Recall@8 but a much higher mAP. A private method must be judged against the matching one.
const CHANCE_ORDER: &str = "chance: random order";
const CHANCE_BLOCKS: &str = "chance: random class blocks";
/// What the proportional page degenerates to without signal: one item of each of k random
/// classes first, then random class blocks.
const CHANCE_PAGE: &str = "chance: random proportional page";

/// Projection baselines' dimension and the hash lengths.
/// Points of the Algorithm 1 study (k: 4, α: 4, σ: 5, anchors: 3), for progress.
const ALG1_STUDY_POINTS: u64 = 16;
const PROJECTION_DIM: usize = 16;
const LSH_BITS: usize = 64;
const ITQ_BITS: usize = 32;
/// PITQ's rounds E (its per-round flip probability is e^{−ε/E}).
const PITQ_EPOCHS: usize = 10;

/// One axis of Algorithm 1's study: its name, its values, and how to set one.
/// The setter gets the SMLQ parameters and the number of anchors.
type StudyAxis = (
    &'static str,
    &'static [f64],
    fn(&mut SmlqParams, &mut usize, f64),
);

/// A class-posterior ranking of a frame release: (gallery, row, σ, k, excluded query).
type ClassRanker = fn(&LabelledRows, &[f64], f64, usize, usize) -> Vec<usize>;

/// Algorithm 1's study setting (smaller: every point is a full server embedding).
const STUDY_GALLERY: usize = 1000;
const STUDY_ANCHORS: usize = 500;
const STUDY_QUERIES: usize = 100;

/// Mean (Recall@k, AP, fidelity) over the queries of one seed.
type Triple = [f64; 3];

/// One method at one ε (None: non-private), with its per-seed results.
struct Row {
    method: &'static str,
    epsilon: Option<f64>,
    per_seed: Vec<Triple>,
}

/// One seed's data: gallery and anchors as unit feature rows with labels.
struct Setting {
    gallery: DMatrix<f64>,
    gallery_rows: Vec<Vec<f64>>,
    labels: Vec<u32>,
    predicted: Vec<u32>,
    anchors: DMatrix<f64>,
    anchor_labels: Vec<u32>,
    /// True k nearest gallery neighbours of each query in feature space.
    truth: Vec<Vec<usize>>,
}

impl Setting {
    /// The first `gallery` gallery items, `anchors` anchors and `queries` queries.
    fn subset(&self, gallery: usize, anchors: usize, queries: usize, k: usize) -> Setting {
        let g = gallery.min(self.labels.len());
        let a = anchors.min(self.anchor_labels.len());
        let gallery_rows = self.gallery_rows[..g].to_vec();
        let truth = (0..queries.min(g))
            .into_par_iter()
            .map(|q| {
                let mut r = full_ranking(&gallery_rows, &gallery_rows[q], Some(q));
                r.truncate(k);
                r
            })
            .collect();
        Setting {
            gallery: self.gallery.rows(0, g).into_owned(),
            gallery_rows,
            labels: self.labels[..g].to_vec(),
            predicted: self.predicted[..g].to_vec(),
            anchors: self.anchors.rows(0, a).into_owned(),
            anchor_labels: self.anchor_labels[..a].to_vec(),
            truth,
        }
    }
}

/// Algorithm 1 for one parameter set: the server's SMLQ embedding of `[gallery ; anchors]`
/// and the client's view of the anchors.
struct Alg1 {
    params: Params,
    gallery: Vec<Vec<f64>>,
    server_anchors: DMatrix<f64>,
    client: Anchors,
}

impl Alg1 {
    fn new(s: &Setting, params: &Params, rng: &mut impl rand::Rng) -> Result<Self, shared::Error> {
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
    fn non_private(&self, s: &Setting, k: usize) -> Result<Triple, shared::Error> {
        score(s, k, |q| {
            Ok(full_ranking(&self.gallery, &self.gallery[q], Some(q)))
        })
    }

    /// Each query privatized (`steps` = 1: Algorithm 1; more: the extended protocol), aligned
    /// on the anchors and ranked by distance.
    fn private(
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

fn main() {
    // Progress (log lines when stderr is not a terminal) goes to stderr; the table to stdout.
    tracing_subscriber::fmt()
        .with_writer(privatemail_server::ops::progress::LogWriter::Stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    if args.blocks {
        if let Err(e) = blocks::run(&args) {
            eprintln!("eval --blocks: {e}");
            std::process::exit(2);
        }
        return;
    }
    if let Err(e) = run(args) {
        eprintln!("eval: {e}");
        std::process::exit(2);
    }
}

/// Features of images `idx` of a split (unit rows) and the labels a client would use.
fn featurize(
    model: &Model,
    features: Features,
    split: &Split,
    idx: &[usize],
) -> (DMatrix<f64>, Vec<u32>) {
    match features {
        Features::Pixels => (
            DMatrix::from_fn(idx.len(), 784, |i, j| {
                split.images.image(idx[i])[j] as f64 / 255.0
            }),
            idx.iter().map(|&i| split.labels[i] as u32).collect(),
        ),
        Features::Model => {
            let inf: Vec<_> = idx
                .par_iter()
                .map(|&i| model.infer(split.images.image(i)).expect("28×28 images"))
                .collect();
            let d = inf[0].features.len();
            (
                DMatrix::from_fn(idx.len(), d, |i, j| inf[i].features[j] as f64),
                inf.iter().map(|r| r.label).collect(),
            )
        }
    }
}

fn setting(
    args: &Args,
    model: &Model,
    test: &Split,
    train: &Split,
    seed: u64,
) -> Result<Setting, Box<dyn std::error::Error>> {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let mut tidx: Vec<usize> = (0..train.labels.len()).collect();
    tidx.shuffle(&mut rng);
    let per_class = args.anchors.div_ceil(10);
    let mut taken = [0usize; 10];
    let (aidx, rest): (Vec<usize>, Vec<usize>) = tidx.into_iter().partition(|&i| {
        let c = train.labels[i] as usize;
        taken[c] += 1;
        taken[c] <= per_class
    });
    let aidx: Vec<usize> = aidx.into_iter().take(args.anchors).collect();
    let (split, mut gidx) = match args.split {
        EvalSplit::Test => {
            let mut g: Vec<usize> = (0..test.labels.len()).collect();
            g.shuffle(&mut rng);
            (test, g)
        }
        EvalSplit::Train => (train, rest),
    };
    gidx.truncate(args.gallery.min(gidx.len()));
    let (gallery_raw, predicted) = featurize(model, args.features, split, &gidx);
    let gallery = normalize_rows(&gallery_raw, "gallery")?;
    let (anchors, _) = featurize(model, args.features, train, &aidx);
    let labels: Vec<u32> = gidx.iter().map(|&i| split.labels[i] as u32).collect();
    let anchor_labels: Vec<u32> = aidx.iter().map(|&i| train.labels[i] as u32).collect();
    let gallery_rows = gallery_rows(&gallery);
    let nq = args.queries.min(gidx.len());
    let truth = (0..nq)
        .into_par_iter()
        .map(|q| {
            let mut r = full_ranking(&gallery_rows, &gallery_rows[q], Some(q));
            r.truncate(args.k);
            r
        })
        .collect();
    Ok(Setting {
        gallery,
        gallery_rows,
        labels,
        predicted,
        anchors,
        anchor_labels,
        truth,
    })
}

/// Mean metrics over the queries, given each query's full ranking (itself excluded).
fn score(
    s: &Setting,
    k: usize,
    rank: impl Fn(usize) -> Result<Vec<usize>, shared::Error> + Sync,
) -> Result<Triple, shared::Error> {
    let per: Vec<Triple> = (0..s.truth.len())
        .into_par_iter()
        .map(|q| {
            let ranking = rank(q)?;
            let ranked: Vec<u32> = ranking.iter().map(|&i| s.labels[i]).collect();
            let relevant = s.labels.iter().filter(|&&l| l == s.labels[q]).count() - 1;
            Ok([
                recall_at_k(&ranked, s.labels[q], k),
                average_precision(&ranked, s.labels[q], relevant),
                overlap(&ranking[..k.min(ranking.len())], &s.truth[q]),
            ])
        })
        .collect::<Result<_, shared::Error>>()?;
    let col = |j: usize| mean(&per.iter().map(|t| t[j]).collect::<Vec<_>>());
    Ok([col(0), col(1), col(2)])
}

/// A per-query generator, independent across seeds, queries, methods and ε.
fn query_rng(seed: u64, q: usize, method: u64, eps: f64) -> ChaCha20Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&(q as u64).to_le_bytes());
    key[16..24].copy_from_slice(&method.to_le_bytes());
    key[24..].copy_from_slice(&eps.to_bits().to_le_bytes());
    ChaCha20Rng::from_seed(key)
}

/// The first item of each class in `ranking`, up to `k` of them, moved to the front (in the
/// ranking's order); the rest keep their order.
fn one_per_class_first(ranking: Vec<usize>, labels: &[u32], k: usize) -> Vec<usize> {
    let mut seen = vec![false; labels.iter().max().map_or(0, |&m| m as usize + 1)];
    let (mut page, mut rest) = (Vec::with_capacity(k), Vec::with_capacity(ranking.len()));
    for i in ranking {
        let c = labels[i] as usize;
        if page.len() < k && !seen[c] {
            seen[c] = true;
            page.push(i);
        } else {
            rest.push(i);
        }
    }
    page.extend(rest);
    page
}

/// A random order of the classes, and every item but `exclude` in random order grouped by
/// class in that order (what a class-level ranking degenerates to without signal).
fn class_blocks(labels: &[u32], exclude: usize, rng: &mut impl RngCore) -> (Vec<u32>, Vec<usize>) {
    let mut classes: Vec<u32> = (0..10).collect();
    classes.shuffle(rng);
    let mut order: Vec<usize> = (0..labels.len()).filter(|&i| i != exclude).collect();
    order.shuffle(rng);
    order.sort_by_key(|&i| classes.iter().position(|&c| c == labels[i]));
    (classes, order)
}

/// Barnes–Hut t-SNE (θ = 0.5, perplexity 30 — less for fewer than 91 rows, as the
/// neighbour search needs 3·perplexity — 1,000 epochs) of unit rows to 2-D, started from a
/// seeded N(0, 10⁻⁴) layout so that a run is reproducible.
fn tsne(rows: &[Vec<f64>], seed: u64) -> Result<Vec<Vec<f64>>, rayon::ThreadPoolBuildError> {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let samples: Vec<&[f64]> = rows.iter().map(Vec::as_slice).collect();
    let init: Vec<f64> = (0..2 * rows.len())
        .map(|_| {
            1e-2 * rand_distr::Distribution::<f64>::sample(&rand_distr::StandardNormal, &mut rng)
        })
        .collect();
    let perplexity = ((rows.len().saturating_sub(1) / 3) as f64).clamp(1.0, 30.0);
    // bhtsne sums forces with rayon, whose splitting (and so the floating-point order)
    // depends on work stealing: one thread makes a run reproducible.
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    Ok(pool.install(|| {
        let mut t = bhtsne::tSNE::<f64, &[f64], 2>::new(&samples);
        t.perplexity(perplexity)
            .epochs(1000)
            .initial_embedding(init)
            .barnes_hut(0.5, |a, b| {
                a.iter()
                    .zip(b.iter())
                    .map(|(x, y)| (x - y) * (x - y))
                    .sum::<f64>()
                    .sqrt()
            });
        t.embedding().chunks(2).map(<[f64]>::to_vec).collect()
    }))
}

/// Rank by Hamming distance, ties broken by a random order (codes tie often).
fn hamming_ranking(
    codes: &[Vec<bool>],
    query: &[bool],
    exclude: usize,
    rng: &mut impl RngCore,
) -> Vec<usize> {
    let mut order: Vec<usize> = (0..codes.len()).filter(|&i| i != exclude).collect();
    order.shuffle(rng);
    order.sort_by_key(|&i| hamming(&codes[i], query));
    order
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    let test = load_split(&args.data_dir, "t10k")?;
    let train = load_split(&args.data_dir, "train")?;
    let model = Model::from_bytes(MODEL_WEIGHTS)?;
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
    let privacy = |eps: f64| PrivacyParams {
        epsilon: eps,
        ..params.privacy
    };
    let nq = args.queries.min(args.gallery);
    println!(
        "split {:?}, gallery {}, anchors {}, queries {nq} (leave-one-out), seeds {}..{}, features: {:?}, k = {}, delta = {}, mechanism = {:?}; Algorithm 1: kernel_scale = {}, alpha = {}, T = {}; frame kernel_scale = {}",
        args.split, args.gallery, args.anchors, args.seed, args.seed + args.seeds - 1, args.features, args.k,
        args.delta, args.mechanism, params.smlq.kernel_scale, params.smlq.alpha, params.smlq.iterations,
        args.frame_kernel_scale
    );

    let mut rows: Vec<Row> = Vec::new();
    let mut push = |method: &'static str, epsilon: Option<f64>, t: Triple| match rows
        .iter_mut()
        .find(|r| r.method == method && r.epsilon == epsilon)
    {
        Some(r) => r.per_seed.push(t),
        None => rows.push(Row {
            method,
            epsilon,
            per_seed: vec![t],
        }),
    };
    let mut study: Vec<(String, f64, Vec<f64>)> = Vec::new();
    let mut alg1_study: Vec<(String, f64, Vec<f64>)> = Vec::new();
    // Progress: one step for each seed's baselines, each ε, each study point (a line each).
    let alg1_study_seeds = if args.no_study || args.skip_algorithm1 {
        0
    } else {
        args.study_seeds.min(args.seeds)
    };
    let frame_study_points = if args.no_study { 0 } else { 10 };
    let steps = args.seeds * (1 + args.epsilons.len() as u64 + frame_study_points)
        + alg1_study_seeds * ALG1_STUDY_POINTS;
    let progress = Progress::new("eval", steps, "steps");
    let step = |msg: String| {
        progress.inc(1);
        progress.println(format!("{msg} ({:.0} s)", t0.elapsed().as_secs_f64()));
    };
    for seed in args.seed..args.seed + args.seeds {
        let s = setting(&args, &model, &test, &train, seed)?;
        let k = args.k;
        let g = s.gallery.nrows();
        let mut rng = ChaCha20Rng::seed_from_u64(seed ^ 0x5eed);

        // Chance levels.
        push(
            CHANCE_ORDER,
            None,
            score(&s, k, |q| {
                let mut order: Vec<usize> = (0..g).filter(|&i| i != q).collect();
                order.shuffle(&mut query_rng(seed, q, 97, 0.0));
                Ok(order)
            })?,
        );
        push(
            CHANCE_BLOCKS,
            None,
            score(&s, k, |q| {
                Ok(class_blocks(&s.labels, q, &mut query_rng(seed, q, 98, 0.0)).1)
            })?,
        );
        push(
            CHANCE_PAGE,
            None,
            score(&s, k, |q| {
                let (classes, mut order) =
                    class_blocks(&s.labels, q, &mut query_rng(seed, q, 96, 0.0));
                // The first item of each of the first k classes moves to the front.
                let mut firsts: Vec<usize> = classes
                    .iter()
                    .take(k)
                    .filter_map(|&c| order.iter().position(|&i| s.labels[i] == c))
                    .collect();
                firsts.sort_unstable();
                let page: Vec<usize> = firsts.iter().map(|&p| order[p]).collect();
                for p in firsts.into_iter().rev() {
                    order.remove(p);
                }
                Ok(page.into_iter().chain(order).collect())
            })?,
        );
        // Non-private references.
        push(
            KNN,
            None,
            score(&s, k, |q| {
                Ok(full_ranking(&s.gallery_rows, &s.gallery_rows[q], Some(q)))
            })?,
        );
        let frame = AnchorFrame::class_simplex(
            &s.anchors,
            &s.anchor_labels,
            params.smlq.num_classes,
            args.frame_kernel_scale,
        )?;
        let placed = gallery_rows(&frame.place(&s.gallery)?);
        let placed_flat = placed.concat();
        let labelled = LabelledRows {
            flat: &placed_flat,
            labels: &s.labels,
            num_classes: 10,
        };
        push(
            FRAME,
            None,
            score(&s, k, |q| Ok(full_ranking(&placed, &placed[q], Some(q))))?,
        );
        let jl = Projection::random(s.gallery.ncols(), PROJECTION_DIM, &mut rng)?;
        let jl_rows = gallery_rows(&jl.apply(&s.gallery)?);
        let pca = Projection::pca(&s.anchors, PROJECTION_DIM)?;
        let pca_rows = gallery_rows(&pca.apply(&s.gallery)?);
        let lsh = Hash::lsh(s.gallery.ncols(), LSH_BITS, &mut rng)?;
        let lsh_codes = lsh.codes(&s.gallery)?;
        let itq = Hash::itq(&s.anchors, ITQ_BITS, &mut rng)?;
        let itq_codes = itq.codes(&s.gallery)?;
        push(
            PCA,
            None,
            score(&s, k, |q| {
                Ok(full_ranking(&pca_rows, &pca_rows[q], Some(q)))
            })?,
        );
        push(
            JL,
            None,
            score(&s, k, |q| Ok(full_ranking(&jl_rows, &jl_rows[q], Some(q))))?,
        );
        for (name, codes) in [(LSH, &lsh_codes), (ITQ, &itq_codes)] {
            push(
                name,
                None,
                score(&s, k, |q| {
                    Ok(hamming_ranking(
                        codes,
                        &codes[q],
                        q,
                        &mut query_rng(seed, q, 99, 0.0),
                    ))
                })?,
            );
        }

        // t-SNE of the whole gallery (non-private: it reads every feature vector); DP-dSNE's
        // public reference is a t-SNE of the anchors, the gallery is placed against it
        // without noise and each query with noise.
        let anchor_rows = gallery_rows(&normalize_rows(&s.anchors, "anchors")?);
        // The two layouts side by side, each on one thread (see `tsne`).
        let (tsne_rows, anchor_layout) = rayon::join(
            || tsne(&s.gallery_rows, seed ^ 0x7511e),
            || tsne(&anchor_rows, seed ^ 0xa4c),
        );
        let (tsne_rows, anchor_layout) = (tsne_rows?, anchor_layout?);
        push(
            TSNE,
            None,
            score(&s, k, |q| {
                Ok(full_ranking(&tsne_rows, &tsne_rows[q], Some(q)))
            })?,
        );
        let reference = Reference::new(
            &s.anchors,
            anchor_layout.iter().map(|r| [r[0], r[1]]).collect(),
        )?;
        let dparams = DsneParams::default();
        let dsne_rows: Vec<Vec<f64>> = (0..g)
            .into_par_iter()
            .map(|i| {
                let x: Vec<f64> = s.gallery.row(i).iter().copied().collect();
                dsne::embed(&x, &reference, &dparams).map(|y| y.to_vec())
            })
            .collect::<Result<_, shared::Error>>()?;
        push(
            DSNE,
            None,
            score(&s, k, |q| {
                Ok(full_ranking(&dsne_rows, &dsne_rows[q], Some(q)))
            })?,
        );

        let alg1 = if args.skip_algorithm1 {
            None
        } else {
            let server = Alg1::new(&s, &params, &mut rng)?;
            push(ALG1, None, server.non_private(&s, k)?);
            Some(server)
        };
        step(format!("seed {seed}: non-private references and baselines"));

        for &eps in &args.epsilons {
            let p = privacy(eps);
            let feats = |q: usize| -> Vec<f64> { s.gallery.row(q).iter().copied().collect() };
            if let Some(server) = &alg1 {
                // Algorithm 1 (one noisy step) and the extended paper's (three noisy steps).
                for (name, steps, id) in [(ALG1, 1usize, 1u64), (EXTENDED, 3, 8)] {
                    push(name, Some(eps), server.private(&s, &p, steps, seed, id, k)?);
                }
            }
            // One frame release per query, ranked two ways.
            let released: Vec<(Vec<f64>, f64)> = (0..s.truth.len())
                .into_par_iter()
                .map(|q| {
                    let mut rng = query_rng(seed, q, 2, eps);
                    let r = privatize_in_frame(&feats(q), &frame, 9, &p, &mut rng)?;
                    let row = r.rows.row(r.real_position()).iter().copied().collect();
                    Ok((row, r.receipt.noise_scale))
                })
                .collect::<Result<_, shared::Error>>()?;
            push(
                FRAME,
                Some(eps),
                score(&s, k, |q| {
                    Ok(full_ranking(&placed, &released[q].0, Some(q)))
                })?,
            );
            // The class-posterior rankings of the same release (post-processing).
            let rankers: [(&'static str, ClassRanker); 3] = [
                (FRAME_PR, |g, row, sigma, _, q| {
                    posterior_ranking(g, row, sigma, usize::MAX, Some(q))
                }),
                (FRAME_ONE_PER_CLASS, |g, row, sigma, k, q| {
                    let full = posterior_ranking(g, row, sigma, usize::MAX, Some(q));
                    one_per_class_first(full, g.labels, k)
                }),
                (FRAME_PROP, |g, row, sigma, k, q| {
                    proportional_ranking(g, row, sigma, k, usize::MAX, Some(q))
                }),
            ];
            for (name, rank) in rankers {
                push(
                    name,
                    Some(eps),
                    score(&s, k, |q| {
                        let (row, sigma) = &released[q];
                        Ok(rank(&labelled, row, *sigma, k, q))
                    })?,
                );
            }
            for (name, proj, prow, id) in [(JL, &jl, &jl_rows, 3u64), (PCA, &pca, &pca_rows, 4)] {
                push(
                    name,
                    Some(eps),
                    score(&s, k, |q| {
                        let mut rng = query_rng(seed, q, id, eps);
                        let (noisy, _) = proj.release(&feats(q), &p, &mut rng)?;
                        let row: Vec<f64> = noisy.matrix().iter().copied().collect();
                        Ok(full_ranking(prow, &row, Some(q)))
                    })?,
                );
            }
            push(
                DSNE,
                Some(eps),
                score(&s, k, |q| {
                    let mut rng = query_rng(seed, q, 10, eps);
                    let (y, _) = dsne::privatize(&feats(q), &reference, &dparams, &p, &mut rng)?;
                    Ok(full_ranking(&dsne_rows, &y, Some(q)))
                })?,
            );
            // PITQ: the rotation learned with flipping inside its rounds (at this ε, as the
            // paper runs it; the anchors it reads are public), the query's code then released
            // by randomized response at the record-level ε.
            let pitq = Hash::pitq(&s.anchors, ITQ_BITS, PITQ_EPOCHS, eps, &mut rng)?;
            let pitq_codes = pitq.codes(&s.gallery)?;
            for (name, codes, id) in [
                (LSH, &lsh_codes, 5u64),
                (ITQ, &itq_codes, 6),
                (PITQ, &pitq_codes, 11),
            ] {
                push(
                    name,
                    Some(eps),
                    score(&s, k, |q| {
                        let mut rng = query_rng(seed, q, id, eps);
                        let noisy = randomized_response(&codes[q], eps, &mut rng)?;
                        Ok(hamming_ranking(codes, &noisy, q, &mut rng))
                    })?,
                );
            }
            step(format!("seed {seed}: ε = {eps}"));
        }

        if !args.no_study && !args.skip_algorithm1 && seed < args.seed + args.study_seeds {
            // Algorithm 1 (the paper's Figure 5): embedding dimension k, label weight α, kernel
            // scale s (the paper's σ) and the number of anchors, one at a time around the
            // defaults, non-private and at ε = 8, on a smaller setting (each point is a full
            // server embedding).
            let base = params.smlq;
            let (default_anchors, nq_study) = (
                STUDY_ANCHORS.min(s.anchors.nrows()),
                STUDY_QUERIES.min(s.truth.len()),
            );
            let default_small = s.subset(STUDY_GALLERY, default_anchors, nq_study, k);
            let grid: [StudyAxis; 4] = [
                ("k", &[2.0, 4.0, 8.0, 16.0], |p, _, v| {
                    p.embed_dim = v as usize
                }),
                ("alpha", &[0.05, 0.5, 2.0, 8.0], |p, _, v| p.alpha = v),
                ("sigma", &[0.03, 0.1, 0.3, 1.0, 3.0], |p, _, v| {
                    p.kernel_scale = v
                }),
                ("anchors", &[100.0, 250.0, 500.0], |_, n, v| *n = v as usize),
            ];
            for (what, values, set) in grid {
                for &v in values {
                    let mut pm = params;
                    pm.smlq = base;
                    let mut anchors = default_anchors;
                    set(&mut pm.smlq, &mut anchors, v);
                    if anchors > s.anchors.nrows() {
                        step(format!(
                            "seed {seed}: Algorithm 1 study, {what} = {v} skipped (only {} anchors)",
                            s.anchors.nrows()
                        ));
                        continue; // not that many anchors in this run
                    }
                    // The k, α and σ settings share one subset (its truth is a full kNN).
                    let other;
                    let small = if anchors == default_anchors {
                        &default_small
                    } else {
                        other = s.subset(STUDY_GALLERY, anchors, nq_study, k);
                        &other
                    };
                    let server = Alg1::new(small, &pm, &mut rng)?;
                    let np = server.non_private(small, k)?;
                    let pr = server.private(small, &privacy(8.0), 1, seed, 12, k)?;
                    for (label, t) in [("SMLQ non-private", np), ("PrivateMail ε = 8", pr)] {
                        study_push(
                            &mut alg1_study,
                            format!("{what}|{label}|Recall@{k}"),
                            v,
                            t[0],
                        );
                        study_push(&mut alg1_study, format!("{what}|{label}|mAP"), v, t[1]);
                    }
                    step(format!("seed {seed}: Algorithm 1 study, {what} = {v}"));
                }
            }
        }
        if !args.no_study {
            // Frame protocol: kernel scale and number of anchors, non-private and at ε = 8.
            for &scale in &[0.005, 0.01, 0.02, 0.05, 0.1, 0.3] {
                let f = AnchorFrame::class_simplex(&s.anchors, &s.anchor_labels, 10, scale)?;
                for (label, m) in frame_maps(&s, &f, seed, &privacy(8.0))? {
                    study_push(&mut study, format!("kernel scale|{label}"), scale, m);
                }
                step(format!("seed {seed}: frame study, kernel scale = {scale}"));
            }
            for &n in &[100usize, 250, 500, 1000] {
                let n = n.min(s.anchors.nrows());
                let f = AnchorFrame::class_simplex(
                    &s.anchors.rows(0, n).into_owned(),
                    &s.anchor_labels[..n],
                    10,
                    args.frame_kernel_scale,
                )?;
                for (label, m) in frame_maps(&s, &f, seed, &privacy(8.0))? {
                    study_push(&mut study, format!("anchors|{label}"), n as f64, m);
                }
                step(format!("seed {seed}: frame study, anchors = {n}"));
            }
        }
        progress.println(format!(
            "seed {seed} done after {:.0} s",
            t0.elapsed().as_secs_f64()
        ));
    }
    progress.finish();

    print_table(&rows, args.k);
    std::fs::create_dir_all(&args.out)?;
    write_csv(&args.out.join("results.csv"), &rows)?;
    plot::privacy_utility(&args.out.join("privacy-utility.svg"), &rows, args.k)?;
    if !study.is_empty() {
        plot::study(&args.out.join("frame-study.svg"), &study)?;
    }
    if !alg1_study.is_empty() {
        write_study_csv(&args.out.join("algorithm1-study.csv"), &alg1_study)?;
        plot::alg1_study(&args.out.join("algorithm1-study.svg"), &alg1_study)?;
    }
    println!(
        "wrote {}/results.csv, privacy-utility.svg{}{}; total {:.1} s",
        args.out.display(),
        if study.is_empty() {
            ""
        } else {
            ", frame-study.svg"
        },
        if alg1_study.is_empty() {
            ""
        } else {
            ", algorithm1-study.csv, algorithm1-study.svg"
        },
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// mAP of the frame protocol, non-private and private, for one frame.
fn frame_maps(
    s: &Setting,
    f: &AnchorFrame,
    seed: u64,
    p: &PrivacyParams,
) -> Result<Vec<(&'static str, f64)>, shared::Error> {
    let placed = gallery_rows(&f.place(&s.gallery)?);
    let np = score(s, 8, |q| Ok(full_ranking(&placed, &placed[q], Some(q))))?;
    let private = score(s, 8, |q| {
        let mut rng = query_rng(seed, q, 7, p.epsilon);
        let feats: Vec<f64> = s.gallery.row(q).iter().copied().collect();
        let r = privatize_in_frame(&feats, f, 9, p, &mut rng)?;
        let row: Vec<f64> = r.rows.row(r.real_position()).iter().copied().collect();
        Ok(full_ranking(&placed, &row, Some(q)))
    })?;
    Ok(vec![("non-private", np[1]), ("ε = 8", private[1])])
}

fn study_push(study: &mut Vec<(String, f64, Vec<f64>)>, key: String, x: f64, v: f64) {
    match study.iter_mut().find(|(k, xx, _)| *k == key && *xx == x) {
        Some((_, _, vs)) => vs.push(v),
        None => study.push((key, x, vec![v])),
    }
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    let m = mean(v);
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64
    } else {
        0.0
    };
    (m, var.sqrt())
}

fn print_table(rows: &[Row], k: usize) {
    println!(
        "{:<34} {:>6}  {:>15}  {:>15}  {:>15}",
        "method",
        "eps",
        format!("Recall@{k}"),
        "mAP",
        format!("fidelity@{k}")
    );
    for r in rows {
        let eps = r.epsilon.map_or("-".to_string(), |e| e.to_string());
        let mut line = format!("{:<34} {eps:>6}", r.method);
        for j in 0..3 {
            let (m, s) = mean_std(&r.per_seed.iter().map(|t| t[j]).collect::<Vec<_>>());
            let _ = write!(line, "  {m:>7.4} ± {s:.4}");
        }
        println!("{line}");
    }
}

fn write_csv(path: &Path, rows: &[Row]) -> std::io::Result<()> {
    let mut out = String::from(
        "method,epsilon,seeds,recall_mean,recall_std,map_mean,map_std,fidelity_mean,fidelity_std\n",
    );
    for r in rows {
        let eps = r.epsilon.map_or(String::new(), |e| e.to_string());
        let _ = write!(out, "{},{eps},{}", r.method, r.per_seed.len());
        for j in 0..3 {
            let (m, s) = mean_std(&r.per_seed.iter().map(|t| t[j]).collect::<Vec<_>>());
            let _ = write!(out, ",{m:.5},{s:.5}");
        }
        out.push('\n');
    }
    std::fs::write(path, out)
}

/// The hyper-parameter study as CSV: `parameter,series,metric,value,seeds,mean,std`.
fn write_study_csv(path: &Path, study: &[(String, f64, Vec<f64>)]) -> std::io::Result<()> {
    let mut out = String::from("parameter,series,metric,value,seeds,mean,std\n");
    for (key, x, v) in study {
        let (m, sd) = mean_std(v);
        let _ = writeln!(
            out,
            "{},{x},{},{m:.5},{sd:.5}",
            key.replace('|', ","),
            v.len()
        );
    }
    std::fs::write(path, out)
}

#[cfg(test)]
mod tests {
    use super::one_per_class_first;

    #[test]
    fn one_per_class_first_moves_each_class_s_first_item_up() {
        // Items 0..6 with classes 0,0,1,0,2,1; a page of 2 then of 5.
        let labels = [0, 0, 1, 0, 2, 1];
        let ranking = vec![0, 1, 2, 3, 4, 5];
        assert_eq!(
            one_per_class_first(ranking.clone(), &labels, 2),
            [0, 2, 1, 3, 4, 5]
        );
        // Only three classes exist: the page holds three, then the rest in order.
        assert_eq!(one_per_class_first(ranking, &labels, 5), [0, 2, 4, 1, 3, 5]);
    }
}
