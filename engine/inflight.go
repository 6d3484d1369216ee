package engine

import (
	"context"
	"time"

	"github.com/snapfence/snapfence/store"
)

// A flow's writes are pipelined: a flush, a commit or an exactly-once
// batch is started on the store (Partition.Start*) and the runner folds
// on while it is in flight. What was started is reaped, in the order it
// was started (the store's order), once it is done: after each poll, when
// a flow must wait for it (back-pressure, a revoke, an exactly-once batch
// that follows another), and whenever the runner starts something new.
//
// Invariants kept here:
//   - the core learns an outcome (WriteDone) only when it is reaped, in
//     start order, and the cache's checkpoint written with it is the one
//     the store read at that call's own end (store.Pending.Position), never
//     a later one: the cache never claims a write it has not been told of;
//   - a started commit's offset covers only changes that a write started
//     before it carries (core.CommittableIfLanded), and the store refuses
//     the commit if one of those writes fails (StartCommit's dependency),
//     so the committed offset never passes a change that is not durable;
//   - at most Config.MaxWritesInFlight snapshots are in flight per flow.
//
// On a store whose calls complete in the caller (store/sim) every start is
// done before it returns and is reaped at once: a run over the simulated
// cluster makes the same calls in the same order as a flush that waits.

// startedKind is what a started call does.
type startedKind uint8

const (
	startedWrite  startedKind = iota + 1 // a flush batch: StartWriteBatch
	startedCommit                        // an at-least-once commit: StartCommit
	startedBatch                         // a transaction of its own: StartCommitBatch
)

// started is a store call in flight.
type started struct {
	kind    startedKind
	snaps   []store.Snapshot // startedWrite, startedBatch
	offset  int64            // startedCommit, startedBatch
	pending store.Pending
	begin   time.Time // metrics only
	// letters report the dead letters of a startedBatch once it committed.
	letters []func()
	// origins are where a startedBatch's outputs came from.
	origins origins
}

// weight is what s counts against MaxWritesInFlight.
func (s *started) weight() int { return max(len(s.snaps), 1) }

// begin records s as f's newest call in flight, then reaps what is done.
// Call it right after the Start call, and reserve room first (room).
func (r *Member[S]) begin(ctx context.Context, f *flow[S], s started) error {
	f.inflight = append(f.inflight, s)
	f.inflightWeight += s.weight()
	return r.reap(ctx, f, false)
}

// room waits, oldest first, until a call of weight n fits within
// MaxWritesInFlight.
func (r *Member[S]) room(ctx context.Context, f *flow[S], n int) error {
	for len(f.inflight) > 0 && f.inflightWeight+n > r.e.cfg.MaxWritesInFlight {
		if err := r.reapOne(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

// drain waits for everything f has in flight, reaping it in order.
func (r *Member[S]) drain(ctx context.Context, f *flow[S]) error {
	for len(f.inflight) > 0 {
		if err := r.reapOne(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

// reap reaps f's calls that are done, in order, up to the first that is
// not (wait: waits for every one).
func (r *Member[S]) reap(ctx context.Context, f *flow[S], wait bool) error {
	for len(f.inflight) > 0 {
		if !wait {
			select {
			case <-f.inflight[0].pending.Done():
			default:
				return nil
			}
		}
		if err := r.reapOne(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

// reapOne waits for f's oldest call in flight and hands its outcome to
// the core, the cache and the status. A failure is returned, for the
// output mode to classify; whatever else is in flight stays, for the
// flow's teardown.
func (r *Member[S]) reapOne(ctx context.Context, f *flow[S]) error {
	s := f.inflight[0]
	errs := s.pending.Wait(ctx)
	f.inflight = f.inflight[1:]
	f.inflightWeight -= s.weight()
	if len(f.inflight) == 0 {
		f.inflight = nil
	}
	cp, cpOK := s.pending.Position()
	switch s.kind {
	case startedWrite:
		var first error
		for i, snap := range s.snaps {
			if err := f.core.WriteDone(snap.Key, errs[i]); err != nil && first == nil {
				first = fromCore(err)
			}
			if errs[i] != nil && first == nil {
				first = errs[i]
			}
		}
		if err := r.settledAt(f, cp, cpOK); err != nil && first == nil {
			first = err
		}
		r.e.cfg.obs().flushed(len(s.snaps), time.Since(s.begin))
		return first
	case startedCommit:
		if errs[0] != nil {
			return errs[0]
		}
		if err := r.settledAt(f, cp, cpOK); err != nil { // the commit's marker moved the checkpoint
			return err
		}
		r.status.committed(f.tp, f.part.CommittedOffset(), f.core.Consumed()-s.offset)
		return nil
	default: // startedBatch
		if err := r.committedBatchAt(f, s.snaps, refusedByStore(errs[0], s.origins), cp, cpOK); err != nil {
			return err
		}
		for _, report := range s.letters {
			report()
		}
		r.e.cfg.obs().flushed(len(s.snaps), time.Since(s.begin))
		r.status.committed(f.tp, f.part.CommittedOffset(), f.core.Consumed()-s.offset)
		return nil
	}
}

// abandon waits for what f still has in flight once its partition is
// closed (which fails what is queued and ends the transaction in flight),
// without telling the core: the flow is gone. No goroutine of the store
// outlives the flow.
func (r *Member[S]) abandon(f *flow[S]) {
	for _, s := range f.inflight {
		s.pending.Wait(context.Background())
	}
	f.inflight, f.inflightWeight = nil, 0
}
