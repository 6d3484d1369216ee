package engine_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/wire"
)

// The view on kfake with store/kafka's reader, in virtual time (the
// named scenarios' stale owners are kfakeworld's
// TestViewShowsOnlyCommittedSnapshotsOnKfake): a crashed owner's open
// transaction holds catch-up back and is never shown; the takeover
// aborts it; a restart reads the delta.
func TestViewOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		protocol := protocols["classic-eager"]
		r := w.runner(w.engine(), protocol)
		w.produce("alice=+10", "bob=+5", "carol=+7", "dave=+1", "erin=+3", "erin=close")
		w.drain(r)
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		in0 := store.TopicPartition{Topic: "accounts", Partition: 0}
		crashed := w.client(kgo.TransactionalID(store.TransactionalID("bank", in0)), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.TransactionTimeout(time.Minute))
		if err := crashed.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		snaps0 := store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: 0}
		if err := crashed.ProduceSync(ctx, kgoRecordOf(snaps0, wire.EncodeSnapshot("", store.Snapshot{Key: []byte("dave"), Value: []byte("-999999"), Offset: 1 << 40}))).FirstErr(); err != nil {
			t.Fatal(err)
		}

		b, err := kafka.New(ctx, kafka.Config{Mode: store.Transactional, SeedBrokers: w.c.ListenAddrs(), Application: "bank",
			ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext)}})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		var shown []view.Change[int]
		cfg := view.Config[int]{Store: b, Topic: "accounts", Codec: intCodec{}, Dir: t.TempDir(), Partitioner: simAccountPartition,
			OnChange: func(ch view.Change[int]) { shown = append(shown, ch) }}
		v, err := view.New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- v.Run(runCtx) }()
		// The view reads what it can: partition 1 to the end, partition 0
		// to the open transaction (the last stable offset), where it waits.
		readToLSO := func() bool {
			st := v.Status()
			return st.Partitions[1].CaughtUp && st.Partitions[0].LogEnd >= 0 && st.Partitions[0].Lag == 0
		}
		for deadline := time.Now().Add(time.Minute); !readToLSO(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the view did not read up to the open transaction in a minute: %+v", v.Status())
			}
		}
		if st := v.Status(); st.CaughtUp || st.Partitions[0].CaughtUp || !st.Partitions[1].CaughtUp || st.Partitions[0].Lag != 0 {
			t.Fatalf("status %+v with the transaction open: want partition 0 read to the last stable offset and not caught up, partition 1 caught up", st)
		}

		r2 := w.runner(w.engine(), protocol) // its takeover aborts the transaction
		w.drain(r2)
		if err := v.WaitCaughtUp(ctx); err != nil {
			t.Fatal(err)
		}
		checkViewLedger(t, v, w.want)
		for _, ch := range shown {
			if ch.State == -999999 {
				t.Fatalf("the view showed the crashed owner's aborted snapshot: %+v", ch)
			}
		}
		stop()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}

		w.produce("dave=+100", "alice=+1")
		w.drain(r2)
		cfg.OnChange = nil
		v2, err := view.New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer v2.Close()
		for !v2.Status().CaughtUp {
			if err := v2.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
		checkViewLedger(t, v2, w.want)
		read := int64(0)
		for _, p := range v2.Status().Partitions {
			if p.From < 0 {
				t.Fatalf("partition %d reopened from the log start: %+v", p.Partition, p)
			}
			read += p.Read
		}
		if read == 0 || read > 4 {
			t.Fatalf("the restart read %d snapshots, want the 2 written since and at most their transactions' others", read)
		}
		if err := r2.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A table of plain key/values on kfake: franz-go's default partitioner,
// a null value deletes, an aborted transaction's record never shows.
func TestPlainTableOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		ctx := context.Background()
		compact := "compact"
		if err := kafka.CreateTopic(ctx, w.prod, "sellers", 3, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
			t.Fatal(err)
		}
		cl := w.client()
		put := func(key string, value []byte) {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "sellers", Key: []byte(key), Value: value}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		put("s1", []byte(`"acme"`))
		put("s2", []byte(`"globex"`))
		put("s2", nil)
		txn := w.client(kgo.TransactionalID("other-app"))
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := txn.ProduceSync(ctx, &kgo.Record{Topic: "sellers", Key: []byte("s1"), Value: []byte(`"aborted"`)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := txn.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Fatal(err)
		}
		put("s3", []byte(`"initech"`))
		b, err := kafka.New(ctx, kafka.Config{Mode: store.Plain, SeedBrokers: w.c.ListenAddrs(), ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext)}})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		v, err := view.New(ctx, view.Config[string]{Store: b, Topic: "sellers", Plain: true, Codec: engine.JSON[string]()})
		if err != nil {
			t.Fatal(err)
		}
		defer v.Close()
		for !v.Status().CaughtUp {
			if err := v.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
		got := map[string]string{}
		for e, err := range v.All() {
			if err != nil {
				t.Fatal(err)
			}
			got[string(e.Key)] = e.State
		}
		if want := map[string]string{"s1": "acme", "s3": "initech"}; !maps.Equal(got, want) {
			t.Fatalf("the table holds %v, want %v", got, want)
		}
	})
}

func kgoRecordOf(tp store.TopicPartition, w wire.Record) *kgo.Record {
	r := &kgo.Record{Topic: tp.Topic, Partition: tp.Partition, Key: w.Key, Value: w.Value}
	for _, h := range w.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return r
}

func checkViewLedger(t *testing.T, v *view.View[int], want ledger) {
	t.Helper()
	for _, key := range accountKeys {
		got, ok, err := v.Get([]byte(key))
		if err != nil {
			t.Fatalf("Get %s: %v", key, err)
		}
		if w, wok := want[key]; ok != wok || got != w {
			t.Fatalf("the view's %s = %d (%t), want %d (%t)", key, got, ok, w, wok)
		}
	}
}

// Bad inputs on kfake: a missing topic fails NewView with
// store/kafka's ErrTopicMissing (store.ErrMisconfigured); a foreign
// record in the snapshot topic fails its partition with a
// *store.CorruptRecordError, where the user looks.
func TestViewBadInputsOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		ctx := context.Background()
		b, err := kafka.New(ctx, kafka.Config{Mode: store.Transactional, SeedBrokers: w.c.ListenAddrs(), Application: "bank",
			ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext)}})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if _, err := view.New(ctx, view.Config[int]{Store: b, Topic: "nope", Codec: intCodec{}}); !errors.Is(err, kafka.ErrTopicMissing) || !errors.Is(err, store.ErrMisconfigured) {
			t.Fatalf("a view of a missing topic: %v, want kafka.ErrTopicMissing", err)
		}
		if err := w.prod.ProduceSync(ctx, &kgo.Record{Topic: "bank-accounts-snapshots", Partition: 1, Key: []byte("foreign"), Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		v, err := view.New(ctx, view.Config[int]{Store: b, Topic: "accounts", Codec: intCodec{}})
		if err != nil {
			t.Fatal(err)
		}
		defer v.Close()
		err = v.Run(ctx)
		if pe, ok := errors.AsType[*view.PartitionError](err); !ok || pe.Partition != 1 || !errors.Is(err, store.ErrCorruptRecord) {
			t.Fatalf("Run = %v, want partition 1's *ViewPartitionError wrapping a *store.CorruptRecordError", err)
		}
		if err := v.WaitCaughtUp(ctx); !errors.Is(err, store.ErrCorruptRecord) {
			t.Fatalf("WaitCaughtUp = %v, want the failure", err)
		}
	})
}
