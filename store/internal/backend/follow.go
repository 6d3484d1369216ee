package backend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/internal/readloop"
	"github.com/snapfence/snapfence/store/wire"
)

// Follow implements store.Backend: a read_committed reader of input's
// snapshot partition that writes nothing and takes nothing over, for a
// standby replica.
//
// The checkpoints it hands out keep the contract of store.Checkpoint: At
// is no later than the append of any record at or above Offset. A
// follower opened from a checkpoint starts with that checkpoint's At; a
// follower from the log start vouches for nothing until its position
// first reaches a last stable offset listed before the poll that got it
// there. Then every record at or above the position was either appended
// after the listing started, or belongs to a transaction open at the
// listing, appended at most followTxnSlack before it (the coordinator
// aborts a transaction older than its timeout, which the broker caps at
// transaction.max.timeout.ms): At is the listing's time less that slack.
// (A follower under steady writes is rarely at the high watermark, as
// some owner's transaction is nearly always open.) Later checkpoints keep
// the At of the last such moment while the position moves on: the
// records above a later position are a subset of those above the earlier
// one.
func (b *Backend) Follow(ctx context.Context, input store.TopicPartition, from *store.Checkpoint) (store.Follow, error) {
	if err := b.open(ctx); err != nil {
		return nil, err
	}
	if b.cfg.Application == "" && b.cfg.SnapshotTopicIsDefault {
		return nil, fmt.Errorf("%s: follow %s: %w", b.cfg.Name, input, &store.ConfigError{Subject: "Config.Application", Problem: "empty",
			Fix: "name the application whose snapshots are read (its Application), or its SnapshotTopic"})
	}
	snap := b.SnapshotPartition(input)
	if b.cfg.Mode != store.Transactional {
		cp := store.Checkpoint{}
		if from != nil {
			cp = *from
		}
		return nil, &store.CheckpointError{Snapshots: snap, Reason: store.CheckpointPlain, Checkpoint: cp,
			Detail: "without transactions nothing fences another writer out of the snapshot partition, so no standby copy is vouched for"}
	}
	link, err := b.broker.Open(ctx, input, snap, nil)
	if err != nil {
		return nil, err
	}
	return b.follow(ctx, snap, link.Source, link.Snapshots(), link.Release, checkBase, decodeSnapshot, from)
}

// Partitions implements store.Backend.
func (b *Backend) Partitions(ctx context.Context, topic string) (int32, error) {
	if err := b.open(ctx); err != nil {
		return 0, err
	}
	return b.broker.Partitions(ctx, topic)
}

// FollowTopic implements store.Backend: Follow's reader over any
// topic's partition, read_committed whatever the mode, its records
// returned raw.
func (b *Backend) FollowTopic(ctx context.Context, tp store.TopicPartition, from *store.Checkpoint) (store.Follow, error) {
	if err := b.open(ctx); err != nil {
		return nil, err
	}
	link, err := b.broker.OpenTopic(ctx, tp)
	if err != nil {
		return nil, err
	}
	return b.follow(ctx, tp, link.Source, link.Snapshots(), link.Release, checkTopicBase, decodeRaw, from)
}

// open says why the backend can open nothing more: ctx ended, or it is
// closed.
func (b *Backend) open(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return store.ErrClosed
	}
	return nil
}

// decodeSnapshot decodes a snapshot record; ok is false for an offset
// marker.
func decodeSnapshot(tp store.TopicPartition, r readloop.Fetched) (store.Snapshot, bool, error) {
	s, kind, err := wire.DecodeRecord(tp, r.Offset, r.Record)
	return s, err == nil && kind != wire.KindOffsetMarker, err
}

// decodeRaw is a record of any topic as it is: its own offset, a null
// value a tombstone.
func decodeRaw(_ store.TopicPartition, r readloop.Fetched) (store.Snapshot, bool, error) {
	return store.Snapshot{Key: r.Record.Key, Value: r.Record.Value, Offset: r.Offset, Tombstone: r.Record.Value == nil}, true, nil
}

