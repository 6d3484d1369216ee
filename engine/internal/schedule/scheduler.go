// Package schedule is the engine's scheduler: every decision about a
// partition's life on a member, a pure function of the runtime's inputs
// (no I/O, no clock), in the manner of etcd-io/raft. Package engine
// carries out its actions; this package imports nothing of it.
package schedule

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/store"
)

// The scheduler makes every decision of a runner: when a partition starts,
// restarts, waits, stops or is torn down, and when the tick, the persist
// and the commit run. It is a deterministic function of its inputs (the
// poll's start and end, the rebalance callbacks, the outcome of each store
// call, the time) with no I/O and no clock, in the manner of etcd-io/raft:
// each input returns the actions the runtime carries out, in order, and
// the runtime reports their outcomes as further inputs. Its tests are the
// scripts in testdata.
//
// F is the runtime's flow; the scheduler holds it in the partition's
// record and hands it back in actions, and never looks inside it.
type Scheduler[F any] struct {
	cfg   Config
	parts map[store.TopicPartition]*Partition[F]
	// lastPersist, lastCommit and lastTick are when each timer last fired.
	lastPersist, lastCommit, lastTick time.Time
	// fatal ends the runner: set once, by a wait for a held offset that
	// outlasted its timeout.
	fatal error
	// pollBackoff is the wait before the next poll after one that failed
	// (0: the last poll succeeded).
	pollBackoff time.Duration
	// standbys are the standby replicas (Config.StandbyInterval; nil:
	// none): partitions the member follows without holding them. An
	// assignment promotes one: its copy is the base of the partition's
	// start.
	standbys *Replicas
}

// Config is what the scheduler decides with.
type Config struct {
	// PersistInterval is the persist timer's period; 0: no persist timer
	// (exactly-once writes snapshots with its batches only).
	PersistInterval time.Duration
	CommitInterval  time.Duration
	// TickInterval is the tick's period; 0: no tick.
	TickInterval time.Duration
	// FlushOnRevoke: a revoked partition is flushed and committed before
	// its flow is torn down.
	FlushOnRevoke bool
	// UnstableTimeout bounds a wait for a held committed offset.
	UnstableTimeout time.Duration
	// SkipPoison: a record a fold fails on is skipped (engine.Config.Poison
	// is SkipPoison or DeadLetterPoison); otherwise it ends the runner.
	SkipPoison bool
	// DiscardUndecodable: a recovered state that does not decode is
	// deleted (DiscardUndecodableState); otherwise the recovery fails
	// with it, nothing deleted, and the runner ends (a poison failure).
	DiscardUndecodable bool
	// StandbyInterval is the least time between two rounds of the
	// standby replicas that are caught up; 0: no standby replicas.
	// StandbyRetry is the wait before a failed one opens again. (The
	// partitions they follow come from the group report, not a listing.)
	StandbyInterval, StandbyRetry time.Duration

	// The runtime's error types are its own: the scheduler asks about
	// them, and has them made, through these two, so that it needs
	// nothing of the runtime's package (which imports it).

	// ReplaysFail reports whether a replay from the committed state meets
	// err again, for a reason of the runtime's (a fold that fails on a
	// record, a state that does not decode): such a failure is poison
	// (nil: none is).
	ReplaysFail func(err error) bool
	// FoldError is the runtime's error naming the input src of tp, whose
	// outputs were refused for good with err (Refusal): the error the
	// partition stops with, as a poison record's.
	FoldError func(tp store.TopicPartition, src Source, err error) error
}

// Backoff of the acquisition retries of a partition whose committed offset
// a transaction holds.
const (
	unstableFirstRetry = 100 * time.Millisecond
	unstableMaxRetry   = 5 * time.Second
)

// sharedIDFences is how many times a partition's producer may be fenced
// in a row while this member owns the partition in one generation before
// the fences are taken for another application initialising the same
// transactional.id (a prefix used twice on the cluster): a new owner in
// this group would have moved the member to a new generation, or out of
// the group, by the second.
const sharedIDFences = 3

