package engine_test

// BenchmarkWarmRestart (kfake) and BenchmarkWarmRestartBroker (build tag
// `it`, a real broker): how long an engine takes from its start until all
// its partitions are recovered, cold (an empty cache) against warm (its
// cache from the last run, restarted after 1% of the keys changed while it
// was down). `make bench-warm` runs both and prints the table;
// docs/benchmarks.md, "Warm restarts", has the numbers.
//
// The state: warmKeys keys of warmStateBytes-byte states over
// warmPartitions input partitions, in Transactional mode, seeded once per
// benchmark by an engine (the "warm" owner, on a Dir of its own) folding
// one input record per key, stopped cleanly once every input offset is
// committed. A second owner (the "writer", same group and transactional
// ids, a Dir of its own) recovers once, untimed, so that later it only
// folds.
//
// Then warmRounds rounds, each running every variant of warmVariants in
// order, one op each: sub-benchmarks cold, warm, cold#01, warm#01, ... so
// that each warm op is paired with the cold op just before it (benchtable
// takes the i-th samples' ratio). A variant has an untimed prepare (warm:
// the writer folds warmChanged records, one per key, round-robin over the
// keys, and stops once they are committed: 1% of the keys changed through
// the fence while the warm owner is down) and a timed restart. The timed
// part is from creating the owner's backend and engine (Pebble's open)
// until the 8th `partition recovered` log line (the engine's Logger: the
// benchmark waits for it, it never sleeps); it is also split into:
//
//   - open-ms: engine.New, which opens the cache (Pebble);
//   - join-ms: from the start of Member.Run until the assignment (the
//     earliest takeover start: a partition's recovered time less its
//     PartitionStatus.Recovery.Duration), the group join, the same work
//     for every variant;
//   - recovery-ms: from the assignment until the last partition is
//     recovered: the acquisitions (the fence) and the snapshot reads.
//
// Also reported: snapshots (read by the recoveries, from the log lines),
// delta-partitions and full-partitions (the recoveries' kinds). Each op
// checks the kinds (cold: full, no_checkpoint; warm: delta), the number
// of snapshots (cold: at least every write so far; warm: at least the
// changed keys, at most them plus one round's slack) and the state of
// warmSampled keys (the last change's and others) against the expected
// one, through Member.State.
//
// Adding a variant (a standby replica, say): append a warmVariant with its
// name, a prepare (start and catch up the standby) and a restart (the
// failover: stop the active, measure until the standby's partitions are
// recovered, with wantKind), and a row in internal/benchtable's
// warmVariants. A different shape (1M keys in one partition) is a
// warmShape of its own, with its own fixture.
//
// They are benchmarks only: `go test` without -bench runs none of this.

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

var (
	warmRounds = flag.Int("warm.rounds", 5, "BenchmarkWarmRestart*: rounds of the variants (cold, warm), interleaved")
	warmKeys   = flag.Int("warm.keys", 1_000_000, "BenchmarkWarmRestart*: keys in the state (1% of them change while down); smaller for a quick check")
	// A member learns of a rebalance from a heartbeat's answer (the
	// classic protocol), so a takeover waits up to a heartbeat interval
	// before it starts: with a standby, that wait is most of a failover.
	warmHeartbeat = flag.Duration("warm.heartbeat", 100*time.Millisecond, "BenchmarkWarmRestartFailover*: the members' kafkaio.Config.HeartbeatInterval (the default is 1s)")
	warmCPU       = flag.String("warm.cpuprofile", "", "BenchmarkWarmRestart*: write a CPU profile of each op's timed part (not the set-up) to this directory, as <variant>-<round>.pprof")
)

// warmShape is the state a fixture holds.
type warmShape struct {
	keys, partitions, changed int
	noWriter                  bool // no writer: the fixture's seed only (the failover benchmark)
}

const (
	warmStateBytes = 100
	warmSampled    = 500 // keys of the last change, and as many others, checked after each op
	warmKeyPrefix  = "k"
	warmDeadline   = 10 * time.Minute // bounds every wait; never reached in a healthy run
)

