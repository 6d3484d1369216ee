package backend

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/internal/groupcommit"
	"github.com/snapfence/snapfence/store/internal/readloop"
)

// Partition is an acquired input partition: the store.Partition every
// backend returns.
type Partition struct {
	b        *Backend
	input    store.TopicPartition
	snap     store.TopicPartition
	identity store.IdentityReader
	// progress is the acquisition's recovery hook (nil: none).
	progress func(store.RecoveryEvent)
	link     Link
	// w is the write path: the group commit in Transactional mode, the
	// plain path in Plain mode.
	w writePath

	// mu guards the position: the checkpoint of what this partition
	// recovered and committed (Position), valid once a recovery ended
	// and until a transaction fails.
	mu       sync.Mutex
	position store.Checkpoint
	posValid bool
	posLost  bool
}

var _ store.Partition = (*Partition)(nil)

// writePath is what a partition writes and commits through.
type writePath interface {
	StartWriteBatch(ctx context.Context, snaps []store.Snapshot) *groupcommit.Pending
	StartCommit(ctx context.Context, offset int64) *groupcommit.Pending
	Commit(ctx context.Context, offset int64) error
	Committed() int64
	Pending() int
	Close()
}

// StartWriteBatch implements store.Partition: in Transactional mode the
// writes join the group commit's queue in order, in one step, before it
// returns, and a goroutine of the group commit waits for them (the
// caller, with Config.Inline); in Plain mode they are produced in order
// and awaited together before it returns.
func (p *Partition) StartWriteBatch(ctx context.Context, snaps []store.Snapshot) store.Pending {
	return p.w.StartWriteBatch(ctx, snaps)
}

// Commit implements store.Partition.
func (p *Partition) Commit(ctx context.Context, offset int64) error { return p.w.Commit(ctx, offset) }

// StartCommit implements store.Partition, as StartWriteBatch does.
func (p *Partition) StartCommit(ctx context.Context, offset int64) store.Pending {
	return p.w.StartCommit(ctx, offset)
}

// CommittedOffset implements store.Partition.
func (p *Partition) CommittedOffset() int64 { return p.w.Committed() }

// StartCommitBatch implements store.Partition (Transactional mode only).
func (p *Partition) StartCommitBatch(ctx context.Context, b store.Batch) store.Pending {
	gc, ok := p.w.(*groupcommit.Committer)
	if !ok {
		return groupcommit.Ready([]error{fmt.Errorf("%s: %s: exactly-once batches need Transactional mode (this backend is %v): %w",
			p.b.cfg.Name, p.input, p.b.cfg.Mode, store.ErrNotTransactional)})
	}
	return gc.StartCommitBatch(ctx, b)
}

// Pending is the number of writes and commits queued behind the
// transaction in flight (always 0 in Plain mode, where nothing queues):
// how a backend's contract harness knows, in real time, that a write
// has joined the queue. It is no part of store.Partition.
func (p *Partition) Pending() int { return p.w.Pending() }

// Close implements store.Partition: it releases the partition without
// committing.
func (p *Partition) Close() error {
	p.b.forget(p)
	p.release()
	return nil
}

func (p *Partition) release() {
	p.w.Close()
	p.link.Release()
}

// exec runs one transaction of the group commit.
func (p *Partition) exec(ctx context.Context, batch groupcommit.Batch) (store.GroupIdentity, error) {
	id := p.identity.CurrentIdentity() // read live, for this transaction (I1)
	if !id.Valid() {
		// Kafka does not validate a TxnOffsetCommit that carries no
		// member id and generation -1: it would land unfenced (I4).
		return id, &store.MissingIdentityError{Input: p.input, Identity: id}
	}
	ctx, cancel := p.bounded(ctx)
	defer cancel()
	start := p.b.cfg.Now()
	end, err := p.link.Transact(ctx, batch, id)
	p.transacted(start, end, err)
	return id, p.timedOut(ctx, "the transaction", err)
}

