package storetest

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"testing"
	"time"

	"github.com/snapfence/snapfence/store"
)

// identity is a published group identity, as the engine publishes it after
// every poll. A held identity blocks the transaction that reads it: the way
// the suite keeps a transaction in flight while others queue.
type identity struct {
	mu      sync.Mutex
	id      store.GroupIdentity
	hold    chan struct{} // non-nil: readers block until it is closed
	entered chan struct{} // signalled when a reader blocks on hold
	reads   int
}

func newIdentity(id store.GroupIdentity) *identity { return &identity{id: id} }

func (i *identity) CurrentIdentity() store.GroupIdentity {
	i.mu.Lock()
	i.reads++
	hold, entered := i.hold, i.entered
	i.mu.Unlock()
	if hold != nil {
		entered <- struct{}{}
		<-hold
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.id
}

func (i *identity) publish(id store.GroupIdentity) {
	i.mu.Lock()
	i.id = id
	i.mu.Unlock()
}

// holdNext makes the next transaction block when it reads the identity;
// the returned channel receives once it does, and release lets it go.
func (i *identity) holdNext() (entered <-chan struct{}, release func()) {
	hold := make(chan struct{})
	ent := make(chan struct{}, 1)
	i.mu.Lock()
	i.hold, i.entered = hold, ent
	i.mu.Unlock()
	var once sync.Once
	return ent, func() {
		once.Do(func() {
			i.mu.Lock()
			i.hold, i.entered = nil, nil
			i.mu.Unlock()
			close(hold)
		})
	}
}

// recorder records the transactions and recovery progress a backend
// reports.
type recorder struct {
	mu         sync.Mutex
	txs        []store.TransactionEvent
	recoveries []store.RecoveryEvent
	changed    chan struct{} // closed and replaced on every recovery event
}

func (r *recorder) OnTransaction(e store.TransactionEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.txs = append(r.txs, e)
}

func (r *recorder) OnRecovery(e store.RecoveryEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recoveries = append(r.recoveries, e)
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// awaitRecovery returns once a reported recovery event satisfies cond:
// how the suite knows, in real time as in virtual, that a read has
// captured its target or reached a position. A read that fails or ends
// before cond holds fails the test.
func (r *recorder) awaitRecovery(t *testing.T, what string, cond func(store.RecoveryEvent) bool) {
	t.Helper()
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	seen := 0
	for {
		r.mu.Lock()
		evs := r.recoveries[seen:]
		seen = len(r.recoveries)
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		changed := r.changed
		r.mu.Unlock()
		for _, e := range evs {
			if cond(e) {
				return
			}
			if e.Done {
				t.Fatalf("waiting for the recovery %s: it ended first at position %d of %d (err %v)", what, e.Position, e.Target, e.Err)
			}
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("waiting for the recovery %s: no such progress in a minute", what)
		}
	}
}

func (r *recorder) events() []store.TransactionEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]store.TransactionEvent(nil), r.txs...)
}

func (r *recorder) committed() []store.TransactionEvent {
	var out []store.TransactionEvent
	for _, e := range r.events() {
		if e.Err == nil {
			out = append(out, e)
		}
	}
	return out
}

// WriteBatch is p.StartWriteBatch waited for: each snapshot's outcome
// once it is durable or failed.
func WriteBatch(ctx context.Context, p store.Partition, snaps []store.Snapshot) []error {
	return p.StartWriteBatch(ctx, snaps).Wait(ctx)
}

// CommitBatch is p.StartCommitBatch waited for: nil only when the batch's
// transaction committed.
func CommitBatch(ctx context.Context, p store.Partition, b store.Batch) error {
	return p.StartCommitBatch(ctx, b).Wait(ctx)[0]
}

// owner is one acquired partition with its published identity and its
// backend's transaction recorder.
type owner struct {
	store.Partition
	id  *identity
	rec *recorder
}

// Write is one write: a batch of one snapshot. Concurrent calls are
// concurrent writers of one partition (kafka-flow flushes a partition's
// keys in parallel), which the group commit batches.
func (o *owner) Write(ctx context.Context, s store.Snapshot) error {
	return writeOne(ctx, o.Partition, s)
}

