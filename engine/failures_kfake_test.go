package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// The failure model's tests on kfake, with franz-go and store/kafka, in
// virtual time (docs/operations.md).

// endOffset is tp's end offset, as adm's cluster answers.
func endOffset(t *testing.T, adm *kadm.Client, tp store.TopicPartition) int64 {
	t.Helper()
	ends, err := adm.ListEndOffsets(context.Background(), tp.Topic)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := ends.Lookup(tp.Topic, tp.Partition)
	return o.Offset
}

// committedOffset is group's stable committed offset of tp (-1: none), as
// adm's cluster answers.
func committedOffset(t *testing.T, adm *kadm.Client, group string, tp store.TopicPartition) int64 {
	t.Helper()
	offs, err := adm.FetchOffsets(kadm.RequireStable(context.Background()), group)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := offs.Lookup(tp.Topic, tp.Partition)
	if !ok {
		return -1
	}
	return o.At
}

func (w *fakeWorld) endOffset(tp store.TopicPartition) int64 { return endOffset(w.t, w.adm, tp) }

func (w *fakeWorld) committed(tp store.TopicPartition) int64 {
	return committedOffset(w.t, w.adm, "bank", tp)
}

// A poison record, under the default policy: Run returns the *FoldError
// naming the record, after committing everything before it (the other
// partition to its end), with one ERROR line. Restarted with SkipPoison,
// the engine folds every other record exactly once.
func TestPoisonRecordEndsRunOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		bad := store.TopicPartition{Topic: "accounts", Partition: 1}
		w.produce("bob=+5", "alice=+3", "dave=+1")
		badOffset := w.endOffset(bad)
		logs := &logCount{}
		r := w.runner(w.engineWith(func(c *engine.Config[int]) { c.Logger = slog.New(logs) }), protocols["classic-cooperative"])
		done := make(chan error, 1)
		go func() { done <- r.Run(context.Background()) }()
		// The other partition has folded all its records when the
		// poison record comes: each partition starts once its own
		// recovery ends, and is fetched from then on.
		waitUntil(t, "the runner runs both partitions", func() bool { return len(r.Flows()) == 2 })
		w.produce("dave=+4")
		waitUntil(t, "dave's records are folded", func() bool {
			got, ok, err := r.State(store.TopicPartition{Topic: "accounts", Partition: 0}, []byte("dave"))
			return err == nil && ok && got == 5
		})
		w.produce("bob=lots", "bob=+2")
		err := <-done
		fe, ok := errors.AsType[*engine.FoldError](err)
		if !ok || fe.Input != bad || fe.Offset != badOffset || string(fe.Key) != "bob" {
			t.Fatalf("Run = %v, want the *engine.FoldError of accounts/1 offset %d key bob", err, badOffset)
		}
		if got := w.committed(bad); got != badOffset {
			t.Fatalf("accounts/1 committed at %d, want %d: everything before the poison record", got, badOffset)
		}
		if !w.committedAtEnd(store.TopicPartition{Topic: "accounts", Partition: 0}) {
			t.Fatal("accounts/0 not committed to its end")
		}
		if n := logs.errorLines(); n != 1 {
			t.Fatalf("%d ERROR lines, want 1:\n%s", n, logs)
		}
		skip := w.runner(w.engineWith(func(c *engine.Config[int]) { c.Poison = engine.SkipPoison }), protocols["classic-cooperative"])
		w.drain(skip)
		w.check(skip)
		if err := skip.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// A missing snapshot topic, or one that is not compacted: Run returns the
