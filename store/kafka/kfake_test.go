package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/storetest"
)

const (
	inputTopic = "orders"
	group      = "flow"
	prefix     = "sf-test"
)

// fakeWorld is a kfake cluster on a virtual network inside a synctest
// bubble: the real franz-go client against an in-process broker, in virtual
// time.
type fakeWorld struct {
	t     *testing.T
	net   *kfake.VirtualNetwork
	dir   string // the cluster's data directory, for restarts
	c     *kfake.Cluster
	admin *kgo.Client
	adm   *kadm.Client

	mu      sync.Mutex
	members []*kgo.Client
	faults  struct {
		failLogEnd   bool
		fetchLatency time.Duration
	}
}

var errStorage = kerr.UnknownServerError

func newFakeWorld(t *testing.T) *fakeWorld {
	t.Helper()
	w := &fakeWorld{t: t, net: new(kfake.VirtualNetwork), dir: t.TempDir()}
	w.start(t)
	t.Cleanup(func() { w.c.Close() })
	w.admin = w.client(t)
	w.adm = kadm.NewClient(w.admin)
	ctx := context.Background()
	if _, err := w.adm.CreateTopic(ctx, 2, 1, nil, inputTopic); err != nil {
		t.Fatal(err)
	}
	compact := "compact"
	if _, err := w.adm.CreateTopic(ctx, 2, 1, map[string]*string{"cleanup.policy": &compact}, kafka.DefaultSnapshotTopic(inputTopic)); err != nil {
		t.Fatal(err)
	}
	return w
}

// start starts the cluster on its data directory: fresh, or restarted
// from what an earlier start left there.
func (w *fakeWorld) start(t *testing.T) {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.Ports(9092),
		kfake.ListenFn(w.net.Listen),
		kfake.DataDir(w.dir),
		kfake.GroupMinSessionTimeout(time.Second),
	)
	if err != nil {
		t.Fatal(err)
	}
	w.c = c
	w.installFaults()
}

// client returns a client of the world, closed when the test ends.
func (w *fakeWorld) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(w.baseOpts(), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func (w *fakeWorld) baseOpts() []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(w.c.ListenAddrs()...), kgo.Dialer(w.net.DialContext)}
}

