package engine

import (
	"context"
	"time"

	"github.com/snapfence/snapfence/store"
)

// atLeastOnce is the default output mode: outputs go to Config.Emit after
// each poll (a replay emits them again), dirty keys are written every
// PersistInterval, and the committable offset is committed every
// CommitInterval, each write and commit fenced by the store.
//
// On a Transactional store a tombstone is written only in the
// transaction that commits the offset past it (see commitTombstones).
type atLeastOnce[S any] struct {
	r *Runner[S]
	// outs are the outputs taken since the last emit, in fold order.
	outs []Output
}

func (m *atLeastOnce[S]) persistInterval() time.Duration { return m.r.e.cfg.PersistInterval }

func (m *atLeastOnce[S]) folded(_ *flow[S], outs []Output) bool {
	m.outs = append(m.outs, outs...)
	return false
}

func (m *atLeastOnce[S]) ticked(_ *flow[S], outs []Output) { m.outs = append(m.outs, outs...) }

func (m *atLeastOnce[S]) emit(ctx context.Context) error {
	outs := m.outs
	m.outs = nil
	if len(outs) == 0 || m.r.e.cfg.Emit == nil {
		return nil
	}
	return m.r.e.cfg.Emit(ctx, outs)
}

func (m *atLeastOnce[S]) persist(ctx context.Context, f *flow[S]) error { return m.flush(ctx, f) }

// holdsTombstones reports whether tombstones wait for a commit: on a
// Transactional store, where a batch can carry them with the offset.
func (m *atLeastOnce[S]) holdsTombstones() bool { return m.r.e.cfg.Store.Mode() == store.Transactional }

// commit writes every dirty key of f, then commits its committable offset.
// A partition with nothing to write whose committable offset is already
// committed sends nothing: an idle partition costs no transaction.
func (m *atLeastOnce[S]) commit(ctx context.Context, f *flow[S]) error {
	if !f.core.Dirty() && f.core.Committable() <= f.part.CommittedOffset() {
		return nil
	}
	if err := m.flush(ctx, f); err != nil {
		return err
	}
	if m.holdsTombstones() && f.core.Dirty() {
		return m.commitTombstones(ctx, f)
	}
	c := f.core.Committable()
	if err := f.part.Commit(ctx, c); err != nil {
		return err
	}
	if err := m.r.durable(f); err != nil { // the commit's marker moved the checkpoint
		return err
	}
	m.committed(f, c)
	return nil
}

func (m *atLeastOnce[S]) committed(f *flow[S], c int64) {
	m.r.e.cfg.Metrics.lag(f.tp, f.core.Consumed()-c)
	m.r.status.committed(f.tp, f.part.CommittedOffset())
}

// commitTombstones writes the held tombstones, every key still dirty
// after the live ones were flushed, in one transaction with the commit of
// the offset after the last record folded (every dirty key is in it, so
// that offset covers it, as an exactly-once batch's does).
//
// Why in one transaction: a tombstone supersedes its key's earlier
// snapshot at once for compaction, and is itself removed once
// delete.retention.ms has passed. Written ahead of the committed offset
// and left there that long (its owner gone, and no other commit), it
// would leave the key's events below the committed offset in no
// snapshot: the next owner would replay the events after that offset onto
// no state. With the commit in the same transaction the events a
// tombstone deletes are never below an offset it could leave uncovered.
//
// The transaction is as large as the deletions since the last commit, as
// an exactly-once batch is as large as the changes of its batch.
func (m *atLeastOnce[S]) commitTombstones(ctx context.Context, f *flow[S]) error {
	start := time.Now() // metrics only
	snaps, err := f.core.Flush(0)
	if err != nil {
		return fromCore(err)
	}
	offset := max(f.core.Consumed(), f.part.CommittedOffset())
	err = f.part.CommitBatch(ctx, store.Batch{Snapshots: snaps, Offset: offset})
	if err = m.r.committedBatch(f, snaps, err); err != nil {
		return err
	}
	m.r.e.cfg.Metrics.flushed(len(snaps), time.Since(start))
	m.committed(f, offset)
	return nil
}

// failure: a failed write or commit leaves the keys dirty; the scheduler
// decides whether the flow stops.
func (m *atLeastOnce[S]) failure(_ *flow[S], err error) (cause, error) { return causeWrite, err }

// flush writes every dirty key of f, a batch at a time, and awaits each
// batch (the store group-commits its writes). On a Transactional store it
// writes the live keys only: tombstones wait for commit.
//
// A batch goes to the store in one WriteBatch call: its writes join the
// group commit's queue in the core's order (by key) with none between
// them, so which writes share a transaction, and their order in the log,
// are the same on every run. That is what makes a run over the simulated
// cluster a function of its seed and its calls.
func (m *atLeastOnce[S]) flush(ctx context.Context, f *flow[S]) error {
	start := time.Now() // metrics only
	total := 0
	defer func() {
		if total > 0 {
			m.r.e.cfg.Metrics.flushed(total, time.Since(start))
		}
	}()
	take := f.core.Flush
	if m.holdsTombstones() {
		take = f.core.FlushLive
	}
	for {
		snaps, err := take(m.r.e.cfg.FlushBatch)
		if err != nil || len(snaps) == 0 {
			return fromCore(err)
		}
		total += len(snaps)
		errs := f.part.WriteBatch(ctx, snaps)
		var first error
		for i, s := range snaps {
			if err := f.core.WriteDone(s.Key, errs[i]); err != nil && first == nil {
				first = fromCore(err)
			}
			if errs[i] != nil && first == nil {
				first = errs[i]
			}
		}
		if err := m.r.durable(f); err != nil && first == nil {
			first = err
		}
		if first != nil {
			return first
		}
	}
}
