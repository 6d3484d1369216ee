package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// Views on the simulated cluster (docs/design.md, "Views"). The views of
// the named scenarios' stale owners and crashed transactions are in
// internal/world (TestViewShowsOnlyCommittedSnapshotsOnSim); these are
// the view's own behaviours.

var accountKeys = []string{"alice", "bob", "carol", "dave", "erin"}

// simAccountPartition is simWorld.produce's partitioner.
func simAccountPartition(key []byte, _ int32) int32 { return int32(len(key) % 2) }

// view opens a view of w's accounts snapshots.
func (w *simWorld) view(edit func(*view.Config[int])) *view.View[int] {
	w.t.Helper()
	cfg := view.Config[int]{Store: w.store, Topic: "accounts", Codec: intCodec{}, Partitioner: simAccountPartition}
	if edit != nil {
		edit(&cfg)
	}
	v, err := view.New(context.Background(), cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = v.Close() })
	return v
}

// stepView steps v, a second of virtual time apart, until it caught up.
func (w *simWorld) stepView(v *view.View[int]) {
	w.t.Helper()
	for range 30 {
		if err := v.Step(context.Background()); err != nil {
			w.t.Fatal(err)
		}
		if v.Status().CaughtUp {
			return
		}
		w.c.Advance(time.Second)
	}
	w.t.Fatalf("the view did not catch up: %+v", v.Status())
}

// checkView compares every account in v with the ledger.
func (w *simWorld) checkView(v *view.View[int]) {
	w.t.Helper()
	for _, key := range accountKeys {
		got, ok, err := v.Get([]byte(key))
		if err != nil {
			w.t.Fatalf("Get %s: %v", key, err)
		}
		if want, wok := w.want[key]; ok != wok || got != want {
			w.t.Fatalf("the view's %s = %d (%t), want %d (%t)", key, got, ok, want, wok)
		}
	}
}

