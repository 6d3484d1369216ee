package engine_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// Per-key timers on kfake with store/kafka and the Kafka source, in
// virtual time: each key's timer fires once across a crash (the firing
// lost with the crashed member fires again at the next owner, once), a
// rebalance (the partition moves with its timer) and a warm restart (the
// cache's index finds the committed timers). The fold is the sim tests',
// with timers a minute after the record's timestamp.
func TestTimersFireOnceOnKfake(t *testing.T) {
	for name, protocol := range protocols {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { timersOnKfake(t, protocol) })
		})
	}
}

func timersOnKfake(t *testing.T, protocol kgo.Opt) {
	w := newFakeWorld(t)
	fired := &firings{n: map[string]int{}}
	// open is an engine with timers, on dir, that persists and commits
	// only when told (FlushAll); the caller closes it.
	open := func(dir string) *engine.Engine[int] {
		b, err := kafka.New(context.Background(), kafka.Config{
			Mode: store.Transactional, SeedBrokers: w.c.ListenAddrs(), TransactionalIDPrefix: "bank",
			ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext)},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		fold := func(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
			if string(rec.Value) == "remind" {
				return engine.Keep[int]().SetTimer(engine.Timer{Kind: engine.ProcessingTime, At: rec.Timestamp.Add(time.Minute)}), nil
			}
			return balance(key, state, exists, rec)
		}
		e, err := engine.New(engine.Config[int]{Fold: fold, OnTimer: onTimer, Codec: intCodec{}, Store: b, Dir: dir,
			PersistInterval: time.Hour, CommitInterval: time.Hour, Emit: fired.emit})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	ctx := context.Background()
	step := func(rs ...*engine.Member[int]) {
		for _, r := range rs {
			if err := r.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// until steps rs until cond holds.
	until := func(what string, cond func() bool, rs ...*engine.Member[int]) {
		t.Helper()
		for i := 0; !cond(); i++ {
			if i == 300 {
				t.Fatalf("not within 300 steps: %s (fired %v)", what, fired.n)
			}
			step(rs...)
		}
	}
	// durable steps rs, committing everything after each step, until the
	// input is committed to its end.
	durable := func(rs ...*engine.Member[int]) {
		t.Helper()
		until("the input committed to its end", func() bool {
			for _, r := range rs {
				r.FlushAll(ctx)
			}
			return w.caughtUp()
		}, rs...)
	}
	firedEach := func(n int) func() bool {
		return func() bool { return fired.of("alice") == n && fired.of("dave") == n }
	}
	wantStates := func(r *engine.Member[int], add int) {
		t.Helper()
		for key, base := range map[string]int{"alice": 1, "dave": 2} {
			tp := store.TopicPartition{Topic: "accounts", Partition: int32(len(key) % 2)}
			if s, ok, err := r.State(tp, []byte(key)); err != nil || !ok || s != base+add {
				t.Fatalf("%s = %d %t %v, want %d", key, s, ok, err, base+add)
			}
		}
	}
	remind := func() { w.produce("alice=remind", "dave=remind") }
	w.produce("alice=+1", "dave=+2") // alice on partition 1, dave on 0
	remind()

	// A crash after the firings, before their snapshots: the next owner
	// fires them again, once each.
	dirA, dirB, dirC := t.TempDir(), t.TempDir(), t.TempDir()
	eA := open(dirA)
	a, kill := w.killableRunner(eA, protocol)
	durable(a) // the states and their timers are committed
	until("a fires both timers", firedEach(1), a)
	crashAndLeave(t, a, kill)
	_ = eA.Close()
	eB := open(dirB)
	b := w.runner(eB, protocol)
	until("b fires the lost firings again", firedEach(2), b)
	wantStates(b, 1000)
	b.FlushAll(ctx)

	// A rebalance: a partition moves to c with its pending timer. (The
	// states are checked after the warm restart: each owns one key.)
	remind()
	durable(b)
	eC := open(dirC)
	c := w.runner(eC, protocol)
	until("the partitions shared and both timers fired", func() bool {
		return len(b.Flows()) == 1 && len(c.Flows()) == 1 && firedEach(3)()
	}, b, c)
	b.FlushAll(ctx)
	c.FlushAll(ctx)

	// A warm restart of b, alone, over its cache.
	remind()
	durable(b, c)
	for _, r := range []*engine.Member[int]{b, c} {
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := eB.Close(); err != nil {
		t.Fatal(err)
	}
	_ = eC.Close()
	if got := fired.of("alice") + fired.of("dave"); got != 6 {
		t.Fatalf("%d firings before the warm restart, want 6: %v", got, fired.n)
	}
	eB = open(dirB)
	defer eB.Close()
	warm := w.runner(eB, protocol)
	until("the warm restart fires both timers", firedEach(4), warm)
	wantStates(warm, 3000) // the firing lost in the crash fired twice, its effect once
	warm.FlushAll(ctx)
	for range 20 { // two minutes and more: nothing fires again
		step(warm)
	}
	if !firedEach(4)() {
		t.Fatalf("fired again: %v", fired.n)
	}
	if err := warm.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// An event-time timer on kfake: the watermark is the records' timestamps
// (the producer's, in the bubble's virtual time), so the timer waits for a
// record of its partition stamped past it however long the clock runs,
// and fires right after that record is folded.
func TestEventTimeTimerOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		fired := &firings{n: map[string]int{}}
		e := w.engineWith(func(c *engine.Config[int]) { c.Fold, c.OnTimer, c.Emit = timerFold, onTimer, fired.emit })
		r := w.runner(e, protocols["classic-eager"])
		w.produce("alice=+1", "alice=deadline") // an event-time timer timerDelay after the record
		w.drain(r)
		time.Sleep(2 * timerDelay) // the bubble's clock moves past the timer (no record does)
		w.drain(r)
		if got := fired.of("alice"); got != 0 {
			t.Fatalf("fired %d times with no record past its time", got)
		}
		w.produce("carol=+5") // alice's partition, stamped past the timer
		w.drain(r)
		tp := store.TopicPartition{Topic: "accounts", Partition: 1}
		if s, _, _ := r.State(tp, []byte("alice")); fired.of("alice") != 1 || s != 1001 {
			t.Fatalf("fired %d times, alice = %d; want 1 and 1001", fired.of("alice"), s)
		}
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
