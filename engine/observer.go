package engine

import (
	"time"

	"github.com/snapfence/snapfence/engine/internal/schedule"
	"github.com/snapfence/snapfence/store"
)

// Observer receives the engine's measurements as events: what it folded,
// flushed, recovered, what fenced or stopped it, and the partitions'
// lags and states as they change. Package engine/prom turns them into
// Prometheus metrics; an Observer of one's own can feed another metrics
// system, or a test.
//
// The methods are called from the engine's goroutines, concurrently (a
// recovery's progress comes from the store's read; runners and engines
// may share an Observer), some with the runner's status lock held: they
// must not block, only record and return. A nil Observer
// (Config.Observer unset) records nothing.
//
// Embed NopObserver to implement only the events wanted; the interface
// may gain events, which such an implementation ignores.
type Observer interface {
	// Folded: n input records of topic were folded into state (n > 0).
	Folded(topic string, n int)
	// Flushed: one flush (or exactly-once batch) wrote keys dirty keys;
	// took is from its start to the runner learning its outcome.
	Flushed(keys int, took time.Duration)
	// WaitedForOutputs: the poll loop waited took for outputs: one
	// Config.Emit call, or one StartEmit wait.
	WaitedForOutputs(took time.Duration)
	// Fenced: a write or commit was refused because this owner was
	// fenced; reason is the coordinator's error name (ILLEGAL_GENERATION,
	// PRODUCER_FENCED, ...), "other" or "fenced" (no reason given).
	Fenced(reason string)
	// Poisoned: a fold or tick failed on a record of tp; action is what
	// the poison policy did (PoisonStopped, PoisonSkipped,
	// PoisonDeadLettered).
	Poisoned(tp store.TopicPartition, action string)
	// UndecodableStates: keys recovered states of tp did not decode;
	// action is "stopped" (the recovery stopped, nothing deleted) or
	// "discarded" (Config.UndecodableState).
	UndecodableStates(tp store.TopicPartition, action string, keys int)
	// Restarted: tp was stopped by a failure of class ("transient" or
	// "expected": a fence in a rebalance) and restarts from the committed
	// state.
	Restarted(tp store.TopicPartition, class string)
	// Recovered: tp's recovery read snapshots snapshots and took took,
	// takeover included; kind is "delta" or "full", and reason is
	// RecoveryCheckpoint for a delta, why it was not one for a full one.
	Recovered(tp store.TopicPartition, snapshots int, took time.Duration, kind, reason string)
	// CommittableLag: after a commit, tp's consumed offset minus its
	// committable offset (records folded, not yet durable).
	CommittableLag(tp store.TopicPartition, lag int64)
	// ConsumerLag: tp's log end offset minus its committed offset
	// (PartitionStatus.Lag), read after a poll.
	ConsumerLag(tp store.TopicPartition, lag int64)
	// RecoveryLeft: the snapshot-partition offsets tp's recovery has
	// still to read; 0 once recovered.
	RecoveryLeft(tp store.TopicPartition, left int64)
	// PartitionMoved: an assigned partition went from state from ("": it
	// was not assigned) to state to ("": it no longer is).
	PartitionMoved(from, to PartitionState)
	// PartitionReleased: this member no longer owns tp; what was
	// reported for it (its lags, recovery, failing) is its new owner's to
	// report now.
	PartitionReleased(tp store.TopicPartition)
	// PartitionFailing: whether tp keeps failing changed
	// (PartitionStatus.Failing).
	PartitionFailing(tp store.TopicPartition, failing bool)
	// Standbys: the standby replicas' status, all of them (a replica
	// absent is gone). The slice is the engine's: read it during the call,
	// do not keep or change it.
	Standbys(st []StandbyStatus)
	// GroupReported: a group report read every input partition's group
	// view, of which unserved are assigned to no member (nil and 0: no
	// report, the runner closed). The slice is the engine's, as Standbys'
	// is.
	GroupReported(parts []GroupPartition, unserved int)
	// GroupReportFailed: a group report could not be read; the last one
	// stands.
	GroupReportFailed()
}

// NopObserver is an Observer that records nothing. Embed it in an
// Observer to implement only some events: one interface with a no-op
// base keeps the engine's calls to a single interface call each (no type
// assertion per event kind, as small optional interfaces would need), and
// an implementation that embeds it keeps compiling when an event is added.
type NopObserver struct{}

var _ Observer = NopObserver{}

