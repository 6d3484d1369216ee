// Package backend is the skeleton every store backend shares: the checked
// configuration with its defaults, the acquire sequence, the
// transactional.id rule, and the partition built from the shared pieces
// (the group commit of store/internal/groupcommit in Transactional mode,
// the plain write path in Plain mode, the recovery read of
// store/internal/readloop). A backend supplies only what talks to its
// cluster: a Broker, and a Link per acquired partition.
package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/internal/groupcommit"
	"github.com/snapfence/snapfence/store/internal/readloop"
	"github.com/snapfence/snapfence/store/wire"
)

// Config is what every backend's configuration holds. Check validates it
// and fills in the defaults; the rest of the package reads it checked.
type Config struct {
	// Name prefixes the skeleton's errors ("kafka", "sim").
	Name string
	Mode store.Mode
	// Application names the application: every record the backend writes
	// carries it, and recovery refuses a snapshot partition another
	// application wrote. Default TransactionalIDPrefix; one of the two is
	// required.
	Application string
	// TransactionalIDPrefix: default Application.
	TransactionalIDPrefix string
	// SnapshotTopic: default DefaultSnapshotTopic of Application.
	SnapshotTopic func(input string) string
	// MaxWritesPerTransaction: default store.DefaultMaxWritesPerTransaction.
	MaxWritesPerTransaction int
	// MaxBytesPerTransaction: default store.DefaultMaxBytesPerTransaction,
	// or the transaction timeout's budget (store.TransactionBytesBudget)
	// if that is less; a value above the budget is refused.
	MaxBytesPerTransaction int
	// MaxValueBytes: default store.DefaultMaxValueBytes.
	MaxValueBytes int
	// TransactionTimeout: default store.DefaultTransactionTimeout.
	TransactionTimeout time.Duration
	// RecoveryStallTimeout: default store.DefaultRecoveryStallTimeout, in
	// both modes: a Plain read never waits for a transaction, but a log
	// cut below the high watermark it captured would hold it for good.
	RecoveryStallTimeout time.Duration
	Observer             store.Observer
	// Logger: default discards.
	Logger *slog.Logger
	// Now is the backend's clock (observer durations, the stall deadline);
	// default time.Now.
	Now func() time.Time
	// ReleaseSuperseded releases a partition's previous handle when this
	// backend acquires the partition again (Transactional mode): the new
	// handle's takeover has fenced the old one's producer, and store/kafka's
	// producer is a franz-go client with connections and goroutines. The
	// sim's producer holds nothing, and it keeps the old handle open, so
	// an owner superseded within one backend sees the fence
	// (PRODUCER_FENCED) as an owner in another process would, not
	// ErrClosed: the engine's sim tests run two runners on one backend
	// and pin that.
	ReleaseSuperseded bool
	// Inline runs a partition's Start calls to their outcome before they
	// return (groupcommit.Config.Inline): the simulated cluster completes
	// its calls in the caller, and a write left to a goroutine would reach
	// it in an order the Go scheduler picks, where a run must be a
	// function of its seed and its calls. store/kafka leaves it false: its
	// writes run while the caller goes on.
	Inline bool
	// Defer is groupcommit.Config.Defer: the simulated cluster's writes in
	// flight (sim.BackendConfig.WriteLatency). nil: none.
	Defer func(run func()) (hurry func())

	// SnapshotTopicIsDefault is set by Check when SnapshotTopic is the
	// default: a backend then refuses to start on a missing snapshot
	// topic beside a legacy one (LegacySnapshotTopic), whose state it
	// would otherwise leave behind.
	SnapshotTopicIsDefault bool
}

// DefaultSnapshotTopic is the default snapshot topic of an input topic
// in the application app: "<app>-<input>-snapshots", so that two
// applications on one input never share one.
func DefaultSnapshotTopic(app, input string) string { return app + "-" + input + "-snapshots" }

// LegacySnapshotTopic is the snapshot topic of an input topic that
// snapfence named before applications were: "<input>-snapshots".
func LegacySnapshotTopic(input string) string { return input + "-snapshots" }

