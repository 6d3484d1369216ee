package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/wire"
)

// lateTopicWorld opens, on demand, the window in which franz-go v1.22.3
// has produced a client's first records to a topic but does not yet list
// the topic's partitions.
//
// The first records a client produces to a topic wait for its metadata.
// When the metadata arrives, storePartitionsUpdate
// (kgo/topics_and_partitions.go:389-474) hands the waiting records to
// their partitions, whose sinks may send them at once, and publishes the
// partitions for the rest of the client only at its end (a deferred
// l.v.Store(lv), line 414). Until then EndTransaction, which finds the
// partitions of the transaction by walking the published ones
// (kgo/txn.go:821-828), finds none, and with a produce attempted turns the
// commit it was asked for into an abort and returns nil (txn.go:837-857);
// resetAllProducerSequences (kgo/producer.go:1123-1131), run when the
// EndTxn answer bumps the epoch, misses the partition too, so its next
// batch carries the old sequence under the new epoch and the broker
// answers OUT_OF_ORDER_SEQUENCE_NUMBER. Apache Kafka does the same with
// such a batch (ProducerAppendInfo.checkSequence: a new epoch must start
// at sequence 0); the Java client adds a partition to its transaction when
// the record is sent and never turns a commit into an abort.
//
// Under the race detector the metadata goroutine was descheduled in that
// window about once in a hundred runs of the kfake world: the lost writes
// of TestALeaderEvictedBeforeSyncingDoesNotStall and the
// OUT_OF_ORDER_SEQUENCE_NUMBER of TestRestartsRecoverStateOnKfake. Here
// the window is held open: the client's metadata request for the snapshot
// topic is parked in kfake until a second record (the wedge, produced by
// the test into the same transaction, with a cancelled context so that it
// is never sent) waits behind the first; the wedge's
// OnProduceRecordPartitioned hook, which franz-go calls from
// storePartitionsUpdate after the first record went to its sink, then
// blocks until the test lets it go. The wedge goes to the other snapshot
// partition, on the other broker: its hook holds its partition's lock,
// which a shared sink would need to send the first record.
type lateTopicWorld struct {
	*world
	c    *kfake.Cluster
	snap string

	mu      sync.Mutex
	clients []*kgo.Client // transactional clients, as created

	metaArmed     atomic.Bool
	armAtProducer atomic.Bool
	metaHeld      chan struct{} // closed when the metadata request is parked
	metaRelease   chan struct{}
	wedged        chan struct{} // closed when the wedge's hook blocks
	unwedge       chan struct{}
}

const wedgeKey = "wedge"

func newLateTopicWorld(t *testing.T) *lateTopicWorld {
	t.Helper()
	net := new(kfake.VirtualNetwork)
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.Ports(9092, 9093), kfake.ListenFn(net.Listen), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	w := &lateTopicWorld{
		world: &world{
			input: inputTopic, group: group, prefix: prefix,
			seeds: c.ListenAddrs, dial: net.DialContext,
		},
		c: c, snap: kafka.DefaultSnapshotTopic(prefix, inputTopic),
		metaHeld: make(chan struct{}), metaRelease: make(chan struct{}),
		wedged: make(chan struct{}), unwedge: make(chan struct{}),
	}
	w.createTopics(t)
	other := 1 - c.LeaderFor(w.snap, 0)
	if err := c.MoveTopicPartition(w.snap, 1, other); err != nil {
		t.Fatal(err)
	}
	if a, b := c.LeaderFor(w.snap, 0), c.LeaderFor(w.snap, 1); a == b {
		t.Fatalf("both snapshot partitions are led by broker %d", a)
	}
	c.ControlKey(int16(kmsg.Metadata), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.MetadataRequest)
		asks := slices.ContainsFunc(req.Topics, func(rt kmsg.MetadataRequestTopic) bool {
			return rt.Topic != nil && *rt.Topic == w.snap
		})
		if asks && w.metaArmed.CompareAndSwap(true, false) {
			close(w.metaHeld)
			c.SleepControl(func() { <-w.metaRelease })
		}
		return nil, nil, false // kfake answers it
	})
	return w
}

// hooks is the franz-go hook of every client the test's code creates.
func (w *lateTopicWorld) hooks() kgo.Opt { return kgo.WithHooks((*lateTopicHooks)(w)) }

type lateTopicHooks lateTopicWorld

func (h *lateTopicHooks) OnNewClient(cl *kgo.Client) {
	if id, _ := cl.OptValue(kgo.TransactionalID).(string); id != "" {
		h.mu.Lock()
		h.clients = append(h.clients, cl)
		h.mu.Unlock()
		if h.armAtProducer.CompareAndSwap(true, false) {
			h.metaArmed.Store(true)
		}
	}
}

func (h *lateTopicHooks) OnProduceRecordPartitioned(r *kgo.Record, _ int32) {
	if string(r.Key) == wedgeKey {
		close(h.wedged)
		<-h.unwedge
	}
}

