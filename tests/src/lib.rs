//! End-to-end harness: starts the real `tarn` binary and drives it with real
//! Kafka clients.
//!
//! [`TarnBroker`] owns one broker process. It starts it on `127.0.0.1:0`
//! (and its HTTP listener on another free port), waits for the ready line
//! on stdout (`tarn: listening on 127.0.0.1:PORT, data in DIR`) and the
//! HTTP line after it (`tarn: http on 127.0.0.1:PORT`), and keeps the broker's
//! stderr in a log file so that a failing test can show what the broker said.
//! When the handle is dropped, the test fails if the broker's stderr holds
//! a panic from any of its starts. The child is killed when the handle is
//! dropped, and (through
//! `PR_SET_PDEATHSIG`) when the thread that started it dies, so a test that
//! panics or times out never leaves a broker behind.
//!
//! [`kafka`] wraps the rdkafka producer and consumer the tests use; [`cli`]
//! runs `tarn topics ...`.

pub mod cli;
pub mod cluster;
pub mod diff;
pub mod disk;
pub mod groups;
pub mod http;
pub mod kafka;
pub mod netns;
pub mod wire;

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// How long a broker may take to print its ready line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a broker may take to exit after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// The most any single test may run (see [`run_with_timeout`]).
pub const TEST_TIMEOUT: Duration = Duration::from_secs(60);

const READY_PREFIX: &str = "tarn: listening on ";
const READY_DATA_SEP: &str = ", data in ";
const HTTP_PREFIX: &str = "tarn: http on ";
/// What Rust's panic hook writes to stderr (`thread 'x' panicked at
/// src/...`): a test whose broker logged it fails, whatever the clients saw.
const PANIC_MARKER: &str = "panicked at ";

/// The root of the Cargo workspace (the parent of this package).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent directory")
        .to_path_buf()
}

/// Where the `tarn` binary is: `$TARN_BIN` if set (a relative path is taken
/// from the workspace root when it does not exist from the current
/// directory), else `$CARGO_TARGET_DIR/debug/tarn`, else
/// `<workspace>/target/debug/tarn`.
pub fn tarn_bin() -> PathBuf {
    let path = if let Some(bin) = std::env::var_os("TARN_BIN") {
        let bin = PathBuf::from(bin);
        if bin.is_relative() && !bin.exists() {
            workspace_root().join(bin)
        } else {
            bin
        }
    } else if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        PathBuf::from(target).join("debug").join("tarn")
    } else {
        workspace_root().join("target").join("debug").join("tarn")
    };
    assert!(
        path.is_file(),
        "tarn binary not found at {}: build it first (`cargo build -p tarn-cli`) or set TARN_BIN",
        path.display()
    );
    path
}

/// Runs `test` on its own thread and fails if it takes longer than `limit`.
///
/// libtest has no per-test timeout, so without this a hung client or broker
/// would hang the whole suite. A timed-out test's thread is abandoned; its
/// brokers die with it or with the test process (see `PR_SET_PDEATHSIG`).
pub fn run_with_timeout<F>(limit: Duration, test: F)
where
    F: FnOnce() + Send + 'static,
{
    let (done_tx, done_rx) = mpsc::channel();
    let handle = thread::Builder::new()
        .name("e2e-test-body".into())
        .spawn(move || {
            test();
            // The receiver may be gone if we already timed out.
            let _ = done_tx.send(());
        })
        .expect("spawn test thread");
    match done_rx.recv_timeout(limit) {
        Ok(()) => handle.join().expect("test thread finished"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The body panicked: re-raise its panic so libtest shows it.
            if let Err(panic) = handle.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("test did not finish within {limit:?}")
        }
    }
}

/// Options for starting a broker.
#[derive(Clone, Debug, Default)]
pub struct BrokerOptions {
    /// Reuse this data directory instead of a fresh temporary one.
    pub data_dir: Option<PathBuf>,
    /// `--set key=value` broker config overrides.
    pub settings: Vec<(String, String)>,
    /// The `listeners` key (a cluster node's fixed ports) instead of the
    /// harness's `--listen 127.0.0.1:0`.
    pub listeners: Option<String>,
    /// Run in this network namespace (a [`netns::Network`] node's).
    pub netns: Option<String>,
    /// The HTTP listener's `host:port` (default `127.0.0.1:0`).
    pub http_listen: Option<String>,
}

