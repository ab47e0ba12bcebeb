package tarntest

// sarama against tarn: every codec, idempotent and plain, at Kafka 1.0's
// protocol versions, sarama's default and Kafka 4.0's; LogAppendTime acks; a
// ConsumerGroup of three with commits and a member leaving; ClusterAdmin
// topic calls.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// saramaHeartbeat is the group heartbeat interval: short, so members notice
// a rebalance soon.
const saramaHeartbeat = 500 * time.Millisecond

func saramaConfig(name string, version sarama.KafkaVersion) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = name
	cfg.Version = version
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Consumer.Return.Errors = true
	return cfg
}

func newSaramaAdmin(t *testing.T, b *broker) sarama.ClusterAdmin {
	t.Helper()
	admin, err := sarama.NewClusterAdmin([]string{b.bootstrap}, saramaConfig("sarama-admin", sarama.DefaultVersion))
	if err != nil {
		t.Fatalf("sarama.NewClusterAdmin: %v", err)
	}
	t.Cleanup(func() {
		if err := admin.Close(); err != nil {
			t.Errorf("close cluster admin: %v", err)
		}
	})
	return admin
}

func saramaCreateTopic(t *testing.T, admin sarama.ClusterAdmin, topic string, partitions int32) {
	t.Helper()
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// newSaramaSyncProducer connects the producer's client to every broker
// before the first send. sarama 1.61's Broker.Open marks a broker opened
// before it takes the lock that a send waits on, so when the partitions'
// goroutines look up a fresh leader at once, one of them can send on the
// half-opened broker and fail with "broker not connected"; the failure
// closes the broker under the requests already in flight on it, and sarama
// resends them. A plain (non-idempotent) producer then writes those batches
// twice, as it would against Kafka: a client race, not the broker's doing,
// that these tests would otherwise report as a duplicate now and then.
func newSaramaSyncProducer(t *testing.T, b *broker, cfg *sarama.Config) sarama.SyncProducer {
	t.Helper()
	client, err := sarama.NewClient([]string{b.bootstrap}, cfg)
	if err != nil {
		t.Fatalf("sarama.NewClient: %v", err)
	}
	t.Cleanup(func() {
		if err := client.Close(); err != nil {
			t.Errorf("close producer's client: %v", err)
		}
	})
	for _, kb := range client.Brokers() {
		if err := kb.Open(cfg); err != nil && !errors.Is(err, sarama.ErrAlreadyConnected) {
			t.Fatalf("open broker %d: %v", kb.ID(), err)
		}
		// Connected waits for the lock that the connecting goroutine holds.
		if connected, err := kb.Connected(); !connected {
			t.Fatalf("connect to broker %d at %s: %v", kb.ID(), kb.Addr(), err)
		}
	}
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		t.Fatalf("sarama.NewSyncProducerFromClient: %v", err)
	}
	// Registered after the client's cleanup, so it runs first.
	t.Cleanup(func() {
		if err := producer.Close(); err != nil {
			t.Errorf("close producer: %v", err)
		}
	})
	return producer
}

// saramaProduce sends recs (to their own partition when the producer uses
// the manual partitioner) and returns them as acknowledged.
func saramaProduce(t *testing.T, producer sarama.SyncProducer, topic string, recs []record) []record {
	t.Helper()
	// The broker keeps the producer's timestamps, in milliseconds.
	now := time.UnixMilli(time.Now().UnixMilli())
	msgs := make([]*sarama.ProducerMessage, len(recs))
	for i, r := range recs {
		msg := &sarama.ProducerMessage{
			Topic:     topic,
			Partition: r.Partition,
			Key:       sarama.ByteEncoder(r.Key),
			Value:     sarama.ByteEncoder(r.Value),
			Timestamp: now,
		}
		for _, h := range r.Headers {
			msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
		}
		msgs[i] = msg
	}
	if err := producer.SendMessages(msgs); err != nil {
		t.Fatalf("produce %d records to %s: %v", len(msgs), topic, err)
	}
	acked := make([]record, len(recs))
	for i, msg := range msgs {
		acked[i] = recs[i]
		acked[i].Partition = msg.Partition
		acked[i].Offset = msg.Offset
		acked[i].TimestampMs = now.UnixMilli()
	}
	return acked
}

