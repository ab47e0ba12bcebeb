//! Blocking work (an fsync, opening or renaming files) that async handlers
//! must do: [`off_async_workers`] keeps it from stalling the other tasks of
//! the worker thread it runs on.

/// Runs `f`, which may block on the disk: on a worker of a multi-threaded
/// tokio runtime through `block_in_place` (the runtime moves its other
/// tasks to another worker first), elsewhere (a plain thread, a
/// current-thread runtime in tests) directly.
pub fn off_async_workers<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}
