package engine

import (
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/snapfence/snapfence/engine/internal/schedule"
	"github.com/snapfence/snapfence/internal/input"
	"github.com/snapfence/snapfence/store"
)

// PartitionState is where an assigned partition is in its life on this
// member (the scheduler's phases, as an operator sees them).
type PartitionState string

// The partition states.
const (
	// StateStarting: the takeover of the partition's snapshot store runs
	// (its producer initialised, its committed offset read).
	StateStarting PartitionState = "starting"
	// StateRecovering: its snapshots are being read into the local cache;
	// PartitionStatus.Recovery tells how far.
	StateRecovering PartitionState = "recovering"
	// StateRunning: recovered; the partition's records are folded.
	StateRunning PartitionState = "running"
	// StateWaiting: stopped by an error a restart may get past
	// (PartitionStatus.Err), or refused because a transaction the
	// takeover did not end holds its committed offset (Held); it starts
	// again after a later poll.
	StateWaiting PartitionState = "waiting"
	// StateStopped: stopped by an error a restart would meet again (a
	// fold that fails on a record, a state that does not decode): nothing
	// is consumed until it is revoked or an operator acts. Err says why.
	StateStopped PartitionState = "stopped"
)

// PartitionStates are the partition states, in lifecycle order: for an
// Observer that reports every state, 0 included (engine/prom does).
func PartitionStates() []PartitionState {
	return []PartitionState{StateStarting, StateRecovering, StateRunning, StateWaiting, StateStopped}
}

// RecoveryProgress is how far a partition's last recovery read got. The
// offsets are the snapshot partition's, not the input's.
type RecoveryProgress struct {
	// Target is the snapshot partition's high watermark captured when
	// the read started: the read ends when Position reaches it. -1 until
	// the read starts.
	Target int64
	// Position is the next snapshot-partition offset the read returns.
	Position int64
	// Snapshots is how many snapshots (tombstones included) it has read.
	Snapshots int64
	// Done: the read finished and the partition runs.
	Done bool
	// Duration is the time from the takeover's start to the end of the
	// read (set when Done), on the source's clock.
	Duration time.Duration
}

// PartitionStatus is one assigned partition's status.
type PartitionStatus struct {
	Input store.TopicPartition
	State PartitionState
	// Since is when the partition entered State, on the source's clock.
	Since time.Time
	// Recovery is the progress of its last (or current) recovery.
	Recovery RecoveryProgress
	// CommittedOffset is the input offset last committed through this
	// member (after recovery: the group's committed offset it resumed
	// from); -1 until the recovery is done.
	CommittedOffset int64
	// LogEndOffset is the input partition's high watermark as the
	// consumer last learnt it (from a fetch response: -1 until one
	// carried it); stale for a partition that is not fetched (waiting or
	// stopped).
	LogEndOffset int64
	// Lag is LogEndOffset - CommittedOffset (never below 0): the input
	// records not yet covered by a commit. -1 while either is unknown.
	// With transactional producers upstream the log ends with a control
	// record, so a caught-up partition shows a lag of 1, as Kafka's own
	// tools do.
	Lag int64
	// LastCommit is when the last commit of this partition through this
	// member succeeded; zero if none since its assignment. A partition
	// with nothing new commits nothing, so an idle partition's ages.
	LastCommit time.Time
	// Held: waiting because a transaction the takeover did not end holds
	// the committed offset (Err is the *kafka.UnstableOffsetError), or is
	// left open on a partition its transactions write (Err is the
	// *kafka.HangingTransactionError).
	Held bool
	// Err is why the partition is waiting or stopped; nil otherwise.
	Err error
	// Restarts counts the times the partition was stopped by a transient
	// or expected failure and restarted from the committed state, since
	// its assignment to this member. A number that keeps growing while
	// the partition shows running means a failure that recurs.
	Restarts int
	// LastFailure is the failure that caused the last restart, kept
	// after the restart succeeds (Err is cleared then); nil if none.
	LastFailure error
	// Failing: the partition keeps failing. It restarted after a
	// transient failure FailingRestarts times, each within FailingWindow
	// of the one before, without a commit since the first of them. It
	// stops failing when it commits, or when FailingWindow passes
	// without another restart. LastFailure says why; the member is not
	// ready meanwhile, even while the partition shows running between
	// two failures.
	Failing bool
}

