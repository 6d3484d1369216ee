package kfakeworld

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
)

// offsets are snapshot partition p's last stable offset and high
// watermark.
func offsets(t *testing.T, w *World, p int32) (lso, hw int64) {
	t.Helper()
	lsos, err := w.adm.ListCommittedOffsets(context.Background(), w.snapshotTopic)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := w.adm.ListEndOffsets(context.Background(), w.snapshotTopic)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := lsos.Lookup(w.snapshotTopic, p)
	h, _ := ends.Lookup(w.snapshotTopic, p)
	return l.Offset, h.Offset
}

func TestTruncate(t *testing.T) {
	apply := func(t *testing.T, w *World, steps ...world.Step) {
		t.Helper()
		for _, s := range steps {
			if vs := w.Apply(s); len(vs) > 0 {
				t.Fatalf("%s: %v", s, vs)
			}
		}
	}
	// m0 owns both partitions and has flushed b (snapshot partition 0).
	start := []world.Step{
		{Kind: world.Produce, Key: "b", Delta: 1},
		{Kind: world.Join, Member: 0},
		{Kind: world.Poll, Member: 0},
		{Kind: world.Advance, D: 6 * time.Second},
		{Kind: world.Poll, Member: 0},
	}
	// A tail of open transactions is cut back to the last stable offset;
	// the restart aborts the transaction, and a member whose recovery
	// waited behind it (its target the old high watermark) gets past the
	// truncation: every invariant holds at quiescence.
	t.Run("open tail", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w, err := New(Config{Mode: store.Transactional})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			apply(t, w, start...)
			apply(t, w,
				world.Step{Kind: world.Produce, Key: "b", Delta: 2},
				world.Step{Kind: world.Leave, Member: 0},
				world.Step{Kind: world.ForeignOpen, Partition: 0},
				world.Step{Kind: world.Join, Member: 1},
				world.Step{Kind: world.Poll, Member: 1},
				world.Step{Kind: world.Advance, D: time.Second},
			)
			lso, hw := offsets(t, w, 0)
			if lso >= hw {
				t.Fatalf("before: last stable offset %d, high watermark %d: no open tail", lso, hw)
			}
			if !w.members[1].p.cbs.active() {
				t.Fatal("m1's assignment is not waiting for its recovery")
			}
			apply(t, w, world.Step{Kind: world.Truncate, Partition: 0})
			if l, h := offsets(t, w, 0); l != lso || h != lso {
				t.Fatalf("after truncating: last stable offset %d, high watermark %d, want both %d", l, h, lso)
			}
			for _, v := range w.Quiesce() {
				t.Errorf("%s", v)
			}
		})
	})
	// A tail with a committed transaction's records (m0's flush, behind
	// the foreign transaction) is not cut.
	t.Run("committed tail", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w, err := New(Config{Mode: store.Transactional})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			apply(t, w, start...)
			apply(t, w,
				world.Step{Kind: world.ForeignOpen, Partition: 0},
				world.Step{Kind: world.Produce, Key: "b", Delta: 2},
				world.Step{Kind: world.Poll, Member: 0},
				world.Step{Kind: world.Advance, D: 6 * time.Second},
				world.Step{Kind: world.Poll, Member: 0},
			)
			lso, hw := offsets(t, w, 0)
			apply(t, w, world.Step{Kind: world.Truncate, Partition: 0})
			if l, h := offsets(t, w, 0); l != lso || h != hw || lso >= hw {
				t.Fatalf("last stable offset and high watermark %d, %d before, %d, %d after truncating: want an open tail left as it was", lso, hw, l, h)
			}
			for _, v := range w.Quiesce() {
				t.Errorf("%s", v)
			}
		})
	})
}
