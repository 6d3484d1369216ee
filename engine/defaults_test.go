package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// One interval is enough: with PersistInterval left 0, nothing is written
// before the commit is due, then the dirty key and the offset go in one
// transaction. At the default CommitInterval, and at one longer than a
// minute, where a persist of its own (the default before PersistInterval
// followed CommitInterval) would have written the key first.
func TestPersistIntervalFollowsCommitIntervalOnSim(t *testing.T) {
	for name, commit := range map[string]time.Duration{"default": 0, "2m": 2 * time.Minute} {
		t.Run(name, func(t *testing.T) {
			w := newSimWorld(t)
			e, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: w.store, CommitInterval: commit})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
			interval := commit
			if commit == 0 {
				interval = engine.DefaultCommitInterval
			}
			start := w.c.Now()
			due := start.Add(interval)
			r := w.runner(e) // its timers start now
			w.produce("alice=+10")
			in := store.TopicPartition{Topic: "accounts", Partition: 1}
			snaps := store.TopicPartition{Topic: sim.DefaultSnapshotTopic("bank", "accounts"), Partition: 1}
			ctx := context.Background()
			step := func() {
				t.Helper()
				if err := r.Step(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; ; i++ { // joins, recovers, folds: no time passes
				step()
				if _, ok, _ := r.State(in, []byte("alice")); ok {
					break
				}
				if i == 10 {
					t.Fatal("alice=+10 was never folded")
				}
			}
			acquired, _ := w.snapshotLog(snaps, "alice") // the acquisition's own transaction
			// Up to just before the commit is due, a step every 10 s (the
			// session stays alive): nothing is written.
			for before := due.Add(-time.Millisecond); w.c.Now().Before(before); {
				w.c.Advance(min(10*time.Second, before.Sub(w.c.Now())))
				step()
				if txns, recs := w.snapshotLog(snaps, "alice"); txns != acquired || recs > 0 {
					t.Fatalf("%v after the start, %d transactions on the snapshot partition after the acquisition's and %d snapshots of alice: a persist before the commit was due",
						w.c.Now().Sub(start), txns-acquired, recs)
				}
			}
			if off, ok := w.c.CommittedOffset("bank", in); ok && off > 0 {
				t.Fatalf("committed %d before the commit was due", off)
			}
			w.c.Advance(time.Millisecond)
			step()
			if off, _ := w.c.CommittedOffset("bank", in); off != 1 {
				t.Fatalf("committed offset %d when the commit was due, want 1", off)
			}
			if txns, recs := w.snapshotLog(snaps, "alice"); txns != acquired+1 || recs != 1 {
				t.Fatalf("%d transactions on the snapshot partition after the acquisition's and %d snapshots of alice, want 1 and 1: the snapshot with the commit",
					txns-acquired, recs)
			}
		})
	}
}

// snapshotLog counts the committed transactions on the snapshot
// partition tp (its commit markers) and the records with key on it.
func (w *simWorld) snapshotLog(tp store.TopicPartition, key string) (txns, records int) {
	w.t.Helper()
	ents, err := w.c.Entries(tp)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, e := range ents {
		switch {
		case e.Control == sim.CommitMarker:
			txns++
		case e.Control == sim.NoControl && string(e.Record.Key) == key:
			records++
		}
	}
	return txns, records
}
