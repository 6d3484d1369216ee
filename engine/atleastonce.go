package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/snapfence/snapfence/engine/internal/schedule"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// atLeastOnce is the default output mode: outputs go to Config.Emit
// (or StartEmit) after each poll (a replay emits them again), dirty keys
// are written every PersistInterval, and the committable offset is
// committed every CommitInterval, each write and commit fenced by the
// store.
//
// On a Transactional store a tombstone is written only in the
// transaction that commits the offset past it (see commitTombstones).
//
// Invariant: no snapshot write or offset commit starts while a StartEmit
// call is in flight (the runner awaits it first: Member.awaitEmit). A
// snapshot carries its key's offset, so one that landed ahead of the
// outputs of the folds it covers would let a crash lose them: the replay
// skips the folds. persist and commit check it (errEmitInFlight).
type atLeastOnce[S any] struct {
	r *Member[S]
	// outs are the outputs taken since the last emit, in fold order, and
	// from the partitions whose folds and ticks made them.
	outs []Output
	from []store.TopicPartition
	// origins are where outs came from.
	origins origins
	// letters report the dead letters among outs once they are
	// delivered.
	letters []func()
	// lastEmitted is how many outs the last emit had: the next buffer
	// starts that large (Emit may keep the slice it was given, so it is
	// not reused; growing a fresh one output by output cost ~6% of the
	// CPU of a 10,000-record poll).
	lastEmitted int
	// lastOrigins is how many origins the last emit had: the next
	// buffer's starts that large, for the same reason.
	lastOrigins int
	// inflight are StartEmit's calls in flight, oldest first; at most
	// Config.MaxEmitsInFlight.
	inflight []emitCall
}

// emitCall is a StartEmit call in flight: its wait, and the partitions
// whose outputs it carries.
type emitCall struct {
	wait    func() error
	from    []store.TopicPartition
	letters []func()
	origins origins
}

// emitFailure is a failed emit: the error, and the partitions whose
// outputs are lost with it, which the runner fails.
type emitFailure struct {
	err  error
	from []store.TopicPartition
}

func (e *emitFailure) Error() string { return e.err.Error() }
func (e *emitFailure) Unwrap() error { return e.err }

// errEmitInFlight: a write or commit was asked for with an emit in
// flight, which the runner never does (see atLeastOnce's invariant).
var errEmitInFlight = errors.New("engine: internal error: a snapshot write or commit with outputs in flight")

func (m *atLeastOnce[S]) persistInterval() time.Duration { return m.r.e.cfg.PersistInterval }

// outputTopics: none; the outputs leave through Emit, outside the store's
// transactions.
func (m *atLeastOnce[S]) outputTopics() []string { return nil }

func (m *atLeastOnce[S]) folded(f *flow[S], outs []Output, src schedule.Source) bool {
	m.take(f, outs, src)
	return false
}

func (m *atLeastOnce[S]) ticked(f *flow[S], outs []Output, src schedule.Source) { m.take(f, outs, src) }

// lettered takes a dead letter with the outputs; it is reported once its
// emit has delivered it.
func (m *atLeastOnce[S]) lettered(f *flow[S], letter Output, report func()) {
	m.take(f, []Output{letter}, letterSource)
	m.letters = append(m.letters, report)
}

func (m *atLeastOnce[S]) take(f *flow[S], outs []Output, src schedule.Source) {
	if len(outs) == 0 {
		return
	}
	if m.outs == nil {
		m.outs = make([]Output, 0, max(m.lastEmitted, len(outs)))
		m.origins = make(origins, 0, max(m.lastOrigins, 1))
	}
	m.outs = append(m.outs, outs...)
	m.origins = m.origins.add(len(m.outs), f.tp, src)
	// A poll's records come in runs of one partition: the last one is
	// almost always f's.
	if n := len(m.from); n == 0 || m.from[n-1] != f.tp {
		m.from = addPartitions(m.from, f.tp)
	}
}

// addPartitions adds to set the partitions of tps it does not have.
func addPartitions(set []store.TopicPartition, tps ...store.TopicPartition) []store.TopicPartition {
	for _, tp := range tps {
		if !slices.Contains(set, tp) {
			set = append(set, tp)
		}
	}
	return set
}

