//go:build it

package engine_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/wire"
)

// The view on Kafka 4.3.1, in real time (the named scenarios' stale
// owners are kfakeworld's TestViewShowsOnlyCommittedSnapshotsOnKafka). A
// crashed owner's transaction open on a snapshot partition holds the
// view's catch-up back and is never shown; the next owner's takeover
// aborts it and the view catches up; a restart on the view's Dir reads
// only the delta.
func TestViewOnKafka(t *testing.T) {
	w := newBrokerWorld(t)
	protocol := protocols["classic-eager"]
	r := w.runner(protocol)
	w.produce("alice=+10", "bob=+5", "carol=+7", "dave=+1", "erin=+3", "erin=close")
	w.drain(r)
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The crashed owner: a transaction under the partition's own
	// transactional.id, a snapshot written, never ended.
	in0 := store.TopicPartition{Topic: w.topic, Partition: 0}
	snaps0 := store.TopicPartition{Topic: w.snapshots(), Partition: 0}
	crashed, err := kgo.NewClient(kgo.SeedBrokers(w.brokers...), kgo.TransactionalID(store.TransactionalID(w.topic, in0)),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer crashed.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := crashed.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := crashed.ProduceSync(ctx, kgoRecordOf(snaps0, wire.EncodeSnapshot("", store.Snapshot{Key: []byte("dave"), Value: []byte("-999999"), Offset: 1 << 40}))).FirstErr(); err != nil {
		t.Fatal(err)
	}

	b, err := kafka.New(ctx, kafka.Config{Mode: store.Transactional, SeedBrokers: w.brokers, Application: w.topic})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var mu sync.Mutex
	var shown []view.Change[int]
	dir := t.TempDir()
	cfg := view.Config[int]{Store: b, Topic: w.topic, Codec: intCodec{}, Dir: dir, Partitioner: simAccountPartition,
		OnChange: func(ch view.Change[int]) { mu.Lock(); shown = append(shown, ch); mu.Unlock() }}
	v, err := view.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- v.Run(ctx) }()
	// The view reads partition 0 up to the open transaction (lag 0 at
	// the last stable offset) and waits there: not caught up.
	for st := v.Status().Partitions[0]; st.LogEnd < 0 || st.Lag != 0; st = v.Status().Partitions[0] {
		waitChange(t, ctx, v)
	}
	if st := v.Status(); st.Partitions[0].CaughtUp || st.CaughtUp {
		t.Fatalf("status %+v with the crashed owner's transaction open below the high watermark: want partition 0 not caught up", st)
	}
	// The negative control: the transaction's snapshot is in the log; a
	// read_uncommitted reader shows it.
	if !readUncommittedShows(t, w.brokers, snaps0, "-999999") {
		t.Fatal("the crashed owner's snapshot is not in the log: the test shows nothing")
	}

	// The next owner's takeover aborts the transaction; the view catches
	// up and never showed it.
	r2 := w.runner(protocol)
	w.drain(r2)
	if err := v.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	checkViewLedger(t, v, w.want)
	mu.Lock()
	for _, ch := range shown {
		if ch.State == -999999 {
			t.Fatalf("the view showed the crashed owner's aborted snapshot: %+v", ch)
		}
	}
	mu.Unlock()
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run = %v after Close", err)
	}

	// A restart on the Dir reads only what was written since.
	w.produce("dave=+100", "alice=+1")
	w.drain(r2)
	cfg.OnChange = nil
	v2, err := view.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Close()
	go func() { done <- v2.Run(ctx) }()
	if err := v2.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
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
}

// A table of plain key/values on Kafka 4.3.1: records keyed with
// franz-go's default partitioner, a null value deletes, an aborted
// transaction's record is never shown.
func TestPlainTableOnKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := fmt.Sprintf("sellers-%d", time.Now().UnixNano())
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	compact := "compact"
	if err := kafka.CreateTopic(ctx, cl, topic, 3, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
		t.Fatal(err)
	}
	put := func(key string, value []byte) {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: value}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	put("s1", []byte(`"acme"`))
	put("s2", []byte(`"globex"`))
	put("s2", nil)
	txn, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(topic+"-other-app"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("s1"), Value: []byte(`"aborted"`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := txn.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	put("s3", []byte(`"initech"`))

	b, err := kafka.New(ctx, kafka.Config{Mode: store.Plain, SeedBrokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	v, err := view.New(ctx, view.Config[string]{Store: b, Topic: topic, Plain: true, Codec: engine.JSON[string]()})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	go func() { _ = v.Run(ctx) }()
	if err := v.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
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
	if _, err := view.New(ctx, view.Config[string]{Store: b, Topic: topic + "-missing", Plain: true, Codec: engine.JSON[string]()}); !errors.Is(err, store.ErrMisconfigured) {
		t.Fatalf("a table of a missing topic: %v, want an error matching store.ErrMisconfigured", err)
	}
}

// waitChange waits until v's status may have changed: a short poll of
// the status, bounded by ctx.
func waitChange(t *testing.T, ctx context.Context, v *view.View[int]) {
	t.Helper()
	tick := time.NewTimer(20 * time.Millisecond)
	defer tick.Stop()
	select {
	case <-ctx.Done():
		t.Fatalf("waiting for the view: %v; status %+v", ctx.Err(), v.Status())
	case <-tick.C:
	}
}

// readUncommittedShows reports whether a read_uncommitted reader of tp,
// to its high watermark, sees a snapshot whose value is value.
func readUncommittedShows(t *testing.T, brokers []string, tp store.TopicPartition, value string) bool {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{tp.Topic: {tp.Partition: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return false
		}
		found := false
		fs.EachRecord(func(r *kgo.Record) { found = found || string(r.Value) == value })
		if found {
			return true
		}
	}
}
