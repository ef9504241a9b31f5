//! `server`: the gallery server with the Fashion-MNIST demo gallery and the web page.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use shared::api::ApiLimits;
use tracing_subscriber::EnvFilter;

use data::fashion::DEFAULT_DIR;
use privatemail_server::http::router;
use privatemail_server::net::{self, NetLimits};
use privatemail_server::partition::PartitionSettings;
use privatemail_server::state::{AppState, Options};

#[derive(Parser, Debug)]
#[command(about = "PrivateMail gallery server")]
struct Args {
    /// Address to listen on (port 0 picks a free one; the bound address is printed).
    #[arg(long, env = "PM_BIND", default_value = "127.0.0.1:8080")]
    bind: SocketAddr,
    #[command(flatten)]
    gallery: GalleryArgs,
    /// An origin (`https://host[:port]`) from which the page's release bundle may use the API
    /// (CORS, without credentials): a static host, or `http://127.0.0.1:8765` for
    /// `privatemail page` on the searcher's machine. Repeat the flag, or separate by commas in
    /// the environment variable. No origin is listed by default.
    #[arg(long = "page-origin", env = "PM_PAGE_ORIGINS", value_delimiter = ',',
          value_parser = privatemail_server::http::cors::page_origin)]
    page_origins: Vec<String>,
    /// Directory of the web page, served at `/`: by default the release bundle that
    /// `scripts/build-web.sh` writes (`web/dist/`); `web/` serves the sources as they are.
    #[arg(long, env = "PM_WEB_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../web/dist"))]
    web_dir: PathBuf,
    /// The gallery store (redb file); created and seeded with the demo gallery if missing.
    #[arg(
        long,
        env = "PM_STORE",
        default_value = "privatemail-data/gallery.redb"
    )]
    store: PathBuf,
    /// Bearer token for adding and deleting gallery images; without one they are disabled.
    #[arg(long, env = "PM_ADMIN_TOKEN")]
    admin_token: Option<String>,
    /// Largest k a search may ask for: 1–100 (the bound the API document publishes).
    #[arg(long, default_value_t = 50,
          value_parser = clap::value_parser!(u64).range(1..=shared::params::limits::MAX_RANK_K as u64))]
    max_k: u64,
    /// Block retrieval: the largest expected share of the gallery one search may download, in
    /// (0, 1] (published in the partition document; clients plan within it).
    #[arg(long, env = "PM_MAX_SHARE", default_value_t = publish::publish::DEFAULT_MAX_SHARE, value_parser = parse_share)]
    max_share: f64,
    /// Block retrieval: publish the whole gallery as one block (a download needing no privacy
    /// budget). `false` hides that level and does not serve it.
    #[arg(long, env = "PM_ALLOW_FULL_DOWNLOAD", default_value_t = true, action = clap::ArgAction::Set)]
    allow_full_download: bool,
    /// Block retrieval: seconds a replaced partition version stays served after a gallery
    /// change (afterwards its URLs answer 410 Gone).
    #[arg(long, env = "PM_PARTITION_GRACE_SECS", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    partition_grace_secs: u64,
    /// Block retrieval: where the partition's files are written — a directory,
    /// `file:///dir`, or `s3://bucket/prefix` (an S3-compatible bucket, configured from the
    /// AWS_* environment variables as the `object_store` crate reads them: AWS_ENDPOINT,
    /// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP, …). Default: a
    /// directory beside the gallery store (`gallery.blocks`). A restart serves the version
    /// announced there instead of rebuilding it.
    #[arg(long, env = "PM_BLOCKS_STORE")]
    blocks_store: Option<String>,
    /// Block retrieval: the URL clients fetch blocks under (a bucket's public URL or a CDN in
    /// front of it, mapping to the store's prefix); required with an `s3://` store. Default:
    /// this server (`/api/v1/blocks`).
    #[arg(long, env = "PM_BLOCKS_PUBLIC_URL")]
    blocks_public_url: Option<String>,
    /// Block retrieval: a partition version whose block files (plain + gzip) exceed this many
    /// MiB is not held in memory; each block file is read from the block store on request (a
    /// local store's file is mapped on its first request, checked and kept mapped while the
    /// kept mappings total at most this many MiB; past that, mapped per request).
    #[arg(long, env = "PM_BLOCKS_CACHE_MIB", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(0..=1 << 20))]
    blocks_cache_mib: u64,
    /// PIR: answers queued or computed at once at most (each spreads over every core;
    /// concurrent hintless rankings are computed together, one pass for all); up to four
    /// times as many further requests wait (each up to 30 s), more get 503 `busy` at once.
    #[arg(long, env = "PM_PIR_CONCURRENCY", default_value_t = 4,
          value_parser = clap::value_parser!(u64).range(1..=256))]
    pir_concurrency: u64,
    /// PIR: bytes of request bodies in flight at most, in MiB (each body's declared length is
    /// reserved before it is read; beyond the budget: 503 with `Retry-After`).
    #[arg(long, env = "PM_PIR_UPLOAD_BUDGET_MIB", default_value_t = 128,
          value_parser = clap::value_parser!(u64).range(16..=1 << 16))]
    pir_upload_budget_mib: u64,
    /// Per-client limits key on the peer address; behind a proxy you run, name the header it
    /// sets (e.g. `X-Forwarded-For`: its last entry is used). Never set this without such a
    /// proxy: clients could then choose their own key.
    #[arg(long, env = "PM_CLIENT_ADDRESS_HEADER")]
    client_address_header: Option<String>,
    /// Seconds a client has to send a request head; also how long an idle keep-alive
    /// connection stays open.
    #[arg(long, env = "PM_HEADER_TIMEOUT_SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=600))]
    header_timeout_secs: u64,
    /// Seconds a client has to send a request body, from the end of its head (408 after).
    #[arg(long, env = "PM_BODY_TIMEOUT_SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    body_timeout_secs: u64,
    /// Seconds an answer may take, queueing for a PIR slot included (408 after).
    #[arg(long, env = "PM_REQUEST_TIMEOUT_SECS", default_value_t = 90,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    request_timeout_secs: u64,
    /// Seconds a response write may make no progress before the connection is closed.
    #[arg(long, env = "PM_WRITE_TIMEOUT_SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    write_timeout_secs: u64,
    /// Open connections at most (the process's open-file limit is raised to match; at the
    /// cap the oldest idle connection is closed for a new one).
    #[arg(long, env = "PM_MAX_CONNECTIONS", default_value_t = 4096,
          value_parser = clap::value_parser!(u64).range(16..=1 << 20))]
    max_connections: u64,
    /// Open connections from one client address (IPv6: its /64; behind a proxy, the address
    /// `--client-address-header` names) at most. Default: an eighth of `--max-connections`.
    /// At this share a new connection closes the address's own oldest idle one, or is
    /// refused; at `--max-connections` the address holding the most gives one up.
    #[arg(long, env = "PM_MAX_CONNECTIONS_PER_ADDRESS",
          value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    max_connections_per_address: Option<u64>,
    /// Bytes a second a request body must arrive at, and a response be read at, on average
    /// once `--min-rate-grace-secs` have passed (slower: the body gets a 408, the download is
    /// cut). 0 turns the minimum off.
    #[arg(long, env = "PM_MIN_DATA_RATE", default_value_t = net::DEFAULT_MIN_RATE,
          value_parser = clap::value_parser!(u64).range(0..=1 << 30))]
    min_data_rate: u64,
    /// Seconds before the minimum data rate applies (to a body from its head; to a download
    /// from when the client stops keeping up).
    #[arg(long, env = "PM_MIN_RATE_GRACE_SECS", default_value_t = net::DEFAULT_RATE_GRACE.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    min_rate_grace_secs: u64,
    /// On SIGTERM or Ctrl-C: seconds the answers in progress may take to finish before the
    /// remaining connections are closed and the store is closed.
    #[arg(long, env = "PM_SHUTDOWN_GRACE_SECS", default_value_t = 8,
          value_parser = clap::value_parser!(u64).range(0..=600))]
    shutdown_grace_secs: u64,
    /// PIR: thumbnail records also carry each item's features (1.4× the thumbnail bytes and
    /// hint), so a client checks the encrypted scores of the items it is returned — a server
    /// computing other scores on purpose is then caught (ARCHITECTURE.md, "Threat model").
    #[arg(long, env = "PM_PIR_VERIFIED_SCORES")]
    pir_verified_scores: bool,
    /// PIR: code every thumbnail record to this many bytes (a codebook fitted on the gallery)
    /// instead of what the gallery's size calls for — the 3-bit records (294 bytes) up to a
    /// few hundred thousand images, about 94 bytes at 1,000,000 (fewer bytes a search and
    /// once, a coarser picture: 24.9 dB at 96 bytes against 30.9).
    #[arg(long, env = "PM_PIR_THUMB_BYTES",
          value_parser = clap::value_parser!(u64).range(8..294))]
    pir_thumb_bytes: Option<u64>,
    /// PIR: serve as row shard `i` of `S` (`i/S`): hold only this slice of every PIR
    /// database's rows (and of the encrypted scores' packing steps), about `1/S` of their
    /// memory, and answer parts that `server front --shards …` combines into whole answers.
    /// Clients do not talk to a shard directly. Every shard must serve the same version (run
    /// them as replicas of one store, `--from`).
    #[arg(long, env = "PM_SHARD_ROWS")]
    shard_rows: Option<privatemail_server::ops::slice::Shard>,
    /// A replica (`server serve --from STORE`): serve the version a batch build published in
    /// STORE (a directory, `file:///dir` or `s3://bucket/prefix`; `server build`) — the one its
    /// `CURRENT.json` names at start, or `--from-version`. Gallery size, anchors, seed and
    /// partition settings come from the version's manifest; the catalogue is copied into
    /// `--cache-dir`; nothing is written to STORE; adding and deleting images is disabled.
    /// With a bucket, `--blocks-public-url` is the bucket's (or CDN's) URL of STORE's prefix.
    #[arg(
        long,
        env = "PM_FROM",
        conflicts_with = "admin_token",
        requires = "identity_key"
    )]
    from: Option<String>,
    /// A replica: the manifest (its SHA-256) to serve instead of the announced one.
    #[arg(long, env = "PM_FROM_VERSION", requires = "from")]
    from_version: Option<String>,
    /// A replica: milliseconds between two looks at the store's `CURRENT.json` (a HEAD; the
    /// object is read only when it changed). When it names a new version, the replica
    /// fetches and checks it, builds its PIR databases beside the version serving and
    /// switches (`privatemail_server::replica`). 0: never (serve the start's version only).
    /// Not with `--from-version`, which pins one.
    #[arg(long, env = "PM_FOLLOW_INTERVAL_MS", default_value_t = 2000,
          value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    follow_interval_ms: u64,
    /// A replica: seconds from the announcement (its last-modified time in the store) to the
    /// switch, so that every replica has the version ready when they all switch; a replica
    /// ready later switches when ready (and logs it). Above the preparation time the log
    /// reports ("prepare_secs").
    #[arg(long, env = "PM_SWITCH_DELAY_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    switch_delay_secs: u64,
    /// A replica: where versions are copied to from the store (reused across restarts).
    #[arg(long, env = "PM_CACHE_DIR", default_value = "privatemail-data/cache")]
    cache_dir: PathBuf,
    /// The gallery's signing key (32 bytes) from this file, which must exist, instead of the
    /// one beside the store: every replica answering one origin must sign with the same key
    /// (clients pin it), so it is provisioned once (e.g. a Kubernetes Secret) and never put
    /// in the bucket. Required with `--from`.
    #[arg(long, env = "PM_IDENTITY_KEY")]
    identity_key: Option<PathBuf>,
}

