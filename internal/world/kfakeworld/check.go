package kfakeworld

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
)

// snapshots reads every snapshot partition read_committed up to its last
// stable offset, with a fresh client outside any group, and returns each
// key's latest snapshot. It reads only what is below the last stable
// offset, which a fetch returns at once: no virtual time passes.
func (w *World) snapshots() map[string]world.Visible {
	ctx := context.Background()
	lsos, err := w.adm.ListCommittedOffsets(ctx, snapshotTopic)
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: listing the last stable offsets of %s: %v", snapshotTopic, err))
	}
	out := map[string]world.Visible{}
	for p := range int32(Partitions) {
		o, ok := lsos.Lookup(snapshotTopic, p)
		if !ok || o.Err != nil {
			panic(fmt.Sprintf("kfakeworld: the last stable offset of %s/%d: %v", snapshotTopic, p, o.Err))
		}
		if o.Offset > 0 {
			w.readSnapshots(p, o.Offset, out)
		}
	}
	return out
}

func (w *World) readSnapshots(p int32, lso int64, out map[string]world.Visible) {
	tp := store.TopicPartition{Topic: snapshotTopic, Partition: p}
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.seeds...), kgo.Dialer(w.net.DialContext),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{snapshotTopic: {p: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: reader: %v", err))
	}
	defer cl.Close()
	for pos := int64(0); pos < lso; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		fs := cl.PollFetches(ctx)
		cancel()
		if err := fs.Err0(); err != nil {
			panic(fmt.Sprintf("kfakeworld: reading %s: %v", tp, err))
		}
		fs.EachRecord(func(r *kgo.Record) {
			pos = max(pos, r.Offset+1)
			if r.Attrs.IsControl() || r.Offset >= lso {
				return
			}
			wr := store.WireRecord{Key: r.Key, Value: r.Value}
			for _, h := range r.Headers {
				wr.Headers = append(wr.Headers, store.Header{Key: h.Key, Value: h.Value})
			}
			s, kind, err := store.DecodeRecord(tp, r.Offset, wr)
			if err != nil || kind == store.KindOffsetMarker {
				return // corrupt records fail recoveries; markers carry no state
			}
			out[string(s.Key)] = world.Visible{Offset: s.Offset, Value: string(s.Value), Tombstone: s.Tombstone}
		})
	}
}

// afterStep checks the invariants that hold after every step: 1 and 2.
func (w *World) afterStep() []world.Violation {
	var vs []world.Violation
	snaps := w.snapshots()
	// 1. A key's visible snapshot never goes back to an older fold.
	vs = append(vs, world.CheckNoStaleOverwrite(w.steps, w.seen, snaps)...)
	// 2. Every input event below a partition's committed offset is
	// covered by its key's committed snapshot (or the key is deleted).
	// The committed snapshots are approximated by the read_committed read
	// above, which stops at the last stable offset: while a foreign
	// transaction is open, snapshots committed behind it are committed
	// but not readable (a recovery waits for them), so the check is
	// skipped. A member's own open transaction pins nothing a later
	// commit depends on: the next owner's takeover aborts it before it
	// writes. A partition whose committed offset is unstable (a commit
	// pending in an open transaction) is skipped too.
	if w.foreign != nil {
		return vs
	}
	committed, stable := w.committedOffsets()
	isStable := func(p int32) bool { return stable[p] }
	return append(vs, w.ledger.CheckCommittedCovered(w.steps, committed, isStable, snaps)...)
}

// atQuiescence checks what must hold once every fault is lifted and every
// event processed: the exact fold (3) and the outputs (7).
func (w *World) atQuiescence() []world.Violation {
	snaps := w.snapshots()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ledger.CheckAtQuiescence(snaps, w.outputs)
}