// A view opened while a crashed owner's transaction is open on a snapshot
// partition is not caught up until the transaction ends (its high
// watermark at open is above the transaction), never shows the
// transaction's snapshot, and catches up once the coordinator aborts it.
func TestViewWaitsPastAnOpenTransactionAndNeverShowsItOnSim(t *testing.T) {
	w := newSimWorld(t)
	r := w.runner(w.engine())
	for i := range 5 {
		w.produce("alice=+"+strconv.Itoa(i+1), "bob=+1", "carol=+2", "dave=+3", "erin=+4")
	}
	w.produce("erin=close")
	w.drain(r)
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	in0 := store.TopicPartition{Topic: "accounts", Partition: 0}
	crashed := w.c.InitProducerID(store.TransactionalID("bank", in0), time.Minute)
	if _, err := crashed.Produce(store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: 0},
		wire.EncodeSnapshot("", store.Snapshot{Key: []byte("dave"), Value: []byte("-999999"), Offset: 1 << 40})); err != nil {
		t.Fatal(err)
	}

	var changes []view.Change[int]
	v := w.view(func(c *view.Config[int]) {
		c.OnChange = func(ch view.Change[int]) { changes = append(changes, ch) }
	})
	for range 10 {
		if err := v.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		w.c.Advance(time.Second)
	}
	st := v.Status()
	if st.CaughtUp || st.Partitions[0].CaughtUp || !st.Partitions[1].CaughtUp || st.Partitions[0].Lag != 0 {
		t.Fatalf("status %+v with the transaction open: want partition 0 waiting (read to the last stable offset, lag 0, not at the target) and partition 1 caught up", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := v.WaitCaughtUp(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitCaughtUp with the transaction open = %v, want to wait (here: the context's error)", err)
	}
	w.checkView(v) // what is committed is there before it caught up

	w.c.Advance(2 * time.Minute) // the coordinator aborts the transaction (timeout 1 min)
	w.stepView(v)
	if err := v.WaitCaughtUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.checkView(v)
	for _, ch := range changes {
		if ch.State == -999999 {
			t.Fatalf("the view's change stream showed the crashed owner's open transaction: %+v", ch)
		}
	}
	// The change stream: every committed snapshot, per partition in log
	// order; erin's close as a delete.
	if n := len(changes); n == 0 || !slices.ContainsFunc(changes, func(ch view.Change[int]) bool { return string(ch.Key) == "erin" && ch.Deleted }) {
		t.Fatalf("changes %+v: want erin's delete among them", changes)
	}
	last := map[string]int64{}
	for _, ch := range changes {
		if ch.Offset < last[string(ch.Key)] {
			t.Fatalf("change %+v after offset %d of its key: out of log order", ch, last[string(ch.Key)])
		}
		last[string(ch.Key)] = ch.Offset
	}
}

// A view with a Dir restarts from its cache's checkpoints: it reads only
// the snapshots written since it closed. An engine or another view on the
// same Dir at the same time is refused.
func TestViewRestartReadsOnlyTheDeltaOnSim(t *testing.T) {
	w := newSimWorld(t)
	r := w.runner(w.engine())
	for i := range 20 {
		w.produce("alice=+"+strconv.Itoa(i+1), "bob=+1", "carol=+2", "dave=+3", "erin=+4")
		w.drain(r)
	}
	dir := t.TempDir()
	v := w.view(func(c *view.Config[int]) { c.Dir = dir })
	w.stepView(v)
	w.checkView(v)
	full := int64(0)
	for _, p := range v.Status().Partitions {
		full += p.Read
	}
	if _, err := view.New(context.Background(), view.Config[int]{Store: w.store, Topic: "accounts", Codec: intCodec{}, Dir: dir}); !errors.Is(err, engine.ErrCacheDirInUse) {
		t.Fatalf("a second view on an open view's Dir: %v, want ErrCacheDirInUse", err)
	}
	if _, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: w.store, Dir: dir}); !errors.Is(err, engine.ErrCacheDirInUse) {
		t.Fatalf("an engine on an open view's Dir: %v, want ErrCacheDirInUse", err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}

	w.produce("dave=+100", "erin=close")
	w.drain(r)
	v2 := w.view(func(c *view.Config[int]) { c.Dir = dir })
	for _, p := range v2.Status().Partitions {
		if p.From < 0 {
			t.Fatalf("partition %d reopened from the log start, want the cache's checkpoint: %+v", p.Partition, p)
		}
	}
	w.stepView(v2)
	w.checkView(v2)
	delta := int64(0)
	for _, p := range v2.Status().Partitions {
		delta += p.Read
	}
	if delta == 0 || delta > 4 {
		t.Fatalf("the restart read %d snapshots (the first open %d), want the 2 written since and at most the last transaction's others", delta, full)
	}
	t.Logf("first open read %d snapshots, the restart %d", full, delta)

	// An engine given the view's Dir afterwards never takes the view's
	// copies for its own: its checkpoints are a view's.
	if err := v2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	logs := &logCount{}
	r2 := w.runner(w.engineWith(func(c *engine.Config[int]) { c.Dir, c.Logger = dir, slog.New(logs) }))
	w.drain(r2)
	w.check(r2)
	lines := recoveryLines(logs)
	if len(lines) != 2 {
		t.Fatalf("the engine's recoveries: %v, want both partitions'", lines)
	}
	for tp, got := range lines {
		if !strings.HasPrefix(got, "full "+engine.RecoveryOtherGroup+" ") {
			t.Fatalf("the engine on the view's Dir recovered %s as %q, want in full (%s)", tp, got, engine.RecoveryOtherGroup)
		}
	}
}

// Range and All yield the live keys in key order; a key or a partition
// the view does not hold is refused with a *PartitionNotHeldError.
func TestViewRangeAndPartitionsHeldOnSim(t *testing.T) {
	w := newSimWorld(t)
	r := w.runner(w.engine())
	w.produce("alice=+1", "bob=+2", "carol=+3", "dave=+4", "erin=+5", "erin=close")
	w.drain(r)
	v := w.view(func(c *view.Config[int]) { c.Partitions = []int32{0} })
	w.stepView(v)
	if got, ok, err := v.Get([]byte("erin")); err != nil || ok {
		t.Fatalf("Get erin = %d, %t, %v after its close, want absent", got, ok, err)
	}
	if got, ok, err := v.Get([]byte("dave")); err != nil || !ok || got != 4 {
		t.Fatalf("Get dave = %d, %t, %v, want 4", got, ok, err)
	}
	v.Close()
	v = w.view(func(c *view.Config[int]) { c.Partitions = []int32{1} })
	w.stepView(v)
	var keys []string
	for e, err := range v.All() {
		if err != nil {
			t.Fatal(err)
		}
		if e.Partition != 1 || w.want[string(e.Key)] != e.State {
			t.Fatalf("All yielded %+v", e)
		}
		keys = append(keys, string(e.Key))
	}
	if !slices.Equal(keys, []string{"alice", "bob", "carol"}) {
		t.Fatalf("All yielded %q, want the live keys of partition 1 in key order (alice, bob, carol)", keys)
	}
	_, _, err := v.Get([]byte("dave"))
	if nh, ok := errors.AsType[*view.PartitionNotHeldError](err); !ok || nh.Partition != 0 || !slices.Equal(nh.Held, []int32{1}) {
		t.Fatalf("Get of a key of partition 0 = %v, want a *PartitionNotHeldError naming partition 0 and the held [1]", err)
	}
	for _, err := range v.Range(0) {
		if _, ok := errors.AsType[*view.PartitionNotHeldError](err); !ok {
			t.Fatalf("Range(0) = %v, want a *PartitionNotHeldError", err)
		}
	}
}

// The view's misconfigurations are refused at NewView with a typed error
// naming what is wrong.
func TestViewMisconfiguredOnSim(t *testing.T) {
	w := newSimWorld(t)
	plain, err := w.c.NewBackend(sim.BackendConfig{Mode: store.Plain})
	if err != nil {
		t.Fatal(err)
	}
	tf := w.store
	for name, tc := range map[string]struct {
		cfg     view.Config[int]
		subject string // of the *store.ConfigError; "" for any error matching ErrMisconfigured
	}{
		"no store":              {view.Config[int]{Topic: "accounts", Codec: intCodec{}}, "view.Config.Store"},
		"no topic":              {view.Config[int]{Store: tf, Codec: intCodec{}}, "view.Config.Topic"},
		"no codec":              {view.Config[int]{Store: tf, Topic: "accounts"}, "view.Config.Codec"},
		"a Plain store":         {view.Config[int]{Store: plain, Topic: "accounts", Codec: intCodec{}}, "view.Config.Store"},
		"a partition twice":     {view.Config[int]{Store: tf, Topic: "accounts", Codec: intCodec{}, Partitions: []int32{1, 1}}, "view.Config.Partitions"},
		"a partition of none":   {view.Config[int]{Store: tf, Topic: "accounts", Codec: intCodec{}, Partitions: []int32{2}}, "view.Config.Partitions"},
		"a missing topic":       {view.Config[int]{Store: tf, Topic: "nope", Codec: intCodec{}}, ""},
		"a missing plain topic": {view.Config[int]{Store: tf, Topic: "nope", Codec: intCodec{}, Plain: true}, ""},
		"no snapshot topic":     {view.Config[int]{Store: mustBackend(t, w.c, sim.BackendConfig{Mode: store.Transactional, TransactionalIDPrefix: "x", SnapshotTopic: func(string) string { return "none" }}), Topic: "accounts", Codec: intCodec{}}, ""},
	} {
		_, err := view.New(context.Background(), tc.cfg)
		ce, isCE := errors.AsType[*store.ConfigError](err)
		if !errors.Is(err, store.ErrMisconfigured) || tc.subject != "" && (!isCE || ce.Subject != tc.subject) {
			t.Errorf("%s: NewView = %v, want an error matching store.ErrMisconfigured (a *store.ConfigError for %q)", name, err, tc.subject)
		}
	}
}

func mustBackend(t *testing.T, c *sim.Cluster, cfg sim.BackendConfig) *sim.Backend {
	t.Helper()
	b, err := c.NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// A corrupt record in the snapshot topic fails its partition, loudly:
// Step returns it, and so do WaitCaughtUp, the status, and the
// partition's reads; the other partition reads on. A snapshot whose state
// does not decode is the key's error alone.
func TestViewCorruptRecordsOnSim(t *testing.T) {
	w := newSimWorld(t)
	r := w.runner(w.engine())
	w.produce("alice=+1", "dave=+2")
	w.drain(r)
	snaps0 := store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: 0}
	snaps1 := store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: 1}
	if _, err := w.c.Produce(snaps0, wire.Record{Key: []byte("foreign"), Value: []byte("no headers")}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.c.Produce(snaps1, wire.EncodeSnapshot("", store.Snapshot{Key: []byte("zed"), Value: []byte("not a number"), Offset: 99})); err != nil {
		t.Fatal(err)
	}
	var decodeErrs []error
	v := w.view(func(c *view.Config[int]) {
		c.OnChange = func(ch view.Change[int]) {
			if ch.Err != nil {
				decodeErrs = append(decodeErrs, ch.Err)
			}
		}
	})
	err := v.Step(context.Background())
	pe, ok := errors.AsType[*view.PartitionError](err)
	if _, corrupt := errors.AsType[*store.CorruptRecordError](err); !ok || !corrupt || pe.Partition != 0 {
		t.Fatalf("Step = %v, want a *ViewPartitionError of partition 0 wrapping a *store.CorruptRecordError", err)
	}
	if err := v.WaitCaughtUp(context.Background()); !errors.Is(err, store.ErrCorruptRecord) {
		t.Fatalf("WaitCaughtUp = %v, want the partition's failure", err)
	}
	if st := v.Status(); st.CaughtUp || !errors.Is(st.Partitions[0].Err, store.ErrCorruptRecord) || st.Partitions[1].Err != nil {
		t.Fatalf("status %+v: want partition 0 failed, partition 1 reading", st)
	}
	if _, _, err := v.Get([]byte("dave")); !errors.Is(err, store.ErrCorruptRecord) {
		t.Fatalf("Get of a key of the failed partition = %v, want its failure", err)
	}
	if got, ok, err := v.Get([]byte("alice")); err != nil || !ok || got != 1 {
		t.Fatalf("Get alice = %d, %t, %v; want 1 from the partition that reads on", got, ok, err)
	}
	_, _, err = v.Get([]byte("zed"))
	if se, ok := errors.AsType[*engine.RecoveredStateError](err); !ok || string(se.Key) != "zed" || se.Offset != 99 {
		t.Fatalf("Get zed = %v, want a *RecoveredStateError naming the key and its offset", err)
	}
	if len(decodeErrs) != 1 {
		t.Fatalf("OnChange heard %v, want zed's decode error", decodeErrs)
	}
	// Step opens the failed partition again, and it fails again on the
	// same record.
	if err := v.Step(context.Background()); !errors.Is(err, store.ErrCorruptRecord) {
		t.Fatalf("Step after the failure = %v, want it again", err)
	}
	// Run too: it stops the other partition's reader and returns the
	// failure.
	if err := v.Run(context.Background()); !errors.Is(err, store.ErrCorruptRecord) {
		t.Fatalf("Run = %v, want the partition's failure", err)
	}
}

// A table of plain key/values (ViewConfig.Plain): a compacted topic no
// engine writes, keyed with Kafka's default partitioner. A null value
// deletes; an aborted transaction's records never show; any store mode
// reads it read_committed.
func TestPlainTableOnSim(t *testing.T) {
	c := sim.New(sim.Config{Seed: 1})
	if err := c.CreateTopic("sellers", sim.TopicConfig{Partitions: 3, Compacted: true}); err != nil {
		t.Fatal(err)
	}
	put := func(key, value string) {
		rec := wire.Record{Key: []byte(key)}
		if value != "" {
			rec.Value = []byte(value)
		}
		if _, err := c.Produce(store.TopicPartition{Topic: "sellers", Partition: store.OutputPartition(rec.Key, 3)}, rec); err != nil {
			t.Fatal(err)
		}
	}
	put("s1", `"acme"`)
	put("s2", `"globex"`)
	put("s3", `"initech"`)
	put("s2", "") // deleted
	aborted := c.InitProducerID("other-app", time.Minute)
	if _, err := aborted.Produce(store.TopicPartition{Topic: "sellers", Partition: store.OutputPartition([]byte("s1"), 3)},
		wire.Record{Key: []byte("s1"), Value: []byte(`"aborted"`)}); err != nil {
		t.Fatal(err)
	}
	if err := aborted.EndTxn(false); err != nil {
		t.Fatal(err)
	}
	put("s3", `"initrode"`)

	b := mustBackend(t, c, sim.BackendConfig{Mode: store.Plain})
	var changes []string
	v, err := view.New(context.Background(), view.Config[string]{Store: b, Topic: "sellers", Plain: true, Codec: engine.JSON[string](),
		OnChange: func(ch view.Change[string]) { changes = append(changes, string(ch.Key)+"="+ch.State) }})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if v.Name() != "sellers" {
		t.Fatalf("Name = %q", v.Name())
	}
	for !v.Status().CaughtUp {
		if err := v.Step(context.Background()); err != nil {
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
	if want := map[string]string{"s1": "acme", "s3": "initrode"}; !maps.Equal(got, want) {
		t.Fatalf("the table holds %v, want %v (s2 deleted, the aborted s1 never shown)", got, want)
	}
	if s, ok, err := v.Get([]byte("s3")); err != nil || !ok || s != "initrode" {
		t.Fatalf("Get s3 = %q, %t, %v", s, ok, err)
	}
	if slices.Contains(changes, "s1=aborted") {
		t.Fatalf("the change stream %v showed the aborted record", changes)
	}
}

// Run follows until Close, which waits for it; one Run or Step at a
// time; a closed view refuses reads.
func TestViewRunAndCloseOnSim(t *testing.T) {
	w := newSimWorld(t)
	r := w.runner(w.engine())
	w.produce("alice=+1", "bob=+2", "carol=+3")
	w.drain(r)
	v := w.view(nil)
	done := make(chan error, 1)
	go func() { done <- v.Run(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := v.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	w.checkView(v)
	if err := v.Step(context.Background()); !errors.Is(err, view.ErrRunning) {
		t.Fatalf("Step while Run runs = %v, want ErrViewRunning", err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v after Close, want nil", err)
		}
	default:
		t.Fatal("Close returned before Run")
	}
	if _, _, err := v.Get([]byte("alice")); !errors.Is(err, view.ErrClosed) {
		t.Fatalf("Get after Close = %v, want ErrViewClosed", err)
	}
	if err := v.Run(context.Background()); !errors.Is(err, view.ErrClosed) {
		t.Fatalf("Run after Close = %v, want ErrViewClosed", err)
	}
	if err := v.WaitCaughtUp(context.Background()); !errors.Is(err, view.ErrClosed) {
		t.Fatalf("WaitCaughtUp after Close = %v, want ErrViewClosed", err)
	}
}

// A view of an engine whose keys hold timers shows their states as
// written: a snapshot carrying timers (record format version 2) is read,
// its timers passed over.
func TestViewOfKeysWithTimersOnSim(t *testing.T) {
	w := newSimWorld(t)
	e, err := engine.New(engine.Config[int]{
		Codec: intCodec{}, Store: w.store, PersistInterval: time.Second, CommitInterval: 2 * time.Second,
		Fold: func(key []byte, s int, exists bool, rec engine.Record) (engine.Result[int], error) {
			res, err := balance(key, s, exists, rec)
			if err != nil || res.Deleted() {
				return res, err
			}
			return res.SetTimer(engine.Timer{Kind: engine.ProcessingTime, At: rec.Timestamp.Add(time.Hour)}), nil
		},
		OnTimer: func(key []byte, s int, _ engine.Timer) (engine.Result[int], error) { return engine.Keep[int](), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	r := w.runner(e)
	w.produce("alice=+1", "bob=+2", "dave=+4", "alice=+10")
	w.drain(r)
	v := w.view(nil)
	w.stepView(v)
	for _, key := range []string{"alice", "bob", "dave"} {
		if got, ok, err := v.Get([]byte(key)); err != nil || !ok || got != w.want[key] {
			t.Fatalf("Get %s = %d, %t, %v; want %d", key, got, ok, err, w.want[key])
		}
	}
}