// installFaults adds the control functions behind FailLogEndReads and
// SlowFetches; they pass everything through until switched on.
func (w *fakeWorld) installFaults() {
	w.c.ControlKey(int16(kmsg.ListOffsets), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		w.c.KeepControl()
		req := kreq.(*kmsg.ListOffsetsRequest)
		w.mu.Lock()
		fail := w.faults.failLogEnd
		w.mu.Unlock()
		if !fail || req.IsolationLevel != 0 {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, errStorage.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// slowConn delays every fetch request a recovery reader sends by the
// world's fetch latency: with one batch per fetch, a read that progresses
// slowly. (A request starts with its length, then its api key.)
type slowConn struct {
	net.Conn
	w *fakeWorld
}

func (c slowConn) Write(b []byte) (int, error) {
	c.w.mu.Lock()
	latency := c.w.faults.fetchLatency
	c.w.mu.Unlock()
	if latency > 0 && len(b) >= 6 && int16(binary.BigEndian.Uint16(b[4:6])) == int16(kmsg.Fetch) {
		time.Sleep(latency)
		// The client's write deadline passed while we slept; the
		// latency stands for time on the wire, not a dead broker.
		_ = c.Conn.SetWriteDeadline(time.Time{})
	}
	return c.Conn.Write(b)
}

func (w *fakeWorld) readerDial(ctx context.Context, network, host string) (net.Conn, error) {
	conn, err := w.net.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	return slowConn{conn, w}, nil
}

type fakeHarness struct{}

func (fakeHarness) Run(t *testing.T, body func(t *testing.T, w storetest.World)) {
	synctest.Test(t, func(t *testing.T) {
		body(t, newFakeWorld(t))
	})
}

func TestContractOnKfake(t *testing.T) {
	storetest.Run(t, fakeHarness{})
}

func (w *fakeWorld) InputTopic() string { return inputTopic }

func (w *fakeWorld) Backend(t *testing.T, cfg storetest.BackendConfig) store.Backend {
	t.Helper()
	b, err := kafka.New(context.Background(), kafka.Config{
		Mode: cfg.Mode, SeedBrokers: w.c.ListenAddrs(), TransactionalIDPrefix: prefix,
		MaxWritesPerTransaction: cfg.MaxWritesPerTransaction,
		RecoveryStallTimeout:    cfg.RecoveryStallTimeout,
		Observer:                cfg.Observer,
		ClientOpts:              []kgo.Opt{kgo.Dialer(w.net.DialContext)},
		// One batch per fetch, so SlowFetches slows progress without
		// stopping it. (Only the partition limit: kfake answers a fetch
		// cut by the request-wide limit without its aborted transactions,
		// which Kafka does not.)
		ReaderOpts: []kgo.Opt{kgo.Dialer(w.readerDial), kgo.FetchMaxPartitionBytes(1)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

type fakeMember struct{ cl *kgo.Client }

func (m fakeMember) Identity() store.GroupIdentity {
	member, gen := m.cl.GroupMetadata()
	return store.GroupIdentity{Group: group, MemberID: member, Generation: gen}
}

// settle waits, in virtual time, until the group is stable and every
// member knows its generation.
func (w *fakeWorld) settle(t *testing.T) int32 {
	t.Helper()
	for range 600 {
		time.Sleep(100 * time.Millisecond)
		described, err := w.adm.DescribeGroups(context.Background(), group)
		if err != nil {
			continue
		}
		g := described[group]
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
	t.Fatal("the group did not settle in 60s of virtual time")
	return 0
}

func (w *fakeWorld) Join(t *testing.T) storetest.Member {
	cl := w.client(t,
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(inputTopic),
		kgo.Balancers(kgo.RangeBalancer()), // eager
		kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(time.Second),
	)
	w.members = append(w.members, cl)
	w.settle(t)
	return fakeMember{cl}
}

func (w *fakeWorld) Rebalance(t *testing.T) {
	before := w.settle(t)
	for _, m := range w.members {
		m.ForceRebalance()
	}
	if after := w.settle(t); after != before+1 {
		t.Fatalf("rebalance moved the generation from %d to %d", before, after)
	}
}

func (w *fakeWorld) CommittedOffset(t *testing.T, in store.TopicPartition) (int64, bool) {
	offs, err := w.adm.FetchOffsets(kadm.RequireStable(context.Background()), group) // after any pending transactional commit
	if err != nil {
		t.Fatal(err)
	}
	o, ok := offs.Lookup(in.Topic, in.Partition)
	return o.At, ok && o.At >= 0
}

func snapTP(in store.TopicPartition) store.TopicPartition {
	return store.TopicPartition{Topic: kafka.DefaultSnapshotTopic(in.Topic), Partition: in.Partition}
}

func (w *fakeWorld) listEnd(t *testing.T, tp store.TopicPartition, isolation int8) int64 {
	t.Helper()
	return listEnd(context.Background(), t, w.admin, tp, isolation)
}

// listEnd lists tp's log end as a reader of the isolation level sees it:
// the high watermark (0) or the last stable offset (1).
func listEnd(ctx context.Context, tb testing.TB, cl *kgo.Client, tp store.TopicPartition, isolation int8) int64 {
	tb.Helper()
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
		tb.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		tb.Fatal(err)
	}
	return p.Offset
}

func (w *fakeWorld) StableOffsets(t *testing.T, in store.TopicPartition) (int64, int64) {
	return w.listEnd(t, snapTP(in), 1), w.listEnd(t, snapTP(in), 0)
}

func (w *fakeWorld) ReadSnapshots(t *testing.T, in store.TopicPartition) []store.Snapshot {
	t.Helper()
	tp := snapTP(in)
	lso := w.listEnd(t, tp, 1)
	if lso == 0 {
		return nil
	}
	cl := w.client(t,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{tp.Topic: {tp.Partition: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
	)
	defer cl.Close()
	var out []store.Snapshot
	for pos := int64(0); pos < lso; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		fs := cl.PollFetches(ctx)
		cancel()
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading %s: %v", tp, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			pos = r.Offset + 1
			if r.Attrs.IsControl() || r.Offset >= lso {
				return
			}
			wr := store.WireRecord{Key: r.Key, Value: r.Value}
			for _, h := range r.Headers {
				wr.Headers = append(wr.Headers, store.Header{Key: h.Key, Value: h.Value})
			}
			s, kind, err := store.DecodeRecord(tp, r.Offset, wr)
			if err != nil {
				t.Fatal(err)
			}
			if kind != store.KindOffsetMarker {
				out = append(out, s)
			}
		})
	}
	return out
}

func toKgo(tp store.TopicPartition, recs []store.WireRecord) []*kgo.Record {
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
func (w *fakeWorld) openTransaction(t *testing.T, txnID string, timeout time.Duration, tp store.TopicPartition, recs []store.WireRecord) *kgo.Client {
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

func (w *fakeWorld) CrashedOwnerTransaction(t *testing.T, in store.TopicPartition, recs ...store.WireRecord) {
	txnID := fmt.Sprintf("%s-%s-%d", prefix, in.Topic, in.Partition)
	w.openTransaction(t, txnID, time.Minute, snapTP(in), recs)
}

func (w *fakeWorld) ForeignTransaction(t *testing.T, in store.TopicPartition, hang bool, recs ...store.WireRecord) func(bool) {
	timeout := time.Minute
	if hang {
		timeout = 15 * time.Minute // transaction.max.timeout.ms: past every deadline of the suite
	}
	cl := w.openTransaction(t, "foreign-producer", timeout, snapTP(in), recs)
	return func(commit bool) {
		if err := cl.EndTransaction(context.Background(), kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
}

func (w *fakeWorld) ProduceForeign(t *testing.T, in store.TopicPartition, recs ...store.WireRecord) {
	cl := w.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(context.Background(), toKgo(snapTP(in), recs)...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// Truncate stops the cluster, cuts the partition's segment files at the
// first batch at or past end, and restarts the cluster from that data
// directory: the log end regresses, as after an unclean leader election
// that lost acknowledged records.
func (w *fakeWorld) Truncate(t *testing.T, in store.TopicPartition, end int64) {
	t.Helper()
	tp := snapTP(in)
	w.c.Close()
	pdir := filepath.Join(w.dir, "partitions", fmt.Sprintf("%s-%d", url.PathEscape(tp.Topic), tp.Partition))
	segs, err := filepath.Glob(filepath.Join(pdir, "*.dat"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segments of %s in %s: %v", tp, pdir, err)
	}
	for _, seg := range segs {
		raw, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		pos := 0
		for pos+12 <= len(raw) {
			base := int64(binary.BigEndian.Uint64(raw[pos : pos+8]))
			if base >= end {
				break
			}
			pos += 12 + int(binary.BigEndian.Uint32(raw[pos+8:pos+12]))
		}
		if err := os.Truncate(seg, int64(pos)); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.Remove(filepath.Join(pdir, "snapshot.json"))
	w.start(t)
	if _, hw := w.StableOffsets(t, in); hw != end {
		t.Fatalf("after truncating to %d the high watermark is %d", end, hw)
	}
}

func (w *fakeWorld) FailLogEndReads(t *testing.T) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.faults.failLogEnd = true
	return errStorage
}

func (w *fakeWorld) SlowFetches(t *testing.T, latency time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.faults.fetchLatency = latency
}

func (w *fakeWorld) Advance(d time.Duration) {
	synctest.Wait()
	time.Sleep(d)
	synctest.Wait()
}

func (w *fakeWorld) Settle() { synctest.Wait() }

// StallTimeout: virtual time affords the production default and a second
// of slack.
func (w *fakeWorld) StallTimeout() (time.Duration, time.Duration) {
	return 3 * time.Minute, time.Second
}

func (w *fakeWorld) Now() time.Time { return time.Now() }

var _ = errors.Is
