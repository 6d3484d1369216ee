// Package kfakeworld is the second world of the property tests: the step
// vocabulary of internal/world, carried out by real franz-go clients and
// store/kafka against kfake in virtual time (a testing/synctest bubble),
// or with Config.Brokers on a real Kafka cluster in real time. How it is
// driven and how it differs from the simulated world and from kfake:
// docs/testing.md, "The kfake world".
package kfakeworld

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"
	"github.com/snapfence/snapfence/internal/input"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/internal/netfreeze"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// Partitions of the input and snapshot topics.
const Partitions = 2

const foreignID = "foreign-producer"

// Config configures a world. Zero values take the defaults given.
type Config struct {
	// Mode is the store's mode: store.Transactional or store.Plain.
	Mode store.Mode
	// Protocol is the group's protocol; default classic eager (franz-go's
	// range balancer). Classic cooperative is the cooperative-sticky
	// balancer, Consumer the KIP-848 protocol.
	Protocol sim.Protocol
	// Members is the number of member slots; default 3.
	Members int
	// PersistInterval and CommitInterval of the engines; default 5 s and
	// 10 s.
	PersistInterval, CommitInterval time.Duration
	// SessionTimeout of the group (classic: the members'; consumer
	// protocol: the broker's); default 10 s.
	SessionTimeout time.Duration
	// HeartbeatInterval of the members; default 1 s.
	HeartbeatInterval time.Duration
	// StallTimeout of recoveries; default 1 min.
	StallTimeout time.Duration
	// TransactionTimeout of the snapshot producers and the foreign one;
	// default 30 s.
	TransactionTimeout time.Duration
	// MaxWritesPerTransaction; default 4, so flushes span transactions.
	MaxWritesPerTransaction int

	// ExactlyOnce and ProduceOutputs are internal/world's (world.Config):
	// the outputs go to the world's output topic in the batches'
	// transactions, or at least once by a plain producer in StartEmit's wait; at
	// quiescence the topic is read read_committed and read_uncommitted
	// into the history, and invariant 8 is checked.
	ExactlyOnce, ProduceOutputs bool
	// Timers is internal/world's (world.Config): a Produce step with D
	// sets a processing-time timer for its key; at quiescence time moves
	// past every timer, and invariant 10 is checked.
	Timers bool

	// Brokers, if set, runs the world on a real Kafka cluster in real
	// time instead of kfake (the seed brokers, host:port; see
	// docs/testing.md, "On a real broker"). Outside a synctest bubble.
	Brokers []string
	// TLS and SASL, if set, secure every connection to Brokers.
	TLS  *tls.Config
	SASL sasl.Mechanism
	// Name makes the real-broker world's topics, group and
	// transactional.ids its own ("snapfence-simulate-<Name>..."); default
	// the time and a random tail.
	Name string
	// Logf, if set, is told what a real-broker world set up and which of
	// the broker's settings it had to take.
	Logf func(format string, args ...any)
}

func (cfg *Config) setDefaults() {
	if cfg.Protocol == 0 {
		cfg.Protocol = sim.ClassicEager
	}
	// The settings both worlds have take internal/world's defaults.
	d := world.Config{
		Members: cfg.Members, PersistInterval: cfg.PersistInterval, CommitInterval: cfg.CommitInterval,
		SessionTimeout: cfg.SessionTimeout, StallTimeout: cfg.StallTimeout,
		TransactionTimeout: cfg.TransactionTimeout, MaxWritesPerTransaction: cfg.MaxWritesPerTransaction,
	}.WithDefaults()
	cfg.Members, cfg.PersistInterval, cfg.CommitInterval = d.Members, d.PersistInterval, d.CommitInterval
	cfg.SessionTimeout, cfg.StallTimeout = d.SessionTimeout, d.StallTimeout
	cfg.TransactionTimeout, cfg.MaxWritesPerTransaction = d.TransactionTimeout, d.MaxWritesPerTransaction
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = time.Second
	}
}

// StepConfig is the internal/world configuration with this world's
// shape (members, partitions, mode), for step generators such as
// props.StepGen.
func (cfg Config) StepConfig() world.Config {
	cfg.setDefaults()
	return world.Config{Mode: cfg.Mode, Members: cfg.Members, Partitions: Partitions,
		ExactlyOnce: cfg.ExactlyOnce, ProduceOutputs: cfg.ProduceOutputs, Timers: cfg.Timers}.WithDefaults()
}

// outputs reports whether the outputs go to the output topic and are read
// back at quiescence.
func (cfg Config) outputs() bool { return cfg.ExactlyOnce || cfg.ProduceOutputs }

// requestTimeoutOverhead is franz-go's kgo.RequestTimeoutOverhead, left
// at its default: a member sends a JoinGroup kfake has not answered again
// after its rebalance timeout plus this.
const requestTimeoutOverhead = 10 * time.Second

// rebalanceTimeout is the members' kgo.RebalanceTimeout: franz-go's
// default (1 min) under the consumer protocol; under the classic ones
// min(SessionTimeout, requestTimeoutOverhead) / max(Members, 2), 3.3 s by
// default, below the session timeout and below requestTimeoutOverhead /
// (Members-1), which keeps kfake's classic groups from stalling (see
// docs/testing.md, "The kfake world", and
// TestKfakeMiscountsAMemberExpiredWhileSyncing).
func (cfg Config) rebalanceTimeout() time.Duration {
	if cfg.Protocol == sim.Consumer {
		return time.Minute
	}
	return min(cfg.SessionTimeout, requestTimeoutOverhead) / time.Duration(max(cfg.Members, 2))
}

