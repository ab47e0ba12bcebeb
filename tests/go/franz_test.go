package tarntest

// franz-go (kgo and kadm) against tarn: every codec, idempotent and plain;
// broker-side recompression and LogAppendTime; a consumer group of three
// with commits, a member leaving and one joining; a static member's restart;
// the admin client's topic and config calls.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// franzHeartbeat is the group heartbeat interval: short, so members notice
// a rebalance soon (the session timeout stays at the client's default).
const franzHeartbeat = 500 * time.Millisecond

func newFranzClient(t *testing.T, b *broker, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.bootstrap)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// newFranzAdmin returns a kadm client whose metadata is at most 100ms old
// (kadm answers ListTopics from kgo's cache, MetadataMinAge, 5s by default),
// so that a change shows up promptly.
func newFranzAdmin(t *testing.T, b *broker) *kadm.Client {
	t.Helper()
	return kadm.NewClient(newFranzClient(t, b, kgo.MetadataMinAge(100*time.Millisecond)))
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func franzCreateTopic(t *testing.T, adm *kadm.Client, topic string, partitions int32) {
	t.Helper()
	resp, err := adm.CreateTopic(testContext(t), partitions, 1, nil, topic)
	if err != nil {
		t.Fatalf("create topic %s: %v (%s)", topic, err, resp.ErrMessage)
	}
}

func toFranz(r record, topic string) *kgo.Record {
	rec := &kgo.Record{Topic: topic, Partition: r.Partition, Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return rec
}

func fromFranz(rec *kgo.Record) record {
	r := record{
		Partition:   rec.Partition,
		Offset:      rec.Offset,
		Key:         rec.Key,
		Value:       rec.Value,
		TimestampMs: rec.Timestamp.UnixMilli(),
	}
	for _, h := range rec.Headers {
		r.Headers = append(r.Headers, header{Key: h.Key, Value: h.Value})
	}
	return r
}

// franzProduce produces recs to topic and returns them as acknowledged
// (partition, offset, timestamp).
func franzProduce(t *testing.T, cl *kgo.Client, topic string, recs []record) []record {
	t.Helper()
	var out []*kgo.Record
	for _, r := range recs {
		out = append(out, toFranz(r, topic))
	}
	if err := cl.ProduceSync(testContext(t), out...).FirstErr(); err != nil {
		t.Fatalf("produce %d records to %s: %v", len(out), topic, err)
	}
	acked := make([]record, len(out))
	for i, rec := range out {
		acked[i] = fromFranz(rec)
	}
	return acked
}

func TestFranzProduceConsumeEveryCodec(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	adm := newFranzAdmin(t, b)
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
		// attr is the codec's id in a batch's attributes.
		attr uint8
	}{
		{"none", kgo.NoCompression(), 0},
		{"gzip", kgo.GzipCompression(), 1},
		{"snappy", kgo.SnappyCompression(), 2},
		{"lz4", kgo.Lz4Compression(), 3},
		{"zstd", kgo.ZstdCompression(), 4},
	}
	for _, c := range codecs {
		for _, idempotent := range []bool{true, false} {
			mode := "plain"
			opts := []kgo.Opt{kgo.ProducerBatchCompression(c.codec)}
			if idempotent {
				mode = "idempotent"
			} else {
				opts = append(opts, kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck()))
			}
			t.Run(c.name+"/"+mode, func(t *testing.T) {
				topic := fmt.Sprintf("franz-%s-%s", c.name, mode)
				const partitions = 3
				franzCreateTopic(t, adm, topic, partitions)
				producer := newFranzClient(t, b, opts...)
				var recs []record
				for i := range 30 {
					recs = append(recs, record{
						Key:     []byte(fmt.Sprintf("key-%d", i)),
						Value:   testValue(topic, i),
						Headers: testHeaders(i),
					})
				}
				// Keyed records with the default (hashing) partitioner.
				acked := franzProduce(t, producer, topic, recs)
				checkContiguous(t, acked)

				consumer := newFranzClient(t, b,
					kgo.ConsumeTopics(topic),
					kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
				got := franzPollUntil(t, consumer, len(acked), func(rec *kgo.Record) {
					if ct := rec.Attrs.CompressionType(); ct != c.attr {
						t.Errorf("partition %d offset %d came back in a batch with codec %d, produced with %s (%d)",
							rec.Partition, rec.Offset, ct, c.name, c.attr)
					}
					if idempotent && (rec.ProducerID < 0 || rec.ProducerEpoch < 0) {
						t.Errorf("partition %d offset %d: idempotent record has producer id %d epoch %d",
							rec.Partition, rec.Offset, rec.ProducerID, rec.ProducerEpoch)
					}
					if !idempotent && rec.ProducerID != -1 {
						t.Errorf("partition %d offset %d: plain record has producer id %d", rec.Partition, rec.Offset, rec.ProducerID)
					}
				})
				checkConsumed(t, acked, got)
				franzCheckEndOffsets(t, adm, topic, acked)
			})
		}
	}
}

// franzPollUntil polls a (non-group) consumer until it has n records,
// calling inspect on each.
func franzPollUntil(t *testing.T, cl *kgo.Client, n int, inspect func(*kgo.Record)) []record {
	t.Helper()
	ctx := testContext(t)
	var got []record
	for len(got) < n {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline", len(got), n)
		}
		fetches.EachError(func(topic string, p int32, err error) {
			t.Errorf("fetch %s-%d: %v", topic, p, err)
		})
		fetches.EachRecord(func(rec *kgo.Record) {
			inspect(rec)
			got = append(got, fromFranz(rec))
		})
	}
	return got
}

