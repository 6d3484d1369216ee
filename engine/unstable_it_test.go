//go:build it

package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// committedAtEnd reports whether the group's committed offset of tp is at
// the partition's end.
func (w *brokerWorld) committedAtEnd(tp store.TopicPartition) bool {
	return committedAtEnd(w.adm, w.topic+"-group", tp)
}

// heldOffsetOnKafka is the kfake cases' script on Kafka 4.3.1: another
// transactional.id's open transaction holds the committed offset of input
// partition 0; atAssignment holds it before the runner starts, otherwise
// while it runs (and the partition's producer is fenced, so its flow
// restarts into the held offset, while partition 1 goes on).
func heldOffsetOnKafka(t *testing.T, atAssignment bool) {
	w := newBrokerWorld(t)
	in0 := store.TopicPartition{Topic: w.topic, Partition: 0}
	in1 := store.TopicPartition{Topic: w.topic, Partition: 1}
	snap0 := store.TopicPartition{Topic: w.snapshots(), Partition: 0}
	intruder := w.topic + "-intruder"
	txnID := fmt.Sprintf("%s-%s-0", w.topic, w.topic)
	opts := []kgo.Opt{kgo.SeedBrokers(w.brokers...)}
	logs := &logCount{}
	const timeout = 5 * time.Second
	mod := func(c *engine.Config[int]) { c.UnstableOffsetTimeout, c.Logger = timeout, slog.New(logs) }
	w.produce("dave=+1", "bob=+5")
	var r *engine.Member[int]
	var pid int64
	var release func()
	if atAssignment {
		pid, release = holdCommittedOffset(t, opts, intruder, w.topic+"-group", in0, snap0)
		r = w.runnerWith(protocols["classic-cooperative"], mod)
	} else {
		r = w.runnerWith(protocols["classic-cooperative"], mod)
		w.drain(r)
		pid, release = holdCommittedOffset(t, opts, intruder, w.topic+"-group", in0, snap0)
		fenceProducer(t, opts, txnID)
		w.produce("erin=+2", "alice=+3")
	}
	ctx := context.Background()
	var err error
	p1Done := false
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline) && err == nil; { // a bound, not a wait
		err = r.Step(ctx)
		if !atAssignment && !p1Done && !slices.Contains(r.Flows(), in0) && w.committedAtEnd(in1) {
			p1Done = true
			w.produce("carol=+4") // partition 1 goes on while partition 0 waits
		}
	}
	if !atAssignment && !p1Done {
		t.Fatalf("partition 1 was not committed to its end while partition 0 waited (flows %v, err %v); logs:\n%s", r.Flows(), err, logs)
	}
	ue := checkUnstable(t, err, in0, txnID, timeout, func(o kafka.OpenTransaction) bool {
		return o.Partition == snap0 && o.ProducerID == pid && o.TransactionalID == intruder
	}, logs)
	// Kafka also shows it open on the group's offsets partition.
	if !slices.ContainsFunc(ue.Open, func(o kafka.OpenTransaction) bool {
		return o.Partition.Topic == "__consumer_offsets" && o.ProducerID == pid
	}) {
		t.Fatalf("the holder is not listed on __consumer_offsets: %v", err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	release()
	r = w.runner(protocols["classic-cooperative"])
	w.drain(r)
	w.check(r)
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAHeldCommittedOffsetStopsOnlyItsPartitionOnKafka(t *testing.T) { heldOffsetOnKafka(t, false) }

func TestAHeldCommittedOffsetAtAssignmentFailsLoudlyOnKafka(t *testing.T) { heldOffsetOnKafka(t, true) }

// heldThenReleasedOnKafka is heldThenReleased on Kafka 4.3.1 under the
// classic cooperative protocol: partition 1 folds and commits while
// partition 0's committed offset is held, and partition 0 resumes in the
// same runner once the holder's transaction ends. It logs the longest
// wait of a partition-1 record to be folded during the hold.
func heldThenReleasedOnKafka(t *testing.T, atAssignment bool) {
	w := newBrokerWorld(t)
	in0 := store.TopicPartition{Topic: w.topic, Partition: 0}
	snap0 := store.TopicPartition{Topic: w.snapshots(), Partition: 0}
	opts := []kgo.Opt{kgo.SeedBrokers(w.brokers...)}
	var release func()
	longest := heldThenReleased(t, heldWorld{
		in0: in0, in1: store.TopicPartition{Topic: w.topic, Partition: 1},
		produce:        w.produce,
		committedAtEnd: w.committedAtEnd,
		caughtUp:       w.caughtUp,
		check:          w.check,
		hold: func() {
			_, release = holdCommittedOffset(t, opts, w.topic+"-intruder", w.topic+"-group", in0, snap0)
		},
		release: func() { release() },
		fence:   func() { fenceProducer(t, opts, fmt.Sprintf("%s-%s-0", w.topic, w.topic)) },
		bound:   time.Minute, holdFor: 15 * time.Second,
	}, func(mod func(*engine.Config[int])) *engine.Member[int] {
		return w.runnerWith(protocols["classic-cooperative"], mod)
	}, atAssignment)
	// A bound far above what a fetch takes, far below a held fetch's
	// forever: partition 1 was never held back by partition 0.
	if longest > 5*time.Second {
		t.Fatalf("a record of partition 1 waited %v to be folded while partition 0 was held", longest)
	}
}

func TestAHeldCommittedOffsetAtAssignmentStopsOnlyItsPartitionOnKafka(t *testing.T) {
	heldThenReleasedOnKafka(t, true)
}

func TestAHeldCommittedOffsetAtRestartResumesWhenReleasedOnKafka(t *testing.T) {
	heldThenReleasedOnKafka(t, false)
}
