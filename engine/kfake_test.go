package engine_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// fakeWorld is a kfake cluster on a virtual network, for tests inside a
// synctest bubble.
type fakeWorld struct {
	t    *testing.T
	net  *kfake.VirtualNetwork
	c    *kfake.Cluster
	prod *kgo.Client
	adm  *kadm.Client
	want ledger
}

func newFakeWorld(t *testing.T) *fakeWorld {
	w := &fakeWorld{t: t, net: new(kfake.VirtualNetwork), want: ledger{}}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ListenFn(w.net.Listen))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	w.c = c
	w.prod = w.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	w.adm = kadm.NewClient(w.prod)
	ctx := context.Background()
	if err := kafka.CreateTopic(ctx, w.prod, "accounts", 2, 1, nil); err != nil {
		t.Fatal(err)
	}
	compact := "compact"
	if err := kafka.CreateTopic(ctx, w.prod, "bank-accounts-snapshots", 2, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *fakeWorld) opts() []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(w.c.ListenAddrs()...), kgo.Dialer(w.net.DialContext)}
}

func (w *fakeWorld) client(opts ...kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(append(w.opts(), opts...)...)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(cl.Close)
	return cl
}

func (w *fakeWorld) produce(events ...string) {
	for _, ev := range events {
		k, v, _ := strings.Cut(ev, "=")
		r := &kgo.Record{Topic: "accounts", Partition: int32(len(k) % 2), Key: []byte(k), Value: []byte(v)}
		if err := w.prod.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			w.t.Fatal(err)
		}
		w.want.apply(k, v)
	}
}

func (w *fakeWorld) engine() *engine.Engine[int] { return w.engineWith(nil) }

// engineWith is engine with its configuration changed by mod (if set).
func (w *fakeWorld) engineWith(mod func(*engine.Config[int])) *engine.Engine[int] {
	b, err := kafka.New(context.Background(), kafka.Config{
		Mode: store.Transactional, SeedBrokers: w.c.ListenAddrs(), TransactionalIDPrefix: "bank",
		ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext)},
	})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = b.Close() })
	cfg := engine.Config[int]{
		Fold: balance, Codec: intCodec{}, Store: b, Dir: w.t.TempDir(),
		PersistInterval: time.Second, CommitInterval: 2 * time.Second,
	}
	if mod != nil {
		mod(&cfg)
	}
	e, err := engine.New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	return e
}

// protocols are the consumer protocols the engine runs under, as franz-go
// options.
var protocols = map[string]kgo.Opt{
	"classic-eager":       kgo.Balancers(kgo.RangeBalancer()),
	"classic-cooperative": kgo.Balancers(kgo.CooperativeStickyBalancer()),
	"consumer":            kgo.ServerSideBalancer(),
}

func (w *fakeWorld) runner(e *engine.Engine[int], protocol kgo.Opt) *engine.Member[int] {
	r, err := e.Join(w.source(protocol))
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// killableRunner is runner with a kill switch (crashAndLeave).
func (w *fakeWorld) killableRunner(e *engine.Engine[int], protocol kgo.Opt) (*engine.Member[int], *killSwitch) {
	newSource, k := killable(w.source(protocol))
	r, err := e.Join(newSource)
	if err != nil {
		w.t.Fatal(err)
	}
	return r, k
}

// source is a dynamic member's input, whatever its engine's Dir: these
// tests hand partitions over through a closing member's leave, which a
// static member does not send (classic), or sends as a temporary leave
// that reserves its partitions (the consumer protocol; kfake, unlike
// Kafka, then reserves them past the session timeout, for good).
// staticSource is a member with the default membership.
func (w *fakeWorld) source(protocol kgo.Opt) engine.Input {
	in := w.staticSource(protocol)
	in.DynamicMembership = true
	return in
}

func (w *fakeWorld) staticSource(protocol kgo.Opt) kafkaio.Config {
	return kafkaio.Config{
		SeedBrokers: w.c.ListenAddrs(), Group: "bank", Topics: []string{"accounts"},
		ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext), protocol},
	}
}

func (w *fakeWorld) caughtUp() bool {
	ctx := context.Background()
	ends, err := w.adm.ListEndOffsets(ctx, "accounts")
	if err != nil {
		return false
	}
	committed, err := w.adm.FetchOffsets(kadm.RequireStable(ctx), "bank")
	if err != nil {
		return false
	}
	ok := true
	ends.Each(func(o kadm.ListedOffset) {
		c, found := committed.Lookup(o.Topic, o.Partition)
		ok = ok && (found && c.At == o.Offset || !found && o.Offset == 0) // an idle partition commits nothing
	})
	return ok
}

// drain steps r, the world's one member, until it runs both input
// partitions and every event is folded and committed. Running both comes
// first: a member just started may not have its assignment yet while the
// offsets committed before it are already at the end.
func (w *fakeWorld) drain(r *engine.Member[int]) {
	w.t.Helper()
	start := time.Now()
	for range 200 {
		if err := r.Step(context.Background()); err != nil {
			w.t.Fatal(err)
		}
		if len(r.Flows()) == 2 && w.caughtUp() && engine.Settled(r) {
			return
		}
	}
	w.t.Fatalf("the runner did not commit to the end of the input in 200 steps (%v): running %d partitions, caught up %v, settled %v; errors: %v",
		time.Since(start), len(r.Flows()), w.caughtUp(), engine.Settled(r), r.Errors())
}

func (w *fakeWorld) check(r *engine.Member[int]) { checkLedger(w.t, w.want, "accounts", r) }

// The kafka-flow restart test on kfake with store/kafka, under each
// consumer protocol: four restarts, state recovered, processing continues,
// a delete sticks.
func TestRestartsRecoverStateOnKfake(t *testing.T) {
	for name, protocol := range protocols {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t)
				restartScript(t, w.produce, func() *engine.Member[int] { return w.runner(w.engine(), protocol) }, w.drain, w.check)
			})
		})
	}
}

// committedAtEnd reports whether the group's stable committed offset of tp
// is at the partition's end.
func (w *fakeWorld) committedAtEnd(tp store.TopicPartition) bool {
	return committedAtEnd(w.adm, "bank", tp)
}

// committedAtEnd reports whether group's committed offset of tp is at the
// partition's end, as adm's cluster answers.
func committedAtEnd(adm *kadm.Client, group string, tp store.TopicPartition) bool {
	ctx := context.Background()
	ends, err := adm.ListEndOffsets(ctx, tp.Topic)
	if err != nil {
		return false
	}
	end, ok := ends.Lookup(tp.Topic, tp.Partition)
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil || !ok {
		return false
	}
	c, found := committed.Lookup(tp.Topic, tp.Partition)
	return found && c.At == end.Offset || !found && end.Offset == 0
}

// A member's status says it joined only with the identity it joined with:
// its group, member id and generation, from the assignment on (the
// rebalance callback runs between polls, before the next poll's status).
func TestStatusJoinedCarriesTheIdentityOnKfake(t *testing.T) {
	for name, protocol := range protocols {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t)
				w.produce("alice=+1", "bob=+2")
				r := w.runner(w.engine(), protocol)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- r.Run(ctx) }()
				for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) { // virtual time
					synctest.Wait()
					st := r.Status()
					if !st.Joined {
						continue
					}
					if id := st.Identity; id.Group == "" || id.MemberID == "" || id.Generation < 0 {
						t.Fatalf("joined with identity %+v, want the group, member and generation", id)
					}
					break
				}
				if !r.Status().Joined {
					t.Fatal("not joined within a minute")
				}
				cancel()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}
