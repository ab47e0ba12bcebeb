package dev.tarn.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.connect.cli.ConnectDistributed;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.runtime.Connect;
import org.apache.kafka.connect.sink.SinkConnector;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.sink.SinkTask;
import org.apache.kafka.connect.source.SourceConnector;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.source.SourceTask;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Kafka Connect in distributed mode: two workers in one group (the
 * "connect" group protocol, incremental cooperative assignment) keep their
 * configs, source offsets and statuses in compacted topics they create
 * through the Admin API, and run a source connector and a sink connector
 * of this test's own (Connect's file connectors are not served by the
 * Maven mirror here). When one worker stops, the other takes its tasks;
 * a source task restarted there resumes from the offset it committed to
 * the offsets topic, so the topic holds every counted record exactly once,
 * and the sink's consumer group commits up to the topic's end.
 */
@ExtendWith(TarnExtension.class)
@TarnSettings({"group.initial.rebalance.delay.ms=0"})
class ConnectTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final HttpClient HTTP = HttpClient.newHttpClient();

    /** Where each source task started counting, by connector name. */
    static final Map<String, List<Long>> STARTS = new ConcurrentHashMap<>();
    /** How far each source connector has counted, by connector name. */
    static final Map<String, java.util.concurrent.atomic.AtomicLong> COUNTED = new ConcurrentHashMap<>();
    /** Every value each sink connector was handed, by connector name. */
    static final Map<String, Collection<String>> RECEIVED = new ConcurrentHashMap<>();

    /** Counts from where its last committed offset left off up to `count`. */
    public static class CountingSource extends SourceConnector {
        private Map<String, String> props;

        @Override
        public void start(Map<String, String> props) {
            this.props = props;
        }

        @Override
        public Class<? extends Task> taskClass() {
            return CountingTask.class;
        }

        @Override
        public List<Map<String, String>> taskConfigs(int maxTasks) {
            return List.of(props);
        }

        @Override
        public void stop() {
        }

        @Override
        public ConfigDef config() {
            return new ConfigDef()
                    .define("topic", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "where the counts go")
                    .define("count", ConfigDef.Type.LONG, ConfigDef.Importance.HIGH, "how far to count")
                    .define("pause.ms", ConfigDef.Type.LONG, 0L, ConfigDef.Importance.LOW,
                            "how long to wait before each hundred");
        }

        @Override
        public String version() {
            return "1";
        }
    }

    public static class CountingTask extends SourceTask {
        static final Map<String, String> PARTITION = Map.of("source", "counter");
        private String topic;
        private long count;
        private long pauseMs;
        private long next;
        private java.util.concurrent.atomic.AtomicLong counted;

        @Override
        public String version() {
            return "1";
        }

        @Override
        public void start(Map<String, String> props) {
            topic = props.get("topic");
            count = Long.parseLong(props.get("count"));
            pauseMs = Long.parseLong(props.getOrDefault("pause.ms", "0"));
            Map<String, Object> offset = context.offsetStorageReader().offset(PARTITION);
            next = offset == null ? 0 : ((Number) offset.get("n")).longValue() + 1;
            STARTS.computeIfAbsent(props.get("name"), k -> new CopyOnWriteArrayList<>()).add(next);
            counted = COUNTED.computeIfAbsent(props.get("name"), k -> new java.util.concurrent.atomic.AtomicLong());
        }

        @Override
        public List<SourceRecord> poll() throws InterruptedException {
            if (next >= count) {
                Thread.sleep(50);
                return null;
            }
            if (pauseMs > 0) {
                Thread.sleep(pauseMs);
            }
            List<SourceRecord> out = new ArrayList<>();
            for (int i = 0; i < 100 && next < count; i++, next++) {
                out.add(new SourceRecord(PARTITION, Map.of("n", next), topic, null,
                        Schema.STRING_SCHEMA, "k" + (next % 7), Schema.STRING_SCHEMA, "v" + next));
            }
            counted.set(next);
            return out;
        }

        @Override
        public void stop() {
        }
    }

    /** Hands every value it is given to {@link #RECEIVED}. */
    public static class CollectingSink extends SinkConnector {
        private Map<String, String> props;

        @Override
        public void start(Map<String, String> props) {
            this.props = props;
        }

        @Override
        public Class<? extends Task> taskClass() {
            return CollectingTask.class;
        }

        @Override
        public List<Map<String, String>> taskConfigs(int maxTasks) {
            List<Map<String, String>> configs = new ArrayList<>();
            for (int i = 0; i < maxTasks; i++) {
                configs.add(props);
            }
            return configs;
        }

        @Override
        public void stop() {
        }

        @Override
        public ConfigDef config() {
            return new ConfigDef();
        }

        @Override
        public String version() {
            return "1";
        }
    }

    public static class CollectingTask extends SinkTask {
        private Collection<String> received;

        @Override
        public String version() {
            return "1";
        }

        @Override
        public void start(Map<String, String> props) {
            received = RECEIVED.computeIfAbsent(props.get("name"), k -> new CopyOnWriteArrayList<>());
        }

        @Override
        public void put(Collection<SinkRecord> records) {
            for (SinkRecord r : records) {
                received.add((String) r.value());
            }
        }

        @Override
        public void stop() {
        }
    }

    static Connect<?> worker(TarnBroker broker, String group) {
        return worker(broker.bootstrap(), group, 1);
    }

    /** A worker of `group` whose three topics get `replicas` replicas each. */
    static Connect<?> worker(String bootstrap, String group, int replicas) {
        Map<String, String> p = new HashMap<>();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("key.converter", "org.apache.kafka.connect.storage.StringConverter");
        p.put("value.converter", "org.apache.kafka.connect.storage.StringConverter");
        p.put("offset.storage.topic", group + "-offsets");
        p.put("config.storage.topic", group + "-configs");
        p.put("status.storage.topic", group + "-status");
        p.put("offset.storage.replication.factor", Integer.toString(replicas));
        p.put("config.storage.replication.factor", Integer.toString(replicas));
        p.put("status.storage.replication.factor", Integer.toString(replicas));
        p.put("offset.flush.interval.ms", "200");
        p.put("listeners", "http://127.0.0.1:0");
        // The connectors above are listed in META-INF/services.
        p.put("plugin.discovery", "service_load");
        // A departed worker's tasks go to the others at once.
        p.put("scheduled.rebalance.max.delay.ms", "0");
        p.put("heartbeat.interval.ms", "500");
        p.put("session.timeout.ms", "6000");
        return new ConnectDistributed().startConnect(p);
    }

    static JsonNode rest(Connect<?> worker, String method, String path, Object body) throws Exception {
        URI uri = worker.rest().serverUrl().resolve(path);
        HttpRequest.Builder request = HttpRequest.newBuilder(uri)
                .timeout(Duration.ofSeconds(20))
                .header("Content-Type", "application/json");
        request.method(method, body == null
                ? HttpRequest.BodyPublishers.noBody()
                : HttpRequest.BodyPublishers.ofString(JSON.writeValueAsString(body)));
        HttpResponse<String> response = HTTP.send(request.build(), HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() / 100 != 2) {
            throw new IllegalStateException(method + " " + path + ": " + response.statusCode() + " " + response.body());
        }
        return JSON.readTree(response.body());
    }

    /** The worker ids running `connector` and each of its `tasks` tasks, once all run. */
    static Set<String> running(Connect<?> worker, String connector, int tasks) throws Exception {
        JsonNode status = rest(worker, "GET", "/connectors/" + connector + "/status", null);
        Set<String> workers = new HashSet<>();
        if (!"RUNNING".equals(status.path("connector").path("state").asText())) {
            return null;
        }
        workers.add(status.path("connector").path("worker_id").asText());
        JsonNode list = status.path("tasks");
        if (list.size() != tasks) {
            return null;
        }
        for (JsonNode task : list) {
            if (!"RUNNING".equals(task.path("state").asText())) {
                if ("FAILED".equals(task.path("state").asText())) {
                    throw new AssertionError(connector + " task failed: " + task.path("trace").asText());
                }
                return null;
            }
            workers.add(task.path("worker_id").asText());
        }
        return workers;
    }

    /** Whether `group` has committed exactly `ends` for every partition in it. */
    static boolean committedTo(Admin admin, String group, Map<TopicPartition, Long> ends) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        for (Map.Entry<TopicPartition, Long> end : ends.entrySet()) {
            OffsetAndMetadata c = committed.get(end.getKey());
            if (c == null || c.offset() != end.getValue()) {
                return false;
            }
        }
        return true;
    }

    /** The workers running the source (one task) and the sink (two tasks), once all run. */
    static Set<String> runningOn(Connect<?> worker, String source, String sink) throws Exception {
        Set<String> s = running(worker, source, 1);
        Set<String> k = running(worker, sink, 2);
        if (s == null || k == null) {
            return null;
        }
        Set<String> all = new HashSet<>(s);
        all.addAll(k);
        return all;
    }

    static Set<String> expectedValues(long count) {
        Set<String> values = new HashSet<>();
        for (long n = 0; n < count; n++) {
            values.add("v" + n);
        }
        return values;
    }

    @Test
    void twoWorkersRunASourceAndASinkAndHandTheirTasksOver(TarnBroker broker) throws Exception {
        String group = Clients.unique("connect");
        String topic = Clients.unique("counted");
        String source = Clients.unique("source");
        String sink = Clients.unique("sink");
        Connect<?> first = worker(broker, group);
        Connect<?> second = null;
        try {
            second = worker(broker, group);
            rest(first, "POST", "/connectors", Map.of("name", source, "config", Map.of(
                    "connector.class", CountingSource.class.getName(),
                    "tasks.max", "1", "topic", topic, "count", "2000")));
            // Sent to the other worker, which forwards it when it does not lead the group.
            Connect<?> other = second;
            rest(other, "POST", "/connectors", Map.of("name", sink, "config", Map.of(
                    "connector.class", CollectingSink.class.getName(),
                    "tasks.max", "2", "topics", topic)));

            // Two connectors and three tasks, spread over both workers (a
            // worker that joined late gets its share in a later round).
            ClusterTest.eventually("both connectors running on both workers", Clients.WAIT, () -> {
                Set<String> all = runningOn(other, source, sink);
                return all != null && all.size() == 2 ? all : null;
            });
            ClusterTest.eventually("the sink received all 2000 records", Clients.WAIT,
                    () -> new HashSet<>(RECEIVED.getOrDefault(sink, List.of())).equals(expectedValues(2000))
                            ? true : null);
            // The source's last offset reached the offsets topic: a task
            // started from it now must go on from 2000.
            try (KafkaConsumer<String, String> consumer = Clients.consumer(broker, Map.of())) {
                List<TopicPartition> partitions = new ArrayList<>();
                for (int p = 0; p < 25; p++) {
                    partitions.add(new TopicPartition(group + "-offsets", p));
                }
                consumer.assign(partitions);
                consumer.seekToBeginning(partitions);
                List<String> seen = new ArrayList<>();
                Clients.until("the source offset {\"n\":1999} in " + group + "-offsets", () -> {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) {
                        seen.add(r.value());
                    }
                }, () -> seen.contains("{\"n\":1999}"));
            }

            // One worker leaves; the other runs everything, and the source,
            // reconfigured to count further, restarts from its offset.
            first.stop();
            first.awaitStop();
            first = null;
            // Until the group has rebalanced, the worker left may forward
            // the change to the leader that left.
            ClusterTest.eventually("the source reconfigured", Clients.WAIT, () -> rest(other, "PUT",
                    "/connectors/" + source + "/config", Map.of(
                            "connector.class", CountingSource.class.getName(),
                            "tasks.max", "1", "topic", topic, "count", "4000")));
            ClusterTest.eventually("the sink received all 4000 records", Clients.WAIT,
                    () -> new HashSet<>(RECEIVED.getOrDefault(sink, List.of())).equals(expectedValues(4000))
                            ? true : null);
            ClusterTest.eventually("everything running on the worker left", Clients.WAIT, () -> {
                Set<String> all = runningOn(other, source, sink);
                return all != null && all.size() == 1 ? all : null;
            });
            List<Long> starts = STARTS.get(source);
            assertEquals(0L, starts.get(0), "the first task counts from 0: " + starts);
            assertEquals(2000L, starts.get(starts.size() - 1),
                    "the last task resumes from the committed offset: " + starts);

            try (Admin admin = Clients.admin(broker)) {
                // Every count is in the topic exactly once.
                Map<TopicPartition, Long> ends = new TreeMap<>(java.util.Comparator.comparing(TopicPartition::toString));
                TopicDescription described = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
                described.partitions().forEach(p -> latest.put(new TopicPartition(topic, p.partition()), OffsetSpec.latest()));
                admin.listOffsets(latest).all().get().forEach((tp, info) -> ends.put(tp, info.offset()));
                assertEquals(4000L, ends.values().stream().mapToLong(Long::longValue).sum(),
                        "the topic holds each count once: " + ends);
                try (KafkaConsumer<String, String> consumer = Clients.consumer(broker, Map.of())) {
                    consumer.assign(ends.keySet());
                    consumer.seekToBeginning(ends.keySet());
                    Set<String> values = new HashSet<>();
                    for (ConsumerRecord<String, String> r : Clients.pollCount(consumer, 4000)) {
                        assertTrue(values.add(r.value()), "read twice: " + r.value());
                    }
                    assertEquals(expectedValues(4000), values);
                }
                // The sink's group commits up to the end.
                ClusterTest.eventually("the sink's offsets committed to the end", Clients.WAIT,
                        () -> committedTo(admin, "connect-" + sink, ends) ? true : null);
                // The workers made their topics compacted, with Connect's
                // default partition counts.
                Map<String, Integer> internal = Map.of(
                        group + "-offsets", 25, group + "-configs", 1, group + "-status", 5);
                Map<String, TopicDescription> topics = admin.describeTopics(internal.keySet()).allTopicNames().get();
                List<ConfigResource> resources = new ArrayList<>();
                for (Map.Entry<String, Integer> t : internal.entrySet()) {
                    assertEquals(t.getValue(), topics.get(t.getKey()).partitions().size(), t.getKey());
                    resources.add(new ConfigResource(ConfigResource.Type.TOPIC, t.getKey()));
                }
                Map<ConfigResource, Config> configs = admin.describeConfigs(resources).all().get();
                for (ConfigResource r : resources) {
                    assertEquals("compact", configs.get(r).get("cleanup.policy").value(), r.name());
                }
            }
        } finally {
            if (first != null) {
                first.stop();
                first.awaitStop();
            }
            if (second != null) {
                second.stop();
                second.awaitStop();
            }
        }
        broker.assertAlive();
    }
}
