package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/internal/backend"
	"github.com/snapfence/snapfence/store/internal/groupcommit"
	"github.com/snapfence/snapfence/store/internal/readloop"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/wire"
)

// BackendConfig configures a Backend. Zero values take the defaults given.
type BackendConfig struct {
	// Mode is required.
	Mode store.Mode
	// Application names the application, as store/kafka's does: the
	// default snapshot topic "<Application>-<input>-snapshots", the
	// transactional.id prefix, the header of every record. Default
	// TransactionalIDPrefix; one of the two is required.
	Application string
	// TransactionalIDPrefix: partition N of input topic T uses the
	// transactional.id "<prefix>-T-N"; default Application.
	TransactionalIDPrefix string
	// SnapshotTopic names the snapshot topic of an input topic; default
	// DefaultSnapshotTopic.
	SnapshotTopic func(input string) string
	// CreateTopics creates a missing snapshot topic (compacted, with the
	// input topic's partition count) instead of failing.
	CreateTopics bool
	// MaxWritesPerTransaction: default store.DefaultMaxWritesPerTransaction.
	MaxWritesPerTransaction int
	// MaxBytesPerTransaction: default store.DefaultMaxBytesPerTransaction,
	// or the time budget of TransactionTimeout if that is less; a value
	// above the budget is refused (as store/kafka's).
	MaxBytesPerTransaction int
	// MaxValueBytes: default store.DefaultMaxValueBytes.
	MaxValueBytes int
	// TransactionTimeout: default store.DefaultTransactionTimeout.
	TransactionTimeout time.Duration
	// RecoveryStallTimeout: default store.DefaultRecoveryStallTimeout,
	// in both modes (as store/kafka).
	RecoveryStallTimeout time.Duration
	Observer             store.Observer
	Logger               *slog.Logger
	// WriteLatency puts a partition's started writes, commits and
	// batches (Partition.Start*) in flight: they reach the cluster once
	// virtual time has passed WriteLatency (Cluster.Advance runs them, in
	// the order started), or as soon as their caller waits for one
	// (Pending.Wait), earlier ones first. Meanwhile the caller folds on,
	// the group may rebalance and the member may crash, as with a real
	// broker's round trips; the run stays a function of its calls. 0 (the
	// default): every call completes before it returns.
	WriteLatency time.Duration
}

// DefaultSnapshotTopic is the default snapshot topic of an input topic in
// the application app: "<app>-<input>-snapshots".
func DefaultSnapshotTopic(app, input string) string { return backend.DefaultSnapshotTopic(app, input) }

// LegacySnapshotTopic is the snapshot topic named before applications
// were, "<input>-snapshots".
func LegacySnapshotTopic(input string) string { return backend.LegacySnapshotTopic(input) }

// Backend is a store.Backend over a simulated cluster: the shared backend
// skeleton (store/internal/backend) over the cluster's seam (broker, link).
type Backend struct {
	core *backend.Backend
}

var _ store.Backend = (*Backend)(nil)

// NewBackend returns a store backend over c.
func (c *Cluster) NewBackend(cfg BackendConfig) (*Backend, error) {
	set, err := backend.Config{
		Name: "sim", Mode: cfg.Mode, Application: cfg.Application, TransactionalIDPrefix: cfg.TransactionalIDPrefix,
		SnapshotTopic: cfg.SnapshotTopic, MaxWritesPerTransaction: cfg.MaxWritesPerTransaction,
		MaxBytesPerTransaction: cfg.MaxBytesPerTransaction,
		MaxValueBytes:          cfg.MaxValueBytes, TransactionTimeout: cfg.TransactionTimeout,
		RecoveryStallTimeout: cfg.RecoveryStallTimeout, Observer: cfg.Observer, Logger: cfg.Logger,
		Now: c.Now, // virtual time
		// Deterministic: a call completes in the caller (see
		// backend.Config.Inline), or with WriteLatency stays in flight
		// until virtual time reaches it or its caller waits (Defer).
		Inline: cfg.WriteLatency <= 0,
		Defer:  c.deferrer(cfg.WriteLatency),
	}.Check()
	if err != nil {
		return nil, err
	}
	return &Backend{core: backend.New(set, &broker{c: c, cfg: cfg, set: set})}, nil
}

// Application is the application's name (Config.Application, or the
// transactional.id prefix when that is unset).
func (b *Backend) Application() string { return b.core.Config().Application }

// Mode reports the backend's mode.
func (b *Backend) Mode() store.Mode { return b.core.Mode() }

// TransactionalID is the transactional.id of an input partition
// (store.TransactionalID).
func (b *Backend) TransactionalID(input store.TopicPartition) string {
	return b.core.TransactionalID(input)
}

// SnapshotPartition is the snapshot partition of an input partition.
func (b *Backend) SnapshotPartition(input store.TopicPartition) store.TopicPartition {
	return b.core.SnapshotPartition(input)
}

