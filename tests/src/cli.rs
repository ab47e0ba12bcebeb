//! Runs the `tarn` command-line tool (`tarn topics ...`) and captures what it
//! printed, with a bound on how long it may take; `run_with_stdin` also
//! feeds it standard input (`tarn produce`).

use std::fmt;
use std::io::{Read, Write};
use std::process::{Command, ExitStatus, Stdio};
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

/// Runs `tarn <args>` with `stdin` as its standard input, closed after
/// the last byte; otherwise as [`run`].
pub fn run_with_stdin(args: &[&str], stdin: &[u8]) -> CliOutput {
    run_with_input(args, Some(stdin.to_vec()))
}

fn run_with_input(args: &[&str], stdin: Option<Vec<u8>>) -> CliOutput {
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
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    let deadline = Instant::now() + CLI_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll tarn CLI") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`tarn {}` did not finish within {CLI_TIMEOUT:?}",
                args.join(" ")
            );
        }
        thread::sleep(Duration::from_millis(10));
    };
    if let Some(feeder) = feeder {
        feeder.join().expect("stdin writer");
    }
    CliOutput {
        args: args.iter().map(|arg| arg.to_string()).collect(),
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

fn drain<R: Read + Send + 'static>(mut pipe: R) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}
