package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/prom"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// The metrics count what the engine did; without them nothing is recorded.
func TestMetricsCountFoldsFlushesTransactionsAndRecoveries(t *testing.T) {
	m, reg := newMetrics(t)
	c := sim.New(sim.Config{Seed: 5})
	c.CreateTopic("accounts", sim.TopicConfig{Partitions: 2})
	b, err := c.NewBackend(sim.BackendConfig{Mode: store.Transactional, TransactionalIDPrefix: "bank", CreateTopics: true,
		Observer: m.StoreObserver()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	w := &simWorld{t: t, c: c, store: b, want: ledger{}}
	e, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: b,
		PersistInterval: time.Second, CommitInterval: time.Second, Observer: m,
		StartEmit: func(context.Context, []engine.Output) func() error { return func() error { return nil } }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	w.produce("alice=+1", "bob=+2", "alice=+3")
	r := w.runner(e)
	w.drain(r)
	// Gathered while the runner owns its partitions: a released
	// partition's series go with it.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			switch {
			case mt.GetCounter() != nil:
				got[f.GetName()] += mt.GetCounter().GetValue()
			case mt.GetHistogram() != nil:
				got[f.GetName()] += float64(mt.GetHistogram().GetSampleCount())
			case mt.GetGauge() != nil:
				got[f.GetName()] += 0
			}
		}
	}
	if got["snapfence_records_folded_total"] != 3 {
		t.Fatalf("records folded = %v, want 3 (%v)", got["snapfence_records_folded_total"], got)
	}
	if got["snapfence_transactions_total"] < 1 || got["snapfence_flush_keys"] < 1 || got["snapfence_recovery_seconds"] < 2 {
		t.Fatalf("transactions, flushes or recoveries not counted: %v", got)
	}
	if got["snapfence_emit_wait_seconds"] < 1 {
		t.Fatalf("no wait for outputs observed: %v", got)
	}
	if _, ok := got["snapfence_committable_offset_lag"]; !ok {
		t.Fatalf("no committable offset lag: %v", got)
	}
	if got["snapfence_fences_total"] != 0 {
		t.Fatalf("fences = %v, want 0", got["snapfence_fences_total"])
	}
}

// A partition given back in a rebalance keeps no committable offset lag
// series on the member that gave it back: its revoke-time flush commits
// after the partition left the member, and the new owner reports it.
func TestAGivenBackPartitionLeavesNoCommittableLagSeries(t *testing.T) {
	m, reg := newMetrics(t)
	w := newSimWorld(t)
	a := w.runner(w.engineWith(func(c *engine.Config[int]) { c.Observer = m }))
	w.produce("alice=+1", "bob=+2", "dave=+3")
	w.drain(a)
	w.produce("alice=+4", "bob=+5") // dirty when the rebalance revokes them
	if err := a.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := w.runner(w.engine())
	for range 30 {
		w.drain(a, b)
		if len(a.Flows()) == 1 && len(b.Flows()) == 1 {
			break
		}
	}
	if len(a.Flows()) != 1 || len(b.Flows()) != 1 {
		t.Fatalf("flows %v and %v, want one partition each", a.Flows(), b.Flows())
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "snapfence_committable_offset_lag" {
			continue
		}
		for _, mt := range f.GetMetric() {
			var tp store.TopicPartition
			for _, l := range mt.GetLabel() {
				switch l.GetName() {
				case "topic":
					tp.Topic = l.GetValue()
				case "partition":
					tp.Partition = int32(l.GetValue()[0] - '0')
				}
			}
			if tp != a.Flows()[0] {
				t.Errorf("a committable offset lag series for %s, which the member gave back (it owns %v)", tp, a.Flows())
			}
		}
	}
}

// newMetrics is the engine's metrics on a pedantic registry of their own.
func newMetrics(t *testing.T) (*prom.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := prom.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}
