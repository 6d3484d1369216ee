package sim

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/internal/groupcommit"
	"github.com/snapfence/snapfence/store/internal/readloop"
)

// BackendConfig configures a Backend. Zero values take the defaults given.
type BackendConfig struct {
	// Mode is required.
	Mode store.Mode
	// TransactionalIDPrefix is required in Transactional mode: partition N
	// of input topic T uses the transactional.id "<prefix>-T-N".
	TransactionalIDPrefix string
	// SnapshotTopic names the snapshot topic of an input topic; default
	// "<input>-snapshots".
	SnapshotTopic func(input string) string
	// CreateTopics creates a missing snapshot topic (compacted, with the
	// input topic's partition count) instead of failing.
	CreateTopics bool
	// MaxWritesPerTransaction: default store.DefaultMaxWritesPerTransaction.
	MaxWritesPerTransaction int
	// MaxValueBytes: default store.DefaultMaxValueBytes.
	MaxValueBytes int
	// TransactionTimeout: default store.DefaultTransactionTimeout.
	TransactionTimeout time.Duration
	// RecoveryStallTimeout: default store.DefaultRecoveryStallTimeout,
	// in both modes (as store/kafka).
	RecoveryStallTimeout time.Duration
	Observer             store.Observer
	Logger               *slog.Logger
}

// DefaultSnapshotTopic is the default snapshot topic of an input topic.
func DefaultSnapshotTopic(input string) string { return input + "-snapshots" }

// Backend is a store.Backend over a simulated cluster.
type Backend struct {
	c      *Cluster
	cfg    BackendConfig
	life   context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	parts  map[*partition]struct{}
	closed bool
}

var (
	_ store.Backend   = (*Backend)(nil)
	_ store.Partition = (*partition)(nil)
)

// NewBackend returns a store backend over c.
func (c *Cluster) NewBackend(cfg BackendConfig) (*Backend, error) {
	switch cfg.Mode {
	case store.Transactional:
		if cfg.TransactionalIDPrefix == "" {
			return nil, errors.New("sim: TransactionalIDPrefix is required in transactional mode")
		}
	case store.Plain:
	default:
		return nil, fmt.Errorf("sim: invalid mode %v", cfg.Mode)
	}
	if cfg.SnapshotTopic == nil {
		cfg.SnapshotTopic = DefaultSnapshotTopic
	}
	if cfg.MaxWritesPerTransaction <= 0 {
		cfg.MaxWritesPerTransaction = store.DefaultMaxWritesPerTransaction
	}
	if cfg.MaxValueBytes <= 0 {
		cfg.MaxValueBytes = store.DefaultMaxValueBytes
	}
	if cfg.TransactionTimeout <= 0 {
		cfg.TransactionTimeout = store.DefaultTransactionTimeout
	}
	if cfg.RecoveryStallTimeout <= 0 {
		cfg.RecoveryStallTimeout = store.DefaultRecoveryStallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	life, cancel := context.WithCancel(context.Background())
	return &Backend{c: c, cfg: cfg, life: life, cancel: cancel, parts: map[*partition]struct{}{}}, nil
}

// Mode reports the backend's mode.
func (b *Backend) Mode() store.Mode { return b.cfg.Mode }

// TransactionalID is the transactional.id of an input partition.
func (b *Backend) TransactionalID(input store.TopicPartition) string {
	return fmt.Sprintf("%s-%s-%d", b.cfg.TransactionalIDPrefix, input.Topic, input.Partition)
}

// SnapshotPartition is the snapshot partition of an input partition.
func (b *Backend) SnapshotPartition(input store.TopicPartition) store.TopicPartition {
	return store.TopicPartition{Topic: b.cfg.SnapshotTopic(input.Topic), Partition: input.Partition}
}

// Acquire implements store.Backend.
func (b *Backend) Acquire(ctx context.Context, a store.Acquisition) (store.Partition, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if a.Identity == nil {
		return nil, fmt.Errorf("sim: acquire %s: an identity reader is required", a.Input)
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return nil, store.ErrClosed
	}
	snap := b.SnapshotPartition(a.Input)
	if err := b.checkTopics(a.Input, snap); err != nil {
		return nil, err
	}
	p := &partition{b: b, input: a.Input, snap: snap, identity: a.Identity}
	if b.cfg.Mode == store.Transactional {
		// The takeover: fence the previous owner's producer and abort
		// its unfinished transaction before anything reads (I7).
		p.prod = b.c.InitProducerID(b.TransactionalID(a.Input), b.cfg.TransactionTimeout)
	}
	assigned, err := a.Resolve(ctx)
	if errors.Is(err, store.ErrOffsetUnstable) {
		return nil, b.unstableOffset(a, snap, err)
	}
	if err != nil {
		return nil, err
	}
	p.gc = groupcommit.New(b.life, groupcommit.Config{
		Input: a.Input, SnapshotTopic: snap.Topic, AssignedOffset: assigned,
		MaxWrites: b.cfg.MaxWritesPerTransaction, MaxValueBytes: b.cfg.MaxValueBytes,
		Now: b.c.Now, Observer: b.cfg.Observer,
	}, p.exec)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, store.ErrClosed
	}
	b.parts[p] = struct{}{}
	return p, nil
}

