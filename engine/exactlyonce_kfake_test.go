package engine_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// eosEngine is an engine of the kfake world with the audited fold, exactly
// once, committing every commitEvery.
func (w *fakeWorld) eosEngine(commitEvery time.Duration) *engine.Engine[int] {
	return w.engineWith(func(c *engine.Config[int]) {
		c.Fold, c.ExactlyOnce, c.CommitInterval = audited, true, commitEvery
		c.OutputTopics = []string{"audit", "balances"}
	})
}

// readAudit counts each input's outputs on the audit topic as a consumer
// of the given isolation sees them. Call it at quiescence.
func (w *fakeWorld) readAudit(readCommitted bool) map[string]int {
	return readOutputs(w.t, w.opts(), w.adm, "audit", readCommitted)
}

// readOutputs counts the values of topic's records as a consumer of the
// given isolation sees them. Call it at quiescence (no transaction open):
// it reads to the high watermark, control records included.
func readOutputs(t *testing.T, opts []kgo.Opt, adm *kadm.Client, topic string, readCommitted bool) map[string]int {
	t.Helper()
	ctx := context.Background()
	iso := kgo.ReadUncommitted()
	if readCommitted {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	pos := map[int32]int64{}
	for {
		done := true
		ends.Each(func(o kadm.ListedOffset) { done = done && pos[o.Partition] >= o.Offset })
		if done {
			return seen
		}
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading %s: %v", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			pos[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				seen[string(r.Value)]++
			}
		})
	}
}

// inputs lists every input record of the kfake world as "partition:offset".
func (w *fakeWorld) inputs() []string {
	ends, err := w.adm.ListEndOffsets(context.Background(), "accounts")
	if err != nil {
		w.t.Fatal(err)
	}
	var all []string
	ends.Each(func(o kadm.ListedOffset) {
		for off := range o.Offset {
			all = append(all, fmt.Sprintf("%d:%d", o.Partition, off))
		}
	})
	return all
}

// A member crashes with a batch folded and not committed; the next owner
// folds those records again. (A crash that leaves the member in the group
// until its session expires is the worlds' business: kfakeworld freezes
// its connections; here the dead member's consumer leaves.) On kfake,
// with franz-go, under each protocol,
// a read_committed consumer of the output topic sees every input's output
// exactly once.
func TestExactlyOnceOutputsThroughACrashOnKfake(t *testing.T) {
	for name, protocol := range protocols {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t)
				if err := kafka.CreateTopic(context.Background(), w.prod, "audit", 2, 1, nil); err != nil {
					t.Fatal(err)
				}
				if err := kafka.CreateTopic(context.Background(), w.prod, "balances", 2, 1, nil); err != nil {
					t.Fatal(err)
				}
				a := w.runner(w.eosEngine(100*time.Millisecond), protocol)
				w.produce("alice=+10", "bob=+5", "alice=+1", "dave=+1") // both partitions
				w.drain(a)
				slow, kill := w.killableRunner(w.eosEngine(time.Hour), protocol)
				_ = a.Close(context.Background()) // slow takes both partitions
				w.drain(slow)
				w.produce("bob=+2", "carol=+7", "dave=+3")
				p1 := store.TopicPartition{Topic: "accounts", Partition: 1}
				for i := 0; ; i++ { // folded into the open batch, never committed
					if err := slow.Step(context.Background()); err != nil {
						t.Fatal(err)
					}
					if v, ok, _ := slow.State(p1, []byte("carol")); ok && v == 7 {
						break
					}
					if i == 50 {
						t.Fatal("the batch the crash loses was never folded")
					}
				}
				// A crash: slow is never stepped or closed again, so its
				// open batch is lost and nothing is flushed, and its
				// consumer's leave (which reaches no runner) hands the
				// partitions over without the session timeout's wait.
				crashAndLeave(t, slow, kill)
				b := w.runner(w.eosEngine(100*time.Millisecond), protocol)
				w.drain(b)
				w.check(b)
				if err := b.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
				seen := w.readAudit(true)
				for _, in := range w.inputs() {
					if seen[in] != 1 {
						t.Errorf("input %s: %d outputs read_committed, want 1 (seen %v)", in, seen[in], seen)
					}
				}
			})
		})
	}
}
