package world

import (
	"slices"
	"testing"
	"time"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// keyOn is the first of a, b, c, ... that lands on partition p.
func keyOn(t *testing.T, p int32, partitions int) string {
	t.Helper()
	for c := 'a'; c <= 'z'; c++ {
		if PartitionOf(string(c), partitions) == p {
			return string(c)
		}
	}
	t.Fatalf("no one-letter key on partition %d", p)
	return ""
}

// apply applies steps to w, failing on any violation.
func apply(t *testing.T, w *World, steps ...Step) {
	t.Helper()
	for _, s := range steps {
		if vs := w.Apply(s); len(vs) > 0 {
			t.Fatalf("%s: %v", s, vs)
		}
	}
}

// splitGroup brings m0 and m1 into the group with one partition each and
// has each fold an event it has not flushed.
func splitGroup(t *testing.T, w *World) {
	t.Helper()
	k0, k1 := keyOn(t, 0, w.cfg.Partitions), keyOn(t, 1, w.cfg.Partitions)
	apply(t, w, Step{Kind: Produce, Key: k0, Delta: 1}, Step{Kind: Produce, Key: k1, Delta: 1},
		Step{Kind: Join, Member: 0}, Step{Kind: Poll, Member: 0}, Step{Kind: Join, Member: 1})
	for range 10 {
		if len(w.members[0].src.Member().Owned()) == 1 && len(w.members[1].src.Member().Owned()) == 1 {
			break
		}
		apply(t, w, Step{Kind: Poll, Member: 1}, Step{Kind: Poll, Member: 0}, Step{Kind: Advance, D: time.Second})
	}
	if len(w.members[0].src.Member().Owned()) != 1 || len(w.members[1].src.Member().Owned()) != 1 {
		t.Fatalf("the group did not split: m0 owns %v, m1 %v", w.members[0].src.Member().Owned(), w.members[1].src.Member().Owned())
	}
	// Folded, not flushed: the persist interval is not due.
	apply(t, w, Step{Kind: Produce, Key: k0, Delta: 2}, Step{Kind: Produce, Key: k1, Delta: 2},
		Step{Kind: Poll, Member: 0}, Step{Kind: Poll, Member: 1})
}

// A crashed member stays in the group until its session expires; then
// the group evicts it and the survivor takes its partition over and
// replays what it had folded. The crashed member flushes, commits, reads
// and emits nothing after its crash: the only trace it leaves is the
// transaction the world leaves open in its name (an abandoned write).
func TestACrashedMemberIsEvictedWhenItsSessionExpires(t *testing.T) {
	for _, protocol := range []sim.Protocol{sim.ClassicEager, sim.ClassicCooperative, sim.Consumer} {
		t.Run(protocol.String(), func(t *testing.T) {
			w, err := New(Config{Mode: store.Transactional, Protocol: protocol})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Close)
			splitGroup(t, w)
			m0, m1 := w.members[0], w.members[1]
			id := m0.src.Identity()
			lost := m0.src.Member().Owned()
			in := store.TopicPartition{Topic: InputTopic, Partition: lost[0].Partition}
			_, _, end, _ := w.c.Offsets(in)
			if committed, _ := w.c.CommittedOffset(Group, in); committed >= end {
				t.Fatalf("m0 committed %s to its end (%d) before the crash: nothing for a crash to lose", in, end)
			}
			from := len(w.rec.Ops())
			apply(t, w, Step{Kind: Crash, Member: 0})
			inGroup := func() bool { current, _ := w.c.MemberEpochs(Group, id.MemberID); return current >= 0 }

			apply(t, w, Step{Kind: Advance, D: w.cfg.SessionTimeout - time.Second}, Step{Kind: Poll, Member: 1})
			if !inGroup() {
				t.Fatalf("%s after the crash, within the session timeout (%s), the group has already dropped m0", w.cfg.SessionTimeout-time.Second, w.cfg.SessionTimeout)
			}
			if owned := m1.src.Member().Owned(); slices.Contains(owned, lost[0]) {
				t.Fatalf("m1 owns %v before m0's session expired", owned)
			}

			apply(t, w, Step{Kind: Advance, D: 2 * time.Second})
			if inGroup() {
				t.Fatalf("%s after the crash, past the session timeout (%s), the group still has m0", w.cfg.SessionTimeout+time.Second, w.cfg.SessionTimeout)
			}
			for range 5 {
				if len(m1.src.Member().Owned()) == w.cfg.Partitions {
					break
				}
				apply(t, w, Step{Kind: Poll, Member: 1})
			}
			if owned := m1.src.Member().Owned(); len(owned) != w.cfg.Partitions {
				t.Fatalf("m0's session expired, and m1 owns %v, not every partition", owned)
			}
			for _, v := range w.Quiesce() {
				t.Errorf("%s", v)
			}
			abandoned := 0
			for _, op := range w.rec.Ops()[from:] { // the quiescence's too
				if op.Member != 0 {
					continue
				}
				switch op.Kind {
				case history.Member:
				case history.Abandon:
					abandoned++
				default:
					t.Errorf("m0 has crashed, and it made a %s call: %v", op.Kind, op)
				}
			}
			if abandoned != len(lost) {
				t.Errorf("the crash abandoned %d writes, want one on each partition m0 owned (%v)", abandoned, lost)
			}
		})
	}
}