// Backoff of the restarts of a partition that failed on a transient or
// expected error: the first restart follows the next poll at once (a fence
// in a rebalance, a coordinator that moved), later ones wait
// restartFirstDelay doubling up to restartMaxDelay, each with a jitter of
// ±50% so that partitions failing together do not retry together. A
// partition that ran for restartResetAfter before it failed starts over
// at an immediate restart.
const (
	restartFirstDelay = 200 * time.Millisecond
	restartMaxDelay   = 30 * time.Second
	restartResetAfter = time.Minute
)

// Backoff of the polls after one that failed (a broker down, a network
// partition): pollFirstBackoff doubling up to pollMaxBackoff.
const (
	pollFirstBackoff = 100 * time.Millisecond
	pollMaxBackoff   = 5 * time.Second
)

func New[F any](cfg Config, now time.Time) *Scheduler[F] {
	s := &Scheduler[F]{cfg: cfg, parts: map[store.TopicPartition]*Partition[F]{},
		lastPersist: now, lastCommit: now, lastTick: now}
	if cfg.StandbyInterval > 0 {
		s.standbys = NewReplicas(ReplicaConfig{Interval: cfg.StandbyInterval, Retry: cfg.StandbyRetry})
	}
	return s
}

// Kind is what the runtime is asked to do.
type Kind uint8

const (
	// ActStart: take TPs over, in order, then recover each one taken
	// (all takeovers first: a recovery can wait, and a member evicted
	// meanwhile must not take a later partition's producer from its new
	// owner), off the polling goroutine: the running partitions keep
	// folding meanwhile. Restart: a restart rather than an assignment,
	// outside a rebalance callback, so the runtime confirms with the
	// group's coordinator that the member still owns TPs before it
	// takes them over (either way it positions the input at the
	// committed offset it recovered: a restart's input has fetched past
	// it, an assignment's has fetched nothing). Report each takeover with
	// acquired and each recovery with recovered or failed, on the
	// polling goroutine. Discard: the recoveries delete the keys whose
	// recovered state does not decode, and so recover in full (a delta
	// decodes only what it reads); otherwise such a key fails the
	// recovery, which the runtime reports as failed.
	ActStart Kind = iota + 1
	// ActCancel: TP was released while it started: end its takeover and
	// recovery, wait for them, and release whatever they took (the
	// callback that released it returns only after).
	ActCancel
	// ActTeardown: drop Flow's cache and release its store partition;
	// with Flush, flush and commit it first (a revoke), swallowing a
	// failure (the new owner replays).
	ActTeardown
	// ActStop: the partition stopped on Err: commit Flow first if Commit,
	// tear Flow down if set, record Err, pause the partition, log it as
	// its Class says. Fatal: Err ends the runner.
	ActStop
	// ActHold: an acquisition was refused because a transaction holds the
	// committed offset: pause the partition; First: log the wait.
	ActHold
	// ActTick: tick every running flow at the action's time.
	ActTick
	// ActPersist: write every running flow's dirty keys.
	ActPersist
	// ActCommit: commit every running flow.
	ActCommit
	// ActDrain: wait for what every running flow has in flight.
	ActDrain
	// ActPromote: TP is assigned while a standby replica follows it:
	// close the replica; what it wrote stays in the cache, the base of
	// the start that follows (a delta from its checkpoint).
	ActPromote
)

// Action is one thing for the runtime to do.
type Action[F any] struct {
	Kind    Kind
	TPs     []store.TopicPartition // ActStart
	Restart bool                   // ActStart
	// Discard (ActStart): delete the keys whose recovered state does
	// not decode.
	Discard bool
	TP      store.TopicPartition // ActTeardown, ActStop, ActHold, ActCancel
	Flow    F                    // ActTeardown, ActStop (zero: none)
	Flush   bool                 // ActTeardown
	Err     error                // ActStop, ActHold
	First   bool                 // ActHold; ActStop: the runner's fatal error
	Fatal   bool                 // ActStop
	Class   Class                // ActStop
	// Commit (ActStop): commit what Flow folded before Err first (a
	// poison record: everything before it is committed).
	Commit bool
	At     time.Time // ActTick
	// Retry (ActStop, a restart): when the restart is due.
	Retry time.Time
}

