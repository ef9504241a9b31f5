//! `privatemail`: private image search from a terminal, with the page's model, preprocessing,
//! mechanisms, search drivers and budget accounting (the crates `embed`, `dp` and `client`).
//!
//! Exit codes: 0 ok, 2 usage, 3 server unreachable or too slow (connect, first-byte and total
//! timeouts), 4 bad photo, 5 budget exceeded (nothing sent), 6 server refused, 7 malformed,
//! oversized or unverifiable answer (or a redirect to another origin, or too many), 8 budget
//! file, 9 invalid parameters, 10 an answer failed a check after decryption (searches against
//! that server are stopped from then on), 11 searches against this server are stopped
//! (`clear-refusal` lifts it), or this server's name presents a key other than the one pinned
//! for it (`accept-key` accepts it), 12 a served page differs from this version's (`verify-page`), 13 nothing to see in
//! the photo (smaller than 28×28 pixels, one solid colour, noise: refused before any model reads it; nothing sent).

mod budget;
mod error;
mod http;
mod identity;
mod page;
mod photo;
mod pir;
mod search;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use client::pir_search::RankingKind;
use embed::classify::Classifier;
use embed::model::Model;
use publish::plan::{candidates, pareto};
use serde::Serialize;
use shared::api::{AddItemsRequest, ChangeResponse, NewItem};
use shared::params::limits;

use error::{CliError, Result};
use search::{Protocol, Query};

/// The query model, the one a photo's features come from (the same file the page loads,
/// trained to land a photo where the server's gallery model puts its clean image).
pub const QUERY_WEIGHTS: &[u8] = include_bytes!("../../server/assets/query.bin");
/// The class model whose label the CLI prints and Algorithm 1 uses (`embed::classify`;
/// the same file the page loads).
pub const CLASS_WEIGHTS: &[u8] = include_bytes!("../../server/assets/classifier.bin");

#[derive(Parser)]
#[command(
    name = "privatemail",
    version,
    about = "Private image search: your photo stays on this machine. By default (private information retrieval) only encrypted queries leave it and the server learns nothing about the photo; other ways to search (--protocol) send a release with a stated privacy loss ε.",
    after_help = photo_help()
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct ServerArg {
    /// The gallery server.
    #[arg(
        long,
        env = "PRIVATEMAIL_SERVER",
        default_value = "http://127.0.0.1:8080"
    )]
    server: String,
    /// Seconds to connect to a server.
    #[arg(long, default_value_t = limits::CONNECT_TIMEOUT_SECS as f64)]
    connect_timeout: f64,
    /// Seconds to wait for an answer to start, and for any later pause inside one.
    #[arg(long, default_value_t = limits::FIRST_BYTE_TIMEOUT_SECS as f64)]
    first_byte_timeout: f64,
    /// Seconds for the whole command, every request included: past it the search is
    /// abandoned whole (nothing is retried).
    #[arg(long, default_value_t = limits::TOTAL_TIMEOUT_SECS as f64)]
    timeout: f64,
}

