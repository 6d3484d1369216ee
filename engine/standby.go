package engine

import (
	"context"
	"slices"
	"time"

	"github.com/snapfence/snapfence/engine/internal/cache"
	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/engine/internal/placement"
	"github.com/snapfence/snapfence/engine/internal/replica"
	"github.com/snapfence/snapfence/engine/internal/schedule"
	"github.com/snapfence/snapfence/internal/input"
	"github.com/snapfence/snapfence/store"
)

// Standby replicas (Config.StandbyReplicas; docs/operations.md,
// "Standby replicas"): each partition of the input topics has
// StandbyReplicas replicas on members other than its owner, placed by
// rendezvous hashing of the members' names with bounded loads, from the
// group report (package placement), so that every member computes the
// same placement with no coordination. A member follows the partitions
// placed on it read_committed into the cache, with a checkpoint, so that
// an assignment of one of them later recovers only the delta. Each
// followed partition has a replica.Reader (as each partition of a View
// has): the standbys say when it opens, reads and retries.
//
// The follower runs on the runner's goroutine, between polls (a round at
// most every standbyInterval, sooner while a follower is behind), so the
// cache of a partition is written by its standby or by its flow, never
// both: start closes a partition's follower before it takes the partition
// over. What a follower writes is committed (read_committed) and its
// checkpoint is one the store vouches for, so a standby copy is a base
// like any other the warm restart checks (Recover from a checkpoint). A
// replica moved elsewhere (a member joined or left) is closed; its copy
// stays in the cache, the base of a later delta if it comes back.

const (
	// standbyInterval is the least time between two rounds of reads of
	// the followers that are caught up.
	standbyInterval = time.Second
	// standbyRetry is the wait before a failed follower is opened again.
	standbyRetry = 30 * time.Second
	// standbyRoundReads bounds the reads of one follower in one round, and
	// standbyRoundTime a round's time (the replicas it did not reach come
	// first in the next one), so that followers far behind (many of them
	// after a restart) do not hold the member's own partitions' polls
	// back.
	standbyRoundReads = 16
	standbyRoundTime  = 100 * time.Millisecond
	// warmUpAskInterval is the least time between two rebalances the
	// member asks for while only some of its warm-ups are caught up (it
	// asks at once when all are), so that warm-ups catching up one after
	// another do not rebalance the group each time.
	warmUpAskInterval = 10 * time.Second
)

// standbys carries out the scheduler's decisions about the standby
// replicas (schedule.Replicas): it lists the partitions, opens, reads and
// closes their replica.Readers. The runner's lock guards it.
type standbys[S any] struct {
	r      *Member[S]
	sched  *schedule.Replicas
	follow store.Backend
	// placed are the partitions this member follows: those the group
	// report of sequence placedSeq places on it (fromReport), and its
	// warm-ups of sequence warmUpSeq.
	placed     []store.TopicPartition
	placedSeq  int
	fromReport []store.TopicPartition
	warmUps    []store.TopicPartition
	warmUpSeq  int
	// askedWith are the warm-ups caught up when the member last asked for
	// a rebalance, at asked (or when its warm-ups last changed).
	askedWith []store.TopicPartition
	asked     time.Time
	// next is where the next round starts in placed: after the last
	// replica a round cut short by standbyRoundTime reached.
	next  int
	parts map[store.TopicPartition]*replica.Reader
}

func newStandbys[S any](r *Member[S]) *standbys[S] {
	return &standbys[S]{r: r, sched: r.sched.Standbys(), follow: r.e.cfg.Store,
		parts: map[store.TopicPartition]*replica.Reader{}}
}

// round runs a round of the replicas if one is due: places them again if
// a new group report came, then does what the scheduler says of each
// replica.
func (sb *standbys[S]) round(ctx context.Context) {
	r := sb.r
	now := r.src.Now()
	if !sb.sched.RoundDue(now) {
		return
	}
	sb.place()
	deadline := now.Add(standbyRoundTime)
	for i := range sb.placed {
		if i > 0 && !r.src.Now().Before(deadline) {
			sb.next = (sb.next + i) % len(sb.placed)
			break
		}
		tp := sb.placed[(sb.next+i)%len(sb.placed)]
		if r.sched.Holds(tp) {
			sb.drop(tp) // start released it already; a safeguard
			continue
		}
		sb.sched.Add(tp)
		if sb.sched.Next(tp, now) == schedule.StepOpen {
			err := sb.open(ctx, tp)
			sb.sched.Opened(tp, err, r.src.Now())
		}
		// A replica just opened reads in the same round.
		if sb.sched.Next(tp, r.src.Now()) == schedule.StepRead {
			behind, err := sb.read(ctx, tp)
			sb.sched.ReadEnded(tp, behind, err, r.src.Now())
		}
	}
	sb.sched.RoundEnded(r.src.Now())
	sb.warmedUp()
	r.status.standbys(sb.status())
}

