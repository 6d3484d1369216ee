// Package view is a read-only replica of a snapshot topic, or of a
// compacted topic of plain key/values, in any process: goka's View, with
// the fence's guarantee (docs/design.md, "Views"). It follows each
// partition it holds with a store.Follow (read_committed, no group,
// nothing written to Kafka) into a Pebble cache of its own, with the
// follower's checkpoint, so that a restart on the same Dir reads only
// what followed it. One goroutine per partition reads while Run runs;
// reads (Get, Range, All) go straight to the cache from any goroutine.
// A View is an engine.Table: a fold can look it up (engine.Config.Tables).
//
// A Lookup is a table declared before its store exists: the fold's code
// names it (NewLookup) and lists it in engine.Config.Tables, and whoever
// runs the engine (a service, the test driver of package
// engine/enginetest) opens it on its own backend, through the Opener
// interface, and drives and closes it.
package view

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/internal/cache"
	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/engine/internal/replica"
	"github.com/snapfence/snapfence/engine/internal/schedule"
	"github.com/snapfence/snapfence/store"
)

// Config configures a View or a Lookup. Validation happens in New (and
// NewLookup, then Lookup.Open), in one place, with a *store.ConfigError
// naming the field.
type Config[S any] struct {
	// Store reads the topic; required: store/kafka's or store/sim's
	// backend (one that can follow). For a view of snapshots it must
	// be in Transactional mode (its mode sets how it reads; the view
	// writes nothing): a Plain-mode backend is refused. A backend with
	// CreateTopics creates a missing snapshot topic, as for a standby
	// replica; leave it off for a view that must change nothing. Nil for
	// a Lookup, whose runner gives the backend at Open.
	Store store.Backend
	// Topic is required. For a view of snapshots it is the input topic of
	// the engine whose snapshots the view reads (the view reads the
	// snapshot topic the Store names for it: by default
	// "<application>-<Topic>-snapshots", of the Store's Application, the
	// application whose state is read); with Plain it is the topic read.
	Topic string
	// Plain reads Topic as a table of plain key/values that snapfence
	// does not write (a compacted topic another producer keeps): a
	// record's value is the key's state, encoded with Codec; a null value
	// deletes the key; a change's offset is the record's own. Default
	// false: Topic's snapshots.
	//
	// A plain topic has no fence: the view shows what its producers
	// committed, stale or not. It still reads read_committed, so records
	// of aborted transactions are never shown, and a restart still reads
	// only what followed the cache's checkpoint.
	Plain bool
	// Partitions are the partitions held; nil (the default) holds all of
	// the topic's partitions, counted at New. Each must be one of the
	// topic's, once.
	Partitions []int32
	// Codec decodes the states; required.
	Codec engine.Codec[S]
	// Partitioner says which partition holds a key, given the topic's
	// partition count (Get asks it). Default store.OutputPartition: the
	// murmur2 partitioner of Kafka's Java client and of franz-go's
	// default, which a producer that keys the input topic (or the plain
	// topic) with them uses. A wrong one makes Get miss keys.
	Partitioner func(key []byte, partitions int32) int32
	// Dir is where the view's cache lives on disk; empty (the default)
	// keeps it in memory, and every New reads the topic from the
	// start. The rules of engine.Config.Dir apply: the cache is
	// Dir/snapfence-cache, created and marked by the view, nothing else
	// in Dir is touched, and a Dir another engine or view has open is
	// refused with engine.ErrCacheDirInUse. A view and an engine need a Dir each.
	// A restart on the same Dir reads only what followed each partition's
	// checkpoint (or everything, if the store refuses the checkpoint: the
	// partition's copy is dropped first).
	Dir string
	// OnChange, if set, hears every change the view applies, per
	// partition in log order, once the change is in the cache (a Get from
	// it sees the change). The calls are serialized, never concurrent. A
	// slow callback holds the view's reads back (no change is dropped):
	// while it runs, no partition applies anything more. The changes a
	// view applies start where its copy starts: the log start, or the
	// cache's checkpoint after a restart. It must not call Close (Close
	// waits for the reads, which wait for it).
	OnChange func(Change[S])
	// Logger; default discards.
	Logger *slog.Logger
}

