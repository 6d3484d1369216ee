package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// Per-key timers on the simulated cluster (docs/design.md, "Per-key timers"). The
// fold is balance's, plus "remind" (a processing-time timer 5 s after the
// record's timestamp, the log append time on the virtual clock) and
// "deadline" (an event-time timer as far after it); a timer adds 1000 to
// the balance and emits "fired".

const timerDelay = 5 * time.Second

func timerFold(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
	switch string(rec.Value) {
	case "remind":
		return engine.Keep[int]().SetTimer(engine.Timer{Kind: engine.ProcessingTime, At: rec.Timestamp.Add(timerDelay)}), nil
	case "deadline":
		return engine.Keep[int]().SetTimer(engine.Timer{Kind: engine.EventTime, At: rec.Timestamp.Add(timerDelay)}), nil
	case "forget":
		return engine.Keep[int]().CancelTimer(engine.Timer{Kind: engine.ProcessingTime, At: rec.Timestamp.Add(-timerDelay)}), nil
	}
	return balance(key, state, exists, rec)
}

func onTimer(key []byte, state int, t engine.Timer) (engine.Result[int], error) {
	return engine.Set(state + 1000).With(engine.Output{Topic: "fired", Key: key, Value: []byte(t.Kind.String())}), nil
}

// firings counts the "fired" outputs per key, across every engine that
// emits to it.
type firings struct {
	mu sync.Mutex
	n  map[string]int
}

func (f *firings) emit(_ context.Context, outs []engine.Output) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range outs {
		if o.Topic == "fired" {
			f.n[string(o.Key)]++
		}
	}
	return nil
}

func (f *firings) of(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[key]
}

type timerWorld struct {
	*simWorld
	fired *firings
}

func newTimerWorld(t *testing.T) *timerWorld {
	return &timerWorld{simWorld: newSimWorld(t), fired: &firings{n: map[string]int{}}}
}

// engine is an engine with timers that persists and commits only when
// told (FlushAll), so that a test decides what is durable at a crash.
func (w *timerWorld) engine(dir string, tweak ...func(*engine.Config[int])) *engine.Engine[int] {
	e := w.open(dir, tweak...)
	w.t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	return e
}

// open is engine, closed by the caller.
func (w *timerWorld) open(dir string, tweak ...func(*engine.Config[int])) *engine.Engine[int] {
	cfg := engine.Config[int]{Fold: timerFold, OnTimer: onTimer, Codec: intCodec{}, Store: w.store, Dir: dir,
		PersistInterval: time.Hour, CommitInterval: time.Hour, Emit: w.fired.emit}
	for _, f := range tweak {
		f(&cfg)
	}
	e, err := engine.New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	return e
}

// steps steps the runners n times, a second of virtual time apart.
func (w *timerWorld) steps(n int, rs ...*engine.Member[int]) {
	w.t.Helper()
	for range n {
		for _, r := range rs {
			if err := r.Step(context.Background()); err != nil {
				w.t.Fatal(err)
			}
		}
		w.c.Advance(time.Second)
	}
}

func (w *timerWorld) state(r *engine.Member[int], key string) int {
	w.t.Helper()
	tp := store.TopicPartition{Topic: "accounts", Partition: int32(len(key) % 2)}
	s, ok, err := r.State(tp, []byte(key))
	if err != nil || !ok {
		w.t.Fatalf("%s: %d %t %v", key, s, ok, err)
	}
	return s
}

