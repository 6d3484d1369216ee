package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/store"
)

// Standby replicas (Config.Standby; docs/operations.md, "Standby
// replicas"): every partition of the input topics that this member does
// not hold is followed read_committed into the cache, with a checkpoint,
// so that an assignment of it later recovers only the delta.
//
// The follower runs on the runner's goroutine, between polls (a round at
// most every standbyInterval, sooner while a follower is behind), so the
// cache of a partition is written by its standby or by its flow, never
// both: start closes a partition's follower before it takes the partition
// over. What a follower writes is committed (read_committed) and its
// checkpoint is one the store vouches for, so a standby copy is a base
// like any other the warm restart checks (Recover from a checkpoint).

// PartitionLister is a Source that lists every partition of the topics
// it consumes; Config.Standby needs one. The Kafka source and
// simsource.Source are.
type PartitionLister interface {
	Partitions(ctx context.Context) ([]store.TopicPartition, error)
}

// TopicChecker is a Source that can check that topics exist: the
// runner's default Config.CheckOutputTopics. A missing topic is a
// *store.ConfigError naming it.
type TopicChecker interface {
	CheckTopics(ctx context.Context, topics []string) error
}

const (
	// standbyInterval is the least time between two rounds of reads of
	// the followers that are caught up.
	standbyInterval = time.Second
	// standbyListEvery is how often the input topics' partitions are
	// listed again (partitions added).
	standbyListEvery = 30 * time.Second
	// standbyRetry is the wait before a failed follower is opened again.
	standbyRetry = 30 * time.Second
	// standbyRoundReads bounds the reads of one follower in one round, so
	// that a follower far behind does not hold the polls back.
	standbyRoundReads = 16
	// standbyListTimeout bounds a listing of the partitions.
	standbyListTimeout = 5 * time.Second
)

// standbys is a runner's followers. The runner's lock guards it.
type standbys[S any] struct {
	r      *Runner[S]
	lister PartitionLister
	follow store.Backend
	all    []store.TopicPartition
	listed time.Time
	next   time.Time
	parts  map[store.TopicPartition]*standby[S]
	// retry is when a failed partition's follower is opened again, and
	// errs why it failed.
	retry map[store.TopicPartition]time.Time
	errs  map[store.TopicPartition]error
}

// standby is one followed partition.
type standby[S any] struct {
	f    store.Follow
	core *core.Core[S, Output]
	// vouched: a checkpoint is in the cache with the states read.
	vouched bool
}

func newStandbys[S any](r *Runner[S]) (*standbys[S], error) {
	lister, ok := r.src.(PartitionLister)
	if !ok {
		return nil, &store.ConfigError{Subject: "Config.Standby", Problem: "the source cannot list its topics' partitions (it is no engine.PartitionLister)",
			Fix: "use the Kafka source or simsource, or turn Standby off"}
	}
	return &standbys[S]{r: r, lister: lister, follow: r.e.cfg.Store,
		parts: map[store.TopicPartition]*standby[S]{}, retry: map[store.TopicPartition]time.Time{}, errs: map[store.TopicPartition]error{}}, nil
}

// round runs a round of the followers if one is due: opens the missing
// ones, reads each, writes what it read to the cache.
func (sb *standbys[S]) round(ctx context.Context) {
	r := sb.r
	now := r.src.Now()
	if now.Before(sb.next) {
		return
	}
	if sb.all == nil || now.Sub(sb.listed) >= standbyListEvery {
		lctx, cancel := context.WithTimeout(ctx, standbyListTimeout)
		all, err := sb.lister.Partitions(lctx)
		cancel()
		sb.listed = now
		if err != nil {
			sb.warn("listing the input partitions for the standby replicas failed", store.TopicPartition{}, err)
		} else {
			slices.SortFunc(all, compareTP)
			sb.all = all
		}
	}
	behind := false
	for _, tp := range sb.all {
		if r.sched.holds(tp) {
			sb.release(tp) // start released it already; a safeguard
			continue
		}
		s := sb.parts[tp]
		if s == nil {
			if t, failed := sb.retry[tp]; failed && now.Before(t) {
				continue
			}
			s = sb.open(ctx, tp)
			if s == nil {
				continue
			}
		}
		if sb.read(ctx, tp, s) {
			behind = true
		}
	}
	sb.next = now.Add(standbyInterval)
	if behind {
		sb.next = now
	}
	r.status.standbys(sb.status())
}

