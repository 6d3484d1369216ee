package engine_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// Queries read a running engine's state from any goroutine (here the
// runner is stepped by hand; under Engine.Run it runs on its own). The
// committed state is what a crash leaves: it lags the latest folded state
// until the snapshot is durable. A partition the engine does not serve
// answers ErrNotOwned.
func ExampleEngine_Get() {
	ctx := context.Background()
	cluster := sim.New(sim.Config{Seed: 1})
	_ = cluster.CreateTopic("accounts", sim.TopicConfig{Partitions: 1})
	backend, _ := cluster.NewBackend(sim.BackendConfig{
		Mode: store.Transactional, Application: "bank", CreateTopics: true,
	})
	defer backend.Close()
	e, err := engine.New(engine.Config[exampleAccount]{
		Fold: exampleFold, Codec: engine.JSON[exampleAccount](), Store: backend,
		PersistInterval: time.Second, CommitInterval: time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	r, _ := e.Join(simsource.New(cluster, "bank", sim.ClassicEager, 0, "accounts"))
	defer r.Close(ctx)

	tp := store.TopicPartition{Topic: "accounts", Partition: 0}
	for _, v := range []string{"+10", "-3"} {
		_, _ = cluster.Produce(tp, wire.Record{Key: []byte("alice"), Value: []byte(v)})
	}
	show := func(when string) {
		for _, mode := range []engine.ReadMode{engine.ReadLatest, engine.ReadCommitted} {
			got, ok, err := e.Get(ctx, tp, []byte("alice"), mode)
			fmt.Printf("%s, %s: %+v exists=%t offset=%d err=%v\n", when, mode, got.State, ok, got.Offset, err)
		}
	}
	_ = r.Step(ctx) // folds both records
	show("folded")
	cluster.Advance(time.Second)
	_ = r.Step(ctx) // the snapshot is written
	show("persisted")

	for en, err := range e.Range(ctx, tp, engine.ReadCommitted) {
		fmt.Printf("range: %s=%+v err=%v\n", en.Key, en.State, err)
	}
	_, _, err = e.Get(ctx, store.TopicPartition{Topic: "accounts", Partition: 7}, []byte("bob"), engine.ReadCommitted)
	fmt.Println(errors.Is(err, engine.ErrNotOwned), err)
	// Output:
	// folded, latest: {Balance:7 Txns:2} exists=true offset=1 err=<nil>
	// folded, committed: {Balance:0 Txns:0} exists=false offset=-1 err=<nil>
	// persisted, latest: {Balance:7 Txns:2} exists=true offset=1 err=<nil>
	// persisted, committed: {Balance:7 Txns:2} exists=true offset=1 err=<nil>
	// range: alice={Balance:7 Txns:2} err=<nil>
	// true engine: query of accounts/7: not assigned to this instance
}