impl BrokerOptions {
    pub fn set(mut self, key: &str, value: &str) -> Self {
        self.settings.push((key.to_string(), value.to_string()));
        self
    }
}

/// One running (or stopped) `tarn serve` process.
pub struct TarnBroker {
    child: Option<Child>,
    bootstrap: String,
    /// `host:port` of the HTTP listener (metrics, health, console).
    http: String,
    data_dir: PathBuf,
    settings: Vec<(String, String)>,
    /// Holds the data dir (when we made it) and the broker's stderr logs.
    scratch: tempfile::TempDir,
    /// How many times this broker has been started; names the log files.
    starts: u32,
    /// Listen here instead of on a fresh port (restarts that clients with
    /// open connections must find again).
    listen: Option<String>,
    /// See [`BrokerOptions::listeners`].
    listeners: Option<String>,
    /// See [`BrokerOptions::netns`].
    netns: Option<String>,
    /// See [`BrokerOptions::http_listen`].
    http_listen: Option<String>,
}

impl TarnBroker {
    /// Starts a broker on a fresh temporary data directory.
    pub fn start() -> TarnBroker {
        TarnBroker::start_with(BrokerOptions::default())
    }

    pub fn start_with(options: BrokerOptions) -> TarnBroker {
        let scratch = tempfile::Builder::new()
            .prefix("tarn-e2e-")
            .tempdir()
            .expect("create scratch dir");
        let data_dir = match options.data_dir {
            Some(dir) => dir,
            None => scratch.path().join("data"),
        };
        std::fs::create_dir_all(&data_dir).expect("create data dir");
        let mut broker = TarnBroker {
            child: None,
            bootstrap: String::new(),
            http: String::new(),
            data_dir,
            settings: options.settings,
            scratch,
            starts: 0,
            listen: None,
            listeners: options.listeners,
            netns: options.netns,
            http_listen: options.http_listen,
        };
        broker.spawn();
        broker
    }

    /// `host:port` to give clients as `bootstrap.servers`.
    pub fn bootstrap(&self) -> &str {
        assert!(self.child.is_some(), "broker is not running");
        &self.bootstrap
    }