// holdNextMetadata parks the next metadata request for the snapshot topic.
func (w *lateTopicWorld) holdNextMetadata() { w.metaArmed.Store(true) }

// holdProducersMetadata parks the next metadata request for the snapshot
// topic once the next transactional client is created: its own, not the
// store's admin client's before it.
func (w *lateTopicWorld) holdProducersMetadata() { w.armAtProducer.Store(true) }

// wedge runs once produce (which produces cl's first records to the
// snapshot topic, on a goroutine of its own) waits for the topic's
// metadata: it queues the wedge behind them, lets the metadata through and
// returns when franz-go has handed produce's records to their sink but not
// yet published the topic's partitions. The returned function ends the
// window and returns the wedge's outcome (it is never sent).
func (w *lateTopicWorld) wedge(t *testing.T, cl *kgo.Client) func() error {
	t.Helper()
	<-w.metaHeld
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // fails the wedge in its sink before it is sent
	wedgeDone := make(chan error, 1)
	cl.Produce(ctx, &kgo.Record{Topic: w.snap, Partition: 1, Key: []byte(wedgeKey)}, func(_ *kgo.Record, err error) {
		wedgeDone <- err
	})
	close(w.metaRelease)
	<-w.wedged
	return func() error {
		close(w.unwedge)
		return <-wedgeDone
	}
}

func (w *lateTopicWorld) producer(t *testing.T) *kgo.Client {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.clients) != 1 {
		t.Fatalf("%d transactional clients, want 1", len(w.clients))
	}
	return w.clients[0]
}

// franz-go v1.22.3 (pinned): EndTransaction asked to commit a transaction
// whose records were acknowledged aborts it and returns nil, when it runs
// before the client has published the partitions of the topic those
// records were the client's first to. Apache Kafka's Java client never
// turns a commit into an abort (commitTransaction fails instead). If
// franz-go fixes this, this test fails: partition.awaitPublished can then
// go (its only purpose), with this test.
func TestFranzGoCommitEndsAsAnAbortBeforeItPublishesANewTopic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newLateTopicWorld(t)
		in := store.TopicPartition{Topic: inputTopic, Partition: 0}
		cl := w.client(t, w.hooks(), kgo.TransactionalID("pinned"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if _, _, err := cl.ProducerID(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		w.holdNextMetadata()
		snap := store.Snapshot{Key: []byte("a"), Value: []byte("1"), Offset: 7}
		produced := make(chan error, 1)
		go func() {
			recs := toKgo(snapTP(in), []wire.Record{wire.EncodeSnapshot("", snap)})
			produced <- cl.ProduceSync(context.Background(), recs...).FirstErr()
		}()
		unwedge := w.wedge(t, cl)
		if err := <-produced; err != nil {
			t.Fatalf("the record was not acknowledged: %v", err)
		}
		if leader, _, _ := cl.PartitionLeader(w.snap, 0); leader >= 0 {
			t.Fatalf("the partition is published (leader %d): the window is not open", leader)
		}
		if err := cl.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
			t.Fatalf("EndTransaction(TryCommit): %v (franz-go changed: see the test's comment)", err)
		}
		if err := unwedge(); !errors.Is(err, context.Canceled) {
			t.Fatalf("the wedge: %v, want its context's cancellation", err)
		}
		if got := w.ReadSnapshots(t, in); len(got) != 0 {
			t.Fatalf("the transaction committed %v: franz-go no longer aborts it (see the test's comment)", got)
		}
		lso, hw := w.StableOffsets(t, in)
		if lso != hw || hw != 2 {
			t.Fatalf("snapshot log: last stable offset %d, high watermark %d; want the record and its abort marker, 2 and 2", lso, hw)
		}
	})
}

