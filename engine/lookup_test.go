package engine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"
	"github.com/snapfence/snapfence/engine/view"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// lookupCluster is where lookupWaitsScript runs: kfake in a synctest
// bubble or a real broker.
type lookupCluster struct {
	seeds  []string
	opts   []kgo.Opt // the clients' options (kfake's virtual dialer)
	prefix string    // of the topics, group and transactional ids
	// until waits for what it observes, failing after a minute.
	until func(what string, done func() bool)
}

// lookupWaitsScript: a fold looks a customer's tier up in a View of a
// plain compacted topic, whose latest row is in a transaction still open
// when the engine starts. The partition must fold nothing until the view
// has caught up past that transaction, and then see its row: a fold that
// ran earlier would see the older row ("gold").
func lookupWaitsScript(t *testing.T, c lookupCluster) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	input, tiers := c.prefix+"orders", c.prefix+"tiers"
	admin, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.seeds...)}, c.opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	compact := "compact"
	for _, tp := range []struct {
		name string
		cfg  map[string]*string
	}{{input, nil}, {kafka.DefaultSnapshotTopic(c.prefix+"shop", input), map[string]*string{"cleanup.policy": &compact}},
		{tiers, map[string]*string{"cleanup.policy": &compact}}} {
		if err := kafka.CreateTopic(ctx, admin, tp.name, 1, 1, tp.cfg); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.ProduceSync(ctx, &kgo.Record{Topic: tiers, Key: []byte("alice"), Value: []byte(`"gold"`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	txn, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.seeds...), kgo.TransactionalID(c.prefix + "tiers-writer")}, c.opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, &kgo.Record{Topic: tiers, Key: []byte("alice"), Value: []byte(`"platinum"`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	b, err := kafka.New(ctx, kafka.Config{Mode: store.Transactional, SeedBrokers: c.seeds, TransactionalIDPrefix: c.prefix + "shop", ClientOpts: c.opts})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	view, err := view.New(ctx, view.Config[string]{Store: b, Topic: tiers, Plain: true, Codec: engine.JSON[string]()})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer view.Close()
	wg.Go(func() { _ = view.Run(ctx) })

	var folds atomic.Int32
	var seen atomic.Value
	e, err := engine.New(engine.Config[string]{
		Codec: engine.String(), Store: b, Tables: []engine.Table{view},
		Fold: func(key []byte, _ string, _ bool, _ engine.Record) (engine.Result[string], error) {
			tier, _, err := view.Get(key)
			if err != nil {
				return engine.Result[string]{}, err
			}
			folds.Add(1)
			seen.Store(tier)
			return engine.Set(tier), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := admin.ProduceSync(ctx, &kgo.Record{Topic: input, Key: []byte("alice"), Value: []byte("order")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	wg.Go(func() {
		runErr <- e.Run(ctx, kafkaio.Config{SeedBrokers: c.seeds, Group: c.prefix + "shop", Topics: []string{input}, ClientOpts: c.opts})
	})
	// However the test ends, Run ends before the engine is closed.
	defer func() {
		cancel()
		<-runErr
	}()
	tp := store.TopicPartition{Topic: input, Partition: 0}
	c.until("the partition recovered and waiting for its table, the view at the open transaction", func() bool {
		st, vst := e.Status(), view.Status()
		return len(st.Partitions) == 1 && st.Partitions[0].State == engine.StateRecovering && st.Partitions[0].Recovery.Done == false &&
			st.Partitions[0].Recovery.Target >= 0 && st.Partitions[0].Recovery.Position >= st.Partitions[0].Recovery.Target &&
			vst.Partitions[0].LogEnd >= 0 && vst.Partitions[0].Lag == 0 && !vst.CaughtUp
	})
	if n := folds.Load(); n != 0 {
		t.Fatalf("%d folds before the table caught up (seen %v)", n, seen.Load())
	}
	if got, _, _ := view.Get([]byte("alice")); got != "gold" {
		t.Fatalf("the view shows %q before the transaction commits", got)
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	c.until("alice folded", func() bool {
		en, ok, err := e.Get(ctx, tp, []byte("alice"), engine.ReadLatest)
		return err == nil && ok && en.Offset == 0
	})
	if got := seen.Load(); got != "platinum" || folds.Load() != 1 {
		t.Fatalf("the fold saw %v (%d folds), want the row the view caught up to, platinum, once", got, folds.Load())
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
	runErr <- nil // for the deferred wait
}

// A lookup waits for its table, on kfake.
func TestLookupWaitsForItsTableOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		lookupWaitsScript(t, lookupCluster{seeds: w.c.ListenAddrs(), opts: []kgo.Opt{kgo.Dialer(w.net.DialContext)}, prefix: "lw-",
			until: func(what string, done func() bool) {
				t.Helper()
				for range 600 {
					if done() {
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
				t.Fatalf("%s: not within a minute", what)
			}})
	})
}
