package tarntest

// A three-node tarn cluster, as tests/python/test_cluster.py's TarnCluster
// runs it: each node is a broker and a controller (a voter of the metadata
// quorum) on fixed loopback ports given in its `listeners` key, with its own
// data dir. startCluster waits until every node's own Metadata lists the
// three brokers and one controller; at the end the nodes still running get
// SIGTERM, the active controller last, and each must exit 0 with no panic in
// its stderr (a node SIGKILLed on purpose is only checked for panics).

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	clusterNodes = 3
	// viewTimeout bounds one Metadata round trip to one node.
	viewTimeout = 5 * time.Second
	// viewInterval is how often a wait on the nodes' views asks again: each
	// ask is a new connection to every node.
	viewInterval = 200 * time.Millisecond

	// Ports are handed out below Linux's ephemeral range (32768 on), so no
	// outgoing connection takes one while its node is down; each test
	// process starts at its own offset, and a port is checked free by
	// binding it.
	portFirst = 20_000
	portSpan  = 12_000
)

var ports struct {
	sync.Mutex
	handedOut int
}

// freePort returns a loopback port that was free a moment ago and that this
// process has not handed out before.
func freePort(t *testing.T) int {
	t.Helper()
	ports.Lock()
	defer ports.Unlock()
	// Another multiplier than the Python suite's, so that a Go and a Python
	// run side by side do not walk the same sequence.
	offset := (os.Getpid() * 13) % portSpan
	for ports.handedOut < portSpan {
		port := portFirst + (offset+ports.handedOut)%portSpan
		ports.handedOut++
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken
		}
		if err := l.Close(); err != nil {
			t.Fatalf("close probe listener on port %d: %v", port, err)
		}
		return port
	}
	t.Fatalf("ran out of ports to hand out")
	return 0
}

// cluster is three `tarn serve` nodes forming one metadata quorum.
type cluster struct {
	// nodes and addrs are keyed by node.id, 1 to clusterNodes.
	nodes map[int32]*broker
	addrs map[int32]string
	// controller is the active controller once the cluster formed.
	controller int32
}

// startCluster starts the nodes one after the other (a node prints its
// ready line before the quorum has formed), each with the key, value pairs
// of settings on top of its cluster keys, waits until they form one
// cluster, and registers the ordered stop with t.Cleanup. Register client
// cleanups after this call so that they run first.
func startCluster(t *testing.T, settings ...string) *cluster {
	t.Helper()
	kafkaPorts := make([]int, clusterNodes)
	controllerPorts := make([]int, clusterNodes)
	for i := range clusterNodes {
		kafkaPorts[i] = freePort(t)
	}
	voters := make([]string, clusterNodes)
	for i := range clusterNodes {
		controllerPorts[i] = freePort(t)
		voters[i] = fmt.Sprintf("%d@127.0.0.1:%d", i+1, controllerPorts[i])
	}
	c := &cluster{nodes: map[int32]*broker{}, addrs: map[int32]string{}}
	scratch := t.TempDir()
	for i := range clusterNodes {
		id := int32(i + 1)
		listeners := fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", kafkaPorts[i], controllerPorts[i])
		dir := filepath.Join(scratch, fmt.Sprintf("node%d", id))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("create %s: %v", dir, err)
		}
		keys := append([]string{
			"node.id", strconv.Itoa(int(id)),
			"process.roles", "broker,controller",
			"controller.listener.names", "CONTROLLER",
			"controller.quorum.voters", strings.Join(voters, ","),
		}, settings...)
		node := startTarn(t, fmt.Sprintf("node %d", id), dir, []string{"--set", "listeners=" + listeners}, keys...)
		if want := fmt.Sprintf("127.0.0.1:%d", kafkaPorts[i]); node.bootstrap != want {
			t.Fatalf("node %d listens on %s, its listeners say %s", id, node.bootstrap, want)
		}
		c.nodes[id] = node
		c.addrs[id] = node.bootstrap
	}
	// Registered after the nodes' own stops, so it runs before them.
	t.Cleanup(func() { c.stop(t) })
	c.controller = c.waitFormed(t)
	return c
}