// Change is one committed change a View applied.
type Change[S any] struct {
	Partition int32
	Key       []byte
	// State is the new state; the zero state when Deleted or Err.
	State S
	// Deleted: the key was deleted (a tombstone).
	Deleted bool
	// Offset is the input offset of the last event folded into the state
	// (of a view of snapshots), or the record's own offset (Plain).
	Offset int64
	// Err is a *engine.RecoveredStateError if the state does not decode with
	// the Codec; the change is in the cache all the same, and a Get of
	// the key returns the error.
	Err error
}

// Entry is a key's state in a View.
type Entry[S any] struct {
	Partition int32
	Key       []byte
	State     S
	// Offset is as Change.Offset.
	Offset int64
}

// ErrClosed: the View is closed.
// It matches engine.ErrTableUnavailable.
var ErrClosed = fmt.Errorf("view: closed: %w", engine.ErrTableUnavailable)

// ErrRunning: Run or Step was called while another Run or Step of
// the same View was under way.
var ErrRunning = errors.New("view: already running")

// PartitionNotHeldError is a read of a partition the View does not hold
// (Config.Partitions): Get of a key the Partitioner places there,
// or Range of it. Match it with errors.As.
type PartitionNotHeldError struct {
	// Topic is the view's name (Name).
	Topic     string
	Partition int32
	// Held are the partitions the view holds.
	Held []int32
}

func (e *PartitionNotHeldError) Error() string {
	return fmt.Sprintf("view %s: partition %d is not held (the view holds %v)", e.Topic, e.Partition, e.Held)
}

// PartitionError is the failure of one partition of a View: a
// corrupt record of a snapshot topic (*store.CorruptRecordError), a
// reader error, a cache error. The partition stops reading; Run returns
// the error, and a later Run or Step opens the partition again from the
// cache's checkpoint. Until then Get and Range of the partition return it,
// and so does WaitCaughtUp. It unwraps to Err.
type PartitionError struct {
	Topic     string
	Partition int32
	Err       error
}

func (e *PartitionError) Error() string {
	return fmt.Sprintf("view %s: partition %d failed: %v", e.Topic, e.Partition, e.Err)
}

func (e *PartitionError) Unwrap() error { return e.Err }

// Is matches engine.ErrTableUnavailable: a fold whose lookup returns a
// failed partition's error folds its record again once the partition
// reads, rather than treating the record as poison.
func (e *PartitionError) Is(target error) bool { return target == engine.ErrTableUnavailable }

// Status is a View's status.
type Status struct {
	// Topic is the view's name.
	Topic string
	// CaughtUp: every partition held has caught up (PartitionStatus).
	CaughtUp   bool
	Partitions []PartitionStatus
}

// PartitionStatus is one held partition's status. The offsets are
// those of the partition read (the snapshot partition of a view of
// snapshots).
type PartitionStatus struct {
	Partition int32
	// Position is the offset the view has read up to (aborted records
	// and transaction markers included).
	Position int64
	// Target is the high watermark (read_uncommitted log end) when the
	// partition was opened; CaughtUp once Position reached it. A
	// partition that caught up stays caught up, unless it failed and
	// its reopening had to drop its copy (the store refused the
	// checkpoint): then it has a new target.
	Target   int64
	CaughtUp bool
	// LogEnd is the last stable offset last listed (-1 before the first
	// read); Lag is LogEnd - Position (never below 0; -1 while LogEnd is
	// unknown): 0 when the view has read every committed record.
	LogEnd, Lag int64
	// From is the offset the copy was opened from: the cache's
	// checkpoint, or -1 for the log start.
	From int64
	// Read counts the records (snapshots, tombstones) applied since it
	// was opened.
	Read int64
	// Err is the partition's failure (a *PartitionError); nil while
	// it reads.
	Err error
}