// protocolOpt is the franz-go option of a protocol.
func protocolOpt(p sim.Protocol) kgo.Opt {
	switch p {
	case sim.ClassicCooperative:
		return kgo.Balancers(kgo.CooperativeStickyBalancer())
	case sim.Consumer:
		return kgo.ServerSideBalancer()
	}
	return kgo.Balancers(kgo.RangeBalancer())
}

// World is a kfake cluster with engine members, an input producer and
// fault controls, driven step by step by one goroutine of a synctest
// bubble.
type World struct {
	cfg     Config
	net     network // kfake's *kfake.VirtualNetwork, or a real cluster's
	c       *kfake.Cluster
	seeds   []string
	dir     string      // the cluster's data directory, for restarts
	cl      *kgo.Client // the input producer, and the admin client
	adm     *kadm.Client
	members []*member
	foreign *foreignTxn
	ledger  world.Ledger
	steps   int
	// rec records every input event, every Store call of the members
	// and the final read (internal/history).
	rec *history.Recorder
	// retired are the processes that left or crashed, still shutting
	// down in the background; Close waits for them.
	retired []*process
	// input, group, prefix and foreignID name the input topic, the
	// consumer group, the transactional.id prefix and the foreign
	// producer's transactional.id: internal/world's (and foreignID) on
	// kfake, the world's own on a real broker.
	input, group, prefix, foreignID string
	// snapshotTopic is the input topic's snapshot topic.
	snapshotTopic string
	// output is the output topic (world.OutputTopic on kfake, the
	// world's own on a real broker), if Config.outputs().
	output string
	// real is the real-broker mode's state (Config.Brokers); nil on kfake.
	real *realBroker

	// fetchLatency is the virtual time every recovery fetch takes (the
	// slow-fetches step; 0: none).
	fetchLatency atomic.Int64
	mu           sync.Mutex // guards outputs: StartEmit's waits run on member goroutines
	outputs      map[string]int

	// seen is each key's highest snapshot offset a reader has seen (1).
	seen map[string]int64
	// logs are the snapshot partitions' high watermarks and last stable
	// offsets last recorded (recordState).
	logs [][2]int64
	// began is when the world began, and asked the time its advance
	// steps asked for: on a real broker their difference is the drift of
	// its wall time, recorded at quiescence (history.Drift).
	began time.Time
	asked time.Duration

	// view is the world's view of the snapshot topic, opened by the
	// first read-view step, and viewBackend its reader.
	view        *view.View[int]
	viewBackend *kafka.Backend
}

type memberState int

const (
	absent memberState = iota
	running
	paused
	crashed
)

// String names a state as internal/world's does: the histories' member
// lines compare across worlds.
func (s memberState) String() string {
	return [...]string{"absent", "running", "paused", "crashed"}[s]
}

// member is one slot of the group; p is its process while it has one.
type member struct {
	slot  int
	state memberState
	p     *process
	// last is the member line last recorded (recordState).
	last history.Op
}

// process is one engine process: its engine and runner, its store
// backend, a freezer over each side of its connections.
type process struct {
	eng      *engine.Engine[int]
	r        *engine.Member[int]
	be       *kafka.Backend
	consumer *netfreeze.Freezer
	store    *netfreeze.Freezer
	cbs      callbacks
	ctx      context.Context
	cancel   context.CancelFunc
	// tracked stands between the consumer's callbacks and the runner.
	tracked *trackedHandler
	// busy is closed when the step in flight ends; nil if none.
	busy chan struct{}
	// stepErr is the last runner step's error (read once it has ended).
	stepErr error
	// thawConsumer: resumed, its consumer side not thawed yet.
	thawConsumer bool
	// down is closed once the process has shut down (after a leave, or
	// after a crash once the world closes).
	down chan struct{}
	// crashed: its consumer's connections stay frozen until Close kills
	// them.
	crashed bool
}

type foreignTxn struct {
	cl *kgo.Client
}

