package engine_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/prom"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// olderStates is a world whose accounts/1 snapshots were written by an
// earlier state encoding ("old:N", which intCodec does not read), as after
// a deploy that changed the state type: bob twice (input offsets 7, then
// 12, the one recovery uses), dan once (3); zed's old state (5) is
// superseded by a decodable one (9), and eve's is decodable. The input
// holds 13 records of "a" (offsets 0 to 12), so the snapshots' offsets
// are real ones.
func olderStates(t *testing.T) *simWorld {
	w := newSimWorld(t)
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	p, err := w.store.Acquire(context.Background(), store.Acquisition{Input: tp,
		Identity: store.IdentityFunc(func() store.GroupIdentity { return store.GroupIdentity{} })})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	for range 13 {
		w.produce("a=+1")
	}
	for _, s := range []struct {
		key, value string
		offset     int64
	}{{"bob", "old:5", 7}, {"dan", "old:4", 3}, {"zed", "old:1", 5}, {"bob", "old:6", 12}, {"zed", "9", 9}, {"eve", "4", 2}} {
		if _, err := w.c.Produce(snapshotsOf(tp), wire.EncodeSnapshot("bank", store.Snapshot{Key: []byte(s.key), Value: []byte(s.value), Offset: s.offset})); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func snapshotsOf(tp store.TopicPartition) store.TopicPartition {
	return store.TopicPartition{Topic: sim.DefaultSnapshotTopic("bank", tp.Topic), Partition: tp.Partition}
}

// snapshotTombstones are the keys with a tombstone in tp's snapshot
// partition.
func (w *simWorld) snapshotTombstones(tp store.TopicPartition) []string {
	w.t.Helper()
	ents, err := w.c.Read(snapshotsOf(tp), true)
	if err != nil {
		w.t.Fatal(err)
	}
	var keys []string
	for _, e := range ents {
		if e.Control == sim.NoControl && e.Record.Value == nil {
			keys = append(keys, string(e.Record.Key))
		}
	}
	return keys
}

// upgradingCodec is the codec a team would deploy after the change: it
// writes intCodec's encoding behind a version, and reads the earlier one.
func upgradingCodec() engine.Codec[int] {
	return engine.VersionedCodec[int]{Version: 1, Current: intCodec{}, Unversioned: func(b []byte) (int, error) {
		n, ok := strings.CutPrefix(string(b), "old:")
		if !ok {
			return intCodec{}.Decode(b) // the snapshots written before the change
		}
		return strconv.Atoi(n)
	}}
}

// counted is the sum of a counter's series with the label value.
func counted(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// States a codec change made unreadable are not deleted by the policy for
// bad input: under SkipPoison the partition stops before it is running,
// with the error naming bob's latest snapshot (offset 12, not the
// superseded 7) and counting the keys, not the records; nothing is
// deleted, written or committed. Deploying a codec that reads the old
// encoding then recovers every key's state from the same snapshots. The
// default policies do the same.
func TestUndecodableStateIsNotDeletedBySkipPoisonOnSim(t *testing.T) {
	for _, poison := range []engine.PoisonPolicy{engine.SkipPoison, engine.StopOnPoison} {
		t.Run(poison.String(), func(t *testing.T) { undecodableStateStops(t, poison) })
	}
}

func undecodableStateStops(t *testing.T, poison engine.PoisonPolicy) {
	w := olderStates(t)
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	reg := prometheus.NewRegistry()
	m, err := prom.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := w.runner(w.engineWith(func(c *engine.Config[int]) { c.Poison, c.Observer = poison, m }))
	ended := w.stepUntilError(r, 5*time.Second, nil)
	se, ok := errors.AsType[*engine.RecoveredStateError](ended)
	if !ok || string(se.Key) != "bob" || se.Offset != 12 || se.Keys != 2 || se.Input != tp {
		t.Fatalf("the runner ended with %v, want a *RecoveredStateError for bob at input offset 12, 2 keys", ended)
	}
	for _, want := range []string{`key "bob" (input offset 12) does not decode`, "so do 1 other keys' states", "VersionedCodec", "DiscardUndecodableState"} {
		if !strings.Contains(ended.Error(), want) {
			t.Fatalf("the error %q lacks %q", ended, want)
		}
	}
	if ps := partitionStatus(t, r.Status(), tp); ps.State == engine.StateRunning || r.Status().Ready() {
		t.Fatalf("%s is %s (ready %t) after its recovery stopped", tp, ps.State, r.Status().Ready())
	}
	if n := counted(t, reg, "snapfence_undecodable_states_total", "action", "stopped"); n != 2 {
		t.Fatalf("snapfence_undecodable_states_total{action=stopped} = %v, want 2 (keys, not records)", n)
	}
	if err := r.Close(context.Background()); err != nil && !errors.Is(err, ended) {
		t.Logf("close: %v", err)
	}
	if dead := w.snapshotTombstones(tp); len(dead) > 0 {
		t.Fatalf("tombstones for %q: an undecodable state was deleted", dead)
	}
	if off, ok := w.c.CommittedOffset("bank", tp); ok {
		t.Fatalf("committed %d past undecodable states", off)
	}

	w.produce("bob=+1", "dan=+1")
	fixed := w.runner(w.engineWith(func(c *engine.Config[int]) { c.Poison, c.Codec = poison, upgradingCodec() }))
	w.drain(fixed)
	for key, want := range map[string]int{"bob": 7, "dan": 5, "zed": 9, "eve": 4, "a": 13} {
		if got, ok, err := fixed.State(tp, []byte(key)); err != nil || !ok || got != want {
			t.Fatalf("%s = %d (%t, %v), want %d", key, got, ok, err, want)
		}
	}
}

// A key whose old snapshot does not decode but whose latest does is not
// undecodable: recovery uses the latest.
func TestSupersededUndecodableSnapshotIsIgnoredOnSim(t *testing.T) {
	w := newSimWorld(t)
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	p, err := w.store.Acquire(context.Background(), store.Acquisition{Input: tp,
		Identity: store.IdentityFunc(func() store.GroupIdentity { return store.GroupIdentity{} })})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	w.produce("bob=+1", "bob=+1")
	for _, v := range []string{"old:1", "1"} { // both of input offset 0
		if _, err := w.c.Produce(snapshotsOf(tp), wire.EncodeSnapshot("bank", store.Snapshot{Key: []byte("bob"), Value: []byte(v), Offset: 0})); err != nil {
			t.Fatal(err)
		}
	}
	w.want = ledger{"bob": 2}
	r := w.runner(w.engine())
	w.drain(r)
	w.check(r)
}

// DiscardUndecodableState, the explicit choice, deletes the keys whose
// latest snapshot does not decode: tombstones replace their snapshots, the
// keys fold on from empty, each key is counted once (bob's two snapshots
// are one key) and logged with the offset recovery used; a key whose
// latest snapshot decodes keeps its state.
func TestDiscardUndecodableStateDeletesEachKeyOnceOnSim(t *testing.T) {
	w := olderStates(t)
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	reg := prometheus.NewRegistry()
	m, err := prom.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	w.produce("bob=+1")
	r := w.runner(w.engineWith(func(c *engine.Config[int]) {
		c.UndecodableState, c.Observer = engine.DiscardUndecodableState, m
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}))
	w.drain(r)
	for key, want := range map[string]int{"bob": 1, "zed": 9, "eve": 4, "a": 13} {
		if got, ok, err := r.State(tp, []byte(key)); err != nil || !ok || got != want {
			t.Fatalf("%s = %d (%t, %v), want %d", key, got, ok, err, want)
		}
	}
	if _, ok, err := r.State(tp, []byte("dan")); err != nil || ok {
		t.Fatalf("dan exists (%t, %v) after its state was discarded", ok, err)
	}
	if n := counted(t, reg, "snapfence_undecodable_states_total", "action", "discarded"); n != 2 {
		t.Fatalf("snapfence_undecodable_states_total{action=discarded} = %v, want 2 (bob and dan)", n)
	}
	if dead := w.snapshotTombstones(tp); !strings.Contains(strings.Join(dead, ","), "dan") {
		t.Fatalf("tombstones %q, want dan's", dead)
	}
	if !strings.Contains(logs.String(), "key=bob offset=12") {
		t.Fatalf("the log does not name bob's latest snapshot:\n%s", logs.String())
	}
}

// UndecodableState takes only its two values.
func TestUndecodableStatePolicyIsValidated(t *testing.T) {
	w := newSimWorld(t)
	_, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: w.store, UndecodableState: 7})
	if ce, ok := errors.AsType[*store.ConfigError](err); !ok || !strings.Contains(ce.Subject, "UndecodableState") {
		t.Fatalf("New = %v, want a *store.ConfigError naming UndecodableState", err)
	}
}

// taggedCodec is a state encoding intCodec's snapshots are not: a deploy
// that changed it without reading the old one.
type taggedCodec struct{}

func (taggedCodec) Encode(n int) ([]byte, error) { return []byte("n:" + strconv.Itoa(n)), nil }
func (taggedCodec) Decode(b []byte) (int, error) {
	n, ok := strings.CutPrefix(string(b), "n:")
	if !ok {
		return 0, errors.New("no n: tag")
	}
	return strconv.Atoi(n)
}

// A warm restart under DiscardUndecodableState recovers in full, so the
// states the cache kept are decoded (and the undecodable ones discarded)
// before the partition runs: with a delta, the first fold of such a key
// would meet its state and stop.
func TestDiscardUndecodableStateRecoversInFullOnSim(t *testing.T) {
	w := newWarmWorld(t, store.Transactional)
	w.produce("alice=+1", "bob=+2")
	w.run("bank", nil)
	w.recoveries()
	e, err := engine.New(engine.Config[int]{Fold: balance, Codec: taggedCodec{}, Store: w.store, Dir: w.dir,
		UndecodableState: engine.DiscardUndecodableState,
		PersistInterval:  time.Second, CommitInterval: 2 * time.Second, Logger: slog.New(w.logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r, err := e.Join(simsource.New(w.c, "bank", sim.ClassicEager, 0, "accounts"))
	if err != nil {
		t.Fatal(err)
	}
	w.produce("bob=+5")
	w.drainGroup("bank", r)
	w.wantRecoveries("the restart with a new codec", map[string]string{
		"accounts/1": "full " + engine.RecoveryDiscardUndecodableState + " 2"}) // alice's and bob's snapshots
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	if got, ok, err := r.State(tp, []byte("bob")); err != nil || !ok || got != 5 {
		t.Fatalf("bob = %d (%t, %v), want 5, folded from empty", got, ok, err)
	}
	if _, ok, err := r.State(tp, []byte("alice")); err != nil || ok {
		t.Fatalf("alice exists (%t, %v) after its state was discarded", ok, err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
