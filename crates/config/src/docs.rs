//! One sentence of documentation for every config key Tarn knows, sent in
//! DescribeConfigs when a client asks for documentation (v3+) so config
//! UIs can show what a key does. The wording is Tarn's own; the meaning is
//! Kafka's, since the keys are.

/// The documentation of `name`, a broker or topic key.
pub fn documentation(name: &str) -> Option<&'static str> {
    Some(match name {
        // Topics and partitions.
        "auto.create.topics.enable" => "Create a topic when a client asks for metadata of one that does not exist.",
        "num.partitions" => "Partitions of a topic created without a partition count.",
        "default.replication.factor" => "Replicas of each partition of a topic created without a replication factor.",
        "delete.topic.enable" => "Whether DeleteTopics may delete topics.",
        "min.insync.replicas" => "The fewest in-sync replicas with which a produce with acks=all is accepted.",
        "unclean.leader.election.enable" => "Whether a replica outside the in-sync set may become leader, at the cost of losing records.",
        "auto.leader.rebalance.enable" => "Whether the active controller periodically moves leadership back to each partition's preferred replica.",
        "leader.imbalance.check.interval.seconds" => "How often the active controller looks for brokers that lead too few of the partitions they are preferred for.",
        "leader.imbalance.per.broker.percentage" => "The share of its preferred partitions a broker may fail to lead before the controller moves their leadership back to it.",
        // Requests and connections.
        "message.max.bytes" => "The largest record batch the broker accepts (after the producer's compression).",
        "max.message.bytes" => "The largest record batch this topic accepts (after the producer's compression).",
        "socket.request.max.bytes" => "The largest request the broker reads; a larger one closes its connection.",
        "socket.request.read.timeout.ms" => "How long a request may take to arrive once its first byte has; a slower one closes its connection.",
        "queued.max.request.bytes" => "Bytes of requests read but not yet answered, across all connections; -1 is Tarn's bound of 128 MiB.",
        "max.connections" => "The most client connections open at once.",
        "max.connections.per.ip" => "The most client connections open at once from one address.",
        "connections.max.idle.ms" => "Close a connection that has been idle this long.",
        "max.incremental.fetch.session.cache.slots" => "Fetch sessions (KIP-227) the broker keeps at once; past it, new sessions evict idle or smaller ones.",
        // Segments and indexes.
        "log.segment.bytes" | "segment.bytes" => "Roll to a new segment file once the active one reaches this size.",
        "log.roll.ms" | "segment.ms" => "Roll to a new segment file once the active one is this old, even if not full.",
        "log.roll.hours" => "Roll to a new segment file once the active one is this many hours old, when log.roll.ms is not set.",
        "log.roll.jitter.ms" | "segment.jitter.ms" => "Roll each segment up to this much earlier than segment.ms says (a share fixed per segment), so that partitions created together do not all roll at once.",
        "log.roll.jitter.hours" => "log.roll.jitter.ms in hours, when log.roll.jitter.ms is not set.",
        "log.index.interval.bytes" | "index.interval.bytes" => "Bytes of records between two entries of the offset index.",
        "log.index.size.max.bytes" | "segment.index.bytes" => "The largest an offset or time index may grow; a full index rolls the segment.",
        "log.segment.delete.delay.ms" | "file.delete.delay.ms" => "How long a deleted segment's files wait before they are removed from disk.",
        "log.open.files.max" => "Segment files the broker keeps open at once (Tarn's own key); idle partitions hold none.",
        "broker.session.fence.on.disconnect" => "Fence a broker as soon as its heartbeat connection closes and its listener refuses connections (it died), not after broker.session.timeout.ms (Tarn's own key).",
        "replication.quota.window.num" => "Windows a replication throttle's rate is measured over.",
        "replication.quota.window.size.seconds" => "Length of each of those windows.",
        "leader.replication.throttled.rate" => "Bytes per second this broker, leading, sends to throttled followers out of the ISR.",
        "follower.replication.throttled.rate" => "Bytes per second this broker, following, fetches for throttled replicas out of the ISR.",
        "replica.alter.log.dirs.io.max.bytes.per.second" => "Bytes per second a move between log directories may copy; stored for Kafka's tools, without effect (a broker has one directory).",
        "leader.replication.throttled.replicas" => "The replicas (partition:broker, or *) whose leaders throttle what they send.",
        "follower.replication.throttled.replicas" => "The replicas (partition:broker, or *) that throttle what they fetch.",
        // Retention.
        "log.retention.ms" | "retention.ms" => "Delete segments whose newest record is older than this; -1 keeps them forever.",
        "log.retention.bytes" | "retention.bytes" => "Delete the oldest segments once a partition is larger than this; -1 means no size limit.",
        "log.retention.check.interval.ms" => "How often the broker looks for segments to delete by retention.",
        "log.cleanup.policy" | "cleanup.policy" => "delete removes old segments; compact keeps the latest record of each key; both may be given.",
        // Compaction.
        "log.cleaner.enable" => "Whether the log cleaner compacts topics whose cleanup.policy includes compact.",
        "log.cleaner.backoff.ms" => "How long the cleaner sleeps when no log needs cleaning.",
        "log.cleaner.dedupe.buffer.size" => "Memory the cleaner uses to remember keys while compacting.",
        "log.cleaner.min.cleanable.ratio" | "min.cleanable.dirty.ratio" => "Compact a log once this share of it has not been cleaned yet.",
        "log.cleaner.min.compaction.lag.ms" | "min.compaction.lag.ms" => "A record stays uncompacted at least this long after it was written.",
        "log.cleaner.max.compaction.lag.ms" | "max.compaction.lag.ms" => "A record is eligible for compaction at the latest this long after it was written.",
        "log.cleaner.delete.retention.ms" | "delete.retention.ms" => "How long a compacted topic keeps tombstones, so consumers can see deletions.",
        // Durability.
        "log.flush.interval.messages" | "flush.messages" => "Fsync a partition after this many records; the produce is acknowledged only once it is on disk.",
        "log.flush.interval.ms" | "flush.ms" => "Fsync a partition when its oldest unflushed record is this old.",
        "log.flush.scheduler.interval.ms" => "How often the broker checks whether a partition is due for a time-based flush.",
        // Compression.
        "compression.type" => "The codec batches are stored in; producer keeps the producer's codec.",
        "compression.gzip.level" => "gzip level (1 to 9, or -1 for gzip's default) when the broker compresses.",
        "compression.lz4.level" => "lz4 level (1 to 17) when the broker compresses; Tarn's lz4 encoder has one level.",
        "compression.zstd.level" => "zstd level (-131072 to 22) when the broker compresses.",
        // Timestamps.
        "log.message.timestamp.type" | "message.timestamp.type" => "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches with the broker's clock.",
        "log.message.timestamp.before.max.ms" | "message.timestamp.before.max.ms" => "The furthest a CreateTime timestamp may be behind the broker's clock.",
        "log.message.timestamp.after.max.ms" | "message.timestamp.after.max.ms" => "The furthest a CreateTime timestamp may be ahead of the broker's clock.",
        // Consumer groups and offsets.
        "offsets.topic.num.partitions" => "Partitions of __consumer_offsets, fixed when it is created.",
        "offsets.topic.replication.factor" => "Replicas of each partition of __consumer_offsets.",
        "offsets.topic.segment.bytes" => "Segment size of __consumer_offsets.",
        "offsets.retention.minutes" => "Committed offsets of a group with no members are kept this long.",
        "offsets.retention.check.interval.ms" => "How often expired committed offsets are removed.",
        "offset.metadata.max.bytes" => "The longest metadata string an offset commit may carry.",
        "group.initial.rebalance.delay.ms" => "How long a new group waits for more members before its first rebalance.",
        "group.min.session.timeout.ms" => "The shortest session timeout a member may ask for.",
        "group.max.session.timeout.ms" => "The longest session timeout a member may ask for.",
        "group.max.size" => "The most members one group may have.",
        // Idempotent producers.
        "producer.id.expiration.ms" => "Forget a producer id whose last batch is older than this.",
        "producer.id.expiration.check.interval.ms" => "How often idle producer ids are looked for.",
        // The node and its quorum.
        "process.roles" => "This node's roles, broker, controller or both; unset, Tarn runs one node that is both, with a quorum of itself.",
        "node.id" => "This node's id in the cluster, as broker and as controller; Tarn's default is 1.",
        "broker.id" => "The older name of node.id; when both are set they must be equal.",
        "controller.quorum.voters" => "The controller quorum's voters as id@host:port, comma-separated.",
        "controller.quorum.bootstrap.servers" => "Controller listeners (host:port, comma-separated) through which a node finds the quorum.",
        "controller.listener.names" => "Listener names the controller serves on; a broker contacts the quorum through the first.",
        "controller.quorum.election.timeout.ms" => "How long a voter waits without hearing from a leader before it starts an election.",
        "controller.quorum.fetch.timeout.ms" => "How long a follower waits without a successful fetch from the leader before it suspects it.",
        "broker.heartbeat.interval.ms" => "How often a broker sends a heartbeat to the controller.",
        "broker.session.timeout.ms" => "A broker that sends no heartbeat for this long is fenced by the controller.",
        "broker.rack" => "The rack of this broker, given to clients and used to spread replicas.",
        // Replication.
        "replica.lag.time.max.ms" => "A follower that has not caught up with the leader's log end for this long leaves the ISR.",
        "replica.fetch.max.bytes" => "The most bytes a follower asks for per partition in one fetch (a larger first batch still comes whole).",
        "replica.fetch.min.bytes" => "The least data a follower's fetch waits for before the leader answers.",
        "replica.fetch.wait.max.ms" => "How long a follower's fetch waits at the leader for replica.fetch.min.bytes; below replica.lag.time.max.ms.",
        "replica.fetch.response.max.bytes" => "The most bytes a follower asks for in one fetch response over all its partitions.",
        "replica.fetch.backoff.ms" => "How long a follower waits before fetching a partition again after an error.",
        "replica.socket.timeout.ms" => "How long a follower waits for a connection to its leader or for an answer beyond its fetch wait.",
        "replica.selector.class" => "How the leader picks a replica for a consumer to read from (KIP-392): org.apache.kafka.common.replica.RackAwareReplicaSelector sends consumers with client.rack to a replica in their rack; empty is the leader.",
        "num.replica.fetchers" => "Connections a follower keeps to each leader broker for fetching; partitions are spread over them.",
        "replica.high.watermark.checkpoint.interval.ms" => "How often each partition's high watermark is written to replication-offset-checkpoint.",
        // Listeners.
        "listeners" => "Listeners as NAME://host:port, comma-separated; an empty host is every interface (Tarn's default: PLAINTEXT://127.0.0.1:9092).",
        "advertised.listeners" => "Listeners clients are told to connect to; by default the broker listeners themselves.",
        "listener.security.protocol.map" => "Listener names and their security protocols as NAME:PROTOCOL; Tarn serves PLAINTEXT only.",
        "inter.broker.listener.name" => "The listener brokers use to reach each other; Tarn binds it as its Kafka listener.",
        "security.inter.broker.protocol" => "The security protocol between brokers when inter.broker.listener.name is not set.",
        // The Kafka listener's sockets.
        "socket.send.buffer.bytes" => "SO_SNDBUF of the Kafka listener's connections, as in Kafka (102400 by default, doubled by Linux); -1 keeps the operating system's size and its autotuning, which cost the broker one and a half to three times the CPU per fetched megabyte here and may suit consumers across a long, fast link better.",
        "socket.receive.buffer.bytes" => "SO_RCVBUF of the Kafka listener's connections (set on the listening socket, so the handshake offers a window to match), as in Kafka; -1 (Tarn's default; Kafka's is 102400) keeps the operating system's size and its autotuning.",
        // The data directory.
        "log.dir" => "The data directory when log.dirs is not set (Tarn's default: ./tarn-data).",
        "log.dirs" => "The data directory; Tarn supports one, not several (JBOD).",
        "log.retention.hours" => "Delete segments older than this many hours, when neither log.retention.ms nor log.retention.minutes is set.",
        "log.retention.minutes" => "Delete segments older than this many minutes, when log.retention.ms is not set.",
        // Accepted from Kafka's server.properties, without effect in Tarn.
        "num.network.threads" => "Accepted for Kafka compatibility and without effect: Tarn's network work runs on its async runtime.",
        "num.io.threads" => "Accepted for Kafka compatibility and without effect: Tarn's request work runs on its async runtime.",
        "num.recovery.threads.per.data.dir" => "Accepted for Kafka compatibility and without effect: Tarn recovers logs with its own threads.",
        "transaction.state.log.replication.factor" => "Accepted for Kafka compatibility and without effect: Tarn has no transaction coordinator yet.",
        "transaction.state.log.min.isr" => "Accepted for Kafka compatibility and without effect: Tarn has no transaction coordinator yet.",
        "share.coordinator.state.topic.replication.factor" => "Accepted for Kafka compatibility and without effect: Tarn has no share groups.",
        "share.coordinator.state.topic.min.isr" => "Accepted for Kafka compatibility and without effect: Tarn has no share groups.",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BROKER_CONFIGS, TOPIC_CONFIGS};

    #[test]
    fn every_key_has_documentation() {
        let keys = BROKER_CONFIGS
            .iter()
            .chain(TOPIC_CONFIGS.iter().map(|(def, _)| def))
            .map(|def| def.name);
        let undocumented: Vec<&str> = keys.filter(|k| documentation(k).is_none()).collect();
        assert!(
            undocumented.is_empty(),
            "no documentation for {undocumented:?}"
        );
    }
}
