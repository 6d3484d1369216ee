//go:build it

package engine_test

// BenchmarkOutputs: at-least-once against exactly-once outputs on the
// integration tier's real broker (SNAPFENCE_KAFKA_BROKERS; see
// docs/benchmarks.md, "Exactly-once output"). It is a benchmark only:
// `go test -tags it` without -bench runs none of it.
//
// Sub-benchmarks <mode>/commit=<interval>/<measure>, all against the same
// broker in one `go test` run:
//
//   - mode at-least-once: Config.Emit produces each poll's outputs with a
//     plain kgo producer (ProduceSync), so they are visible to
//     read_committed consumers as soon as Emit returns; snapshots are
//     flushed every PersistInterval and the offset committed every
//     CommitInterval, both set to the interval.
//   - mode exactly-once: Config.ExactlyOnce, CommitInterval the interval;
//     outputs become visible when their batch's transaction commits.
//   - measure throughput: a backlog of outputsBacklog input records is
//     produced before the engine starts; records/s is the backlog over the
//     time from the first fold to the last output seen by a read_committed
//     consumer (the group join and recovery are outside it; the wait for
//     the last batch's commit is inside it).
//   - measure latency: the engine is started and warmed up (one record per
//     partition, its output seen), then outputsRate records/s are produced
//     for outputsPaced (asynchronously, topped up every outputsTick); each
//     output's latency is the time the read_committed consumer saw it
//     minus its input's produce time (carried in the value). p50-ms,
//     p90-ms, p99-ms and max-ms over the paced records' outputs.
//
// Also reported: txns, the store's transactions in the measurement
// (snapshot flushes and offset commits at least once, batches exactly
// once), and txn-ms, their mean duration; dups, outputs seen twice (none
// expected: nothing rebalances). ns/op is not a result: it includes the
// group join (throughput) or is the paced period (latency).
//
// Every sub-benchmark has fresh topics (input and output of
// outputsPartitions partitions, the compacted snapshot topic), a fresh
// group and transactional-id prefix. The fold keeps a per-key counter and
// emits one output per input record, carrying the input's value.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

const (
	outputsPartitions = 4
	outputsKeys       = 1000
	outputsBacklog    = 1_000_000
	outputsRate       = 2000 // records/s in the latency measure
	outputsPaced      = 5 * time.Second
	outputsTick       = 5 * time.Millisecond // the paced producer's tick
	outputsDeadline   = 2 * time.Minute      // bounds every wait; never reached in a healthy run
)

// BenchmarkOutputs runs the two modes of one interval and measure next to
// each other (with -count, a leaf's runs are consecutive), so a ratio
// compares measurements minutes apart at most.
func BenchmarkOutputs(b *testing.B) {
	brokers := kafkatest.Brokers(b)
	for _, interval := range []time.Duration{100 * time.Millisecond, time.Second} {
		for _, paced := range []bool{false, true} {
			for _, mode := range []string{"at-least-once", "exactly-once"} {
				measure := "throughput"
				if paced {
					measure = "latency"
				}
				b.Run(fmt.Sprintf("%s/commit=%v/%s", mode, interval, measure), func(b *testing.B) {
					for range b.N {
						runOutputs(b, brokers, mode == "exactly-once", interval, paced)
					}
				})
			}
		}
	}
}

// outputsRun is one measurement: its topics, clients and what the output
// consumer saw.
type outputsRun struct {
	b                     testing.TB
	input, output, snaps  string
	prod                  *kgo.Client // input producer, and the at-least-once outputs'
	adm                   *kadm.Client
	mu                    sync.Mutex
	seen                  map[int64]bool // input sequence numbers whose output was seen
	lat                   []float64      // ms, per first sighting
	dups                  int
	lastSeen              time.Time
	wantSeen              int
	reached               chan struct{} // closed when len(seen) reaches wantSeen
	firstFold             atomic.Int64  // unix ns of the first fold
	txns, txnFails, txnNs atomic.Int64
}