/// `server front`: one address for row shards (`privatemail_server::front`).
#[derive(Parser, Debug)]
#[command(about = "PrivateMail front: one address for the row shards of a gallery's PIR databases")]
struct FrontArgs {
    /// Address to listen on (port 0 picks a free one; the bound address is printed).
    #[arg(long, env = "PM_BIND", default_value = "127.0.0.1:8080")]
    bind: SocketAddr,
    /// The shards' base URLs (`http://host:port`), every one of `server serve --shard-rows i/S`
    /// for `i` in `0..S`, in any order; repeat the flag or separate by commas.
    #[arg(long, env = "PM_SHARDS", value_delimiter = ',', required = true)]
    shards: Vec<String>,
    /// The base URL of a whole replica of the same version (`server serve` without
    /// `--shard-rows`): every request but a PIR answer (documents, hints, blocks, status, the
    /// page) goes there, since a shard holds no public file.
    #[arg(long, env = "PM_PUBLIC")]
    public: String,
    /// Seconds a shard has to answer one request (its queueing for an answer slot included).
    #[arg(long, env = "PM_SHARD_TIMEOUT_SECS", default_value_t = 120,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    shard_timeout_secs: u64,
}

/// Serves `server front` until a shutdown signal.
async fn front(a: FrontArgs) -> Result<(), Box<dyn std::error::Error>> {
    use privatemail_server::front::{router, Front};
    let front = Front::new(
        a.shards,
        a.public,
        std::time::Duration::from_secs(a.shard_timeout_secs),
    )?;
    let listener = tokio::net::TcpListener::bind(a.bind).await?;
    let shutdown = shutdown_signal()?;
    // Tests and scripts read this line to find an ephemeral port.
    println!("listening on http://{}", listener.local_addr()?);
    let refusals = std::sync::Arc::new(privatemail_server::ops::refusals::Refusals::default());
    net::serve(
        listener,
        router(std::sync::Arc::new(front)),
        &NetLimits::default(),
        refusals,
        shutdown,
    )
    .await;
    Ok(())
}

