package store

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"math"
	"strings"
	"time"
)

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

// Compare orders partitions by topic, then partition number: -1, 0 or +1
// as tp is before, equal to or after other (for slices.SortFunc).
func (tp TopicPartition) Compare(other TopicPartition) int {
	if c := strings.Compare(tp.Topic, other.Topic); c != 0 {
		return c
	}
	return cmp.Compare(tp.Partition, other.Partition)
}

// TransactionalID is the transactional.id of input partition's producer in
// Transactional mode: "<prefix>-<input topic>-<partition>". It is stable,
// with nothing per assignment in it, so every owner of the partition shares
// it and a new owner's initialisation aborts what the previous one left
// open (I7). Every backend names its producers so.
func TransactionalID(prefix string, input TopicPartition) string {
	return fmt.Sprintf("%s-%s-%d", prefix, input.Topic, input.Partition)
}

// Mode selects how a backend binds snapshot writes to offset commits.
type Mode int8

const (
	// Transactional writes every snapshot in a Kafka transaction together
	// with a commit of the input offset made with the driving consumer's group
	// identity, so a stale owner's writes abort. This is the mode to run.
	Transactional Mode = iota + 1
	// Plain writes snapshots with a shared non-transactional producer and
	// commits offsets through the consumer group, with no binding between
	// the two. It is the baseline for benchmarks and reproduces the
	// corruption that Transactional prevents (kafka-flow#732).
	Plain
)

func (m Mode) String() string {
	switch m {
	case Transactional:
		return "transactional"
	case Plain:
		return "plain"
	}
	return fmt.Sprintf("Mode(%d)", int8(m))
}

// ParseMode parses "transactional" or "plain".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "transactional":
		return Transactional, nil
	case "plain":
		return Plain, nil
	}
	return 0, fmt.Errorf("store: unknown mode %q (want transactional or plain)", s)
}

// Defaults shared by every backend. They follow the design spec.
const (
	// DefaultMaxWritesPerTransaction caps the writes one transaction
	// carries: 16384, where the two caps meet at 1 KiB snapshots. On Kafka
	// 4.3.1, 40,000 writes of 50 bytes took 8.3x the plain producer's time
	// under the spec's cap of 256, 1.5x under 16384, the same as in one
	// transaction (docs/benchmarks.md, "Transaction size"). It stays
	// well below franz-go's MaxBufferedRecords (50,000), so one
	// transaction's records always fit in its producer's buffer.
	DefaultMaxWritesPerTransaction = 16384
	// DefaultMaxBytesPerTransaction caps the bytes one transaction carries
	// (wire.SnapshotBytes of its writes): 16 MiB, or the time budget of the
	// transaction timeout (TransactionBytesBudget) if that is less. On
	// Kafka 4.3.1, 41 MB of 10 KiB snapshots in transactions of 16 MiB
	// took as long as in transactions of 30 MiB (the budget of the default
	// timeout), and a third less than at 4 MiB (docs/benchmarks.md); 16 MiB
	// keeps half the default timeout's budget in reserve.
	DefaultMaxBytesPerTransaction = 16 << 20
	// TransactionBudgetRate is the write rate, in bytes per second, that
	// a transaction's time budget assumes: a transaction is never sized
	// above what this rate writes in half its transaction timeout
	// (TransactionBytesBudget). It is a floor, not an estimate: a single
	// Kafka 4.3 broker on loopback takes a 2.6 MB transaction's records
	// in 5 to 8 ms (docs/benchmarks.md), hundreds of times faster.
	TransactionBudgetRate = 1 << 20
	// DefaultRecoveryStallTimeout is how long a recovery read may make no
	// progress before it fails. It sits above the ~70 s an open transaction
	// takes to resolve at Kafka's defaults and below max.poll.interval.ms.
	DefaultRecoveryStallTimeout = 3 * time.Minute
	// DefaultTransactionTimeout is the producer's transaction.timeout.ms.
	DefaultTransactionTimeout = time.Minute
	// DefaultMaxValueBytes bounds a snapshot's key plus value so that its
	// record, with snapfence's headers, the record's framing and its
	// batch's header (about 120 bytes in all), fits one record batch of
	// franz-go's default ProducerBatchMaxBytes, 1,000,012 bytes (Kafka's
	// default message.max.bytes is 1,048,588). A round 1,000,000 would not
	// do: franz-go refuses a record above 999,889 bytes of key and value
	// with MESSAGE_TOO_LARGE, which fails the write's whole transaction on
	// every retry.
	DefaultMaxValueBytes = 999 * 1000
)

