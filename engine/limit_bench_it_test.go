//go:build it

package engine_test

// BenchmarkLimit: the end-to-end benchmark on the integration tier's real
// broker (SNAPFENCE_KAFKA_BROKERS; `make bench-limit` starts one;
// docs/benchmarks.md, "End to end against the limit"). It
// is a benchmark only: `go test -tags it` without -bench runs none of it.
//
// The workload: a backlog of -limit.records (1M) input records over
// limitKeys (100k) keys in limitPartitions (8) input partitions, produced
// before the measured part; a per-key running sum (the value is an integer
// delta); one output per input record to an output topic of 8 partitions.
// The variants (-limit.variants, all by default), each op with fresh
// topics, group and transactional-id prefix, in -limit.rounds interleaved
// rounds (limit, at-least-once, exactly-once, ..., limit#01, ...;
// benchtable pairs each op with the limit op of its round):
//
//   - limit: a bare franz-go program, the baseline. A kgo group consumer
//     (ConsumeTopics, read_committed, auto-commit off, the engine's fetch
//     wait and poll size) and a plain idempotent producer (the engine
//     emitter's options: franz-go's default linger and partitioner, the
//     emitter's delivery timeout). Per poll it produces one output per
//     record (the record's value) and waits for the acks, as the engine's
//     kafkaio.Emitter does; it keeps no state and writes no snapshots; it
//     commits the acked offsets every -limit.commit (the at-least-once
//     engine's interval), polling no longer than until the next commit is
//     due, as the engine's runner does.
//   - at-least-once: engine.Run with store/kafka Transactional (snapshots)
//     and an kafkaio.Emitter's StartEmit (a poll's outputs in flight
//     while the next one is folded); CommitInterval -limit.commit (0:
//     the engine's default, DefaultCommitInterval), PersistInterval
//     following it.
//   - exactly-once: engine.Run with Config.ExactlyOnce at its default
//     CommitInterval (DefaultExactlyOnceCommitInterval, 100 ms) and
//     batch caps.
//   - at-least-once-emit: at-least-once with the kafkaio.Emitter's Emit in
//     place of StartEmit (the poll loop waits for each poll's acks), for
//     the difference StartEmit makes, in the same run.
//   - kafka-streams-at-least-once, kafka-streams-exactly-once: the peer,
//     Kafka Streams 4.3.1 (it/kstreams: the same sum with the Processor
//     API, a RocksDB store logged to its changelog topic, one output per
//     input with the input's headers), run by it/kstreams/app as a
//     subprocess with application.id the op's group: at_least_once with
//     commit.interval.ms -limit.commit (as at-least-once), exactly_once_v2
//     with 100 ms (as exactly-once); -kstreams.threads stream threads
//     (default 1); Kafka Streams' defaults otherwise (its producer's
//     linger.ms 100 among them). The app is built before the op (mvn, the
//     first time); the op's start includes the JVM's.
//
// Both engine variants cache in Pebble on disk (Dir), with the engine's
// defaults otherwise (consumer, HotKeys, FlushBatch, the store's
// transaction cap), and Config.Observer a prom.Metrics on a registry of
// their own, as a deployment has them.
//
// Measured: from the first fetched record (the limit: its first poll that
// returned records; the engine: its first fold; Kafka Streams: its
// first process call, which the app reports on stdout; the group join and
// the recovery are outside) until the group's committed offsets, read with
// OffsetFetch (kadm FetchOffsets; see awaitCommitted for when), equal the
// input's end offsets on every partition. Reported per op (ns/op is not a result:
// it includes the set-up):
//
//   - records/s, and measured-s, the measured part's seconds;
//   - consumed-s: from the start of the measured part until the whole
//     backlog was consumed (the limit: the last poll's outputs acked; the
//     engine: the last record folded; Kafka Streams: the app's count of
//     process calls reached the backlog), before the wait for the commit
//     that ends the measured part (at least once the next commit tick);
//   - cpu-s: the benchmark process's user+system CPU over the measured
//     part (getrusage(RUSAGE_SELF) before and after; the process holds the
//     variant's clients and engine, not the broker); for Kafka Streams,
//     the app's JVM's, from /proc/PID/stat;
//   - broker-cpu-s: the broker's CPU over the measured part, from
//     /proc/PID/stat, when `it/kafka/broker run` gave its process id
//     (SNAPFENCE_KAFKA_PID); every op has the broker to itself;
//   - emit-s: the time spent waiting for the outputs' acks (the limit's
//     ProduceSync calls, the engine's StartEmit calls and their waits,
//     the loop's time on outputs; 0 under exactly-once,
//     whose outputs go into its transactions; not for Kafka Streams);
//   - engine variants: txns/1M, the store.Observer's TransactionEvents
//     finished during the measured part, per 1M inputs; snapshots/1M, the
//     snapshots those transactions committed; txn-s, their durations
//     summed (the partitions' transactions may overlap); goal-txns/1M, the
//     issue's goal of one transaction per partition per commit interval
//     (8 x measured-s / commit interval, per 1M inputs); flush-s, the
//     time the poll loop spent in flushes (prom.Metrics'
//     snapfence_flush_seconds: at least once the snapshot writes, not
//     the offset commits' transactions; exactly once the batches'
//     commits);
//   - start-ms: from starting the consumer or engine to the first fetched
//     record (outside the measured part, for reference); commit-ms, the
//     variant's commit interval; inputs, the backlog's records.
//
// -limit.cpuprofile=DIR writes a CPU profile of each op's measured part to
// DIR/<variant>-<round>.pprof (round from 1): `go tool pprof -top FILE`.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/prom"
	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

