package view_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// account is the examples' per-key state.
type account struct {
	Balance int `json:"balance"`
	Txns    int `json:"txns"`
}

// fold folds "+N" and "-N" into an account; "close" deletes it.
func fold(key []byte, acct account, exists bool, rec engine.Record) (engine.Result[account], error) {
	if string(rec.Value) == "close" {
		return engine.Delete[account](), nil
	}
	n, err := strconv.Atoi(string(rec.Value))
	if err != nil {
		return engine.Result[account]{}, fmt.Errorf("bad amount %q", rec.Value)
	}
	acct.Balance += n
	acct.Txns++
	return engine.Set(acct), nil
}

// A view of another engine's snapshots, in another process: it joins no
// group and writes nothing, reads the committed snapshots
// read_committed, and follows the changes. Here it is stepped over the
// simulated cluster; against Kafka, run it (go v.Run(ctx)) and wait
// with WaitCaughtUp.
func ExampleView() {
	ctx := context.Background()
	cluster := sim.New(sim.Config{Seed: 1})
	_ = cluster.CreateTopic("accounts", sim.TopicConfig{Partitions: 1})
	backend, _ := cluster.NewBackend(sim.BackendConfig{
		Mode: store.Transactional, Application: "bank", CreateTopics: true,
	})
	defer backend.Close()

	// The engine that owns the accounts folds three records and commits
	// their snapshot.
	e, _ := engine.New(engine.Config[account]{Fold: fold, Codec: engine.JSON[account](), Store: backend,
		PersistInterval: time.Second, CommitInterval: time.Second})
	defer e.Close()
	r, _ := e.Join(simsource.New(cluster, "bank", sim.ClassicEager, 0, "accounts"))
	tp := store.TopicPartition{Topic: "accounts", Partition: 0}
	for _, v := range []string{"+10", "-3", "+5"} {
		_, _ = cluster.Produce(tp, wire.Record{Key: []byte("alice"), Value: []byte(v)})
	}
	_ = r.Step(ctx)
	cluster.Advance(time.Second)
	_ = r.Step(ctx)

	// The view: in memory (no Dir), of every partition.
	v, err := view.New(ctx, view.Config[account]{
		Store: backend, Topic: "accounts", Codec: engine.JSON[account](),
		OnChange: func(ch view.Change[account]) {
			if ch.Deleted {
				fmt.Printf("change: %s deleted (input offset %d)\n", ch.Key, ch.Offset)
				return
			}
			fmt.Printf("change: %s=%+v (input offset %d)\n", ch.Key, ch.State, ch.Offset)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer v.Close()
	fmt.Println("reads", v.Name())
	for !v.Status().CaughtUp {
		_ = v.Step(ctx)
	}
	acct, ok, _ := v.Get([]byte("alice"))
	fmt.Printf("alice=%+v (%t)\n", acct, ok)

	// The engine folds more; the view follows.
	_, _ = cluster.Produce(tp, wire.Record{Key: []byte("alice"), Value: []byte("close")})
	_ = r.Step(ctx)
	cluster.Advance(time.Second)
	_ = r.Step(ctx)
	_ = v.Step(ctx)
	_, ok, _ = v.Get([]byte("alice"))
	fmt.Println("alice exists:", ok)
	_ = r.Close(ctx)
	// Output:
	// reads bank-accounts-snapshots
	// change: alice={Balance:12 Txns:3} (input offset 2)
	// alice={Balance:12 Txns:3} (true)
	// change: alice deleted (input offset 3)
	// alice exists: false
}

// A table of plain key/values (ViewConfig.Plain): a compacted topic
// another producer keeps, keyed with Kafka's default partitioner, each
// value a state in the Codec; a null value deletes its key. A fold's
// lookups read such a table (the enrichment example's sellers).
func ExampleView_plainTable() {
	ctx := context.Background()
	cluster := sim.New(sim.Config{Seed: 1})
	_ = cluster.CreateTopic("sellers", sim.TopicConfig{Partitions: 3, Compacted: true})
	put := func(key string, value []byte) {
		tp := store.TopicPartition{Topic: "sellers", Partition: store.OutputPartition([]byte(key), 3)}
		_, _ = cluster.Produce(tp, wire.Record{Key: []byte(key), Value: value})
	}
	put("s1", []byte(`"Acme"`))
	put("s2", []byte(`"Globex"`))
	put("s2", nil) // deletes s2

	// Any store mode reads a plain topic (read_committed).
	backend, _ := cluster.NewBackend(sim.BackendConfig{Mode: store.Plain})
	defer backend.Close()
	sellers, err := view.New(ctx, view.Config[string]{
		Store: backend, Topic: "sellers", Plain: true, Codec: engine.JSON[string](),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sellers.Close()
	for !sellers.Status().CaughtUp {
		_ = sellers.Step(ctx)
	}
	for e, err := range sellers.All() {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("partition %d: %s=%s\n", e.Partition, e.Key, e.State)
	}
	_, ok, _ := sellers.Get([]byte("s2"))
	fmt.Println("s2 exists:", ok)
	// Output:
	// partition 0: s1=Acme
	// s2 exists: false
}

// A lookup table declared with the engine's Config, before any store
// exists: the fold's code names it and lists it in Config.Tables, and
// whoever runs the engine opens it on its own backend (view.Opener). Here
// the runner is the example itself, on the simulated cluster, stepping the
// table between the member's steps; a service on Kafka opens it on its
// store/kafka backend and runs it (go customers.Run(ctx)). Package
// engine/enginetest's driver opens and steps such tables by itself.
func ExampleLookup() {
	// Declared with the fold: no Store.
	customers := view.NewLookup(view.Config[string]{Topic: "customers", Plain: true, Codec: engine.String()})
	cfg := engine.Config[string]{
		Codec:  engine.String(),
		Tables: []engine.Table{customers},
		// An order's state is its customer's name.
		Fold: func(key []byte, _ string, _ bool, rec engine.Record) (engine.Result[string], error) {
			name, ok, err := customers.Get(rec.Value)
			if err != nil {
				return engine.Result[string]{}, err
			}
			if !ok {
				name = "unknown"
			}
			return engine.Set(name), nil
		},
	}
	_, _, err := customers.Get([]byte("c1"))
	fmt.Println("before Open:", errors.Is(err, view.ErrNotOpen))

	// The runner: a cluster, a backend, the tables opened on it.
	ctx := context.Background()
	cluster := sim.New(sim.Config{Seed: 1})
	_ = cluster.CreateTopic("orders", sim.TopicConfig{Partitions: 1})
	_ = cluster.CreateTopic("customers", sim.TopicConfig{Partitions: 1, Compacted: true})
	_, _ = cluster.Produce(store.TopicPartition{Topic: "customers"}, wire.Record{Key: []byte("c1"), Value: []byte("Ada")})
	backend, _ := cluster.NewBackend(sim.BackendConfig{Mode: store.Transactional, Application: "shop", CreateTopics: true})
	defer backend.Close()
	for _, t := range cfg.Tables {
		if o, ok := t.(view.Opener); ok {
			if err := o.Open(ctx, backend); err != nil {
				fmt.Println(err)
				return
			}
			defer o.Close()
		}
	}
	cfg.Store = backend
	e, _ := engine.New(cfg)
	defer e.Close()
	m, _ := e.Join(simsource.New(cluster, "shop", sim.ClassicEager, 0, "orders"))
	defer m.Close(ctx)
	_, _ = cluster.Produce(store.TopicPartition{Topic: "orders"}, wire.Record{Key: []byte("o1"), Value: []byte("c1")})
	for range 3 {
		_ = customers.Step(ctx) // the table first: a partition folds once its tables caught up
		_ = m.Step(ctx)
		cluster.Advance(time.Second)
	}
	name, _, _ := m.State(store.TopicPartition{Topic: "orders"}, []byte("o1"))
	fmt.Println("o1's customer:", name)
	// Output:
	// before Open: true
	// o1's customer: Ada
}