// TransactionBytesBudget is the time budget of a transaction as bytes:
// what TransactionBudgetRate writes in half of timeout, the producer's
// transaction timeout. A transaction is never sized above it, so that it
// can end well inside the timeout, after which the broker aborts it and
// fences the producer. The budget bounds MaxBytesPerTransaction; it is
// checked when a backend is configured, not with a clock while writes
// queue, so which writes share a transaction still depends only on the
// calls.
func TransactionBytesBudget(timeout time.Duration) int {
	return int(min(timeout.Seconds()/2*TransactionBudgetRate, float64(math.MaxInt32)))
}

// Snapshot is the stored state of one key.
type Snapshot struct {
	Key []byte
	// Value is the encoded state; nil for a tombstone.
	Value []byte
	// Offset is the input offset of the last event folded into this state.
	// Tombstones keep it so that replays after a delete are still filtered.
	Offset int64
	// Tombstone marks a delete of the key.
	Tombstone bool
	// Timers are the key's pending timers, carried with its state so that
	// they move and survive with it (engine.Result.SetTimer); nil for a
	// key without timers, whose record is then byte-identical to one of a
	// store without timers. A tombstone has none: compaction removes it.
	Timers []Timer
}

// Timer is a pending timer of a key: when it is due, by which clock.
type Timer struct {
	Kind TimerKind
	// At is when the timer is due, in Unix milliseconds.
	At int64
}

// TimerKind is the clock a Timer follows.
type TimerKind byte

const (
	// ProcessingTime timers follow the consumer's clock.
	ProcessingTime TimerKind = 'p'
	// EventTime timers follow the input records' timestamps.
	EventTime TimerKind = 'e'
)

func (k TimerKind) String() string {
	switch k {
	case ProcessingTime:
		return "processing-time"
	case EventTime:
		return "event-time"
	}
	return fmt.Sprintf("TimerKind(%d)", byte(k))
}

// Backend hands out partitions of a snapshot store, and followers of
// snapshot partitions and of other topics. It carries what the engine
// asks of a store; a backend without a feature says so with a zero value
// or an error, never by lacking a method.
type Backend interface {
	// Acquire takes ownership of the snapshot store of one input partition.
	// In Transactional mode it performs the takeover before it returns: the
	// previous owner's producer is fenced and its unfinished transaction is
	// aborted (I7). The engine calls it for a newly assigned partition, off
	// its polling goroutine, and concurrently for distinct partitions.
	Acquire(ctx context.Context, a Acquisition) (Partition, error)
	// Mode reports the backend's mode.
	Mode() Mode
	// Application is the application whose state the backend holds
	// (store/kafka's and store/sim's Config.Application); "" if it has
	// none (it only follows topics). The engine names its cache
	// directory's marker after it, so that a cache is never reused by
	// another application.
	Application() string
	// SnapshotPartition is the snapshot partition that holds input's
	// snapshots; the zero TopicPartition if the backend cannot say.
	SnapshotPartition(input TopicPartition) TopicPartition
	// CanFollow reports whether Follow, Partitions and FollowTopic work;
	// when it is false they fail with an error matching
	// errors.ErrUnsupported. store/kafka's and store/sim's backends can.
	CanFollow() bool
	// Follow opens a follower of input's snapshot partition, positioned
	// at from (nil: the log start): it reads the partition
	// read_committed, writing nothing and fencing no one, as a standby
	// replica does, for an input partition the backend has not acquired.
	// A from that is no valid base for a delta (the checks of
	// Partition.Recover from a checkpoint) is refused at once with a
	// *CheckpointError; the caller follows from the start instead. Plain
	// mode refuses every follower (nothing fences another writer, so no
	// copy is vouched for), with a *CheckpointError too.
	Follow(ctx context.Context, input TopicPartition, from *Checkpoint) (Follow, error)
	// Partitions returns topic's partition count. A topic that does not
	// exist is an error matching ErrMisconfigured (a *ConfigError or the
	// backend's own missing-topic error).
	Partitions(ctx context.Context, topic string) (int32, error)
	// FollowTopic follows partition tp of any topic read_committed, in
	// either Mode: records of aborted transactions are never returned,
	// and nothing past an open transaction is read until it ends. It is
	// what a view of a snapshot topic or a table of a compacted topic of
	// plain key/values reads with (package engine/view). The records come as
	// Snapshots of their raw key and value: Offset is the record's own
	// offset, and a record whose value is null is a Tombstone (a delete
	// of its key in a compacted topic). Nothing is decoded, so no record
	// is corrupt; control records are skipped. from and the checkpoints
	// returned follow Follow's rules (a from that is no valid base for tp
	// is refused with a *CheckpointError). Nothing fences the writers of
	// a topic snapfence does not write: the follower shows what they
	// committed, stale or not.
	FollowTopic(ctx context.Context, tp TopicPartition, from *Checkpoint) (Follow, error)
	// Close releases every partition and the backend's clients.
	Close() error
}