// A timer fires once when its time passes, its effect and its removal in
// one state change; a clean restart recovers both and fires nothing.
func TestTimerFiresOnceOnSim(t *testing.T) {
	w := newTimerWorld(t)
	w.produce("alice=+1")
	w.c.Produce(store.TopicPartition{Topic: "accounts", Partition: 1}, wire.Record{Key: []byte("alice"), Value: []byte("remind")})
	r := w.runner(w.engine(""))
	w.steps(3, r)
	if got := w.fired.of("alice"); got != 0 {
		t.Fatalf("fired %d times before its time", got)
	}
	w.steps(5, r)
	if got := w.fired.of("alice"); got != 1 {
		t.Fatalf("fired %d times, want 1", got)
	}
	if got := w.state(r, "alice"); got != 1001 {
		t.Fatalf("alice = %d, want 1001", got)
	}
	r.FlushAll(context.Background())
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	again := w.runner(w.engine(""))
	w.steps(10, again)
	if got, st := w.fired.of("alice"), w.state(again, "alice"); got != 1 || st != 1001 {
		t.Fatalf("after a restart: fired %d times, alice = %d; want 1 and 1001", got, st)
	}
}

// A crash after the firing but before its snapshot is durable: the next
// owner recovers the timer with the state before it and fires it again,
// once (the first firing's effect was never committed). A crash after the
// firing's snapshot is durable: it never fires again.
func TestTimerFiresOnceAcrossCrashesOnSim(t *testing.T) {
	w := newTimerWorld(t)
	w.produce("alice=+1")
	w.c.Produce(store.TopicPartition{Topic: "accounts", Partition: 1}, wire.Record{Key: []byte("alice"), Value: []byte("remind")})
	a := w.runner(w.engine(""))
	w.steps(1, a)
	a.FlushAll(context.Background()) // the state and its timer are durable
	w.steps(6, a)
	if got := w.fired.of("alice"); got != 1 {
		t.Fatalf("a fired %d times, want 1", got)
	}
	crashOnSim(t, a) // before the firing's snapshot is written
	w.c.Advance(time.Minute)

	b := w.runner(w.engine(""))
	w.steps(3, b)
	if got, st := w.fired.of("alice"), w.state(b, "alice"); got != 2 || st != 1001 {
		t.Fatalf("b: fired %d times in all, alice = %d; want the lost firing again (2) and 1001", got, st)
	}
	b.FlushAll(context.Background()) // the firing is durable now
	crashOnSim(t, b)
	w.c.Advance(time.Minute)

	c := w.runner(w.engine(""))
	w.steps(10, c)
	if got, st := w.fired.of("alice"), w.state(c, "alice"); got != 2 || st != 1001 {
		t.Fatalf("c: fired %d times in all, alice = %d; want no firing after a durable one (2) and 1001", got, st)
	}
}

// A timer whose partition moves to another member fires there, once.
func TestTimerMovesWithItsPartitionOnSim(t *testing.T) {
	w := newTimerWorld(t)
	w.produce("alice=+1", "bob=+2")
	for _, k := range []string{"alice", "bob"} {
		w.c.Produce(store.TopicPartition{Topic: "accounts", Partition: int32(len(k) % 2)}, wire.Record{Key: []byte(k), Value: []byte("remind")})
	}
	a := w.runner(w.engine(""))
	w.steps(1, a)
	if len(a.Flows()) != 2 {
		t.Fatalf("a owns %v", a.Flows())
	}
	b := w.runner(w.engine("")) // a rebalance: one partition moves to b (a flushes it on revoke)
	w.steps(10, a, b)
	if len(a.Flows()) != 1 || len(b.Flows()) != 1 {
		t.Fatalf("a owns %v, b %v: no partition moved", a.Flows(), b.Flows())
	}
	for _, k := range []string{"alice", "bob"} {
		if got := w.fired.of(k); got != 1 {
			t.Fatalf("%s fired %d times, want 1", k, got)
		}
		r := a
		if tp := (store.TopicPartition{Topic: "accounts", Partition: int32(len(k) % 2)}); b.Flows()[0] == tp {
			r = b
		}
		if st := w.state(r, k); st != w.want[k]+1000 {
			t.Fatalf("%s = %d, want %d", k, st, w.want[k]+1000)
		}
	}
}

