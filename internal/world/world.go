package world

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/input"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// Names of the world's topics, group and transactional.id prefix.
const (
	InputTopic  = "orders"
	OutputTopic = "balances"
	Group       = "flow"
	Prefix      = "sf"
	foreignID   = "foreign-producer"
)

// Config configures a world. Zero values take the defaults given.
type Config struct {
	// Seed seeds the cluster (member ids).
	Seed uint64
	// Mode is the store's mode: store.Transactional (the fence) or
	// store.Plain (the baseline that reproduces the corruption).
	Mode store.Mode
	// Protocol is the group's protocol; default classic eager.
	Protocol sim.Protocol
	// Members is the number of member slots; default 3.
	Members int
	// Partitions of the input (and snapshot) topic; default 2.
	Partitions int
	// PersistInterval and CommitInterval of the engines; default 5 s and
	// 10 s.
	PersistInterval, CommitInterval time.Duration
	// SessionTimeout of the group; default 10 s.
	SessionTimeout time.Duration
	// StallTimeout of recoveries; default 1 min.
	StallTimeout time.Duration
	// TransactionTimeout of the snapshot producers and the foreign one;
	// default 30 s.
	TransactionTimeout time.Duration
	// MaxWritesPerTransaction; default 4, so flushes span transactions.
	MaxWritesPerTransaction int
	// WriteLatency is the backends' sim.BackendConfig.WriteLatency: the
	// engines' flushes, commits and batches stay in flight for that much
	// virtual time (or until their engine waits for them) while folding,
	// rebalances, fences and crashes go on. 0: every call completes
	// before it returns. With it, the engines flush MaxWritesPerTransaction
	// keys a batch and keep at most two batches in flight, so that
	// back-pressure (a wait for the oldest write) happens too.
	WriteLatency time.Duration

	// ExactlyOnce is the engines' engine.Config.ExactlyOnce: every fold's
	// output goes to OutputTopic in the transaction of its batch, with the
	// batch's snapshots and offset. It needs Mode Transactional. At
	// quiescence the output topic is read read_committed (and
	// read_uncommitted) into the history, and every input event's output
	// must be there exactly once (invariant 8).
	ExactlyOnce bool
	// ProduceOutputs, without ExactlyOnce, has the engines' Emit produce
	// the outputs to OutputTopic with a plain producer (at least once),
	// and the topic read and checked at quiescence as under ExactlyOnce:
	// the negative control, where invariant 8 does not hold. With neither,
	// outputs are only counted (invariant 7).
	ProduceOutputs bool
	// PipelinedEmits, without ExactlyOnce, gives the engines a
	// Config.StartEmit in place of Emit: a poll's outputs reach the
	// checker (and, with ProduceOutputs, the output topic) only when the
	// engine waits for them, so crashes, rebalances and fences land
	// while they are in flight, and a member that crashes loses them.
	PipelinedEmits bool

	// CachedIdentity is a broken variant: the store binds the offset but
	// reads the group identity once, at acquisition, as a design that
	// caches the generation would.
	CachedIdentity bool
	// LSOBoundRecovery is a broken variant: recovery reads to the last
	// stable offset instead of the high watermark.
	LSOBoundRecovery bool
	// QueriesReadLatest is a broken variant: a Query step reads the
	// member's latest folded state (engine.ReadLatest) where a committed
	// read is asked for, as a lookup that served the fold's memory would.
	QueriesReadLatest bool
	// RestartsUnconfirmed is a broken variant: a member's restart
	// outside a rebalance callback takes the partition over without
	// asking the coordinator whether the member still owns it.
	RestartsUnconfirmed bool

	// WarmRestarts makes the members keep their cache across restarts:
	// each slot's engine has a cache directory of its own (Config.Dir)
	// that outlives its process, so a Join after a Crash or a Leave is a
	// warm restart, and its engines recover from the cache's checkpoint (a
	// delta) when the store accepts it (FullRecovery off). The snapshot
	// topic gets a short DeleteRetention, so that time pushes checkpoints
	// past it and Compact expires tombstones, and the Recreate step
	// recreates it. The engines' states are checked against the committed
	// snapshots (invariant 9). Off, every recovery reads in full into an
	// empty in-memory cache.
	WarmRestarts bool
	// CacheDir is where the world creates the members' cache directories
	// under WarmRestarts; default a temporary directory of its own. Close
	// removes what the world created, and only that.
	CacheDir string
	// DeleteRetention is the snapshot topic's delete.retention.ms; default
	// 4 min under WarmRestarts (a checkpoint is usable for 3 min of it:
	// the store takes off a margin of max(retention/10, 1 min)), else the
	// simulated cluster's default (Kafka's 24 h).
	DeleteRetention time.Duration
	// TrustCheckpoints is a broken variant for WarmRestarts: the cache's
	// checkpoint is trusted without the store's checks (its topic id, its
	// age, the log's ends are made to fit before the store sees it), so a
	// delta recovery follows every restart with a checkpoint.
	TrustCheckpoints bool
	// TombstonesAheadOfCommit is a broken variant of the at-least-once
	// mode: a batch with tombstones the engine commits with the offset
	// past them (CommitBatch) is written without that commit, which a
	// later commit makes, as a design that writes tombstones at persist
	// time would. Under ExactlyOnce it changes nothing.
	TombstonesAheadOfCommit bool
	// CommitAheadOfWrites is a broken variant for WriteLatency: an
	// at-least-once commit the engine starts is also made at once, by a
	// plain offset commit with the member's live identity, ahead of the
	// writes still in flight that it waits for, as a design that commits
	// the folded offset without waiting for its snapshots would.
	CommitAheadOfWrites bool
	// EmitsAckedEarly is a broken variant for PipelinedEmits: a wait
	// returns at once and the outputs of its call are delivered at the
	// next one (or at a clean leave), as an engine that wrote and
	// committed ahead of its outputs in flight would behave; a crash loses
	// what it acked.
	EmitsAckedEarly bool

	// Timers gives the engines timers (engine.Config.OnTimer): a Produce
	// step with D above 0 sets a processing-time timer for its key, D
	// after the event (timers.go). A firing adds history.TimerMark to the
	// key's state; at quiescence, with time past every timer, each timer
	// a key's events set since it was last closed must have fired exactly
	// once in its committed state (invariant 10).
	Timers bool
	// TimerRemovalsLost is a broken variant for Timers: a fired timer's
	// removal never reaches the store (every snapshot of a key is written
	// with every timer an earlier one carried), as a design that kept a
	// firing's effect in the snapshot but not the timer's removal would,
	// so a recovery brings the timer back and it fires again.
	TimerRemovalsLost bool

	// Standby gives the engines standby replicas
	// (engine.Config.StandbyReplicas, needs Mode Transactional): each
	// member follows the snapshot partitions placed on it that it does not
	// own into its cache, and a partition moved to
	// it recovers from that copy (FullRecovery off, as under
	// WarmRestarts). The states are checked against the committed
	// snapshots after every step (invariant 9), every snapshot a replica
	// reads is checked committed (4), and a promotion whose replica the
	// store had vouched for must recover a delta unless the store refuses
	// the checkpoint (11). The snapshot topic's DeleteRetention defaults
	// to 20 min: a replica's checkpoint is 15 min old when it is made
	// (store.Follow), so it stays usable for 3 min.
	Standby bool
	// StandbyReplicas is the engines' engine.Config.StandbyReplicas under
	// Standby; 0: Members-1, a replica of each partition on every member
	// but its owner.
	StandbyReplicas int
	// StandbySkipsRecords is a broken variant for Standby: a replica
	// hands its engine every other snapshot it reads, with the
	// checkpoints of all of them, as a replica that lost records would.
	StandbySkipsRecords bool
	// StandbyCheckpointsDropped is a broken variant for Standby: a
	// replica's reads reach its engine without the store's checkpoints,
	// so no copy is ever vouched for and every promotion reads in full.
	StandbyCheckpointsDropped bool
	// FollowUncommitted is a broken variant for Standby, Tables and
	// ReadView: the standby replicas, the table views and the view of the
	// snapshot topic read read_uncommitted, so they take in records of
	// open and aborted transactions.
	FollowUncommitted bool

	// Tables gives the engines a lookup table (engine.Config.Tables):
	// TableTopic, a compacted topic of plain key/values the world writes
	// (TablePut, TableOpen, TableEnd), and in every member's process a
	// View of it, which ReadTable steps and the engine waits on before a
	// partition folds. The fold looks its key up in the view, and every
	// lookup is checked (invariant 12).
	Tables bool
	// TablesNotAwaited is a broken variant for Tables: the table the
	// engines wait on says it has caught up at once, as an engine that
	// folded while its tables load would.
	TablesNotAwaited bool
}