// Acquisition describes a partition being taken over.
type Acquisition struct {
	// Input is the input topic-partition whose snapshots are acquired.
	Input TopicPartition
	// AssignedOffset is the offset the consumer will resume the input from
	// (the group's committed offset, or the reset offset). It seeds the
	// staged committable offset (I3).
	AssignedOffset int64
	// Identity reads the driving consumer's current group identity. It is
	// called for every transaction and must never return a copy captured
	// at assignment.
	Identity IdentityReader
	// Group is the consumer group whose offsets the partition commits
	// (Identity's group; known before the member's first join, which
	// Identity is not). The takeover check reads its committed offsets;
	// empty: Identity's group, if it has one.
	Group string
	// ResolveAssignedOffset, if set, is called after the takeover and
	// before Acquire returns; its result replaces AssignedOffset. The
	// engine reads the group's committed offset there (with RequireStable,
	// which no longer waits once the previous owner's transaction is
	// aborted), so the seed is never older than a commit that landed.
	// An offset still held by a transaction the takeover did not end is
	// answered at once with an error wrapping ErrOffsetUnstable; Acquire
	// then fails with an *UnstableOffsetError that diagnoses the holder,
	// and the caller retries later.
	ResolveAssignedOffset func(ctx context.Context) (int64, error)
	// Outputs are the topics the partition's exactly-once batches
	// (StartCommitBatch) may write outputs to. A batch's output for any other
	// topic is refused before its transaction begins (an
	// *UndeclaredOutputError). The store checks at Acquire that each
	// exists, and after the takeover looks on every partition of them, as
	// on the snapshot and offsets partitions, for a transaction of the
	// partition's own lineage that a failure left open with no
	// coordinator to end it: the next transaction of the same producer
	// would commit it along with its own records. Such a transaction is
	// aborted (store/kafka's AbortHangingTransactions) or reported, on
	// every partition it touched, before the partition writes anything.
	// Empty for a partition that writes no outputs.
	Outputs []string
	// Progress, if set, hears every recovery read of the acquired
	// partition: its start, each advance and its end, as a Backend's
	// RecoveryObserver does (both hear each event). It is called on the
	// goroutine that iterates Partition.Recover, serially; it must not
	// block. The engine shows a partition's recovery progress with it.
	Progress func(RecoveryEvent)
}

// Resolve returns the assigned offset, resolving it after the takeover if
// ResolveAssignedOffset is set. Backends call it in Acquire.
func (a Acquisition) Resolve(ctx context.Context) (int64, error) {
	if a.ResolveAssignedOffset == nil {
		return a.AssignedOffset, nil
	}
	off, err := a.ResolveAssignedOffset(ctx)
	if err != nil {
		return 0, fmt.Errorf("store: %s: resolving the assigned offset: %w", a.Input, err)
	}
	return off, nil
}