// franzCheckEndOffsets requires each partition's end offset (ListOffsets
// latest) to be one past its last acknowledged record.
func franzCheckEndOffsets(t *testing.T, adm *kadm.Client, topic string, acked []record) {
	t.Helper()
	want := map[int32]int64{}
	for _, r := range acked {
		want[r.Partition] = max(want[r.Partition], r.Offset+1)
	}
	ends, err := adm.ListEndOffsets(testContext(t), topic)
	if err != nil {
		t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Errorf("end offset of %s-%d: %v", topic, o.Partition, o.Err)
		} else if o.Offset != want[o.Partition] {
			t.Errorf("end offset of %s-%d is %d, want %d", topic, o.Partition, o.Offset, want[o.Partition])
		}
	})
}

// franzMember is one consumer-group member: a kgo client polling on its own
// goroutine, processing and committing each poll before it lets a rebalance
// through (BlockRebalanceOnPoll), so no record is processed twice.
type franzMember struct {
	name   string
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
}

func startFranzMember(t *testing.T, b *broker, ledger *groupLedger, name, group, topic string, extra ...kgo.Opt) *franzMember {
	t.Helper()
	m := &franzMember{name: name, done: make(chan struct{})}
	opts := append([]kgo.Opt{
		kgo.ClientID(name),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.HeartbeatInterval(franzHeartbeat),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
			ledger.assign(name, assigned[topic])
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
			ledger.revoke(name, revoked[topic])
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			// Only a fatal group error (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION...)
			// loses partitions; nothing in this test should cause one.
			t.Errorf("%s lost partitions %v", name, lost)
			ledger.revoke(name, lost[topic])
		}),
	}, extra...)
	m.cl = newFranzClient(t, b, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go m.run(t, ctx, ledger)
	// Runs before the client's Close (cleanups run last-registered first).
	t.Cleanup(m.stop)
	return m
}

func (m *franzMember) run(t *testing.T, ctx context.Context, ledger *groupLedger) {
	defer close(m.done)
	for {
		fetches := m.cl.PollFetches(ctx)
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s: fetch %s-%d: %v", m.name, topic, p, err)
			}
		})
		var recs []record
		fetches.EachRecord(func(rec *kgo.Record) { recs = append(recs, fromFranz(rec)) })
		if len(recs) > 0 {
			ledger.add(m.name, recs...)
			commitCtx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			err := m.cl.CommitRecords(commitCtx, fetches.Records()...)
			cancel()
			if err != nil {
				t.Errorf("%s: commit %d records: %v", m.name, len(recs), err)
			}
		}
		m.cl.AllowRebalance()
		if ctx.Err() != nil {
			return
		}
	}
}

// stop ends the member's poll loop (its last poll processed and
// committed); stopping a stopped member is a no-op.
func (m *franzMember) stop() {
	m.cancel()
	<-m.done
}

