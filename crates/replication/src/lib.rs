//! Partitions and the logs behind them: the `ReplicaManager` that hosts
//! every partition of this broker, the durability of appends (group
//! commit), and log management (retention, flushing, cleaning, deletion).
//! A partition's roles as leader and follower (`roles`) and the leader's
//! view of its replicas and ISR (`isr`) live here too.

pub mod blocking;
pub mod durability;
pub mod episode;
pub mod isr;
pub mod log_deleter;
pub mod log_manager;
pub mod replica_manager;
pub mod roles;