// Cause is what failed, for the decision whether a restart can help.
type Cause uint8

const (
	// CauseAcquire: the takeover failed.
	CauseAcquire Cause = iota + 1
	// CauseRecover: the recovery read failed.
	CauseRecover
	// CauseSetup: the flow could not be set up (its cache): a restart
	// meets the same.
	CauseSetup
	// CauseFold: a fold failed on a record, or the cache under it: the
	// replay feeds it the same record.
	CauseFold
	// CauseTick: a tick failed.
	CauseTick
	// CauseWrite: an at-least-once snapshot write or offset commit failed;
	// the keys stay dirty.
	CauseWrite
	// CauseBatch: an exactly-once batch failed; its outcome is unknown, so
	// the flow must rewind to the committed state.
	CauseBatch
	// CauseEmit: the poll's outputs were not emitted; the replay emits
	// them again.
	CauseEmit
	// CauseTable: a fold failed because a table it reads failed, not
	// because of its record: the restart waits for the table, and the
	// replay folds the record again.
	CauseTable
)

func (c Cause) String() string {
	return [...]string{"?", "acquire", "recover", "setup", "fold", "tick", "write", "batch", "emit", "table"}[c]
}

// Class is a failure's class in the failure model (docs/operations.md):
// each class has one behaviour.
type Class uint8

const (
	// ClassTransient: the broker, the network, a coordinator that moved:
	// the partition restarts from the committed state, with backoff.
	ClassTransient Class = iota + 1
	// ClassExpected: a fence in a rebalance: another member owns the
	// partition now, or this one rejoins. It restarts as a transient
	// failure does (if the member still owns the partition), and is
	// counted and logged at WARN, never ERROR.
	ClassExpected
	// ClassPoison: a record the fold fails on, a state that does not
	// decode, a snapshot or output the store refuses: a restart would meet
	// it again. Unless the poison policy skips it, it ends the runner.
	ClassPoison
	// ClassPermanent: a configuration that cannot work (a missing topic,
	// a snapshot topic that is not compacted, an option): it ends the
	// runner at once.
	ClassPermanent
)

func (c Class) String() string {
	return [...]string{"?", "transient", "expected", "poison", "permanent"}[c]
}

// Classify is err's class, failed in c.
func (s *Scheduler[F]) Classify(c Cause, err error) Class {
	switch {
	case errors.Is(err, store.ErrMisconfigured), errors.Is(err, store.ErrNotTransactional):
		return ClassPermanent
	case errors.Is(err, store.ErrFenced):
		return ClassExpected
	case c == CauseSetup:
		return ClassPermanent // the cache cannot be set up
	case c == CauseEmit && errors.Is(err, store.ErrRecordRefused):
		// An output the broker refuses for good (too large, invalid):
		// the replay would make it again.
		return ClassPoison
	case c == CauseEmit, c == CauseTable:
		// Outputs Emit could not take are replayed, and a record whose
		// table failed is folded again once the table is back, whatever
		// else the error (unless it says the configuration is wrong,
		// above).
		return ClassTransient
	case !s.retriable(err):
		return ClassPoison
	}
	return ClassTransient
}

// PollStarting: a poll is about to start. Pending restarts become due
// after it.
func (s *Scheduler[F]) PollStarting() {
	for _, p := range s.parts {
		p.due()
	}
}

// Wakeups are what ends a poll's wait besides the scheduler's own timers
// and retries: due times kept by the runtime's mechanisms, and work in
// flight whose outcome a poll takes in. The flows are asked through
// Timer and Busy, so that the scheduler stays blind to what a flow is.
type Wakeups[F any] struct {
	// Timer is when a running flow's earliest processing-time timer is
	// due, in Unix milliseconds (nil, or ok false: none).
	Timer func(F) (at int64, ok bool)
	// Busy reports whether a running flow has a store call in flight.
	Busy func(F) bool
	// Recovering: a takeover or recovery is in flight.
	Recovering bool
	// Report is when the next group report is due (zero: none).
	Report time.Time
}

