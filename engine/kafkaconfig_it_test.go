//go:build it

package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// brokerEngine is an engine over a fresh Transactional store/kafka backend
// on the integration broker, creating missing snapshot topics.
func brokerEngine(t *testing.T, brokers []string, prefix string) *engine.Engine[int] {
	t.Helper()
	return brokerEngineWith(t, brokers, prefix, nil)
}

// brokerEngineWith is brokerEngine with its configuration changed by mod
// (if set).
func brokerEngineWith(t *testing.T, brokers []string, prefix string, mod func(*engine.Config[int])) *engine.Engine[int] {
	t.Helper()
	b, err := kafka.New(context.Background(), kafka.Config{Mode: store.Transactional, SeedBrokers: brokers,
		TransactionalIDPrefix: prefix, CreateTopics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	cfg := engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: b, Dir: t.TempDir(),
		PersistInterval: 200 * time.Millisecond, CommitInterval: 400 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	return e
}

func brokerAdmin(t *testing.T, brokers []string) (*kgo.Client, *kadm.Client) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, kadm.NewClient(cl)
}

// A missing input topic on Kafka: Join and Run return a
// *store.ConfigError naming it within seconds, and nothing joins the group.
func TestMissingInputTopicOnKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	_, adm := brokerAdmin(t, brokers)
	topic := fmt.Sprintf("missing-%d", time.Now().UnixNano())
	cfg := kafkaio.Config{SeedBrokers: brokers, Group: topic + "-group", Topics: []string{topic}}
	start := time.Now()
	_, err := brokerEngine(t, brokers, topic).Join(cfg)
	cerr, ok := errors.AsType[*store.ConfigError](err)
	if !ok || cerr.Subject != fmt.Sprintf("topic %q", topic) || !strings.Contains(cerr.Fix, "CreateTopics") {
		t.Fatalf("Join: %v, want a *store.ConfigError naming %s", err, topic)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := brokerEngine(t, brokers, topic).Run(ctx, cfg); !errors.Is(err, store.ErrMisconfigured) {
		t.Fatalf("Run: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the two checks took %v", d)
	}
	t.Logf("Join and Run failed in %v: %v", time.Since(start), err)
	dg, err := adm.DescribeGroups(context.Background(), cfg.Group)
	if err != nil {
		t.Fatal(err)
	}
	if g := dg[cfg.Group]; len(g.Members) != 0 {
		t.Fatalf("group %s has members %v", cfg.Group, g.Members)
	}
}

// CreateTopics creates the missing input topic on Kafka with the partitions
// asked for, and the engine folds what is produced to it.
func TestCreateInputTopicsOnKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	prod, adm := brokerAdmin(t, brokers)
	topic := fmt.Sprintf("created-%d", time.Now().UnixNano())
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), topic, kafka.DefaultSnapshotTopic(topic, topic)) })
	r, err := brokerEngine(t, brokers, topic).Join(kafkaio.Config{
		SeedBrokers: brokers, Group: topic + "-group", Topics: []string{topic},
		CreateTopics: true, CreatePartitions: 3, CreateReplicationFactor: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	tds, err := adm.ListTopics(context.Background(), topic)
	if err != nil || tds[topic].Err != nil || len(tds[topic].Partitions) != 3 {
		t.Fatalf("created topic: %+v %v", tds[topic], err)
	}
	tp := store.TopicPartition{Topic: topic, Partition: 2}
	for _, v := range []string{"10", "5", "-3"} {
		if err := prod.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: 2, Key: []byte("alice"), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for !committedAtEnd(adm, topic+"-group", tp) {
		if err := r.Step(ctx); err != nil {
			t.Fatalf("%v (errors: %v)", err, r.Errors())
		}
	}
	if got, ok, err := r.State(tp, []byte("alice")); err != nil || !ok || got != 12 {
		t.Fatalf("alice: %d %v %v, want 12", got, ok, err)
	}
}

// newTopicRunner is a runner on a fresh two-partition topic of the
// broker, with cfg's group settings.
func newTopicRunner(t *testing.T, brokers []string, topic string, mod func(*kafkaio.Config)) (*engine.Member[int], error) {
	t.Helper()
	cfg := kafkaio.Config{SeedBrokers: brokers, Group: topic + "-group", Topics: []string{topic}}
	mod(&cfg)
	return brokerEngine(t, brokers, topic).Join(cfg)
}

// stepUntilErr steps r until a step fails, at most a minute.
func stepUntilErr(t *testing.T, r *engine.Member[int]) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		if err := r.Step(ctx); err != nil {
			return err
		}
	}
}

