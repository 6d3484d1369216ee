//go:build it

package engine_test

import (
	"context"
	"fmt"
	"strings"
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

// brokerWorld is a fresh input topic and group on the integration run's
// Kafka broker, in real time.
type brokerWorld struct {
	t       *testing.T
	brokers []string
	prod    *kgo.Client
	adm     *kadm.Client
	topic   string
	want    ledger
}

func newBrokerWorld(t *testing.T) *brokerWorld {
	w := &brokerWorld{t: t, brokers: kafkatest.Brokers(t), want: ledger{}, topic: fmt.Sprintf("accounts-%d", time.Now().UnixNano())}
	prod, err := kgo.NewClient(kgo.SeedBrokers(w.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	w.prod, w.adm = prod, kadm.NewClient(prod)
	compact := "compact"
	ctx := context.Background()
	if err := kafka.CreateTopic(ctx, w.prod, w.topic, 2, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := kafka.CreateTopic(ctx, w.prod, w.snapshots(), 2, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.adm.DeleteTopics(context.Background(), w.topic, w.snapshots()) })
	return w
}

// snapshots is the world's snapshot topic: the default of its
// application, named after the topic.
func (w *brokerWorld) snapshots() string { return kafka.DefaultSnapshotTopic(w.topic, w.topic) }

func (w *brokerWorld) produce(events ...string) {
	for _, ev := range events {
		k, v, _ := strings.Cut(ev, "=")
		r := &kgo.Record{Topic: w.topic, Partition: int32(len(k) % 2), Key: []byte(k), Value: []byte(v)}
		if err := w.prod.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			w.t.Fatal(err)
		}
		w.want.apply(k, v)
	}
}

func (w *brokerWorld) runner(protocol kgo.Opt) *engine.Member[int] {
	return w.runnerWith(protocol, nil)
}

// runnerWith is runner with its engine's configuration changed by mod (if
// set).
func (w *brokerWorld) runnerWith(protocol kgo.Opt, mod func(*engine.Config[int])) *engine.Member[int] {
	return w.runnerOf(protocol, mod, nil)
}

// killableRunnerWith is runnerWith with a kill switch (crashAndLeave).
func (w *brokerWorld) killableRunnerWith(protocol kgo.Opt, mod func(*engine.Config[int])) (*engine.Member[int], *killSwitch) {
	var k *killSwitch
	r := w.runnerOf(protocol, mod, func(newSource engine.Input) engine.Input {
		newSource, k = killable(newSource)
		return newSource
	})
	return r, k
}

// runnerOf is runnerWith with its source factory wrapped by wrap (if set).
func (w *brokerWorld) runnerOf(protocol kgo.Opt, mod func(*engine.Config[int]),
	wrap func(engine.Input) engine.Input) *engine.Member[int] {
	b, err := kafka.New(context.Background(), kafka.Config{Mode: store.Transactional, SeedBrokers: w.brokers, TransactionalIDPrefix: w.topic})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = b.Close() })
	cfg := engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: b, Dir: w.t.TempDir(),
		PersistInterval: 200 * time.Millisecond, CommitInterval: 400 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	e, err := engine.New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	// Dynamic, as the kfake world's (fakeWorld.source says why).
	var newSource engine.Input = kafkaio.Config{
		SeedBrokers: w.brokers, Group: w.topic + "-group", Topics: []string{w.topic}, DynamicMembership: true,
		ClientOpts: []kgo.Opt{protocol, kgo.SessionTimeout(6 * time.Second)},
	}
	if wrap != nil {
		newSource = wrap(newSource)
	}
	r, err := e.Join(newSource)
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

func (w *brokerWorld) drain(r *engine.Member[int]) {
	w.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if err := r.Step(context.Background()); err != nil {
			w.t.Fatal(err)
		}
		done := w.caughtUp()
		if done && len(r.Flows()) == 2 {
			return
		}
	}
	w.t.Fatalf("the runner did not commit to the end of the input in a minute; errors: %v", r.Errors())
}

func (w *brokerWorld) check(r *engine.Member[int]) { checkLedger(w.t, w.want, w.topic, r) }

// The kafka-flow restart test against Kafka 4.3.1, under each consumer
// protocol: four restarts, state recovered, processing continues, a
// delete sticks.
func TestRestartsRecoverStateOnKafka(t *testing.T) {
	for name, protocol := range protocols {
		t.Run(name, func(t *testing.T) {
			w := newBrokerWorld(t)
			restartScript(t, w.produce, func() *engine.Member[int] { return w.runner(protocol) }, w.drain, w.check)
		})
	}
}