// error naming the topic and the fix at the first acquisition, with one
// ERROR line, instead of retrying for ever.
func TestSnapshotTopicMisconfiguredEndsRunOnKfake(t *testing.T) {
	for name, break_ := range map[string]func(*fakeWorld){
		"missing": func(w *fakeWorld) {
			if _, err := w.adm.DeleteTopics(context.Background(), "bank-accounts-snapshots"); err != nil {
				w.t.Fatal(err)
			}
		},
		"not-compacted": func(w *fakeWorld) {
			del := "delete"
			if _, err := w.adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Name: "cleanup.policy", Value: &del}}, "bank-accounts-snapshots"); err != nil {
				w.t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t)
				break_(w)
				w.produce("bob=+5")
				logs := &logCount{}
				r := w.runner(w.engineWith(func(c *engine.Config[int]) { c.Logger = slog.New(logs) }), protocols["classic-eager"])
				start := time.Now()
				err := r.Run(context.Background())
				if !errors.Is(err, store.ErrMisconfigured) || !errors.Is(err, kafka.ErrTopicMissing) && !errors.Is(err, kafka.ErrTopicConfig) ||
					!strings.Contains(err.Error(), `"bank-accounts-snapshots"`) {
					t.Fatalf("Run = %v, want a misconfiguration naming the snapshot topic", err)
				}
				if d := time.Since(start); d > 30*time.Second {
					t.Fatalf("Run returned after %s (virtual), want within seconds", d)
				}
				if n := logs.errorLines(); n != 1 {
					t.Fatalf("%d ERROR lines, want 1:\n%s", n, logs)
				}
			})
		})
	}
}

// Exactly-once with an output topic that does not exist: Run returns the
// error naming the topic; nothing is committed, and the partition does
// not rewind and retry in a loop.
func TestMissingOutputTopicEndsRunOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t) // no "audit" or "balances" topic
		w.produce("bob=+5", "dave=+1")
		logs := &logCount{}
		e := w.engineWith(func(c *engine.Config[int]) {
			c.Fold, c.ExactlyOnce, c.CommitInterval, c.Logger = audited, true, 100*time.Millisecond, slog.New(logs)
			c.OutputTopics = []string{"audit", "balances"}
		})
		err := w.runner(e, protocols["consumer"]).Run(context.Background())
		if !errors.Is(err, store.ErrMisconfigured) || !strings.Contains(err.Error(), `output topic "`) {
			t.Fatalf("Run = %v, want a misconfiguration naming the output topic", err)
		}
		for p := range int32(2) {
			if got := w.committed(store.TopicPartition{Topic: "accounts", Partition: p}); got != -1 {
				t.Fatalf("accounts/%d committed at %d though no batch could commit", p, got)
			}
		}
		if n := logs.errorLines(); n != 1 {
			t.Fatalf("%d ERROR lines, want 1:\n%s", n, logs)
		}
	})
}

// A dead letter under exactly-once, through a crash: the crashed owner's
// open batch (its dead letter with it) is lost; the next owner folds the
// records again, and a read_committed reader of the dead-letter topic sees
// the poison record once, as it sees every other input's output once.
func TestDeadLetterExactlyOnceThroughACrashOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		ctx := context.Background()
		for _, topic := range []string{"audit", "balances", "dead"} {
			if err := kafka.CreateTopic(ctx, w.prod, topic, 2, 1, nil); err != nil {
				t.Fatal(err)
			}
		}
		eos := func(commitEvery time.Duration) *engine.Engine[int] {
			return w.engineWith(func(c *engine.Config[int]) {
				c.Fold, c.ExactlyOnce, c.CommitInterval = audited, true, commitEvery
				c.OutputTopics = []string{"audit", "balances"}
				c.Poison, c.DeadLetterTopic = engine.DeadLetterPoison, "dead"
			})
		}
		protocol := protocols["classic-cooperative"]
		a := w.runner(eos(100*time.Millisecond), protocol)
		w.produce("alice=+10", "bob=+5", "dave=+1")
		w.drain(a)
		slow, kill := w.killableRunner(eos(time.Hour), protocol)
		_ = a.Close(ctx)
		w.drain(slow)
		w.produce("bob=oops", "carol=+7", "dave=+3")
		p1 := store.TopicPartition{Topic: "accounts", Partition: 1}
		for i := 0; ; i++ { // folded (the poison record dead-lettered) into the open batch
			if err := slow.Step(ctx); err != nil {
				t.Fatal(err)
			}
			if v, ok, _ := slow.State(p1, []byte("carol")); ok && v == 7 {
				break
			}
			if i == 50 {
				t.Fatal("the batch the crash loses was never folded")
			}
		}
		crashAndLeave(t, slow, kill)
		b := w.runner(eos(100*time.Millisecond), protocol)
		w.drain(b)
		w.check(b)
		if err := b.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if dead := readOutputs(t, w.opts(), w.adm, "dead", true); len(dead) != 1 || dead["oops"] != 1 {
			t.Fatalf("dead letters read_committed: %v, want the poison record once", dead)
		}
	})
}