// follow opens a follower of tp through a link's source, checking from
// with check.
func (b *Backend) follow(ctx context.Context, tp store.TopicPartition, source func(context.Context, int64) (readloop.Source, func(), error),
	topic SnapshotTopic, releaseLink func(),
	check func(context.Context, Config, store.TopicPartition, SnapshotTopic, readloop.Source, store.Checkpoint) error,
	decode func(store.TopicPartition, readloop.Fetched) (store.Snapshot, bool, error), from *store.Checkpoint) (store.Follow, error) {
	off := int64(0)
	if from != nil {
		off = from.Offset
	}
	src, release, err := source(ctx, off)
	if err != nil {
		releaseLink()
		return nil, err
	}
	f := &follow{b: b, snap: tp, src: src, decode: decode, release: func() { release(); releaseLink() }, logEnd: -1}
	if from != nil {
		if err := check(ctx, b.cfg, tp, topic, src, *from); err != nil {
			f.release()
			return nil, err
		}
		f.cp, f.vouched = *from, true
	} else {
		f.cp.TopicID = topic.ID
	}
	start, err := src.LogStart(ctx)
	if err != nil {
		f.release()
		return nil, err
	}
	f.cp.Offset = max(start, off)
	return f, nil
}

// follow is one store.Follow over the shared reader.
type follow struct {
	b       *Backend
	snap    store.TopicPartition
	src     readloop.Source
	decode  func(store.TopicPartition, readloop.Fetched) (store.Snapshot, bool, error)
	release func()
	// cp is the position and the At the next checkpoint carries; vouched
	// once At is known (see Follow).
	cp      store.Checkpoint
	vouched bool
	logEnd  int64
	closed  bool
}

// followTxnSlack is Kafka's default transaction.max.timeout.ms: no
// transaction stays open longer on a broker that keeps the default. It is
// small next to delete.retention.ms (24 h by default), so the checkpoint
// it ages stays usable.
const followTxnSlack = 15 * time.Minute

// errFollowReset: the reader was sent back below its position (the log
// start passed it, or the log was cut and rewritten).
var errFollowReset = errors.New("the snapshot partition's log moved under the follower")

// Next implements store.Follow.
func (f *follow) Next(ctx context.Context, wait time.Duration) ([]store.Snapshot, store.Checkpoint, bool, error) {
	if f.closed {
		return nil, f.cp, false, store.ErrClosed
	}
	listed := f.b.cfg.Now()
	lso, err := f.src.LastStable(ctx)
	if err != nil {
		return nil, f.cp, false, err
	}
	f.logEnd = lso
	recs, next, err := f.src.Poll(ctx, wait)
	if err != nil {
		return nil, f.cp, false, err
	}
	var out []store.Snapshot
	for _, r := range recs {
		if r.Offset < f.cp.Offset {
			return nil, f.cp, false, &store.CheckpointError{Snapshots: f.snap, Reason: store.CheckpointBelowLogStart, Checkpoint: f.cp,
				Detail: fmt.Sprintf("%v: a record at %d below the position %d", errFollowReset, r.Offset, f.cp.Offset)}
		}
		s, ok, err := f.decode(f.snap, r)
		if err != nil {
			return nil, f.cp, false, err
		}
		if ok {
			out = append(out, s)
		}
	}
	f.cp.Offset = max(f.cp.Offset, next)
	if at := listed.Add(-followTxnSlack); f.cp.Offset >= lso {
		// Both bounds hold; the later one keeps the checkpoint young.
		if at.After(f.cp.At) {
			f.cp.At = at
		}
		f.vouched = true
	}
	return out, f.cp, f.vouched, nil
}

// Position implements store.Follow.
func (f *follow) Position() (offset, logEnd int64) { return f.cp.Offset, f.logEnd }

// HighWatermark implements store.Follow.
func (f *follow) HighWatermark(ctx context.Context) (int64, error) {
	if f.closed {
		return 0, store.ErrClosed
	}
	return f.src.HighWatermark(ctx)
}

// Close implements store.Follow.
func (f *follow) Close() error {
	if !f.closed {
		f.closed = true
		f.release()
	}
	return nil
}
