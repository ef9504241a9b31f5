//! `train`: fits the on-device model (`embed::model`) on the Fashion-MNIST training images
//! (all but the 1,000 reserved ones), half of them drawn as product photos, and writes a weights
//! file (by default `server/assets/model.bin`; the committed file came from the per-image
//! trainer, see the README).
//! With `--class-model` it writes the network as the 8-bit class model
//! (`embed::classify`, by default `server/assets/classifier.bin`) instead, and
//! `--encode-class-model F` writes an existing weights file as one: the committed class model
//! (cnn-v2-2f44aea4358eea24) is a run with the defaults, encoded so.
//! Deterministic for a given seed (see `train`).

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use embed::classify::Classifier;
use embed::model::{preprocess, Arch, Model};

use data::fashion::{load_split, Split, DEFAULT_DIR, RESERVED};
use data::quality::model_quality;
use train::{train, TrainConfig};

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
    /// (`data::photos`, `embed::photo`); 0 disables it.
    #[arg(long, default_value_t = 0.5)]
    photo_share: f32,
    /// Chance of each of a soft shadow, uneven light and a coloured garment on a sample drawn
    /// as a photo (`data::photos::Shot::as_people_take_them`); 0 disables them.
    #[arg(long, default_value_t = 0.0)]
    people: f32,
    /// Weight of the contrastive loss pulling a photo's embedding to its clean image's
    /// (`train::TrainConfig::contrast`); 0 disables it.
    #[arg(long, default_value_t = 1.0)]
    contrast: f32,
    /// Distil from this weights file (the teacher): weight of the loss pulling every
    /// sample's embedding to the teacher's of its clean image
    /// (`train::TrainConfig::distill`); needs `--teacher`.
    #[arg(long, default_value_t = 0.0)]
    distill: f32,
    /// The teacher's weights file for `--distill`.
    #[arg(long)]
    teacher: Option<PathBuf>,
    /// Start from this weights file instead of random weights (fine-tuning: the query model
    /// starts from the gallery model).
    #[arg(long)]
    init: Option<PathBuf>,
    /// The convolutions' widths, `C1,C2` (each 1 to 128): of a network trained from scratch,
    /// or the widths a start model (`--init`) is widened to first, its new channels reaching
    /// nothing until trained (`train::widen`).
    #[arg(long, default_value = "32,64", value_parser = parse_arch)]
    channels: Arch,
    /// Write the weights in 8 bits (`PMCNN3`, `embed::weights::EightBit`): how the
    /// query model is shipped.
    #[arg(long)]
    eight_bit: bool,
    /// Share of the flat layer dropped in training.
    #[arg(long, default_value_t = 0.25)]
    dropout: f32,
    /// Decoupled weight decay of the weights (AdamW).
    #[arg(long, default_value_t = 1e-3)]
    weight_decay: f32,
    /// Where to write the weights (default `target/train/model.bin`, or
    /// `target/train/classifier.bin` with `--class-model`: never over a committed model unless
    /// named, e.g. `--out server/assets/query.bin`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Write the trained network as the 8-bit class model (`embed::classify`).
    #[arg(long)]
    class_model: bool,
    /// Do not train: write this f32 weights file as the 8-bit class model (to `--out`).
    #[arg(long)]
    encode_class_model: Option<PathBuf>,
    /// Only measure the quality of an existing weights file on the test split.
    #[arg(long)]
    evaluate: Option<PathBuf>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Progress (log lines when stderr is not a terminal) goes to stderr; results to stdout.
    data::progress::log_to_stderr();
    let args = Args::parse();
    check(&args)?;
    let train_split = load_split(&args.data_dir, "train")?;
    let test = load_split(&args.data_dir, "t10k")?;
    let class_model = args.class_model || args.encode_class_model.is_some();
    let out = args.out.clone().unwrap_or_else(|| {
        let name = if class_model {
            "classifier.bin"
        } else {
            "model.bin"
        };
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/train")).join(name)
    });
    if let Some(path) = &args.evaluate {
        let bytes = std::fs::read(path)?;
        let model = match Classifier::from_bytes(&bytes) {
            Ok(c) => Model {
                w: c.weights().clone(),
            },
            Err(_) => Model::from_bytes(&bytes)?,
        };
        report(&model, &test);
        return Ok(());
    }
    if let Some(path) = &args.encode_class_model {
        let model = Model::from_bytes(&std::fs::read(path)?)?;
        return write(&model, &out, Format::ClassModel, &test, Instant::now());
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
        people: args.people,
        contrast: args.contrast,
        distill: args.distill,
        dropout: args.dropout,
        weight_decay: args.weight_decay,
        arch: args.channels,
    };
    let teacher = match &args.teacher {
        Some(p) => Some(Model::from_bytes(&std::fs::read(p)?)?),
        None => None,
    };
    let start = match &args.init {
        Some(p) => Some(Model::from_bytes(&std::fs::read(p)?)?),
        None => None,
    };
    let t0 = Instant::now();
    let model = train(
        &xs,
        &train_split.labels[..n],
        &cfg,
        teacher.as_ref(),
        start.as_ref(),
        |epoch, model, loss| {
            let q = model_quality(model, &test, 2000);
            println!(
                "epoch {}: train loss {loss:.4}, test accuracy (first 2,000) {:.4}, {:.0} s",
                epoch + 1,
                q.accuracy,
                t0.elapsed().as_secs_f64()
            );
        },
    );
    let format = match (class_model, args.eight_bit) {
        (true, _) => Format::ClassModel,
        (false, true) => Format::EightBit,
        (false, false) => Format::Full,
    };
    write(&model, &out, format, &test, t0)
}

