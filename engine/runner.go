package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/engine/internal/schedule"
	"github.com/snapfence/snapfence/internal/chanmutex"
	"github.com/snapfence/snapfence/internal/input"
	"github.com/snapfence/snapfence/store"
)

// Member is one member of an input's consumer group running the engine,
// driven by its caller a poll at a time (Step): how a test runs an engine
// on the simulated cluster, several members at once, with rebalances,
// crashes (simsource's Member().Stall) and fences, in virtual time. Run
// drives one until its context ends; Engine.Run makes one and runs it.
//
// A member is the runtime around the scheduler: it polls, folds, and
// carries out the scheduler's actions (takeovers, recoveries, flushes,
// commits, teardowns), reporting each outcome back. It decides nothing
// about a partition's life itself.
type Member[S any] struct {
	e    *Engine[S]
	src  input.Source
	mode outputMode[S]
	// published is the identity read after the last poll, once valid: the
	// store reads it for every transaction.
	published atomic.Pointer[store.GroupIdentity]
	// committedReads counts the committed reads of the member's
	// partitions (Get, a Range's pages): while they come, each batch's
	// states go to the cache at once (settledAt).
	committedReads atomic.Uint64

	// ready is closed once src is set: a franz-go client joins its group,
	// and may call the handler, before its constructor returns.
	ready chan struct{}

	mu    chanMutex
	sched *schedule.Scheduler[*flow[S]]
	errs  []error
	// status is what Status reports; it has a lock of its own.
	status *statusBoard
	// recoveries are the takeovers and recoveries in flight (recovery.go),
	// by partition; life ends them when the runner is closed or abandoned.
	recoveries map[store.TopicPartition]*recovery[S]
	life       context.Context
	endLife    context.CancelFunc
	// standby is the standby replicas (Config.StandbyReplicas) and
	// warm-ups; nil without either.
	standby *standbys[S]
	// warmUps are the partitions the member's last assignment names it to
	// warm up (input.Opening.WarmUp), warmUpSeq counts their changes, and
	// warmedUp are those caught up (input.Opening.WarmedUp). The group's
	// goroutine and the runner's share them, under warmUpMu.
	warmUpMu  sync.Mutex
	warmUps   []store.TopicPartition
	warmUpSeq int
	warmedUp  []store.TopicPartition
	// logs bounds the rate of the log lines of repeated failures.
	logs *logLimiter
	// queries is the partitions open to committed reads (query.go).
	queries readers[S]
	// lastGroupReport is when the last group report was read (group.go);
	// zero: one is due at once (none yet, or a rebalance callback ran
	// since).
	lastGroupReport time.Time
	// group is the last group report read (group.go), the groupSeq-th:
	// the standby replicas are placed from it.
	group    input.GroupReport
	groupSeq int
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
	// cacheWritten is when the core last wrote its committed states to
	// the cache, and readsSeen the member's committedReads then
	// (Member.settledAt).
	cacheWritten time.Time
	readsSeen    uint64
}

// Input is what an engine folds: the records of a consumer group's
// topics, read by one group member per Run or Join. kafkaio.Config is
// the input on Kafka, simsource.New the simulated cluster's. Only those
// packages implement it: its method's types are internal to this module.
type Input interface {
	// Open opens a consumer for one member of the engine; the engine
	// calls it.
	Open(input.Opening) (input.Source, error)
}

