package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/internal/input"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

func (w *simWorld) runnerWith(e *engine.Engine[int], protocol sim.Protocol, wrap func(input.Handler) input.Handler) *engine.Member[int] {
	w.t.Helper()
	r, err := e.Join(input.Wrapped(simsource.New(w.c, "bank", protocol, 0, "accounts"), func(h input.Handler) input.Handler {
		if wrap != nil {
			h = wrap(h)
		}
		return h
	}))
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// A rebalance that bumps the generation and leaves this member's
// partitions where they are fires no callback under two protocols; the
// post-poll read keeps the identity current, so the next flush commits.
func TestGenerationBumpKeepingPartitionsDoesNotFence(t *testing.T) {
	for _, protocol := range []sim.Protocol{sim.ClassicEager, sim.ClassicCooperative, sim.Consumer} {
		t.Run(protocol.String(), func(t *testing.T) {
			w := newSimWorld(t)
			w.produce("alice=+1", "bob=+2")
			r := w.runnerWith(w.engine(), protocol, nil)
			w.drain(r)
			before := r.Source().Identity().Generation
			w.c.Rebalance("bank")
			w.produce("alice=+3", "bob=+4")
			w.drain(r)
			if after := r.Source().Identity().Generation; after <= before {
				t.Fatalf("generation %d -> %d: the rebalance did not bump it", before, after)
			}
			if errs := r.Errors(); len(errs) > 0 {
				t.Fatalf("a flush after the bump failed: %v", errs)
			}
			w.check(r)
		})
	}
}

// revokeWatch checks, as each revoke callback returns, that the runner has
// no flow left for the revoked partitions.
type revokeWatch struct {
	input.Handler
	r       *engine.Member[int]
	t       *testing.T
	revoked []store.TopicPartition
}

func (h *revokeWatch) Revoked(ctx context.Context, tps []store.TopicPartition) {
	h.Handler.Revoked(ctx, tps)
	r := h.r
	for _, tp := range tps {
		if slices.Contains(r.Flows(), tp) {
			h.t.Errorf("the revoke of %s returned with its flow still running", tp)
		}
		if _, _, err := r.State(tp, []byte("alice")); err == nil {
			h.t.Errorf("the revoke of %s returned with its state still readable", tp)
		}
	}
	h.revoked = append(h.revoked, tps...)
}

// The revoke callback flushes, commits and tears the flow down before it
// returns (classic eager: the flush commits).
func TestRevokeTearsTheFlowDownBeforeReturning(t *testing.T) {
	w := newSimWorld(t)
	w.produce("alice=+1", "bob=+2")
	var watch *revokeWatch
	a := w.runnerWith(w.engine(), sim.ClassicEager, func(h input.Handler) input.Handler {
		watch = &revokeWatch{Handler: h, t: t}
		return watch
	})
	watch.r = a
	w.drain(a)
	w.produce("alice=+10", "bob=+20")
	if err := a.Step(context.Background()); err != nil { // folded, not flushed
		t.Fatal(err)
	}
	b := w.runner(w.engine())
	w.drain(a, b)
	if len(watch.revoked) == 0 {
		t.Fatal("a was never revoked")
	}
	w.check(a, b)
	if errs := a.Errors(); len(errs) > 0 {
		t.Fatalf("a: %v", errs)
	}
}

// A recovered state that does not decode stops the partition with an
// error naming the key and its offset; nothing is committed.
func TestUndecodableRecoveredStateNamesIt(t *testing.T) {
	w := newSimWorld(t)
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	id := func() store.GroupIdentity { return store.GroupIdentity{} }
	p, err := w.store.Acquire(context.Background(), store.Acquisition{Input: tp, Identity: store.IdentityFunc(id)})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	// A foreign writer of the right format but the wrong state encoding.
	w.c.Produce(store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: 1},
		wire.EncodeSnapshot("", store.Snapshot{Key: []byte("bob"), Value: []byte("not-a-number"), Offset: 41}))
	w.produce("bob=+1")
	r := w.runner(w.engine())
	for range 3 {
		r.Step(context.Background())
		w.c.Advance(time.Second)
	}
	errs := r.Errors()
	var re *engine.RecoveredStateError
	if len(errs) == 0 || !errors.As(errs[0], &re) || string(re.Key) != "bob" || re.Offset != 41 ||
		!strings.Contains(errs[0].Error(), `key "bob" (input offset 41) does not decode`) {
		t.Fatalf("errors = %v, want a RecoveredStateError for bob at 41", errs)
	}
	if off, ok := w.c.CommittedOffset("bank", tp); ok {
		t.Fatalf("committed %d past an unreadable state", off)
	}
}