// WithDefaults is cfg with its zero values replaced by the defaults.
func (cfg Config) WithDefaults() Config {
	cfg.setDefaults()
	return cfg
}

func (cfg *Config) setDefaults() {
	if cfg.Members <= 0 {
		cfg.Members = 3
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 2
	}
	if cfg.Protocol == 0 {
		cfg.Protocol = sim.ClassicEager
	}
	if cfg.PersistInterval <= 0 {
		cfg.PersistInterval = 5 * time.Second
	}
	if cfg.CommitInterval <= 0 {
		cfg.CommitInterval = 10 * time.Second
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 10 * time.Second
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = time.Minute
	}
	if cfg.TransactionTimeout <= 0 {
		cfg.TransactionTimeout = 30 * time.Second
	}
	if cfg.MaxWritesPerTransaction <= 0 {
		cfg.MaxWritesPerTransaction = 4
	}
	if cfg.DeleteRetention <= 0 {
		cfg.DeleteRetention = sim.DefaultDeleteRetention
		switch {
		case cfg.Standby:
			cfg.DeleteRetention = 20 * time.Minute
		case cfg.WarmRestarts:
			cfg.DeleteRetention = 4 * time.Minute
		}
	}
}

// outputs reports whether the outputs go to the output topic and are read
// back at quiescence.
func (cfg Config) outputs() bool { return cfg.ExactlyOnce || cfg.ProduceOutputs }

// World is a simulated cluster with engine members, an input producer and
// fault controls. It is driven by one goroutine, step by step.
type World struct {
	cfg     Config
	c       *sim.Cluster
	members []*member
	// wake is signalled when a member's step ends.
	wake chan struct{}

	ledger  Ledger
	foreign *foreignTxn
	steps   int // steps applied

	checker checker
	// rec records every store call of the members, the input events and
	// the final read, for the history checker.
	rec *history.Recorder
	// logs are the snapshot partitions' ends last recorded: hw, lso.
	logs [][2]int64
	// created are the directories the world created (WarmRestarts), for
	// Close to remove.
	created []string
	// lost is the TimerRemovalsLost variant's memory; nil without it.
	lost *removalsLost
	// standby is the record of the members' replicas (Standby); nil
	// without.
	standby *standbys
	// table is the lookup table's model (Tables); nil without.
	table *table
	// view is the world's view of the snapshot topic (ReadView), and its
	// backend; nil until the first ReadView. viewBusy is its read in
	// flight (parked on the cluster's clock, as a member's step may be),
	// nil if none; viewCancel ends it at Close.
	view        *view.View[int]
	viewBackend store.Backend
	viewBusy    chan struct{}
	viewCtx     context.Context
	viewCancel  context.CancelFunc
}

type memberState int

const (
	absent memberState = iota
	running
	paused
	crashed
)

func (s memberState) String() string {
	return [...]string{"absent", "running", "paused", "crashed"}[s]
}