// Partition is one acquired input partition's snapshot store: what the
// engine calls on it, and Commit. Its methods are safe for concurrent
// use; writes of distinct keys, from one call or from concurrent calls,
// are group-committed. Writes and commits are started (queued) and their
// outcomes come with a Pending; a caller that waits for one calls its
// Wait (store/storetest has the blocking forms).
type Partition interface {
	// Recover streams the snapshots of the partition as of the moment
	// recovery starts, in log order: a later snapshot of a key supersedes
	// an earlier one, and tombstones are yielded too. The iteration stops
	// after the first error. See RecoveryStalledError and
	// CorruptRecordError.
	//
	// from nil reads every snapshot, from the log start. A non-nil from is
	// a checkpoint (Position) of a local copy that already holds what lies
	// below from.Offset: the read streams the snapshots from there up to
	// the high watermark captured when it starts. It first checks that
	// from is still a valid base (CheckpointError lists what makes it
	// not); if it is not, the first and only value yielded is a
	// *CheckpointError, before anything is read, and the caller recovers
	// in full (from nil) instead.
	Recover(ctx context.Context, from *Checkpoint) iter.Seq2[Snapshot, error]
	// Position is the checkpoint of a local copy that holds every
	// snapshot this partition recovered and every snapshot write it
	// reported durable: the snapshot partition's committed content below
	// cp.Offset. ok is false in Plain mode (no fence keeps another writer
	// out of the partition), before a recovery has finished, and after
	// any transaction of the partition failed (its outcome may be
	// unknown, so nothing after it is vouched for).
	Position() (cp Checkpoint, ok bool)
	// StartWriteBatch stores snaps (snapshots or tombstones): they are
	// queued, in order and with no other write between them, before it
	// returns, as if written one after another, and the outcomes come
	// with the Pending (errs[i] is snaps[i]'s; nil: durable). A write
	// refused before queueing (ErrReservedKey, a ValueTooLargeError, ...)
	// fails alone. Writes started one after another keep that order in
	// the queue, so a caller can fold on while its writes are in flight
	// and still make the same transactions on every run; the engine
	// flushes through one call per batch, which keeps a run over the
	// simulated cluster reproducible from its seed. If ctx ends, the
	// writes not yet in a transaction leave the queue and fail with ctx's
	// error; those already in one fail with it too, as their outcome is
	// unknown to the caller.
	StartWriteBatch(ctx context.Context, snaps []Snapshot) Pending
	// StartCommit stages offset as the committable offset (every input
	// event below it is covered by a durable snapshot of its key) and
	// queues its commit before it returns; the Pending's one outcome is
	// the commit's. An offset below the one already staged is ignored:
	// the staged offset is committed again. The commit rides with queued
	// writes (never ahead of a write queued before it, I2; a write
	// started after it goes in a later transaction, so the Pending's
	// position is as of the commit's own end) or, when none are queued,
	// commits the offset alone. It depends on every write
	// started before it on this partition: if one of them failed, was
	// refused or left the queue, the commit is refused with
	// ErrEarlierWriteFailed and nothing is committed, so that a caller who
	// starts writes and the commit that covers them, without waiting in
	// between, never commits past a write that did not land.
	StartCommit(ctx context.Context, offset int64) Pending
	// Commit is StartCommit for a caller that waits for each of its
	// writes before it commits: the same staging and riding, without the
	// dependency on earlier writes (the caller saw any of them fail), and
	// it returns once the offset is committed. The engine starts its
	// commits instead; the contract suite pins with it what a commit does
	// after a failed write or commit (I3, I4).
	Commit(ctx context.Context, offset int64) error
	// StartCommitBatch queues b as one transaction of its own, before it
	// returns: its snapshots, its outputs and the fenced commit of
	// b.Offset; it is the write path of exactly-once output
	// (consume-transform-produce). The Pending's one outcome is nil only
	// when the transaction committed. Any error means the outcome is not
	// known to have committed: the caller must rewind to the committed
	// state (Acquire again, Recover, resume from CommittedOffset) and fold
	// the input again, never re-send b's outputs. The per-transaction
	// write cap does not apply: the caller sizes its batches. A batch
	// with an invalid record (ErrReservedKey, a ValueTooLargeError, an
	// output without a topic or for the snapshot topic) is refused whole,
	// before anything is sent. A Plain-mode partition has no transaction
	// to put it in and refuses every batch with an error wrapping
	// ErrNotTransactional. A batch started behind another one's
	// transaction runs after it whatever its outcome: a caller whose next
	// batch depends on the previous one's (an exactly-once flow) waits
	// for it first.
	StartCommitBatch(ctx context.Context, b Batch) Pending
	// CommittedOffset is the offset most recently committed through this
	// partition, or the assigned offset if none was.
	CommittedOffset() int64
	// Close releases the partition without committing anything. Queued
	// writes fail with ErrClosed.
	Close() error
}

