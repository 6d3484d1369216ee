package prom

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
)

// Fenced and Poisoned count by their labels; a nil *Metrics takes both.
func TestFencesAndPoisonCounters(t *testing.T) {
	m, err := NewMetrics(prometheus.NewPedanticRegistry())
	if err != nil {
		t.Fatal(err)
	}
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	m.Fenced("ILLEGAL_GENERATION")
	m.Fenced("ILLEGAL_GENERATION")
	m.Fenced("PRODUCER_FENCED")
	m.Poisoned(tp, engine.PoisonSkipped)
	m.Poisoned(tp, engine.PoisonDeadLettered)
	m.Poisoned(tp, engine.PoisonDeadLettered)
	for _, c := range []struct {
		name string
		c    prometheus.Counter
		want float64
	}{
		{"fences ILLEGAL_GENERATION", m.fences.WithLabelValues("ILLEGAL_GENERATION"), 2},
		{"fences PRODUCER_FENCED", m.fences.WithLabelValues("PRODUCER_FENCED"), 1},
		{"poison skipped", m.poison.WithLabelValues("accounts", engine.PoisonSkipped), 1},
		{"poison dead_lettered", m.poison.WithLabelValues("accounts", engine.PoisonDeadLettered), 2},
		{"poison stopped", m.poison.WithLabelValues("accounts", engine.PoisonStopped), 0},
	} {
		var pb dto.Metric
		if err := c.c.Write(&pb); err != nil {
			t.Fatal(err)
		}
		if got := pb.GetCounter().GetValue(); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	var none *Metrics
	none.Fenced("x")
	none.Poisoned(tp, engine.PoisonStopped)
}