// WriteBatch is the package's WriteBatch through o.
func (o *owner) WriteBatch(ctx context.Context, snaps []store.Snapshot) []error {
	return WriteBatch(ctx, o.Partition, snaps)
}

// CommitBatch is the package's CommitBatch through o.
func (o *owner) CommitBatch(ctx context.Context, b store.Batch) error {
	return CommitBatch(ctx, o.Partition, b)
}

func writeOne(ctx context.Context, p store.Partition, s store.Snapshot) error {
	return WriteBatch(ctx, p, []store.Snapshot{s})[0]
}

// awaitQueued returns once n writes or commits wait in o's (Transactional)
// partition behind the transaction in flight (World.Queued).
func (o *owner) awaitQueued(t *testing.T, w World, n int) {
	t.Helper()
	w.Settle()
	for start := time.Now(); w.Queued(o.Partition) < n; {
		if time.Since(start) > time.Minute {
			t.Fatalf("%d of %d writes and commits queued after a minute", w.Queued(o.Partition), n)
		}
		time.Sleep(time.Millisecond) // polls the queue; in virtual time it already holds
	}
}

func acquire(t *testing.T, w World, cfg BackendConfig, input store.TopicPartition, assigned int64, id store.GroupIdentity) *owner {
	t.Helper()
	return acquireOutputs(t, w, cfg, input, assigned, id, nil)
}

// acquireOutputs is acquire with the output topics the partition's
// exactly-once batches write (store.Acquisition.Outputs).
func acquireOutputs(t *testing.T, w World, cfg BackendConfig, input store.TopicPartition, assigned int64, id store.GroupIdentity, outputs []string) *owner {
	t.Helper()
	rec := &recorder{}
	if cfg.Observer == nil {
		cfg.Observer = rec
	}
	b := w.Backend(t, cfg)
	ident := newIdentity(id)
	p, err := b.Acquire(context.Background(), store.Acquisition{Input: input, AssignedOffset: assigned, Identity: ident, Outputs: outputs})
	if err != nil {
		t.Fatalf("acquire %s: %v", input, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return &owner{Partition: p, id: ident, rec: rec}
}

func snap(key string, value string, offset int64) store.Snapshot {
	return store.Snapshot{Key: []byte(key), Value: []byte(value), Offset: offset}
}

// writeAsync starts a write and returns where its result arrives.
func writeAsync(p store.Partition, s store.Snapshot) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- writeOne(context.Background(), p, s) }()
	return ch
}

func commitAsync(p store.Partition, offset int64) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- p.Commit(context.Background(), offset) }()
	return ch
}

type recovered struct {
	snaps []store.Snapshot
	err   error
}

func collect(seq iter.Seq2[store.Snapshot, error]) recovered {
	var r recovered
	for s, err := range seq {
		if err != nil {
			r.err = err
			break
		}
		r.snaps = append(r.snaps, s)
	}
	return r
}

func recoverAsync(p store.Partition) <-chan recovered {
	ch := make(chan recovered, 1)
	go func() { ch <- collect(p.Recover(context.Background(), nil)) }()
	return ch
}

// latest folds a log-ordered snapshot stream into each key's latest state.
func latest(snaps []store.Snapshot) map[string]store.Snapshot {
	out := map[string]store.Snapshot{}
	for _, s := range snaps {
		out[string(s.Key)] = s
	}
	return out
}

func mustNil(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func ready[T any](ch <-chan T) (T, bool) {
	select {
	case v := <-ch:
		return v, true
	default:
		var zero T
		return zero, false
	}
}

func describe(snaps []store.Snapshot) string {
	s := "["
	for i, x := range snaps {
		if i > 0 {
			s += " "
		}
		if x.Tombstone {
			s += fmt.Sprintf("%s=<deleted>@%d", x.Key, x.Offset)
		} else {
			s += fmt.Sprintf("%s=%s@%d", x.Key, x.Value, x.Offset)
		}
	}
	return s + "]"
}