// warmIssue17 is the issue's shape: 1M keys (-warm.keys) of 100 B, 8
// partitions, 1% changed while down.
func warmIssue17() warmShape {
	return warmShape{keys: *warmKeys, partitions: 8, changed: max(1, *warmKeys/100)}
}

// warmVariant is a sub-benchmark of a round.
type warmVariant struct {
	name string
	// prepare runs untimed before the op.
	prepare func(b *testing.B, fx *warmFixture)
	// restart is the timed op: it starts an owner and returns it once all
	// its partitions are recovered.
	restart func(b *testing.B, fx *warmFixture) *warmOwner
	// check checks the op's recoveries (untimed).
	check func(b *testing.B, fx *warmFixture, o *warmOwner)
}

var warmVariants = []warmVariant{
	{
		name: "cold",
		// A new machine: an empty Dir (the sub-benchmark's own).
		restart: func(b *testing.B, fx *warmFixture) *warmOwner { return fx.start(b, b.TempDir(), false) },
		check: func(b *testing.B, fx *warmFixture, o *warmOwner) {
			o.wantKinds(b, "full", engine.RecoveryNoCheckpoint)
			// Every key's snapshot at least (compaction may have
			// removed older ones of a key).
			if n := o.snapshots(); n < fx.shape.keys {
				b.Errorf("cold: read %d snapshots, want at least one per key (%d)", n, fx.shape.keys)
			}
		},
	},
	{
		name:    "warm",
		prepare: func(b *testing.B, fx *warmFixture) { fx.change(b) },
		restart: func(b *testing.B, fx *warmFixture) *warmOwner { return fx.start(b, fx.warmDir, false) },
		check: func(b *testing.B, fx *warmFixture, o *warmOwner) {
			o.wantKinds(b, "delta", "")
			// The delta is the changed keys' snapshots; slack for what
			// else lands in the snapshot partitions between two
			// warm runs (nothing, in this benchmark).
			if n := o.snapshots(); n < fx.shape.changed || n > 2*fx.shape.changed {
				b.Errorf("warm: read %d snapshots, want the %d changed keys' (at most twice that)", n, fx.shape.changed)
			}
		},
	},
}

// BenchmarkWarmRestart runs the variants on a one-broker kfake cluster on
// loopback TCP (real time), as the other engine benchmarks.
func BenchmarkWarmRestart(b *testing.B) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	benchWarm(b, c.ListenAddrs(), warmIssue17(), false)
}

// benchWarm seeds a fixture of shape on the cluster at addrs and runs the
// rounds. On a shared broker (shared) the fixture's topics are deleted at
// the end.
func benchWarm(b *testing.B, addrs []string, shape warmShape, shared bool) {
	fx := newWarmFixture(b, addrs, shape)
	fx.deleteTopics = shared
	defer fx.close()
	for round := range *warmRounds {
		for _, v := range warmVariants {
			b.Run(v.name, func(b *testing.B) {
				for range b.N {
					b.StopTimer()
					if v.prepare != nil {
						v.prepare(b, fx)
					}
					stopProfile := warmProfile(b, v.name, round)
					b.StartTimer()
					o := v.restart(b, fx)
					b.StopTimer()
					stopProfile()
					v.check(b, fx, o)
					fx.checkSample(b, o)
					o.stop(b)
					o.report(b)
					b.StartTimer()
				}
			})
		}
	}
}

// warmProfile starts a CPU profile of an op (-warm.cpuprofile) and returns
// what stops it.
func warmProfile(b *testing.B, variant string, round int) func() {
	if *warmCPU == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(*warmCPU, fmt.Sprintf("%s-%d.pprof", variant, round)))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	}
}

// warmFixture is the seeded state and its owners' common configuration.
type warmFixture struct {
	shape                    warmShape
	addrs                    []string
	prod                     *kgo.Client // input producer (manual partitioner), admin
	input, snapshots, group  string
	txnPrefix                string
	warmDir, writerDir       string
	pool                     []byte
	versions                 []int // the version of each key's state
	next                     int   // the next key to change
	lastChanged              []int // the keys the last change wrote
	written                  int   // snapshots written so far (seed and changes)
	produced                 int   // input records produced so far
	deleteTopics             bool  // a shared broker: delete the topics at the end
	keyPartition             func(i int) int32
	seedTime, writerFirstRun time.Duration
}