// Pending is a write, a commit or a batch a Partition's Start method
// queued: its outcome once known. A backend whose calls complete in the
// caller (store/sim) has the outcome before Start returns.
type Pending interface {
	// Done is closed once the outcome is known.
	Done() <-chan struct{}
	// Wait returns the outcomes (one per snapshot of a StartWriteBatch,
	// one for a StartCommit or StartCommitBatch; nil: durable) once they
	// are known. If ctx ends first it returns ctx's error for each: the
	// write goes on, its outcome unknown to the caller, who must treat
	// it as not durable.
	Wait(ctx context.Context) []error
	// Position is the partition's Position as it was when the last of
	// what was queued ended, before the outcome was delivered: the
	// checkpoint of a copy holding every write reported durable up to and
	// including this one, and nothing the partition wrote after it. ok is
	// false if nothing was queued, if it failed, and wherever Position
	// itself would have been. Valid once Done is closed.
	Position() (cp Checkpoint, ok bool)
}

// Checkpoint is how far a local copy of a snapshot partition reflects
// it: for every key, the copy holds the last committed snapshot below
// Offset, or a later committed one. Partition.Position hands checkpoints
// out and Partition.Recover takes them back; the copy and its
// checkpoint must be kept together (a copy ahead of its checkpoint is
// fine, since the delta reads the later snapshots again; one behind it is
// not).
type Checkpoint struct {
	// TopicID is the snapshot topic's id: a topic deleted and created
	// again under the same name has a new one.
	TopicID [16]byte
	// Offset is the snapshot-partition offset the copy reflects.
	Offset int64
	// At is no later than the append of any record at or above Offset
	// (the start of the read or transaction that set Offset). A
	// tombstone written after At may be compacted away once
	// delete.retention.ms has passed since, so Recover refuses a
	// checkpoint that old: the copy would bring a deleted key back.
	At time.Time
}

// The reasons a checkpoint is refused (CheckpointError.Reason).
const (
	// CheckpointPlain: a Plain-mode partition keeps no checkpoint.
	CheckpointPlain = "plain_mode"
	// CheckpointTopicRecreated: the snapshot topic's id changed.
	CheckpointTopicRecreated = "topic_recreated"
	// CheckpointBelowLogStart: the log start is above the checkpoint
	// (retention or DeleteRecords removed records the copy never saw).
	CheckpointBelowLogStart = "below_log_start"
	// CheckpointAboveLogEnd: the high watermark is below the checkpoint
	// (the log was truncated, or the copy is not this log's).
	CheckpointAboveLogEnd = "above_log_end"
	// CheckpointTombstoneRetention: the checkpoint is older than the
	// snapshot topic's delete.retention.ms (less a margin for clock skew).
	CheckpointTombstoneRetention = "older_than_delete_retention"
	// CheckpointAbortedTransaction: a transaction whose records start
	// below the checkpoint was aborted at or after it. A local copy holds
	// a state once its transaction is acknowledged as committed, so the
	// copy may hold states that are not in the log: a broker that lost a
	// committed transaction's markers in an unclean failure leaves it open,
	// and the abort that ends it (the store's, with
	// AbortHangingTransactions, or an operator's) drops it.
	CheckpointAbortedTransaction = "aborted_transaction"
)

// CheckpointError says why a checkpoint is not a valid base for a delta
// recovery. It matches ErrCheckpointUnusable.
type CheckpointError struct {
	Snapshots TopicPartition
	// Reason is one of the Checkpoint* constants.
	Reason     string
	Checkpoint Checkpoint
	// Detail says what was found (the log start, the retention, ...).
	Detail string
}

func (e *CheckpointError) Error() string {
	return fmt.Sprintf("store: %s: checkpoint at offset %d is not usable (%s): %s", e.Snapshots, e.Checkpoint.Offset, e.Reason, e.Detail)
}

// Is matches ErrCheckpointUnusable.
func (e *CheckpointError) Is(target error) bool { return target == ErrCheckpointUnusable }

