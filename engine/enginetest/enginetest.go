// Package enginetest tests a fold (an engine.Config: Fold, Codec, OnTimer,
// Tables, ExactlyOnce, Poison...) the way it runs in production: as the
// members of a consumer group over a partitioned input, through
// rebalances, crashes and stale owners, on a simulated Kafka cluster
// (store/sim) in virtual time. A Driver runs the real engine, each member
// a Member stepped a poll at a time (engine.Member.Step) with its own
// local cache, as a process of its own would; the cluster models Kafka's
// logs, transactions and group coordinator. No broker, no JVM, and
// nothing runs in the background (a member polls only when the driver
// steps it): the same script gives the same run every time.
//
//	d := enginetest.New(t, enginetest.Config[int]{Engine: cfg, Topic: "orders"})
//	d.Produce("orders", "alice", "+10")
//	d.Settle()                            // folded and committed
//	d.Produce("orders", "alice", "+5")    // the owner folds it, and pauses before committing...
//	d.StaleOwner(d.Owner("alice"), func() {
//		d.Produce("orders", "alice", "+100") // ...while another member takes over and folds more
//	})                                    // ...then wakes and flushes what it held: fenced
//	st, _ := d.State("alice")             // 115, what a recovery loads
//
// What it does that goka's tester and Kafka Streams' TopologyTestDriver
// cannot: those run one instance of the topology, synchronously, with no
// consumer group, so a partition never moves. Here it does: AddMember and
// RemoveMember rebalance the group; Crash kills a member between its fold
// and its commit, and the survivors take its partitions over after the
// session timeout and replay from the committed offset; StaleOwner pauses
// a member holding folded changes (a GC pause) until the group has given
// its partitions to another member, then wakes it to flush them, which is
// how a stale owner overwrites a new owner's state on a last-write-wins
// snapshot topic, the lost update snapfence's fence prevents. The state
// and the outputs a test reads
// are what a recovery and a read_committed consumer would see after all
// of that.
//
// # Time
//
// Time is the cluster's virtual clock, which moves only in Step, Settle
// and Advance, PollInterval at a time; every live member polls once at
// each of those instants, so a processing-time timer (engine.Record.Now
// plus a duration) fires at the first poll at or after its time, and an
// event-time timer by the input records' timestamps, which are their
// append times on the virtual clock. Advance(d) moves time by d.
//
// # Failures
//
// A helper that cannot do what it says (a member's Step fails, the group
// does not settle within SettleTimeout, an output goes to a topic that
// does not exist) fails the test through the TB given to New (the test's
// t), with a message naming what it waited for and what it found. Call
// the helpers from the test's goroutine (t.Fatalf's rule). The members'
// logs are discarded unless Engine.Logger is set: slog.New(
// slog.NewTextHandler(t.Output(), nil)) shows them with the test's
// output.
package enginetest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// Defaults of Config's zero fields.
const (
	DefaultPartitions  = 4
	DefaultMembers     = 2
	DefaultApplication = "app"
	// DefaultPollInterval is the virtual time between two polls of a
	// member: timers fire this precisely.
	DefaultPollInterval = time.Second
	// DefaultSettleTimeout is how much virtual time Settle waits for the
	// group: past the session timeout (45 s) and the rebalance timeout
	// (1 min) of the simulated cluster, so that a crashed or paused
	// member's partitions move within it.
	DefaultSettleTimeout = 5 * time.Minute
)