// The readiness rule for a partition that keeps failing
// (PartitionStatus.Failing). Restarts are spaced by the restart backoff
// (at most 30 s) plus the time each attempt runs before it fails again
// (a delivery timeout, a transaction timeout: about a minute), so a
// failure that recurs reaches three within minutes; one restart now and
// then (a broker rolled) never does.
const (
	FailingRestarts = 3
	FailingWindow   = 10 * time.Minute
)

// Status is a runner's status: its liveness, its group membership and
// every partition assigned to it. Engine.Status and Member.Status return
// it; neither ever waits for the runner (a recovery holds the runner
// inside a rebalance callback, and its progress shows meanwhile).
type Status struct {
	// Live is false once the runner has met an error that ends it (Step
	// and Run return it: Err), or Run has returned, or the runner was
	// closed. It is true before Run starts: a member still connecting is
	// alive.
	Live bool
	// Joined: the member has had its first assignment (every join of a
	// franz-go member ends with one, even an empty assignment; a
	// simulated member's assignments always carry partitions).
	Joined bool
	// Identity is the group identity the consumer reported after its
	// last poll.
	Identity store.GroupIdentity
	// Err is the error that ended the runner or Run; nil otherwise.
	Err error
	// Partitions are the assigned partitions, by topic then partition.
	Partitions []PartitionStatus
	// Standbys are the partitions this member follows as a standby
	// replica (Config.StandbyReplicas) or warms up before it takes them
	// over (StandbyStatus.WarmUp), by topic then partition; empty
	// without.
	Standbys []StandbyStatus
	// Unserved are the input's partitions that no member of the group
	// folds, with their lag, by topic then partition, as the last group
	// reports read them (Config.GroupReportInterval): those no member is
	// assigned (a rebalance under way, or no member left for them), and
	// those assigned but stalled (UnservedPartition.Stalled: lagging with
	// their committed offset unmoved, as a dead or stopped static member's
	// are until its session ends or it returns). Every live instance
	// reports the same ones; lag grows meanwhile in snapfence_group_lag.
	Unserved []UnservedPartition
	// GroupReport is when the last group report was read; zero before
	// the first (or without one: a negative GroupReportInterval). One is
	// read after every rebalance callback and every GroupReportInterval;
	// a member assigned no partition is ready only on its word (Ready).
	GroupReport time.Time
	// GroupReportErr is why the last attempt failed; nil if it did not.
	// Unserved is then the last report's.
	GroupReportErr error
}

// Ready reports whether the member serves its share of the input: it is
// live, has joined its group, every partition assigned to it is recovered
// and running and none keeps failing (PartitionStatus.Failing), and it
// holds a partition or the group has none left to give: the last group
// report was read, its last attempt did not fail, and it found no
// partition unserved. One waiting, stopped, starting or recovering
// partition makes it not ready.
//
// A member assigned no partition (more members than partitions, as in a
// rolling deploy) is ready on the group report's word alone, since its
// own status cannot show a partition that waits for a member: while one
// is unserved (a rebalance under way, partitions stuck), before its
// first report and after a failed one it is not ready, so that a deploy
// does not count it as taking up a share the group has not handed out.
// A report follows every rebalance callback, so it becomes ready as soon
// as the group has settled, not a GroupReportInterval later. Without
// group reports (a negative GroupReportInterval) a member assigned no
// partition is never ready: it cannot tell a settled group from one
// whose partitions nobody serves, and readiness does not claim what it
// cannot see.
func (s Status) Ready() bool {
	if !s.Live || !s.Joined {
		return false
	}
	for _, p := range s.Partitions {
		if p.State != StateRunning || p.Failing {
			return false
		}
	}
	return len(s.Partitions) > 0 || s.groupSettled()
}

// groupSettled: the last group report was read well and found nothing
// unserved (Unserved is the last good report's even after a failure, so
// the error is checked too).
func (s Status) groupSettled() bool {
	return !s.GroupReport.IsZero() && s.GroupReportErr == nil && len(s.Unserved) == 0
}