var (
	limitRounds       = flag.Int("limit.rounds", 3, "BenchmarkLimit: rounds of the variants, interleaved")
	limitVariantsFlag = flag.String("limit.variants", "limit,at-least-once,exactly-once,at-least-once-emit,kafka-streams-at-least-once,kafka-streams-exactly-once",
		"BenchmarkLimit: the variants of a round, in order")
	kstreamsThreads  = flag.Int("kstreams.threads", 1, "BenchmarkLimit, BenchmarkLatency: Kafka Streams' num.stream.threads")
	limitRecords     = flag.Int("limit.records", 1_000_000, "BenchmarkLimit: input records in the backlog; smaller for a quick check")
	limitCommit      = flag.Duration("limit.commit", time.Second, "BenchmarkLimit: the at-least-once engine's CommitInterval (PersistInterval follows it), and the limit's commit interval; 0: the engine's default")
	limitCompression = flag.String("limit.compression", "", "BenchmarkLimit: the store's batch compression (none, gzip, snappy, lz4, zstd); default franz-go's (snappy)")
	limitFlushAtEnd  = flag.Bool("limit.flushatend", false, "BenchmarkLimit: the limit and the engine commit as soon as they have the backlog's outputs, not at their next commit tick")
	limitCPU         = flag.String("limit.cpuprofile", "", "BenchmarkLimit: write a CPU profile of each op's measured part to this directory, as <variant>-<round>.pprof")
)

const (
	limitPartitions  = 8
	limitKeys        = 100_000
	limitPollEvery   = 250 * time.Millisecond // the committed offsets' read without a nudge
	limitFirstReread = 5 * time.Millisecond   // the first read again after a nudge's
	limitDeadline    = 5 * time.Minute        // bounds every wait; never reached in a healthy run
)

// limitVariant is a sub-benchmark of a round: start starts the consumer,
// the engine or the peer on the run's topics and returns what stops it
// (and its error, nil after a clean stop). interval, if set, is the
// engine's CommitInterval (otherwise -limit.commit's at least once, the
// default exactly once); flushAtEnd has the engine commit
// (Member.FlushAll) as soon as it has folded the backlog, so that the
// measured part ends with the work done, not with the wait for the next
// commit tick. committed: exactly once (the default commit interval is
// the exactly-once one; BenchmarkLatency reads the outputs
// read_committed); peer: Kafka Streams, not the engine (no snapshot
// topic, no store to count).
type limitVariant struct {
	name       string
	start      func(lr *limitRun) (stop func() error)
	interval   time.Duration
	flushAtEnd bool
	committed  bool
	peer       bool
}

var limitVariants = []limitVariant{
	{name: "limit", start: (*limitRun).startLimit},
	{name: "at-least-once", start: func(lr *limitRun) func() error { return lr.startEngine(false, false) }},
	{name: "exactly-once", committed: true, start: func(lr *limitRun) func() error { return lr.startEngine(true, false) }},
	{name: "at-least-once-emit", start: func(lr *limitRun) func() error { return lr.startEngine(false, true) }},
	{name: "kafka-streams-at-least-once", peer: true, start: func(lr *limitRun) func() error { return lr.startStreams(false) }},
	{name: "kafka-streams-exactly-once", peer: true, committed: true, start: func(lr *limitRun) func() error { return lr.startStreams(true) }},
}

