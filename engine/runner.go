package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/snapfence/snapfence/engine/core"
	"github.com/snapfence/snapfence/store"
)

// Source is the group consumer a Runner drives: franz-go against Kafka
// (NewKafkaSource), or a member of a simulated cluster (NewSimSource).
type Source interface {
	// Poll polls once, waiting at most wait for records, and returns the
	// records fetched. Rebalance
	// callbacks reach the Handler the source was made with: inside Poll
	// (the sim) or between a PollDone and the next Poll (franz-go).
	Poll(ctx context.Context, wait time.Duration) ([]Record, error)
	// PollDone ends the processing of a poll; rebalances may run now.
	PollDone()
	// Identity is the group identity the client reports now.
	Identity() store.GroupIdentity
	// CommittedOffset reads the group's committed offset of tp, or the
	// offset the input would reset to if none is committed.
	CommittedOffset(ctx context.Context, tp store.TopicPartition) (int64, error)
	// Seek makes the next fetch of tp start at offset.
	Seek(tp store.TopicPartition, offset int64)
	// Pause stops fetching tp; Resume starts again.
	Pause(tp store.TopicPartition)
	Resume(tp store.TopicPartition)
	// Now is the source's clock (virtual for the sim).
	Now() time.Time
	// Close leaves the group (running the revoke callbacks).
	Close(ctx context.Context) error
}

// Handler receives a source's rebalance callbacks. Each returns only when
// the engine is done with the partitions: a revoked partition's flow is gone
// when Revoked returns.
type Handler interface {
	Assigned(ctx context.Context, tps []store.TopicPartition)
	Revoked(ctx context.Context, tps []store.TopicPartition)
	Lost(ctx context.Context, tps []store.TopicPartition)
}

// Runner runs an engine over one source: one group member. Step it, or
// let Engine.Run loop it.
type Runner[S any] struct {
	e   *Engine[S]
	src Source
	// published is the identity read after the last poll, once valid: the
	// store reads it for every transaction.
	published atomic.Pointer[store.GroupIdentity]

	// ready is closed once src is set: a franz-go client joins its group,
	// and may call the handler, before its constructor returns.
	ready chan struct{}

	mu       chanMutex
	flows    map[store.TopicPartition]*flow[S]
	assigned map[store.TopicPartition]bool
	restart  map[store.TopicPartition]bool
	// due are the restarts the poll in progress makes due once it
	// returns. A rebalance callback during that poll deletes its
	// partitions from it: what the poll revoked, lost or assigned anew is
	// no longer the failed flow that was to restart (a poll can last
	// minutes, a recovery inside it waiting; the member may have been
	// evicted and rejoined meanwhile).
	due map[store.TopicPartition]bool
	// unstable are the assigned partitions whose acquisition waits for
	// their committed offset to be released by a transaction the takeover
	// did not end. They are retried after a poll, with a growing backoff,
	// while the other partitions fold and commit; past
	// Config.UnstableOffsetTimeout the wait ends in fatal.
	unstable map[store.TopicPartition]*unstableWait
	// fatal is an error that ends the runner: Step returns it from now on.
	fatal error
	errs  []error

	lastPersist, lastCommit, lastTick time.Time
}

type flow[S any] struct {
	tp   store.TopicPartition
	part store.Partition
	core *core.Core[S]
	// pending are the outputs of the open exactly-once batch, in fold
	// order, and pendingBytes their keys' and values' size. They leave
	// memory only inside the batch's transaction, or with the flow.
	pending      []Output
	pendingBytes int
	// gone is set when the flow is torn down: records of its partition
	// later in the same poll are not folded.
	gone bool
}

// NewRunner returns a runner over the source that newSource makes with the
// runner as its handler.
func (e *Engine[S]) NewRunner(newSource func(Handler) (Source, error)) (*Runner[S], error) {
	r := &Runner[S]{e: e, flows: map[store.TopicPartition]*flow[S]{},
		assigned: map[store.TopicPartition]bool{}, restart: map[store.TopicPartition]bool{},
		unstable: map[store.TopicPartition]*unstableWait{}, ready: make(chan struct{}),
		mu: make(chanMutex, 1)}
	src, err := newSource(r)
	if err != nil {
		return nil, err
	}
	r.src = src
	close(r.ready)
	now := src.Now()
	r.lastPersist, r.lastCommit, r.lastTick = now, now, now
	return r, nil
}

