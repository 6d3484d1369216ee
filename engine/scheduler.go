package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/internal/kafkatopic"
	"github.com/snapfence/snapfence/store"
)

// The scheduler makes every decision of a runner: when a partition starts,
// restarts, waits, stops or is torn down, and when the tick, the persist
// and the commit run. It is a deterministic function of its inputs (the
// poll's start and end, the rebalance callbacks, the outcome of each store
// call, the time) with no I/O and no clock, in the manner of etcd-io/raft:
// each input returns the actions the runtime carries out, in order, and
// the runtime reports their outcomes as further inputs. Its tests are the
// scripts in testdata/scheduler.
//
// F is the runtime's flow; the scheduler holds it in the partition's
// record and hands it back in actions, and never looks inside it.
type scheduler[F any] struct {
	cfg   schedulerConfig
	parts map[store.TopicPartition]*partition[F]
	// lastPersist, lastCommit and lastTick are when each timer last fired.
	lastPersist, lastCommit, lastTick time.Time
	// fatal ends the runner: set once, by a wait for a held offset that
	// outlasted its timeout.
	fatal error
	// pollBackoff is the wait before the next poll after one that failed
	// (0: the last poll succeeded).
	pollBackoff time.Duration
}

// schedulerConfig is what the scheduler decides with.
type schedulerConfig struct {
	// persistInterval is the persist timer's period; 0: no persist timer
	// (exactly-once writes snapshots with its batches only).
	persistInterval time.Duration
	commitInterval  time.Duration
	// tickInterval is the tick's period; 0: no tick.
	tickInterval time.Duration
	// flushOnRevoke: a revoked partition is flushed and committed before
	// its flow is torn down.
	flushOnRevoke bool
	// unstableTimeout bounds a wait for a held committed offset.
	unstableTimeout time.Duration
	// skipPoison: a record a fold fails on is skipped (Config.Poison is
	// SkipPoison or DeadLetterPoison); otherwise it ends the runner.
	skipPoison bool
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

func newScheduler[F any](cfg schedulerConfig, now time.Time) *scheduler[F] {
	return &scheduler[F]{cfg: cfg, parts: map[store.TopicPartition]*partition[F]{},
		lastPersist: now, lastCommit: now, lastTick: now}
}

// actionKind is what the runtime is asked to do.
type actionKind uint8

const (
	// actStart: take tps over, in order, then recover each one taken
	// (all takeovers first: a recovery can wait, and a member evicted
	// meanwhile must not take a later partition's producer from its new
	// owner), off the polling goroutine: the running partitions keep
	// folding meanwhile. seek: a restart rather than an assignment
	// (either way the runtime positions the input at the committed
	// offset it recovered: a restart's input has fetched past it, an
	// assignment's has fetched nothing). Report each takeover with
	// acquired and each recovery with recovered or failed, on the
	// polling goroutine.
	actStart actionKind = iota + 1
	// actCancel: tp was released while it started: end its takeover and
	// recovery, wait for them, and release whatever they took (the
	// callback that released it returns only after).
	actCancel
	// actTeardown: drop flow's cache and release its store partition;
	// with flush, flush and commit it first (a revoke), swallowing a
	// failure (the new owner replays).
	actTeardown
	// actStop: the partition stopped on err: commit flow first if commit,
	// tear flow down if set, record err, pause the partition, log it as
	// its class says. fatal: err ends the runner.
	actStop
	// actHold: an acquisition was refused because a transaction holds the
	// committed offset: pause the partition; first: log the wait.
	actHold
	// actTick: tick every running flow at the action's time.
	actTick
	// actPersist: write every running flow's dirty keys.
	actPersist
	// actCommit: commit every running flow.
	actCommit
	// actDrain: wait for what every running flow has in flight.
	actDrain
)

// action is one thing for the runtime to do.
type action[F any] struct {
	kind  actionKind
	tps   []store.TopicPartition // actStart
	seek  bool                   // actStart
	tp    store.TopicPartition   // actTeardown, actStop, actHold, actCancel
	flow  F                      // actTeardown, actStop (zero: none)
	flush bool                   // actTeardown
	err   error                  // actStop, actHold
	first bool                   // actHold; actStop: the runner's fatal error
	fatal bool                   // actStop
	class class                  // actStop
	// commit (actStop): commit what flow folded before err first (a
	// poison record: everything before it is committed).
	commit bool
	at     time.Time // actTick
	// retry (actStop, a restart): when the restart is due.
	retry time.Time
}

// cause is what failed, for the decision whether a restart can help.
type cause uint8

const (
	// causeAcquire: the takeover failed.
	causeAcquire cause = iota + 1
	// causeRecover: the recovery read failed.
	causeRecover
	// causeSetup: the flow could not be set up (its cache): a restart
	// meets the same.
	causeSetup
	// causeFold: a fold failed on a record, or the cache under it: the
	// replay feeds it the same record.
	causeFold
	// causeTick: a tick failed.
	causeTick
	// causeWrite: an at-least-once snapshot write or offset commit failed;
	// the keys stay dirty.
	causeWrite
	// causeBatch: an exactly-once batch failed; its outcome is unknown, so
	// the flow must rewind to the committed state.
	causeBatch
	// causeEmit: the poll's outputs were not emitted; the replay emits
	// them again.
	causeEmit
)

func (c cause) String() string {
	return [...]string{"?", "acquire", "recover", "setup", "fold", "tick", "write", "batch", "emit"}[c]
}

// class is a failure's class in the failure model (docs/operations.md):
// each class has one behaviour.
type class uint8

const (
	// classTransient: the broker, the network, a coordinator that moved:
	// the partition restarts from the committed state, with backoff.
	classTransient class = iota + 1
	// classExpected: a fence in a rebalance: another member owns the
	// partition now, or this one rejoins. It restarts as a transient
	// failure does (if the member still owns the partition), and is
	// counted and logged at WARN, never ERROR.
	classExpected
	// classPoison: a record the fold fails on, a state that does not
	// decode, a snapshot or output the store refuses: a restart would meet
	// it again. Unless the poison policy skips it, it ends the runner.
	classPoison
	// classPermanent: a configuration that cannot work (a missing topic,
	// a snapshot topic that is not compacted, an option): it ends the
	// runner at once.
	classPermanent
)

func (c class) String() string {
	return [...]string{"?", "transient", "expected", "poison", "permanent"}[c]
}

// classify is err's class, failed in c.
func classify(c cause, err error) class {
	switch {
	case errors.Is(err, store.ErrMisconfigured), errors.Is(err, store.ErrNotTransactional):
		return classPermanent
	case errors.Is(err, store.ErrFenced):
		return classExpected
	case c == causeSetup:
		return classPermanent // the cache cannot be set up
	case c == causeEmit && kafkatopic.RefusedForGood(err):
		// An output the broker refuses for good (too large, invalid):
		// the replay would make it again.
		return classPoison
	case c == causeEmit:
		// Outputs Emit could not take are replayed, whatever else the
		// error (unless Emit says the configuration is wrong, above).
		return classTransient
	case !retriable(err):
		return classPoison
	}
	return classTransient
}

// pollStarting: a poll is about to start. Pending restarts become due
// after it.
func (s *scheduler[F]) pollStarting() {
	for _, p := range s.parts {
		p.due()
	}
}

// wakeups are what ends a poll's wait besides the scheduler's own timers
// and retries: due times kept by the runtime's mechanisms, and work in
// flight whose outcome a poll takes in. The flows are asked through
// timer and busy, so that the scheduler stays blind to what a flow is.
type wakeups[F any] struct {
	// timer is when a running flow's earliest processing-time timer is
	// due, in Unix milliseconds (nil, or ok false: none).
	timer func(F) (at int64, ok bool)
	// busy reports whether a running flow has a store call in flight.
	busy func(F) bool
	// recovering: a takeover or recovery is in flight.
	recovering bool
	// standby is when the next standby round is due; report when the
	// next group report is (zero: none).
	standby, report time.Time
}

// pollWait is how long the poll about to wait for records may wait: until
// the first of the next timer or retry (nextDue), a processing-time
// timer of a running flow, a standby round and a group report, at least
// a millisecond; and at most inflightPollWait while a store call or a
// recovery is in flight. The poll asks once it has its turn, after any
// rebalance callback that went first.
func (s *scheduler[F]) pollWait(now time.Time, w wakeups[F]) time.Duration {
	due := s.nextDue()
	busy := w.recovering
	for _, p := range s.parts {
		if p.phase != phaseRunning {
			continue
		}
		if w.timer != nil {
			if at, ok := w.timer(p.flow); ok && time.UnixMilli(at).Before(due) {
				due = time.UnixMilli(at)
			}
		}
		busy = busy || (w.busy != nil && w.busy(p.flow))
	}
	for _, t := range []time.Time{w.standby, w.report} {
		if !t.IsZero() && t.Before(due) {
			due = t
		}
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

// timersDueIn reports whether a running flow has a timer due (due says,
// from the flow).
func (s *scheduler[F]) timersDueIn(due func(F) bool) bool {
	for _, p := range s.parts {
		if p.phase == phaseRunning && due(p.flow) {
			return true
		}
	}
	return false
}

// nextDue is when the next timer fires or a held offset is retried.
func (s *scheduler[F]) nextDue() time.Time {
	due := s.lastCommit.Add(s.cfg.commitInterval)
	if s.cfg.persistInterval > 0 {
		if t := s.lastPersist.Add(s.cfg.persistInterval); t.Before(due) {
			due = t
		}
	}
	if s.cfg.tickInterval > 0 {
		if t := s.lastTick.Add(s.cfg.tickInterval); t.Before(due) {
			due = t
		}
	}
	for _, p := range s.parts {
		if p.held != nil && p.held.retry.Before(due) {
			due = p.held.retry
		}
		if (p.phase == phaseRestartPending || p.phase == phaseRestartDue) && p.held == nil && !p.retry.IsZero() && p.retry.Before(due) {
			due = p.retry
		}
	}
	return due
}

// polled: the poll returned. folding is false when its records are not
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
func (s *scheduler[F]) polled(now time.Time, folding bool) []action[F] {
	var acts []action[F]
	for _, tp := range sortedKeys(s.parts) {
		p := s.parts[tp]
		if p.phase != phaseRestartDue {
			continue
		}
		if !folding || (p.held != nil && now.Before(p.held.retry)) || (p.held == nil && now.Before(p.retry)) {
			p.undue()
			continue
		}
		p.start()
		acts = append(acts, action[F]{kind: actStart, tps: []store.TopicPartition{tp}, seek: true})
	}
	return acts
}

// pollEnded: a step's poll ended with err (nil: it succeeded, or the
// runner is closing). It returns how long the runtime waits, on the
// source's clock, before the next poll: 0 after a success; after a
// failure, a backoff that doubles with each failure in a row.
func (s *scheduler[F]) pollEnded(err error) (wait time.Duration) {
	if err == nil {
		s.pollBackoff = 0
		return 0
	}
	s.pollBackoff = min(max(2*s.pollBackoff, pollFirstBackoff), pollMaxBackoff)
	return s.pollBackoff
}

// assigned: the callback assigned tps. Each one neither running nor
// starting starts, whatever its phase: a due restart is void (this start
// replaces it), a stopped partition gets a new chance.
func (s *scheduler[F]) assigned(tps []store.TopicPartition) []action[F] {
	var start []store.TopicPartition
	for _, tp := range tps {
		p := s.parts[tp]
		if p == nil {
			p = &partition[F]{tp: tp}
			s.parts[tp] = p
		}
		if p.phase == phaseRunning || p.phase == phaseStarting {
			continue
		}
		p.start()
		start = append(start, tp)
	}
	if len(start) == 0 {
		return nil
	}
	return []action[F]{{kind: actStart, tps: start}}
}

// revoked: the callback revoked tps. Their records go; a running flow is
// flushed and committed (with flushOnRevoke), then torn down, before the
// callback returns.
func (s *scheduler[F]) revoked(tps []store.TopicPartition) []action[F] {
	return s.release(tps, s.cfg.flushOnRevoke)
}

// lost: the callback lost tps: they may have new owners already, so
// nothing is flushed.
func (s *scheduler[F]) lost(tps []store.TopicPartition) []action[F] {
	return s.release(tps, false)
}

// closing: the runner closes; every flow left is torn down, unflushed.
func (s *scheduler[F]) closing() []action[F] {
	return s.release(sortedKeys(s.parts), false)
}

func (s *scheduler[F]) release(tps []store.TopicPartition, flush bool) []action[F] {
	var acts []action[F]
	for _, tp := range tps {
		p := s.parts[tp]
		if p == nil {
			continue
		}
		delete(s.parts, tp)
		switch p.phase {
		case phaseRunning:
			acts = append(acts, action[F]{kind: actTeardown, tp: tp, flow: p.flow, flush: flush})
		case phaseStarting:
			acts = append(acts, action[F]{kind: actCancel, tp: tp})
		}
	}
	return acts
}

// acquired: a takeover of an actStart ended. proceed says whether the
// runtime goes on to recover the partition; a takeover that succeeded for a
// partition released meanwhile is the runtime's to release.
//
// A refusal for a held committed offset, or for a transaction of the
// partition's lineage left open (which only an abort ends), waits: the
// partition is paused and retried after a later poll, with a growing
// backoff, while the other partitions fold and commit; a wait past
// unstableTimeout ends the runner with the error.
func (s *scheduler[F]) acquired(tp store.TopicPartition, err error, now time.Time) (proceed bool, acts []action[F]) {
	p := s.parts[tp]
	if p == nil || p.phase != phaseStarting {
		return false, nil
	}
	switch {
	case err == nil:
		p.acquired()
		return true, nil
	case !errors.Is(err, store.ErrOffsetUnstable) && !errors.Is(err, store.ErrHangingTransaction):
		return false, s.failed(tp, causeAcquire, fmt.Errorf("engine: acquiring %s: %w", tp, err), now)
	}
	h := p.held
	acts = []action[F]{{kind: actHold, tp: tp, err: err, first: h == nil}}
	if h == nil {
		h = &heldOffset{since: now, backoff: unstableFirstRetry}
	}
	h.err = err
	if waited := now.Sub(h.since); waited >= s.cfg.unstableTimeout {
		err = withWaited(tp, err, waited)
		p.stop(err, false)
		first := s.fatal == nil
		if first {
			s.fatal = err
		}
		return false, append(acts, action[F]{kind: actStop, tp: tp, err: err, fatal: true, class: classPermanent, first: first})
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

// recovered: the recovery of an actStart finished at the committed
// offset assigned; the flow runs. The refusals it was handed
// (refusals) are spent, but a record's, which lasts until the committed
// offset passes it. A flow recovered for a partition released meanwhile
// is torn down.
func (s *scheduler[F]) recovered(tp store.TopicPartition, f F, assigned int64, now time.Time) []action[F] {
	if p := s.parts[tp]; p != nil && p.phase == phaseStarting {
		p.run(f, now)
		p.refused = slices.DeleteFunc(p.refused, func(r core.Refusal) bool { return r.Offset < assigned })
		return nil
	}
	return []action[F]{{kind: actTeardown, tp: tp, flow: f}}
}

// failed: a call for tp failed with err at now. What becomes of the
// partition depends on the failure's class (classify): a transient or
// expected failure restarts it from the committed state after a backoff;
// a poison or permanent one stops it and ends the runner. A failure of a
// partition that is not starting or running (released meanwhile, or
// stopped earlier in the same poll) changes nothing.
func (s *scheduler[F]) failed(tp store.TopicPartition, c cause, err error, now time.Time) []action[F] {
	p := s.parts[tp]
	if p == nil || (p.phase != phaseRunning && p.phase != phaseStarting) {
		return nil
	}
	if c == causeWrite && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// Interrupted, not failed: the keys stay dirty for the next
		// flush (the revoke's, on shutdown).
		return nil
	}
	if rf, ok := errors.AsType[*refusal](err); ok {
		switch srcs := rf.by[tp]; {
		case rf.letter:
			return s.end(p, classPoison, refusedLetterError(tp, rf.err), false)
		case len(srcs) > 0:
			return s.refused(p, srcs, rf.err)
		}
		// Its outputs were lost with the refused ones: they are
		// replayed.
		retry := p.backoff(now)
		f := p.stop(err, true)
		return []action[F]{{kind: actStop, tp: tp, flow: f, err: err, class: classTransient, retry: retry}}
	}
	k := classify(c, err)
	if k == classExpected {
		if shared := p.producerFenced(err); shared != nil {
			err, k = shared, classPermanent
		}
	}
	if k == classPoison || k == classPermanent {
		return s.end(p, k, err, false)
	}
	retry := p.backoff(now)
	f := p.stop(err, true)
	return []action[F]{{kind: actStop, tp: tp, flow: f, err: err, class: k, retry: retry}}
}

// poisoned: a fold or tick of tp failed on a record (a *FoldError). It
// reports whether the runtime skips the record (the poison policy);
// otherwise the partition commits what it folded before the record and
// stops, and the runner ends with err.
func (s *scheduler[F]) poisoned(tp store.TopicPartition, err error) (skip bool, acts []action[F]) {
	p := s.parts[tp]
	if p == nil || p.phase != phaseRunning {
		return false, nil
	}
	if s.cfg.skipPoison {
		return true, nil
	}
	return false, s.end(p, classPoison, err, true)
}

// refused: the broker refused for good the outputs that srcs of p made,
// with err. Under StopOnPoison the runner ends with the *FoldError of the
// first; otherwise p restarts from its committed state, after the next
// poll, with srcs marked: its next flow fails them without folding them,
// for the poison policy (a restart to skip a poison input is not a
// failure of the partition: it does not back off).
func (s *scheduler[F]) refused(p *partition[F], srcs []source, err error) []action[F] {
	err = fmt.Errorf("its output was refused for good: %w", err)
	fe := foldError(p.tp, srcs[0], err)
	if !s.cfg.skipPoison {
		return s.end(p, classPoison, fe, false)
	}
	p.refused = append(p.refused, coreRefusals(srcs, err)...)
	p.retry = time.Time{}
	f := p.stop(fe, true)
	return []action[F]{{kind: actStop, tp: p.tp, flow: f, err: fe, class: classPoison}}
}

// refusals are the refusals tp's next flow fails (core.Config.Refused):
// a record's lasts until the committed offset passes it; a tick's or
// timer's is handed to the next flow that runs (recovered).
func (s *scheduler[F]) refusals(tp store.TopicPartition) []core.Refusal {
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
func (s *scheduler[F]) end(p *partition[F], k class, err error, commit bool) []action[F] {
	first := s.fatal == nil
	if first {
		s.fatal = err
	}
	f := p.stop(err, false)
	return []action[F]{{kind: actStop, tp: p.tp, flow: f, err: err, class: k, fatal: true, commit: commit, first: first}}
}

// timersDue reports whether timers(now) would fire any.
func (s *scheduler[F]) timersDue(now time.Time) bool {
	return s.tickDue(now) || s.persistDue(now) || s.commitDue(now)
}

func (s *scheduler[F]) tickDue(now time.Time) bool {
	return s.cfg.tickInterval > 0 && now.Sub(s.lastTick) >= s.cfg.tickInterval
}

func (s *scheduler[F]) persistDue(now time.Time) bool {
	return s.cfg.persistInterval > 0 && now.Sub(s.lastPersist) >= s.cfg.persistInterval
}

func (s *scheduler[F]) commitDue(now time.Time) bool {
	return now.Sub(s.lastCommit) >= s.cfg.commitInterval
}

// timers: the poll's records are folded; the timers that are due fire, in
// the order tick, persist, commit. A persist due with a commit is left to
// the commit, which writes every dirty key too, in the transaction of its
// offset: a persist first would make a transaction of its own (two per
// partition per interval where one does).
func (s *scheduler[F]) timers(now time.Time) []action[F] {
	var acts []action[F]
	if s.tickDue(now) {
		s.lastTick = now
		acts = append(acts, action[F]{kind: actTick, at: now})
	}
	commit := s.commitDue(now)
	if s.persistDue(now) {
		s.lastPersist = now
		if !commit {
			acts = append(acts, action[F]{kind: actPersist})
		}
	}
	if commit {
		s.lastCommit = now
		acts = append(acts, action[F]{kind: actCommit})
	}
	return acts
}

// flushRequested: the user asks for every running flow's dirty keys to
// be written now (Persist), and with commit for its offset to be
// committed too (FlushAll). What is in flight ends first, so that a key
// changed while its write was in flight is written again; the request
// returns once what it started has ended. The timers are left as they
// are: a request between two commits does not move the next one.
func (s *scheduler[F]) flushRequested(commit bool) []action[F] {
	write := action[F]{kind: actPersist}
	if commit {
		write.kind = actCommit
	}
	return []action[F]{{kind: actDrain}, write, {kind: actDrain}}
}

// holds reports whether the member holds tp in any phase (taking it
// over, running, waiting, stopped): a standby replica must leave it be.
func (s *scheduler[F]) holds(tp store.TopicPartition) bool { return s.parts[tp] != nil }

// flow is tp's running flow.
func (s *scheduler[F]) flow(tp store.TopicPartition) (F, bool) {
	if p := s.parts[tp]; p != nil && p.phase == phaseRunning {
		return p.flow, true
	}
	var zero F
	return zero, false
}

// running is the running flows in partition order. Whatever the runtime
// does to every flow reaches the store, the cluster's history or the
// outputs in the order it does it, so it never follows the map's random
// order: the same calls on the simulated cluster must give the same run.
func (s *scheduler[F]) running() []F {
	var out []F
	for _, tp := range sortedKeys(s.parts) {
		if p := s.parts[tp]; p.phase == phaseRunning {
			out = append(out, p.flow)
		}
	}
	return out
}

// runningPartitions is the partitions with a running flow, in order.
func (s *scheduler[F]) runningPartitions() []store.TopicPartition {
	var out []store.TopicPartition
	for _, tp := range sortedKeys(s.parts) {
		if s.parts[tp].phase == phaseRunning {
			out = append(out, tp)
		}
	}
	return out
}

// retriable reports whether a flow stopped by err may be started again
// from the committed state. A record or state that cannot be read, or a
// fold that fails on a record, fails again on replay (classPoison).
//
// So does a snapshot or output the store refuses before sending it (too
// large, a reserved key, an output without a topic or for the snapshot
// topic), or the broker refuses for good (kafkatopic.RefusedForGood):
// the fold makes it again on replay.
func retriable(err error) bool {
	var fe *FoldError
	var se *RecoveredStateError
	for _, again := range []error{store.ErrCorruptRecord, store.ErrValueTooLarge, store.ErrReservedKey, store.ErrInvalidOutput, store.ErrNotTransactional} {
		if errors.Is(err, again) {
			return false
		}
	}
	return !errors.As(err, &fe) && !errors.As(err, &se) && !kafkatopic.RefusedForGood(err)
}