// LegacyTopicError is the refusal of an acquisition whose default snapshot
// topic is missing while its legacy one (LegacySnapshotTopic) exists: the
// application's state may be there, and starting empty would leave it
// behind while the input resumes from the committed offset.
func LegacyTopicError(cfg Config, input, snapTopic string) error {
	legacy := LegacySnapshotTopic(input)
	return fmt.Errorf("%s: %w", cfg.Name, &store.ConfigError{Subject: fmt.Sprintf("snapshot topic %q", snapTopic),
		Problem: fmt.Sprintf("does not exist, but %q, the snapshot topic of input %q before applications were named, does: application %q's state may be there, and starting without it would lose it",
			legacy, input, cfg.Application),
		Fix: fmt.Sprintf("to keep the state where it is, set SnapshotTopic to the legacy name (LegacySnapshotTopic); to move it, copy %q to %q (docs/operations.md, \"Upgrading to named applications\"); if %q is another application's, create %q yourself",
			legacy, snapTopic, legacy, snapTopic)})
}

// Check validates cfg and returns it with the defaults filled in.
func (cfg Config) Check() (Config, error) {
	switch cfg.Mode {
	case store.Transactional, store.Plain:
	default:
		return cfg, fmt.Errorf("%s: invalid mode %v", cfg.Name, cfg.Mode)
	}
	if cfg.Application == "" {
		cfg.Application = cfg.TransactionalIDPrefix
	}
	if cfg.Application != "" {
		if p := store.NameProblem(cfg.Application); p != "" {
			return cfg, fmt.Errorf("%s: %w", cfg.Name, &store.ConfigError{Subject: "Config.Application",
				Problem: fmt.Sprintf("%q: %s", cfg.Application, p), Fix: "use letters, digits, '.', '_' and '-': it becomes part of topic names"})
		}
	}
	if cfg.TransactionalIDPrefix == "" {
		cfg.TransactionalIDPrefix = cfg.Application
	}
	if cfg.SnapshotTopic == nil {
		app := cfg.Application
		cfg.SnapshotTopic = func(input string) string { return DefaultSnapshotTopic(app, input) }
		cfg.SnapshotTopicIsDefault = true
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
	// The time budget: a transaction is never built larger than it can
	// write inside its timeout at a pessimistic rate. Its writes are
	// fixed before it begins, so this is the one place to bound it; a
	// clock read while writes queue would make the batches depend on the
	// scheduler.
	budget := store.TransactionBytesBudget(cfg.TransactionTimeout)
	switch {
	case cfg.MaxBytesPerTransaction <= 0:
		cfg.MaxBytesPerTransaction = min(store.DefaultMaxBytesPerTransaction, budget)
	case cfg.MaxBytesPerTransaction > budget:
		return cfg, fmt.Errorf("%s: %w", cfg.Name, &store.ConfigError{Subject: "Config.MaxBytesPerTransaction",
			Problem: fmt.Sprintf("is %d bytes, above the time budget of the %v transaction timeout: %d bytes, what %d bytes/s write in half of it (store.TransactionBytesBudget)",
				cfg.MaxBytesPerTransaction, cfg.TransactionTimeout, budget, store.TransactionBudgetRate),
			Fix: fmt.Sprintf("lower MaxBytesPerTransaction to at most %d, or raise TransactionTimeout to at least %v",
				budget, minTimeoutFor(cfg.MaxBytesPerTransaction))})
	}
	if cfg.RecoveryStallTimeout <= 0 {
		cfg.RecoveryStallTimeout = store.DefaultRecoveryStallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg, nil
}

// minTimeoutFor is the shortest transaction timeout, in whole seconds,
// whose time budget holds n bytes.
func minTimeoutFor(n int) time.Duration {
	secs := (2*int64(n) + store.TransactionBudgetRate - 1) / store.TransactionBudgetRate
	return time.Duration(secs) * time.Second
}

// Broker is a backend's cluster, as the skeleton needs it.
type Broker interface {
	// Open checks the input partition, its snapshot topic and the output
	// topics the partition declares (creating those the backend is
	// configured to) and returns the partition's link to the cluster.
	// Nothing is taken over yet.
	Open(ctx context.Context, input, snap store.TopicPartition, outputs []string) (Link, error)
	// Leftover looks, after the takeover of txnID on link, for
	// transactions of the partition's own lineage that are still open on
	// its snapshot partition, the group's offsets partition or any
	// partition of a.Outputs: the takeover aborts every transaction its
	// coordinator knows, so one left open was forgotten, and the next
	// transaction of the same producer would commit it. It returns nil if
	// there is none or it aborted them (on every partition each touched),
	// else an error naming them that matches store.ErrHangingTransaction
	// (store/kafka's *HangingTransactionError). Called in Transactional
	// mode, for a partition with declared outputs.
	Leftover(ctx context.Context, a store.Acquisition, link Link, txnID string) error
	// Unstable diagnoses an acquisition whose assigned offset is held by a
	// transaction the takeover of txnID on link did not end (err wraps
	// store.ErrOffsetUnstable): it returns a store.HeldError naming txnID
	// and what holds the offset (store/kafka's *UnstableOffsetError, which
	// store/sim reports too). It never fails further.
	// aborted says that the broker aborted what held the offset (a
	// hanging transaction of txnID's own lineage, with the backend's
	// option to abort those): the skeleton resolves the offset once more.
	Unstable(ctx context.Context, a store.Acquisition, link Link, txnID string, err error) (aborted bool, _ error)
	// Claimed reports, before a takeover, what the coordinator knows of
	// txnID, whether snap holds any record, and (only when the id is
	// claimed and snap holds none) whether group has committed an offset
	// of input. A coordinator that does not answer is an error, and the
	// acquisition fails (to be retried); a cluster that cannot describe
	// ids answers ErrNoClaims, and the takeover goes ahead unchecked.
	Claimed(ctx context.Context, txnID string, snap, input store.TopicPartition, group string) (IDState, error)
	// Partitions returns topic's partition count, or an error matching
	// store.ErrMisconfigured if the topic does not exist.
	Partitions(ctx context.Context, topic string) (int32, error)
	// OpenTopic checks that partition tp of any topic exists and returns
	// its link for a follower of it: a Source read_committed in either
	// mode, and the topic's id and delete.retention.ms. Nothing is
	// created.
	OpenTopic(ctx context.Context, tp store.TopicPartition) (TopicLink, error)
	// Close releases the broker's clients, once every partition is
	// released.
	Close() error
}

// IDState is what a coordinator reports of a transactional.id, and what
// the snapshot partition and the group show, before a takeover
// (Broker.Claimed).
type IDState struct {
	// Claimed: some producer initialised the id and it has done more
	// than that: a transaction began or ended, or the id was initialised
	// again (its epoch is above 0). An id initialised once and left
	// there (a first start that died before its claim) is not.
	Claimed bool
	// Ongoing: a transaction of the id is open; Partitions are those it
	// wrote to.
	Ongoing    bool
	Partitions []store.TopicPartition
	// SnapshotsEmpty: the snapshot partition holds no record.
	SnapshotsEmpty bool
	// SnapshotsStable: the snapshot partition's last stable offset is
	// above 0. Its first record is then settled (a finished transaction's,
	// or a marker), and no loss of open transactions' records, such as a
	// broker losing an unreplicated tail, can leave it empty again.
	SnapshotsStable bool
	// GroupCommitted: the group has a committed offset of the input
	// partition (asked only when Claimed and SnapshotsEmpty).
	GroupCommitted bool
}

// TopicLink is a follower's connection to a partition of any topic.
type TopicLink interface {
	// Source returns a read_committed reader of the partition positioned
	// at from (0: the log start), and what releases it.
	Source(ctx context.Context, from int64) (readloop.Source, func(), error)
	// Snapshots describes the topic as OpenTopic found it.
	Snapshots() SnapshotTopic
	// Release closes what the link holds.
	Release()
}

// Link is one acquired partition's connection to the cluster.
type Link interface {
	// Takeover initialises the partition's transactional producer under
	// txnID, which fences the previous owner's producer and aborts its
	// unfinished transaction (I7). Transactional mode only; called once,
	// before the assigned offset is resolved.
	Takeover(ctx context.Context, txnID string) error
	// Claim commits a transaction holding only marker, on the snapshot
	// partition, right after the takeover of a partition whose snapshot
	// partition holds no settled record (its last stable offset is 0):
	// from then on it holds a record for good, which is how a
	// later acquisition of the id tells this application's from another
	// one's (checkClaim). Transactional mode only.
	Claim(ctx context.Context, marker wire.Record, id store.GroupIdentity) error
	// Transact runs one transaction of the group commit with id, already
	// read live and checked valid (I1, I4): all of b becomes durable with
	// the fenced commit of b.Offset, or none of it. Transactional mode.
	// It returns the offset after the last record it wrote to the
	// snapshot partition (a committed transaction always writes one: a
	// snapshot or an offset marker).
	Transact(ctx context.Context, b groupcommit.Batch, id store.GroupIdentity) (end int64, err error)
	// Produce writes recs to the snapshot partition, in order, with a
	// non-transactional producer, and returns each one's outcome once
	// every one has landed or failed. Plain mode.
	Produce(ctx context.Context, recs []wire.Record) []error
	// CommitOffset commits offset through the consumer group with id (a
	// plain OffsetCommit, no transaction). Plain mode.
	CommitOffset(ctx context.Context, id store.GroupIdentity, offset int64) error
	// Source returns a reader of the snapshot partition for one recovery,
	// read_committed in Transactional mode, positioned at from (0: the
	// log start), and what releases it.
	Source(ctx context.Context, from int64) (readloop.Source, func(), error)
	// AbortedAcross returns the first offset of a transaction on the
	// snapshot partition that was aborted at or after at and whose
	// records start below it (found false: none). Transactional mode.
	AbortedAcross(ctx context.Context, at int64) (first int64, found bool, err error)
	// Snapshots describes the snapshot topic as Open found it.
	Snapshots() SnapshotTopic
	// Release closes what the link holds (its producer), after the
	// partition's write path is closed, or when an acquisition fails after
	// Open. A partition released on re-acquisition is closed again by its
	// caller: later calls must do nothing.
	Release()
}

// SnapshotTopic is what a delta recovery checks of the snapshot topic.
type SnapshotTopic struct {
	// ID is the topic's id.
	ID [16]byte
	// DeleteRetention is its delete.retention.ms: how long a tombstone
	// outlives the compaction that reaches it.
	DeleteRetention time.Duration
}

// Backend is the shared half of a store.Backend.
type Backend struct {
	cfg    Config
	broker Broker
	life   context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	parts map[*Partition]struct{}
	// held is the handle this process holds per input partition in
	// Transactional mode. A re-acquisition's takeover fences the old
	// handle's producer, so the old handle is released then.
	held   map[store.TopicPartition]*Partition
	closed bool
}

// New returns the skeleton of a backend over broker; cfg must be checked
// (Config.Check).
func New(cfg Config, broker Broker) *Backend {
	life, cancel := context.WithCancel(context.Background())
	return &Backend{cfg: cfg, broker: broker, life: life, cancel: cancel,
		parts: map[*Partition]struct{}{}, held: map[store.TopicPartition]*Partition{}}
}

// Config is the checked configuration.
func (b *Backend) Config() Config { return b.cfg }

// Mode reports the backend's mode.
func (b *Backend) Mode() store.Mode { return b.cfg.Mode }

// TransactionalID is the transactional.id of an input partition's producer.
func (b *Backend) TransactionalID(input store.TopicPartition) string {
	return store.TransactionalID(b.cfg.TransactionalIDPrefix, input)
}

// SnapshotPartition is the snapshot partition of an input partition:
// partition N of the snapshot topic holds input partition N's keys.
func (b *Backend) SnapshotPartition(input store.TopicPartition) store.TopicPartition {
	return store.TopicPartition{Topic: b.cfg.SnapshotTopic(input.Topic), Partition: input.Partition}
}

// Acquire takes one input partition over: the topic checks, the takeover
// (Transactional: before anything reads, I7), the assigned offset resolved
// after it (so the seed is never older than a commit that landed, I3),
// then the write path seeded with that offset.
func (b *Backend) Acquire(ctx context.Context, a store.Acquisition) (store.Partition, error) {
	if err := b.checkAcquisition(ctx, a); err != nil {
		return nil, err
	}
	snap := b.SnapshotPartition(a.Input)
	link, err := b.broker.Open(ctx, a.Input, snap, a.Outputs)
	if err != nil {
		return nil, err
	}
	txnID := b.TransactionalID(a.Input)
	claim := false
	if b.cfg.Mode == store.Transactional {
		if claim, err = b.takeover(ctx, a, snap, link, txnID); err != nil {
			link.Release()
			return nil, err
		}
	}
	assigned, err := b.resolve(ctx, a, link, txnID)
	if err == nil && claim {
		id := a.Identity.CurrentIdentity()
		err = link.Claim(ctx, wire.EncodeOffsetMarker(b.cfg.Application, assigned, id), id)
	}
	if err != nil {
		link.Release()
		return nil, err
	}
	p := b.newPartition(a, snap, link, assigned)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		p.release()
		return nil, store.ErrClosed
	}
	if prev := b.held[a.Input]; prev != nil && b.cfg.ReleaseSuperseded {
		// This process re-acquired the partition: the old handle's
		// producer is fenced by the new one's init; release it.
		prev.release()
	}
	if b.cfg.Mode == store.Transactional {
		b.held[a.Input] = p
	}
	b.parts[p] = struct{}{}
	b.cfg.Logger.Info("acquired snapshot partition", "input", a.Input.String(), "snapshots", snap.String(),
		"assigned_offset", assigned, "mode", b.cfg.Mode.String())
	return p, nil
}

// checkAcquisition checks what Acquire needs before it touches the
// broker: a live context, an identity reader, an application name and an
// open backend.
func (b *Backend) checkAcquisition(ctx context.Context, a store.Acquisition) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if a.Identity == nil {
		return fmt.Errorf("%s: acquire %s: an identity reader is required", b.cfg.Name, a.Input)
	}
	if b.cfg.Application == "" {
		// Checked here, not in Check: a backend that only follows topics
		// (Views) owns no state and needs no name.
		return fmt.Errorf("%s: acquire %s: %w", b.cfg.Name, a.Input, &store.ConfigError{Subject: "Config.Application", Problem: "empty",
			Fix: "name the application once, unique on the cluster like a group id: it names its snapshot topics (\"<application>-<input>-snapshots\"), its transactional ids and its records"})
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return store.ErrClosed
	}
	return nil
}