impl ServerArg {
    /// The server with these timeouts (each in (0, 1 day]).
    fn connect(&self) -> Result<http::Server> {
        let secs = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 && v <= 86_400.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(CliError::Usage(format!(
                    "--{name} must be in (0, 86400] seconds"
                )))
            }
        };
        let t = http::Timeouts {
            connect: secs("connect-timeout", self.connect_timeout)?,
            first_byte: secs("first-byte-timeout", self.first_byte_timeout)?,
            total: secs("timeout", self.timeout)?,
        };
        http::Server::new(&self.server, t)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Search the gallery for images like PHOTO (a camera's or phone's JPEG or PNG).
    Search {
        #[arg(help = photo_help())]
        photo: PathBuf,
        #[command(flatten)]
        server: ServerArg,
        /// Privacy level of this search (pure ε for blocks; (ε, δ) for frame and paper; PIR
        /// and the whole gallery release nothing and spend no ε).
        #[arg(long, default_value_t = 8.0)]
        epsilon: f64,
        /// How to search. Default: pir, as on the page (the server learns nothing about the
        /// photo, exact results, no ε spent); blocks with --whole.
        #[arg(long, value_enum)]
        protocol: Option<Protocol>,
        /// Results to show: 1–32 with PIR, 1–100 otherwise.
        #[arg(short, long, default_value_t = 8)]
        k: usize,
        /// Blocks: the most KiB one search may download, a ceiling: a plan is chosen on the
        /// most it can download (every released block at its published size), and one that
        /// releases nothing (ε = 0) wins whenever it fits. PIR: the most KiB one search may send and receive
        /// (public files fetched once are not counted; 1,000,000 images need about 2,100).
        #[arg(long, default_value_t = 512.0)]
        max_kib: f64,
        /// PIR: how to rank (`table`, `level` or `scores`); by default the plan's own choice.
        #[arg(long)]
        pir_ranking: Option<RankingKind>,
        /// Blocks: download the whole gallery (exact, no release, no privacy spent) where the
        /// server allows it.
        #[arg(long)]
        whole: bool,
        /// Refuse, before sending anything, a search that would bring this machine's total
        /// spent privacy above this ε.
        #[arg(long)]
        max_epsilon: Option<f64>,
        /// δ at which the budget is reported (and of the frame and paper releases).
        #[arg(long, default_value_t = shared::params::DELTA)]
        delta: f64,
        /// Frame and paper: how the noise is calibrated (always sampled as an exact discrete
        /// Gaussian); the analytic and classic calibrations prove a somewhat different δ,
        /// which the receipt states.
        #[arg(long, value_enum, default_value_t = Calibration::DiscreteGaussian)]
        mechanism: Calibration,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// What a block search will download at ε, and its predicted fidelity (public: no photo).
    Plan {
        #[command(flatten)]
        server: ServerArg,
        #[arg(long, default_value_t = 8.0)]
        epsilon: f64,
        #[arg(long, default_value_t = 512.0)]
        max_kib: f64,
        #[arg(long)]
        json: bool,
    },
    /// The privacy this machine has spent, composed over every search (zCDP).
    Budget {
        /// Forget every receipt (start a fresh budget).
        #[arg(long)]
        reset: bool,
        #[arg(long, default_value_t = shared::params::DELTA)]
        delta: f64,
        #[arg(long)]
        json: bool,
    },
    /// Lift the stop on searches against a server, set after one of its answers failed a
    /// check. Only do this if you trust that server again: a malicious server can use such
    /// failures to learn about one bit of a photo per search.
    ClearRefusal {
        /// The server whose searches were stopped (any of its URLs: the refusal is lifted
        /// under every name, address and key it was known by).
        #[arg(
            long,
            env = "PRIVATEMAIL_SERVER",
            default_value = "http://127.0.0.1:8080"
        )]
        server: String,
    },
    /// Serve the page from this machine: its code is built into this program and served on
    /// 127.0.0.1, searching the gallery at --server, which serves it only data (the gallery's
    /// operator lists this page's origin with `server --page-origin`). Opens the browser.
    Page {
        /// The gallery the page searches.
        #[arg(
            long,
            env = "PRIVATEMAIL_SERVER",
            default_value = "http://127.0.0.1:8080"
        )]
        server: String,
        /// The port on 127.0.0.1 (0: any free port). Keep the default: a browser keeps the
        /// page's spent privacy and refusals per origin, so another port starts them afresh.
        #[arg(long, default_value_t = page::DEFAULT_PORT)]
        port: u16,
        /// Only print the page's address; do not open a browser.
        #[arg(long)]
        no_open: bool,
    },
    /// Compare the page served at URL with this version's page, every file by its SHA-256;
    /// exits 12 naming each file that differs. It checks what URL serves to this program: a
    /// server that serves browsers something else is not caught (use `privatemail page`).
    VerifyPage {
        /// The page's address (where its index.html is served).
        url: String,
        /// Seconds for the whole check.
        #[arg(long, default_value_t = limits::TOTAL_TIMEOUT_SECS as f64)]
        timeout: f64,
        #[arg(long)]
        json: bool,
    },
    /// Accept a new key for a gallery: its name presented a key other than the one pinned
    /// when this client first searched there, and searches stopped. Only do this if you know
    /// why the key changed (ask the operator for the key): a new key can be another server
    /// under the same name. It lifts no refusal.
    AcceptKey {
        /// The gallery whose key changed.
        #[arg(
            long,
            env = "PRIVATEMAIL_SERVER",
            default_value = "http://127.0.0.1:8080"
        )]
        server: String,
        /// The new key, 64 hex digits (the stop message names the key presented).
        #[arg(long)]
        key: String,
    },
    /// Change the gallery (operators: needs the server's admin token).
    Gallery {
        #[command(subcommand)]
        action: GalleryAction,
    },
}