    /// `host:port` of the broker's HTTP listener (`/metrics`, `/health`, `/`).
    pub fn http_addr(&self) -> &str {
        assert!(self.child.is_some(), "broker is not running");
        &self.http
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    fn log_path(&self, start: u32) -> PathBuf {
        self.scratch
            .path()
            .join(format!("broker-{start}.stderr.log"))
    }

    /// The broker's stderr from every start so far (last 200 lines of each).
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for start in 1..=self.starts {
            let text = std::fs::read_to_string(self.log_path(start)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(200)..];
            out.push_str(&format!(
                "----- tarn stderr, start #{start} (last {} lines) -----\n",
                tail.len()
            ));
            for line in tail {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Lines of any start's stderr that report a panic.
    pub fn panics(&self) -> Vec<String> {
        let mut found = Vec::new();
        for start in 1..=self.starts {
            let text = std::fs::read_to_string(self.log_path(start)).unwrap_or_default();
            found.extend(
                text.lines()
                    .filter(|line| line.contains(PANIC_MARKER))
                    .map(str::to_string),
            );
        }
        found
    }

    /// Panics (with the logs) if the broker panicked in any start so far.
    pub fn assert_no_panic(&self) {
        let panics = self.panics();
        assert!(
            panics.is_empty(),
            "the broker panicked: {panics:#?}\n{}",
            self.logs()
        );
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "broker already running");
        self.starts += 1;
        let log = File::create(self.log_path(self.starts)).expect("create broker log");
        let mut command = Command::new(tarn_bin());
        command
            .arg("serve")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--http-listen")
            .arg(self.http_listen.as_deref().unwrap_or("127.0.0.1:0"));
        match &self.listeners {
            Some(listeners) => command.arg("--set").arg(format!("listeners={listeners}")),
            None => command
                .arg("--listen")
                .arg(self.listen.as_deref().unwrap_or("127.0.0.1:0")),
        };
        for (key, value) in &self.settings {
            command.arg("--set").arg(format!("{key}={value}"));
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .env("RUST_BACKTRACE", "1");
        // Made before the fork: the child may not allocate.
        let netns = self.netns.as_ref().map(|name| {
            std::ffi::CString::new(format!("/run/netns/{name}")).expect("a namespace name")
        });
        // SAFETY: prctl, open and setns are async-signal-safe and touch only
        // the child; the path was allocated before the fork.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(path) = &netns {
                    let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
                    if fd < 0 || libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    libc::close(fd);
                }
                Ok(())
            });
        }
        let mut child = command.spawn().expect("spawn tarn serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let (line_tx, line_rx) = mpsc::channel();
        thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            // The ready line, then the HTTP line.
            for _ in 0..2 {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let _ = line_tx.send(line);
            }
            // Keep draining stdout so the broker never blocks on a full pipe;
            // the contract says nothing more is printed there, so echo it.
            let mut rest = String::new();
            let _ = reader.read_to_string(&mut rest);
            if !rest.is_empty() {
                eprintln!("tarn stdout after the ready line: {rest}");
            }
        });
        let line = match line_rx.recv_timeout(READY_TIMEOUT) {
            Ok(line) => line,
            Err(err) => {
                let status = child.try_wait().ok().flatten();
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "tarn serve printed no ready line (waited up to {READY_TIMEOUT:?}: {err}; \
                     exit status so far: {status:?})",
                );
            }
        };
        self.bootstrap = match parse_ready_line(&line) {
            Some((addr, _dir)) => addr,
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("unexpected ready line from tarn serve: {line:?}",);
            }
        };
        let http_line = line_rx.recv_timeout(READY_TIMEOUT).unwrap_or_default();
        self.http = match http_line.trim_end().strip_prefix(HTTP_PREFIX) {
            Some(addr) => addr.to_string(),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("tarn serve printed no HTTP line after the ready line: {http_line:?}");
            }
        };
        self.child = Some(child);
    }

    /// The broker's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process exited by itself; [`TarnBroker::wait_exit`]
    /// then returns its status at once.
    pub fn exited(&mut self) -> bool {
        let child = self.child.as_mut().expect("broker is not running");
        child.try_wait().expect("poll broker").is_some()
    }

    /// Panics unless the process is still running.
    pub fn assert_alive(&mut self) {
        let child = self.child.as_mut().expect("broker was stopped");
        if let Some(status) = child.try_wait().expect("poll broker") {
            self.child = None;
            panic!("broker exited unexpectedly with {status}");
        }
    }

    /// SIGTERM, wait, and assert a clean exit (status 0).
    pub fn stop(&mut self) {
        let status = self.terminate(libc::SIGTERM);
        assert!(
            status.success(),
            "broker did not exit cleanly after SIGTERM: {status}"
        );
    }

    /// Waits for the broker to exit by itself; its exit status.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("broker is not running");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().expect("poll broker") {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("broker did not exit within {timeout:?}");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL and reap: a crash, as far as the broker can tell.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("broker is not running");
        child.kill().expect("SIGKILL broker");
        child.wait().expect("reap broker");
    }

    /// Starts the broker again on the same data dir and settings (after
    /// [`TarnBroker::stop`] or [`TarnBroker::kill`]); the port may change.
    pub fn start_again(&mut self) {
        self.spawn();
    }

    /// Like [`TarnBroker::start_again`], but on the port it had before, so
    /// that running clients reconnect to it.
    pub fn start_again_on_same_port(&mut self) {
        assert!(!self.bootstrap.is_empty(), "broker never started");
        self.listen = Some(self.bootstrap.clone());
        self.spawn();
    }

    /// A clean stop followed by a start on the same data dir.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    fn terminate(&mut self, signal: libc::c_int) -> ExitStatus {
        let mut child = self.child.take().expect("broker is not running");
        let pid = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
        // SAFETY: kill(2) on our own, not yet reaped, child.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(
            rc,
            0,
            "kill({pid}, {signal}) failed: {}",
            std::io::Error::last_os_error()
        );
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait().expect("poll broker") {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("broker did not exit within {STOP_TIMEOUT:?} of signal {signal}",);
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs `tarn <args>` against this broker's bootstrap address.
    pub fn cli(&self, args: &[&str]) -> cli::CliOutput {
        cli::run(args)
    }

    /// `tarn topics create`, asserting success.
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        self.create_topic_full(topic, partitions, &[]);
    }

    /// `tarn topics create` of a one-partition topic with `key=value`
    /// configs, asserting success.
    pub fn create_topic_with_configs(&self, topic: &str, configs: &[&str]) {
        self.create_topic_full(topic, 1, configs);
    }

    /// `tarn topics create` with `key=value` configs, asserting success.
    pub fn create_topic_full(&self, topic: &str, partitions: i32, configs: &[&str]) {
        let partitions = partitions.to_string();
        let mut args = vec![
            "topics",
            "create",
            "--bootstrap-server",
            self.bootstrap(),
            "--topic",
            topic,
            "--partitions",
            &partitions,
            "--replication-factor",
            "1",
        ];
        for config in configs {
            args.extend(["--config", config]);
        }
        let out = cli::run(&args);
        assert!(out.status.success(), "create topic {topic}: {out}");
    }

    /// `tarn topics list`, asserting success.
    pub fn list_topics(&self) -> Vec<String> {
        let out = cli::run(&["topics", "list", "--bootstrap-server", self.bootstrap()]);
        assert!(out.status.success(), "list topics: {out}");
        out.stdout
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .map(str::to_string)
            .collect()
    }
}

