// Package groupcommit is the write path every backend shares: writes of a
// partition are queued, and the first writer to take the partition's
// transaction drains what is queued into one transaction, up to the caps
// (a count of writes and their bytes), and delivers the outcome to every
// waiter. There is no batching delay: a lone write commits at once; a
// batch is whatever queued during the previous transaction's flight.
package groupcommit

import (
	"context"
	"sync"
	"time"

	"github.com/snapfence/snapfence/store"
)

// Batch is the work of one transaction.
type Batch struct {
	// Writes are the queued snapshots, within the caps (I8): at most
	// MaxWrites of them, of at most MaxBytes (store.SnapshotBytes) in all,
	// except that a single write larger than MaxBytes goes alone.
	Writes []store.Snapshot
	// Offset is the input offset the transaction must commit: the offset
	// this batch advances to, or else the current committed offset, so that
	// every write is gated (I1).
	Offset int64
	// Advances is true when the batch carries at least one Commit request.
	Advances bool
	// Outputs are an exactly-once batch's output records. A sealed batch
	// (CommitBatch) runs alone in its transaction; Outputs is empty for
	// any other.
	Outputs []store.Output
}

// Executor runs one transaction: all of b becomes durable, or none. It
// returns the identity it committed with, for observers.
type Executor func(ctx context.Context, b Batch) (store.GroupIdentity, error)

// Config configures a Committer.
type Config struct {
	Input store.TopicPartition
	// SnapshotTopic is where snapshots go: outputs may not.
	SnapshotTopic string
	// AssignedOffset seeds the staged and committed offsets (I3).
	AssignedOffset int64
	// MaxWrites caps the writes per transaction; 0 means the default.
	MaxWrites int
	// MaxBytes caps the bytes (store.SnapshotBytes) of the writes per
	// transaction; 0 means store.DefaultMaxBytesPerTransaction. A write
	// larger than the cap is not refused: it goes in a transaction of
	// its own.
	MaxBytes int
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
	size   int             // store.SnapshotBytes(*write)
	sealed *store.Batch    // an exactly-once batch: a transaction of its own
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
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = store.DefaultMaxBytesPerTransaction
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Committer{cfg: cfg, exec: exec, life: life, staged: cfg.AssignedOffset, committed: cfg.AssignedOffset}
}

// CommitBatch queues b as a transaction of its own (behind what is
// queued before it) and waits until it ends; see
// store.Partition.CommitBatch. A committed batch makes b.Offset the
// committed offset, and the staged one if it was lower.
func (c *Committer) CommitBatch(ctx context.Context, b store.Batch) error {
	for _, s := range b.Snapshots {
		if err := store.CheckWrite(c.cfg.Input, s, c.cfg.MaxValueBytes); err != nil {
			return err
		}
	}
	for _, o := range b.Outputs {
		if err := store.CheckOutput(c.cfg.Input, c.cfg.SnapshotTopic, o, c.cfg.MaxValueBytes); err != nil {
			return err
		}
	}
	e := newEntry(nil, b.Offset)
	e.sealed = &b
	err := c.submit(ctx, []*entry{e})[0]
	if err == nil {
		c.mu.Lock()
		c.staged = max(c.staged, b.Offset)
		c.mu.Unlock()
	}
	return err
}