func runOutputs(b *testing.B, brokers []string, eos bool, interval time.Duration, paced bool) {
	b.StopTimer()
	ctx := context.Background()
	id := fmt.Sprintf("outputs-%d", time.Now().UnixNano())
	w := &outputsRun{b: b, input: id, output: id + "-out", snaps: kafka.DefaultSnapshotTopic(id, id), seen: map[int64]bool{}}
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	w.prod, w.adm = prod, kadm.NewClient(prod)
	compact := "compact"
	for _, t := range []struct {
		name string
		cfg  map[string]*string
	}{{w.input, nil}, {w.output, nil}, {w.snaps, map[string]*string{"cleanup.policy": &compact}}} {
		if err := kafka.CreateTopic(ctx, w.prod, t.name, outputsPartitions, 1, t.cfg); err != nil {
			b.Fatalf("create topic %s: %v", t.name, err)
		}
	}
	defer func() { _, _ = w.adm.DeleteTopics(context.Background(), w.input, w.output, w.snaps) }()

	// The read_committed consumer of the outputs, from the start.
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(w.output),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	consCtx, stopCons := context.WithCancel(ctx)
	consDone := make(chan struct{})
	go func() {
		defer close(consDone)
		for consCtx.Err() == nil {
			fs := cons.PollFetches(consCtx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) { w.saw(r.Value, now) })
		}
	}()
	defer func() { stopCons(); <-consDone; cons.Close() }()

	backend, err := kafka.New(ctx, kafka.Config{Mode: store.Transactional, SeedBrokers: brokers, TransactionalIDPrefix: id,
		Observer: store.ObserverFunc(func(e store.TransactionEvent) {
			w.txns.Add(1)
			w.txnNs.Add(int64(e.Duration))
			if e.Err != nil {
				w.txnFails.Add(1)
			}
		})})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = backend.Close() }()
	cfg := engine.Config[int]{Fold: w.fold, Codec: intCodec{}, Store: backend, Dir: b.TempDir(), CommitInterval: interval}
	if eos {
		cfg.ExactlyOnce, cfg.OutputTopics = true, []string{w.output}
	} else {
		cfg.PersistInterval = interval
		cfg.Emit = w.emit
	}
	e, err := engine.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = e.Close() }()

	seq := int64(0)
	if !paced {
		w.expect(outputsBacklog)
		for range outputsBacklog {
			w.produceAsync(seq)
			seq++
		}
		if err := prod.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	runCtx, stopRun := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() {
		runErr <- e.Run(runCtx, kafkaio.Config{SeedBrokers: brokers, Group: id + "-group", Topics: []string{w.input}})
	}()
	defer func() {
		stopRun()
		if err := <-runErr; err != nil {
			b.Errorf("engine.Run: %v", err)
		}
	}()

	if paced {
		// Warm-up: one record per partition (the group joined, every flow
		// recovered, the output path warm), then the paced input.
		warm, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			b.Fatal(err)
		}
		w.expect(outputsPartitions)
		for p := range int32(outputsPartitions) {
			r := &kgo.Record{Topic: w.input, Partition: p, Key: []byte("warm-up"), Value: outputsValue(seq, time.Now())}
			seq++
			if err := warm.ProduceSync(ctx, r).FirstErr(); err != nil {
				b.Fatal(err)
			}
		}
		warm.Close()
		w.await(runErr, "the warm-up outputs")
		w.reset()
		// Paced: every outputsTick, as many records as keep the total at
		// outputsRate since the start (a late tick catches up).
		n := int(outputsRate * outputsPaced / time.Second)
		w.expect(outputsPartitions + n)
		b.StartTimer()
		tick := time.NewTicker(outputsTick)
		start := time.Now()
		for sent := 0; sent < n; {
			now := <-tick.C
			due := min(n, int(float64(outputsRate)*now.Sub(start).Seconds()))
			for ; sent < due; sent++ {
				w.produceAsync(seq)
				seq++
			}
		}
		tick.Stop()
		w.await(runErr, "the paced outputs")
		b.StopTimer()
	} else {
		b.StartTimer()
		w.await(runErr, "the backlog's outputs")
		b.StopTimer()
	}
	if err := prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	lat := slices.Clone(w.lat)
	slices.Sort(lat)
	if paced {
		b.ReportMetric(outputsQuantile(lat, 0.50), "p50-ms")
		b.ReportMetric(outputsQuantile(lat, 0.90), "p90-ms")
		b.ReportMetric(outputsQuantile(lat, 0.99), "p99-ms")
		b.ReportMetric(lat[len(lat)-1], "max-ms")
	} else {
		span := w.lastSeen.Sub(time.Unix(0, w.firstFold.Load()))
		b.ReportMetric(float64(outputsBacklog)/span.Seconds(), "records/s")
	}
	if n := w.txns.Load(); n > 0 {
		b.ReportMetric(float64(n), "txns")
		b.ReportMetric(float64(w.txnNs.Load())/float64(n)/1e6, "txn-ms")
	}
	if f := w.txnFails.Load(); f > 0 {
		b.Errorf("%d of the store's transactions failed", f)
	}
	if w.dups > 0 {
		b.ReportMetric(float64(w.dups), "dups")
	}
}

