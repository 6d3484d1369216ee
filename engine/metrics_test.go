package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// The metrics count what the engine did; without them nothing is recorded.
func TestMetricsCountFoldsFlushesTransactionsAndRecoveries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := engine.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
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
		PersistInterval: time.Second, CommitInterval: time.Second, Metrics: m,
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
