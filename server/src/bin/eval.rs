//! `eval`: PrivateMail against non-private baselines on Fashion-MNIST.
//!
//! Gallery: a random subset of the test split; anchors: a class-balanced random subset of the
//! training split; queries: gallery images, each retrieved leave-one-out (the paper's
//! protocol). Features are pixels (unit-normalised) until the on-device model exists.
//! `--seed` makes a run reproducible; production noise always comes from OS entropy.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use rayon::prelude::*;
use shared::align::umeyama;
use shared::frame::{privatize_in_frame, AnchorFrame};
use shared::laplacian::normalize_rows;
use shared::metrics::{average_precision, mean, recall_at_k};
use shared::privatemail::{embed_dense, privatize, Anchors};
use shared::retrieve::{full_ranking, gallery_rows};
use shared::{DMatrix, Mechanism, Params};

use privatemail_server::data::{load_split, Split, DEFAULT_DIR};
use privatemail_server::MODEL_WEIGHTS;
use shared::model::Model;

#[derive(Parser, Debug)]
#[command(about = "Recall@k and mAP of PrivateMail and baselines on Fashion-MNIST")]
struct Args {
    /// Directory with the Fashion-MNIST IDX files.
    #[arg(long, env = "FASHION_MNIST_DIR", default_value = DEFAULT_DIR)]
    data_dir: PathBuf,
    /// Gallery size (from the test split).
    #[arg(long, default_value_t = 5000)]
    gallery: usize,
    /// Public anchors (from the training split, class-balanced).
    #[arg(long, default_value_t = 1000)]
    anchors: usize,
    /// Queries (gallery images, leave-one-out).
    #[arg(long, default_value_t = 500)]
    queries: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// k of Recall@k.
    #[arg(long, default_value_t = 8)]
    k: usize,
    #[arg(long, value_delimiter = ',', default_value = "0.1,0.5,1,2,4,8")]
    epsilons: Vec<f64>,
    #[arg(long, default_value_t = 1e-5)]
    delta: f64,
    #[arg(long, value_parser = parse_mechanism, default_value = "discrete_gaussian")]
    mechanism: Mechanism,
    #[arg(long)]
    kernel_scale: Option<f64>,
    #[arg(long)]
    alpha: Option<f64>,
    /// Kernel scale of the anchor-frame placement.
    #[arg(long, default_value_t = shared::frame::DEFAULT_KERNEL_SCALE)]
    frame_kernel_scale: f64,
    #[arg(long)]
    iterations: Option<usize>,
    /// Feature vectors: the on-device model's (64-d; the query's label is then the model's
    /// prediction, as on a real client) or raw pixels (784-d, true labels).
    #[arg(long, value_enum, default_value_t = Features::Model)]
    features: Features,
}

#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
enum Features {
    Model,
    Pixels,
}

fn parse_mechanism(s: &str) -> Result<Mechanism, String> {
    serde_json::from_value(serde_json::Value::String(s.into()))
        .map_err(|_| "one of classic_gaussian, analytic_gaussian, discrete_gaussian".into())
}

/// (Recall@k, AP) of one query and its noise std / sensitivity.
type QueryOutcome = ((f64, f64), f64);

struct Scores {
    recall: f64,
    map: f64,
}

/// Recall@k and AP of one query from a full ranking of gallery indices.
fn score(ranking: &[usize], labels: &[u32], query: usize, k: usize) -> (f64, f64) {
    let ranked: Vec<u32> = ranking.iter().map(|&i| labels[i]).collect();
    let relevant = labels.iter().filter(|&&l| l == labels[query]).count() - 1;
    (
        recall_at_k(&ranked, labels[query], k),
        average_precision(&ranked, labels[query], relevant),
    )
}

