package tarntest

// A franz-go consumer group through the SIGKILL of its coordinator, on a
// three-node cluster whose __consumer_offsets has three replicas: the
// offsets committed before the kill are still there when read from the
// coordinator elected in its place, the member goes on consuming and
// committing through the failover, and a member that takes over after it
// starts exactly where the commits say, skipping nothing and reading
// nothing twice.

import (
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// franzWaitCoordinator waits until the group has a coordinator among the
// running nodes and returns it. The first FindCoordinator creates
// __consumer_offsets, so the first answers may be COORDINATOR_NOT_AVAILABLE;
// after a kill, the dead coordinator is answered until its partition of
// __consumer_offsets has a new leader.
func franzWaitCoordinator(t *testing.T, c *cluster, adm *kadm.Client, group string) int32 {
	t.Helper()
	var coordinator int32
	waitEvery(t, fmt.Sprintf("group %s to have a coordinator among nodes %v", group, c.running()), viewInterval, func() (bool, string) {
		r := adm.FindGroupCoordinators(testContext(t), group)[group]
		if r.Err != nil {
			return false, fmt.Sprintf("find coordinator: %v (%s)", r.Err, r.ErrMessage)
		}
		coordinator = r.NodeID
		return slices.Contains(c.running(), r.NodeID), fmt.Sprintf("coordinator %d", r.NodeID)
	})
	return coordinator
}

func TestFranzGroupConsumesThroughACoordinatorsSigkill(t *testing.T) {
	// offsets.topic.replication.factor is 3 by default in a cluster, as in
	// Kafka; set here so the test says what it relies on.
	c := startCluster(t, "offsets.topic.replication.factor", "3")
	const (
		topic    = "franz-group-failover"
		group    = "franz-group-failover-g"
		perRound = 20
	)
	adm := newFranzClusterAdmin(t, c)
	leaders := franzCreateFailoverTopic(t, c, adm, topic)
	victim := franzWaitCoordinator(t, c, adm, group)
	// The members bootstrap from a node that survives; they find the others
	// (the victim too) in its metadata.
	var seed *broker
	for _, id := range c.running() {
		if id != victim {
			seed = c.nodes[id]
			break
		}
	}
	clientLog := &franzClientLog{}
	producer := newFranzFailoverProducer(t, c, clientLog, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	memberOpts := []kgo.Opt{kgo.RetryTimeout(failoverDelivery), kgo.RequestRetries(failoverRetries)}

	ledger := newGroupLedger("a", "b")
	memberLog := &franzClientLog{}
	a := startFranzMember(t, seed, ledger, "a", group, topic, append(memberOpts, kgo.WithLogger(memberLog))...)
	franzWaitGroup(t, adm, ledger, group, topic, failoverPartitions, a)
	first := franzProduce(t, producer, topic, keyedRecords("first", failoverPartitions, perRound))
	waitFor(t, "the group to process the first records", func() (bool, string) {
		return ledger.count() >= len(first), fmt.Sprintf("%d of %d", ledger.count(), len(first))
	})
	franzWaitCommitted(t, adm, group, topic, failoverPartitions, perRound)

	t.Logf("leaders by partition %v; SIGKILL node %d, the group's coordinator (the active controller is node %d)", leaders, victim, c.controller)
	c.kill(t, victim)
	successor := franzWaitCoordinator(t, c, adm, group)
	t.Logf("the group's coordinator is node %d now", successor)
	// kgo (v1.22.3) sends OffsetFetch and DescribeGroups as sharded
	// requests, which keep dialing a cached coordinator that is dead: only
	// the requests a member sends (commits, heartbeats) forget it on a dial
	// error. A new admin client, made once the survivors name the successor,
	// asks the successor.
	adm = newFranzClusterAdmin(t, c)
	// Commits acknowledged before the kill were replicated, so the
	// successor has every one.
	franzWaitCommitted(t, adm, group, topic, failoverPartitions, perRound)

	// a goes on through the failover: fetches move to the new leaders and
	// commits to the new coordinator. Its poll loop fails the test on any
	// fetch or commit error that reaches it, and its OnPartitionsLost on a
	// lost membership.
	second := franzProduce(t, producer, topic, keyedRecords("second", failoverPartitions, perRound))
	all := append(append([]record(nil), first...), second...)
	waitFor(t, "the group to process the second records", func() (bool, string) {
		return ledger.count() >= len(all), fmt.Sprintf("%d of %d", ledger.count(), len(all))
	})
	franzWaitCommitted(t, adm, group, topic, failoverPartitions, 2*perRound)

	// b takes over from a's commits, which the new coordinator holds.
	a.leave(t)
	memberLog.check(t, "member a")
	third := franzProduce(t, producer, topic, keyedRecords("third", failoverPartitions, perRound))
	all = append(all, third...)
	b := startFranzMember(t, seed, ledger, "b", group, topic, memberOpts...)
	waitFor(t, "the new member to process the third records", func() (bool, string) {
		return ledger.count() >= len(all), fmt.Sprintf("%d of %d", ledger.count(), len(all))
	})
	franzWaitCommitted(t, adm, group, topic, failoverPartitions, 3*perRound)
	franzWaitGroup(t, adm, ledger, group, topic, failoverPartitions, b)
	clientLog.check(t, "the producer")

	checkConsumed(t, all, ledger.all())
	for _, r := range ledger.consumedBy("b") {
		if r.Offset < 2*perRound {
			t.Errorf("b read partition %d offset %d, which a had processed and committed", r.Partition, r.Offset)
		}
	}
	for _, r := range ledger.consumedBy("a") {
		if r.Offset >= 2*perRound {
			t.Errorf("a processed partition %d offset %d after it left", r.Partition, r.Offset)
		}
	}
}