func (NopObserver) Folded(string, int)                                                 {}
func (NopObserver) Flushed(int, time.Duration)                                         {}
func (NopObserver) WaitedForOutputs(time.Duration)                                     {}
func (NopObserver) Fenced(string)                                                      {}
func (NopObserver) Poisoned(store.TopicPartition, string)                              {}
func (NopObserver) UndecodableStates(store.TopicPartition, string, int)                {}
func (NopObserver) Restarted(store.TopicPartition, string)                             {}
func (NopObserver) Recovered(store.TopicPartition, int, time.Duration, string, string) {}
func (NopObserver) CommittableLag(store.TopicPartition, int64)                         {}
func (NopObserver) ConsumerLag(store.TopicPartition, int64)                            {}
func (NopObserver) RecoveryLeft(store.TopicPartition, int64)                           {}
func (NopObserver) PartitionMoved(PartitionState, PartitionState)                      {}
func (NopObserver) PartitionReleased(store.TopicPartition)                             {}
func (NopObserver) PartitionFailing(store.TopicPartition, bool)                        {}
func (NopObserver) Standbys([]StandbyStatus)                                           {}
func (NopObserver) GroupReported([]GroupPartition, int)                                {}
func (NopObserver) GroupReportFailed()                                                 {}

// The poison-record actions (Observer.Poisoned's action, and the action
// label of snapfence_poison_records_total).
const (
	PoisonStopped      = "stopped"
	PoisonSkipped      = "skipped"
	PoisonDeadLettered = "dead_lettered"
)

// observer is Config.Observer made nil-safe, so that each call site in
// the engine is one line and an unset Observer costs a nil comparison,
// not an interface call.
type observer struct{ o Observer }

// obs is cfg's Observer, nil-safe.
func (cfg *Config[S]) obs() observer { return observer{cfg.Observer} }

func (o observer) folded(topic string, n int) {
	if o.o != nil && n > 0 {
		o.o.Folded(topic, n)
	}
}

func (o observer) flushed(keys int, took time.Duration) {
	if o.o != nil {
		o.o.Flushed(keys, took)
	}
}

func (o observer) waitedForOutputs(took time.Duration) {
	if o.o != nil {
		o.o.WaitedForOutputs(took)
	}
}

// fenced reports a fence; reason is fenceReason's.
func (o observer) fenced(reason string) {
	if o.o != nil {
		o.o.Fenced(reason)
	}
}

func (o observer) poisoned(tp store.TopicPartition, action string) {
	if o.o != nil {
		o.o.Poisoned(tp, action)
	}
}

func (o observer) undecodableStates(tp store.TopicPartition, action string, keys int) {
	if o.o != nil {
		o.o.UndecodableStates(tp, action, keys)
	}
}

func (o observer) restarted(tp store.TopicPartition, k schedule.Class) {
	if o.o != nil {
		o.o.Restarted(tp, k.String())
	}
}

func (o observer) recovered(tp store.TopicPartition, snapshots int, took time.Duration, kind, reason string) {
	if o.o != nil {
		o.o.Recovered(tp, snapshots, took, kind, reason)
	}
}

func (o observer) committableLag(tp store.TopicPartition, lag int64) {
	if o.o != nil {
		o.o.CommittableLag(tp, lag)
	}
}

func (o observer) consumerLag(tp store.TopicPartition, lag int64) {
	if o.o != nil {
		o.o.ConsumerLag(tp, lag)
	}
}

func (o observer) recoveryLeft(tp store.TopicPartition, left int64) {
	if o.o != nil {
		o.o.RecoveryLeft(tp, left)
	}
}

func (o observer) partitionMoved(from, to PartitionState) {
	if o.o != nil {
		o.o.PartitionMoved(from, to)
	}
}

func (o observer) partitionReleased(tp store.TopicPartition) {
	if o.o != nil {
		o.o.PartitionReleased(tp)
	}
}

func (o observer) partitionFailing(tp store.TopicPartition, failing bool) {
	if o.o != nil {
		o.o.PartitionFailing(tp, failing)
	}
}

func (o observer) standbys(st []StandbyStatus) {
	if o.o != nil {
		o.o.Standbys(st)
	}
}

func (o observer) groupReported(parts []GroupPartition, unserved int) {
	if o.o != nil {
		o.o.GroupReported(parts, unserved)
	}
}

func (o observer) groupReportFailed() {
	if o.o != nil {
		o.o.GroupReportFailed()
	}
}
