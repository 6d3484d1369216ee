package engine_test

// Benchmarks of the engine (`make bench` runs them; docs/benchmarks.md has
// the numbers):
//
//   - BenchmarkEngineThroughput: events per second through the engine
//     (fold, periodic transactional flushes and offset commits through
//     store/kafka, Pebble on disk) against a bare franz-go group consumer
//     folding the same input into a Go map, on one kfake cluster (one
//     broker, loopback TCP, real time).
//   - BenchmarkEngineMemory: the peak memory of 1M keys of 100-byte states
//     in the engine's Pebble cache, written through engine/internal/core,
//     against a Go map[string][]byte of the same keys and values.
//
// They are benchmarks only; `go test` without -bench runs none of them.

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
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
	"github.com/snapfence/snapfence/engine/internal/cache"
	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

const (
	benchEvents     = 600_000
	benchEventKeys  = 1000
	benchPartitions = 3
	benchDeadline   = 2 * time.Minute // bounds every wait; never reached in a healthy run
)

// BenchmarkEngineThroughput: one op consumes the whole pre-produced input
// (600k records of ~10 bytes over 1000 keys, three partitions) with a fresh
// consumer group, from creating the consumer until the last record is
// folded. Each sub-benchmark has a fresh input topic on the same cluster.
// The input is large enough that the engine's op spans two persist and
// commit intervals or more, so periodic flushes and commits are inside it.
//
//   - bare: a kgo group consumer (auto-commit off, read_committed, polls of
//     up to 10000 records, as the engine's) folding into a map; nothing is
//     persisted or committed.
//   - engine: Engine.Run over store/kafka in Transactional mode, Pebble on
//     disk, PersistInterval and CommitInterval 1s, no outputs. Flushes and
//     commits that fall due while it consumes are timed. The op ends when
//     the fold has seen the last record; the benchmark then waits (untimed)
//     until the transactions have committed every input offset, and
//     reports that time too, as committed-events/s (it includes the wait
//     for the next commit tick). txn-ms/op is the sum of the durations of
//     the store's transactions in an op, flushes' and commits' alike.
func BenchmarkEngineThroughput(b *testing.B) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	addrs := c.ListenAddrs()
	admin, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	seq := 0
	b.Run("bare", func(b *testing.B) {
		seq++
		input := benchInput(b, admin, fmt.Sprintf("bench-in-%d", seq))
		for b.Loop() {
			seq++
			benchBare(b, addrs, input, fmt.Sprintf("bench-bare-%d", seq))
		}
		b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("engine", func(b *testing.B) {
		seq++
		input := benchInput(b, admin, fmt.Sprintf("bench-in-%d", seq))
		var committedFor, txnTime time.Duration
		var txns int64
		for b.Loop() {
			seq++
			d, w := benchEngine(b, admin, addrs, input, seq)
			committedFor += d
			txns += w.txns.Load()
			txnTime += time.Duration(w.txnTime.Load())
		}
		b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(float64(benchEvents*b.N)/committedFor.Seconds(), "committed-events/s")
		b.ReportMetric(float64(txns)/float64(b.N), "txns/op")
		b.ReportMetric(txnTime.Seconds()*1e3/float64(b.N), "txn-ms/op")
	})
}

// benchInput creates the input topic and produces the events (untimed).
// Key i%1000, value "+N": the fold sums them.
func benchInput(b *testing.B, admin *kgo.Client, topic string) string {
	b.StopTimer()
	defer b.StartTimer()
	ctx, cancel := context.WithTimeout(context.Background(), benchDeadline)
	defer cancel()
	if err := kafka.CreateTopic(ctx, admin, topic, benchPartitions, 1, nil); err != nil {
		b.Fatalf("creating %s: %v", topic, err)
	}
	var failed atomic.Pointer[error]
	for i := range benchEvents {
		r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "key-%04d", i%benchEventKeys), Value: []byte("+" + strconv.Itoa(1+i%100))}
		admin.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	if err := admin.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if err := failed.Load(); err != nil {
		b.Fatalf("producing: %v", *err)
	}
	return topic
}

// benchSum is the fold's arithmetic, shared by both sides.
func benchSum(sum int, value []byte) int {
	n, err := strconv.Atoi(string(value))
	if err != nil {
		panic(err)
	}
	return sum + n
}