// New returns a world with the topics created and no member started. It
// must be called inside a synctest bubble, and the world closed (Close)
// before the bubble ends. With Config.Brokers it sets the world up on
// that cluster, outside any bubble, and fails if it cannot (unreachable,
// refused, or with group or transaction settings the world cannot run
// under).
func New(cfg Config) (*World, error) {
	cfg.setDefaults()
	w := &World{cfg: cfg, net: new(kfake.VirtualNetwork), outputs: map[string]int{}, seen: map[string]int64{}, began: time.Now()}
	began := time.Now() // the bubble's virtual time
	w.rec = history.NewRecorder(func() time.Duration { return time.Since(began) })
	w.input, w.group, w.prefix, w.foreignID = world.InputTopic, world.Group, world.Prefix, foreignID
	w.snapshotTopic = kafka.LegacySnapshotTopic(w.input)
	if cfg.ExactlyOnce && cfg.Mode != store.Transactional {
		return nil, errors.New("kfakeworld: ExactlyOnce needs Mode Transactional")
	}
	if cfg.outputs() {
		w.output = world.OutputTopic
	}
	if len(cfg.Brokers) > 0 {
		if err := w.openReal(); err != nil {
			return nil, fmt.Errorf("kfakeworld: %w", err)
		}
		return w, nil
	}
	dir, err := os.MkdirTemp("", "kfakeworld-")
	if err != nil {
		return nil, fmt.Errorf("kfakeworld: data directory: %w", err)
	}
	w.dir = dir
	if err := w.startCluster(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	w.seeds = w.c.ListenAddrs()
	w.cl, err = kgo.NewClient(kgo.SeedBrokers(w.seeds...), kgo.Dialer(w.net.DialContext),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		w.closeCluster()
		return nil, fmt.Errorf("kfakeworld: client: %w", err)
	}
	w.adm = kadm.NewClient(w.cl)
	ctx := context.Background()
	if err := kafka.CreateTopic(ctx, w.cl, world.InputTopic, Partitions, 1, nil); err != nil {
		w.closeCluster()
		return nil, fmt.Errorf("kfakeworld: %w", err)
	}
	compact := "compact"
	if err := kafka.CreateTopic(ctx, w.cl, w.snapshotTopic, Partitions, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
		w.closeCluster()
		return nil, fmt.Errorf("kfakeworld: %w", err)
	}
	if w.output != "" {
		if err := kafka.CreateTopic(ctx, w.cl, w.output, Partitions, 1, nil); err != nil {
			w.closeCluster()
			return nil, fmt.Errorf("kfakeworld: %w", err)
		}
	}
	w.members = make([]*member, cfg.Members)
	for i := range w.members {
		w.members[i] = &member{slot: i}
	}
	return w, nil
}

// startCluster starts the cluster on the world's data directory: fresh,
// or restarted from what the last one left there, on the same address.
func (w *World) startCluster() error {
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.Ports(9092), // the network is the world's own
		kfake.ListenFn(w.net.(*kfake.VirtualNetwork).Listen),
		kfake.DataDir(w.dir),
		kfake.GroupMinSessionTimeout(time.Second),
		kfake.BrokerConfigs(map[string]string{
			"group.consumer.session.timeout.ms":    strconv.Itoa(int(w.cfg.SessionTimeout.Milliseconds())),
			"group.consumer.heartbeat.interval.ms": strconv.Itoa(int(w.cfg.HeartbeatInterval.Milliseconds())),
			// kfake's own cleaner would compact while a transaction is
			// open; compaction runs only at compact steps (compact.go).
			"log.cleaner.backoff.ms": strconv.Itoa(int((100 * 24 * time.Hour).Milliseconds())),
		}),
	)
	if err != nil {
		return fmt.Errorf("kfakeworld: cluster: %w", err)
	}
	w.c = c
	return nil
}

// Config is the world's configuration, defaults filled in.
func (w *World) Config() Config { return w.cfg }

// History is the world's recorded history: the input events, every call
// of the members' engines into their stores with its outcome, and the
// final read at quiescence.
func (w *World) History() *history.Recorder { return w.rec }

// Apply carries out one step and returns the invariant violations found
// after it (nil if none). Steps a world cannot take in its state (polling
// a member that is not running or is busy, ending a foreign transaction
// that is not open) do nothing, so every list of steps is a valid
// scenario.
//
// A poll starts the member's Member.Step and lets virtual time run, a
// millisecond at a time, for up to pollSlices milliseconds while it has
// not returned: a poll that has records, or a flush that is due, returns
// in that time. A poll with nothing to fold waits for records until its
// next flush is due, as a real member does; it goes on in the background
// (the member is busy) and ends when records come or time passes.
func (w *World) Apply(s world.Step) []world.Violation {
	w.steps++
	if s.Member < 0 || s.Member >= len(w.members) {
		s.Member = 0
	}
	w.rec.BeginStep(w.steps, s.String())
	m := w.members[s.Member]
	switch s.Kind {
	case world.Produce:
		w.produce(s.Key, s.Delta, s.D)
	case world.Poll, world.PollFirst: // which of a fetch and a heartbeat goes first is franz-go's to decide
		if m.state == running {
			w.poll(m)
		}
	case world.Flush:
		if m.state == running {
			w.flush(m, m.p.r.FlushAll)
		}
	case world.Persist:
		if m.state == running {
			w.flush(m, m.p.r.Persist)
		}
	case world.SlowFetches:
		w.fetchLatency.Store(int64(s.D))
	case world.Advance:
		w.advance(s.D)
	case world.Join:
		if m.state == absent || m.state == crashed {
			w.start(m)
		}
	case world.Leave:
		if m.state == running {
			w.leave(m)
		}
	case world.Pause:
		if m.state == running {
			w.pause(m)
		}
	case world.Resume:
		if m.state == paused {
			w.resume(m)
		}
	case world.Evict:
		if m.state == running {
			w.pause(m)
			w.advance(w.cfg.SessionTimeout + time.Second)
			w.resume(m)
		}
	case world.Crash:
		if m.state == running || m.state == paused {
			w.crash(m)
		}
	case world.ForeignOpen:
		if w.foreign == nil {
			w.openForeign(s.Partition%Partitions, s.Hang)
		}
	case world.ForeignEnd:
		if w.foreign != nil {
			w.endForeign(s.Commit)
		}
	case world.Compact:
		if w.real == nil { // a real broker's cleaner runs on its own
			w.compact() // kfake's cleaner: every snapshot partition, see compact
		} else {
			w.rec.Add(history.Op{Kind: history.Unexpressed, Member: -1, Detail: "a broker's log cleaner compacts on its own schedule"})
		}
	case world.Query:
		if m.state == running {
			w.rec.Add(world.QueryOp(context.Background(), m.p.r, m.slot, s.Key, Partitions, engine.ReadCommitted))
		}
	case world.ReadView:
		w.readView()
	case world.Truncate:
		if w.real == nil { // nothing cuts a real broker's log
			w.truncate(int32(s.Partition % Partitions))
		} else {
			w.rec.Add(history.Op{Kind: history.Unexpressed, Member: -1, Detail: "nothing cuts a broker's log from outside"})
		}
	case world.Replicate, world.Wipe:
		w.rec.Add(history.Op{Kind: history.Unexpressed, Member: -1, Detail: "standby replicas run only in the simulated cluster's standby worlds (the property tests')"})
	case world.TablePut, world.TableOpen, world.TableEnd, world.ReadTable:
		w.rec.Add(history.Op{Kind: history.Unexpressed, Member: -1, Detail: "lookup tables run only in the simulated cluster's table worlds (the property tests')"})
	case world.Recreate:
		w.rec.Add(history.Op{Kind: history.Unexpressed, Member: -1, Detail: "a restore of the snapshot topic runs only on the simulated cluster"})
	}
	w.wait()
	w.recordState()
	return w.afterStep()
}

