package tarntest

// franz-go and sarama against a three-node cluster (cluster_harness_test.go),
// as tests/python/test_cluster.py's
// test_clients_produce_and_consume_through_a_leaders_sigkill drives the
// Python clients: an idempotent acks=all producer keeps producing to a topic
// of replication factor 3 and min.insync.replicas=2 while the leader of
// partition 0 is SIGKILLed, sees only errors it retries, and every record it
// had acknowledged, before or after the kill, is read back once from the
// survivors, where it was acknowledged.
//
// These tests do not call t.Parallel: three nodes and a failover that waits
// out a broker session are enough load for a small machine, and the
// single-broker tests (all parallel) start only once these are done.

import (
	"fmt"
	"log"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	failoverPartitions = 3
	failoverReplicas   = 3
	failoverMinISR     = "2"
	// The records go out in rounds, each acknowledged before the next is
	// sent: the first round after the kill spans the outage, and the later
	// ones carry on the idempotent producer's sequences at the new leader.
	failoverRounds   = 6
	failoverPerRound = 20
	// failoverDelivery bounds how long a client may retry one record: the
	// controller fences a dead broker after its session (9 s) and then
	// elects new leaders; the rest is slack for a loaded machine.
	failoverDelivery = 60 * time.Second
	failoverBackoff  = 500 * time.Millisecond
	// failoverRetries is enough tries at failoverBackoff to outlast
	// failoverDelivery.
	failoverRetries = int(failoverDelivery / failoverBackoff)
)

// failoverRecords is one round of keyed records; a key recurs across
// rounds, so each key's records must stay in order on one partition through
// the failover.
func failoverRecords(tag string, round int) []record {
	recs := make([]record, failoverPerRound)
	for i := range recs {
		n := round*failoverPerRound + i
		recs[i] = record{
			Key:     []byte(fmt.Sprintf("key-%d", n%(2*failoverPerRound))),
			Value:   testValue(tag, n),
			Headers: testHeaders(n),
		}
	}
	return recs
}

// sigkillLeader SIGKILLs the leader of partition 0 and logs whether it was
// the active controller too (then the survivors elect a controller before
// they can elect partition leaders).
func sigkillLeader(t *testing.T, c *cluster, leaders []int32) int32 {
	t.Helper()
	victim := leaders[0]
	t.Logf("leaders by partition %v; SIGKILL node %d (the active controller is node %d)", leaders, victim, c.controller)
	c.kill(t, victim)
	return victim
}

// franzClientLog keeps what a kgo client logs at info level and above, so
// that a test can show which errors the client retried through a failover,
// and fail on any it logs as an error (the broker answered something that
// breaks the protocol, or the client gave records up).
type franzClientLog struct {
	mu    sync.Mutex
	lines []string
	// errors are the lines logged at LogLevelError.
	errors []string
}

func (l *franzClientLog) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (l *franzClientLog) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	line := fmt.Sprintf("%s %s %v", level, msg, keyvals)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	if level == kgo.LogLevelError {
		l.errors = append(l.errors, line)
	}
}

// check logs what the client logged and fails the test on its errors.
func (l *franzClientLog) check(t *testing.T, client string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("%s logged %d lines at info level and above:\n%s", client, len(l.lines), strings.Join(l.lines, "\n"))
	if len(l.errors) > 0 {
		t.Errorf("%s logged errors:\n%s", client, strings.Join(l.errors, "\n"))
	}
}

