//! ConnectionQuotas: Kafka's `max.connections` and
//! `max.connections.per.ip`, checked when a connection is accepted.
//!
//! A connection over either limit is closed at once (and the refusal is
//! logged, rate-limited), so a client that opens thousands of connections
//! only hurts itself. Every admitted connection holds a `ConnectionSlot`
//! that gives its place back when the connection ends, however it ends.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaExceeded {
    /// `max.connections` connections are open.
    Total(usize),
    /// `max.connections.per.ip` connections from this address are open.
    PerIp(usize),
}

impl std::fmt::Display for QuotaExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QuotaExceeded::Total(max) => write!(f, "{max} connections are open (max.connections)"),
            QuotaExceeded::PerIp(max) => {
                write!(
                    f,
                    "{max} connections from this address are open (max.connections.per.ip)"
                )
            }
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

#[derive(Debug)]
pub struct ConnectionQuotas {
    max_total: usize,
    max_per_ip: usize,
    counts: Mutex<Counts>,
}

/// An admitted connection's place; dropping it frees the place.
#[derive(Debug)]
pub struct ConnectionSlot {
    quotas: Arc<ConnectionQuotas>,
    ip: IpAddr,
}

impl ConnectionQuotas {
    pub fn new(max_total: usize, max_per_ip: usize) -> Arc<Self> {
        Arc::new(ConnectionQuotas {
            max_total,
            max_per_ip,
            counts: Mutex::new(Counts::default()),
        })
    }

    pub fn try_acquire(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionSlot, QuotaExceeded> {
        let mut counts = self.counts.lock();
        if counts.total >= self.max_total {
            return Err(QuotaExceeded::Total(self.max_total));
        }
        let from_ip = counts.per_ip.get(&ip).copied().unwrap_or(0);
        if from_ip >= self.max_per_ip {
            return Err(QuotaExceeded::PerIp(self.max_per_ip));
        }
        counts.total += 1;
        counts.per_ip.insert(ip, from_ip + 1);
        Ok(ConnectionSlot {
            quotas: self.clone(),
            ip,
        })
    }

    pub fn open(&self) -> usize {
        self.counts.lock().total
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut counts = self.quotas.counts.lock();
        counts.total -= 1;
        if let Some(n) = counts.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                counts.per_ip.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn limits_total_and_per_ip_and_frees_on_drop() {
        let quotas = ConnectionQuotas::new(3, 2);
        let a1 = quotas.try_acquire(ip(1)).unwrap();
        let _a2 = quotas.try_acquire(ip(1)).unwrap();
        assert_eq!(
            quotas.try_acquire(ip(1)).unwrap_err(),
            QuotaExceeded::PerIp(2)
        );
        let _b1 = quotas.try_acquire(ip(2)).unwrap();
        assert_eq!(
            quotas.try_acquire(ip(3)).unwrap_err(),
            QuotaExceeded::Total(3)
        );
        drop(a1);
        assert_eq!(quotas.open(), 2);
        let _c = quotas.try_acquire(ip(3)).unwrap();
        assert_eq!(quotas.counts.lock().per_ip.get(&ip(1)), Some(&1));
    }
}
