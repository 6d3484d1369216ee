package engine

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snapfence/snapfence/store"
)

// Metrics are the engine's Prometheus metrics. A nil *Metrics records
// nothing and costs nothing.
type Metrics struct {
	folded           *prometheus.CounterVec
	flushSize        prometheus.Histogram
	flushDuration    prometheus.Histogram
	transactions     *prometheus.CounterVec
	fences           *prometheus.CounterVec
	poison           *prometheus.CounterVec
	recoveryDuration prometheus.Histogram
	snapshotsRead    prometheus.Counter
	offsetLag        *prometheus.GaugeVec
}

// NewMetrics registers the engine's metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		folded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snapfence_records_folded_total", Help: "Input records folded into state.",
		}, []string{"topic"}),
		flushSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "snapfence_flush_keys", Help: "Dirty keys written by one flush.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		flushDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "snapfence_flush_seconds", Help: "Time one flush took, writes and commit.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		transactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snapfence_transactions_total", Help: "Snapshot-store transactions by outcome.",
		}, []string{"outcome"}),
		fences: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snapfence_fences_total", Help: "Writes or commits rejected because this owner was fenced, by the coordinator's reason.",
		}, []string{"reason"}),
		poison: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snapfence_poison_records_total", Help: "Records (or ticks) a fold failed on, by what the poison policy did: stopped, skipped, dead_lettered.",
		}, []string{"topic", "action"}),
		recoveryDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "snapfence_recovery_seconds", Help: "Time a partition's recovery took.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}),
		snapshotsRead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "snapfence_snapshots_recovered_total", Help: "Snapshots read by recoveries.",
		}),
		offsetLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "snapfence_committable_offset_lag", Help: "Consumed offset minus committable offset, per partition.",
		}, []string{"topic", "partition"}),
	}
	for _, c := range []prometheus.Collector{m.folded, m.flushSize, m.flushDuration, m.transactions, m.fences, m.poison,
		m.recoveryDuration, m.snapshotsRead, m.offsetLag} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// StoreObserver counts the store's transactions by outcome; pass it as the
// backend's Observer.
func (m *Metrics) StoreObserver() store.Observer {
	return store.ObserverFunc(func(e store.TransactionEvent) {
		if m == nil {
			return
		}
		outcome := "committed"
		if e.Err != nil {
			outcome = "aborted"
		}
		m.transactions.WithLabelValues(outcome).Inc()
	})
}

func (m *Metrics) addFolded(topic string, n int) {
	if m != nil && n > 0 {
		m.folded.WithLabelValues(topic).Add(float64(n))
	}
}

func (m *Metrics) flushed(keys int, d time.Duration) {
	if m != nil {
		m.flushSize.Observe(float64(keys))
		m.flushDuration.Observe(d.Seconds())
	}
}

func (m *Metrics) fenced(reason string) {
	if m != nil {
		m.fences.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) poisoned(tp store.TopicPartition, action string) {
	if m != nil {
		m.poison.WithLabelValues(tp.Topic, action).Inc()
	}
}

func (m *Metrics) recovered(snapshots int, d time.Duration) {
	if m != nil {
		m.snapshotsRead.Add(float64(snapshots))
		m.recoveryDuration.Observe(d.Seconds())
	}
}

func (m *Metrics) lag(tp store.TopicPartition, lag int64) {
	if m != nil {
		m.offsetLag.WithLabelValues(tp.Topic, strconv.Itoa(int(tp.Partition))).Set(float64(lag))
	}
}