// recordState records in the history what changed in the step, as
// internal/world's does: each member's state, generation and partitions
// (those its rebalance callbacks handed it), and each snapshot
// partition's high watermark and last stable offset.
func (w *World) recordState() {
	for _, m := range w.members {
		op := history.Op{Kind: history.Member, Member: m.slot, Detail: m.state.String(), Generation: -1}
		switch {
		case m.state == crashed:
			// A dead process's client says nothing more: what it held
			// when it died, as the sim's stalled member goes on holding.
			op.Generation, op.Owned = m.last.Generation, m.last.Owned
		case m.p != nil && m.state != absent:
			op.Generation = m.p.r.Source().Identity().Generation
			op.Owned = m.p.owned()
		}
		if m.last.Detail != op.Detail || m.last.Generation != op.Generation || !slices.Equal(m.last.Owned, op.Owned) {
			if m.last.Kind != "" || op.Detail != absent.String() {
				w.rec.Add(op)
			}
			m.last = op
		}
	}
	lsos, hws := w.snapshotEnds()
	if w.logs == nil {
		w.logs = make([][2]int64, Partitions)
	}
	for p := range Partitions {
		if w.logs[p] != [2]int64{hws[p], lsos[p]} {
			w.logs[p] = [2]int64{hws[p], lsos[p]}
			w.rec.Add(history.Op{Kind: history.Log, Member: -1, Partition: int32(p), HW: hws[p], LSO: lsos[p]})
		}
	}
}

// owned lists the input partitions p's callbacks handed it and have not
// taken back.
func (p *process) owned() []int32 { return p.tracked.ownedPartitions() }

// pollSlices bounds the virtual milliseconds a poll step lets pass while
// its runner step has not returned.
const pollSlices = 10

// thawPending thaws the consumer side of every resumed member.
func (w *World) thawPending() {
	for _, m := range w.members {
		if m.state == running && m.p.thawConsumer {
			m.p.thawConsumer = false
			m.p.consumer.Thaw()
		}
	}
	w.wait()
}

// pause freezes both sides of m's connections (a resumed member whose
// consumer was still to thaw stays frozen).
func (w *World) pause(m *member) {
	m.p.thawConsumer = false
	m.p.consumer.Freeze()
	m.p.store.Freeze()
	m.state = paused
}

func (w *World) resume(m *member) {
	m.p.store.Thaw()
	m.p.thawConsumer = true
	m.state = running
}

// idle reports whether m's process can take a step: none in flight, no
// rebalance callback running.
func (p *process) idle() bool {
	if p.busy != nil {
		select {
		case <-p.busy:
			p.busy = nil
		default:
			return false
		}
	}
	return !p.cbs.active()
}

func (w *World) poll(m *member) {
	p := m.p
	if p.thawConsumer {
		p.thawConsumer = false
		p.consumer.Thaw()
		w.wait()
	}
	if !p.idle() {
		return
	}
	done := make(chan struct{})
	p.busy = done
	go func() {
		defer close(done)
		p.stepErr = p.r.Step(p.ctx) // a failed flow shows in the runner's errors too
		if p.stepErr == nil {
			// The partitions the poll assigned are recovered within
			// its step, as the simulated cluster's members do.
			p.stepErr = p.r.Settle(p.ctx)
		}
	}()
	if w.real != nil {
		w.realPoll(p, done)
		return
	}
	for range pollSlices {
		w.wait()
		select {
		case <-done:
			return
		default:
		}
		time.Sleep(time.Millisecond)
	}
}

func (w *World) flush(m *member, fn func(context.Context)) {
	p := m.p
	if !p.idle() {
		return
	}
	done := make(chan struct{})
	p.busy = done
	go func() {
		defer close(done)
		fn(p.ctx)
	}()
}

func (w *World) advance(d time.Duration) {
	w.thawPending()
	w.asked += d
	time.Sleep(d)
	w.wait()
}

