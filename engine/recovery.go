package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/engine/internal/schedule"
	"github.com/snapfence/snapfence/store"
)

// A new partition's takeover and recovery run off the polling goroutine
// (Source.Go), so that the partitions the member already runs keep
// folding and committing while it reads its snapshots and waits for the
// tables. The fence's order holds: the input is positioned and resumed
// only once the recovery ended and the scheduler has the flow (on the
// polling goroutine, reapRecoveries); a partition released meanwhile has
// its recovery cancelled, and the callback that released it returns only
// once that recovery has ended and let go of what it took.
//
// A recovery touches nothing of the runner the polling goroutine uses
// but the cache, the store and the status board, which are safe for
// concurrent use; what it needs of the scheduler it is handed at its
// start, and what it comes to is handed back in its outcome.

// recovery is one partition's takeover and recovery in flight.
type recovery[S any] struct {
	tp     store.TopicPartition
	begin  time.Time
	ctx    context.Context
	cancel context.CancelFunc
	// acquisition is the takeover's request, built on the polling
	// goroutine; refused are the refusals its flow fails.
	acquisition store.Acquisition
	refused     []core.Refusal
	// discard: the keys whose state does not decode are deleted (the
	// scheduler's decision, schedule.ActStart's).
	discard bool
	// restart: a restart outside a rebalance callback, whose takeover
	// waits for the coordinator to confirm the member still owns tp.
	restart bool
	// done is closed once out is set.
	done chan struct{}
	out  recoveryOutcome[S]
}

// recoveryOutcome is what a recovery came to: a takeover that failed
// (acquireErr), a recovery that failed (err, in cause: what it took is
// released), or a flow.
type recoveryOutcome[S any] struct {
	acquireErr error
	cause      schedule.Cause
	err        error
	flow       *flow[S]
	assigned   int64
	// undecoded are the keys whose recovered state does not decode, to
	// discard (Config.UndecodableState).
	undecoded []*RecoveredStateError
	snapshots int
	delta     bool
	reason    string
	cp        store.Checkpoint
	took      time.Duration
}

// start carries out schedule.ActStart: it hands tps' takeovers and recoveries to
// the source's background (Source.Go), and reaps those that ended by the
// time it returns (on the simulated cluster, all of them).
func (r *Member[S]) start(ctx context.Context, tps []store.TopicPartition, discard, restart bool) {
	begin := r.src.Now()
	group, outputs := r.src.Identity().Group, r.mode.outputTopics()
	rcs := make([]*recovery[S], len(tps))
	for i, tp := range tps {
		// ctx's values and end (the simulated cluster's step, the
		// group member's life: franz-go's callbacks get the member's
		// context), and the runner's life.
		rctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(r.life, cancel)
		rcs[i] = &recovery[S]{tp: tp, begin: begin, ctx: rctx, cancel: func() { stop(); cancel() }, done: make(chan struct{}),
			refused: r.sched.Refusals(tp), discard: discard, restart: restart,
			acquisition: store.Acquisition{
				Input: tp, Identity: identity[S]{r}, Group: group,
				ResolveAssignedOffset: func(ctx context.Context) (int64, error) { return r.src.CommittedOffset(ctx, tp) },
				Progress:              r.status.progress(tp),
				Outputs:               outputs,
			}}
		r.recoveries[tp] = rcs[i]
	}
	r.src.Go(func() { r.takeOver(rcs) })
	r.reapRecoveries(ctx)
}

// takeOver takes rcs' partitions over and recovers each one taken, each
// takeover and each recovery on a goroutine of its own (Source.Go), with
// at most maxConcurrentTakeovers takeovers at a time. A takeover is a few
// round trips to the coordinator (the transactional id's state,
// InitProducerID, the committed offset), and one may wait long for the
// abort of a predecessor's transaction: side by side, it holds up no
// other partition's takeover or recovery. The bound keeps a member
// assigned hundreds of partitions from opening as many producers at once.
// On the simulated cluster, whose Source.Go runs f at once, every
// takeover comes first, in order, then every recovery.
//
// A restart's takeover goes ahead only once the coordinator lists the
// member, by the identity its transactions will carry, as the partition's
// owner: a member that slept through its eviction and woke with a restart
// due has not heard of it at its first poll, and its takeover would fence
// the new owner's producer. Refused, the restart fails as a fence does,
// and the next poll brings the news (or, the member being the owner
// after all, the restart after it goes ahead).
func (r *Member[S]) takeOver(rcs []*recovery[S]) {
	slots := make(chan struct{}, maxConcurrentTakeovers)
	parts := make([]store.Partition, len(rcs))
	acquired := make([]chan struct{}, len(rcs))
	for i, rc := range rcs {
		acquired[i] = make(chan struct{})
		r.src.Go(func() {
			defer close(acquired[i])
			slots <- struct{}{}
			defer func() { <-slots }()
			parts[i] = r.acquire(rc)
		})
	}
	for i, rc := range rcs {
		r.src.Go(func() {
			<-acquired[i]
			if parts[i] != nil {
				defer close(rc.done)
				r.recover(rc, parts[i])
			}
		})
	}
}