// transacted moves the position past a committed transaction that began
// at start and wrote up to end. A failed one loses the position for good:
// its outcome may be unknown (a commit that timed out may have landed),
// and a later position would vouch for a copy without it.
func (p *Partition) transacted(start time.Time, end int64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.posLost = true
		return
	}
	if p.posValid && end > p.position.Offset {
		// Every committed record between the old position and end is
		// this partition's own: the takeover fenced every other writer.
		p.position.Offset, p.position.At = end, start
	}
}

// recovered sets the position after a recovery read that began at start
// and reached target.
func (p *Partition) recovered(start time.Time, target int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.b.cfg.Mode != store.Transactional || p.posLost {
		return
	}
	p.position = store.Checkpoint{TopicID: p.link.Snapshots().ID, Offset: target, At: start}
	p.posValid = true
}

// Position implements store.Partition.
func (p *Partition) Position() (store.Checkpoint, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.position, p.posValid && !p.posLost
}

// bounded bounds one transaction, write or commit by the transaction
// timeout. franz-go retries a produce for as long as its context lives,
// so an unavailable partition leader would otherwise hold the partition's
// group commit, and the caller, silently and for good; the broker aborts a
// transaction that outlives the timeout anyway. The caller tears the
// partition down on the error and re-acquires it, whose new producer
// fences whatever the old one left open.
func (p *Partition) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, p.b.cfg.TransactionTimeout, errTimedOut)
}

// errTimedOut is the cause of a bounded context's deadline.
var errTimedOut = errors.New("timed out")

// timedOut names the timeout in err if ctx's deadline ended what (a
// transient failure: the caller retries with a new producer).
func (p *Partition) timedOut(ctx context.Context, what string, err error) error {
	if err == nil || context.Cause(ctx) != errTimedOut {
		return err
	}
	// err wraps context.DeadlineExceeded, which would read as the
	// caller's context ending: keep its text, not its chain.
	return fmt.Errorf("%s: %s: %s did not end within the transaction timeout (%v): is the partition's leader or the group coordinator unavailable? %w: %v",
		p.b.cfg.Name, p.input, what, p.b.cfg.TransactionTimeout, store.ErrTimedOut, err)
}

// Recover implements store.Partition: the shared read (I5, I6) over the
// link's reader of the snapshot partition, from the log start or, once
// the checkpoint is checked, from cp.
func (p *Partition) Recover(ctx context.Context, cp *store.Checkpoint) iter.Seq2[store.Snapshot, error] {
	if cp != nil {
		c := *cp // the read runs when iterated: a copy, which the caller cannot change meanwhile
		cp = &c
	}
	return p.read(ctx, cp)
}

// checkpointMargin is taken off delete.retention.ms for the clock skew
// between this process and the brokers whose cleaner removes tombstones.
func checkpointMargin(retention time.Duration) time.Duration {
	return max(retention/10, time.Minute)
}

// check says why cp is no base for a delta read of src (nil: it is one).
func (p *Partition) check(ctx context.Context, src readloop.Source, cp store.Checkpoint) error {
	if err := checkBase(ctx, p.b.cfg, p.snap, p.link.Snapshots(), src, cp); err != nil {
		return err
	}
	return p.checkAborted(ctx, cp)
}

// checkAborted refuses cp if a transaction straddling it was aborted: the
// copy behind cp took in the transaction's states when its commit was
// acknowledged, so they may be in the copy and not in the log. Kafka
// acknowledges a commit only once its markers are written, but a single
// broker that fails uncleanly can lose them; the transaction then hangs,
// and the abort that ends it drops states the copy holds. The check runs
// before the delta read and after it (a hanging transaction may be
// aborted while the read waits behind it).
func (p *Partition) checkAborted(ctx context.Context, cp store.Checkpoint) error {
	first, found, err := p.link.AbortedAcross(ctx, cp.Offset)
	if err != nil {
		return err
	}
	if found {
		return &store.CheckpointError{Snapshots: p.snap, Reason: store.CheckpointAbortedTransaction, Checkpoint: cp,
			Detail: fmt.Sprintf("a transaction from offset %d was aborted after the checkpoint: the copy may hold its states", first)}
	}
	return nil
}

