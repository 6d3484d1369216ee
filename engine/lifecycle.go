package engine

import (
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/store"
)

// phase is where an assigned partition is in its life on this member, in
// the words of its status (PartitionState): starting (which the status
// shows as recovering once the store reports the snapshot read), running,
// waiting, stopped. A partition not assigned to the member has no record
// at all: revoking or losing it deletes its record, whatever its phase.
//
//	            assigned                 recovered
//	(none) ──────────────▶ starting ─────────────────▶ running
//	                          │ ▲                         │
//	  acquisition or recovery │ │ the poll after          │ fold, tick, write,
//	  failed                  ▼ │ (unless its callbacks   │ batch or emit failed
//	                    waiting ─▶ waiting, due           │
//	                          ▲  poll starts              │
//	                          └─────────── retriable ─────┤
//	                                                      ▼
//	                             stopped ◀── not retriable (a restart would fail again)
//
// revoked or lost: any phase ──▶ (none), the flow torn down (revoked: after
// its flush and commit), a recovery in flight cancelled.
type phase uint8

const (
	// starting: the takeover and the recovery run, off the polling
	// goroutine (a start action is out); the partition folds nothing.
	phaseStarting phase = iota + 1
	// running: the flow folds the partition's records.
	phaseRunning
	// waiting: stopped by an error a restart may get past, or refused
	// because a transaction holds the committed offset; it is started
	// again after the next poll, if that poll leaves it assigned.
	phaseWaiting
	// waitingDue: waiting, and a poll is in progress: the partition
	// restarts when it returns, unless one of its callbacks touched it.
	phaseWaitingDue
	// stopped: stopped by an error that a restart would meet again (a
	// poison record, a misconfiguration): the runner ends with it.
	phaseStopped
)

func (p phase) String() string {
	switch p {
	case phaseStarting:
		return "starting"
	case phaseRunning:
		return "running"
	case phaseWaiting:
		return "waiting"
	case phaseWaitingDue:
		return "waiting, due"
	case phaseStopped:
		return "stopped"
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// partition is the one record of an assigned partition's life. F is the
// runtime's flow (a core and an acquired store partition); the scheduler
// only holds it.
type partition[F any] struct {
	tp    store.TopicPartition
	phase phase
	// flow is set in phaseRunning only.
	flow F
	// err is why the partition left phaseRunning or phaseStarting:
	// set in phaseWaiting (unless only held), phaseWaitingDue and
	// phaseStopped.
	err error
	// held is set while the partition's acquisitions are refused because
	// a transaction its takeover did not end holds its committed offset:
	// in phaseWaiting, phaseWaitingDue, and phaseStarting (a retry).
	held *heldOffset
	// restarts counts the restarts since the partition last ran for
	// restartResetAfter; retry is when the pending restart is due (zero:
	// after the next poll). since is when the flow began to run.
	restarts int
	retry    time.Time
	since    time.Time
	// fencedAs and producerFences count the fences of the partition's
	// producer in a row as one group identity (see sharedIDFences).
	fencedAs       store.GroupIdentity
	producerFences int
	// refused are the inputs whose outputs the broker refused for good,
	// which the poison policy skips: each flow of the partition fails
	// them without folding them (core.Config.Refused).
	refused []core.Refusal
}

// heldOffset is the wait of an acquisition for its committed offset.
type heldOffset struct {
	since, retry time.Time
	backoff      time.Duration
	// err is the last refusal: the status's reason for as long as the
	// wait lasts.
	err error
}

// The transitions. Each keeps the invariants of the fields above; nothing
// else writes phase, flow or held.

// start: a partition (new, or any phase but running) begins its takeover.
// Its flow is not set: starting holds none. held stays: a wait for a held
// offset lasts across its retries.
func (p *partition[F]) start() {
	var zero F
	p.phase, p.flow, p.err = phaseStarting, zero, nil
}

// run: the recovery finished; the flow folds from now on. A wait for a
// held offset is over.
func (p *partition[F]) run(f F, now time.Time) {
	p.phase, p.flow, p.err, p.held = phaseRunning, f, nil, nil
	p.since = now
}

// backoff is when the restart of a partition failing at now is due: the
// next poll for the first restart, then restartFirstDelay doubling up to
// restartMaxDelay, jittered. A partition that had run for
// restartResetAfter starts over. It counts the restart.
//
// The jitter is a hash of the partition and the restart's number, not a
// random draw: the scheduler stays a function of its inputs (the sim's
// runs are reproducible), and partitions still spread out.
func (p *partition[F]) backoff(now time.Time) time.Time {
	if p.phase == phaseRunning && now.Sub(p.since) >= restartResetAfter {
		p.restarts = 0
	}
	p.restarts++
	if p.restarts == 1 {
		p.retry = time.Time{}
		return p.retry
	}
	d := restartFirstDelay << min(p.restarts-2, 20)
	d = min(d, restartMaxDelay)
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d#%d", p.tp.Topic, p.tp.Partition, p.restarts)
	// d × [0.5, 1.5)
	d = d/2 + time.Duration((uint64(d)>>16)*uint64(h.Sum32()>>16))
	p.retry = now.Add(d)
	return p.retry
}

// acquired: the takeover succeeded (the recovery runs next); a wait for
// a held offset is over.
func (p *partition[F]) acquired() {
	p.held = nil
}

// stop: the partition leaves running or starting on err; it returns the
// flow to tear down (zero if it had none). restart says whether a later
// poll starts it again. Any wait for a held offset is over: it ended in
// err.
func (p *partition[F]) stop(err error, restart bool) (flow F) {
	var zero F
	flow, p.flow, p.err, p.held = p.flow, zero, err, nil
	p.phase = phaseStopped
	if restart {
		p.phase = phaseWaiting
	}
	return flow
}

// await: the acquisition was refused for a held offset; it is retried
// after a poll once retry has passed. Only a starting partition awaits.
func (p *partition[F]) await(h *heldOffset) {
	p.phase, p.held = phaseWaiting, h
}

// due: a poll starts; a pending restart is due after it.
func (p *partition[F]) due() {
	if p.phase == phaseWaiting {
		p.phase = phaseWaitingDue
	}
}

// undue: the poll ended without folding (a dead context, a failed poll):
// its due restarts wait for the next one.
func (p *partition[F]) undue() {
	if p.phase == phaseWaitingDue {
		p.phase = phaseWaiting
	}
}

// producerFenced counts a fence: one of the partition's producer (another
// producer initialised its transactional.id) while the member owns the
// partition as the same group identity as at the last such fence, adds to
// a run; any other fence, or a new identity, starts the run again. A run
// of sharedIDFences means another application uses the transactional.id:
// the returned error says so (nil before that).
func (p *partition[F]) producerFenced(err error) error {
	fe, ok := errors.AsType[*store.FencedError](err)
	if !ok || fe.TransactionalID == "" || !fe.Identity.Valid() {
		p.producerFences = 0
		return nil
	}
	if p.producerFences == 0 || fe.Identity != p.fencedAs {
		p.fencedAs, p.producerFences = fe.Identity, 0
	}
	p.producerFences++
	if p.producerFences < sharedIDFences {
		return nil
	}
	return &store.ConfigError{
		Subject: fmt.Sprintf("transactional.id %q", fe.TransactionalID),
		Problem: fmt.Sprintf("its producer was fenced %d times in a row while this member owned %s as %s: "+
			"another application initialises the same transactional.id", p.producerFences, p.tp, fe.Identity),
		Fix: "give every application its own TransactionalIDPrefix (it is cluster-scoped, like a group id)",
		Err: err,
	}
}