/// What a gallery version is built from: the same flags for `server` and `server build`.
#[derive(clap::Args, Debug)]
struct GalleryArgs {
    /// Directory with the Fashion-MNIST IDX files.
    #[arg(long, env = "FASHION_MNIST_DIR", default_value = DEFAULT_DIR)]
    data_dir: PathBuf,
    /// Gallery images: the test split first, then the training split without the public
    /// anchors and 1,000 reserved evaluation photos (about 68,000 in all), then deterministic
    /// variants of those (shifts, flips, pixel noise; see `data::fashion::demo_gallery`) up to 1,000,000.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(2..=1_000_000))]
    gallery_size: u64,
    /// Public anchors (from the training split, class-balanced): 10–60,000.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    anchors: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// `server build`: one step of the batch build (`privatemail_server::batch`).
#[derive(Parser, Debug)]
#[command(about = "PrivateMail batch build: a worker (--shard i/N) or the join (--join N)")]
struct BuildArgs {
    /// Where the build's objects go: a directory, `file:///dir` or `s3://bucket/prefix`
    /// (configured from the AWS_* environment variables, as `--blocks-store`).
    #[arg(long, env = "PM_BUILD_OUT")]
    out: String,
    /// A worker: compute slice i of N (0-based) of the gallery's features. With
    /// Kubernetes' Indexed Job, `--shard $JOB_COMPLETION_INDEX/N`.
    #[arg(long, conflicts_with = "join", required_unless_present = "join")]
    shard: Option<privatemail_server::batch::Shard>,
    /// The join: combine the N workers' outputs, build the embedding and partition, write
    /// the manifest and announce it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=4096))]
    join: Option<u64>,
    #[command(flatten)]
    gallery: GalleryArgs,
    /// The join's local working directory (emptied first).
    #[arg(long, default_value = "privatemail-data/build")]
    work_dir: PathBuf,
    #[arg(long, env = "PM_MAX_SHARE", default_value_t = publish::publish::DEFAULT_MAX_SHARE, value_parser = parse_share)]
    max_share: f64,
    #[arg(long, env = "PM_ALLOW_FULL_DOWNLOAD", default_value_t = true, action = clap::ArgAction::Set)]
    allow_full_download: bool,
    #[arg(long, env = "PM_PIR_VERIFIED_SCORES")]
    pir_verified_scores: bool,
    #[arg(long, env = "PM_PIR_THUMB_BYTES",
          value_parser = clap::value_parser!(u64).range(8..294))]
    pir_thumb_bytes: Option<u64>,
}