// pickVariants are the variants named in list (comma-separated), in its
// order.
func pickVariants(b *testing.B, flagName, list string) []limitVariant {
	var out []limitVariant
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(limitVariants, func(v limitVariant) bool { return v.name == name })
		if i < 0 {
			b.Fatalf("-%s: no variant %q", flagName, name)
		}
		out = append(out, limitVariants[i])
	}
	return out
}

func BenchmarkLimit(b *testing.B) {
	brokers := kafkatest.Brokers(b)
	if *limitCPU != "" {
		if err := os.MkdirAll(*limitCPU, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	variants := pickVariants(b, "limit.variants", *limitVariantsFlag)
	for round := 1; round <= *limitRounds; round++ {
		for _, v := range variants {
			b.Run(v.name, func(b *testing.B) {
				for range b.N {
					runLimit(b, brokers, v, round)
				}
			})
		}
	}
}

// limitRun is one op: its topics, clients and what it observed.
type limitRun struct {
	b                    *testing.B
	brokers              []string
	variant              string
	round                int
	input, output, snaps string
	group, txnPrefix     string
	interval             time.Duration // the variant's commit interval
	commit               time.Duration // the engine's CommitInterval; 0: its default
	flushAtEnd           bool          // limitVariant's
	engine               bool          // the engine (not the limit, not a peer)
	adm                  *kadm.Client
	records              int64 // the backlog's records (the sum of ends)
	ends                 map[int32]int64

	startedAt time.Time // the consumer or engine started
	beginOnce sync.Once
	begun     atomic.Bool // set (last) by begin
	beginAt   time.Time
	beginCPU  time.Duration // the process's CPU time at begin
	cpu       time.Duration // the measured part's CPU time
	profile   func()        // stops the CPU profile

	measuring                 atomic.Bool // between begin and the observed end
	wire                      limitWire   // the variant's requests and produced bytes, while measuring
	txns, txnFails, snapshots atomic.Int64
	txnNs, emitNs             atomic.Int64 // in the measured part
	folds                     atomic.Int64
	consumed                  atomic.Int64          // records fetched (the limit) or folded (the engine)
	consumedAt                atomic.Int64          // unix ns when consumed reached the backlog
	nudged                    chan struct{}         // awaitCommitted's wake-up, one slot
	allFolded                 chan struct{}         // closed at the engine's fold of the backlog's last record
	failure                   atomic.Pointer[error] // the variant's first error

	reg                 *prometheus.Registry // the engine's metrics; nil for the limit
	flushBegin, flushed float64              // snapfence_flush_seconds' sum at begin, and over the measured part

	brokerPID                  int           // the broker's process (SNAPFENCE_KAFKA_PID), 0 if unknown
	brokerBegin, brokerCPU     time.Duration // its CPU time at begin, and over the measured part
	brokerBeginOK, brokerCPUOK bool

	peerPID int // Kafka Streams' process, 0 for the others: its CPU is cpu-s
}

// runLimit runs one op of v and returns its records/s.
func runLimit(b *testing.B, brokers []string, v limitVariant, round int) float64 {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), limitDeadline)
	defer cancel()
	lr, cleanup := newLimitRun(ctx, b, brokers, v, "limit", round)
	defer cleanup()
	lr.produceBacklog(ctx)

	b.StartTimer()
	lr.startedAt = time.Now()
	stop := sync.OnceValue(v.start(lr))
	defer func() { _ = stop() }() // on a failed wait
	end := lr.awaitCommitted(ctx)
	b.StopTimer()
	if err := stop(); err != nil {
		b.Errorf("%s: %v", v.name, err)
	}
	return lr.report(end)
}