// Run runs the engine on in (a kafkaio.Config for Kafka) until ctx ends,
// then leaves in's group cleanly (the revoke callback flushes and
// commits), and returns nil; or
// until a failure that retrying cannot fix, which it returns after
// leaving the group the same way (docs/operations.md, the failure model):
//
//   - a configuration that cannot work (a missing topic, a snapshot topic
//     that is not compacted, an option): an error matching
//     store.ErrMisconfigured, most of them a *store.ConfigError naming
//     the topic or option and the fix;
//   - a poison record under StopOnPoison: the *FoldError naming its topic,
//     partition, offset and key, after everything before it is committed;
//   - a state that does not decode under StopOnUndecodableState
//     (*RecoveredStateError, naming the key), a snapshot
//     record that is not snapfence's (*store.CorruptRecordError), a
//     snapshot over the size limit (*store.ValueTooLargeError);
//   - a committed offset held past UnstableOffsetTimeout
//     (*kafka.UnstableOffsetError, from store/kafka);
//   - state or a transactional.id of another application
//     (*store.ForeignStateError): a snapshot topic or a
//     TransactionalIDPrefix shared by mistake.
//
// An input given no group joins the store's application's (its Application):
// one name for the group, the snapshot topics and the transactional ids.
//
// Everything else is transient or expected and is retried: a failed poll
// after a backoff, a partition's failure by restarting it from its
// committed state (see Config). Those are logged at a bounded rate and
// reported to Config.Observer; none is returned.
func (e *Engine[S]) Run(ctx context.Context, in Input) (err error) {
	defer e.trackRun()(&err)
	r, err := e.Join(in)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// Join makes a member of in's consumer group running e, to step by hand
// (Member.Step) or run (Member.Run).
func (e *Engine[S]) Join(in Input) (*Member[S], error) {
	r := &Member[S]{e: e, ready: make(chan struct{}), mu: make(chanMutex, 1), logs: newLogLimiter(), checkedTopics: map[string]bool{},
		recoveries: map[store.TopicPartition]*recovery[S]{}}
	r.life, r.endLife = context.WithCancel(context.Background())
	r.mode = newOutputMode(r)
	r.status = r.newStatusBoard()
	r.sched = schedule.New[*flow[S]](schedule.Config{
		PersistInterval:    r.mode.persistInterval(),
		CommitInterval:     e.cfg.CommitInterval,
		TickInterval:       e.tickInterval(),
		FlushOnRevoke:      !e.cfg.NoFlushOnRevoke,
		UnstableTimeout:    e.cfg.UnstableOffsetTimeout,
		SkipPoison:         e.cfg.Poison != StopOnPoison,
		DiscardUndecodable: e.cfg.UndecodableState == DiscardUndecodableState,
		StandbyInterval:    e.standbyInterval(),
		StandbyRetry:       standbyRetry,
		ReplaysFail:        replaysFail,
		FoldError:          refusedFoldError,
	}, time.Time{})
	opening := input.Opening{Handler: rebalanceHandler[S]{r}, Application: e.cfg.Store.Application(),
		Instance: e.kv.Instance(), Warm: e.warm}
	if e.canFollow() {
		opening.WarmUp, opening.WarmedUp = r.warmUp, r.warmedUpList
	}
	src, err := in.Open(opening)
	if err != nil {
		r.endLife()
		return nil, err
	}
	r.src = src
	if id := src.Identity(); id.InstanceID != "" {
		e.log.Info("joining the consumer group as a static member", "group", id.Group, "instance", id.InstanceID)
	}
	if e.cfg.StandbyReplicas > 0 {
		r.standby = newStandbys(r)
	}
	now := src.Now()
	r.sched.StartTimers(now)
	e.runner.Store(r) // built: queries may read it
	e.runMu.Lock()
	if e.open == nil {
		e.open = map[*Member[S]]bool{}
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
// Engine.Close refuses while a Member is open, and closes the cache
// once every runner is closed or abandoned.
func (r *Member[S]) Abandon() {
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
func (r *Member[S]) release() {
	if r.released.CompareAndSwap(false, true) {
		r.e.runMu.Lock()
		delete(r.e.open, r)
		r.e.runMu.Unlock()
	}
}

// identity is the runner's store.IdentityReader: the identity published
// after the last poll.
type identity[S any] struct{ r *Member[S] }

func (id identity[S]) CurrentIdentity() store.GroupIdentity {
	if p := id.r.published.Load(); p != nil {
		return *p
	}
	return store.GroupIdentity{Generation: -1}
}

// publish records the client's identity after a poll. An identity that is
// not valid yet is never published.
func (r *Member[S]) publish() {
	if id := r.src.Identity(); id.Valid() {
		r.published.Store(&id)
	}
}

// Errors returns the errors that stopped flows so far.
func (r *Member[S]) Errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// Step polls once, folds what came, emits the outputs, and runs the
// flushes, commits and ticks that are due. An error that ends the runner
// (a partition whose acquisition could not finish, an
// *kafka.UnstableOffsetError) is returned by this and every later Step.
func (r *Member[S]) Step(ctx context.Context) error {
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
// source's) once, before the first poll, so that a missing output or dead-letter topic ends the run
// before anything is folded, not when the first output meets it (after a
// delivery timeout, or with the dead letter of a record already skipped).
// A configuration error ends the runner; another error (a broker down) is
// returned, and the check runs again at the next Step.
func (r *Member[S]) checkOutputTopics(ctx context.Context) error {
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
		r.sched.Fail(err)
		r.mu.Unlock()
		r.status.failed(err)
		r.e.log.Error("output topics refused; the engine stops", "topics", topics, "err", err)
		return err
	}
	return fmt.Errorf("engine: checking the output topics %q: %w", topics, err)
}

// topicCheck is the check of output topics: Config.CheckOutputTopics, or
// the source's.
func (r *Member[S]) topicCheck() func(context.Context, []string) error {
	if check := r.e.cfg.CheckOutputTopics; check != nil {
		return check
	}
	return r.src.CheckTopics
}

// checkNewTopics checks, at least once, the topics of outs not checked
// before (not in Config.OutputTopics), before the outputs are handed to
// Emit: a missing one is met at once, as a configuration error naming
// it, not after the emitter's delivery timeout, or at the next commit's
// wait. Any other failure of the check leaves the topic to the emitter.
// Only with Config.CheckOutputTopics: without it an output's Topic may
// name anything a user's Emit delivers to, not a Kafka topic.
func (r *Member[S]) checkNewTopics(ctx context.Context, outs []Output) error {
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

func (r *Member[S]) fatalErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sched.Err()
}

// step is one poll and what follows it. The poll's callbacks run while it
// is out (inside Poll for the sim, between PollDone and the next Poll for
// franz-go), each under r.mu.
func (r *Member[S]) step(ctx context.Context) error {
	r.mu.Lock()
	r.sched.PollStarting()
	r.mu.Unlock()
	recs, pollErr := r.src.Poll(ctx, func() time.Duration {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.sched.PollWait(r.src.Now(), r.wakeups())
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
	r.do(ctx, r.sched.Polled(r.src.Now(), dead == nil))
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
	if r.sched.TimersDue(r.src.Now()) {
		// A tick, persist or commit: the outputs in flight first.
		if err := r.awaitEmit(ctx); err != nil {
			return err
		}
	}
	r.do(ctx, r.sched.Timers(r.src.Now()))
	// The report first: the standby replicas are placed from it.
	r.groupReport(ctx)
	if _, warmUps := r.warmUpsNow(); r.standby == nil && len(warmUps) > 0 {
		r.sched.FollowStandbys(standbyInterval, standbyRetry)
		r.standby = newStandbys(r)
	}
	if r.standby != nil {
		r.standby.round(ctx)
	}
	return pollErr
}

// wakeups are the runner's reasons for a poll to end before the
// scheduler's next timer (Scheduler.PollWait).
func (r *Member[S]) wakeups() schedule.Wakeups[*flow[S]] {
	w := schedule.Wakeups[*flow[S]]{
		Timer:      func(f *flow[S]) (int64, bool) { return f.core.NextProcessingTimer() },
		Busy:       func(f *flow[S]) bool { return len(f.inflight) > 0 },
		Recovering: r.recovering(),
	}
	if due, ok := r.groupReportDue(); ok {
		w.Report = due
	}
	return w
}

// timersDue reports whether a running flow has a timer due at now (Unix
// milliseconds) or at its watermark.
func (r *Member[S]) timersDue(now int64) bool {
	return r.sched.TimersDueIn(func(f *flow[S]) bool { return f.core.TimersDue(now) })
}

// awaitEmit waits for the outputs in flight (Config.StartEmit), if any.
// Call it before anything that writes a snapshot or commits an offset,
// before the actions that do it are computed: a failure fails partitions
// (emitFailed).
func (r *Member[S]) awaitEmit(ctx context.Context) error {
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
func (r *Member[S]) emitFailed(ctx context.Context, err error) error {
	var from []store.TopicPartition
	if ef, ok := err.(*emitFailure); ok {
		err, from = ef.err, ef.from
	}
	err = fmt.Errorf("engine: emitting outputs: %w", err)
	for _, tp := range from {
		r.do(ctx, r.sched.Failed(tp, schedule.CauseEmit, err, r.src.Now()))
	}
	if rf, ok := errors.AsType[*schedule.Refusal](err); ok && !rf.Letter && r.e.cfg.Poison != StopOnPoison {
		// The poison policy has it: the partitions restart to skip or
		// dead-letter the inputs, which is no failure of the step.
		return nil
	}
	return err
}

// fold folds a poll's records, run by run (a poll's records come in runs
// of one partition), fires the timers due, and emits their outputs.
func (r *Member[S]) fold(ctx context.Context, recs []input.Record) error {
	at := r.src.Now()
	now := at.UnixMilli()
	for i := range recs {
		recs[i].Now = at
	}
	for i := 0; i < len(recs); {
		n := runLength(recs[i:])
		r.foldRun(ctx, recs[i:i+n], now)
		i += n
	}
	if r.timersDue(now) {
		for _, f := range r.sched.Running() { // outputs in a fixed order
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
func (r *Member[S]) foldRun(ctx context.Context, run []input.Record, now int64) {
	tp := recordTP(&run[0])
	f, ok := r.sched.Flow(tp)
	if !ok {
		return
	}
	folded := 0
	defer func() { r.e.cfg.obs().folded(tp.Topic, folded) }()
	for i := range run {
		if f.core.Stopped() != nil {
			return
		}
		o, err := f.core.Fold(&run[i])
		if fe, ok := err.(*core.FoldError); ok {
			if !r.poisoned(ctx, f, &run[i], fe) {
				return
			}
			o, err = nil, nil
		}
		if err != nil {
			r.do(ctx, r.sched.Failed(tp, schedule.CauseFold, fromCore(err), r.src.Now()))
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
func (r *Member[S]) fireTimers(ctx context.Context, f *flow[S], now int64) bool {
	fired, failed, err := f.core.FireTimers(now)
	if err != nil {
		r.do(ctx, r.sched.Failed(f.tp, schedule.CauseTick, fromCore(err), r.src.Now()))
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
// A failure of a table the fold read (ErrTableUnavailable) is not the
// record's: f restarts from its committed state, which waits for the
// table, and folds the record again.
func (r *Member[S]) poisoned(ctx context.Context, f *flow[S], rec *input.Record, cfe *core.FoldError) bool {
	fe := foldError(cfe)
	if errors.Is(fe.Err, ErrTableUnavailable) {
		r.do(ctx, r.sched.Failed(f.tp, schedule.CauseTable, fe, r.src.Now()))
		return false
	}
	// The policy may stop f, which commits first: the outputs in flight
	// before that. A failure may have stopped f itself.
	_ = r.awaitEmit(ctx)
	if cur, ok := r.sched.Flow(f.tp); !ok || cur != f {
		return false
	}
	skip, acts := r.sched.Poisoned(f.tp, fe)
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
		r.do(ctx, r.sched.Failed(f.tp, schedule.CauseFold, skipErr, r.src.Now()))
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
func (r *Member[S]) discarded(f *flow[S], bad []*RecoveredStateError) {
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

// recoverSnapshot loads snapshot s into f's core, noting in u whether
// its state decodes; keepValue: keep an undecodable state's bytes (for
// its dead letter). A state that decodes is handed to the core as
// decoded, so that the key's first fold need not decode it again.
func recoverSnapshot[S any](f *flow[S], u undecodable, codec Codec[S], s store.Snapshot, keepValue bool) error {
	if s.Tombstone {
		delete(u, string(s.Key))
		return f.core.Recovered(s)
	}
	// A copy when the core keeps the state: a fold may change it in place
	// (a []byte state), while s.Value is the store's. Otherwise the state
	// is only checked, and its bytes need no copy.
	keep := f.core.KeepsRecovered(s.Key)
	value := s.Value
	if keep {
		value = bytes.Clone(value)
	}
	state, err := codec.Decode(value)
	if err != nil {
		se := &RecoveredStateError{Input: f.tp, Key: bytes.Clone(s.Key), Offset: s.Offset, Err: err}
		if keepValue {
			se.value = bytes.Clone(s.Value)
		}
		u[string(s.Key)] = se
		return f.core.Recovered(s)
	}
	delete(u, string(s.Key))
	if !keep {
		return f.core.Recovered(s)
	}
	return f.core.RecoveredState(s, state)
}

// sorted is u's errors in key order.
func (u undecodable) sorted() []*RecoveredStateError {
	ses := slices.Collect(maps.Values(u))
	slices.SortFunc(ses, func(a, b *RecoveredStateError) int { return bytes.Compare(a.Key, b.Key) })
	return ses
}

// deadLetters is the dead letter of a record, or nil if the policy sends
// none.
func (r *Member[S]) deadLetters(rec *input.Record, cfe *core.FoldError) []Output {
	if r.e.cfg.Poison != DeadLetterPoison {
		return nil
	}
	own := 0
	if rec != nil {
		own = len(rec.Headers)
	}
	return []Output{fitDeadLetter(deadLetter(r.e.cfg.DeadLetterTopic, rec, foldError(cfe)), own, r.e.cfg.MaxOutputBytes)}
}

// runLength is the length of the run of one partition's records that
// starts recs.
func runLength(recs []input.Record) int {
	n := 1
	for n < len(recs) && recs[n].Partition == recs[0].Partition && recs[n].Topic == recs[0].Topic {
		n++
	}
	return n
}

func recordTP(rec *input.Record) store.TopicPartition {
	return store.TopicPartition{Topic: rec.Topic, Partition: rec.Partition}
}

// do carries out the scheduler's actions, in order.
func (r *Member[S]) do(ctx context.Context, acts []schedule.Action[*flow[S]]) {
	syncStatus(r.status, r.sched, acts)
	for _, a := range acts {
		switch a.Kind {
		case schedule.ActStart:
			r.start(ctx, a.TPs, a.Discard, a.Restart)
		case schedule.ActCancel:
			r.cancelRecovery(a.TP)
		case schedule.ActTeardown:
			if a.Flush {
				r.flushOnRevoke(ctx, a.Flow)
			}
			r.teardown(a.Flow)
		case schedule.ActStop:
			r.stop(ctx, a)
		case schedule.ActHold:
			r.src.Pause(a.TP)
			if a.First {
				r.e.log.Warn("partition waits: a transaction its takeover did not end holds its committed offset, or is left open where it writes; retrying",
					"input", a.TP.String(), "timeout", r.e.cfg.UnstableOffsetTimeout, "err", a.Err)
			}
		case schedule.ActTick:
			r.tick(ctx, a.At)
		case schedule.ActPersist:
			for _, f := range r.sched.Running() {
				if err := r.mode.persist(ctx, f); err != nil {
					r.failed(ctx, f, err)
				}
			}
		case schedule.ActCommit:
			r.commitAll(ctx)
		case schedule.ActDrain:
			r.drainAll(ctx)
		case schedule.ActPromote:
			r.standby.release(a.TP)
		}
	}
}

// reapAll reaps what the running flows have done, in partition order;
// a failure goes to the scheduler.
func (r *Member[S]) reapAll(ctx context.Context) {
	for _, f := range r.sched.Running() {
		if err := r.reap(ctx, f, false); err != nil {
			r.failed(ctx, f, err)
		}
	}
}

// drainAll waits for what every running flow has in flight, in partition
// order; a failure goes to the scheduler.
func (r *Member[S]) drainAll(ctx context.Context) {
	for _, f := range r.sched.Running() {
		if err := r.drain(ctx, f); err != nil {
			r.failed(ctx, f, err)
		}
	}
}

// commitNow commits f and waits for it, and for everything before it.
// What is in flight ends first, so that the commit takes every dirty
// key, also one changed while its write was in flight.
func (r *Member[S]) commitNow(ctx context.Context, f *flow[S]) error {
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
func (r *Member[S]) commit(ctx context.Context, f *flow[S]) bool {
	err := r.mode.commit(ctx, f)
	if err == nil {
		err = r.settleIdle(f)
	}
	if err != nil {
		r.failed(ctx, f, err)
		cur, ok := r.sched.Flow(f.tp)
		return ok && cur == f
	}
	return true
}

func (r *Member[S]) commitAll(ctx context.Context) {
	for _, f := range r.sched.Running() {
		r.commit(ctx, f)
	}
}

// failed reports a failed persist or commit of f.
func (r *Member[S]) failed(ctx context.Context, f *flow[S], err error) {
	c, err := r.mode.failure(f, err)
	r.do(ctx, r.sched.Failed(f.tp, c, err, r.src.Now()))
}

func (r *Member[S]) tick(ctx context.Context, now time.Time) {
	for _, f := range r.sched.Running() { // outputs in a fixed order
		fired, failed, err := f.core.Tick(now.UnixMilli())
		if err != nil {
			r.do(ctx, r.sched.Failed(f.tp, schedule.CauseTick, fromCore(err), r.src.Now()))
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
func (r *Member[S]) flushOnRevoke(ctx context.Context, f *flow[S]) {
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

// stop carries out schedule.ActStop: the flow, if any, commits what it folded
// first (a poison record's partition) and is torn down, leaving nothing
// in the cache; the error is recorded and the partition paused. The log
// line's level is the failure's class: ERROR only for what ends the
// runner, WARN for a fence (expected in a rebalance) and for a transient
// failure's restart, whose lines come at a bounded rate.
func (r *Member[S]) stop(ctx context.Context, a schedule.Action[*flow[S]]) {
	if a.Flow != nil {
		if a.Commit {
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
					"input", a.TP.String(), "err", err)
			} else if err := r.commitNow(ctx, a.Flow); err != nil {
				r.e.log.Error("committing what was folded before the poison record failed; it is replayed",
					"input", a.TP.String(), "err", err)
			}
		}
		r.teardown(a.Flow)
	}
	if a.Class == schedule.ClassExpected {
		r.e.cfg.obs().fenced(fenceReason(a.Err))
	}
	r.errs = append(r.errs, a.Err)
	r.src.Pause(a.TP)
	if !a.Fatal {
		r.status.restarted(a.TP, a.Class, a.Err)
	}
	switch {
	case a.Fatal && a.First:
		r.e.log.Error("partition stopped; the engine stops", "input", a.TP.String(), "class", a.Class.String(), "err", a.Err)
	case a.Fatal:
		r.e.log.Warn("partition stopped as the engine stops", "input", a.TP.String(), "class", a.Class.String(), "err", a.Err)
	case a.Class == schedule.ClassExpected:
		r.e.log.Warn("partition fenced (expected in a rebalance); restarting from the committed state if still owned",
			"input", a.TP.String(), "err", a.Err)
	case a.Class == schedule.ClassPoison:
		if ok, n := r.logs.allow("restart "+a.TP.String(), r.src.Now()); ok {
			r.e.log.Warn("partition restarts from the committed state to go past an input whose output the broker refused (Config.Poison)",
				"input", a.TP.String(), "not_logged_since_last", n, "err", a.Err)
		}
	default:
		if ok, n := r.logs.allow("restart "+a.TP.String(), r.src.Now()); ok {
			r.e.log.Warn("partition failed; restarting from the committed state", "input", a.TP.String(),
				"class", a.Class.String(), "retry_at", a.Retry, "not_logged_since_last", n, "err", a.Err)
		}
	}
}

// fenceReason is a fence's reason for the fences metric: the coordinator's
// error name (ILLEGAL_GENERATION, PRODUCER_FENCED, ...), "not_owner" for
// a restart the coordinator did not confirm, or "fenced".
func fenceReason(err error) string {
	if _, ok := errors.AsType[*input.NotOwnerError](err); ok {
		return "not_owner"
	}
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

func (r *Member[S]) teardown(f *flow[S]) {
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
type rebalanceHandler[S any] struct{ r *Member[S] }

// Assigned starts every assigned partition without a running flow.
func (h rebalanceHandler[S]) Assigned(ctx context.Context, tps []store.TopicPartition) {
	h.callback(ctx, func() []schedule.Action[*flow[S]] {
		// The identity the assignment came with: the status shows the
		// member joined only with its group, member id and generation.
		h.r.status.assignment(h.r.src.Identity())
		return h.r.sched.Assigned(tps)
	})
}

// Revoked flushes and commits (unless NoFlushOnRevoke), then tears the
// flows down before returning.
func (h rebalanceHandler[S]) Revoked(ctx context.Context, tps []store.TopicPartition) {
	h.callback(ctx, func() []schedule.Action[*flow[S]] { return h.r.sched.Revoked(tps) })
}

// Lost tears the flows down: the partitions may already have new owners,
// so nothing is flushed.
func (h rebalanceHandler[S]) Lost(ctx context.Context, tps []store.TopicPartition) {
	h.callback(ctx, func() []schedule.Action[*flow[S]] { return h.r.sched.Lost(tps) })
}

func (h rebalanceHandler[S]) callback(ctx context.Context, input func() []schedule.Action[*flow[S]]) {
	<-h.r.ready
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	_ = h.r.awaitEmit(ctx) // before a revoke's flush; its failure is in Errors
	h.r.do(ctx, input())
	// The group's assignment has just changed: the next step reads the
	// group report rather than a GroupReportInterval later, so that a
	// member assigned nothing, which is ready only on the report's word,
	// becomes ready as soon as the group has settled (a rolling deploy
	// with more members than partitions waits for it).
	h.r.lastGroupReport = time.Time{}
}

// Flows lists the partitions with a running flow, in order.
func (r *Member[S]) Flows() []store.TopicPartition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sched.RunningPartitions()
}

// State reads a key's current state in a partition's flow.
func (r *Member[S]) State(tp store.TopicPartition, key []byte) (S, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.sched.Flow(tp)
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
func (r *Member[S]) FlushAll(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.awaitEmit(ctx) // outputs first, as before a timer's commit
	r.do(ctx, r.sched.FlushRequested(true))
	r.settleAll(ctx)
}

// settleAll writes every running flow's deferred committed states to
// the cache now: after an explicit flush, committed reads show it.
func (r *Member[S]) settleAll(ctx context.Context) {
	for _, f := range r.sched.Running() {
		r.cacheWriting(f)
		if err := f.core.Durable(nil); err != nil {
			r.failed(ctx, f, fromCore(err))
		}
	}
}

// Persist flushes every flow's dirty keys now without advancing the
// committed offset, as the persist timer does (each write still carries
// the committed offset, so it is fenced as a commit would be). On a
// Transactional store deleted keys wait for the next commit, which writes
// their tombstones with the offset past them. Under
// ExactlyOnce snapshots are written only with their batch, so it commits
// the open batches, as FlushAll does.
func (r *Member[S]) Persist(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.awaitEmit(ctx) // as FlushAll
	r.do(ctx, r.sched.FlushRequested(false))
	r.settleAll(ctx)
}

// Close leaves the group; the revoke callbacks flush and tear down.
// Once it has returned, Engine.Close may close the cache.
func (r *Member[S]) Close(ctx context.Context) error {
	defer r.release()
	r.status.close()
	err := r.src.Close(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.awaitEmit(ctx)
	r.do(ctx, r.sched.Closing())
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
func (r *Member[S]) Run(ctx context.Context) error {
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
		backoff := r.sched.PollEnded(err)
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

// Source is the member's consumer, for harnesses in this module (a fault
// on a simulated member: Source().(*simsource.Source).Member()).
func (r *Member[S]) Source() input.Source { return r.src }

// sortedKeys is m's partitions by topic, then partition.
func sortedKeys[V any](m map[store.TopicPartition]V) []store.TopicPartition {
	return slices.SortedFunc(maps.Keys(m), compareTP)
}

func compareTP(a, b store.TopicPartition) int { return a.Compare(b) }

// chanMutex is the runner's lock: a mutex that a testing/synctest bubble
// sees blocked on (chanmutex).
type chanMutex = chanmutex.Mutex
