//! Runs the `tarn` command-line tool (`tarn topics ...`) and captures what it
//! printed, with a bound on how long it may take; `run_with_stdin` also
//! feeds it standard input (`tarn produce`), and `spawn` leaves it running
//! in the background (`tarn consume`) to be read, signalled and waited for.

use std::fmt;
use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How long one CLI command may run.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(30);

/// What a CLI command printed and how it exited.
#[derive(Debug)]
pub struct CliOutput {
    pub args: Vec<String>,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl fmt::Display for CliOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`tarn {}` exited with {}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.args.join(" "),
            self.status,
            self.stdout,
            self.stderr
        )
    }
}

/// Runs `tarn <args>`; panics if it cannot be started or exceeds
/// [`CLI_TIMEOUT`], and otherwise returns its output whatever the exit code.
pub fn run(args: &[&str]) -> CliOutput {
    run_with_input(args, None)
}

/// `tarn topics create` of `topic` on `bootstrap`, with `configs`
/// (`key=value`) as topic config overrides.
pub fn create_topic(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    replication: i32,
    configs: &[&str],
) -> CliOutput {
    let (partitions, replication) = (partitions.to_string(), replication.to_string());
    let mut args = vec![
        "topics",
        "create",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--partitions",
        &partitions,
        "--replication-factor",
        &replication,
    ];
    for config in configs {
        args.extend(["--config", config]);
    }
    run(&args)
}

/// `tarn configs --alter` of topic `topic` on `bootstrap`, adding (or
/// replacing) `config` (`key=value`, comma-separated for several).
pub fn alter_topic_config(bootstrap: &str, topic: &str, config: &str) -> CliOutput {
    run(&[
        "configs",
        "--bootstrap-server",
        bootstrap,
        "--alter",
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
        "--add-config",
        config,
    ])
}

/// Runs `tarn <args>` with `stdin` as its standard input, closed after
/// the last byte; otherwise as [`run`].
pub fn run_with_stdin(args: &[&str], stdin: &[u8]) -> CliOutput {
    run_with_input(args, Some(stdin.to_vec()))
}

fn run_with_input(args: &[&str], stdin: Option<Vec<u8>>) -> CliOutput {
    spawn_with_input(args, stdin).wait(CLI_TIMEOUT)
}

/// Starts `tarn <args>` in the background (a `tarn consume` that waits for
/// records), collecting what it prints as it prints it.
pub fn spawn(args: &[&str]) -> Background {
    spawn_with_input(args, None)
}

fn spawn_with_input(args: &[&str], stdin: Option<Vec<u8>>) -> Background {
    let mut child = Command::new(crate::tarn_bin())
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tarn CLI");
    let feeder = stdin.map(|input| {
        let mut pipe = child.stdin.take().expect("piped stdin");
        // A tool that exits early closes its end; that shows in its output.
        thread::spawn(move || pipe.write_all(&input).is_ok())
    });
    let (stdout, stdout_reader) = collect(child.stdout.take().expect("piped stdout"));
    let (stderr, stderr_reader) = collect(child.stderr.take().expect("piped stderr"));
    Background {
        args: args.iter().map(|arg| arg.to_string()).collect(),
        child: Some(child),
        feeder,
        stdout,
        stderr,
        readers: vec![stdout_reader, stderr_reader],
    }
}

/// A `tarn` command started by [`spawn`]; killed if dropped while running.
pub struct Background {
    args: Vec<String>,
    child: Option<Child>,
    feeder: Option<thread::JoinHandle<bool>>,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<thread::JoinHandle<()>>,
}

impl Background {
    /// What it printed on standard out so far.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().expect("stdout buffer")).into_owned()
    }

    /// What it printed on standard error so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().expect("stderr buffer")).into_owned()
    }

    /// Sends SIGTERM, as Ctrl-C or `kill` would.
    pub fn terminate(&self) {
        let child = self.child.as_ref().expect("still running");
        let pid = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
        // SAFETY: kill(2) on our own child, which is not reaped yet.
        let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(sent, 0, "SIGTERM to `tarn {}`", self.args.join(" "));
    }

    /// Waits for it to exit and returns its output; panics if it runs
    /// longer than `timeout`.
    pub fn wait(mut self, timeout: Duration) -> CliOutput {
        let mut child = self.child.take().expect("still running");
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = child.try_wait().expect("poll tarn CLI") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "`tarn {}` did not finish within {timeout:?}\n--- stdout ---\n{}--- stderr ---\n{}",
                    self.args.join(" "),
                    self.stdout(),
                    self.stderr()
                );
            }
            thread::sleep(Duration::from_millis(10));
        };
        if let Some(feeder) = self.feeder.take() {
            feeder.join().expect("stdin writer");
        }
        for reader in self.readers.drain(..) {
            reader.join().expect("output reader");
        }
        CliOutput {
            args: self.args.clone(),
            status,
            stdout: self.stdout(),
            stderr: self.stderr(),
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Reads `pipe` to its end on a thread, into a buffer readable meanwhile.
fn collect<R: Read + Send + 'static>(mut pipe: R) -> (Arc<Mutex<Vec<u8>>>, thread::JoinHandle<()>) {
    let buffer = Arc::new(Mutex::new(Vec::new()));
    let sink = buffer.clone();
    let reader = thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => sink
                    .lock()
                    .expect("output buffer")
                    .extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // Any other read error ends the output as an end of file does.
                Err(_) => break,
            }
        }
    });
    (buffer, reader)
}
