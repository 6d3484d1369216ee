package kafka_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/internal/backend"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/storetest"
	"github.com/snapfence/snapfence/store/wire"
)

// world is a Kafka cluster as the contract suite sees it: everything the
// kfake harness (virtual time) and the real-broker harness (tag it, real
// time) share. Each embeds it and adds its clock, its way of failing
// log-end reads and its way of truncating a log.
type world struct {
	seeds func() []string
	dial  func(ctx context.Context, network, host string) (net.Conn, error)
	// input, group and prefix name the world's input topic, consumer
	// group and transactional.id prefix.
	input, group, prefix string
	// foreignID is the transactional.id of ForeignTransaction.
	foreignID string
	// now is the backends' clock (kafka.Config.Now); nil: time.Now.
	now func() time.Time

	admin *kgo.Client
	adm   *kadm.Client

	mu      sync.Mutex
	members []*kgo.Client
	// heartbeats counts each member's heartbeats the coordinator
	// answered without an error, in members' order.
	heartbeats []*heartbeatCount
	faults     struct {
		failLogEnd   bool
		fetchLatency time.Duration
	}
}

// client returns a client of the world, closed when the test ends.
func (w *world) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(w.baseOpts(), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func (w *world) baseOpts() []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(w.seeds()...), kgo.Dialer(w.dial)}
}

// createTopics creates the input topic and its compacted snapshot topic,
// two partitions each, and the world's admin client.
func (w *world) createTopics(t *testing.T) {
	t.Helper()
	w.admin = w.client(t)
	w.adm = kadm.NewClient(w.admin)
	ctx := context.Background()
	if err := kafka.CreateTopic(ctx, w.admin, w.input, 2, 1, nil); err != nil {
		t.Fatal(err)
	}
	compact := "compact"
	if err := kafka.CreateTopic(ctx, w.admin, kafka.DefaultSnapshotTopic(storetest.Application, w.input), 2, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
		t.Fatal(err)
	}
	if err := kafka.CreateTopic(ctx, w.admin, w.OutputTopic(), 2, 1, map[string]*string{"max.message.bytes": &outputMaxBytes}); err != nil {
		t.Fatal(err)
	}
}

var outputMaxBytes = strconv.Itoa(storetest.OutputMaxBytes)

func (w *world) OutputTopic() string { return w.input + "-enriched" }

// ReadOutputs reads both partitions of the output topic, once the
// transactions of both input partitions' transactional.ids have ended.
func (w *world) ReadOutputs(t *testing.T, readCommitted bool) []storetest.OutputRecord {
	t.Helper()
	var isolation int8
	opts := []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadUncommitted())}
	if readCommitted {
		isolation, opts = 1, []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}
	}
	var out []storetest.OutputRecord
	for p := range int32(2) {
		w.awaitTransactionEnd(t, store.TopicPartition{Topic: w.input, Partition: p})
	}
	for p := range int32(2) {
		tp := store.TopicPartition{Topic: w.OutputTopic(), Partition: p}
		end := w.listEnd(t, tp, isolation)
		if end == 0 {
			continue
		}
		w.readTo(t, tp, end, opts, func(r *kgo.Record) {
			out = append(out, storetest.OutputRecord{Partition: p, Key: r.Key, Value: r.Value})
		})
	}
	return out
}

// readTo reads tp from its start up to end with a client of opts, and
// calls fn with every record below end that is not a control record.
func (w *world) readTo(t *testing.T, tp store.TopicPartition, end int64, opts []kgo.Opt, fn func(*kgo.Record)) {
	t.Helper()
	cl := w.client(t, append(opts, kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{tp.Topic: {tp.Partition: kgo.NewOffset().AtStart()}}))...)
	defer cl.Close()
	err := kafkatest.ReadTo(cl, end, func(r *kgo.Record) {
		if !r.Attrs.IsControl() {
			fn(r)
		}
	})
	if err != nil {
		t.Fatalf("reading %s: %v", tp, err)
	}
}

