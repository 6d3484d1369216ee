// Package prom exports the engine's metrics to Prometheus.
//
// Its Metrics type is an engine.Observer (engine.Config.Observer) that
// keeps Prometheus series, apart from package engine so that the
// engine's measurements are not tied to Prometheus: an Observer of one's
// own takes them elsewhere. Wired up:
//
//	reg := prometheus.NewRegistry()
//	m, err := prom.NewMetrics(reg)
//	...
//	e, err := engine.New(engine.Config[S]{..., Observer: m})
//	go http.ListenAndServe(":8080", e.HealthHandler(prom.Handler(reg)))
//
// Pass m.StoreObserver() as the store backend's Observer for the
// transaction metrics.
package prom

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
)

// Metrics are the engine's Prometheus metrics (docs/reference.md lists
// them, docs/operations.md what to alert on), an engine.Observer. A nil *Metrics records
// nothing, also as a non-nil Observer holding it. Several runners may
// share one: the per-partition series are each partition's owner's, and
// snapfence_partitions counts every runner's partitions.
type Metrics struct {
	folded              *prometheus.CounterVec
	flushSize           prometheus.Histogram
	flushDuration       prometheus.Histogram
	emitWait            prometheus.Histogram
	transactions        *prometheus.CounterVec
	transactionDuration *prometheus.HistogramVec
	fences              *prometheus.CounterVec
	recoveryDuration    prometheus.Histogram
	recoveryLeft        *prometheus.GaugeVec
	snapshotsRead       prometheus.Counter
	offsetLag           *prometheus.GaugeVec
	consumerLag         *prometheus.GaugeVec
	partitions          *prometheus.GaugeVec
	poison              *prometheus.CounterVec
	undecodable         *prometheus.CounterVec
	restarts            *prometheus.CounterVec
	recoveries          *prometheus.CounterVec
	standbyLag          *prometheus.GaugeVec
	groupLag            *prometheus.GaugeVec
	unserved            prometheus.Gauge
	groupReportFailures prometheus.Counter
	failing             *prometheus.GaugeVec
}

var _ engine.Observer = (*Metrics)(nil)

// NewMetrics registers the engine's metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{}
	m.setFoldCollectors()
	m.setRecoveryCollectors()
	m.setPartitionCollectors()
	m.setGroupCollectors()
	for _, s := range engine.PartitionStates() {
		m.partitions.WithLabelValues(string(s)) // every state has a series, 0 included
	}
	for _, c := range []prometheus.Collector{m.folded, m.flushSize, m.flushDuration, m.emitWait, m.transactions, m.transactionDuration,
		m.fences, m.recoveryDuration, m.recoveryLeft, m.snapshotsRead, m.offsetLag, m.consumerLag, m.partitions, m.poison, m.undecodable, m.restarts, m.recoveries, m.standbyLag,
		m.groupLag, m.unserved, m.groupReportFailures, m.failing} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// setFoldCollectors makes the series of the folds, flushes, outputs, transactions and fences.
func (m *Metrics) setFoldCollectors() {
	m.folded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "snapfence_records_folded_total", Help: "Input records folded into state.",
	}, []string{"topic"})
	m.flushSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "snapfence_flush_keys", Help: "Dirty keys written by one flush.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 10),
	})
	m.flushDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "snapfence_flush_seconds", Help: "Time one flush took, writes and commit.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	})
	m.emitWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "snapfence_emit_wait_seconds",
		Help:    "Time the poll loop waited for outputs at least once: one Emit call, or one StartEmit wait.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
	})
	m.transactions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "snapfence_transactions_total", Help: "Snapshot-store transactions by outcome (committed, aborted).",
	}, []string{"outcome"})
	m.transactionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "snapfence_transaction_seconds", Help: "Time one snapshot-store transaction took, by outcome (committed, aborted).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"outcome"})
	m.fences = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "snapfence_fences_total",
		Help: "Writes or commits rejected because this owner was fenced, by the coordinator's error (reason).",
	}, []string{"reason"})
}

// setRecoveryCollectors makes the series of recoveries and standby replicas.
func (m *Metrics) setRecoveryCollectors() {
	m.recoveryDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "snapfence_recovery_seconds", Help: "Time a partition's recovery took, takeover and snapshot read.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
	})
	m.recoveryLeft = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "snapfence_recovery_records_left",
		Help: "Snapshot-partition offsets a partition's recovery has still to read (0 once recovered), per input partition.",
	}, []string{"topic", "partition"})
	m.snapshotsRead = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "snapfence_snapshots_recovered_total", Help: "Snapshots read by recoveries.",
	})
	m.recoveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "snapfence_recoveries_total",
		Help: "Partition recoveries by kind (delta: from the cache's checkpoint; full) and reason (checkpoint for a delta; for a full one, why it was not a delta).",
	}, []string{"kind", "reason"})
	m.standbyLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "snapfence_standby_lag",
		Help: "Snapshot records a standby replica has not read yet: its snapshot partition's high watermark minus its position (-1: not following, after a failure).",
	}, []string{"topic", "partition"})
}