// warmedUp lists the warm-ups caught up (input.Opening.WarmedUp) and, when
// that list grew to all of them, or changed and the last ask is
// warmUpAskInterval old, asks the group to rebalance: its balancer then
// moves them here.
func (sb *standbys[S]) warmedUp() {
	if len(sb.warmUps) == 0 {
		return
	}
	r := sb.r
	var ready []store.TopicPartition
	for _, tp := range sb.warmUps {
		if rd := sb.parts[tp]; rd != nil {
			if st := rd.Status(); st.Vouched && st.Lag >= 0 && st.Lag <= input.WarmUpLag {
				ready = append(ready, tp)
			}
		}
	}
	r.setWarmedUp(ready)
	now := r.src.Now()
	due := len(ready) == len(sb.warmUps) || now.Sub(sb.asked) >= warmUpAskInterval
	if len(ready) == 0 || slices.Equal(ready, sb.askedWith) || !due {
		return
	}
	rb, ok := r.src.(input.Rebalancer)
	if !ok {
		return
	}
	sb.askedWith, sb.asked = ready, now
	r.e.log.Info("warm-ups caught up; asking the group to move them here", "ready", len(ready), "warm_ups", len(sb.warmUps))
	rb.Rebalance()
}

// place computes, from the last group report, the partitions whose
// replicas this member keeps, and closes the replicas placed elsewhere
// now. A report of a group that assigns nothing (a classic group
// rebalancing, or one not joined yet) keeps the last placement: the
// replicas wait where they are for the owners to be known.
//
// The member's warm-ups (those its assignment names) are followed too.
func (sb *standbys[S]) place() {
	r := sb.r
	seq, warmUps := r.warmUpsNow()
	if sb.placedSeq == r.groupSeq && sb.warmUpSeq == seq {
		return
	}
	if sb.warmUpSeq != seq {
		sb.warmUpSeq, sb.warmUps = seq, warmUps
		sb.askedWith, sb.asked = nil, r.src.Now()
	}
	if sb.placedSeq != r.groupSeq {
		sb.placedSeq = r.groupSeq
		if r.e.cfg.StandbyReplicas > 0 && slices.ContainsFunc(r.group.Partitions, func(p input.GroupPartition) bool { return p.Assigned }) {
			sb.fromReport = sb.fromGroupReport()
		}
	}
	placed := slices.Clone(sb.fromReport)
	for _, tp := range sb.warmUps {
		if !slices.Contains(placed, tp) {
			placed = append(placed, tp)
		}
	}
	slices.SortFunc(placed, compareTP)
	for tp := range sb.sched.All() {
		if !slices.Contains(placed, tp) {
			sb.drop(tp)
		}
	}
	sb.placed, sb.next = placed, 0
}

// fromGroupReport is the partitions the last group report places on this
// member.
func (sb *standbys[S]) fromGroupReport() []store.TopicPartition {
	r := sb.r
	parts := make([]placement.Partition, len(r.group.Partitions))
	for i, p := range r.group.Partitions {
		parts[i] = placement.Partition{TP: p.Input, Owner: p.Owner}
	}
	self := input.MemberName(r.src.Identity())
	var placed []store.TopicPartition
	for tp, ms := range placement.Place(parts, r.group.Members, r.e.cfg.StandbyReplicas) {
		if self != "" && slices.Contains(ms, self) {
			placed = append(placed, tp)
		}
	}
	return placed
}

// warmUp records the warm-ups of the member's last assignment
// (input.Opening.WarmUp), from the group's goroutine; the next standby
// round follows them.
func (r *Member[S]) warmUp(parts []store.TopicPartition) {
	parts = slices.SortedFunc(slices.Values(parts), compareTP)
	r.warmUpMu.Lock()
	defer r.warmUpMu.Unlock()
	if slices.Equal(parts, r.warmUps) {
		return
	}
	r.warmUps = parts
	r.warmUpSeq++
	r.warmedUp = slices.DeleteFunc(r.warmedUp, func(tp store.TopicPartition) bool { return !slices.Contains(parts, tp) })
}

// warmUpsNow is the member's warm-ups and their sequence number.
func (r *Member[S]) warmUpsNow() (int, []store.TopicPartition) {
	r.warmUpMu.Lock()
	defer r.warmUpMu.Unlock()
	return r.warmUpSeq, r.warmUps
}

// setWarmedUp records the warm-ups caught up.
func (r *Member[S]) setWarmedUp(tps []store.TopicPartition) {
	r.warmUpMu.Lock()
	defer r.warmUpMu.Unlock()
	r.warmedUp = tps
}

// warmedUpList is the warm-ups caught up (input.Opening.WarmedUp), from
// the group's goroutine.
func (r *Member[S]) warmedUpList() []store.TopicPartition {
	r.warmUpMu.Lock()
	defer r.warmUpMu.Unlock()
	return slices.Clone(r.warmedUp)
}

