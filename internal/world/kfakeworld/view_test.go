package kfakeworld

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// viewScenarios are the named scenarios a view watches
// (internal/world's TestViewShowsOnlyCommittedSnapshotsOnSim): stale
// owners, crashed owners' open transactions, a foreign one across a
// recovery; none compacts or cuts the snapshot log.
var viewScenarios = []string{
	"stale-flush-on-revoke", "stale-periodic-flush", "two-overlapping-stale-owners",
	"double-handover-crashed-owners", "takeover-abort-after-hard-crash",
	"foreign-open-transaction-across-recovery", "revoke-flush-classic-cooperative",
}

// viewStepsAtMost bounds the view's steps while it reads on to the end
// of the committed log after quiescence (each step reads each partition
// once).
const viewStepsAtMost = 2000

// watchScenario runs steps on w with a view of its snapshot topic open
// from the start (store/kafka, read_committed, a client of its own on
// the world's network, outside every member's freezer), stepped after
// every step, and returns what the view's watch finds wrong once the
// view has read the whole committed log, and how many snapshot records
// of aborted transactions the log held.
func watchScenario(t *testing.T, w *World, steps []world.Step) (failed []string, aborted int) {
	t.Helper()
	ctx := context.Background()
	reader, err := kafka.New(ctx, kafka.Config{Mode: store.Transactional, SeedBrokers: w.seeds, Application: w.prefix + "-view",
		SnapshotTopic: func(string) string { return w.snapshotTopic }, ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext)}})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	partitioner := func(key []byte, n int32) int32 { return world.PartitionOf(string(key), int(n)) }
	watch := world.NewViewWatch()
	v, err := view.New(ctx, view.Config[int]{Store: reader, Topic: w.input, Codec: world.IntCodec{}, Partitioner: partitioner, OnChange: watch.OnChange})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for _, s := range steps {
		w.Apply(s)
		if err := v.Step(ctx); err != nil {
			t.Fatalf("the view's step after %v: %v", s, err)
		}
	}
	w.Quiesce()
	committed := w.snapshotLogs()
	total := 0
	for _, log := range committed {
		total += len(log)
	}
	ends, err := w.adm.ListEndOffsets(ctx, w.snapshotTopic)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(Partitions) {
		end, _ := ends.Lookup(w.snapshotTopic, p)
		w.scanLog(p, end.Offset, kgo.ReadUncommitted(), func(r *kgo.Record) {
			if _, ok := decode(store.TopicPartition{Topic: w.snapshotTopic, Partition: p}, r); ok && !r.Attrs.IsControl() {
				aborted++
			}
		})
	}
	aborted -= total
	for i := 0; watch.Changes() < total; i++ {
		if i == viewStepsAtMost {
			t.Fatalf("the view read %d of the %d committed snapshots: %+v", watch.Changes(), total, v.Status())
		}
		if err := v.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	late, err := view.New(ctx, view.Config[int]{Store: reader, Topic: w.input, Codec: world.IntCodec{}, Partitioner: partitioner})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	for i := 0; !late.Status().CaughtUp; i++ {
		if i == viewStepsAtMost {
			t.Fatalf("a view opened after quiescence did not catch up: %+v", late.Status())
		}
		if err := late.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	failed = watch.Check(committed)
	latest := latest(committed)
	for key, want := range latest {
		for _, view := range []*view.View[int]{v, late} {
			got, ok, err := view.Get([]byte(key))
			n, _ := world.IntCodec{}.Decode([]byte(want.Value))
			if err != nil || ok == want.Tombstone || ok && got != n {
				failed = append(failed, "Get "+key+" is not the last committed snapshot "+want.Value)
			}
		}
	}
	if len(failed) > 0 {
		t.Logf("steps:\n%s", world.Trace(steps))
	}
	return failed, aborted
}

// A view of the snapshot topic, open while the scenarios' stale owners
// flush and their crashed owners' transactions are aborted, shows exactly
// the committed snapshots, in log order, and never an older state after
// a newer one: on kfake with store/kafka's reader.
func TestViewShowsOnlyCommittedSnapshotsOnKfake(t *testing.T) {
	aborted := 0
	for _, name := range viewScenarios {
		s, ok := world.ScenarioNamed(name)
		if !ok {
			t.Fatalf("no scenario %q", name)
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w, err := New(Config{Mode: store.Transactional, Protocol: s.Protocol})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				failed, n := watchScenario(t, w, s.Steps)
				for _, f := range failed {
					t.Error(f)
				}
				aborted += n
			})
		})
	}
	if aborted == 0 {
		t.Fatal("no scenario left an aborted snapshot in the log: the check is vacuous")
	}
	t.Logf("%d aborted snapshot records in the logs, none shown", aborted)
}

// The read-view step reads the snapshot topic once with store/kafka's
// read_committed reader and records each change: over
// a-view-shows-committed-states it shows each committed snapshot once,
// in order, and the checker holds them to invariant 4.
func TestReadViewStepRecordsTheCommittedChanges(t *testing.T) {
	s, ok := world.ScenarioNamed("a-view-shows-committed-states")
	if !ok {
		t.Fatal("no scenario a-view-shows-committed-states")
	}
	synctest.Test(t, func(t *testing.T) {
		vs, ops := runAll(t, Config{Mode: store.Transactional}, s.Steps)
		for _, v := range vs {
			t.Errorf("%s", v)
		}
		var got []string
		for _, op := range ops {
			if op.Kind == history.View {
				got = append(got, fmt.Sprintf("p%d %s=%s@%d", op.Partition, op.Key, op.Value, op.Offset))
			}
		}
		want := []string{"p1 a=10@0", "p1 a=15@1", "p1 a=115@2"}
		if !slices.Equal(got, want) {
			t.Fatalf("the view recorded %q, want %q", got, want)
		}
	})
}

// A step kfake's world cannot carry out (standby replicas, lookup
// tables, a restore of the snapshot topic: the sim's alone) is recorded
// as such, never dropped silently.
func TestStepsOfTheSimAloneAreRecordedUnexpressed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		steps := []world.Step{{Kind: world.Join}, {Kind: world.Replicate}, {Kind: world.TablePut, Key: "a", Delta: 1}, {Kind: world.Recreate}}
		_, ops := runAll(t, Config{Mode: store.Transactional}, steps)
		n := 0
		for _, op := range ops {
			if op.Kind == history.Unexpressed {
				n++
			}
		}
		if n != 3 {
			t.Fatalf("%d steps recorded as unexpressed, want 3", n)
		}
	})
}