// maxConcurrentTakeovers bounds the takeovers a member runs at once.
const maxConcurrentTakeovers = 16

// acquire is rc's takeover: the owner's confirmation for a restart, then
// the store's Acquire. A failure ends rc (done) and returns nil.
func (r *Member[S]) acquire(rc *recovery[S]) store.Partition {
	err := context.Cause(rc.ctx)
	if err == nil && rc.restart {
		err = r.src.ConfirmOwner(rc.ctx, rc.tp, rc.acquisition.Identity.CurrentIdentity())
	}
	var part store.Partition
	if err == nil {
		part, err = r.e.cfg.Store.Acquire(rc.ctx, rc.acquisition)
	}
	if err != nil {
		rc.out.acquireErr = err
		close(rc.done)
		return nil
	}
	return part
}

// recover recovers an acquired partition's state into a new flow, from
// the cache's checkpoint (a delta) when there is a usable one, in full
// otherwise, and waits for the tables. A failure releases part.
func (r *Member[S]) recover(rc *recovery[S], part store.Partition) {
	out := &rc.out
	out.assigned = part.CommittedOffset()
	c, err := core.New(core.Config[S, Output]{Input: rc.tp, Fold: r.e.coreFold(), Tick: r.e.coreTick(), Timer: r.e.coreTimer(), Codec: r.e.cfg.Codec,
		Assigned: out.assigned, HotKeys: r.e.cfg.HotKeys, Warm: true, Refused: rc.refused}, r.e.kv)
	if err != nil {
		_ = part.Close()
		out.cause, out.err = schedule.CauseSetup, fromCore(err)
		return
	}
	f := &flow[S]{tp: rc.tp, part: part, core: c}
	err = r.readSnapshots(rc.ctx, f, out, rc.discard)
	if err == nil {
		err = r.discardUndecodable(f, out, rc.discard)
	}
	if err == nil {
		err = r.durable(f)
	}
	if err == nil {
		// The tables the fold looks up first: a partition is folded
		// only once each has caught up (Config.Tables).
		err = r.e.awaitTables(rc.ctx, rc.tp)
	}
	out.took = r.src.Now().Sub(rc.begin)
	if err != nil {
		_ = c.DropUncommitted()
		_ = part.Close()
		out.cause, out.err = schedule.CauseRecover, fmt.Errorf("engine: recovering %s: %w", rc.tp, err)
		return
	}
	out.flow = f
}

// readSnapshots reads f's partition's snapshots into its core: from the
// checkpoint when there is a usable one, and in full, from an empty
// cache, when there is none or the store refuses it. It notes in out
// which keys do not decode.
func (r *Member[S]) readSnapshots(ctx context.Context, f *flow[S], out *recoveryOutcome[S], discard bool) error {
	cp, delta, reason := r.recoveryBase(f, discard)
	out.cp, out.delta, out.reason = cp, delta, reason
	if !delta {
		if err := f.core.Drop(); err != nil { // a full recovery starts empty
			return fromCore(err)
		}
	}
	bad := undecodable{} // the keys whose latest snapshot does not decode
	for {
		var from *store.Checkpoint
		if out.delta {
			from = &out.cp
		}
		refused, err := r.readInto(f, f.part.Recover(ctx, from), bad, out)
		if err != nil || refused == nil {
			// Only now is it known which snapshot each key recovers from:
			// one that did not decode may have been superseded by a
			// later one.
			out.undecoded = bad.sorted()
			return err
		}
		// The store refuses the checkpoint, before reading or after (a
		// transaction straddling it was aborted while the read waited):
		// recover in full, from an empty cache.
		r.e.log.Info("the cache's checkpoint is not usable; recovering in full", "input", f.tp.String(), "reason", refused.Reason, "detail", refused.Detail)
		out.delta, out.reason, out.snapshots = false, refused.Reason, 0
		clear(bad)
		if err := f.core.Drop(); err != nil {
			return fromCore(err)
		}
	}
}

// readInto folds snaps into f's core, counting them in out; refused is
// the store's refusal of a delta's checkpoint, if it refused it.
func (r *Member[S]) readInto(f *flow[S], snaps iter.Seq2[store.Snapshot, error], bad undecodable, out *recoveryOutcome[S]) (refused *store.CheckpointError, err error) {
	for s, err := range snaps {
		if ce, ok := errors.AsType[*store.CheckpointError](err); ok && out.delta {
			return ce, nil
		}
		if err == nil {
			err = fromCore(recoverSnapshot(f, bad, r.e.cfg.Codec, s, r.e.cfg.Poison == DeadLetterPoison))
		}
		if err != nil {
			return nil, err
		}
		out.snapshots++
	}
	return nil, nil
}