func newWarmFixture(b *testing.B, addrs []string, shape warmShape) *warmFixture {
	b.Helper()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	fx := &warmFixture{
		shape: shape, addrs: addrs,
		input: "warm-" + run, group: "warm-" + run, txnPrefix: "warm-" + run,
		warmDir: b.TempDir(), writerDir: b.TempDir(),
		versions: make([]int, shape.keys),
	}
	fx.snapshots = kafka.DefaultSnapshotTopic(fx.txnPrefix, fx.input)
	fx.keyPartition = func(i int) int32 { return int32(i % shape.partitions) }
	// A state is a 100-byte window of 1 MB of random bytes, chosen by the
	// key and its version: incompressible, and different for every
	// version of a key.
	fx.pool = make([]byte, 1<<20)
	rng := rand.New(rand.NewChaCha8([32]byte{'w', 'a', 'r', 'm'}))
	for i := range fx.pool {
		fx.pool[i] = byte(rng.Uint32())
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		b.Fatal(err)
	}
	fx.prod = prod
	ctx, cancel := context.WithTimeout(context.Background(), warmDeadline)
	defer cancel()
	compact := "compact"
	if err := kafka.CreateTopic(ctx, prod, fx.input, int32(shape.partitions), 1, nil); err != nil {
		b.Fatal(err)
	}
	if err := kafka.CreateTopic(ctx, prod, fx.snapshots, int32(shape.partitions), 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
		b.Fatal(err)
	}

	// The seed: one record per key, folded by the warm owner.
	start := time.Now()
	all := make([]int, shape.keys)
	for i := range all {
		all[i] = i
	}
	fx.fold(b, fx.warmDir, all)
	fx.seedTime = time.Since(start)
	if shape.noWriter {
		b.Logf("seeded %d keys in %v", shape.keys, fx.seedTime.Round(time.Millisecond))
		return fx
	}
	// The writer's first run recovers in full (on its empty Dir), folds
	// nothing and stops: its later runs recover only the deltas.
	start = time.Now()
	w := fx.start(b, fx.writerDir, false)
	w.stop(b)
	fx.writerFirstRun = time.Since(start)
	b.Logf("seeded %d keys in %v; the writer's first (full) recovery and stop took %v", shape.keys, fx.seedTime.Round(time.Millisecond), fx.writerFirstRun.Round(time.Millisecond))
	return fx
}

func (fx *warmFixture) close() {
	if fx.deleteTopics {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = kadm.NewClient(fx.prod).DeleteTopics(ctx, fx.input, fx.snapshots)
	}
	fx.prod.Close()
}

// state is key i's state at version v.
func (fx *warmFixture) state(i, v int) []byte {
	off := (i*101 + v*7919) % (len(fx.pool) - warmStateBytes)
	return fx.pool[off : off+warmStateBytes : off+warmStateBytes]
}

func warmKey(i int) []byte { return fmt.Appendf(nil, "%s%07d", warmKeyPrefix, i) }

// change is the warm variant's prepare: the writer folds the next
// shape.changed keys, round-robin.
func (fx *warmFixture) change(b *testing.B) {
	keys := make([]int, fx.shape.changed)
	for j := range keys {
		keys[j] = fx.next
		fx.next = (fx.next + 1) % fx.shape.keys
	}
	fx.fold(b, fx.writerDir, keys)
	fx.lastChanged = keys
}

