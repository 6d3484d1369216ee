package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// intCodec encodes an int as decimal text.
type intCodec struct{}

func (intCodec) Encode(n int) ([]byte, error) { return []byte(strconv.Itoa(n)), nil }
func (intCodec) Decode(b []byte) (int, error) { return strconv.Atoi(string(b)) }

// balance folds deposits ("+N"), withdrawals ("-N") and closes ("close").
func balance(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
	v := string(rec.Value)
	if v == "close" {
		return engine.Delete[int](), nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return engine.Result[int]{}, fmt.Errorf("bad amount %q", v)
	}
	return engine.Set(state + n).With(engine.Output{Topic: "balances", Key: key, Value: []byte(strconv.Itoa(state + n))}), nil
}

// ledger is the test's own account of what the state must be.
type ledger map[string]int

func (l ledger) apply(key, v string) {
	if v == "close" {
		delete(l, key)
		return
	}
	n, _ := strconv.Atoi(v)
	l[key] += n
}

type simWorld struct {
	t     *testing.T
	c     *sim.Cluster
	store store.Backend
	want  ledger
}

func newSimWorld(t *testing.T) *simWorld {
	c := sim.New(sim.Config{Seed: 3})
	if err := c.CreateTopic("accounts", sim.TopicConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	b, err := c.NewBackend(sim.BackendConfig{Mode: store.Transactional, TransactionalIDPrefix: "bank", CreateTopics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return &simWorld{t: t, c: c, store: b, want: ledger{}}
}

// produce appends events "key=value" to the partition the key hashes to.
func (w *simWorld) produce(events ...string) {
	for _, ev := range events {
		k, v, _ := strings.Cut(ev, "=")
		p := int32(len(k) % 2)
		if _, err := w.c.Produce(store.TopicPartition{Topic: "accounts", Partition: p}, wire.Record{Key: []byte(k), Value: []byte(v)}); err != nil {
			w.t.Fatal(err)
		}
		w.want.apply(k, v)
	}
}

func (w *simWorld) engine() *engine.Engine[int] {
	e, err := engine.New(engine.Config[int]{
		Fold: balance, Codec: intCodec{}, Store: w.store,
		PersistInterval: time.Second, CommitInterval: 2 * time.Second,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	return e
}

func (w *simWorld) runner(e *engine.Engine[int]) *engine.Member[int] {
	r, err := e.Join(simsource.New(w.c, "bank", sim.ClassicEager, 0, "accounts"))
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// drain steps the runners, a second of virtual time apart, until every
// event is folded and committed.
func (w *simWorld) drain(rs ...*engine.Member[int]) {
	w.t.Helper()
	ctx := context.Background()
	for range 60 {
		for _, r := range rs {
			if err := r.Step(ctx); err != nil {
				w.t.Fatal(err)
			}
		}
		w.c.Advance(time.Second)
		if w.caughtUp() {
			return
		}
	}
	w.t.Fatal("the runners did not commit to the end of the input in 60s")
}

func (w *simWorld) caughtUp() bool {
	for p := range int32(2) {
		tp := store.TopicPartition{Topic: "accounts", Partition: p}
		_, _, end, _ := w.c.Offsets(tp)
		if off, _ := w.c.CommittedOffset("bank", tp); off != end {
			return false
		}
	}
	return true
}

// check compares every key's state, read from whichever runner owns its
// partition, with the ledger.
func (w *simWorld) check(rs ...*engine.Member[int]) { checkLedger(w.t, w.want, "accounts", rs...) }

// checkLedger compares every account's state in topic, read from whichever
// runner owns its partition, with the ledger.
func checkLedger(t *testing.T, want ledger, topic string, rs ...*engine.Member[int]) {
	t.Helper()
	for _, key := range []string{"alice", "bob", "carol", "dave", "erin"} {
		tp := store.TopicPartition{Topic: topic, Partition: int32(len(key) % 2)}
		r := rs[0]
		for _, x := range rs {
			if slices.Contains(x.Flows(), tp) {
				r = x
			}
		}
		got, ok, err := r.State(tp, []byte(key))
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		w, wOK := want[key]
		if ok != wOK || got != w {
			t.Fatalf("%s = %d (%t), want %d (%t)", key, got, ok, w, wOK)
		}
	}
}

// restartScript is the kafka-flow restart test: five runs (four restarts)
// over one input; each run recovers, catches up and checks every key, and
// more events, deletes among them, arrive between runs.
func restartScript(t *testing.T, produce func(...string), start func() *engine.Member[int],
	drain func(*engine.Member[int]), check func(*engine.Member[int])) {
	t.Helper()
	produce("alice=+10", "bob=+5", "carol=+7", "dave=+1")
	for run := range 5 {
		r := start()
		drain(r)
		check(r)
		switch run {
		case 0:
			produce("alice=+1", "bob=-2", "erin=+3")
		case 1:
			produce("carol=close", "alice=+100")
		case 2:
			produce("carol=+9", "dave=-1")
		case 3:
			produce("erin=close", "bob=+1")
		}
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if errs := r.Errors(); len(errs) > 0 {
			t.Fatalf("run %d: %v", run, errs)
		}
	}
}

// The kafka-flow restart test: four restarts, state recovered, processing
// continues, a delete sticks.
func TestRestartsRecoverStateOnSim(t *testing.T) {
	w := newSimWorld(t)
	restartScript(t, w.produce, func() *engine.Member[int] { return w.runner(w.engine()) },
		func(r *engine.Member[int]) { w.drain(r) }, func(r *engine.Member[int]) { w.check(r) })
}

// A member that crashes (no revoke, no flush) loses nothing and folds
// nothing twice: its snapshots are ahead of the committed offset, and the
// next owner replays from that offset, skipping what the snapshots hold.
func TestCrashReplaysExactlyOnceOnSim(t *testing.T) {
	w := newSimWorld(t)
	lazy, err := engine.New(engine.Config[int]{
		Fold: balance, Codec: intCodec{}, Store: w.store,
		PersistInterval: time.Second, CommitInterval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.CloseAbandoning(lazy) })
	a := w.runner(lazy)
	w.produce("alice=+10", "bob=+5", "alice=+1", "bob=+2", "alice=+3")
	ctx := context.Background()
	for range 5 {
		if err := a.Step(ctx); err != nil {
			t.Fatal(err)
		}
		w.c.Advance(time.Second)
	}
	w.produce("bob=+4") // folded, never flushed
	if err := a.Step(ctx); err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		if off, ok := w.c.CommittedOffset("bank", store.TopicPartition{Topic: "accounts", Partition: p}); ok && off > 0 {
			t.Fatalf("partition %d committed %d: the scenario needs snapshots ahead of the commit", p, off)
		}
	}
	crashOnSim(t, a)
	w.c.Advance(time.Minute) // session timeout: a is evicted
	b := w.runner(w.engine())
	w.drain(b)
	w.check(b)
}

// A fold that fails stops its partition with an error that names topic,
// partition, offset and key; nothing is committed past it.
func TestFoldFailureStopsThePartitionOnSim(t *testing.T) {
	w := newSimWorld(t)
	w.produce("bob=+5")
	r := w.runner(w.engine())
	w.drain(r)
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	before, _ := w.c.CommittedOffset("bank", tp)
	if _, err := w.c.Produce(tp, wire.Record{Key: []byte("bob"), Value: []byte("lots")}); err != nil {
		t.Fatal(err)
	}
	w.c.Produce(tp, wire.Record{Key: []byte("bob"), Value: []byte("+1")})
	for range 5 {
		r.Step(context.Background())
		w.c.Advance(time.Second)
	}
	errs := r.Errors()
	if len(errs) == 0 || !strings.Contains(errs[0].Error(), `accounts/1 offset 1 key "bob"`) {
		t.Fatalf("errors = %v, want the fold failure naming accounts/1 offset 1 key bob", errs)
	}
	if after, _ := w.c.CommittedOffset("bank", tp); after != before {
		t.Fatalf("committed offset moved from %d to %d past the bad record", before, after)
	}
	var fe interface{ Unwrap() error }
	if !errors.As(errs[0], &fe) {
		t.Fatalf("%T does not unwrap", errs[0])
	}
}

// countingCodec is intCodec counting its decodes.
type countingCodec struct{ decodes *int }

func (countingCodec) Encode(n int) ([]byte, error) { return intCodec{}.Encode(n) }
func (c countingCodec) Decode(b []byte) (int, error) {
	*c.decodes++
	return intCodec{}.Decode(b)
}

// A recovery decodes each recovered state once, to check it, and hands
// the decoded state to the partition: the key's next fold does not decode
// it again.
func TestRecoveredStatesAreDecodedOnceOnSim(t *testing.T) {
	w := newSimWorld(t)
	newEngine := func(decodes *int) *engine.Engine[int] {
		e, err := engine.New(engine.Config[int]{
			Fold: balance, Codec: countingCodec{decodes}, Store: w.store,
			PersistInterval: time.Second, CommitInterval: 2 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
		return e
	}
	keys := []string{"alice", "bob", "carol", "dave", "erin", "frank"}
	for _, k := range keys {
		w.produce(k + "=+1")
	}
	var first int
	r := w.runner(newEngine(&first))
	w.drain(r)
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A new engine, with a cache of its own: a full recovery of every key.
	var decodes int
	r = w.runner(newEngine(&decodes))
	for _, k := range keys {
		w.produce(k + "=+1")
	}
	w.drain(r)
	w.check(r)
	if decodes != len(keys) {
		t.Fatalf("%d decodes to recover %d keys and fold one record of each, want %d: one per recovered state", decodes, len(keys), len(keys))
	}
}