// running is the ids of the nodes the test has not stopped or killed,
// sorted.
func (c *cluster) running() []int32 {
	var ids []int32
	for id, node := range c.nodes {
		if !node.ended {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// bootstrap is the running nodes' addresses, for a client's seed list.
func (c *cluster) bootstrap() []string {
	var addrs []string
	for _, id := range c.running() {
		addrs = append(addrs, c.addrs[id])
	}
	return addrs
}

// kill SIGKILLs one node, as a crash would.
func (c *cluster) kill(t *testing.T, id int32) {
	t.Helper()
	c.nodes[id].kill(t)
}

// clusterView is what one node itself says in its Metadata (not whichever
// node a client's bootstrap picks).
type clusterView struct {
	brokers    []int32 // sorted
	controller int32
	// leaders holds each topic's partition leaders, by partition, for the
	// topics the node answered without error.
	leaders map[string][]int32
}

// viewNode asks the node at addr for its metadata of every topic, on a
// connection of its own.
func viewNode(addr string) (clusterView, error) {
	ctx, cancel := context.WithTimeout(context.Background(), viewTimeout)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(viewTimeout))
	if err != nil {
		return clusterView{}, fmt.Errorf("kgo.NewClient for %s: %w", addr, err)
	}
	defer cl.Close()
	// A seed broker is the one address given, so the request goes to that
	// node and no other; a nil topic list asks for every topic.
	req := kmsg.NewPtrMetadataRequest()
	raw, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		return clusterView{}, fmt.Errorf("metadata from %s: %w", addr, err)
	}
	resp := raw.(*kmsg.MetadataResponse)
	v := clusterView{controller: resp.ControllerID, leaders: map[string][]int32{}}
	for _, b := range resp.Brokers {
		v.brokers = append(v.brokers, b.NodeID)
	}
	slices.Sort(v.brokers)
	for _, topic := range resp.Topics {
		if topic.ErrorCode != 0 || topic.Topic == nil {
			continue
		}
		leaders := make([]int32, len(topic.Partitions))
		for _, p := range topic.Partitions {
			if p.Partition < 0 || int(p.Partition) >= len(leaders) {
				return clusterView{}, fmt.Errorf("metadata from %s: %s has partition %d among %d", addr, *topic.Topic, p.Partition, len(leaders))
			}
			leaders[p.Partition] = p.Leader
		}
		v.leaders[*topic.Topic] = leaders
	}
	return v, nil
}

// formed reports whether every running node lists exactly the running
// brokers and all name one controller among them, and which.
func (c *cluster) formed() (controller int32, ok bool, state string) {
	want := c.running()
	controllers := map[int32]bool{}
	var states []string
	ok = true
	for _, id := range want {
		v, err := viewNode(c.addrs[id])
		switch {
		case err != nil:
			ok = false
			states = append(states, fmt.Sprintf("node %d: %v", id, err))
			continue
		case !slices.Equal(v.brokers, want):
			ok = false
		}
		controllers[v.controller] = true
		controller = v.controller
		states = append(states, fmt.Sprintf("node %d: brokers %v, controller %d", id, v.brokers, v.controller))
	}
	state = strings.Join(states, "; ")
	if !ok || len(controllers) != 1 || !slices.Contains(want, controller) {
		return 0, false, state
	}
	return controller, true, state
}

// waitFormed waits until the running nodes form one cluster (see formed)
// and returns its controller.
func (c *cluster) waitFormed(t *testing.T) int32 {
	t.Helper()
	var controller int32
	waitEvery(t, fmt.Sprintf("nodes %v to form one cluster", c.running()), viewInterval, func() (bool, string) {
		id, ok, state := c.formed()
		controller = id
		return ok, state
	})
	return controller
}

// led reports whether the view shows each of the topic's partitions led
// by a running node (so, after a kill, not by the killed one).
func (c *cluster) led(v clusterView, topic string, partitions int) bool {
	leaders, ok := v.leaders[topic]
	if !ok || len(leaders) != partitions {
		return false
	}
	running := c.running()
	for _, l := range leaders {
		if !slices.Contains(running, l) {
			return false
		}
	}
	return true
}

// waitLed waits until every running node sees every partition of topic led
// by a running node, and returns the leaders, by partition, that the last
// node saw.
func (c *cluster) waitLed(t *testing.T, topic string, partitions int) []int32 {
	t.Helper()
	var leaders []int32
	for _, id := range c.running() {
		waitEvery(t, fmt.Sprintf("node %d to see %s's %d partitions led by nodes %v", id, topic, partitions, c.running()), viewInterval,
			func() (bool, string) {
				v, err := viewNode(c.addrs[id])
				if err != nil {
					return false, err.Error()
				}
				leaders = v.leaders[topic]
				return c.led(v, topic, partitions), fmt.Sprintf("leaders %v, brokers %v", leaders, v.brokers)
			})
	}
	return leaders
}

// waitForTopic waits until every running node sees every partition of a
// new topic led, and requires them all to agree on the leaders (nothing has
// moved leadership yet); it returns the leaders by partition.
func (c *cluster) waitForTopic(t *testing.T, topic string, partitions int) []int32 {
	t.Helper()
	leaders := c.waitLed(t, topic, partitions)
	for _, id := range c.running() {
		v, err := viewNode(c.addrs[id])
		if err != nil {
			t.Fatalf("view of node %d: %v", id, err)
		}
		if got := v.leaders[topic]; !slices.Equal(got, leaders) {
			t.Fatalf("node %d sees %s led by %v, another node by %v", id, topic, got, leaders)
		}
	}
	return leaders
}

// stop sends SIGTERM to the running nodes, the active controller last: a
// node that outlives its quorum waits out its controlled shutdown and an
// unanswered heartbeat (up to 40 s) before it exits, which terminate counts
// as a hang. Each node's own cleanup then checks its logs for panics (and
// reports a node that exited on its own).
func (c *cluster) stop(t *testing.T) {
	t.Helper()
	order := c.running()
	crashed := slices.ContainsFunc(order, func(id int32) bool { return c.nodes[id].hasExited() })
	if !crashed {
		if controller, ok, state := c.formedWithin(waitTimeout); ok {
			order = slices.DeleteFunc(order, func(id int32) bool { return id == controller })
			order = append(order, controller)
		} else {
			t.Errorf("nodes %v do not agree on a controller, so they stop in id order: %s", order, state)
		}
	}
	for _, id := range order {
		if !c.nodes[id].hasExited() {
			c.nodes[id].terminate(t)
		}
	}
}

// formedWithin is formed, asked again until it holds or timeout has passed:
// a cleanup must not stop at a failed wait, so this one does not fail the
// test itself.
func (c *cluster) formedWithin(timeout time.Duration) (controller int32, ok bool, state string) {
	deadline := time.Now().Add(timeout)
	for {
		controller, ok, state = c.formed()
		if ok || time.Now().After(deadline) {
			return controller, ok, state
		}
		time.Sleep(viewInterval)
	}
}