// Config configures a Driver. Zero values take the defaults given.
type Config[S any] struct {
	// Engine is the engine's configuration under test: Fold and Codec
	// (required), and OnTimer, Tick, Tables, ExactlyOnce, OutputTopics,
	// Poison and the intervals as the application sets them. The driver
	// sets, for every member, Store (a Transactional backend of the
	// simulated cluster), Dir (empty: each member's cache in memory) and,
	// outside ExactlyOnce, Emit (the outputs are produced to their topics
	// at once, at least once; StartEmit and CheckOutputTopics cleared),
	// whatever they held.
	//
	// Each table of Tables that is a view.Opener (a view.Lookup) is
	// opened by New on the cluster and stepped before the members at
	// every poll; all members share it. A table that is not an Opener is
	// the test's to open and step.
	Engine engine.Config[S]
	// Topic is the input topic; required. New creates it with Partitions
	// partitions.
	Topic string
	// Partitions is the input topic's partition count; default
	// DefaultPartitions (4).
	Partitions int
	// Members is how many members New starts; default DefaultMembers (2).
	Members int
	// Topics are topics other than the input to create, with their
	// partition counts. New creates every output topic
	// (Engine.OutputTopics, and Engine.DeadLetterTopic) and each Opener
	// table's topic (its Name before it opens: view.Config.Topic) that is
	// not named here with Partitions partitions; a table's topic is
	// compacted.
	Topics map[string]int
	// Application names the consumer group, the snapshot topic
	// ("<Application>-<Topic>-snapshots") and the transactional ids;
	// default DefaultApplication ("app").
	Application string
	// Protocol is the group's rebalance protocol; default
	// sim.ClassicCooperative, as franz-go's default balancer.
	Protocol sim.Protocol
	// MaxPoll bounds the records one poll of a member fetches; default
	// simsource.DefaultMaxPoll.
	MaxPoll int
	// PollInterval is the virtual time between two polls; default
	// DefaultPollInterval (1 s). Advance(d) costs d/PollInterval polls of
	// every member.
	PollInterval time.Duration
	// SessionTimeout is the group's session timeout, after which a
	// crashed or paused member's partitions move; default
	// sim.DefaultSessionTimeout (45 s). It must be less than SettleTimeout.
	SessionTimeout time.Duration
	// SettleTimeout bounds the virtual time Settle (and every helper that
	// settles) waits for the group before it fails the test; default
	// DefaultSettleTimeout (5 min).
	SettleTimeout time.Duration
	// Seed seeds the cluster's choices (member ids); default 0.
	Seed uint64

	// plainStore runs the members on a Plain-mode backend, without the
	// fence: for this package's own negative controls only.
	plainStore bool
}

// table is a table of Engine.Tables the driver opened.
type table struct {
	name   string
	opener view.Opener
	// status is the table's status, if it tells it (view.Lookup does):
	// Settle waits until it has read every committed record.
	status func() view.Status
}

// TB is the part of testing.TB the driver uses to fail a test and to
// clean up after it: a *testing.T, *testing.B or *testing.F is one.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	// Fatalf must not return: testing.T's ends the test's goroutine.
	Fatalf(format string, args ...any)
	Cleanup(func())
	// Context is the test's context, which the members' calls use.
	Context() context.Context
}

var _ TB = testing.TB(nil)

// Driver runs the members of one consumer group of an engine on a
// simulated cluster. New makes one; its helpers fail the test through the
// TB New was given.
type Driver[S any] struct {
	t       TB
	cfg     Config[S]
	ecfg    engine.Config[S] // each member's engine's
	cluster *sim.Cluster
	backend *sim.Backend
	inputs  []store.TopicPartition
	tables  []table
	members []*member[S]

	mu sync.Mutex // guards what the backend's observer and Emit record
	// watching: the backend's transactions are recorded in txns (in
	// Plain mode: its writes and commits), in order; StaleOwner watches
	// the stale owner's flush.
	watching bool
	txns     []store.TransactionEvent
	// emitErrs are the outputs Emit could not deliver, for Settle's
	// report.
	emitErrs []error
}

// New starts a Driver: a simulated cluster with the input topic and the
// other topics, a Transactional backend, the Opener tables opened on it,
// and Members members, and returns once the members have joined and
// every partition is recovered (Settle). The cluster, the tables and the
// members are closed when the test ends (t.Cleanup). A Config that cannot
// work fails the test, naming the field.
func New[S any](t TB, cfg Config[S]) *Driver[S] {
	t.Helper()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatalf("enginetest.New: %v", err)
	}
	d := &Driver[S]{t: t, cfg: cfg}
	d.cluster = sim.New(sim.Config{Seed: cfg.Seed, SessionTimeout: cfg.SessionTimeout})
	t.Cleanup(d.close)
	d.createTopics()
	mode := store.Transactional
	if cfg.plainStore {
		mode = store.Plain
	}
	d.backend, err = d.cluster.NewBackend(sim.BackendConfig{Mode: mode, Application: cfg.Application, CreateTopics: true,
		Observer: observerFunc(d.observe)})
	if err != nil {
		t.Fatalf("enginetest.New: the backend: %v", err)
	}
	d.ecfg = cfg.Engine
	d.ecfg.Store, d.ecfg.Dir = d.backend, ""
	d.ecfg.Emit, d.ecfg.StartEmit, d.ecfg.CheckOutputTopics = nil, nil, nil
	if !d.ecfg.ExactlyOnce {
		d.ecfg.Emit = d.emit
	}
	d.openTables()
	for range cfg.Members {
		d.addMember()
	}
	d.settle("New")
	return d
}

