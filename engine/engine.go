// Package engine is snapfence's keyed fold engine: users give a fold and a
// codec for their state; the engine gives them correct per-key state across
// rebalances, crashes and restarts.
//
// # Semantics
//
// Per input partition a flow, per key a state. When the consumer group
// assigns a partition, the engine acquires its snapshot store inside the
// partitions-assigned callback (the takeover aborts the previous owner's
// unfinished transaction), recovers every snapshot into the local cache
// (Pebble), and seeds the committable offset with the group's committed
// offset.
//
// Each snapshot carries the offset of the last event folded into it. After
// recovery the input is replayed from the committed offset, and records at
// or below a key's snapshot offset are skipped for that key; deletes keep
// their offset too. So after any sequence of rebalances and crashes a key's
// state is the fold of each of its input events exactly once. Outputs are
// at-least-once through Emit: a replayed batch may emit again. Under
// ExactlyOnce they go into the partition's transactions instead, with the
// snapshots and the offset commit that cover them, and a read_committed
// consumer sees each input record's outputs exactly once.
//
// A fold (or a tick, or a timer handler) may set timers for its key
// (Result.SetTimer): Config.OnTimer runs each once when it is due, by the
// consumer's clock or by the records' timestamps. A key's timers are kept
// in its snapshot with its state, and a firing's effect and the timer's
// removal are one change, so a timer fires exactly once in the state's
// sense across crashes, rebalances and restarts (docs/design.md,
// "Per-key timers").
//
// The committable offset of a partition is the smallest offset still held
// by a key whose change is not durable, or the last consumed offset + 1. It
// never passes a change that is not in a committed snapshot. It is
// committed, with the dirty keys, every CommitInterval and on revoke (and
// the dirty keys flushed between commits every PersistInterval, when it is
// set below CommitInterval).
//
// After every poll the engine publishes the consumer's group identity to
// the store, which reads it for every transaction: a rebalance can bump the
// generation without touching this member's partitions and, under two of
// the three protocols, without any callback. An identity that is not valid
// yet is never published, so a flush before the first join fails loudly.
//
// Revoke: the partitions-revoked callback flushes the partition's dirty keys
// and commits (unless Config.NoFlushOnRevoke), then tears the flow down
// before it returns. A fence there is logged and swallowed: the new owner replays. A
// fence on the periodic path stops the partition's flow loudly and restarts
// it from the committed state if the member still owns it.
//
// Revoke-time outcomes per protocol (the spec's table): classic eager
// revokes before rejoining, so the flush commits; the consumer protocol
// (KIP-848) keeps the member on its epoch until it acknowledges, so the
// flush commits; classic cooperative has moved the member to the new
// generation by revoke time while the published identity is the one read
// after the previous poll, so its flush is fenced (safe: the new owner
// replays). A member evicted before the flush is fenced under all three.
//
// A partition whose committed offset is held by a transaction its takeover
// did not end (another application's transactional.id, or a transaction the
// coordinator forgot after an unclean broker failure) is not waited for
// inside the callback: it stays paused, its acquisition is retried after
// later polls while the other partitions fold and commit, and after
// Config.UnstableOffsetTimeout Run returns a *kafka.UnstableOffsetError that
// names the transaction and the command that aborts it. This holds at
// assignment too: the Kafka source fetches each partition from the offset
// the engine resolved for it alone, so a held offset holds back no
// partition assigned with it (as franz-go's and Java's group consumers
// would, fetching an assignment's offsets all at once). Once the holding
// transaction ends, the partition resumes at its next retry.
//
// # Tables
//
// Engine.Get and Engine.Range read a running engine's state from any
// goroutine: committed (ReadCommitted, what a crash leaves; the default)
// or latest folded (ReadLatest), with the input offset each answer
// reflects; a partition this instance does not serve answers a
// *NotOwnedError. A view.View (package engine/view) is a read-only
// replica of another engine's snapshot topic, or of a compacted topic of
// plain key/values, in any process; a fold looks one up while it runs (a lookup join), and
// Config.Tables makes each partition wait, before it folds, until its
// tables have caught up. Per-key timers (Result.SetTimer, Config.OnTimer)
// are described above. docs/design.md, "Tables", gives the guarantees,
// and what a join costs a replay.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snapfence/snapfence/engine/internal/cache"
	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/store"
)

// Record is an input record as the fold sees it.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	// Timestamp is the record's own time (event time): its producer's, or
	// the log's append time.
	Timestamp time.Time
	Headers   []store.Header
	// Now is processing time: the time of the poll that folds the record,
	// on the input's clock (the wall clock on Kafka, the virtual clock on
	// the simulated cluster), the clock processing-time timers fire by.
	// A fold that sets Timer{Kind: ProcessingTime, At: rec.Now.Add(d)}
	// has it fire d later, in virtual time too; time.Now() in a fold
	// cannot be driven by a test.
	Now time.Time
}

