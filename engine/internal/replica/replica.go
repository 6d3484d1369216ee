// Package replica keeps a local copy of one snapshot partition (or of a
// partition of a compacted topic) up to date from a store.Follow: what a
// standby replica, a view and a lookup table each do per partition.
//
// A Reader opens its follower from the copy's checkpoint, or from the log
// start when there is none or the store refuses it (the copy is dropped
// first, so a copy read from the start starts empty), applies what it
// reads to the copy with the follower's checkpoint, and says where it is.
// It decides nothing: the caller's scheduler (schedule.Replicas) says when
// to open, when to read and when a failed one opens again.
package replica

import (
	"context"
	"errors"
	"time"

	"github.com/snapfence/snapfence/store"
)

// Copy is the local copy of the partition: *core.Core is one.
type Copy interface {
	// Checkpoint is the checkpoint stored with the copy (ok false: none).
	Checkpoint() (cp []byte, ok bool, err error)
	// Drop removes the copy, its checkpoint first.
	Drop() error
	// Replicated applies snapshots read (committed, in log order) with
	// checkpoint (nil: none) in one atomic write.
	Replicated(snaps []store.Snapshot, checkpoint []byte) error
}

// Checkpoints is how the copy records the follower's checkpoints. The
// copy may hold one written by someone else (an engine's, a view's): a
// Reader follows only from one Decode accepts.
type Checkpoints interface {
	Encode(cp store.Checkpoint) []byte
	Decode(b []byte) (cp store.Checkpoint, ok bool)
}

// Config configures a Reader.
type Config struct {
	// Follow opens the store's follower of the partition from from (nil:
	// the log start). A from the store refuses is a *store.CheckpointError.
	Follow func(ctx context.Context, from *store.Checkpoint) (store.Follow, error)
	// Checkpoints encodes and decodes the copy's checkpoints.
	Checkpoints Checkpoints
}

// Reader keeps one copy up to date. Its methods are called from one
// goroutine at a time. It is in one of three states: following (Open
// succeeded), failed (Err), or neither (new, or closed).
type Reader struct {
	cfg  Config
	copy Copy
	f    store.Follow
	from int64 // the checkpoint's offset opened from; -1: the log start
	// vouched: the copy holds a checkpoint with what it read.
	vouched bool
	read    int64
	err     error
}

// Opened says where an Open started.
type Opened struct {
	// From is the checkpoint the copy follows from; nil: the log start,
	// and the copy was dropped.
	From *store.Checkpoint
	// Refused is the store's refusal of the copy's checkpoint, if it
	// refused it; set even when the Open then failed.
	Refused *store.CheckpointError
}

// Base is where the Open started, for a log line: the checkpoint's
// offset, or "log_start".
func (o Opened) Base() any {
	if o.From == nil {
		return "log_start"
	}
	return o.From.Offset
}

// New returns a Reader that has opened nothing.
func New(cfg Config) *Reader {
	return &Reader{cfg: cfg, from: -1}
}

// Open opens the follower of c, which the Reader then applies to. The
// copy's checkpoint is the base if Checkpoints accepts it and the store
// does; if the store refuses it, the Reader follows from the log start
// and drops the copy first. A checkpoint that cannot be read fails the
// Open: dropping the copy on a read error would lose it for nothing. A
// failure is recorded (Err) and returned. An open Reader is
// closed first.
func (r *Reader) Open(ctx context.Context, c Copy) (Opened, error) {
	r.closeFollow()
	r.copy = c
	var o Opened
	b, ok, err := c.Checkpoint()
	if err != nil {
		return o, r.Fail(err)
	}
	if ok {
		if cp, ok := r.cfg.Checkpoints.Decode(b); ok {
			o.From = &cp
		}
	}
	f, err := r.cfg.Follow(ctx, o.From)
	if ce, refused := errors.AsType[*store.CheckpointError](err); refused && o.From != nil {
		o.From, o.Refused = nil, ce
		f, err = r.cfg.Follow(ctx, nil)
	}
	if err != nil {
		return o, r.Fail(err)
	}
	r.f = f
	if o.From == nil {
		if err := c.Drop(); err != nil {
			return o, r.Fail(err)
		}
	}
	r.from, r.vouched, r.read, r.err = -1, o.From != nil, 0, nil
	if o.From != nil {
		r.from = o.From.Offset
	}
	return o, nil
}

