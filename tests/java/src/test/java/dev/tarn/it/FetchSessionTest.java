package dev.tarn.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.protocol.ApiKeys;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The Java consumer's fetch sessions (KIP-227) against a session cache of
 * one slot: the consumer with more partitions holds the slot, the other is
 * evicted (its next incremental fetch is answered FETCH_SESSION_ID_NOT_FOUND)
 * and goes on with full fetches; both read everything.
 */
@ExtendWith(TarnExtension.class)
@TarnSettings({"max.incremental.fetch.session.cache.slots=1"})
class FetchSessionTest {

    static List<TopicPartition> partitions(String topic, int n) {
        List<TopicPartition> out = new ArrayList<>();
        for (int p = 0; p < n; p++) {
            out.add(new TopicPartition(topic, p));
        }
        return out;
    }

    static void produce(TarnBroker broker, String topic, int partitions, int perPartition) throws Exception {
        try (KafkaProducer<String, String> producer = Clients.producer(broker, Map.of())) {
            for (int i = 0; i < perPartition; i++) {
                for (int p = 0; p < partitions; p++) {
                    producer.send(new ProducerRecord<>(topic, p, "k", "v" + i)).get();
                }
            }
        }
    }

    /** Polls until each consumer has `count` more records, polling both in turn. */
    static void pollBoth(KafkaConsumer<String, String> a, int countA, KafkaConsumer<String, String> b, int countB) {
        List<ConsumerRecord<String, String>> gotA = new ArrayList<>();
        List<ConsumerRecord<String, String>> gotB = new ArrayList<>();
        Clients.until("both consumers read their records", () -> {
            a.poll(Duration.ofMillis(50)).forEach(gotA::add);
            b.poll(Duration.ofMillis(50)).forEach(gotB::add);
        }, () -> gotA.size() >= countA && gotB.size() >= countB);
        assertEquals(countA, gotA.size());
        assertEquals(countB, gotB.size());
    }

    @Test
    void anEvictedConsumerFallsBackToFullFetchesAndMissesNothing(TarnBroker broker) throws Exception {
        String small = Clients.unique("small");
        String large = Clients.unique("large");
        Clients.createTopic(broker, small, 2);
        Clients.createTopic(broker, large, 6);
        produce(broker, small, 2, 5);
        produce(broker, large, 6, 5);
        try (KafkaConsumer<String, String> a = Clients.consumer(broker, Map.of());
             KafkaConsumer<String, String> b = Clients.consumer(broker, Map.of())) {
            a.assign(partitions(small, 2));
            Clients.pollCount(a, 10);
            assertEquals(1.0, Metrics.value(broker, "tarn_fetch_sessions"), "the first consumer's session");
            assertEquals(2.0, Metrics.value(broker, "tarn_fetch_session_partitions"));

            // The larger session takes the only slot.
            b.assign(partitions(large, 6));
            Clients.pollCount(b, 30);
            assertEquals(1.0, Metrics.value(broker, "tarn_fetch_sessions"));
            assertEquals(6.0, Metrics.value(broker, "tarn_fetch_session_partitions"));

            // Both keep reading: the evicted one without a session.
            for (int round = 0; round < 3; round++) {
                produce(broker, small, 2, 2);
                produce(broker, large, 6, 1);
                pollBoth(a, 4, b, 6);
            }
            assertEquals(6.0, Metrics.value(broker, "tarn_fetch_session_partitions"));
            assertEquals(11, a.position(new TopicPartition(small, 0)));
            assertEquals(11, a.position(new TopicPartition(small, 1)));
            // Both client lines fetch with topic ids (v13+), each at its
            // newest version (3.9: v17, 4.x: v18), which Tarn serves.
            short newest = ApiKeys.FETCH.latestVersion();
            assertTrue(Metrics.sum(broker, "tarn_requests_total",
                            "api=\"Fetch\",version=\"" + newest + "\"") > 0,
                    "no Fetch v" + newest + " request");
        }
    }
}