// Output is a record the fold asks to emit: to Config.Emit (or StartEmit), or under
// Config.ExactlyOnce into the partition's transactions.
type Output struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []store.Header
}

// FoldFunc folds one record into a key's state; exists is false for a new
// or deleted key.
type FoldFunc[S any] func(key []byte, state S, exists bool, rec Record) (Result[S], error)

// TickFunc is called for every live key every TickInterval.
type TickFunc[S any] func(key []byte, state S, now time.Time) (Result[S], error)

// Codec encodes a state for the snapshot store and the local cache. The
// engine decodes a key's state when it is first touched and encodes it only
// for a snapshot write or when memory runs over HotKeys.
type Codec[S any] interface {
	Encode(S) ([]byte, error)
	Decode([]byte) (S, error)
}

// Defaults of Config.
const (
	// DefaultCommitInterval is CommitInterval's default outside
	// ExactlyOnce: a crash re-emits about a second of outputs at most,
	// and committed reads are about a second old at most, for about 0.75x
	// the events/s of a minute on a backlog whose keys change within the
	// second (docs/benchmarks.md, "Commit interval").
	DefaultCommitInterval = time.Second
	// DefaultPersistInterval is DefaultCommitInterval: PersistInterval
	// follows CommitInterval unless set.
	//
	// Deprecated: leave PersistInterval 0 to follow CommitInterval.
	DefaultPersistInterval = DefaultCommitInterval
	// DefaultHotKeys is HotKeys' default: the decoded states kept in
	// memory per partition.
	DefaultHotKeys = 1 << 16
	// DefaultFlushBatch is FlushBatch's default: the snapshots one flush
	// hands to the store at once.
	DefaultFlushBatch = 1024
	// DefaultMaxWritesInFlight is MaxWritesInFlight's default: the
	// snapshots a partition may have in flight, sixteen flush batches, a
	// transaction at the store's default cap (16384 writes), so that an
	// at-least-once commit of that many dirty keys fits in one.
	DefaultMaxWritesInFlight = 16 * DefaultFlushBatch
	// DefaultMaxEmitsInFlight is MaxEmitsInFlight's default: four polls'
	// outputs (40,000 at DefaultMaxPollRecords) fit in a franz-go
	// producer's buffer (50,000 records by default), so starting one never
	// waits for the buffer.
	DefaultMaxEmitsInFlight = 4
	// DefaultExactlyOnceCommitInterval is CommitInterval's default under
	// ExactlyOnce, as Kafka Streams' commit.interval.ms under
	// exactly_once_v2: outputs wait for their transaction, so the
	// interval is the floor of their latency.
	DefaultExactlyOnceCommitInterval = 100 * time.Millisecond
	// DefaultMaxTransactionRecords caps the records (snapshots plus
	// outputs) of one exactly-once transaction: the store's count cap
	// (store.DefaultMaxWritesPerTransaction), so that a batch is sealed by
	// CommitInterval on a busy partition, not by the cap (at 4096 the
	// exactly-once output benchmark sealed a batch every ~2000 inputs, a
	// snapshot for nearly every input).
	DefaultMaxTransactionRecords = 16384
	// DefaultMaxTransactionBytes caps the output bytes (keys plus values)
	// of one exactly-once transaction: the store's byte cap
	// (store.DefaultMaxBytesPerTransaction).
	DefaultMaxTransactionBytes = 16 << 20
	// DefaultUnstableOffsetTimeout is how long a partition's acquisition
	// waits for its committed offset to be released by a transaction the
	// takeover did not end: the store's default recovery stall timeout.
	DefaultUnstableOffsetTimeout = store.DefaultRecoveryStallTimeout
	// DefaultMaxOutputBytes is MaxOutputBytes' default: the store's
	// snapshot limit (store.DefaultMaxValueBytes, 999,000 bytes), which
	// a record batch of franz-go's default ProducerBatchMaxBytes
	// (1,000,012 bytes) holds with the record's framing.
	DefaultMaxOutputBytes = store.DefaultMaxValueBytes
)

