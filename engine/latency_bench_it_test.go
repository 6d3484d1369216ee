//go:build it

package engine_test

// BenchmarkLatency: end-to-end latency on the integration tier's real
// broker (`make bench-latency` starts one; docs/benchmarks.md, "Latency").
// A benchmark only: `go test -tags it` without -bench runs none of it.
//
// The variants are BenchmarkLimit's (-latency.variants; by default the
// bare franz-go loop, the engine at least once with StartEmit, the engine
// exactly once, and Kafka Streams at least once and exactly once), on its
// workload (a per-key sum over limitKeys keys in limitPartitions
// partitions, one output per input). It first measures each variant's
// maximum, as BenchmarkLimit does (a backlog of -limit.records; or takes
// it from -latency.max). Then, for each fraction of -latency.rates, it
// feeds fresh topics at that fraction of the variant's own maximum
// (latency/<variant>/<pct>%) and, with -latency.same, every variant at
// that fraction of the smallest maximum (same/<variant>/<pct>%), each
// for -latency.for, and measures each input's latency: from its produce
// call (the producer's clock, carried in the record's "sent" header,
// which the variants copy to their output) until a consumer of the
// output topic received the output, read_committed for exactly once (the
// engine's and Kafka Streams'), read_uncommitted otherwise (the
// at-least-once outputs are visible as soon as they are acked). Inputs
// produced in the first second (the start of the feed) are not counted.
// Reported per op: p50-ms, p99-ms, max-ms, the achieved input rate
// (records/s) and the inputs counted.

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/kafkatest"
)

var (
	latencyRates    = flag.String("latency.rates", "0.1,0.5,0.9", "BenchmarkLatency: the input rates, as fractions of each variant's own maximum")
	latencyMax      = flag.String("latency.max", "", "BenchmarkLatency: the variants' maxima in records/s, as variant=rate,... (default: each measured first, in the same run)")
	latencySame     = flag.Bool("latency.same", true, "BenchmarkLatency: also feed every variant at the same rates, the fractions of the smallest maximum (same/<variant>/<pct>%)")
	latencyFor      = flag.Duration("latency.for", 10*time.Second, "BenchmarkLatency: how long each rate is fed (its first second is not counted)")
	latencyVariants = flag.String("latency.variants", "limit,at-least-once,exactly-once,kafka-streams-at-least-once,kafka-streams-exactly-once",
		"BenchmarkLatency: the variants, in order (BenchmarkLimit's names)")
)

// latencySentHeader carries an input's produce time (unix ns, big endian)
// to its output.
const latencySentHeader = "sent"

// latencyWarmup is the start of a feed whose inputs are not counted.
const latencyWarmup = time.Second

func BenchmarkLatency(b *testing.B) {
	brokers := kafkatest.Brokers(b)
	given := map[string]float64{}
	for _, kv := range strings.Split(*latencyMax, ",") {
		if name, v, ok := strings.Cut(kv, "="); ok {
			r, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("-latency.max: %q: %v", kv, err)
			}
			given[name] = r
		}
	}
	var fractions []float64
	for _, f := range strings.Split(*latencyRates, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r <= 0 {
			b.Fatalf("-latency.rates: %q is not a positive fraction", f)
		}
		fractions = append(fractions, r)
	}
	variants := pickVariants(b, "latency.variants", *latencyVariants)
	maxima := map[string]float64{}
	slowest := math.Inf(1)
	for _, v := range variants {
		most, ok := given[v.name]
		if !ok {
			b.Run("max/"+v.name, func(b *testing.B) {
				for range b.N {
					most = runLimit(b, brokers, v, 1)
				}
			})
		}
		maxima[v.name] = most
		slowest = min(slowest, most)
	}
	// Each at fractions of its own maximum: how it behaves as it nears
	// its limit.
	for _, v := range variants {
		for _, f := range fractions {
			rate := f * maxima[v.name]
			b.Run(fmt.Sprintf("latency/%s/%.0f%%", v.name, 100*f), func(b *testing.B) {
				for range b.N {
					runLatency(b, brokers, v, rate)
				}
			})
		}
	}
	// All at the same rates, fractions of the smallest maximum: which is
	// faster on the same input.
	if !*latencySame {
		return
	}
	for _, v := range variants {
		for _, f := range fractions {
			rate := f * slowest
			b.Run(fmt.Sprintf("same/%s/%.0f%%", v.name, 100*f), func(b *testing.B) {
				for range b.N {
					runLatency(b, brokers, v, rate)
				}
			})
		}
	}
}

