// Package groupcommit is the write path every backend shares: writes of a
// partition are queued, and the first writer to take the partition's
// transaction drains what is queued into one transaction, up to the caps
// (a count of writes and their bytes), and delivers the outcome to every
// waiter. There is no batching delay: a lone write commits at once; a
// batch is whatever queued during the previous transaction's flight.
package groupcommit

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// Batch is the work of one transaction.
type Batch struct {
	// Writes are the queued snapshots, within the caps (I8): at most
	// MaxWrites of them, of at most MaxBytes (wire.SnapshotBytes) in all,
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
	// Outputs are the topics a batch's outputs may go to
	// (store.Acquisition.Outputs); an output for another topic is
	// refused with a *store.UndeclaredOutputError.
	Outputs []string
	// AssignedOffset seeds the staged and committed offsets (I3).
	AssignedOffset int64
	// HeaderBytes is what every write's record carries beyond
	// wire.SnapshotBytes: the application's header
	// (wire.ApplicationHeaderBytes).
	HeaderBytes int
	// MaxWrites caps the writes per transaction; 0 means the default.
	MaxWrites int
	// MaxBytes caps the bytes (wire.SnapshotBytes) of the writes per
	// transaction; 0 means store.DefaultMaxBytesPerTransaction. A write
	// larger than the cap is not refused: it goes in a transaction of
	// its own.
	MaxBytes int
	// MaxValueBytes bounds key plus value; 0 means the default.
	MaxValueBytes int
	// Now reads the backend's clock, for observer durations.
	Now      func() time.Time
	Observer store.Observer
	// Position reads the partition's position (store.Partition.Position)
	// after each transaction, before its outcome is delivered: a Pending
	// carries the one of its last entry. nil: none.
	Position func() (store.Checkpoint, bool)
	// Inline makes a Start call wait for its outcome before it returns:
	// a backend whose calls complete in the caller (the simulated
	// cluster) keeps its runs a function of its calls. Otherwise a
	// goroutine waits, and leads when handed the transaction.
	Inline bool
	// Defer, if set, is where a call's waiting runs instead: Defer(run)
	// arranges for run to be called later, on a goroutine and at a time
	// the backend controls (the simulated cluster's clock), after every
	// run it took before, and returns hurry, which runs run now, in the
	// caller, with every run taken before it first, unless it ran. A
	// Pending's Wait hurries it; a call that waits (WriteBatch, Commit,
	// CommitBatch) is taken and hurried at once. It models writes in
	// flight while the caller goes on, deterministically.
	Defer func(run func()) (hurry func())
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
	// calls numbers the calls that queue entries; firstFailed is the
	// number of the first one with an entry that failed, was refused or
	// left the queue (0: none). A dependent commit (StartCommit) of a
	// later call is refused once it reaches a transaction: every entry
	// of an earlier call is taken before it or with it, so by then their
	// failures are known, or shared.
	calls       uint64
	firstFailed uint64
}

type entry struct {
	write  *store.Snapshot // nil for a commit request
	size   int             // wire.SnapshotBytes(*write)
	sealed *store.Batch    // an exactly-once batch: a transaction of its own
	offset int64           // the staged offset, for a commit request
	lead   chan struct{}   // buffered: leadership handed to this entry
	done   chan struct{}   // closed when the outcome is set
	err    error
	taken  bool // in a transaction; no longer cancellable
	// call is the number of the call that queued the entry; dependent:
	// a commit request refused if an earlier call failed (StartCommit).
	call      uint64
	dependent bool
	// pos is the position read after the entry's transaction (posOK:
	// there was one), set with err.
	pos   store.Checkpoint
	posOK bool
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
	return c.startCommitBatch(ctx, b, true).errs[0]
}

// StartCommitBatch is CommitBatch without the wait: b is queued before it
// returns, and the outcome is the Pending's one entry.
func (c *Committer) StartCommitBatch(ctx context.Context, b store.Batch) *Pending {
	return c.startCommitBatch(ctx, b, c.cfg.Inline)
}

func (c *Committer) startCommitBatch(ctx context.Context, b store.Batch, inline bool) *Pending {
	refuse := func(err error) *Pending { return Ready([]error{err}) }
	for _, s := range b.Snapshots {
		if err := wire.CheckWrite(c.cfg.Input, s, c.cfg.MaxValueBytes); err != nil {
			return refuse(err)
		}
	}
	for _, o := range b.Outputs {
		if err := wire.CheckOutput(c.cfg.Input, c.cfg.SnapshotTopic, o, c.cfg.MaxValueBytes); err != nil {
			return refuse(err)
		}
		if !slices.Contains(c.cfg.Outputs, o.Topic) {
			return refuse(&store.UndeclaredOutputError{Input: c.cfg.Input, Topic: o.Topic, Key: o.Key, Declared: c.cfg.Outputs})
		}
	}
	e := newEntry(nil, b.Offset)
	e.sealed = &b
	return c.start(ctx, []*entry{e}, make([]error, 1), nil, inline)
}