// The store acknowledges a write only once its transaction committed, also
// when franz-go publishes the snapshot topic's partitions to the
// producer's first transaction late (lateTopicWorld): the transaction
// waits for them (and says so in the log) before it ends, and commits.
// Before, the write was acknowledged while the window was open, and its
// transaction aborted.
func TestAFirstTransactionCommitsWhenItsTopicIsPublishedLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newLateTopicWorld(t)
		in := store.TopicPartition{Topic: inputTopic, Partition: 0}
		b, waiting := w.backend(t)
		m := w.Join(t).(member)
		// An earlier owner of the lineage claimed the partition, so this
		// owner's first transaction is the write.
		w.ProduceForeign(t, in, wire.EncodeOffsetMarker(w.prefix, 0, store.GroupIdentity{}))
		p, err := b.Acquire(context.Background(), store.Acquisition{
			Input: in, AssignedOffset: 5, Identity: store.IdentityFunc(m.Identity),
		})
		if err != nil {
			t.Fatal(err)
		}
		w.holdNextMetadata()
		written := make(chan error, 1)
		go func() {
			written <- writeOne(context.Background(), p, store.Snapshot{Key: []byte("a"), Value: []byte("1"), Offset: 4})
		}()
		unwedge := w.wedge(t, w.producer(t))
		if werr := w.endsAfterPublished(t, "the write", written, waiting, unwedge); werr != nil {
			t.Fatalf("write: %v", werr)
		}
		got := w.ReadSnapshots(t, in)
		if len(got) != 1 || string(got[0].Key) != "a" || got[0].Offset != 4 {
			t.Fatalf("committed snapshots %v, want a=1@4: an acknowledged write was lost", got)
		}
		if off, ok := w.CommittedOffset(t, in); !ok || off != 5 {
			t.Fatalf("committed offset %d (found %v), want 5", off, ok)
		}
		// The next transaction's batch starts the new epoch at sequence 0
		// (with the reset missed: OUT_OF_ORDER_SEQUENCE_NUMBER).
		if err := writeOne(context.Background(), p, store.Snapshot{Key: []byte("a"), Value: []byte("2"), Offset: 6}); err != nil {
			t.Fatalf("the next write: %v", err)
		}
	})
}

// The claim of a new application's first takeover is its producer's
// first transaction to the snapshot topic: it too waits for franz-go to
// publish the topic's partitions, and commits. An aborted claim would
// leave the id claimed beside an empty partition, which the application's
// next start takes for another application's.
func TestAClaimCommitsWhenItsTopicIsPublishedLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newLateTopicWorld(t)
		in := store.TopicPartition{Topic: inputTopic, Partition: 0}
		b, waiting := w.backend(t)
		m := w.Join(t).(member)
		w.holdProducersMetadata()
		acquired := make(chan error, 1)
		go func() {
			p, err := b.Acquire(context.Background(), store.Acquisition{
				Input: in, AssignedOffset: 0, Identity: store.IdentityFunc(m.Identity),
			})
			if err == nil {
				t.Cleanup(func() { _ = p.Close() })
			}
			acquired <- err
		}()
		select {
		case err := <-acquired:
			t.Fatalf("Acquire ended (%v) without asking for the snapshot topic's metadata: no claim", err)
		case <-w.metaHeld:
		}
		unwedge := w.wedge(t, w.producer(t))
		if aerr := w.endsAfterPublished(t, "the claim (Acquire)", acquired, waiting, unwedge); aerr != nil {
			t.Fatalf("Acquire: %v", aerr)
		}
		lso, hw := w.StableOffsets(t, in)
		if lso != hw || hw == 0 {
			t.Fatalf("snapshot log: last stable offset %d, high watermark %d; want the claim ended", lso, hw)
		}
		var claims int
		w.readTo(t, snapTP(in), hw, []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}, func(r *kgo.Record) {
			if bytes.Equal(r.Key, wire.OffsetMarkerKey) {
				claims++
			}
		})
		if claims != 1 {
			t.Fatalf("%d committed claims on the snapshot partition, want 1: the claim was aborted", claims)
		}
	})
}

// backend is a transactional store on w whose log tells when a
// transaction waits for its partition to be published.
func (w *lateTopicWorld) backend(t *testing.T) (*kafka.Backend, *logSignal) {
	t.Helper()
	waiting := &logSignal{msg: "waiting for the producer to publish a partition of the transaction before ending it", ch: make(chan struct{})}
	b, err := kafka.New(context.Background(), kafka.Config{
		Mode: store.Transactional, SeedBrokers: w.seeds(), TransactionalIDPrefix: w.prefix,
		ClientOpts: []kgo.Opt{kgo.Dialer(w.dial), w.hooks()},
		Logger:     slog.New(waiting),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, waiting
}

// endsAfterPublished returns what ended reports once the wedged window
// closed: what must not end while franz-go has not published its
// partition either ends (the test fails) or the store says it waits, and
// then the window closes. No synctest.Wait while the window is open: the
// wedge's sink waits for the partition lock its hook holds, which is not
// a durable block.
func (w *lateTopicWorld) endsAfterPublished(t *testing.T, what string, ended <-chan error, waiting *logSignal, unwedge func() error) error {
	t.Helper()
	var err error
	early := false
	select {
	case err = <-ended:
		early = true
	case <-waiting.ch:
	}
	if uerr := unwedge(); !errors.Is(uerr, context.Canceled) {
		t.Fatalf("the wedge: %v, want its context's cancellation", uerr)
	}
	if early {
		t.Errorf("%s ended (%v) before franz-go published its partition", what, err)
		return err
	}
	return <-ended
}

// logSignal is a slog handler that closes ch at the first record with
// message msg.
type logSignal struct {
	msg  string
	once sync.Once
	ch   chan struct{}
}

func (h *logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h *logSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.ch) })
	}
	return nil
}
func (h *logSignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logSignal) WithGroup(string) slog.Handler      { return h }