func fromSarama(msg *sarama.ConsumerMessage) record {
	r := record{
		Partition:   msg.Partition,
		Offset:      msg.Offset,
		Key:         msg.Key,
		Value:       msg.Value,
		TimestampMs: msg.Timestamp.UnixMilli(),
	}
	for _, h := range msg.Headers {
		r.Headers = append(r.Headers, header{Key: string(h.Key), Value: h.Value})
	}
	return r
}

// saramaReadPartitions reads each partition from the oldest offset until it
// has as many records as acked holds for it.
func saramaReadPartitions(t *testing.T, addrs []string, cfg *sarama.Config, topic string, acked []record) []record {
	t.Helper()
	// sarama adds partitions to its fetch sessions one long poll at a time;
	// a short poll keeps the test quick (the broker answers a fetch with data
	// at once whatever the wait).
	readCfg := *cfg
	readCfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	consumer, err := sarama.NewConsumer(addrs, &readCfg)
	if err != nil {
		t.Fatalf("sarama.NewConsumer: %v", err)
	}
	defer func() {
		if err := consumer.Close(); err != nil {
			t.Errorf("close consumer: %v", err)
		}
	}()
	want := map[int32]int{}
	for _, r := range acked {
		want[r.Partition]++
	}
	// Subscribe to every partition before reading, so that their first
	// fetches overlap.
	pcs := map[int32]sarama.PartitionConsumer{}
	for p := range want {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatalf("consume %s-%d: %v", topic, p, err)
		}
		pcs[p] = pc
	}
	deadline := time.After(waitTimeout)
	var got []record
	for p, pc := range pcs {
		for read := 0; read < want[p]; {
			select {
			case msg := <-pc.Messages():
				got = append(got, fromSarama(msg))
				read++
			case err := <-pc.Errors():
				t.Fatalf("consume %s-%d: %v", topic, p, err)
			case <-deadline:
				t.Fatalf("read %d of %d records of %s-%d before the deadline", read, want[p], topic, p)
			}
		}
		if err := pc.Close(); err != nil {
			t.Errorf("close partition consumer %s-%d: %v", topic, p, err)
		}
	}
	return got
}

var dumpLogBatch = regexp.MustCompile(`producerId: (-?\d+) .* compresscodec: (\w+) `)

// checkBatchesOnDisk requires every batch of the topic's partitions to be
// stored with the codec the producer used, and to carry a producer id if and
// only if the producer was idempotent (`tarn dump-log`).
func checkBatchesOnDisk(t *testing.T, b *broker, topic string, acked []record, codec string, idempotent bool) {
	t.Helper()
	partitions := map[int32]bool{}
	for _, r := range acked {
		partitions[r.Partition] = true
	}
	for p := range partitions {
		batches := 0
		for _, line := range strings.Split(b.dumpLog(t, topic, p), "\n") {
			if !strings.HasPrefix(line, "baseOffset:") {
				continue
			}
			batches++
			m := dumpLogBatch.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("cannot parse dump-log line %q", line)
			}
			producerID, err := strconv.ParseInt(m[1], 10, 64)
			if err != nil {
				t.Fatalf("producer id in %q: %v", line, err)
			}
			if m[2] != codec {
				t.Errorf("%s-%d: batch stored with codec %s, produced with %s: %s", topic, p, m[2], codec, line)
			}
			if idempotent != (producerID >= 0) {
				t.Errorf("%s-%d: idempotent %v but the batch has producer id %d: %s", topic, p, idempotent, producerID, line)
			}
		}
		if batches == 0 {
			t.Errorf("%s-%d: dump-log shows no batches", topic, p)
		}
	}
}

