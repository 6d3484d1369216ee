//go:build it

package kfakeworld

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
)

// runReal runs steps on a world of cfg on the shared broker (`make it`),
// in real time, and checks that Close deleted the world's topics, the
// output topic included.
func runReal(t *testing.T, cfg Config, steps []world.Step) (vs []world.Violation, ops []history.Op) {
	t.Helper()
	cfg.Brokers, cfg.Logf = kafkatest.Brokers(t), t.Logf
	start := time.Now()
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if w.output == "" || w.output == world.OutputTopic {
		w.Close()
		t.Fatalf("the real world's output topic is %q, want one of its own", w.output)
	}
	topics := []string{w.input, w.real.snapshot, w.output}
	for _, s := range steps {
		vs = append(vs, w.Apply(s)...)
	}
	vs = append(vs, w.Quiesce()...)
	ops = w.History().Ops()
	w.Close()
	t.Logf("%d steps on the broker in %s", len(steps), time.Since(start).Round(100*time.Millisecond))

	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// DeleteTopics returns once the controller took the deletion; the
	// broker's metadata drops the topics a moment later. Wait for that,
	// observed, within the context's 30 s.
	var left []string
	for {
		listed, err := kadm.NewClient(cl).ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		left = left[:0]
		for _, name := range topics {
			if listed.Has(name) {
				left = append(left, name)
			}
		}
		if len(left) == 0 || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the observed metadata, bounded by ctx
	}
	for _, name := range left {
		t.Errorf("topic %s is still there 30s after Close", name)
	}
	return vs, ops
}

// Exactly-once outputs on a real Kafka broker: through a stale owner and
// a hard crash, and through kafka-flow#732, every invariant holds, 8
// included: a read_committed kgo consumer of the output topic sees each
// input event's output exactly once.
func TestExactlyOnceOutputsOnKafka(t *testing.T) {
	for _, sc := range []struct {
		name  string
		steps []world.Step
	}{{"crash and stale owner", world.CrashAndStaleOwner}, {"crash, stale owner and a foreign transaction", world.CrashStaleOwnerAndForeign}, {"kafka-flow#732", world.Scenario732}} {
		t.Run(sc.name, func(t *testing.T) {
			vs, ops := runReal(t, Config{Mode: store.Transactional, ExactlyOnce: true}, sc.steps)
			for _, v := range vs {
				t.Errorf("%s", v)
			}
			outputsExactlyOnce(t, ops)
		})
	}
}

// The negative control on the broker: the same scenario with at-least-once
// outputs (a plain kgo producer in Emit) duplicates outputs, and
// invariant 8 catches them.
func TestAtLeastOnceOutputsDuplicateOnKafka(t *testing.T) {
	vs, _ := runReal(t, Config{Mode: store.Transactional, ProduceOutputs: true}, world.CrashAndStaleOwner)
	onlyDuplicates(t, vs)
}