// PollWait is how long the poll about to wait for records may wait: until
// the first of the next timer, retry or standby round (nextDue), a
// processing-time timer of a running flow and a group report, at least
// a millisecond; and at most inflightPollWait while a store call or a
// recovery is in flight. The poll asks once it has its turn, after any
// rebalance callback that went first.
func (s *Scheduler[F]) PollWait(now time.Time, w Wakeups[F]) time.Duration {
	due := s.nextDue()
	busy := w.Recovering
	for _, p := range s.parts {
		if p.phase != PhaseRunning {
			continue
		}
		if w.Timer != nil {
			if at, ok := w.Timer(p.flow); ok && time.UnixMilli(at).Before(due) {
				due = time.UnixMilli(at)
			}
		}
		busy = busy || (w.Busy != nil && w.Busy(p.flow))
	}
	if !w.Report.IsZero() && w.Report.Before(due) {
		due = w.Report
	}
	wait := max(due.Sub(now), time.Millisecond)
	if busy {
		wait = min(wait, inflightPollWait)
	}
	return wait
}

// inflightPollWait bounds a poll's wait while a store call is in flight.
// A call's outcome reaches the core, the status and the lag metrics when
// it is reaped, after a poll: on an idle partition the poll would wait for
// the next timer (a commit interval), and the status would show the last
// commit but one while the broker already shows the last. A recovery's
// end ends the poll in flight (Source.Go); the bound covers one that
// ends while no poll is.
const inflightPollWait = 100 * time.Millisecond

// TimersDueIn reports whether a running flow has a timer due (due says,
// from the flow).
func (s *Scheduler[F]) TimersDueIn(due func(F) bool) bool {
	for _, p := range s.parts {
		if p.phase == PhaseRunning && due(p.flow) {
			return true
		}
	}
	return false
}

// nextDue is when the next timer fires, a held offset is retried or a
// restart or a round of the standby replicas is due.
func (s *Scheduler[F]) nextDue() time.Time {
	due := s.lastCommit.Add(s.cfg.CommitInterval)
	if s.cfg.PersistInterval > 0 {
		if t := s.lastPersist.Add(s.cfg.PersistInterval); t.Before(due) {
			due = t
		}
	}
	if s.cfg.TickInterval > 0 {
		if t := s.lastTick.Add(s.cfg.TickInterval); t.Before(due) {
			due = t
		}
	}
	if s.standbys != nil {
		if t := s.standbys.NextDue(); t.Before(due) {
			due = t
		}
	}
	for _, p := range s.parts {
		if p.held != nil && p.held.retry.Before(due) {
			due = p.held.retry
		}
		if (p.phase == PhaseWaiting || p.phase == PhaseWaitingDue) && p.held == nil && !p.retry.IsZero() && p.retry.Before(due) {
			due = p.retry
		}
	}
	return due
}

// Polled: the poll returned. folding is false when its records are not
// folded (a dead context, a poll that failed with no records): its due
// restarts wait for the next poll. Otherwise the restarts still due start,
// each on its own and in partition order (they reach the store), except a
// held offset's retry whose backoff runs.
//
// A restart is due only if the poll's callbacks left the partition alone:
// the poll may have told the member it lost the partition, or assigned it
// anew (a poll can last minutes, a recovery inside it waiting; the member
// may have been evicted and rejoined meanwhile). A member that restarted
// a flow without asking would take the partition's producer from its new
// owner.
func (s *Scheduler[F]) Polled(now time.Time, folding bool) []Action[F] {
	var acts []Action[F]
	for _, tp := range sortedKeys(s.parts) {
		p := s.parts[tp]
		if p.phase != PhaseWaitingDue {
			continue
		}
		if !folding || (p.held != nil && now.Before(p.held.retry)) || (p.held == nil && now.Before(p.retry)) {
			p.undue()
			continue
		}
		p.start()
		acts = append(acts, Action[F]{Kind: ActStart, TPs: []store.TopicPartition{tp}, Restart: true, Discard: s.cfg.DiscardUndecodable})
	}
	return acts
}