// leave stops the member and leaves the group (LeaveGroup), failing the
// test if the broker refuses the leave; the client is closed at cleanup.
func (m *franzMember) leave(t *testing.T) {
	t.Helper()
	m.stop()
	if err := m.cl.LeaveGroupContext(testContext(t)); err != nil {
		t.Errorf("%s: leave group: %v", m.name, err)
	}
}

// franzWaitGroup waits until the broker describes the group as Stable with
// exactly these members, each assigned what its client believes it owns.
func franzWaitGroup(t *testing.T, adm *kadm.Client, ledger *groupLedger, group, topic string, partitions int, members ...*franzMember) {
	t.Helper()
	names := make([]string, len(members))
	for i, m := range members {
		names[i] = m.name
	}
	waitFor(t, fmt.Sprintf("group %s to settle on %v", group, names), func() (bool, string) {
		if ok, state := ledger.balanced(partitions, names...); !ok {
			return false, state
		}
		described, err := adm.DescribeGroups(testContext(t), group)
		if err != nil {
			return false, fmt.Sprintf("describe groups: %v", err)
		}
		g := described[group]
		if g.Err != nil || g.State != "Stable" || len(g.Members) != len(members) {
			return false, fmt.Sprintf("group %s: state %q, %d members, err %v", group, g.State, len(g.Members), g.Err)
		}
		if g.ProtocolType != "consumer" || g.Protocol != "cooperative-sticky" {
			t.Errorf("group %s has protocol type %q, protocol %q; want consumer, cooperative-sticky", group, g.ProtocolType, g.Protocol)
		}
		for _, dm := range g.Members {
			member := slices.IndexFunc(members, func(m *franzMember) bool { return m.name == dm.ClientID })
			if member < 0 {
				return false, fmt.Sprintf("unexpected member %s (client %s)", dm.MemberID, dm.ClientID)
			}
			assignment, ok := dm.Assigned.AsConsumer()
			if !ok {
				return false, fmt.Sprintf("member %s: assignment is not a consumer assignment", dm.ClientID)
			}
			var assigned []int32
			for _, at := range assignment.Topics {
				if at.Topic == topic {
					assigned = append(assigned, at.Partitions...)
				}
			}
			slices.Sort(assigned)
			if owned := ledger.ownedBy(dm.ClientID); !slices.Equal(assigned, owned) {
				return false, fmt.Sprintf("broker says %s is assigned %v, the client owns %v", dm.ClientID, assigned, owned)
			}
		}
		return true, ""
	})
}

// franzWaitCommitted waits until the group's committed offset of every
// partition is want.
func franzWaitCommitted(t *testing.T, adm *kadm.Client, group, topic string, partitions int, want int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("group %s to commit offset %d on every partition", group, want), func() (bool, string) {
		offsets, err := adm.FetchOffsets(testContext(t), group)
		if err != nil {
			return false, fmt.Sprintf("fetch offsets: %v", err)
		}
		committed := map[int32]int64{}
		for p := range int32(partitions) {
			o, ok := offsets.Lookup(topic, p)
			if !ok || o.Err != nil {
				return false, fmt.Sprintf("partition %d: present %v, err %v", p, ok, o.Err)
			}
			committed[p] = o.At
		}
		for _, at := range committed {
			if at != want {
				return false, fmt.Sprintf("committed %v", committed)
			}
		}
		return true, ""
	})
}

