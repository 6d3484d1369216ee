package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// FlushAll writes a key changed while its previous write was in flight:
// that key is dirty again only once the write has ended, so FlushAll waits
// for what is in flight before it flushes. On the sim with a write latency
// the persist's write of alice=10 is still in flight when alice=+5 is
// folded; after FlushAll the snapshot topic holds alice=15 and the group's
// offset covers it.
func TestFlushAllWritesAKeyChangedWhileInFlight(t *testing.T) {
	c := sim.New(sim.Config{Seed: 3})
	if err := c.CreateTopic("accounts", sim.TopicConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	b, err := c.NewBackend(sim.BackendConfig{Mode: store.Transactional, TransactionalIDPrefix: "bank", CreateTopics: true,
		WriteLatency: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	e, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: b,
		PersistInterval: time.Second, CommitInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	r, err := e.Join(simsource.New(c, "bank", sim.ClassicEager, 0, "accounts"))
	if err != nil {
		t.Fatal(err)
	}
	input := store.TopicPartition{Topic: "accounts", Partition: 1} // alice: len 5
	produce := func(v string) {
		if _, err := c.Produce(input, wire.Record{Key: []byte("alice"), Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	step := func() {
		t.Helper()
		if err := r.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	produce("+10")
	step() // joins, recovers, folds alice=10
	c.Advance(time.Second)
	step() // the persist starts alice=10's write: in flight for a minute
	if n := c.CallsInFlight(); n == 0 {
		t.Fatal("the persist's write is not in flight")
	}
	produce("+5")
	step() // folds alice=15 while the write is in flight

	r.FlushAll(ctx)
	if errs := r.Errors(); len(errs) > 0 {
		t.Fatal(errs)
	}
	snap := store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: 1}
	ents, err := c.Read(snap, true)
	if err != nil {
		t.Fatal(err)
	}
	var last store.Snapshot
	for _, en := range ents {
		if s, kind, err := wire.DecodeRecord(snap, en.Offset, en.Record); err == nil && kind != wire.KindOffsetMarker {
			last = s
		}
	}
	if string(last.Key) != "alice" || string(last.Value) != "15" || last.Offset != 1 {
		t.Fatalf("after FlushAll the latest snapshot is %s=%s@%d, want alice=15@1", last.Key, last.Value, last.Offset)
	}
	if off, _ := c.CommittedOffset("bank", input); off != 2 {
		t.Fatalf("after FlushAll the group committed %d, want 2", off)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