// produce appends an event of key; with Timers, one with delta and timer
// above 0 sets a timer that long after it.
func (w *World) produce(key string, delta int, timer time.Duration) {
	r := &kgo.Record{Topic: w.input, Partition: world.PartitionOf(key, Partitions), Key: []byte(key), Value: []byte(world.Value(delta))}
	timed := w.cfg.Timers && delta != 0 && timer > 0
	if timed {
		r.Value = []byte(world.TimerValue(delta, timer))
	}
	if err := w.cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		panic(fmt.Sprintf("kfakeworld: producing to %s/%d: %v", r.Topic, r.Partition, err)) // the world's own topic: a bug
	}
	ev := world.Event{Partition: r.Partition, Offset: r.Offset, Key: key, Delta: delta}
	if timed {
		// The record's timestamp as a consumer reads it: the producer's,
		// to the millisecond.
		ev.TimerAt = world.TimerAt(time.UnixMilli(r.Timestamp.UnixMilli()), timer, r.Offset)
	}
	w.ledger = append(w.ledger, ev)
	w.rec.Add(history.Op{Kind: history.Produce, Member: -1, Partition: r.Partition, Offset: r.Offset, Key: key, Delta: delta})
}

func (w *World) emitted(outs []engine.Output) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, o := range outs {
		w.outputs[string(o.Value)]++
	}
}

// fold is world.Fold with its outputs sent to the world's output topic.
func (w *World) fold(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
	res, err := world.Fold(key, state, exists, rec)
	for i := range res.Outputs() {
		if w.output != "" {
			res.Outputs()[i].Topic = w.output
		}
	}
	return res, err
}

// emitPlain is at-least-once output: the world's plain producer appends
// member's outputs to the output topic as the fold makes them.
func (w *World) emitPlain(ctx context.Context, member int, outs []engine.Output) error {
	for _, o := range outs {
		r := &kgo.Record{Topic: o.Topic, Partition: store.OutputPartition(o.Key, Partitions), Key: o.Key, Value: o.Value}
		err := w.cl.ProduceSync(ctx, r).FirstErr()
		w.rec.Add(history.EmitOp(member, o.Key, o.Value, history.OutcomeOf(err), err))
		if err != nil {
			return err
		}
	}
	return nil
}

// start starts a process in m's slot: a new backend, engine (an empty
// in-memory cache) and group member.
func (w *World) start(m *member) {
	p := &process{consumer: netfreeze.New(w.net.DialContext), store: netfreeze.New(w.net.DialContext), down: make(chan struct{})}
	ctx := context.Background()
	be, err := kafka.New(ctx, kafka.Config{
		Mode: w.cfg.Mode, SeedBrokers: w.seeds, TransactionalIDPrefix: w.prefix,
		// As the sim world: the design's snapshot topic name, which the
		// worlds' histories are compared by.
		SnapshotTopic:           kafka.LegacySnapshotTopic,
		MaxWritesPerTransaction: w.cfg.MaxWritesPerTransaction,
		TransactionTimeout:      w.cfg.TransactionTimeout,
		RecoveryStallTimeout:    w.cfg.StallTimeout,
		ClientOpts:              w.storeClientOpts(p.store.Dial),
		// One batch per fetch, so slow fetches slow a recovery without
		// stopping it.
		ReaderOpts: []kgo.Opt{kgo.Dialer(kafkatest.SlowFetches(p.store.Dial, w.fetchDelay)), kgo.FetchMaxPartitionBytes(1)},
	})
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: backend: %v", err))
	}
	ecfg := engine.Config[int]{
		Fold: w.fold, Codec: world.IntCodec{}, Store: history.Backend(be, w.rec, m.slot),
		// The checkers know nothing of a member's cache: every recovery
		// reads in full, and each is checked complete (warm restarts are
		// checked by the engine's own tests).
		FullRecovery:    true,
		PersistInterval: w.cfg.PersistInterval, CommitInterval: w.cfg.CommitInterval,
		// Outputs in flight until the engine waits for them: a member
		// that crashes loses them (invariant 7 holds only if nothing
		// durable passed them).
		StartEmit: func(ctx context.Context, outs []engine.Output) func() error {
			return func() error {
				w.emitted(outs)
				if w.cfg.ProduceOutputs {
					return w.emitPlain(ctx, m.slot, outs)
				}
				return nil
			}
		},
	}
	if w.cfg.Timers {
		ecfg.OnTimer = world.OnTimer
	}
	if w.cfg.ExactlyOnce {
		ecfg.StartEmit, ecfg.ExactlyOnce, ecfg.OutputTopics = nil, true, []string{w.output}
		// Batches sealed by the cap too, not only by the interval.
		ecfg.MaxTransactionRecords = 2 * w.cfg.MaxWritesPerTransaction
	}
	eng, err := engine.New(ecfg)
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: engine: %v", err))
	}
	newSource := kafkaio.Config{
		SeedBrokers: w.seeds, Group: w.group, Topics: []string{w.input},
		ClientOpts: []kgo.Opt{kgo.Dialer(p.consumer.Dial), protocolOpt(w.cfg.Protocol),
			kgo.SessionTimeout(w.cfg.SessionTimeout), kgo.HeartbeatInterval(w.cfg.HeartbeatInterval),
			kgo.RebalanceTimeout(w.cfg.rebalanceTimeout())},
	}
	tracked := &trackedHandler{cbs: &p.cbs, built: make(chan struct{})}
	p.tracked = tracked
	r, err := eng.Join(input.Wrapped(newSource, func(h input.Handler) input.Handler {
		tracked.h = h
		return tracked
	}))
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: runner: %v", err))
	}
	tracked.r = r
	close(tracked.built)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.eng, p.r, p.be = eng, r, be
	m.p, m.state = p, running
}