func TestFranzConsumerGroupMemberLeavesOneJoins(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	adm := newFranzAdmin(t, b)
	const (
		topic        = "franz-group"
		group        = "franz-group-g"
		partitions   = 6
		perPartition = 10
	)
	franzCreateTopic(t, adm, topic, partitions)
	producer := newFranzClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))

	ledger := newGroupLedger("a", "b", "c", "d")
	a := startFranzMember(t, b, ledger, "a", group, topic)
	bm := startFranzMember(t, b, ledger, "b", group, topic)
	c := startFranzMember(t, b, ledger, "c", group, topic)
	// Records go out only once the three members share the partitions, so
	// no record is read before a rebalance moves its partition.
	franzWaitGroup(t, adm, ledger, group, topic, partitions, a, bm, c)
	owned := map[string][]int32{}
	for _, m := range []string{"a", "b", "c"} {
		owned[m] = ledger.ownedBy(m)
	}

	first := franzProduce(t, producer, topic, keyedRecords("first", partitions, perPartition))
	waitFor(t, "the group to process the first records", func() (bool, string) {
		return ledger.count() >= len(first), fmt.Sprintf("%d of %d", ledger.count(), len(first))
	})
	franzWaitCommitted(t, adm, group, topic, partitions, perPartition)
	for m, ps := range owned {
		checkOwnPartitions(t, m, ledger.consumedBy(m), ps)
	}

	// c leaves: a and b take its partitions over from its commits.
	c.leave(t)
	franzWaitGroup(t, adm, ledger, group, topic, partitions, a, bm)
	second := franzProduce(t, producer, topic, keyedRecords("second", partitions, perPartition))
	all := append(append([]record(nil), first...), second...)
	waitFor(t, "the group to process the second records", func() (bool, string) {
		return ledger.count() >= len(all), fmt.Sprintf("%d of %d", ledger.count(), len(all))
	})
	franzWaitCommitted(t, adm, group, topic, partitions, 2*perPartition)
	checkConsumed(t, all, ledger.all())
	for _, r := range ledger.consumedBy("c") {
		if r.Offset >= perPartition {
			t.Errorf("c processed partition %d offset %d after it left", r.Partition, r.Offset)
		}
	}
	for _, m := range []string{"a", "b"} {
		checkOwnPartitions(t, m, recordsFrom(ledger.consumedBy(m), perPartition), ledger.ownedBy(m))
	}

	// d joins: cooperative-sticky takes partitions from a and b in one
	// rebalance and hands them to d in a second, with no record processed
	// twice in between.
	d := startFranzMember(t, b, ledger, "d", group, topic)
	franzWaitGroup(t, adm, ledger, group, topic, partitions, a, bm, d)
	third := franzProduce(t, producer, topic, keyedRecords("third", partitions, perPartition))
	all = append(all, third...)
	waitFor(t, "the group to process the third records", func() (bool, string) {
		return ledger.count() >= len(all), fmt.Sprintf("%d of %d", ledger.count(), len(all))
	})
	franzWaitCommitted(t, adm, group, topic, partitions, 3*perPartition)
	checkConsumed(t, all, ledger.all())
	for _, m := range []string{"a", "b", "d"} {
		checkOwnPartitions(t, m, recordsFrom(ledger.consumedBy(m), 2*perPartition), ledger.ownedBy(m))
	}

	a.leave(t)
	bm.leave(t)
	d.leave(t)
	waitFor(t, "the group to be empty once every member left", func() (bool, string) {
		described, err := adm.DescribeGroups(testContext(t), group)
		if err != nil {
			return false, fmt.Sprintf("describe groups: %v", err)
		}
		g := described[group]
		return g.State == "Empty" && len(g.Members) == 0, fmt.Sprintf("state %q, %d members", g.State, len(g.Members))
	})
	franzWaitCommitted(t, adm, group, topic, partitions, 3*perPartition)
}

