//! The table's methods: their names (one per method; the ε column tells a private method
//! from its noise-free counterpart) and the baselines' parameters.

use paper::retrieve::LabelledRows;

/// Method names: each private method and its noise-free counterpart share one (the table's ε
/// column tells them apart; the plot draws both in one colour).
pub(super) const KNN: &str = "kNN on features";
pub(super) const ALG1: &str = "PrivateMail (Algorithm 1)";
pub(super) const EXTENDED: &str = "PrivateMail extended (3 steps)";
pub(super) const FRAME: &str = "anchor frame";
pub(super) const FRAME_PR: &str = "anchor frame + posterior ranking";
pub(super) const FRAME_PROP: &str = "anchor frame + proportional page";
/// The Recall@k-optimal page for a release: one item of each of the k most probable classes
/// (a second item of a shown class cannot raise "any of the first k is relevant"), the rest
/// as the posterior ranking. A reference for what no ranking of the release can beat.
pub(super) const FRAME_ONE_PER_CLASS: &str = "anchor frame + one per class";
pub(super) const JL: &str = "random projection-16";
pub(super) const PCA: &str = "PCA-16 + kNN";
pub(super) const LSH: &str = "LSH-64 (random flipping)";
pub(super) const ITQ: &str = "ITQ-32 (random flipping)";
pub(super) const PITQ: &str = "PITQ-32 (random flipping)";
pub(super) const TSNE: &str = "t-SNE of the gallery";
pub(super) const DSNE: &str = "DP-dSNE";
/// Chance levels: what a ranking that knows nothing scores. They differ with the ranking's
/// shape: a uniformly random order interleaves classes (high Recall@8, low mAP); a random
/// order of whole classes (what a class-level ranking degenerates to without signal) has low
/// Recall@8 but a much higher mAP. A private method must be judged against the matching one.
pub(super) const CHANCE_ORDER: &str = "chance: random order";
pub(super) const CHANCE_BLOCKS: &str = "chance: random class blocks";
/// What the proportional page degenerates to without signal: one item of each of k random
/// classes first, then random class blocks.
pub(super) const CHANCE_PAGE: &str = "chance: random proportional page";

/// Projection baselines' dimension and the hash lengths.
pub(super) const PROJECTION_DIM: usize = 16;
pub(super) const LSH_BITS: usize = 64;
pub(super) const ITQ_BITS: usize = 32;
/// PITQ's rounds E (its per-round flip probability is e^{−ε/E}).
pub(super) const PITQ_EPOCHS: usize = 10;

/// A class-posterior ranking of a frame release: (gallery, row, σ, k, excluded query).
pub(super) type ClassRanker = fn(&LabelledRows, &[f64], f64, usize, usize) -> Vec<usize>;