// unstableOffset diagnoses an acquisition whose committed offset a
// transaction holds: what the coordinator knows of the partition's
// transactional.id, and the transactions open on its snapshot partition.
func (b *Backend) unstableOffset(a store.Acquisition, snap store.TopicPartition, err error) error {
	txnID := b.TransactionalID(a.Input)
	return &store.UnstableOffsetError{
		Input: a.Input, Group: a.Identity.CurrentIdentity().Group, TransactionalID: txnID,
		Coordinator: b.c.DescribeTransaction(txnID), Open: b.c.OpenTransactionsOn(snap),
		Bootstrap: "sim", Err: err,
	}
}

func (b *Backend) checkTopics(input, snap store.TopicPartition) error {
	in, ok := b.c.Topic(input.Topic)
	if !ok {
		return fmt.Errorf("sim: input topic %q does not exist", input.Topic)
	}
	if int(input.Partition) >= in.Partitions || input.Partition < 0 {
		return fmt.Errorf("sim: input partition %s does not exist (the topic has %d)", input, in.Partitions)
	}
	cfg, ok := b.c.Topic(snap.Topic)
	if !ok {
		if !b.cfg.CreateTopics {
			return fmt.Errorf("sim: snapshot topic %q of input topic %q does not exist (create it compacted with at least %d partitions, or set CreateTopics)",
				snap.Topic, input.Topic, in.Partitions)
		}
		if err := b.c.CreateTopic(snap.Topic, TopicConfig{Partitions: in.Partitions, Compacted: true}); err != nil {
			return err
		}
		cfg, _ = b.c.Topic(snap.Topic)
	}
	if !cfg.Compacted {
		return fmt.Errorf("sim: snapshot topic %q is not compacted (cleanup.policy=compact is required)", snap.Topic)
	}
	if cfg.Partitions < in.Partitions {
		return fmt.Errorf("sim: snapshot topic %q has %d partitions, fewer than the %d of input topic %q",
			snap.Topic, cfg.Partitions, in.Partitions, input.Topic)
	}
	return nil
}

// Close releases every partition.
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed = true
	parts := b.parts
	b.parts = map[*partition]struct{}{}
	b.mu.Unlock()
	for p := range parts {
		p.gc.Close()
	}
	b.cancel()
	return nil
}

// partition is one acquired input partition.
type partition struct {
	b        *Backend
	input    store.TopicPartition
	snap     store.TopicPartition
	identity store.IdentityReader
	prod     *Producer // Transactional only
	gc       *groupcommit.Committer

	mu     sync.Mutex
	fenced error // a fatal producer error: the partition must be re-acquired
}

func (p *partition) Input() store.TopicPartition { return p.input }
func (p *partition) Commit(ctx context.Context, offset int64) error {
	return p.gc.Commit(ctx, offset)
}
func (p *partition) CommittedOffset() int64 { return p.gc.Committed() }

// Pending is the number of writes and commits queued behind the
// transaction in flight.
func (p *partition) Pending() int { return p.gc.Pending() }

