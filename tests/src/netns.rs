//! A network of hosts on one machine, made of Linux network namespaces:
//! each cluster node runs in a namespace of its own with one address on a
//! bridge in the test's namespace, which reaches them all (so the test's
//! clients talk to every node, whatever is cut between nodes).
//!
//! [`Network::partition`] cuts nodes off each other the way a dead switch
//! port does: packets are silently lost, in both directions, so a
//! connection hangs until a timeout instead of being refused. It works by
//! pointing each side's neighbour (ARP) entry for the other at an address
//! no host has; [`Network::heal`] deletes those entries and the hosts
//! resolve each other again.
//!
//! Needs iproute2's `ip` and the right to make namespaces (root, or
//! CAP_NET_ADMIN and CAP_SYS_ADMIN). Everything made here is removed when
//! the [`Network`] is dropped; what a killed test process left is removed
//! by the next one.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A hardware address no host has: frames sent to it reach no one.
const NOWHERE: &str = "02:00:5e:00:00:01";
/// Networks made by this process so far (names the next one).
static MADE: AtomicU32 = AtomicU32::new(0);

pub struct Network {
    /// Node `id`'s namespace is `{prefix}-{id}`.
    prefix: String,
    bridge: String,
    /// The /24 every address is in: `10.{subnet.0}.{subnet.1}.x`.
    subnet: (u8, u8),
    nodes: i32,
    /// Pairs (low, high) that cannot reach each other.
    cut: BTreeSet<(i32, i32)>,
}

/// Runs `ip <args>`; panics with its stderr if it fails.
fn ip(args: &[&str]) {
    ip_output(args);
}

/// `ip <args>`'s stdout; panics with its stderr if it fails.
fn ip_output(args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run `ip` (iproute2): {e}"));
    assert!(
        out.status.success(),
        "ip {}: {} (these tests make network namespaces: run them as root)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes the namespaces and bridges of test processes that are gone.
fn sweep_leftovers() {
    for line in ip_output(&["netns", "list"]).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(rest) = name.strip_prefix("tarn-") else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|pid| !alive(pid)) {
            ip(&["netns", "delete", name]);
        }
    }
    for line in ip_output(&["-o", "link", "show", "type", "bridge"]).lines() {
        // "7: tb1234x0: <...>"
        let Some(name) = line.split(": ").nth(1) else {
            continue;
        };
        let Some(rest) = name.strip_prefix("tb") else {
            continue;
        };
        let pid = rest.split('x').next().and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|pid| !alive(pid)) {
            ip(&["link", "delete", name]);
        }
    }
}

impl Network {
    /// Makes `nodes` hosts (ids from 1) on a fresh bridge.
    pub fn create(nodes: i32) -> Network {
        let pid = std::process::id();
        let made = MADE.fetch_add(1, Ordering::Relaxed);
        if made == 0 {
            sweep_leftovers();
        }
        // A /24 no other route on this machine has.
        let mut subnet = None;
        for attempt in 0..200u32 {
            let candidate = ((20 + (pid + attempt) % 200) as u8, (made % 250) as u8 + 1);
            let prefix = format!("10.{}.{}.0/24", candidate.0, candidate.1);
            if ip_output(&["route", "show", &prefix]).trim().is_empty() {
                subnet = Some(candidate);
                break;
            }
        }
        let subnet = subnet.expect("a free 10.x.y.0/24");
        let network = Network {
            prefix: format!("tarn-{pid}-{made}"),
            bridge: format!("tb{pid}x{made}"),
            subnet,
            nodes,
            cut: BTreeSet::new(),
        };
        ip(&["link", "add", &network.bridge, "type", "bridge"]);
        ip(&[
            "addr",
            "add",
            &format!("10.{}.{}.254/24", subnet.0, subnet.1),
            "dev",
            &network.bridge,
        ]);
        ip(&["link", "set", &network.bridge, "up"]);
        for id in 1..=nodes {
            let ns = network.namespace(id);
            let outside = format!("tv{pid}x{made}n{id}");
            ip(&["netns", "add", &ns]);
            ip(&[
                "link", "add", &outside, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            ip(&["link", "set", &outside, "master", &network.bridge, "up"]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", network.ip(id)),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        network
    }

    /// The namespace node `id` runs in (see [`crate::BrokerOptions::netns`]).
    pub fn namespace(&self, id: i32) -> String {
        format!("{}-{id}", self.prefix)
    }

    /// Node `id`'s address.
    pub fn ip(&self, id: i32) -> String {
        format!("10.{}.{}.{id}", self.subnet.0, self.subnet.1)
    }

    /// Cuts every node in one side off every node in another, both ways;
    /// links within a side, and cuts made before, are left as they are.
    pub fn partition(&mut self, sides: &[&[i32]]) {
        for (i, side) in sides.iter().enumerate() {
            for other in &sides[i + 1..] {
                for a in side.iter() {
                    for b in other.iter() {
                        self.cut_link(*a, *b);
                    }
                }
            }
        }
    }

    /// Cuts nodes `a` and `b` off each other, both ways.
    pub fn cut_link(&mut self, a: i32, b: i32) {
        assert!(a != b && (1..=self.nodes).contains(&a) && (1..=self.nodes).contains(&b));
        if !self.cut.insert((a.min(b), a.max(b))) {
            return;
        }
        for (from, to) in [(a, b), (b, a)] {
            ip(&[
                "-n",
                &self.namespace(from),
                "neigh",
                "replace",
                &self.ip(to),
                "lladdr",
                NOWHERE,
                "dev",
                "eth0",
                "nud",
                "permanent",
            ]);
        }
    }

    /// Undoes every cut.
    pub fn heal(&mut self) {
        for (a, b) in std::mem::take(&mut self.cut) {
            for (from, to) in [(a, b), (b, a)] {
                ip(&[
                    "-n",
                    &self.namespace(from),
                    "neigh",
                    "delete",
                    &self.ip(to),
                    "dev",
                    "eth0",
                ]);
            }
        }
    }

    /// The pairs cut now, as (low id, high id).
    pub fn cuts(&self) -> Vec<(i32, i32)> {
        self.cut.iter().copied().collect()
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of each veth pair, and so
        // the other end. Failures here are reported, not raised: a panic
        // in a drop during a failing test would hide why it failed.
        for id in 1..=self.nodes {
            let ns = self.namespace(id);
            match Command::new("ip").args(["netns", "delete", &ns]).output() {
                Ok(out) if out.status.success() => {}
                Ok(out) => eprintln!(
                    "ip netns delete {ns}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                Err(e) => eprintln!("ip netns delete {ns}: {e}"),
            }
        }
        match Command::new("ip")
            .args(["link", "delete", &self.bridge])
            .output()
        {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "ip link delete {}: {}",
                self.bridge,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => eprintln!("ip link delete {}: {e}", self.bridge),
        }
    }
}
