package world

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// viewScenarios are the named scenarios a view watches: stale owners, a
// crashed owner's open transaction, a foreign one across a recovery. (The
// scenarios that compact or cut the snapshot log are left out: the
// watch's check needs the whole committed log.)
var viewScenarios = []string{
	"stale-flush-on-revoke", "stale-periodic-flush", "two-overlapping-stale-owners",
	"double-handover-crashed-owners", "takeover-abort-after-hard-crash",
	"foreign-open-transaction-across-recovery", "revoke-flush-classic-cooperative",
}

// watchScenario runs s in mode on the simulated cluster with a view of
// the snapshot topic open from the first step, stepped after every step
// (Transactional reader: it reads read_committed), and returns what its
// watch finds wrong once the view has read the whole committed log.
func watchScenario(t *testing.T, s Scenario, mode store.Mode) (failed []string, aborted int) {
	t.Helper()
	w, err := New(Config{Mode: mode, Protocol: s.Protocol})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	reader, err := w.c.NewBackend(sim.BackendConfig{Mode: store.Transactional, Application: "view", SnapshotTopic: sim.LegacySnapshotTopic})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	watch := NewViewWatch()
	ctx := context.Background()
	v, err := view.New(ctx, view.Config[int]{Store: reader, Topic: InputTopic, Codec: IntCodec{},
		Partitioner: func(key []byte, n int32) int32 { return PartitionOf(string(key), int(n)) }, OnChange: watch.OnChange})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for _, st := range s.Steps {
		w.Apply(st)
		if err := v.Step(ctx); err != nil {
			t.Fatalf("the view's step after %v: %v", st, err)
		}
	}
	w.Quiesce()
	committed := make([][]store.Snapshot, w.cfg.Partitions)
	for p := range committed {
		tp := store.TopicPartition{Topic: snapshotTopic, Partition: int32(p)}
		all, err := w.c.Entries(tp)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range all {
			if e.Aborted && e.Control == 0 {
				aborted++
			}
		}
		ents, err := w.c.Read(tp, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Control != 0 {
				continue
			}
			s, kind, err := wire.DecodeRecord(tp, e.Offset, e.Record)
			if err != nil {
				t.Fatal(err)
			}
			if kind != wire.KindOffsetMarker {
				committed[p] = append(committed[p], s)
			}
		}
	}
	// The view reads on to the log end; a view opened now catches up
	// to the same state.
	for range 10 {
		if err := v.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	late, err := view.New(ctx, view.Config[int]{Store: reader, Topic: InputTopic, Codec: IntCodec{},
		Partitioner: func(key []byte, n int32) int32 { return PartitionOf(string(key), int(n)) }})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	for i := 0; !late.Status().CaughtUp; i++ {
		if i == 10 {
			t.Fatalf("a view opened after quiescence did not catch up: %+v", late.Status())
		}
		if err := late.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if watch.Changes() == 0 {
		t.Fatal("the view applied no change")
	}
	failed = watch.Check(committed)
	for _, log := range committed {
		for _, s := range log {
			want, wantOK := latestOf(committed, s.Key)
			for _, view := range []*view.View[int]{v, late} {
				got, ok, err := view.Get(s.Key)
				if err != nil || ok != wantOK || got != want {
					failed = append(failed, "Get "+string(s.Key)+" is not the last committed snapshot")
				}
			}
		}
	}
	if len(failed) > 0 {
		t.Logf("steps:\n%s", Trace(s.Steps))
	}
	return failed, aborted
}

// latestOf is key's last committed state.
func latestOf(committed [][]store.Snapshot, key []byte) (int, bool) {
	for _, log := range committed {
		for _, s := range slices.Backward(log) {
			if string(s.Key) == string(key) {
				if s.Tombstone {
					return 0, false
				}
				n, _ := IntCodec{}.Decode(s.Value)
				return n, true
			}
		}
	}
	return 0, false
}

// A view of the snapshot topic, open while the scenarios' stale owners
// flush and their crashed owners' transactions are aborted, shows exactly
// the committed snapshots, in log order, and never an older state after
// a newer one.
func TestViewShowsOnlyCommittedSnapshotsOnSim(t *testing.T) {
	aborted := 0
	for _, name := range viewScenarios {
		s, ok := ScenarioNamed(name)
		if !ok {
			t.Fatalf("no scenario %q", name)
		}
		t.Run(name, func(t *testing.T) {
			failed, n := watchScenario(t, s, store.Transactional)
			for _, f := range failed {
				t.Error(f)
			}
			aborted += n
		})
	}
	// Not vacuous: aborted snapshots were in the logs the views read.
	if aborted == 0 {
		t.Fatal("no scenario left an aborted snapshot in the log")
	}
	t.Logf("%d aborted snapshot records in the logs, none shown", aborted)
}

// The negative control: the same view and check over kafka-flow#732
// without the fence (a Plain-mode world, whose stale owner's snapshot
// lands in the log) finds the stale snapshot.
func TestViewWatchCatchesTheStaleSnapshotWithoutTheFenceOnSim(t *testing.T) {
	s, _ := ScenarioNamed("stale-flush-on-revoke")
	failed, _ := watchScenario(t, s, store.Plain)
	for _, f := range failed {
		t.Log(f)
	}
	if !slices.ContainsFunc(failed, func(f string) bool { return strings.Contains(f, "a stale snapshot") }) {
		t.Fatalf("the watch found %q over the Plain run; want the stale snapshot", failed)
	}
}