// benchBare consumes the input once with a fresh group (timed: from client
// creation to the last record).
func benchBare(b *testing.B, addrs []string, input, group string) {
	ctx, cancel := context.WithTimeout(context.Background(), benchDeadline)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(input),
		kgo.DisableAutoCommit(), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		b.Fatal(err)
	}
	closeClient := sync.OnceFunc(cl.Close)
	defer closeClient()
	sums := map[string]int{}
	n := 0
	for n < benchEvents {
		fs := cl.PollRecords(ctx, 10000)
		if err := fs.Err0(); err != nil {
			b.Fatalf("after %d records: %v", n, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			sums[string(r.Key)] = benchSum(sums[string(r.Key)], r.Value)
			n++
		})
	}
	b.StopTimer()
	closeClient() // leaves the group, untimed
	if n != benchEvents || len(sums) != benchEventKeys {
		b.Fatalf("consumed %d records of %d keys, want %d of %d", n, len(sums), benchEvents, benchEventKeys)
	}
	b.StartTimer()
}

// benchEngine runs a fresh engine (fresh group, snapshot topic and
// transactional ids) over the input. It is timed from Run to the fold of
// the last record; it returns the time until every input offset was
// committed and the store's transactions.
func benchEngine(b *testing.B, admin *kgo.Client, addrs []string, input string, seq int) (time.Duration, *benchCommitWatch) {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), benchDeadline)
	defer cancel()
	adm := kadm.NewClient(admin)
	ends, err := adm.ListEndOffsets(ctx, input)
	if err != nil {
		b.Fatal(err)
	}
	// A fresh snapshot topic, created here, before the timer
	// (kafka.Config.CreateTopics would create it inside the op).
	snapshots := fmt.Sprintf("%s-snapshots-%d", input, seq)
	compact := "compact"
	if err := kafka.CreateTopic(ctx, admin, snapshots, benchPartitions, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
		b.Fatal(err)
	}
	watch := newBenchCommitWatch(ends)
	backend, err := kafka.New(ctx, kafka.Config{
		Mode: store.Transactional, SeedBrokers: addrs, TransactionalIDPrefix: fmt.Sprintf("bench-%d", seq),
		SnapshotTopic: func(string) string { return snapshots }, Observer: watch,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer backend.Close()
	var logs benchLog // the engine's warnings and errors, for a failure's message
	var folded atomic.Int64
	allFolded := make(chan struct{})
	e, err := engine.New(engine.Config[int]{
		Fold: func(key []byte, sum int, exists bool, rec engine.Record) (engine.Result[int], error) {
			if folded.Add(1) == benchEvents {
				close(allFolded)
			}
			return engine.Set(benchSum(sum, rec.Value)), nil
		},
		Codec: benchDecimal{}, Store: backend, Dir: b.TempDir(),
		Logger:          slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		PersistInterval: time.Second, CommitInterval: time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()

	runCtx, stop := context.WithCancel(ctx)
	var runErr error
	finished := make(chan struct{})
	// Run has returned before the engine and the backend close, on every
	// path out of here.
	defer func() { stop(); <-finished }()
	b.StartTimer()
	start := time.Now()
	go func() {
		defer close(finished)
		runErr = e.Run(runCtx, kafkaio.Config{SeedBrokers: addrs, Group: fmt.Sprintf("bench-engine-%d", seq), Topics: []string{input}})
	}()
	select {
	case <-allFolded:
	case <-finished:
		b.Fatalf("Run returned before folding everything: %v\n%s", runErr, &logs)
	case <-ctx.Done():
		b.Fatalf("folded %d of %d records in %s\n%s", folded.Load(), benchEvents, benchDeadline, &logs)
	}
	b.StopTimer()
	select {
	case <-watch.done:
	case <-ctx.Done():
		b.Fatalf("not every offset committed in %s: %s\n%s", benchDeadline, watch, &logs)
	}
	committedAfter := time.Since(start)
	stop() // a clean leave
	<-finished
	if runErr != nil {
		b.Fatal(runErr)
	}
	if n := folded.Load(); n != benchEvents {
		b.Fatalf("folded %d records, want %d", n, benchEvents)
	}
	b.StartTimer()
	return committedAfter, watch
}

// benchLog collects log lines from the engine's goroutines.
type benchLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *benchLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *benchLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// benchDecimal encodes an int state as decimal text.
type benchDecimal struct{}

func (benchDecimal) Encode(n int) ([]byte, error) { return strconv.AppendInt(nil, int64(n), 10), nil }
func (benchDecimal) Decode(b []byte) (int, error) { return strconv.Atoi(string(b)) }

// benchCommitWatch is the store's Observer: it counts transactions, sums
// their durations, and closes done once every input partition committed its
// end offset.
type benchCommitWatch struct {
	txns    atomic.Int64
	txnTime atomic.Int64 // nanoseconds
	mu      sync.Mutex
	target  map[int32]int64
	at      map[int32]int64
	done    chan struct{}
}

func newBenchCommitWatch(ends kadm.ListedOffsets) *benchCommitWatch {
	w := &benchCommitWatch{target: map[int32]int64{}, at: map[int32]int64{}, done: make(chan struct{})}
	ends.Each(func(o kadm.ListedOffset) { w.target[o.Partition] = o.Offset })
	return w
}

func (w *benchCommitWatch) OnTransaction(e store.TransactionEvent) {
	w.txns.Add(1)
	w.txnTime.Add(int64(e.Duration))
	if e.Err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.at[e.Input.Partition] = max(w.at[e.Input.Partition], e.Offset)
	for p, end := range w.target {
		if w.at[p] < end {
			return
		}
	}
	select {
	case <-w.done:
	default:
		close(w.done)
	}
}

func (w *benchCommitWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("committed %v of %v", w.at, w.target)
}

const (
	benchMemKeys      = 1_000_000
	benchStateBytes   = 100
	benchFlushEvery   = 100_000 // records between the emulated periodic flushes
	benchSampleEvery  = 10 * time.Millisecond
	benchMemKeyFormat = "account-%07d"
)

// BenchmarkEngineMemory: one op loads 1M keys with 100-byte states
// (incompressible bytes) and measures the peak memory it took.
//
//   - map: a map[string][]byte.
//   - pebble: the engine's cache (cache.Open) on a temp dir (the engine's cache as
//     Config.Dir makes it), written through core.Core with a fold that sets
//     the 100-byte state, so the cache holds what the engine stores (a
//     9-byte entry header, dirty and held markers until a flush). Every
//     100k records it flushes as the runner does after a successful store
//     write (Flush, then WriteDone for every key), without a store.
//
// heap-peak-MB is the peak of runtime.MemStats.HeapInuse above the level
// before the op, sampled every 10ms. rss-peak-MB is the peak resident set
// (the kernel's VmHWM, reset before the op, with sampled VmRSS as a
// fallback) above the resident set before it: Pebble allocates its
// memtables and block cache with C malloc (cgo builds), which the Go heap
// does not see. disk-MB is the Pebble directory's size after the load.
func BenchmarkEngineMemory(b *testing.B) {
	// Value i is a 100-byte window of 1 MB of random bytes, at a stride of
	// 101: neighbours differ and nothing repeats within a block, so the
	// values do not compress, and no 100 MB of values sits in the heap
	// (where it would also raise the GC's target for both sides).
	pool := make([]byte, 1<<20)
	rng := rand.New(rand.NewChaCha8([32]byte{'m', 'e', 'm'}))
	for i := range pool {
		pool[i] = byte(rng.Uint32())
	}
	value := func(i int) []byte {
		off := (i * 101) % (len(pool) - benchStateBytes)
		return pool[off : off+benchStateBytes : off+benchStateBytes]
	}

	b.Run("map", func(b *testing.B) {
		var peak benchPeak
		for b.Loop() {
			p := startBenchPeak()
			m := map[string][]byte{}
			for i := range benchMemKeys {
				m[fmt.Sprintf(benchMemKeyFormat, i)] = append([]byte(nil), value(i)...)
			}
			peak.add(p.stop())
			if len(m) != benchMemKeys {
				b.Fatalf("%d keys", len(m))
			}
			runtime.KeepAlive(m)
		}
		peak.report(b)
	})

	b.Run("pebble", func(b *testing.B) {
		var peak benchPeak
		var disk int64
		for b.Loop() {
			p, d := benchPebbleLoad(b, filepath.Join(b.TempDir(), "cache"), value)
			peak.add(p)
			disk = max(disk, d)
		}
		peak.report(b)
		b.ReportMetric(float64(disk)/1e6, "disk-MB")
	})
}

// benchPebbleLoad is one op of BenchmarkEngineMemory/pebble: it returns
// the peaks and the directory's size after the load.
func benchPebbleLoad(b *testing.B, dir string, value func(int) []byte) (benchPeak, int64) {
	p := startBenchPeak()
	kv, err := cache.Open(dir, "")
	if err != nil {
		b.Fatal(err)
	}
	defer kv.Close()
	tp := store.TopicPartition{Topic: "accounts", Partition: 0}
	c, err := core.New(core.Config[[]byte, engine.Output]{Input: tp, Codec: core.BytesCodec{}, Fold: func(_, _ []byte, _ bool, rec *core.Record) (core.Change[[]byte, engine.Output], error) {
		return core.Change[[]byte, engine.Output]{Op: core.Set, State: rec.Value}, nil // the record carries the key's 100-byte state
	}}, kv)
	if err != nil {
		b.Fatal(err)
	}
	// flush does what the runner does after every store write succeeded.
	flush := func() {
		snaps, err := c.Flush(0)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range snaps {
			if err := c.WriteDone(s.Key, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	for i := range benchMemKeys {
		rec := core.Record{Offset: int64(i), Key: fmt.Appendf(nil, benchMemKeyFormat, i), Value: value(i)}
		if _, err := c.Fold(&rec); err != nil {
			b.Fatal(err)
		}
		if (i+1)%benchFlushEvery == 0 {
			flush()
		}
	}
	flush()
	peak := p.stop()
	b.StopTimer()
	defer b.StartTimer()
	disk := dirSize(b, dir)
	if n := c.Keys(); n != benchMemKeys {
		b.Fatalf("%d keys in the cache, want %d", n, benchMemKeys)
	}
	if c.Dirty() {
		b.Fatal("dirty keys left after the last flush")
	}
	return peak, disk
}

// benchPeak keeps the largest peaks over an op's iterations.
type benchPeak struct{ heap, rss uint64 }

func (p *benchPeak) add(q benchPeak) { p.heap, p.rss = max(p.heap, q.heap), max(p.rss, q.rss) }

func (p *benchPeak) report(b *testing.B) {
	b.ReportMetric(float64(p.heap)/1e6, "heap-peak-MB")
	b.ReportMetric(float64(p.rss)/1e6, "rss-peak-MB")
}

// benchPeakSampler samples the heap and the resident set while an op runs.
type benchPeakSampler struct {
	baseHeap, baseRSS uint64
	hwm               bool // the kernel's peak was reset; VmHWM is the op's
	maxHeap, maxRSS   uint64
	quit, done        chan struct{}
}

func startBenchPeak() *benchPeakSampler {
	runtime.GC()
	debug.FreeOSMemory() // give freed pages back, so the op's growth shows in the resident set
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := &benchPeakSampler{baseHeap: ms.HeapInuse, baseRSS: procStatus("VmRSS"), quit: make(chan struct{}), done: make(chan struct{})}
	// Writing 5 to clear_refs resets VmHWM to the current resident set.
	s.hwm = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	go func() {
		defer close(s.done)
		t := time.NewTicker(benchSampleEvery)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.quit:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *benchPeakSampler) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.maxHeap = max(s.maxHeap, ms.HeapInuse)
	s.maxRSS = max(s.maxRSS, procStatus("VmRSS"))
}

// stop ends the sampling and returns the peaks above the levels at start.
func (s *benchPeakSampler) stop() benchPeak {
	close(s.quit)
	<-s.done
	s.sample()
	if s.hwm {
		s.maxRSS = max(s.maxRSS, procStatus("VmHWM"))
	}
	sub := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	return benchPeak{heap: sub(s.maxHeap, s.baseHeap), rss: sub(s.maxRSS, s.baseRSS)}
}

// procStatus reads a "kB" field of /proc/self/status, in bytes; 0 where
// there is no /proc.
func procStatus(field string) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func dirSize(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}