// Commit stages offset, if it is above the staged one, then queues a
// commit of the staged offset and waits until it is committed. The staged
// offset never moves back, so a lower offset commits the staged one again.
// Queued behind earlier writes, it never leads them (I2).
func (c *Committer) Commit(ctx context.Context, offset int64) error {
	return c.startCommit(ctx, offset, true, false).errs[0]
}

// StartCommit is Commit without the wait: the commit request is queued
// before it returns, and the outcome is the Pending's one entry.
//
// Unlike Commit, it depends on the writes queued before it: it is refused
// with store.ErrEarlierWriteFailed, and commits nothing, if a call that
// queued writes before it had one fail, refused or withdrawn.
func (c *Committer) StartCommit(ctx context.Context, offset int64) *Pending {
	return c.startCommit(ctx, offset, c.cfg.Inline, true)
}

func (c *Committer) startCommit(ctx context.Context, offset int64, inline, dependent bool) *Pending {
	c.mu.Lock()
	c.staged = max(c.staged, offset)
	off := c.staged
	c.mu.Unlock()
	e := newEntry(nil, off)
	e.dependent = dependent
	return c.start(ctx, []*entry{e}, make([]error, 1), nil, inline)
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
// outcome; errs[i] is snaps[i]'s. A snapshot that fails wire.CheckWrite
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
	return c.startWriteBatch(ctx, snaps, true).errs
}

// StartWriteBatch is WriteBatch without the wait: the writes are queued,
// in order and in one step, before it returns; the outcomes come with the
// Pending, errs[i] snaps[i]'s.
func (c *Committer) StartWriteBatch(ctx context.Context, snaps []store.Snapshot) *Pending {
	return c.startWriteBatch(ctx, snaps, c.cfg.Inline)
}

func (c *Committer) startWriteBatch(ctx context.Context, snaps []store.Snapshot, inline bool) *Pending {
	errs := make([]error, len(snaps))
	es := make([]*entry, 0, len(snaps))
	at := make([]int, 0, len(snaps)) // es[k] is snaps[at[k]]
	for i, s := range snaps {
		if err := wire.CheckWrite(c.cfg.Input, s, c.cfg.MaxValueBytes); err != nil {
			errs[i] = err
			continue
		}
		e := newEntry(&s, 0)
		e.size = wire.SnapshotBytes(s) + c.cfg.HeaderBytes
		es = append(es, e)
		at = append(at, i)
	}
	if len(es) < len(snaps) {
		// A refused write fails the started commits that follow.
		c.mu.Lock()
		c.calls++
		c.failedLocked(c.calls)
		c.mu.Unlock()
	}
	if len(es) == 0 {
		return Ready(errs)
	}
	return c.start(ctx, es, errs, at, inline)
}

// failedLocked notes that call had an entry fail. Called with c.mu held.
func (c *Committer) failedLocked(call uint64) {
	if c.firstFailed == 0 || call < c.firstFailed {
		c.firstFailed = call
	}
}

// Pending is the outcome of what a Start call queued: a
// store.Pending.
type Pending struct {
	hurry func()        // Config.Defer's: runs the wait now (nil: none)
	done  chan struct{} // closed once errs, pos and posOK are set
	errs  []error
	pos   store.Checkpoint
	posOK bool
}

// Ready is a Pending whose outcome is errs already, with no position
// (nothing was queued).
func Ready(errs []error) *Pending {
	p := &Pending{done: make(chan struct{}), errs: errs}
	close(p.done)
	return p
}

// Done is closed once the outcome is known.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Wait returns the outcomes once they are known, or, if ctx ends first,
// ctx's error for each (what was queued goes on, its outcome unknown to
// the caller, who must treat it as not durable).
func (p *Pending) Wait(ctx context.Context) []error {
	select {
	case <-p.done:
		return p.errs
	default:
	}
	if p.hurry != nil {
		p.hurry()
	}
	select {
	case <-p.done:
		return p.errs
	case <-ctx.Done():
		errs := make([]error, len(p.errs))
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	}
}

// Position is the partition's position read after the transaction of
// the Pending's last queued entry (ok false: none ended, one failed, or
// the partition has none). Valid once Done is closed.
func (p *Pending) Position() (store.Checkpoint, bool) { return p.pos, p.posOK }