// leave stops m cleanly in the background (the revoke flushes and
// commits; franz-go leaves the group); the slot is free at once, as a
// restarted process would be.
func (w *World) leave(m *member) {
	p := m.p
	p.thawConsumer = false
	p.consumer.Thaw()
	w.retire(m, absent, func() {
		_ = p.r.Close(context.Background())
	})
}

// crash kills m: its store connections die (no transaction is ended),
// its consumer's fall silent for good (no leave, no heartbeat, no
// rejoin reaches the group, which evicts the member when its session
// expires), and its runner is never stepped or closed again: its
// rebalance callbacks in flight are cancelled and later ones no longer
// reach it (callbacks.die), so nothing is flushed, committed or revoked.
// Its clients close, the consumer once the world closes and kills its
// connections (the leave franz-go tries then reaches nobody), and its
// engine's cache with it.
//
// The consumer's connections are frozen, not closed: Kafka's group
// coordinator never acts on a closed connection (it expires members by
// their sessions only, and arms every member's session when a join
// completes), but kfake arms a member's session only if its JoinGroup
// response could be written, and picks at random between writing it and
// dropping it when the connection is closed (groups.go, (*group).reply;
// client_conn.go, (*clientReq).reply): a member crashed with its
// JoinGroup parked would then stay in the group, assigned, until another
// member's rebalance (TestKfakeKeepsAJoinerWhoseConnectionClosed). A
// silent connection is what Kafka sees of a crashed process too.
func (w *World) crash(m *member) {
	p := m.p
	p.thawConsumer = false
	p.consumer.Freeze()
	p.store.Kill()
	p.cbs.die()
	p.crashed = true
	w.retire(m, crashed, func() {
		_ = p.r.Source().Close(context.Background())
	})
}

// retire shuts m's process down in the background: it cancels the step
// in flight, waits for it and for any rebalance callback (the runner is
// locked meanwhile), then runs stop and closes the backend and engine.
func (w *World) retire(m *member, state memberState, stop func()) {
	p := m.p
	p.cancel()
	busy := p.busy
	go func() {
		defer close(p.down)
		if busy != nil {
			<-busy
		}
		p.cbs.waitIdle()
		stop()
		_ = p.be.Close()
		if state == crashed {
			p.r.Abandon()
		}
		_ = p.eng.Close()
	}()
	w.retired = append(w.retired, p)
	m.p, m.state = nil, state
}

// openForeign leaves a transaction of another producer open on snapshot
// partition: an offset marker, a valid snapfence record that recovery
// skips. A hanging one has a 15 min timeout (transaction.max.timeout.ms),
// past every deadline of a scenario.
func (w *World) openForeign(partition int, hang bool) {
	timeout := w.cfg.TransactionTimeout
	if hang {
		timeout = 15 * time.Minute
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.seeds...), kgo.Dialer(w.net.DialContext),
		kgo.TransactionalID(w.foreignID), kgo.TransactionTimeout(timeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: foreign producer: %v", err))
	}
	rec := wire.EncodeOffsetMarker("", 0, store.GroupIdentity{})
	kr := &kgo.Record{Topic: w.snapshotTopic, Partition: int32(partition), Key: rec.Key, Value: rec.Value}
	for _, h := range rec.Headers {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	if err := cl.BeginTransaction(); err != nil {
		cl.Close()
		return
	}
	if err := cl.ProduceSync(context.Background(), kr).FirstErr(); err != nil {
		_ = cl.EndTransaction(context.Background(), kgo.TryAbort)
		cl.Close()
		return
	}
	w.foreign = &foreignTxn{cl: cl}
}

// endForeign commits or aborts the foreign transaction (it may have timed
// out already: the broker aborted it, and the end fails, ignored).
func (w *World) endForeign(commit bool) {
	f := w.foreign
	w.foreign = nil
	_ = f.cl.EndTransaction(context.Background(), kgo.TransactionEndTry(commit))
	f.cl.Close()
}

// quiesceRounds bounds Quiesce: rounds of a poll of every member and an
// advance of the persist interval.
const quiesceRounds = 60

// Quiesce lifts every fault (resumes paused members, ends the foreign
// transaction, starts a member if none runs), then polls and advances
// time until every input partition's committed offset reaches its end,
// and checks the invariants that hold at quiescence: the exact fold (3),
// liveness (6) and the outputs (7).
func (w *World) Quiesce() []world.Violation {
	w.rec.BeginStep(0, "quiesce") // as internal/world's: before anything of it
	if w.real != nil {
		wall := time.Since(w.began)
		w.rec.Add(history.Op{Kind: history.Drift, Member: -1, Detail: fmt.Sprintf("wall time %s for steps that asked for %s: a drift of %s",
			wall.Round(time.Millisecond), w.asked, (wall - w.asked).Round(time.Millisecond))})
	}
	for _, m := range w.members {
		if m.state == paused {
			w.resume(m)
		}
	}
	w.thawPending()
	if w.foreign != nil {
		w.endForeign(false)
	}
	w.fetchLatency.Store(0)
	if !slices.ContainsFunc(w.members, func(m *member) bool { return m.state == running }) {
		w.start(w.members[0])
	}
	w.wait()
	var vs []world.Violation
	for range quiesceRounds {
		// With Timers, caught up once every due timer fired too.
		if w.caughtUp() && (!w.cfg.Timers || w.settleTimers()) {
			return append(vs, w.atQuiescence()...)
		}
		for _, m := range w.members {
			if m.state == running {
				w.poll(m)
				w.wait()
				vs = append(vs, w.afterStep()...)
			}
		}
		w.advance(w.cfg.PersistInterval)
	}
	committed, _ := w.committedOffsets()
	// The history without a final read: the events not yet folded are
	// the liveness failure's, not lost folds.
	vs = append(vs, world.CheckHistory(w.rec.Ops())...)
	return append(vs, world.Violate(6, 0,
		"with every fault lifted, the committed offsets %v did not reach the input's ends %v in %d rounds (%s of virtual time); member errors: %v",
		committed, w.endOffsets(), quiesceRounds, time.Duration(quiesceRounds)*w.cfg.PersistInterval, w.memberErrors()))
}

func (w *World) caughtUp() bool {
	ends := w.endOffsets()
	committed, stable := w.committedOffsets()
	for p, end := range ends {
		if !stable[p] || committed[p] != end {
			return false
		}
	}
	return true
}

// endOffsets are the input partitions' high watermarks.
func (w *World) endOffsets() []int64 {
	out := make([]int64, Partitions)
	listed, err := w.adm.ListEndOffsets(context.Background(), w.input)
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: listing the input's ends: %v", err))
	}
	for p := range out {
		if o, ok := listed.Lookup(w.input, int32(p)); ok && o.Err == nil {
			out[p] = o.Offset
		}
	}
	return out
}

