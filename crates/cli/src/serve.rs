//! `tarn serve`: loads the configuration, starts the broker, prints where
//! it listens, and shuts down cleanly on SIGINT or SIGTERM.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use tarn_config::parse_toml;
use tarn_coordinator::group_lag::SharedGroupLagSource;
use tarn_server::group_lag_source::CoordinatorLagSource;
use tarn_server::{http, metrics, server, Broker, BrokerConfig, BrokerOptions};

#[derive(Args)]
pub struct ServeArgs {
    /// Where logs and metadata live.
    #[arg(long, default_value = "./tarn-data")]
    data_dir: PathBuf,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:9092")]
    listen: String,
    /// Address clients are told to connect to (default: the listen address).
    #[arg(long)]
    advertised_listener: Option<String>,
    /// This broker's node.id.
    #[arg(long, default_value_t = 1)]
    node_id: i32,
    /// A TOML file of Kafka broker config keys.
    #[arg(long)]
    config: Option<PathBuf>,
    /// A broker config override, key=value; repeatable, applied after --config.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Log level filter (default info; RUST_LOG also works).
    #[arg(long)]
    log_level: Option<String>,
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Address of the HTTP listener (Prometheus /metrics, /health and the
    /// web console at /); port 0 picks a free port, `off` disables it.
    #[arg(long, default_value = "127.0.0.1:9644")]
    http_listen: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

fn split_host_port(addr: &str) -> Result<(String, i32)> {
    let (host, port) = addr
        .rsplit_once(':')
        .with_context(|| format!("'{addr}' is not HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("'{addr}': bad port"))?;
    Ok((host.trim_matches(['[', ']']).to_owned(), i32::from(port)))
}

fn load_config(args: &ServeArgs) -> Result<BrokerConfig> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("read config file {}", path.display()))?;
        pairs.extend(parse_toml(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?);
    }
    for set in &args.set {
        let (k, v) = set
            .split_once('=')
            .with_context(|| format!("--set {set}: expected key=value"))?;
        pairs.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    BrokerConfig::with_overrides(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .context("invalid broker configuration")
}

pub fn run(args: ServeArgs) -> Result<()> {
    let filter = match &args.log_level {
        Some(level) => tracing_subscriber::EnvFilter::try_new(level)
            .with_context(|| format!("--log-level {level}"))?,
        None => tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().with_current_span(false).init(),
    }
    let config = load_config(&args)?;
    if args.node_id < 0 {
        bail!("--node-id must be non-negative");
    }
    tune_allocator();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    runtime.block_on(serve(args, config))
}

/// glibc's allocator: largest block served by mmap, and free memory kept
/// at the heap top before it is returned to the OS.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MALLOC_MMAP_THRESHOLD_BYTES: i32 = 32 << 20;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MALLOC_TRIM_THRESHOLD_BYTES: i32 = 64 << 20;

/// Request buffers (64 KiB to 1 MiB each) come and go at a high rate. With
/// glibc's defaults many of them are mmapped and unmapped, or trimmed from
/// the heap and faulted back in, costing a page fault per 4 KiB: about a
/// quarter of the broker's CPU when producing 1 KiB records. Keeping them
/// on the heap removes that at the price of up to 64 MiB of retained free
/// memory (still far below Kafka's heap).
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before any
    // other thread exists.
    unsafe {
        if libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD_BYTES) != 1
            || libc::mallopt(libc::M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD_BYTES) != 1
        {
            tracing::warn!("could not tune the allocator (mallopt); continuing with defaults");
        }
    }
}

async fn serve(args: ServeArgs, config: BrokerConfig) -> Result<()> {
    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("listen on {}", args.listen))?;
    let bound: SocketAddr = listener.local_addr()?;
    let http_listener = match args.http_listen.as_str() {
        "off" => None,
        addr => Some(TcpListener::bind(addr).await.with_context(|| {
            format!("listen for HTTP on {addr} (choose another with --http-listen HOST:PORT, or --http-listen off)")
        })?),
    };
    let (host, port) = match &args.advertised_listener {
        Some(adv) => split_host_port(adv)?,
        None => (bound.ip().to_string(), i32::from(bound.port())),
    };
    let broker = Broker::start(BrokerOptions {
        data_dir: args.data_dir.clone(),
        node_id: args.node_id,
        advertised_host: host.clone(),
        advertised_port: port,
        config,
        env: None,
    })
    .with_context(|| format!("start broker with data in {}", args.data_dir.display()))?;

    let mut sigterm = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("install SIGINT handler")?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let server = tokio::spawn(server::run(broker.clone(), listener, stop_rx.clone()));
    let groups: SharedGroupLagSource = Arc::new(CoordinatorLagSource(broker.clone()));
    let sampler = tokio::spawn(metrics::run_sampler(
        broker.clone(),
        groups.clone(),
        stop_rx.clone(),
    ));
    let http = match http_listener {
        Some(listener) => {
            let addr = listener.local_addr()?;
            let state = Arc::new(http::HttpState {
                broker: broker.clone(),
                groups,
            });
            Some((addr, tokio::spawn(http::run(state, listener, stop_rx))))
        }
        None => None,
    };
    println!(
        "tarn: listening on {bound}, data in {}",
        args.data_dir.display()
    );
    // After the ready line, so tools that read only that line keep working.
    if let Some((addr, _)) = &http {
        println!("tarn: http on {addr}");
    }
    if args.advertised_listener.is_some() {
        tracing::info!(advertised = %format!("{host}:{port}"), "advertising listener");
    }
    tokio::select! {
        _ = sigterm.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = sigint.recv() => tracing::info!("SIGINT: shutting down"),
    }
    stop_tx.send(true).context("stop the accept loop")?;
    server.await.context("join the accept loop")?;
    sampler.await.context("join the metrics sampler")?;
    if let Some((_, task)) = http {
        task.await.context("join the HTTP listener")?;
    }
    broker.shutdown().context("shut down the broker")?;
    tracing::info!("clean shutdown complete");
    Ok(())
}