// start queues es (errs[at[k]] is es[k]'s outcome; at nil: errs[k]) and
// returns their Pending. The caller waits for their outcomes, and leads
// when handed the transaction, if inline; a goroutine does otherwise.
// Either way ctx bounds the wait: when it ends, what is still queued
// leaves the queue (withdraw).
func (c *Committer) start(ctx context.Context, es []*entry, errs []error, at []int, inline bool) *Pending {
	p := &Pending{done: make(chan struct{}), errs: errs}
	queued := false
	wait := func() {
		outs := make([]error, len(es))
		if queued {
			c.await(ctx, es, outs)
		} else {
			for k := range outs {
				outs[k] = store.ErrClosed
			}
		}
		for k, err := range outs {
			if at != nil {
				errs[at[k]] = err
			} else {
				errs[k] = err
			}
		}
		if last := es[len(es)-1]; queued && outs[len(es)-1] == nil {
			// Its outcome was seen set (done closed), so its position
			// was set before.
			p.pos, p.posOK = last.pos, last.posOK
		}
		close(p.done)
	}
	// Under Defer the wait is taken in queue order: a deferred wait run
	// before one queued ahead of it would wait for a lead that never
	// comes.
	c.enqueue(es, func() {
		queued = true // before Defer: another goroutine may run wait at once
		if c.cfg.Defer != nil {
			p.hurry = c.cfg.Defer(wait)
		}
	})
	switch {
	case queued && p.hurry != nil:
		if inline {
			// Another goroutine may be running it: wait for the end.
			p.hurry()
			<-p.done
		}
	case inline || !queued:
		wait()
	default:
		go wait()
	}
	return p
}

// newEntry is a write of *write, or, with write nil, a commit request of
// the staged offset.
func newEntry(write *store.Snapshot, offset int64) *entry {
	return &entry{write: write, offset: offset, lead: make(chan struct{}, 1), done: make(chan struct{})}
}

// enqueue queues es in order, giving the transaction to the first if none
// is running, and calls queued under the lock; false if the committer is
// closed (nothing is queued).
func (c *Committer) enqueue(es []*entry, queued func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	queued()
	c.calls++
	for _, e := range es {
		e.call = c.calls
	}
	c.queue = append(c.queue, es...)
	if !c.running {
		c.running = true
		es[0].lead <- struct{}{}
	}
	return true
}

// await waits for the outcome of each of es in turn, into errs, leading
// when handed the transaction.
func (c *Committer) await(ctx context.Context, es []*entry, errs []error) {
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
				return
			}
		}
	}
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
		if e.write != nil || e.sealed != nil {
			c.failedLocked(e.call) // it will not land
		}
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
	if len(entries) == 0 { // every entry taken was refused
		c.handOff()
		c.mu.Unlock()
		return
	}
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
	var pos store.Checkpoint
	posOK := false
	if c.cfg.Position != nil {
		pos, posOK = c.cfg.Position()
	}
	c.mu.Lock()
	if err != nil {
		for _, e := range entries {
			c.failedLocked(e.call)
		}
	}
	if err == nil && batch.Advances && batch.Offset > c.committed {
		c.committed = batch.Offset
	}
	if err == nil && len(entries) == 1 && entries[0].sealed != nil {
		c.staged = max(c.staged, entries[0].sealed.Offset)
	}
	c.handOff()
	c.mu.Unlock()
	c.inflight.Done()

	for _, e := range entries {
		e.err, e.pos, e.posOK = err, pos, posOK && err == nil
		close(e.done)
	}
}

// take removes the next batch from the queue: FIFO, writes up to the caps
// (MaxWrites writes, MaxBytes bytes; the first write is taken whatever its
// size, so one larger than MaxBytes goes alone), commit requests free of
// the caps but never ahead of a write queued before them, and the batch
// ends at the first write queued after a commit request. A dependent
// commit request of a call after one that failed is refused on the way:
// removed, with store.ErrEarlierWriteFailed as its outcome. What it takes
// depends only on the queue, never on a clock. Called with c.mu held.
func (c *Committer) take() (Batch, []*entry) {
	b := Batch{Offset: c.committed}
	n, nbytes := 0, 0
	var refused []*entry
	for n < len(c.queue) {
		e := c.queue[n]
		if e.dependent && c.firstFailed != 0 && c.firstFailed < e.call {
			refused = append(refused, e)
			n++
			continue
		}
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
			if b.Advances {
				// A write started after a commit request never rides in
				// its transaction: the commit's Pending carries the
				// position as of its own end, and a cache checkpointed
				// there must not vouch for a write it has not been told
				// of yet.
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
	entries := make([]*entry, 0, n-len(refused))
	for _, e := range c.queue[:n] {
		if !slices.Contains(refused, e) {
			entries = append(entries, e)
		}
	}
	c.queue = append(c.queue[:0], c.queue[n:]...)
	for _, e := range refused {
		e.err = store.ErrEarlierWriteFailed
		close(e.done)
	}
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