// takeover is a Transactional acquisition's takeover of txnID: the check
// that it fences no other application, the takeover itself, and then the
// transactions of the lineage left open on the declared outputs. It
// reports whether the caller commits a claim after it (checkClaim).
func (b *Backend) takeover(ctx context.Context, a store.Acquisition, snap store.TopicPartition, link Link, txnID string) (bool, error) {
	claim, err := b.checkClaim(ctx, a, snap, txnID)
	if err != nil {
		return claim, err
	}
	if err := link.Takeover(ctx, txnID); err != nil {
		return claim, err
	}
	if len(a.Outputs) > 0 {
		if err := b.broker.Leftover(ctx, a, link, txnID); err != nil {
			return claim, err
		}
	}
	return claim, nil
}

// resolve resolves the assigned offset after the takeover. An offset held
// by an open transaction goes to the broker (Unstable), and is resolved
// once more if the broker aborted the transaction.
func (b *Backend) resolve(ctx context.Context, a store.Acquisition, link Link, txnID string) (int64, error) {
	assigned, err := a.Resolve(ctx)
	if errors.Is(err, store.ErrOffsetUnstable) {
		var aborted bool
		if aborted, err = b.broker.Unstable(ctx, a, link, txnID, err); aborted {
			// Once: if the offset is still held, the caller retries the
			// acquisition later, as for any held offset.
			if assigned, err = a.Resolve(ctx); errors.Is(err, store.ErrOffsetUnstable) {
				_, err = b.broker.Unstable(ctx, a, link, txnID, err)
			}
		}
	}
	return assigned, err
}

