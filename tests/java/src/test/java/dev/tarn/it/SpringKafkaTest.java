package dev.tarn.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.context.annotation.AnnotationConfigApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.kafka.annotation.EnableKafka;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.config.TopicBuilder;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaProducerFactory;
import org.springframework.kafka.core.KafkaAdmin;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.core.ProducerFactory;
import org.springframework.kafka.listener.DeadLetterPublishingRecoverer;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.support.SendResult;
import org.springframework.util.backoff.FixedBackOff;

/**
 * Spring for Apache Kafka (spring-kafka 4.1, on the 4.x client line only)
 * as an application uses it: a context with {@code @EnableKafka} whose
 * {@link KafkaAdmin} creates the declared topics at start-up, a
 * {@link KafkaTemplate} that sends, and a {@code @KafkaListener} of three
 * concurrent consumers in one group whose error handler retries a failing
 * record once and then publishes it to the dead-letter topic with the
 * exception in its headers. Once the three consumers hold a partition
 * each, every record sent is handled or dead-lettered, and the group's
 * committed offsets reach the end of every partition.
 */
@ExtendWith(TarnExtension.class)
@TarnSettings({"group.initial.rebalance.delay.ms=0"})
class SpringKafkaTest {
    static final String TOPIC = "spring-orders";
    static final String DLT = TOPIC + "-dlt";
    static final String GROUP = "spring-order-handlers";
    static final int PARTITIONS = 3;
    static final int RECORDS = 300;

    /** The bootstrap address the configuration below reads (one broker per class). */
    static volatile String bootstrap;

    /** The values of the records the listener handled. */
    static final Set<String> HANDLED = ConcurrentHashMap.newKeySet();
    /** How many times each poison record was attempted. */
    static final Map<String, Integer> ATTEMPTS = new ConcurrentHashMap<>();

    @Configuration
    @EnableKafka
    static class App {
        @Bean
        KafkaAdmin admin() {
            return new KafkaAdmin(Map.of("bootstrap.servers", bootstrap));
        }

        @Bean
        NewTopic orders() {
            return TopicBuilder.name(TOPIC).partitions(PARTITIONS).replicas(1).build();
        }

        @Bean
        NewTopic deadLetters() {
            return TopicBuilder.name(DLT).partitions(PARTITIONS).replicas(1).config("retention.ms", "3600000")
                    .build();
        }