// setPartitionCollectors makes the per-partition series: lags, states, poison, restarts, failing.
func (m *Metrics) setPartitionCollectors() {
	m.offsetLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "snapfence_committable_offset_lag", Help: "Consumed offset minus committable offset, per partition.",
	}, []string{"topic", "partition"})
	m.consumerLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "snapfence_consumer_lag",
		Help: "Input records not covered by a commit: log end offset minus committed offset, per assigned partition.",
	}, []string{"topic", "partition"})
	m.partitions = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "snapfence_partitions",
		Help: "Assigned partitions by state (starting, recovering, running, waiting, stopped).",
	}, []string{"state"})
	m.poison = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "snapfence_poison_records_total",
		Help: "Records a fold or a tick failed on, by what was done (stopped, skipped, dead_lettered).",
	}, []string{"topic", "action"})
	m.undecodable = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "snapfence_undecodable_states_total",
		Help: "Keys whose recovered state the Codec could not decode, by what was done (stopped: the recovery stopped, nothing deleted; discarded).",
	}, []string{"topic", "action"})
	m.restarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "snapfence_partition_restarts_total",
		Help: "Partitions stopped by a failure and restarted from the committed state, by the failure's class (transient, expected).",
	}, []string{"class"})
	m.failing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "snapfence_partition_failing",
		Help: "1 while an assigned partition keeps failing: engine.FailingRestarts transient restarts, each within engine.FailingWindow of the one before, and no commit since.",
	}, []string{"topic", "partition"})
}

// setGroupCollectors makes the series of the group reports.
func (m *Metrics) setGroupCollectors() {
	m.groupLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "snapfence_group_lag",
		Help: "Every input partition's lag as the group's committed offset gives it (log end minus committed offset), whoever serves it, from the last group report; the same from every instance.",
	}, []string{"topic", "partition"})
	m.unserved = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "snapfence_unserved_partitions",
		Help: "Input partitions no member of the group is assigned, from the last group report; the same from every instance.",
	})
	m.groupReportFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "snapfence_group_report_failures_total",
		Help: "Group reports (committed offsets, log ends, the group's assignment) that could not be read.",
	})
}

// StoreObserver counts the store's transactions by outcome and measures
// their duration; pass it as the backend's Observer (with others through
// a fan-out).
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
		m.transactionDuration.WithLabelValues(outcome).Observe(e.Duration.Seconds())
	})
}

// Folded counts records folded (snapfence_records_folded_total).
func (m *Metrics) Folded(topic string, n int) {
	if m != nil && n > 0 {
		m.folded.WithLabelValues(topic).Add(float64(n))
	}
}

// Flushed observes a flush's keys and duration (snapfence_flush_keys,
// snapfence_flush_seconds).
func (m *Metrics) Flushed(keys int, d time.Duration) {
	if m != nil {
		m.flushSize.Observe(float64(keys))
		m.flushDuration.Observe(d.Seconds())
	}
}

// WaitedForOutputs observes a wait of the poll loop for outputs
// (snapfence_emit_wait_seconds).
func (m *Metrics) WaitedForOutputs(d time.Duration) {
	if m != nil {
		m.emitWait.Observe(d.Seconds())
	}
}

// Fenced counts a fence by its reason (snapfence_fences_total).
func (m *Metrics) Fenced(reason string) {
	if m != nil {
		m.fences.WithLabelValues(reason).Inc()
	}
}

// Poisoned counts a record a fold or tick failed on, and what was done
// with it (snapfence_poison_records_total).
func (m *Metrics) Poisoned(tp store.TopicPartition, action string) {
	if m != nil {
		m.poison.WithLabelValues(tp.Topic, action).Inc()
	}
}

// UndecodableStates counts keys of tp whose recovered state did not
// decode, and what was done with them (snapfence_undecodable_states_total).
func (m *Metrics) UndecodableStates(tp store.TopicPartition, action string, keys int) {
	if m != nil {
		m.undecodable.WithLabelValues(tp.Topic, action).Add(float64(keys))
	}
}

