package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/snapfence/snapfence/store"
)

// A fence's reason label is the coordinator's error name, found through
// any wrapping of the *store.FencedError; anything else has a bounded
// label too.
func TestFenceReason(t *testing.T) {
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	for _, c := range []struct {
		err  error
		want string
	}{
		{&store.FencedError{Input: tp, Reason: kerr.IllegalGeneration}, "ILLEGAL_GENERATION"},
		{fmt.Errorf("engine: batch: %w", &store.FencedError{Input: tp, Reason: kerr.ProducerFenced}), "PRODUCER_FENCED"},
		{&store.FencedError{Input: tp, Reason: errors.New("gone")}, "other"},
		{store.ErrFenced, "fenced"},
	} {
		if got := fenceReason(c.err); got != c.want {
			t.Errorf("fenceReason(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// fenced and poisoned count by their labels; a nil *Metrics takes both.
func TestFencesAndPoisonCounters(t *testing.T) {
	m, err := NewMetrics(prometheus.NewPedanticRegistry())
	if err != nil {
		t.Fatal(err)
	}
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	m.fenced("ILLEGAL_GENERATION")
	m.fenced("ILLEGAL_GENERATION")
	m.fenced("PRODUCER_FENCED")
	m.poisoned(tp, PoisonSkipped)
	m.poisoned(tp, PoisonDeadLettered)
	m.poisoned(tp, PoisonDeadLettered)
	for _, c := range []struct {
		name string
		c    prometheus.Counter
		want float64
	}{
		{"fences ILLEGAL_GENERATION", m.fences.WithLabelValues("ILLEGAL_GENERATION"), 2},
		{"fences PRODUCER_FENCED", m.fences.WithLabelValues("PRODUCER_FENCED"), 1},
		{"poison skipped", m.poison.WithLabelValues("accounts", PoisonSkipped), 1},
		{"poison dead_lettered", m.poison.WithLabelValues("accounts", PoisonDeadLettered), 2},
		{"poison stopped", m.poison.WithLabelValues("accounts", PoisonStopped), 0},
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
	none.fenced("x")
	none.poisoned(tp, PoisonStopped)
}