func TestSaramaProduceConsumeEveryCodec(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	admin := newSaramaAdmin(t, b)
	codecs := []struct {
		name  string
		codec sarama.CompressionCodec
	}{
		{"none", sarama.CompressionNone},
		{"gzip", sarama.CompressionGZIP},
		{"snappy", sarama.CompressionSnappy},
		{"lz4", sarama.CompressionLZ4},
		{"zstd", sarama.CompressionZSTD},
	}
	versions := []struct {
		name    string
		version sarama.KafkaVersion
	}{
		// Older pins are common in sarama deployments; sarama itself
		// refuses zstd below 2.1.
		{"v1_0", sarama.V1_0_0_0},
		{"default", sarama.DefaultVersion},
		{"kafka4", sarama.V4_0_0_0},
	}
	for _, v := range versions {
		for _, c := range codecs {
			if c.codec == sarama.CompressionZSTD && !v.version.IsAtLeast(sarama.V2_1_0_0) {
				continue
			}
			for _, idempotent := range []bool{true, false} {
				mode := "plain"
				if idempotent {
					mode = "idempotent"
				}
				t.Run(v.name+"/"+c.name+"/"+mode, func(t *testing.T) {
					topic := fmt.Sprintf("sarama-%s-%s-%s", v.name, c.name, mode)
					saramaCreateTopic(t, admin, topic, 3)
					cfg := saramaConfig(topic, v.version)
					cfg.Producer.Compression = c.codec
					if idempotent {
						cfg.Producer.Idempotent = true
						cfg.Producer.RequiredAcks = sarama.WaitForAll
						cfg.Net.MaxOpenRequests = 1
					} else {
						cfg.Producer.RequiredAcks = sarama.WaitForLocal
					}
					producer := newSaramaSyncProducer(t, b, cfg)
					var recs []record
					for i := range 30 {
						recs = append(recs, record{
							Key:     []byte(fmt.Sprintf("key-%d", i)),
							Value:   testValue(topic, i),
							Headers: testHeaders(i),
						})
					}
					// Keyed records with the default (hashing) partitioner.
					acked := saramaProduce(t, producer, topic, recs)
					checkContiguous(t, acked)
					checkConsumed(t, acked, saramaReadPartitions(t, []string{b.bootstrap}, cfg, topic, acked))
					checkBatchesOnDisk(t, b, topic, acked, c.name, idempotent)
				})
			}
		}
	}
}

// saramaMember is one ConsumerGroup member: it commits each record as soon
// as it has processed it (auto-commit off), so a rebalance moves partitions
// with everything processed already committed.
type saramaMember struct {
	name   string
	group  sarama.ConsumerGroup
	ledger *groupLedger
	topic  string
	cancel context.CancelFunc
	done   chan struct{}
}

func startSaramaMember(t *testing.T, b *broker, ledger *groupLedger, name, group, topic string) *saramaMember {
	t.Helper()
	cfg := saramaConfig(name, sarama.DefaultVersion)
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Group.Heartbeat.Interval = saramaHeartbeat
	// sarama commits on the connection it fetches on, and a broker answers
	// one connection's requests in order (Kafka too), so each synchronous
	// commit waits behind the long poll in flight: keep that poll short.
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	cg, err := sarama.NewConsumerGroup([]string{b.bootstrap}, group, cfg)
	if err != nil {
		t.Fatalf("sarama.NewConsumerGroup: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &saramaMember{name: name, group: cg, ledger: ledger, topic: topic, cancel: cancel, done: make(chan struct{})}
	go func() {
		for err := range cg.Errors() {
			t.Errorf("%s: consumer group error: %v", name, err)
		}
	}()
	go m.run(t, ctx)
	t.Cleanup(func() { m.leave(t) })
	return m
}

func (m *saramaMember) run(t *testing.T, ctx context.Context) {
	defer close(m.done)
	for ctx.Err() == nil {
		// Consume returns at each rebalance; the loop joins again.
		if err := m.group.Consume(ctx, []string{m.topic}, m); err != nil {
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				return
			}
			t.Errorf("%s: consume: %v", m.name, err)
			return
		}
	}
}

// leave stops the member and closes its ConsumerGroup, which sends
// LeaveGroup; leaving twice is a no-op.
func (m *saramaMember) leave(t *testing.T) {
	t.Helper()
	select {
	case <-m.done:
		return
	default:
	}
	m.cancel()
	<-m.done
	if err := m.group.Close(); err != nil {
		t.Errorf("%s: close consumer group: %v", m.name, err)
	}
}

// Setup, Cleanup and ConsumeClaim make saramaMember a
// sarama.ConsumerGroupHandler.
func (m *saramaMember) Setup(session sarama.ConsumerGroupSession) error {
	m.ledger.setOwned(m.name, session.Claims()[m.topic])
	return nil
}

func (m *saramaMember) Cleanup(sarama.ConsumerGroupSession) error {
	m.ledger.setOwned(m.name, nil)
	return nil
}

func (m *saramaMember) ConsumeClaim(session sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		m.ledger.add(m.name, fromSarama(msg))
		session.MarkMessage(msg, "")
		session.Commit()
	}
	return nil
}

