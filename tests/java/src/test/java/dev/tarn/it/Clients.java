package dev.tarn.it;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.function.BooleanSupplier;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** Client configs with short timeouts, and small helpers the tests share. */
public final class Clients {
    /** The longest any wait in a test may take before it fails. */
    public static final Duration WAIT = Duration.ofSeconds(30);

    private Clients() {
    }

    public static String unique(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    public static Properties common(TarnBroker broker) {
        Properties p = new Properties();
        p.put("bootstrap.servers", broker.bootstrap());
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", "20000");
        p.put("reconnect.backoff.max.ms", "200");
        p.put("retry.backoff.ms", "50");
        return p;
    }

    /** The producer's defaults (idempotent, acks=all), plus short timeouts. */
    public static KafkaProducer<String, String> producer(TarnBroker broker, Map<String, String> extra) {
        Properties p = common(broker);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "25000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    public static KafkaConsumer<String, String> consumer(TarnBroker broker, Map<String, String> extra) {
        Properties p = common(broker);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        p.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "15000");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    public static Admin admin(TarnBroker broker) {
        Properties p = common(broker);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        return Admin.create(p);
    }

    public static void createTopic(TarnBroker broker, String topic, int partitions) throws Exception {
        try (Admin admin = admin(broker)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
        }
    }

    /** Polls until `count` records arrived (more fails), within WAIT. */
    public static List<ConsumerRecord<String, String>> pollCount(KafkaConsumer<String, String> consumer, int count) {
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (out.size() < count) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("got " + out.size() + " of " + count + " records within " + WAIT);
            }
            consumer.poll(Duration.ofMillis(100)).forEach(out::add);
        }
        if (out.size() != count) {
            throw new AssertionError("expected " + count + " records, got " + out.size());
        }
        return out;
    }

    /** Runs `step` until `done` holds, failing after WAIT. */
    public static void until(String what, Runnable step, BooleanSupplier done) {
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (!done.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out after " + WAIT + " waiting for " + what);
            }
            step.run();
        }
    }

    public static <T> List<T> sorted(Collection<T> items, java.util.Comparator<T> by) {
        List<T> out = new ArrayList<>(items);
        out.sort(by);
        return out;
    }
}
