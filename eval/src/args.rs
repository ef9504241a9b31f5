//! The command line: the table's flags and the `--blocks-*` flags of the block evaluation.

use std::path::PathBuf;

use clap::Parser;
use shared::Mechanism;

use data::fashion::DEFAULT_DIR;

#[derive(Parser, Debug)]
#[command(about = "Privacy–utility table and plots of PrivateMail and baselines on Fashion-MNIST")]
pub(crate) struct Args {
    /// Directory with the Fashion-MNIST IDX files.
    #[arg(long, env = "FASHION_MNIST_DIR", default_value = DEFAULT_DIR)]
    pub(crate) data_dir: PathBuf,
    /// Which split the gallery and queries come from (`train`: for tuning, anchors excluded).
    #[arg(long, value_enum, default_value_t = EvalSplit::Test)]
    pub(crate) split: EvalSplit,
    /// Gallery size.
    #[arg(long, default_value_t = 2000)]
    pub(crate) gallery: usize,
    /// Public anchors (from the training split, class-balanced).
    #[arg(long, default_value_t = 1000)]
    pub(crate) anchors: usize,
    /// Queries (gallery images, leave-one-out).
    #[arg(long, default_value_t = 200)]
    pub(crate) queries: usize,
    /// First seed; seeds `seed .. seed + seeds` are run.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    #[arg(long, default_value_t = 5)]
    pub(crate) seeds: u64,
    /// k of Recall@k and of the fidelity.
    #[arg(long, default_value_t = 8)]
    pub(crate) k: usize,
    #[arg(long, value_delimiter = ',', default_value = "0.1,0.25,0.5,1,2,4,8")]
    pub(crate) epsilons: Vec<f64>,
    #[arg(long, default_value_t = 1e-5)]
    pub(crate) delta: f64,
    #[arg(long, value_parser = parse_mechanism, default_value = "discrete_gaussian")]
    pub(crate) mechanism: Mechanism,
    /// Algorithm 1's kernel scale.
    #[arg(long)]
    pub(crate) kernel_scale: Option<f64>,
    #[arg(long)]
    pub(crate) alpha: Option<f64>,
    #[arg(long)]
    pub(crate) iterations: Option<usize>,
    /// Kernel scale of the anchor-frame placement.
    #[arg(long, default_value_t = paper::frame::DEFAULT_KERNEL_SCALE)]
    pub(crate) frame_kernel_scale: f64,
    /// Feature vectors: the on-device model's (64-d; the query's label is then the model's
    /// prediction, as on a real client) or raw pixels (784-d, true labels).
    #[arg(long, value_enum, default_value_t = Features::Model)]
    pub(crate) features: Features,
    /// Where the CSV and SVG files go.
    #[arg(long, default_value = "docs/eval")]
    pub(crate) out: PathBuf,
    /// Skip Algorithm 1 (the slowest method).
    #[arg(long)]
    pub(crate) skip_algorithm1: bool,
    /// Skip the hyper-parameter studies.
    #[arg(long)]
    pub(crate) no_study: bool,
    /// Seeds (the first ones) that run Algorithm 1's hyper-parameter study.
    #[arg(long, default_value_t = 3)]
    pub(crate) study_seeds: u64,
    /// Run the private block retrieval evaluation instead (`blocks.csv`, `blocks.svg` and
    /// `blocks.md` in `--out`; see `eval/src/blocks/`). Uses `--anchors`, `--seed`, `--delta`,
    /// `--mechanism` and the `--blocks-*` flags; ignores the others.
    #[arg(long)]
    pub(crate) blocks: bool,
    /// Run the evaluation of the plans the server serves instead, on its demo gallery at each
    /// of these sizes (`blocks-served.md` and `.csv` in `--out`; `eval/src/blocks/served.rs`).
    /// Uses `--anchors`, `--seed` and `--blocks-queries`.
    #[arg(long, value_delimiter = ',')]
    pub(crate) blocks_served: Vec<usize>,
    /// Served evaluation: build these levels (B) instead of the server's defaults, for studies.
    #[arg(long, value_delimiter = ',')]
    pub(crate) blocks_served_levels: Vec<u32>,
    /// Served evaluation: closure sizes m to compare (each level built with each; default: the
    /// server's, 24), for studies.
    #[arg(long, value_delimiter = ',')]
    pub(crate) blocks_served_closure: Vec<u32>,
    /// Block evaluation: held-out queries (training images outside the galleries and anchors).
    #[arg(long, default_value_t = 1000)]
    pub(crate) blocks_queries: usize,
    /// Block evaluation: Monte Carlo releases per query (Recall@8, mAP@8) per Pareto point.
    #[arg(long, default_value_t = 20)]
    pub(crate) blocks_draws: usize,
    /// Block evaluation: frame releases per query for the frame-release pools.
    #[arg(long, default_value_t = 1)]
    pub(crate) blocks_frame_draws: usize,
    /// Block evaluation: the large gallery, the server's demo gallery of this size
    /// (`data::fashion::demo_gallery`: the anchors and the held-out queries stay out; 0 skips it).
    #[arg(long, default_value_t = 70_000)]
    pub(crate) blocks_large: usize,
    /// Block evaluation: the levels (numbers of blocks B).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "8,16,32,48,64,96,128,256"
    )]
    pub(crate) blocks_levels: Vec<u32>,
    /// Block evaluation: the overlap variants on the 10,000 gallery.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "spill-1,spill-2,spill-3,spill-4,closure-8,closure-16,closure-24,closure-32"
    )]
    pub(crate) blocks_variants: Vec<String>,
    /// Block evaluation: the overlap variants on the large gallery (`auto`: the best spill and
    /// the two best closures on the 10,000 gallery).
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub(crate) blocks_large_variants: Vec<String>,
    /// Run the photo evaluation instead (`eval/src/photos/`: `photos.md`, `photos.csv` and
    /// `photos-ood.csv` in `--out`). Uses `--anchors`, `--seed` and the `--photos-*` flags.
    #[arg(long)]
    pub(crate) photos: bool,
    /// Photo evaluation: held-out photos (and calibration photos, and non-clothing images).
    #[arg(long, default_value_t = 1000)]
    pub(crate) photos_count: usize,
    /// Photo evaluation: query models to compare, as `label=path` (default: the committed
    /// query model).
    #[arg(long, value_delimiter = ',')]
    pub(crate) photos_weights: Vec<String>,
    /// Photo evaluation on the development set instead (`photos-dev.md`, …): the reserved
    /// images from the other end and another seed stream, for tuning the pipeline's
    /// thresholds, so the held-out figures are never tuned on.
    #[arg(long)]
    pub(crate) photos_dev: bool,
    /// Photo evaluation: the weights whose features of the test images are the gallery
    /// (default: the committed gallery model); `--photos-weights` are the query models.
    #[arg(long)]
    pub(crate) photos_gallery: Option<std::path::PathBuf>,
    /// Photo evaluation: the class model (`embed::classify`) whose label is shown
    /// (default: the committed one).
    #[arg(long)]
    pub(crate) photos_classifier: Option<std::path::PathBuf>,
    /// The familiarity warning on real non-clothing images instead, one folder a kind
    /// (`scripts/real-images.sh DIR` fills it): `real-images.md` in `--out`.
    #[arg(long)]
    pub(crate) real_images: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
pub(crate) enum Features {
    Model,
    Pixels,
}

#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
pub(crate) enum EvalSplit {
    Test,
    Train,
}

fn parse_mechanism(s: &str) -> Result<Mechanism, String> {
    serde_json::from_value(serde_json::Value::String(s.into()))
        .map_err(|_| "one of classic_gaussian, analytic_gaussian, discrete_gaussian".into())
}
