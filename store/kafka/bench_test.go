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
	"flag"
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
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/storetest"
	"github.com/snapfence/snapfence/store/wire"
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

// caps are a transactional backend's caps per transaction: writes and
// bytes, 0 for the default.
type caps struct{ writes, bytes int }

// uncapped holds B's 2000 writes of 10 KiB (20.6 MB) in one transaction:
// 2000 writes, and the time budget of the default transaction timeout
// (30 MiB), the largest byte cap it allows.
var uncapped = caps{writes: 2000, bytes: store.TransactionBytesBudget(store.DefaultTransactionTimeout)}

// backend returns a backend of the cluster whose observer counts its
// events into events and fails the benchmark on a failed one. In
// Transactional mode an event is a transaction; in Plain mode, where
// nothing is transactional, it is one write (or one offset commit).
func (bc *benchCluster) backend(b *testing.B, mode store.Mode, c caps, events *atomic.Int64, clientOpts ...kgo.Opt) *kafka.Backend {
	b.Helper()
	var failed atomic.Pointer[error]
	be, err := kafka.New(context.Background(), kafka.Config{
		Mode: mode, SeedBrokers: bc.addrs, TransactionalIDPrefix: benchPrefix,
		MaxWritesPerTransaction: c.writes, MaxBytesPerTransaction: c.bytes,
		ClientOpts: clientOpts,
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
	in := bc.newInput(b)
	o := &owner{input: in.tp, member: in.member}
	o.close = sync.OnceFunc(func() {
		if o.part != nil {
			_ = o.part.Close()
		}
		in.close()
	})
	b.Cleanup(o.close)
	var err error
	if o.part, err = be.Acquire(ctx, store.Acquisition{Input: o.input, AssignedOffset: 0, Identity: in.identity()}); err != nil {
		b.Fatalf("acquiring %s: %v", o.input, err)
	}
	return o
}

// input is one iteration's fresh input partition: the input topic and its
// snapshot topic (one partition each) and a consumer in a group of its
// own that holds the partition.
type input struct {
	tp     store.TopicPartition
	id     [16]byte // the input topic's id (TxnOffsetCommit v6 addresses it so)
	group  string
	member *kgo.Client
	close  func() // closes the member, once
}

// identity reads the member's identity live, for every transaction.
func (in *input) identity() store.IdentityFunc {
	return func() store.GroupIdentity {
		id, gen := in.member.GroupMetadata()
		return store.GroupIdentity{Group: in.group, MemberID: id, Generation: gen}
	}
}

// newInput creates the topics and joins the group. The member is closed by
// the caller, or when the benchmark ends.
func (bc *benchCluster) newInput(b *testing.B) *input {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	bc.seq++
	topic := fmt.Sprintf("in-%s-%d", bc.run, bc.seq)
	group := fmt.Sprintf("flow-%s-%d", bc.run, bc.seq)
	if err := kafka.CreateTopic(ctx, bc.admin, topic, 1, 1, nil); err != nil {
		b.Fatalf("creating %s: %v", topic, err)
	}
	compact := "compact"
	if err := kafka.CreateTopic(ctx, bc.admin, kafka.DefaultSnapshotTopic(benchPrefix, topic), 1, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
		b.Fatalf("creating %s: %v", kafka.DefaultSnapshotTopic(benchPrefix, topic), err)
	}
	details, err := bc.adm.ListTopics(ctx, topic)
	if err != nil || details[topic].Err != nil {
		b.Fatalf("describing %s: %v %v", topic, err, details[topic].Err)
	}

	// The member's identity is real: it has joined the group and holds
	// the input partition. The assignment callback runs after the join
	// stored the member id and generation.
	assigned := make(chan struct{})
	var once sync.Once
	member, err := kgo.NewClient(kgo.SeedBrokers(bc.addrs...),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			once.Do(func() { close(assigned) })
		}),
	)
	if err != nil {
		b.Fatal(err)
	}
	in := &input{tp: store.TopicPartition{Topic: topic, Partition: 0}, id: details[topic].ID, group: group, member: member,
		close: sync.OnceFunc(member.Close)}
	b.Cleanup(in.close)
	select {
	case <-assigned:
	case <-ctx.Done():
		b.Fatalf("group %s: no assignment: %v", group, ctx.Err())
	}
	if id, gen := member.GroupMetadata(); id == "" || gen < 1 {
		b.Fatalf("group %s: joined with member %q generation %d", group, id, gen)
	}
	return in
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

// writeAll writes every snapshot, one write (a batch of one) at a time or each from a
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
func benchWrites(b *testing.B, mode store.Mode, c caps, snaps []store.Snapshot, concurrent bool, clientOpts ...kgo.Opt) {
	bc := newBenchCluster(b)
	var events atomic.Int64
	be := bc.backend(b, mode, c, &events, clientOpts...)
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

// BenchmarkExperimentA: 500 keys, ~50-byte snapshots, one partition, the
// default caps; one iteration writes all 500. Only the issuing varies: one
// at a time, or all at once; and one at a time without snapfence, bare
// franz-go transactions (benchBareTxns).
func BenchmarkExperimentA(b *testing.B) { experimentA(b) }

// BenchmarkExperimentB: 2000 keys, 10 KiB snapshots, all issued at once
// (the post-assignment flush wave); the plain baseline, then
// transactional at count caps 1, 16 and 256 (the spec's default;
// the byte cap at its default, which they never reach), at the default
// caps, and uncapped (2000 writes, 30 MiB).
func BenchmarkExperimentB(b *testing.B) { experimentB(b) }

func experimentA(b *testing.B, clientOpts ...kgo.Opt) {
	snaps := snapshots(500, 50)
	b.Run("plain-sequential", func(b *testing.B) {
		benchWrites(b, store.Plain, caps{}, snaps, false, clientOpts...)
	})
	b.Run("txn-sequential", func(b *testing.B) {
		benchWrites(b, store.Transactional, caps{}, snaps, false, clientOpts...)
	})
	b.Run("bare-txn-sequential", func(b *testing.B) {
		benchBareTxns(b, snaps, clientOpts...)
	})
	b.Run("txn-concurrent", func(b *testing.B) {
		benchWrites(b, store.Transactional, caps{}, snaps, true, clientOpts...)
	})
}

func experimentB(b *testing.B, clientOpts ...kgo.Opt) {
	snaps := snapshots(2000, 10<<10)
	b.Run("plain", func(b *testing.B) {
		benchWrites(b, store.Plain, caps{}, snaps, true, clientOpts...)
	})
	for _, maxWrites := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("cap=%d", maxWrites), func(b *testing.B) {
			benchWrites(b, store.Transactional, caps{writes: maxWrites}, snaps, true, clientOpts...)
		})
	}
	b.Run("default", func(b *testing.B) {
		benchWrites(b, store.Transactional, caps{}, snaps, true, clientOpts...)
	})
	b.Run("cap=2000", func(b *testing.B) {
		benchWrites(b, store.Transactional, uncapped, snaps, true, clientOpts...)
	})
}