// Commit stages offset, if it is above the staged one, then queues a
// commit of the staged offset and waits until it is committed. The staged
// offset never moves back, so a lower offset commits the staged one again.
// Queued behind earlier writes, it never leads them (I2).
func (c *Committer) Commit(ctx context.Context, offset int64) error {
	c.mu.Lock()
	c.staged = max(c.staged, offset)
	off := c.staged
	c.mu.Unlock()
	return c.submit(ctx, []*entry{newEntry(nil, off)})[0]
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

// WriteBatch queues snaps in order under one acquisition of the lock, so
// no other write or commit lands between them, and waits until each has an
// outcome; errs[i] is snaps[i]'s. A snapshot that fails store.CheckWrite
// gets that error and is not queued. If no transaction is running, the
// first queued entry takes it.
//
// The batch keeps the queue's invariant that the transaction is only ever
// handed to the head of the queue: its entries are queued in order and
// taken in order, so while the caller waits for one of them, a later one
// cannot be at the head before the earlier one is in a transaction, whose
// leader hands the transaction on only when it ends. Waiting for each entry
// in turn, and leading when it is handed the transaction, therefore never
// strands a hand-off. Writes of one caller are thus batched the same way
// on every run: the first takes the transaction and drains the queue in
// FIFO order up to the caps (I8), exactly as concurrent Writes queued in
// that order would be.
func (c *Committer) WriteBatch(ctx context.Context, snaps []store.Snapshot) []error {
	errs := make([]error, len(snaps))
	es := make([]*entry, 0, len(snaps))
	at := make([]int, 0, len(snaps)) // es[k] is snaps[at[k]]
	for i, s := range snaps {
		if err := store.CheckWrite(c.cfg.Input, s, c.cfg.MaxValueBytes); err != nil {
			errs[i] = err
			continue
		}
		e := newEntry(&s, 0)
		e.size = store.SnapshotBytes(s)
		es = append(es, e)
		at = append(at, i)
	}
	if len(es) == 0 {
		return errs
	}
	for k, err := range c.submit(ctx, es) {
		errs[at[k]] = err
	}
	return errs
}

// newEntry is a write of *write, or, with write nil, a commit request of
// the staged offset.
func newEntry(write *store.Snapshot, offset int64) *entry {
	return &entry{write: write, offset: offset, lead: make(chan struct{}, 1), done: make(chan struct{})}
}

// submit queues es in order, giving the transaction to the first if none is
// running, and waits for the outcome of each in turn.
func (c *Committer) submit(ctx context.Context, es []*entry) []error {
	errs := make([]error, len(es))
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		for i := range errs {
			errs[i] = store.ErrClosed
		}
		return errs
	}
	c.queue = append(c.queue, es...)
	if !c.running {
		c.running = true
		es[0].lead <- struct{}{}
	}
	c.mu.Unlock()

	for i, e := range es {
	wait:
		for {
			select {
			case <-e.done:
				errs[i] = e.err
				break wait
			case <-e.lead:
				c.lead()
			case <-ctx.Done():
				c.withdraw(ctx.Err(), es[i:], errs[i:])
				return errs
			}
		}
	}
	return errs
}

// withdraw gives up waiting for es after the caller's context ended: an
// entry with an outcome keeps it; one in a transaction in flight gets err,
// as its outcome is unknown to the caller, who must treat the write as not
// durable; one still queued leaves the queue and gets err, and if it was
// handed the transaction, the transaction passes to the new head of the
// queue.
func (c *Committer) withdraw(err error, es []*entry, errs []error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	handOff := false
	for i, e := range es {
		select {
		case <-e.done: // an outcome, possibly set while we waited for the lock
			errs[i] = e.err
			continue
		default:
		}
		errs[i] = err
		if e.taken {
			continue
		}
		c.remove(e)
		select {
		case <-e.lead:
			handOff = true
		default:
		}
	}
	if handOff {
		c.handOff()
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
			Input: c.cfg.Input, Writes: batch.Writes, Outputs: batch.Outputs, Offset: batch.Offset, OffsetAdvanced: batch.Advances,
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

// take removes the next batch from the queue: FIFO, writes up to the caps
// (MaxWrites writes, MaxBytes bytes; the first write is taken whatever its
// size, so one larger than MaxBytes goes alone), commit requests free of
// the caps but never ahead of a write queued before them. What it takes
// depends only on the queue, never on a clock. Called with c.mu held.
func (c *Committer) take() (Batch, []*entry) {
	b := Batch{Offset: c.committed}
	n, nbytes := 0, 0
	for n < len(c.queue) {
		e := c.queue[n]
		if e.sealed != nil {
			if n > 0 {
				break // a sealed batch is a transaction of its own
			}
			s := e.sealed
			b = Batch{Writes: s.Snapshots, Outputs: s.Outputs, Offset: max(s.Offset, c.committed), Advances: true}
			e.taken = true
			n++
			break
		}
		if e.write != nil {
			if len(b.Writes) == c.cfg.MaxWrites || len(b.Writes) > 0 && nbytes+e.size > c.cfg.MaxBytes {
				break
			}
			b.Writes = append(b.Writes, *e.write)
			nbytes += e.size
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