// View is a read-only replica of a snapshot topic (or, with
// Config.Plain, of a topic of plain key/values): every partition it
// holds, read read_committed into a local cache and kept following. It
// writes nothing to Kafka and joins no group. Of a snapshot topic written
// by a Transactional engine it shows only committed snapshots: never one
// of an aborted transaction, so never one of a stale owner whose writes
// the fence aborted, nor one of a transaction a crashed owner left open.
//
// New opens it; Run keeps it following, as goka's View.Run (run it in
// a goroutine; Step is one round of reads, for a caller that drives time,
// as engine.Member.Step). Reads (Get, Range, All, Status) are safe from any
// goroutine, while Run runs too. A Get before the view caught up returns
// what the view has read so far; WaitCaughtUp waits for the rest.
type View[S any] struct {
	cfg   Config[S]
	name  string
	count int32 // the topic's partitions: the Partitioner's modulus
	tag   string
	kv    *cache.KV
	log   *slog.Logger
	parts map[int32]*viewPart[S]
	held  []int32
	// sched decides each partition's replica's life: when it opens,
	// reads, and that a failure ends the Run. Guarded by mu.
	sched *schedule.Replicas

	// readMu is held by the Run or Step under way: a partition's
	// follower and core are used by one reader at a time.
	readMu sync.Mutex
	// changeMu serializes OnChange.
	changeMu sync.Mutex

	mu      sync.Mutex
	closing bool
	cancel  context.CancelFunc // the running Run's
	notify  chan struct{}      // closed and replaced on every status change
	readers sync.WaitGroup     // reads in progress, which Close waits for
}

// viewPart is one held partition.
type viewPart[S any] struct {
	num  int32
	tp   store.TopicPartition    // what the store follows: the input partition, or the plain topic's
	rd   core.CommittedReader[S] // its states in the cache
	core *core.Core[S, engine.Output]
	// replica keeps the cache's copy up to date; it does not follow while
	// the partition failed.
	replica *replica.Reader

	// Guarded by View.mu.
	st PartitionStatus
}

// Checkpoint tags: the group a checkpoint of the cache names. No Kafka
// group is named so, so an engine given a view's Dir never takes its
// copies for its own, and a table never takes a view's.
const (
	viewCheckpointTag  = "\x00snapfence-view"
	tableCheckpointTag = "\x00snapfence-table"
)

var _ engine.Table = (*View[int])(nil)

// viewPollWait bounds one read of a partition that has nothing new: how
// often an idle partition lists its log end.
const viewPollWait = 5 * time.Second

