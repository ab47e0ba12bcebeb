//! An in-process [`Transport`] for tests and simulation: every node's
//! RPCs go through one [`SimNetwork`], which can lose, delay (and so
//! reorder) messages and cut links, all drawn from a seeded generator so
//! that, on tokio's paused clock, a run replays from its seed.
//!
//! A lost request or reply never resolves, so the sender waits out its
//! RPC deadline; a cut link or a node that is down fails at once, like a
//! refused connection.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;

use crate::network::{RpcKind, Transport, TransportError};
use crate::{NodeId, Quorum};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Faults {
    /// Chance, in per mille, that a request (or, separately, its reply)
    /// is lost.
    pub loss_per_mille: u64,
    /// Each message is delayed by a uniform time in this range.
    pub delay_ms_min: u64,
    pub delay_ms_max: u64,
}

impl Faults {
    pub const NONE: Faults = Faults {
        loss_per_mille: 0,
        delay_ms_min: 0,
        delay_ms_max: 0,
    };

    /// Every message delayed by exactly `ms`, none lost.
    pub const fn delay(ms: u64) -> Faults {
        Faults {
            loss_per_mille: 0,
            delay_ms_min: ms,
            delay_ms_max: ms,
        }
    }
}

struct State {
    nodes: BTreeMap<NodeId, Quorum>,
    /// Links that are cut, both directions stored.
    cut: BTreeSet<(NodeId, NodeId)>,
    faults: Faults,
    rng: u64,
}

/// See the module docs.
pub struct SimNetwork(Mutex<State>);

impl SimNetwork {
    pub fn new(seed: u64) -> Arc<SimNetwork> {
        Arc::new(SimNetwork(Mutex::new(State {
            nodes: BTreeMap::new(),
            cut: BTreeSet::new(),
            faults: Faults::NONE,
            rng: seed.max(1),
        })))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock is a test failure already.
        self.0.lock().expect("sim network lock")
    }

    /// The transport node `from` sends through.
    pub fn transport(self: &Arc<SimNetwork>, from: NodeId) -> Arc<dyn Transport> {
        Arc::new(SimTransport {
            network: self.clone(),
            from,
        })
    }

    /// Delivers RPCs for `quorum`'s node to it from now on.
    pub fn register(&self, quorum: Quorum) {
        self.state().nodes.insert(quorum.node_id(), quorum);
    }

    /// The node is down: RPCs to it fail.
    pub fn unregister(&self, id: NodeId) {
        self.state().nodes.remove(&id);
    }

    pub fn set_faults(&self, faults: Faults) {
        self.state().faults = faults;
    }

    /// Cuts every link between a node in `side` and one outside it.
    pub fn partition(&self, side: &BTreeSet<NodeId>, all: &BTreeSet<NodeId>) {
        let mut state = self.state();
        for a in side {
            for b in all.difference(side) {
                state.cut.insert((*a, *b));
                state.cut.insert((*b, *a));
            }
        }
    }

    /// Whether the link from `a` to `b` is cut.
    pub fn is_cut(&self, a: NodeId, b: NodeId) -> bool {
        self.state().cut.contains(&(a, b))
    }

    /// Restores every link.
    pub fn heal(&self) {
        self.state().cut.clear();
    }

    /// A number in `0..=max` from the seeded generator (xorshift64*).
    pub fn random(&self, max: u64) -> u64 {
        next_random(&mut self.state(), max)
    }
}

fn next_random(state: &mut State, max: u64) -> u64 {
    let mut x = state.rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    state.rng = x;
    let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
    if max == u64::MAX {
        r
    } else {
        r % (max + 1)
    }
}

/// What the network decided for one message.
struct Leg {
    lost: bool,
    delay: Duration,
}

fn leg(state: &mut State) -> Leg {
    let f = state.faults;
    let lost = f.loss_per_mille > 0 && next_random(state, 999) < f.loss_per_mille;
    let spread = f.delay_ms_max.saturating_sub(f.delay_ms_min);
    let delay = Duration::from_millis(f.delay_ms_min + next_random(state, spread));
    Leg { lost, delay }
}

struct SimTransport {
    network: Arc<SimNetwork>,
    from: NodeId,
}

impl Transport for SimTransport {
    fn call(
        &self,
        target: NodeId,
        kind: RpcKind,
        body: Bytes,
    ) -> BoxFuture<'static, Result<Bytes, TransportError>> {
        let network = self.network.clone();
        let from = self.from;
        Box::pin(async move {
            let (request, reply) = {
                let mut state = network.state();
                (leg(&mut state), leg(&mut state))
            };
            tokio::time::sleep(request.delay).await;
            let peer = {
                let state = network.state();
                if state.cut.contains(&(from, target)) || !state.nodes.contains_key(&from) {
                    None
                } else {
                    state.nodes.get(&target).cloned()
                }
            };
            let Some(peer) = peer else {
                return Err(TransportError::Unreachable(
                    target,
                    "link cut or node down".into(),
                ));
            };
            if request.lost {
                std::future::pending::<()>().await;
            }
            let answer = peer
                .handle_rpc(kind, &body)
                .await
                .map_err(|e| TransportError::Remote(target, e.to_string()));
            tokio::time::sleep(reply.delay).await;
            let cut_now = network.state().cut.contains(&(target, from));
            if reply.lost || cut_now {
                std::future::pending::<()>().await;
            }
            answer
        })
    }
}