// Config configures an Engine. Zero values take the defaults given.
type Config[S any] struct {
	// Fold is required.
	Fold FoldFunc[S]
	// Tick is optional; it runs every TickInterval, which must then be
	// above 0 (and 0 without a Tick).
	Tick         TickFunc[S]
	TickInterval time.Duration
	// OnTimer runs a key's timer when it is due (Result.SetTimer); nil by
	// default, and then a Result that sets a timer fails with
	// ErrNoTimerHandler. Tick stays for work over the whole partition;
	// timers are per key, and cost nothing for keys without them.
	OnTimer OnTimerFunc[S]
	// Codec is required.
	Codec Codec[S]
	// Store is the snapshot store; required.
	Store store.Backend
	// Dir is where the local cache lives on disk; empty keeps the cache
	// in memory. The engine creates Dir if it is missing and keeps the
	// cache in Dir/snapfence-cache (CacheDirName), a Pebble directory it
	// creates and marks as its own with a file SNAPFENCE in it
	// (CacheMarkerName). It never deletes or writes anything else in Dir,
	// so Dir may be shared: ".", a data directory, a volume with
	// lost+found.
	//
	// New refuses, touching nothing, a Dir/snapfence-cache that is not
	// the engine's (a file, or a directory with anything in it and no
	// marker: ErrCacheDirNotOwned), whose marker names a format it does
	// not know (ErrCacheDirFormat), or that another engine, in this
	// process or another, has open (ErrCacheDirInUse): each engine needs
	// a Dir of its own. Each is a *CacheDirError naming the directory.
	//
	// The cache survives restarts: it holds only states whose snapshots
	// are committed, with each partition's checkpoint, so a restart on the
	// same Dir recovers only the snapshots written since (FullRecovery,
	// and docs/operations.md, "Warm restarts"). A cache of an earlier
	// snapfence layout is emptied at open, through Pebble (which deletes
	// its own retired files); nothing else in Dir is removed. (A Dir an
	// older snapfence used directly holds that version's Pebble files at
	// its top; the engine leaves them, as it cannot tell them from the
	// user's.)
	Dir string
	// HotKeys bounds the decoded states kept in memory per partition; the
	// rest live in Pebble. Default DefaultHotKeys (65536).
	HotKeys int
	// FlushBatch bounds the snapshots one flush writes at once; default
	// DefaultFlushBatch (1024). A batch goes to the store at once
	// (Partition.StartWriteBatch), so the store's group commit packs it
	// into few transactions.
	FlushBatch int
	// MaxWritesInFlight bounds the snapshot writes a partition has in
	// flight: started, not yet durable (a commit counts as one). Folding
	// never waits for a flush until the bound is reached; then the flush
	// waits for the oldest write (back-pressure). Default
	// DefaultMaxWritesInFlight (16384); it is raised to FlushBatch if
	// lower, so that one batch always fits.
	MaxWritesInFlight int
	// PersistInterval is how often dirty keys are flushed between
	// commits; default (0): CommitInterval, so that setting CommitInterval
	// is enough. Every commit writes the dirty keys too, and a persist due
	// with a commit is left to it (one transaction, not two), so only a
	// PersistInterval below CommitInterval changes anything: the
	// snapshots, and with them committed reads and what a crash re-emits,
	// follow it, while the group's committed offsets follow CommitInterval
	// (on a Transactional store each flush costs a transaction, as a
	// commit does). On a Transactional store a deleted key's
	// tombstone is not written then but with the next commit, in the
	// transaction that commits the offset past it (docs/design.md,
	// "Tombstones ride with the commit").
	PersistInterval time.Duration
	// CommitInterval is how often the committable offset is committed,
	// with the dirty keys' snapshots; default DefaultCommitInterval (1 s),
	// or DefaultExactlyOnceCommitInterval (100 ms) under ExactlyOnce. It
	// bounds what a crash replays (at least once, the outputs of up to an
	// interval of input are emitted again) and how old committed reads
	// (ReadCommitted, views, tables) and the group's committed offsets
	// get; a shorter one costs throughput where keys change more than once
	// an interval, as each is written once per interval
	// (docs/benchmarks.md, "Commit interval").
	CommitInterval time.Duration
	// NoFlushOnRevoke skips the flush and commit on revoke (default: flush).
	NoFlushOnRevoke bool
	// Emit receives each poll's outputs, at least once, and returns once
	// they are delivered; the poll loop waits for it. Nil (and a nil
	// StartEmit) drops them. It is not called under ExactlyOnce.
	Emit func(ctx context.Context, outs []Output) error
	// StartEmit is Emit in two halves, so that a poll's outputs are on
	// their way while the next poll is folded: it starts the delivery of
	// outs and returns wait, which returns nil once every output is
	// delivered, or the error of one that was not. A nil wait means
	// delivered. kafkaio.Emitter.StartEmit is one. Set Emit or StartEmit,
	// not both. It is not called under ExactlyOnce.
	//
	// Up to MaxEmitsInFlight calls are in flight, each started without
	// waiting for the one before, so a call's outputs must not overtake
	// an earlier call's on the same output partition (a franz-go client's
	// Produce keeps that order). The engine calls each wait exactly once,
	// on the poll loop, in the order of the calls: the oldest when
	// MaxEmitsInFlight are in flight, and all of them before any snapshot
	// write, offset commit, tick or revoke: nothing durable ever covers an
	// output not yet delivered, so a crash loses no output that a replay
	// would not make again. A failed wait fails the partitions whose
	// outputs it, the later calls or the outputs folded since carried, as
	// a failed Emit does: they restart from their committed state. On a
	// Member stepped by hand, the outputs of the last Steps may still be
	// in flight when Step returns; FlushAll, Persist and Close wait for
	// them.
	StartEmit func(ctx context.Context, outs []Output) (wait func() error)
	// MaxEmitsInFlight is how many StartEmit calls may be in flight;
	// default DefaultMaxEmitsInFlight (4). 1 waits for each poll's
	// outputs before the next poll's are started.
	MaxEmitsInFlight int
	// ExactlyOnce (off by default) produces the outputs of every fold and
	// tick with the partition's transactional producer, in the
	// transaction that also carries the snapshots of the keys the batch
	// changed and the fenced commit of the input offset after it: Kafka's
	// consume-transform-produce. A read_committed consumer of the output
	// topics sees each input record's outputs exactly once; a stale
	// owner's, a crashed owner's or an aborted batch's outputs never
	// become visible to it (a read_uncommitted consumer does see them).
	//
	// A batch is every record a partition folded since its last commit:
	// it is sealed every CommitInterval, when it reaches
	// MaxTransactionRecords or MaxTransactionBytes, and on revoke. If its
	// transaction fails, whatever the reason, the partition is rewound:
	// its cache is dropped, the store is acquired again, the committed
	// snapshots are recovered and the input resumes from the committed
	// offset, so the folds run again and no output of the failed batch
	// is re-sent from memory. PersistInterval does not apply: a batch's
	// snapshots are written with it. It needs a Transactional store.
	//
	// Side effects outside Kafka (a payment API, a database) are not
	// covered: a rewound batch folds again, so such effects must be
	// idempotent on their side (docs/exactly-once.md).
	ExactlyOnce bool
	// OutputTopics are the topics the outputs of Fold, Tick and OnTimer go
	// to. Under ExactlyOnce they are required for every output topic (the
	// dead-letter topic is added by itself): an output for a topic not
	// listed stops Run with a *store.ConfigError naming it, before its
	// transaction begins. The store checks at each acquisition that they
	// exist, and looks on every partition of them for a transaction of the
	// partition's own lineage that a failure left open with no coordinator
	// to end it (a broker that lost the tail of __transaction_state): the
	// partition's next transaction would commit it, and its outputs would
	// be seen twice. Such a transaction is aborted
	// (kafka.Config.AbortHangingTransactions) or reported, and the
	// partition waits, as for a held committed offset
	// (UnstableOffsetTimeout). Keep a topic listed while transactions
	// that wrote to it may be open: one removed is no longer searched.
	// Default none.
	//
	// Outside ExactlyOnce they are checked when the runner starts, with
	// the dead-letter topic, through CheckOutputTopics.
	OutputTopics []string
	// CheckOutputTopics checks, outside ExactlyOnce, that the output
	// topics exist (kafkaio.Emitter.CheckTopics is one, which creates them
	// under kafkaio.EmitterConfig.CreateTopics). The runner calls it once,
	// before its first poll, with OutputTopics and DeadLetterTopic; an
	// error ends Run (or the first Step) before anything is folded: a
	// missing topic is a *store.ConfigError naming it. Nil (the default)
	// checks through the input's consumer (a missing topic is an error,
	// as it creates none; set kafkaio.Emitter.CheckTopics here for the
	// emitter's CreateTopics to create them at start). Set, it also checks each topic an output
	// names that is not listed, at its first output, before the outputs
	// are handed to Emit: a missing one ends Run at once, not after the
	// emitter's delivery timeout. Under ExactlyOnce the store checks them
	// at each acquisition instead.
	CheckOutputTopics func(ctx context.Context, topics []string) error
	// MaxOutputBytes bounds one output record: its key, value and
	// headers (keys and values); default DefaultMaxOutputBytes (999,000).
	// A fold, tick or timer handler whose output is larger fails with an
	// *OutputTooLargeError before the output is sent: no retry could
	// deliver it, so the record goes through Poison like any fold that
	// fails (a dead letter that would be larger is sent without the
	// record's value). Raise it together with the producer's
	// kgo.ProducerBatchMaxBytes and the output topics'
	// max.message.bytes (and, under ExactlyOnce, the store's
	// MaxValueBytes, which bounds an output's key and value too).
	MaxOutputBytes int
	// MaxTransactionRecords caps one exactly-once transaction's snapshots
	// plus outputs; default DefaultMaxTransactionRecords. A batch is
	// sealed as soon as it reaches the cap (one fold's outputs are never
	// split), so a transaction carries at most the cap plus one fold's
	// records. At least once on a Transactional store, a commit with
	// nothing in flight writes its partition's dirty keys in the
	// transaction of its offset if they are at most this many (and at
	// most MaxWritesInFlight), else in transactions of their own first.
	MaxTransactionRecords int
	// MaxTransactionBytes caps one exactly-once transaction's output
	// bytes (keys plus values); default DefaultMaxTransactionBytes.
	// Snapshots count in MaxTransactionRecords only: a state is encoded
	// when its batch is sealed, not when it changes. At least once it
	// caps the snapshot bytes (wire.SnapshotBytes) a commit writes in
	// the transaction of its offset.
	MaxTransactionBytes int
	// UnstableOffsetTimeout bounds the wait of a partition's acquisition
	// for its committed offset, when a transaction that the takeover did
	// not end holds it (Kafka's UNSTABLE_OFFSET_COMMIT: a transaction of
	// another transactional.id, or one the coordinator forgot after an
	// unclean broker failure), or for a forgotten transaction of its own
	// lineage left open where it writes (OutputTopics) to be aborted.
	// Meanwhile the partition is paused and its acquisition retried, and
	// the other partitions fold and commit; past the timeout Step and Run
	// return the *kafka.UnstableOffsetError or
	// *kafka.HangingTransactionError, which names the transaction and the
	// commands that abort it. Default DefaultUnstableOffsetTimeout (3
	// min).
	UnstableOffsetTimeout time.Duration
	// FullRecovery makes every acquisition read its snapshot partition
	// from the start, ignoring the cache's checkpoints. Default false: a
	// partition whose committed states and checkpoint are in the cache
	// (Dir, from an earlier run, or an earlier ownership in this one)
	// reads only the snapshots written since, when the store says the
	// checkpoint is still a valid base (docs/operations.md, "Warm
	// restarts").
	FullRecovery bool
	// StandbyReplicas is how many standby replicas each partition of the
	// input topics has, on members other than its owner (Kafka Streams'
	// num.standby.replicas); default 0, none. A replica follows the
	// partition's snapshot partition read_committed into its member's
	// cache, with a checkpoint, so that when the partition is assigned
	// there later (a failover, a scale-in) its recovery reads only the
	// snapshots written since. Each member computes the same placement
	// from the group report (GroupReportInterval, and after every
	// rebalance): rendezvous hashing of the members' names (their
	// instance ids, stable with a Dir) with the partition, bounded so that
	// no member keeps more than its share, so a member joining or leaving
	// moves few replicas but its own. A member thus holds at most
	// StandbyReplicas × partitions ÷ members replicas (rounded up) besides
	// its own partitions: cache, network and reads grow with the
	// replica count, not the group's size (docs/operations.md, "Standby
	// replicas", gives the costs). A group of fewer members than
	// StandbyReplicas+1 keeps a replica on every member but the owner.
	// Under the classic protocol kafkaio's default balancer hands a
	// partition that must move (its owner died) to a member that holds
	// its replica; under the consumer protocol the broker assigns, and a
	// takeover lands on one by chance. It
	// needs a Store in Transactional mode that can follow
	// (store.Backend's CanFollow: store/kafka's and store/sim's can), and
	// the group report. Status().Standbys shows each replica and its lag.
	StandbyReplicas int
	// Tables are the tables the fold (or OnTimer, or Tick) looks up while
	// it runs: views (package engine/view) of other engines' snapshot topics, or of compacted
	// topics of plain key/values (lookup joins, as goka's Lookup and
	// Kafka Streams' GlobalKTable). The engine reads none of them; the
	// fold calls their Get itself. What the engine does is wait: a
	// partition folds nothing until every table has caught up to the high
	// watermark it had when it opened, so a fold never runs against a
	// table still loading. A replayed record may see a newer row than its
	// first fold did (docs/design.md, "Lookup joins", says how to make a
	// join replay-stable). A table declared with view.NewLookup is opened
	// by whoever runs the engine, on its own backend (view.Opener): until
	// then its partitions wait as for a table still loading. Default none.
	Tables []Table
	// TableTimeout bounds a partition's wait for Tables at its start;
	// past it the partition fails with a *TableError naming the table and
	// restarts later. Default DefaultTableTimeout (3 min).
	TableTimeout time.Duration
	// Poison is what a record that the fold fails or panics on (or a key
	// whose tick fails) does: StopOnPoison (the default) commits what came
	// before it and makes Run return the *FoldError; SkipPoison and
	// DeadLetterPoison go past it. See PoisonPolicy. It does not apply
	// to a stored state that does not decode (UndecodableState).
	Poison PoisonPolicy
	// UndecodableState is what a recovered snapshot whose state the Codec
	// cannot decode does: StopOnUndecodableState (the default) stops the
	// partition with a *RecoveredStateError before anything is deleted;
	// DiscardUndecodableState deletes such keys, losing their state. A
	// codec that reads the older encodings (VersionedCodec) makes neither
	// necessary. See UndecodableStatePolicy.
	UndecodableState UndecodableStatePolicy
	// DeadLetterTopic is where DeadLetterPoison sends poison records;
	// required with it, and only with it. Outside ExactlyOnce dead
	// letters go out through Emit or StartEmit, one of which is then
	// required too.
	DeadLetterTopic string
	// GroupReportInterval is how often the runner reads its whole
	// group's view of the input: every partition's committed
	// offset and log end (snapfence_group_lag), and the partitions no
	// member is assigned (Status.Unserved, snapfence_unserved_partitions),
	// so that a partition whose owner died is still reported by every
	// other instance. A report is also read right after every rebalance
	// callback. Default DefaultGroupReportInterval (5 s); negative:
	// never, and then a member assigned no partition is never ready
	// (Status.Ready): without the report it cannot tell a settled group
	// from one whose partitions nobody serves.
	GroupReportInterval time.Duration
	// Logger; default discards.
	Logger *slog.Logger
	// Observer receives the engine's measurements (package engine/prom
	// exports them to Prometheus); default nil: nothing is recorded.
	Observer Observer
	// Partitioner says which input partition holds a key, given the
	// topic's partition count: Locate asks it. Default
	// store.OutputPartition, the murmur2 partitioner of Kafka's Java
	// client and of franz-go's default, which a producer that keys the
	// input with either uses. A wrong one sends queries to the wrong
	// instance.
	Partitioner func(key []byte, partitions int32) int32
}