// CurrentIdentity implements store.IdentityReader: the identity published
// after the last poll.
func (r *Runner[S]) CurrentIdentity() store.GroupIdentity {
	if id := r.published.Load(); id != nil {
		return *id
	}
	return store.GroupIdentity{Generation: -1}
}

// publish records the client's identity after a poll. An identity that is
// not valid yet is never published.
func (r *Runner[S]) publish() {
	if id := r.src.Identity(); id.Valid() {
		r.published.Store(&id)
	}
}

// Errors returns the errors that stopped flows so far.
func (r *Runner[S]) Errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// Step polls once, folds what came, emits the outputs, and runs the
// flushes, commits and ticks that are due. An error that ends the runner
// (a partition whose acquisition could not finish, an
// *store.UnstableOffsetError) is returned by this and every later Step.
func (r *Runner[S]) Step(ctx context.Context) error {
	if err := r.fatalErr(); err != nil {
		return err
	}
	err := r.step(ctx)
	if fatal := r.fatalErr(); fatal != nil {
		return fatal
	}
	return err
}

func (r *Runner[S]) fatalErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fatal
}

func (r *Runner[S]) step(ctx context.Context) error {
	// Restarts scheduled before this poll are due after it, and only for
	// partitions the poll leaves assigned: the poll may tell the member it
	// lost them. A member that restarted a flow without asking (a zombie
	// back from a pause, its recovery just failed) would take the
	// partition's producer from its new owner. Restarts scheduled during
	// the poll wait for the next one, and the poll's callbacks void the
	// due restarts of the partitions they touch (r.due).
	r.mu.Lock()
	r.due = r.restart
	r.restart = map[store.TopicPartition]bool{}
	r.mu.Unlock()
	recs, pollErr := r.src.Poll(ctx, max(r.nextDue().Sub(r.src.Now()), time.Millisecond))
	r.publish()
	defer r.src.PollDone()
	r.mu.Lock()
	defer r.mu.Unlock()
	due := r.due
	r.due = nil
	if err := ctx.Err(); err != nil || (pollErr != nil && len(recs) == 0) {
		// A dead context: the polled records are not folded, so nothing
		// commits them.
		if err == nil {
			err = pollErr
		}
		for tp, again := range due {
			if _, newer := r.restart[tp]; !newer {
				r.restart[tp] = again
			}
		}
		return err
	}
	// A fetch error comes with the records of the partitions that fetched
	// well, and the client has moved past them: they are folded (dropped,
	// they would be lost, as the next record's offset commits past them),
	// and the error is returned once the step is done.
	for _, tp := range sortedKeys(due) { // acquisitions reach the store: in a fixed order
		if due[tp] && r.assigned[tp] && r.flows[tp] == nil {
			if w := r.unstable[tp]; w != nil && r.src.Now().Before(w.retry) {
				r.restart[tp] = true // not yet: its backoff runs
				continue
			}
			r.startFlow(ctx, tp, true)
		}
	}
	var outs []Output
	var f *flow[S]
	folded := 0
	eos := r.e.cfg.ExactlyOnce
	for i := range recs {
		rec := &recs[i]
		if f == nil || f.tp.Partition != rec.Partition || f.tp.Topic != rec.Topic {
			// a poll's records come in runs of one partition
			if f != nil {
				r.e.cfg.Metrics.addFolded(f.tp.Topic, folded)
			}
			f, folded = r.flows[store.TopicPartition{Topic: rec.Topic, Partition: rec.Partition}], 0
			if f == nil {
				continue
			}
		}
		if f.core.Stopped() != nil || f.gone {
			continue // stopped during this poll: it restarts from the committed state
		}
		o, err := f.core.Fold(rec)
		if err != nil {
			r.stopFlow(f, err)
			continue
		}
		folded++
		if !eos {
			outs = append(outs, o...)
			continue
		}
		f.buffer(o)
		if f.full(r.e.cfg) {
			r.sealBatch(ctx, f)
		}
	}
	if f != nil {
		r.e.cfg.Metrics.addFolded(f.tp.Topic, folded)
	}
	if len(outs) > 0 && r.e.cfg.Emit != nil {
		if err := r.e.cfg.Emit(ctx, outs); err != nil {
			// The outputs are lost with the folds that made them: stop
			// those flows, so nothing commits past them, and restart
			// them from the committed state, which replays the records.
			err = fmt.Errorf("engine: emitting outputs: %w", err)
			for _, rec := range recs {
				tp := store.TopicPartition{Topic: rec.Topic, Partition: rec.Partition}
				if f := r.flows[tp]; f != nil {
					r.stopFlow(f, err)
					r.restart[tp] = true
				}
			}
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err // no flush with a dead context; the revoke flushes
	}
	now := r.src.Now()
	if r.e.cfg.Tick != nil && r.e.cfg.TickInterval > 0 && now.Sub(r.lastTick) >= r.e.cfg.TickInterval {
		r.lastTick = now
		r.tickAll(ctx, now)
	}
	if eos {
		if now.Sub(r.lastCommit) >= r.e.cfg.CommitInterval {
			r.lastCommit = now
			for _, f := range r.sortedFlows() {
				r.sealBatch(ctx, f)
			}
		}
		return pollErr
	}
	if now.Sub(r.lastPersist) >= r.e.cfg.PersistInterval {
		r.lastPersist = now
		r.forEachFlow(func(f *flow[S]) error { return r.flush(ctx, f) })
	}
	if now.Sub(r.lastCommit) >= r.e.cfg.CommitInterval {
		r.lastCommit = now
		r.forEachFlow(func(f *flow[S]) error { return r.flushAndCommit(ctx, f) })
	}
	return pollErr
}

func (r *Runner[S]) tickAll(ctx context.Context, now time.Time) {
	var outs []Output
	for _, f := range r.sortedFlows() { // outputs in a fixed order
		o, err := f.core.Tick(now.UnixMilli())
		if err != nil {
			r.stopFlow(f, err)
			continue
		}
		if r.e.cfg.ExactlyOnce {
			f.buffer(o)
			continue
		}
		outs = append(outs, o...)
	}
	if len(outs) > 0 && r.e.cfg.Emit != nil {
		if err := r.e.cfg.Emit(ctx, outs); err != nil {
			r.errs = append(r.errs, fmt.Errorf("engine: emitting tick outputs: %w", err))
		}
	}
}

// forEachFlow runs fn on every flow, in partition order (fn writes to the
// store); a fence stops the flow loudly and schedules its restart from the
// committed state.
func (r *Runner[S]) forEachFlow(fn func(*flow[S]) error) {
	for _, f := range r.sortedFlows() {
		err := fn(f)
		switch {
		case err == nil:
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			// Interrupted, not failed: the keys stay dirty for the next
			// flush (the revoke's, on shutdown).
		default:
			r.stopFlow(f, err)
			if retriable(err) {
				r.restart[f.tp] = true
			}
		}
	}
}

// flush writes every dirty key of f, a batch at a time, and awaits each
// batch (the store group-commits its writes).
//
// A batch goes to the store in one WriteBatch call: its writes join the
// group commit's queue in the core's order (by key) with none between
// them, so which writes share a transaction, and their order in the log,
// are the same on every run. That is what makes a run over the simulated
// cluster a function of its seed and its calls.
func (r *Runner[S]) flush(ctx context.Context, f *flow[S]) error {
	start := time.Now() // metrics only
	total := 0
	defer func() {
		if total > 0 {
			r.e.cfg.Metrics.flushed(total, time.Since(start))
		}
	}()
	for {
		snaps, err := f.core.Flush(r.e.cfg.FlushBatch)
		if err != nil || len(snaps) == 0 {
			return err
		}
		total += len(snaps)
		errs := f.part.WriteBatch(ctx, snaps)
		var first error
		for i, s := range snaps {
			if err := f.core.WriteDone(s.Key, errs[i]); err != nil && first == nil {
				first = err
			}
			if errs[i] != nil && first == nil {
				first = errs[i]
			}
		}
		if first != nil {
			return first
		}
	}
}

// buffer adds a fold's or a tick's outputs to the open exactly-once batch.
func (f *flow[S]) buffer(outs []Output) {
	for _, o := range outs {
		f.pendingBytes += len(o.Key) + len(o.Value)
	}
	f.pending = append(f.pending, outs...)
}

// full reports whether the open exactly-once batch reached a cap.
func (f *flow[S]) full(cfg Config[S]) bool {
	return len(f.pending)+f.core.DirtyKeys() >= cfg.MaxTransactionRecords || f.pendingBytes >= cfg.MaxTransactionBytes
}

// sealBatch commits f's open exactly-once batch; if that fails, for any
// reason, f is rewound: stopped now, its cache dropped, and restarted from
// the committed state after the next poll (if the member still owns it).
// Called with r.mu held.
func (r *Runner[S]) sealBatch(ctx context.Context, f *flow[S]) {
	if err := r.commitBatch(ctx, f); err != nil {
		r.stopFlow(f, fmt.Errorf("engine: exactly-once batch of %s failed; rewinding to the committed state: %w", f.tp, err))
		r.restart[f.tp] = retriable(err)
	}
}

// commitBatch writes f's open exactly-once batch as one transaction: the
// snapshot of every dirty key, the outputs folded since the last batch
// and the commit of the offset after the last record folded. Every dirty
// key is in the batch, so that offset covers the whole batch.
//
// On error the batch's outcome is unknown to the engine (an EndTxn may
// time out after the commit landed), and its outputs stay in f.pending:
// the caller must rewind f, never send them again.
func (r *Runner[S]) commitBatch(ctx context.Context, f *flow[S]) error {
	if err := f.core.Stopped(); err != nil {
		return err
	}
	offset := f.core.Consumed()
	if !f.core.Dirty() && len(f.pending) == 0 && offset <= f.part.CommittedOffset() {
		return nil // nothing to commit
	}
	start := time.Now() // metrics only
	snaps, err := f.core.Flush(0)
	if err != nil {
		return err
	}
	// engine.New refuses ExactlyOnce over a store that is not
	// Transactional, so ErrNotTransactional here means a store whose Mode
	// does not match its partitions: say so. It fails again on replay
	// (retriable), so the partition stays stopped.
	err = f.part.CommitBatch(ctx, store.Batch{Snapshots: snaps, Outputs: f.pending, Offset: offset})
	if errors.Is(err, store.ErrNotTransactional) {
		err = fmt.Errorf("engine: %s: ExactlyOnce needs a Transactional store: %w", f.tp, err)
	}
	for _, s := range snaps {
		if werr := f.core.WriteDone(s.Key, err); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	f.pending, f.pendingBytes = nil, 0
	r.e.cfg.Metrics.flushed(len(snaps), time.Since(start))
	r.e.cfg.Metrics.lag(f.tp, 0)
	return nil
}

// flushAndCommit writes every dirty key of f, then commits its
// committable offset. Under ExactlyOnce it commits the open batch.
func (r *Runner[S]) flushAndCommit(ctx context.Context, f *flow[S]) error {
	if r.e.cfg.ExactlyOnce {
		return r.commitBatch(ctx, f)
	}
	if err := r.flush(ctx, f); err != nil {
		return err
	}
	return r.commit(ctx, f)
}

func (r *Runner[S]) commit(ctx context.Context, f *flow[S]) error {
	c := f.core.Committable()
	if err := f.part.Commit(ctx, c); err != nil {
		return err
	}
	r.e.cfg.Metrics.lag(f.tp, f.core.Consumed()-c)
	return nil
}

// nextDue is when the next flush, commit or tick is due: a poll waits no
// longer than that.
func (r *Runner[S]) nextDue() time.Time {
	due := r.lastCommit.Add(r.e.cfg.CommitInterval)
	if p := r.lastPersist.Add(r.e.cfg.PersistInterval); p.Before(due) && !r.e.cfg.ExactlyOnce {
		due = p
	}
	if r.e.cfg.Tick != nil && r.e.cfg.TickInterval > 0 {
		if t := r.lastTick.Add(r.e.cfg.TickInterval); t.Before(due) {
			due = t
		}
	}
	for _, w := range r.unstable {
		if w.retry.Before(due) {
			due = w.retry
		}
	}
	return due
}

// startFlow acquires tp's store (the takeover), recovers its snapshots
// into the cache and, when restarting a flow (seek), positions the input at
// the committed offset; on assignment the consumer starts there itself.
// Called with r.mu held.
func (r *Runner[S]) startFlow(ctx context.Context, tp store.TopicPartition, seek bool) {
	start := time.Now()
	if part := r.acquire(ctx, tp); part != nil {
		r.recoverFlow(ctx, tp, part, seek, start)
	}
}

// acquire takes tp over (the store's takeover); on failure it records the
// error, schedules a restart if one can help, and returns nil.
func (r *Runner[S]) acquire(ctx context.Context, tp store.TopicPartition) store.Partition {
	part, err := r.e.cfg.Store.Acquire(ctx, store.Acquisition{
		Input: tp, Identity: r,
		ResolveAssignedOffset: func(ctx context.Context) (int64, error) { return r.src.CommittedOffset(ctx, tp) },
	})
	if errors.Is(err, store.ErrOffsetUnstable) {
		r.awaitStableOffset(tp, err)
		return nil
	}
	delete(r.unstable, tp)
	if err != nil {
		r.fail(tp, fmt.Errorf("engine: acquiring %s: %w", tp, err))
		r.restart[tp] = retriable(err)
		return nil
	}
	return part
}

// unstableWait is an acquisition waiting for its committed offset.
type unstableWait struct {
	since, retry time.Time
	backoff      time.Duration
}

// Backoff of the acquisition retries of a partition whose committed offset
// a transaction holds.
const (
	unstableFirstRetry = 100 * time.Millisecond
	unstableMaxRetry   = 5 * time.Second
)

// awaitStableOffset handles an acquisition refused because a transaction
// holds tp's committed offset. The partition stays paused and its
// acquisition is retried after a later poll, so the other partitions fold
// and commit meanwhile; the first refusal is logged at once (it names the
// transaction and the command that aborts it), and a wait longer than
// UnstableOffsetTimeout ends the runner with the typed error.
func (r *Runner[S]) awaitStableOffset(tp store.TopicPartition, err error) {
	now := r.src.Now()
	r.src.Pause(tp)
	w := r.unstable[tp]
	if w == nil {
		w = &unstableWait{since: now, backoff: unstableFirstRetry}
		r.unstable[tp] = w
		r.e.log.Warn("partition waits: a transaction its takeover did not end holds its committed offset; retrying",
			"input", tp.String(), "timeout", r.e.cfg.UnstableOffsetTimeout, "err", err)
	}
	if waited := now.Sub(w.since); waited >= r.e.cfg.UnstableOffsetTimeout {
		delete(r.unstable, tp)
		if ue, ok := errors.AsType[*store.UnstableOffsetError](err); ok {
			e := *ue
			e.Waited = waited
			err = &e
		} else {
			err = fmt.Errorf("engine: %s: its committed offset has been held by an open transaction for %s: %w", tp, waited, err)
		}
		r.fail(tp, err)
		r.fatal = err
		return
	}
	w.retry = now.Add(w.backoff)
	w.backoff = min(2*w.backoff, unstableMaxRetry)
	r.restart[tp] = true
}

// recoverFlow recovers an acquired partition's state and starts its flow.
func (r *Runner[S]) recoverFlow(ctx context.Context, tp store.TopicPartition, part store.Partition, seek bool, start time.Time) {
	log := r.e.log.With("input", tp.String())
	assigned := part.CommittedOffset()
	c, err := core.New(core.Config[S]{Input: tp, Fold: r.e.coreFold(), Tick: r.e.coreTick(), Codec: r.e.cfg.Codec,
		Assigned: assigned, HotKeys: r.e.cfg.HotKeys}, r.e.kv)
	if err != nil {
		_ = part.Close()
		r.fail(tp, err)
		return
	}
	n := 0
	for s, err := range part.Recover(ctx) {
		if err == nil && !s.Tombstone {
			if _, derr := r.e.cfg.Codec.Decode(s.Value); derr != nil {
				err = &RecoveredStateError{Input: tp, Key: s.Key, Offset: s.Offset, Err: derr}
			}
		}
		if err == nil {
			err = c.Recovered(s)
		}
		if err != nil {
			_ = c.Drop()
			_ = part.Close()
			r.fail(tp, fmt.Errorf("engine: recovering %s: %w", tp, err))
			r.restart[tp] = retriable(err)
			return
		}
		n++
	}
	r.flows[tp] = &flow[S]{tp: tp, part: part, core: c}
	if seek {
		r.src.Seek(tp, assigned)
	}
	r.src.Resume(tp)
	r.e.cfg.Metrics.recovered(n, time.Since(start))
	log.Info("partition recovered", "snapshots", n, "keys", c.Keys(), "assigned_offset", assigned,
		"generation", r.src.Identity().Generation)
}

// retriable reports whether a flow stopped by err may be started again
// from the committed state. A record or state that cannot be read, or a
// fold that fails on a record, fails again on replay: those partitions stay
// stopped until an operator acts.
//
// So does a snapshot or output the store refuses before sending it (too
// large, a reserved key, an output without a topic or for the snapshot
// topic): the fold makes it again on replay.
func retriable(err error) bool {
	var fe *core.FoldError
	var se *core.StateError
	for _, again := range []error{store.ErrCorruptRecord, store.ErrValueTooLarge, store.ErrReservedKey, store.ErrInvalidOutput, store.ErrNotTransactional} {
		if errors.Is(err, again) {
			return false
		}
	}
	return !errors.As(err, &fe) && !errors.As(err, &se)
}

func (r *Runner[S]) fail(tp store.TopicPartition, err error) {
	r.errs = append(r.errs, err)
	r.src.Pause(tp)
	r.e.log.Error("partition stopped", "input", tp.String(), "err", err)
}

// stopFlow tears a flow down after an error, leaving nothing in the cache.
func (r *Runner[S]) stopFlow(f *flow[S], err error) {
	if errors.Is(err, store.ErrFenced) {
		r.e.cfg.Metrics.fenced()
	}
	r.teardown(f)
	r.fail(f.tp, err)
}

func (r *Runner[S]) teardown(f *flow[S]) {
	if err := f.core.Drop(); err != nil {
		r.e.log.Error("dropping the cache", "input", f.tp.String(), "err", err)
	}
	_ = f.part.Close()
	delete(r.flows, f.tp)
	f.gone = true
}

// Assigned implements Handler.
func (r *Runner[S]) Assigned(ctx context.Context, tps []store.TopicPartition) {
	<-r.ready
	r.mu.Lock()
	defer r.mu.Unlock()
	// Take every partition over before recovering any. A recovery can
	// wait (for an open transaction), and a member evicted meanwhile must
	// not, once it goes on, take a later partition's producer from that
	// partition's new owner: the takeovers all happen while the
	// assignment is fresh.
	parts := make([]store.Partition, len(tps))
	for i, tp := range tps {
		r.assigned[tp] = true
		delete(r.due, tp)
		if r.flows[tp] == nil {
			parts[i] = r.acquire(ctx, tp)
		}
	}
	for i, tp := range tps {
		if parts[i] != nil {
			r.recoverFlow(ctx, tp, parts[i], false, time.Now())
		}
	}
}

// Revoked implements Handler: flush and commit (unless NoFlushOnRevoke),
// then tear the flow down before returning. A fence here is logged and
// swallowed: the new owner replays.
func (r *Runner[S]) Revoked(ctx context.Context, tps []store.TopicPartition) {
	<-r.ready
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tp := range tps {
		delete(r.assigned, tp)
		delete(r.restart, tp)
		delete(r.due, tp)
		delete(r.unstable, tp)
		f := r.flows[tp]
		if f == nil {
			continue
		}
		if !r.e.cfg.NoFlushOnRevoke {
			if err := r.flushAndCommit(ctx, f); err != nil {
				if errors.Is(err, store.ErrFenced) {
					r.e.cfg.Metrics.fenced()
				}
				r.e.log.Warn("revoke-time flush failed; the new owner replays", "input", tp.String(), "err", err)
			}
		}
		r.teardown(f)
	}
}

// Lost implements Handler: the partitions may already have new owners, so
// nothing is flushed.
func (r *Runner[S]) Lost(ctx context.Context, tps []store.TopicPartition) {
	<-r.ready
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tp := range tps {
		delete(r.assigned, tp)
		delete(r.restart, tp)
		delete(r.due, tp)
		delete(r.unstable, tp)
		if f := r.flows[tp]; f != nil {
			r.teardown(f)
		}
	}
}

// Flows lists the partitions with a running flow, in order.
func (r *Runner[S]) Flows() []store.TopicPartition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return sortedKeys(r.flows)
}

// State reads a key's current state in a partition's flow.
func (r *Runner[S]) State(tp store.TopicPartition, key []byte) (S, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var zero S
	f := r.flows[tp]
	if f == nil {
		return zero, false, fmt.Errorf("engine: no flow for %s", tp)
	}
	return f.core.State(key)
}

// FlushAll flushes and commits every flow now (under ExactlyOnce: commits
// every open batch, rewinding a flow whose batch fails).
func (r *Runner[S]) FlushAll(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.e.cfg.ExactlyOnce {
		for _, f := range r.sortedFlows() {
			r.sealBatch(ctx, f)
		}
		return
	}
	r.forEachFlow(func(f *flow[S]) error { return r.flushAndCommit(ctx, f) })
}

// Persist flushes every flow's dirty keys now without advancing the
// committed offset, as the persist timer does (each write still carries
// the committed offset, so it is fenced as a commit would be). Under
// ExactlyOnce snapshots are written only with their batch, so it commits
// the open batches, as FlushAll does.
func (r *Runner[S]) Persist(ctx context.Context) {
	if r.e.cfg.ExactlyOnce {
		r.FlushAll(ctx)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forEachFlow(func(f *flow[S]) error { return r.flush(ctx, f) })
}

// Close leaves the group; the revoke callbacks flush and tear down.
func (r *Runner[S]) Close(ctx context.Context) error {
	err := r.src.Close(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.sortedFlows() {
		r.teardown(f)
	}
	return err
}

// Source is the runner's source.
func (r *Runner[S]) Source() Source { return r.src }

// sortedFlows is the flows in partition order. Whatever the runner does to
// every flow reaches the store, the cluster's history or the outputs in
// the order it does it, so it never follows the map's random order: the
// same calls on the simulated cluster must give the same run.
func (r *Runner[S]) sortedFlows() []*flow[S] {
	out := make([]*flow[S], 0, len(r.flows))
	for _, tp := range sortedKeys(r.flows) {
		out = append(out, r.flows[tp])
	}
	return out
}

// sortedKeys is m's partitions by topic, then partition.
func sortedKeys[V any](m map[store.TopicPartition]V) []store.TopicPartition {
	return slices.SortedFunc(maps.Keys(m), compareTP)
}

func compareTP(a, b store.TopicPartition) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// chanMutex is a mutex made of a channel of one slot. The runner's lock is
// held through a rebalance callback (a recovery can take a while): a step
// waiting for it must count as blocked in a testing/synctest bubble, so
// that virtual time moves and the recovery can finish. A goroutine waiting
// on a sync.Mutex does not count, and the bubble would hang; one waiting
// to send on a channel of the bubble does.
type chanMutex chan struct{}

func (m chanMutex) Lock()   { m <- struct{}{} }
func (m chanMutex) Unlock() { <-m }