// withDefaults checks cfg and fills in the defaults.
func (cfg Config[S]) withDefaults() (Config[S], error) {
	bad := func(field, problem string) error {
		return &store.ConfigError{Subject: "enginetest.Config." + field, Problem: problem, Fix: "see its doc comment"}
	}
	switch {
	case cfg.Topic == "":
		return cfg, bad("Topic", "is empty: name the input topic")
	case cfg.Engine.Fold == nil:
		return cfg, bad("Engine.Fold", "is nil")
	case cfg.Engine.Codec == nil:
		return cfg, bad("Engine.Codec", "is nil")
	case cfg.Partitions < 0 || cfg.Members < 0 || cfg.MaxPoll < 0:
		return cfg, bad("Partitions, Members or MaxPoll", "is negative")
	case cfg.PollInterval < 0 || cfg.SessionTimeout < 0 || cfg.SettleTimeout < 0:
		return cfg, bad("PollInterval, SessionTimeout or SettleTimeout", "is negative")
	}
	for name, n := range cfg.Topics {
		switch {
		case name == cfg.Topic:
			return cfg, bad("Topics", fmt.Sprintf("names the input topic %q, whose partitions Partitions counts", name))
		case n <= 0:
			return cfg, bad("Topics", fmt.Sprintf("gives topic %q %d partitions", name, n))
		}
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = DefaultPartitions
	}
	if cfg.Members == 0 {
		cfg.Members = DefaultMembers
	}
	if cfg.Application == "" {
		cfg.Application = DefaultApplication
	}
	if cfg.Protocol == 0 {
		cfg.Protocol = sim.ClassicCooperative
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = sim.DefaultSessionTimeout
	}
	if cfg.SettleTimeout == 0 {
		cfg.SettleTimeout = DefaultSettleTimeout
	}
	if cfg.SessionTimeout >= cfg.SettleTimeout {
		return cfg, bad("SessionTimeout", fmt.Sprintf("(%v) is not less than SettleTimeout (%v): a crashed member's partitions would not move within a Settle", cfg.SessionTimeout, cfg.SettleTimeout))
	}
	return cfg, nil
}

// createTopics creates the input topic, Config.Topics, the output topics
// and the tables' topics (compacted, as a table's topic is).
func (d *Driver[S]) createTopics() {
	cfg := d.cfg
	compacted := map[string]bool{}
	for _, t := range cfg.Engine.Tables {
		if _, ok := t.(view.Opener); ok {
			compacted[t.Name()] = true
		}
	}
	create := func(name string) {
		if _, ok := d.cluster.Topic(name); ok {
			return
		}
		n, ok := cfg.Topics[name]
		if !ok {
			n = cfg.Partitions
		}
		if err := d.cluster.CreateTopic(name, sim.TopicConfig{Partitions: n, Compacted: compacted[name]}); err != nil {
			d.t.Fatalf("enginetest.New: creating topic %q: %v", name, err)
		}
	}
	create(cfg.Topic)
	for p := range int32(cfg.Partitions) {
		d.inputs = append(d.inputs, store.TopicPartition{Topic: cfg.Topic, Partition: p})
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Topics)) {
		create(name)
	}
	for _, name := range cfg.Engine.OutputTopics {
		create(name)
	}
	if cfg.Engine.DeadLetterTopic != "" {
		create(cfg.Engine.DeadLetterTopic)
	}
	for _, name := range slices.Sorted(maps.Keys(compacted)) {
		create(name)
	}
}

// openTables opens every Opener table on the backend and steps it until
// it caught up, so that the members' first partitions do not wait for it
// (a partition's wait for its tables is on the real clock).
func (d *Driver[S]) openTables() {
	for _, t := range d.cfg.Engine.Tables {
		o, ok := t.(view.Opener)
		if !ok {
			continue
		}
		if err := o.Open(d.ctx(), d.backend); err != nil {
			d.t.Fatalf("enginetest.New: opening table %s: %v", t.Name(), err)
		}
		tb := table{name: t.Name(), opener: o}
		if s, ok := t.(interface{ Status() view.Status }); ok {
			tb.status = s.Status
		}
		d.tables = append(d.tables, tb)
		caught := false
		for range 1000 {
			if err := o.Step(d.ctx()); err != nil {
				d.t.Fatalf("enginetest.New: table %s: %v", tb.name, err)
			}
			if caught = caughtUp(t); caught {
				break
			}
		}
		if !caught {
			d.t.Fatalf("enginetest.New: table %s did not catch up in 1000 steps", tb.name)
		}
	}
}

// caughtUp reports, without waiting, whether t has caught up.
func caughtUp(t engine.Table) bool {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	return t.WaitCaughtUp(done) == nil
}

// ctx is the context of the driver's calls: the test's.
func (d *Driver[S]) ctx() context.Context { return d.t.Context() }

