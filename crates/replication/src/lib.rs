//! Partitions and the logs behind them: the `ReplicaManager` that hosts
//! every partition of this broker, the durability of appends (group
//! commit), and log management (retention, flushing, cleaning, deletion).
//! Followers and the high watermark of a replicated partition live here
//! too as replication lands.

pub mod blocking;
pub mod durability;
pub mod episode;
pub mod log_deleter;
pub mod log_manager;
pub mod replica_manager;