// fold produces one input record per key (its next version), runs an
// owner on dir until every input offset is committed, and stops it.
func (fx *warmFixture) fold(b *testing.B, dir string, keys []int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), warmDeadline)
	defer cancel()
	var failed atomic.Pointer[error]
	for _, i := range keys {
		fx.versions[i]++
		r := &kgo.Record{Topic: fx.input, Partition: fx.keyPartition(i), Key: warmKey(i), Value: strconv.AppendInt(nil, int64(fx.versions[i]), 10)}
		fx.prod.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	if err := fx.prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if err := failed.Load(); err != nil {
		b.Fatalf("producing the input: %v", *err)
	}
	fx.produced += len(keys)
	ends, err := kadm.NewClient(fx.prod).ListEndOffsets(ctx, fx.input)
	if err != nil {
		b.Fatal(err)
	}
	watch := newBenchCommitWatch(ends)
	o := fx.startWith(b, dir, false, watch)
	select {
	case <-watch.done:
	case err := <-o.runErr:
		o.runErr <- err
		b.Fatalf("Run returned before every input offset was committed (%s): %v\n%s", watch, err, o.log.problems())
	case <-ctx.Done():
		b.Fatalf("not every input offset committed in %v: %s\n%s", warmDeadline, watch, o.log.problems())
	}
	o.stop(b)
	if n := o.folded.Load(); n != int64(len(keys)) {
		b.Fatalf("folded %d records, want %d", n, len(keys))
	}
	fx.written += len(keys)
}

// warmOwner is a running engine of the fixture's group.
type warmOwner struct {
	e       *engine.Engine[[]byte]
	r       *engine.Member[[]byte]
	backend *kafka.Backend
	log     *warmLog
	folded  atomic.Int64
	cancel  context.CancelFunc
	runErr  chan error // Run's result, once
	stopped bool
	// killSwitch is set by warmMember.killable; killed once kill ran.
	killSwitch *killSwitch
	killed     bool
	// The op's times (start: the backend's creation).
	start, runAt time.Time
	open         time.Duration
	status       engine.Status // once every partition was recovered
}

func (fx *warmFixture) start(b *testing.B, dir string, full bool) *warmOwner {
	return fx.startWith(b, dir, full, nil)
}

// startWith starts an owner on dir and returns once all its partitions
// are recovered (the timed part of an op). A non-nil observer watches its
// store's transactions.
func (fx *warmFixture) startWith(b *testing.B, dir string, full bool, obs store.Observer) *warmOwner {
	b.Helper()
	o := fx.launch(b, dir, warmMember{full: full, obs: obs, want: fx.shape.partitions})
	o.waitRecovered(b)
	o.status = o.r.Status()
	return o
}

// warmMember is how launch starts a member.
type warmMember struct {
	full     bool
	obs      store.Observer
	standby  bool // Config.StandbyReplicas 1
	killable bool // a kill switch between the source and the runner (warmOwner.kill)
	want     int  // the `partition recovered` lines that close its log's all
	// life, when set, is the benchmark whose end stops the member, if
	// nothing stopped it before (else the b launch is given): a failover's
	// new member outlives its sub-benchmark, as the next one's active.
	life *testing.B
	// heartbeat is kafkaio.Config.HeartbeatInterval (0: the default).
	heartbeat time.Duration
}

// launch starts a member on dir: its Run runs once launch returns.
func (fx *warmFixture) launch(b *testing.B, dir string, m warmMember) *warmOwner {
	b.Helper()
	full, obs := m.full, m.obs
	o := &warmOwner{log: newWarmLog(m.want), runErr: make(chan error, 1), start: time.Now()}
	backend, err := kafka.New(context.Background(), kafka.Config{
		Mode: store.Transactional, SeedBrokers: fx.addrs, TransactionalIDPrefix: fx.txnPrefix,
		SnapshotTopic: func(string) string { return fx.snapshots }, Observer: obs,
	})
	if err != nil {
		b.Fatal(err)
	}
	o.backend = backend
	openAt := time.Now()
	e, err := engine.New(engine.Config[[]byte]{
		Fold: func(key, _ []byte, _ bool, rec engine.Record) (engine.Result[[]byte], error) {
			i, err := strconv.Atoi(string(key[len(warmKeyPrefix):]))
			if err != nil {
				return engine.Result[[]byte]{}, err
			}
			v, err := strconv.Atoi(string(rec.Value))
			if err != nil {
				return engine.Result[[]byte]{}, err
			}
			o.folded.Add(1)
			return engine.Set(fx.state(i, v)), nil
		},
		Codec: engine.Bytes(), Store: backend, Dir: dir, FullRecovery: full,
		PersistInterval: 200 * time.Millisecond, CommitInterval: 200 * time.Millisecond,
		Logger: slog.New(o.log), StandbyReplicas: standbyReplicas(m.standby),
	})
	if err != nil {
		_ = backend.Close()
		b.Fatal(err)
	}
	o.open = time.Since(openAt)
	o.e = e
	// The owners take turns: each stop hands the partitions over. A
	// static member (its Dir makes it one) that stopped without leaving
	// would hold the next owner's join for a session timeout, the same
	// for cold and warm, and the ratio would measure that wait.
	var newSource engine.Input = kafkaio.Config{
		SeedBrokers: fx.addrs, Group: fx.group, Topics: []string{fx.input},
		HeartbeatInterval: m.heartbeat, LeaveOnClose: true,
	}
	if m.killable {
		newSource, o.killSwitch = killable(newSource)
	}
	r, err := e.Join(newSource)
	if err != nil {
		_ = e.Close()
		_ = backend.Close()
		b.Fatal(err)
	}
	o.r = r
	ctx, cancel := context.WithCancel(context.Background())
	o.cancel = cancel
	o.runAt = time.Now()
	go func() { o.runErr <- r.Run(ctx) }()
	life := b
	if m.life != nil {
		life = m.life
	}
	life.Cleanup(func() { o.stop(life) }) // on a failure's path out
	return o
}

