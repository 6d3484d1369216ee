//go:build it

package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// The failure model on Kafka (docs/operations.md): the configuration and
// poison-record classes, and a routine start that logs no ERROR.

func (w *brokerWorld) endOffset(tp store.TopicPartition) int64 { return endOffset(w.t, w.adm, tp) }

func (w *brokerWorld) committedOffset(tp store.TopicPartition) int64 {
	return committedOffset(w.t, w.adm, w.topic+"-group", tp)
}

// runWithin runs r until it returns, failing the test past limit (a Run
// that does not return is the bug these tests catch).
func runWithin(t *testing.T, r *engine.Member[int], limit time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	err := r.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run did not return within %s (returned %v)", limit, err)
	}
	return err
}

// A poison record under the default policy: Run returns its *FoldError
// after committing everything before it, with one ERROR line; with
// SkipPoison the engine goes past it and the state is exact.
func TestPoisonRecordEndsRunOnKafka(t *testing.T) {
	w := newBrokerWorld(t)
	bad := store.TopicPartition{Topic: w.topic, Partition: 1}
	w.produce("bob=+5", "alice=+3", "dave=+1")
	badOffset := w.endOffset(bad)
	w.produce("bob=lots", "bob=+2", "dave=+4")
	logs := &logCount{}
	r := w.runnerWith(protocols["classic-cooperative"], func(c *engine.Config[int]) { c.Logger = slog.New(logs) })
	err := runWithin(t, r, time.Minute)
	fe, ok := errors.AsType[*engine.FoldError](err)
	if !ok || fe.Input != bad || fe.Offset != badOffset || string(fe.Key) != "bob" {
		t.Fatalf("Run = %v, want the *engine.FoldError of %s offset %d key bob", err, bad, badOffset)
	}
	if got := w.committedOffset(bad); got != badOffset {
		t.Fatalf("%s committed at %d, want %d: everything before the poison record", bad, got, badOffset)
	}
	if n := logs.errorLines(); n != 1 {
		t.Fatalf("%d ERROR lines, want 1:\n%s", n, logs)
	}
	skip := w.runnerWith(protocols["classic-cooperative"], func(c *engine.Config[int]) { c.Poison = engine.SkipPoison })
	w.drain(skip)
	w.check(skip)
	if err := skip.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A snapshot topic that is missing, or not compacted: Run returns the
// error naming it and the fix within seconds, with one ERROR line.
func TestSnapshotTopicMisconfiguredEndsRunOnKafka(t *testing.T) {
	for name, break_ := range map[string]func(*brokerWorld){
		"missing": func(w *brokerWorld) {
			if _, err := w.adm.DeleteTopics(context.Background(), w.snapshots()); err != nil {
				w.t.Fatal(err)
			}
		},
		"not-compacted": func(w *brokerWorld) {
			del := "delete"
			if _, err := w.adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Name: "cleanup.policy", Value: &del}}, w.snapshots()); err != nil {
				w.t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			w := newBrokerWorld(t)
			break_(w)
			w.produce("bob=+5")
			logs := &logCount{}
			r := w.runnerWith(protocols["classic-eager"], func(c *engine.Config[int]) { c.Logger = slog.New(logs) })
			start := time.Now()
			err := runWithin(t, r, time.Minute)
			if !errors.Is(err, store.ErrMisconfigured) || !errors.Is(err, kafka.ErrTopicMissing) && !errors.Is(err, kafka.ErrTopicConfig) ||
				!strings.Contains(err.Error(), `"`+w.snapshots()+`"`) {
				t.Fatalf("Run = %v, want a misconfiguration naming the snapshot topic", err)
			}
			if n := logs.errorLines(); n != 1 {
				t.Fatalf("%d ERROR lines, want 1:\n%s", n, logs)
			}
			t.Logf("Run returned after %s: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
}

// Exactly-once with an output topic that does not exist: Run returns the
// error naming the topic; nothing is committed.
func TestMissingOutputTopicEndsRunOnKafka(t *testing.T) {
	w := newBrokerWorld(t) // no output topics
	w.produce("bob=+5", "dave=+1")
	logs := &logCount{}
	r := w.runnerWith(protocols["consumer"], func(c *engine.Config[int]) {
		w.eosConfig(100 * time.Millisecond)(c)
		c.Logger = slog.New(logs)
	})
	start := time.Now()
	err := runWithin(t, r, time.Minute)
	if !errors.Is(err, store.ErrMisconfigured) || !strings.Contains(err.Error(), `output topic "`+w.topic) {
		t.Fatalf("Run = %v, want a misconfiguration naming the output topic", err)
	}
	for p := range int32(2) {
		if got := w.committedOffset(store.TopicPartition{Topic: w.topic, Partition: p}); got != -1 {
			t.Fatalf("%s/%d committed at %d though no batch could commit", w.topic, p, got)
		}
	}
	if n := logs.errorLines(); n != 1 {
		t.Fatalf("%d ERROR lines, want 1:\n%s", n, logs)
	}
	t.Logf("Run returned after %s: %v", time.Since(start).Round(time.Millisecond), err)
}

// A dead letter under exactly-once through a crash, on Kafka: a
// read_committed reader of the dead-letter topic sees the poison record
// once.
func TestDeadLetterExactlyOnceThroughACrashOnKafka(t *testing.T) {
	w := newBrokerWorld(t)
	ctx := context.Background()
	dead := w.topic + "-dead"
	for _, topic := range []string{w.topic + "-audit", w.topic + "-balances", dead} {
		if err := kafka.CreateTopic(ctx, w.prod, topic, 2, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { w.adm.DeleteTopics(context.Background(), w.topic+"-audit", w.topic+"-balances", dead) })
	eos := func(commitEvery time.Duration) func(*engine.Config[int]) {
		return func(c *engine.Config[int]) {
			w.eosConfig(commitEvery)(c)
			c.Poison, c.DeadLetterTopic = engine.DeadLetterPoison, dead
		}
	}
	protocol := protocols["classic-cooperative"]
	a := w.runnerWith(protocol, eos(100*time.Millisecond))
	w.produce("alice=+10", "bob=+5", "dave=+1")
	w.drain(a)
	slow, kill := w.killableRunnerWith(protocol, eos(time.Hour))
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
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
	w.produce("bob=oops", "carol=+7", "dave=+3")
	p1 := store.TopicPartition{Topic: w.topic, Partition: 1}
	stepUntil("the batch the crash loses is folded", func() bool {
		v, ok, _ := slow.State(p1, []byte("carol"))
		return ok && v == 7
	})
	crashAndLeave(t, slow, kill)
	b := w.runnerWith(protocol, eos(100*time.Millisecond))
	w.drain(b)
	w.check(b)
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if seen := readOutputs(t, []kgo.Opt{kgo.SeedBrokers(w.brokers...)}, w.adm, dead, true); len(seen) != 1 || seen["oops"] != 1 {
		t.Fatalf("dead letters read_committed: %v, want the poison record once", seen)
	}
}

// A routine start of two members on Kafka, under each protocol, logs no
// ERROR (no "ERROR partition stopped ... ILLEGAL_GENERATION"): a
// rebalance's fences are expected.
func TestRoutineTwoMemberStartLogsNoErrorOnKafka(t *testing.T) {
	for name, protocol := range protocols {
		t.Run(name, func(t *testing.T) {
			w := newBrokerWorld(t)
			w.produce("alice=+1", "bob=+2", "dave=+3", "erin=+4")
			logs := &logCount{}
			logged := func(c *engine.Config[int]) { c.Logger = slog.New(logs) }
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var wg sync.WaitGroup
			errs := make([]error, 2)
			a := w.runnerWith(protocol, logged)
			wg.Go(func() { errs[0] = a.Run(ctx) })
			waitFor(t, "a commits both partitions", func() bool { return w.caughtUp() })
			b := w.runnerWith(protocol, logged)
			wg.Go(func() { errs[1] = b.Run(ctx) })
			waitFor(t, "a and b share the partitions", func() bool { return len(a.Flows()) == 1 && len(b.Flows()) == 1 })
			w.produce("alice=+5", "dave=+6")
			waitFor(t, "the new records are committed", func() bool { return w.caughtUp() })
			cancel()
			wg.Wait()
			if errs[0] != nil || errs[1] != nil {
				t.Fatalf("Run: %v, %v", errs[0], errs[1])
			}
			if n := logs.errorLines(); n != 0 {
				t.Fatalf("%d ERROR lines in a routine start:\n%s", n, logs)
			}
		})
	}
}

// caughtUp reports whether the group's committed offsets are at the
// input's end.
func (w *brokerWorld) caughtUp() bool {
	ctx := context.Background()
	ends, err1 := w.adm.ListEndOffsets(ctx, w.topic)
	committed, err2 := w.adm.FetchOffsets(kadm.RequireStable(ctx), w.topic+"-group")
	if err1 != nil || err2 != nil {
		return false
	}
	done := true
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(o.Topic, o.Partition)
		done = done && (ok && c.At == o.Offset || !ok && o.Offset == 0) // an idle partition commits nothing
	})
	return done
}

// waitFor polls done, the thing observed, for up to a minute.
func waitFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !done(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