// WriteBatch implements store.Partition: the writes queue in order, in
// one step, so the same calls make the same transactions on every run.
func (p *partition) WriteBatch(ctx context.Context, snaps []store.Snapshot) []error {
	return p.gc.WriteBatch(ctx, snaps)
}

// CommitBatch implements store.Partition (Transactional mode only).
func (p *partition) CommitBatch(ctx context.Context, b store.Batch) error {
	if p.b.cfg.Mode != store.Transactional {
		return fmt.Errorf("sim: %s: exactly-once batches need Transactional mode (this backend is %v): %w", p.input, p.b.cfg.Mode, store.ErrNotTransactional)
	}
	return p.gc.CommitBatch(ctx, b)
}

func (p *partition) Close() error {
	p.b.mu.Lock()
	delete(p.b.parts, p)
	p.b.mu.Unlock()
	p.gc.Close()
	return nil
}

// exec runs one transaction of the group commit.
func (p *partition) exec(ctx context.Context, batch groupcommit.Batch) (store.GroupIdentity, error) {
	id := p.identity.CurrentIdentity() // read live, for this transaction (I1)
	if p.b.cfg.Mode == store.Plain {
		return id, p.execPlain(batch, id)
	}
	if !id.Valid() {
		return id, &store.MissingIdentityError{Input: p.input, Identity: id} // I4
	}
	p.mu.Lock()
	dead := p.fenced
	p.mu.Unlock()
	if dead != nil {
		return id, &store.FencedError{Input: p.input, Identity: id, TransactionalID: p.prod.TransactionalID(), Reason: dead}
	}
	recs := make([]store.WireRecord, 0, max(len(batch.Writes), 1))
	for _, w := range batch.Writes {
		recs = append(recs, store.EncodeSnapshot(w))
	}
	if len(recs) == 0 {
		recs = append(recs, store.EncodeOffsetMarker(batch.Offset, id))
	}
	if _, err := p.prod.Produce(p.snap, recs...); err != nil {
		return id, p.fail(id, err)
	}
	if err := p.produceOutputs(id, batch.Outputs); err != nil {
		if aerr := p.prod.EndTxn(false); aerr != nil {
			return id, p.fail(id, errors.Join(err, aerr))
		}
		return id, err
	}
	if err := p.prod.TxnOffsetCommit(id, map[store.TopicPartition]int64{p.input: batch.Offset}); err != nil {
		if aerr := p.prod.EndTxn(false); aerr != nil {
			return id, p.fail(id, errors.Join(err, aerr))
		}
		return id, &store.FencedError{Input: p.input, Identity: id, Reason: err}
	}
	if err := p.prod.EndTxn(true); err != nil {
		return id, p.fail(id, err)
	}
	return id, nil
}

// produceOutputs produces an exactly-once batch's outputs in the open
// transaction, each to the partition Kafka's default partitioner gives its
// key.
func (p *partition) produceOutputs(id store.GroupIdentity, outs []store.Output) error {
	for _, o := range outs {
		cfg, ok := p.b.c.Topic(o.Topic)
		if !ok {
			return fmt.Errorf("sim: %s: output topic %q does not exist", p.input, o.Topic)
		}
		tp := store.TopicPartition{Topic: o.Topic, Partition: store.OutputPartition(o.Key, cfg.Partitions)}
		rec := store.WireRecord{Key: o.Key, Value: o.Value, Headers: o.Headers}
		if _, err := p.prod.Produce(tp, rec); err != nil {
			return p.fail(id, err)
		}
	}
	return nil
}

// fail turns a producer error into the partition's error. A fenced
// producer is fatal: the partition stays fenced until re-acquired.
func (p *partition) fail(id store.GroupIdentity, err error) error {
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
		p.mu.Lock()
		p.fenced = err
		p.mu.Unlock()
		return &store.FencedError{Input: p.input, Identity: id, TransactionalID: p.prod.TransactionalID(), Reason: err}
	}
	return fmt.Errorf("sim: %s: transaction failed: %w", p.input, err)
}