// A member that pauses past its session loses its partitions; its next
// periodic flush is fenced, which stops the flow loudly. Nothing of it
// lands, and the new owner's state is exact.
func TestFenceOnThePeriodicPathStopsTheFlow(t *testing.T) {
	w := newSimWorld(t)
	w.produce("alice=+1", "bob=+2")
	logs := &logCount{}
	a := w.runner(w.engineWith(func(c *engine.Config[int]) { c.Logger = slog.New(logs) }))
	w.drain(a)
	w.produce("alice=+5", "dave=+3") // both partitions have a change to flush
	if err := a.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	src := sourceOf(t, a)
	src.Member().Stall()
	w.c.Advance(time.Minute) // a is evicted
	b := w.runner(w.engine())
	w.produce("bob=+7")
	w.drain(b)
	src.Member().Resume()
	// a's first step after the pause: its flush is fenced before it learns
	// of the eviction.
	a.FlushAll(context.Background())
	errs := a.Errors()
	if len(errs) == 0 || !errors.Is(errs[0], store.ErrFenced) {
		t.Fatalf("a's errors after the pause: %v, want a fence", errs)
	}
	if len(a.Flows()) != 0 {
		t.Fatalf("a's fenced flows still run: %v", a.Flows())
	}
	// A fence is expected in a rebalance: WARN, never ERROR.
	if n, warned := logs.errorLines(), logs.count(slog.LevelWarn, "accounts/1"); n != 0 || warned == 0 {
		t.Fatalf("%d ERROR lines and %d WARN lines for the fenced partition, want 0 and some:\n%s", n, warned, logs)
	}
	w.drain(b)
	w.check(b)
}

func sourceOf(t *testing.T, r *engine.Member[int]) *simsource.Source {
	t.Helper()
	s, ok := r.Source().(*simsource.Source)
	if !ok {
		t.Fatalf("source %T", r.Source())
	}
	return s
}

// A failed Emit loses the outputs of the records it carried; those folds
// must not be committed: the flows restart from the committed state and
// the records are folded, and emitted, again.
func TestFailedEmitCommitsNothingItsOutputsCovered(t *testing.T) {
	w := newSimWorld(t)
	out := &failingOutput{fail: true}
	newEngine := func() *engine.Engine[int] { return out.engine(w, false) }
	ctx := context.Background()
	r1 := w.runner(newEngine())
	if err := r1.Step(ctx); err != nil { // join and assignment
		t.Fatal(err)
	}
	w.produce("alice=+10")
	if err := r1.Step(ctx); err == nil || !strings.Contains(err.Error(), "output topic unavailable") {
		t.Fatalf("step with a failing Emit: %v", err)
	}
	if err := r1.Close(ctx); err != nil { // what Run does on a Step error
		t.Fatal(err)
	}
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	if off, ok := w.c.CommittedOffset("bank", tp); ok && off > 0 {
		t.Fatalf("offset %d committed over outputs that were never emitted", off)
	}
	out.fail = false
	r2 := w.runner(newEngine())
	w.drain(r2)
	if !slices.Contains(out.emitted, "alice=10") {
		t.Fatalf("outputs emitted after the restart: %v, want alice=10", out.emitted)
	}
	w.check(r2)
}