// saramaWaitGroup waits until the broker describes the group as Stable with
// exactly these members, each assigned what its client claims.
func saramaWaitGroup(t *testing.T, admin sarama.ClusterAdmin, ledger *groupLedger, group, topic string, partitions int, members ...string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("group %s to settle on %v", group, members), func() (bool, string) {
		if ok, state := ledger.balanced(partitions, members...); !ok {
			return false, state
		}
		described, err := admin.DescribeConsumerGroups([]string{group})
		if err != nil {
			return false, fmt.Sprintf("describe consumer groups: %v", err)
		}
		if len(described) != 1 {
			return false, fmt.Sprintf("described %d groups", len(described))
		}
		g := described[0]
		if g.Err != sarama.ErrNoError || g.State != "Stable" || len(g.Members) != len(members) {
			return false, fmt.Sprintf("group %s: state %q, %d members, err %v", group, g.State, len(g.Members), g.Err)
		}
		if g.ProtocolType != "consumer" || g.Protocol != "range" {
			t.Errorf("group %s has protocol type %q, protocol %q; want consumer, range", group, g.ProtocolType, g.Protocol)
		}
		for id, dm := range g.Members {
			if !slices.Contains(members, dm.ClientId) {
				return false, fmt.Sprintf("unexpected member %s (client %s)", id, dm.ClientId)
			}
			assignment, err := dm.GetMemberAssignment()
			if err != nil {
				return false, fmt.Sprintf("member %s: decode assignment: %v", dm.ClientId, err)
			}
			assigned := slices.Clone(assignment.Topics[topic])
			slices.Sort(assigned)
			if owned := ledger.ownedBy(dm.ClientId); !slices.Equal(assigned, owned) {
				return false, fmt.Sprintf("broker says %s is assigned %v, the client claims %v", dm.ClientId, assigned, owned)
			}
		}
		return true, ""
	})
}

// saramaWaitCommitted waits until the group's committed offset of every
// partition is want.
func saramaWaitCommitted(t *testing.T, admin sarama.ClusterAdmin, group, topic string, partitions int, want int64) {
	t.Helper()
	all := make([]int32, partitions)
	for p := range all {
		all[p] = int32(p)
	}
	waitFor(t, fmt.Sprintf("group %s to commit offset %d on every partition", group, want), func() (bool, string) {
		resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: all})
		if err != nil {
			return false, fmt.Sprintf("list consumer group offsets: %v", err)
		}
		committed := map[int32]int64{}
		done := true
		for _, p := range all {
			block := resp.GetBlock(topic, p)
			if block == nil || block.Err != sarama.ErrNoError {
				return false, fmt.Sprintf("partition %d: %+v", p, block)
			}
			committed[p] = block.Offset
			done = done && block.Offset == want
		}
		return done, fmt.Sprintf("committed %v", committed)
	})
}

