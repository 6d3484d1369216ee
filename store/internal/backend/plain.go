package backend

import (
	"context"
	"fmt"
	"sync"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/internal/groupcommit"
	"github.com/snapfence/snapfence/store/wire"
)

// plainPath is the baseline write path of every backend: writes go
// straight to the link's non-transactional producer, which batches across
// writes (and, in store/kafka, across partitions), and the offset is a
// plain group commit with no binding to the writes. Nothing queues here:
// this is the non-transactional producer the spec measures against and
// the one that reproduces kafka-flow#732.
type plainPath struct {
	p *Partition
	// inflight is held shared by every batch in flight and exclusively by
	// a commit, so an offset commit follows the writes issued before it
	// (I2 holds in Plain mode too; it is the fence that is missing).
	inflight sync.RWMutex

	mu        sync.Mutex
	staged    int64
	committed int64
	closed    bool
	// failed: a write failed or was refused; StartCommit refuses from
	// then on (store.ErrEarlierWriteFailed).
	failed bool
}

func newPlainPath(p *Partition, assigned int64) *plainPath {
	return &plainPath{p: p, staged: assigned, committed: assigned}
}

// Pending is 0: Plain writes go straight to the producer.
func (w *plainPath) Pending() int { return 0 }

// WriteBatch produces every snapshot, in order, then awaits them all: the
// producer keeps the order of one partition's records, so they land in
// the log in the order given. The in-flight lock is held shared across
// the whole batch, so a Commit issued after WriteBatch was called follows
// every write of the batch (I2). Each write is observed as a transaction
// of its own (there is none), once all have landed.
func (w *plainPath) WriteBatch(ctx context.Context, snaps []store.Snapshot) []error {
	p, cfg := w.p, w.p.b.cfg
	errs := make([]error, len(snaps))
	w.inflight.RLock()
	defer w.inflight.RUnlock()
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	start := cfg.Now()
	var recs []wire.Record
	var at []int // recs[k] is snaps[at[k]]
	for i, s := range snaps {
		if err := wire.CheckWrite(p.input, s, cfg.MaxValueBytes); err != nil {
			errs[i] = err
			continue
		}
		if closed {
			errs[i] = store.ErrClosed
			continue
		}
		recs = append(recs, wire.EncodeSnapshot(cfg.Application, s))
		at = append(at, i)
	}
	if len(recs) == 0 {
		if len(snaps) > 0 {
			w.mu.Lock()
			w.failed = true
			w.mu.Unlock()
		}
		return errs
	}
	bctx, cancel := p.bounded(ctx)
	for k, err := range p.link.Produce(bctx, recs) {
		if err != nil {
			errs[at[k]] = p.timedOut(bctx, "the write", fmt.Errorf("%s: %s: write: %w", cfg.Name, p.input, err))
		}
	}
	cancel()
	for _, err := range errs {
		if err != nil {
			w.mu.Lock()
			w.failed = true
			w.mu.Unlock()
			break
		}
	}
	dur, committed := cfg.Now().Sub(start), w.Committed()
	for _, i := range at {
		w.observe(store.TransactionEvent{Input: p.input, Writes: []store.Snapshot{snaps[i]}, Offset: committed, Err: errs[i], Duration: dur})
	}
	return errs
}

// StartWriteBatch is WriteBatch, done before it returns: the baseline
// has no queue to leave the writes in.
func (w *plainPath) StartWriteBatch(ctx context.Context, snaps []store.Snapshot) *groupcommit.Pending {
	return groupcommit.Ready(w.WriteBatch(ctx, snaps))
}

// StartCommit is Commit, done before it returns, and refused once a
// write failed (store.Partition.StartCommit).
func (w *plainPath) StartCommit(ctx context.Context, offset int64) *groupcommit.Pending {
	w.mu.Lock()
	failed := w.failed
	w.mu.Unlock()
	if failed {
		return groupcommit.Ready([]error{store.ErrEarlierWriteFailed})
	}
	return groupcommit.Ready([]error{w.Commit(ctx, offset)})
}

func (w *plainPath) Committed() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.committed
}

// Commit stages offset (the staged offset never moves back) and commits
// the staged offset through the group, once the writes in flight have
// landed.
func (w *plainPath) Commit(ctx context.Context, offset int64) error {
	p, cfg := w.p, w.p.b.cfg
	w.inflight.Lock()
	defer w.inflight.Unlock()
	w.mu.Lock()
	w.staged = max(w.staged, offset)
	offset, closed := w.staged, w.closed
	w.mu.Unlock()
	if closed {
		return store.ErrClosed
	}
	start := cfg.Now()
	id := p.identity.CurrentIdentity()
	var err error
	if !id.Valid() {
		err = &store.MissingIdentityError{Input: p.input, Identity: id}
	} else {
		bctx, cancel := p.bounded(ctx)
		err = p.timedOut(bctx, "the offset commit", p.link.CommitOffset(bctx, id, offset))
		cancel()
	}
	if err == nil {
		w.mu.Lock()
		w.committed = max(w.committed, offset)
		w.mu.Unlock()
	}
	w.observe(store.TransactionEvent{Input: p.input, Offset: offset, OffsetAdvanced: true, Identity: id, Err: err,
		Duration: cfg.Now().Sub(start)})
	return err
}

func (w *plainPath) observe(e store.TransactionEvent) {
	if o := w.p.b.cfg.Observer; o != nil {
		o.OnTransaction(e)
	}
}

// Close refuses new writes and waits for those in flight.
func (w *plainPath) Close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.inflight.Lock()
	defer w.inflight.Unlock()
}
