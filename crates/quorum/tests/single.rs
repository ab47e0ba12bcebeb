//! A quorum of one: it bootstraps alone, commits with one fsync per
//! entry, and restarts from its snapshot plus the log after it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tarn_quorum::sim::SimNetwork;
use tarn_quorum::{ApplyError, Committed, Quorum, QuorumConfig, QuorumError, StateMachine};
use tarn_storage::sim::SimFileSystem;
use tarn_storage::FileSystem;

const DIR: &str = "/data/__cluster_metadata-0";

#[derive(Default, Clone)]
struct Applied {
    entries: Arc<Mutex<Vec<(u64, Bytes)>>>,
    installs: Arc<Mutex<u64>>,
}

impl StateMachine for Applied {
    fn apply(&mut self, committed: Committed, entry: &Bytes) -> Result<(), ApplyError> {
        self.entries
            .lock()
            .unwrap()
            .push((committed.index, entry.clone()));
        Ok(())
    }
    fn snapshot(&self) -> Bytes {
        let image: Vec<(u64, Vec<u8>)> = self
            .entries
            .lock()
            .unwrap()
            .iter()
            .map(|(i, b)| (*i, b.to_vec()))
            .collect();
        Bytes::from(serde_json::to_vec(&image).unwrap())
    }
    fn install_snapshot(&mut self, _last: Committed, image: &Bytes) -> Result<(), ApplyError> {
        let image: Vec<(u64, Vec<u8>)> = serde_json::from_slice(image)?;
        *self.entries.lock().unwrap() = image
            .into_iter()
            .map(|(i, b)| (i, Bytes::from(b)))
            .collect();
        *self.installs.lock().unwrap() += 1;
        Ok(())
    }
}

fn config(snapshot_every: u64) -> QuorumConfig {
    let voters = BTreeMap::from([(1, "node-1".to_string())]);
    let mut config = QuorumConfig::new(1, voters, PathBuf::from(DIR));
    config.snapshot_every = snapshot_every;
    config.rng_seed = Some(1);
    config
}

async fn start(fs: &Arc<SimFileSystem>, snapshot_every: u64, machine: Applied) -> Quorum {
    let fs: Arc<dyn FileSystem> = fs.clone();
    let transport = SimNetwork::new(1).transport(1);
    Quorum::start(config(snapshot_every), fs, transport, Box::new(machine))
        .await
        .unwrap()
}

async fn leader(quorum: &Quorum) {
    let mut status = quorum.status();
    status.wait_for(|s| s.is_leader).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_quorum_of_one_commits_with_one_fsync_per_entry() {
    let fs = Arc::new(SimFileSystem::new(1));
    let quorum = start(&fs, 1000, Applied::default()).await;
    leader(&quorum).await;
    let segment = Path::new(DIR).join("00000000000000000000.log");
    let mut last = quorum.propose(Bytes::from("warm-up")).await.unwrap();
    for i in 0..10 {
        let before = fs.fsyncs(&segment);
        let committed = quorum
            .propose(Bytes::from(format!("entry {i}")))
            .await
            .unwrap();
        assert_eq!(committed.index, last.index + 1);
        assert_eq!(fs.fsyncs(&segment), before + 1, "one fsync for entry {i}");
        last = committed;
    }
    quorum.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_restart_installs_the_snapshot_and_replays_only_the_log_after_it() {
    let fs = Arc::new(SimFileSystem::new(2));
    let machine = Applied::default();
    let quorum = start(&fs, 5, machine.clone()).await;
    leader(&quorum).await;
    for i in 0..23 {
        quorum
            .propose(Bytes::from(format!("entry {i}")))
            .await
            .unwrap();
    }
    let before = machine.entries.lock().unwrap().clone();
    quorum.shutdown().await.unwrap();
    fs.halt();
    fs.power_cut(true);
    fs.restart();

    let names = fs.list(Path::new(DIR)).unwrap();
    let snapshots: Vec<&String> = names
        .iter()
        .filter(|n| n.ends_with(".checkpoint"))
        .collect();
    assert_eq!(snapshots.len(), 1, "older snapshots are removed: {names:?}");
    let segments: Vec<&String> = names.iter().filter(|n| n.ends_with(".log")).collect();
    assert!(
        !segments.contains(&&"00000000000000000000.log".to_string()),
        "the log behind the snapshot is purged: {names:?}"
    );

    let restarted = Applied::default();
    let quorum = start(&fs, 5, restarted.clone()).await;
    assert_eq!(
        *restarted.installs.lock().unwrap(),
        1,
        "started from the snapshot"
    );
    leader(&quorum).await;
    let next = quorum.propose(Bytes::from("after restart")).await.unwrap();
    let mut status = quorum.status();
    status
        .wait_for(|s| s.applied_index >= Some(next.index))
        .await
        .unwrap();
    let after = restarted.entries.lock().unwrap().clone();
    assert_eq!(
        after[..before.len()],
        before[..],
        "same state after restart"
    );
    assert_eq!(after.last().unwrap().1, Bytes::from("after restart"));
    quorum.shutdown().await.unwrap();
    assert!(matches!(
        quorum.propose(Bytes::from("too late")).await,
        Err(QuorumError::Shutdown(_))
    ));
}
