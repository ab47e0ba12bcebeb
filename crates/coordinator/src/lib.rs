//! Coordinators: state machines over internal topics, with no socket code.
//!
//! Consumer groups follow Kafka's classic group protocol, with group
//! metadata and committed offsets kept as records in the compacted topic
//! `__consumer_offsets`: `coordinator` is the state machine (time from a
//! `Clock`), `metadata` one group's state, `records` the offsets topic's
//! record schemas, `store` how records reach the partitions and are read
//! back, and `group_lag` what metrics and the console read of groups.

pub mod clock;
pub mod coordinator;
pub mod group_lag;
pub mod metadata;
pub mod records;
pub mod store;

pub use coordinator::{GroupConfig, GroupCoordinator};
pub use metadata::GroupState;
pub use store::{partition_for, GroupStore, OffsetsTopicStore, OFFSETS_TOPIC};
