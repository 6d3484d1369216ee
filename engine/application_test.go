package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// appOnSim is one application of the two on the simulated cluster's
// "accounts": its backend, its group, its engine and runner.
type appOnSim struct {
	name, group string
	store       *sim.Backend
	runner      *engine.Member[int]
	emitted     int // outputs delivered (at least once: a replay emits again)
}

func startApp(t *testing.T, c *sim.Cluster, cfg sim.BackendConfig, group string) *appOnSim {
	t.Helper()
	cfg.Mode, cfg.CreateTopics = store.Transactional, true
	b, err := c.NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	app := &appOnSim{name: b.Application(), group: group, store: b}
	e, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: b, PersistInterval: time.Second, CommitInterval: time.Second,
		Emit: func(_ context.Context, outs []engine.Output) error { app.emitted += len(outs); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	r, err := e.Join(simsource.New(c, group, sim.ClassicEager, 0, "accounts"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	app.runner = r
	return app
}

// committedAll says the app's group committed every partition of accounts
// to its end.
func (a *appOnSim) committedAll(c *sim.Cluster) bool {
	for p := range int32(2) {
		tp := store.TopicPartition{Topic: "accounts", Partition: p}
		_, _, end, _ := c.Offsets(tp)
		if off, _ := c.CommittedOffset(a.group, tp); off != end {
			return false
		}
	}
	return true
}

// Two applications on one input topic, each named once, keep their
// states apart by default: each has its own snapshot topic, and each
// folds the whole input from the start, whatever the other did first.
func TestTwoApplicationsOnOneInputKeepTheirStatesApartOnSim(t *testing.T) {
	c := sim.New(sim.Config{Seed: 3})
	if err := c.CreateTopic("accounts", sim.TopicConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	want := ledger{}
	produce := func(events ...string) { produceAccounts(t, c, want, events...) }
	produce("alice=+10", "bob=+5", "carol=+7", "alice=-3")
	bank := startApp(t, c, sim.BackendConfig{Application: "bank"}, "bank")
	drainApps(t, c, bank)
	checkLedger(t, want, "accounts", bank.runner)

	produce("bob=+1", "dave=+4")
	audit := startApp(t, c, sim.BackendConfig{Application: "audit"}, "audit")
	drainApps(t, c, bank, audit)
	checkLedger(t, want, "accounts", bank.runner)
	checkLedger(t, want, "accounts", audit.runner)
	// Each folded every record itself: an application that took the
	// other's snapshots would skip the records they cover, and emit
	// nothing for them.
	if bank.emitted < 6 || audit.emitted < 6 {
		t.Errorf("outputs emitted: bank %d, audit %d; want each at least one per record (6)", bank.emitted, audit.emitted)
	}
	for _, topic := range []string{"bank-accounts-snapshots", "audit-accounts-snapshots"} {
		if _, ok := c.Topic(topic); !ok {
			t.Errorf("no snapshot topic %s", topic)
		}
	}
	if _, ok := c.Topic("accounts-snapshots"); ok {
		t.Error("a shared accounts-snapshots was created")
	}
}

// A second application misconfigured with the first's transactional.id
// prefix fails to start, naming the id, and the first, which was already
// running, folds and commits the records produced after as before: the
// newcomer took nothing over.
func TestASharedTransactionalIDPrefixStopsTheNewcomerOnSim(t *testing.T) {
	c := sim.New(sim.Config{Seed: 3})
	if err := c.CreateTopic("accounts", sim.TopicConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	want := ledger{}
	produce := func(events ...string) { produceAccounts(t, c, want, events...) }
	produce("alice=+10", "bob=+5")
	bank := startApp(t, c, sim.BackendConfig{Application: "bank", TransactionalIDPrefix: "shared"}, "bank")
	drainApps(t, c, bank)

	audit := startApp(t, c, sim.BackendConfig{Application: "audit", TransactionalIDPrefix: "shared"}, "audit")
	ctx := context.Background()
	var err error
	for range 10 {
		if err = audit.runner.Step(ctx); err != nil {
			break
		}
		c.Advance(100 * time.Millisecond)
	}
	var fe *store.ForeignStateError
	if !errors.As(err, &fe) || !strings.HasPrefix(fe.TransactionalID, "shared-accounts-") || fe.Application != "audit" {
		t.Fatalf("the newcomer's step: %v, want a ForeignStateError naming a shared- transactional.id", err)
	}
	if !strings.Contains(err.Error(), "TransactionalIDPrefix") {
		t.Errorf("%q does not give the fix", err)
	}
	// The first application is undisturbed: records produced after the
	// newcomer's start are folded and committed, with no fence.
	produce("alice=+1", "carol=+2", "bob=-5")
	drainApps(t, c, bank)
	checkLedger(t, want, "accounts", bank.runner)
	st := bank.runner.Status()
	if len(st.Partitions) != 2 {
		t.Fatalf("the first application serves %d partitions, want 2", len(st.Partitions))
	}
	for _, p := range st.Partitions {
		if p.Restarts != 0 {
			t.Errorf("the first application's %s restarted %d times (fenced by the newcomer?)", p.Input, p.Restarts)
		}
	}
}

// produceAccounts appends events "key=value" to the partition of accounts
// the key hashes to, and applies them to want.
func produceAccounts(t *testing.T, c *sim.Cluster, want ledger, events ...string) {
	t.Helper()
	for _, ev := range events {
		k, v, _ := strings.Cut(ev, "=")
		if _, err := c.Produce(store.TopicPartition{Topic: "accounts", Partition: int32(len(k) % 2)}, wire.Record{Key: []byte(k), Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
		want.apply(k, v)
	}
}

// drainApps steps the apps' runners, a second of virtual time apart,
// until each app's group has committed every partition to its end.
func drainApps(t *testing.T, c *sim.Cluster, apps ...*appOnSim) {
	t.Helper()
	ctx := context.Background()
	for range 60 {
		done := true
		for _, a := range apps {
			if err := a.runner.Step(ctx); err != nil {
				t.Fatalf("%s: %v", a.name, err)
			}
			done = done && a.committedAll(c)
		}
		c.Advance(time.Second)
		if done {
			return
		}
	}
	t.Fatal("the applications did not commit to the end of the input in 60s")
}

// On kfake, two applications on one input topic, each named once in its
// store and run with no Group (the application's name is the group's):
// each creates and fills its own snapshot topic, and each folds and emits
// every record.
func TestTwoApplicationsOnOneInputOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		w.produce("alice=+10", "bob=+5", "carol=+7", "alice=-3")
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		errs := make([]error, 2)
		emitted := make([]atomic.Int64, 2)
		for i, app := range []string{"bank", "audit"} {
			b, err := kafka.New(ctx, kafka.Config{Mode: store.Transactional, SeedBrokers: w.c.ListenAddrs(), Application: app, CreateTopics: true,
				ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext)}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			e, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: b, PersistInterval: time.Second, CommitInterval: time.Second,
				Emit: func(_ context.Context, outs []engine.Output) error { emitted[i].Add(int64(len(outs))); return nil }})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close() })
			wg.Go(func() {
				errs[i] = e.Run(ctx, kafkaio.Config{SeedBrokers: w.c.ListenAddrs(), Topics: []string{"accounts"},
					ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext)}})
			})
		}
		done := func() bool {
			for _, g := range []string{"bank", "audit"} {
				for p := range int32(2) {
					if !committedAtEnd(w.adm, g, store.TopicPartition{Topic: "accounts", Partition: p}) {
						return false
					}
				}
			}
			return true
		}
		for deadline := time.Now().Add(time.Minute); !done(); time.Sleep(10 * time.Millisecond) { // virtual time
			if time.Now().After(deadline) {
				t.Fatal("the groups bank and audit did not both commit the input within a minute")
			}
		}
		cancel()
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("application %d: %v", i, err)
			}
		}
		if emitted[0].Load() < 4 || emitted[1].Load() < 4 {
			t.Errorf("outputs: bank %d, audit %d; want each at least one per record (4)", emitted[0].Load(), emitted[1].Load())
		}
		tds, err := w.adm.ListTopics(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !tds.Has("bank-accounts-snapshots") || !tds.Has("audit-accounts-snapshots") || tds.Has("accounts-snapshots") {
			t.Errorf("topics %v: want bank-accounts-snapshots and audit-accounts-snapshots, and no accounts-snapshots", tds.Names())
		}
	})
}