// newLimitRun is an op of v (round round) on fresh topics named after
// prefix, and what deletes them.
func newLimitRun(ctx context.Context, b *testing.B, brokers []string, v limitVariant, prefix string, round int) (*limitRun, func()) {
	id := fmt.Sprintf("%s-%s-%d", prefix, v.name, time.Now().UnixNano())
	lr := &limitRun{b: b, brokers: brokers, variant: v.name, round: round,
		input: id, output: id + "-out", snaps: kafka.DefaultSnapshotTopic(id, id), group: id + "-group", txnPrefix: id}
	lr.brokerPID, _ = strconv.Atoi(os.Getenv("SNAPFENCE_KAFKA_PID"))
	lr.nudged = make(chan struct{}, 1)
	lr.wire.measuring = &lr.measuring
	lr.allFolded = make(chan struct{})
	lr.flushAtEnd = v.flushAtEnd || *limitFlushAtEnd
	lr.engine = v.name != "limit" && !v.peer
	if v.peer {
		if err := buildStreamsApp(); err != nil {
			b.Fatal(err)
		}
	}
	switch {
	case v.interval > 0:
		lr.interval, lr.commit = v.interval, v.interval
	case v.committed:
		lr.interval = engine.DefaultExactlyOnceCommitInterval
	case *limitCommit > 0:
		lr.interval, lr.commit = *limitCommit, *limitCommit
	default:
		lr.interval = engine.DefaultCommitInterval
	}

	admCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		b.Fatal(err)
	}
	lr.adm = kadm.NewClient(admCl)
	topics := []string{lr.input, lr.output}
	if lr.engine {
		topics = append(topics, lr.snaps)
	}
	compact := "compact"
	for _, t := range topics {
		var cfg map[string]*string
		if t == lr.snaps {
			cfg = map[string]*string{"cleanup.policy": &compact}
		}
		if err := kafka.CreateTopic(ctx, admCl, t, limitPartitions, 1, cfg); err != nil {
			admCl.Close()
			b.Fatalf("create topic %s: %v", t, err)
		}
	}
	return lr, func() {
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		del := topics
		if v.peer { // and Kafka Streams' own: application.id-...
			if listed, err := lr.adm.ListTopics(dctx); err == nil {
				for _, t := range listed.Names() {
					if strings.HasPrefix(t, lr.group+"-") {
						del = append(del, t)
					}
				}
			}
		}
		_, _ = lr.adm.DeleteTopics(dctx, del...)
		admCl.Close()
	}
}

// produceBacklog produces the input (untimed): record i has key i mod
// limitKeys and an integer delta in [-100, 100]; the default partitioner
// spreads the keys over the partitions. Then it reads the end offsets.
func (lr *limitRun) produceBacklog(ctx context.Context) {
	b := lr.b
	prod, err := kgo.NewClient(kgo.SeedBrokers(lr.brokers...), kgo.DefaultProduceTopic(lr.input))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	var failed atomic.Pointer[error]
	for i := range *limitRecords {
		r := &kgo.Record{Key: []byte(fmt.Sprintf("key-%06d", i%limitKeys)), Value: []byte(strconv.Itoa(i*7919%201 - 100))}
		prod.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if e := failed.Load(); e != nil {
		b.Fatalf("producing the backlog: %v", *e)
	}
	listed, err := lr.adm.ListEndOffsets(ctx, lr.input)
	if err != nil {
		b.Fatal(err)
	}
	lr.ends = map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) {
		lr.ends[o.Partition] = o.Offset
		lr.records += o.Offset
	})
	if len(lr.ends) != limitPartitions || lr.records != int64(*limitRecords) {
		b.Fatalf("backlog: end offsets %v (%d records), want %d partitions and %d records", lr.ends, lr.records, limitPartitions, *limitRecords)
	}
}

// begin marks the first fetched record: the start of the measured part
// (its time, the process's CPU so far, the CPU profile). Once per op.
func (lr *limitRun) begin() {
	lr.beginOnce.Do(func() {
		lr.beginAt = time.Now()
		lr.beginCPU = lr.cpuTime()
		lr.brokerBegin, lr.brokerBeginOK = procCPUTime(lr.brokerPID)
		lr.flushBegin = lr.flushSeconds()
		lr.profile = lr.startProfile()
		lr.measuring.Store(true)
		lr.begun.Store(true)
	})
}

