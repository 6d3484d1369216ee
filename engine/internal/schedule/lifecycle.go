package schedule

import (
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/store"
)

// Phase is where an assigned partition is in its life on this member, in
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
type Phase uint8

const (
	// PhaseStarting: the takeover and the recovery run, off the polling
	// goroutine (a start action is out); the partition folds nothing.
	PhaseStarting Phase = iota + 1
	// PhaseRunning: the flow folds the partition's records.
	PhaseRunning
	// PhaseWaiting: stopped by an error a restart may get past, or refused
	// because a transaction holds the committed offset; it is started
	// again after the next poll, if that poll leaves it assigned.
	PhaseWaiting
	// PhaseWaitingDue: waiting, and a poll is in progress: the partition
	// restarts when it returns, unless one of its callbacks touched it.
	PhaseWaitingDue
	// PhaseStopped: stopped by an error that a restart would meet again (a
	// poison record, a misconfiguration): the runner ends with it.
	PhaseStopped
)

func (p Phase) String() string {
	switch p {
	case PhaseStarting:
		return "starting"
	case PhaseRunning:
		return "running"
	case PhaseWaiting:
		return "waiting"
	case PhaseWaitingDue:
		return "waiting, due"
	case PhaseStopped:
		return "stopped"
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// Partition is the one record of an assigned partition's life. F is the
// runtime's flow (a core and an acquired store partition); the scheduler
// only holds it. The runtime reads it (its status) through the accessors
// below; only the transitions write it.
type Partition[F any] struct {
	tp    store.TopicPartition
	phase Phase
	// flow is set in PhaseRunning only.
	flow F
	// err is why the partition left PhaseRunning or PhaseStarting:
	// set in PhaseWaiting (unless only held), PhaseWaitingDue and
	// PhaseStopped.
	err error
	// held is set while the partition's acquisitions are refused because
	// a transaction its takeover did not end holds its committed offset:
	// in PhaseWaiting, PhaseWaitingDue, and PhaseStarting (a retry).
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

// Phase is the partition's phase.
func (p *Partition[F]) Phase() Phase { return p.phase }

// Flow is the partition's flow, set in PhaseRunning only.
func (p *Partition[F]) Flow() (F, bool) { return p.flow, p.phase == PhaseRunning }

// Err is why the partition left PhaseRunning or PhaseStarting (nil: it
// did not, or waits only for a held offset).
func (p *Partition[F]) Err() error { return p.err }

// Held is the last refusal of the partition's acquisition while a
// transaction holds its committed offset (nil: none is held).
func (p *Partition[F]) Held() error {
	if p.held == nil {
		return nil
	}
	return p.held.err
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
func (p *Partition[F]) start() {
	var zero F
	p.phase, p.flow, p.err = PhaseStarting, zero, nil
}

// run: the recovery finished; the flow folds from now on. A wait for a
// held offset is over.
func (p *Partition[F]) run(f F, now time.Time) {
	p.phase, p.flow, p.err, p.held = PhaseRunning, f, nil, nil
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
func (p *Partition[F]) backoff(now time.Time) time.Time {
	if p.phase == PhaseRunning && now.Sub(p.since) >= restartResetAfter {
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
func (p *Partition[F]) acquired() {
	p.held = nil
}

// stop: the partition leaves running or starting on err; it returns the
// flow to tear down (zero if it had none). restart says whether a later
// poll starts it again. Any wait for a held offset is over: it ended in
// err.
func (p *Partition[F]) stop(err error, restart bool) (flow F) {
	var zero F
	flow, p.flow, p.err, p.held = p.flow, zero, err, nil
	p.phase = PhaseStopped
	if restart {
		p.phase = PhaseWaiting
	}
	return flow
}

// await: the acquisition was refused for a held offset; it is retried
// after a poll once retry has passed. Only a starting partition awaits.
func (p *Partition[F]) await(h *heldOffset) {
	p.phase, p.held = PhaseWaiting, h
}

// due: a poll starts; a pending restart is due after it.
func (p *Partition[F]) due() {
	if p.phase == PhaseWaiting {
		p.phase = PhaseWaitingDue
	}
}

// undue: the poll ended without folding (a dead context, a failed poll):
// its due restarts wait for the next one.
func (p *Partition[F]) undue() {
	if p.phase == PhaseWaitingDue {
		p.phase = PhaseWaiting
	}
}

// producerFenced counts a fence: one of the partition's producer (another
// producer initialised its transactional.id) while the member owns the
// partition as the same group identity as at the last such fence, adds to
// a run; any other fence, or a new identity, starts the run again. A run
// of sharedIDFences means another application uses the transactional.id:
// the returned error says so (nil before that).
func (p *Partition[F]) producerFenced(err error) error {
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