// open opens tp's follower from the cache's checkpoint, or from the log
// start when there is none or the store refuses it (the copy is dropped
// first).
func (sb *standbys[S]) open(ctx context.Context, tp store.TopicPartition) *standby[S] {
	r := sb.r
	c, err := core.New(core.Config[S, Output]{Input: tp, Fold: r.e.coreFold(), Codec: r.e.cfg.Codec, Warm: true}, r.e.kv)
	if err != nil {
		sb.failed(tp, nil, err)
		return nil
	}
	var from *store.Checkpoint
	if b, ok, err := c.Checkpoint(); err == nil && ok {
		if group, cp, err := decodeCheckpoint(b); err == nil && group == r.src.Identity().Group {
			from = &cp
		}
	}
	f, err := sb.follow.Follow(ctx, tp, from)
	if _, refused := errors.AsType[*store.CheckpointError](err); refused && from != nil {
		from = nil
		f, err = sb.follow.Follow(ctx, tp, nil)
	}
	if err == nil && from == nil {
		err = c.Drop() // a copy from the log start starts empty
		if err != nil {
			_ = f.Close()
		}
	}
	if err != nil {
		sb.failed(tp, nil, err)
		return nil
	}
	s := &standby[S]{f: f, core: c, vouched: from != nil}
	sb.parts[tp] = s
	delete(sb.retry, tp)
	delete(sb.errs, tp)
	r.e.log.Info("standby replica following", "input", tp.String(), "from", followBase(from))
	return s
}

func followBase(cp *store.Checkpoint) any {
	if cp == nil {
		return "log_start"
	}
	return cp.Offset
}

// read reads tp's follower until it has nothing more or its share of the
// round is used, writing each read with its checkpoint in one batch. It
// reports whether the follower is still behind the log end.
func (sb *standbys[S]) read(ctx context.Context, tp store.TopicPartition, s *standby[S]) (behind bool) {
	group := sb.r.src.Identity().Group
	for range standbyRoundReads {
		snaps, cp, ok, err := s.f.Next(ctx, 0)
		if err == nil {
			var enc []byte
			if ok {
				enc = encodeCheckpoint(group, cp)
			}
			err = s.core.Replicated(snaps, enc)
			s.vouched = s.vouched || ok
		}
		if err != nil {
			if ctx.Err() == nil {
				sb.failed(tp, s, err)
			}
			return false
		}
		off, end := s.f.Position()
		if off >= end || len(snaps) == 0 {
			return off < end
		}
	}
	return true
}

// failed closes tp's follower (if open) after err and retries it later.
func (sb *standbys[S]) failed(tp store.TopicPartition, s *standby[S], err error) {
	if s != nil {
		_ = s.f.Close()
		delete(sb.parts, tp)
	}
	sb.retry[tp], sb.errs[tp] = sb.r.src.Now().Add(standbyRetry), err
	sb.warn("standby replica failed; retrying later", tp, err)
}

func (sb *standbys[S]) warn(msg string, tp store.TopicPartition, err error) {
	if ok, n := sb.r.logs.allow("standby "+tp.String(), sb.r.src.Now()); ok {
		sb.r.e.log.Warn(msg, "input", tp.String(), "err", err, "not_logged", n)
	}
}

// release closes tp's follower: the member takes tp over. What it wrote
// stays in the cache, as the base of the takeover's delta.
func (sb *standbys[S]) release(tp store.TopicPartition) {
	_, following := sb.parts[tp]
	_, failed := sb.errs[tp]
	if s := sb.parts[tp]; s != nil {
		_ = s.f.Close()
		delete(sb.parts, tp)
	}
	delete(sb.retry, tp)
	delete(sb.errs, tp)
	if following || failed {
		sb.r.status.standbys(sb.status()) // the status never shows a replica of an owned partition
	}
}

// close closes every follower.
func (sb *standbys[S]) close() {
	for _, tp := range sortedKeys(sb.parts) {
		sb.release(tp)
	}
	sb.r.status.standbys(nil)
}

// status is the followers' status, by partition.
func (sb *standbys[S]) status() []StandbyStatus {
	var out []StandbyStatus
	for _, tp := range sortedKeys(sb.parts) {
		s := sb.parts[tp]
		off, end := s.f.Position()
		lag := int64(-1)
		if end >= 0 {
			lag = max(end-off, 0)
		}
		out = append(out, StandbyStatus{Input: tp, Position: off, LogEnd: end, Lag: lag, Vouched: s.vouched})
	}
	for _, tp := range sortedKeys(sb.errs) {
		out = append(out, StandbyStatus{Input: tp, Position: -1, LogEnd: -1, Lag: -1, Err: sb.errs[tp]})
	}
	slices.SortFunc(out, func(a, b StandbyStatus) int { return compareTP(a.Input, b.Input) })
	return out
}

// StandbyStatus is one standby replica's status: a partition this member
// follows without owning it (Config.Standby). The offsets are the
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
	// Err is why the replica is not following (it is opened again 30 s
	// after the failure); nil while it follows.
	Err error
}
