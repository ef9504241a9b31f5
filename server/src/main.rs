//! `server`: the gallery server with the Fashion-MNIST demo gallery and the web page.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use shared::api::ApiLimits;
use tracing_subscriber::EnvFilter;

use privatemail_server::data::DEFAULT_DIR;
use privatemail_server::routes::router;
use privatemail_server::state::{AppState, Options};

#[derive(Parser, Debug)]
#[command(about = "PrivateMail gallery server")]
struct Args {
    /// Address to listen on (port 0 picks a free one; the bound address is printed).
    #[arg(long, env = "PM_BIND", default_value = "127.0.0.1:8080")]
    bind: SocketAddr,
    /// Directory with the Fashion-MNIST IDX files.
    #[arg(long, env = "FASHION_MNIST_DIR", default_value = DEFAULT_DIR)]
    data_dir: PathBuf,
    /// Gallery images: the test split first, then the training split (70,000 = all).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(2..=70_000))]
    gallery_size: u64,
    /// Public anchors (from the training split, class-balanced).
    #[arg(long, default_value_t = 1_000)]
    anchors: usize,
    /// Directory of the web page, served at `/`.
    #[arg(long, env = "PM_WEB_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../web"))]
    web_dir: PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
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
    /// Largest k a search may ask for.
    #[arg(long, default_value_t = 50)]
    max_k: usize,
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,tower_http=info".into()),
        )
        .init();
    let args = Args::parse();
    if let Err(e) = run(args).await {
        eprintln!("server: {e}");
        std::process::exit(2);
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let limits = ApiLimits {
        max_k: args.max_k,
        max_query_rows: 32,
        max_body_bytes: 1 << 20,
    };
    let t = std::time::Instant::now();
    let (data_dir, store, token) = (
        args.data_dir.clone(),
        args.store.clone(),
        args.admin_token.clone(),
    );
    let (gallery_size, anchor_count, seed) = (args.gallery_size as usize, args.anchors, args.seed);
    let state = tokio::task::spawn_blocking(move || {
        AppState::open(&Options {
            data_dir: &data_dir,
            store_path: &store,
            gallery_size,
            anchor_count,
            seed,
            limits,
            admin_token: token,
        })
    })
    .await??;
    tracing::info!(
        gallery = state.snapshot().items.len(),
        anchors = state.config.anchor_count,
        secs = t.elapsed().as_secs_f64(),
        "gallery ready"
    );
    let web = args.web_dir.is_dir().then_some(args.web_dir);
    let app = router(state, web);
    let listener = tokio::net::TcpListener::bind(args.bind).await?;
    // Tests and scripts read this line to find an ephemeral port.
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