// MarshalJSON writes the status as /readyz serves it (see
// Engine.HealthHandler): errors as their text, times in RFC 3339 (absent
// when zero), durations in seconds.
func (s Status) MarshalJSON() ([]byte, error) {
	return json.Marshal(statusJSON{Live: s.Live, Ready: s.Ready(), Joined: s.Joined, Group: s.Identity.Group,
		Member: s.Identity.MemberID, Instance: s.Identity.InstanceID, Generation: s.Identity.Generation, Error: errText(s.Err),
		Partitions: partitionsJSON(s.Partitions), Standbys: standbysJSON(s.Standbys), Unserved: unservedJSON(s.Unserved),
		GroupReport: timeOrNil(s.GroupReport), GroupReportErr: errText(s.GroupReportErr)})
}

// statusJSON is Status as /readyz serves it; the field order is the
// document's.
type statusJSON struct {
	Live           bool                    `json:"live"`
	Ready          bool                    `json:"ready"`
	Joined         bool                    `json:"joined"`
	Group          string                  `json:"group,omitempty"`
	Member         string                  `json:"member,omitempty"`
	Instance       string                  `json:"instance,omitempty"`
	Generation     int32                   `json:"generation"`
	Error          string                  `json:"error,omitempty"`
	Partitions     []partitionJSON         `json:"partitions"`
	Standbys       []standbyJSON           `json:"standbys,omitempty"`
	Unserved       []unservedPartitionJSON `json:"unserved"`
	GroupReport    *time.Time              `json:"group_report,omitempty"`
	GroupReportErr string                  `json:"group_report_error,omitempty"`
}

// partitionJSON is a PartitionStatus in the status document.
type partitionJSON struct {
	Topic           string       `json:"topic"`
	Partition       int32        `json:"partition"`
	State           string       `json:"state"`
	Since           *time.Time   `json:"since,omitempty"`
	CommittedOffset int64        `json:"committed_offset"`
	LogEndOffset    int64        `json:"log_end_offset"`
	Lag             int64        `json:"lag"`
	LastCommit      *time.Time   `json:"last_commit,omitempty"`
	Recovery        recoveryJSON `json:"recovery"`
	Held            bool         `json:"held,omitempty"`
	Error           string       `json:"error,omitempty"`
	Restarts        int          `json:"restarts"`
	LastFailure     string       `json:"last_failure,omitempty"`
	Failing         bool         `json:"failing,omitempty"`
}

// recoveryJSON is a RecoveryProgress in the status document.
type recoveryJSON struct {
	Target    int64   `json:"target"`
	Position  int64   `json:"position"`
	Snapshots int64   `json:"snapshots"`
	Done      bool    `json:"done"`
	Seconds   float64 `json:"seconds,omitempty"`
}

// standbyJSON is a StandbyStatus in the status document.
type standbyJSON struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Position  int64  `json:"position"`
	LogEnd    int64  `json:"log_end"`
	Lag       int64  `json:"lag"`
	Vouched   bool   `json:"vouched"`
	WarmUp    bool   `json:"warm_up,omitempty"`
	Error     string `json:"error,omitempty"`
}

// unservedPartitionJSON is an UnservedPartition in the status document.
type unservedPartitionJSON struct {
	Topic           string     `json:"topic"`
	Partition       int32      `json:"partition"`
	CommittedOffset int64      `json:"committed_offset"`
	LogEndOffset    int64      `json:"log_end_offset"`
	Lag             int64      `json:"lag"`
	Stalled         bool       `json:"stalled,omitempty"`
	Owner           string     `json:"owner,omitempty"`
	Since           *time.Time `json:"since,omitempty"`
}

// partitionsJSON is never nil: the document always has its partitions,
// if only [].
func partitionsJSON(ps []PartitionStatus) []partitionJSON {
	out := make([]partitionJSON, 0, len(ps))
	for _, p := range ps {
		r := p.Recovery
		out = append(out, partitionJSON{Topic: p.Input.Topic, Partition: p.Input.Partition, State: string(p.State),
			Since: timeOrNil(p.Since), CommittedOffset: p.CommittedOffset, LogEndOffset: p.LogEndOffset, Lag: p.Lag,
			LastCommit: timeOrNil(p.LastCommit), Held: p.Held, Error: errText(p.Err), Restarts: p.Restarts, LastFailure: errText(p.LastFailure), Failing: p.Failing,
			Recovery: recoveryJSON{Target: r.Target, Position: r.Position, Snapshots: r.Snapshots, Done: r.Done, Seconds: r.Duration.Seconds()}})
	}
	return out
}