// failingOutput is an output that fails while fail is set and otherwise
// keeps what it was given.
type failingOutput struct {
	fail    bool
	emitted []string
}

func (o *failingOutput) deliver(outs []engine.Output) error {
	if o.fail {
		return errors.New("output topic unavailable")
	}
	for _, out := range outs {
		o.emitted = append(o.emitted, string(out.Key)+"="+string(out.Value))
	}
	return nil
}

// engine is w's engine with o as its Emit, or its StartEmit (start).
func (o *failingOutput) engine(w *simWorld, start bool) *engine.Engine[int] {
	cfg := engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: w.store,
		PersistInterval: time.Second, CommitInterval: time.Second}
	if start {
		cfg.StartEmit = func(_ context.Context, outs []engine.Output) func() error {
			return func() error { return o.deliver(outs) }
		}
	} else {
		cfg.Emit = func(_ context.Context, outs []engine.Output) error { return o.deliver(outs) }
	}
	e, err := engine.New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	return e
}

// StartEmit's outputs are in flight while the next polls are folded, and
// nothing durable passes them: no snapshot is written and no offset
// committed between a call's start and its wait. The engine calls each
// wait once, in the order of the calls, with at most MaxEmitsInFlight in
// flight.
func TestStartEmitIsAwaitedBeforeAnythingDurable(t *testing.T) {
	w := newSimWorld(t)
	var log []string
	durable := func() string {
		var s []string
		for p := range int32(2) {
			_, _, hw, _ := w.c.Offsets(store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: p})
			off, _ := w.c.CommittedOffset("bank", store.TopicPartition{Topic: "accounts", Partition: p})
			s = append(s, fmt.Sprintf("%d/%d", hw, off))
		}
		return strings.Join(s, " ")
	}
	const most = 2
	var inFlight []int // the calls' numbers, oldest first
	calls, deepest := 0, 0
	e, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: w.store,
		PersistInterval: 2 * time.Second, CommitInterval: 2 * time.Second, MaxEmitsInFlight: most,
		StartEmit: func(_ context.Context, outs []engine.Output) func() error {
			calls++
			n, at := calls, durable()
			if inFlight = append(inFlight, n); len(inFlight) > most {
				t.Errorf("%d calls in flight, MaxEmitsInFlight %d", len(inFlight), most)
			}
			deepest = max(deepest, len(inFlight))
			var vs []string
			for _, o := range outs {
				vs = append(vs, string(o.Key)+"="+string(o.Value))
			}
			return func() error {
				if len(inFlight) == 0 || inFlight[0] != n {
					t.Errorf("wait of call %d with %v in flight: not the oldest, or called twice", n, inFlight)
				} else {
					inFlight = inFlight[1:]
				}
				if now := durable(); now != at {
					t.Errorf("snapshot ends/committed offsets went from %s to %s with outputs %v in flight", at, now, vs)
				}
				log = append(log, vs...)
				return nil
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	r := w.runner(e)
	if err := r.Step(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		w.produce(fmt.Sprintf("alice=+%d", i+1), fmt.Sprintf("bob=+%d", i+1))
		if err := r.Step(ctx); err != nil {
			t.Fatal(err)
		}
		w.c.Advance(500 * time.Millisecond) // a persist or commit due every fourth step
	}
	if deepest < most {
		t.Errorf("at most %d calls in flight: the engine waited for them earlier than it must", deepest)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(inFlight) > 0 {
		t.Errorf("Close left calls %v in flight", inFlight)
	}
	if !slices.Contains(log, "alice=78") || !slices.Contains(log, "bob=78") {
		t.Errorf("delivered %v, want the last balances alice=78 and bob=78", log)
	}
	if !w.caughtUp() {
		t.Error("the leave did not commit to the end of the input")
	}
}

// A failed StartEmit wait fails the partitions whose outputs it carried
// and those folded since: nothing is committed over them, and after a
// restart the records are folded and emitted again.
func TestFailedStartEmitCommitsNothingItsOutputsCovered(t *testing.T) {
	w := newSimWorld(t)
	out := &failingOutput{fail: true}
	newEngine := func() *engine.Engine[int] { return out.engine(w, true) }
	ctx := context.Background()
	r1 := w.runner(newEngine())
	if err := r1.Step(ctx); err != nil { // join and assignment
		t.Fatal(err)
	}
	w.produce("alice=+10")
	if err := r1.Step(ctx); err != nil { // its outputs in flight
		t.Fatal(err)
	}
	w.produce("bob=+3")          // the other partition: no output in the failed call
	w.c.Advance(2 * time.Second) // a commit due
	if err := r1.Step(ctx); err == nil || !strings.Contains(err.Error(), "output topic unavailable") {
		t.Fatalf("step after a failing StartEmit: %v", err)
	}
	if err := r1.Close(ctx); err != nil { // what Run does on a Step error
		t.Fatal(err)
	}
	for p := range int32(2) {
		tp := store.TopicPartition{Topic: "accounts", Partition: p}
		if off, ok := w.c.CommittedOffset("bank", tp); ok && off > 0 {
			t.Fatalf("%s: offset %d committed over outputs that were never emitted", tp, off)
		}
	}
	out.fail = false
	r2 := w.runner(newEngine())
	w.drain(r2)
	if !slices.Contains(out.emitted, "alice=10") || !slices.Contains(out.emitted, "bob=3") {
		t.Fatalf("outputs emitted after the restart: %v, want alice=10 and bob=3", out.emitted)
	}
	w.check(r2)
}

// A shutdown requested while a flush is due does not stop the flows: the
// leave that follows flushes and commits everything.
func TestCancelDuringADueFlushStillCommitsOnLeave(t *testing.T) {
	w := newSimWorld(t)
	r := w.runner(w.engine())
	if err := r.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.produce("alice=+10", "bob=+1")
	if err := r.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.c.Advance(2 * time.Second) // a flush and a commit are due
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Step(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("step with a cancelled context: %v", err)
	}
	if err := r.Close(context.WithoutCancel(ctx)); err != nil {
		t.Fatal(err)
	}
	if errs := r.Errors(); len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	if !w.caughtUp() {
		t.Fatal("the leave did not commit to the end of the input")
	}
}

// Engine.Close refuses while a Member stepped by hand is open, as it does
// under Run, and closes nothing: the runner goes on and closes cleanly
// (committing what it folded). Once the runner is closed, Close closes
// the cache. A crashed runner (never closed) is the test's to abandon.
func TestCloseRefusesWhileARunnerIsOpenOnSim(t *testing.T) {
	w := newSimWorld(t)
	e, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: w.store,
		PersistInterval: time.Second, CommitInterval: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.produce("alice=+1", "bob=+2")
	r := w.runner(e)
	w.drain(r)
	w.produce("alice=+3")
	if err := r.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); !errors.Is(err, engine.ErrRunning) {
		t.Fatalf("Close with a runner open = %v, want ErrRunning", err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatalf("the runner's Close after the refused engine Close: %v", err)
	}
	if off, _ := w.c.CommittedOffset("bank", store.TopicPartition{Topic: "accounts", Partition: 1}); off != 3 {
		t.Fatalf("committed offset of accounts/1 = %d after the runner's Close, want 3", off)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("Close after the runner's Close = %v", err)
	}

	// A crashed runner is never closed: abandoned, it no longer holds
	// the engine open.
	e2, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: w.store})
	if err != nil {
		t.Fatal(err)
	}
	crashed := w.runner(e2)
	w.drain(crashed)
	crashOnSim(t, crashed)
	if err := e2.Close(); err != nil {
		t.Fatalf("Close after the runner crashed and was abandoned = %v", err)
	}
}