// Engine is a configured engine: the fold, the store, the local cache.
// Run it against Kafka with Run, or drive it step by step with a Member.
type Engine[S any] struct {
	cfg Config[S]
	kv  *cache.KV
	log *slog.Logger
	// board is the status of the runner made last (Status).
	board atomic.Pointer[statusBoard]
	// runner is the runner made last: the one queries read (Get, Range).
	runner atomic.Pointer[Member[S]]
	// runEnded and runErr: Run returned, with runErr (Status); runs
	// counts the Runs under way, and open the runners made and not
	// closed (Close refuses to close the cache under either).
	runMu    sync.Mutex
	runEnded bool
	runErr   error
	runs     int
	open     map[*Member[S]]bool
}

// New checks the configuration, opens the local cache and returns an
// engine. A configuration that cannot work is refused with a
// *store.ConfigError naming the field (errors.Is store.ErrMisconfigured).
func New[S any](cfg Config[S]) (*Engine[S], error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.CommitInterval == 0 {
		cfg.CommitInterval = DefaultCommitInterval
		if cfg.ExactlyOnce {
			cfg.CommitInterval = DefaultExactlyOnceCommitInterval
		}
	}
	if cfg.PersistInterval == 0 {
		// Every commit writes the dirty keys, and a persist due with a
		// commit is left to it: following the commits adds no write.
		cfg.PersistInterval = cfg.CommitInterval
	}
	if cfg.MaxTransactionRecords == 0 {
		cfg.MaxTransactionRecords = DefaultMaxTransactionRecords
	}
	if cfg.GroupReportInterval == 0 {
		cfg.GroupReportInterval = DefaultGroupReportInterval
	}
	if cfg.MaxTransactionBytes == 0 {
		cfg.MaxTransactionBytes = DefaultMaxTransactionBytes
	}
	if cfg.UnstableOffsetTimeout == 0 {
		cfg.UnstableOffsetTimeout = DefaultUnstableOffsetTimeout
	}
	if cfg.TableTimeout == 0 {
		cfg.TableTimeout = DefaultTableTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.FlushBatch == 0 {
		cfg.FlushBatch = DefaultFlushBatch
	}
	if cfg.MaxWritesInFlight == 0 {
		cfg.MaxWritesInFlight = DefaultMaxWritesInFlight
	}
	cfg.MaxWritesInFlight = max(cfg.MaxWritesInFlight, cfg.FlushBatch)
	if cfg.MaxEmitsInFlight == 0 {
		cfg.MaxEmitsInFlight = DefaultMaxEmitsInFlight
	}
	if cfg.HotKeys == 0 {
		cfg.HotKeys = DefaultHotKeys
	}
	if cfg.MaxOutputBytes == 0 {
		cfg.MaxOutputBytes = DefaultMaxOutputBytes
	}
	kv, err := openCache(cfg.Dir, cfg.Store.Application())
	if err != nil {
		return nil, err
	}
	return &Engine[S]{cfg: cfg, kv: kv, log: cfg.Logger}, nil
}

// check is every check of a Config, in one place: the first field that
// cannot work, as a *store.ConfigError. The groups run in a fixed order,
// so a Config with several faults always names the same one.
func (cfg *Config[S]) check() error {
	for _, group := range []func() error{
		cfg.checkRequired, cfg.checkStoreMode, cfg.checkTick, cfg.checkPoison, cfg.checkEmit,
		cfg.checkDurations, cfg.checkOutputTopics, cfg.checkTables, cfg.checkCounts,
	} {
		if err := group(); err != nil {
			return err
		}
	}
	return nil
}

// badConfig is the *store.ConfigError for a Config field.
func badConfig(field, problem, fix string) error {
	return &store.ConfigError{Subject: "engine.Config." + field, Problem: problem, Fix: fix}
}

// checkRequired checks the fields without which nothing runs. The checks
// after it may take Store to be set.
func (cfg *Config[S]) checkRequired() error {
	switch {
	case cfg.Fold == nil:
		return badConfig("Fold", "is nil", "set the fold function")
	case cfg.Codec == nil:
		return badConfig("Codec", "is nil", "set a codec (engine.JSON, engine.StringCodec, ...)")
	case cfg.Store == nil:
		return badConfig("Store", "is nil", "set a snapshot store (store/kafka.New)")
	}
	return nil
}

// checkStoreMode checks the options that need more of the store than a
// plain one gives.
func (cfg *Config[S]) checkStoreMode() error {
	switch {
	case cfg.ExactlyOnce && cfg.Store.Mode() != store.Transactional:
		return badConfig("ExactlyOnce", fmt.Sprintf("needs a Transactional store (this one is %v)", cfg.Store.Mode()),
			"use a store in store.Transactional mode")
	case cfg.StandbyReplicas < 0:
		return badConfig("StandbyReplicas", fmt.Sprintf("%d is negative", cfg.StandbyReplicas), "leave it 0 for none, or set the number of replicas per partition")
	case cfg.StandbyReplicas > 0 && cfg.Store.Mode() != store.Transactional:
		return badConfig("StandbyReplicas", fmt.Sprintf("needs a Transactional store (this one is %v): without the fence no copy of a snapshot partition is vouched for", cfg.Store.Mode()),
			"use a store in store.Transactional mode, or set StandbyReplicas to 0")
	case cfg.StandbyReplicas > 0 && !cfg.Store.CanFollow():
		return badConfig("StandbyReplicas", fmt.Sprintf("needs a Store that can follow partitions (%T cannot)", cfg.Store),
			"use store/kafka's or store/sim's backend, or set StandbyReplicas to 0")
	case cfg.StandbyReplicas > 0 && cfg.GroupReportInterval < 0:
		return badConfig("StandbyReplicas", "set with GroupReportInterval negative: the replicas are placed from the group report",
			"leave GroupReportInterval at its default, or set StandbyReplicas to 0")
	}
	return nil
}

// checkTick checks that Tick and TickInterval come together.
func (cfg *Config[S]) checkTick() error {
	switch {
	case cfg.Tick != nil && cfg.TickInterval <= 0:
		return badConfig("TickInterval", fmt.Sprintf("is %v with Tick set, so Tick would never run", cfg.TickInterval),
			"set TickInterval above 0, or leave Tick nil")
	case cfg.Tick == nil && cfg.TickInterval != 0:
		return badConfig("TickInterval", "is set without a Tick", "set Tick, or leave TickInterval 0")
	}
	return nil
}

// checkPoison checks the policies for records and states that fail, and
// that DeadLetterTopic goes with DeadLetterPoison.
func (cfg *Config[S]) checkPoison() error {
	switch {
	case cfg.Poison > DeadLetterPoison:
		return badConfig("Poison", fmt.Sprintf("is %v, not a PoisonPolicy", cfg.Poison), "use StopOnPoison, SkipPoison or DeadLetterPoison")
	case cfg.UndecodableState > DiscardUndecodableState:
		return badConfig("UndecodableState", fmt.Sprintf("is %v, not an UndecodableStatePolicy", cfg.UndecodableState),
			"use StopOnUndecodableState or DiscardUndecodableState")
	case cfg.Poison == DeadLetterPoison && cfg.DeadLetterTopic == "":
		return badConfig("DeadLetterTopic", "is empty under DeadLetterPoison", "name the dead-letter topic")
	case cfg.Poison != DeadLetterPoison && cfg.DeadLetterTopic != "":
		return badConfig("DeadLetterTopic", fmt.Sprintf("is set but Poison is %v, so nothing is sent to it", cfg.Poison),
			"set Poison to DeadLetterPoison, or leave DeadLetterTopic empty")
	}
	return nil
}

// checkEmit checks the ways outputs leave: at most one emitter, and one at
// all when dead letters would have no other way out.
func (cfg *Config[S]) checkEmit() error {
	switch {
	case cfg.Emit != nil && cfg.StartEmit != nil:
		return badConfig("Emit and StartEmit", "are both set", "set one of them (StartEmit: the next poll is folded while the outputs are on their way)")
	case cfg.Poison == DeadLetterPoison && !cfg.ExactlyOnce && cfg.Emit == nil && cfg.StartEmit == nil:
		return badConfig("Emit", "is nil under DeadLetterPoison without ExactlyOnce, so dead letters have no way out",
			"set Emit or StartEmit (kafkaio.NewEmitter), or ExactlyOnce")
	}
	return nil
}

// checkDurations checks that no interval or timeout is negative (0 takes
// the default).
func (cfg *Config[S]) checkDurations() error {
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"PersistInterval", cfg.PersistInterval}, {"CommitInterval", cfg.CommitInterval},
		{"UnstableOffsetTimeout", cfg.UnstableOffsetTimeout}, {"TableTimeout", cfg.TableTimeout}} {
		if d.v < 0 {
			return badConfig(d.field, fmt.Sprintf("is negative (%v)", d.v), "leave it 0 for the default, or set a positive duration")
		}
	}
	return nil
}