// committedOffsets reads the group's committed offsets, requiring stable
// ones: a partition whose commit is pending in an open transaction is
// reported unstable (stable[p] false). No commit is offset 0.
func (w *World) committedOffsets() (committed []int64, stable []bool) {
	committed, stable = make([]int64, Partitions), make([]bool, Partitions)
	offs, err := w.adm.FetchOffsets(kadm.RequireStable(context.Background()), w.group)
	if err != nil {
		// No group yet (no member has joined): nothing committed.
		for p := range stable {
			stable[p] = true
		}
		return committed, stable
	}
	for p := range committed {
		o, ok := offs.Lookup(w.input, int32(p))
		switch {
		case !ok:
			stable[p] = true
		case o.Err != nil:
		default:
			committed[p], stable[p] = max(o.At, 0), true
		}
	}
	return committed, stable
}

// memberErrors lists the errors of the members' runners, for a liveness
// report (a member whose callback still runs is skipped: its runner is
// locked).
func (w *World) memberErrors() []string {
	var out []string
	for _, m := range w.members {
		if m.p == nil {
			continue
		}
		if !m.p.idle() {
			out = append(out, fmt.Sprintf("m%d: busy (a step in flight: %t, a callback running: %t)", m.slot, m.p.busy != nil, m.p.cbs.active()))
			continue
		}
		for _, err := range m.p.r.Errors() {
			out = append(out, fmt.Sprintf("m%d: %v", m.slot, err))
		}
	}
	return out
}

// Close stops every process and the cluster; the world is done. It waits,
// in virtual time, for everything it started to end, and panics if that
// takes more than closeTimeout: a goroutine left behind would fail the
// synctest bubble anyway, with less to go on. On a real broker it first
// lets the steps in flight end (endSteps), waits at most
// realCloseTimeout, then gives up (Logf says so) rather than panic, and
// deletes the world's topics however it ends.
func (w *World) Close() {
	defer w.closeCluster()
	w.closeView()
	if w.foreign != nil {
		w.endForeign(false)
	}
	w.endSteps()
	for _, m := range w.members {
		if m.p != nil {
			w.crash(m)
		}
	}
	for _, p := range w.retired {
		if p.crashed {
			p.consumer.Kill()
		}
	}
	w.endStoreClients()
	limit := closeTimeout
	if w.real != nil {
		limit = realCloseTimeout
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for _, p := range w.retired {
		select {
		case <-p.down:
		case <-timer.C:
			if w.real != nil {
				w.logf("a process did not shut down in %s (a step of a crashed process blocked in its store): its goroutines stay", limit)
				return
			}
			panic(fmt.Sprintf("kfakeworld: the members did not shut down in %s", limit))
		}
	}
}

const closeTimeout = 10 * time.Minute

func (w *World) closeCluster() {
	if w.real != nil {
		w.closeReal()
		return
	}
	if w.cl != nil {
		w.cl.Close()
	}
	w.c.Close()
	_ = os.RemoveAll(w.dir)
}

// callbacks counts a process's rebalance callbacks in progress, and ends
// them when the process dies.
type callbacks struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n == 0 (nil: never entered)
	// died is closed when the process crashes: a dead process runs
	// nothing, so a callback in flight (a recovery behind a truncated log
	// or dead connections would go on until its stall deadline) has its
	// context cancelled, and a later one does not reach the runner.
	died     chan struct{}
	diedOnce sync.Once
}

// die cancels the callbacks in flight and any that start later.
func (c *callbacks) die() {
	c.diedOnce.Do(func() { close(c.dying()) })
}

