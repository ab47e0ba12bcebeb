//! Request and response structures of every API Tarn serves, declared
//! with `message!` from Kafka's published protocol specification. Each
//! field carries the versions it exists in; the broker's handlers say
//! which of those versions they answer.

pub mod acls;
pub mod alter_configs;
pub mod alter_replica_log_dirs;
pub mod api_versions;
pub mod client_quotas;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_quorum;
pub mod describe_topic_partitions;
pub mod elect_leaders;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_config_resources;
pub mod list_groups;
pub mod list_offsets;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod raft_voters;
pub mod reassignments;
pub mod scram_credentials;
pub mod sync_group;
pub mod unregister_broker;
pub mod update_features;