// Acquire implements store.Backend: the topic checks, then in
// Transactional mode the takeover, before it returns.
func (b *Backend) Acquire(ctx context.Context, a store.Acquisition) (store.Partition, error) {
	return b.core.Acquire(ctx, a)
}

// Close releases every partition.
func (b *Backend) Close() error { return b.core.Close() }

// broker is the simulated cluster as the skeleton's backend.Broker.
type broker struct {
	c   *Cluster
	cfg BackendConfig
	set backend.Config
}

// Open implements backend.Broker: the topic checks.
func (b *broker) Open(ctx context.Context, input, snap store.TopicPartition, outputs []string) (backend.Link, error) {
	if err := b.checkTopics(input, snap); err != nil {
		return nil, err
	}
	for _, t := range outputs {
		if _, ok := b.c.Topic(t); !ok {
			return nil, &store.ConfigError{Subject: fmt.Sprintf("output topic %q", t), Problem: "does not exist",
				Fix: fmt.Sprintf("create it, or remove it from the output topics %s declares", input)}
		}
	}
	return &link{b: b, input: input, snap: snap}, nil
}

// AbortedAcross implements backend.Link: the simulated coordinator never
// loses a committed transaction's markers, so a transaction the engine
// saw committed is never aborted later, and a checkpoint never straddles
// an aborted one that a local copy took in.
func (l *link) AbortedAcross(context.Context, int64) (int64, bool, error) { return 0, false, nil }

// Leftover implements backend.Broker. The simulated coordinator forgets a
// transaction (Cluster.ForgetTransaction) with its producer: the takeover
// then gets a new producer id, whose transactions cannot take in the
// forgotten one's, so none of the partition's current lineage is left
// open.
func (b *broker) Leftover(context.Context, store.Acquisition, backend.Link, string) error { return nil }

// Claimed implements backend.Broker: the coordinator's state of txnID,
// as Kafka's DescribeTransactions reports it, the snapshot partition's end
// and last stable offset, and the group's committed offset.
func (b *broker) Claimed(_ context.Context, txnID string, snap, input store.TopicPartition, group string) (backend.IDState, error) {
	var st backend.IDState
	_, lso, end, err := b.c.Offsets(snap)
	if err != nil {
		return st, err
	}
	st.SnapshotsEmpty, st.SnapshotsStable = end == 0, lso > 0
	known, epoch, ongoing, parts, committed := b.c.TransactionState(txnID)
	if !known {
		return st, nil
	}
	st.Claimed = ongoing || committed || epoch > 0
	st.Ongoing, st.Partitions = ongoing, parts
	if st.Claimed && st.SnapshotsEmpty {
		_, st.GroupCommitted = b.c.CommittedOffset(group, input)
	}
	return st, nil
}

// Close implements backend.Broker: the cluster is the caller's.
func (b *broker) Close() error { return nil }

// Partitions implements backend.Broker.
func (b *broker) Partitions(_ context.Context, topic string) (int32, error) {
	cfg, ok := b.c.Topic(topic)
	if !ok {
		return 0, &store.ConfigError{Subject: fmt.Sprintf("topic %q", topic), Problem: "does not exist", Fix: "create it, or name a topic that exists"}
	}
	return int32(cfg.Partitions), nil
}

// OpenTopic implements backend.Broker: partition tp of any topic,
// read_committed.
func (b *broker) OpenTopic(ctx context.Context, tp store.TopicPartition) (backend.TopicLink, error) {
	n, err := b.Partitions(ctx, tp.Topic)
	if err != nil {
		return nil, err
	}
	if tp.Partition < 0 || tp.Partition >= n {
		return nil, &store.ConfigError{Subject: "partition " + tp.String(), Problem: fmt.Sprintf("does not exist (the topic has %d)", n),
			Fix: "name one of the topic's partitions"}
	}
	return topicLink{c: b.c, tp: tp}, nil
}

// topicLink is a follower's seam to a partition of any topic.
type topicLink struct {
	c  *Cluster
	tp store.TopicPartition
}

func (l topicLink) Source(_ context.Context, from int64) (readloop.Source, func(), error) {
	return &source{c: l.c, tp: l.tp, readCommitted: true, pos: from}, func() {}, nil
}

func (l topicLink) Snapshots() backend.SnapshotTopic {
	cfg, _ := l.c.Topic(l.tp.Topic)
	return backend.SnapshotTopic{ID: cfg.ID, DeleteRetention: cfg.DeleteRetention}
}

func (l topicLink) Release() {}