// checkOutputTopics checks the output topics' names.
func (cfg *Config[S]) checkOutputTopics() error {
	for i, t := range cfg.OutputTopics {
		if p := store.NameProblem(t); p != "" {
			return badConfig(fmt.Sprintf("OutputTopics[%d]", i), fmt.Sprintf("topic %q: %s", t, p), "use the output topic's name as Kafka spells it")
		}
	}
	return nil
}

// checkTables checks that every table is set.
func (cfg *Config[S]) checkTables() error {
	for i, t := range cfg.Tables {
		if t == nil {
			return badConfig(fmt.Sprintf("Tables[%d]", i), "is nil", "remove it, or set a View")
		}
	}
	return nil
}

// checkCounts checks that no bound on keys, records or bytes is negative
// (0 takes the default).
func (cfg *Config[S]) checkCounts() error {
	for _, n := range []struct {
		field string
		v     int
	}{{"HotKeys", cfg.HotKeys}, {"FlushBatch", cfg.FlushBatch}, {"MaxWritesInFlight", cfg.MaxWritesInFlight},
		{"MaxTransactionRecords", cfg.MaxTransactionRecords}, {"MaxTransactionBytes", cfg.MaxTransactionBytes},
		{"MaxEmitsInFlight", cfg.MaxEmitsInFlight}, {"MaxOutputBytes", cfg.MaxOutputBytes}} {
		if n.v < 0 {
			return badConfig(n.field, fmt.Sprintf("is negative (%d)", n.v), "leave it 0 for the default, or set a positive number")
		}
	}
	return nil
}