// A warm restart (Dir kept) finds the committed timers through the cache's
// index, with a delta recovery that reads no snapshot, and fires them once.
func TestTimerFiresAfterWarmRestartOnSim(t *testing.T) {
	w := newTimerWorld(t)
	dir := t.TempDir()
	w.produce("alice=+1")
	w.c.Produce(store.TopicPartition{Topic: "accounts", Partition: 1}, wire.Record{Key: []byte("alice"), Value: []byte("remind")})
	e := w.open(dir)
	r := w.runner(e)
	w.steps(1, r)
	if err := r.Close(context.Background()); err != nil { // flushes: the timer is durable, unfired
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if got := w.fired.of("alice"); got != 0 {
		t.Fatalf("fired %d times before the restart", got)
	}
	var snaps int
	e = w.open(dir)
	warm := w.runner(e)
	w.steps(10, warm)
	if got, st := w.fired.of("alice"), w.state(warm, "alice"); got != 1 || st != 1001 {
		t.Fatalf("after a warm restart: fired %d times, alice = %d; want 1 and 1001", got, st)
	}
	for _, p := range warm.Status().Partitions {
		snaps += int(p.Recovery.Snapshots)
	}
	if snaps != 0 {
		t.Fatalf("the warm restart recovered %d snapshots, want a delta of none", snaps)
	}
	if err := warm.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	again := w.runner(w.engine(dir))
	w.steps(10, again)
	if got := w.fired.of("alice"); got != 1 {
		t.Fatalf("a fired timer fired again after a second warm restart: %d", got)
	}
}

// An event-time timer fires when a record of its partition at or past its
// time is folded, right after it, before the next record.
func TestEventTimeTimerOnSim(t *testing.T) {
	w := newTimerWorld(t)
	p1 := store.TopicPartition{Topic: "accounts", Partition: 1}
	w.c.Produce(p1, wire.Record{Key: []byte("alice"), Value: []byte("+1")}, wire.Record{Key: []byte("alice"), Value: []byte("deadline")})
	r := w.runner(w.engine(""))
	w.steps(20, r) // processing time passes; no record, so the watermark does not
	if got := w.fired.of("alice"); got != 0 {
		t.Fatalf("fired %d times without a record past its time", got)
	}
	w.produce("carol=+5", "carol=+6") // carol is alice's partition
	w.steps(1, r)
	if got, st := w.fired.of("alice"), w.state(r, "alice"); got != 1 || st != 1001 {
		t.Fatalf("fired %d times, alice = %d; want 1 and 1001", got, st)
	}
}

// A fold that sets a timer with no OnTimer, or on a key it deletes, fails
// as a poison record, with the sentinel; a cancel of a timer the key does
// not hold is no error.
func TestTimerMisuseIsAFoldErrorOnSim(t *testing.T) {
	w := newTimerWorld(t)
	p1 := store.TopicPartition{Topic: "accounts", Partition: 1}
	w.c.Produce(p1, wire.Record{Key: []byte("alice"), Value: []byte("+1")}, wire.Record{Key: []byte("alice"), Value: []byte("forget")},
		wire.Record{Key: []byte("alice"), Value: []byte("remind")})
	r := w.runner(w.engine("", func(c *engine.Config[int]) { c.OnTimer = nil }))
	ctx := context.Background()
	var err error
	for range 3 {
		if err = r.Step(ctx); err != nil {
			break
		}
	}
	var fe *engine.FoldError
	if !errors.As(err, &fe) || !errors.Is(err, engine.ErrNoTimerHandler) || fe.Offset != 2 {
		t.Fatalf("err = %v, want a FoldError at offset 2 wrapping ErrNoTimerHandler", err)
	}

	deleting := func(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
		return engine.Delete[int]().SetTimer(engine.Timer{Kind: engine.EventTime, At: rec.Timestamp}), nil
	}
	w2 := newTimerWorld(t)
	w2.produce("bob=+1")
	r2 := w2.runner(w2.engine("", func(c *engine.Config[int]) { c.Fold = deleting }))
	for range 3 {
		if err = r2.Step(ctx); err != nil {
			break
		}
	}
	if !errors.As(err, &fe) || !errors.Is(err, engine.ErrTimerWithoutState) {
		t.Fatalf("err = %v, want a FoldError wrapping ErrTimerWithoutState", err)
	}
}

// A failing OnTimer goes to the poison policy: StopOnPoison stops the
// partition with a FoldError naming the timer (the timer stays: it fires
// again after a restart); SkipPoison removes the timer and goes on.
func TestTimerFailureGoesToThePoisonPolicyOnSim(t *testing.T) {
	failing := func(key []byte, state int, t engine.Timer) (engine.Result[int], error) {
		return engine.Result[int]{}, errors.New("no reminder today")
	}
	for _, policy := range []engine.PoisonPolicy{engine.StopOnPoison, engine.SkipPoison} {
		t.Run(policy.String(), func(t *testing.T) {
			w := newTimerWorld(t)
			p1 := store.TopicPartition{Topic: "accounts", Partition: 1}
			w.c.Produce(p1, wire.Record{Key: []byte("alice"), Value: []byte("+1")}, wire.Record{Key: []byte("alice"), Value: []byte("remind")})
			r := w.runner(w.engine("", func(c *engine.Config[int]) { c.OnTimer, c.Poison = failing, policy }))
			ctx := context.Background()
			var err error
			for range 10 {
				if err = r.Step(ctx); err != nil {
					break
				}
				w.c.Advance(time.Second)
			}
			if policy == engine.StopOnPoison {
				var fe *engine.FoldError
				if !errors.As(err, &fe) || fe.Timer == nil || fe.Offset != -1 || !strings.Contains(err.Error(), `processing-time timer at`) ||
					!strings.Contains(err.Error(), "no reminder today") {
					t.Fatalf("err = %v, want a FoldError naming the timer", err)
				}
				// The timer as OnTimer was handed it: the remind fold set
				// a processing-time timer at the record's time plus timerDelay.
				if fe.Timer.Kind != engine.ProcessingTime || fe.Timer.At.IsZero() || !strings.Contains(err.Error(), fmt.Sprint(fe.Timer.At.UnixMilli())) {
					t.Fatalf("FoldError.Timer = %+v, want the processing-time timer the message names (%v)", fe.Timer, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := w.state(r, "alice"); got != 1 {
				t.Fatalf("alice = %d, want 1 (the timer skipped)", got)
			}
			if errs := r.Errors(); len(errs) != 0 {
				t.Fatalf("errors: %v", errs)
			}
		})
	}
}

// A delete drops the key's timers: they never fire.
func TestDeleteDropsTimersOnSim(t *testing.T) {
	w := newTimerWorld(t)
	p1 := store.TopicPartition{Topic: "accounts", Partition: 1}
	w.c.Produce(p1, wire.Record{Key: []byte("alice"), Value: []byte("+1")}, wire.Record{Key: []byte("alice"), Value: []byte("remind")},
		wire.Record{Key: []byte("alice"), Value: []byte("close")})
	r := w.runner(w.engine(""))
	w.steps(10, r)
	if got := w.fired.of("alice"); got != 0 {
		t.Fatalf("a deleted key's timer fired %d times", got)
	}
}

// A firing's outputs under ExactlyOnce go out in the batch's transaction
// with the snapshot that removes the timer: a member that fired and
// crashed before its batch committed sent nothing, and the next owner's
// firing is read_committed once. At least once the crashed member's
// output stays, and the firing's output is read twice (the control).
func TestTimerOutputsThroughACrashOnSim(t *testing.T) {
	for _, eos := range []bool{true, false} {
		t.Run(map[bool]string{true: "exactly once", false: "at least once"}[eos], func(t *testing.T) {
			w := newEOSWorld(t, eos)
			ctx := context.Background()
			timed := func(c *engine.Config[int]) {
				c.Fold = timerFold
				c.OnTimer = func(key []byte, state int, tm engine.Timer) (engine.Result[int], error) {
					return engine.Set(state + 1000).With(engine.Output{Topic: "audit", Key: key, Value: []byte("fired " + string(key))}), nil
				}
			}
			p1 := store.TopicPartition{Topic: "accounts", Partition: 1}
			w.c.Produce(p1, wire.Record{Key: []byte("alice"), Value: []byte("+1")}, wire.Record{Key: []byte("alice"), Value: []byte("remind")})
			a := w.runner(w.engine(time.Hour, timed))
			if err := a.Step(ctx); err != nil {
				t.Fatal(err)
			}
			a.FlushAll(ctx) // the timer is committed
			for range 7 {   // it fires; the batch that carries the firing is not committed
				w.c.Advance(time.Second)
				if err := a.Step(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if s, _, _ := a.State(p1, []byte("alice")); s != 1001 {
				t.Fatalf("a: alice = %d, want the firing (1001)", s)
			}
			crashOnSim(t, a)
			w.c.Advance(time.Minute)
			b := w.runner(w.engine(time.Second, timed))
			w.drain(b)
			for range 3 {
				w.c.Advance(time.Second)
				if err := b.Step(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if s, _, _ := b.State(p1, []byte("alice")); s != 1001 {
				t.Fatalf("b: alice = %d, want one firing (1001)", s)
			}
			want := 1
			if !eos {
				want = 2
			}
			if got := w.audit(true)["fired alice"]; got != want {
				t.Fatalf("the firing's output read_committed %d times, want %d", got, want)
			}
		})
	}
}

// A fold reads processing time from Record.Now: the poll's time on the
// input's clock, which the simulated cluster drives. A record produced
// ten minutes (virtual) before it is folded has Timestamp at its append
// and Now at the fold; a processing-time timer set at Now plus five
// seconds fires five virtual seconds after the fold, not at once (as one
// set from Timestamp, or from a zero Now, would).
func TestFoldReadsProcessingTimeFromTheInputsClockOnSim(t *testing.T) {
	w := newTimerWorld(t)
	var seen []engine.Record
	fold := func(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
		seen = append(seen, rec)
		return engine.Set(state + 1).SetTimer(engine.Timer{Kind: engine.ProcessingTime, At: rec.Now.Add(timerDelay)}), nil
	}
	p1 := store.TopicPartition{Topic: "accounts", Partition: 1}
	produced := w.c.Now()
	if _, err := w.c.Produce(p1, wire.Record{Key: []byte("alice"), Value: []byte("+1")}); err != nil {
		t.Fatal(err)
	}
	w.c.Advance(10 * time.Minute)
	r := w.runner(w.engine("", func(c *engine.Config[int]) { c.Fold = fold }))
	ctx := context.Background()
	var foldedAt time.Time
	for range 10 {
		at := w.c.Now()
		if err := r.Step(ctx); err != nil {
			t.Fatal(err)
		}
		if len(seen) > 0 {
			foldedAt = at
			break
		}
		w.c.Advance(time.Second)
	}
	if len(seen) != 1 {
		t.Fatalf("folded %d records, want alice's one", len(seen))
	}
	rec := seen[0]
	if !rec.Now.Equal(foldedAt) || !rec.Timestamp.Equal(produced) {
		t.Fatalf("rec.Now = %v, Timestamp = %v; want the poll's virtual time %v and the append time %v", rec.Now, rec.Timestamp, foldedAt, produced)
	}
	for w.c.Now().Before(foldedAt.Add(timerDelay)) {
		if n := w.fired.of("alice"); n != 0 {
			t.Fatalf("the timer fired at %v, before Now+%v (%v)", w.c.Now(), timerDelay, foldedAt.Add(timerDelay))
		}
		w.c.Advance(time.Second)
		if err := r.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w.steps(2, r)
	if n := w.fired.of("alice"); n != 1 {
		t.Fatalf("the timer fired %d times by %v, want once", n, w.c.Now())
	}
}
