package world

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// ViewWatch records the change stream of an view.View of the world's
// snapshot topic (its OnChange) and checks it against the snapshot
// partitions' committed logs: the views' tests run it over the named
// scenarios in every world.
type ViewWatch struct {
	mu      sync.Mutex
	changes map[int32][]view.Change[int]
}

// NewViewWatch returns an empty watch.
func NewViewWatch() *ViewWatch {
	return &ViewWatch{changes: map[int32][]view.Change[int]{}}
}

// OnChange records ch; it is a view.Config.OnChange.
func (w *ViewWatch) OnChange(ch view.Change[int]) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.changes[ch.Partition] = append(w.changes[ch.Partition], ch)
}

// Changes counts the changes recorded.
func (w *ViewWatch) Changes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, chs := range w.changes {
		n += len(chs)
	}
	return n
}

// Check returns what is wrong with the recorded stream, given each
// snapshot partition's committed log (read read_committed from its start,
// offset markers left out, nothing compacted away), one per partition:
//
//   - per partition, the changes are the committed log's snapshots, in
//     its order, each once: nothing of an aborted transaction (a stale
//     owner's fenced flush, a crashed owner's open transaction the
//     takeover aborted), nothing lost, nothing reordered;
//   - per key, the input offsets never go back: no change replaces a
//     newer state with an older one (invariant 1, NoStaleOverwrite, as a
//     reader of the view sees it).
//
// The first holds of any committed log; the second is what the fence
// adds, and fails on a Plain-mode world's log, where a stale owner's
// snapshot lands.
func (w *ViewWatch) Check(committed [][]store.Snapshot) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for p, log := range committed {
		got := w.changes[int32(p)]
		for i := range max(len(got), len(log)) {
			switch {
			case i >= len(got):
				out = append(out, fmt.Sprintf("partition %d: the view stopped after %d changes; the committed log goes on with %s", p, len(got), describeSnap(log[i])))
			case i >= len(log):
				out = append(out, fmt.Sprintf("partition %d: the view's change %d, %s, is past the committed log's %d snapshots", p, i, describeChange(got[i]), len(log)))
			case !sameChange(got[i], log[i]):
				out = append(out, fmt.Sprintf("partition %d: the view's change %d is %s; the committed log's snapshot %d is %s", p, i, describeChange(got[i]), i, describeSnap(log[i])))
			}
			if i >= len(got) || i >= len(log) || !sameChange(got[i], log[i]) {
				break
			}
		}
	}
	for _, p := range slices.Sorted(func(yield func(int32) bool) {
		for p := range w.changes {
			if !yield(p) {
				return
			}
		}
	}) {
		last := map[string]view.Change[int]{}
		for _, ch := range w.changes[p] {
			if prev, ok := last[string(ch.Key)]; ok && ch.Offset < prev.Offset {
				out = append(out, fmt.Sprintf("partition %d: the view replaced %s with the older %s: a stale snapshot", p, describeChange(prev), describeChange(ch)))
			}
			last[string(ch.Key)] = ch
		}
	}
	return out
}

func sameChange(ch view.Change[int], s store.Snapshot) bool {
	if ch.Err != nil || !bytes.Equal(ch.Key, s.Key) || ch.Offset != s.Offset || ch.Deleted != s.Tombstone {
		return false
	}
	return s.Tombstone || string(s.Value) == strconv.Itoa(ch.State)
}

func describeChange(ch view.Change[int]) string {
	switch {
	case ch.Err != nil:
		return fmt.Sprintf("%s@%d (%v)", ch.Key, ch.Offset, ch.Err)
	case ch.Deleted:
		return fmt.Sprintf("%s deleted@%d", ch.Key, ch.Offset)
	}
	return fmt.Sprintf("%s=%d@%d", ch.Key, ch.State, ch.Offset)
}

func describeSnap(s store.Snapshot) string {
	if s.Tombstone {
		return fmt.Sprintf("%s deleted@%d", s.Key, s.Offset)
	}
	return fmt.Sprintf("%s=%s@%d", s.Key, s.Value, s.Offset)
}

// ViewOp is the history's record of a change a view of the snapshot
// topic applied (a read-view step's, in every world).
func ViewOp(ch view.Change[int]) history.Op {
	op := history.Op{Kind: history.View, Member: -1, Partition: ch.Partition, Key: string(ch.Key), Offset: ch.Offset, Tombstone: ch.Deleted}
	if !ch.Deleted {
		op.Value = strconv.Itoa(ch.State)
	}
	return op
}

// readView lets the world's view of the snapshot topic read once,
// opening it first if it is not open (from the log start): a reader of
// the application's state, as another service runs one. Each change it
// applies is recorded (a history.View op). The read runs beside the
// world, as a member's step does: a slow fetch parks it on the cluster's
// clock until time moves (settle waits for it); a step while it is in
// flight does nothing.
func (w *World) readView() {
	if w.viewBusy != nil {
		return
	}
	if w.view == nil {
		var ctx context.Context
		ctx, w.viewCancel = context.WithCancel(context.Background())
		be, err := w.c.NewBackend(sim.BackendConfig{Mode: store.Transactional, Application: "view", SnapshotTopic: sim.LegacySnapshotTopic})
		if err != nil {
			panic(fmt.Sprintf("world: the view's backend: %v", err))
		}
		var follower store.Backend = be
		if w.cfg.FollowUncommitted {
			follower = uncommittedSnapshots{Backend: be, w: w}
		}
		v, err := view.New(ctx, view.Config[int]{Store: follower, Topic: InputTopic, Codec: IntCodec{},
			Partitioner: func(key []byte, n int32) int32 { return PartitionOf(string(key), int(n)) },
			OnChange:    func(ch view.Change[int]) { w.rec.Add(ViewOp(ch)) }})
		if err != nil {
			panic(fmt.Sprintf("world: the view of the snapshot topic: %v", err))
		}
		w.view, w.viewBackend, w.viewCtx = v, be, ctx
	}
	done := make(chan struct{})
	w.viewBusy = done
	go func() {
		if err := w.view.Step(w.viewCtx); err != nil && w.viewCtx.Err() == nil {
			panic(fmt.Sprintf("world: the view's read: %v", err))
		}
		close(done) // before the wake: settle looks at done when woken
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}()
}

// uncommittedSnapshots is the FollowUncommitted variant's store for the
// view of the snapshot topic: its followers read read_uncommitted.
type uncommittedSnapshots struct {
	store.Backend
	w *World
}

func (u uncommittedSnapshots) Follow(_ context.Context, input store.TopicPartition, from *store.Checkpoint) (store.Follow, error) {
	return u.w.followUncommitted(store.TopicPartition{Topic: snapshotTopic, Partition: input.Partition}, false, from), nil
}