/// How a frame or paper release's noise is calibrated (`shared::Mechanism`). The variants'
/// names are the flag's values, as the receipts and the page name them.
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Calibration {
    DiscreteGaussian,
    AnalyticGaussian,
    ClassicGaussian,
}

impl From<Calibration> for shared::Mechanism {
    fn from(c: Calibration) -> Self {
        match c {
            Calibration::DiscreteGaussian => shared::Mechanism::DiscreteGaussian,
            Calibration::AnalyticGaussian => shared::Mechanism::AnalyticGaussian,
            Calibration::ClassicGaussian => shared::Mechanism::ClassicGaussian,
        }
    }
}

#[derive(Subcommand)]
enum GalleryAction {
    /// Add photos with a class label.
    Add {
        photos: Vec<PathBuf>,
        #[arg(long)]
        label: u32,
        #[command(flatten)]
        server: ServerArg,
        #[arg(long, env = "PM_ADMIN_TOKEN")]
        token: String,
    },
    /// Remove an item by id.
    Remove {
        id: u64,
        #[command(flatten)]
        server: ServerArg,
        #[arg(long, env = "PM_ADMIN_TOKEN")]
        token: String,
    },
}

/// PHOTO's help: the decoder's bounds, from `embed::photo_file` (one source).
fn photo_help() -> String {
    format!(
        "The photo: {}; larger photos are refused with the reason. {}.",
        embed::photo_file::limits_words(),
        embed::photo_file::HEIC_NOT_READ
    )
}

fn print_json(v: &impl Serialize) -> Result<()> {
    println!(
        "{}",
        serde_json::to_string_pretty(v).map_err(|e| CliError::Malformed(e.to_string()))?
    );
    Ok(())
}

fn kib(bytes: u64) -> String {
    format!("{:.0} KiB", bytes as f64 / 1024.0)
}

/// Why the planner chose its plan (`publish::plan::Why`), in words: the page's words too.
fn why_words(c: &publish::plan::Choice) -> String {
    use publish::plan::Why;
    let limit = c.budget.map(kib).unwrap_or_default();
    match c.why {
        Why::NothingReleased => format!(
            "it releases nothing about the photo and, at {} at most, fits the limit of {limit}; a search that releases nothing is always chosen over one that spends privacy when it fits",
            kib(c.plan.max_bytes)
        ),
        Why::BestWithinBudget { free_needs } => format!(
            "the best predicted result among the plans that can never download more than {limit}{}",
            free_needs
                .map(|n| format!("; a search that releases nothing needs up to {} here (--max-kib {})", kib(n), n.div_ceil(1024)))
                .unwrap_or_default()
        ),
        Why::Asked => "the whole gallery was asked for (--whole)".into(),
    }
}