// Restarted counts a partition stopped by a failure of class that it
// restarts after (snapfence_partition_restarts_total).
func (m *Metrics) Restarted(_ store.TopicPartition, class string) {
	if m != nil {
		m.restarts.WithLabelValues(class).Inc()
	}
}

// Recovered counts a recovery of kind (delta, full) that read snapshots
// in d; reason is why a full one was not a delta (engine.RecoveryCheckpoint
// for a delta).
func (m *Metrics) Recovered(_ store.TopicPartition, snapshots int, d time.Duration, kind, reason string) {
	if m != nil {
		m.snapshotsRead.Add(float64(snapshots))
		m.recoveryDuration.Observe(d.Seconds())
		m.recoveries.WithLabelValues(kind, reason).Inc()
	}
}

// CommittableLag sets tp's snapfence_committable_offset_lag.
func (m *Metrics) CommittableLag(tp store.TopicPartition, lag int64) {
	if m != nil {
		m.offsetLag.WithLabelValues(tp.Topic, partitionLabel(tp)).Set(float64(lag))
	}
}

// ConsumerLag sets tp's snapfence_consumer_lag.
func (m *Metrics) ConsumerLag(tp store.TopicPartition, lag int64) {
	if m != nil {
		m.consumerLag.WithLabelValues(tp.Topic, partitionLabel(tp)).Set(float64(lag))
	}
}

// RecoveryLeft sets tp's snapfence_recovery_records_left.
func (m *Metrics) RecoveryLeft(tp store.TopicPartition, left int64) {
	if m != nil {
		m.recoveryLeft.WithLabelValues(tp.Topic, partitionLabel(tp)).Set(float64(left))
	}
}

// PartitionMoved counts a partition leaving state from ("": it was not
// assigned) for state to ("": it is no longer) in snapfence_partitions.
func (m *Metrics) PartitionMoved(from, to engine.PartitionState) {
	if m == nil {
		return
	}
	if from != "" {
		m.partitions.WithLabelValues(string(from)).Dec()
	}
	if to != "" {
		m.partitions.WithLabelValues(string(to)).Inc()
	}
}

// PartitionReleased drops a released partition's series: a partition
// this member no longer owns has no lag here (its new owner reports it).
func (m *Metrics) PartitionReleased(tp store.TopicPartition) {
	if m != nil {
		p := partitionLabel(tp)
		m.offsetLag.DeleteLabelValues(tp.Topic, p)
		m.consumerLag.DeleteLabelValues(tp.Topic, p)
		m.recoveryLeft.DeleteLabelValues(tp.Topic, p)
		m.failing.DeleteLabelValues(tp.Topic, p)
	}
}

// PartitionFailing sets whether tp keeps failing
// (snapfence_partition_failing).
func (m *Metrics) PartitionFailing(tp store.TopicPartition, failing bool) {
	if m != nil {
		v := 0.0
		if failing {
			v = 1
		}
		m.failing.WithLabelValues(tp.Topic, partitionLabel(tp)).Set(v)
	}
}

func partitionLabel(tp store.TopicPartition) string { return strconv.Itoa(int(tp.Partition)) }

// Standbys sets the standby replicas' lag, one series per replica
// (snapfence_standby_lag).
func (m *Metrics) Standbys(st []engine.StandbyStatus) {
	if m != nil {
		m.standbyLag.Reset()
		for _, s := range st {
			m.standbyLag.WithLabelValues(s.Input.Topic, partitionLabel(s.Input)).Set(float64(s.Lag))
		}
	}
}

// GroupReported sets the group report's series: every partition's group
// lag, and the count of unserved partitions (none and 0: no report).
func (m *Metrics) GroupReported(parts []engine.GroupPartition, unserved int) {
	if m != nil {
		m.groupLag.Reset()
		for _, p := range parts {
			m.groupLag.WithLabelValues(p.Input.Topic, partitionLabel(p.Input)).Set(float64(p.Lag()))
		}
		m.unserved.Set(float64(unserved))
	}
}

// GroupReportFailed counts a group report that could not be read.
func (m *Metrics) GroupReportFailed() {
	if m != nil {
		m.groupReportFailures.Inc()
	}
}

// Handler serves what g gathers in the Prometheus exposition format
// (promhttp.HandlerFor), for engine.HealthHandler's /metrics. A nil g
// gives a nil handler, which HealthHandler serves no /metrics for (404):
// so that nothing global is served unless asked for.
func Handler(g prometheus.Gatherer) http.Handler {
	if g == nil {
		return nil
	}
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}
