package kafka_test

// Benchmarks of the franz-go backend on kfake, reproducing the spec's
// Experiments A and B (single-writer-design.txt, "Measurements") and
// comparing the recovery read with a bare read_committed consumer. They run
// in real time on a one-broker kfake cluster listening on loopback TCP
// (127.0.0.1, kfake's default listener), not in a synctest bubble. `make
// bench` runs them and prints a table; docs/benchmarks.md has the numbers.
//
// Every iteration writes to a fresh input topic and its fresh compacted
// snapshot topic, with a fresh consumer group (one member, joined before
// the timer starts) and a fresh partition acquisition; only the writes are
// timed. Each benchmark has a cluster and a backend of its own.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

const (
	benchPrefix  = "sf-bench"
	benchTimeout = 2 * time.Minute // bounds every blocking step; never reached in a healthy run
)

// benchCluster is a one-broker kfake cluster on loopback TCP with an admin
// client, both closed when the benchmark ends.
type benchCluster struct {
	addrs []string
	run   string // makes topic names unique on a shared broker
	admin *kgo.Client
	adm   *kadm.Client
	seq   int // names of per-iteration topics and groups
}

// With SNAPFENCE_KAFKA_BROKERS set (make bench-kafka), the benchmarks run
// against that real broker instead of kfake.
func newBenchCluster(b *testing.B) *benchCluster {
	b.Helper()
	bc := &benchCluster{run: strconv.FormatInt(time.Now().UnixNano(), 36)}
	if real := os.Getenv(kafkatest.EnvBrokers); real != "" {
		bc.addrs = strings.Split(real, ",")
	} else {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		bc.addrs = c.ListenAddrs()
	}
	bc.admin = bc.client(b)
	bc.adm = kadm.NewClient(bc.admin)
	return bc
}

// client returns a client of the cluster, closed when the benchmark ends.
func (bc *benchCluster) client(b *testing.B, opts ...kgo.Opt) *kgo.Client {
	b.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(bc.addrs...)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	return cl
}

// backend returns a backend of the cluster whose observer counts its
// events into events and fails the benchmark on a failed one. In
// Transactional mode an event is a transaction; in Plain mode, where
// nothing is transactional, it is one write (or one offset commit).
func (bc *benchCluster) backend(b *testing.B, mode store.Mode, maxWrites int, events *atomic.Int64, clientOpts ...kgo.Opt) *kafka.Backend {
	b.Helper()
	var failed atomic.Pointer[error]
	be, err := kafka.New(context.Background(), kafka.Config{
		Mode: mode, SeedBrokers: bc.addrs, TransactionalIDPrefix: benchPrefix,
		MaxWritesPerTransaction: maxWrites,
		ClientOpts:              clientOpts,
		Observer: store.ObserverFunc(func(e store.TransactionEvent) {
			events.Add(1)
			if e.Err != nil {
				failed.CompareAndSwap(nil, &e.Err)
			}
		}),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = be.Close()
		if err := failed.Load(); err != nil {
			b.Errorf("a transaction failed: %v", *err)
		}
	})
	return be
}

// owner is one iteration's owner of a fresh input partition: the input
// topic and its snapshot topic (one partition each), a consumer in a group
// of its own, and the acquired snapshot partition.
type owner struct {
	input  store.TopicPartition
	member *kgo.Client
	part   store.Partition
	close  func()
}