// close ends the run: the members are dropped as a process that exits
// leaves them (nothing flushed), then the engines, tables and backend
// are closed.
func (d *Driver[S]) close() {
	for _, m := range d.members {
		if m.state == live || m.state == paused {
			m.m.Abandon()
			if err := m.e.Close(); err != nil {
				d.t.Errorf("enginetest: closing member %d's engine: %v", m.num, err)
			}
		}
	}
	for _, tb := range d.tables {
		if err := tb.opener.Close(); err != nil {
			d.t.Errorf("enginetest: closing table %s: %v", tb.name, err)
		}
	}
	if d.backend != nil {
		_ = d.backend.Close()
	}
}

// observerFunc is a store.Observer.
type observerFunc func(store.TransactionEvent)

func (f observerFunc) OnTransaction(ev store.TransactionEvent) { f(ev) }

func (d *Driver[S]) observe(ev store.TransactionEvent) {
	d.mu.Lock()
	if d.watching {
		d.txns = append(d.txns, ev)
	}
	d.mu.Unlock()
}

// emit is the members' Emit outside ExactlyOnce: each output is produced
// to its topic, in the partition Kafka's default partitioner gives its
// key, at once; a replayed fold emits again (at least once).
func (d *Driver[S]) emit(_ context.Context, outs []engine.Output) error {
	for _, o := range outs {
		cfg, ok := d.cluster.Topic(o.Topic)
		if !ok {
			err := &store.ConfigError{Subject: fmt.Sprintf("output topic %q", o.Topic), Problem: "does not exist",
				Fix: "list it in engine.Config.OutputTopics (or enginetest.Config.Topics), so that the driver creates it"}
			d.mu.Lock()
			d.emitErrs = append(d.emitErrs, err)
			d.mu.Unlock()
			return err
		}
		tp := store.TopicPartition{Topic: o.Topic, Partition: store.OutputPartition(o.Key, cfg.Partitions)}
		if _, err := d.cluster.Produce(tp, wire.Record{Key: o.Key, Value: o.Value, Headers: o.Headers}); err != nil {
			return err
		}
	}
	return nil
}

// Cluster is the simulated cluster, for faults the driver has no helper
// for (sim.Cluster.FailProduce, Hang, ...) and for reading its history.
func (d *Driver[S]) Cluster() *sim.Cluster { return d.cluster }

// Backend is the members' store backend on the cluster, to open a
// view.View of the snapshots, or a table that is not an Opener, on it.
func (d *Driver[S]) Backend() *sim.Backend { return d.backend }

// Owner is the number of the live member whose flow runs key's input
// partition (the partition Kafka's default partitioner gives key), or -1
// if none does now (a rebalance under way, a member crashed and not yet
// replaced, a partition stopped by a poison record).
func (d *Driver[S]) Owner(key string) int {
	tp := d.inputPartition([]byte(key))
	for _, m := range d.live() {
		if slices.Contains(m.m.Flows(), tp) {
			return m.num
		}
	}
	return -1
}

// inputPartition is key's partition of the input topic.
func (d *Driver[S]) inputPartition(key []byte) store.TopicPartition {
	return store.TopicPartition{Topic: d.cfg.Topic, Partition: store.OutputPartition(key, d.cfg.Partitions)}
}

// Produce appends the record key=value to topic (the input topic, a
// table's topic, any topic the driver created), in the partition Kafka's
// default partitioner gives key (store.OutputPartition: murmur2), as a
// producer's record. Its timestamp is the virtual time now. The members
// fold it at their next poll (Step, Settle, Advance).
func (d *Driver[S]) Produce(topic, key, value string) {
	d.t.Helper()
	d.produce("Produce", topic, []byte(key), []byte(value), nil)
}

// ProduceBytes is Produce of a record with bytes and headers; a nil value
// is a tombstone, which deletes key from a table.
func (d *Driver[S]) ProduceBytes(topic string, key, value []byte, headers ...store.Header) {
	d.t.Helper()
	d.produce("ProduceBytes", topic, key, value, headers)
}

func (d *Driver[S]) produce(helper, topic string, key, value []byte, headers []store.Header) {
	d.t.Helper()
	cfg, ok := d.cluster.Topic(topic)
	if !ok {
		d.t.Fatalf("enginetest: %s to %q: no such topic (the driver creates the input topic, the output topics, the tables' topics and Config.Topics)", helper, topic)
	}
	tp := store.TopicPartition{Topic: topic, Partition: store.OutputPartition(key, cfg.Partitions)}
	if _, err := d.cluster.Produce(tp, wire.Record{Key: key, Value: value, Headers: headers}); err != nil {
		d.t.Fatalf("enginetest: %s to %s: %v", helper, tp, err)
	}
}