// PollEnded: a step's poll ended with err (nil: it succeeded, or the
// runner is closing). It returns how long the runtime waits, on the
// source's clock, before the next poll: 0 after a success; after a
// failure, a backoff that doubles with each failure in a row.
func (s *Scheduler[F]) PollEnded(err error) (wait time.Duration) {
	if err == nil {
		s.pollBackoff = 0
		return 0
	}
	s.pollBackoff = min(max(2*s.pollBackoff, pollFirstBackoff), pollMaxBackoff)
	return s.pollBackoff
}

// Assigned: the callback assigned tps. Each one neither running nor
// starting starts, whatever its phase: a due restart is void (this start
// replaces it), a stopped partition gets a new chance.
func (s *Scheduler[F]) Assigned(tps []store.TopicPartition) []Action[F] {
	var acts []Action[F]
	var start []store.TopicPartition
	for _, tp := range tps {
		p := s.parts[tp]
		if p == nil {
			p = &Partition[F]{tp: tp}
			s.parts[tp] = p
		}
		if p.phase == PhaseRunning || p.phase == PhaseStarting {
			continue
		}
		if s.standbys != nil && s.standbys.Remove(tp) {
			acts = append(acts, Action[F]{Kind: ActPromote, TP: tp})
		}
		p.start()
		start = append(start, tp)
	}
	if len(start) == 0 {
		return acts
	}
	return append(acts, Action[F]{Kind: ActStart, TPs: start, Discard: s.cfg.DiscardUndecodable})
}

// Standbys are the member's standby replicas (nil: Config.StandbyInterval
// is 0). A partition the member holds (in any phase) has none: the
// standbys follow only the others, and an assignment promotes one.
func (s *Scheduler[F]) Standbys() *Replicas { return s.standbys }

// FollowStandbys starts scheduling standby replicas, with interval and
// retry as Config.StandbyInterval and StandbyRetry, if they are not
// scheduled yet (a member that follows replicas only once its group
// names it warm-ups), and returns them.
func (s *Scheduler[F]) FollowStandbys(interval, retry time.Duration) *Replicas {
	if s.standbys == nil {
		s.standbys = NewReplicas(ReplicaConfig{Interval: interval, Retry: retry})
	}
	return s.standbys
}

// Revoked: the callback revoked tps. Their records go; a running flow is
// flushed and committed (with flushOnRevoke), then torn down, before the
// callback returns.
func (s *Scheduler[F]) Revoked(tps []store.TopicPartition) []Action[F] {
	return s.release(tps, s.cfg.FlushOnRevoke)
}

// Lost: the callback lost tps: they may have new owners already, so
// nothing is flushed.
func (s *Scheduler[F]) Lost(tps []store.TopicPartition) []Action[F] {
	return s.release(tps, false)
}

// Closing: the runner closes; every flow left is torn down, unflushed.
func (s *Scheduler[F]) Closing() []Action[F] {
	return s.release(sortedKeys(s.parts), false)
}

func (s *Scheduler[F]) release(tps []store.TopicPartition, flush bool) []Action[F] {
	var acts []Action[F]
	for _, tp := range tps {
		p := s.parts[tp]
		if p == nil {
			continue
		}
		delete(s.parts, tp)
		switch p.phase {
		case PhaseRunning:
			acts = append(acts, Action[F]{Kind: ActTeardown, TP: tp, Flow: p.flow, Flush: flush})
		case PhaseStarting:
			acts = append(acts, Action[F]{Kind: ActCancel, TP: tp})
		}
	}
	return acts
}