/// `C1,C2` → the widths, checked.
fn parse_arch(s: &str) -> Result<Arch, String> {
    let (a, b) = s
        .split_once(',')
        .ok_or_else(|| format!("`{s}`: expected two widths, `C1,C2`"))?;
    let num = |v: &str| v.trim().parse::<usize>().map_err(|e| format!("`{v}`: {e}"));
    let arch = Arch {
        c1: num(a)?,
        c2: num(b)?,
    };
    arch.check().map_err(|e| e.to_string())?;
    Ok(arch)
}

/// How the weights are written.
#[derive(Clone, Copy, PartialEq)]
enum Format {
    /// f32 (`Weights::to_bytes`).
    Full,
    /// 8 bits (`Weights::to_bytes_8bit`).
    EightBit,
    /// The 8-bit class model (`Classifier::encode`).
    ClassModel,
}

/// Write the weights in `format` and report the quality of the network as written (decoded
/// from the bytes written).
fn write(
    model: &Model,
    out: &std::path::Path,
    format: Format,
    test: &Split,
    t0: Instant,
) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let (bytes, written) = match format {
        Format::ClassModel => {
            let bytes = Classifier::encode(&model.w);
            let w = Classifier::from_bytes(&bytes)?.weights().clone();
            (bytes, Model { w })
        }
        Format::EightBit => {
            let bytes = model.w.to_bytes_8bit();
            let written = Model::from_bytes(&bytes)?;
            (bytes, written)
        }
        Format::Full => (model.w.to_bytes(), model.clone()),
    };
    std::fs::write(out, &bytes)?;
    println!(
        "wrote {} ({} bytes) after {:.0} s",
        out.display(),
        bytes.len(),
        t0.elapsed().as_secs_f64()
    );
    report(&written, test);
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
    if !(0.0..=1.0).contains(&a.people) {
        return bad("people", a.people, "in [0, 1]");
    }
    if !(a.contrast.is_finite() && a.contrast >= 0.0) {
        return bad("contrast", a.contrast, "a number ≥ 0");
    }
    if !(a.distill.is_finite() && a.distill >= 0.0) {
        return bad("distill", a.distill, "a number ≥ 0");
    }
    if a.distill > 0.0 && a.teacher.is_none() {
        return Err("--distill needs --teacher (a weights file)".into());
    }
    if a.epochs == 0 || a.batch == 0 {
        return Err("--epochs and --batch must be at least 1".into());
    }
    Ok(())
}

fn report(model: &Model, test: &Split) {
    let q = model_quality(model, test, test.labels.len());
    println!(
        "test split (10,000): accuracy {:.4}, leave-one-out Recall@1 {:.4}, Recall@8 {:.4}",
        q.accuracy, q.recall1, q.recall8
    );
}
