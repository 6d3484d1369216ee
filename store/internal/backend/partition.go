package backend

import (
	"context"
	"errors"
	"fmt"
	"iter"

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
}

var _ store.Partition = (*Partition)(nil)

// writePath is what a partition writes and commits through.
type writePath interface {
	WriteBatch(ctx context.Context, snaps []store.Snapshot) []error
	Commit(ctx context.Context, offset int64) error
	Committed() int64
	Pending() int
	Close()
}

// Input implements store.Partition.
func (p *Partition) Input() store.TopicPartition { return p.input }

// WriteBatch implements store.Partition: in Transactional mode the writes
// join the group commit's queue in order, in one step; in Plain mode they
// are produced in order and awaited together.
func (p *Partition) WriteBatch(ctx context.Context, snaps []store.Snapshot) []error {
	return p.w.WriteBatch(ctx, snaps)
}

// Commit implements store.Partition.
func (p *Partition) Commit(ctx context.Context, offset int64) error { return p.w.Commit(ctx, offset) }

// CommittedOffset implements store.Partition.
func (p *Partition) CommittedOffset() int64 { return p.w.Committed() }

// CommitBatch implements store.Partition (Transactional mode only).
func (p *Partition) CommitBatch(ctx context.Context, b store.Batch) error {
	gc, ok := p.w.(*groupcommit.Committer)
	if !ok {
		return fmt.Errorf("%s: %s: exactly-once batches need Transactional mode (this backend is %v): %w",
			p.b.cfg.Name, p.input, p.b.cfg.Mode, store.ErrNotTransactional)
	}
	return gc.CommitBatch(ctx, b)
}

// Pending is the number of writes and commits queued behind the
// transaction in flight (always 0 in Plain mode, where nothing queues).
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
	return id, p.timedOut(ctx, "the transaction", p.link.Transact(ctx, batch, id))
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
// link's reader of the snapshot partition.
func (p *Partition) Recover(ctx context.Context) iter.Seq2[store.Snapshot, error] {
	return func(yield func(store.Snapshot, error) bool) {
		src, release, err := p.link.Source(ctx)
		if err != nil {
			yield(store.Snapshot{}, err)
			return
		}
		defer release()
		cfg := p.b.cfg
		rc := readloop.Config{Snapshots: p.snap, StallTimeout: cfg.RecoveryStallTimeout, Now: cfg.Now, Logger: cfg.Logger}
		rc.Progress = p.progress
		if o, ok := cfg.Observer.(store.RecoveryObserver); ok {
			rc.Progress = o.OnRecovery
			if hook := p.progress; hook != nil {
				rc.Progress = func(e store.RecoveryEvent) { o.OnRecovery(e); hook(e) }
			}
		}
		for s, err := range readloop.Read(ctx, rc, src) {
			if !yield(s, err) {
				return
			}
		}
	}
}
