package engine_test

// BenchmarkOwnedPartitions (kfake) and BenchmarkOwnedPartitionsBroker
// (build tag `it`, a real broker): what an instance pays per partition it
// owns. store/kafka keeps one transactional producer per owned
// partition, so connections, goroutines and memory grow with the
// partitions; docs/benchmarks.md, "Cost per owned partition", has the
// numbers (`make bench-scale`) and docs/operations.md, "Size", what to
// budget.
//
// Sub-benchmarks partitions=16, 64, 256 (-scale.partitions), each with
// fresh topics (input and compacted snapshots of that many partitions), a
// fresh group and transactional-id prefix, one engine (store/kafka
// Transactional, commits every second, the defaults otherwise) that owns
// every partition. The
// op, untimed but for time-to-ready-ms: the engine starts; -scale.records
// input records per partition are produced; the op waits (polling the
// status) until every partition runs and has committed its input's end,
// so every partition's producer has run a transaction. Then, after a GC:
//
//   - goroutines, heap-MiB (the Go heap in use) and sockets (the process's
//     open sockets) against the same figures just before the engine was
//     made, in total and per partition;
//   - rss-MiB: the process's resident set (VmRSS), in total, and
//     peak-rss-MiB, its peak so far (VmHWM: the recoveries and the
//     earlier, smaller sub-benchmarks included).
//
// On kfake the cluster runs in the benchmark's process, so its side of
// each connection (a socket, goroutines, buffers) is counted too: the
// broker variant is the instance's own cost.
//
// They are benchmarks only: `go test` without -bench runs none of this.

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
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
	scalePartitions = flag.String("scale.partitions", "16,64,256", "BenchmarkOwnedPartitions*: the partition counts, comma-separated")
	scaleRecords    = flag.Int("scale.records", 10, "BenchmarkOwnedPartitions*: input records per partition")
)

const scaleDeadline = 5 * time.Minute // bounds every wait; never reached in a healthy run

func BenchmarkOwnedPartitions(b *testing.B) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	benchOwnedPartitions(b, c.ListenAddrs())
}

func benchOwnedPartitions(b *testing.B, brokers []string) {
	for f := range strings.SplitSeq(*scalePartitions, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("-scale.partitions: %q is not a positive count", f)
		}
		b.Run(fmt.Sprintf("partitions=%d", n), func(b *testing.B) {
			for range b.N {
				ownedPartitions(b, brokers, n)
			}
		})
	}
}

// usage is what the process holds at one moment.
type usage struct {
	goroutines, sockets int
	heap, rss, peakRSS  float64 // MiB
}

func measureUsage(b *testing.B) usage {
	b.Helper()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	u := usage{goroutines: runtime.NumGoroutine(), heap: float64(ms.HeapInuse) / (1 << 20)}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		b.Fatalf("counting sockets: %v", err)
	}
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			u.sockets++
		}
	}
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatalf("reading VmRSS: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(st))
	for sc.Scan() {
		for name, to := range map[string]*float64{"VmRSS:": &u.rss, "VmHWM:": &u.peakRSS} {
			if kb, ok := strings.CutPrefix(sc.Text(), name); ok {
				v, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 64)
				*to = v / 1024
			}
		}
	}
	return u
}

func ownedPartitions(b *testing.B, brokers []string, n int) {
	b.StopTimer()
	ctx := context.Background()
	id := fmt.Sprintf("scale-%d-%d", n, time.Now().UnixNano())
	input, snaps := id, id+"-snapshots"
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	compact := "compact"
	if err := kafka.CreateTopic(ctx, prod, input, int32(n), 1, nil); err != nil {
		b.Fatalf("create topic %s: %v", input, err)
	}
	if err := kafka.CreateTopic(ctx, prod, snaps, int32(n), 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
		b.Fatalf("create topic %s: %v", snaps, err)
	}
	defer func() { _, _ = kadm.NewClient(prod).DeleteTopics(context.Background(), input, snaps) }()
	for p := range int32(n) {
		for i := range *scaleRecords {
			prod.Produce(ctx, &kgo.Record{Topic: input, Partition: p, Key: fmt.Appendf(nil, "k%d-%d", p, i), Value: []byte("1")}, nil)
		}
	}
	if err := prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}

	before := measureUsage(b)
	start := time.Now()
	backend, err := kafka.New(ctx, kafka.Config{Mode: store.Transactional, SeedBrokers: brokers, TransactionalIDPrefix: id,
		SnapshotTopic: func(string) string { return snaps }})
	if err != nil {
		b.Fatal(err)
	}
	e, err := engine.New(engine.Config[int]{
		Fold: func(_ []byte, s int, _ bool, _ engine.Record) (engine.Result[int], error) {
			return engine.Set(s + 1), nil
		},
		Codec: intCodec{}, Store: backend, Dir: b.TempDir(),
		// Commit within a second, not the default minute: the op waits
		// for every partition's first transaction.
		PersistInterval: time.Second, CommitInterval: time.Second,
	})
	if err != nil {
		_ = backend.Close()
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() {
		runErr <- e.Run(runCtx, kafkaio.Config{SeedBrokers: brokers, Group: id + "-group", Topics: []string{input}})
	}()
	defer func() {
		stop()
		if err := <-runErr; err != nil {
			b.Errorf("engine.Run: %v", err)
		}
		if err := e.Close(); err != nil {
			b.Errorf("engine.Close: %v", err)
		}
		if err := backend.Close(); err != nil {
			b.Errorf("backend.Close: %v", err)
		}
	}()

	// Every partition runs and has committed its input's end: each
	// partition's producer has run at least one transaction.
	done := func(st engine.Status) bool {
		if len(st.Partitions) != n {
			return false
		}
		for _, p := range st.Partitions {
			if p.State != engine.StateRunning || p.CommittedOffset < int64(*scaleRecords) {
				return false
			}
		}
		return true
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(scaleDeadline)
	defer deadline.Stop()
	for !done(e.Status()) {
		select {
		case <-tick.C:
		case err := <-runErr:
			runErr <- err
			b.Fatalf("engine.Run returned before every partition committed: %v", err)
		case <-deadline.C:
			b.Fatalf("not every one of %d partitions running and committed in %v: %+v", n, scaleDeadline, e.Status())
		}
	}
	ready := time.Since(start)
	after := measureUsage(b)
	per := func(d float64) float64 { return d / float64(n) }
	b.ReportMetric(float64(ready)/1e6, "time-to-ready-ms")
	b.ReportMetric(float64(after.goroutines-before.goroutines), "goroutines")
	b.ReportMetric(per(float64(after.goroutines-before.goroutines)), "goroutines/partition")
	b.ReportMetric(float64(after.sockets-before.sockets), "sockets")
	b.ReportMetric(per(float64(after.sockets-before.sockets)), "sockets/partition")
	b.ReportMetric(after.heap-before.heap, "heap-MiB")
	b.ReportMetric(per(after.heap-before.heap)*1024, "heap-KiB/partition")
	b.ReportMetric(after.rss, "rss-MiB")
	b.ReportMetric(after.peakRSS, "peak-rss-MiB")
}