// standbysJSON is nil without standbys, so that the document leaves them
// out.
func standbysJSON(sbs []StandbyStatus) []standbyJSON {
	var out []standbyJSON
	for _, sb := range sbs {
		out = append(out, standbyJSON{Topic: sb.Input.Topic, Partition: sb.Input.Partition, Position: sb.Position,
			LogEnd: sb.LogEnd, Lag: sb.Lag, Vouched: sb.Vouched, WarmUp: sb.WarmUp, Error: errText(sb.Err)})
	}
	return out
}

// unservedJSON is never nil: the document always has its unserved
// partitions, if only [].
func unservedJSON(us []UnservedPartition) []unservedPartitionJSON {
	out := make([]unservedPartitionJSON, 0, len(us))
	for _, u := range us {
		out = append(out, unservedPartitionJSON{Topic: u.Input.Topic, Partition: u.Input.Partition,
			CommittedOffset: u.CommittedOffset, LogEndOffset: u.LogEndOffset, Lag: u.Lag,
			Stalled: u.Stalled, Owner: u.Owner, Since: timeOrNil(u.Since)})
	}
	return out
}

// timeOrNil is t, or nil for the zero time (which the document leaves
// out).
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// errText is err's text, or "" for nil (which the document leaves out).
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Status is the engine's status: that of the runner Run (or the last
// Join) made. Before any runner it is live, not joined, with no
// partitions. It never waits for the runner's lock.
func (e *Engine[S]) Status() Status {
	st := Status{Live: true, Identity: store.GroupIdentity{Generation: -1}}
	if b := e.board.Load(); b != nil {
		st = b.status()
	}
	e.runMu.Lock()
	defer e.runMu.Unlock()
	if e.runEnded {
		st.Live = false
		if st.Err == nil {
			st.Err = e.runErr
		}
	}
	return st
}

// trackRun marks Run as running and returns what marks it ended with the
// error it returns: defer e.trackRun()(&err).
func (e *Engine[S]) trackRun() func(*error) {
	e.runMu.Lock()
	e.runEnded, e.runErr = false, nil
	e.runs++
	e.runMu.Unlock()
	return func(err *error) {
		e.runMu.Lock()
		defer e.runMu.Unlock()
		e.runs--
		e.runEnded, e.runErr = true, *err
	}
}

// Status is the runner's status. It never waits for the runner's lock.
func (r *Member[S]) Status() Status { return r.status.status() }

// statusBoard is a runner's status, kept apart from the runner's lock: the
// runner reports to it at its transitions (one call each), and readers
// take only its own mutex. It also reports the per-partition events to
// the Observer, so that what is reported of a partition goes with it.
type statusBoard struct {
	o   observer
	now func() time.Time // the source's clock, once the source exists

	mu       sync.Mutex
	parts    map[store.TopicPartition]*PartitionStatus
	joined   bool
	closed   bool
	fatal    error
	identity store.GroupIdentity
	standby  []StandbyStatus
	// The last group report (group.go), and each assigned partition's
	// committed offset as the reports saw it, for stalls (stallAfter; 0:
	// none reported).
	unserved   []UnservedPartition
	commits    map[store.TopicPartition]seenCommit
	stallAfter time.Duration
	groupAt    time.Time
	groupErr   error
	// endpoints are the assigned partitions' owners' endpoints, and
	// counts each input topic's partition count, as the last group
	// report read them (Engine.Locate).
	endpoints map[store.TopicPartition]string
	counts    map[string]int32
	// failures are the partitions' transient restarts since their last
	// commit (PartitionStatus.Failing).
	failures map[store.TopicPartition]*failureRun
}

// failureRun is a partition's run of transient restarts, each within
// FailingWindow of the one before, with no commit between them.
type failureRun struct {
	restarts int
	last     time.Time
}

func newStatusBoard(o Observer, now func() time.Time) *statusBoard {
	return &statusBoard{o: observer{o}, now: now, parts: map[store.TopicPartition]*PartitionStatus{},
		identity: store.GroupIdentity{Generation: -1}, failures: map[store.TopicPartition]*failureRun{}}
}