// member is one slot of the group: a process that can be started,
// paused, crashed and started again.
type member struct {
	slot   int
	state  memberState
	eng    *engine.Engine[int]
	r      *engine.Member[int]
	src    *simsource.Source
	cancel context.CancelFunc
	ctx    context.Context
	// busy is the result of a step still in flight (parked on the
	// cluster: a recovery behind an open transaction).
	busy chan error
	// errsBefore is how many errors the runner had when the step in
	// flight started; polling tells a poll from a flush.
	errsBefore int
	polling    bool
	// recovered is each partition's last recovery outcome in this
	// process (nil: it ended well).
	recovered map[int32]error
	// last is the member's state last recorded in the history.
	last history.Op
	// dir is the slot's cache directory under WarmRestarts ("" otherwise:
	// a cache in memory, new with every process).
	dir string
	// acked are the outputs an EmitsAckedEarly wait acked but did not
	// deliver; a new process starts without them (a crash loses them).
	acked []engine.Output
	// emitting counts the process's StartEmit calls not yet waited for.
	emitting int
	// proc numbers the slot's processes (start counts them).
	proc int
	// view is the process's view of the lookup table (Tables), on a
	// backend of its own; viewTargets are the table partitions' high
	// watermarks when it opened; lookups the least offset of each key's
	// log the view has applied, as the process's lookups showed it.
	view        *view.View[int]
	viewBackend *sim.Backend
	viewTargets []int64
	lookups     map[string]int64
}

type foreignTxn struct {
	p    *sim.Producer
	tp   store.TopicPartition // the snapshot partition
	hang bool
}

// New returns a world with the input and snapshot topics created and no
// member started.
func New(cfg Config) (*World, error) {
	cfg.setDefaults()
	w := &World{
		cfg:  cfg,
		c:    sim.New(sim.Config{Seed: cfg.Seed, SessionTimeout: cfg.SessionTimeout, SerialWakeups: true}),
		wake: make(chan struct{}, 1),
	}
	if err := w.c.CreateTopic(InputTopic, sim.TopicConfig{Partitions: cfg.Partitions}); err != nil {
		return nil, err
	}
	if err := w.c.CreateTopic(snapshotTopic, w.snapshotTopicConfig()); err != nil {
		return nil, err
	}
	if cfg.ExactlyOnce && cfg.Mode != store.Transactional {
		return nil, fmt.Errorf("world: ExactlyOnce needs Mode Transactional")
	}
	if cfg.outputs() {
		if err := w.c.CreateTopic(OutputTopic, sim.TopicConfig{Partitions: cfg.Partitions}); err != nil {
			return nil, err
		}
	}
	if cfg.TrustCheckpoints && !cfg.WarmRestarts {
		return nil, fmt.Errorf("world: TrustCheckpoints needs WarmRestarts")
	}
	if cfg.TimerRemovalsLost {
		if !cfg.Timers {
			return nil, fmt.Errorf("world: TimerRemovalsLost needs Timers")
		}
		w.lost = &removalsLost{seen: map[string][]store.Timer{}}
	}
	if (cfg.StandbySkipsRecords || cfg.StandbyCheckpointsDropped || cfg.StandbyReplicas != 0) && !cfg.Standby {
		return nil, errNoStandby
	}
	if cfg.Standby {
		if cfg.Mode != store.Transactional {
			return nil, fmt.Errorf("world: Standby needs Mode Transactional")
		}
		w.standby = newStandbys()
	}
	if cfg.TablesNotAwaited && !cfg.Tables {
		return nil, fmt.Errorf("world: TablesNotAwaited needs Tables")
	}
	if cfg.Tables {
		if err := w.c.CreateTopic(TableTopic, sim.TopicConfig{Partitions: cfg.Partitions, Compacted: true}); err != nil {
			return nil, err
		}
		w.table = newTable()
	}
	w.members = make([]*member, cfg.Members)
	for i := range w.members {
		w.members[i] = &member{slot: i}
	}
	if cfg.WarmRestarts {
		if err := w.makeCacheDirs(); err != nil {
			w.removeCacheDirs()
			return nil, err
		}
	}
	w.checker = newChecker(w)
	w.rec = history.NewRecorder(func() time.Duration { return w.c.Now().Sub(sim.Epoch) })
	w.rec.RecordInCaller()
	return w, nil
}

var snapshotTopic = InputTopic + "-snapshots"

func (w *World) snapshotTopicConfig() sim.TopicConfig {
	return sim.TopicConfig{Partitions: w.cfg.Partitions, Compacted: true, DeleteRetention: w.cfg.DeleteRetention}
}

// makeCacheDirs creates a cache directory for every member slot, under
// CacheDir or a temporary directory of the world's own.
func (w *World) makeCacheDirs() error {
	base := w.cfg.CacheDir
	if base == "" {
		dir, err := os.MkdirTemp("", "snapfence-world-")
		if err != nil {
			return fmt.Errorf("world: cache directories: %w", err)
		}
		w.created = append(w.created, dir)
		base = dir
	}
	for _, m := range w.members {
		dir, err := os.MkdirTemp(base, "m"+strconv.Itoa(m.slot)+"-")
		if err != nil {
			return fmt.Errorf("world: cache directories: %w", err)
		}
		if base == w.cfg.CacheDir {
			w.created = append(w.created, dir)
		}
		m.dir = dir
	}
	return nil
}

// removeCacheDirs removes the directories the world created.
func (w *World) removeCacheDirs() {
	for _, dir := range w.created {
		_ = os.RemoveAll(dir)
	}
	w.created = nil
}

// Cluster is the world's simulated cluster.
func (w *World) Cluster() *sim.Cluster { return w.c }

// Recorder is the world's history: steps, input events, and every store
// call of its members with its outcome.
func (w *World) Recorder() *history.Recorder { return w.rec }

// Config is the world's configuration, defaults filled in.
func (w *World) Config() Config { return w.cfg }

