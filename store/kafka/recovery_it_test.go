//go:build it

package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/wire"
)

// TestMain runs the package's tests, then asks Kafka's own transactions
// tool whether any transaction on a snapshot topic is left hanging.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 && kafkatest.Available() {
		if err := findHanging(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// findHanging runs `kafka-transactions find-hanging` on the broker and
// fails if it lists a transaction on a snapshot topic.
func findHanging() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := kafkatest.RunTool(ctx, "org.apache.kafka.tools.TransactionsCommand",
		"--bootstrap-server", os.Getenv(kafkatest.EnvBrokers), "find-hanging", "--broker-id", "1")
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "Topic") {
		return fmt.Errorf("find-hanging: unexpected output:\n%s", out)
	}
	var hanging []string
	for _, l := range lines[1:] {
		if strings.Contains(l, "-snapshots") {
			hanging = append(hanging, l)
		}
	}
	if len(hanging) > 0 {
		return fmt.Errorf("find-hanging found hanging transactions on snapshot topics:\n%s", strings.Join(hanging, "\n"))
	}
	return nil
}

// realWorld is a pair of fresh topics on the shared broker, and a group
// member for identities.
type realWorld struct {
	t       *testing.T
	brokers []string
	adm     *kadm.Client
	input   store.TopicPartition
	snaps   store.TopicPartition
	group   string
	member  *kgo.Client
}

func newRealWorld(t *testing.T) *realWorld {
	brokers := kafkatest.Brokers(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	w := &realWorld{t: t, brokers: brokers, adm: kadm.NewClient(cl)}
	name := fmt.Sprintf("rec-%d", time.Now().UnixNano())
	w.input = store.TopicPartition{Topic: name}
	w.snaps = store.TopicPartition{Topic: kafka.DefaultSnapshotTopic(name, name)}
	w.group = name + "-group"
	ctx := context.Background()
	compact := "compact"
	if err := kafka.CreateTopic(ctx, cl, name, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := kafka.CreateTopic(ctx, cl, w.snaps.Topic, 1, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.adm.DeleteTopics(context.Background(), name, w.snaps.Topic) })
	w.member, err = kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(w.group), kgo.ConsumeTopics(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.member.Close)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		w.member.PollFetches(pctx) // drives the join
		cancel()
		if _, g := w.member.GroupMetadata(); g > 0 {
			return w
		}
	}
	t.Fatal("the group member did not join within a minute")
	return nil
}

func (w *realWorld) identity() store.IdentityReader {
	return store.IdentityFunc(func() store.GroupIdentity {
		m, g := w.member.GroupMetadata()
		return store.GroupIdentity{Group: w.group, MemberID: m, Generation: g}
	})
}

// signalOn is a slog handler that closes a channel when a message with the
// given prefix is logged.
type signalOn struct {
	slog.Handler
	prefix string
	ch     chan struct{}
}

func (h *signalOn) Enabled(context.Context, slog.Level) bool { return true }

func (h *signalOn) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		select {
		case <-h.ch:
		default:
			close(h.ch)
		}
	}
	return nil
}

func (w *realWorld) partition(stall time.Duration, log *slog.Logger) store.Partition {
	b, err := kafka.New(context.Background(), kafka.Config{
		Mode: store.Transactional, SeedBrokers: w.brokers, TransactionalIDPrefix: w.input.Topic,
		RecoveryStallTimeout: stall, Logger: log,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = b.Close() })
	p, err := b.Acquire(context.Background(), store.Acquisition{Input: w.input, Identity: w.identity()})
	if err != nil {
		w.t.Fatal(err)
	}
	return p
}

func (w *realWorld) foreign(timeout time.Duration, recs ...wire.Record) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.brokers...), kgo.TransactionalID(w.input.Topic+"-foreign"),
		kgo.TransactionTimeout(timeout), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(cl.Close)
	if err := cl.BeginTransaction(); err != nil {
		w.t.Fatal(err)
	}
	if err := cl.ProduceSync(context.Background(), toKgo(w.snaps, recs)...).FirstErr(); err != nil {
		w.t.Fatal(err)
	}
	return cl
}

// Recovery waits out a foreign open transaction and returns the committed
// snapshot above it.
func TestRecoveryWaitsOutAForeignTransactionOnKafka(t *testing.T) {
	w := newRealWorld(t)
	started := &signalOn{Handler: slog.DiscardHandler, prefix: "recovery target is above the last stable offset", ch: make(chan struct{})}
	p := w.partition(time.Minute, slog.New(started))
	ctx := context.Background()
	if err := writeOne(ctx, p, store.Snapshot{Key: []byte("a"), Value: []byte("1"), Offset: 1}); err != nil {
		t.Fatal(err)
	}
	foreign := w.foreign(time.Minute, wire.EncodeSnapshot("", store.Snapshot{Key: []byte("foreign"), Value: []byte("x"), Offset: 2}))
	if err := writeOne(ctx, p, store.Snapshot{Key: []byte("b"), Value: []byte("2"), Offset: 3}); err != nil {
		t.Fatal(err)
	}
	res := make(chan recoveredSnaps, 1)
	go func() { res <- collectSnaps(p) }()
	<-started.ch // the read captured a target above the pin and waits
	select {
	case r := <-res:
		t.Fatalf("recovery ended behind an open transaction: %v %v", r.keys, r.err)
	default:
	}
	if err := foreign.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil || strings.Join(r.keys, ",") != "a=1,b=2" {
		t.Fatalf("recovered %v (%v), want a=1,b=2", r.keys, r.err)
	}
}

// A foreign transaction kept open past the stall deadline fails the read
// with the open-transaction diagnosis.
func TestStallDeadlineNamesAnOpenTransactionOnKafka(t *testing.T) {
	w := newRealWorld(t)
	p := w.partition(3*time.Second, nil)
	ctx := context.Background()
	if err := writeOne(ctx, p, store.Snapshot{Key: []byte("a"), Value: []byte("1"), Offset: 1}); err != nil {
		t.Fatal(err)
	}
	foreign := w.foreign(time.Minute, wire.EncodeSnapshot("", store.Snapshot{Key: []byte("foreign"), Value: []byte("x"), Offset: 2}))
	defer foreign.EndTransaction(ctx, kgo.TryAbort)
	r := collectSnaps(p)
	var se *store.RecoveryStalledError
	if !errors.As(r.err, &se) || se.Cause != store.StallOpenTransaction || se.LogEnd < se.Target {
		t.Fatalf("err = %v, want a stall diagnosed as an open transaction", r.err)
	}
	if se.Stalled < 3*time.Second {
		t.Fatalf("stalled %s, below the 3s deadline", se.Stalled)
	}
}

type recoveredSnaps struct {
	keys []string
	err  error
}

func collectSnaps(p store.Partition) recoveredSnaps {
	var r recoveredSnaps
	for s, err := range p.Recover(context.Background(), nil) {
		if err != nil {
			r.err = err
			break
		}
		r.keys = append(r.keys, string(s.Key)+"="+string(s.Value))
	}
	return r
}
