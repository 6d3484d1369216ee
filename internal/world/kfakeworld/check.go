package kfakeworld

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
)

// visible is a key's snapshot as a read_committed reader sees it.
type visible struct {
	offset    int64
	value     string
	tombstone bool
}

func (w *World) violation(n, step int, format string, args ...any) world.Violation {
	return world.Violation{Invariant: n, Name: world.InvariantName(n), Step: step, Detail: fmt.Sprintf(format, args...)}
}

// snapshots reads every snapshot partition read_committed up to its last
// stable offset, with a fresh client outside any group, and returns each
// key's latest snapshot. It reads only what is below the last stable
// offset, which a fetch returns at once: no virtual time passes.
func (w *World) snapshots() map[string]visible {
	ctx := context.Background()
	lsos, err := w.adm.ListCommittedOffsets(ctx, snapshotTopic)
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: listing the last stable offsets of %s: %v", snapshotTopic, err))
	}
	out := map[string]visible{}
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

func (w *World) readSnapshots(p int32, lso int64, out map[string]visible) {
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
			out[string(s.Key)] = visible{offset: s.Offset, value: string(s.Value), tombstone: s.Tombstone}
		})
	}
}

// afterStep checks the invariants that hold after every step: 1 and 2.
func (w *World) afterStep() []world.Violation {
	var vs []world.Violation
	snaps := w.snapshots()
	// 1. A key's visible snapshot never goes back to an older fold.
	for _, key := range sortedKeys(snaps) {
		v := snaps[key]
		if prev, ok := w.seen[key]; ok && v.offset < prev {
			vs = append(vs, w.violation(1, w.steps,
				"key %s: the visible snapshot went back from the fold up to input offset %d to the one up to %d (value %s)", key, prev, v.offset, v.value))
		}
		w.seen[key] = max(w.seen[key], v.offset)
	}
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
	last := map[string]event{}
	for _, e := range w.events {
		if stable[e.partition] && e.offset < committed[e.partition] {
			last[e.key] = e
		}
	}
	for _, key := range sortedKeys(last) {
		e := last[key]
		v, ok := snaps[key]
		switch {
		case ok && v.offset >= e.offset:
		case !ok && w.deletedAt(key, e.partition, committed[e.partition]):
		default:
			vs = append(vs, w.violation(2, w.steps,
				"input partition %d is committed at %d, but key %s's event at offset %d is not in its committed snapshot (%s)",
				e.partition, committed[e.partition], key, e.offset, describe(v, ok)))
		}
	}
	return vs
}

// deletedAt reports whether the fold of key's events below end is a
// closed (deleted) account.
func (w *World) deletedAt(key string, partition int32, end int64) bool {
	_, exists := w.foldOf(key, func(e event) bool { return e.partition == partition && e.offset < end })
	return !exists
}

// foldOf folds key's events that keep returns, as the engine's fold does.
func (w *World) foldOf(key string, keep func(event) bool) (int, bool) {
	state, exists := 0, false
	for _, e := range w.events {
		if e.key != key || !keep(e) {
			continue
		}
		if e.delta == 0 {
			state, exists = 0, false
			continue
		}
		state, exists = state+e.delta, true
	}
	return state, exists
}

// atQuiescence checks what must hold once every fault is lifted and every
// event processed: the exact fold (3) and the outputs (7).
func (w *World) atQuiescence() []world.Violation {
	var vs []world.Violation
	snaps := w.snapshots()
	keys := map[string]bool{}
	for _, e := range w.events {
		keys[e.key] = true
	}
	for _, key := range sortedKeys(keys) {
		want, exists := w.foldOf(key, func(event) bool { return true })
		v, ok := snaps[key]
		switch {
		case !exists && (!ok || v.tombstone):
		case exists && ok && !v.tombstone && v.value == fmt.Sprint(want):
		default:
			wantS := "closed"
			if exists {
				wantS = fmt.Sprint(want)
			}
			vs = append(vs, w.violation(3, 0, "key %s is %s, the exact fold of its %d events is %s", key, describe(v, ok), w.count(key), wantS))
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.events {
		if w.outputs[fmt.Sprintf("%d:%d", e.partition, e.offset)] == 0 {
			vs = append(vs, w.violation(7, 0, "the event at %s/%d offset %d (key %s) has no output", world.InputTopic, e.partition, e.offset, e.key))
		}
	}
	return vs
}

func (w *World) count(key string) int {
	n := 0
	for _, e := range w.events {
		if e.key == key {
			n++
		}
	}
	return n
}

func describe(v visible, ok bool) string {
	switch {
	case !ok:
		return "without a snapshot"
	case v.tombstone:
		return fmt.Sprintf("deleted at input offset %d", v.offset)
	}
	return fmt.Sprintf("%s as of input offset %d", v.value, v.offset)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