// Unstable implements backend.Broker: what the coordinator knows of the
// partition's transactional.id, and the transactions open on its snapshot
// partition.
// The simulated coordinator never forgets a transaction, so nothing
// hangs and nothing is aborted here.
func (b *broker) Unstable(_ context.Context, a store.Acquisition, l backend.Link, txnID string, err error) (bool, error) {
	return false, &kafka.UnstableOffsetError{
		Input: a.Input, Group: a.Identity.CurrentIdentity().Group, TransactionalID: txnID,
		Coordinator: b.c.DescribeTransaction(txnID), Open: b.c.OpenTransactionsOn(l.(*link).snap),
		Bootstrap: "sim", Err: err,
	}
}

func (b *broker) checkTopics(input, snap store.TopicPartition) error {
	in, ok := b.c.Topic(input.Topic)
	if !ok {
		return &store.ConfigError{Subject: fmt.Sprintf("input topic %q", input.Topic), Problem: "does not exist", Fix: "create it"}
	}
	if int(input.Partition) >= in.Partitions || input.Partition < 0 {
		return &store.ConfigError{Subject: "input partition " + input.String(), Problem: fmt.Sprintf("does not exist (the topic has %d)", in.Partitions),
			Fix: "consume only the topic's partitions"}
	}
	cfg, ok := b.c.Topic(snap.Topic)
	if !ok {
		if _, ok := b.c.Topic(backend.LegacySnapshotTopic(input.Topic)); ok && b.set.SnapshotTopicIsDefault {
			return backend.LegacyTopicError(b.set, input.Topic, snap.Topic)
		}
		if !b.cfg.CreateTopics {
			return &store.ConfigError{Subject: fmt.Sprintf("snapshot topic %q", snap.Topic), Problem: fmt.Sprintf("of input topic %q does not exist", input.Topic),
				Fix: fmt.Sprintf("create it compacted with at least %d partitions, or set CreateTopics", in.Partitions)}
		}
		if err := b.c.CreateTopic(snap.Topic, TopicConfig{Partitions: in.Partitions, Compacted: true}); err != nil {
			return err
		}
		cfg, _ = b.c.Topic(snap.Topic)
	}
	if !cfg.Compacted {
		return &store.ConfigError{Subject: fmt.Sprintf("snapshot topic %q", snap.Topic), Problem: "is not compacted",
			Fix: "set cleanup.policy=compact on it: retention would delete old snapshots"}
	}
	if cfg.Partitions < in.Partitions {
		return &store.ConfigError{Subject: fmt.Sprintf("snapshot topic %q", snap.Topic),
			Problem: fmt.Sprintf("has %d partitions, fewer than the %d of input topic %q", cfg.Partitions, in.Partitions, input.Topic),
			Fix:     "add partitions to the snapshot topic: partition N holds input partition N's keys"}
	}
	return nil
}

// link is one acquired input partition's seam to the cluster.
type link struct {
	b     *broker
	input store.TopicPartition
	snap  store.TopicPartition
	prod  *Producer // Transactional only

	mu     sync.Mutex
	fenced error // a fatal producer error: the partition must be re-acquired
}

// Takeover implements backend.Link: fence the previous owner's producer
// and abort its unfinished transaction before anything reads (I7).
func (p *link) Takeover(_ context.Context, txnID string) error {
	p.prod = p.b.c.InitProducerID(txnID, p.b.set.TransactionTimeout)
	return nil
}

// Claim implements backend.Link: a transaction of the marker alone.
func (p *link) Claim(_ context.Context, marker wire.Record, id store.GroupIdentity) error {
	if _, err := p.prod.Produce(p.snap, marker); err != nil {
		_ = p.prod.EndTxn(false)
		return p.fail(id, err)
	}
	if err := p.prod.EndTxn(true); err != nil {
		return p.fail(id, err)
	}
	return nil
}

// Release implements backend.Link: a simulated producer holds nothing.
func (p *link) Release() {}

// Transact implements backend.Link: one transaction of the group commit.
func (p *link) Transact(_ context.Context, batch groupcommit.Batch, id store.GroupIdentity) (int64, error) {
	end := int64(-1)
	err := p.transact(batch, id, &end)
	if err != nil {
		return -1, err
	}
	return end, nil
}

func (p *link) transact(batch groupcommit.Batch, id store.GroupIdentity, end *int64) error {
	p.mu.Lock()
	dead := p.fenced
	p.mu.Unlock()
	if dead != nil {
		return &store.FencedError{Input: p.input, Identity: id, TransactionalID: p.prod.TransactionalID(), Reason: dead}
	}
	recs := make([]wire.Record, 0, max(len(batch.Writes), 1))
	for _, w := range batch.Writes {
		recs = append(recs, wire.EncodeSnapshot(p.b.set.Application, w))
	}
	if len(recs) == 0 {
		recs = append(recs, wire.EncodeOffsetMarker(p.b.set.Application, batch.Offset, id))
	}
	offs, err := p.prod.Produce(p.snap, recs...)
	if err != nil {
		return p.fail(id, err)
	}
	*end = offs[len(offs)-1] + 1
	if err := p.produceOutputs(id, batch.Outputs); err != nil {
		if aerr := p.prod.EndTxn(false); aerr != nil {
			return p.fail(id, errors.Join(err, aerr))
		}
		return err
	}
	if err := p.prod.TxnOffsetCommit(id, map[store.TopicPartition]int64{p.input: batch.Offset}); err != nil {
		if aerr := p.prod.EndTxn(false); aerr != nil {
			return p.fail(id, errors.Join(err, aerr))
		}
		return &store.FencedError{Input: p.input, Identity: id, Reason: err}
	}
	if err := p.prod.EndTxn(true); err != nil {
		return p.fail(id, err)
	}
	return nil
}