// waitRecovered waits for the owner's want `partition recovered` lines.
func (o *warmOwner) waitRecovered(b *testing.B) {
	b.Helper()
	timeout := time.NewTimer(warmDeadline)
	defer timeout.Stop()
	select {
	case <-o.log.all:
	case err := <-o.runErr:
		o.runErr <- err
		b.Fatalf("Run returned before every partition was recovered: %v\n%s", err, o.log.problems())
	case <-timeout.C:
		b.Fatalf("not every partition recovered in %v: %+v\n%s", warmDeadline, o.r.Status(), o.log.problems())
	}
}

// stop ends Run (a clean leave: the revoke flushes, of nothing here) and
// closes the engine and the backend; once.
func (o *warmOwner) stop(b *testing.B) {
	if o.stopped {
		return
	}
	o.stopped = true
	o.cancel()
	err := <-o.runErr
	if o.killed {
		// A dead process's Run ends on its closed source, and its
		// engine may log what it could not do: neither is the
		// benchmark's concern.
		err = nil
	}
	if cerr := o.e.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if cerr := o.backend.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		b.Errorf("stopping an owner: %v", err)
	}
	if p := o.log.errors(); p != "" && !o.killed {
		b.Errorf("the engine logged errors:\n%s", p)
	}
}

// snapshots is the number of snapshots the recoveries read.
func (o *warmOwner) snapshots() int {
	n := 0
	for _, rec := range o.log.recoveries() {
		n += rec.snapshots
	}
	return n
}

// wantKinds checks every recovery is of kind (and, for a full one, the
// reason).
func (o *warmOwner) wantKinds(b *testing.B, kind, reason string) {
	b.Helper()
	for _, rec := range o.log.recoveries() {
		if rec.kind != kind || rec.reason != reason {
			b.Errorf("%s recovered %s (reason %q), want %s (reason %q)", rec.input, rec.kind, rec.reason, kind, reason)
		}
	}
}