// fetchLatency is the latency SlowFetches set, read by the recovery
// readers' dialer (kafkatest.SlowFetches): with one batch per fetch, a
// read that progresses slowly.
func (w *world) fetchLatency() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.faults.fetchLatency
}

func (w *world) InputTopic() string { return w.input }

// Queued asks the backend skeleton's partition, which every kafka
// partition is.
func (w *world) Queued(p store.Partition) int { return p.(*backend.Partition).Pending() }

func (w *world) Backend(t *testing.T, cfg storetest.BackendConfig) store.Backend {
	t.Helper()
	app := cfg.Application
	if app == "" {
		app = storetest.Application
	}
	b, err := kafka.New(context.Background(), kafka.Config{
		Mode: cfg.Mode, SeedBrokers: w.seeds(), Application: app, TransactionalIDPrefix: w.prefix, CreateTopics: cfg.Application != "",
		MaxWritesPerTransaction: cfg.MaxWritesPerTransaction,
		MaxBytesPerTransaction:  cfg.MaxBytesPerTransaction,
		RecoveryStallTimeout:    cfg.RecoveryStallTimeout,
		Observer:                cfg.Observer,
		Now:                     w.now,
		ClientOpts:              []kgo.Opt{kgo.Dialer(w.dial)},
		// One batch per fetch, so SlowFetches slows progress without
		// stopping it. (Only the partition limit: kfake answers a fetch
		// cut by the request-wide limit without its aborted transactions,
		// which Kafka does not.)
		ReaderOpts: []kgo.Opt{kgo.Dialer(kafkatest.SlowFetches(w.dial, w.fetchLatency)), kgo.FetchMaxPartitionBytes(1)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

type member struct {
	cl    *kgo.Client
	group string
}

func (m member) Identity() store.GroupIdentity {
	id, gen := m.cl.GroupMetadata()
	return store.GroupIdentity{Group: m.group, MemberID: id, Generation: gen}
}

// settle waits until the group is stable and every member knows its
// generation; it polls the group every 100 ms for up to a minute.
func (w *world) settle(t *testing.T) int32 {
	t.Helper()
	for range 600 {
		time.Sleep(100 * time.Millisecond)
		described, err := w.adm.DescribeGroups(context.Background(), w.group)
		if err != nil {
			continue
		}
		g := described[w.group]
		if g.State != "Stable" || len(g.Members) != len(w.members) {
			continue
		}
		gen := int32(-2)
		ok := true
		for _, m := range w.members {
			_, mgen := m.GroupMetadata()
			if gen == -2 {
				gen = mgen
			}
			ok = ok && mgen == gen && mgen > 0
		}
		if ok {
			return gen
		}
	}
	t.Fatal("the group did not settle in a minute")
	return 0
}

func (w *world) Join(t *testing.T) storetest.Member {
	hb := &heartbeatCount{}
	cl := w.client(t,
		kgo.ConsumerGroup(w.group), kgo.ConsumeTopics(w.input),
		kgo.Balancers(kgo.RangeBalancer()), // eager
		kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(time.Second),
		kgo.WithLogger(hb),
	)
	w.members = append(w.members, cl)
	w.heartbeats = append(w.heartbeats, hb)
	w.settle(t)
	return member{cl, w.group}
}

// settleAfterRestart is settle after the coordinator's broker restarted.
// The group's state (Stable, the members' generation) reads the same
// before and after a member's session runs out, so settle alone may
// return while a member's heartbeat, held up by the restart, is still to
// be answered with an error that moves the group to a new generation.
// A heartbeat answered without an error after the restart shows the
// restarted coordinator holds the member in its generation, and its
// session runs anew.
func (w *world) settleAfterRestart(t *testing.T) int32 {
	t.Helper()
	before := make([]int64, len(w.heartbeats))
	for i, hb := range w.heartbeats {
		before[i] = hb.n.Load()
	}
	for range 600 {
		answered := true
		for i, hb := range w.heartbeats {
			answered = answered && hb.n.Load() > before[i]
		}
		if answered {
			return w.settle(t)
		}
		time.Sleep(100 * time.Millisecond) // polls the members' heartbeat counts
	}
	t.Fatal("no heartbeat of every member answered in a minute after the restart")
	return 0
}

// heartbeatCount is a member client's logger that counts the heartbeats
// answered without an error: franz-go tells of a heartbeat's end only in
// its debug log.
type heartbeatCount struct{ n atomic.Int64 }

func (h *heartbeatCount) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (h *heartbeatCount) Log(_ kgo.LogLevel, msg string, keyvals ...any) {
	if msg != "heartbeat complete" {
		return
	}
	for i := 0; i+1 < len(keyvals); i += 2 {
		if keyvals[i] == "err" && keyvals[i+1] == nil {
			h.n.Add(1)
		}
	}
}

func (w *world) Rebalance(t *testing.T) {
	before := w.settle(t)
	for _, m := range w.members {
		m.ForceRebalance()
	}
	if after := w.settle(t); after != before+1 {
		t.Fatalf("rebalance moved the generation from %d to %d", before, after)
	}
}

func (w *world) CommittedOffset(t *testing.T, in store.TopicPartition) (int64, bool) {
	t.Helper()
	w.awaitTransactionEnd(t, in)
	// RequireStable: after any pending transactional commit.
	offs, err := w.adm.FetchOffsets(kadm.RequireStable(context.Background()), w.group)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := offs.Lookup(in.Topic, in.Partition)
	if ok && o.Err != nil {
		t.Fatalf("committed offset of %s: %v", in, o.Err)
	}
	return o.At, ok && o.At >= 0
}

// awaitTransactionEnd waits while the transaction of in's
// transactional.id is between EndTxn and its markers (PrepareCommit,
// PrepareAbort). Under transaction.version 2 Kafka answers EndTxn before
// the markers are written: until they are, the snapshot partition's last
// stable offset stays below the transaction, and an offset fetch, even one
// that requires stable offsets, can show neither the transaction's offset
// nor UNSTABLE_OFFSET_COMMIT. (kfake writes markers before it answers.)
func (w *world) awaitTransactionEnd(t *testing.T, in store.TopicPartition) {
	t.Helper()
	txnID := fmt.Sprintf("%s-%s-%d", w.prefix, in.Topic, in.Partition)
	for start := time.Now(); time.Since(start) < time.Minute; {
		described, err := w.adm.DescribeTransactions(context.Background(), txnID)
		if err != nil {
			return // no such transactional.id (Plain mode, or nothing written yet)
		}
		d, ok := described[txnID]
		if !ok || d.Err != nil || (d.State != "PrepareCommit" && d.State != "PrepareAbort") {
			return
		}
		time.Sleep(10 * time.Millisecond) // polls until the markers are written
	}
	t.Fatalf("the transaction of %s did not end in a minute", txnID)
}

func snapTP(in store.TopicPartition) store.TopicPartition {
	return store.TopicPartition{Topic: kafka.DefaultSnapshotTopic(storetest.Application, in.Topic), Partition: in.Partition}
}

func (w *world) listEnd(t *testing.T, tp store.TopicPartition, isolation int8) int64 {
	t.Helper()
	return listEnd(context.Background(), t, w.admin, tp, isolation)
}

// listEnd lists tp's log end as a reader of the isolation level sees it:
// the high watermark (0) or the last stable offset (1).
func listEnd(ctx context.Context, tb testing.TB, cl *kgo.Client, tp store.TopicPartition, isolation int8) int64 {
	tb.Helper()
	off, err := tryListEnd(ctx, cl, tp, isolation)
	if err != nil {
		tb.Fatal(err)
	}
	return off
}

func tryListEnd(ctx context.Context, cl *kgo.Client, tp store.TopicPartition, isolation int8) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = tp.Topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = tp.Partition, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	p := resp.Topics[0].Partitions[0]
	return p.Offset, kerr.ErrorForCode(p.ErrorCode)
}

func (w *world) StableOffsets(t *testing.T, in store.TopicPartition) (int64, int64) {
	w.awaitTransactionEnd(t, in)
	return w.listEnd(t, snapTP(in), 1), w.listEnd(t, snapTP(in), 0)
}

func (w *world) ReadSnapshots(t *testing.T, in store.TopicPartition) []store.Snapshot {
	t.Helper()
	tp := snapTP(in)
	w.awaitTransactionEnd(t, in)
	lso := w.listEnd(t, tp, 1)
	if lso == 0 {
		return nil
	}
	var out []store.Snapshot
	w.readTo(t, tp, lso, []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}, func(r *kgo.Record) {
		s, kind, err := kafkatest.DecodeRecord(tp.Topic, r)
		if err != nil {
			t.Fatal(err)
		}
		if kind != wire.KindOffsetMarker {
			out = append(out, s)
		}
	})
	return out
}

func toKgo(tp store.TopicPartition, recs []wire.Record) []*kgo.Record {
	out := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		kr := &kgo.Record{Topic: tp.Topic, Partition: tp.Partition, Key: r.Key, Value: r.Value}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		out[i] = kr
	}
	return out
}

// openTransaction leaves a transaction of txnID open on tp.
func (w *world) openTransaction(t *testing.T, txnID string, timeout time.Duration, tp store.TopicPartition, recs []wire.Record) *kgo.Client {
	t.Helper()
	cl := w.client(t, kgo.TransactionalID(txnID), kgo.TransactionTimeout(timeout), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(context.Background(), toKgo(tp, recs)...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return cl
}

func (w *world) CrashedOwnerTransaction(t *testing.T, in store.TopicPartition, recs ...wire.Record) {
	txnID := fmt.Sprintf("%s-%s-%d", w.prefix, in.Topic, in.Partition)
	w.openTransaction(t, txnID, time.Minute, snapTP(in), recs)
}

func (w *world) CrashedOwnerOutputs(t *testing.T, in store.TopicPartition, recs ...wire.Record) {
	txnID := fmt.Sprintf("%s-%s-%d", w.prefix, in.Topic, in.Partition)
	w.openTransaction(t, txnID, time.Minute, store.TopicPartition{Topic: w.OutputTopic()}, recs)
}

func (w *world) ForeignTransaction(t *testing.T, in store.TopicPartition, hang bool, recs ...wire.Record) func(bool) {
	timeout := time.Minute
	if hang {
		timeout = 15 * time.Minute // transaction.max.timeout.ms: past every deadline of the suite
	}
	cl := w.openTransaction(t, w.foreignID, timeout, snapTP(in), recs)
	// Nothing stays open past the test (find-hanging checks after the
	// real-broker run); after end this does nothing.
	t.Cleanup(func() { _ = cl.EndTransaction(context.Background(), kgo.TryAbort) })
	return func(commit bool) {
		if err := cl.EndTransaction(context.Background(), kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
}

func (w *world) ProduceForeign(t *testing.T, in store.TopicPartition, recs ...wire.Record) {
	cl := w.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(context.Background(), toKgo(snapTP(in), recs)...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func (w *world) SlowFetches(t *testing.T, latency time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.faults.fetchLatency = latency
}

// cutSegments cuts tp's segment files of pattern at end
// (kafkatest.CutSegments).
func cutSegments(t *testing.T, tp store.TopicPartition, pattern string, end int64) {
	t.Helper()
	if err := kafkatest.CutSegments(pattern, end); err != nil {
		t.Fatalf("cutting %s: %v", tp, err)
	}
}

// writeOne is one write: a batch of one snapshot.
func writeOne(ctx context.Context, p store.Partition, s store.Snapshot) error {
	return storetest.WriteBatch(ctx, p, []store.Snapshot{s})[0]
}