// produceOutputs produces an exactly-once batch's outputs in the open
// transaction, each to the partition Kafka's default partitioner gives its
// key.
func (p *link) produceOutputs(id store.GroupIdentity, outs []store.Output) error {
	for i, o := range outs {
		cfg, ok := p.b.c.Topic(o.Topic)
		if !ok {
			return fmt.Errorf("sim: %s: %w", p.input, &store.ConfigError{Subject: fmt.Sprintf("output topic %q", o.Topic),
				Problem: "does not exist", Fix: "create it (Cluster.CreateTopic)"})
		}
		tp := store.TopicPartition{Topic: o.Topic, Partition: store.OutputPartition(o.Key, cfg.Partitions)}
		rec := wire.Record{Key: o.Key, Value: o.Value, Headers: o.Headers}
		if _, err := p.prod.Produce(tp, rec); err != nil {
			if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.InvalidRecord) {
				return &store.OutputRefusedError{Input: p.input, Outputs: []int{i}, Topic: o.Topic, Partition: tp.Partition, Key: o.Key, Err: err}
			}
			return p.fail(id, err)
		}
	}
	return nil
}

// fail turns a producer error into the partition's error. A fenced
// producer is fatal: the partition stays fenced until re-acquired.
func (p *link) fail(id store.GroupIdentity, err error) error {
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
		p.mu.Lock()
		p.fenced = err
		p.mu.Unlock()
		return &store.FencedError{Input: p.input, Identity: id, TransactionalID: p.prod.TransactionalID(), Reason: err}
	}
	return fmt.Errorf("sim: %s: transaction failed: %w", p.input, err)
}

// Produce implements backend.Link (Plain): the cluster's
// non-transactional append, all of recs or none.
func (p *link) Produce(ctx context.Context, recs []wire.Record) []error {
	err := ctx.Err()
	if err == nil {
		_, err = p.b.c.Produce(p.snap, recs...)
	}
	errs := make([]error, len(recs))
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// CommitOffset implements backend.Link (Plain): a group offset commit,
// validated by the coordinator like any other, with no binding to the
// writes.
func (p *link) CommitOffset(ctx context.Context, id store.GroupIdentity, offset int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := p.b.c.OffsetCommit(id, map[store.TopicPartition]int64{p.input: offset}); err != nil {
		return &store.FencedError{Input: p.input, Identity: id, Reason: err}
	}
	return nil
}

// Source implements backend.Link: a reader of the snapshot partition,
// read_committed in Transactional mode.
func (p *link) Source(_ context.Context, from int64) (readloop.Source, func(), error) {
	return &source{c: p.b.c, tp: p.snap, readCommitted: p.b.set.Mode == store.Transactional, pos: from}, func() {}, nil
}

// Snapshots implements backend.Link: the snapshot topic as it is now (a
// delta recovery checks it after the takeover).
func (p *link) Snapshots() backend.SnapshotTopic {
	cfg, _ := p.b.c.Topic(p.snap.Topic)
	return backend.SnapshotTopic{ID: cfg.ID, DeleteRetention: cfg.DeleteRetention}
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
		changed := c.changed
		timer, wt := c.parkForLocked(wait, true)
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

// CanFollow implements store.Backend: the backend follows partitions.
func (b *Backend) CanFollow() bool { return true }

// Partitions implements store.Backend.
func (b *Backend) Partitions(ctx context.Context, topic string) (int32, error) {
	return b.core.Partitions(ctx, topic)
}

// FollowTopic implements store.Backend: a read_committed reader
// of a partition of any topic, in either mode; it writes nothing.
func (b *Backend) FollowTopic(ctx context.Context, tp store.TopicPartition, from *store.Checkpoint) (store.Follow, error) {
	return b.core.FollowTopic(ctx, tp, from)
}

// Follow implements store.Backend: a read_committed reader of input's
// snapshot partition for a standby replica; it writes nothing.
func (b *Backend) Follow(ctx context.Context, input store.TopicPartition, from *store.Checkpoint) (store.Follow, error) {
	return b.core.Follow(ctx, input, from)
}