// check validates cfg and fills in the defaults: the one place a
// View's and a Lookup's configurations are checked. declared is a
// Lookup's declaration (NewLookup), whose Store the runner gives at Open:
// there it must be nil, and the checks that need it wait for Open, which
// runs check again with the Store.
func (cfg Config[S]) check(declared bool) (Config[S], error) {
	switch {
	case declared && cfg.Store != nil:
		return cfg, &store.ConfigError{Subject: "view.Config.Store", Problem: "is set on a Lookup, which the runner opens on its own backend (Lookup.Open)",
			Fix: "leave Store nil, or open a View on this backend with view.New"}
	case !declared && cfg.Store == nil:
		return cfg, &store.ConfigError{Subject: "view.Config.Store", Problem: "is nil", Fix: "give a store/kafka or store/sim backend"}
	}
	if cfg.Topic == "" {
		return cfg, &store.ConfigError{Subject: "view.Config.Topic", Problem: "is empty",
			Fix: "name the input topic whose snapshots the view reads (or, with Plain, the topic it reads)"}
	}
	if cfg.Codec == nil {
		return cfg, &store.ConfigError{Subject: "view.Config.Codec", Problem: "is nil", Fix: "give the codec the states were written with"}
	}
	if !declared && !cfg.Plain && cfg.Store.Mode() != store.Transactional {
		return cfg, &store.ConfigError{Subject: "view.Config.Store",
			Problem: "is not in Transactional mode: a view of snapshots shows only what the fence vouches for, and a Plain-mode reader vouches for nothing (it reads read_uncommitted, aborted and stale snapshots included)",
			Fix:     "use a Transactional backend (the view writes nothing; the mode only sets how it reads), or set Plain to read the topic as plain key/values"}
	}
	seen := map[int32]bool{}
	for _, p := range cfg.Partitions {
		if p < 0 || seen[p] {
			return cfg, &store.ConfigError{Subject: "view.Config.Partitions", Problem: fmt.Sprintf("are %v: %d is negative or named twice", cfg.Partitions, p),
				Fix: "name each partition once, or leave Partitions nil for all"}
		}
		seen[p] = true
	}
	if cfg.Partitioner == nil {
		cfg.Partitioner = func(key []byte, n int32) int32 { return store.OutputPartition(key, int(n)) }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// New opens a view: it checks cfg, counts the topic's partitions,
// opens the cache and a follower of each partition held (from the cache's
// checkpoint if the store accepts it), and lists each one's high
// watermark, which WaitCaughtUp waits for. Nothing is read yet: Run or
// Step reads. A missing topic fails here (an error matching
// store.ErrMisconfigured), as does a misconfiguration (a
// *store.ConfigError) or a cache directory that is not the view's (a
// *engine.CacheDirError).
func New[S any](ctx context.Context, cfg Config[S]) (*View[S], error) {
	cfg, err := cfg.check(false)
	if err != nil {
		return nil, err
	}
	v := &View[S]{cfg: cfg, name: cfg.Topic, tag: tableCheckpointTag, log: cfg.Logger, parts: map[int32]*viewPart[S]{}, notify: make(chan struct{}),
		sched: schedule.NewReplicas(schedule.ReplicaConfig{FailureEnds: true})}
	if !cfg.Plain {
		v.tag = viewCheckpointTag
		if sp := cfg.Store.SnapshotPartition(store.TopicPartition{Topic: cfg.Topic}); sp.Topic != "" {
			v.name = sp.Topic
		}
	}
	if v.count, err = cfg.Store.Partitions(ctx, cfg.Topic); err != nil {
		return nil, fmt.Errorf("view %s: counting the partitions of %q: %w", v.name, cfg.Topic, err)
	}
	v.held = slices.Clone(cfg.Partitions)
	if v.held == nil {
		for p := range v.count {
			v.held = append(v.held, p)
		}
	}
	slices.Sort(v.held)
	for _, p := range v.held {
		if p >= v.count {
			return nil, &store.ConfigError{Subject: "view.Config.Partitions",
				Problem: fmt.Sprintf("name partition %d; topic %q has %d", p, cfg.Topic, v.count), Fix: "name only the topic's partitions"}
		}
	}
	if v.kv, err = openCache(cfg.Dir); err != nil {
		return nil, err
	}
	for _, p := range v.held {
		tp := store.TopicPartition{Topic: cfg.Topic, Partition: p}
		c, err := core.New(core.Config[S, engine.Output]{Input: tp, Codec: cfg.Codec, Warm: true}, v.kv)
		if err == nil {
			part := &viewPart[S]{num: p, tp: tp, rd: c.CommittedReader(), core: c,
				st: PartitionStatus{Partition: p, Target: -1, LogEnd: -1, Lag: -1, From: -1}}
			part.replica = v.replicaOf(part)
			v.parts[p] = part
			v.sched.Add(tp)
			err = v.open(ctx, part)
			v.sched.Opened(tp, err, time.Now())
		}
		if err != nil {
			v.closeFollowers()
			return nil, errors.Join(err, v.kv.Close())
		}
	}
	return v, nil
}

// openCache opens the view's cache (cache.Open, holding any
// application's states): in memory if dir is empty, else in
// dir/snapfence-cache, as the engine's. A directory it refuses is an
// *engine.CacheDirError.
func openCache(dir string) (*cache.KV, error) {
	kv, err := cache.Open(dir, "")
	if de, ok := errors.AsType[*cache.DirError](err); ok {
		return nil, &engine.CacheDirError{Path: de.Path, Kind: de.Kind, Detail: de.Detail, Err: de.Err}
	}
	return kv, err
}

// Name is the topic the view reads: the snapshot topic, or the plain
// topic.
func (v *View[S]) Name() string { return v.name }

// Partitions are the partitions the view holds, in order.
func (v *View[S]) Partitions() []int32 { return slices.Clone(v.held) }

// replicaOf is part's replica, which follows the store's follower of
// part. It has no Retry: a failed partition opens again at the next Run
// or Step, which the caller times.
func (v *View[S]) replicaOf(part *viewPart[S]) *replica.Reader {
	follow := v.cfg.Store.Follow
	if v.cfg.Plain {
		follow = v.cfg.Store.FollowTopic
	}
	return replica.New(replica.Config{
		Follow: func(ctx context.Context, from *store.Checkpoint) (store.Follow, error) {
			return follow(ctx, part.tp, from)
		},
		Checkpoints: cache.CheckpointTag(v.tag),
	})
}

// open opens part's replica (from the cache's checkpoint, or from the
// log start when there is none or the store refuses it: the copy is
// dropped first), and lists its target if it has none (or lost its copy).
func (v *View[S]) open(ctx context.Context, part *viewPart[S]) error {
	opened, err := part.replica.Open(ctx, part.core)
	if ce := opened.Refused; ce != nil {
		v.log.Info("view: the cache's checkpoint is no valid base; reading the partition from its start", "topic", v.name, "partition", part.num, "reason", ce.Reason)
	}
	if err != nil {
		return fmt.Errorf("view %s: opening partition %d: %w", v.name, part.num, err)
	}
	from := opened.From
	v.mu.Lock()
	target := part.st.Target
	v.mu.Unlock()
	if target < 0 || from == nil {
		if target, err = part.replica.HighWatermark(ctx); err != nil {
			return fmt.Errorf("view %s: opening partition %d: %w", v.name, part.num, part.replica.Fail(err))
		}
	}
	pos, _ := part.replica.Position()
	v.mu.Lock()
	st := &part.st
	st.Target, st.Position, st.From, st.Read, st.Err = target, pos, -1, 0, nil
	if from != nil {
		st.From = from.Offset
	} else {
		st.CaughtUp = false
	}
	st.CaughtUp = st.CaughtUp || pos >= target
	v.changedLocked()
	v.mu.Unlock()
	v.log.Info("view: following", "topic", v.name, "partition", part.num, "from", opened.Base(), "target", target)
	return nil
}

// Run keeps the view following until ctx ends or Close is called (then
// it returns nil), or a partition fails: then it stops the others and
// returns that partition's *PartitionError. Run again opens the
// failed partition again, from the cache's checkpoint. One Run (or
// Step) at a time: another returns ErrRunning.
func (v *View[S]) Run(ctx context.Context) error {
	if !v.readMu.TryLock() {
		return ErrRunning
	}
	defer v.readMu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := v.resume(cancel); err != nil {
		return err
	}
	defer func() {
		v.mu.Lock()
		v.cancel = nil
		v.mu.Unlock()
	}()
	if err := v.reopen(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, p := range v.held {
		part := v.parts[p]
		wg.Go(func() {
			for ctx.Err() == nil && v.ended() == nil && v.next(part) == schedule.StepRead {
				v.read(ctx, part, viewPollWait)
			}
			cancel() // the run ended: a partition failed, or ctx
		})
	}
	wg.Wait()
	return v.ended()
}

// Step reads each partition once, without waiting for records, and
// returns the first failure among them (a *PartitionError); the
// next Step opens the failed one again first. It is Run in one round, for a caller that drives time (the simulated
// cluster).
func (v *View[S]) Step(ctx context.Context) error {
	if !v.readMu.TryLock() {
		return ErrRunning
	}
	defer v.readMu.Unlock()
	if err := v.resume(nil); err != nil {
		return err
	}
	if err := v.reopen(ctx); err != nil {
		return err
	}
	for _, p := range v.held {
		if part := v.parts[p]; v.next(part) == schedule.StepRead {
			v.read(ctx, part, 0)
		}
	}
	return v.ended()
}

// resume starts a run (Run or Step): the scheduler forgets the last
// run's failure; cancel (nil for Step) is what Close calls.
func (v *View[S]) resume(cancel context.CancelFunc) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closing {
		return ErrClosed
	}
	v.cancel = cancel
	v.sched.Resume()
	return nil
}

// next is what the scheduler says of part now.
func (v *View[S]) next(part *viewPart[S]) schedule.ReplicaStep {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.sched.Next(part.tp, time.Now())
}

// ended is the failure that ended the run (a *PartitionError), if
// one did.
func (v *View[S]) ended() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.sched.Err()
}

// reopen opens the replicas the scheduler says are due, in partition
// order, and returns the failure that ends the run, if one does.
func (v *View[S]) reopen(ctx context.Context) error {
	for _, p := range v.held {
		part := v.parts[p]
		if v.next(part) != schedule.StepOpen {
			continue
		}
		err := v.open(ctx, part)
		if err != nil && ctx.Err() != nil {
			return nil // stopped, not failed: the next Run opens it
		}
		if err != nil {
			err = v.fail(part, err)
		}
		v.mu.Lock()
		v.sched.Opened(part.tp, err, time.Now())
		v.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// read reads part once, waiting at most wait for records, applies what
// it read, and tells the scheduler how the read ended (an end of ctx is
// no failure).
func (v *View[S]) read(ctx context.Context, part *viewPart[S], wait time.Duration) {
	snaps, err := part.replica.Read(ctx, wait)
	if err != nil {
		if part.replica.Following() { // an end of ctx
			return
		}
		pe := v.fail(part, err)
		v.mu.Lock()
		v.sched.ReadEnded(part.tp, false, pe, time.Now())
		v.mu.Unlock()
		return
	}
	rs := part.replica.Status()
	pos := rs.Position
	v.mu.Lock()
	v.sched.ReadEnded(part.tp, rs.Lag > 0, nil, time.Now())
	st := &part.st
	st.Position, st.LogEnd, st.Lag, st.Read = pos, rs.LogEnd, rs.Lag, rs.Read
	caught := !st.CaughtUp && pos >= st.Target
	st.CaughtUp = st.CaughtUp || caught
	if caught || len(snaps) > 0 {
		v.changedLocked()
	}
	v.mu.Unlock()
	if caught {
		v.log.Info("view: caught up", "topic", v.name, "partition", part.num, "position", pos, "target", st.Target)
	}
	if v.cfg.OnChange != nil && len(snaps) > 0 {
		v.changes(part, snaps)
	}
}

// changes hands snaps to OnChange, decoded.
func (v *View[S]) changes(part *viewPart[S], snaps []store.Snapshot) {
	v.changeMu.Lock()
	defer v.changeMu.Unlock()
	for _, s := range snaps {
		ch := Change[S]{Partition: part.num, Key: s.Key, Offset: s.Offset, Deleted: s.Tombstone}
		if !s.Tombstone {
			st, err := v.cfg.Codec.Decode(s.Value)
			if err != nil {
				ch.Err = &engine.RecoveredStateError{Input: part.tp, Key: s.Key, Offset: s.Offset, Err: err}
			} else {
				ch.State = st
			}
		}
		v.cfg.OnChange(ch)
	}
}

// fail records part's failure err (its replica stopped following) and
// returns its *PartitionError.
func (v *View[S]) fail(part *viewPart[S], err error) error {
	pe := &PartitionError{Topic: v.name, Partition: part.num, Err: err}
	v.mu.Lock()
	part.st.Err = pe
	v.changedLocked()
	v.mu.Unlock()
	v.log.Error("view: partition failed; Run or Step opens it again from the cache's checkpoint", "topic", v.name, "partition", part.num, "err", err)
	return pe
}

// changedLocked wakes the waiters of WaitCaughtUp; v.mu is held.
func (v *View[S]) changedLocked() {
	close(v.notify)
	v.notify = make(chan struct{})
}

// WaitCaughtUp returns nil once every partition the view holds has read
// up to the high watermark it had when the partition was opened
// (read_committed, so past the end of every transaction open then), or
// the failure of a partition (a *PartitionError, which it returns
// whether or not the view had caught up: a failed partition no longer
// follows), ErrClosed, or ctx's error. The view reads only while Run
// (or Step) runs.
func (v *View[S]) WaitCaughtUp(ctx context.Context) error {
	for {
		v.mu.Lock()
		caught, err := v.caughtLocked()
		if v.closing && err == nil {
			err = ErrClosed
		}
		wake := v.notify
		v.mu.Unlock()
		if err != nil {
			return err
		}
		if caught {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// caughtLocked is whether every partition caught up, and the first
// failure; v.mu is held.
func (v *View[S]) caughtLocked() (bool, error) {
	all := true
	for _, p := range v.held {
		st := v.parts[p].st
		if st.Err != nil {
			return false, st.Err
		}
		all = all && st.CaughtUp
	}
	return all, nil
}

// Status is the view's status, by partition.
func (v *View[S]) Status() Status {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := Status{Topic: v.name}
	s.CaughtUp, _ = v.caughtLocked()
	for _, p := range v.held {
		s.Partitions = append(s.Partitions, v.parts[p].st)
	}
	return s
}

// enter admits a read, or says why not: the view is closing, the
// partition is not held or has failed. A read admitted ends with
// v.readers.Done.
func (v *View[S]) enter(p int32) (*viewPart[S], error) {
	part := v.parts[p]
	if part == nil {
		return nil, &PartitionNotHeldError{Topic: v.name, Partition: p, Held: slices.Clone(v.held)}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closing {
		return nil, ErrClosed
	}
	if err := part.st.Err; err != nil {
		return nil, err
	}
	v.readers.Add(1)
	return part, nil
}

// Get returns key's state in the partition the Partitioner places it in:
// the last committed state the view has read (exists is false if the key
// has none, or was deleted). It does not wait for the view to catch up.
// A key of a partition the view does not hold is a
// *PartitionNotHeldError; a state that does not decode a
// *engine.RecoveredStateError; a failed partition's reads return its
// *PartitionError.
func (v *View[S]) Get(key []byte) (state S, exists bool, err error) {
	part, err := v.enter(v.cfg.Partitioner(key, v.count))
	if err != nil {
		return state, false, err
	}
	defer v.readers.Done()
	b, ok, err := v.kv.Get(append(bytes.Clone(part.rd.Prefix()), key...))
	if err != nil || !ok {
		return state, false, err
	}
	e, err := v.entry(part, key, b)
	return e.State, err == nil && e.live, err
}

// viewEntry is a Entry read from the cache, tombstones included.
type viewEntry[S any] struct {
	Entry[S]
	live bool
}

// entry decodes a cache entry of key, as the engine's queries do (one
// decoder of the cache's entries: core.CommittedReader).
func (v *View[S]) entry(part *viewPart[S], key, b []byte) (viewEntry[S], error) {
	ce, live, err := part.rd.Decode(key, b)
	e := viewEntry[S]{Entry: Entry[S]{Partition: part.num, Key: key, Offset: ce.Offset, State: ce.State}, live: live}
	if err != nil {
		if se, ok := err.(*core.StateError); ok {
			return e, &engine.RecoveredStateError{Input: se.Input, Key: se.Key, Offset: se.Offset, Err: se.Err}
		}
		return e, fmt.Errorf("view %s, partition %d: %w", v.name, part.num, err)
	}
	return e, nil
}

// Range yields the live keys of partition p with their states, in key
// order, as of the moment it starts (a Pebble iterator: a snapshot, so
// the reads going on meanwhile do not show). It yields one error and
// stops for a partition not held (*PartitionNotHeldError), a failed one
// (*PartitionError), a state that does not decode
// (*engine.RecoveredStateError) or a cache error. Close waits for a Range under
// way; do not call it from the loop.
func (v *View[S]) Range(p int32) iter.Seq2[Entry[S], error] {
	return func(yield func(Entry[S], error) bool) {
		part, err := v.enter(p)
		if err != nil {
			yield(Entry[S]{}, err)
			return
		}
		defer v.readers.Done()
		prefix := part.rd.Prefix()
		it, err := v.kv.NewIter(prefix, core.PrefixEnd(prefix))
		if err != nil {
			yield(Entry[S]{}, fmt.Errorf("view %s: reading partition %d: %w", v.name, p, err))
			return
		}
		defer func() { _ = it.Close() }()
		for ok := it.First(); ok; ok = it.Next() {
			key := bytes.Clone(it.Key()[len(prefix):])
			e, err := v.entry(part, key, it.Value())
			if err != nil {
				yield(Entry[S]{}, err)
				return
			}
			if e.live && !yield(e.Entry, nil) {
				return
			}
		}
		if err := it.Error(); err != nil {
			yield(Entry[S]{}, fmt.Errorf("view %s: reading partition %d: %w", v.name, p, err))
		}
	}
}

// All is Range over every partition the view holds, in partition order.
func (v *View[S]) All() iter.Seq2[Entry[S], error] {
	return func(yield func(Entry[S], error) bool) {
		for _, p := range v.held {
			for e, err := range v.Range(p) {
				if !yield(e, err) || err != nil {
					return
				}
			}
		}
	}
}

// Close stops Run, waits for it and for the reads under way, and closes
// the followers and the cache (an on-disk cache keeps each partition's
// last checkpoint for the next New on its Dir). Later reads return
// ErrClosed.
func (v *View[S]) Close() error {
	v.mu.Lock()
	if v.closing {
		v.mu.Unlock()
		return nil
	}
	v.closing = true
	cancel := v.cancel
	v.changedLocked()
	v.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	v.readMu.Lock() // Run and Step have returned
	defer v.readMu.Unlock()
	v.closeFollowers()
	v.readers.Wait()
	return v.kv.Close()
}

func (v *View[S]) closeFollowers() {
	for _, part := range v.parts {
		part.replica.Close()
	}
}
