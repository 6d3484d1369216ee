package schedule

import (
	"iter"
	"time"

	"github.com/snapfence/snapfence/store"
)

// Replicas decides the life of a set of replicas: local copies of
// partitions the caller follows without owning them (a member's standby
// replicas, a view's partitions, a lookup table's). It is the scheduler
// of a reader without a group: pure, as Scheduler is; the caller feeds it
// what its replica.Readers did and does what Next says. A member's
// Scheduler holds one for its standbys (Scheduler.Standbys), which it
// promotes when the member is assigned their partitions; a view has one
// of its own.
//
// Each replica's life:
//
//	         added                  opened
//	(none) ─────────▶ opening ─────────────▶ following ──▶ (read, read, ...)
//	                    ▲ │ open failed          │ read failed
//	          retry due │ ▼                      ▼
//	                  failed ◀───────────────────┘
//
//	removed (its partition assigned to the member, or gone): (none).
//
// With FailureEnds, a failure also ends the run (Err): the failed replica
// opens again only in the next run (Resume). The caller stops the others
// (a view's Run), or lets a round it began read them first (a view's
// Step).
type Replicas struct {
	cfg   ReplicaConfig
	parts map[store.TopicPartition]*Replica
	// nextRound and nextList are when the next round and listing are due
	// (zero: at once).
	nextRound, nextList time.Time
	// listed: the partitions were listed once.
	listed bool
	err    error
}

// ReplicaConfig is what Replicas decides with.
type ReplicaConfig struct {
	// Interval is the least time between two rounds while every replica
	// is caught up; a round with a replica still behind its log end makes
	// the next one due at once. 0: a round is due whenever the caller
	// asks (a view, whose reads wait for records themselves).
	Interval time.Duration
	// Retry is the wait after a failure before the replica opens again
	// (0: at the next round).
	Retry time.Duration
	// ListEvery is how often the partitions to follow are listed again
	// (0: the set is fixed).
	ListEvery time.Duration
	// FailureEnds: a failure ends the run (a view's Run returns it);
	// otherwise the replica retries on its own and the others go on.
	FailureEnds bool
}

// ReplicaPhase is where a replica is in its life.
type ReplicaPhase uint8

const (
	// ReplicaOpening: due to open (new, or its retry is due).
	ReplicaOpening ReplicaPhase = iota + 1
	// ReplicaFollowing: open; it reads.
	ReplicaFollowing
	// ReplicaFailed: its open or a read failed; it opens again at its
	// retry time.
	ReplicaFailed
)

func (p ReplicaPhase) String() string {
	switch p {
	case ReplicaOpening:
		return "opening"
	case ReplicaFollowing:
		return "following"
	case ReplicaFailed:
		return "failed"
	}
	return "?"
}

// Replica is the one record of a replica's life.
type Replica struct {
	phase ReplicaPhase
	// behind: its last read left it behind its log end.
	behind  bool
	err     error
	retryAt time.Time
}

// Phase is the replica's phase.
func (r *Replica) Phase() ReplicaPhase { return r.phase }

// Err is the failure the replica is in (nil unless ReplicaFailed).
func (r *Replica) Err() error { return r.err }

// RetryAt is when a failed replica opens again; zero: in the next run
// (ReplicaConfig.FailureEnds).
func (r *Replica) RetryAt() time.Time { return r.retryAt }

// Behind: the replica's last read left it behind its log end.
func (r *Replica) Behind() bool { return r.behind }

// ReplicaStep is what Next asks the caller to do with a replica.
type ReplicaStep uint8

const (
	// StepRest: nothing now (it failed and its retry is not due).
	StepRest ReplicaStep = iota
	// StepOpen: open the replica (report Opened).
	StepOpen
	// StepRead: read it (report ReadEnded).
	StepRead
)

// NewReplicas returns a scheduler of no replicas, whose first round and
// listing are due at once.
func NewReplicas(cfg ReplicaConfig) *Replicas {
	return &Replicas{cfg: cfg, parts: map[store.TopicPartition]*Replica{}}
}

// Add: the caller follows tp (a no-op if it does): the replica is due
// to open.
func (rs *Replicas) Add(tp store.TopicPartition) {
	if rs.parts[tp] == nil {
		rs.parts[tp] = &Replica{phase: ReplicaOpening}
	}
}