// A session timeout the broker refuses (above group.max.session.timeout.ms,
// 30 min by default) fails the poll with a *store.ConfigError naming
// kafkaio.Config.SessionTimeout, not a rejoin loop.
func TestRefusedSessionTimeoutOnKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cl, adm := brokerAdmin(t, brokers)
	topic := fmt.Sprintf("session-%d", time.Now().UnixNano())
	if err := kafka.CreateTopic(context.Background(), cl, topic, 2, 1, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), topic, kafka.DefaultSnapshotTopic(topic, topic)) })
	r, err := newTopicRunner(t, brokers, topic, func(c *kafkaio.Config) { c.SessionTimeout = 2 * time.Hour })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	err = stepUntilErr(t, r)
	cerr, ok := errors.AsType[*store.ConfigError](err)
	if !ok || cerr.Subject != "kafkaio.Config.SessionTimeout" {
		t.Fatalf("got %v, want a *store.ConfigError naming kafkaio.Config.SessionTimeout", err)
	}
	t.Log(err)
}

// Two processes with one InstanceID: the second fences the first, whose
// poll fails with a *store.ConfigError naming kafkaio.Config.InstanceID.
func TestDuplicateInstanceIDOnKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cl, adm := brokerAdmin(t, brokers)
	topic := fmt.Sprintf("instance-%d", time.Now().UnixNano())
	if err := kafka.CreateTopic(context.Background(), cl, topic, 2, 1, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), topic, kafka.DefaultSnapshotTopic(topic, topic)) })
	static := func(c *kafkaio.Config) { c.InstanceID = "pod-0" }
	first, err := newTopicRunner(t, brokers, topic, static)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for len(first.Flows()) != 2 {
		if err := first.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	second, err := newTopicRunner(t, brokers, topic, static)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Close(context.Background()) })
	for len(second.Flows()) != 2 {
		if err := second.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	err = stepUntilErr(t, first)
	cerr, ok := errors.AsType[*store.ConfigError](err)
	if !ok || cerr.Subject != "kafkaio.Config.InstanceID" {
		t.Fatalf("got %v, want a *store.ConfigError naming kafkaio.Config.InstanceID", err)
	}
	t.Log(err)
}

