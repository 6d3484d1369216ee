package store

import (
	"context"
	"time"
)

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
