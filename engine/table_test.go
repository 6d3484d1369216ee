package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
)

// gateTable is a Table that catches up when the test says so.
type gateTable struct {
	entered chan struct{} // closed when a wait began
	open    chan struct{} // closed: caught up
	err     error         // returned instead of waiting, if set
	waits   atomic.Int32
}

func newGateTable() *gateTable {
	return &gateTable{entered: make(chan struct{}), open: make(chan struct{})}
}

func (g *gateTable) Name() string { return "sellers" }

func (g *gateTable) WaitCaughtUp(ctx context.Context) error {
	if g.waits.Add(1) == 1 {
		close(g.entered)
	}
	if g.err != nil {
		return g.err
	}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A partition folds nothing until the tables the fold looks up have
// caught up: meanwhile it shows recovering and answers no query.
func TestPartitionWaitsForItsTablesOnSim(t *testing.T) {
	w := newSimWorld(t)
	table := newGateTable()
	var folds atomic.Int32
	e, err := engine.New(engine.Config[int]{
		Fold: func(key []byte, s int, exists bool, rec engine.Record) (engine.Result[int], error) {
			folds.Add(1)
			return balance(key, s, exists, rec)
		},
		Codec: intCodec{}, Store: w.store, Tables: []engine.Table{table},
		PersistInterval: time.Second, CommitInterval: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	w.produce("alice=+10", "dave=+1")
	r := w.runner(e)
	stepped := make(chan error, 1)
	go func() { stepped <- r.Step(context.Background()) }()
	select {
	case <-table.entered:
	case err := <-stepped:
		t.Fatalf("the step ended (%v) without waiting for the table; %d folds", err, folds.Load())
	}
	st := e.Status()
	if len(st.Partitions) == 0 || st.Partitions[0].State != engine.StateRecovering {
		t.Fatalf("while its table loads: %+v, want a partition recovering", st.Partitions)
	}
	_, _, err = e.Get(context.Background(), accounts0, []byte("dave"), engine.ReadCommitted)
	if ne := notOwned(t, err, accounts0); ne.State != engine.StateRecovering {
		t.Fatalf("query while the table loads: %v", err)
	}
	if n := folds.Load(); n != 0 {
		t.Fatalf("%d folds before the table caught up", n)
	}
	close(table.open)
	if err := <-stepped; err != nil {
		t.Fatal(err)
	}
	w.drain(r)
	w.check(r)
}

// A table that fails, or does not catch up in time, fails the partition
// with a *TableError naming the table, in the status, and nothing is
// folded; once it catches up the partition restarts and folds.
func TestTableFailureStopsItsPartitionsOnSim(t *testing.T) {
	for name, table := range map[string]*gateTable{
		"fails":    {entered: make(chan struct{}), open: make(chan struct{}), err: errors.New("topic sellers: no such topic")},
		"too late": newGateTable(),
	} {
		t.Run(name, func(t *testing.T) {
			w := newSimWorld(t)
			e, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: w.store,
				Tables: []engine.Table{table}, TableTimeout: 20 * time.Millisecond,
				PersistInterval: time.Second, CommitInterval: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
			w.produce("alice=+10", "dave=+1")
			r := w.runner(e)
			if err := r.Step(context.Background()); err != nil {
				t.Fatal(err)
			}
			st := e.Status()
			for _, p := range st.Partitions {
				te, ok := errors.AsType[*engine.TableError](p.Err)
				if p.State != engine.StateWaiting || !ok || te.Table != "sellers" || te.Input != p.Input {
					t.Fatalf("%s: %s (%v), want waiting with a *TableError of sellers", p.Input, p.State, p.Err)
				}
				if name == "too late" && !strings.Contains(p.Err.Error(), "Config.TableTimeout") {
					t.Fatalf("the timeout is not named: %v", p.Err)
				}
			}
			table.err = nil
			close(table.open)
			w.drain(r)
			w.check(r)
		})
	}
}

// A nil table is refused by New, naming it.
func TestNilTableIsRefused(t *testing.T) {
	w := newSimWorld(t)
	_, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: w.store, Tables: []engine.Table{newGateTable(), nil}})
	ce, ok := errors.AsType[*store.ConfigError](err)
	if !ok || ce.Subject != "engine.Config.Tables[1]" {
		t.Fatalf("err = %v", err)
	}
}