// startProfile profiles BenchmarkLimit's ops (-limit.cpuprofile), not
// those of the benchmarks that share its runs (a latency feed never
// reaches the end that stops a profile).
func (lr *limitRun) startProfile() func() {
	if *limitCPU == "" || !strings.HasPrefix(lr.b.Name(), "BenchmarkLimit/") {
		return func() {}
	}
	f, err := os.Create(filepath.Join(*limitCPU, fmt.Sprintf("%s-%d.pprof", lr.variant, lr.round)))
	if err != nil {
		lr.b.Error(err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		lr.b.Error(err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			lr.b.Error(err)
		}
	}
}

// cpuTime is the variant's CPU time so far: the process's, or the peer's
// process's.
func (lr *limitRun) cpuTime() time.Duration {
	if lr.peerPID > 0 {
		t, _ := procCPUTime(lr.peerPID)
		return t
	}
	return cpuTime()
}

// cpuTime is the process's user plus system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// flushSeconds is the sum of the engine's snapfence_flush_seconds so far:
// the time its poll loop spent in flushes (at least once: the snapshot
// writes of persists and commits, not the offset commits' own
// transactions; exactly once: the batches' commits).
func (lr *limitRun) flushSeconds() float64 {
	if lr.reg == nil {
		return 0
	}
	mfs, err := lr.reg.Gather()
	if err != nil {
		lr.b.Error(err)
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == "snapfence_flush_seconds" && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	return 0
}

// procCPUTime is the user plus system CPU time of process pid so far,
// from /proc/PID/stat (Linux; clock ticks of 10 ms, USER_HZ on every
// Linux architecture Go runs on); false if it cannot be read.
func procCPUTime(pid int) (time.Duration, bool) {
	if pid <= 0 {
		return 0, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command may hold spaces and parentheses: the fields start after
	// the last ')'; utime and stime are the stat's 14th and 15th fields.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, true
}

// failed records the variant's first error (it ends the wait).
func (lr *limitRun) failed(err error) { lr.failure.CompareAndSwap(nil, &err) }

func (lr *limitRun) firstErr() error {
	if e := lr.failure.Load(); e != nil {
		return *e
	}
	return nil
}

// awaitCommitted reads the group's committed offsets until they equal the
// input's end offsets on every partition, and returns when it saw that.
// It ends the measured part: the counters stop, the profile stops.
//
// Every input record must have been fetched before the last offset can be
// committed, so it reads them only once the variant has consumed the
// whole backlog. From then on it reads them after each nudge (a commit of
// the limit, a transaction of the engine's store, the last record
// consumed) at once, then again after 5, 10, 20, ... ms (a transaction's
// offset commit becomes visible once its markers are written, a little
// after its EndTxn answer), up to every limitPollEvery until the next
// nudge. So the reads cost the broker and this process next to nothing,
// and the end is seen within a few milliseconds of the commit that
// reached it. (A first version read every 10 ms from the start: each read
// cost ~0.75 ms of this process's CPU and ~1.9 ms of the broker's, most of
// the limit's broker CPU at a 1 s commit interval.)
func (lr *limitRun) awaitCommitted(ctx context.Context) time.Time {
	b := lr.b
	wait := limitPollEvery
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var last kadm.OffsetResponses
	var err error
	for {
		if lr.consumed.Load() >= lr.records {
			var offs kadm.OffsetResponses
			offs, err = lr.adm.FetchOffsets(ctx, lr.group)
			now := time.Now()
			if err == nil {
				last = offs
				if lr.allCommitted(offs) && lr.begun.Load() {
					lr.measuring.Store(false)
					lr.cpu = lr.cpuTime() - lr.beginCPU
					if t, ok := procCPUTime(lr.brokerPID); ok && lr.brokerBeginOK {
						lr.brokerCPU, lr.brokerCPUOK = t-lr.brokerBegin, true
					}
					lr.flushed = lr.flushSeconds() - lr.flushBegin
					lr.profile()
					return now
				}
			}
		}
		if err := lr.firstErr(); err != nil {
			b.Fatalf("%s stopped before every input offset was committed: %v", lr.variant, err)
		}
		select {
		case <-lr.nudged:
			wait = limitFirstReread
		case <-timer.C:
			wait = min(2*wait, limitPollEvery)
		case <-ctx.Done():
			if lr.begun.Load() {
				lr.profile()
			}
			b.Fatalf("%s: %d of %d records consumed; the group's committed offsets %v did not reach the end offsets %v in %v (last error %v)",
				lr.variant, lr.consumed.Load(), lr.records, committedOf(last, lr.input), lr.ends, limitDeadline, err)
		}
		timer.Reset(wait)
	}
}

// nudge wakes awaitCommitted: the committed offsets may have moved.
func (lr *limitRun) nudge() {
	select {
	case lr.nudged <- struct{}{}:
	default: // a read is due already
	}
}

func (lr *limitRun) allCommitted(offs kadm.OffsetResponses) bool {
	for p, end := range lr.ends {
		o, ok := offs.Lookup(lr.input, p)
		if !ok || o.Err != nil || o.At < end {
			return false
		}
	}
	return true
}

func committedOf(offs kadm.OffsetResponses, topic string) map[int32]int64 {
	out := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			out[o.Partition] = o.At
		}
	})
	return out
}