// report reports the op's times and recoveries. The assignment is the
// earliest takeover start: a partition's recovered time less its
// Recovery.Duration (from the takeover's start to the end of its read).
func (o *warmOwner) report(b *testing.B) {
	recs := o.log.recoveries()
	durs := map[string]time.Duration{}
	for _, p := range o.status.Partitions {
		durs[p.Input.String()] = p.Recovery.Duration
	}
	var assigned, last time.Time
	kinds := map[string]int{}
	for _, rec := range recs {
		if at := rec.at.Add(-durs[rec.input]); assigned.IsZero() || at.Before(assigned) {
			assigned = at
		}
		if rec.at.After(last) {
			last = rec.at
		}
		kinds[rec.kind]++
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	if testing.Verbose() {
		for _, rec := range recs {
			b.Logf("%s: %s, %d snapshots, recovered %.1f ms after the assignment (its takeover and read: %.1f ms)",
				rec.input, rec.kind, rec.snapshots, ms(rec.at.Sub(assigned)), ms(durs[rec.input]))
		}
	}
	b.ReportMetric(ms(last.Sub(o.start)), "total-ms")
	b.ReportMetric(ms(o.open), "open-ms")
	b.ReportMetric(ms(assigned.Sub(o.runAt)), "join-ms")
	b.ReportMetric(ms(last.Sub(assigned)), "recovery-ms")
	b.ReportMetric(float64(o.snapshots()), "snapshots")
	b.ReportMetric(float64(kinds["delta"]), "delta-partitions")
	b.ReportMetric(float64(kinds["full"]), "full-partitions")
}

// checkSample checks the state of the last change's first warmSampled keys
// and of warmSampled random others in the owner's flows.
func (fx *warmFixture) checkSample(b *testing.B, o *warmOwner) {
	b.Helper()
	keys := slices.Clone(fx.lastChanged[:min(len(fx.lastChanged), warmSampled)])
	rng := rand.New(rand.NewPCG(uint64(fx.written), 17))
	for range warmSampled {
		keys = append(keys, rng.IntN(fx.shape.keys))
	}
	bad := 0
	for _, i := range keys {
		tp := store.TopicPartition{Topic: fx.input, Partition: fx.keyPartition(i)}
		s, ok, err := o.r.State(tp, warmKey(i))
		want := fx.state(i, fx.versions[i])
		if err != nil || !ok || string(s) != string(want) {
			if bad++; bad <= 5 {
				b.Errorf("key %d (version %d): state %x, found %v, err %v; want %x", i, fx.versions[i], s, ok, err, want)
			}
		}
	}
	if bad > 0 {
		b.Fatalf("%d of %d sampled keys with a wrong state", bad, len(keys))
	}
}

// warmLog is an owner's slog handler: it records the `partition recovered`
// lines (and closes all once it has seen want of them), and keeps the
// warnings and errors for a failure's message.
type warmLog struct {
	mu   sync.Mutex
	want int
	recs []warmRecovery
	all  chan struct{}
	warn strings.Builder
	errs strings.Builder
}

type warmRecovery struct {
	input, kind, reason string
	snapshots           int
	at                  time.Time
}

func newWarmLog(want int) *warmLog { return &warmLog{want: want, all: make(chan struct{})} }

func (l *warmLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelInfo }
func (l *warmLog) WithAttrs([]slog.Attr) slog.Handler            { return l }
func (l *warmLog) WithGroup(string) slog.Handler                 { return l }

func (l *warmLog) Handle(_ context.Context, r slog.Record) error {
	at := time.Now()
	// Every attribute resolved, as slog's own handlers do: a lazy value
	// (slog.LogValuer) costs here what it costs in production.
	var attrs []slog.Attr
	r.Attrs(func(a slog.Attr) bool {
		attrs = append(attrs, slog.Attr{Key: a.Key, Value: a.Value.Resolve()})
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Message == "partition recovered" {
		rec := warmRecovery{at: at}
		for _, a := range attrs {
			switch a.Key {
			case "input":
				rec.input = a.Value.String()
			case "recovery":
				rec.kind = a.Value.String()
			case "full_reason":
				rec.reason = a.Value.String()
			case "snapshots":
				rec.snapshots = int(a.Value.Int64())
			}
		}
		l.recs = append(l.recs, rec)
		if len(l.recs) == l.want {
			close(l.all)
		}
	}
	if r.Level >= slog.LevelWarn {
		w := &l.warn
		if r.Level >= slog.LevelError {
			w = &l.errs
		}
		fmt.Fprintf(w, "%s %s", r.Level, r.Message)
		for _, a := range attrs {
			fmt.Fprintf(w, " %s", a)
		}
		w.WriteString("\n")
	}
	return nil
}

func (l *warmLog) recoveries() []warmRecovery {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.recs)
}

func (l *warmLog) problems() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.warn.String() + l.errs.String()
}

func (l *warmLog) errors() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.errs.String()
}

// standbyReplicas is Config.StandbyReplicas for a member with standbys
// (one: the benchmark's groups are of two).
func standbyReplicas(on bool) int {
	if on {
		return 1
	}
	return 0
}