// discardUndecodable deletes the keys whose recovered state does not
// decode under DiscardUndecodableState; otherwise the first of them fails
// the recovery, before the checkpoint and the positioning: nothing is
// deleted.
func (r *Member[S]) discardUndecodable(f *flow[S], out *recoveryOutcome[S], discard bool) error {
	if len(out.undecoded) > 0 && !discard {
		se := out.undecoded[0]
		se.Keys = len(out.undecoded)
		r.e.cfg.obs().undecodableStates(f.tp, "stopped", len(out.undecoded))
		return se
	}
	for _, se := range out.undecoded {
		if err := f.core.Recovered(store.Snapshot{Key: se.Key, Offset: se.Offset, Tombstone: true}); err != nil {
			return fromCore(err)
		}
		if err := f.core.Discard(se.Key); err != nil {
			return fromCore(err)
		}
	}
	return nil
}

// reapRecoveries hands the outcomes of the recoveries that ended to the
// scheduler, in partition order, on the polling goroutine.
func (r *Member[S]) reapRecoveries(ctx context.Context) {
	for _, tp := range sortedKeys(r.recoveries) {
		rc := r.recoveries[tp]
		if rc == nil {
			continue // cancelled by an action of an earlier one
		}
		select {
		case <-rc.done:
		default:
			continue
		}
		delete(r.recoveries, tp)
		rc.cancel()
		r.reapRecovery(ctx, rc)
	}
}

// reapRecovery reports rc's outcome to the scheduler and, if the flow
// runs, opens it to queries and positions the input at the committed
// offset the takeover resolved (also at assignment: the Kafka source
// fetches a partition only from where it is told).
func (r *Member[S]) reapRecovery(ctx context.Context, rc *recovery[S]) {
	tp, out := rc.tp, &rc.out
	proceed, acts := r.sched.Acquired(tp, out.acquireErr, r.src.Now())
	r.do(ctx, acts)
	switch {
	case !proceed:
		r.discardRecovery(out) // failed, or released meanwhile
		return
	case out.err != nil:
		r.do(ctx, r.sched.Failed(tp, out.cause, out.err, r.src.Now()))
		return
	}
	f := out.flow
	if acts := r.sched.Recovered(tp, f, out.assigned, r.src.Now()); acts != nil {
		r.do(ctx, acts) // released meanwhile
		return
	}
	r.queries.open(tp, f.core)
	r.discarded(f, out.undecoded)
	r.src.Seek(tp, out.assigned)
	r.src.Resume(tp)
	r.logRecovered(tp, out)
}

// logRecovered counts and logs a recovery that ended in a running flow.
func (r *Member[S]) logRecovered(tp store.TopicPartition, out *recoveryOutcome[S]) {
	kind := "delta"
	if !out.delta {
		kind = "full"
	}
	r.e.cfg.obs().recovered(tp, out.snapshots, out.took, kind, out.reason)
	r.status.recovered(tp, out.assigned, out.snapshots, out.took)
	attrs := []any{"input", tp.String(), "recovery", kind}
	if out.delta {
		attrs = append(attrs, "checkpoint_offset", out.cp.Offset)
	} else {
		attrs = append(attrs, "full_reason", out.reason)
	}
	// No count of the keys: it scans the partition's whole cache.
	r.e.log.Info("partition recovered", append(attrs, "snapshots", out.snapshots,
		"assigned_offset", out.assigned, "generation", r.src.Identity().Generation)...)
}

// cancelRecovery carries out schedule.ActCancel: tp's recovery ends, and what it
// took is released, before the callback that released tp returns.
func (r *Member[S]) cancelRecovery(tp store.TopicPartition) {
	rc := r.recoveries[tp]
	if rc == nil {
		return
	}
	delete(r.recoveries, tp)
	rc.cancel()
	<-rc.done
	r.discardRecovery(&rc.out)
}

// discardRecovery releases the flow a recovery made, if it made one.
func (r *Member[S]) discardRecovery(out *recoveryOutcome[S]) {
	if f := out.flow; f != nil {
		out.flow = nil
		if err := f.core.DropUncommitted(); err != nil {
			r.e.log.Error("dropping the cache", "input", f.tp.String(), "err", err)
		}
		_ = f.part.Close()
	}
}

// recovering reports whether a recovery is in flight.
func (r *Member[S]) recovering() bool { return len(r.recoveries) > 0 }

// Settle waits until the takeovers and recoveries in flight have ended,
// and hands their outcomes to the scheduler as the next Step would: their
// partitions run (or wait, or stop) when it returns. It is for harnesses
// that drive members one poll at a time and want a poll's assignment
// recovered within its step, as the simulated cluster's worlds do;
// Engine.Run never waits for a recovery. It returns ctx's error if ctx
// ends first.
func (r *Member[S]) Settle(ctx context.Context) error {
	if err := r.mu.LockContext(ctx); err != nil {
		return err
	}
	defer r.mu.Unlock()
	for _, rc := range r.recoveries {
		select {
		case <-rc.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.reapRecoveries(ctx)
	return nil
}