// BenchmarkRecovery reads the partition Experiment B writes at the default
// caps (2000 x 10 KiB in a few transactions) to its end: "bare" with a plain
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
	be := bc.backend(b, store.Transactional, caps{}, &txns)
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
			for s, err := range o.part.Recover(ctx, nil) {
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

// benchBareTxns is the baseline of Experiment A's transactional one at a
// time variant without snapfence: per write, the three requests of a
// snapfence transaction, sent by a franz-go transactional producer of its
// own with nothing around them: BeginTransaction, a raw TxnOffsetCommit of
// offset 0 with the member's group identity (as partition.commitOffset
// sends it, CONCURRENT_TRANSACTIONS retried with the same backoff), a
// ProduceSync of the write's record, EndTransaction commit. The records
// are the ones snapfence writes (wire.EncodeSnapshot: the same key, value
// and headers), to the same kind of fresh snapshot partition, with the
// same producer options as the backend's (linger 0, the manual
// partitioner, acks=all, the default transaction timeout).
//
// The producer is initialised (InitProducerID) and warmed by one untimed
// transaction before the timer starts: a franz-go v1.22.3 client's first
// produce to a topic can end its transaction as an abort
// (partition.awaitPublished), which the warm-up waits out once, as
// snapfence does on every transaction. Snapfence's first timed
// transaction pays that wait and the metadata fetch; the bare loop's do
// not. After the timer stops, a read_committed read checks that every
// transaction committed its record.
func benchBareTxns(b *testing.B, snaps []store.Snapshot, clientOpts ...kgo.Opt) {
	bc := newBenchCluster(b)
	tv2 := bareTV2(b, bc.admin)
	txns := 0
	for b.Loop() {
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
		in := bc.newInput(b)
		t := bc.newBareTxns(ctx, b, in, tv2, clientOpts...)
		b.StartTimer()
		for _, s := range snaps {
			if err := t.transact(ctx, s); err != nil {
				b.StopTimer()
				b.Fatalf("bare transaction of %s: %v", s.Key, err)
			}
		}
		b.StopTimer()
		txns += len(snaps)
		t.prod.Close()
		if records, _ := bareRead(b, bc, t.snap); records != len(snaps)+1 {
			b.Fatalf("read %d committed records of %s, want %d (the warm-up's and every write's)", records, t.snap, len(snaps)+1)
		}
		in.close()
		cancel()
		b.StartTimer()
	}
	b.ReportMetric(float64(txns)/float64(b.N), "txns/op")
	b.ReportMetric(float64(len(snaps)*b.N)/b.Elapsed().Seconds(), "writes/s")
}

// bareTxns is the bare baseline's producer for one input partition.
type bareTxns struct {
	prod  *kgo.Client
	in    *input
	snap  store.TopicPartition
	txnID string
	tv2   bool
}

// newBareTxns creates and initialises the producer, then runs the warm-up
// transaction.
func (bc *benchCluster) newBareTxns(ctx context.Context, b *testing.B, in *input, tv2 bool, clientOpts ...kgo.Opt) *bareTxns {
	b.Helper()
	t := &bareTxns{in: in, tv2: tv2,
		snap:  store.TopicPartition{Topic: kafka.DefaultSnapshotTopic(benchPrefix, in.tp.Topic), Partition: 0},
		txnID: store.TransactionalID(benchPrefix+"-bare", in.tp)}
	opts := append([]kgo.Opt{kgo.SeedBrokers(bc.addrs...), kgo.ProducerLinger(0)}, clientOpts...)
	opts = append(opts,
		kgo.TransactionalID(t.txnID),
		kgo.TransactionTimeout(store.DefaultTransactionTimeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(t.snap.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)
	var err error
	if t.prod, err = kgo.NewClient(opts...); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(t.prod.Close)
	if _, _, err := t.prod.ProducerID(ctx); err != nil {
		b.Fatalf("initialising %s: %v", t.txnID, err)
	}
	warm := store.Snapshot{Key: []byte("warm-up"), Value: make([]byte, 50)}
	err = t.prod.BeginTransaction()
	if err == nil {
		err = t.commitOffset(ctx)
	}
	if err == nil {
		err = t.prod.ProduceSync(ctx, t.record(warm)).FirstErr()
	}
	for err == nil {
		if leader, _, _ := t.prod.PartitionLeader(t.snap.Topic, t.snap.Partition); leader >= 0 {
			break
		}
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	if err == nil {
		err = t.prod.EndTransaction(ctx, kgo.TryCommit)
	}
	if err != nil {
		b.Fatalf("warm-up transaction of %s: %v", t.txnID, err)
	}
	return t
}

// transact is one bare transaction of s.
func (t *bareTxns) transact(ctx context.Context, s store.Snapshot) error {
	if err := t.prod.BeginTransaction(); err != nil {
		return err
	}
	if err := t.commitOffset(ctx); err != nil {
		return err // the benchmark fails: no abort needed
	}
	if err := t.prod.ProduceSync(ctx, t.record(s)).FirstErr(); err != nil {
		return err
	}
	return t.prod.EndTransaction(ctx, kgo.TryCommit)
}

func (t *bareTxns) record(s store.Snapshot) *kgo.Record {
	w := wire.EncodeSnapshot("", s)
	r := &kgo.Record{Topic: t.snap.Topic, Partition: t.snap.Partition, Key: w.Key, Value: w.Value}
	for _, h := range w.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return r
}

// commitOffset is the transaction's TxnOffsetCommit of offset 0 (what a
// snapfence write that does not advance the offset commits) with the
// member's identity, read for every transaction; AddOffsetsToTxn first
// without transaction.version 2. CONCURRENT_TRANSACTIONS (the previous
// transaction's markers still being written) is retried after 1 ms,
// doubling up to 32 ms, as snapfence retries it.
func (t *bareTxns) commitOffset(ctx context.Context) error {
	pid, epoch, err := t.prod.ProducerID(ctx)
	if err != nil {
		return err
	}
	member, gen := t.in.member.GroupMetadata()
	retry := func(send func() (int16, error)) error {
		backoff := time.Millisecond
		for {
			code, err := send()
			if err == nil {
				err = kerr.ErrorForCode(code)
			}
			if !errors.Is(err, kerr.ConcurrentTransactions) {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 32*time.Millisecond)
		}
	}
	if !t.tv2 {
		add := kmsg.NewPtrAddOffsetsToTxnRequest()
		add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = t.txnID, pid, epoch, t.in.group
		if err := retry(func() (int16, error) {
			resp, err := add.RequestWith(ctx, t.prod)
			if err != nil {
				return 0, err
			}
			return resp.ErrorCode, nil
		}); err != nil {
			return fmt.Errorf("AddOffsetsToTxn: %w", err)
		}
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = t.txnID, t.in.group, pid, epoch
	req.MemberID, req.Generation = member, gen
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic, rt.TopicID = t.in.tp.Topic, t.in.id
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = t.in.tp.Partition, 0, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	if err := retry(func() (int16, error) {
		resp, err := req.RequestWith(ctx, t.prod)
		if err != nil {
			return 0, err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return 0, fmt.Errorf("answered for %d topics", len(resp.Topics))
		}
		return resp.Topics[0].Partitions[0].ErrorCode, nil
	}); err != nil {
		return fmt.Errorf("TxnOffsetCommit: %w", err)
	}
	return nil
}

// bareTV2 reports whether the cluster runs transaction.version 2 (KIP-890
// part 2) and serves TxnOffsetCommit v5+, as the backend checks it.
func bareTV2(b *testing.B, cl *kgo.Client) bool {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		b.Fatalf("api versions: %v", err)
	}
	v5 := false
	for _, k := range resp.ApiKeys {
		if k.ApiKey == int16(kmsg.TxnOffsetCommit) && k.MaxVersion >= 5 {
			v5 = true
		}
	}
	for _, f := range resp.FinalizedFeatures {
		if f.Name == "transaction.version" && f.MaxVersionLevel >= 2 {
			return v5
		}
	}
	return false
}

var txnSizeSweep = flag.Bool("txnsize", false, "run BenchmarkTransactionSize, the sweep of the caps per transaction (off: it takes minutes on a broker)")

// BenchmarkTransactionSize is the sweep the default caps were chosen by
// (docs/benchmarks.md), run only with -txnsize. Each iteration hands one
// batch of all its writes (storetest.WriteBatch) to a fresh partition,
// so the transactions are exactly the caps' cuts (no lone first write,
// unlike B's concurrent writers): "bytes", 4000 snapshots of 10 KiB (41 MB) under byte caps of
// 1 to 30 MiB and no count cap; "writes", 40,000 snapshots of 50 bytes
// (4 MB) under count caps of 256 to 40,000 and the byte cap of 30 MiB,
// which they never reach. Each has its plain baseline: the same batch
// through the plain producer.
func BenchmarkTransactionSize(b *testing.B) {
	if !*txnSizeSweep {
		b.Skip("the sweep runs with -txnsize")
	}
	big := snapshots(4000, 10<<10)
	b.Run("bytes/plain", func(b *testing.B) { benchBatch(b, store.Plain, caps{}, big) })
	for _, mib := range []int{1, 2, 4, 8, 16, 30} {
		b.Run(fmt.Sprintf("bytes/cap=%dMiB", mib), func(b *testing.B) {
			benchBatch(b, store.Transactional, caps{writes: len(big), bytes: mib << 20}, big)
		})
	}
	small := snapshots(40000, 50)
	b.Run("writes/plain", func(b *testing.B) { benchBatch(b, store.Plain, caps{}, small) })
	for _, n := range []int{256, 1024, 4096, 8192, 16384, 40000} {
		b.Run(fmt.Sprintf("writes/cap=%d", n), func(b *testing.B) {
			benchBatch(b, store.Transactional, caps{writes: n, bytes: uncapped.bytes}, small)
		})
	}
}

// benchBatch is one sweep benchmark: every iteration is a fresh owner
// writing snaps in one batch (storetest.WriteBatch).
func benchBatch(b *testing.B, mode store.Mode, c caps, snaps []store.Snapshot) {
	bc := newBenchCluster(b)
	var events atomic.Int64
	be := bc.backend(b, mode, c, &events)
	var payload int64
	for _, s := range snaps {
		payload += int64(wire.SnapshotBytes(s))
	}
	b.SetBytes(payload)
	for b.Loop() {
		b.StopTimer()
		o := bc.newOwner(b, be)
		ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
		b.StartTimer()
		errs := storetest.WriteBatch(ctx, o.part, snaps)
		b.StopTimer()
		cancel()
		if err := errors.Join(errs...); err != nil {
			b.Fatalf("writes failed: %v", err)
		}
		o.close()
		b.StartTimer()
	}
	if mode == store.Transactional {
		b.ReportMetric(float64(events.Load())/float64(b.N), "txns/op")
	}
	b.ReportMetric(float64(len(snaps)*b.N)/b.Elapsed().Seconds(), "writes/s")
}