// TestFranzStaticMemberRestart restarts a static member (KIP-345) as a
// rolling deploy would: it stops without leaving, records arrive for its
// partitions meanwhile, and it comes back with the same instance id to the
// same partitions, without a rebalance, resuming from its commits.
func TestFranzStaticMemberRestart(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	adm := newFranzAdmin(t, b)
	const (
		topic        = "franz-static"
		group        = "franz-static-g"
		partitions   = 4
		perPartition = 5
	)
	franzCreateTopic(t, adm, topic, partitions)
	producer := newFranzClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ledger := newGroupLedger("a", "b")
	a := startFranzMember(t, b, ledger, "a", group, topic, kgo.InstanceID("franz-static-a"))
	bm := startFranzMember(t, b, ledger, "b", group, topic, kgo.InstanceID("franz-static-b"))
	franzWaitGroup(t, adm, ledger, group, topic, partitions, a, bm)
	_, generation := a.cl.GroupMetadata()
	ownedA, ownedB := ledger.ownedBy("a"), ledger.ownedBy("b")

	first := franzProduce(t, producer, topic, keyedRecords("first", partitions, perPartition))
	waitFor(t, "the group to process the first records", func() (bool, string) {
		return ledger.count() >= len(first), fmt.Sprintf("%d of %d", ledger.count(), len(first))
	})
	franzWaitCommitted(t, adm, group, topic, partitions, perPartition)

	// A static member's Close sends no LeaveGroup: its partitions wait.
	bm.stop()
	bm.cl.Close()
	second := franzProduce(t, producer, topic, keyedRecords("second", partitions, perPartition))
	restarted := startFranzMember(t, b, ledger, "b", group, topic, kgo.InstanceID("franz-static-b"))
	all := append(append([]record(nil), first...), second...)
	waitFor(t, "the restarted member to process the records that waited for it", func() (bool, string) {
		return ledger.count() >= len(all), fmt.Sprintf("%d of %d", ledger.count(), len(all))
	})
	franzWaitCommitted(t, adm, group, topic, partitions, 2*perPartition)
	franzWaitGroup(t, adm, ledger, group, topic, partitions, a, restarted)
	checkConsumed(t, all, ledger.all())
	if got := ledger.ownedBy("b"); !slices.Equal(got, ownedB) {
		t.Errorf("restarted static member owns %v, owned %v before", got, ownedB)
	}
	if got := ledger.ownedBy("a"); !slices.Equal(got, ownedA) {
		t.Errorf("a owns %v after b's restart, owned %v before", got, ownedA)
	}
	if _, now := a.cl.GroupMetadata(); now != generation {
		t.Errorf("b's restart moved the group from generation %d to %d: a static rejoin should not rebalance", generation, now)
	}
	checkOwnPartitions(t, "a", ledger.consumedBy("a"), ownedA)
	checkOwnPartitions(t, "b", ledger.consumedBy("b"), ownedB)
}

