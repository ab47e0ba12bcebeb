package dev.tarn.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The consumer: groups with each assignor, commits, seeks, pauses, static members. */
@ExtendWith(TarnExtension.class)
@TarnSettings({"group.initial.rebalance.delay.ms=0"})
class ConsumerTest {
    static final int PARTITIONS = 4;

    /** Records what a rebalance listener is told, in order. */
    static class Listener implements ConsumerRebalanceListener {
        final List<String> events = new CopyOnWriteArrayList<>();
        final Set<TopicPartition> owned = new HashSet<>();
        final List<TopicPartition> revoked = new CopyOnWriteArrayList<>();

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            events.add("revoked " + partitions);
            revoked.addAll(partitions);
            owned.removeAll(partitions);
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            events.add("assigned " + partitions);
            owned.addAll(partitions);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            events.add("lost " + partitions);
            owned.removeAll(partitions);
        }
    }

    static List<TopicPartition> partitions(String topic, int n) {
        List<TopicPartition> out = new ArrayList<>();
        for (int p = 0; p < n; p++) {
            out.add(new TopicPartition(topic, p));
        }
        return out;
    }

    /** Produces `count` records spread over every partition; returns the acks per partition. */
    static Map<TopicPartition, Integer> produce(TarnBroker broker, String topic, int partitions, int count)
            throws Exception {
        Map<TopicPartition, Integer> perPartition = new HashMap<>();
        try (KafkaProducer<String, String> producer = Clients.producer(broker, Map.of())) {
            for (int i = 0; i < count; i++) {
                int p = i % partitions;
                producer.send(new ProducerRecord<>(topic, p, "k" + i, "v" + i)).get();
                perPartition.merge(new TopicPartition(topic, p), 1, Integer::sum);
            }
        }
        return perPartition;
    }

    @ParameterizedTest
    @ValueSource(strings = {"range", "roundrobin", "sticky", "cooperative-sticky"})
    void twoMembersSplitThePartitionsWithEachAssignor(String name, TarnBroker broker) throws Exception {
        String assignor = switch (name) {
            case "range" -> "org.apache.kafka.clients.consumer.RangeAssignor";
            case "roundrobin" -> "org.apache.kafka.clients.consumer.RoundRobinAssignor";
            case "sticky" -> "org.apache.kafka.clients.consumer.StickyAssignor";
            default -> "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
        };
        String topic = Clients.unique("assign-" + name);
        String group = Clients.unique("group-" + name);
        Clients.createTopic(broker, topic, PARTITIONS);
        int total = 40;
        produce(broker, topic, PARTITIONS, total);
        Map<String, String> config = Map.of("group.id", group, "partition.assignment.strategy", assignor);
        Listener l1 = new Listener();
        Listener l2 = new Listener();
        List<ConsumerRecord<String, String>> seen = new ArrayList<>();
        try (KafkaConsumer<String, String> c1 = Clients.consumer(broker, config);
             KafkaConsumer<String, String> c2 = Clients.consumer(broker, config)) {
            c1.subscribe(List.of(topic), l1);
            Clients.until("the first member owns every partition",
                    () -> c1.poll(Duration.ofMillis(100)).forEach(seen::add),
                    () -> l1.owned.size() == PARTITIONS);
            seen.clear();
            int revokedBefore = l1.revoked.size();
            c2.subscribe(List.of(topic), l2);
            Clients.until("both members own two partitions each", () -> {
                c1.poll(Duration.ofMillis(50));
                c2.poll(Duration.ofMillis(50));
            }, () -> l1.owned.size() == 2 && l2.owned.size() == 2
                    && c1.assignment().size() == 2 && c2.assignment().size() == 2);
            Set<TopicPartition> union = new HashSet<>(l1.owned);
            union.addAll(l2.owned);
            assertEquals(new HashSet<>(partitions(topic, PARTITIONS)), union, l1.events + " / " + l2.events);
            if (name.equals("cooperative-sticky")) {
                // Incremental: the first member gives up only the two partitions
                // that moved, and is never told it lost all four.
                List<TopicPartition> revoked = l1.revoked.subList(revokedBefore, l1.revoked.size());
                assertEquals(2, revoked.size(), "revoked " + l1.events);
                for (TopicPartition tp : revoked) {
                    assertTrue(l2.owned.contains(tp), "revoked " + tp + " went to the other member");
                }
            } else {
                assertEquals(PARTITIONS, l1.revoked.size() - revokedBefore, "eager revokes all: " + l1.events);
            }
        }
    }

    @Test
    void aLeavingMemberHandsItsPartitionsOverAndCommitsOnRevoke(TarnBroker broker) throws Exception {
        String topic = Clients.unique("leave");
        String group = Clients.unique("leave-group");
        Clients.createTopic(broker, topic, PARTITIONS);
        produce(broker, topic, PARTITIONS, 8);
        Map<String, String> config = Map.of("group.id", group,
                "partition.assignment.strategy", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");
        Listener l1 = new Listener();
        try (KafkaConsumer<String, String> c1 = Clients.consumer(broker, config)) {
            c1.subscribe(List.of(topic), l1);
            Set<TopicPartition> leaverOwned;
            KafkaConsumer<String, String> c2 = Clients.consumer(broker, config);
            try {
                // The leaver commits what it read when its partitions are revoked.
                Listener l2 = new Listener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                        super.onPartitionsRevoked(partitions);
                        c2.commitSync();
                    }
                };
                c2.subscribe(List.of(topic), l2);
                List<ConsumerRecord<String, String>> read2 = new ArrayList<>();
                Clients.until("both members own two partitions and the second read its records", () -> {
                    c1.poll(Duration.ofMillis(50));
                    c2.poll(Duration.ofMillis(50)).forEach(read2::add);
                }, () -> l1.owned.size() == 2 && l2.owned.size() == 2 && read2.size() == 4);
                leaverOwned = new HashSet<>(l2.owned);
            } finally {
                // close() revokes (committing in the listener) and leaves the group.
                c2.close(Duration.ofSeconds(10));
            }
            Clients.until("the remaining member owns every partition", () -> c1.poll(Duration.ofMillis(50)),
                    () -> l1.owned.size() == PARTITIONS);
            Map<TopicPartition, OffsetAndMetadata> committed = c1.committed(leaverOwned);
            for (TopicPartition tp : leaverOwned) {
                assertEquals(2, committed.get(tp).offset(), "committed on revoke for " + tp);
            }
        }
    }

    @Test
    void commitSyncAndAsyncAreReadBackAndResumedFrom(TarnBroker broker) throws Exception {
        String topic = Clients.unique("commit");
        String group = Clients.unique("commit-group");
        Clients.createTopic(broker, topic, 2);
        produce(broker, topic, 2, 20);
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        Map<String, String> config = Map.of("group.id", group);
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, config)) {
            c.subscribe(List.of(topic));
            Clients.pollCount(c, 20);
            c.commitSync(Map.of(p0, new OffsetAndMetadata(4, "sync-meta")));
            AtomicReference<Object> done = new AtomicReference<>();
            c.commitAsync(Map.of(p1, new OffsetAndMetadata(7, "async-meta")),
                    (offsets, e) -> done.set(e == null ? offsets : e));
            Clients.until("the async commit's callback", () -> c.poll(Duration.ofMillis(50)),
                    () -> done.get() != null);
            assertTrue(done.get() instanceof Map, "async commit: " + done.get());
            Map<TopicPartition, OffsetAndMetadata> committed = c.committed(Set.of(p0, p1));
            assertEquals(4, committed.get(p0).offset());
            assertEquals("sync-meta", committed.get(p0).metadata());
            assertEquals(7, committed.get(p1).offset());
            assertEquals("async-meta", committed.get(p1).metadata());
        }
        // A new member resumes from the commits: 10-4 + 10-7 records.
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, config)) {
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = Clients.pollCount(c, 9);
            long fromP0 = got.stream().filter(r -> r.partition() == 0).mapToLong(ConsumerRecord::offset).min()
                    .orElseThrow();
            long fromP1 = got.stream().filter(r -> r.partition() == 1).mapToLong(ConsumerRecord::offset).min()
                    .orElseThrow();
            assertEquals(4, fromP0);
            assertEquals(7, fromP1);
        }
    }

    @Test
    void seekOffsetsForTimesAndPauseResume(TarnBroker broker) throws Exception {
        String topic = Clients.unique("seek");
        Clients.createTopic(broker, topic, 2);
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        long base = 1_700_000_000_000L;
        try (KafkaProducer<String, String> producer = Clients.producer(broker, Map.of())) {
            for (int i = 0; i < 10; i++) {
                producer.send(new ProducerRecord<>(topic, 0, base + i * 1000L, "k", "p0-" + i)).get();
                producer.send(new ProducerRecord<>(topic, 1, base + i * 1000L, "k", "p1-" + i)).get();
            }
        }
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, Map.of())) {
            c.assign(List.of(p0, p1));
            Map<TopicPartition, OffsetAndTimestamp> times =
                    c.offsetsForTimes(Map.of(p0, base + 3500L, p1, base + 9000L));
            assertEquals(4, times.get(p0).offset());
            assertEquals(base + 4000L, times.get(p0).timestamp());
            assertEquals(9, times.get(p1).offset());
            assertNull(c.offsetsForTimes(Map.of(p0, base + 99_000L)).get(p0), "past the last record");
            assertEquals(Map.of(p0, 0L), c.beginningOffsets(List.of(p0)));
            assertEquals(Map.of(p0, 10L), c.endOffsets(List.of(p0)));

            c.seek(p0, 6);
            c.seek(p1, 8);
            List<ConsumerRecord<String, String>> got = Clients.pollCount(c, 4 + 2);
            assertEquals(List.of("p0-6", "p0-7", "p0-8", "p0-9"),
                    got.stream().filter(r -> r.partition() == 0).map(ConsumerRecord::value).toList());
            assertEquals(List.of("p1-8", "p1-9"),
                    got.stream().filter(r -> r.partition() == 1).map(ConsumerRecord::value).toList());

            // Paused, p0 yields nothing while p1 keeps flowing.
            c.seek(p0, 0);
            c.seek(p1, 0);
            c.pause(List.of(p0));
            assertEquals(Set.of(p0), c.paused());
            List<ConsumerRecord<String, String>> unpaused = Clients.pollCount(c, 10);
            assertTrue(unpaused.stream().allMatch(r -> r.partition() == 1), "records from a paused partition");
            assertEquals(0, c.poll(Duration.ofMillis(200)).count());
            c.resume(List.of(p0));
            List<ConsumerRecord<String, String>> resumed = Clients.pollCount(c, 10);
            assertTrue(resumed.stream().allMatch(r -> r.partition() == 0));
            assertEquals(0, resumed.get(0).offset());
        }
    }

    @Test
    void staticMemberRejoinsWithItsPartitionsAndNoRebalance(TarnBroker broker) throws Exception {
        String topic = Clients.unique("static");
        String group = Clients.unique("static-group");
        Clients.createTopic(broker, topic, PARTITIONS);
        Map<String, String> a = Map.of("group.id", group, "group.instance.id", "member-a");
        Map<String, String> b = Map.of("group.id", group, "group.instance.id", "member-b");
        Listener la = new Listener();
        Listener lb = new Listener();
        Set<TopicPartition> ownedByB;
        try (KafkaConsumer<String, String> ca = Clients.consumer(broker, a)) {
            ca.subscribe(List.of(topic), la);
            try (KafkaConsumer<String, String> cb = Clients.consumer(broker, b)) {
                cb.subscribe(List.of(topic), lb);
                Clients.until("both static members own two partitions", () -> {
                    ca.poll(Duration.ofMillis(50));
                    cb.poll(Duration.ofMillis(50));
                }, () -> la.owned.size() == 2 && lb.owned.size() == 2);
                ownedByB = new HashSet<>(lb.owned);
            }
            // A static member's close sends no LeaveGroup: within the session
            // timeout the same instance id takes its place with the same
            // partitions, and member A keeps its own without a rebalance.
            int eventsA = la.events.size();
            Listener lb2 = new Listener();
            try (KafkaConsumer<String, String> cb = Clients.consumer(broker, b)) {
                cb.subscribe(List.of(topic), lb2);
                Clients.until("the restarted static member owns its partitions", () -> {
                    ca.poll(Duration.ofMillis(50));
                    cb.poll(Duration.ofMillis(50));
                }, () -> lb2.owned.size() == 2);
                assertEquals(ownedByB, lb2.owned);
                ca.poll(Duration.ofMillis(100));
                assertEquals(eventsA, la.events.size(), "member A rebalanced: " + la.events);
            }
        }
    }

    @Test
    void manyPartitionsAreConsumedThroughOneFetchSession(TarnBroker broker) throws Exception {
        // The consumer fetches every partition of this topic from one
        // broker, so its fetches after the first are incremental (KIP-227)
        // when the broker grants a session.
        String topic = Clients.unique("session");
        int partitions = 12;
        Clients.createTopic(broker, topic, partitions);
        Map<TopicPartition, Integer> first = produce(broker, topic, partitions, 36);
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, Map.of())) {
            c.assign(partitions(topic, partitions));
            List<ConsumerRecord<String, String>> got = Clients.pollCount(c, 36);
            Map<TopicPartition, Integer> counts = new HashMap<>();
            got.forEach(r -> counts.merge(new TopicPartition(r.topic(), r.partition()), 1, Integer::sum));
            assertEquals(first, counts);
            // Later appends reach the consumer through the same session.
            produce(broker, topic, partitions, 24);
            List<ConsumerRecord<String, String>> more = Clients.pollCount(c, 24);
            for (ConsumerRecord<String, String> r : more) {
                assertTrue(r.offset() >= 3, "re-read an old record " + r);
            }
            // Pausing drops partitions from the session; resuming adds them back.
            c.pause(partitions(topic, 6));
            produce(broker, topic, partitions, 12);
            List<ConsumerRecord<String, String>> partial = Clients.pollCount(c, 6);
            assertTrue(partial.stream().allMatch(r -> r.partition() >= 6));
            c.resume(partitions(topic, 6));
            List<ConsumerRecord<String, String>> rest = Clients.pollCount(c, 6);
            assertTrue(rest.stream().allMatch(r -> r.partition() < 6));
            assertTrue(Metrics.value(broker, "tarn_fetch_sessions") >= 1, "no fetch session was created");
        }
    }
}