// Acquired: a takeover of an ActStart ended. proceed says whether the
// runtime goes on to recover the partition; a takeover that succeeded for a
// partition released meanwhile is the runtime's to release.
//
// A refusal for a held committed offset, or for a transaction of the
// partition's lineage left open (which only an abort ends), waits: the
// partition is paused and retried after a later poll, with a growing
// backoff, while the other partitions fold and commit; a wait past
// unstableTimeout ends the runner with the error.
func (s *Scheduler[F]) Acquired(tp store.TopicPartition, err error, now time.Time) (proceed bool, acts []Action[F]) {
	p := s.parts[tp]
	if p == nil || p.phase != PhaseStarting {
		return false, nil
	}
	switch {
	case err == nil:
		p.acquired()
		return true, nil
	case !errors.Is(err, store.ErrOffsetUnstable) && !errors.Is(err, store.ErrHangingTransaction):
		return false, s.Failed(tp, CauseAcquire, fmt.Errorf("engine: acquiring %s: %w", tp, err), now)
	}
	h := p.held
	acts = []Action[F]{{Kind: ActHold, TP: tp, Err: err, First: h == nil}}
	if h == nil {
		h = &heldOffset{since: now, backoff: unstableFirstRetry}
	}
	h.err = err
	if waited := now.Sub(h.since); waited >= s.cfg.UnstableTimeout {
		err = withWaited(tp, err, waited)
		p.stop(err, false)
		first := s.fatal == nil
		if first {
			s.fatal = err
		}
		return false, append(acts, Action[F]{Kind: ActStop, TP: tp, Err: err, Fatal: true, Class: ClassPermanent, First: first})
	}
	h.retry = now.Add(h.backoff)
	h.backoff = min(2*h.backoff, unstableMaxRetry)
	p.await(h)
	return false, acts
}

// withWaited is err with how long the offset was held.
func withWaited(tp store.TopicPartition, err error, waited time.Duration) error {
	if he, ok := errors.AsType[store.HeldError](err); ok {
		return he.Held(waited)
	}
	if errors.Is(err, store.ErrHangingTransaction) {
		return fmt.Errorf("engine: %s: held for %s by a transaction left open: %w", tp, waited, err)
	}
	return fmt.Errorf("engine: %s: its committed offset has been held by an open transaction for %s: %w", tp, waited, err)
}

// Recovered: the recovery of an ActStart finished at the committed
// offset assigned; the flow runs. The refusals it was handed
// (refusals) are spent, but a record's, which lasts until the committed
// offset passes it. A flow recovered for a partition released meanwhile
// is torn down.
func (s *Scheduler[F]) Recovered(tp store.TopicPartition, f F, assigned int64, now time.Time) []Action[F] {
	if p := s.parts[tp]; p != nil && p.phase == PhaseStarting {
		p.run(f, now)
		p.refused = slices.DeleteFunc(p.refused, func(r core.Refusal) bool { return r.Offset < assigned })
		return nil
	}
	return []Action[F]{{Kind: ActTeardown, TP: tp, Flow: f}}
}

// Failed: a call for tp failed with err at now. What becomes of the
// partition depends on the failure's class (classify): a transient or
// expected failure restarts it from the committed state after a backoff;
// a poison or permanent one stops it and ends the runner. A failure of a
// partition that is not starting or running (released meanwhile, or
// stopped earlier in the same poll) changes nothing.
func (s *Scheduler[F]) Failed(tp store.TopicPartition, c Cause, err error, now time.Time) []Action[F] {
	p := s.parts[tp]
	if p == nil || (p.phase != PhaseRunning && p.phase != PhaseStarting) {
		return nil
	}
	if c == CauseWrite && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// Interrupted, not failed: the keys stay dirty for the next
		// flush (the revoke's, on shutdown).
		return nil
	}
	if rf, ok := errors.AsType[*Refusal](err); ok {
		switch srcs := rf.By[tp]; {
		case rf.Letter:
			return s.end(p, ClassPoison, refusedLetterError(tp, rf.Err), false)
		case len(srcs) > 0:
			return s.refused(p, srcs, rf.Err)
		}
		// Its outputs were lost with the refused ones: they are
		// replayed.
		retry := p.backoff(now)
		f := p.stop(err, true)
		return []Action[F]{{Kind: ActStop, TP: tp, Flow: f, Err: err, Class: ClassTransient, Retry: retry}}
	}
	k := s.Classify(c, err)
	if k == ClassExpected {
		if shared := p.producerFenced(err); shared != nil {
			err, k = shared, ClassPermanent
		}
	}
	if k == ClassPoison || k == ClassPermanent {
		return s.end(p, k, err, false)
	}
	retry := p.backoff(now)
	f := p.stop(err, true)
	return []Action[F]{{Kind: ActStop, TP: tp, Flow: f, Err: err, Class: k, Retry: retry}}
}