// outputsValue is an input record's value: its sequence number and
// produce time.
func outputsValue(seq int64, at time.Time) []byte {
	return []byte(strconv.FormatInt(seq, 10) + " " + strconv.FormatInt(at.UnixNano(), 10))
}

func (w *outputsRun) produceAsync(seq int64) {
	k := []byte(fmt.Sprintf("key-%04d", seq%outputsKeys))
	w.prod.Produce(context.Background(), &kgo.Record{Topic: w.input, Key: k, Value: outputsValue(seq, time.Now())}, func(_ *kgo.Record, err error) {
		if err != nil {
			w.b.Errorf("producing input: %v", err)
		}
	})
}

// fold counts a key's records and emits one output per record: the input's
// value, then the count.
func (w *outputsRun) fold(key []byte, n int, _ bool, rec engine.Record) (engine.Result[int], error) {
	w.firstFold.CompareAndSwap(0, time.Now().UnixNano())
	n++
	v := append(append(slices.Clip(rec.Value), ' '), strconv.Itoa(n)...)
	return engine.Set(n).With(engine.Output{Topic: w.output, Key: slices.Clone(key), Value: v}), nil
}

// emit is the at-least-once Emit: a plain producer, awaited.
func (w *outputsRun) emit(ctx context.Context, outs []engine.Output) error {
	rs := make([]*kgo.Record, len(outs))
	for i, o := range outs {
		rs[i] = &kgo.Record{Topic: o.Topic, Key: o.Key, Value: o.Value}
	}
	return w.prod.ProduceSync(ctx, rs...).FirstErr()
}

func (w *outputsRun) saw(v []byte, now time.Time) {
	f := strings.Fields(string(v))
	if len(f) != 3 {
		w.b.Errorf("output value %q: want \"seq producedAtNs count\"", v)
		return
	}
	seq, err1 := strconv.ParseInt(f[0], 10, 64)
	at, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		w.b.Errorf("output value %q: %v %v", v, err1, err2)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[seq] {
		w.dups++
		return
	}
	w.seen[seq] = true
	w.lat = append(w.lat, float64(now.UnixNano()-at)/1e6)
	w.lastSeen = now
	if w.reached != nil && len(w.seen) >= w.wantSeen {
		close(w.reached)
		w.reached = nil
	}
}

// expect arms the wait for n distinct outputs in all.
func (w *outputsRun) expect(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wantSeen = n
	w.reached = make(chan struct{})
	if len(w.seen) >= n {
		close(w.reached)
		w.reached = nil
	}
}

// reset forgets the latencies and duplicates seen so far (the warm-up's);
// the sequence numbers stay, so a late duplicate is still one.
func (w *outputsRun) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lat, w.dups = nil, 0
}

func (w *outputsRun) await(runErr chan error, what string) {
	w.b.Helper()
	w.mu.Lock()
	reached := w.reached
	w.mu.Unlock()
	if reached == nil {
		return
	}
	select {
	case <-reached:
	case err := <-runErr:
		runErr <- err // for the deferred check
		w.b.Fatalf("engine.Run returned before %s were seen: %v", what, err)
	case <-time.After(outputsDeadline):
		w.mu.Lock()
		n := len(w.seen)
		w.mu.Unlock()
		w.b.Fatalf("%s: %d of %d outputs seen by the read_committed consumer in %v (txns %d, failed %d)",
			what, n, w.wantSeen, outputsDeadline, w.txns.Load(), w.txnFails.Load())
	}
}

// outputsQuantile: the quantile of sorted xs, nearest rank.
func outputsQuantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(q*float64(len(xs))+0.5) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}