// A routine start of two members, under each protocol, logs no ERROR: the
// fences of a rebalance (ILLEGAL_GENERATION on a revoke-time flush under
// classic cooperative, a periodic commit racing the rebalance) are
// expected, counted and logged at INFO or WARN.
func TestRoutineTwoMemberStartLogsNoErrorOnKfake(t *testing.T) {
	for name, protocol := range protocols {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t)
				w.produce("alice=+1", "bob=+2", "dave=+3", "erin=+4")
				logs := &logCount{}
				logged := func(c *engine.Config[int]) { c.Logger = slog.New(logs) }
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				errs := make([]error, 2)
				a := w.runner(w.engineWith(logged), protocol)
				wg.Go(func() { errs[0] = a.Run(ctx) })
				for !w.caughtUp() { // a alone has both partitions
					time.Sleep(100 * time.Millisecond)
				}
				b := w.runner(w.engineWith(logged), protocol)
				wg.Go(func() { errs[1] = b.Run(ctx) })
				for len(a.Flows()) != 1 || len(b.Flows()) != 1 { // they share the partitions
					time.Sleep(100 * time.Millisecond)
				}
				w.produce("alice=+5", "dave=+6")
				for !w.caughtUp() {
					time.Sleep(100 * time.Millisecond)
				}
				cancel()
				wg.Wait()
				if errs[0] != nil || errs[1] != nil {
					t.Fatalf("Run: %v, %v", errs[0], errs[1])
				}
				if n := logs.errorLines(); n != 0 {
					t.Fatalf("%d ERROR lines in a routine start:\n%s", n, logs)
				}
				t.Logf("the start's log:\n%s", logs)
			})
		})
	}
}

// A deploy that changes the state encoding, under SkipPoison: Run returns
// the *RecoveredStateError of the key first in order, at the input offset
// of its latest snapshot, counting the partition's keys; nothing is
// written to the snapshot topic. The fixed deploy (a codec that reads the
// old encoding) recovers every key's state.
func TestUndecodableStateStopsUnderSkipPoisonOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		tp := store.TopicPartition{Topic: "accounts", Partition: 1}
		w.produce("bob=+5", "carol=+3")
		first := w.runner(w.engine(), protocols["classic-cooperative"])
		w.drain(first)
		if err := first.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		latest := w.endOffset(tp)
		w.produce("bob=+2") // bob's second snapshot, the one recovery uses
		second := w.runner(w.engine(), protocols["classic-cooperative"])
		w.drain(second)
		if err := second.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		snaps := store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: 1}
		written := w.endOffset(snaps)

		changed := w.runner(w.engineWith(func(c *engine.Config[int]) { c.Poison, c.Codec = engine.SkipPoison, taggedCodec{} }),
			protocols["classic-cooperative"])
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a skip would run on
		defer cancel()
		err := changed.Run(ctx)
		se, ok := errors.AsType[*engine.RecoveredStateError](err)
		if !ok || se.Input != tp || string(se.Key) != "bob" || se.Offset != latest || se.Keys != 2 {
			t.Fatalf("Run = %v, want the *engine.RecoveredStateError of bob at input offset %d, 2 keys", err, latest)
		}
		if got := w.endOffset(snaps); got != written {
			t.Fatalf("the snapshot partition's end moved from %d to %d: a stop wrote to it", written, got)
		}

		fixed := w.runner(w.engineWith(func(c *engine.Config[int]) {
			c.Poison = engine.SkipPoison
			c.Codec = engine.VersionedCodec[int]{Version: 1, Current: taggedCodec{}, Unversioned: intCodec{}.Decode}
		}), protocols["classic-cooperative"])
		w.drain(fixed)
		w.check(fixed)
		if err := fixed.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
