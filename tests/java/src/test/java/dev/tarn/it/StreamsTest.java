package dev.tarn.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Kafka Streams word count (at-least-once): Streams creates its
 * repartition and changelog topics through the Admin API, the changelog
 * compacted; a second instance with an empty state directory restores the
 * counts from the changelog and goes on counting from them.
 */
@ExtendWith(TarnExtension.class)
@TarnSettings({"group.initial.rebalance.delay.ms=0"})
class StreamsTest {
    static final String STORE = "word-counts";

    static KafkaStreams start(TarnBroker broker, String app, String input, String output, Path stateDir) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(line -> Arrays.asList(line.toLowerCase().split("\\W+")))
                .filter((key, word) -> !word.isEmpty())
                .groupBy((key, word) -> word, Grouped.with(Serdes.String(), Serdes.String()))
                .count(Materialized.as(STORE))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        Properties p = new Properties();
        p.putAll(Clients.common(broker));
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "100");
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        // Every update reaches the output, not only the cache's last.
        p.put("statestore.cache.max.bytes", "0");
        p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), "6000");
        p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), "500");
        p.put(StreamsConfig.consumerPrefix("fetch.max.wait.ms"), "100");
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        streams.setUncaughtExceptionHandler(e -> {
            failure.set(e);
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                    .SHUTDOWN_CLIENT;
        });
        CountDownLatch settled = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING || now == KafkaStreams.State.ERROR
                    || now == KafkaStreams.State.PENDING_ERROR) {
                settled.countDown();
            }
        });
        streams.start();
        try {
            if (!settled.await(Clients.WAIT.toMillis(), TimeUnit.MILLISECONDS)) {
                throw new AssertionError("the streams app did not reach RUNNING within " + Clients.WAIT
                        + " (state " + streams.state() + ")");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted", e);
        }
        if (streams.state() != KafkaStreams.State.RUNNING) {
            throw new AssertionError("the streams app failed: " + streams.state(), failure.get());
        }
        return streams;
    }

    static void produce(TarnBroker broker, String topic, List<String> lines) throws Exception {
        try (KafkaProducer<String, String> producer = Clients.producer(broker, Map.of())) {
            for (int i = 0; i < lines.size(); i++) {
                producer.send(new ProducerRecord<>(topic, i % 2, null, lines.get(i))).get();
            }
        }
    }

    /** Reads the output topic into `latest` until every word in `want` has its count. */
    static void readCounts(KafkaConsumer<String, Long> consumer, Map<String, Long> latest, Map<String, Long> want) {
        Clients.until("the counts " + want, () -> {
            for (ConsumerRecord<String, Long> r : consumer.poll(Duration.ofMillis(100))) {
                latest.put(r.key(), r.value());
            }
        }, () -> want.entrySet().stream().allMatch(e -> e.getValue().equals(latest.get(e.getKey()))));
    }

    @Test
    void wordCountRestoresItsStateFromTheChangelog(TarnBroker broker) throws Exception {
        String app = Clients.unique("wordcount");
        String input = Clients.unique("lines");
        String output = Clients.unique("counts");
        Clients.createTopic(broker, input, 2);
        Clients.createTopic(broker, output, 2);
        Properties c = Clients.common(broker);
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", LongDeserializer.class.getName());
        c.put("auto.offset.reset", "earliest");
        c.put("fetch.max.wait.ms", "100");
        try (KafkaConsumer<String, Long> counts = new KafkaConsumer<>(c)) {
            counts.assign(List.of(new TopicPartition(output, 0), new TopicPartition(output, 1)));
            Map<String, Long> latest = new HashMap<>();

            Path state1 = Files.createTempDirectory("tarn-streams-1");
            try (KafkaStreams streams = start(broker, app, input, output, state1)) {
                produce(broker, input, List.of("the quick brown fox", "the lazy dog", "The fox"));
                readCounts(counts, latest, Map.of("the", 3L, "fox", 2L, "quick", 1L, "lazy", 1L, "dog", 1L,
                        "brown", 1L));
                streams.close(Duration.ofSeconds(20));
            }

            // The internal topics were created through the Admin API, the
            // changelog compacted.
            String changelog = app + "-" + STORE + "-changelog";
            String repartition = app + "-" + STORE + "-repartition";
            try (Admin admin = Clients.admin(broker)) {
                assertTrue(admin.listTopics().names().get().containsAll(List.of(changelog, repartition)));
                ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, changelog);
                Config config = admin.describeConfigs(List.of(r)).all().get().get(r);
                assertEquals("compact", config.get("cleanup.policy").value());
            }

            // A new instance with an empty state directory restores the store
            // from the changelog and counts on from there.
            Path state2 = Files.createTempDirectory("tarn-streams-2");
            try (KafkaStreams streams = start(broker, app, input, output, state2)) {
                produce(broker, input, List.of("the fox returns", "a dog"));
                readCounts(counts, latest, Map.of("the", 4L, "fox", 3L, "dog", 2L, "returns", 1L, "a", 1L));
                assertEquals(1L, latest.get("quick"));
                assertEquals(8, latest.size(), "words " + latest);
                streams.close(Duration.ofSeconds(20));
            }
        }
    }
}