// open opens tp's replica over a new core of the partition (the
// replica.Reader drops the copy when it follows from the log start).
func (sb *standbys[S]) open(ctx context.Context, tp store.TopicPartition) error {
	r := sb.r
	rd := sb.parts[tp]
	if rd == nil {
		rd = replica.New(replica.Config{
			Follow: func(ctx context.Context, from *store.Checkpoint) (store.Follow, error) {
				return sb.follow.Follow(ctx, tp, from)
			},
			Checkpoints: cache.CheckpointTag(r.src.Identity().Group),
		})
		sb.parts[tp] = rd
	}
	c, err := core.New(core.Config[S, Output]{Input: tp, Fold: r.e.coreFold(), Codec: r.e.cfg.Codec, Warm: true}, r.e.kv)
	if err != nil {
		sb.failed(tp, rd.Fail(err))
		return err
	}
	opened, err := rd.Open(ctx, c)
	if err != nil {
		sb.failed(tp, err)
		return err
	}
	r.e.log.Info("standby replica following", "input", tp.String(), "from", opened.Base())
	return nil
}

// read reads tp's replica until it has nothing more or its share of the
// round is used. It reports whether the replica is still behind the log
// end, and its failure (an end of ctx is none).
func (sb *standbys[S]) read(ctx context.Context, tp store.TopicPartition) (behind bool, err error) {
	rd := sb.parts[tp]
	for range standbyRoundReads {
		snaps, err := rd.Read(ctx, 0)
		if err != nil {
			if !rd.Following() { // not an end of ctx
				sb.failed(tp, err)
				return false, err
			}
			return false, nil
		}
		off, end := rd.Position()
		if off >= end || len(snaps) == 0 {
			return off < end, nil
		}
	}
	return true, nil
}

// failed says that tp's replica failed; it is opened again later.
func (sb *standbys[S]) failed(tp store.TopicPartition, err error) {
	sb.warn("standby replica failed; retrying later", tp, err)
}

func (sb *standbys[S]) warn(msg string, tp store.TopicPartition, err error) {
	if ok, n := sb.r.logs.allow("standby "+tp.String(), sb.r.src.Now()); ok {
		sb.r.e.log.Warn(msg, "input", tp.String(), "err", err, "not_logged", n)
	}
}

// release closes tp's replica: the member takes tp over. What it wrote
// stays in the cache, as the base of the takeover's delta.
func (sb *standbys[S]) release(tp store.TopicPartition) {
	if sb.parts[tp] == nil {
		return
	}
	sb.drop(tp)
}

// drop closes tp's replica, if it has one, and forgets it. What it wrote
// stays in the cache.
func (sb *standbys[S]) drop(tp store.TopicPartition) {
	if rd := sb.parts[tp]; rd != nil {
		rd.Close()
		delete(sb.parts, tp)
	}
	sb.sched.Remove(tp)
	sb.r.status.standbys(sb.status()) // the status never shows a replica of an owned partition
}

// close closes every replica.
func (sb *standbys[S]) close() {
	for _, tp := range sortedKeys(sb.parts) {
		sb.drop(tp)
	}
	sb.r.status.standbys(nil)
}

// status is the replicas' status, by partition.
func (sb *standbys[S]) status() []StandbyStatus {
	var out []StandbyStatus
	for tp, rec := range sb.sched.All() {
		rd := sb.parts[tp]
		if rd == nil {
			continue
		}
		st := rd.Status()
		out = append(out, StandbyStatus{Input: tp, Position: st.Position, LogEnd: st.LogEnd, Lag: st.Lag, Vouched: st.Vouched,
			WarmUp: slices.Contains(sb.warmUps, tp), Err: rec.Err()})
	}
	return out
}

// StandbyStatus is one standby replica's status: a partition this member
// follows without owning it (Config.StandbyReplicas). The offsets are the
// snapshot partition's.
type StandbyStatus struct {
	Input store.TopicPartition
	// Position is the snapshot-partition offset the replica has read up
	// to; LogEnd the snapshot partition's last stable offset it last
	// listed (the end of what a read_committed reader can read; -1 before
	// it listed one).
	Position, LogEnd int64
	// Lag is LogEnd - Position (never below 0; -1 while LogEnd is
	// unknown): 0 once the replica has read every committed record.
	Lag int64
	// Vouched: the cache holds a checkpoint of the replica, so an
	// assignment of the partition recovers only what follows it. A
	// replica from the log start vouches once it first caught up.
	Vouched bool
	// WarmUp: the group's balancer named this replica a warm-up: the
	// partition moves here from its owner once the replica is caught up
	// (within 10,000 records of the log end), and its owner serves it
	// until then.
	WarmUp bool
	// Err is why the replica is not following (it is opened again 30 s
	// after the failure); nil while it follows.
	Err error
}
