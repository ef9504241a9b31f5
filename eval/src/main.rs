//! `eval`: the evaluation of PrivateMail and its baselines on Fashion-MNIST. The command line
//! (`args`) picks one of two runs: the privacy–utility table of PrivateMail (Algorithm 1), the
//! anchor-frame protocol and the paper's baselines (`table`, the default), or the private
//! block retrieval evaluation (`blocks`, with `--blocks`).

mod args;
/// The private baselines the evaluation compares with (no route of the product uses them).
mod baselines {
    pub mod dsne;
    pub mod hashing;
    pub mod projection;
}
mod blocks;
mod chart;
mod photos;
mod rng;
mod table;

use clap::Parser as _;

use args::Args;

fn main() {
    // Progress (log lines when stderr is not a terminal) goes to stderr; the table to stdout.
    data::progress::log_to_stderr();
    let args = Args::parse();
    if !args.blocks_served.is_empty() {
        if let Err(e) = blocks::served::run(&args) {
            eprintln!("eval --blocks-served: {e}");
            std::process::exit(2);
        }
        return;
    }
    if let Some(dir) = &args.real_images {
        if let Err(e) = photos::real::run(&args, dir) {
            eprintln!("eval --real-images: {e}");
            std::process::exit(2);
        }
        return;
    }
    if args.photos || args.photos_dev {
        if let Err(e) = photos::run(&args) {
            eprintln!("eval --photos: {e}");
            std::process::exit(2);
        }
        return;
    }
    if args.blocks {
        if let Err(e) = blocks::run(&args) {
            eprintln!("eval --blocks: {e}");
            std::process::exit(2);
        }
        return;
    }
    if let Err(e) = table::run(args) {
        eprintln!("eval: {e}");
        std::process::exit(2);
    }
}