func TestSaramaConsumerGroupMemberLeaves(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	admin := newSaramaAdmin(t, b)
	const (
		topic        = "sarama-group"
		group        = "sarama-group-g"
		partitions   = 6
		perPartition = 10
	)
	saramaCreateTopic(t, admin, topic, partitions)
	cfg := saramaConfig("sarama-group-producer", sarama.DefaultVersion)
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	producer := newSaramaSyncProducer(t, b, cfg)

	ledger := newGroupLedger("a", "b", "c")
	startSaramaMember(t, b, ledger, "a", group, topic)
	startSaramaMember(t, b, ledger, "b", group, topic)
	c := startSaramaMember(t, b, ledger, "c", group, topic)
	// Records go out only once the three members share the partitions, so
	// no record is read before a rebalance moves its partition.
	saramaWaitGroup(t, admin, ledger, group, topic, partitions, "a", "b", "c")
	owned := map[string][]int32{}
	for _, m := range []string{"a", "b", "c"} {
		owned[m] = ledger.ownedBy(m)
	}

	first := saramaProduce(t, producer, topic, keyedRecords("first", partitions, perPartition))
	waitFor(t, "the group to process the first records", func() (bool, string) {
		return ledger.count() >= len(first), fmt.Sprintf("%d of %d", ledger.count(), len(first))
	})
	saramaWaitCommitted(t, admin, group, topic, partitions, perPartition)
	for m, ps := range owned {
		checkOwnPartitions(t, m, ledger.consumedBy(m), ps)
	}

	// c leaves: a and b take its partitions over from its commits.
	c.leave(t)
	saramaWaitGroup(t, admin, ledger, group, topic, partitions, "a", "b")
	second := saramaProduce(t, producer, topic, keyedRecords("second", partitions, perPartition))
	all := append(append([]record(nil), first...), second...)
	waitFor(t, "the group to process the second records", func() (bool, string) {
		return ledger.count() >= len(all), fmt.Sprintf("%d of %d", ledger.count(), len(all))
	})
	saramaWaitCommitted(t, admin, group, topic, partitions, 2*perPartition)
	checkConsumed(t, all, ledger.all())
	for _, r := range ledger.consumedBy("c") {
		if r.Offset >= perPartition {
			t.Errorf("c processed partition %d offset %d after it left", r.Partition, r.Offset)
		}
	}
	for _, m := range []string{"a", "b"} {
		checkOwnPartitions(t, m, recordsFrom(ledger.consumedBy(m), perPartition), ledger.ownedBy(m))
	}
}

func TestSaramaClusterAdminTopics(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	admin := newSaramaAdmin(t, b)
	retention := "3600000"
	detail := &sarama.TopicDetail{
		NumPartitions:     3,
		ReplicationFactor: 1,
		ConfigEntries:     map[string]*string{"retention.ms": &retention},
	}
	if err := admin.CreateTopic("sarama-admin-a", detail, false); err != nil {
		t.Fatalf("create sarama-admin-a: %v", err)
	}
	if err := admin.CreateTopic("sarama-admin-a", detail, false); !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		t.Errorf("create an existing topic: got %v, want TOPIC_ALREADY_EXISTS", err)
	}
	if err := admin.CreateTopic("sarama-admin-dry", detail, true); err != nil {
		t.Errorf("validate-only create: %v", err)
	}

	described, err := admin.DescribeTopics([]string{"sarama-admin-a", "sarama-admin-dry"})
	if err != nil {
		t.Fatalf("describe topics: %v", err)
	}
	for _, md := range described {
		switch md.Name {
		case "sarama-admin-dry":
			if md.Err != sarama.ErrUnknownTopicOrPartition {
				t.Errorf("validate-only topic described with %v, want UNKNOWN_TOPIC_OR_PARTITION", md.Err)
			}
		case "sarama-admin-a":
			if md.Err != sarama.ErrNoError || md.IsInternal || len(md.Partitions) != 3 {
				t.Fatalf("sarama-admin-a described with err %v, internal %v, %d partitions", md.Err, md.IsInternal, len(md.Partitions))
			}
			for _, pm := range md.Partitions {
				if pm.Err != sarama.ErrNoError || pm.Leader < 0 ||
					!slices.Equal(pm.Replicas, []int32{pm.Leader}) || !slices.Equal(pm.Isr, []int32{pm.Leader}) {
					t.Errorf("sarama-admin-a-%d: leader %d, replicas %v, isr %v, err %v", pm.ID, pm.Leader, pm.Replicas, pm.Isr, pm.Err)
				}
			}
		default:
			t.Errorf("described a topic nobody asked for: %s", md.Name)
		}
	}
	if len(described) != 2 {
		t.Errorf("described %d topics, asked for 2", len(described))
	}

	// ListTopics describes each topic's configs too.
	topics, err := admin.ListTopics()
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	listed, ok := topics["sarama-admin-a"]
	switch {
	case !ok:
		t.Fatalf("list topics has no sarama-admin-a: %v", topics)
	case listed.NumPartitions != 3 || listed.ReplicationFactor != 1:
		t.Errorf("sarama-admin-a listed with %d partitions, replication %d", listed.NumPartitions, listed.ReplicationFactor)
	case listed.ConfigEntries["retention.ms"] == nil || *listed.ConfigEntries["retention.ms"] != retention:
		t.Errorf("sarama-admin-a listed with retention.ms %v, want %s", listed.ConfigEntries["retention.ms"], retention)
	}

	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: "sarama-admin-a"})
	if err != nil {
		t.Fatalf("describe config: %v", err)
	}
	i := slices.IndexFunc(entries, func(e sarama.ConfigEntry) bool { return e.Name == "retention.ms" })
	if i < 0 {
		t.Fatalf("describe config of sarama-admin-a has no retention.ms: %+v", entries)
	}
	if e := entries[i]; e.Value != retention || e.Source != sarama.SourceTopic || e.Default || e.ReadOnly {
		t.Errorf("retention.ms described as %+v, want %s from the topic", e, retention)
	}

	brokers, controller, err := admin.DescribeCluster()
	if err != nil {
		t.Fatalf("describe cluster: %v", err)
	}
	if len(brokers) != 1 {
		t.Errorf("describe cluster: %d brokers, want 1", len(brokers))
	} else if brokers[0].ID() != controller || brokers[0].Addr() != b.bootstrap {
		t.Errorf("describe cluster: broker %d at %s, controller %d; want this broker (%s) as controller",
			brokers[0].ID(), brokers[0].Addr(), controller, b.bootstrap)
	}

	if err := admin.DeleteTopic("sarama-admin-a"); err != nil {
		t.Fatalf("delete sarama-admin-a: %v", err)
	}
	waitFor(t, "sarama-admin-a to leave the metadata", func() (bool, string) {
		md, err := admin.DescribeTopics([]string{"sarama-admin-a"})
		if err != nil {
			return false, fmt.Sprintf("describe topics: %v", err)
		}
		return len(md) == 1 && md[0].Err == sarama.ErrUnknownTopicOrPartition, fmt.Sprintf("%+v", md)
	})
	if err := admin.DeleteTopic("sarama-admin-missing"); !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		t.Errorf("delete a missing topic: got %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	if err := admin.CreateTopic("sarama-admin-a", &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
		t.Errorf("re-create sarama-admin-a: %v", err)
	}
}