// ErrRunning is Close's refusal while Run runs, or while a Member made
// by Join is not closed: the local cache stays open; cancel Run's
// context and wait for it to return (or close the Member) first.
var ErrRunning = errors.New("engine: Close while Run runs or a Member is open: cancel Run's context and wait for it to return (close the Member) first")

// Close closes the local cache. It refuses, with ErrRunning and closing
// nothing, while a Run of this engine is under way or a Member it made is
// not closed: the runner would meet a closed cache.
func (e *Engine[S]) Close() error {
	e.runMu.Lock()
	running := e.runs > 0 || len(e.open) > 0
	e.runMu.Unlock()
	if running {
		return ErrRunning
	}
	return e.kv.Close()
}

// coreFold is the user's fold, as the core calls it. The record is the
// runner's, converted in place ((*core.Record)(rec), the same fields), and
// copied once into the user's argument, as the core did before; the
// Result's change and outputs pass through without a copy.
func (e *Engine[S]) coreFold() core.FoldFunc[S, Output] {
	fold := e.cfg.Fold
	limit := e.cfg.MaxOutputBytes
	return func(key []byte, state S, exists bool, rec *core.Record) (core.Change[S, Output], error) {
		res, err := fold(key, state, exists, Record(*rec))
		if err == nil {
			err = checkOutputs(res.change.Outputs, limit)
		}
		return res.change, err
	}
}