fn aggregate(v: Vec<(f64, f64)>) -> Scores {
    let (r, m): (Vec<f64>, Vec<f64>) = v.into_iter().unzip();
    Scores {
        recall: mean(&r),
        map: mean(&m),
    }
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("eval: {e}");
        std::process::exit(2);
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    let test = load_split(&args.data_dir, "t10k")?;
    let train = load_split(&args.data_dir, "train")?;
    let mut rng = ChaCha20Rng::seed_from_u64(args.seed);

    let mut gidx: Vec<usize> = (0..test.labels.len()).collect();
    gidx.shuffle(&mut rng);
    gidx.truncate(args.gallery.min(gidx.len()));
    let mut tidx: Vec<usize> = (0..train.labels.len()).collect();
    tidx.shuffle(&mut rng);
    let per_class = args.anchors.div_ceil(10);
    let mut taken = [0usize; 10];
    let aidx: Vec<usize> = tidx
        .into_iter()
        .filter(|&i| {
            let c = train.labels[i] as usize;
            taken[c] += 1;
            taken[c] <= per_class
        })
        .take(args.anchors)
        .collect();
    let nq = args.queries.min(gidx.len());

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

    let g = gidx.len();
    let model = Model::from_bytes(MODEL_WEIGHTS)?;
    // Feature rows (and, with the model, predicted labels) of images of a split.
    let featurize = |split: &Split, idx: &[usize]| -> (DMatrix<f64>, Vec<u32>) {
        match args.features {
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
    };
    let (gallery_x, predicted) = featurize(&test, &gidx);
    let d = gallery_x.ncols();
    let gl: Vec<u32> = gidx.iter().map(|&i| test.labels[i] as u32).collect();
    let (anchor_x, _) = featurize(&train, &aidx);
    let al: Vec<u32> = aidx.iter().map(|&i| train.labels[i] as u32).collect();

    println!(
        "gallery {g} (test split), anchors {} (train split), queries {nq} (leave-one-out), seed {}, features: {:?} ({d}-d), k = {}, delta = {}, mechanism = {:?}, kernel_scale = {}, alpha = {}, T = {}",
        aidx.len(), args.seed, args.features, args.k, args.delta, args.mechanism, params.smlq.kernel_scale, params.smlq.alpha, params.smlq.iterations
    );

    // Non-private kNN on the features.
    let gx = normalize_rows(&gallery_x, "gallery")?;
    let grows = gallery_rows(&gx);
    let knn_feat = aggregate(
        (0..nq)
            .into_par_iter()
            .map(|q| score(&full_ranking(&grows, &grows[q], Some(q)), &gl, q, args.k))
            .collect(),
    );

    // Non-private SMLQ: the server's embedding of [gallery ; anchors].
    let t_embed = Instant::now();
    let all = DMatrix::from_fn(g + aidx.len(), d, |i, j| {
        if i < g {
            gallery_x[(i, j)]
        } else {
            anchor_x[(i - g, j)]
        }
    });
    let all_labels: Vec<u32> = gl.iter().chain(&al).copied().collect();
    let server = embed_dense(&all, &all_labels, &params.smlq, &mut rng)?;
    let embed_secs = t_embed.elapsed().as_secs_f64();
    let gemb = server.rows(0, g).into_owned();
    let server_anchors = server.rows(g, aidx.len()).into_owned();
    let erows = gallery_rows(&gemb);
    let smlq_np = aggregate(
        (0..nq)
            .into_par_iter()
            .map(|q| score(&full_ranking(&erows, &erows[q], Some(q)), &gl, q, args.k))
            .collect(),
    );

    // The anchor-frame protocol: the gallery placed in the public frame of the anchors.
    let frame = AnchorFrame::class_simplex(
        &anchor_x,
        &al,
        params.smlq.num_classes,
        args.frame_kernel_scale,
    )?;
    let placed = gallery_rows(&frame.place(&gallery_x)?);
    let frame_np = aggregate(
        (0..nq)
            .into_par_iter()
            .map(|q| score(&full_ranking(&placed, &placed[q], Some(q)), &gl, q, args.k))
            .collect(),
    );

    let anchors = Anchors::new(&anchor_x, &al, &params.smlq)?;
    let mut rows = vec![
        ("kNN on features (non-private)".to_string(), knn_feat),
        ("SMLQ (non-private)".to_string(), smlq_np),
        ("anchor frame (non-private)".to_string(), frame_np),
    ];
    let mut noise_report = Vec::new();
    for &eps in &args.epsilons {
        let mut p = params;
        p.privacy.epsilon = eps;
        let t_eps = Instant::now();
        let results: Vec<Result<QueryOutcome, shared::Error>> = (0..nq)
            .into_par_iter()
            .map(|q| {
                let mut rng = ChaCha20Rng::seed_from_u64(
                    args.seed ^ (q as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ eps.to_bits(),
                );
                let feats: Vec<f64> = gallery_x.row(q).iter().copied().collect();
                // The client's label is its own model's prediction (true label for pixels).
                let r = privatize(&feats, predicted[q], &anchors, &p, &mut rng)?;
                let t = umeyama(&r.anchor_rows, &server_anchors)?;
                let aligned = t.apply(&r.query_rows)?;
                let row: Vec<f64> = aligned.row(r.real_position()).iter().copied().collect();
                let noise_ratio = r.receipt.noise_scale / (r.receipt.sensitivity.max(1e-300));
                Ok((
                    score(&full_ranking(&erows, &row, Some(q)), &gl, q, args.k),
                    noise_ratio,
                ))
            })
            .collect();
        let mut scored = Vec::new();
        let mut ratio = Vec::new();
        for r in results {
            let (s, nr) = r?;
            scored.push(s);
            ratio.push(nr);
        }
        noise_report.push(format!(
            "eps {eps}: noise std / sensitivity = {:.3}, {:.1} ms per query (wall, 2 threads)",
            mean(&ratio),
            t_eps.elapsed().as_secs_f64() * 1e3 / nq as f64
        ));
        rows.push((format!("PrivateMail eps={eps}"), aggregate(scored)));
        let framed: Vec<(f64, f64)> = (0..nq)
            .into_par_iter()
            .map(|q| {
                let mut rng = ChaCha20Rng::seed_from_u64(
                    args.seed ^ (q as u64 + 7).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ eps.to_bits(),
                );
                let feats: Vec<f64> = gallery_x.row(q).iter().copied().collect();
                let r = privatize_in_frame(&feats, &frame, 9, &p.privacy, &mut rng)?;
                let row: Vec<f64> = r.rows.row(r.real_position()).iter().copied().collect();
                Ok(score(&full_ranking(&placed, &row, Some(q)), &gl, q, args.k))
            })
            .collect::<Result<_, shared::Error>>()?;
        rows.push((format!("anchor frame eps={eps}"), aggregate(framed)));
    }

    println!(
        "{:<34} {:>10} {:>8}",
        "method",
        format!("Recall@{}", args.k),
        "mAP"
    );
    for (name, s) in &rows {
        println!("{name:<34} {:>10.4} {:>8.4}", s.recall, s.map);
    }
    let chance = 1.0
        - (0..10)
            .map(|c| {
                let p = gl.iter().filter(|&&l| l == c).count() as f64 / g as f64;
                p * (1.0 - p).powi(args.k as i32)
            })
            .sum::<f64>();
    println!(
        "chance Recall@{} for these class frequencies: {chance:.4}",
        args.k
    );
    for l in noise_report {
        println!("{l}");
    }
    println!(
        "server embedding of {} rows: {embed_secs:.1} s; total {:.1} s",
        g + aidx.len(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