// emit hands over the outputs taken since the last emit: to Emit, which
// returns once they are delivered, or to StartEmit, whose call stays in
// flight until an await (the oldest one first, if MaxEmitsInFlight are).
// A failure is an *emitFailure.
func (m *atLeastOnce[S]) emit(ctx context.Context) error {
	if len(m.inflight) >= m.r.e.cfg.MaxEmitsInFlight {
		if err := m.awaitOldest(); err != nil {
			return err
		}
	}
	outs, from, letters, origins := m.outs, m.from, m.letters, m.origins
	m.outs, m.from, m.letters, m.origins = nil, nil, nil, nil
	if len(outs) > 0 {
		m.lastEmitted, m.lastOrigins = len(outs), len(origins)
	}
	if err := m.r.checkNewTopics(ctx, outs); err != nil {
		return &emitFailure{err: err, from: from}
	}
	cfg := &m.r.e.cfg
	switch {
	case len(outs) == 0:
	case cfg.StartEmit != nil:
		m.inflight = append(m.inflight, emitCall{wait: cfg.StartEmit(ctx, outs), from: from, letters: letters, origins: origins})
	case cfg.Emit != nil:
		begin := time.Now() // metrics only
		err := cfg.Emit(ctx, outs)
		cfg.obs().waitedForOutputs(time.Since(begin))
		if err != nil {
			return &emitFailure{err: refusedByEmit(err, origins), from: from}
		}
		reportAll(letters)
	}
	return nil
}

// await waits for every StartEmit call in flight, oldest first.
func (m *atLeastOnce[S]) await() error {
	for len(m.inflight) > 0 {
		if err := m.awaitOldest(); err != nil {
			return err
		}
	}
	return nil
}

// awaitOldest waits for the oldest StartEmit call in flight. If it
// failed, the later calls are waited for too and the outputs taken since
// are dropped, and the failure names the partitions of all of them:
// their folds changed states that the lost outputs came from.
func (m *atLeastOnce[S]) awaitOldest() error {
	c := m.inflight[0]
	m.inflight[0] = emitCall{}
	m.inflight = m.inflight[1:]
	err := m.call(c)
	if err == nil {
		reportAll(c.letters)
		return nil
	}
	from := c.from
	for _, later := range m.inflight {
		_ = m.call(later) // lost with the first: replayed, or delivered twice
		from = addPartitions(from, later.from...)
	}
	from = addPartitions(from, m.from...)
	m.inflight, m.outs, m.from, m.letters, m.origins = nil, nil, nil, nil, nil
	return &emitFailure{err: refusedByEmit(err, c.origins), from: from}
}

func reportAll(reports []func()) {
	for _, report := range reports {
		report()
	}
}

// call calls c's wait (a nil wait: delivered).
func (m *atLeastOnce[S]) call(c emitCall) error {
	if c.wait == nil {
		return nil
	}
	begin := time.Now() // metrics only
	err := c.wait()
	m.r.e.cfg.obs().waitedForOutputs(time.Since(begin))
	return err
}

func (m *atLeastOnce[S]) emitting() bool { return len(m.inflight) > 0 }

func (m *atLeastOnce[S]) persist(ctx context.Context, f *flow[S]) error {
	if m.emitting() {
		return errEmitInFlight
	}
	return m.flush(ctx, f)
}

// holdsTombstones reports whether tombstones wait for a commit: on a
// Transactional store, where a batch can carry them with the offset.
func (m *atLeastOnce[S]) holdsTombstones() bool { return m.r.e.cfg.Store.Mode() == store.Transactional }

// commit writes every dirty key of f, then commits the offset they
// cover. A partition with nothing to write whose committable offset is
// already committed sends nothing: an idle partition costs no transaction.
//
// Nothing waits. On a Transactional store with nothing in flight and
// few enough dirty keys (MaxTransactionRecords, MaxWritesInFlight) the
// keys and the offset go in one transaction (commitInOne). Otherwise the
// writes are started (flush), and the commit is started behind them with
// the offset that holds once they have landed (CommittableIfLanded),
// which the store commits only if every write started before it landed
// (StartCommit). Writes already in flight from an earlier persist are
// behind it too.
func (m *atLeastOnce[S]) commit(ctx context.Context, f *flow[S]) error {
	if m.emitting() {
		return errEmitInFlight
	}
	if !f.core.Dirty() && f.core.Committable() <= f.part.CommittedOffset() && len(f.inflight) == 0 {
		return nil
	}
	cfg := &m.r.e.cfg
	if m.holdsTombstones() && len(f.inflight) == 0 && f.core.DirtyKeys() > 0 &&
		f.core.DirtyKeys() <= min(cfg.MaxTransactionRecords, cfg.MaxWritesInFlight) {
		// Every dirty key and the offset after the last fold in one
		// transaction: one per partition per interval, where writes
		// started ahead of the commit would make their own.
		return m.commitInOne(ctx, f)
	}
	if err := m.flush(ctx, f); err != nil {
		return err
	}
	if m.holdsTombstones() && f.core.Untaken() > 0 {
		// The tombstones' batch covers every dirty key, so none may be
		// in flight: the batch carries the offset after the last fold.
		if err := m.r.drain(ctx, f); err != nil {
			return err
		}
		return m.commitInOne(ctx, f)
	}
	c := f.core.CommittableIfLanded()
	if err := m.r.room(ctx, f, 1); err != nil {
		return err
	}
	return m.r.begin(ctx, f, started{kind: startedCommit, offset: c, pending: f.part.StartCommit(ctx, c), begin: time.Now()})
}

