//go:build it

package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// eosRunner is a runner of the broker world with the audited fold,
// exactly once, committing every commitEvery.
func (w *brokerWorld) eosRunner(protocol kgo.Opt, commitEvery time.Duration) *engine.Member[int] {
	return w.runnerWith(protocol, w.eosConfig(commitEvery))
}

func (w *brokerWorld) eosConfig(commitEvery time.Duration) func(*engine.Config[int]) {
	return func(c *engine.Config[int]) {
		c.Fold, c.ExactlyOnce, c.CommitInterval = auditedTo(w.topic+"-audit", w.topic+"-balances"), true, commitEvery
		c.OutputTopics = []string{w.topic + "-audit", w.topic + "-balances"}
	}
}

// The kfake test of a lost batch, on Kafka 4.3.1 under each protocol: a
// read_committed consumer of the output topic sees every input's output
// exactly once.
func TestExactlyOnceOutputsThroughACrashOnKafka(t *testing.T) {
	for name, protocol := range protocols {
		t.Run(name, func(t *testing.T) {
			w := newBrokerWorld(t)
			audit := w.topic + "-audit"
			ctx := context.Background()
			if err := kafka.CreateTopic(ctx, w.prod, audit, 2, 1, nil); err != nil {
				t.Fatal(err)
			}
			if err := kafka.CreateTopic(ctx, w.prod, w.topic+"-balances", 2, 1, nil); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.adm.DeleteTopics(context.Background(), audit, w.topic+"-balances") })
			a := w.eosRunner(protocol, 100*time.Millisecond)
			w.produce("alice=+10", "bob=+5", "alice=+1", "dave=+1")
			w.drain(a)
			slow, kill := w.killableRunnerWith(protocol, w.eosConfig(time.Hour))
			if err := a.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// slow commits only on revoke: its polls would wait up to
			// an hour for its next commit, so each step is cut short.
			stepUntil := func(what string, done func() bool) {
				for deadline := time.Now().Add(time.Minute); !done(); {
					sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
					err := slow.Step(sctx)
					cancel()
					if err != nil && !errors.Is(err, context.DeadlineExceeded) {
						t.Fatal(err)
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: not in a minute; errors: %v", what, slow.Errors())
					}
				}
			}
			stepUntil("slow takes both partitions", func() bool { return len(slow.Flows()) == 2 })
			w.produce("bob=+2", "carol=+7", "dave=+3")
			p1 := store.TopicPartition{Topic: w.topic, Partition: 1}
			stepUntil("the batch the crash loses is folded", func() bool {
				v, ok, _ := slow.State(p1, []byte("carol"))
				return ok && v == 7
			})
			crashAndLeave(t, slow, kill) // its open batch is lost; b takes both partitions at once
			b := w.eosRunner(protocol, 100*time.Millisecond)
			w.drain(b)
			w.check(b)
			if err := b.Close(ctx); err != nil {
				t.Fatal(err)
			}
			seen := readOutputs(t, []kgo.Opt{kgo.SeedBrokers(w.brokers...)}, w.adm, audit, true)
			ends, err := w.adm.ListEndOffsets(ctx, w.topic)
			if err != nil {
				t.Fatal(err)
			}
			ends.Each(func(o kadm.ListedOffset) {
				for off := range o.Offset {
					if in := fmt.Sprintf("%d:%d", o.Partition, off); seen[in] != 1 {
						t.Errorf("input %s: %d outputs read_committed, want 1 (seen %v)", in, seen[in], seen)
					}
				}
			})
		})
	}
}