// TestSaramaLogAppendTime produces to a LogAppendTime topic: sarama takes
// each record's timestamp from the Produce response, and the consumer must
// read back that same timestamp, not the one the producer sent.
func TestSaramaLogAppendTime(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	admin := newSaramaAdmin(t, b)
	const topic = "sarama-log-append-time"
	logAppendTime := "LogAppendTime"
	detail := &sarama.TopicDetail{
		NumPartitions:     1,
		ReplicationFactor: 1,
		ConfigEntries:     map[string]*string{"message.timestamp.type": &logAppendTime},
	}
	if err := admin.CreateTopic(topic, detail, false); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	// A create time an hour old cannot be mistaken for the append time.
	sent := time.UnixMilli(time.Now().Add(-time.Hour).UnixMilli())
	var acked []record
	for _, v := range []sarama.KafkaVersion{sarama.V1_0_0_0, sarama.DefaultVersion, sarama.V4_0_0_0} {
		cfg := saramaConfig("sarama-lat-"+v.String(), v)
		cfg.Producer.Compression = sarama.CompressionGZIP
		producer := newSaramaSyncProducer(t, b, cfg)
		msgs := make([]*sarama.ProducerMessage, 3)
		for i := range msgs {
			msgs[i] = &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(testValue(v.String(), i)), Timestamp: sent}
		}
		if err := producer.SendMessages(msgs); err != nil {
			t.Fatalf("produce at %s: %v", v, err)
		}
		for i, msg := range msgs {
			if !msg.Timestamp.After(sent) {
				t.Errorf("%s: offset %d acknowledged with timestamp %v, not the broker's append time", v, msg.Offset, msg.Timestamp)
			}
			acked = append(acked, record{Offset: msg.Offset, Value: testValue(v.String(), i), TimestampMs: msg.Timestamp.UnixMilli()})
		}
	}
	checkContiguous(t, acked)
	checkConsumed(t, acked, saramaReadPartitions(t, []string{b.bootstrap}, saramaConfig("sarama-lat-reader", sarama.DefaultVersion), topic, acked))
}