// standbyInterval is the scheduler's standby round interval: 0 without
// standby replicas (warm-ups start the rounds when they come).
func (e *Engine[S]) standbyInterval() time.Duration {
	if e.cfg.StandbyReplicas == 0 {
		return 0
	}
	return standbyInterval
}

// canFollow: the engine can follow partitions it does not own (standby
// replicas, warm-ups), its copies vouched for by the fence.
func (e *Engine[S]) canFollow() bool {
	return e.cfg.Store.Mode() == store.Transactional && e.cfg.Store.CanFollow()
}

// tickInterval is the tick's period; 0: no tick.
func (e *Engine[S]) tickInterval() time.Duration {
	if e.cfg.Tick == nil {
		return 0
	}
	return max(e.cfg.TickInterval, 0)
}

func (e *Engine[S]) coreTick() core.TickFunc[S, Output] {
	if e.cfg.Tick == nil {
		return nil
	}
	return func(key []byte, state S, now int64) (core.Change[S, Output], error) {
		res, err := e.cfg.Tick(key, state, time.UnixMilli(now))
		if err == nil {
			err = checkOutputs(res.change.Outputs, e.cfg.MaxOutputBytes)
		}
		return res.change, err
	}
}

// appendStoreOutputs appends outs to dst as the store's outputs, for an
// exactly-once batch: the same fields, so each is converted as it is
// copied in, and none is copied twice.
func appendStoreOutputs(dst []store.Output, outs []Output) []store.Output {
	dst = slices.Grow(dst, len(outs))
	for _, o := range outs {
		dst = append(dst, store.Output(o))
	}
	return dst
}