func TestFranzAdminTopicsAndConfigs(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	adm := newFranzAdmin(t, b)
	ctx := testContext(t)

	configs := map[string]*string{"retention.ms": kadm.StringPtr("3600000"), "cleanup.policy": kadm.StringPtr("compact")}
	created, err := adm.CreateTopics(ctx, 3, 1, configs, "franz-admin-a", "franz-admin-b")
	if err != nil {
		t.Fatalf("create topics: %v", err)
	}
	ids := map[string]kadm.TopicID{}
	for _, topic := range []string{"franz-admin-a", "franz-admin-b"} {
		r, ok := created[topic]
		switch {
		case !ok:
			t.Fatalf("create topics answered nothing for %s: %v", topic, created)
		case r.Err != nil:
			t.Fatalf("create %s: %v (%s)", topic, r.Err, r.ErrMessage)
		case r.NumPartitions != 3 || r.ReplicationFactor != 1:
			t.Errorf("create %s answered %d partitions, replication %d; want 3, 1", topic, r.NumPartitions, r.ReplicationFactor)
		case r.ID == kadm.TopicID{}:
			t.Errorf("create %s answered no topic id", topic)
		}
		if v := r.Configs["retention.ms"].Value; v == nil || *v != "3600000" {
			t.Errorf("create %s answered retention.ms %v, want 3600000", topic, r.Configs["retention.ms"])
		}
		ids[topic] = r.ID
	}

	again, err := adm.CreateTopic(ctx, 3, 1, nil, "franz-admin-a")
	if !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Errorf("create an existing topic: got %v (%s), want TOPIC_ALREADY_EXISTS", err, again.ErrMessage)
	}
	bad, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": kadm.StringPtr("soon")}, "franz-admin-bad")
	if !errors.Is(err, kerr.InvalidConfig) {
		t.Errorf("create with retention.ms=soon: got %v (%s), want INVALID_CONFIG", err, bad.ErrMessage)
	}
	zero, err := adm.CreateTopic(ctx, 0, 1, nil, "franz-admin-zero")
	if !errors.Is(err, kerr.InvalidPartitions) {
		t.Errorf("create with 0 partitions: got %v (%s), want INVALID_PARTITIONS", err, zero.ErrMessage)
	}

	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	for _, name := range []string{"franz-admin-bad", "franz-admin-zero"} {
		if topics.Has(name) {
			t.Errorf("refused topic %s is listed", name)
		}
	}
	for topic, id := range ids {
		d, ok := topics[topic]
		if !ok || d.Err != nil {
			t.Fatalf("list topics: %s present %v, err %v", topic, ok, d.Err)
		}
		if d.ID != id || d.IsInternal || len(d.Partitions) != 3 {
			t.Errorf("%s listed with id %v (created %v), internal %v, %d partitions", topic, d.ID, id, d.IsInternal, len(d.Partitions))
		}
		for p, pd := range d.Partitions {
			if pd.Err != nil || pd.Leader < 0 || !slices.Equal(pd.Replicas, []int32{pd.Leader}) || !slices.Equal(pd.ISR, []int32{pd.Leader}) {
				t.Errorf("%s-%d: leader %d, replicas %v, isr %v, err %v", topic, p, pd.Leader, pd.Replicas, pd.ISR, pd.Err)
			}
		}
	}

	described, err := adm.DescribeTopicConfigs(ctx, "franz-admin-a")
	if err != nil {
		t.Fatalf("describe topic configs: %v", err)
	}
	rc, err := described.On("franz-admin-a", nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("describe configs of franz-admin-a: %v, %v", err, rc.Err)
	}
	wantConfigs := map[string]struct {
		value  string
		source kmsg.ConfigSource
	}{
		"retention.ms":   {"3600000", kmsg.ConfigSourceDynamicTopicConfig},
		"cleanup.policy": {"compact", kmsg.ConfigSourceDynamicTopicConfig},
		"segment.bytes":  {"1073741824", kmsg.ConfigSourceDefaultConfig},
	}
	for key, want := range wantConfigs {
		i := slices.IndexFunc(rc.Configs, func(c kadm.Config) bool { return c.Key == key })
		if i < 0 {
			t.Errorf("describe configs of franz-admin-a has no %s", key)
			continue
		}
		got := rc.Configs[i]
		if got.Value == nil || *got.Value != want.value || got.Source != want.source {
			t.Errorf("%s = %v (source %v), want %s (source %v)", key, got.MaybeValue(), got.Source, want.value, want.source)
		}
	}

	deleted, err := adm.DeleteTopics(ctx, "franz-admin-a")
	if err != nil {
		t.Fatalf("delete topics: %v", err)
	}
	if r := deleted["franz-admin-a"]; r.Err != nil {
		t.Fatalf("delete franz-admin-a: %v (%s)", r.Err, r.ErrMessage)
	}
	waitFor(t, "franz-admin-a to leave the metadata", func() (bool, string) {
		topics, err := adm.ListTopics(ctx)
		if err != nil {
			return false, fmt.Sprintf("list topics: %v", err)
		}
		return !topics.Has("franz-admin-a") && topics.Has("franz-admin-b"), fmt.Sprintf("topics %v", topics.Names())
	})
	missing, err := adm.DeleteTopic(ctx, "franz-admin-missing")
	if !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Errorf("delete a missing topic: got %v (%s), want UNKNOWN_TOPIC_OR_PARTITION", err, missing.ErrMessage)
	}
	recreated, err := adm.CreateTopic(ctx, 1, 1, nil, "franz-admin-a")
	if err != nil {
		t.Fatalf("re-create franz-admin-a: %v (%s)", err, recreated.ErrMessage)
	}
	if recreated.ID == ids["franz-admin-a"] {
		t.Errorf("re-created franz-admin-a kept the deleted topic's id %v", recreated.ID)
	}
}