// newStatusBoard makes r's board and makes it the engine's.
func (r *Member[S]) newStatusBoard() *statusBoard {
	b := newStatusBoard(r.e.cfg.Observer, func() time.Time { return r.src.Now() })
	b.stallAfter = max(r.e.cfg.GroupReportInterval, 3*r.e.cfg.CommitInterval)
	r.e.board.Store(b)
	return b
}

func (b *statusBoard) status() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := Status{Live: b.fatal == nil && !b.closed, Joined: b.joined && !b.closed, Identity: b.identity, Err: b.fatal}
	for _, tp := range sortedKeys(b.parts) {
		st.Partitions = append(st.Partitions, *b.parts[tp])
	}
	st.Standbys = slices.Clone(b.standby)
	st.Unserved, st.GroupReport, st.GroupReportErr = slices.Clone(b.unserved), b.groupAt, b.groupErr
	return st
}

// partition is tp's status, if it is assigned.
func (b *statusBoard) partition(tp store.TopicPartition) (PartitionStatus, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ps, ok := b.parts[tp]
	if !ok {
		return PartitionStatus{}, false
	}
	return *ps, true
}

// syncStatus copies the scheduler's records into the board: a runner
// calls it as it starts carrying out acts, which its scheduler has just
// decided, so the board sees every phase the scheduler moves a partition
// to (a transition with no action changes nothing an operator sees). The
// board adds what the scheduler does not know: recovery progress, offsets,
// commit times.
func syncStatus[F any](b *statusBoard, s *schedule.Scheduler[F], acts []schedule.Action[F]) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	for tp := range b.parts {
		if !s.Holds(tp) {
			b.setState(tp, b.parts[tp], "", now)
			delete(b.parts, tp)
			delete(b.failures, tp)
			b.o.partitionReleased(tp)
		}
	}
	for tp, p := range s.Partitions() {
		ps := b.parts[tp]
		if ps == nil {
			ps = &PartitionStatus{Input: tp, CommittedOffset: -1, LogEndOffset: -1, Lag: -1, Recovery: RecoveryProgress{Target: -1, Position: -1}}
			b.parts[tp] = ps
		}
		held := p.Held()
		ps.Held, ps.Err = held != nil, p.Err()
		if held != nil && ps.Err == nil {
			ps.Err = held
		}
		switch p.Phase() {
		case schedule.PhaseStarting:
			if ps.State != StateStarting && ps.State != StateRecovering {
				b.setState(tp, ps, StateStarting, now)
				ps.Recovery = RecoveryProgress{Target: -1, Position: -1}
			}
		case schedule.PhaseRunning:
			b.setState(tp, ps, StateRunning, now)
		case schedule.PhaseWaiting, schedule.PhaseWaitingDue:
			b.setState(tp, ps, StateWaiting, now)
		case schedule.PhaseStopped:
			b.setState(tp, ps, StateStopped, now)
		}
	}
	for _, a := range acts {
		if ps := b.parts[a.TP]; a.Kind == schedule.ActHold && ps != nil {
			ps.Held, ps.Err = true, a.Err
		}
	}
}

// setState moves ps to state ("": gone), reporting it to the Observer.
func (b *statusBoard) setState(tp store.TopicPartition, ps *PartitionStatus, state PartitionState, now time.Time) {
	if ps.State == state {
		return
	}
	b.o.partitionMoved(ps.State, state)
	ps.State, ps.Since = state, now
}

// progress is the acquisition's recovery hook for tp (store.Acquisition
// Progress).
func (b *statusBoard) progress(tp store.TopicPartition) func(store.RecoveryEvent) {
	return func(e store.RecoveryEvent) {
		b.mu.Lock()
		defer b.mu.Unlock()
		ps := b.parts[tp]
		if ps == nil || (ps.State != StateStarting && ps.State != StateRecovering) {
			return
		}
		b.setState(tp, ps, StateRecovering, b.now())
		ps.Recovery.Target, ps.Recovery.Position, ps.Recovery.Snapshots = e.Target, e.Position, e.Records
		b.o.recoveryLeft(tp, max(e.Target-e.Position, 0))
	}
}

