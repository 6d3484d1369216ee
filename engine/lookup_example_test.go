package engine_test

import (
	"context"
	"fmt"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// A lookup join: the fold enriches each order with its customer's tier,
// read from a View of the compacted topic "tiers" (plain key/values that
// another service keeps). Config.Tables makes every partition wait, before
// it folds, until the view has caught up. Here the view is stepped over
// the simulated cluster; against Kafka run it (go tiers.Run(ctx)). A tier
// that changes later shows in the orders folded after the view read it:
// a replayed order may see a newer tier than its first fold did
// (docs/design.md, "Lookup joins"), so this fold keeps the tier it saw in
// the state.
func ExampleConfig_tables() {
	ctx := context.Background()
	cluster := sim.New(sim.Config{Seed: 1})
	_ = cluster.CreateTopic("orders", sim.TopicConfig{Partitions: 1})
	_ = cluster.CreateTopic("tiers", sim.TopicConfig{Partitions: 1, Compacted: true})
	backend, _ := cluster.NewBackend(sim.BackendConfig{
		Mode: store.Transactional, Application: "shop", CreateTopics: true,
	})
	defer backend.Close()
	tiersTP := store.TopicPartition{Topic: "tiers", Partition: 0}
	_, _ = cluster.Produce(tiersTP, wire.Record{Key: []byte("alice"), Value: []byte(`"gold"`)})

	tiers, err := view.New(ctx, view.Config[string]{
		Store: backend, Topic: "tiers", Plain: true, Codec: engine.JSON[string](),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tiers.Close()

	type order struct {
		Count int
		Tier  string
	}
	e, err := engine.New(engine.Config[order]{
		Codec: engine.JSON[order](), Store: backend, Tables: []engine.Table{tiers},
		PersistInterval: time.Second, CommitInterval: time.Second,
		Fold: func(key []byte, o order, _ bool, rec engine.Record) (engine.Result[order], error) {
			tier, ok, err := tiers.Get(key)
			if err != nil {
				return engine.Result[order]{}, err // the partition stops, naming the record
			}
			if !ok {
				tier = "none"
			}
			o.Count++
			o.Tier = tier
			return engine.Set(o), nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	r, _ := e.Join(simsource.New(cluster, "shop", sim.ClassicEager, 0, "orders"))
	defer r.Close(ctx)

	ordersTP := store.TopicPartition{Topic: "orders", Partition: 0}
	order1 := func() {
		_, _ = cluster.Produce(ordersTP, wire.Record{Key: []byte("alice"), Value: []byte("order")})
	}
	for !tiers.Status().CaughtUp {
		_ = tiers.Step(ctx)
	}
	order1()
	_ = r.Step(ctx) // the view has caught up: the partition recovers and folds
	got, _, _ := e.Get(ctx, ordersTP, []byte("alice"), engine.ReadLatest)
	fmt.Printf("alice: %+v\n", got.State)

	_, _ = cluster.Produce(tiersTP, wire.Record{Key: []byte("alice"), Value: []byte(`"platinum"`)})
	_ = tiers.Step(ctx)
	order1()
	_ = r.Step(ctx)
	got, _, _ = e.Get(ctx, ordersTP, []byte("alice"), engine.ReadLatest)
	fmt.Printf("alice: %+v\n", got.State)
	// Output:
	// alice: {Count:1 Tier:gold}
	// alice: {Count:2 Tier:platinum}
}