func (c *callbacks) dying() chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.died == nil {
		c.died = make(chan struct{})
	}
	return c.died
}

// context is ctx, cancelled too when the process dies.
func (c *callbacks) context(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	died := c.dying()
	go func() {
		select {
		case <-died:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// enter counts a callback in, unless the process has died: then it
// reports false, and the callback must not run.
func (c *callbacks) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.died != nil {
		select {
		case <-c.died:
			return false
		default:
		}
	}
	if c.n == 0 {
		c.idle = make(chan struct{})
	}
	c.n++
	return true
}

func (c *callbacks) exit() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
	if c.n == 0 {
		close(c.idle)
	}
}

func (c *callbacks) active() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n > 0
}

// waitIdle waits, durably (on a channel), until no callback runs.
func (c *callbacks) waitIdle() {
	for {
		c.mu.Lock()
		n, idle := c.n, c.idle
		c.mu.Unlock()
		if n == 0 {
			return
		}
		<-idle
	}
}

// trackedHandler counts the runner's rebalance callbacks, and keeps them
// from the runner once its process has died. An assignment's callback
// lasts until the recoveries it started have ended (Member.Settle), so
// that a world's step sees a member's new partitions recovered, as the
// simulated cluster's members have them.
type trackedHandler struct {
	h   input.Handler
	cbs *callbacks
	// r is the runner, set before built is closed.
	r     *engine.Member[int]
	built chan struct{}

	mu sync.Mutex
	// owned are the input partitions the callbacks handed the member and
	// have not taken back.
	owned map[int32]bool
}

// own records tps as owned (on) or no longer owned.
func (t *trackedHandler) own(tps []store.TopicPartition, on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.owned == nil {
		t.owned = map[int32]bool{}
	}
	for _, tp := range tps {
		if on {
			t.owned[tp.Partition] = true
		} else {
			delete(t.owned, tp.Partition)
		}
	}
}

// ownedPartitions lists the owned partitions, sorted.
func (t *trackedHandler) ownedPartitions() []int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Sorted(maps.Keys(t.owned))
}

func (t *trackedHandler) Assigned(ctx context.Context, tps []store.TopicPartition) {
	if !t.cbs.enter() {
		return
	}
	defer t.cbs.exit()
	t.own(tps, true)
	ctx, cancel := t.cbs.context(ctx)
	defer cancel()
	t.h.Assigned(ctx, tps)
	select {
	case <-t.built:
		_ = t.r.Settle(ctx) // ends early only if the process dies
	case <-ctx.Done():
	}
}

func (t *trackedHandler) Revoked(ctx context.Context, tps []store.TopicPartition) {
	if !t.cbs.enter() {
		return
	}
	defer t.cbs.exit()
	t.own(tps, false)
	ctx, cancel := t.cbs.context(ctx)
	defer cancel()
	t.h.Revoked(ctx, tps)
}

func (t *trackedHandler) Lost(ctx context.Context, tps []store.TopicPartition) {
	if !t.cbs.enter() {
		return
	}
	defer t.cbs.exit()
	t.own(tps, false)
	ctx, cancel := t.cbs.context(ctx)
	defer cancel()
	t.h.Lost(ctx, tps)
}

// Run runs steps in a fresh world of cfg, then quiesces it, and returns
// the violations, stopping at the first step that had any. It must be
// called inside a synctest bubble; the world is closed when it returns.
func Run(cfg Config, steps []world.Step) []world.Violation {
	w, err := New(cfg)
	if err != nil {
		return []world.Violation{{Detail: err.Error()}}
	}
	return world.RunSteps(w, steps)
}

// fetchDelay is the world's fetch latency, which every recovery fetch
// waits first (kafkatest.SlowFetches; virtual time: the wait ends in the
// next advance step).
func (w *World) fetchDelay() time.Duration { return time.Duration(w.fetchLatency.Load()) }

// settleTimers moves time past the last timer and has every running
// member poll and flush, until a round writes nothing to the snapshot
// topic, as internal/world's does: a firing holds no input offset back,
// so caughtUp does not wait for it. False while a partition has no
// running flow or the group has not settled, for Quiesce to step on.
func (w *World) settleTimers() bool {
	if d := time.Until(w.ledger.LastTimer()); d >= 0 {
		w.advance(d + time.Second)
	}
	for range 10 {
		_, before := w.snapshotEnds()
		for _, m := range w.members {
			if m.state == running {
				w.poll(m)
			}
		}
		w.advance(time.Second) // a poll waits for records in virtual time
		for _, m := range w.members {
			if m.state == running {
				w.flush(m, m.p.r.FlushAll)
			}
		}
		w.wait()
		if !w.everyPartitionRuns() {
			return false
		}
		if _, after := w.snapshotEnds(); slices.Equal(before, after) && w.caughtUp() {
			return true
		}
	}
	return false
}

// everyPartitionRuns reports whether every input partition has a running
// flow on a running member: only a flow fires its timers.
func (w *World) everyPartitionRuns() bool {
	for p := range int32(Partitions) {
		tp := store.TopicPartition{Topic: w.input, Partition: p}
		if !slices.ContainsFunc(w.members, func(m *member) bool {
			return m.state == running && slices.Contains(m.p.r.Flows(), tp)
		}) {
			return false
		}
	}
	return true
}