// runLatency feeds fresh topics at rate records/s to v and reports the
// latencies of the inputs fed after latencyWarmup.
func runLatency(b *testing.B, brokers []string, v limitVariant, rate float64) {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), limitDeadline)
	defer cancel()
	lr, cleanup := newLimitRun(ctx, b, brokers, v, "latency", 1)
	defer cleanup()
	lr.records = -1 // no backlog: the fold counts no end

	// The output's reader: every partition from the start.
	isolation := kgo.ReadUncommitted()
	if v.committed {
		isolation = kgo.ReadCommitted()
	}
	reader, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(lr.output),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(isolation), kgo.FetchMaxWait(10*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer reader.Close()

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(lr.input))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()

	stop := sync.OnceValue(v.start(lr))
	defer func() { _ = stop() }()

	// The variant is serving once the output of a first input is seen.
	sent := func(t time.Time) []byte { return binary.BigEndian.AppendUint64(nil, uint64(t.UnixNano())) }
	first := &kgo.Record{Key: []byte("key-first"), Value: []byte("0"), Headers: []kgo.RecordHeader{{Key: latencySentHeader, Value: sent(time.Now())}}}
	if err := prod.ProduceSync(ctx, first).FirstErr(); err != nil {
		b.Fatal(err)
	}
	for seen := false; !seen; {
		fs := reader.PollFetches(ctx)
		if ctx.Err() != nil {
			b.Fatalf("%s: no output of the first input within %v: %v", v.name, limitDeadline, lr.firstErr())
		}
		seen = fs.NumRecords() > 0
	}

	// The feed: every tick, the inputs due by then.
	var fed, counted atomic.Int64
	var failed atomic.Pointer[error]
	feedStart := time.Now()
	feedEnd := feedStart.Add(*latencyFor)
	// The counted window, on the wall clock both sides read (the reader's
	// times come from the header, without a monotonic reading).
	countFrom, countTo := feedStart.Add(latencyWarmup).UnixNano(), feedEnd.UnixNano()
	counts := func(sentNs int64) bool { return sentNs > countFrom && sentNs < countTo }
	b.StartTimer()
	go func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for now := range t.C {
			if !now.Before(feedEnd) {
				return
			}
			due := int64(rate * now.Sub(feedStart).Seconds())
			for n := fed.Load(); n < due; n++ {
				at := time.Now()
				r := &kgo.Record{Key: fmt.Appendf(nil, "key-%06d", n%limitKeys), Value: []byte(strconv.FormatInt(n%201-100, 10)),
					Headers: []kgo.RecordHeader{{Key: latencySentHeader, Value: sent(at)}}}
				if counts(at.UnixNano()) {
					counted.Add(1)
				}
				prod.Produce(ctx, r, func(_ *kgo.Record, err error) {
					if err != nil {
						failed.CompareAndSwap(nil, &err)
					}
				})
				fed.Store(n + 1)
			}
		}
	}()

	// The latencies, until every counted input's output is seen (at least
	// once may repeat one: the first is counted).
	var lat []time.Duration
	seen := map[string]bool{}
	for time.Now().Before(feedEnd) || int64(len(lat)) < counted.Load() {
		fs := reader.PollFetches(ctx)
		at := time.Now()
		if ctx.Err() != nil {
			b.Fatalf("%s: %d of %d counted outputs seen within %v: %v", v.name, len(lat), counted.Load(), limitDeadline, lr.firstErr())
		}
		if e := failed.Load(); e != nil {
			b.Fatalf("feeding the input: %v", *e)
		}
		if err := lr.firstErr(); err != nil {
			b.Fatalf("%s: %v", v.name, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == latencySentHeader && len(h.Value) == 8 {
					ns := int64(binary.BigEndian.Uint64(h.Value))
					if id := string(h.Value) + string(r.Key); counts(ns) && !seen[id] {
						seen[id] = true
						lat = append(lat, at.Sub(time.Unix(0, ns)))
					}
				}
			}
		})
	}
	b.StopTimer()
	if err := stop(); err != nil {
		b.Errorf("%s: %v", v.name, err)
	}
	if len(lat) == 0 {
		b.Fatalf("%s: no input counted at %.0f records/s over %v", v.name, rate, *latencyFor)
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1])/float64(time.Millisecond), "max-ms")
	b.ReportMetric(float64(fed.Load())/feedEnd.Sub(feedStart).Seconds(), "records/s")
	b.ReportMetric(float64(len(lat)), "inputs")
}
