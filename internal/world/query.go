package world

import (
	"context"
	"fmt"
	"strconv"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// QueryOp asks r, member slot's runner, for key's state in mode and
// returns the history's record of its answer (a Query op). A world's
// partitions is its input topic's partition count.
func QueryOp(ctx context.Context, r *engine.Member[int], slot int, key string, partitions int, mode engine.ReadMode) history.Op {
	tp := store.TopicPartition{Topic: InputTopic, Partition: PartitionOf(key, partitions)}
	op := history.Op{Kind: history.Query, Member: slot, Partition: tp.Partition, Key: key, Outcome: history.OK}
	e, found, err := r.Get(ctx, tp, []byte(key), mode)
	switch {
	case err != nil:
		op.Outcome, op.Detail, op.Err = history.Failed, history.QueryNotOwned, err.Error()
	case !found:
		op.Detail, op.Offset = history.QueryAbsent, -1
	default:
		op.Value, op.Offset = strconv.Itoa(e.State), e.Offset
	}
	return op
}

// query records m's answer to a committed read of key (a latest read in
// the broken variant QueriesReadLatest, which waits for no step in
// flight).
func (w *World) query(m *member, key string) {
	mode := engine.ReadCommitted
	if w.cfg.QueriesReadLatest {
		if m.busy != nil {
			return
		}
		mode = engine.ReadLatest
	}
	w.rec.Add(QueryOp(context.Background(), m.r, m.slot, key, w.cfg.Partitions, mode))
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
			OnChange: func(ch view.Change[int]) {
				op := history.Op{Kind: history.View, Member: -1, Partition: ch.Partition, Key: string(ch.Key), Offset: ch.Offset, Tombstone: ch.Deleted}
				if !ch.Deleted {
					op.Value = strconv.Itoa(ch.State)
				}
				w.rec.Add(op)
			}})
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
