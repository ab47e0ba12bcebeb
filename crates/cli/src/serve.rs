//! `tarn serve`: loads the configuration, starts the broker, prints where
//! it listens, and shuts down cleanly on SIGINT or SIGTERM.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use tarn_config::cluster::{ClusterConfig, Listener, Quorum};
use tarn_config::parse_config_file;
use tarn_coordinator::group_lag::SharedGroupLagSource;
use tarn_metadata::Endpoint;
use tarn_server::cluster::{ClusterNode, ClusterOptions};
use tarn_server::group_lag_source::CoordinatorLagSource;
use tarn_server::{http, metrics, server, Broker, BrokerConfig, BrokerOptions};

#[derive(Args)]
pub struct ServeArgs {
    /// Where logs and metadata live: sugar for log.dirs (default ./tarn-data).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Address to listen on, HOST:PORT; port 0 picks a free port. Sugar for
    /// the PLAINTEXT listener of listeners (default 127.0.0.1:9092).
    #[arg(long)]
    listen: Option<String>,
    /// Address clients are told to connect to, HOST:PORT (default: the
    /// listen address). Sugar for advertised.listeners=PLAINTEXT://HOST:PORT.
    #[arg(long)]
    advertised_listener: Option<String>,
    /// This node's node.id (default 1).
    #[arg(long)]
    node_id: Option<i32>,
    #[command(flatten)]
    config: ConfigArgs,
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

/// The broker configuration of `--config` and `--set`, shared by `serve`
/// and `storage`.
#[derive(Args)]
pub struct ConfigArgs {
    /// A file of Kafka broker config keys: TOML, or a Java properties file
    /// such as Kafka's server.properties (by extension, else by content).
    /// `-c` as kafka-storage.sh takes it.
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// A broker config override, key=value; repeatable, applied after --config.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

impl ConfigArgs {
    /// The `key=value` pairs of the file, then of `--set`, in order.
    fn pairs(&self) -> Result<Vec<(String, String)>> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        if let Some(path) = &self.config {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("read config file {}", path.display()))?;
            pairs.extend(
                parse_config_file(path, &text)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
            );
        }
        for set in &self.set {
            let (k, v) = set
                .split_once('=')
                .with_context(|| format!("--set {set}: expected key=value"))?;
            pairs.push((k.trim().to_owned(), v.trim().to_owned()));
        }
        Ok(pairs)
    }

    /// The validated configuration and its typed cluster view.
    pub fn load(&self) -> Result<(BrokerConfig, ClusterConfig)> {
        load(self.pairs()?)
    }
}