// checkBase says why cp is no base for a delta read of snap through src
// (nil: it is one), with topic as the backend found it.
func checkBase(ctx context.Context, cfg Config, snap store.TopicPartition, topic SnapshotTopic, src readloop.Source, cp store.Checkpoint) error {
	refuse := func(reason, detail string) error {
		return &store.CheckpointError{Snapshots: snap, Reason: reason, Checkpoint: cp, Detail: detail}
	}
	if cfg.Mode != store.Transactional {
		return refuse(store.CheckpointPlain, "without transactions nothing fences another writer out of the snapshot partition")
	}
	return checkTopicBase(ctx, cfg, snap, topic, src, cp)
}

// checkTopicBase is checkBase without the mode: the checks that hold of
// a copy of any topic's partition (FollowTopic's too).
func checkTopicBase(ctx context.Context, cfg Config, snap store.TopicPartition, topic SnapshotTopic, src readloop.Source, cp store.Checkpoint) error {
	refuse := func(reason, detail string) error {
		return &store.CheckpointError{Snapshots: snap, Reason: reason, Checkpoint: cp, Detail: detail}
	}
	if topic.ID != cp.TopicID {
		return refuse(store.CheckpointTopicRecreated, fmt.Sprintf("the snapshot topic's id is %x, the checkpoint's %x", topic.ID, cp.TopicID))
	}
	if age, limit := cfg.Now().Sub(cp.At), topic.DeleteRetention-checkpointMargin(topic.DeleteRetention); age >= limit {
		return refuse(store.CheckpointTombstoneRetention, fmt.Sprintf("the checkpoint is %v old; delete.retention.ms is %v (less %v for clock skew): a tombstone written since may have been compacted away",
			age.Round(time.Second), topic.DeleteRetention, checkpointMargin(topic.DeleteRetention)))
	}
	start, err := src.LogStart(ctx)
	if err != nil {
		return err
	}
	// A compacted log starts at 0 unless records were deleted; one that
	// starts at the checkpoint lost every record below it (a reset
	// deletes up to the end), and the copy holds states of those: a
	// delta read would keep them.
	if start > cp.Offset || start == cp.Offset && start > 0 {
		return refuse(store.CheckpointBelowLogStart, fmt.Sprintf("the log starts at %d", start))
	}
	end, err := src.HighWatermark(ctx)
	if err != nil {
		return err
	}
	if end < cp.Offset {
		return refuse(store.CheckpointAboveLogEnd, fmt.Sprintf("the log ends at %d", end))
	}
	return nil
}

// read is the recovery read, from the log start or from cp.
func (p *Partition) read(ctx context.Context, cp *store.Checkpoint) iter.Seq2[store.Snapshot, error] {
	return func(yield func(store.Snapshot, error) bool) {
		from := int64(0)
		if cp != nil {
			from = cp.Offset
		}
		cfg := p.b.cfg
		start := cfg.Now()
		src, release, err := p.link.Source(ctx, from)
		if err != nil {
			yield(store.Snapshot{}, err)
			return
		}
		defer release()
		if cp != nil {
			if err := p.check(ctx, src, *cp); err != nil {
				yield(store.Snapshot{}, err)
				return
			}
		}
		rc := readloop.Config{Snapshots: p.snap, From: from, StallTimeout: cfg.RecoveryStallTimeout, Now: cfg.Now, Logger: cfg.Logger,
			Application: cfg.Application, Input: p.input}
		hooks := []func(store.RecoveryEvent){}
		if o, ok := cfg.Observer.(store.RecoveryObserver); ok {
			hooks = append(hooks, o.OnRecovery)
		}
		if p.progress != nil {
			hooks = append(hooks, p.progress)
		}
		target := int64(-1)
		rc.Progress = func(e store.RecoveryEvent) {
			if e.Done && e.Err == nil {
				target = e.Target
			}
			for _, h := range hooks {
				h(e)
			}
		}
		for s, err := range readloop.Read(ctx, rc, src) {
			if !yield(s, err) {
				return
			}
		}
		if target < 0 {
			return
		}
		if cp != nil {
			if err := p.checkAborted(ctx, *cp); err != nil {
				yield(store.Snapshot{}, err)
				return
			}
		}
		p.recovered(start, target)
	}
}