// TestFranzTopicCodecAndLogAppendTime produces with one codec to topics
// whose compression.type asks for another (the broker recompresses) or
// whose message.timestamp.type is LogAppendTime, and requires null and empty
// keys, values and header values to come back as they went out.
func TestFranzTopicCodecAndLogAppendTime(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	adm := newFranzAdmin(t, b)
	cases := []struct {
		topicCodec    string
		producerCodec kgo.CompressionCodec
		storedAttr    uint8
		logAppendTime bool
	}{
		{"zstd", kgo.GzipCompression(), 4, false},
		{"uncompressed", kgo.Lz4Compression(), 0, false},
		{"gzip", kgo.NoCompression(), 1, false},
		{"producer", kgo.SnappyCompression(), 2, true},
		{"lz4", kgo.ZstdCompression(), 3, true},
	}
	for _, c := range cases {
		tsType := "CreateTime"
		if c.logAppendTime {
			tsType = "LogAppendTime"
		}
		t.Run(c.topicCodec+"/"+tsType, func(t *testing.T) {
			ctx := testContext(t)
			topic := "franz-topic-" + c.topicCodec + "-" + tsType
			configs := map[string]*string{
				"compression.type":       kadm.StringPtr(c.topicCodec),
				"message.timestamp.type": kadm.StringPtr(tsType),
			}
			if resp, err := adm.CreateTopic(ctx, 1, 1, configs, topic); err != nil {
				t.Fatalf("create %s: %v (%s)", topic, err, resp.ErrMessage)
			}
			recs := []*kgo.Record{
				{Topic: topic, Key: nil, Value: nil},
				{Topic: topic, Key: []byte{}, Value: []byte{}},
				{Topic: topic, Key: []byte("k"), Value: testValue(topic, 0), Headers: []kgo.RecordHeader{
					{Key: "null", Value: nil}, {Key: "empty", Value: []byte{}}, {Key: "", Value: []byte("v")},
				}},
			}
			for i := range 20 {
				recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint(i)), Value: testValue(topic, i)})
			}
			producer := newFranzClient(t, b, kgo.ProducerBatchCompression(c.producerCodec))
			if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatalf("produce to %s: %v", topic, err)
			}
			consumer := newFranzClient(t, b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			var got []*kgo.Record
			for len(got) < len(recs) {
				fetches := consumer.PollFetches(ctx)
				if ctx.Err() != nil {
					t.Fatalf("consumed %d of %d records before the deadline", len(got), len(recs))
				}
				fetches.EachError(func(topic string, p int32, err error) { t.Errorf("fetch %s-%d: %v", topic, p, err) })
				got = append(got, fetches.Records()...)
			}
			for i, r := range got {
				w := recs[i]
				if r.Offset != w.Offset || !sameNullable(r.Key, w.Key) || !sameNullable(r.Value, w.Value) {
					t.Errorf("offset %d: key %q (nil %v) value %.20q (nil %v); produced offset %d key %q (nil %v) value %.20q (nil %v)",
						r.Offset, r.Key, r.Key == nil, r.Value, r.Value == nil, w.Offset, w.Key, w.Key == nil, w.Value, w.Value == nil)
				}
				if len(r.Headers) != len(w.Headers) {
					t.Errorf("offset %d: %d headers, produced %d", r.Offset, len(r.Headers), len(w.Headers))
				} else {
					for h := range r.Headers {
						if r.Headers[h].Key != w.Headers[h].Key || !sameNullable(r.Headers[h].Value, w.Headers[h].Value) {
							t.Errorf("offset %d: header %d is %q=%q (nil %v), produced %q=%q (nil %v)", r.Offset, h,
								r.Headers[h].Key, r.Headers[h].Value, r.Headers[h].Value == nil, w.Headers[h].Key, w.Headers[h].Value, w.Headers[h].Value == nil)
						}
					}
				}
				if ct := r.Attrs.CompressionType(); ct != c.storedAttr {
					t.Errorf("offset %d came back with codec %d, want %d (topic compression.type=%s)", r.Offset, ct, c.storedAttr, c.topicCodec)
				}
				if r.ProducerID != w.ProducerID || r.ProducerID < 0 {
					t.Errorf("offset %d: producer id %d, produced with %d", r.Offset, r.ProducerID, w.ProducerID)
				}
				switch {
				case c.logAppendTime && (r.Attrs.TimestampType() != 1 || r.Timestamp.Before(w.Timestamp.Truncate(time.Millisecond))):
					t.Errorf("offset %d: timestamp %v type %d, want a log append time (type 1) no earlier than the create time %v",
						r.Offset, r.Timestamp, r.Attrs.TimestampType(), w.Timestamp)
				case !c.logAppendTime && (r.Attrs.TimestampType() != 0 || r.Timestamp.UnixMilli() != w.Timestamp.UnixMilli()):
					t.Errorf("offset %d: timestamp %v type %d, want the create time %v (type 0)", r.Offset, r.Timestamp, r.Attrs.TimestampType(), w.Timestamp)
				}
			}
		})
	}
}

// sameNullable is bytes equality that tells null from empty.
func sameNullable(a, b []byte) bool {
	return (a == nil) == (b == nil) && string(a) == string(b)
}