// report checks the op and reports its metrics; it returns its records/s.
func (lr *limitRun) report(end time.Time) float64 {
	b := lr.b
	span := end.Sub(lr.beginAt)
	perM := 1e6 / float64(lr.records)
	rate := float64(lr.records) / span.Seconds()
	b.ReportMetric(rate, "records/s")
	b.ReportMetric(span.Seconds(), "measured-s")
	b.ReportMetric(time.Unix(0, lr.consumedAt.Load()).Sub(lr.beginAt).Seconds(), "consumed-s")
	b.ReportMetric(lr.cpu.Seconds(), "cpu-s")
	b.ReportMetric(float64(lr.beginAt.Sub(lr.startedAt).Milliseconds()), "start-ms")
	b.ReportMetric(float64(lr.interval.Milliseconds()), "commit-ms")
	b.ReportMetric(float64(lr.records), "inputs")
	if lr.peerPID == 0 {
		b.ReportMetric(time.Duration(lr.emitNs.Load()).Seconds(), "emit-s")
	}
	if lr.brokerCPUOK {
		b.ReportMetric(lr.brokerCPU.Seconds(), "broker-cpu-s")
	}
	if lr.peerPID == 0 { // the peer's clients are Java's: no hooks
		b.ReportMetric(float64(lr.wire.requests.Load())*perM, "requests/1M")
		b.ReportMetric(float64(lr.wire.produces.Load())*perM, "produces/1M")
		b.ReportMetric(float64(lr.wire.txnRequests.Load())*perM, "txn-requests/1M")
		b.ReportMetric(float64(lr.wire.producedBytes.Load())*perM/1e6, "produced-MB/1M")
		b.ReportMetric(float64(lr.wire.producedRecords.Load())*perM, "produced/1M")
	}
	if lr.engine {
		b.ReportMetric(float64(lr.txns.Load())*perM, "txns/1M")
		b.ReportMetric(time.Duration(lr.txnNs.Load()).Seconds(), "txn-s")
		b.ReportMetric(lr.flushed, "flush-s")
		b.ReportMetric(float64(lr.snapshots.Load())*perM, "snapshots/1M")
		b.ReportMetric(limitPartitions*span.Seconds()/lr.interval.Seconds()*perM, "goal-txns/1M")
		if f := lr.txnFails.Load(); f > 0 {
			b.Errorf("%s: %d of the store's transactions failed", lr.variant, f)
		}
		if n := lr.folds.Load(); n < lr.records {
			b.Errorf("%s: %d folds for %d input records", lr.variant, n, lr.records)
		}
	}
	// Every input's output is in the output topic (at least once; under
	// exactly-once the last stable offsets count the commit markers too).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	listed, err := lr.adm.ListCommittedOffsets(ctx, lr.output)
	if err != nil {
		b.Fatal(err)
	}
	var outs int64
	listed.Each(func(o kadm.ListedOffset) { outs += o.Offset })
	if outs < lr.records {
		b.Errorf("%s: the output topic's last stable offsets sum to %d, below the %d inputs", lr.variant, outs, lr.records)
	}
	return rate
}

// startLimit runs the bare franz-go program until stopped.
func (lr *limitRun) startLimit() func() error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- lr.limitLoop(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

func (lr *limitRun) limitLoop(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			lr.failed(err)
		}
	}()
	cons, err := kgo.NewClient(kgo.SeedBrokers(lr.brokers...), kgo.WithHooks(&lr.wire),
		kgo.ConsumerGroup(lr.group), kgo.ConsumeTopics(lr.input),
		kgo.DisableAutoCommit(), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(kafkaio.DefaultFetchMaxWait),
		kgo.SessionTimeout(kafkaio.DefaultSessionTimeout), kgo.HeartbeatInterval(kafkaio.DefaultHeartbeatInterval))
	if err != nil {
		return err
	}
	defer cons.Close()
	// The kafkaio.Emitter's producer, less its manual partitioner (which
	// picks, by key, the partition franz-go's default one picks).
	prod, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(lr.brokers...), kgo.RecordDeliveryTimeout(kafkaio.DefaultDeliveryTimeout),
		kgo.WithHooks(&lr.wire)}, limitCompressionOpts(lr.b)...)...)
	if err != nil {
		return err
	}
	defer prod.Close()

	acked := map[int32]kgo.EpochOffset{} // next offsets whose outputs are acked
	polled := map[int32]kgo.EpochOffset{}
	dirty := false
	lastCommit := time.Now()
	var outs []*kgo.Record
	for {
		pctx, pcancel := context.WithTimeout(ctx, max(time.Until(lastCommit.Add(lr.interval)), time.Millisecond))
		fs := cons.PollRecords(pctx, kafkaio.DefaultMaxPollRecords)
		pcancel()
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		var ferr error
		fs.EachError(func(t string, p int32, e error) {
			if _, ok := errors.AsType[*kgo.ErrGroupSession](e); ok {
				return // kicked from the group or a failed join: the client rejoins by itself
			}
			if !errors.Is(e, context.DeadlineExceeded) && !errors.Is(e, context.Canceled) && ferr == nil {
				ferr = fmt.Errorf("fetching %s/%d: %w", t, p, e)
			}
		})
		if ferr != nil {
			return ferr
		}
		outs = outs[:0]
		fs.EachRecord(func(r *kgo.Record) {
			outs = append(outs, &kgo.Record{Topic: lr.output, Key: r.Key, Value: r.Value, Headers: r.Headers})
			polled[r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
		})
		if len(outs) > 0 {
			lr.begin()
			t0 := time.Now()
			err := prod.ProduceSync(ctx, outs...).FirstErr()
			lr.emitNs.Add(int64(time.Since(t0)))
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("producing outputs: %w", err)
			}
			maps.Copy(acked, polled)
			dirty = true
			all := lr.consumed.Add(int64(len(outs))) >= lr.records
			if all {
				lr.consumedAt.CompareAndSwap(0, time.Now().UnixNano())
				lr.nudge()
			}
			if all && lr.flushAtEnd {
				lastCommit = time.Time{} // commit now: the work is done
			}
		}
		if time.Since(lastCommit) >= lr.interval {
			lastCommit = time.Now()
			if dirty {
				if err := commitSync(ctx, cons, lr.input, acked); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				dirty = false
				lr.nudge()
			}
		}
	}
}

