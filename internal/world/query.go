package world

import (
	"context"
	"strconv"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/store"
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