impl Drop for TarnBroker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if thread::panicking() {
            // libtest prints captured output of failed tests only.
            eprintln!("{}", self.logs());
        } else {
            // Every test fails when its broker panicked, even one that
            // counted a closed connection as the expected outcome.
            self.assert_no_panic();
        }
    }
}

/// Parses `tarn: listening on ADDR, data in DIR` into `(ADDR, DIR)`.
pub fn parse_ready_line(line: &str) -> Option<(String, String)> {
    let rest = line.trim_end().strip_prefix(READY_PREFIX)?;
    let (addr, dir) = rest.split_once(READY_DATA_SEP)?;
    let port = addr.rsplit_once(':')?.1;
    port.parse::<u16>().ok().filter(|port| *port != 0)?;
    Some((addr.to_string(), dir.to_string()))
}

#[cfg(test)]
mod tests {
    use super::{parse_ready_line, TarnBroker};

    /// The harness fails a test whose broker logged a panic, even when the
    /// test itself saw nothing wrong.
    #[test]
    fn a_panic_in_the_brokers_log_fails_the_test() {
        let mut broker = TarnBroker::start();
        broker.assert_no_panic();
        broker.stop();
        let log = broker.log_path(broker.starts);
        let mut text = std::fs::read_to_string(&log).expect("read the broker log");
        text.push_str("thread 'tokio-runtime-worker' panicked at crates/x.rs:1:1:\n");
        std::fs::write(&log, text).expect("write the broker log");
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(broker)));
        assert!(
            dropped.is_err(),
            "dropping the handle did not fail the test"
        );
    }

    #[test]
    fn parses_the_ready_line() {
        assert_eq!(
            parse_ready_line("tarn: listening on 127.0.0.1:40123, data in /tmp/x y\n"),
            Some(("127.0.0.1:40123".to_string(), "/tmp/x y".to_string()))
        );
        assert_eq!(
            parse_ready_line("tarn: listening on 127.0.0.1:0, data in /d"),
            None
        );
        assert_eq!(
            parse_ready_line("listening on 127.0.0.1:1, data in /d"),
            None
        );
    }
}
