//! Ctrl-C for the console tools. SIGINT and SIGTERM only record that they
//! arrived; the producer then sends what it has buffered and the consumer
//! prints its count, as Kafka's shutdown hooks do, and both exit with the
//! shell's 128 + signal status. A second signal kills the process at once.

use std::sync::atomic::{AtomicI32, Ordering};

use anyhow::{bail, Result};

/// The signal that asked us to stop, or 0.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    RECEIVED.store(signal, Ordering::SeqCst);
    // SAFETY: signal(2) is async-signal-safe; the default action makes a
    // second Ctrl-C stop a tool that is stuck finishing.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
    }
}

/// Routes SIGINT and SIGTERM to [`received`].
pub fn install() -> Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic and resets itself,
        // both async-signal-safe.
        let previous =
            unsafe { libc::signal(signal, on_signal as *const () as libc::sighandler_t) };
        if previous == libc::SIG_ERR {
            bail!("install the handler for signal {signal}");
        }
    }
    Ok(())
}

/// The signal received since [`install`], if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}
