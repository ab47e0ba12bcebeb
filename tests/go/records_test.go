package tarntest

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
)

// header is a record header, client-neutral.
type header struct {
	Key   string
	Value []byte
}

// record is a produced or consumed record, client-neutral, so that one check
// compares what a producer was told with what a consumer read.
type record struct {
	Partition   int32
	Offset      int64
	Key         []byte
	Value       []byte
	Headers     []header
	TimestampMs int64
}

// position is where a record sits in a topic.
type position struct {
	Partition int32
	Offset    int64
}

func (r record) position() position { return position{r.Partition, r.Offset} }

// testValue is a record value that compresses well, so that every codec's
// batch is smaller compressed and the client sends it compressed (franz-go
// sends a batch uncompressed when compressing would not shrink it).
func testValue(prefix string, i int) []byte {
	return []byte(strings.Repeat(fmt.Sprintf("%s value %d; ", prefix, i), 40))
}

// testHeaders gives each record two headers, one with an empty value.
func testHeaders(i int) []header {
	return []header{
		{Key: "seq", Value: []byte(fmt.Sprint(i))},
		{Key: "empty", Value: []byte{}},
	}
}

// checkConsumed requires got to hold every record of want exactly once, at
// the position the producer was told, with the same key, value, headers and
// timestamp, and nothing else.
func checkConsumed(t *testing.T, want, got []record) {
	t.Helper()
	wantAt := make(map[position]record, len(want))
	for _, r := range want {
		if _, dup := wantAt[r.position()]; dup {
			t.Errorf("two produced records were acknowledged at partition %d offset %d", r.Partition, r.Offset)
		}
		wantAt[r.position()] = r
	}
	seen := make(map[position]int, len(got))
	for _, r := range got {
		seen[r.position()]++
		w, ok := wantAt[r.position()]
		if !ok {
			t.Errorf("consumed a record nobody produced at partition %d offset %d (key %q)", r.Partition, r.Offset, r.Key)
			continue
		}
		if seen[r.position()] > 1 {
			t.Errorf("record at partition %d offset %d consumed %d times", r.Partition, r.Offset, seen[r.position()])
		}
		if !bytes.Equal(w.Key, r.Key) || !bytes.Equal(w.Value, r.Value) {
			t.Errorf("partition %d offset %d: consumed key %q value %.40q..., produced key %q value %.40q...",
				r.Partition, r.Offset, r.Key, r.Value, w.Key, w.Value)
		}
		if !sameHeaders(w.Headers, r.Headers) {
			t.Errorf("partition %d offset %d: consumed headers %q, produced %q", r.Partition, r.Offset, r.Headers, w.Headers)
		}
		if w.TimestampMs != r.TimestampMs {
			t.Errorf("partition %d offset %d: consumed timestamp %d, produced %d", r.Partition, r.Offset, r.TimestampMs, w.TimestampMs)
		}
	}
	var missing []position
	for p := range wantAt {
		if seen[p] == 0 {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		sortPositions(missing)
		t.Errorf("%d acknowledged records were never consumed: %v", len(missing), missing)
	}
}

func sameHeaders(a, b []header) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// checkContiguous requires the acknowledged offsets of each partition of a
// new topic to be exactly 0, 1, 2, ...
func checkContiguous(t *testing.T, produced []record) {
	t.Helper()
	byPartition := map[int32][]int64{}
	for _, r := range produced {
		byPartition[r.Partition] = append(byPartition[r.Partition], r.Offset)
	}
	for p, offsets := range byPartition {
		sort.Slice(offsets, func(i, j int) bool { return offsets[i] < offsets[j] })
		for i, o := range offsets {
			if o != int64(i) {
				t.Errorf("partition %d: acknowledged offsets %v, want 0..%d", p, offsets, len(offsets)-1)
				break
			}
		}
	}
}

func sortPositions(ps []position) {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Partition != ps[j].Partition {
			return ps[i].Partition < ps[j].Partition
		}
		return ps[i].Offset < ps[j].Offset
	})
}

// groupLedger records, for a consumer group test, which partitions each
// member owns now and every record each member processed. Its methods are
// safe for the members' goroutines and rebalance callbacks.
type groupLedger struct {
	mu       sync.Mutex
	owned    map[string]map[int32]bool
	consumed map[string][]record
}

func newGroupLedger(members ...string) *groupLedger {
	l := &groupLedger{owned: map[string]map[int32]bool{}, consumed: map[string][]record{}}
	for _, m := range members {
		l.owned[m] = map[int32]bool{}
	}
	return l
}

func (l *groupLedger) assign(member string, partitions []int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range partitions {
		l.owned[member][p] = true
	}
}

func (l *groupLedger) revoke(member string, partitions []int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range partitions {
		delete(l.owned[member], p)
	}
}

// setOwned replaces a member's partitions (eager protocols hand out the
// whole assignment each generation).
func (l *groupLedger) setOwned(member string, partitions []int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.owned[member] = map[int32]bool{}
	for _, p := range partitions {
		l.owned[member][p] = true
	}
}

func (l *groupLedger) add(member string, recs ...record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.consumed[member] = append(l.consumed[member], recs...)
}

// ownedBy returns a member's partitions, sorted.
func (l *groupLedger) ownedBy(member string) []int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ps []int32
	for p := range l.owned[member] {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}

// balanced reports whether members (and no one else) own every partition
// in [0, partitions) exactly once, partitions/len(members) each.
func (l *groupLedger) balanced(partitions int, members ...string) (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	owners := map[int32][]string{}
	for m, ps := range l.owned {
		for p := range ps {
			owners[p] = append(owners[p], m)
		}
	}
	state := fmt.Sprintf("owners by partition %v", owners)
	if len(owners) != partitions {
		return false, state
	}
	for p := int32(0); p < int32(partitions); p++ {
		if len(owners[p]) != 1 {
			return false, state
		}
	}
	for _, m := range members {
		if len(l.owned[m]) != partitions/len(members) {
			return false, state
		}
	}
	return true, state
}

func (l *groupLedger) consumedBy(member string) []record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]record(nil), l.consumed[member]...)
}

func (l *groupLedger) all() []record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []record
	for _, recs := range l.consumed {
		out = append(out, recs...)
	}
	return out
}

func (l *groupLedger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, recs := range l.consumed {
		n += len(recs)
	}
	return n
}

// checkOwnPartitions requires every record a member processed to come from a
// partition in owned.
func checkOwnPartitions(t *testing.T, member string, recs []record, owned []int32) {
	t.Helper()
	mine := map[int32]bool{}
	for _, p := range owned {
		mine[p] = true
	}
	for _, r := range recs {
		if !mine[r.Partition] {
			t.Errorf("%s processed partition %d offset %d but owned only %v", member, r.Partition, r.Offset, owned)
		}
	}
}

// recordsFrom returns the records at offset from or later.
func recordsFrom(recs []record, from int64) []record {
	var out []record
	for _, r := range recs {
		if r.Offset >= from {
			out = append(out, r)
		}
	}
	return out
}

// keyedRecords makes n records per partition, each aimed at an explicit
// partition, so that every member of a group gets records whatever the
// client's partitioner would do.
func keyedRecords(prefix string, partitions, perPartition int) []record {
	var out []record
	for i := 0; i < perPartition; i++ {
		for p := 0; p < partitions; p++ {
			n := i*partitions + p
			out = append(out, record{
				Partition: int32(p),
				Key:       []byte(fmt.Sprintf("%s-key-%d", prefix, n)),
				Value:     testValue(prefix, n),
				Headers:   testHeaders(n),
			})
		}
	}
	return out
}
