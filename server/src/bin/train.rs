//! `train`: fits the on-device model (`shared::embed::model`) on the Fashion-MNIST training images
//! (all but the 1,000 reserved ones), half of them drawn as product photos, and writes a weights file (by default `server/assets/model.bin`; the committed file came from the per-image trainer of session 24, see the README).
//! Deterministic for a given seed (see `privatemail_server::gallery::training`).

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use shared::embed::model::preprocess;

use privatemail_server::gallery::data::{load_split, DEFAULT_DIR, RESERVED};
use privatemail_server::gallery::quality::model_quality;
use privatemail_server::gallery::training::{train, TrainConfig};

#[derive(Parser)]
#[command(about = "Train the on-device feature model on Fashion-MNIST")]
struct Args {
    #[arg(long, env = "FASHION_MNIST_DIR", default_value = DEFAULT_DIR)]
    data_dir: PathBuf,
    #[arg(long, default_value_t = 25)]
    epochs: usize,
    #[arg(long, default_value_t = 64)]
    batch: usize,
    #[arg(long, default_value_t = 3e-3)]
    lr: f32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Disable the flip/shift augmentation.
    #[arg(long)]
    no_augment: bool,
    /// Share of samples drawn as product photos through the client's photo pipeline
    /// (`gallery::photos`, `shared::embed::photo`); 0 disables it.
    #[arg(long, default_value_t = 0.5)]
    photo_share: f32,
    /// Weight of the contrastive loss pulling a photo's embedding to its clean image's
    /// (`gallery::training::TrainConfig::contrast`); 0 disables it.
    #[arg(long, default_value_t = 1.0)]
    contrast: f32,
    /// Share of the flat layer dropped in training.
    #[arg(long, default_value_t = 0.25)]
    dropout: f32,
    /// Decoupled weight decay of the weights (AdamW).
    #[arg(long, default_value_t = 1e-3)]
    weight_decay: f32,
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/model.bin"))]
    out: PathBuf,
    /// Only measure the quality of an existing weights file on the test split.
    #[arg(long)]
    evaluate: Option<PathBuf>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Progress (log lines when stderr is not a terminal) goes to stderr; results to stdout.
    tracing_subscriber::fmt()
        .with_writer(privatemail_server::ops::progress::LogWriter::Stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    check(&args)?;
    let train_split = load_split(&args.data_dir, "train")?;
    let test = load_split(&args.data_dir, "t10k")?;
    if let Some(path) = &args.evaluate {
        let model = shared::embed::model::Model::from_bytes(&std::fs::read(path)?)?;
        report(&model, &test);
        return Ok(());
    }
    // The reserved images (`data::reserved_train`) stay out of training too, so the photo
    // evaluation (`eval --photos`) and the out-of-distribution threshold's check measure on
    // images the model never saw.
    let n = train_split.labels.len().saturating_sub(RESERVED);
    let xs: Vec<Vec<f32>> = (0..n)
        .map(|i| preprocess(train_split.images.image(i)))
        .collect::<Result<_, _>>()?;
    let cfg = TrainConfig {
        epochs: args.epochs,
        batch: args.batch,
        lr: args.lr,
        seed: args.seed,
        augment: !args.no_augment,
        photo_share: args.photo_share,
        contrast: args.contrast,
        dropout: args.dropout,
        weight_decay: args.weight_decay,
    };
    let t0 = Instant::now();
    let model = train(&xs, &train_split.labels[..n], &cfg, |epoch, model, loss| {
        let q = model_quality(model, &test, 2000);
        println!(
            "epoch {}: train loss {loss:.4}, test accuracy (first 2,000) {:.4}, {:.0} s",
            epoch + 1,
            q.accuracy,
            t0.elapsed().as_secs_f64()
        );
    });
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let bytes = model.w.to_bytes();
    std::fs::write(&args.out, &bytes)?;
    println!(
        "wrote {} ({} bytes) after {:.0} s",
        args.out.display(),
        bytes.len(),
        t0.elapsed().as_secs_f64()
    );
    report(&model, &test);
    Ok(())
}

/// Settings outside their ranges would train silently wrong weights (dropout 1 divides by
/// zero; a NaN rate poisons every weight): refused before any work.
fn check(a: &Args) -> Result<(), String> {
    let bad = |name: &str, v: f32, want: &str| Err(format!("--{name} {v}: must be {want}"));
    if !(a.lr.is_finite() && a.lr > 0.0) {
        return bad("lr", a.lr, "a positive number");
    }
    if !(0.0..1.0).contains(&a.dropout) {
        return bad("dropout", a.dropout, "in [0, 1)");
    }
    if !(a.weight_decay.is_finite() && a.weight_decay >= 0.0) {
        return bad("weight-decay", a.weight_decay, "a number ≥ 0");
    }
    if !(0.0..=1.0).contains(&a.photo_share) {
        return bad("photo-share", a.photo_share, "in [0, 1]");
    }
    if !(a.contrast.is_finite() && a.contrast >= 0.0) {
        return bad("contrast", a.contrast, "a number ≥ 0");
    }
    if a.epochs == 0 || a.batch == 0 {
        return Err("--epochs and --batch must be at least 1".into());
    }
    Ok(())
}

fn report(model: &shared::embed::model::Model, test: &privatemail_server::gallery::data::Split) {
    let q = model_quality(model, test, test.labels.len());
    println!(
        "test split (10,000): accuracy {:.4}, leave-one-out Recall@1 {:.4}, Recall@8 {:.4}",
        q.accuracy, q.recall1, q.recall8
    );
}
