package engine

import (
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine/internal/schedule"
	"github.com/snapfence/snapfence/store"
)

// An unset Observer records nothing and costs no allocation: every event
// is a nil comparison.
func TestNilObserverRecordsNothing(t *testing.T) {
	var cfg Config[int]
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	allocs := testing.AllocsPerRun(100, func() {
		o := cfg.obs()
		o.folded("accounts", 1)
		o.flushed(1, time.Millisecond)
		o.waitedForOutputs(time.Millisecond)
		o.fenced("fenced")
		o.poisoned(tp, PoisonSkipped)
		o.undecodableStates(tp, "stopped", 1)
		o.restarted(tp, schedule.ClassTransient)
		o.recovered(tp, 1, time.Millisecond, "full", RecoveryNoCheckpoint)
		o.committableLag(tp, 1)
		o.consumerLag(tp, 1)
		o.recoveryLeft(tp, 1)
		o.partitionMoved("", StateStarting)
		o.partitionReleased(tp)
		o.partitionFailing(tp, true)
		o.standbys(nil)
		o.groupReported(nil, 0)
		o.groupReportFailed()
	})
	if allocs != 0 {
		t.Fatalf("a nil Observer allocated %v times per run of every event, want 0", allocs)
	}
}