// Apply carries out one step and returns the invariant violations it
// caused (nil if none). Steps a world cannot take in its state (polling a
// member that is not running, ending a foreign transaction that is not
// open) do nothing, so every list of steps is a valid scenario.
func (w *World) Apply(s Step) []Violation {
	w.steps++
	w.rec.BeginStep(w.steps, s.String())
	if s.Member < 0 || s.Member >= len(w.members) {
		s.Member = 0
	}
	m := w.members[s.Member]
	switch s.Kind {
	case Produce:
		w.produce(s.Key, s.Delta, s.D)
	case Poll:
		if m.state == running && m.busy == nil {
			w.step(m)
		}
	case PollFirst:
		if m.state == running && m.busy == nil {
			m.src.NewsLast()
			w.step(m)
		}
	case Flush:
		if m.state == running && m.busy == nil {
			m.src.RecordsCame() // its poll is over
			w.flush(m, m.r.FlushAll)
		}
	case Persist:
		if m.state == running && m.busy == nil {
			m.src.RecordsCame()
			w.flush(m, m.r.Persist)
		}
	case SlowFetches:
		w.c.SlowFetches(s.D, 1)
	case Advance:
		w.advance(s.D)
	case Join:
		if m.state == absent || m.state == crashed {
			w.start(m)
			// The client joins the group as it starts, as franz-go's
			// does, not at the member's first poll.
			w.background(m)
		}
	case Leave:
		if m.state == running {
			w.leave(m)
		}
	case Pause:
		if m.state == running {
			m.src.Member().Stall()
			m.state = paused
		}
	case Resume:
		if m.state == paused {
			w.resumeMember(m)
		}
	case Evict:
		if m.state == running {
			m.src.Member().Stall()
			m.state = paused
			w.advance(w.cfg.SessionTimeout + time.Second)
			w.resumeMember(m)
		}
	case Crash:
		if m.state == running || m.state == paused {
			w.crash(m)
		}
	case ForeignOpen:
		if w.foreign == nil {
			w.openForeign(s.Partition%w.cfg.Partitions, s.Hang)
		}
	case ForeignEnd:
		if w.foreign != nil {
			w.endForeign(s.Commit)
		}
	case Compact:
		_ = w.c.Compact(store.TopicPartition{Topic: snapshotTopic, Partition: int32(s.Partition % w.cfg.Partitions)})
	case Truncate:
		w.truncate(store.TopicPartition{Topic: snapshotTopic, Partition: int32(s.Partition % w.cfg.Partitions)})
	case Recreate:
		w.recreate()
	case Replicate, Wipe:
		switch {
		case w.standby == nil:
			w.rec.Add(history.Op{Kind: history.Unexpressed, Member: -1, Detail: "this world runs no standby replicas (the property tests' standby worlds do)"})
		case s.Kind == Wipe:
			w.wipe(m)
		case m.state == running && m.busy == nil:
			w.replicate(m)
		}
	case TablePut, TableOpen, TableEnd, ReadTable:
		switch {
		case w.table == nil:
			w.rec.Add(history.Op{Kind: history.Unexpressed, Member: -1, Detail: "this world has no lookup table (the property tests' table worlds do)"})
		case s.Kind == TableEnd:
			w.tableEnd(s.Commit)
		case s.Kind != ReadTable:
			w.tableWrite(s.Key, s.Delta == 0, s.Kind == TableOpen)
		case m.view != nil && m.state == running && m.busy == nil:
			w.readTable(m)
		}
	case Query:
		if m.state == running {
			w.query(m, s.Key)
		}
	case ReadView:
		w.readView()
	}
	w.settle()
	w.recordState()
	return w.checker.afterStep(s)
}

// recordState records in the history what changed in the step: each
// member's state, generation and partitions, and each snapshot
// partition's high watermark and last stable offset.
func (w *World) recordState() {
	for _, m := range w.members {
		op := history.Op{Kind: history.Member, Member: m.slot, Detail: m.state.String(), Generation: -1}
		if m.src != nil && m.state != absent {
			op.Generation = m.src.Identity().Generation
			for _, tp := range m.src.Member().Owned() {
				op.Owned = append(op.Owned, tp.Partition)
			}
		}
		if m.last.Detail != op.Detail || m.last.Generation != op.Generation || !slices.Equal(m.last.Owned, op.Owned) {
			if m.last.Kind != "" || op.Detail != absent.String() {
				w.rec.Add(op)
			}
			m.last = op
		}
	}
	for p := range w.cfg.Partitions {
		_, lso, hw, _ := w.c.Offsets(store.TopicPartition{Topic: snapshotTopic, Partition: int32(p)})
		if w.logs == nil {
			w.logs = make([][2]int64, w.cfg.Partitions)
		}
		if w.logs[p] != [2]int64{hw, lso} {
			w.logs[p] = [2]int64{hw, lso}
			w.rec.Add(history.Op{Kind: history.Log, Member: -1, Partition: int32(p), HW: hw, LSO: lso})
		}
	}
}

// advance moves virtual time by d, in slices of a third of the session
// timeout with the group work of every live member before each and after
// the last (groupWork): a real
// client heartbeats from a goroutine of its own, also while its
// application is busy (a recovery waiting in the assignment callback),
// and, while it is not, rejoins a round, takes a completed round's
// assignment or rejoins as new after its eviction, running the rebalance
// callbacks between polls. Paused and crashed members do none of it.
func (w *World) advance(d time.Duration) {
	slice := w.cfg.SessionTimeout / 3
	beat := func() {
		for _, m := range w.members {
			if m.state == running && m.busy != nil {
				m.src.Member().Heartbeat()
			}
		}
		w.groupWork()
	}
	passed := d > 0
	for d > 0 {
		beat()
		dd := min(d, slice)
		w.c.Advance(dd)
		d -= dd
		w.settle()
	}
	if passed {
		beat() // what the last slice's time did (a session expired)
	}
}

// produce appends an event of key; with Timers, one with delta and timer
// above 0 sets a timer that long after it.
func (w *World) produce(key string, delta int, timer time.Duration) {
	tp := store.TopicPartition{Topic: InputTopic, Partition: PartitionOf(key, w.cfg.Partitions)}
	value, ev := Value(delta), Event{Partition: tp.Partition, Key: key, Delta: delta}
	timed := w.cfg.Timers && delta != 0 && timer > 0
	if timed {
		value = TimerValue(delta, timer)
	}
	offs, err := w.c.Produce(tp, wire.Record{Key: []byte(key), Value: []byte(value)})
	if err != nil {
		panic(fmt.Sprintf("world: producing to %s: %v", tp, err)) // the world's own topic: a bug
	}
	ev.Offset = offs[0]
	if w.table != nil {
		w.table.producedAt(tp.Partition, ev.Offset)
	}
	if timed {
		ev.TimerAt = TimerAt(w.c.Now(), timer, ev.Offset) // the record's timestamp is its append time, now
	}
	for _, m := range w.members {
		if m.state == running && slices.Contains(m.src.Member().Owned(), tp) {
			m.src.RecordsCame() // a poll waiting for records has them
		}
	}
	w.ledger = append(w.ledger, ev)
	w.rec.Add(history.Op{Kind: history.Produce, Member: -1, Partition: tp.Partition, Offset: offs[0], Key: key, Delta: delta})
}

