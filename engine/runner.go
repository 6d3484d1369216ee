package engine

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/store"
)

// Source is the group consumer a Runner drives: franz-go against Kafka
// (NewKafkaSource), or a member of a simulated cluster (simsource.New).
type Source interface {
	// Poll polls once, waiting for records at most as long as wait says,
	// and returns the records fetched. It calls wait once the poll has
	// its turn, after any rebalance callback that went first (a callback
	// that starts recoveries shortens the wait). Rebalance callbacks
	// reach the Handler the source was made with: inside Poll (the sim)
	// or between a PollDone and the next Poll (franz-go).
	Poll(ctx context.Context, wait func() time.Duration) ([]Record, error)
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
	// Sleep waits d on the source's clock, or until ctx ends: Run's
	// backoff after a poll that failed.
	Sleep(ctx context.Context, d time.Duration)
	// Go runs f off the polling goroutine: the takeovers and recoveries
	// of new partitions run there while the others fold. Once f
	// returns, the poll in flight, if any, ends, so that its outcome is
	// taken in at once. The Kafka source runs f on a goroutine of its
	// own; the simulated cluster's runs it at once, on the caller's
	// goroutine, so that its runs stay reproducible (a recovery there
	// ends within the callback that starts it).
	Go(f func())
	// LogEnd is tp's log end offset (high watermark) as the source last
	// learnt it; ok is false while it knows none. The runner calls it
	// after each poll, on the polling goroutine, for its status and lag.
	LogEnd(tp store.TopicPartition) (offset int64, ok bool)
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
//
// The runner is the runtime around the scheduler: it polls, folds, and
// carries out the scheduler's actions (takeovers, recoveries, flushes,
// commits, teardowns), reporting each outcome back. It decides nothing
// about a partition's life itself.
type Runner[S any] struct {
	e    *Engine[S]
	src  Source
	mode outputMode[S]
	// published is the identity read after the last poll, once valid: the
	// store reads it for every transaction.
	published atomic.Pointer[store.GroupIdentity]

	// ready is closed once src is set: a franz-go client joins its group,
	// and may call the handler, before its constructor returns.
	ready chan struct{}

	mu    chanMutex
	sched *scheduler[*flow[S]]
	errs  []error
	// status is what Status reports; it has a lock of its own.
	status *statusBoard
	// recoveries are the takeovers and recoveries in flight (recovery.go),
	// by partition; life ends them when the runner is closed or abandoned.
	recoveries map[store.TopicPartition]*recovery[S]
	life       context.Context
	endLife    context.CancelFunc
	// standby is the standby replicas (Config.Standby); nil without.
	standby *standbys[S]
	// logs bounds the rate of the log lines of repeated failures.
	logs *logLimiter
	// queries is the partitions open to committed reads (query.go).
	queries readers[S]
	// lastGroupReport is when the last group report was read (group.go).
	lastGroupReport time.Time
	// released: the runner no longer counts as open for Engine.Close
	// (closed, or abandoned by a test's simulated crash).
	released atomic.Bool
	// topicsChecked: Config.CheckOutputTopics passed (or there is none).
	topicsChecked bool
	// checkedTopics are the output topics known to exist (checked at the
	// start, or when the first output to each was emitted).
	checkedTopics map[string]bool
}

// flow is a running partition's state: its core and its acquired store
// partition.
type flow[S any] struct {
	tp   store.TopicPartition
	part store.Partition
	core *core.Core[S, Output]
	// batch is the open exactly-once batch (exactlyOnce only).
	batch openBatch
	// inflight is what the flow started on its partition and has not
	// reaped, oldest first, and inflightWeight its snapshots (a commit
	// counts one): see inflight.go.
	inflight       []started
	inflightWeight int
}

// NewRunner returns a runner over the source that newSource makes with the
// runner's rebalance handler.
func (e *Engine[S]) NewRunner(newSource func(Handler) (Source, error)) (*Runner[S], error) {
	r := &Runner[S]{e: e, ready: make(chan struct{}), mu: make(chanMutex, 1), logs: newLogLimiter(), checkedTopics: map[string]bool{},
		recoveries: map[store.TopicPartition]*recovery[S]{}}
	r.life, r.endLife = context.WithCancel(context.Background())
	r.mode = newOutputMode(r)
	r.status = r.newStatusBoard()
	r.sched = newScheduler[*flow[S]](schedulerConfig{
		persistInterval: r.mode.persistInterval(),
		commitInterval:  e.cfg.CommitInterval,
		tickInterval:    e.tickInterval(),
		flushOnRevoke:   !e.cfg.NoFlushOnRevoke,
		unstableTimeout: e.cfg.UnstableOffsetTimeout,
		skipPoison:      e.cfg.Poison != StopOnPoison,
	}, time.Time{})
	src, err := newSource(rebalanceHandler[S]{r})
	if err != nil {
		r.endLife()
		return nil, err
	}
	r.src = src
	if e.cfg.Standby {
		if r.standby, err = newStandbys(r); err != nil {
			_ = src.Close(context.Background())
			r.endLife()
			return nil, err
		}
	}
	now := src.Now()
	r.sched.lastPersist, r.sched.lastCommit, r.sched.lastTick = now, now, now
	e.runner.Store(r) // built: queries may read it
	e.runMu.Lock()
	if e.open == nil {
		e.open = map[*Runner[S]]bool{}
	}
	e.open[r] = true
	e.runMu.Unlock()
	close(r.ready)
	return r, nil
}

// Abandon drops r as a crashed process would leave it: nothing is
// flushed, committed, revoked or closed, its source and its store handles
// are left as they are, and r must not be used again. It is for
// harnesses that crash a process's engine in-process (the simulated
// cluster's worlds, a test of a fold's behaviour across crashes):
// Engine.Close refuses while a Runner is open, and closes the cache
// once every runner is closed or abandoned.
func (r *Runner[S]) Abandon() {
	r.mu.Lock()
	r.endLife() // the recoveries in flight end, as the process would
	for _, rc := range r.recoveries {
		<-rc.done
	}
	r.mu.Unlock()
	r.release()
}

// release stops r counting as open, once: Engine.Close may close the
// cache after it.
func (r *Runner[S]) release() {
	if r.released.CompareAndSwap(false, true) {
		r.e.runMu.Lock()
		delete(r.e.open, r)
		r.e.runMu.Unlock()
	}
}

// identity is the runner's store.IdentityReader: the identity published
// after the last poll.
type identity[S any] struct{ r *Runner[S] }

func (id identity[S]) CurrentIdentity() store.GroupIdentity {
	if p := id.r.published.Load(); p != nil {
		return *p
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
// (a partition whose acquisition could not finish, a
// *kafka.UnstableOffsetError) is returned by this and every later Step.
func (r *Runner[S]) Step(ctx context.Context) error {
	if err := r.fatalErr(); err != nil {
		return err
	}
	if err := r.checkOutputTopics(ctx); err != nil {
		return err
	}
	err := r.step(ctx)
	if fatal := r.fatalErr(); fatal != nil {
		r.status.failed(fatal)
		return fatal
	}
	return err
}

// checkOutputTopics runs Config.CheckOutputTopics (by default the
// source's TopicChecker, if it is one) once, before the first poll, so that a missing output or dead-letter topic ends the run
// before anything is folded, not when the first output meets it (after a
// delivery timeout, or with the dead letter of a record already skipped).
// A configuration error ends the runner; another error (a broker down) is
// returned, and the check runs again at the next Step.
func (r *Runner[S]) checkOutputTopics(ctx context.Context) error {
	cfg := &r.e.cfg
	check := r.topicCheck()
	if r.topicsChecked || cfg.ExactlyOnce || check == nil {
		return nil
	}
	topics := slices.Clone(cfg.OutputTopics)
	if cfg.DeadLetterTopic != "" {
		topics = append(topics, cfg.DeadLetterTopic)
	}
	slices.Sort(topics)
	topics = slices.Compact(topics)
	err := error(nil)
	if len(topics) > 0 {
		err = check(ctx, topics)
	}
	switch {
	case err == nil:
		r.topicsChecked = true
		for _, t := range topics {
			r.checkedTopics[t] = true
		}
		return nil
	case errors.Is(err, store.ErrMisconfigured):
		r.mu.Lock()
		if r.sched.fatal == nil {
			r.sched.fatal = err
		}
		r.mu.Unlock()
		r.status.failed(err)
		r.e.log.Error("output topics refused; the engine stops", "topics", topics, "err", err)
		return err
	}
	return fmt.Errorf("engine: checking the output topics %q: %w", topics, err)
}

// topicCheck is the check of output topics: Config.CheckOutputTopics, or
// the source's if it is a TopicChecker; nil if neither.
func (r *Runner[S]) topicCheck() func(context.Context, []string) error {
	if check := r.e.cfg.CheckOutputTopics; check != nil {
		return check
	}
	if tc, ok := r.src.(TopicChecker); ok {
		return tc.CheckTopics
	}
	return nil
}

// checkNewTopics checks, at least once, the topics of outs not checked
// before (not in Config.OutputTopics), before the outputs are handed to
// Emit: a missing one is met at once, as a configuration error naming
// it, not after the emitter's delivery timeout, or at the next commit's
// wait. Any other failure of the check leaves the topic to the emitter.
// Only with Config.CheckOutputTopics: without it an output's Topic may
// name anything a user's Emit delivers to, not a Kafka topic.
func (r *Runner[S]) checkNewTopics(ctx context.Context, outs []Output) error {
	check := r.e.cfg.CheckOutputTopics
	if check == nil {
		return nil
	}
	var fresh []string
	last := ""
	for i := range outs {
		if t := outs[i].Topic; t != last {
			last = t
			if !r.checkedTopics[t] && !slices.Contains(fresh, t) {
				fresh = append(fresh, t)
			}
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	err := check(ctx, fresh)
	switch {
	case err == nil:
		for _, t := range fresh {
			r.checkedTopics[t] = true
		}
	case errors.Is(err, store.ErrMisconfigured):
		return err
	}
	return nil
}

func (r *Runner[S]) fatalErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sched.fatal
}

// step is one poll and what follows it. The poll's callbacks run while it
// is out (inside Poll for the sim, between PollDone and the next Poll for
// franz-go), each under r.mu.
func (r *Runner[S]) step(ctx context.Context) error {
	r.mu.Lock()
	r.sched.pollStarting()
	r.mu.Unlock()
	recs, pollErr := r.src.Poll(ctx, func() time.Duration {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.sched.pollWait(r.src.Now(), r.wakeups())
	})
	r.publish()
	r.status.polled(r.src)
	defer r.src.PollDone()
	r.mu.Lock()
	defer r.mu.Unlock()
	// A dead context: the polled records are not folded, so nothing
	// commits them. A fetch error comes with the records of the
	// partitions that fetched well, and the client has moved past them:
	// they are folded (dropped, they would be lost, as the next record's
	// offset commits past them), and the error is returned once the step
	// is done.
	dead := ctx.Err()
	if dead == nil && pollErr != nil && len(recs) == 0 {
		dead = pollErr
	}
	r.reapRecoveries(ctx)
	r.do(ctx, r.sched.polled(r.src.Now(), dead == nil))
	if dead != nil {
		return dead
	}
	if err := r.fold(ctx, recs); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err // no flush with a dead context; the revoke flushes
	}
	r.reapAll(ctx)
	if r.sched.timersDue(r.src.Now()) {
		// A tick, persist or commit: the outputs in flight first.
		if err := r.awaitEmit(ctx); err != nil {
			return err
		}
	}
	r.do(ctx, r.sched.timers(r.src.Now()))
	if r.standby != nil {
		r.standby.round(ctx)
	}
	r.groupReport(ctx)
	return pollErr
}

// wakeups are the runner's reasons for a poll to end before the
// scheduler's next timer (scheduler.pollWait).
func (r *Runner[S]) wakeups() wakeups[*flow[S]] {
	w := wakeups[*flow[S]]{
		timer:      func(f *flow[S]) (int64, bool) { return f.core.NextProcessingTimer() },
		busy:       func(f *flow[S]) bool { return len(f.inflight) > 0 },
		recovering: r.recovering(),
	}
	if r.standby != nil {
		w.standby = r.standby.next
		if w.standby.IsZero() { // the first round is due at once
			w.standby = r.src.Now()
		}
	}
	if due, ok := r.groupReportDue(); ok {
		w.report = due
	}
	return w
}

// timersDue reports whether a running flow has a timer due at now (Unix
// milliseconds) or at its watermark.
func (r *Runner[S]) timersDue(now int64) bool {
	return r.sched.timersDueIn(func(f *flow[S]) bool { return f.core.TimersDue(now) })
}

// awaitEmit waits for the outputs in flight (Config.StartEmit), if any.
// Call it before anything that writes a snapshot or commits an offset,
// before the actions that do it are computed: a failure fails partitions
// (emitFailed).
func (r *Runner[S]) awaitEmit(ctx context.Context) error {
	if err := r.mode.await(); err != nil {
		return r.emitFailed(ctx, err)
	}
	return nil
}

// emitFailed fails the partitions whose outputs were lost (an
// *emitFailure's), and returns the error as the user sees it. The outputs
// are lost with the folds that made them: their flows stop, so nothing
// commits past them, and restart from the committed state, which replays
// the records.
func (r *Runner[S]) emitFailed(ctx context.Context, err error) error {
	var from []store.TopicPartition
	if ef, ok := err.(*emitFailure); ok {
		err, from = ef.err, ef.from
	}
	err = fmt.Errorf("engine: emitting outputs: %w", err)
	for _, tp := range from {
		r.do(ctx, r.sched.failed(tp, causeEmit, err, r.src.Now()))
	}
	if rf, ok := errors.AsType[*refusal](err); ok && !rf.letter && r.sched.cfg.skipPoison {
		// The poison policy has it: the partitions restart to skip or
		// dead-letter the inputs, which is no failure of the step.
		return nil
	}
	return err
}

// fold folds a poll's records, run by run (a poll's records come in runs
// of one partition), fires the timers due, and emits their outputs.
func (r *Runner[S]) fold(ctx context.Context, recs []Record) error {
	now := r.src.Now().UnixMilli()
	for i := 0; i < len(recs); {
		n := runLength(recs[i:])
		r.foldRun(ctx, recs[i:i+n], now)
		i += n
	}
	if r.timersDue(now) {
		for _, f := range r.sched.running() { // outputs in a fixed order
			if f.core.TimersDue(now) {
				r.fireTimers(ctx, f, now)
			}
		}
	}
	if err := r.mode.emit(ctx); err != nil {
		return r.emitFailed(ctx, err)
	}
	return nil
}

// foldRun folds one partition's run of records into its flow, if it runs,
// firing after each record the timers due (an event-time timer right
// after the record that moves the watermark past it; now is the poll's
// time, Unix milliseconds). A failed fold, or a failed commit of a full
// batch, stops the flow: the rest of the run is not folded (it restarts
// from the committed state).
func (r *Runner[S]) foldRun(ctx context.Context, run []Record, now int64) {
	tp := recordTP(&run[0])
	f, ok := r.sched.flow(tp)
	if !ok {
		return
	}
	folded := 0
	defer func() { r.e.cfg.obs().folded(tp.Topic, folded) }()
	for i := range run {
		if f.core.Stopped() != nil {
			return
		}
		o, err := f.core.Fold((*core.Record)(&run[i]))
		if fe, ok := err.(*core.FoldError); ok {
			if !r.poisoned(ctx, f, &run[i], fe) {
				return
			}
			o, err = nil, nil
		}
		if err != nil {
			r.do(ctx, r.sched.failed(tp, causeFold, fromCore(err), r.src.Now()))
			return
		}
		folded++
		if r.mode.folded(f, o, recordSource(&run[i])) && !r.commit(ctx, f) {
			return
		}
		if f.core.TimersDue(now) && !r.fireTimers(ctx, f, now) {
			return
		}
	}
}

// fireTimers runs f's timers due at now (Unix milliseconds) and at its
// watermark. Their outputs go as a tick's do; a failed handler goes to
// the poison policy, as a failed tick does. It reports whether f goes on.
func (r *Runner[S]) fireTimers(ctx context.Context, f *flow[S], now int64) bool {
	fired, failed, err := f.core.FireTimers(now)
	if err != nil {
		r.do(ctx, r.sched.failed(f.tp, causeTick, fromCore(err), r.src.Now()))
		return false
	}
	for _, fd := range fired {
		r.mode.ticked(f, fd.Outputs, firedSource(fd.Key, fd.Timer))
	}
	for _, fe := range failed {
		if !r.poisoned(ctx, f, nil, fe) {
			return false
		}
	}
	return true
}

// poisoned hands a fold's or tick's failure on rec (nil for a tick) to
// the poison policy, through the scheduler. It reports whether f goes on:
// the record is skipped (counted and logged at a bounded rate; under
// DeadLetterPoison its dead letter goes with f's outputs, and is counted
// and logged once it is written); otherwise f committed what it folded
// before the record and stopped, and the runner ends with the error.
func (r *Runner[S]) poisoned(ctx context.Context, f *flow[S], rec *Record, cfe *core.FoldError) bool {
	fe := (*FoldError)(cfe)
	// The policy may stop f, which commits first: the outputs in flight
	// before that. A failure may have stopped f itself.
	_ = r.awaitEmit(ctx)
	if cur, ok := r.sched.flow(f.tp); !ok || cur != f {
		return false
	}
	skip, acts := r.sched.poisoned(f.tp, fe)
	if !skip {
		r.e.cfg.obs().poisoned(f.tp, "stopped")
		r.do(ctx, acts)
		return false
	}
	skipErr := error(nil)
	switch {
	case rec != nil:
		skipErr = f.core.Skip(cfe)
	case cfe.Timer != nil: // the timer goes: it would fail again
		skipErr = f.core.SkipTimer(cfe)
	}
	if skipErr != nil {
		r.do(ctx, r.sched.failed(f.tp, causeFold, skipErr, r.src.Now()))
		return false
	}
	report := func(action string) {
		r.e.cfg.obs().poisoned(f.tp, action)
		if ok, n := r.logs.allow("poison "+f.tp.String(), r.src.Now()); ok {
			r.e.log.Warn("poison record "+action+" (Config.Poison)", "input", f.tp.String(), "offset", fe.Offset,
				"key", logKey(fe.Key), "err", fe, "not_logged_since_last", n)
		}
	}
	if r.e.cfg.Poison != DeadLetterPoison {
		report(PoisonSkipped)
		return true
	}
	for _, letter := range r.deadLetters(rec, cfe) {
		r.mode.lettered(f, letter, func() { report(PoisonDeadLettered) })
	}
	return true
}

// discarded reports the recovered states of f that did not decode and
// that DiscardUndecodableState deleted, one per key: each is counted,
// logged at a bounded rate, and under DeadLetterPoison its snapshot's
// bytes go to the dead-letter topic. (The tombstones go with the next
// flush or batch.)
func (r *Runner[S]) discarded(f *flow[S], bad []*RecoveredStateError) {
	if len(bad) == 0 {
		return
	}
	r.e.cfg.obs().undecodableStates(f.tp, "discarded", len(bad))
	for _, se := range bad {
		if ok, n := r.logs.allow("undecodable "+f.tp.String(), r.src.Now()); ok {
			r.e.log.Warn("undecodable state discarded: its key is deleted (Config.UndecodableState)", "input", f.tp.String(),
				"key", logKey(se.Key), "offset", se.Offset, "err", se.Err, "not_logged_since_last", n)
		}
		if r.e.cfg.Poison == DeadLetterPoison {
			letter := fitDeadLetter(stateDeadLetter(r.e.cfg.DeadLetterTopic, se), 0, r.e.cfg.MaxOutputBytes)
			r.mode.lettered(f, letter, func() {})
		}
	}
}

// undecodable are a recovery's keys whose latest snapshot so far does not
// decode, by key: a later snapshot of a key supersedes what an earlier
// one said, so a key is counted once, with the snapshot recovery uses.
type undecodable map[string]*RecoveredStateError

// checkState records in u whether snapshot s of tp decodes with codec;
// keepValue: keep an undecodable state's bytes (for its dead letter).
func checkState[S any](u undecodable, tp store.TopicPartition, codec Codec[S], s store.Snapshot, keepValue bool) {
	if s.Tombstone {
		delete(u, string(s.Key))
		return
	}
	if _, err := codec.Decode(s.Value); err != nil {
		se := &RecoveredStateError{Input: tp, Key: bytes.Clone(s.Key), Offset: s.Offset, Err: err}
		if keepValue {
			se.value = bytes.Clone(s.Value)
		}
		u[string(s.Key)] = se
		return
	}
	delete(u, string(s.Key))
}

// sorted is u's errors in key order.
func (u undecodable) sorted() []*RecoveredStateError {
	ses := slices.Collect(maps.Values(u))
	slices.SortFunc(ses, func(a, b *RecoveredStateError) int { return bytes.Compare(a.Key, b.Key) })
	return ses
}

// deadLetters is the dead letter of a record, or nil if the policy sends
// none.
func (r *Runner[S]) deadLetters(rec *Record, cfe *core.FoldError) []Output {
	if r.e.cfg.Poison != DeadLetterPoison {
		return nil
	}
	own := 0
	if rec != nil {
		own = len(rec.Headers)
	}
	return []Output{fitDeadLetter(deadLetter(r.e.cfg.DeadLetterTopic, rec, (*FoldError)(cfe)), own, r.e.cfg.MaxOutputBytes)}
}

// runLength is the length of the run of one partition's records that
// starts recs.
func runLength(recs []Record) int {
	n := 1
	for n < len(recs) && recs[n].Partition == recs[0].Partition && recs[n].Topic == recs[0].Topic {
		n++
	}
	return n
}

func recordTP(rec *Record) store.TopicPartition {
	return store.TopicPartition{Topic: rec.Topic, Partition: rec.Partition}
}

// do carries out the scheduler's actions, in order.
func (r *Runner[S]) do(ctx context.Context, acts []action[*flow[S]]) {
	syncStatus(r.status, r.sched, acts)
	for _, a := range acts {
		switch a.kind {
		case actStart:
			r.start(ctx, a.tps)
		case actCancel:
			r.cancelRecovery(a.tp)
		case actTeardown:
			if a.flush {
				r.flushOnRevoke(ctx, a.flow)
			}
			r.teardown(a.flow)
		case actStop:
			r.stop(ctx, a)
		case actHold:
			r.src.Pause(a.tp)
			if a.first {
				r.e.log.Warn("partition waits: a transaction its takeover did not end holds its committed offset, or is left open where it writes; retrying",
					"input", a.tp.String(), "timeout", r.e.cfg.UnstableOffsetTimeout, "err", a.err)
			}
		case actTick:
			r.tick(ctx, a.at)
		case actPersist:
			for _, f := range r.sched.running() {
				if err := r.mode.persist(ctx, f); err != nil {
					r.failed(ctx, f, err)
				}
			}
		case actCommit:
			r.commitAll(ctx)
		case actDrain:
			r.drainAll(ctx)
		}
	}
}

// reapAll reaps what the running flows have done, in partition order;
// a failure goes to the scheduler.
func (r *Runner[S]) reapAll(ctx context.Context) {
	for _, f := range r.sched.running() {
		if err := r.reap(ctx, f, false); err != nil {
			r.failed(ctx, f, err)
		}
	}
}

// drainAll waits for what every running flow has in flight, in partition
// order; a failure goes to the scheduler.
func (r *Runner[S]) drainAll(ctx context.Context) {
	for _, f := range r.sched.running() {
		if err := r.drain(ctx, f); err != nil {
			r.failed(ctx, f, err)
		}
	}
}

// commitNow commits f and waits for it, and for everything before it.
// What is in flight ends first, so that the commit takes every dirty
// key, also one changed while its write was in flight.
func (r *Runner[S]) commitNow(ctx context.Context, f *flow[S]) error {
	if err := r.drain(ctx, f); err != nil {
		return err
	}
	if err := r.mode.commit(ctx, f); err != nil {
		return err
	}
	return r.drain(ctx, f)
}

// commit commits f; on failure the scheduler decides what becomes of it.
// It reports whether f still runs.
func (r *Runner[S]) commit(ctx context.Context, f *flow[S]) bool {
	if err := r.mode.commit(ctx, f); err != nil {
		r.failed(ctx, f, err)
		cur, ok := r.sched.flow(f.tp)
		return ok && cur == f
	}
	return true
}

func (r *Runner[S]) commitAll(ctx context.Context) {
	for _, f := range r.sched.running() {
		r.commit(ctx, f)
	}
}

// failed reports a failed persist or commit of f.
func (r *Runner[S]) failed(ctx context.Context, f *flow[S], err error) {
	c, err := r.mode.failure(f, err)
	r.do(ctx, r.sched.failed(f.tp, c, err, r.src.Now()))
}

func (r *Runner[S]) tick(ctx context.Context, now time.Time) {
	for _, f := range r.sched.running() { // outputs in a fixed order
		fired, failed, err := f.core.Tick(now.UnixMilli())
		if err != nil {
			r.do(ctx, r.sched.failed(f.tp, causeTick, fromCore(err), r.src.Now()))
			continue
		}
		for _, fd := range fired {
			r.mode.ticked(f, fd.Outputs, firedSource(fd.Key, nil))
		}
		for _, fe := range failed {
			if !r.poisoned(ctx, f, nil, fe) {
				break
			}
		}
	}
	// Delivered before the persist or commit that may follow in the
	// same round of timers.
	if err := r.mode.emit(ctx); err != nil {
		_ = r.emitFailed(ctx, err)
		return
	}
	_ = r.awaitEmit(ctx)
}

// flushOnRevoke flushes and commits a revoked flow. A fence here is logged
// and swallowed: the new owner replays.
//
// A fence is expected here (under classic cooperative the member has
// moved to the new generation by revoke time): it is counted and logged
// at INFO. Anything else is logged at WARN: the new owner still replays,
// but the revoke-time commit that would spare it the replay was lost.
func (r *Runner[S]) flushOnRevoke(ctx context.Context, f *flow[S]) {
	err := r.commitNow(ctx, f)
	switch {
	case err == nil:
	case errors.Is(err, store.ErrFenced):
		r.e.cfg.obs().fenced(fenceReason(err))
		r.e.log.Info("revoke-time flush fenced (expected in a rebalance); the new owner replays", "input", f.tp.String(), "err", err)
	default:
		r.e.log.Warn("revoke-time flush failed; the new owner replays", "input", f.tp.String(), "err", err)
	}
}

// stop carries out actStop: the flow, if any, commits what it folded
// first (a poison record's partition) and is torn down, leaving nothing
// in the cache; the error is recorded and the partition paused. The log
// line's level is the failure's class: ERROR only for what ends the
// runner, WARN for a fence (expected in a rebalance) and for a transient
// failure's restart, whose lines come at a bounded rate.
func (r *Runner[S]) stop(ctx context.Context, a action[*flow[S]]) {
	if a.flow != nil {
		if a.commit {
			// The outputs of the records folded before the poison record
			// go out first: a commit ahead of them would cover outputs
			// that were never delivered. If they fail, nothing is
			// committed past them (they are replayed), and the other
			// partitions whose outputs were lost with them stop too.
			err := r.mode.emit(ctx)
			if err == nil {
				err = r.mode.await()
			}
			if err != nil {
				err = r.emitFailed(ctx, err)
				r.e.log.Error("the outputs of the records before the poison record were not delivered; nothing is committed past them, and they are replayed",
					"input", a.tp.String(), "err", err)
			} else if err := r.commitNow(ctx, a.flow); err != nil {
				r.e.log.Error("committing what was folded before the poison record failed; it is replayed",
					"input", a.tp.String(), "err", err)
			}
		}
		r.teardown(a.flow)
	}
	if a.class == classExpected {
		r.e.cfg.obs().fenced(fenceReason(a.err))
	}
	r.errs = append(r.errs, a.err)
	r.src.Pause(a.tp)
	if !a.fatal {
		r.status.restarted(a.tp, a.class, a.err)
	}
	switch {
	case a.fatal && a.first:
		r.e.log.Error("partition stopped; the engine stops", "input", a.tp.String(), "class", a.class.String(), "err", a.err)
	case a.fatal:
		r.e.log.Warn("partition stopped as the engine stops", "input", a.tp.String(), "class", a.class.String(), "err", a.err)
	case a.class == classExpected:
		r.e.log.Warn("partition fenced (expected in a rebalance); restarting from the committed state if still owned",
			"input", a.tp.String(), "err", a.err)
	case a.class == classPoison:
		if ok, n := r.logs.allow("restart "+a.tp.String(), r.src.Now()); ok {
			r.e.log.Warn("partition restarts from the committed state to go past an input whose output the broker refused (Config.Poison)",
				"input", a.tp.String(), "not_logged_since_last", n, "err", a.err)
		}
	default:
		if ok, n := r.logs.allow("restart "+a.tp.String(), r.src.Now()); ok {
			r.e.log.Warn("partition failed; restarting from the committed state", "input", a.tp.String(),
				"class", a.class.String(), "retry_at", a.retry, "not_logged_since_last", n, "err", a.err)
		}
	}
}

// fenceReason is a fence's reason for the fences metric: the coordinator's
// error name (ILLEGAL_GENERATION, PRODUCER_FENCED, ...), or "fenced".
func fenceReason(err error) string {
	fe, ok := errors.AsType[*store.FencedError](err)
	if !ok || fe.Reason == nil {
		return "fenced"
	}
	// Kafka's errors read "NAME: description"; anything else is "other",
	// so that the label's values stay few.
	name, _, _ := strings.Cut(fe.Reason.Error(), ":")
	if name == "" || strings.TrimFunc(name, func(c rune) bool { return c == '_' || c >= 'A' && c <= 'Z' }) != "" {
		return "other"
	}
	return name
}

func (r *Runner[S]) teardown(f *flow[S]) {
	// Closed to queries first: a committed read that began before checks
	// after its read that the flow is still open, and answers
	// ErrNotOwned.
	r.queries.close(f.tp)
	// The committed states and their checkpoint stay, for the next
	// acquisition's delta (on this member or after a restart).
	if err := f.core.DropUncommitted(); err != nil {
		r.e.log.Error("dropping the cache", "input", f.tp.String(), "err", err)
	}
	_ = f.part.Close()
	r.abandon(f)
}

// rebalanceHandler is the runner's Handler: the source calls it, the user
// never does.
type rebalanceHandler[S any] struct{ r *Runner[S] }

// Assigned starts every assigned partition without a running flow.
func (h rebalanceHandler[S]) Assigned(ctx context.Context, tps []store.TopicPartition) {
	h.callback(ctx, func() []action[*flow[S]] {
		// The identity the assignment came with: the status shows the
		// member joined only with its group, member id and generation.
		h.r.status.assignment(h.r.src.Identity())
		return h.r.sched.assigned(tps)
	})
}

// Revoked flushes and commits (unless NoFlushOnRevoke), then tears the
// flows down before returning.
func (h rebalanceHandler[S]) Revoked(ctx context.Context, tps []store.TopicPartition) {
	h.callback(ctx, func() []action[*flow[S]] { return h.r.sched.revoked(tps) })
}

// Lost tears the flows down: the partitions may already have new owners,
// so nothing is flushed.
func (h rebalanceHandler[S]) Lost(ctx context.Context, tps []store.TopicPartition) {
	h.callback(ctx, func() []action[*flow[S]] { return h.r.sched.lost(tps) })
}

func (h rebalanceHandler[S]) callback(ctx context.Context, input func() []action[*flow[S]]) {
	<-h.r.ready
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	_ = h.r.awaitEmit(ctx) // before a revoke's flush; its failure is in Errors
	h.r.do(ctx, input())
}

// Flows lists the partitions with a running flow, in order.
func (r *Runner[S]) Flows() []store.TopicPartition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sched.runningPartitions()
}

// State reads a key's current state in a partition's flow.
func (r *Runner[S]) State(tp store.TopicPartition, key []byte) (S, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.sched.flow(tp)
	if !ok {
		var zero S
		return zero, false, fmt.Errorf("engine: no flow for %s", tp)
	}
	s, ok, err := f.core.State(key)
	return s, ok, fromCore(err)
}

// FlushAll flushes and commits every flow now (under ExactlyOnce: commits
// every open batch, rewinding a flow whose batch fails), and returns once
// what it started has ended. On Kafka a transaction has ended when EndTxn
// is answered; other clients see its offsets and snapshots once the
// coordinator has written its markers, a moment later (a stable
// OffsetFetch meanwhile may answer no offset yet).
func (r *Runner[S]) FlushAll(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.awaitEmit(ctx) // outputs first, as before a timer's commit
	r.do(ctx, r.sched.flushRequested(true))
}

// Persist flushes every flow's dirty keys now without advancing the
// committed offset, as the persist timer does (each write still carries
// the committed offset, so it is fenced as a commit would be). On a
// Transactional store deleted keys wait for the next commit, which writes
// their tombstones with the offset past them. Under
// ExactlyOnce snapshots are written only with their batch, so it commits
// the open batches, as FlushAll does.
func (r *Runner[S]) Persist(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.awaitEmit(ctx) // as FlushAll
	r.do(ctx, r.sched.flushRequested(false))
}

// Close leaves the group; the revoke callbacks flush and tear down.
// Once it has returned, Engine.Close may close the cache.
func (r *Runner[S]) Close(ctx context.Context) error {
	defer r.release()
	r.status.close()
	err := r.src.Close(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.awaitEmit(ctx)
	r.do(ctx, r.sched.closing())
	for _, tp := range sortedKeys(r.recoveries) {
		r.cancelRecovery(tp) // none is left without its partition's record; should one be, it ends here
	}
	if r.standby != nil {
		r.standby.close()
	}
	r.endLife()
	return err
}

// Run steps the runner until ctx ends, then closes it and returns nil; or
// until a failure ends the runner, which it returns after closing it. A
// step that fails otherwise (a poll) is retried after the scheduler's
// backoff, waited on the source's clock (Source.Sleep). This is
// Engine.Run's loop, over any source (a simsource member, in tests).
func (r *Runner[S]) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		err := r.Step(ctx)
		if fatal := r.fatalErr(); fatal != nil {
			_ = r.Close(context.WithoutCancel(ctx))
			return fatal
		}
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, store.ErrMisconfigured) {
			// A poll the broker refuses for good (a group ACL, a session
			// timeout out of its range): retrying cannot cure it.
			r.e.log.Error("poll refused; the configuration must change", "err", err)
			_ = r.Close(context.WithoutCancel(ctx))
			return err
		}
		r.mu.Lock()
		backoff := r.sched.pollEnded(err)
		ok, n := false, 0
		if err != nil {
			ok, n = r.logs.allow("poll", r.src.Now())
		}
		r.mu.Unlock()
		if ok {
			r.e.log.Warn("poll failed; retrying", "backoff", backoff, "not_logged_since_last", n, "err", err)
		}
		if backoff > 0 {
			r.src.Sleep(ctx, backoff)
		}
	}
	return r.Close(context.WithoutCancel(ctx))
}

// Source is the runner's source.
func (r *Runner[S]) Source() Source { return r.src }

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

// LockContext is Lock unless ctx ends first (a query that gives up).
func (m chanMutex) LockContext(ctx context.Context) error {
	select {
	case m <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