// Output is a record for an output topic, produced by the partition's
// transactional producer inside an exactly-once Batch. It goes to the
// partition of Topic that Kafka's default partitioner picks for Key
// (OutputPartition), so a keyed downstream sees one key's outputs in order.
type Output struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []Header
}

// Header is one record header: of an output record, or of an input record
// as the engine hands it to the fold.
type Header struct {
	Key   string
	Value []byte
}

// Batch is the content of one exactly-once transaction: the snapshots of
// every key the batch's input changed, the outputs its folds made, and the
// input offset after the batch. All of it becomes visible to read_committed
// readers together, or none of it does.
type Batch struct {
	Snapshots []Snapshot
	Outputs   []Output
	// Offset is the input offset the transaction commits, with the group
	// identity read for it, so a stale owner's batch aborts.
	Offset int64
}

// TransactionEvent describes one finished transaction of a partition (in
// Plain mode: one flush of writes, or one offset commit).
type TransactionEvent struct {
	Input TopicPartition
	// Writes are the snapshots the transaction carried, in order.
	Writes []Snapshot
	// Outputs are the output records of an exactly-once batch, in order.
	Outputs []Output
	// Offset is the input offset the transaction committed (Transactional)
	// or the offset commit carried (Plain, when OffsetAdvanced).
	Offset int64
	// OffsetAdvanced reports whether the transaction carried a commit of
	// the offset.
	OffsetAdvanced bool
	// Identity is the group identity read for this transaction.
	Identity GroupIdentity
	// Err is nil when the transaction committed.
	Err error
	// Duration is the time the transaction took on the backend's clock.
	Duration time.Duration
}

// Observer receives an event for every finished transaction. Calls must
// not block. In Transactional mode they are serial per partition; in Plain
// mode, where writes do not queue, they may be concurrent.
type Observer interface {
	OnTransaction(TransactionEvent)
}

// RecoveryEvent reports a recovery read's progress: its start (the target
// captured, Position at the log start), every advance of its position, and
// its end.
type RecoveryEvent struct {
	Snapshots TopicPartition
	// Target is the high watermark captured when the read started; the
	// read ends when Position reaches it.
	Target int64
	// Position is the next offset the read will return.
	Position int64
	// Records is how many snapshots (tombstones included) the read has
	// returned so far.
	Records int64
	// Done marks the last event of a read: it reached Target (Err nil) or
	// failed with Err. A read its caller stops early reports no end.
	Done bool
	Err  error
}

// RecoveryObserver is an optional extension of Observer: a backend whose
// Observer also implements it reports every recovery read's progress.
// Calls must not block; they are serial per read. A position that stops
// short of the target is a read waiting for an open transaction (or a
// lost log tail): the stall deadline then decides.
type RecoveryObserver interface {
	OnRecovery(RecoveryEvent)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(TransactionEvent)

// OnTransaction calls f.
func (f ObserverFunc) OnTransaction(e TransactionEvent) { f(e) }

// Observers returns an Observer that passes every event to each of obs,
// in order, so several observers (the engine's metrics, a test's watch, an
// audit log) can watch one backend. It implements RecoveryObserver too:
// a recovery event goes to each of obs that implements RecoveryObserver.
// Nil observers are skipped; an Observers value among obs is flattened.
// The calls keep the backend's rules: none may block, and each call
// returns once every observer has had the event.
func Observers(obs ...Observer) Observer {
	var f fanOut
	for _, o := range obs {
		switch o := o.(type) {
		case nil:
		case fanOut:
			f = append(f, o...)
		default:
			f = append(f, o)
		}
	}
	return f
}

// fanOut is Observers' observer.
type fanOut []Observer

var _ RecoveryObserver = fanOut(nil)

// OnTransaction passes e to each observer.
func (f fanOut) OnTransaction(e TransactionEvent) {
	for _, o := range f {
		o.OnTransaction(e)
	}
}

// OnRecovery passes e to each observer that implements RecoveryObserver.
func (f fanOut) OnRecovery(e RecoveryEvent) {
	for _, o := range f {
		if r, ok := o.(RecoveryObserver); ok {
			r.OnRecovery(e)
		}
	}
}