// commitInOne writes every dirty key of f, the held tombstones with
// them, in one transaction with the commit of the offset after the last
// record folded (every dirty key is in it, so that offset covers it, as
// an exactly-once batch's does). Nothing of f may be in flight. A batch
// over MaxTransactionBytes whose keys are all live is started as writes
// with a dependent commit behind them instead.
//
// Why tombstones ride with the commit: a tombstone supersedes its key's earlier
// snapshot at once for compaction, and is itself removed once
// delete.retention.ms has passed. Written ahead of the committed offset
// and left there that long (its owner gone, and no other commit), it
// would leave the key's events below the committed offset in no
// snapshot: the next owner would replay the events after that offset onto
// no state. With the commit in the same transaction the events a
// tombstone deletes are never below an offset it could leave uncovered.
//
// The transaction is as large as the changes since the last commit
// (when held tombstones call it: bounded by no cap, as an exactly-once
// batch is as large as the changes of its batch).
func (m *atLeastOnce[S]) commitInOne(ctx context.Context, f *flow[S]) error {
	begin := time.Now() // metrics only
	snaps, err := f.core.Flush(0)
	if err != nil {
		return fromCore(err)
	}
	if bytes, live := snapshotBytes(snaps); live && bytes > m.r.e.cfg.MaxTransactionBytes {
		p := f.part.StartWriteBatch(ctx, snaps)
		if err := m.r.begin(ctx, f, started{kind: startedWrite, snaps: snaps, pending: p, begin: begin}); err != nil {
			return err
		}
		c := f.core.CommittableIfLanded()
		return m.r.begin(ctx, f, started{kind: startedCommit, offset: c, pending: f.part.StartCommit(ctx, c), begin: time.Now()})
	}
	offset := max(f.core.Consumed(), f.part.CommittedOffset())
	p := f.part.StartCommitBatch(ctx, store.Batch{Snapshots: snaps, Offset: offset})
	return m.r.begin(ctx, f, started{kind: startedBatch, snaps: snaps, offset: offset, pending: p, begin: begin})
}

// failure: a failed write or commit leaves the keys dirty; the scheduler
// decides whether the flow stops.
func (m *atLeastOnce[S]) failure(_ *flow[S], err error) (schedule.Cause, error) {
	return schedule.CauseWrite, err
}

// flush starts the writes of every dirty key of f, a batch at a time,
// without waiting for them, as long as MaxWritesInFlight allows (then it
// waits for the oldest). On a Transactional store it writes the live keys
// only: tombstones wait for commit. A key in flight already is left for
// the next flush (the core takes it again once its write is done).
//
// A batch goes to the store in one StartWriteBatch call: its writes join
// the group commit's queue in the core's order (by key) with none between
// them, so which writes share a transaction, and their order in the log,
// are the same on every run. That is what makes a run over the simulated
// cluster a function of its seed and its calls.
func (m *atLeastOnce[S]) flush(ctx context.Context, f *flow[S]) error {
	take := f.core.Flush
	if m.holdsTombstones() {
		take = f.core.FlushLive
	}
	for {
		// Room first: keys the core hands out are started at once.
		if err := m.r.room(ctx, f, m.r.e.cfg.FlushBatch); err != nil {
			return err
		}
		snaps, err := take(m.r.e.cfg.FlushBatch)
		if err != nil || len(snaps) == 0 {
			return fromCore(err)
		}
		p := f.part.StartWriteBatch(ctx, snaps)
		if err := m.r.begin(ctx, f, started{kind: startedWrite, snaps: snaps, pending: p, begin: time.Now()}); err != nil {
			return err
		}
	}
}

// snapshotBytes is snaps' size as the store counts it, and whether all
// of them are live (no tombstone).
func snapshotBytes(snaps []store.Snapshot) (n int, live bool) {
	live = true
	for _, s := range snaps {
		n += wire.SnapshotBytes(s)
		live = live && !s.Tombstone
	}
	return n, live
}