// commitSync commits offsets of topic with the group consumer's identity
// and waits for the answer.
func commitSync(ctx context.Context, cl *kgo.Client, topic string, offsets map[int32]kgo.EpochOffset) error {
	var cerr error
	cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{topic: maps.Clone(offsets)},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				cerr = err
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if e := kerr.ErrorForCode(p.ErrorCode); e != nil && cerr == nil {
						cerr = fmt.Errorf("committing %s/%d: %w", t.Topic, p.Partition, e)
					}
				}
			}
		})
	return cerr
}

// startEngine runs the engine, at least once (with StartEmit, or with
// Emit: syncEmit) or exactly once, until stopped.
func (lr *limitRun) startEngine(eos, syncEmit bool) func() error {
	b := lr.b
	backend, err := kafka.New(context.Background(), kafka.Config{Mode: store.Transactional, SeedBrokers: lr.brokers,
		TransactionalIDPrefix: lr.txnPrefix, Observer: store.ObserverFunc(lr.observe), ClientOpts: lr.clientOpts()})
	if err != nil {
		b.Fatal(err)
	}
	lr.reg = prometheus.NewRegistry()
	metrics, err := prom.NewMetrics(lr.reg)
	if err != nil {
		_ = backend.Close()
		b.Fatal(err)
	}
	cfg := engine.Config[int64]{Fold: lr.fold, Codec: engine.Int64(), Store: backend, Dir: b.TempDir(), Observer: metrics,
		CommitInterval: lr.commit} // PersistInterval follows it
	var em *kafkaio.Emitter
	if eos {
		cfg.ExactlyOnce = true // CommitInterval 0: DefaultExactlyOnceCommitInterval
		cfg.OutputTopics = []string{lr.output}
	} else {
		if em, err = kafkaio.NewEmitter(kafkaio.EmitterConfig{SeedBrokers: lr.brokers, ClientOpts: lr.clientOpts()}); err != nil {
			_ = backend.Close()
			b.Fatal(err)
		}
		if syncEmit {
			cfg.Emit = func(ctx context.Context, outs []engine.Output) error {
				t0 := time.Now()
				err := em.Emit(ctx, outs)
				if lr.measuring.Load() {
					lr.emitNs.Add(int64(time.Since(t0)))
				}
				return err
			}
		} else {
			cfg.StartEmit = func(ctx context.Context, outs []engine.Output) func() error {
				t0 := time.Now()
				wait := em.StartEmit(ctx, outs)
				start := time.Since(t0)
				return func() error {
					t1 := time.Now()
					err := wait()
					if lr.measuring.Load() {
						lr.emitNs.Add(int64(start + time.Since(t1)))
					}
					return err
				}
			}
		}
	}
	e, err := engine.New(cfg)
	if err != nil {
		_ = backend.Close()
		if em != nil {
			_ = em.Close()
		}
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	in := kafkaio.Config{SeedBrokers: lr.brokers, Group: lr.group, Topics: []string{lr.input}, ClientOpts: []kgo.Opt{kgo.WithHooks(&lr.wire)}}
	// flushing is held by the flush at the end, and by stop: so the flush
	// never overlaps or follows the member's close.
	var flushing sync.Mutex
	stopped := false
	if !lr.flushAtEnd {
		go func() {
			err := e.Run(ctx, in)
			if err != nil {
				lr.failed(err)
			}
			done <- err
		}()
	} else {
		m, err := e.Join(in)
		if err != nil {
			cancel()
			_ = e.Close()
			_ = backend.Close()
			if em != nil {
				_ = em.Close()
			}
			b.Fatal(err)
		}
		go func() {
			err := m.Run(ctx)
			if err != nil {
				lr.failed(err)
			}
			done <- err
		}()
		go func() {
			select {
			case <-lr.allFolded:
				flushing.Lock()
				defer flushing.Unlock()
				if !stopped {
					m.FlushAll(ctx)
				}
			case <-ctx.Done():
			}
		}()
	}
	return func() error {
		flushing.Lock()
		stopped = true
		flushing.Unlock()
		cancel()
		err := <-done
		err = errors.Join(err, e.Close())
		if em != nil {
			err = errors.Join(err, em.Close())
		}
		return errors.Join(err, backend.Close())
	}
}

// fold sums the deltas of a key and emits the new sum.
func (lr *limitRun) fold(key []byte, sum int64, _ bool, rec engine.Record) (engine.Result[int64], error) {
	if !lr.begun.Load() {
		lr.begin()
	}
	if lr.folds.Add(1) == lr.records {
		lr.consumedAt.Store(time.Now().UnixNano())
		lr.consumed.Store(lr.records) // a replay folds some again: the first pass is what counts
		close(lr.allFolded)
		lr.nudge()
	}
	d, err := strconv.ParseInt(string(rec.Value), 10, 64)
	if err != nil {
		return engine.Result[int64]{}, fmt.Errorf("bad delta %q: %w", rec.Value, err)
	}
	sum += d
	return engine.Set(sum).With(engine.Output{Topic: lr.output, Key: key, Value: strconv.AppendInt(nil, sum, 10), Headers: rec.Headers}), nil
}

// observe counts the store's transactions of the measured part.
func (lr *limitRun) observe(e store.TransactionEvent) {
	if !lr.measuring.Load() {
		return
	}
	defer lr.nudge()
	lr.txns.Add(1)
	lr.txnNs.Add(int64(e.Duration))
	if e.Err != nil {
		lr.txnFails.Add(1)
		return
	}
	lr.snapshots.Add(int64(len(e.Writes)))
}

// clientOpts are the options of the clients that produce the outputs
// and snapshots: the wire's counters, and the flags' compression.
func (lr *limitRun) clientOpts() []kgo.Opt {
	return append([]kgo.Opt{kgo.WithHooks(&lr.wire)}, limitCompressionOpts(lr.b)...)
}

// limitCompressionOpts is -limit.compression's option, if set.
func limitCompressionOpts(b *testing.B) []kgo.Opt {
	var c kgo.CompressionCodec
	switch *limitCompression {
	case "":
		return nil
	case "none":
		c = kgo.NoCompression()
	case "gzip":
		c = kgo.GzipCompression()
	case "snappy":
		c = kgo.SnappyCompression()
	case "lz4":
		c = kgo.Lz4Compression()
	case "zstd":
		c = kgo.ZstdCompression()
	default:
		b.Fatalf("-limit.compression: %q is none of none, gzip, snappy, lz4, zstd", *limitCompression)
	}
	return []kgo.Opt{kgo.ProducerBatchCompression(c)}
}

// limitWire counts, through franz-go's hooks on every client of a
// variant, the requests it sends and the record bytes it produces (as
// sent: compressed) while its run is measured. measuring is the run's.
type limitWire struct {
	measuring                       *atomic.Bool
	requests, produces, txnRequests atomic.Int64
	producedBytes, producedRecords  atomic.Int64
}

var (
	_ kgo.HookBrokerWrite         = (*limitWire)(nil)
	_ kgo.HookProduceBatchWritten = (*limitWire)(nil)
)

func (w *limitWire) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil || w.measuring == nil || !w.measuring.Load() {
		return
	}
	w.requests.Add(1)
	switch kmsg.Key(key) {
	case kmsg.Produce:
		w.produces.Add(1)
	case kmsg.AddPartitionsToTxn, kmsg.AddOffsetsToTxn, kmsg.EndTxn, kmsg.TxnOffsetCommit:
		w.txnRequests.Add(1)
	}
}

func (w *limitWire) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	if w.measuring == nil || !w.measuring.Load() {
		return
	}
	w.producedBytes.Add(int64(m.CompressedBytes))
	w.producedRecords.Add(int64(m.NumRecords))
}
