package dev.tarn.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.protocol.ApiKeys;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The producer with its defaults (idempotent, acks=all) and each codec:
 * every acknowledged offset holds exactly the key, value and headers sent.
 */
@ExtendWith(TarnExtension.class)
class ProducerTest {
    static final int PARTITIONS = 3;
    static final int RECORDS = 300;

    @ParameterizedTest
    @ValueSource(strings = {"none", "gzip", "snappy", "lz4", "zstd"})
    void everyCodecReadsBackAtItsAcknowledgedOffsets(String codec, TarnBroker broker) throws Exception {
        String topic = Clients.unique("produce-" + codec);
        Clients.createTopic(broker, topic, PARTITIONS);
        List<ProducerRecord<String, String>> sent = new ArrayList<>();
        List<RecordMetadata> acks = new ArrayList<>();
        try (KafkaProducer<String, String> producer = Clients.producer(broker,
                Map.of("compression.type", codec, "linger.ms", "5"))) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < RECORDS; i++) {
                RecordHeaders headers = new RecordHeaders();
                headers.add("i", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
                headers.add("codec", codec.getBytes(StandardCharsets.UTF_8));
                // A null key goes to the sticky partitioner; the rest by hash.
                String key = i % 10 == 0 ? null : "key-" + (i % 17);
                ProducerRecord<String, String> record =
                        new ProducerRecord<>(topic, null, key, "value-" + i + "-" + "x".repeat(i % 50), headers);
                sent.add(record);
                futures.add(producer.send(record));
            }
            for (Future<RecordMetadata> f : futures) {
                acks.add(f.get());
            }
        }
        Map<TopicPartition, Map<Long, Integer>> expected = new HashMap<>();
        for (int i = 0; i < RECORDS; i++) {
            RecordMetadata m = acks.get(i);
            expected.computeIfAbsent(new TopicPartition(topic, m.partition()), k -> new HashMap<>())
                    .put(m.offset(), i);
        }
        List<TopicPartition> partitions = new ArrayList<>();
        for (int p = 0; p < PARTITIONS; p++) {
            partitions.add(new TopicPartition(topic, p));
        }
        try (KafkaConsumer<String, String> consumer = Clients.consumer(broker, Map.of())) {
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            List<ConsumerRecord<String, String>> got = Clients.pollCount(consumer, RECORDS);
            for (ConsumerRecord<String, String> r : got) {
                TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                Integer i = expected.get(tp).remove(r.offset());
                if (i == null) {
                    throw new AssertionError("read " + tp + "@" + r.offset() + " that no ack named (or twice)");
                }
                ProducerRecord<String, String> s = sent.get(i);
                assertEquals(s.key(), r.key(), "key at " + tp + "@" + r.offset());
                assertEquals(s.value(), r.value(), "value at " + tp + "@" + r.offset());
                assertEquals(acks.get(i).timestamp(), r.timestamp(), "timestamp at " + tp + "@" + r.offset());
                Header[] want = s.headers().toArray();
                Header[] have = r.headers().toArray();
                assertEquals(want.length, have.length, "header count");
                for (int h = 0; h < want.length; h++) {
                    assertEquals(want[h].key(), have[h].key());
                    assertArrayEquals(want[h].value(), have[h].value());
                }
            }
            for (Map<Long, Integer> left : expected.values()) {
                assertEquals(Map.of(), left, "acknowledged but not read");
            }
            // Offsets are contiguous from 0 in each partition.
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
            long total = ends.values().stream().mapToLong(Long::longValue).sum();
            assertEquals(RECORDS, total, "end offsets " + ends);
        }
        // Each client line produces at its newest version (3.9: v11, 4.x:
        // v13, which names topics by id), which Tarn serves.
        short newest = ApiKeys.PRODUCE.latestVersion();
        assertTrue(Metrics.sum(broker, "tarn_requests_total",
                        "api=\"Produce\",version=\"" + newest + "\"") > 0,
                "no Produce v" + newest + " request");
    }
}