// Poisoned: a fold or tick of tp failed on a record (a *FoldError). It
// reports whether the runtime skips the record (the poison policy);
// otherwise the partition commits what it folded before the record and
// stops, and the runner ends with err.
func (s *Scheduler[F]) Poisoned(tp store.TopicPartition, err error) (skip bool, acts []Action[F]) {
	p := s.parts[tp]
	if p == nil || p.phase != PhaseRunning {
		return false, nil
	}
	if s.cfg.SkipPoison {
		return true, nil
	}
	return false, s.end(p, ClassPoison, err, true)
}

// refused: the broker refused for good the outputs that srcs of p made,
// with err. Under StopOnPoison the runner ends with the fold error of the
// first (Config.FoldError); otherwise p restarts from its committed state, after the next
// poll, with srcs marked: its next flow fails them without folding them,
// for the poison policy (a restart to skip a poison input is not a
// failure of the partition: it does not back off).
func (s *Scheduler[F]) refused(p *Partition[F], srcs []Source, err error) []Action[F] {
	err = fmt.Errorf("its output was refused for good: %w", err)
	fe := s.cfg.FoldError(p.tp, srcs[0], err)
	if !s.cfg.SkipPoison {
		return s.end(p, ClassPoison, fe, false)
	}
	p.refused = append(p.refused, coreRefusals(srcs, err)...)
	p.retry = time.Time{}
	f := p.stop(fe, true)
	return []Action[F]{{Kind: ActStop, TP: p.tp, Flow: f, Err: fe, Class: ClassPoison}}
}

// Refusals are the refusals tp's next flow fails (core.Config.Refused):
// a record's lasts until the committed offset passes it; a tick's or
// timer's is handed to the next flow that runs (recovered).
func (s *Scheduler[F]) Refusals(tp store.TopicPartition) []core.Refusal {
	if p := s.parts[tp]; p != nil {
		return slices.Clone(p.refused)
	}
	return nil
}

// end stops p for good on err and ends the runner with it (the first such
// error is the one the runner returns); commit: p's flow commits what it
// folded before it is torn down.
//
// first marks the error the runner ends with: the runtime logs it at
// ERROR, the others (partitions stopping on the same misconfiguration, as
// the runner ends) at WARN.
func (s *Scheduler[F]) end(p *Partition[F], k Class, err error, commit bool) []Action[F] {
	first := s.fatal == nil
	if first {
		s.fatal = err
	}
	f := p.stop(err, false)
	return []Action[F]{{Kind: ActStop, TP: p.tp, Flow: f, Err: err, Class: k, Fatal: true, Commit: commit, First: first}}
}

// TimersDue reports whether timers(now) would fire any.
func (s *Scheduler[F]) TimersDue(now time.Time) bool {
	return s.tickDue(now) || s.persistDue(now) || s.commitDue(now)
}

func (s *Scheduler[F]) tickDue(now time.Time) bool {
	return s.cfg.TickInterval > 0 && now.Sub(s.lastTick) >= s.cfg.TickInterval
}

func (s *Scheduler[F]) persistDue(now time.Time) bool {
	return s.cfg.PersistInterval > 0 && now.Sub(s.lastPersist) >= s.cfg.PersistInterval
}

func (s *Scheduler[F]) commitDue(now time.Time) bool {
	return now.Sub(s.lastCommit) >= s.cfg.CommitInterval
}

// Timers: the poll's records are folded; the timers that are due fire, in
// the order tick, persist, commit. A persist due with a commit is left to
// the commit, which writes every dirty key too, in the transaction of its
// offset: a persist first would make a transaction of its own (two per
// partition per interval where one does).
func (s *Scheduler[F]) Timers(now time.Time) []Action[F] {
	var acts []Action[F]
	if s.tickDue(now) {
		s.lastTick = now
		acts = append(acts, Action[F]{Kind: ActTick, At: now})
	}
	commit := s.commitDue(now)
	if s.persistDue(now) {
		s.lastPersist = now
		if !commit {
			acts = append(acts, Action[F]{Kind: ActPersist})
		}
	}
	if commit {
		s.lastCommit = now
		acts = append(acts, Action[F]{Kind: ActCommit})
	}
	return acts
}