// recovered: tp's recovery took d and read snapshots; it runs from the
// committed offset.
func (b *statusBoard) recovered(tp store.TopicPartition, committed int64, snapshots int, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ps := b.parts[tp]
	if ps == nil {
		return
	}
	b.setState(tp, ps, StateRunning, b.now())
	ps.Recovery.Snapshots, ps.Recovery.Done, ps.Recovery.Duration = int64(snapshots), true, d
	ps.Recovery.Position = max(ps.Recovery.Position, ps.Recovery.Target)
	ps.Held, ps.Err = false, nil
	ps.CommittedOffset = committed
	b.o.recoveryLeft(tp, 0)
	b.updateLag(tp, ps)
}

// committed: a commit of tp at offset succeeded.
func (b *statusBoard) committed(tp store.TopicPartition, offset, committableLag int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// Only for a partition still on the board: the commit of a revoke's
	// flush lands after the partition left it, and its series with it.
	if ps := b.parts[tp]; ps != nil {
		ps.CommittedOffset, ps.LastCommit = offset, b.now()
		b.updateLag(tp, ps)
		b.o.committableLag(tp, committableLag)
		b.setFailing(tp, ps, nil) // it makes progress
	}
}

// setFailing records tp's run of restarts (nil: none) and whether it
// makes the partition failing.
func (b *statusBoard) setFailing(tp store.TopicPartition, ps *PartitionStatus, run *failureRun) {
	if run == nil {
		delete(b.failures, tp)
	} else {
		b.failures[tp] = run
	}
	failing := run != nil && run.restarts >= FailingRestarts
	if failing != ps.Failing {
		ps.Failing = failing
		b.o.partitionFailing(tp, failing)
	}
}

// restarted: tp was stopped by err, of class k, and restarts.
func (b *statusBoard) restarted(tp store.TopicPartition, k schedule.Class, err error) {
	b.o.restarted(tp, k)
	b.mu.Lock()
	defer b.mu.Unlock()
	if ps := b.parts[tp]; ps != nil {
		ps.Restarts++
		ps.LastFailure = err
		if k != schedule.ClassTransient {
			return // a fence in a rebalance is not the partition failing
		}
		now := b.now()
		run := b.failures[tp]
		if run == nil || now.Sub(run.last) > FailingWindow {
			run = &failureRun{}
		}
		run.restarts++
		run.last = now
		b.setFailing(tp, ps, run)
	}
}

// polled: a poll returned; the source's log ends and identity are read.
func (b *statusBoard) polled(src input.Source) {
	id := src.Identity()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.identity = id
	for tp, ps := range b.parts {
		if end, ok := src.LogEnd(tp); ok {
			ps.LogEndOffset = end
			b.updateLag(tp, ps)
		}
	}
	if len(b.failures) > 0 {
		now := b.now()
		for tp, run := range b.failures {
			if ps := b.parts[tp]; ps != nil && now.Sub(run.last) > FailingWindow {
				b.setFailing(tp, ps, nil) // no restart for a window: it got past the failure
			}
		}
	}
}

func (b *statusBoard) updateLag(tp store.TopicPartition, ps *PartitionStatus) {
	if ps.CommittedOffset < 0 || ps.LogEndOffset < 0 {
		return
	}
	ps.Lag = max(ps.LogEndOffset-ps.CommittedOffset, 0)
	b.o.consumerLag(tp, ps.Lag)
}

// assignment: an assignment callback ran (the member has joined) with
// the member's identity id.
func (b *statusBoard) assignment(id store.GroupIdentity) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.joined = true
	if id.Valid() {
		b.identity = id
	}
}

// failed: err ends the runner.
func (b *statusBoard) failed(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fatal == nil {
		b.fatal = err
	}
}

// close: the runner closed; its partitions are released by the teardown
// that follows.
func (b *statusBoard) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	// A closed runner reports its group no more: its series would go
	// stale, and the live instances report the group.
	b.unserved, b.groupAt, b.groupErr = nil, time.Time{}, nil
	b.o.groupReported(nil, 0)
}

// standbys replaces the standby replicas' status.
func (b *statusBoard) standbys(st []StandbyStatus) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.standby = st
	b.o.standbys(st)
}
