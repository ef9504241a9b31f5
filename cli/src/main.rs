//! `privatemail`: private image search from a terminal, with the page's model, preprocessing,
//! mechanisms, search drivers and budget accounting (the crates `embed`, `dp` and `client`).
//!
//! Exit codes: 0 ok, 2 usage, 3 server unreachable or too slow (connect, first-byte and total
//! timeouts), 4 bad photo, 5 budget exceeded (nothing sent), 6 server refused, 7 malformed,
//! oversized or unverifiable answer (or a redirect to another origin, or too many), 8 budget
//! file, 9 invalid parameters, 10 an answer failed a check after decryption (searches against
//! that server are stopped from then on), 11 searches against this server are stopped
//! (`clear-refusal` lifts it), or this server's name presents a key other than the one pinned
//! for it (`accept-key` accepts it).

mod budget;
mod error;
mod http;
mod identity;
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
    about = "Private image search: your photo stays on this machine; only a differentially private release leaves it."
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
    /// Search the gallery for images like PHOTO (PNG or JPEG, any size).
    Search {
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
        /// Results to show.
        #[arg(short, long, default_value_t = 8)]
        k: usize,
        /// Blocks: the most KiB one search may download (the plan with the best predicted
        /// fidelity within it is used). PIR: the most KiB one search may send and receive
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
        #[arg(long, default_value_t = 1e-5)]
        delta: f64,
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
        #[arg(long, default_value_t = 1e-5)]
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
            if let Some(c) = &out.pir {
                println!(
                    "PIR (the server learns nothing about the photo; ε = 0): {} up, {} down; {} of public files downloaded once per version; predicted fidelity@{} {:.3}",
                    kib(c.bytes_up),
                    kib(c.bytes_down),
                    kib(c.one_time_bytes_downloaded),
                    c.plan.k,
                    c.plan.predicted_fidelity
                );
            }
            if let Some(p) = &out.plan {
                println!(
                    "downloaded {:.0} KiB: {} of {} blocks at level {}; predicted fidelity@8 {:.3} (share of the exact top 8 found)",
                    out.bytes_downloaded as f64 / 1024.0,
                    p.size,
                    p.blocks,
                    p.level,
                    p.predicted_fidelity
                );
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
                Some(r) => println!("spent ε = {} on this search", r.epsilon),
                None => println!("spent nothing on this search (nothing was released)"),
            }
            println!(
                "total spent from this machine: ε = {:.3} at δ = {:e} over {} releases",
                out.budget.epsilon, out.budget.delta, out.budget.releases
            );
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
                delta: 1e-5,
                k: 8,
                max_bytes: max_kib * 1024.0,
                pir_ranking: None,
                whole: false,
                max_epsilon: None,
                progress: false,
            };
            let chosen = search::choose_plan(&doc, &q)?;
            let curve = pareto(candidates(&doc, epsilon)?);
            if json {
                return print_json(&serde_json::json!({ "plan": chosen, "pareto": curve }));
            }
            println!(
                "at ε = {epsilon} within {max_kib} KiB: level {} (B = {}), download {} blocks ≈ {:.0} KiB, {:.1} % of the gallery; predicted fidelity@8 {:.3}; the release holds your own block with probability {:.3}",
                chosen.level,
                chosen.blocks,
                chosen.size,
                chosen.expected_bytes / 1024.0,
                100.0 * chosen.expected_pool_fraction,
                chosen.predicted_fidelity,
                chosen.inclusion
            );
            println!(
                "{:>8} {:>6} {:>4} {:>10} {:>8}",
                "KiB", "B", "L", "share", "fidelity"
            );
            for p in curve {
                println!(
                    "{:>8.0} {:>6} {:>4} {:>9.1}% {:>8.3}",
                    p.expected_bytes / 1024.0,
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
            let t = budget::total(&budget::load()?, delta)?;
            if json {
                return print_json(&t);
            }
            println!(
                "{} releases: ε = {:.3} at δ = {:e} (zCDP ρ = {:.4}; adding ε's would give {:.3})",
                t.releases, t.epsilon, t.delta, t.zcdp_rho, t.basic_epsilon
            );
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