// execPlain writes with the shared non-transactional producer and commits
// the offset through the group, with no binding between the two.
func (p *partition) execPlain(batch groupcommit.Batch, id store.GroupIdentity) error {
	if batch.Advances && !id.Valid() {
		return &store.MissingIdentityError{Input: p.input, Identity: id}
	}
	if len(batch.Writes) > 0 {
		recs := make([]store.WireRecord, len(batch.Writes))
		for i, w := range batch.Writes {
			recs[i] = store.EncodeSnapshot(w)
		}
		if _, err := p.b.c.Produce(p.snap, recs...); err != nil {
			return fmt.Errorf("sim: %s: write failed: %w", p.input, err)
		}
	}
	if batch.Advances {
		if err := p.b.c.OffsetCommit(id, map[store.TopicPartition]int64{p.input: batch.Offset}); err != nil {
			return &store.FencedError{Input: p.input, Identity: id, Reason: err}
		}
	}
	return nil
}

// Recover implements store.Partition.
func (p *partition) Recover(ctx context.Context) iter.Seq2[store.Snapshot, error] {
	cfg := readloop.Config{Snapshots: p.snap, StallTimeout: p.b.cfg.RecoveryStallTimeout, Now: p.b.c.Now, Logger: p.b.cfg.Logger}
	readCommitted := p.b.cfg.Mode == store.Transactional
	if o, ok := p.b.cfg.Observer.(store.RecoveryObserver); ok {
		cfg.Progress = o.OnRecovery
	}
	return readloop.Read(ctx, cfg, &source{c: p.b.c, tp: p.snap, readCommitted: readCommitted})
}

// source reads a snapshot partition of the simulated cluster.
type source struct {
	c             *Cluster
	tp            store.TopicPartition
	readCommitted bool
	pos           int64
}

func (s *source) HighWatermark(ctx context.Context) (int64, error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if err := s.c.faults.failLogEnd; err != nil {
		return 0, err
	}
	l, err := s.c.partitionLocked(s.tp)
	if err != nil {
		return 0, err
	}
	return l.end, nil
}

func (s *source) LogStart(ctx context.Context) (int64, error) {
	start, _, _, err := s.c.Offsets(s.tp)
	return start, err
}

func (s *source) LastStable(ctx context.Context) (int64, error) {
	_, lso, _, err := s.c.Offsets(s.tp)
	return lso, err
}

// Poll reads what is visible from the position; with nothing new it waits
// for a change or for wait of virtual time, then reads once more.
func (s *source) Poll(ctx context.Context, wait time.Duration) ([]readloop.Fetched, int64, error) {
	for attempt := 0; ; attempt++ {
		c := s.c
		c.mu.Lock()
		l, err := c.partitionLocked(s.tp)
		if err != nil {
			c.mu.Unlock()
			return nil, s.pos, err
		}
		limit := c.faults.fetchMaxRecords
		if limit <= 0 {
			limit = 500
		}
		ents, next := l.read(s.pos, limit, s.readCommitted)
		if next > s.pos || attempt > 0 {
			var delay <-chan time.Time
			if len(ents) > 0 && c.faults.fetchLatency > 0 {
				delay = c.clk.after(c.faults.fetchLatency)
			}
			var wt *waiter
			if delay != nil {
				wt = c.newWaiterLocked(false, c.clk.now.Add(c.faults.fetchLatency))
				c.parkLocked(wt)
			}
			c.mu.Unlock()
			if delay != nil {
				select {
				case <-delay:
				case <-ctx.Done():
				}
				c.resume(ctx, wt)
				if err := ctx.Err(); err != nil {
					return nil, s.pos, err
				}
			}
			out := make([]readloop.Fetched, len(ents))
			for i, e := range ents {
				out[i] = readloop.Fetched{Offset: e.Offset, Record: e.Record}
			}
			s.pos = max(s.pos, next)
			return out, s.pos, nil
		}
		changed, timer := c.changed, c.clk.after(wait)
		var wt *waiter
		if wait > 0 { // a wait already over is no park: the timer has fired
			wt = c.newWaiterLocked(true, c.clk.now.Add(wait))
			c.parkLocked(wt)
		}
		c.mu.Unlock()
		select {
		case <-changed:
		case <-timer:
		case <-ctx.Done():
		}
		c.resume(ctx, wt)
		if err := ctx.Err(); err != nil {
			return nil, s.pos, err
		}
	}
}