fn check_epsilon(epsilon: f64) -> Result<()> {
    if epsilon.is_finite() && epsilon > 0.0 && epsilon <= limits::MAX_EPSILON {
        Ok(())
    } else {
        Err(CliError::Usage(format!(
            "--epsilon must be in (0, {}]",
            limits::MAX_EPSILON
        )))
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Search {
            photo,
            server,
            epsilon,
            protocol,
            k,
            max_kib,
            pir_ranking,
            whole,
            max_epsilon,
            delta,
            mechanism,
            json,
        } => {
            check_epsilon(epsilon)?;
            if !(max_kib.is_finite() && max_kib > 0.0) {
                return Err(CliError::Usage("--max-kib must be > 0".into()));
            }
            // The page's default (PIR) unless told otherwise; --whole is block download's.
            let protocol = match (protocol, whole) {
                (None, false) => Protocol::Pir,
                (None | Some(Protocol::Blocks), true) => Protocol::Blocks,
                (Some(p), false) => p,
                (Some(_), true) => {
                    return Err(CliError::Usage(
                        "--whole downloads the whole gallery by block download: use it without --protocol or with --protocol blocks".into(),
                    ))
                }
            };
            if !(delta > 0.0 && delta < 1.0) {
                return Err(CliError::Usage("--delta must be in (0, 1)".into()));
            }
            // A cap that is not a number would compare false and cap nothing.
            if max_epsilon.is_some_and(|m| !(m.is_finite() && m >= 0.0)) {
                return Err(CliError::Usage(
                    "--max-epsilon must be a finite number ≥ 0".into(),
                ));
            }
            // Checked before anything is released or sent: a search's k, as its protocol
            // bounds it (PIR fetches k thumbnails by PIR; the rest rank at most MAX_RANK_K).
            let most_k = match protocol {
                Protocol::Pir => publish::pir::doc::MAX_THUMB_QUERIES,
                _ => limits::MAX_RANK_K,
            };
            if !(1..=most_k).contains(&k) {
                return Err(CliError::Usage(format!(
                    "-k must be in 1..={most_k} for this way of searching"
                )));
            }
            let framing = photo::load(&photo)?;
            let model = Model::from_bytes(QUERY_WEIGHTS).expect("the embedded weights are valid");
            let classifier =
                Classifier::from_bytes(CLASS_WEIGHTS).expect("the embedded class model is valid");
            let server = server.connect()?;
            let q = Query {
                protocol,
                epsilon,
                delta,
                k,
                max_bytes: max_kib * 1024.0,
                pir_ranking,
                whole,
                max_epsilon,
                mechanism: mechanism.into(),
                progress: !json && std::io::stderr().is_terminal(),
            };
            let out = search::run(&server, (&model, &classifier), &framing, &q)?;
            if json {
                return print_json(&out);
            }
            println!("photo: {} (on-device model)", out.predicted_class);
            if out.unfamiliar {
                println!("{}", embed::ood::UNFAMILIAR_MESSAGE);
            }
            if out.cut_off {
                println!("{}", embed::cut::CUT_OFF_MESSAGE);
            }
            if let Some(c) = &out.pir {
                // Exact by construction with the table only; otherwise the gallery's own
                // published coverage, which no client can check.
                let worth = match c.plan.ranking {
                    client::pir_search::PirRanking::Table => {
                        "exact over the whole gallery".to_string()
                    }
                    _ => format!(
                        "predicted fidelity@{} {:.3} (the gallery's published coverage)",
                        c.plan.k, c.plan.predicted_fidelity
                    ),
                };
                println!(
                    "PIR (the server learns nothing about the photo; ε = 0): {} up, {} down; {} of public files downloaded once per version; {worth}",
                    kib(c.bytes_up),
                    kib(c.bytes_down),
                    kib(c.one_time_bytes_downloaded),
                );
            }
            if let Some(c) = &out.plan {
                let p = &c.plan;
                let within = c
                    .budget
                    .map(|b| format!(", within the limit of {}", kib(b)))
                    .unwrap_or_default();
                println!(
                    "downloaded {} of blocks: {} of {} at level {} (at most {} by the plan{within}); predicted share of the exact top {} found {:.3}",
                    kib(out.block_bytes_downloaded),
                    p.size,
                    p.blocks,
                    p.level,
                    kib(p.max_bytes),
                    out.results.len(),
                    p.predicted_fidelity
                );
                if out.centroids_bytes_downloaded > 0 {
                    println!(
                        "and {} for the level's centroids, once for this gallery version",
                        kib(out.centroids_bytes_downloaded)
                    );
                }
                println!("why this plan: {}", why_words(c));
            }
            println!(
                "{:>4}  {:>8}  {:<12} {:>10}",
                "rank", "id", "class", "distance"
            );
            for (i, h) in out.results.iter().enumerate() {
                println!(
                    "{:>4}  {:>8}  {:<12} {:>10.4}",
                    i + 1,
                    h.id,
                    h.class_name,
                    h.distance
                );
            }
            match &out.receipt {
                Some(r) => println!("released: {}", client::words::release(r)),
                None => println!("released nothing about the photo (privacy loss ε = 0)"),
            }
            let receipts = budget::load()?;
            let words = client::words::total(&out.budget, &receipts);
            println!(
                "total spent from this machine: {} ({})",
                words.short, words.method
            );
            println!("{}", words.text);
            Ok(())
        }
        Command::Plan {
            server,
            epsilon,
            max_kib,
            json,
        } => {
            check_epsilon(epsilon)?;
            let server = server.connect()?;
            let doc = search::partition(&server)?;
            let q = Query {
                protocol: Protocol::Blocks,
                epsilon,
                delta: shared::params::DELTA,
                k: 8,
                max_bytes: max_kib * 1024.0,
                pir_ranking: None,
                whole: false,
                max_epsilon: None,
                mechanism: shared::Mechanism::DiscreteGaussian,
                progress: false,
            };
            let choice = search::choose_plan(&doc, &q)?;
            let chosen = choice.plan;
            let curve = pareto(candidates(&doc, epsilon)?);
            if json {
                return print_json(&serde_json::json!({ "plan": choice, "pareto": curve }));
            }
            let spends = if chosen.epsilon == 0.0 {
                "releases nothing about the photo (privacy loss ε = 0)".to_string()
            } else {
                format!(
                    "spends privacy loss ε = {epsilon}; the release holds your own block with probability {:.3}",
                    chosen.inclusion
                )
            };
            println!(
                "within {max_kib} KiB: level {} (B = {}), download {} blocks: at most {} (about {} on average), {:.1} % of the gallery; predicted share of the exact top 8 found {:.3}; {spends}",
                chosen.level,
                chosen.blocks,
                chosen.size,
                kib(chosen.max_bytes),
                kib(chosen.expected_bytes as u64),
                100.0 * chosen.expected_pool_fraction,
                chosen.predicted_fidelity,
            );
            println!("why this plan: {}", why_words(&choice));
            println!(
                "{:>8} {:>6} {:>4} {:>10} {:>8}",
                "most KiB", "B", "L", "share", "fidelity"
            );
            for p in curve {
                println!(
                    "{:>8.0} {:>6} {:>4} {:>9.1}% {:>8.3}",
                    p.max_bytes as f64 / 1024.0,
                    p.blocks,
                    p.size,
                    100.0 * p.expected_pool_fraction,
                    p.predicted_fidelity
                );
            }
            Ok(())
        }
        Command::Budget { reset, delta, json } => {
            if reset {
                budget::reset()?;
            }
            let receipts = budget::load()?;
            let t = budget::total(&receipts, delta)?;
            if json {
                return print_json(&t);
            }
            let words = client::words::total(&t, &receipts);
            println!("{} ({})", words.short, words.method);
            println!("{}", words.text);
            println!("receipts: {}", budget::path()?.display());
            Ok(())
        }
        Command::ClearRefusal { server } => {
            if identity::clear(&server)? {
                println!("searches against {server} are allowed again");
            } else {
                println!("searches against {server} were not stopped");
            }
            Ok(())
        }
        Command::Page {
            server,
            port,
            no_open,
        } => {
            // A gallery whose answer failed a check gets no search from this machine, the
            // page's included.
            identity::guard(&http::Server::new(&server, http::Timeouts::default())?)?;
            page::serve(&server, port, !no_open)
        }
        Command::VerifyPage { url, timeout, json } => {
            if !(timeout.is_finite() && timeout > 0.0 && timeout <= 86_400.0) {
                return Err(CliError::Usage(
                    "--timeout must be in (0, 86400] seconds".into(),
                ));
            }
            let t = http::Timeouts {
                total: Duration::from_secs_f64(timeout),
                ..http::Timeouts::default()
            };
            let v = page::verify(&url, t)?;
            if json {
                print_json(&v)?;
            } else {
                for d in &v.differences {
                    println!("{}: {}", d.file, d.what);
                }
            }
            if v.differences.is_empty() {
                if !json {
                    println!(
                        "{}: all {} files are this version's page (index.html sha256 {})",
                        v.url, v.files, v.page_sha256
                    );
                }
                Ok(())
            } else {
                Err(CliError::PageDiffers(format!(
                    "{} of {} files at {} differ from this version's page: {}",
                    v.differences.len(),
                    v.files,
                    v.url,
                    v.differences
                        .iter()
                        .map(|d| d.file.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
        }
        Command::AcceptKey { server, key } => {
            match identity::accept(&server, &key)? {
                Some(old) if old != key.to_ascii_lowercase() => {
                    println!("{server}: the key {old} is replaced by {key}")
                }
                Some(_) => println!("{server}: {key} was already its key"),
                None => println!("{server}: {key} is pinned"),
            }
            Ok(())
        }
        Command::Gallery { action } => match action {
            GalleryAction::Add {
                photos,
                label,
                server,
                token,
            } => {
                let items = photos
                    .iter()
                    .map(|p| {
                        Ok(NewItem {
                            label,
                            pixels: photo::load(p)?.pixels,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let server = server.connect()?;
                let r: ChangeResponse = server.post_json(
                    "/api/v1/gallery",
                    &AddItemsRequest { items },
                    Some(&token),
                )?;
                print_json(&r)
            }
            GalleryAction::Remove { id, server, token } => {
                let server = server.connect()?;
                let r: ChangeResponse =
                    server.delete_json(&format!("/api/v1/gallery/{id}"), Some(&token))?;
                print_json(&r)
            }
        },
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Messages can quote a server: one line, bounded, no control characters.
            eprintln!(
                "privatemail: {}",
                shared::text::excerpt(&e.to_string(), 2_000)
            );
            ExitCode::from(e.exit_code())
        }
    }
}
