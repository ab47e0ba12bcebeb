package dev.tarn.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/** The Admin client against one broker. */
@ExtendWith(TarnExtension.class)
@TarnSettings({"group.initial.rebalance.delay.ms=0"})
class AdminTest {

    static <T> Throwable cause(org.apache.kafka.common.KafkaFuture<T> future) {
        ExecutionException e = assertThrows(ExecutionException.class, future::get);
        return e.getCause();
    }

    @Test
    void createDescribeAndDeleteTopics(TarnBroker broker) throws Exception {
        String topic = Clients.unique("admin-topic");
        try (Admin admin = Clients.admin(broker)) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1)
                    .configs(Map.of("cleanup.policy", "compact", "retention.ms", "3600000")))).all().get();
            assertInstanceOf(TopicExistsException.class,
                    cause(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all()));
            assertTrue(admin.listTopics().names().get().contains(topic));

            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            assertEquals(topic, d.name());
            assertFalse(d.isInternal());
            assertEquals(3, d.partitions().size());
            for (int p = 0; p < 3; p++) {
                assertEquals(p, d.partitions().get(p).partition());
                assertNotNull(d.partitions().get(p).leader());
                assertEquals(1, d.partitions().get(p).replicas().size());
                assertEquals(1, d.partitions().get(p).isr().size());
            }
            assertNotNull(d.topicId());
            // By id as well as by name.
            TopicDescription byId = admin.describeTopics(
                    org.apache.kafka.common.TopicCollection.ofTopicIds(List.of(d.topicId())))
                    .allTopicIds().get().get(d.topicId());
            assertEquals(topic, byId.name());

            assertInstanceOf(UnknownTopicOrPartitionException.class,
                    cause(admin.describeTopics(List.of(Clients.unique("missing"))).allTopicNames()));

            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all().get();
            assertEquals(5, admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic)
                    .partitions().size());

            admin.deleteTopics(List.of(topic)).all().get();
            assertFalse(admin.listTopics().names().get().contains(topic));
            assertInstanceOf(UnknownTopicOrPartitionException.class,
                    cause(admin.deleteTopics(List.of(topic)).all()));
        }
    }

    @Test
    void describeTopicsPagesThroughManyPartitions(TarnBroker broker) throws Exception {
        // More partitions than one DescribeTopicPartitions page in some
        // clients' defaults, across several topics.
        String a = Clients.unique("pages-a");
        String b = Clients.unique("pages-b");
        try (Admin admin = Clients.admin(broker)) {
            admin.createTopics(List.of(new NewTopic(a, 60, (short) 1), new NewTopic(b, 7, (short) 1))).all().get();
            double before = Metrics.sum(broker, "tarn_requests_total", "api=\"DescribeTopicPartitions\"");
            Map<String, TopicDescription> d = admin.describeTopics(List.of(a, b),
                    new DescribeTopicsOptions().partitionSizeLimitPerResponse(25)).allTopicNames().get();
            // 67 partitions at 25 a page: three requests, two of them from a cursor.
            double pages = Metrics.sum(broker, "tarn_requests_total", "api=\"DescribeTopicPartitions\"") - before;
            assertEquals(3.0, pages, "DescribeTopicPartitions requests");
            assertEquals(60, d.get(a).partitions().size());
            assertEquals(7, d.get(b).partitions().size());
            for (int p = 0; p < 60; p++) {
                assertEquals(p, d.get(a).partitions().get(p).partition());
            }
        }
    }

    @Test
    void describeAndIncrementallyAlterConfigs(TarnBroker broker) throws Exception {
        String topic = Clients.unique("configs");
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        try (Admin admin = Clients.admin(broker)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            Config before = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            ConfigEntry retention = before.get("retention.ms");
            assertEquals("604800000", retention.value());
            assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, retention.source());

            admin.incrementalAlterConfigs(Map.of(resource, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND))))
                    .all().get();
            Config after = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            assertEquals("3600000", after.get("retention.ms").value());
            assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, after.get("retention.ms").source());
            assertEquals("delete,compact", after.get("cleanup.policy").value());

            admin.incrementalAlterConfigs(Map.of(resource, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE))))
                    .all().get();
            assertEquals("604800000",
                    admin.describeConfigs(List.of(resource)).all().get().get(resource).get("retention.ms").value());

            assertInstanceOf(InvalidConfigurationException.class, cause(admin.incrementalAlterConfigs(
                    Map.of(resource, List.of(new AlterConfigOp(new ConfigEntry("no.such.key", "1"),
                            AlterConfigOp.OpType.SET)))).all()));

            ConfigResource brokerResource = new ConfigResource(ConfigResource.Type.BROKER, "1");
            Config brokerConfig = admin.describeConfigs(List.of(brokerResource)).all().get().get(brokerResource);
            assertNotNull(brokerConfig.get("log.retention.ms"), "broker config " + brokerConfig);
        }
    }

    @Test
    void consumerGroupsAndTheirOffsets(TarnBroker broker) throws Exception {
        String topic = Clients.unique("groups");
        String group = Clients.unique("admin-group");
        Clients.createTopic(broker, topic, 2);
        try (KafkaProducer<String, String> producer = Clients.producer(broker, Map.of())) {
            for (int i = 0; i < 10; i++) {
                producer.send(new ProducerRecord<>(topic, i % 2, "k", "v" + i)).get();
            }
        }
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        try (Admin admin = Clients.admin(broker)) {
            try (KafkaConsumer<String, String> c = Clients.consumer(broker,
                    Map.of("group.id", group, "client.id", "admin-test-member"))) {
                c.subscribe(List.of(topic));
                List<ConsumerRecord<String, String>> got = Clients.pollCount(c, 10);
                assertEquals(10, got.size());
                c.commitSync();

                Collection<ConsumerGroupListing> listed = admin.listConsumerGroups().all().get();
                assertTrue(listed.stream().anyMatch(g -> g.groupId().equals(group)), "listed " + listed);
                if (!TarnExtension.clientVersion().startsWith("3.")) {
                    // ListGroups v5 names the group's type.
                    ConsumerGroupListing listing = listed.stream().filter(g -> g.groupId().equals(group))
                            .findFirst().orElseThrow();
                    assertEquals(org.apache.kafka.common.GroupType.CLASSIC, listing.type().orElseThrow(), "type of " + listing);
                }

                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group))
                        .describedGroups().get(group).get();
                assertEquals(group, d.groupId());
                assertEquals("range", d.partitionAssignor());
                assertEquals(1, d.members().size());
                assertEquals("admin-test-member", d.members().iterator().next().clientId());
                assertEquals(Set.of(p0, p1), d.members().iterator().next().assignment().topicPartitions());

                Map<TopicPartition, OffsetAndMetadata> offsets =
                        admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
                assertEquals(5, offsets.get(p0).offset());
                assertEquals(5, offsets.get(p1).offset());
            }
            // With no members left the offsets can be altered and deleted.
            admin.alterConsumerGroupOffsets(group, Map.of(p0, new OffsetAndMetadata(2))).all().get();
            Map<TopicPartition, OffsetAndMetadata> altered =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            assertEquals(2, altered.get(p0).offset());
            assertEquals(5, altered.get(p1).offset());

            admin.deleteConsumerGroupOffsets(group, Set.of(p1)).all().get();
            Map<TopicPartition, OffsetAndMetadata> left =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            assertEquals(Set.of(p0), left.keySet());

            // An unknown group: 4.x clients use DescribeGroups v6, which answers
            // GROUP_ID_NOT_FOUND (KIP-1043); 3.x clients see a Dead group.
            String unknown = Clients.unique("no-such-group");
            if (TarnExtension.clientVersion().startsWith("3.")) {
                ConsumerGroupDescription dead = admin.describeConsumerGroups(List.of(unknown))
                        .describedGroups().get(unknown).get();
                assertEquals("Dead", dead.state().toString());
            } else {
                assertInstanceOf(org.apache.kafka.common.errors.GroupIdNotFoundException.class,
                        cause(admin.describeConsumerGroups(List.of(unknown)).all()));
            }

            admin.deleteConsumerGroups(List.of(group)).all().get();
            assertFalse(admin.listConsumerGroups().all().get().stream().anyMatch(g -> g.groupId().equals(group)));
        }
    }

    @Test
    void listOffsetsAndDeleteRecords(TarnBroker broker) throws Exception {
        String topic = Clients.unique("offsets");
        Clients.createTopic(broker, topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        long base = 1_700_000_000_000L;
        try (KafkaProducer<String, String> producer = Clients.producer(broker, Map.of())) {
            for (int i = 0; i < 10; i++) {
                producer.send(new ProducerRecord<>(topic, 0, base + i, "k", "v" + i)).get();
            }
        }
        try (Admin admin = Clients.admin(broker)) {
            assertEquals(0, admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get().offset());
            assertEquals(10, admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get().offset());
            ListOffsetsResult.ListOffsetsResultInfo byTime =
                    admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(base + 4))).partitionResult(tp).get();
            assertEquals(4, byTime.offset());
            assertEquals(base + 4, byTime.timestamp());
            ListOffsetsResult.ListOffsetsResultInfo max =
                    admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).partitionResult(tp).get();
            assertEquals(9, max.offset());

            // No tiered storage: every offset is local, none tiered.
            assertEquals(0, admin.listOffsets(Map.of(tp, OffsetSpec.earliestLocal())).partitionResult(tp).get().offset());
            assertEquals(-1, admin.listOffsets(Map.of(tp, OffsetSpec.latestTiered())).partitionResult(tp).get().offset());

            long low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(6)))
                    .lowWatermarks().get(tp).get().lowWatermark();
            assertEquals(6, low);
            assertEquals(6, admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get().offset());
        }
    }

    @Test
    void describeClusterLogDirsProducersAndFeatures(TarnBroker broker) throws Exception {
        String topic = Clients.unique("cluster");
        Clients.createTopic(broker, topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> producer = Clients.producer(broker, Map.of())) {
            producer.send(new ProducerRecord<>(topic, 0, "k", "v")).get();
        }
        try (Admin admin = Clients.admin(broker)) {
            DescribeClusterResult cluster = admin.describeCluster();
            Collection<Node> nodes = cluster.nodes().get();
            assertEquals(1, nodes.size());
            Node node = nodes.iterator().next();
            assertEquals(broker.bootstrap(), node.host() + ":" + node.port());
            assertEquals(node, cluster.controller().get());
            assertNotNull(cluster.clusterId().get());

            Map<String, LogDirDescription> dirs =
                    admin.describeLogDirs(List.of(node.id())).allDescriptions().get().get(node.id());
            assertEquals(1, dirs.size(), "log dirs " + dirs);
            LogDirDescription dir = dirs.values().iterator().next();
            assertTrue(dir.replicaInfos().containsKey(tp), "replicas " + dir.replicaInfos().keySet());
            assertTrue(dir.replicaInfos().get(tp).size() > 0);

            List<ProducerState> producers =
                    admin.describeProducers(List.of(tp)).partitionResult(tp).get().activeProducers();
            assertEquals(1, producers.size(), "producers " + producers);
            assertEquals(0, producers.get(0).lastSequence());

            FeatureMetadata features = admin.describeFeatures().featureMetadata().get();
            assertEquals(Set.of("metadata.version"), features.finalizedFeatures().keySet());
            assertEquals(7, features.finalizedFeatures().get("metadata.version").maxVersionLevel());
            assertEquals(7, features.finalizedFeatures().get("metadata.version").minVersionLevel());
            assertEquals(7, features.supportedFeatures().get("metadata.version").maxVersion());
            assertEquals(java.util.Optional.of(0L), features.finalizedFeaturesEpoch());
        }
    }

    @Test
    void clientQuotasAreStoredAndReadBack(TarnBroker broker) throws Exception {
        ClientQuotaEntity user = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, "alice"));
        ClientQuotaEntity client = new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, "app-1"));
        try (Admin admin = Clients.admin(broker)) {
            admin.alterClientQuotas(List.of(
                    new ClientQuotaAlteration(user, List.of(
                            new ClientQuotaAlteration.Op("producer_byte_rate", 1048576.0),
                            new ClientQuotaAlteration.Op("consumer_byte_rate", 2097152.0))),
                    new ClientQuotaAlteration(client, List.of(
                            new ClientQuotaAlteration.Op("request_percentage", 50.0)))))
                    .all().get();
            Map<ClientQuotaEntity, Map<String, Double>> all =
                    admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get();
            assertEquals(Map.of("producer_byte_rate", 1048576.0, "consumer_byte_rate", 2097152.0), all.get(user));
            assertEquals(Map.of("request_percentage", 50.0), all.get(client));

            Map<ClientQuotaEntity, Map<String, Double>> alice = admin.describeClientQuotas(
                    ClientQuotaFilter.containsOnly(List.of(ClientQuotaFilterComponent.ofEntity(
                            ClientQuotaEntity.USER, "alice")))).entities().get();
            assertEquals(Set.of(user), alice.keySet());

            // Removing a key (a null value) keeps the others.
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(user, List.of(
                    new ClientQuotaAlteration.Op("consumer_byte_rate", null))))).all().get();
            Map<ClientQuotaEntity, Map<String, Double>> after =
                    admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get();
            assertEquals(Map.of("producer_byte_rate", 1048576.0), after.get(user));

            assertInstanceOf(org.apache.kafka.common.errors.InvalidRequestException.class,
                    cause(admin.alterClientQuotas(List.of(new ClientQuotaAlteration(user, List.of(
                            new ClientQuotaAlteration.Op("no_such_quota", 1.0))))).all()));
        }
        // Quotas live in the metadata log: they survive a restart.
        broker.restart();
        try (Admin admin = Clients.admin(broker)) {
            Map<ClientQuotaEntity, Map<String, Double>> all =
                    admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get();
            assertEquals(Map.of("producer_byte_rate", 1048576.0), all.get(user));
            assertEquals(Map.of("request_percentage", 50.0), all.get(client));
        }
    }
}
