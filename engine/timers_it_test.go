//go:build it

package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
)

// Timers against Kafka 4.3.1, in real time: the timer a member fired and
// never wrote fires again at the next owner, once; after its firing is
// committed a fresh member recovers the state without the timer, and
// nothing fires again.
func TestTimerFiresOnceAcrossACrashOnKafka(t *testing.T) {
	w := newBrokerWorld(t)
	fired := &firings{n: map[string]int{}}
	timed := func(c *engine.Config[int]) {
		c.Fold = func(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
			if string(rec.Value) == "remind" { // a second after the record's timestamp
				return engine.Keep[int]().SetTimer(engine.Timer{Kind: engine.ProcessingTime, At: rec.Timestamp.Add(time.Second)}), nil
			}
			return balance(key, state, exists, rec)
		}
		c.OnTimer, c.Emit = onTimer, fired.emit
		c.PersistInterval, c.CommitInterval = time.Hour, time.Hour // written when told (FlushAll)
		// A tick that changes nothing bounds a poll's wait in real time
		// (the intervals would let it wait an hour).
		c.Tick = func([]byte, int, time.Time) (engine.Result[int], error) { return engine.Keep[int](), nil }
		c.TickInterval = 200 * time.Millisecond
	}
	ctx := context.Background()
	until := func(what string, cond func() bool, r *engine.Member[int]) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("not within a minute: %s (fired %v, errors %v)", what, fired.n, r.Errors())
			}
			if err := r.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	alice := store.TopicPartition{Topic: w.topic, Partition: 1}
	state := func(r *engine.Member[int]) int { s, _, _ := r.State(alice, []byte("alice")); return s }

	w.produce("alice=+1", "alice=remind")
	a, kill := w.killableRunnerWith(protocols["classic-eager"], timed)
	until("a commits the timer", func() bool { a.FlushAll(ctx); return w.caughtUp() && len(a.Flows()) == 2 }, a)
	until("a fires it", func() bool { return fired.of("alice") == 1 }, a)
	crashAndLeave(t, a, kill) // the firing is never written

	b := w.runnerWith(protocols["classic-eager"], timed)
	until("b fires it again", func() bool { return fired.of("alice") == 2 && state(b) == 1001 }, b)
	b.FlushAll(ctx)
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}

	c := w.runnerWith(protocols["classic-eager"], timed)
	until("c recovers the state", func() bool { return len(c.Flows()) == 2 && state(c) == 1001 }, c)
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		if err := c.Step(ctx); err != nil { // past the timer's time again: nothing fires
			t.Fatal(err)
		}
	}
	if got := fired.of("alice"); got != 2 || state(c) != 1001 {
		t.Fatalf("after the firing was committed: fired %d times in all, alice = %d; want 2 and 1001", got, state(c))
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
