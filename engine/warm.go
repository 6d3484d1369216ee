package engine

import (
	"time"

	"github.com/snapfence/snapfence/engine/internal/cache"
	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/store"
)

// The warm restart (docs/operations.md, "Warm restarts"): the cache keeps
// each partition's committed states with the store's checkpoint of them,
// and an acquisition whose checkpoint is still a valid base reads only
// the snapshots written since (a delta recovery) instead of the whole
// snapshot partition.

// The reasons a recovery is full rather than a delta (the reason label of
// snapfence_recoveries_total, and the log line's full_reason). The store's
// refusals (store.Checkpoint*) are reasons too.
const (
	// RecoveryCheckpoint is a delta recovery's reason label: it read
	// from the cache's checkpoint on (the log line names the checkpoint's
	// snapshot-topic offset, checkpoint_offset).
	RecoveryCheckpoint = "checkpoint"

	// RecoveryNoCheckpoint: the cache holds no checkpoint of the
	// partition (its first acquisition on this directory, or the last one
	// never finished its recovery).
	RecoveryNoCheckpoint = "no_checkpoint"
	// RecoveryOtherGroup: the checkpoint was written for another consumer
	// group.
	RecoveryOtherGroup = "other_group"
	// RecoveryUnreadableCheckpoint: the checkpoint does not decode (a
	// cache of another snapfence, or damage).
	RecoveryUnreadableCheckpoint = "unreadable_checkpoint"
	// RecoveryConfigured: Config.FullRecovery is set.
	RecoveryConfigured = "configured"
	// RecoveryDiscardUndecodableState: Config.UndecodableState is
	// DiscardUndecodableState. Only a full recovery decodes every key's
	// state before the partition runs; a delta would meet the states the
	// cache kept one by one, as their keys are folded.
	RecoveryDiscardUndecodableState = "discard_undecodable_state"
)

// committedBatchAt tells f's core how the write of snaps ended (err)
// and, when it committed, makes it durable in the cache with checkpoint
// cp (if cpOK); the first error is the batch's.
func (r *Member[S]) committedBatchAt(f *flow[S], snaps []store.Snapshot, err error, cp store.Checkpoint, cpOK bool) error {
	for _, s := range snaps {
		if werr := f.core.WriteDone(s.Key, err); werr != nil && err == nil {
			err = fromCore(werr)
		}
	}
	if err == nil {
		err = r.settledAt(f, cp, cpOK)
	}
	return err
}

// durable writes what f's core was told is durable, with f's partition's
// checkpoint when the store vouches for one: for a flow with nothing in
// flight (a recovery's end), whose partition's position is its own.
func (r *Member[S]) durable(f *flow[S]) error {
	cp, ok := f.part.Position()
	return r.durableAt(f, cp, ok)
}

// durableAt writes what f's core was told is durable, with checkpoint cp
// if ok: the position as of the end of the call just reaped
// (store.Pending.Position), never a later one, which could cover a write
// still in flight whose states the cache does not hold yet.
func (r *Member[S]) durableAt(f *flow[S], cp store.Checkpoint, ok bool) error {
	r.cacheWriting(f)
	return fromCore(f.core.Durable(r.checkpoint(cp, ok)))
}

// cacheWriting notes a write of f's committed states to the cache.
func (r *Member[S]) cacheWriting(f *flow[S]) {
	f.cacheWritten, f.readsSeen = r.src.Now(), r.committedReads.Load()
}

// cacheWriteInterval is how often a flow's committed states go to the
// cache while it runs and nobody reads them (settledAt). Written at
// every commit, a key that changes in each of a 100 ms interval's
// transactions costs a Pebble write, flush and compaction each time;
// once a second it costs one, for a delta recovery after a crash up to a
// second longer. A teardown writes them all.
const cacheWriteInterval = time.Second

// settledAt is durableAt for the end of a batch or a commit. While
// committed reads come (one since f's last write), it writes at once, so
// they see each commit; otherwise once cacheWriteInterval has passed
// since f's last write, deferring the states and cp until then
// (core.Core.Defer).
func (r *Member[S]) settledAt(f *flow[S], cp store.Checkpoint, ok bool) error {
	if !r.cacheWriteDue(f) {
		return fromCore(f.core.Defer(r.checkpoint(cp, ok)))
	}
	return r.durableAt(f, cp, ok)
}

// cacheWriteDue: f's committed states go to the cache now, as a
// committed read came since its last write, or cacheWriteInterval has
// passed.
func (r *Member[S]) cacheWriteDue(f *flow[S]) bool {
	return r.committedReads.Load() != f.readsSeen || r.src.Now().Sub(f.cacheWritten) >= cacheWriteInterval
}

// settleIdle writes what f's core deferred once cacheWriteInterval has
// passed, on the commit timer: a partition whose input stopped has no
// batch left to end, and its committed reads must catch up all the same.
func (r *Member[S]) settleIdle(f *flow[S]) error {
	if !f.core.Deferring() || !r.cacheWriteDue(f) {
		return nil
	}
	r.cacheWriting(f)
	return fromCore(f.core.Durable(nil))
}

// checkpoint is cp as the cache keeps it, nil if not ok.
func (r *Member[S]) checkpoint(cp store.Checkpoint, ok bool) []byte {
	if !ok {
		return nil
	}
	return cache.EncodeCheckpoint(r.src.Identity().Group, cp)
}

// recoveryBase says from where f's partition recovers: the checkpoint in
// the cache (delta) if there is a usable one as far as the engine can
// tell, or nothing (full) with the reason. The store checks the rest.
func (r *Member[S]) recoveryBase(f *flow[S], discard bool) (cp store.Checkpoint, delta bool, reason string) {
	if r.e.cfg.FullRecovery {
		return cp, false, RecoveryConfigured
	}
	if discard {
		return cp, false, RecoveryDiscardUndecodableState
	}
	b, ok, err := f.core.Checkpoint()
	switch {
	case err != nil:
		r.e.log.Warn("reading the cache's checkpoint failed; recovering in full", "input", f.tp.String(), "err", err)
		return cp, false, RecoveryUnreadableCheckpoint
	case !ok:
		return cp, false, RecoveryNoCheckpoint
	}
	group, cp, err := cache.DecodeCheckpoint(b)
	switch {
	case err != nil:
		return cp, false, RecoveryUnreadableCheckpoint
	case group != r.src.Identity().Group:
		return cp, false, RecoveryOtherGroup
	}
	return cp, true, RecoveryCheckpoint
}

// warm lists the partitions whose checkpoint the cache holds for group,
// from any goroutine (input.Opening.Warm): a member's group balancer
// gives a partition that moves to a member that holds it warm. A cache
// read that fails (the engine closing) lists what it read.
func (e *Engine[S]) warm(group string) []store.TopicPartition {
	var out []store.TopicPartition
	_ = e.kv.Queries().Range(core.CheckpointPrefix, core.PrefixEnd(core.CheckpointPrefix), func(k, v []byte) bool {
		tp, ok := core.CheckpointPartition(k)
		if g, _, err := cache.DecodeCheckpoint(v); ok && err == nil && g == group {
			out = append(out, tp)
		}
		return true
	})
	return out
}
