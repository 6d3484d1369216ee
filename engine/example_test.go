package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// exampleAccount is the examples' per-key state.
type exampleAccount struct {
	Balance int `json:"balance"`
	Txns    int `json:"txns"`
}

// exampleJSON is a Codec of one's own that stores any state as JSON (as
// the built-in engine.JSON does).
type exampleJSON[S any] struct{}

func (exampleJSON[S]) Encode(s S) ([]byte, error) { return json.Marshal(s) }
func (exampleJSON[S]) Decode(b []byte) (S, error) {
	var s S
	err := json.Unmarshal(b, &s)
	return s, err
}

// exampleFold folds "+N" and "-N" into an account and emits the new
// balance; "close" deletes the account.
func exampleFold(key []byte, acct exampleAccount, exists bool, rec engine.Record) (engine.Result[exampleAccount], error) {
	if string(rec.Value) == "close" {
		return engine.Delete[exampleAccount](), nil
	}
	n, err := strconv.Atoi(string(rec.Value))
	if err != nil {
		// The partition stops with an error naming this record.
		return engine.Result[exampleAccount]{}, fmt.Errorf("bad amount %q", rec.Value)
	}
	acct.Balance += n // a new key (exists == false) starts from the zero state
	acct.Txns++
	return engine.Set(acct).With(engine.Output{Topic: "balances", Key: key, Value: []byte(strconv.Itoa(acct.Balance))}), nil
}

// The codec turns a state into the bytes of its snapshot (and of the local
// cache) and back. This one is written by hand; the built-in codecs
// (JSON, String, Bytes, Int64, Uint64) cover the common states.
func ExampleCodec() {
	var codec engine.Codec[exampleAccount] = exampleJSON[exampleAccount]{}
	b, _ := codec.Encode(exampleAccount{Balance: 10, Txns: 1})
	fmt.Println(string(b))
	acct, _ := codec.Decode(b)
	fmt.Printf("%+v\n", acct)
	// Output:
	// {"balance":10,"txns":1}
	// {Balance:10 Txns:1}
}

// An engine driven step by step over the simulated cluster, in virtual
// time: records are folded at once; the snapshots and the offset commit
// wait for the persist and commit intervals.
func ExampleMember_Step() {
	ctx := context.Background()
	cluster := sim.New(sim.Config{Seed: 1})
	_ = cluster.CreateTopic("accounts", sim.TopicConfig{Partitions: 1})
	backend, _ := cluster.NewBackend(sim.BackendConfig{
		Mode: store.Transactional, Application: "bank", CreateTopics: true,
	})
	defer backend.Close()

	e, err := engine.New(engine.Config[exampleAccount]{
		Fold:            exampleFold,
		Codec:           engine.JSON[exampleAccount](),
		Store:           backend,
		PersistInterval: time.Second,
		CommitInterval:  time.Second,
		Emit: func(_ context.Context, outs []engine.Output) error {
			for _, o := range outs {
				fmt.Printf("emit %s: %s=%s\n", o.Topic, o.Key, o.Value)
			}
			return nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	r, _ := e.Join(simsource.New(cluster, "bank", sim.ClassicEager, 0, "accounts"))

	tp := store.TopicPartition{Topic: "accounts", Partition: 0}
	for _, v := range []string{"+10", "-3", "+5"} {
		_, _ = cluster.Produce(tp, wire.Record{Key: []byte("alice"), Value: []byte(v)})
	}
	show := func(when string) {
		acct, _, _ := r.State(tp, []byte("alice"))
		committed, _ := cluster.CommittedOffset("bank", tp)
		fmt.Printf("%s: alice=%+v, committed offset %d\n", when, acct, committed)
	}

	_ = r.Step(ctx) // joins the group, recovers the partition, folds the three records
	show("after the first step")
	cluster.Advance(time.Second)
	_ = r.Step(ctx) // the intervals are due: the snapshot is written, then offset 3 is committed
	show("one second later")
	_ = r.Close(ctx) // leaves the group; the revoke flushes and commits what is left
	// Output:
	// emit balances: alice=10
	// emit balances: alice=7
	// emit balances: alice=12
	// after the first step: alice={Balance:12 Txns:3}, committed offset 0
	// one second later: alice={Balance:12 Txns:3}, committed offset 3
}

// A new engine recovers the state from the snapshots and resumes the input
// at the committed offset. Here the first member crashes after its snapshot
// was written but before the offset was committed: the second replays the
// records from the committed offset and skips those the snapshot already
// holds, so each record changes the state exactly once.
func ExampleEngine_Join() {
	ctx := context.Background()
	cluster := sim.New(sim.Config{Seed: 1})
	_ = cluster.CreateTopic("accounts", sim.TopicConfig{Partitions: 1})
	backend, _ := cluster.NewBackend(sim.BackendConfig{
		Mode: store.Transactional, Application: "bank", CreateTopics: true,
	})
	defer backend.Close()
	tp := store.TopicPartition{Topic: "accounts", Partition: 0}
	var closers []func() error // the engines' local caches
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()

	newRunner := func(name string) *engine.Member[exampleAccount] {
		e, err := engine.New(engine.Config[exampleAccount]{
			Fold: func(key []byte, acct exampleAccount, exists bool, rec engine.Record) (engine.Result[exampleAccount], error) {
				fmt.Printf("%s folds offset %d: %s\n", name, rec.Offset, rec.Value)
				return exampleFold(key, acct, exists, rec)
			},
			Codec:           engine.JSON[exampleAccount](),
			Store:           backend,
			PersistInterval: time.Second,
			CommitInterval:  time.Hour, // never, in this example
		})
		if err != nil {
			panic(err)
		}
		closers = append(closers, e.Close)
		r, _ := e.Join(simsource.New(cluster, "bank", sim.ClassicEager, 0, "accounts"))
		return r
	}

	first := newRunner("first")
	for _, v := range []string{"+10", "+5"} {
		_, _ = cluster.Produce(tp, wire.Record{Key: []byte("alice"), Value: []byte(v)})
	}
	_ = first.Step(ctx)
	cluster.Advance(time.Second)
	_ = first.Step(ctx) // the snapshot {15, 2} is written at offset 1; offset 0 stays committed
	_, _ = cluster.Produce(tp, wire.Record{Key: []byte("alice"), Value: []byte("-1")})
	_ = first.Step(ctx) // folded, never written
	// The first process dies: its member never polls nor heartbeats
	// again, and its runner is never stepped or closed (no flush, no
	// commit, no revoke): Abandon says so, and lets its engine's cache
	// be closed.
	first.Source().(*simsource.Source).Member().Stall()
	first.Abandon()
	cluster.Advance(time.Minute) // the session times out; the group drops the dead member
	committed, _ := cluster.CommittedOffset("bank", tp)
	fmt.Println("committed offset after the crash:", committed)

	second := newRunner("second")
	_ = second.Step(ctx)
	acct, _, _ := second.State(tp, []byte("alice"))
	fmt.Printf("second: alice=%+v\n", acct)
	_ = second.Close(ctx)
	// Output:
	// first folds offset 0: +10
	// first folds offset 1: +5
	// first folds offset 2: -1
	// committed offset after the crash: 0
	// second folds offset 2: -1
	// second: alice={Balance:14 Txns:3}
}
