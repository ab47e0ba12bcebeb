package dev.tarn.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.InvalidReplicaAssignmentException;
import org.apache.kafka.common.errors.NoReassignmentInProgressException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Three nodes, each a broker and a controller of one metadata quorum, on
 * fixed loopback ports: the Admin client sees three brokers and a
 * controller from every node, and the producer (acks=all) and a consumer
 * group move records through a topic whose partitions are led by all three
 * brokers, and both keep working through a partition leader's SIGKILL on a
 * topic of replication factor 3; and the Admin client moves a partition
 * onto another pair of brokers with AlterPartitionReassignments, listing it
 * in progress with ListPartitionReassignments while a paused (SIGSTOP) new
 * replica holds it there; a Kafka Connect worker keeps its source and sink
 * running through the SIGKILL of its group's coordinator. Every node still
 * running is stopped with
 * SIGTERM (exit 0 required), and any
 * panic in any node's stderr fails the test. Waits are bounds on
 * "eventually"; times are not asserted (bench/cluster.sh measures them).
 */
class ClusterTest {
    static final int NODES = 3;
    static final int PARTITIONS = 6;
    static final int RECORDS = 300;
    /** Long enough for elections, broker sessions and a slow machine. */
    static final Duration FORMED = Duration.ofSeconds(60);

    private final List<TarnBroker> nodes = new ArrayList<>();
    /** Node N's data directory is scratch/nodeN/data. */
    private Path scratch;
    private final List<String> addresses = new ArrayList<>();

    /** Ports are handed out below Linux's ephemeral range (32768 on), so no
     * outgoing connection takes one while its node is down; each JVM starts
     * at its own offset, and a port is checked free by binding it. */
    private static final int PORT_FIRST = 20_000;
    private static final int PORT_SPAN = 12_000;
    private static final java.util.concurrent.atomic.AtomicInteger HANDED_OUT =
            new java.util.concurrent.atomic.AtomicInteger();

    static int freePort() throws IOException {
        int offset = (int) ((ProcessHandle.current().pid() * 13) % PORT_SPAN);
        while (true) {
            int n = HANDED_OUT.getAndIncrement();
            if (n >= PORT_SPAN) {
                throw new IOException("ran out of ports to hand out");
            }
            int port = PORT_FIRST + (offset + n) % PORT_SPAN;
            try (ServerSocket s = new ServerSocket(port, 1, java.net.InetAddress.getLoopbackAddress())) {
                return s.getLocalPort();
            } catch (IOException inUse) {
                // Taken: try the next one.
            }
        }
    }

    @BeforeEach
    void startCluster() throws Exception {
        scratch = Files.createTempDirectory("tarn-java-ClusterTest");
        List<Integer> kafkaPorts = new ArrayList<>();
        List<Integer> controllerPorts = new ArrayList<>();
        for (int i = 0; i < NODES; i++) {
            kafkaPorts.add(freePort());
            controllerPorts.add(freePort());
        }
        List<String> voters = new ArrayList<>();
        for (int i = 0; i < NODES; i++) {
            voters.add((i + 1) + "@127.0.0.1:" + controllerPorts.get(i));
        }
        for (int i = 0; i < NODES; i++) {
            Map<String, String> settings = new HashMap<>();
            settings.put("node.id", Integer.toString(i + 1));
            settings.put("process.roles", "broker,controller");
            settings.put("controller.listener.names", "CONTROLLER");
            settings.put("controller.quorum.voters", String.join(",", voters));
            // A group of the failover test first asks for its coordinator
            // after a broker died: with Kafka's default of 3 replicas, the
            // offsets topic could not be created on the two left (as in
            // Kafka), so this cluster gives it 2.
            settings.put("offsets.topic.replication.factor", "2");
            String listeners = "PLAINTEXT://127.0.0.1:" + kafkaPorts.get(i)
                    + ",CONTROLLER://127.0.0.1:" + controllerPorts.get(i);
            nodes.add(new TarnBroker(scratch.resolve("node" + (i + 1)), settings, listeners));
            addresses.add("127.0.0.1:" + kafkaPorts.get(i));
        }
        for (TarnBroker node : nodes) {
            node.start();
        }
    }