fn load(pairs: Vec<(String, String)>) -> Result<(BrokerConfig, ClusterConfig)> {
    let config = BrokerConfig::with_overrides(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .context("invalid broker configuration")?;
    let cluster = ClusterConfig::from_config(&config).context("invalid broker configuration")?;
    Ok((config, cluster))
}

/// `--listen` and the other old flags are sugar for keys: each becomes its
/// key unless the file or `--set` gives that key, and then the two must
/// agree.
fn load_config(args: &ServeArgs) -> Result<(BrokerConfig, ClusterConfig)> {
    let mut pairs = args.config.pairs()?;
    let (given, _) = load(pairs.clone())?;
    let mut sugar =
        |flag: &str, shown: &str, key: &str, value: String, agrees: &dyn Fn(&str) -> bool| {
            if !given.is_set(key) {
                pairs.push((key.to_owned(), value));
                return Ok(());
            }
            if agrees(given.get(key)) {
                return Ok(());
            }
            bail!(
                "{flag} {shown} and {key}={} disagree; give one of them",
                given.get(key)
            )
        };
    if let Some(listen) = &args.listen {
        let plaintext = |listeners: &str| {
            listeners.split(',').find_map(|l| {
                let (name, address) = l.trim().split_once("://")?;
                name.eq_ignore_ascii_case("PLAINTEXT")
                    .then(|| address.to_owned())
            })
        };
        let value = format!("PLAINTEXT://{listen}");
        sugar("--listen", listen, "listeners", value, &|set| {
            plaintext(set).as_deref() == Some(listen.as_str())
        })?;
    }
    if let Some(advertised) = &args.advertised_listener {
        let value = format!("PLAINTEXT://{advertised}");
        sugar(
            "--advertised-listener",
            advertised,
            "advertised.listeners",
            value.clone(),
            &|set| set == value,
        )?;
    }
    if let Some(node_id) = args.node_id {
        let value = node_id.to_string();
        sugar("--node-id", &value, "node.id", value.clone(), &|set| {
            set == value
        })?;
    }
    if let Some(dir) = &args.data_dir {
        let value = dir.display().to_string();
        let key = if given.is_set("log.dir") && !given.is_set("log.dirs") {
            "log.dir"
        } else {
            "log.dirs"
        };
        sugar("--data-dir", &value, key, value.clone(), &|set| {
            set.trim() == value
        })?;
    }
    load(pairs)
}

/// The host a wildcard listener advertises when advertised.listeners does
/// not say: this machine's name, as Kafka does.
fn local_hostname() -> Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at
    // most that many bytes.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return Err(std::io::Error::last_os_error()).context("read the host name");
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// The log filter for `--log-level` or `RUST_LOG` (`info` when neither is
/// given): openraft says only what it warns about, and not each retry to a
/// peer that is down, unless the filter names openraft itself.
fn log_filter(given: Option<&str>) -> String {
    let given = given.unwrap_or("info");
    match given.contains("openraft") {
        true => given.to_owned(),
        false => format!("{given},openraft=warn,{}", tarn_quorum::QUIET_OPENRAFT),
    }
}

pub fn run(args: ServeArgs) -> Result<()> {
    use tracing_subscriber::prelude::*;
    let (directives, given) = match &args.log_level {
        Some(level) => (log_filter(Some(level)), format!("--log-level {level}")),
        None => {
            let variable = tracing_subscriber::EnvFilter::DEFAULT_ENV;
            let from_env = std::env::var(variable).ok();
            (
                log_filter(from_env.as_deref()),
                format!("the {variable} variable"),
            )
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&directives).context(given)?;
    // Replaceable, so that log levels change while the broker runs
    // (IncrementalAlterConfigs of a broker logger: see log_levels).
    let (filter, reload) = tracing_subscriber::reload::Layer::new(filter);
    let logs = tracing_subscriber::registry().with(filter);
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => logs
            .with(layer.with_ansi(std::io::stderr().is_terminal()))
            .init(),
        LogFormat::Json => logs.with(layer.json().with_current_span(false)).init(),
    }
    tarn_server::log_levels::install(&directives, move |directives| {
        let filter =
            tracing_subscriber::EnvFilter::try_new(directives).map_err(|e| e.to_string())?;
        reload.reload(filter).map_err(|e| e.to_string())
    })
    .map_err(anyhow::Error::msg)?;
    let (config, cluster) = load_config(&args)?;
    cluster
        .check_servable()
        .context("invalid broker configuration")?;
    let quorum = resolve_quorum(&cluster)?;
    tune_allocator();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    runtime.block_on(serve(args, config, cluster, quorum))
}

/// How this node finds its quorum. A controller of a dynamic quorum
/// (`controller.quorum.bootstrap.servers`, KIP-853) takes the initial
/// voters `tarn storage format` gave its data directory, or, unformatted,
/// is the sole voter when its bootstrap servers name only itself; a broker
/// that is not a controller only needs somewhere to find the controllers.
/// A data directory that a single node wrote keeps running as one.
fn resolve_quorum(cluster: &ClusterConfig) -> Result<Quorum> {
    let quorum = match cluster.quorum() {
        Quorum::Bootstrap(servers) if cluster.is_controller() => dynamic_voters(cluster, &servers)?,
        quorum => quorum,
    };
    let sole_voter = match &quorum {
        Quorum::Voters(voters) => {
            !voters.is_empty() && voters.keys().all(|id| *id == cluster.node_id)
        }
        _ => false,
    };
    if sole_voter && cluster.is_broker() && holds_single_node_metadata(&cluster.log_dir)? {
        tracing::info!(
            data_dir = %cluster.log_dir.display(),
            "the data directory holds a single node's metadata log (written by a Tarn that ran \
             this configuration as a single node), so it runs as a single node: no other broker \
             can join it. Start from an empty data directory to run a quorum of one that brokers \
             can join"
        );
        return Ok(Quorum::SingleNode);
    }
    Ok(quorum)
}

/// Whether `log_dir` holds the metadata log of a single node.
fn holds_single_node_metadata(log_dir: &std::path::Path) -> Result<bool> {
    let path = log_dir
        .join(crate::storage::QUORUM_DIR)
        .join(tarn_metadata::METADATA_LOG_FILE);
    match std::fs::metadata(&path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
    }
}

/// The voters of a dynamic quorum that this controller starts: those it
/// was formatted with; unformatted, itself alone when its bootstrap
/// servers name only itself (the only quorum it could form).
fn dynamic_voters(cluster: &ClusterConfig, servers: &[(String, u16)]) -> Result<Quorum> {
    // Another node's directory is refused for that first, whatever voters
    // it holds.
    if let Some(meta) = crate::storage::read_meta(&cluster.log_dir)? {
        if meta.node_id != cluster.node_id {
            bail!(
                "{} belongs to node.id {}, not {}",
                cluster.log_dir.display(),
                meta.node_id,
                cluster.node_id
            );
        }
    }
    let stored = crate::storage::bootstrap_voters(&cluster.log_dir)?;
    if stored.is_none() && cluster.bootstraps_only_itself() {
        if let Some((host, port)) = servers.first() {
            return Ok(Quorum::Voters(BTreeMap::from([(
                cluster.node_id,
                (host.clone(), *port),
            )])));
        }
    }
    let servers = servers
        .iter()
        .map(|(h, p)| format!("{h}:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let Some(voters) = stored else {
        if crate::storage::read_meta(&cluster.log_dir)?.is_none() {
            bail!(
                "controller.quorum.bootstrap.servers ({servers}) asks for a dynamic quorum \
                 (KIP-853), and this controller's data directory is not formatted: format it \
                 with `tarn storage format` and --standalone or --initial-controllers (a new \
                 quorum), or --no-initial-controllers (to join a running one), as \
                 kafka-storage.sh does; or list the voters in controller.quorum.voters"
            );
        }
        // Formatted with --no-initial-controllers: it joins the running
        // quorum once its leader adds it (`kafka-metadata-quorum.sh
        // add-controller`), and follows the log as a learner until then.
        return Ok(Quorum::Voters(BTreeMap::new()));
    };
    if !voters.iter().any(|v| v.id == cluster.node_id) {
        bail!(
            "node {} is not one of the initial voters its data directory was formatted with; \
             format it with --no-initial-controllers to join the running quorum, then add it \
             with `kafka-metadata-quorum.sh add-controller`",
            cluster.node_id
        );
    }
    Ok(Quorum::Voters(
        voters
            .into_iter()
            .map(|v| (v.id, (v.host, v.port)))
            .collect(),
    ))
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

async fn serve(
    args: ServeArgs,
    config: BrokerConfig,
    cluster: ClusterConfig,
    quorum: Quorum,
) -> Result<()> {
    // A node that is only a controller serves no Kafka listener: it is
    // reached on its CONTROLLER listener, which it reports as ready.
    let kafka = match cluster.kafka_listener() {
        Some(kafka) => Some(kafka),
        None if cluster.is_broker() => {
            bail!("listeners: a broker needs a listener that is not a controller listener")
        }
        None => None,
    };
    let listener = match kafka {
        Some(kafka) => {
            let bind = kafka.bind_address();
            let buffers = tarn_server::transport::SocketBuffers::from_config(&config);
            Some(
                tarn_server::transport::bind_listener(&bind, buffers)
                    .await
                    .with_context(|| format!("listen on {bind} (listener {kafka})"))?,
            )
        }
        None => None,
    };
    let controller_listener = match (cluster.is_controller(), &quorum) {
        (true, Quorum::Voters(_)) => Some(bind_controller_listener(&cluster).await?),
        _ => None,
    };
    if let (Quorum::SingleNode, Some(controller)) = (&quorum, cluster.controller_listeners().next())
    {
        // Said, since Kafka would serve it: a broker pointed at it would
        // otherwise wait without a word from this side.
        tracing::info!(
            listener = %controller,
            "this node runs as a single node, so its controller listener is not served and no \
             other broker can join it"
        );
    }
    let http_listener = match args.http_listen.as_str() {
        "off" => None,
        addr => Some(TcpListener::bind(addr).await.with_context(|| {
            format!("listen for HTTP on {addr} (choose another with --http-listen HOST:PORT, or --http-listen off)")
        })?),
    };
    let (served, bound) = match (&listener, &controller_listener) {
        (Some(listener), _) => (kafka, listener.local_addr()?),
        (None, Some((controller, listener))) => (Some(*controller), listener.local_addr()?),
        (None, None) => bail!("node {} serves no listener", cluster.node_id),
    };
    let served = served.expect("a bound listener is one of listeners");
    let advertised = cluster.advertised_listener(served).unwrap_or(served);
    let host = match advertised.host.as_str() {
        "" => local_hostname()?,
        host => host.to_owned(),
    };
    // Port 0 binds a free port, which is the one to advertise.
    let port = match advertised.port {
        0 => bound.port(),
        port => port,
    };
    let data_dir = cluster.log_dir.clone();
    let options = BrokerOptions {
        data_dir: data_dir.clone(),
        node_id: cluster.node_id,
        advertised_host: host.clone(),
        advertised_port: i32::from(port),
        config,
        env: None,
    };
    let joined = match quorum {
        Quorum::Voters(voters) => Some(voters),
        // Only a broker gets here with bootstrap servers (see
        // `resolve_quorum`).
        Quorum::Bootstrap(_) => Some(BTreeMap::new()),
        Quorum::SingleNode => None,
    };
    let (broker, cluster_node) = match joined {
        Some(voters) => {
            let controller_listener = controller_listener.map(|(_, listener)| listener);
            let (broker, node) = join_cluster(
                options,
                &cluster,
                voters,
                controller_listener,
                served,
                &host,
                port,
            )
            .await?;
            (broker, Some(node))
        }
        None => {
            let broker = Broker::start(options)
                .with_context(|| format!("start broker with data in {}", data_dir.display()))?;
            (broker, None)
        }
    };
    // A single node has no cluster to fail in: its channel never fires.
    let (_never, no_failure) = watch::channel(None);
    let mut fatal = match &cluster_node {
        Some(node) => node.fatal.clone(),
        None => no_failure,
    };

    let mut sigterm = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("install SIGINT handler")?;
    let (stop_tx, stop_rx) = watch::channel(false);
    // An observer answers clients once it has caught up with the metadata
    // log; until then their connections wait in the accept queue.
    let caught_up = cluster_node.as_ref().map(|node| node.caught_up.clone());
    let server = listener.map(|listener| {
        tokio::spawn(serve_when_caught_up(
            broker.clone(),
            listener,
            caught_up,
            stop_rx.clone(),
        ))
    });
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
    println!("tarn: listening on {bound}, data in {}", data_dir.display());
    // After the ready line, so tools that read only that line keep working.
    if let Some((addr, _)) = &http {
        println!("tarn: http on {addr}");
    }
    match kafka {
        Some(kafka) => tracing::info!(
            listener = %kafka,
            advertised = %format!("{host}:{port}"),
            node_id = cluster.node_id,
            "serving the Kafka protocol"
        ),
        None => tracing::info!(
            listener = %served,
            node_id = cluster.node_id,
            "a controller only: serving the quorum and controller requests"
        ),
    }
    let mut failure = None;
    tokio::select! {
        _ = sigterm.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = sigint.recv() => tracing::info!("SIGINT: shutting down"),
        reason = fatal.wait_for(Option::is_some) => {
            failure = match reason {
                Ok(reason) => reason.clone(),
                Err(_) => Some("the cluster tasks stopped".to_owned()),
            };
            tracing::error!(reason = failure.as_deref().unwrap_or(""), "stopping");
        }
    }
    if let Some(node) = &cluster_node {
        node.controlled_shutdown(&broker).await;
    }
    stop_tx.send(true).context("stop the accept loop")?;
    if let Some(server) = server {
        server.await.context("join the accept loop")?;
    }
    sampler.await.context("join the metrics sampler")?;
    if let Some((_, task)) = http {
        task.await.context("join the HTTP listener")?;
    }
    // The cluster's tasks (follower fetchers, the metadata log and its
    // publisher) stop first: none may append to or reopen a log while the
    // broker closes them.
    if let Some(node) = cluster_node {
        node.shutdown().await.context("leave the metadata quorum")?;
    }
    broker.shutdown().context("shut down the broker")?;
    if let Some(reason) = failure {
        bail!("{reason}");
    }
    tracing::info!("clean shutdown complete");
    Ok(())
}

/// Runs the Kafka listener's accept loop once `caught_up` (when given)
/// turns true, or until the node stops.
async fn serve_when_caught_up(
    broker: Arc<Broker>,
    listener: TcpListener,
    caught_up: Option<watch::Receiver<bool>>,
    mut stop: watch::Receiver<bool>,
) {
    if let Some(mut caught_up) = caught_up {
        tokio::select! {
            seen = caught_up.wait_for(|c| *c) => if seen.is_err() { return },
            _ = stop.wait_for(|s| *s) => return,
        }
    }
    server::run(broker, listener, stop).await
}

/// Binds this controller's CONTROLLER listener; with it, the listener it
/// binds.
async fn bind_controller_listener(cluster: &ClusterConfig) -> Result<(&Listener, TcpListener)> {
    let controller = cluster.controller_listeners().next().with_context(|| {
        format!(
            "node {} is a controller but listeners has no controller listener ({})",
            cluster.node_id,
            cluster.controller_listener_names.join(",")
        )
    })?;
    let bind = controller.bind_address();
    let listener = TcpListener::bind(&bind)
        .await
        .with_context(|| format!("listen on {bind} (listener {controller})"))?;
    Ok((controller, listener))
}

/// Starts this node in the cluster of controller quorum `voters`: a
/// voter with its CONTROLLER listener bound, or an observer of the
/// metadata log (which finds the controllers from `voters`, or from
/// `controller.quorum.bootstrap.servers` when they are not listed); a
/// broker also registers with the active controller.
async fn join_cluster(
    options: BrokerOptions,
    cluster: &ClusterConfig,
    voters: BTreeMap<i32, (String, u16)>,
    controller_listener: Option<TcpListener>,
    kafka: &Listener,
    host: &str,
    port: u16,
) -> Result<(Arc<Broker>, ClusterNode)> {
    let endpoints = cluster
        .advertised_listeners
        .iter()
        .map(|l| {
            let (h, p) = if l.name == kafka.name {
                (host.to_owned(), port)
            } else {
                (l.host.clone(), l.port)
            };
            Endpoint {
                name: l.name.clone(),
                host: h,
                port: i32::from(p),
                security_protocol: l.security_protocol.name().to_owned(),
            }
        })
        .collect();
    let dynamic_quorum = matches!(cluster.quorum(), Quorum::Bootstrap(_));
    // A dynamic quorum's voters are (id, directory id) pairs (KIP-853).
    let (directory_id, voter_directory_ids) = match dynamic_quorum && cluster.is_controller() {
        true => (
            crate::storage::read_meta(&cluster.log_dir)?.and_then(|meta| meta.directory_id),
            crate::storage::bootstrap_voters(&cluster.log_dir)?
                .unwrap_or_default()
                .into_iter()
                .map(|voter| (voter.id, voter.directory_id))
                .collect(),
        ),
        false => (None, BTreeMap::new()),
    };
    let joining = ClusterOptions {
        voters: voters
            .into_iter()
            .map(|(id, (h, p))| (id, format!("{h}:{p}")))
            .collect(),
        bootstrap_controllers: cluster
            .bootstrap_servers
            .iter()
            .map(|(h, p)| format!("{h}:{p}"))
            .collect(),
        controller_listener,
        broker: cluster.is_broker(),
        endpoints,
        client_listener: kafka.name.clone(),
        rack: cluster.rack.clone(),
        election_timeout_ms: cluster.quorum_election_timeout_ms.max(1) as u64,
        fetch_timeout_ms: cluster.quorum_fetch_timeout_ms.max(1) as u64,
        heartbeat_interval_ms: cluster.broker_heartbeat_interval_ms.max(1) as u64,
        dynamic_quorum,
        directory_id,
        voter_directory_ids,
    };
    let data_dir = options.data_dir.clone();
    tarn_server::cluster::start(options, joining)
        .await
        .with_context(|| {
            format!(
                "start node {} with data in {}",
                cluster.node_id,
                data_dir.display()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::log_filter;

    #[test]
    fn openraft_retries_are_quiet_unless_the_filter_names_openraft() {
        let quiet = format!("info,openraft=warn,{}", tarn_quorum::QUIET_OPENRAFT);
        assert_eq!(log_filter(None), quiet);
        assert!(log_filter(Some("debug")).starts_with("debug,openraft=warn,openraft::"));
        assert_eq!(
            log_filter(Some("info,openraft=debug")),
            "info,openraft=debug"
        );
    }
}