        @Bean
        ProducerFactory<String, String> producerFactory() {
            Map<String, Object> p = new HashMap<>();
            p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
            p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
            p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 25_000);
            p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 15_000);
            return new DefaultKafkaProducerFactory<>(p);
        }

        @Bean
        KafkaTemplate<String, String> template(ProducerFactory<String, String> producerFactory) {
            return new KafkaTemplate<>(producerFactory);
        }

        @Bean
        ConsumerFactory<String, String> consumerFactory() {
            Map<String, Object> c = new HashMap<>();
            c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
            c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
            c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            c.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, 15_000);
            return new DefaultKafkaConsumerFactory<>(c);
        }

        @Bean
        ConcurrentKafkaListenerContainerFactory<String, String> kafkaListenerContainerFactory(
                ConsumerFactory<String, String> consumerFactory, KafkaTemplate<String, String> template) {
            ConcurrentKafkaListenerContainerFactory<String, String> factory =
                    new ConcurrentKafkaListenerContainerFactory<>();
            factory.setConsumerFactory(consumerFactory);
            // One retry, then the record goes to <topic>-dlt, same partition.
            DeadLetterPublishingRecoverer recoverer = new DeadLetterPublishingRecoverer(template,
                    (record, exception) -> new TopicPartition(DLT, record.partition()));
            factory.setCommonErrorHandler(new DefaultErrorHandler(recoverer, new FixedBackOff(0L, 1L)));
            return factory;
        }

        @Bean
        Handler handler() {
            return new Handler();
        }
    }

    static class Handler {
        @KafkaListener(id = "orders", topics = TOPIC, groupId = GROUP, concurrency = "3")
        void handle(ConsumerRecord<String, String> record) {
            String value = record.value();
            if (value.startsWith("poison")) {
                ATTEMPTS.merge(value, 1, Integer::sum);
                throw new IllegalStateException("cannot handle " + value);
            }
            HANDLED.add(value);
        }
    }

    @Test
    void templateListenerAndDeadLetters(TarnBroker broker) throws Exception {
        bootstrap = broker.bootstrap();
        Set<String> poison = new TreeSet<>();
        Set<String> good = new TreeSet<>();
        try (AnnotationConfigApplicationContext context = new AnnotationConfigApplicationContext(App.class);
                Admin admin = Admin.create(Clients.common(broker))) {
            // The three consumers share the partitions, one each, before
            // anything is sent, so that no rebalance interrupts a retry.
            Clients.until("three members, one partition each", SpringKafkaTest::pause, () -> {
                try {
                    ConsumerGroupDescription group =
                            admin.describeConsumerGroups(List.of(GROUP)).describedGroups().get(GROUP).get();
                    return group.members().size() == 3 && group.members().stream()
                            .allMatch(m -> m.assignment().topicPartitions().size() == 1);
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });

            @SuppressWarnings("unchecked")
            KafkaTemplate<String, String> template = context.getBean(KafkaTemplate.class);
            List<SendResult<String, String>> sent = new ArrayList<>();
            for (int i = 0; i < RECORDS; i++) {
                String value = (i % 50 == 7 ? "poison-" : "order-") + i;
                (value.startsWith("poison") ? poison : good).add(value);
                sent.add(template.send(TOPIC, "customer-" + (i % 17), value).get());
            }
            Set<Integer> partitions = new TreeSet<>();
            for (SendResult<String, String> result : sent) {
                partitions.add(result.getRecordMetadata().partition());
            }
            assertEquals(Set.of(0, 1, 2), partitions, "keys spread over the three partitions");

            Clients.until("every good record handled", SpringKafkaTest::pause,
                    () -> HANDLED.containsAll(good));
            Map<String, ConsumerRecord<String, String>> dead = readDeadLetters(broker, poison.size());
            assertEquals(poison, dead.keySet());
            for (ConsumerRecord<String, String> record : dead.values()) {
                Header exception = record.headers().lastHeader("kafka_dlt-exception-message");
                assertNotNull(exception, "the dead letter says why");
                String message = new String(exception.value(), StandardCharsets.UTF_8);
                assertTrue(message.contains("cannot handle " + record.value()), message);
                assertNotNull(record.headers().lastHeader("kafka_dlt-original-offset"));
                assertEquals(2, ATTEMPTS.get(record.value()), "tried once and retried once");
            }

            // The group committed every partition to its end.
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            for (int p = 0; p < PARTITIONS; p++) {
                latest.put(new TopicPartition(TOPIC, p), OffsetSpec.latest());
            }
            Map<TopicPartition, Long> ends = new HashMap<>();
            admin.listOffsets(latest).all().get().forEach((tp, info) -> ends.put(tp, info.offset()));
            assertEquals(RECORDS, ends.values().stream().mapToLong(Long::longValue).sum());
            Clients.until("the group's offsets committed to the end", SpringKafkaTest::pause, () -> {
                Map<TopicPartition, Long> committed = new HashMap<>();
                try {
                    Map<TopicPartition, OffsetAndMetadata> offsets =
                            admin.listConsumerGroupOffsets(GROUP).partitionsToOffsetAndMetadata().get();
                    offsets.forEach((tp, o) -> committed.put(tp, o.offset()));
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
                return committed.equals(ends);
            });
            context.getBean(KafkaListenerEndpointRegistry.class).stop();
        }
    }

    static void pause() {
        try {
            Thread.sleep(50);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** The dead-letter topic's records by value, read from the start. */
    static Map<String, ConsumerRecord<String, String>> readDeadLetters(TarnBroker broker, int expected) {
        Map<String, ConsumerRecord<String, String>> dead = new HashMap<>();
        try (KafkaConsumer<String, String> consumer = Clients.consumer(broker,
                Map.of(ConsumerConfig.GROUP_ID_CONFIG, Clients.unique("dlt-reader")))) {
            consumer.subscribe(List.of(DLT));
            Clients.until("the dead letters", () -> {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    dead.put(record.value(), record);
                }
            }, () -> dead.size() >= expected);
        }
        return dead;
    }
}
