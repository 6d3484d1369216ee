package store

import (
	"context"
	"time"
)

// Follower is a Backend that can follow the snapshot partitions of input
// partitions it has not acquired: read them read_committed, writing
// nothing and fencing no one, as a standby replica does. store/kafka's
// and store/sim's backends implement it.
type Follower interface {
	// Follow opens a follower of input's snapshot partition, positioned
	// at from (nil: the log start). A from that is no valid base for a
	// delta (the checks of Partition.RecoverFrom) is refused at once with
	// a *CheckpointError; the caller follows from the start instead.
	// Plain mode refuses every follower (nothing fences another writer,
	// so no copy is vouched for), with a *CheckpointError too.
	Follow(ctx context.Context, input TopicPartition, from *Checkpoint) (Follow, error)
}

// Follow is one follower of a snapshot partition. Its methods are called
// from one goroutine at a time.
type Follow interface {
	// Next returns the committed snapshots read since the last call, in
	// log order (offset markers skipped; records of aborted transactions
	// are never returned), waiting at most wait for some. cp is the
	// checkpoint of a copy that holds every snapshot returned so far,
	// over the base it was opened from; ok is false until one can be
	// vouched for (a follower from the log start, until its position first
	// reaches the last stable offset; its At is then 15 min, Kafka's
	// default transaction.max.timeout.ms, before that moment, as records of
	// a transaction still open may be older). A corrupt record ends the follower
	// with a *CorruptRecordError.
	Next(ctx context.Context, wait time.Duration) (snaps []Snapshot, cp Checkpoint, ok bool, err error)
	// Position is the snapshot-partition offset the follower has read up
	// to, and the last stable offset it last listed (-1 before it listed
	// one): the end of what it can read.
	Position() (offset, logEnd int64)
	// HighWatermark lists the partition's log end as a read_uncommitted
	// reader sees it (the bound a recovery reads to): a follower whose
	// position has reached the high watermark listed at some moment has
	// read every record committed before that moment, and waited out
	// every transaction open then.
	HighWatermark(ctx context.Context) (int64, error)
	// Close releases the follower's reader.
	Close() error
}

// TopicFollower is a Backend that can also follow a partition of any
// topic, not only a snapshot partition, and count a topic's partitions:
// what a view of a snapshot topic or a table of a compacted topic of
// plain key/values needs (engine.View). store/kafka's and store/sim's
// backends implement it.
type TopicFollower interface {
	Follower
	// Partitions returns topic's partition count. A topic that does not
	// exist is an error matching ErrMisconfigured (a *ConfigError or the
	// backend's own missing-topic error).
	Partitions(ctx context.Context, topic string) (int32, error)
	// FollowTopic follows partition tp of any topic read_committed, in
	// either Mode: records of aborted transactions are never returned,
	// and nothing past an open transaction is read until it ends. The
	// records come as Snapshots of their raw key and value: Offset is the
	// record's own offset, and a record whose value is null is a
	// Tombstone (a delete of its key in a compacted topic). Nothing is
	// decoded, so no record is corrupt; control records are skipped. from
	// and the checkpoints returned follow Follower.Follow's rules (a from
	// that is no valid base for tp is refused with a *CheckpointError).
	// Nothing fences the writers of a topic snapfence does not write: the
	// follower shows what they committed, stale or not.
	FollowTopic(ctx context.Context, tp TopicPartition, from *Checkpoint) (Follow, error)
}