    /**
     * Stops every node with SIGTERM, the active controller last: a node that
     * outlives its quorum waits out its controlled shutdown and an
     * unanswered heartbeat (up to 40 s) before it exits, which stop() would
     * count as a hang.
     */
    @AfterEach
    void stopCluster() throws Exception {
        List<String> panics = new ArrayList<>();
        try {
            for (TarnBroker node : nodes) {
                node.assertAlive();
            }
            int controller;
            try (Admin admin = admin(bootstrap())) {
                controller = admin.describeCluster().controller().get().id();
            }
            List<Integer> order = new ArrayList<>();
            for (int id = 1; id <= NODES; id++) {
                if (id != controller) {
                    order.add(id);
                }
            }
            order.add(controller);
            for (int id : order) {
                TarnBroker node = nodes.get(id - 1);
                if (node.running()) {
                    node.stop();
                }
            }
        } finally {
            for (TarnBroker node : nodes) {
                node.kill();
                panics.addAll(node.panics());
            }
        }
        if (!panics.isEmpty()) {
            throw new AssertionError("a node panicked: " + panics + "\n" + logs());
        }
    }

    String logs() {
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < nodes.size(); i++) {
            out.append("===== node ").append(i + 1).append(" =====\n").append(nodes.get(i).logs());
        }
        return out.toString();
    }

    Properties common(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", "30000");
        p.put("reconnect.backoff.max.ms", "200");
        p.put("retry.backoff.ms", "50");
        return p;
    }

    Admin admin(String bootstrap) {
        Properties p = common(bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(p);
    }

    String bootstrap() {
        return String.join(",", addresses);
    }

    /** Polls `step` until it returns a non-null value, failing after `limit` with the last error. */
    static <T> T eventually(String what, Duration limit, ThrowingSupplier<T> step) throws InterruptedException {
        long deadline = System.nanoTime() + limit.toNanos();
        Throwable last = null;
        while (System.nanoTime() < deadline) {
            try {
                T value = step.get();
                if (value != null) {
                    return value;
                }
            } catch (Exception e) {
                last = e;
            }
            Thread.sleep(200);
        }
        throw new AssertionError("timed out after " + limit + " waiting for " + what, last);
    }

    interface ThrowingSupplier<T> {
        T get() throws Exception;
    }

    @Test
    void producerAndConsumerGroupAcrossThreeLeaders() throws Exception {
        // Every node, asked alone, knows the three brokers and one controller.
        Set<Integer> controllers = new TreeSet<>();
        for (int i = 0; i < NODES; i++) {
            String address = addresses.get(i);
            try (Admin admin = admin(address)) {
                Node controller = eventually("node " + (i + 1) + " to see three brokers and a controller", FORMED,
                        () -> {
                            DescribeClusterResult cluster = admin.describeCluster();
                            Set<Integer> ids = cluster.nodes().get().stream().map(Node::id)
                                    .collect(Collectors.toCollection(TreeSet::new));
                            Node c = cluster.controller().get();
                            return ids.equals(Set.of(1, 2, 3)) && c != null && c.id() >= 1 ? c : null;
                        });
                assertNotNull(admin.describeCluster().clusterId().get(), "cluster id");
                controllers.add(controller.id());
            }
        }
        assertEquals(1, controllers.size(), "one controller: " + controllers);
        // The metadata quorum as the admin client describes it (DescribeQuorum,
        // forwarded to the active controller): that controller leads it.
        try (Admin admin = admin(bootstrap())) {
            QuorumInfo quorum = admin.describeMetadataQuorum().quorumInfo().get();
            assertEquals(controllers.iterator().next().intValue(), quorum.leaderId(), "quorum leader: " + quorum);
            Set<Integer> voters = quorum.voters().stream().map(QuorumInfo.ReplicaState::replicaId)
                    .collect(Collectors.toCollection(TreeSet::new));
            assertEquals(Set.of(1, 2, 3), voters, "quorum voters: " + quorum);
            assertTrue(quorum.highWatermark() > 0, "a committed metadata log: " + quorum);
        }

        String topic = Clients.unique("cluster");
        Map<Integer, Integer> leaders = new TreeMap<>();
        try (Admin admin = admin(bootstrap())) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get();
            TopicDescription description = eventually("every partition of " + topic + " led", FORMED, () -> {
                TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                boolean led = d.partitions().size() == PARTITIONS
                        && d.partitions().stream().allMatch(p -> p.leader() != null && !p.leader().isEmpty());
                return led ? d : null;
            });
            for (TopicPartitionInfo p : description.partitions()) {
                leaders.put(p.partition(), p.leader().id());
            }
        }
        assertEquals(Set.of(1, 2, 3), new TreeSet<>(leaders.values()), "leaders by partition: " + leaders);

        Properties pp = common(bootstrap());
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        Map<TopicPartition, Map<Long, String>> acked = new HashMap<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < RECORDS; i++) {
                futures.add(producer.send(new ProducerRecord<>(topic, "key-" + i, "value-" + i)));
            }
            for (int i = 0; i < RECORDS; i++) {
                RecordMetadata m = futures.get(i).get();
                String previous = acked.computeIfAbsent(new TopicPartition(topic, m.partition()), k -> new HashMap<>())
                        .put(m.offset(), "value-" + i);
                assertNull(previous, "two records acknowledged at " + m);
            }
        }
        assertEquals(PARTITIONS, acked.size(), "records on every partition: " + acked.keySet());

        String group = Clients.unique("cluster-group");
        Properties cp = common(bootstrap());
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        Map<TopicPartition, Map<Long, String>> read = new HashMap<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.nanoTime() + FORMED.toNanos();
            int count = 0;
            while (count < RECORDS) {
                assertTrue(System.nanoTime() < deadline, "read " + count + " of " + RECORDS + " within " + FORMED);
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    String previous = read.computeIfAbsent(new TopicPartition(topic, r.partition()),
                            k -> new HashMap<>()).put(r.offset(), r.value());
                    assertNull(previous, "read twice: " + r);
                    count++;
                }
            }
            consumer.commitSync();
        }
        assertEquals(acked, read, "every acknowledged record read back at its offset");

        try (Admin admin = admin(bootstrap())) {
            Map<TopicPartition, OffsetAndMetadata> committed =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            Map<TopicPartition, Long> want = new HashMap<>();
            acked.forEach((tp, offsets) -> want.put(tp, (long) offsets.size()));
            Map<TopicPartition, Long> got = new HashMap<>();
            committed.forEach((tp, om) -> got.put(tp, om.offset()));
            assertEquals(want, got, "committed offsets are the log end offsets");
        }
    }

    /**
     * The producer (acks=all, idempotent by default) and a consumer group keep
     * working through a partition leader's SIGKILL, on a topic of replication
     * factor 3 and min.insync.replicas=2: the sends after the kill are
     * retried through the election, and every acknowledged record is read
     * back once, at its acknowledged offset.
     */
    @Test
    void producerAndConsumerGroupSurviveALeadersSigkill() throws Exception {
        String topic = Clients.unique("failover");
        int victim;
        try (Admin admin = admin(bootstrap())) {
            eventually("three brokers", FORMED,
                    () -> admin.describeCluster().nodes().get().size() == NODES ? true : null);
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 3)
                    .configs(Map.of("min.insync.replicas", "2")))).all().get();
            TopicDescription description = eventually("every partition of " + topic + " led", FORMED, () -> {
                TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                boolean led = d.partitions().size() == 3
                        && d.partitions().stream().allMatch(p -> p.leader() != null && !p.leader().isEmpty()
                                && p.isr().size() == 3);
                return led ? d : null;
            });
            victim = description.partitions().get(0).leader().id();
        }

        Properties pp = common(bootstrap());
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "90000");
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        Map<TopicPartition, Map<Long, String>> acked = new HashMap<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            for (int phase = 0; phase < 2; phase++) {
                if (phase == 1) {
                    nodes.get(victim - 1).kill();
                }
                List<Future<RecordMetadata>> futures = new ArrayList<>();
                for (int i = 0; i < 100; i++) {
                    futures.add(producer.send(new ProducerRecord<>(topic, "key-" + i, "value-" + phase + "-" + i)));
                }
                for (int i = 0; i < 100; i++) {
                    RecordMetadata m = futures.get(i).get();
                    String previous = acked.computeIfAbsent(new TopicPartition(topic, m.partition()),
                            k -> new HashMap<>()).put(m.offset(), "value-" + phase + "-" + i);
                    assertNull(previous, "two records acknowledged at " + m);
                }
            }
        }

        Properties cp = common(bootstrap());
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, Clients.unique("failover-group"));
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        Map<TopicPartition, Map<Long, String>> read = new HashMap<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.nanoTime() + FORMED.toNanos();
            int count = 0;
            while (count < 200) {
                assertTrue(System.nanoTime() < deadline, "read " + count + " of 200 within " + FORMED);
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    String previous = read.computeIfAbsent(new TopicPartition(topic, r.partition()),
                            k -> new HashMap<>()).put(r.offset(), r.value());
                    assertNull(previous, "read twice: " + r);
                    count++;
                }
            }
            consumer.commitSync();
        }
        assertEquals(acked, read, "every acknowledged record read back at its offset");
    }

    /**
     * A Kafka Connect worker whose topics have three replicas goes on when
     * the broker coordinating its group (the leader of the group's
     * {@code __consumer_offsets} partition) is killed mid-stream: the
     * group's coordinator moves to the partition's other replica, and every
     * counted record reaches the sink (at least once: a failover may repeat
     * records), the connectors stay RUNNING, and the sink's consumer group
     * commits to the end of the topic.
     */
    @Test
    void connectWorkerSurvivesTheSigkillOfItsGroupCoordinator() throws Exception {
        String group = Clients.unique("connect");
        String topic = Clients.unique("counted");
        String source = Clients.unique("source");
        String sink = Clients.unique("sink");
        long count = 20_000;
        try (Admin admin = admin(bootstrap())) {
            eventually("three brokers", FORMED,
                    () -> admin.describeCluster().nodes().get().size() == NODES ? true : null);
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 3))).all().get();
        }
        var worker = ConnectTest.worker(bootstrap(), group, NODES);
        try {
            ConnectTest.rest(worker, "POST", "/connectors", Map.of("name", source, "config", Map.of(
                    "connector.class", ConnectTest.CountingSource.class.getName(),
                    "tasks.max", "1", "topic", topic, "count", Long.toString(count), "pause.ms", "20")));
            ConnectTest.rest(worker, "POST", "/connectors", Map.of("name", sink, "config", Map.of(
                    "connector.class", ConnectTest.CollectingSink.class.getName(),
                    "tasks.max", "2", "topics", topic)));
            eventually("a fifth of the records counted", FORMED, () -> {
                java.util.concurrent.atomic.AtomicLong counted = ConnectTest.COUNTED.get(source);
                return counted != null && counted.get() >= count / 5 ? true : null;
            });

            int coordinator;
            try (Admin admin = admin(bootstrap())) {
                List<TopicPartitionInfo> offsets = admin.describeTopics(List.of("__consumer_offsets"))
                        .allTopicNames().get().get("__consumer_offsets").partitions();
                int hash = group.hashCode();
                int partition = (hash == Integer.MIN_VALUE ? 0 : Math.abs(hash)) % offsets.size();
                coordinator = offsets.stream().filter(p -> p.partition() == partition).findFirst()
                        .orElseThrow().leader().id();
            }
            nodes.get(coordinator - 1).kill();
            assertTrue(ConnectTest.COUNTED.get(source).get() < count, "the kill came before the source's last record");

            eventually("every record at the sink", FORMED,
                    () -> new java.util.HashSet<>(ConnectTest.RECEIVED.get(sink))
                            .equals(ConnectTest.expectedValues(count)) ? true : null);
            eventually("both connectors running", FORMED, () -> ConnectTest.runningOn(worker, source, sink));
            // A new Admin each time: one that met the killed broker may wait
            // on it until its call times out.
            Map<TopicPartition, Long> ends = eventually("the topic's end offsets", FORMED, () -> {
                Admin admin = admin(bootstrap());
                try {
                    Map<TopicPartition, org.apache.kafka.clients.admin.OffsetSpec> latest = new HashMap<>();
                    for (int p = 0; p < 3; p++) {
                        latest.put(new TopicPartition(topic, p), org.apache.kafka.clients.admin.OffsetSpec.latest());
                    }
                    Map<TopicPartition, Long> found = new HashMap<>();
                    admin.listOffsets(latest).all().get(5, java.util.concurrent.TimeUnit.SECONDS)
                            .forEach((tp, info) -> found.put(tp, info.offset()));
                    return found;
                } finally {
                    admin.close(Duration.ofSeconds(1));
                }
            });
            assertTrue(ends.values().stream().mapToLong(Long::longValue).sum() >= count,
                    "the topic holds every count: " + ends);
            eventually("the sink's offsets committed to the end", FORMED, () -> {
                Admin admin = admin(bootstrap());
                try {
                    return ConnectTest.committedTo(admin, "connect-" + sink, ends) ? true : null;
                } finally {
                    admin.close(Duration.ofSeconds(1));
                }
            });
        } finally {
            worker.stop();
            worker.awaitStop();
        }
    }

    /**
     * The operating-system process of node {@code id}: the child of this JVM
     * whose arguments name its data directory (TarnBroker keeps its Process
     * to itself).
     */
    ProcessHandle process(int id) {
        String dataDir = scratch.resolve("node" + id).resolve("data").toString();
        List<ProcessHandle> found = ProcessHandle.current().children()
                .filter(p -> p.info().arguments().map(args -> List.of(args).contains(dataDir)).orElse(false))
                .collect(Collectors.toList());
        assertEquals(1, found.size(), "the process of node " + id + " among " + found);
        return found.get(0);
    }

    static void signal(ProcessHandle process, String signal) throws Exception {
        Process kill = new ProcessBuilder("kill", "-" + signal, Long.toString(process.pid())).inheritIO().start();
        assertEquals(0, kill.waitFor(), "kill -" + signal + " " + process.pid());
    }

    static TopicPartitionInfo partitionZero(Admin admin, String topic) throws Exception {
        return admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().get(0);
    }

    static List<Integer> ids(List<Node> nodes) {
        return nodes.stream().map(Node::id).collect(Collectors.toList());
    }

    /**
     * AlterPartitionReassignments and ListPartitionReassignments through the
     * Admin client: a partition of replication factor 2 moves onto another
     * pair of brokers. A new replica paused (SIGSTOP) before the move starts
     * holds it in progress, so it is listed, with its adding and removing
     * replicas, for certain; resumed, the move completes, and the partition
     * is described with the target replicas and ISR, every record produced
     * before it read back. A cancel with nothing to cancel and a target
     * naming an unknown broker are refused with Kafka's exceptions, and
     * change nothing.
     */
    @Test
    void adminClientReassignsAPartitionOntoAnotherPairOfBrokers() throws Exception {
        String topic = Clients.unique("reassigned");
        TopicPartition tp = new TopicPartition(topic, 0);
        int kept;
        int removed;
        int added;
        try (Admin admin = admin(bootstrap())) {
            int controller = eventually("three brokers and a controller", FORMED, () -> {
                DescribeClusterResult cluster = admin.describeCluster();
                Node c = cluster.controller().get();
                return cluster.nodes().get().size() == NODES && c != null && c.id() >= 1 ? c.id() : null;
            });
            // The active controller keeps its replica (and the leadership);
            // the new replica, the one paused, is another broker, so the
            // quorum keeps committing.
            kept = controller;
            removed = controller % NODES + 1;
            added = removed % NODES + 1;
            admin.createTopics(List.of(new NewTopic(topic, Map.of(0, List.of(kept, removed)))))
                    .all().get();
            eventually(tp + " led by " + kept + " with two in-sync replicas", FORMED, () -> {
                TopicPartitionInfo p = partitionZero(admin, topic);
                return p.leader() != null && p.leader().id() == kept && p.isr().size() == 2 ? p : null;
            });
        }

        Properties pp = common(bootstrap());
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        Map<Long, String> acked = new TreeMap<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < 100; i++) {
                futures.add(producer.send(new ProducerRecord<>(topic, "key-" + i, "value-" + i)));
            }
            for (int i = 0; i < 100; i++) {
                assertNull(acked.put(futures.get(i).get().offset(), "value-" + i), "two records at one offset");
            }
        }

        String live = addresses.get(kept - 1) + "," + addresses.get(removed - 1);
        try (Admin admin = admin(live)) {
            ProcessHandle paused = process(added);
            signal(paused, "STOP");
            try {
                admin.alterPartitionReassignments(
                        Map.of(tp, Optional.of(new NewPartitionReassignment(List.of(added, kept))))).all().get();
                Map<TopicPartition, PartitionReassignment> listed =
                        admin.listPartitionReassignments().reassignments().get();
                PartitionReassignment ongoing = listed.get(tp);
                assertNotNull(ongoing, "in progress while the new replica is paused: " + listed);
                assertEquals(List.of(added, kept, removed), ongoing.replicas(), "replicas: " + ongoing);
                assertEquals(List.of(added), ongoing.addingReplicas(), "adding: " + ongoing);
                assertEquals(List.of(removed), ongoing.removingReplicas(), "removing: " + ongoing);
                Map<TopicPartition, PartitionReassignment> named =
                        admin.listPartitionReassignments(Set.of(tp)).reassignments().get();
                assertEquals(Set.of(tp), named.keySet(), "listed by name: " + named);
                assertEquals(ongoing.replicas(), named.get(tp).replicas(), "listed by name: " + named);
                // The metadata names the adding replica too, and the ISR
                // stays the old one until the new replica catches up.
                TopicPartitionInfo during = eventually(tp + " described with the adding replica", FORMED, () -> {
                    TopicPartitionInfo p = partitionZero(admin, topic);
                    return ids(p.replicas()).equals(List.of(added, kept, removed)) ? p : null;
                });
                assertEquals(Set.of(kept, removed), new TreeSet<>(ids(during.isr())), "ISR while paused: " + during);
            } finally {
                signal(paused, "CONT");
            }
        }

        try (Admin admin = admin(bootstrap())) {
            TopicPartitionInfo moved = eventually(tp + " on brokers " + added + "," + kept, FORMED, () -> {
                TopicPartitionInfo p = partitionZero(admin, topic);
                boolean done = ids(p.replicas()).equals(List.of(added, kept))
                        && new TreeSet<>(ids(p.isr())).equals(new TreeSet<>(List.of(added, kept)));
                return done ? p : null;
            });
            assertEquals(kept, moved.leader().id(), "the leader was not moved: " + moved);
            Map<TopicPartition, PartitionReassignment> left =
                    admin.listPartitionReassignments().reassignments().get();
            assertTrue(left.isEmpty(), "nothing in progress once completed: " + left);

            ExecutionException nothing = assertThrows(ExecutionException.class, () -> admin
                    .alterPartitionReassignments(Map.of(tp, Optional.empty())).values().get(tp).get());
            assertTrue(nothing.getCause() instanceof NoReassignmentInProgressException,
                    "a cancel with nothing in progress: " + nothing.getCause());
            ExecutionException unknown = assertThrows(ExecutionException.class, () -> admin
                    .alterPartitionReassignments(Map.of(tp, Optional.of(new NewPartitionReassignment(List.of(99, kept)))))
                    .values().get(tp).get());
            assertTrue(unknown.getCause() instanceof InvalidReplicaAssignmentException,
                    "a target naming broker 99: " + unknown.getCause());
            TopicPartitionInfo after = partitionZero(admin, topic);
            assertEquals(List.of(added, kept), ids(after.replicas()), "the refusals changed nothing: " + after);
            assertTrue(admin.listPartitionReassignments().reassignments().get().isEmpty(), "nothing started");
        }

        Properties cp = common(bootstrap());
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        Map<Long, String> read = new TreeMap<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long deadline = System.nanoTime() + FORMED.toNanos();
            while (read.size() < acked.size()) {
                assertTrue(System.nanoTime() < deadline, "read " + read.size() + " of " + acked.size());
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    assertNull(read.put(r.offset(), r.value()), "read twice: " + r);
                }
            }
        }
        assertEquals(acked, read, "every acknowledged record read back at its offset after the move");
    }
}