// On Kafka, with nothing configured but a Dir: a member restarted on the
// same Dir rejoins as the same static member, gets back the partition its
// cache holds and recovers it from the cache (a delta), while the other
// member, stepping all along, never takes it over; under the classic
// protocol (the default balancer) and the consumer protocol (whose
// temporary leave reserves the partition for it).
func TestRestartOnItsDirGetsItsPartitionsBackWarmOnKafka(t *testing.T) {
	for name, protocol := range map[string][]kgo.Opt{"classic": nil, "consumer": {kgo.ServerSideBalancer()}} {
		t.Run(name, func(t *testing.T) {
			brokers := kafkatest.Brokers(t)
			cl, adm := brokerAdmin(t, brokers)
			topic := fmt.Sprintf("restart-%s-%d", name, time.Now().UnixNano())
			if err := kafka.CreateTopic(context.Background(), cl, topic, 2, 1, nil); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { adm.DeleteTopics(context.Background(), topic, kafka.DefaultSnapshotTopic(topic, topic)) })
			produceTo(t, cl, topic, 0, "alice=10")
			produceTo(t, cl, topic, 1, "bob=5")
			group := topic + "-group"
			in := func(dynamic bool) kafkaio.Config {
				return kafkaio.Config{SeedBrokers: brokers, Group: group, Topics: []string{topic}, DynamicMembership: dynamic,
					HeartbeatInterval: 500 * time.Millisecond, ClientOpts: protocol}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			a, err := brokerEngine(t, brokers, topic).Join(in(true))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close(context.Background())
			dir := t.TempDir()
			onDir := func(obs engine.Observer) *engine.Engine[int] {
				return brokerEngineWith(t, brokers, topic, func(c *engine.Config[int]) { c.Dir, c.Observer = dir, obs })
			}
			eb := onDir(nil)
			b, err := eb.Join(in(false))
			if err != nil {
				t.Fatal(err)
			}
			for len(a.Flows()) != 1 || len(b.Flows()) != 1 {
				for _, r := range []*engine.Member[int]{a, b} {
					if err := r.Step(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			held := b.Flows()[0]
			id := b.Source().Identity().InstanceID
			for !committedAtEnd(adm, group, held) {
				if err := b.Step(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// a steps from here on; did it ever take held?
			actx, stopA := context.WithCancel(ctx)
			var wg sync.WaitGroup
			var aErr error
			var moved atomic.Bool
			var movedAt atomic.Int64
			wg.Go(func() {
				for actx.Err() == nil {
					if err := a.Step(actx); err != nil && actx.Err() == nil {
						aErr = err
						return
					}
					if slices.Contains(a.Flows(), held) && !moved.Swap(true) {
						movedAt.Store(time.Now().UnixNano())
					}
				}
			})
			defer func() { stopA(); wg.Wait() }()
			stopped := time.Now()
			if err := b.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := eb.Close(); err != nil {
				t.Fatal(err)
			}
			closed := time.Since(stopped)
			produceTo(t, cl, topic, held.Partition, "carol=7")
			rec := &recoveryLog{}
			b2, err := onDir(rec).Join(in(false))
			if err != nil {
				t.Fatal(err)
			}
			defer b2.Close(context.Background())
			for len(b2.Flows()) != 1 || rec.of(b2.Flows()[0]) == "" {
				if err := b2.Step(ctx); err != nil {
					t.Fatal(err)
				}
			}
			back := time.Since(stopped)
			stopA()
			wg.Wait()
			if aErr != nil {
				t.Fatal(aErr)
			}
			t.Logf("b closed in %v; b2 ran %v again %v after b's Close began", closed.Round(time.Millisecond), held, back.Round(time.Millisecond))
			switch {
			case moved.Load():
				t.Fatalf("a took %v over %v after b's Close began, while its static owner restarted", held,
					time.Unix(0, movedAt.Load()).Sub(stopped).Round(time.Millisecond))
			case b2.Source().Identity().InstanceID != id:
				t.Fatalf("restarted with instance id %q, was %q", b2.Source().Identity().InstanceID, id)
			case b2.Flows()[0] != held:
				t.Fatalf("the restarted member runs %v, held %v", b2.Flows(), held)
			case rec.of(held) != "delta/"+engine.RecoveryCheckpoint:
				t.Fatalf("%v recovered %s, want a delta from the cache", held, rec.of(held))
			}
		})
	}
}

// produceTo writes events "key=value" to partition p of topic.
func produceTo(t *testing.T, cl *kgo.Client, topic string, p int32, events ...string) {
	t.Helper()
	for _, ev := range events {
		k, v, _ := strings.Cut(ev, "=")
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: p, Key: []byte(k), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// On Kafka, under the classic protocol and the default balancer: when a
// second member joins, a partition moves to it only once it has warmed
// the partition up; the first member serves both partitions until then,
// and the new member's takeover is a delta from its warm-up. (The control,
// cooperative-sticky taking the partition cold, is the kfake test's.)
func TestScaleOutMovesAPartitionOnlyOnceWarmedUpOnKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cl, adm := brokerAdmin(t, brokers)
	topic := fmt.Sprintf("scaleout-%d", time.Now().UnixNano())
	if err := kafka.CreateTopic(context.Background(), cl, topic, 2, 1, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), topic, kafka.DefaultSnapshotTopic(topic, topic)) })
	for p := range int32(2) {
		var evs []string
		for k := range 500 {
			evs = append(evs, fmt.Sprintf("key-%d-%d=%d", p, k, k))
		}
		produceTo(t, cl, topic, p, evs...)
	}
	group := topic + "-group"
	in := kafkaio.Config{SeedBrokers: brokers, Group: group, Topics: []string{topic}, HeartbeatInterval: 500 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	step := func(rs ...*engine.Member[int]) {
		for _, r := range rs {
			if err := r.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	a, err := brokerEngine(t, brokers, topic).Join(in)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	parts := []store.TopicPartition{{Topic: topic, Partition: 0}, {Topic: topic, Partition: 1}}
	for len(a.Flows()) != 2 || !committedAtEnd(adm, group, parts[0]) || !committedAtEnd(adm, group, parts[1]) {
		step(a)
	}
	rec := &recoveryLog{}
	b, err := brokerEngineWith(t, brokers, topic, func(c *engine.Config[int]) { c.Observer = rec }).Join(in)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	joined := time.Now()
	var warmedUp map[store.TopicPartition]bool
	for len(b.Flows()) != 1 || len(a.Flows()) != 1 || rec.of(b.Flows()[0]) == "" {
		step(a, b)
		warmedUp = noteWarmedUp(b, warmedUp)
		if warmedUp == nil && len(a.Flows()) != 2 {
			t.Fatalf("a gave up a partition (runs %v) before b warmed one up", a.Flows())
		}
	}
	moved := b.Flows()[0]
	t.Logf("b ran %v %v after it joined, recovered %s", moved, time.Since(joined).Round(time.Millisecond), rec.of(moved))
	switch {
	case !warmedUp[moved]:
		t.Fatalf("b took %v over without warming it up (warmed up: %v)", moved, warmedUp)
	case rec.of(moved) != "delta/"+engine.RecoveryCheckpoint:
		t.Fatalf("%v recovered %s on the new member, want a delta from its warm-up", moved, rec.of(moved))
	}
}

// On Kafka, a static member (a Dir's identity) with LeaveOnClose leaves
// its group for good at Close, under both protocols: the other member
// takes its partition over within half the session, not after it. The
// control: without LeaveOnClose the partition waits for the session.
func TestLeaveOnCloseMovesAStaticMembersPartitionsAtOnceOnKafka(t *testing.T) {
	sessions := map[string]time.Duration{"classic": kafkaio.DefaultSessionTimeout, "consumer": 6 * time.Second} // the test broker's group.consumer.session.timeout.ms
	for name, protocol := range map[string][]kgo.Opt{"classic": nil, "consumer": {kgo.ServerSideBalancer()}} {
		for _, leave := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/leave=%v", name, leave), func(t *testing.T) {
				brokers := kafkatest.Brokers(t)
				cl, adm := brokerAdmin(t, brokers)
				topic := fmt.Sprintf("leave-%s-%v-%d", name, leave, time.Now().UnixNano())
				if err := kafka.CreateTopic(context.Background(), cl, topic, 2, 1, nil); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { adm.DeleteTopics(context.Background(), topic, kafka.DefaultSnapshotTopic(topic, topic)) })
				produceTo(t, cl, topic, 0, "alice=10")
				produceTo(t, cl, topic, 1, "bob=5")
				group := topic + "-group"
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				in := kafkaio.Config{SeedBrokers: brokers, Group: group, Topics: []string{topic}, HeartbeatInterval: 500 * time.Millisecond, ClientOpts: protocol}
				dynamic := in
				dynamic.DynamicMembership = true
				a, err := brokerEngine(t, brokers, topic).Join(dynamic)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close(context.Background())
				static := in
				static.LeaveOnClose = leave
				b, err := brokerEngine(t, brokers, topic).Join(static)
				if err != nil {
					t.Fatal(err)
				}
				for len(a.Flows()) != 1 || len(b.Flows()) != 1 {
					for _, r := range []*engine.Member[int]{a, b} {
						if err := r.Step(ctx); err != nil {
							t.Fatal(err)
						}
					}
				}
				if b.Source().Identity().InstanceID == "" {
					t.Fatal("b is not a static member")
				}
				closed := time.Now()
				if err := b.Close(ctx); err != nil {
					t.Fatal(err)
				}
				for len(a.Flows()) != 2 {
					if err := a.Step(ctx); err != nil {
						t.Fatal(err)
					}
				}
				took, session := time.Since(closed), sessions[name]
				t.Logf("a took b's partition over %v after b's Close began (session %v)", took.Round(time.Millisecond), session)
				if leave && took >= session/2 {
					t.Fatalf("with LeaveOnClose: %v, the session is %v: Close did not leave", took, session)
				}
				if !leave && took < session/2 {
					t.Fatalf("the control: %v: a static member's Close left without LeaveOnClose", took)
				}
			})
		}
	}
}