fn build(b: BuildArgs) -> Result<(), Box<dyn std::error::Error>> {
    use privatemail_server::batch;
    let t = std::time::Instant::now();
    if let Some(shard) = b.shard {
        let p = batch::build_shard(
            &b.out,
            &b.gallery.data_dir,
            b.gallery.gallery_size as usize,
            b.gallery.anchors as usize,
            shard,
        )?;
        println!(
            "shard {} written: {} ({} items) in {:.2} s",
            p.shard,
            p.object,
            p.items,
            t.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    let n = b.join.unwrap_or(1) as usize;
    let (sha, m) = batch::join(&batch::JoinOptions {
        out: &b.out,
        shards: n,
        data_dir: &b.gallery.data_dir,
        work_dir: &b.work_dir,
        gallery_size: b.gallery.gallery_size as usize,
        anchor_count: b.gallery.anchors as usize,
        seed: b.gallery.seed,
        settings: batch::BuildSettings {
            max_share: b.max_share,
            allow_full_download: b.allow_full_download,
            verified_scores: b.pir_verified_scores,
            thumb_code_bytes: b.pir_thumb_bytes.map(|x| x as usize),
        },
        blocks_public_url: None,
    })?;
    println!(
        "manifest {sha} announced: {} items, partition {} in {:.2} s",
        m.items,
        m.partition_version,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

fn parse_share(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(format!("must be in (0, 1], got {v}"))
    }
}

#[tokio::main]
async fn main() {
    // Colours only on a terminal, so service logs stay plain text.
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_writer(data::progress::LogWriter::Stdout)
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,tower_http=info".into()),
        )
        .init();
    // `server build …` is the batch build; `server serve …` and `server …` serve.
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match argv.get(1).and_then(|a| a.to_str()) {
        Some("build") => {
            argv.remove(1);
            let b = BuildArgs::parse_from(argv);
            let code = match tokio::task::spawn_blocking(move || {
                build(b).map_err(|e| e.to_string())
            })
            .await
            {
                Ok(Ok(())) => 0,
                Ok(Err(e)) => {
                    eprintln!("server build: {e}");
                    2
                }
                Err(e) => {
                    eprintln!("server build: {e}");
                    2
                }
            };
            // Background threads of the state the join opened have nothing left to do.
            std::process::exit(code);
        }
        Some("serve") => {
            argv.remove(1);
        }
        Some("front") => {
            argv.remove(1);
            if let Err(e) = front(FrontArgs::parse_from(argv)).await {
                eprintln!("server front: {e}");
                std::process::exit(2);
            }
            return;
        }
        _ => {}
    }
    let args = Args::parse_from(argv);
    if let Err(e) = run(args).await {
        eprintln!("server: {e}");
        std::process::exit(2);
    }
}

async fn run(mut args: Args) -> Result<(), Box<dyn std::error::Error>> {
    // A replica: the published version's manifest decides what is served.
    let public_url_given = args.blocks_public_url.clone();
    let mut replica: Option<(String, privatemail_server::batch::GalleryManifest)> = None;
    if let Some(from) = args.from.clone() {
        let t = std::time::Instant::now();
        let (version, cache) = (args.from_version.clone(), args.cache_dir.clone());
        let f = from.clone();
        let (sha, m, store_path) = tokio::task::spawn_blocking(move || {
            privatemail_server::batch::materialize(&f, version.as_deref(), &cache)
        })
        .await??;
        args.store = store_path;
        args.gallery.gallery_size = m.gallery_size as u64;
        args.gallery.anchors = m.anchors as u64;
        args.gallery.seed = m.seed;
        args.max_share = m.settings.max_share;
        args.allow_full_download = m.settings.allow_full_download;
        args.pir_verified_scores = m.settings.verified_scores;
        args.pir_thumb_bytes = m.settings.thumb_code_bytes.map(|b| b as u64);
        args.blocks_store = Some(privatemail_server::batch::sub_spec(&from, &m.blocks));
        args.blocks_public_url = args
            .blocks_public_url
            .as_deref()
            .map(|u| format!("{}/{}", u.trim_end_matches('/'), m.blocks));
        tracing::info!(manifest = %sha, secs = t.elapsed().as_secs_f64(), "replica: version in the local cache");
        replica = Some((sha, m));
    }
    let limits = ApiLimits {
        max_k: args.max_k as usize,
        max_query_rows: 32,
        max_body_bytes: 1 << 20,
    };
    let t = std::time::Instant::now();
    let (data_dir, store, token, blocks_store, blocks_public_url) = (
        args.gallery.data_dir.clone(),
        args.store.clone(),
        args.admin_token.clone(),
        args.blocks_store.clone(),
        args.blocks_public_url.clone(),
    );
    let (gallery_size, anchor_count, seed, pir_concurrency, pir_upload_budget_mib) = (
        args.gallery.gallery_size as usize,
        args.gallery.anchors as usize,
        args.gallery.seed,
        args.pir_concurrency,
        args.pir_upload_budget_mib,
    );
    let client_address_header = args.client_address_header.clone();
    let identity_key = args.identity_key.clone();
    let secs = std::time::Duration::from_secs;
    let open_files = net::raise_open_files(args.max_connections + net::FD_RESERVE);
    let max_connections =
        (args.max_connections).min(open_files.saturating_sub(net::FD_RESERVE).max(16)) as usize;
    let net_limits = NetLimits {
        header_timeout: secs(args.header_timeout_secs),
        body_timeout: secs(args.body_timeout_secs),
        request_timeout: secs(args.request_timeout_secs),
        write_timeout: secs(args.write_timeout_secs),
        max_connections,
        max_per_address: args
            .max_connections_per_address
            .map_or((max_connections / net::ADDRESS_SHARE_DIVISOR).max(1), |n| {
                n as usize
            }),
        min_rate: args.min_data_rate,
        rate_grace: secs(args.min_rate_grace_secs),
        shutdown_grace: secs(args.shutdown_grace_secs),
        body_budget: NetLimits::default().body_budget,
        client_address_header: args.client_address_header.clone(),
    };
    if net_limits.max_connections < args.max_connections as usize {
        tracing::warn!(
            open_files,
            max_connections = net_limits.max_connections,
            "the open-file limit caps the connections below --max-connections"
        );
    }
    let partition = PartitionSettings {
        max_share: args.max_share,
        allow_full_download: args.allow_full_download,
        grace: std::time::Duration::from_secs(args.partition_grace_secs),
        // A row shard serves no block: it keeps none (its PIR build reads each once, for ids).
        cache_bytes: if args.shard_rows.is_some() {
            0
        } else {
            args.blocks_cache_mib << 20
        },
        verified_scores: args.pir_verified_scores,
        thumb_code_bytes: args.pir_thumb_bytes.map(|b| b as usize),
        pir_dir: None,
        shard_rows: args.shard_rows,
    };
    let state = tokio::task::spawn_blocking(move || {
        AppState::open_with(
            &Options {
                data_dir: &data_dir,
                store_path: &store,
                gallery_size,
                anchor_count,
                seed,
                limits,
                admin_token: token,
                blocks_store: blocks_store.as_deref(),
                blocks_public_url: blocks_public_url.as_deref(),
                pir_concurrency: pir_concurrency as usize,
                pir_upload_budget: (pir_upload_budget_mib << 20) as usize,
                client_address_header,
                identity_key: identity_key.as_deref(),
            },
            partition,
        )
    })
    .await??;
    tracing::info!(
        // A row shard embeds nothing: its gallery is the partition's.
        gallery = state
            .partitions
            .current()
            .filter(|_| state.is_shard())
            .map_or(state.snapshot().items.len(), |p| p.doc.gallery_size),
        anchors = state.config.anchor_count,
        secs = t.elapsed().as_secs_f64(),
        "gallery ready"
    );
    if let Some(p) = state.partitions.status() {
        tracing::info!(
            version = %p.version,
            levels = ?p.levels,
            build_secs = p.build_secs,
            mib = p.bytes as f64 / (1 << 20) as f64,
            transfer_mib = p.transfer_bytes as f64 / (1 << 20) as f64,
            "partition ready"
        );
    }
    if let Some((sha, m)) = &replica {
        // The partition must be the one the build published (never one rebuilt here).
        let served = state.partitions.current().map(|p| p.doc.version.clone());
        if served.as_deref() != Some(m.partition_version.as_str()) {
            return Err(format!(
                "manifest {sha} names partition {}, the store gave {served:?}",
                m.partition_version
            )
            .into());
        }
        // A replica listens only once it answers every request of a search: behind a load
        // balancer a listening replica is a ready one (its PIR databases are derived from
        // the version after the partition is loaded; until then they answer 503).
        let pir_wait = std::time::Instant::now();
        while state
            .partitions
            .current()
            .is_some_and(|p| p.pir.get().is_none())
        {
            if pir_wait.elapsed() > std::time::Duration::from_secs(3600) {
                return Err("the PIR databases were not built within an hour".into());
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        tracing::info!(manifest = %sha, partition = %m.partition_version, secs = t.elapsed().as_secs_f64(), "replica ready");
    }
    if let (Some((sha, _)), Some(from)) = (&replica, &args.from) {
        if args.from_version.is_none() && args.follow_interval_ms > 0 {
            let follow = privatemail_server::replica::Follow {
                from: from.clone(),
                cache_dir: args.cache_dir.clone(),
                interval: std::time::Duration::from_millis(args.follow_interval_ms),
                switch_delay: std::time::Duration::from_secs(args.switch_delay_secs),
                blocks_public_url: public_url_given,
                serving: sha.clone(),
            };
            let s = std::sync::Arc::clone(&state);
            std::thread::Builder::new()
                .name("replica-follow".into())
                .spawn(move || privatemail_server::replica::follow(s, follow))?;
        }
    }
    // Expired versions leave the block store even when no request comes to prune them; a
    // replica never deletes from the store it follows.
    let gc = std::sync::Arc::clone(&state);
    if replica.is_none() {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
            loop {
                tick.tick().await;
                let s = std::sync::Arc::clone(&gc);
                let _ = tokio::task::spawn_blocking(move || s.partitions.collect_garbage()).await;
            }
        });
    }
    let web = args.web_dir.is_dir().then_some(args.web_dir);
    let store_owner = std::sync::Arc::clone(&state);
    let refusals = std::sync::Arc::clone(&state.refusals);
    if args.page_origins.len() > privatemail_server::http::cors::MAX_PAGE_ORIGINS {
        return Err(format!(
            "at most {} --page-origin",
            privatemail_server::http::cors::MAX_PAGE_ORIGINS
        )
        .into());
    }
    let app = router(
        state,
        web,
        args.blocks_public_url.as_deref(),
        &args.page_origins,
        &net_limits,
    );
    let listener = tokio::net::TcpListener::bind(args.bind).await?;
    tracing::info!(
        max_connections = net_limits.max_connections,
        max_per_address = net_limits.max_per_address,
        open_files,
        header_timeout_secs = args.header_timeout_secs,
        body_timeout_secs = args.body_timeout_secs,
        "accepting connections"
    );
    let shutdown = shutdown_signal()?;
    // Tests and scripts read this line to find an ephemeral port.
    println!("listening on http://{}", listener.local_addr()?);
    net::serve(listener, app, &net_limits, refusals, shutdown).await;
    // Background threads may still hold the state: close the store explicitly so the next
    // start opens it without a repair.
    store_owner.store.close();
    tracing::info!("store closed; exiting");
    // Exit now: answers still computing on the blocking pool (past the grace period) would
    // otherwise hold the runtime's shutdown; their results have nowhere to go.
    std::process::exit(0)
}

/// Ctrl-C, or SIGTERM (what service managers and `kill` send). The handlers are installed
/// when this is called, not when the future is first polled: a signal that comes right after
/// "listening on" is printed must end the server through its shutdown (the store closed), not
/// kill it with the default action.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {},
                _ = int.recv() => {},
            }
        })
    }
    #[cfg(not(unix))]
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}