// FlushRequested: the user asks for every running flow's dirty keys to
// be written now (Persist), and with commit for its offset to be
// committed too (FlushAll). What is in flight ends first, so that a key
// changed while its write was in flight is written again; the request
// returns once what it started has ended. The timers are left as they
// are: a request between two commits does not move the next one.
func (s *Scheduler[F]) FlushRequested(commit bool) []Action[F] {
	write := Action[F]{Kind: ActPersist}
	if commit {
		write.Kind = ActCommit
	}
	return []Action[F]{{Kind: ActDrain}, write, {Kind: ActDrain}}
}

// StartTimers: the runtime's clock starts at now (its input opened): the
// timers fire first an interval after it.
func (s *Scheduler[F]) StartTimers(now time.Time) {
	s.lastPersist, s.lastCommit, s.lastTick = now, now, now
}

// Fail: the runner ends with err (a misconfiguration found outside any
// partition), unless an earlier error ends it already.
func (s *Scheduler[F]) Fail(err error) {
	if s.fatal == nil {
		s.fatal = err
	}
}

// Err is the error the runner ends with (nil: none yet).
func (s *Scheduler[F]) Err() error { return s.fatal }

// Partitions are the records of the partitions the member holds, in
// partition order.
func (s *Scheduler[F]) Partitions() iter.Seq2[store.TopicPartition, *Partition[F]] {
	return func(yield func(store.TopicPartition, *Partition[F]) bool) {
		for _, tp := range sortedKeys(s.parts) {
			if !yield(tp, s.parts[tp]) {
				return
			}
		}
	}
}

// Holds reports whether the member holds tp in any phase (taking it
// over, running, waiting, stopped): a standby replica must leave it be.
func (s *Scheduler[F]) Holds(tp store.TopicPartition) bool { return s.parts[tp] != nil }

// Flow is tp's running flow.
func (s *Scheduler[F]) Flow(tp store.TopicPartition) (F, bool) {
	if p := s.parts[tp]; p != nil && p.phase == PhaseRunning {
		return p.flow, true
	}
	var zero F
	return zero, false
}

// Running is the running flows in partition order. Whatever the runtime
// does to every flow reaches the store, the cluster's history or the
// outputs in the order it does it, so it never follows the map's random
// order: the same calls on the simulated cluster must give the same run.
func (s *Scheduler[F]) Running() []F {
	var out []F
	for _, tp := range sortedKeys(s.parts) {
		if p := s.parts[tp]; p.phase == PhaseRunning {
			out = append(out, p.flow)
		}
	}
	return out
}

// RunningPartitions is the partitions with a running flow, in order.
func (s *Scheduler[F]) RunningPartitions() []store.TopicPartition {
	var out []store.TopicPartition
	for _, tp := range sortedKeys(s.parts) {
		if s.parts[tp].phase == PhaseRunning {
			out = append(out, tp)
		}
	}
	return out
}

// retriable reports whether a flow stopped by err may be started again
// from the committed state. A record or state that cannot be read, or a
// fold that fails on a record (Config.ReplaysFail), fails again on replay
// (ClassPoison).
//
// So does a snapshot or output the store refuses before sending it (too
// large, a reserved key, an output without a topic or for the snapshot
// topic), or the broker refuses for good (store.ErrRecordRefused):
// the fold makes it again on replay.
func (s *Scheduler[F]) retriable(err error) bool {
	for _, again := range []error{store.ErrCorruptRecord, store.ErrValueTooLarge, store.ErrReservedKey, store.ErrInvalidOutput, store.ErrNotTransactional} {
		if errors.Is(err, again) {
			return false
		}
	}
	if s.cfg.ReplaysFail != nil && s.cfg.ReplaysFail(err) {
		return false
	}
	return !errors.Is(err, store.ErrRecordRefused)
}

// sortedKeys is m's partitions by topic, then partition.
func sortedKeys[V any](m map[store.TopicPartition]V) []store.TopicPartition {
	return slices.SortedFunc(maps.Keys(m), store.TopicPartition.Compare)
}
