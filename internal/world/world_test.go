package world

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

func run(t *testing.T, cfg Config, steps []Step) (violations []Violation, w *World) {
	t.Helper()
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	for _, s := range steps {
		violations = append(violations, w.Apply(s)...)
	}
	violations = append(violations, w.Quiesce()...)
	return violations, w
}

func TestIssue732InTheWorld(t *testing.T) {
	t.Run("transactional", func(t *testing.T) {
		vs, _ := run(t, Config{Mode: store.Transactional}, Scenario732)
		for _, v := range vs {
			t.Errorf("%s", v)
		}
	})
	t.Run("plain", func(t *testing.T) {
		vs, _ := run(t, Config{Mode: store.Plain}, Scenario732)
		found := map[int]bool{}
		var anomalies []string
		for _, v := range vs {
			t.Logf("%s", v)
			found[v.Invariant] = true
			if kind, ok := strings.CutPrefix(v.Detail, "history: "); ok {
				anomalies = append(anomalies, strings.SplitN(kind, ":", 2)[0])
			}
		}
		if !found[1] || !found[3] {
			t.Fatalf("plain mode: want the stale overwrite (1) and a wrong final state (3), got %v", vs)
		}
		// The history checker, which knows nothing of the engine, sees it
		// too: the stale write, the newer one lost, the events lost.
		if want := []string{"regression", "lost-write", "lost-fold"}; !slices.Equal(anomalies, want) {
			t.Fatalf("plain mode: the history checker found %v, want %v", anomalies, want)
		}
	})
}

func TestSameStepsSameHistory(t *testing.T) {
	_, a := run(t, Config{Seed: 7, Mode: store.Transactional}, Scenario732)
	_, b := run(t, Config{Seed: 7, Mode: store.Transactional}, Scenario732)
	if !bytes.Equal(a.History(), b.History()) {
		t.Fatal("the same seed and steps gave two histories")
	}
}

// Found by props: m0's recovery waits behind a hanging foreign
// transaction; m0 is evicted and m1 takes over (its recovery waits too);
// m0's recovery then fails at its stall deadline. m0 must not restart the
// flow before a poll tells it it lost the partition: the restart's
// takeover would fence its new owner m1.
func TestAZombieDoesNotRestartAFlowItLost(t *testing.T) {
	vs, _ := run(t, Config{Mode: store.Transactional}, []Step{
		{Kind: Join, Member: 0},
		{Kind: ForeignOpen, Partition: 0, Hang: true},
		{Kind: Poll, Member: 0},
		{Kind: Advance, D: 18 * time.Second},
		{Kind: Join, Member: 1},
		{Kind: Evict, Member: 0},
		{Kind: Poll, Member: 1},
		{Kind: Advance, D: 31 * time.Second},
	})
	for _, v := range vs {
		t.Errorf("%s", v)
	}
}

// Found by props (classic eager, 12 steps): m2's flow of p0 fails in a
// poll's recovery, and m2 is evicted. The next poll loses p0, rejoins and
// is assigned it again; its recovery fails again and the poll goes on
// (recovering p1, slowly) past a second eviction, while m0 joins and takes
// both over. The restart due before that poll must not run after it: the
// poll lost and reassigned p0, so that restart is void, and m2's identity
// is two generations old by then. It took p0's producer from m0.
func TestARestartDueBeforeAPollIsVoidIfThePollReassignedThePartition(t *testing.T) {
	vs, _ := run(t, Config{Mode: store.Transactional, Protocol: sim.ClassicEager}, []Step{
		{Kind: Produce, Key: "a"},
		{Kind: Produce, Key: "b"},
		{Kind: SlowFetches, D: 6 * time.Second},
		{Kind: Join, Member: 2},
		{Kind: ForeignOpen, Partition: 0, Hang: true},
		{Kind: Poll, Member: 2},
		{Kind: Advance, D: 61 * time.Second},
		{Kind: Evict, Member: 2},
		{Kind: Poll, Member: 2},
		{Kind: Advance, D: 61 * time.Second},
		{Kind: Evict, Member: 2},
		{Kind: Join, Member: 0},
	})
	for _, v := range vs {
		t.Errorf("%s", v)
	}
}

// Found by props (consumer protocol, exactly-once, 19 steps): m2, evicted,
// is still recovering p1 (slow fetches) while its new owner m1 commits
// a newer snapshot of a past the read's target, and compaction drops the
// one the read wanted for it. The zombie's recovery returns an older a;
// its writes are fenced, so nothing comes of it, and neither invariant 5
// nor the history's lost-write may call it a loss.
func TestAZombiesRecoveryMayMissASnapshotCompactedForANewerOne(t *testing.T) {
	steps := []Step{
		{Kind: Produce, Key: "a"}, {Kind: Produce, Key: "a"}, {Kind: Produce, Key: "a"},
		{Kind: Produce, Key: "c"}, {Kind: Produce, Key: "e"}, {Kind: Produce, Key: "a"},
		{Kind: SlowFetches, D: 2 * time.Second},
		{Kind: Join, Member: 1},
		{Kind: Join, Member: 2},
		{Kind: ForeignOpen, Partition: 0},
		{Kind: Poll, Member: 2},
		{Kind: Evict, Member: 2},
		{Kind: Truncate, Partition: 0},
		{Kind: Poll, Member: 1},
		{Kind: Produce, Key: "a"},
		{Kind: Advance, D: 11 * time.Second},
		{Kind: ForeignEnd},
		{Kind: Poll, Member: 1},
		{Kind: Compact, Partition: 1},
	}
	vs, _ := run(t, Config{Mode: store.Transactional, Protocol: sim.Consumer, ExactlyOnce: true}, steps)
	for _, v := range vs {
		t.Errorf("%s", v)
	}
}
