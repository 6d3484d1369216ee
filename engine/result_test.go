package engine_test

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// A fold or a tick that returns the zero Result changes nothing: the keys
// keep their states and no snapshot is written. (It once meant "set the
// zero state": a tick returning Result[S]{} reset every key.)
func TestZeroResultLeavesTheStateAndWritesNoSnapshot(t *testing.T) {
	w := newSimWorld(t)
	var mu sync.Mutex
	var written []string
	b, err := w.c.NewBackend(sim.BackendConfig{Mode: store.Transactional, TransactionalIDPrefix: "bank", CreateTopics: true,
		Observer: store.ObserverFunc(func(e store.TransactionEvent) {
			mu.Lock()
			defer mu.Unlock()
			for _, s := range e.Writes {
				written = append(written, string(s.Key)+"@"+strconv.FormatInt(s.Offset, 10))
			}
		})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ticks := 0
	e, err := engine.New(engine.Config[int]{
		Fold: func(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
			if string(rec.Value) == "noop" {
				return engine.Result[int]{}, nil
			}
			return balance(key, state, exists, rec)
		},
		Tick: func([]byte, int, time.Time) (engine.Result[int], error) {
			ticks++
			return engine.Result[int]{}, nil
		},
		TickInterval: time.Second,
		Codec:        intCodec{}, Store: b,
		PersistInterval: time.Second, CommitInterval: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	r := w.runner(e)
	w.produce("alice=+10", "bob=+5")
	w.drain(r)
	mu.Lock()
	before := slices.Clone(written)
	mu.Unlock()
	if len(before) != 2 {
		t.Fatalf("snapshots written for two deposits: %v", before)
	}
	w.produce("alice=noop", "bob=noop") // the ledger adds 0: the states stay
	ticksBefore := ticks
	w.drain(r)
	for range 3 { // ticks, flushes and commits come due again
		w.c.Advance(time.Second)
		if err := r.Step(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if ticks == ticksBefore {
		t.Fatal("no tick ran after the no-op folds")
	}
	w.check(r)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(written, before) {
		t.Fatalf("snapshots written: %v, want only %v", written, before)
	}
	if errs := r.Errors(); len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
}

// Result's constructors say what the fold did; With adds outputs without
// changing the Result it was called on.
func TestResultConstructors(t *testing.T) {
	var zero engine.Result[int]
	if !zero.Kept() || zero.Deleted() || zero.State() != 0 || zero.Outputs() != nil {
		t.Fatalf("zero Result: kept %t deleted %t state %d outputs %v", zero.Kept(), zero.Deleted(), zero.State(), zero.Outputs())
	}
	if k := engine.Keep[int](); !k.Kept() || k.Deleted() {
		t.Fatalf("Keep: kept %t deleted %t", k.Kept(), k.Deleted())
	}
	if s := engine.Set(7); s.Kept() || s.Deleted() || s.State() != 7 {
		t.Fatalf("Set(7): kept %t deleted %t state %d", s.Kept(), s.Deleted(), s.State())
	}
	if d := engine.Delete[int](); d.Kept() || !d.Deleted() {
		t.Fatalf("Delete: kept %t deleted %t", d.Kept(), d.Deleted())
	}
	a := engine.Output{Topic: "t", Key: []byte("a")}
	b := engine.Output{Topic: "t", Key: []byte("b")}
	one := engine.Set(1).With(a)
	two := one.With(b)
	other := one.With(a)
	if len(one.Outputs()) != 1 || len(two.Outputs()) != 2 || string(two.Outputs()[1].Key) != "b" || string(other.Outputs()[1].Key) != "a" {
		t.Fatalf("With: %v, %v, %v", one.Outputs(), two.Outputs(), other.Outputs())
	}
	if two.State() != 1 || two.Kept() {
		t.Fatalf("With changed the state: %d kept %t", two.State(), two.Kept())
	}
}

// A fold failure is an *engine.FoldError naming the record, matched with
// errors.As (the core's own type stays inside the engine).
func TestFoldFailureIsAnEngineFoldError(t *testing.T) {
	w := newSimWorld(t)
	w.produce("bob=+5")
	r := w.runner(w.engine())
	w.drain(r)
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	if _, err := w.c.Produce(tp, wire.Record{Key: []byte("bob"), Value: []byte("lots")}); err != nil {
		t.Fatal(err)
	}
	// Under the default poison policy the failure ends the runner: Step
	// returns it (as Run would).
	var err error
	for range 3 {
		if err = r.Step(t.Context()); err != nil {
			break
		}
		w.c.Advance(time.Second)
	}
	var fe *engine.FoldError
	if !errors.As(err, &fe) {
		t.Fatalf("Step = %v, want an *engine.FoldError", err)
	}
	if fe.Input != tp || fe.Offset != 1 || string(fe.Key) != "bob" || fe.Err == nil || fe.Panic != nil {
		t.Fatalf("FoldError = %+v, want accounts/1 offset 1 key bob with the fold's error", fe)
	}
}