func newFranzClusterClient(t *testing.T, seeds []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// newFranzClusterAdmin returns a kadm client seeded with the running
// nodes, whose metadata is at most 100ms old (see newFranzAdmin).
func newFranzClusterAdmin(t *testing.T, c *cluster) *kadm.Client {
	t.Helper()
	return kadm.NewClient(newFranzClusterClient(t, c.bootstrap(), kgo.MetadataMinAge(100*time.Millisecond)))
}

// franzCreateFailoverTopic creates topic with failoverPartitions
// partitions of failoverReplicas replicas and min.insync.replicas
// failoverMinISR, and returns its leaders by partition once every node sees
// them.
func franzCreateFailoverTopic(t *testing.T, c *cluster, adm *kadm.Client, topic string) []int32 {
	t.Helper()
	configs := map[string]*string{"min.insync.replicas": kadm.StringPtr(failoverMinISR)}
	if resp, err := adm.CreateTopic(testContext(t), failoverPartitions, failoverReplicas, configs, topic); err != nil {
		t.Fatalf("create topic %s: %v (%s)", topic, err, resp.ErrMessage)
	}
	return c.waitForTopic(t, topic, failoverPartitions)
}

// newFranzFailoverProducer returns an idempotent acks=all producer seeded
// with the running nodes, that retries every record for up to
// failoverDelivery and logs to clientLog.
func newFranzFailoverProducer(t *testing.T, c *cluster, clientLog *franzClientLog, extra ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts := append([]kgo.Opt{
		kgo.WithLogger(clientLog),
		// Idempotent writes are kgo's default; acks=all is what they require
		// and what makes an acknowledged record survive its leader.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(failoverDelivery),
		kgo.RequestRetries(failoverRetries),
		kgo.RetryTimeout(failoverDelivery),
		kgo.RetryBackoffFn(func(int) time.Duration { return failoverBackoff }),
	}, extra...)
	return newFranzClusterClient(t, c.bootstrap(), opts...)
}

func TestFranzProducesThroughALeadersSigkill(t *testing.T) {
	c := startCluster(t)
	const topic = "franz-failover"
	adm := newFranzClusterAdmin(t, c)
	leaders := franzCreateFailoverTopic(t, c, adm, topic)
	clientLog := &franzClientLog{}
	producer := newFranzFailoverProducer(t, c, clientLog)
	var acked []record
	for round := range failoverRounds / 2 {
		acked = append(acked, franzProduce(t, producer, topic, failoverRecords("before", round))...)
	}

	victim := sigkillLeader(t, c, leaders)
	// franzProduce fails the test on any error that reaches a record: kgo
	// retries NOT_LEADER_OR_FOLLOWER, the dead connection and the like
	// itself, so only an error it does not retry (or a timeout) gets here.
	for round := failoverRounds / 2; round < failoverRounds; round++ {
		acked = append(acked, franzProduce(t, producer, topic, failoverRecords("after", round))...)
	}
	c.waitLed(t, topic, failoverPartitions)
	clientLog.check(t, "the producer")

	// An idempotent producer's retries are deduplicated, so each
	// partition's acknowledged offsets have no gap, and the log ends where
	// they do: nothing was written twice.
	checkContiguous(t, acked)
	franzCheckEndOffsets(t, adm, topic, acked)
	consumer := newFranzClusterClient(t, c.bootstrap(),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := franzPollUntil(t, consumer, len(acked), func(*kgo.Record) {})
	checkConsumed(t, acked, got)
	t.Logf("%d records acknowledged and read back; node %d was killed", len(acked), victim)
}

// saramaLog collects what sarama logs (sarama.Logger, a package variable)
// for one test. Only a test that runs alone may install it: these do not
// call t.Parallel.
type saramaLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *saramaLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// installSaramaLog points sarama.Logger at a new saramaLog until the test's
// cleanups reach it, which happens after those of the clients it creates
// later.
func installSaramaLog(t *testing.T) *saramaLog {
	t.Helper()
	l := &saramaLog{}
	previous := sarama.Logger
	sarama.Logger = log.New(l, "sarama: ", 0)
	t.Cleanup(func() { sarama.Logger = previous })
	return l
}

// retries logs the lines where sarama says it retries or met an error:
// sarama logs every metadata fetch and connection too.
func (l *saramaLog) retries(t *testing.T, client string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var picked []string
	for _, line := range l.lines {
		lower := strings.ToLower(line)
		if strings.Contains(lower, "retr") || strings.Contains(lower, "err") {
			picked = append(picked, line)
		}
	}
	t.Logf("%s logged %d lines, %d about errors and retries:\n%s", client, len(l.lines), len(picked), strings.Join(picked, "\n"))
}

func TestSaramaProducesThroughALeadersSigkill(t *testing.T) {
	clientLog := installSaramaLog(t)
	c := startCluster(t)
	const topic = "sarama-failover"
	admin, err := sarama.NewClusterAdmin(c.bootstrap(), saramaConfig("sarama-admin", sarama.DefaultVersion))
	if err != nil {
		t.Fatalf("sarama.NewClusterAdmin: %v", err)
	}
	t.Cleanup(func() {
		if err := admin.Close(); err != nil {
			t.Errorf("close cluster admin: %v", err)
		}
	})
	minISR := failoverMinISR
	detail := &sarama.TopicDetail{
		NumPartitions:     failoverPartitions,
		ReplicationFactor: failoverReplicas,
		ConfigEntries:     map[string]*string{"min.insync.replicas": &minISR},
	}
	if err := admin.CreateTopic(topic, detail, false); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	leaders := c.waitForTopic(t, topic, failoverPartitions)

	cfg := saramaConfig("sarama-failover", sarama.DefaultVersion)
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	// sarama's idempotent producer keeps one request in flight per broker.
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Retry.Max = failoverRetries
	cfg.Producer.Retry.Backoff = failoverBackoff
	cfg.Metadata.Retry.Max = failoverRetries
	cfg.Metadata.Retry.Backoff = failoverBackoff
	producer, err := sarama.NewSyncProducer(c.bootstrap(), cfg)
	if err != nil {
		t.Fatalf("sarama.NewSyncProducer: %v", err)
	}
	t.Cleanup(func() {
		if err := producer.Close(); err != nil {
			t.Errorf("close producer: %v", err)
		}
	})
	var acked []record
	for round := range failoverRounds / 2 {
		acked = append(acked, saramaProduce(t, producer, topic, failoverRecords("before", round))...)
	}

	victim := sigkillLeader(t, c, leaders)
	// saramaProduce fails the test on any error that reaches a message:
	// sarama retries the errors it deems retriable (up to Retry.Max), so
	// only another error, or running out of retries, gets here.
	for round := failoverRounds / 2; round < failoverRounds; round++ {
		acked = append(acked, saramaProduce(t, producer, topic, failoverRecords("after", round))...)
	}
	c.waitLed(t, topic, failoverPartitions)
	clientLog.retries(t, "sarama")

	// See TestFranzProducesThroughALeadersSigkill: no gap, no excess.
	checkContiguous(t, acked)
	saramaCheckEndOffsets(t, c.bootstrap(), cfg, topic, acked)
	checkConsumed(t, acked, saramaReadPartitions(t, c.bootstrap(), cfg, topic, acked))
	t.Logf("%d records acknowledged and read back; node %d was killed", len(acked), victim)
}

// saramaCheckEndOffsets requires each partition's newest offset (as its
// leader answers ListOffsets) to be one past its last acknowledged record.
func saramaCheckEndOffsets(t *testing.T, addrs []string, cfg *sarama.Config, topic string, acked []record) {
	t.Helper()
	client, err := sarama.NewClient(addrs, cfg)
	if err != nil {
		t.Fatalf("sarama.NewClient: %v", err)
	}
	defer closeOrFail(t, client, "sarama client")
	want := map[int32]int64{}
	for _, r := range acked {
		want[r.Partition] = max(want[r.Partition], r.Offset+1)
	}
	for p := range int32(failoverPartitions) {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Errorf("end offset of %s-%d: %v", topic, p, err)
		} else if end != want[p] {
			t.Errorf("end offset of %s-%d is %d, want %d", topic, p, end, want[p])
		}
	}
}