// start starts a member's process: a new engine (an empty cache, or the
// slot's cache directory under WarmRestarts), a new store backend, a new
// group member.
func (w *World) start(m *member) {
	be, err := w.c.NewBackend(sim.BackendConfig{
		Mode: w.cfg.Mode, TransactionalIDPrefix: Prefix,
		// The scenarios of the design name the snapshot topic after the
		// input alone, and the worlds' histories are compared by name.
		SnapshotTopic:           sim.LegacySnapshotTopic,
		MaxWritesPerTransaction: w.cfg.MaxWritesPerTransaction,
		TransactionTimeout:      w.cfg.TransactionTimeout,
		RecoveryStallTimeout:    w.cfg.StallTimeout,
		WriteLatency:            w.cfg.WriteLatency,
	})
	if err != nil {
		panic(fmt.Sprintf("world: backend: %v", err))
	}
	m.proc++
	checked := &checkedBackend{Backend: history.Backend(be, w.rec, m.slot), w: w, m: m}
	ecfg := engine.Config[int]{
		Fold: Fold, Codec: IntCodec{}, Store: checked,
		// Without WarmRestarts (or Standby) every recovery reads in full,
		// and each is checked complete. With it, the slot's cache
		// outlives the process (or holds the standby replicas' copies), a
		// delta is checked against the committed snapshots (invariant 9).
		FullRecovery: !w.cfg.WarmRestarts && !w.cfg.Standby, Dir: m.dir,
		PersistInterval: w.cfg.PersistInterval, CommitInterval: w.cfg.CommitInterval,
		Emit: func(_ context.Context, outs []engine.Output) error { return w.deliver(m, outs) },
	}
	if w.cfg.Timers {
		ecfg.OnTimer = OnTimer
	}
	if w.standby != nil {
		w.standby.started(m)
		ecfg.StandbyReplicas, ecfg.Store = w.cfg.StandbyReplicas, followingBackend{checkedBackend: checked, follower: be}
		if ecfg.StandbyReplicas == 0 {
			ecfg.StandbyReplicas = len(w.members) - 1
		}
		ecfg.Observer = standbyObserver{w: w, m: m, proc: m.proc}
	}
	if w.table != nil {
		w.openView(m)
		ecfg.Fold, ecfg.Tables = w.lookupFold(m, m.proc, m.view), []engine.Table{worldTable{w: w, v: m.view}}
	}
	if w.cfg.PipelinedEmits {
		ecfg.Emit, ecfg.StartEmit = nil, func(_ context.Context, outs []engine.Output) func() error {
			m.emitting++
			if !w.cfg.EmitsAckedEarly {
				return func() error { m.emitting--; return w.deliver(m, outs) }
			}
			return func() error {
				m.emitting--
				late := m.acked
				m.acked = outs
				return w.deliver(m, late)
			}
		}
	}
	if w.cfg.WriteLatency > 0 {
		ecfg.FlushBatch = w.cfg.MaxWritesPerTransaction
		ecfg.MaxWritesInFlight = 2 * ecfg.FlushBatch
	}
	if w.cfg.ExactlyOnce {
		ecfg.Emit, ecfg.ExactlyOnce, ecfg.OutputTopics = nil, true, []string{OutputTopic}
		// Batches sealed by the cap too, not only by the interval.
		ecfg.MaxTransactionRecords = 2 * w.cfg.MaxWritesPerTransaction
	}
	eng, err := engine.New(ecfg)
	if err != nil {
		m.closeView()
		panic(fmt.Sprintf("world: engine: %v", err))
	}
	in := simsource.New(w.c, Group, w.cfg.Protocol, 0, InputTopic)
	if opener := in; w.cfg.RestartsUnconfirmed {
		in = input.OpenFunc(func(o input.Opening) (input.Source, error) {
			s, err := opener.Open(o)
			if err != nil {
				return nil, err
			}
			return unconfirmedSource{s.(*simsource.Source)}, nil
		})
	}
	r, err := eng.Join(in)
	if err != nil {
		panic(fmt.Sprintf("world: runner: %v", err))
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.recovered = map[int32]error{}
	src, ok := r.Source().(*simsource.Source)
	if !ok {
		src = r.Source().(unconfirmedSource).Source
	}
	m.eng, m.r, m.src, m.state, m.acked, m.emitting = eng, r, src, running, nil, 0
}

// unconfirmedSource is RestartsUnconfirmed's source: the coordinator
// confirms every member as every partition's owner.
type unconfirmedSource struct{ *simsource.Source }

func (unconfirmedSource) ConfirmOwner(context.Context, store.TopicPartition, store.GroupIdentity) error {
	return nil
}

// OutputsInFlight counts the running members with outputs in flight
// (PipelinedEmits: a StartEmit call not yet waited for).
func (w *World) OutputsInFlight() int {
	n := 0
	for _, m := range w.members {
		if m.state == running && m.emitting > 0 {
			n++
		}
	}
	return n
}

// deliver hands m's outputs to the checker and, with ProduceOutputs, to
// the output topic.
func (w *World) deliver(m *member, outs []engine.Output) error {
	w.checker.emitted(outs)
	if w.cfg.ProduceOutputs {
		return w.emitPlain(m, outs)
	}
	return nil
}

// emitPlain is at-least-once output: a plain producer appends m's
// outputs to the output topic as the fold makes them.
func (w *World) emitPlain(m *member, outs []engine.Output) error {
	for _, o := range outs {
		tp := store.TopicPartition{Topic: o.Topic, Partition: store.OutputPartition(o.Key, w.cfg.Partitions)}
		_, err := w.c.Produce(tp, wire.Record{Key: o.Key, Value: o.Value})
		w.rec.Add(history.EmitOp(m.slot, o.Key, o.Value, history.OutcomeOf(err), err))
		if err != nil {
			return err
		}
	}
	return nil
}

// step runs one engine step of m on a goroutine of its own; settle waits
// for it to finish or park.
func (w *World) step(m *member) {
	done := make(chan error, 1)
	m.busy, m.errsBefore, m.polling = done, len(m.r.Errors()), true
	w.checker.stepStarted(m)
	go func() {
		done <- m.r.Step(m.ctx)
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}()
}

// resumeMember resumes paused m. If it was paused while its poll waited for
// records and that wait has run out since (simsource.Source.WaitEnded),
// the poll ends now and the engine does what fell due (a flush, a
// persist) before the member hears what the group did meanwhile: a
// Kafka client's poll ends so while its process is frozen, and the
// writes that follow go out as it wakes (kfake's world and a broker's
// show it).
func (w *World) resumeMember(m *member) {
	m.src.Member().Resume()
	m.state = running
	if m.busy == nil && m.src.WaitEnded() {
		m.src.EndWait()
		w.step(m)
	}
}

// flush runs m's FlushAll or Persist on a goroutine of its own, as step
// does.
func (w *World) flush(m *member, fn func(context.Context)) { w.run(m, fn) }

// groupWork runs the group work of every live member whose process is
// idle, one member at a time (so that a run is the same every time), and
// again while it moved a member's identity: a round one member's rejoin
// completes is another's to sync to at once, as its client's join
// response arrives. A member busy with its process's step heartbeats
// only (advance).
func (w *World) groupWork() {
	for range len(w.members) + 1 {
		moved := false
		for _, m := range w.members {
			if m.state != running || m.busy != nil {
				continue
			}
			before := m.src.Identity()
			w.background(m)
			w.settle()
			moved = moved || m.src.Identity() != before
		}
		if !moved {
			return
		}
	}
}

// background runs m's client's group work (its source's Background) as
// run does.
func (w *World) background(m *member) { w.run(m, m.src.Background) }

// run runs fn, a step of m's process that is no poll, on a goroutine of
// its own, as step does.
func (w *World) run(m *member, fn func(context.Context)) {
	done := make(chan error, 1)
	m.busy, m.errsBefore, m.polling = done, len(m.r.Errors()), false
	w.checker.holds(m)
	go func() {
		fn(m.ctx)
		done <- nil
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}()
}

// settle returns once every member step in flight has finished or is
// parked on the cluster: then nothing moves until the next step. Reads the
// cluster woke go on one at a time, oldest first (sim.Cluster.Wake), each
// until it parks again or its step ends, so a run is the same every time.
func (w *World) settle() {
	for {
		// Calls that landed (in Advance, or inside another member's
		// call) go into the history before anyone reads what they wrote.
		w.rec.RecordDone()
		inFlight := 0
		for _, m := range w.members {
			if m.busy == nil {
				continue
			}
			select {
			case err := <-m.busy:
				m.busy = nil
				w.checker.stepEnded(m, err)
			default:
				inFlight++
			}
		}
		if w.viewBusy != nil {
			select {
			case <-w.viewBusy:
				w.viewBusy = nil
			default:
				inFlight++
			}
		}
		parked, woken, changed := w.c.Parked()
		if parked+woken >= inFlight {
			if woken > 0 && w.c.Wake() {
				continue
			}
			return
		}
		select {
		case <-changed:
		case <-w.wake:
		}
	}
}

// stop cancels m's step in flight, if any, and waits for it.
func (w *World) stop(m *member) {
	if m.busy == nil {
		return
	}
	m.cancel()
	err := <-m.busy
	m.busy = nil
	w.checker.stepEnded(m, err)
}

func (w *World) leave(m *member) {
	w.stop(m)
	_ = m.r.Close(context.Background())
	_ = m.eng.Close()
	m.closeView()
	if len(m.acked) > 0 {
		// EmitsAckedEarly: a clean leave delivers what was acked, so that
		// only a crash loses outputs.
		_ = w.deliver(m, m.acked)
		m.acked = nil
	}
	m.state = absent
}

// crash kills m: its member stalls for good (no poll, no heartbeat, no
// leave: the group evicts it when its session expires), and its runner is
// never stepped or closed again (no flush, no commit, no revoke); its
// cache goes with its engine. A transaction of its flush is left open on
// every snapshot partition it owned, under the partition's
// transactional.id (a takeover must abort it; a reader must never see
// it).
func (w *World) crash(m *member) {
	w.stop(m)
	// Only a member up to date with the group holds its partitions'
	// producers: a zombie's were fenced by their new owners already.
	var owned []store.TopicPartition
	id := m.src.Identity()
	if current, _ := w.c.MemberEpochs(Group, id.MemberID); current >= 0 && current == id.Generation {
		owned = m.src.Member().Owned()
	}
	m.src.Member().Stall()
	m.r.Abandon()
	_ = m.eng.Close()
	m.closeView()
	m.state = crashed
	if w.cfg.Mode != store.Transactional {
		return
	}
	for _, tp := range owned {
		p := w.c.InitProducerID(store.TransactionalID(Prefix, tp), w.cfg.TransactionTimeout)
		snap := store.TopicPartition{Topic: snapshotTopic, Partition: tp.Partition}
		s := store.Snapshot{Key: []byte("crash-" + strconv.Itoa(m.slot)), Value: []byte("-999999"), Offset: 1 << 40}
		if _, err := p.Produce(snap, wire.EncodeSnapshot("", s)); err == nil {
			w.rec.Add(history.Op{Kind: history.Abandon, Member: m.slot, Partition: tp.Partition,
				Key: string(s.Key), Offset: s.Offset, Value: string(s.Value), Outcome: history.Unknown})
		}
		if w.cfg.ExactlyOnce {
			w.abandonOutput(m, p, tp.Partition)
		}
	}
}

// abandonOutput leaves, in a crashed member's open transaction, an output
// of the newest input event of partition (if any): the takeover must
// abort it, and no read_committed reader may ever see it.
func (w *World) abandonOutput(m *member, p *sim.Producer, partition int32) {
	var last *Event
	for i, e := range w.ledger {
		if e.Partition == partition {
			last = &w.ledger[i]
		}
	}
	if last == nil {
		return
	}
	key, value := []byte(last.Key), []byte(history.OutputValue(last.Partition, last.Offset))
	tp := store.TopicPartition{Topic: OutputTopic, Partition: store.OutputPartition(key, w.cfg.Partitions)}
	if _, err := p.Produce(tp, wire.Record{Key: key, Value: value}); err == nil {
		w.rec.Add(history.EmitOp(m.slot, key, value, history.Failed, errAbandoned))
	}
}

var errAbandoned = errors.New("abandoned in an open transaction by a crashed process")

// truncate cuts tp back to its last stable offset if only records of open
// transactions lie above it.
func (w *World) truncate(tp store.TopicPartition) {
	_, lso, hw, err := w.c.Offsets(tp)
	if err != nil || lso >= hw {
		return
	}
	ents, err := w.c.Entries(tp)
	if err != nil {
		return
	}
	committed := committedEntries(ents)
	for _, e := range ents {
		_, done := committed[e.Offset]
		if e.Offset >= lso && (e.Control != sim.NoControl || !e.Transactional || e.Aborted || done) {
			return // a marker or a finished transaction's record: acknowledged data
		}
	}
	_ = w.c.Truncate(tp, lso)
}

// recreate deletes the snapshot topic and creates it again (a new topic
// id, the same partitions and configuration), and restores into each
// partition, as an operator restoring from a backup would, the latest
// committed snapshot of every key not deleted, then offset markers up to
// the old high watermark: the offsets do not shrink, only the topic id
// tells the old topic from the new. A tombstone the input partition's
// committed offset does not cover yet (a persist's, ahead of it) is kept:
// the replay from the committed offset would fold the events before the
// delete onto no state, where the fold below the offset has one. It does nothing while a member's step
// is in flight or a transaction is open on a snapshot or output
// partition (the last stable offset below the high watermark).
func (w *World) recreate() {
	for _, m := range w.members {
		if m.busy != nil {
			return
		}
	}
	if w.foreign != nil {
		return
	}
	topics := []string{snapshotTopic}
	if w.cfg.outputs() {
		topics = append(topics, OutputTopic)
	}
	for _, topic := range topics {
		for p := range w.cfg.Partitions {
			if _, lso, hw, err := w.c.Offsets(store.TopicPartition{Topic: topic, Partition: int32(p)}); err != nil || lso < hw {
				return
			}
		}
	}
	restore := make([][]wire.Record, w.cfg.Partitions)
	committed := w.committedOffsets()
	for p := range w.cfg.Partitions {
		tp := store.TopicPartition{Topic: snapshotTopic, Partition: int32(p)}
		_, _, hw, _ := w.c.Offsets(tp)
		snaps := w.committedSnapshotsOf(tp)
		last := map[string]int{} // each key's last snapshot, by index
		for i, s := range snaps {
			last[string(s.Key)] = i
		}
		for i, s := range snaps {
			if last[string(s.Key)] == i && (!s.Tombstone || s.Offset >= committed[p]) {
				restore[p] = append(restore[p], wire.EncodeSnapshot("", s))
			}
		}
		for int64(len(restore[p])) < hw {
			restore[p] = append(restore[p], wire.EncodeOffsetMarker("", 0, store.GroupIdentity{}))
		}
	}
	if err := w.c.DeleteTopic(snapshotTopic); err != nil {
		panic(fmt.Sprintf("world: deleting %s: %v", snapshotTopic, err)) // the world's own topic: a bug
	}
	if err := w.c.CreateTopic(snapshotTopic, w.snapshotTopicConfig()); err != nil {
		panic(fmt.Sprintf("world: creating %s: %v", snapshotTopic, err))
	}
	for p, recs := range restore {
		if len(recs) == 0 {
			continue
		}
		tp := store.TopicPartition{Topic: snapshotTopic, Partition: int32(p)}
		if _, err := w.c.Produce(tp, recs...); err != nil {
			panic(fmt.Sprintf("world: restoring %s: %v", tp, err))
		}
	}
}

func (w *World) openForeign(partition int, hang bool) {
	p := w.c.InitProducerID(foreignID, w.cfg.TransactionTimeout)
	tp := store.TopicPartition{Topic: snapshotTopic, Partition: int32(partition)}
	// An offset marker: a valid snapfence record that recovery skips, so
	// committing it changes no state.
	if _, err := p.Produce(tp, wire.EncodeOffsetMarker("", 0, store.GroupIdentity{})); err != nil {
		return
	}
	if hang {
		w.c.Hang(foreignID)
	}
	w.foreign = &foreignTxn{p: p, tp: tp, hang: hang}
}

func (w *World) endForeign(commit bool) {
	f := w.foreign
	w.foreign = nil
	if f.hang {
		w.c.AbortHanging(foreignID)
		return
	}
	_ = f.p.EndTxn(commit)
}

// Quiesce lifts every fault (resumes paused members, ends the foreign
// transaction, restarts a member if none runs), then polls and advances
// time until every input partition's committed offset reaches its end, and
// checks the invariants that hold at quiescence: the exact fold (3),
// liveness (6) and the outputs (7).
func (w *World) Quiesce() []Violation {
	// The quiesce step begins before anything of it, in every world, so
	// that what a member does once the faults are lifted (a takeover, a
	// flush) is the quiesce's, not the last step's.
	w.rec.BeginStep(0, "quiesce")
	for _, m := range w.members {
		if m.state == paused {
			w.resumeMember(m)
		}
	}
	if w.foreign != nil {
		w.endForeign(false)
	}
	if w.table != nil {
		w.tableEnd(false)
	}
	w.c.SlowFetches(0, 0)
	if !slices.ContainsFunc(w.members, func(m *member) bool { return m.state == running }) {
		w.start(w.members[0])
	}
	w.settle()
	w.recordState()
	var vs []Violation
	const rounds = 200
	for round := 0; round < rounds; round++ {
		// With Timers, caught up once every due timer fired too.
		if w.caughtUp() && (!w.cfg.Timers || w.settleTimers()) {
			for _, m := range w.members {
				if m.state == running && len(m.acked) > 0 {
					// EmitsAckedEarly: a live process delivers them yet.
					_ = w.deliver(m, m.acked)
					m.acked = nil
				}
			}
			w.recordOffsets()
			w.finalRead()
			if w.cfg.outputs() {
				w.readOutputs(false)
				counts := w.readOutputs(true)
				if w.cfg.ExactlyOnce {
					// Emit is not called: the outputs are what a
					// read_committed consumer sees.
					w.checker.outputs = counts
				}
			}
			vs = append(vs, w.checker.atQuiescence()...)
			return append(vs, CheckHistory(w.rec.Ops())...)
		}
		for _, m := range w.members {
			if m.state == running && m.busy == nil {
				w.step(m)
				w.settle()
				w.recordState()
				vs = append(vs, w.checker.afterStep(Step{Kind: Poll, Member: m.slot})...)
			}
		}
		w.advance(w.cfg.PersistInterval)
	}
	return append(vs, w.checker.violation(6,
		"with every fault lifted, the committed offsets %v did not reach the input's ends %v in %d rounds (%s of virtual time); member errors: %v",
		w.committedOffsets(), w.endOffsets(), rounds, time.Duration(rounds)*w.cfg.PersistInterval, w.memberErrors()))
}

// finalRead records a read_committed read of every snapshot partition in
// the history, as the final read the history checker judges against every
// input event.
func (w *World) finalRead() {
	for p := range w.cfg.Partitions {
		tp := store.TopicPartition{Topic: snapshotTopic, Partition: int32(p)}
		n := finalReadBase + p
		w.rec.Add(history.Op{Kind: history.ReadStart, Member: -1, Partition: int32(p), Read: n, Detail: history.FinalRead})
		ents, err := w.c.Read(tp, true)
		if err != nil {
			panic(fmt.Sprintf("world: reading %s: %v", tp, err))
		}
		for _, e := range ents {
			s, kind, err := wire.DecodeRecord(tp, e.Offset, e.Record)
			if err != nil || kind == wire.KindOffsetMarker {
				continue
			}
			w.rec.Add(history.Op{Kind: history.Read, Member: -1, Partition: int32(p), Read: n,
				Key: string(s.Key), Offset: s.Offset, Value: string(s.Value), Tombstone: s.Tombstone})
		}
		w.rec.Add(history.Op{Kind: history.ReadEnd, Member: -1, Partition: int32(p), Read: n, Outcome: history.OK})
	}
}

// readOutputs records in the history a read of the whole output topic,
// read_committed or read_uncommitted, and returns the outputs it saw
// counted by the event they name ("partition:offset").
func (w *World) readOutputs(readCommitted bool) map[string]int {
	iso := history.ReadUncommitted
	if readCommitted {
		iso = history.ReadCommitted
	}
	w.rec.Add(history.Op{Kind: history.OutputRead, Member: -1, Detail: iso})
	counts := map[string]int{}
	for p := range w.cfg.Partitions {
		tp := store.TopicPartition{Topic: OutputTopic, Partition: int32(p)}
		ents, err := w.c.Read(tp, readCommitted)
		if err != nil {
			panic(fmt.Sprintf("world: reading %s: %v", tp, err))
		}
		for _, e := range ents {
			if e.Control != sim.NoControl {
				continue
			}
			w.rec.Add(history.OutputOp(iso, e.Record.Key, e.Record.Value))
			counts[string(e.Record.Value)]++
		}
	}
	return counts
}

// finalReadBase numbers the final reads apart from the members'.
const finalReadBase = 1 << 30

func (w *World) caughtUp() bool {
	ends, committed := w.endOffsets(), w.committedOffsets()
	for p, end := range ends {
		if committed[p] != end {
			return false
		}
	}
	for _, m := range w.members {
		if m.busy != nil {
			return false
		}
	}
	if w.cfg.outputs() {
		// A crashed process's transaction left open on an output
		// partition (abandonOutput) hides every later output there from a
		// read_committed reader until it times out, or the crashed
		// member's partition's new owner aborts it. That is a fault still
		// active: the outputs are judged once no transaction is open.
		for p := range w.cfg.Partitions {
			_, lso, hw, _ := w.c.Offsets(store.TopicPartition{Topic: OutputTopic, Partition: int32(p)})
			if lso < hw {
				return false
			}
		}
	}
	return true
}

// recordOffsets records each input partition's committed and end
// offsets at quiescence (history.Offsets).
func (w *World) recordOffsets() {
	committed, ends := w.committedOffsets(), w.endOffsets()
	for p := range committed {
		w.rec.Add(history.Op{Kind: history.Offsets, Member: -1, Partition: int32(p), Offset: committed[p], HW: ends[p]})
	}
}

func (w *World) endOffsets() []int64 {
	out := make([]int64, w.cfg.Partitions)
	for p := range out {
		_, _, hw, _ := w.c.Offsets(store.TopicPartition{Topic: InputTopic, Partition: int32(p)})
		out[p] = hw
	}
	return out
}

func (w *World) committedOffsets() []int64 {
	out := make([]int64, w.cfg.Partitions)
	for p := range out {
		off, ok := w.c.CommittedOffset(Group, store.TopicPartition{Topic: InputTopic, Partition: int32(p)})
		if !ok {
			off = 0
		}
		out[p] = off
	}
	return out
}

func (w *World) memberErrors() []string {
	var out []string
	for _, m := range w.members {
		if m.r == nil {
			continue
		}
		for _, err := range m.r.Errors() {
			out = append(out, fmt.Sprintf("m%d: %v", m.slot, err))
		}
	}
	return out
}

// Close stops every member, as processes killed at once (no revoke, no
// flush), and closes their engines; the world is done.
func (w *World) Close() {
	if w.foreign != nil {
		w.endForeign(false)
	}
	for _, m := range w.members {
		if m.state == running || m.state == paused {
			w.stop(m)
			m.src.Member().Stall()
			m.r.Abandon()
			_ = m.eng.Close()
			m.closeView()
			m.state = absent
		}
	}
	if w.view != nil {
		w.viewCancel()
		if w.viewBusy != nil {
			<-w.viewBusy
		}
		w.view.Close()
		_ = w.viewBackend.Close()
	}
	w.removeCacheDirs()
}

// History is the cluster's history as JSON lines.
func (w *World) History() []byte { return w.c.HistoryJSON() }