// newOwner creates the topics, joins the group and acquires the partition.
// The owner is released by its close, or when the benchmark ends.
func (bc *benchCluster) newOwner(b *testing.B, be *kafka.Backend) *owner {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	bc.seq++
	input := fmt.Sprintf("in-%s-%d", bc.run, bc.seq)
	group := fmt.Sprintf("flow-%s-%d", bc.run, bc.seq)
	if err := kafka.CreateTopic(ctx, bc.admin, input, 1, 1, nil); err != nil {
		b.Fatalf("creating %s: %v", input, err)
	}
	compact := "compact"
	if err := kafka.CreateTopic(ctx, bc.admin, kafka.DefaultSnapshotTopic(input), 1, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
		b.Fatalf("creating %s: %v", kafka.DefaultSnapshotTopic(input), err)
	}

	// The member's identity is real: it has joined the group and holds
	// the input partition. The assignment callback runs after the join
	// stored the member id and generation.
	assigned := make(chan struct{})
	var once sync.Once
	member, err := kgo.NewClient(kgo.SeedBrokers(bc.addrs...),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(input),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			once.Do(func() { close(assigned) })
		}),
	)
	if err != nil {
		b.Fatal(err)
	}
	o := &owner{input: store.TopicPartition{Topic: input, Partition: 0}, member: member}
	o.close = sync.OnceFunc(func() {
		if o.part != nil {
			_ = o.part.Close()
		}
		member.Close()
	})
	b.Cleanup(o.close)
	select {
	case <-assigned:
	case <-ctx.Done():
		b.Fatalf("group %s: no assignment: %v", group, ctx.Err())
	}
	if id, gen := member.GroupMetadata(); id == "" || gen < 1 {
		b.Fatalf("group %s: joined with member %q generation %d", group, id, gen)
	}
	identity := store.IdentityFunc(func() store.GroupIdentity {
		id, gen := member.GroupMetadata() // live, for every transaction
		return store.GroupIdentity{Group: group, MemberID: id, Generation: gen}
	})
	if o.part, err = be.Acquire(ctx, store.Acquisition{Input: o.input, AssignedOffset: 0, Identity: identity}); err != nil {
		b.Fatalf("acquiring %s: %v", o.input, err)
	}
	return o
}

// snapshots returns n snapshots of distinct keys with size-byte values of
// incompressible bytes (the producer compresses with snappy by default).
func snapshots(n, size int) []store.Snapshot {
	rng := rand.New(rand.NewChaCha8([32]byte{'s', 'n', 'a', 'p', 'f', 'e', 'n', 'c', 'e'}))
	buf := make([]byte, n*size)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	out := make([]store.Snapshot, n)
	for i := range out {
		out[i] = store.Snapshot{Key: fmt.Appendf(nil, "key-%05d", i), Value: buf[i*size : (i+1)*size : (i+1)*size], Offset: int64(i)}
	}
	return out
}

// writeAll writes every snapshot, one write (a WriteBatch of one) at a time or each from a
// goroutine of its own, and times only the writes. The goroutines are
// started and parked before the timer starts; the timer is stopped on
// return.
func writeAll(b *testing.B, p store.Partition, snaps []store.Snapshot, concurrent bool) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	if !concurrent {
		b.StartTimer()
		for _, s := range snaps {
			if err := writeOne(ctx, p, s); err != nil {
				b.StopTimer()
				b.Fatalf("write %s: %v", s.Key, err)
			}
		}
		b.StopTimer()
		return
	}
	start := make(chan struct{})
	errs := make([]error, len(snaps))
	var wg sync.WaitGroup
	for i, s := range snaps {
		wg.Go(func() {
			<-start
			errs[i] = writeOne(ctx, p, s)
		})
	}
	b.StartTimer()
	close(start)
	wg.Wait()
	b.StopTimer()
	if err := errors.Join(errs...); err != nil {
		b.Fatalf("writes failed: %v", err)
	}
}

// benchWrites is one write benchmark: every iteration is a fresh owner
// writing all of snaps. It reports the write throughput and, in
// Transactional mode, the transactions per iteration. Plain mode has no
// transactions (its observer sees one event per write), so it reports none.
func benchWrites(b *testing.B, mode store.Mode, maxWrites int, snaps []store.Snapshot, concurrent bool, clientOpts ...kgo.Opt) {
	bc := newBenchCluster(b)
	var events atomic.Int64
	be := bc.backend(b, mode, maxWrites, &events, clientOpts...)
	for b.Loop() {
		b.StopTimer()
		o := bc.newOwner(b, be)
		writeAll(b, o.part, snaps, concurrent) // times the writes only
		o.close()
		b.StartTimer()
	}
	if mode == store.Transactional {
		b.ReportMetric(float64(events.Load())/float64(b.N), "txns/op")
	}
	b.ReportMetric(float64(len(snaps)*b.N)/b.Elapsed().Seconds(), "writes/s")
}

// BenchmarkExperimentA: 500 keys, ~50-byte snapshots, one partition, cap
// at the default (256); one iteration writes all 500. Only the issuing
// varies: one at a time, or all at once.
func BenchmarkExperimentA(b *testing.B) { experimentA(b) }

