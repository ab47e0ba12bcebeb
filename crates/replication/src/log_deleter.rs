//! LogDeleter: removes the directories of deleted partitions once their
//! `file.delete.delay.ms` has passed, as Kafka's delete-logs task does.
//!
//! DeleteTopics renames a partition directory to `<topic>-<partition>.<id>-delete`
//! at once (so the topic can be re-created at once) and hands the new path
//! here. One background thread removes each path when its deadline comes.
//! Pending paths are not persisted: a directory still waiting at shutdown
//! is removed at the next start-up. The queue is bounded; past the bound a
//! directory is removed at once instead of waiting.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use tarn_storage::LogEnv;

/// The most directories that may wait for their delay at once.
pub const PENDING_DELETIONS_MAX: usize = 100_000;

#[derive(Default)]
struct State {
    /// (deadline, path), earliest first.
    queue: BinaryHeap<Reverse<(Instant, PathBuf)>>,
    /// Paths whose delay is too long to schedule: removed at next start.
    forever: usize,
    stopping: bool,
}

pub struct LogDeleter {
    env: LogEnv,
    shared: Arc<(Mutex<State>, Condvar)>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl LogDeleter {
    /// Starts the thread; directories are removed through `env`.
    pub fn start(env: LogEnv) -> LogDeleter {
        let shared: Arc<(Mutex<State>, Condvar)> = Arc::default();
        let worker = shared.clone();
        let worker_env = env.clone();
        let thread = std::thread::Builder::new()
            .name("tarn-delete-logs".into())
            .spawn(move || run(&worker_env, &worker))
            .map_err(|e| tracing::error!(error = %e, "cannot start the log deletion thread"))
            .ok();
        LogDeleter {
            env,
            shared,
            thread: Mutex::new(thread),
        }
    }

    /// Removes `dir` after `delay`.
    pub fn schedule(&self, dir: PathBuf, delay: Duration) {
        let (state, wake) = &*self.shared;
        let mut state = state.lock();
        let running = self.thread.lock().is_some() && !state.stopping;
        if !running || state.queue.len() >= PENDING_DELETIONS_MAX {
            drop(state);
            tracing::warn!(dir = %dir.display(), "removing a deleted log at once: the deletion queue is full or stopped");
            remove(&self.env, &dir);
            return;
        }
        match Instant::now().checked_add(delay) {
            Some(deadline) => {
                state.queue.push(Reverse((deadline, dir)));
                wake.notify_one();
            }
            None => {
                state.forever += 1;
                tracing::info!(dir = %dir.display(), "file.delete.delay.ms is beyond this run: the directory goes at the next start-up");
            }
        }
    }

    /// Directories waiting for their delay.
    pub fn pending(&self) -> usize {
        let state = self.shared.0.lock();
        state.queue.len() + state.forever
    }

    /// Stops the thread; directories still waiting stay on disk until the
    /// next start-up removes them.
    pub fn shutdown(&self) {
        {
            let (state, wake) = &*self.shared;
            state.lock().stopping = true;
            wake.notify_all();
        }
        if let Some(thread) = self.thread.lock().take() {
            if thread.join().is_err() {
                tracing::error!("the log deletion thread panicked");
            }
        }
    }
}

impl Drop for LogDeleter {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn remove(env: &LogEnv, dir: &Path) {
    match env.remove_dir_all(dir) {
        Ok(()) => tracing::info!(dir = %dir.display(), "deleted log directory"),
        Err(e) => tracing::error!(dir = %dir.display(), error = %e, "delete log directory"),
    }
}

fn run(env: &LogEnv, shared: &(Mutex<State>, Condvar)) {
    let (state, wake) = shared;
    let mut guard = state.lock();
    while !guard.stopping {
        let now = Instant::now();
        match guard.queue.peek() {
            Some(Reverse((deadline, _))) if *deadline <= now => {
                let Some(Reverse((_, dir))) = guard.queue.pop() else {
                    continue;
                };
                drop(guard);
                remove(env, &dir);
                guard = state.lock();
            }
            Some(Reverse((deadline, _))) => {
                let deadline = *deadline;
                wake.wait_until(&mut guard, deadline);
            }
            None => wake.wait(&mut guard),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait_gone(path: &std::path::Path) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while path.exists() {
            assert!(
                Instant::now() < deadline,
                "{} was not removed",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn removes_after_the_delay_and_keeps_later_ones() {
        let root = tempfile::tempdir().unwrap();
        let soon = root.path().join("a-0.x-delete");
        let later = root.path().join("a-1.y-delete");
        let never = root.path().join("a-2.z-delete");
        for dir in [&soon, &later, &never] {
            std::fs::create_dir(dir).unwrap();
            std::fs::write(dir.join("00000000000000000000.log"), b"x").unwrap();
        }
        let deleter = LogDeleter::start(LogEnv::shared_default());
        deleter.schedule(later.clone(), Duration::from_secs(3600));
        deleter.schedule(never.clone(), Duration::MAX);
        deleter.schedule(soon.clone(), Duration::ZERO);
        wait_gone(&soon);
        assert!(later.exists() && never.exists());
        assert_eq!(deleter.pending(), 2);
        deleter.shutdown();
        assert!(later.exists(), "a pending deletion survives shutdown");
        // After shutdown nothing waits: a new deletion happens at once.
        let late = root.path().join("b-0.w-delete");
        std::fs::create_dir(&late).unwrap();
        deleter.schedule(late.clone(), Duration::from_secs(3600));
        assert!(!late.exists());
    }
}