// newPartition is the acquired partition, its write path seeded with
// the assigned offset: group commits in Transactional mode, plain writes
// otherwise.
func (b *Backend) newPartition(a store.Acquisition, snap store.TopicPartition, link Link, assigned int64) *Partition {
	p := &Partition{b: b, input: a.Input, snap: snap, identity: a.Identity, progress: a.Progress, link: link}
	if b.cfg.Mode == store.Transactional {
		p.w = groupcommit.New(b.life, groupcommit.Config{
			Input: a.Input, SnapshotTopic: snap.Topic, Outputs: a.Outputs, AssignedOffset: assigned,
			HeaderBytes: wire.ApplicationHeaderBytes(b.cfg.Application),
			MaxWrites:   b.cfg.MaxWritesPerTransaction, MaxBytes: b.cfg.MaxBytesPerTransaction, MaxValueBytes: b.cfg.MaxValueBytes,
			Now: b.cfg.Now, Observer: b.cfg.Observer, Position: p.Position, Inline: b.cfg.Inline, Defer: b.cfg.Defer,
		}, p.exec)
	} else {
		p.w = newPlainPath(p, assigned)
	}
	return p
}

// checkClaim refuses a takeover of txnID that would fence another
// application: one whose transactional.id prefix is this one's (the
// takeover would fence its producer, and its running partition would
// fail). The coordinator names no owner, but what the id's transactions
// touch does. Every transaction of this partition writes to its snapshot
// partition, and to nothing but that, the group's offsets and the
// declared outputs; and the first takeover of a snapshot partition with
// no settled record writes a claim there (claim: the caller commits one
// after the takeover). So the id is another application's when its open
// transaction writes elsewhere, or when it is claimed while the snapshot
// partition holds nothing and the group has committed nothing of the
// input (a new application meeting an id in use). A snapshot topic
// re-created under a running deployment keeps its group's offsets, and
// passes. A coordinator that does not answer fails the acquisition, which
// is retried; a cluster that cannot describe transactional.ids leaves
// the takeover unchecked and unclaimed.
func (b *Backend) checkClaim(ctx context.Context, a store.Acquisition, snap store.TopicPartition, txnID string) (claim bool, _ error) {
	group := a.Group
	if group == "" {
		group = a.Identity.CurrentIdentity().Group
	}
	st, err := b.broker.Claimed(ctx, txnID, snap, a.Input, group)
	switch {
	case errors.Is(err, ErrNoClaims):
		b.cfg.Logger.Warn("the cluster cannot say whose the transactional.id is; taking it over", "input", a.Input.String(),
			"transactional_id", txnID, "err", err)
		return false, nil
	case err != nil:
		// A coordinator moving or not loaded yet: the acquisition fails
		// and is retried, rather than take over an id that may be
		// another application's.
		return false, fmt.Errorf("%s: %s: checking whose transactional.id %q is: %w", b.cfg.Name, a.Input, txnID, err)
	}
	foreign := func(evidence string) error {
		return &store.ForeignStateError{Input: a.Input, Snapshots: snap, Application: b.cfg.Application, Offset: -1,
			TransactionalID: txnID, Evidence: evidence}
	}
	if st.Ongoing {
		for _, p := range st.Partitions {
			if p == snap || p.Topic == consumerOffsetsTopic || slices.Contains(a.Outputs, p.Topic) {
				continue
			}
			return false, foreign(fmt.Sprintf("its open transaction writes to %s, where partition %s of application %q never writes "+
				"(its snapshot partition is %s; if it wrote outputs there before, declare the topic as an output again)",
				p, a.Input, b.cfg.Application, snap))
		}
	}
	// Without a group to ask, a re-created snapshot topic cannot be told
	// from another application's id: the takeover goes ahead.
	if st.Claimed && st.SnapshotsEmpty && !st.GroupCommitted && group != "" {
		return false, foreign(fmt.Sprintf("it is in use, yet snapshot partition %s, where every owner of it in application %q writes first, holds no record, "+
			"and group %q has committed nothing of %s (if this application was reset on purpose, its topics and offsets deleted, wait for the id to expire, "+
			"transactional.id.expiration.ms after its last use, or give it another TransactionalIDPrefix)",
			snap, b.cfg.Application, group, a.Input))
	}
	// Claim also a partition whose only records are open transactions'
	// (another application's, hanging): they may yet vanish, and the
	// claim must outlive them.
	return !st.SnapshotsStable, nil
}

// ErrNoClaims: the cluster cannot describe transactional.ids (a broker
// before DescribeTransactions): Broker.Claimed's answer, on which the
// takeover goes ahead unchecked.
var ErrNoClaims = errors.New("the cluster cannot describe transactional.ids")

// consumerOffsetsTopic is where a transactional offset commit writes.
const consumerOffsetsTopic = "__consumer_offsets"

// Close releases every partition, then the broker's clients.
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed = true
	parts := b.parts
	b.parts = map[*Partition]struct{}{}
	b.held = map[store.TopicPartition]*Partition{}
	b.mu.Unlock()
	for p := range parts {
		p.release()
	}
	b.cancel()
	return b.broker.Close()
}

func (b *Backend) forget(p *Partition) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.parts, p)
	if b.held[p.input] == p {
		delete(b.held, p.input)
	}
}