// BenchmarkExperimentB: 2000 keys, 10 KiB snapshots, all issued at once
// (the post-assignment flush wave); the plain baseline, then
// transactional at caps 1, 16, 256 (the default) and 2000 (uncapped).
func BenchmarkExperimentB(b *testing.B) { experimentB(b) }

func experimentA(b *testing.B, clientOpts ...kgo.Opt) {
	snaps := snapshots(500, 50)
	b.Run("plain-sequential", func(b *testing.B) {
		benchWrites(b, store.Plain, 0, snaps, false, clientOpts...)
	})
	b.Run("txn-sequential", func(b *testing.B) {
		benchWrites(b, store.Transactional, 0, snaps, false, clientOpts...)
	})
	b.Run("txn-concurrent", func(b *testing.B) {
		benchWrites(b, store.Transactional, 0, snaps, true, clientOpts...)
	})
}

func experimentB(b *testing.B, clientOpts ...kgo.Opt) {
	snaps := snapshots(2000, 10<<10)
	b.Run("plain", func(b *testing.B) {
		benchWrites(b, store.Plain, 0, snaps, true, clientOpts...)
	})
	for _, maxWrites := range []int{1, 16, 256, 2000} {
		b.Run(fmt.Sprintf("cap=%d", maxWrites), func(b *testing.B) {
			benchWrites(b, store.Transactional, maxWrites, snaps, true, clientOpts...)
		})
	}
}

// BenchmarkRecovery reads the partition Experiment B writes at the default
// cap (2000 x 10 KiB in ~8 transactions) to its end: "bare" with a plain
// franz-go read_committed consumer, "snapfence" with Partition.Recover.
// Both capture the high watermark with one ListOffsets (Recover also lists
// the last stable offset) and read to it with a new client, which they
// close; both count the payload (key + value bytes) of every data record
// below the high watermark and must see all 2000.
func BenchmarkRecovery(b *testing.B) {
	snaps := snapshots(2000, 10<<10)
	var payload int64
	for _, s := range snaps {
		payload += int64(len(s.Key) + len(s.Value))
	}
	bc := newBenchCluster(b)
	var txns atomic.Int64
	be := bc.backend(b, store.Transactional, 0, &txns)
	o := bc.newOwner(b, be)
	writeAll(b, o.part, snaps, true)
	snap := be.SnapshotPartition(o.input)

	check := func(b *testing.B, records int, bytes int64) {
		b.Helper()
		if records != len(snaps) || bytes != payload {
			b.Fatalf("read %d records, %d bytes; want %d records, %d bytes", records, bytes, len(snaps), payload)
		}
	}

	b.Run("bare", func(b *testing.B) {
		b.SetBytes(payload)
		for b.Loop() {
			records, bytes := bareRead(b, bc, snap)
			b.StopTimer()
			check(b, records, bytes)
			b.StartTimer()
		}
	})
	b.Run("snapfence", func(b *testing.B) {
		b.SetBytes(payload)
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
			records, bytes := 0, int64(0)
			for s, err := range o.part.Recover(ctx) {
				if err != nil {
					b.Fatalf("recovering %s: %v", snap, err)
				}
				records++
				bytes += int64(len(s.Key) + len(s.Value))
			}
			cancel()
			b.StopTimer()
			check(b, records, bytes)
			b.StartTimer()
		}
	})
}

// bareRead reads tp read_committed from its start until it has seen the
// last offset below the high watermark captured first. Control records are
// kept (as Recover keeps them): a transactional partition ends in a commit
// marker, which a reader that drops them never sees.
func bareRead(b *testing.B, bc *benchCluster, tp store.TopicPartition) (records int, bytes int64) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	hw := listEnd(ctx, b, bc.admin, tp, 0)
	cl, err := kgo.NewClient(kgo.SeedBrokers(bc.addrs...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{tp.Topic: {tp.Partition: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	for last := int64(-1); last < hw-1; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			b.Fatalf("reading %s: %v", tp, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			last = max(last, r.Offset)
			if r.Attrs.IsControl() || r.Offset >= hw {
				return
			}
			records++
			bytes += int64(len(r.Key) + len(r.Value))
		})
	}
	return records, bytes
}