// Read reads the follower once, waiting at most wait for records, and
// applies what it read to the copy with the follower's checkpoint, if it
// vouches for one. It returns what it applied. A failure closes the
// follower and is recorded (Err); an end of ctx is none: the
// Reader still follows, and Read returns the error. A Reader that does
// not follow reads nothing.
func (r *Reader) Read(ctx context.Context, wait time.Duration) ([]store.Snapshot, error) {
	if r.f == nil {
		return nil, nil
	}
	snaps, cp, ok, err := r.f.Next(ctx, wait)
	if err == nil {
		var enc []byte
		if ok {
			enc = r.cfg.Checkpoints.Encode(cp)
		}
		err = r.copy.Replicated(snaps, enc)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, r.Fail(err)
	}
	r.vouched = r.vouched || ok
	r.read += int64(len(snaps))
	return snaps, nil
}

// HighWatermark lists the partition's high watermark (store.Follow's);
// it is no failure of the Reader's.
func (r *Reader) HighWatermark(ctx context.Context) (int64, error) {
	if r.f == nil {
		return -1, errors.New("replica: not following")
	}
	return r.f.HighWatermark(ctx)
}

// Fail closes the follower after err, a failure of the caller's about
// this copy as much as of the Reader's own, and records it. It returns
// err.
func (r *Reader) Fail(err error) error {
	r.closeFollow()
	r.err = err
	return err
}

// Close closes the follower, if open, and forgets a failure: the copy
// stays as it is, with its checkpoint.
func (r *Reader) Close() {
	r.closeFollow()
	r.err = nil
}

func (r *Reader) closeFollow() {
	if r.f != nil {
		_ = r.f.Close()
		r.f = nil
	}
}

// Following: the last Open succeeded, and nothing failed or closed it
// since.
func (r *Reader) Following() bool { return r.f != nil }

// Err is the last failure, while the Reader does not follow; nil
// otherwise.
func (r *Reader) Err() error { return r.err }

// Position is the follower's (store.Follow.Position): the offset read
// up to and the last stable offset last listed; -1, -1 while the Reader
// does not follow.
func (r *Reader) Position() (offset, logEnd int64) {
	if r.f == nil {
		return -1, -1
	}
	return r.f.Position()
}

// Status is where a Reader is.
type Status struct {
	Following bool
	// Position is the offset of the partition read up to (aborted records
	// and transaction markers included); LogEnd its last stable offset
	// last listed (-1 before one was). Lag is LogEnd - Position, never
	// below 0, and -1 while LogEnd is unknown.
	Position, LogEnd, Lag int64
	// From is the checkpoint's offset the copy was opened from; -1 for the
	// log start.
	From int64
	// Vouched: the copy holds a checkpoint with what the Reader read (one
	// from the log start vouches once it first caught up).
	Vouched bool
	// Read counts the records applied since Open.
	Read int64
	// Err is the last failure, while the Reader does not follow.
	Err error
}

// Status is the Reader's status. The offsets are -1, and Vouched false,
// while it does not follow.
func (r *Reader) Status() Status {
	if r.f == nil {
		return Status{Position: -1, LogEnd: -1, Lag: -1, From: -1, Err: r.err}
	}
	s := Status{Following: true, From: r.from, Vouched: r.vouched, Read: r.read, Lag: -1}
	s.Position, s.LogEnd = r.Position()
	if s.LogEnd >= 0 {
		s.Lag = max(s.LogEnd-s.Position, 0)
	}
	return s
}
