// Package groupcommit is the write path every backend shares: writes of a
// partition are queued, and the first writer to take the partition's
// transaction drains what is queued into one transaction, up to a cap, and
// delivers the outcome to every waiter. There is no batching delay: a lone
// write commits at once; a batch is whatever queued during the previous
// transaction's flight.
package groupcommit

import (
	"context"
	"sync"
	"time"

	"github.com/snapfence/snapfence/store"
)

// Batch is the work of one transaction.
type Batch struct {
	// Writes are the queued snapshots, at most the cap (I8).
	Writes []store.Snapshot
	// Offset is the input offset the transaction must commit: the offset
	// this batch advances to, or else the current committed offset, so that
	// every write is gated (I1).
	Offset int64
	// Advances is true when the batch carries at least one Commit request.
	Advances bool
}

// Executor runs one transaction: all of b becomes durable, or none. It
// returns the identity it committed with, for observers.
type Executor func(ctx context.Context, b Batch) (store.GroupIdentity, error)

// Config configures a Committer.
type Config struct {
	Input store.TopicPartition
	// AssignedOffset seeds the staged and committed offsets (I3).
	AssignedOffset int64
	// MaxWrites caps the writes per transaction; 0 means the default.
	MaxWrites int
	// MaxValueBytes bounds key plus value; 0 means the default.
	MaxValueBytes int
	// Now reads the backend's clock, for observer durations.
	Now      func() time.Time
	Observer store.Observer
}

// Committer group-commits one partition's writes and offset commits.
type Committer struct {
	cfg  Config
	exec Executor
	life context.Context

	mu        sync.Mutex
	queue     []*entry
	running   bool // a leader holds the transaction, or leadership is handed to queue[0]
	closed    bool
	staged    int64
	committed int64
	inflight  sync.WaitGroup
}

type entry struct {
	write  *store.Snapshot // nil for a commit request
	offset int64           // the staged offset, for a commit request
	lead   chan struct{}   // buffered: leadership handed to this entry
	done   chan struct{}   // closed when the outcome is set
	err    error
	taken  bool // in a transaction; no longer cancellable
}

// New returns a Committer whose transactions run exec with life as their
// context: a transaction is not cut short by one waiter giving up.
func New(life context.Context, cfg Config, exec Executor) *Committer {
	if cfg.MaxWrites <= 0 {
		cfg.MaxWrites = store.DefaultMaxWritesPerTransaction
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Committer{cfg: cfg, exec: exec, life: life, staged: cfg.AssignedOffset, committed: cfg.AssignedOffset}
}

// Write queues s and waits until its transaction ends.
func (c *Committer) Write(ctx context.Context, s store.Snapshot) error {
	if err := store.CheckWrite(c.cfg.Input, s, c.cfg.MaxValueBytes); err != nil {
		return err
	}
	return c.submit(ctx, &entry{write: &s})
}

// SetCommittable stages offset if it is above the staged one.
func (c *Committer) SetCommittable(offset int64) {
	c.mu.Lock()
	if offset > c.staged {
		c.staged = offset
	}
	c.mu.Unlock()
}

// Commit queues a commit of the staged offset and waits until it is
// committed. Queued behind earlier writes, it never leads them (I2).
func (c *Committer) Commit(ctx context.Context) error {
	c.mu.Lock()
	off := c.staged
	c.mu.Unlock()
	return c.submit(ctx, &entry{offset: off})
}

// Committed is the offset last committed.
func (c *Committer) Committed() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.committed
}

// Pending is the number of writes and commits queued, not counting those
// in the transaction in flight.
func (c *Committer) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// Close fails queued entries with store.ErrClosed and waits for the
// transaction in flight, if any, to end.
func (c *Committer) Close() {
	c.mu.Lock()
	c.closed = true
	q := c.queue
	c.queue = nil
	c.mu.Unlock()
	for _, e := range q {
		e.err = store.ErrClosed
		close(e.done)
	}
	c.inflight.Wait()
}

func (c *Committer) submit(ctx context.Context, e *entry) error {
	e.lead = make(chan struct{}, 1)
	e.done = make(chan struct{})
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return store.ErrClosed
	}
	c.queue = append(c.queue, e)
	if !c.running {
		c.running = true
		e.lead <- struct{}{}
	}
	c.mu.Unlock()

	for {
		select {
		case <-e.done:
			return e.err
		case <-e.lead:
			c.lead()
		case <-ctx.Done():
			c.mu.Lock()
			if e.taken {
				c.mu.Unlock()
				// The transaction is in flight; its outcome is unknown to
				// this caller, who must treat the write as not durable.
				return ctx.Err()
			}
			select {
			case <-e.done: // closed while we waited for the lock
				c.mu.Unlock()
				return e.err
			default:
			}
			c.remove(e)
			select {
			case <-e.lead:
				c.handOff()
			default:
			}
			c.mu.Unlock()
			return ctx.Err()
		}
	}
}

// lead runs one transaction with what is queued, delivers its outcome,
// and hands the transaction to the next queued entry.
func (c *Committer) lead() {
	c.mu.Lock()
	if c.closed || len(c.queue) == 0 {
		c.running = false
		c.mu.Unlock()
		return
	}
	batch, entries := c.take()
	c.inflight.Add(1)
	c.mu.Unlock()

	start := c.cfg.Now()
	id, err := c.exec(c.life, batch)
	dur := c.cfg.Now().Sub(start)

	// The observer hears of the transaction before the next one can
	// start: its calls are serial and in commit order.
	if o := c.cfg.Observer; o != nil {
		o.OnTransaction(store.TransactionEvent{
			Input: c.cfg.Input, Writes: batch.Writes, Offset: batch.Offset, OffsetAdvanced: batch.Advances,
			Identity: id, Err: err, Duration: dur,
		})
	}
	c.mu.Lock()
	if err == nil && batch.Advances && batch.Offset > c.committed {
		c.committed = batch.Offset
	}
	c.handOff()
	c.mu.Unlock()
	c.inflight.Done()

	for _, e := range entries {
		e.err = err
		close(e.done)
	}
}

// take removes the next batch from the queue: FIFO, writes up to the cap,
// commit requests free of the cap but never ahead of a write queued before
// them. Called with c.mu held.
func (c *Committer) take() (Batch, []*entry) {
	b := Batch{Offset: c.committed}
	n := 0
	for n < len(c.queue) {
		e := c.queue[n]
		if e.write != nil {
			if len(b.Writes) == c.cfg.MaxWrites {
				break
			}
			b.Writes = append(b.Writes, *e.write)
		} else {
			b.Advances = true
			if e.offset > b.Offset {
				b.Offset = e.offset
			}
		}
		e.taken = true
		n++
	}
	entries := make([]*entry, n)
	copy(entries, c.queue[:n])
	c.queue = append(c.queue[:0], c.queue[n:]...)
	return b, entries
}

// handOff gives the transaction to the head of the queue, or frees it.
// Called with c.mu held.
func (c *Committer) handOff() {
	if len(c.queue) > 0 && !c.closed {
		c.queue[0].lead <- struct{}{}
		return
	}
	c.running = false
}

func (c *Committer) remove(e *entry) {
	for i, q := range c.queue {
		if q == e {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			return
		}
	}
}