// Remove: the caller no longer follows tp (its partition was assigned,
// or is gone); it reports whether tp had a replica.
func (rs *Replicas) Remove(tp store.TopicPartition) bool {
	_, ok := rs.parts[tp]
	delete(rs.parts, tp)
	return ok
}

// Has reports whether tp has a replica.
func (rs *Replicas) Has(tp store.TopicPartition) bool { return rs.parts[tp] != nil }

// Replica is tp's record (nil: none).
func (rs *Replicas) Replica(tp store.TopicPartition) *Replica { return rs.parts[tp] }

// All are the replicas' records, in partition order.
func (rs *Replicas) All() iter.Seq2[store.TopicPartition, *Replica] {
	return func(yield func(store.TopicPartition, *Replica) bool) {
		for _, tp := range sortedKeys(rs.parts) {
			if !yield(tp, rs.parts[tp]) {
				return
			}
		}
	}
}

// Len is the number of replicas.
func (rs *Replicas) Len() int { return len(rs.parts) }

// RoundDue reports whether a round is due: the caller asks Next of each
// replica, then reports RoundEnded.
func (rs *Replicas) RoundDue(now time.Time) bool { return !now.Before(rs.nextRound) }

// ListDue reports whether the partitions to follow are due to be listed
// again (always before the first listing); Listed says they were, at
// now, whether or not the listing succeeded (a failed one waits for the
// next).
func (rs *Replicas) ListDue(now time.Time) bool {
	return !rs.listed || (rs.cfg.ListEvery > 0 && !now.Before(rs.nextList))
}

// Listed: see ListDue.
func (rs *Replicas) Listed(now time.Time) {
	rs.listed, rs.nextList = true, now.Add(rs.cfg.ListEvery)
}

// Next is what the caller does with tp's replica at now.
func (rs *Replicas) Next(tp store.TopicPartition, now time.Time) ReplicaStep {
	r := rs.parts[tp]
	switch {
	case r == nil:
		return StepRest
	case r.phase == ReplicaFollowing:
		return StepRead
	case r.phase == ReplicaOpening || (!r.retryAt.IsZero() && !now.Before(r.retryAt)):
		return StepOpen
	}
	return StepRest
}

// Opened: the open of tp's replica ended at now with err (nil: it
// follows).
func (rs *Replicas) Opened(tp store.TopicPartition, err error, now time.Time) {
	r := rs.parts[tp]
	if r == nil {
		return
	}
	if err != nil {
		rs.failed(r, err, now)
		return
	}
	r.phase, r.err, r.behind = ReplicaFollowing, nil, true
}

// ReadEnded: a read of tp's replica ended at now; err: it failed (the
// reader closed); behind: it is still behind its log end.
func (rs *Replicas) ReadEnded(tp store.TopicPartition, behind bool, err error, now time.Time) {
	r := rs.parts[tp]
	if r == nil || r.phase != ReplicaFollowing {
		return
	}
	if err != nil {
		rs.failed(r, err, now)
		return
	}
	r.behind = behind
}

func (rs *Replicas) failed(r *Replica, err error, now time.Time) {
	r.phase, r.err, r.behind, r.retryAt = ReplicaFailed, err, false, now.Add(rs.cfg.Retry)
	if rs.cfg.FailureEnds {
		r.retryAt = time.Time{} // the next run's (Resume)
		if rs.err == nil {
			rs.err = err
		}
	}
}

// RoundEnded: a round ended at now. The next is due Interval later, or
// at once while a replica that follows is behind its log end.
func (rs *Replicas) RoundEnded(now time.Time) {
	rs.nextRound = now.Add(rs.cfg.Interval)
	for _, r := range rs.parts {
		if r.phase == ReplicaFollowing && r.behind {
			rs.nextRound = now
			return
		}
	}
}

// NextDue is when the next round or listing is due: the earliest that
// ends a caller's wait.
func (rs *Replicas) NextDue() time.Time {
	if rs.cfg.ListEvery > 0 && rs.nextList.Before(rs.nextRound) {
		return rs.nextList
	}
	return rs.nextRound
}

// Err is the failure that ended the run (FailureEnds; nil: none).
func (rs *Replicas) Err() error { return rs.err }

// Resume: a new run starts; the failure that ended the last is
// forgotten, and every failed replica is due to open at once.
func (rs *Replicas) Resume() {
	rs.err = nil
	for _, r := range rs.parts {
		if r.phase == ReplicaFailed {
			r.phase, r.err, r.retryAt = ReplicaOpening, nil, time.Time{}
		}
	}
}
