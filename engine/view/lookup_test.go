package view_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// lookupWorld is a simulated cluster with an input topic "orders" and a
// plain table topic "customers", and a Transactional backend of the
// application "shop".
type lookupWorld struct {
	t       *testing.T
	c       *sim.Cluster
	backend *sim.Backend
}

func newLookupWorld(t *testing.T) *lookupWorld {
	t.Helper()
	c := sim.New(sim.Config{Seed: 1})
	for name, cfg := range map[string]sim.TopicConfig{"orders": {Partitions: 2}, "customers": {Partitions: 3, Compacted: true}} {
		if err := c.CreateTopic(name, cfg); err != nil {
			t.Fatal(err)
		}
	}
	b, err := c.NewBackend(sim.BackendConfig{Mode: store.Transactional, Application: "shop", CreateTopics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return &lookupWorld{t: t, c: c, backend: b}
}

// put writes key=value to topic, in the partition Kafka's default
// partitioner gives key.
func (w *lookupWorld) put(topic, key, value string) {
	w.t.Helper()
	cfg, _ := w.c.Topic(topic)
	tp := store.TopicPartition{Topic: topic, Partition: store.OutputPartition([]byte(key), cfg.Partitions)}
	if _, err := w.c.Produce(tp, wire.Record{Key: []byte(key), Value: []byte(value)}); err != nil {
		w.t.Fatal(err)
	}
}

// customers declares the plain customers table, failing the test if
// NewLookup refuses it.
func customers(t *testing.T) *view.Lookup[string] {
	t.Helper()
	l := view.NewLookup(view.Config[string]{Topic: "customers", Plain: true, Codec: engine.String()})
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// NewLookup checks its Config with the View's checks, minus the Store,
// which it refuses: the runner gives it. Err reports what it found, and
// Open returns it, touching nothing.
func TestNewLookupChecksItsConfig(t *testing.T) {
	w := newLookupWorld(t)
	valid := view.Config[string]{Topic: "customers", Plain: true, Codec: engine.String()}
	if err := view.NewLookup(valid).Err(); err != nil {
		t.Fatalf("a valid declaration: %v", err)
	}
	for _, c := range []struct {
		field string
		edit  func(*view.Config[string])
	}{
		{"view.Config.Store", func(c *view.Config[string]) { c.Store = w.backend }},
		{"view.Config.Topic", func(c *view.Config[string]) { c.Topic = "" }},
		{"view.Config.Codec", func(c *view.Config[string]) { c.Codec = nil }},
		{"view.Config.Partitions", func(c *view.Config[string]) { c.Partitions = []int32{1, 1} }},
	} {
		cfg := valid
		c.edit(&cfg)
		l := view.NewLookup(cfg)
		for what, err := range map[string]error{"Err": l.Err(), "Open": l.Open(context.Background(), w.backend)} {
			ce, ok := errors.AsType[*store.ConfigError](err)
			if !ok || ce.Subject != c.field || !errors.Is(err, store.ErrMisconfigured) {
				t.Errorf("%s: %s = %v, want a *store.ConfigError naming %s", c.field, what, err, c.field)
			}
		}
	}
	// The View's own check still wants its Store.
	_, err := view.New(context.Background(), valid)
	if ce, ok := errors.AsType[*store.ConfigError](err); !ok || ce.Subject != "view.Config.Store" {
		t.Errorf("view.New without a Store = %v, want a *store.ConfigError naming view.Config.Store", err)
	}
}

// Before Open every read, Run and Step says the lookup is not open, and
// nothing panics; WaitCaughtUp waits for Open, here until its context
// ends.
func TestLookupBeforeOpenSaysSo(t *testing.T) {
	l := customers(t)
	if _, ok, err := l.Get([]byte("c1")); !errors.Is(err, view.ErrNotOpen) || ok {
		t.Errorf("Get before Open = %t, %v; want ErrNotOpen", ok, err)
	}
	ctx := context.Background()
	if err := l.Step(ctx); !errors.Is(err, view.ErrNotOpen) {
		t.Errorf("Step before Open = %v, want ErrNotOpen", err)
	}
	if err := l.Run(ctx); !errors.Is(err, view.ErrNotOpen) {
		t.Errorf("Run before Open = %v, want ErrNotOpen", err)
	}
	if l.View() != nil || l.Name() != "customers" {
		t.Errorf("before Open: View %v, Name %q; want nil and the configured topic", l.View(), l.Name())
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.WaitCaughtUp(done); !errors.Is(err, view.ErrNotOpen) || !errors.Is(err, context.Canceled) {
		t.Errorf("WaitCaughtUp before Open, its context ended = %v; want ErrNotOpen and context.Canceled", err)
	}
}

// WaitCaughtUp before Open blocks (synctest: the waiter is durably
// blocked, it has not returned) until Close, which wakes it with
// ErrClosed; a later Open is refused.
func TestLookupWaitCaughtUpWaitsForOpenOrClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := view.NewLookup(view.Config[string]{Topic: "customers", Plain: true, Codec: engine.String()})
		got := make(chan error, 1)
		go func() { got <- l.WaitCaughtUp(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("WaitCaughtUp returned %v before Open or Close", err)
		default:
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-got; !errors.Is(err, view.ErrClosed) {
			t.Fatalf("WaitCaughtUp woken by Close = %v, want ErrClosed", err)
		}
		if err := l.Open(context.Background(), nil); !errors.Is(err, view.ErrClosed) {
			t.Fatalf("Open after Close = %v, want ErrClosed", err)
		}
	})
}

// A waiter from before Open returns once the opened table has caught up;
// Get then reads the table; a second Open is refused; after Close reads
// say closed.
func TestLookupOpensOnceAndReads(t *testing.T) {
	w := newLookupWorld(t)
	w.put("customers", "c1", "Ada")
	w.put("customers", "c2", "Grace")
	l := customers(t)
	ctx := context.Background()
	got := make(chan error, 1)
	go func() { got <- l.WaitCaughtUp(ctx) }()

	// Reads racing the Open (for the race detector): before it they are
	// ErrNotOpen, after it the table's.
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 200 {
			if _, _, err := l.Get([]byte("c1")); err != nil && !errors.Is(err, view.ErrNotOpen) {
				t.Errorf("Get during Open: %v", err)
				return
			}
		}
	})
	if err := l.Open(ctx, w.backend); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := l.Open(ctx, w.backend); !errors.Is(err, view.ErrAlreadyOpen) {
		t.Fatalf("a second Open = %v, want ErrAlreadyOpen", err)
	}
	for range 10 {
		if err := l.Step(ctx); err != nil {
			t.Fatal(err)
		}
		if l.View().Status().CaughtUp {
			break
		}
	}
	if err := <-got; err != nil {
		t.Fatalf("WaitCaughtUp from before Open: %v", err)
	}
	if name, ok, err := l.Get([]byte("c2")); err != nil || !ok || name != "Grace" {
		t.Fatalf("Get c2 = %q, %t, %v; want Grace", name, ok, err)
	}
	if _, ok, err := l.Get([]byte("c9")); err != nil || ok {
		t.Fatalf("Get of a key the table lacks = %t, %v; want not found, no error", ok, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Get([]byte("c1")); !errors.Is(err, view.ErrClosed) {
		t.Fatalf("Get after Close = %v, want ErrClosed", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// Open checks what NewLookup could not: a table of snapshots needs a
// Transactional backend. The refused Open leaves the lookup unopened, and
// an Open on a backend that fits succeeds.
func TestLookupOpenChecksTheBackend(t *testing.T) {
	w := newLookupWorld(t)
	plain, err := w.c.NewBackend(sim.BackendConfig{Mode: store.Plain, Application: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	l := view.NewLookup(view.Config[string]{Topic: "orders", Codec: engine.String()}) // the shop's snapshots of orders
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	err = l.Open(ctx, plain)
	if ce, ok := errors.AsType[*store.ConfigError](err); !ok || ce.Subject != "view.Config.Store" {
		t.Fatalf("Open of a table of snapshots on a Plain backend = %v, want a *store.ConfigError naming view.Config.Store", err)
	}
	if _, _, err := l.Get([]byte("o1")); !errors.Is(err, view.ErrNotOpen) {
		t.Fatalf("Get after a refused Open = %v, want ErrNotOpen", err)
	}
	if err := l.Open(ctx, w.backend); err != nil {
		t.Fatalf("Open on a Transactional backend after a refused one: %v", err)
	}
	if l.Name() != "shop-orders-snapshots" {
		t.Fatalf("Name once open = %q, want the snapshot topic the backend names", l.Name())
	}
}

// A fold looks a declared table up: the runner (here the test) opens it
// on its backend and steps it between the member's steps. The negative
// control: the same engine before the table is opened folds nothing, and
// its partitions fail with a *engine.TableError naming the table once
// TableTimeout passes.
func TestLookupServesAFoldOnceItsRunnerOpensIt(t *testing.T) {
	w := newLookupWorld(t)
	w.put("customers", "c1", "Ada")
	names := customers(t)
	folds := 0
	e, err := engine.New(engine.Config[string]{
		Codec: engine.String(), Store: w.backend, Tables: []engine.Table{names},
		// Short, so that the negative control fails fast: it is the real
		// clock's (a partition's wait for its tables is not virtual).
		TableTimeout: 20 * time.Millisecond,
		Fold: func(key []byte, _ string, _ bool, rec engine.Record) (engine.Result[string], error) {
			folds++
			name, ok, err := names.Get(rec.Value)
			if err != nil || !ok {
				return engine.Result[string]{}, errors.Join(errors.New("no customer "+string(rec.Value)), err)
			}
			return engine.Set(name), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	m, err := e.Join(simsource.New(w.c, "shop", sim.ClassicEager, 0, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer func() { _ = m.Close(ctx) }()
	w.put("orders", "o1", "c1")

	for range 3 {
		if err := m.Step(ctx); err != nil {
			t.Fatal(err)
		}
		w.c.Advance(time.Second)
	}
	var te *engine.TableError
	if errs := m.Errors(); folds != 0 || len(errs) == 0 || !errors.As(errs[0], &te) || te.Table != "customers" {
		t.Fatalf("before Open: %d folds, errors %v; want none, and a *engine.TableError naming customers", folds, errs)
	}

	if err := names.Open(ctx, w.backend); err != nil {
		t.Fatal(err)
	}
	for range 30 {
		if err := names.Step(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.Step(ctx); err != nil {
			t.Fatal(err)
		}
		w.c.Advance(time.Second)
		if folds > 0 {
			break
		}
	}
	tp := store.TopicPartition{Topic: "orders", Partition: store.OutputPartition([]byte("o1"), 2)}
	if got, ok, err := m.State(tp, []byte("o1")); err != nil || !ok || got != "Ada" {
		t.Fatalf("o1 = %q, %t, %v after the table opened; want Ada, the table's row", got, ok, err)
	}
}
