package engine_test

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/prom"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// Warm restarts on the simulated cluster (docs/operations.md, "Warm
// restarts"): an engine restarted on its directory recovers only the
// snapshots written since its cache's checkpoint, unless the checkpoint
// is no valid base, and then in full, saying why. Whatever the path, the
// state after a restart is the committed snapshots, exactly.

// warmWorld is a simulated cluster with engines that share a cache
// directory, one at a time, and others (in memory) that stand for the
// other instances of the application.
type warmWorld struct {
	*simWorld
	dir  string
	logs *logCount
	// m, if set, is every run's metrics.
	m *prom.Metrics
}

func newWarmWorld(t *testing.T, mode store.Mode) *warmWorld {
	c := sim.New(sim.Config{Seed: 7})
	if err := c.CreateTopic("accounts", sim.TopicConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	b, err := c.NewBackend(sim.BackendConfig{Mode: mode, TransactionalIDPrefix: "bank", CreateTopics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return &warmWorld{simWorld: &simWorld{t: t, c: c, store: b, want: ledger{}}, dir: t.TempDir(), logs: &logCount{}}
}

// run starts an engine on the shared directory (store: the world's, if
// nil), drains the input with it in group, checks its state against the
// committed snapshots, and stops it.
func (w *warmWorld) run(group string, st store.Backend) {
	w.t.Helper()
	if err := w.runChecked(group, st); err != nil {
		w.t.Fatal(err)
	}
}

// runChecked is run, returning the state check's failure.
func (w *warmWorld) runChecked(group string, st store.Backend) error {
	w.t.Helper()
	if st == nil {
		st = w.store
	}
	e, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: st, Dir: w.dir,
		PersistInterval: time.Second, CommitInterval: 2 * time.Second, Logger: slog.New(w.logs), Observer: w.m})
	if err != nil {
		w.t.Fatal(err)
	}
	r, err := e.Join(simsource.New(w.c, group, sim.ClassicEager, 0, "accounts"))
	if err != nil {
		w.t.Fatal(err)
	}
	w.drainGroup(group, r)
	checkErr := w.checkCommitted(r)
	if err := r.Close(context.Background()); err != nil {
		w.t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		w.t.Fatal(err)
	}
	return checkErr
}

// other is another instance (its cache in memory) that drains the input.
func (w *warmWorld) other() {
	w.t.Helper()
	r := w.runner(w.engine())
	w.drain(r)
	if err := r.Close(context.Background()); err != nil {
		w.t.Fatal(err)
	}
}

func (w *warmWorld) drainGroup(group string, r *engine.Member[int]) {
	w.t.Helper()
	for range 60 {
		if err := r.Step(context.Background()); err != nil {
			w.t.Fatal(err)
		}
		w.c.Advance(time.Second)
		done := true
		for p := range int32(2) {
			tp := store.TopicPartition{Topic: "accounts", Partition: p}
			_, _, end, _ := w.c.Offsets(tp)
			off, _ := w.c.CommittedOffset(group, tp)
			done = done && off == end && len(r.Flows()) == 2
		}
		if done {
			return
		}
	}
	w.t.Fatal("the runner did not commit to the end of the input in 60s")
}

// checkCommitted checks r's state of every key against the last committed
// snapshot of the key in the snapshot topic: after a drain every change
// is in one.
func (w *warmWorld) checkCommitted(r *engine.Member[int]) error {
	w.t.Helper()
	want := map[string]int{}
	for p := range int32(2) {
		snaps := store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: p}
		ents, err := w.c.Read(snaps, true)
		if err != nil {
			w.t.Fatal(err)
		}
		for _, e := range ents {
			s, kind, err := wire.DecodeRecord(snaps, e.Offset, e.Record)
			if err != nil || kind == wire.KindOffsetMarker {
				continue
			}
			if s.Tombstone {
				delete(want, string(s.Key))
				continue
			}
			n, _ := strconv.Atoi(string(s.Value))
			want[string(s.Key)] = n
		}
	}
	for _, key := range []string{"alice", "bob", "carol", "dave", "erin"} {
		tp := store.TopicPartition{Topic: "accounts", Partition: int32(len(key) % 2)}
		got, ok, err := r.State(tp, []byte(key))
		if err != nil {
			w.t.Fatal(err)
		}
		if n, wOK := want[key]; ok != wOK || got != n {
			return fmt.Errorf("%s = %d (%t) after the restart, the committed snapshots say %d (%t)", key, got, ok, n, wOK)
		}
	}
	return nil
}

// recoveries are the "partition recovered" lines logged since the last
// call: input -> "kind reason snapshots".
func (w *warmWorld) recoveries() map[string]string { return recoveryLines(w.logs) }

// recoveryLines takes the "partition recovered" lines l holds: input ->
// "kind reason snapshots" (the last one of each input).
func recoveryLines(l *logCount) map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]string{}
	for _, line := range l.lines {
		if !strings.HasPrefix(line, "INFO partition recovered ") {
			continue
		}
		attr := func(k string) string {
			_, v, _ := strings.Cut(line, " "+k+"=")
			v, _, _ = strings.Cut(v, " ")
			return v
		}
		out[attr("input")] = attr("recovery") + " " + attr("full_reason") + " " + attr("snapshots")
	}
	l.lines, l.counts = nil, nil
	return out
}

func (w *warmWorld) wantRecoveries(what string, want map[string]string) {
	w.t.Helper()
	got := w.recoveries()
	for in, v := range want {
		if got[in] != v {
			w.t.Fatalf("%s: %s recovered %q, want %q (kind, full reason, snapshots read); all: %v", what, in, got[in], v, got)
		}
	}
}

// A restart on the same directory after a clean stop reads only what
// another instance wrote meanwhile.
func TestWarmRestartReadsOnlyTheDeltaOnSim(t *testing.T) {
	w := newWarmWorld(t, store.Transactional)
	w.produce("alice=+1", "bob=+2", "carol=+3", "dave=+4", "erin=+5", "alice=+6", "bob=+7")
	w.run("bank", nil)
	w.wantRecoveries("the first start", map[string]string{
		"accounts/0": "full " + engine.RecoveryNoCheckpoint + " 0", "accounts/1": "full " + engine.RecoveryNoCheckpoint + " 0"})
	w.run("bank", nil)
	w.wantRecoveries("a restart with nothing new", map[string]string{"accounts/0": "delta  0", "accounts/1": "delta  0"})
	w.produce("bob=+10", "erin=close")
	w.other()
	w.run("bank", nil)
	// bob (partition 1) and erin's tombstone (partition 0): one each.
	w.wantRecoveries("a restart after another instance wrote", map[string]string{"accounts/0": "delta  1", "accounts/1": "delta  1"})
}

// A delta recovery says what it started from: its log line names the
// checkpoint's offset and no empty reason, and it is counted with the
// reason checkpoint, never an empty label.
func TestDeltaRecoveryNamesItsCheckpointOnSim(t *testing.T) {
	w := newWarmWorld(t, store.Transactional)
	m, reg := newMetrics(t)
	w.m = m
	w.produce("alice=+1", "bob=+2")
	w.run("bank", nil)
	w.recoveries()
	w.run("bank", nil)
	w.logs.mu.Lock()
	var lines []string
	for _, line := range w.logs.lines {
		if strings.HasPrefix(line, "INFO partition recovered ") {
			lines = append(lines, line)
		}
	}
	w.logs.mu.Unlock()
	if len(lines) != 2 {
		t.Fatalf("recovery lines %q, want one per partition", lines)
	}
	for _, line := range lines {
		if !strings.Contains(line, " recovery=delta ") || !strings.Contains(line, " checkpoint_offset=") || strings.Contains(line, `=""`) ||
			strings.Contains(line, "reason") {
			t.Fatalf("delta recovery logged %q, want recovery=delta with its checkpoint_offset and no reason", line)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "snapfence_recoveries_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["kind"]+"/"+labels["reason"]] += mt.GetCounter().GetValue()
		}
	}
	want := map[string]float64{"full/" + engine.RecoveryNoCheckpoint: 2, "delta/" + engine.RecoveryCheckpoint: 2}
	if len(got) != len(want) || got["full/"+engine.RecoveryNoCheckpoint] != 2 || got["delta/"+engine.RecoveryCheckpoint] != 2 {
		t.Fatalf("snapfence_recoveries_total by kind/reason %v, want %v", got, want)
	}
}

// Every reason to fall back to a full recovery, each after a warm start
// (the first run) and the perturbation it names, and each with the state
// equal to the committed snapshots after it.
func TestWarmRestartFallsBackToAFullRecoveryOnSim(t *testing.T) {
	snaps0 := store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: 0}
	full := func(reason string) map[string]string {
		return map[string]string{"accounts/0": "full " + reason, "accounts/1": "full " + reason}
	}
	for name, tc := range map[string]struct {
		perturb func(w *warmWorld)
		group   string
		want    map[string]string // input -> "kind reason" (snapshots not compared)
	}{
		"another group": {group: "ledger", want: full(engine.RecoveryOtherGroup)},
		"the snapshot topic recreated": {perturb: func(w *warmWorld) {
			if err := w.c.DeleteTopic("bank-accounts-snapshots"); err != nil {
				w.t.Fatal(err)
			}
			if err := w.c.CreateTopic("bank-accounts-snapshots", sim.TopicConfig{Partitions: 2, Compacted: true}); err != nil {
				w.t.Fatal(err)
			}
		}, want: full(store.CheckpointTopicRecreated)},
		"the log start moved above the checkpoint": {perturb: func(w *warmWorld) {
			w.produce("dave=+1", "erin=+1") // partition 0: written by another instance, then cut
			w.other()
			_, _, end, _ := w.c.Offsets(snaps0)
			if err := w.c.DeleteRecords(snaps0, end-1); err != nil {
				w.t.Fatal(err)
			}
		}, want: map[string]string{"accounts/0": "full " + store.CheckpointBelowLogStart, "accounts/1": "delta "}},
		"the log truncated below the checkpoint": {perturb: func(w *warmWorld) {
			if err := w.c.Truncate(snaps0, 1); err != nil {
				w.t.Fatal(err)
			}
		}, want: map[string]string{"accounts/0": "full " + store.CheckpointAboveLogEnd, "accounts/1": "delta "}},
		"the checkpoint older than delete.retention.ms": {perturb: func(w *warmWorld) {
			w.c.Advance(sim.DefaultDeleteRetention)
		}, want: full(store.CheckpointTombstoneRetention)},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWarmWorld(t, store.Transactional)
			w.produce("alice=+1", "bob=+2", "carol=+3", "dave=+4", "erin=+5")
			w.run("bank", nil)
			w.recoveries()
			if tc.perturb != nil {
				tc.perturb(w)
			}
			group := "bank"
			if tc.group != "" {
				group = tc.group
			}
			w.run(group, nil)
			got := w.recoveries()
			for in, v := range tc.want {
				if g := got[in]; !strings.HasPrefix(g, v+" ") && g != v {
					t.Fatalf("%s recovered %q, want %q; all: %v", in, g, v, got)
				}
			}
		})
	}
	t.Run("Plain mode", func(t *testing.T) {
		w := newWarmWorld(t, store.Plain)
		w.produce("alice=+1", "bob=+2")
		w.run("bank", nil)
		w.run("bank", nil)
		w.wantRecoveries("a Plain restart", map[string]string{
			"accounts/0": "full " + engine.RecoveryNoCheckpoint + " 0", "accounts/1": "full " + engine.RecoveryNoCheckpoint + " 2"})
	})
}

// The negative control of the retention check: a key deleted by another
// instance while this one was down, its tombstone compacted away after
// delete.retention.ms. The check makes the restart full and the key stays
// deleted; a store that trusts the checkpoint's age (trustingStore) gives
// the key back, and the same check of the state against the committed
// snapshots catches it.
func TestWarmRestartNeverResurrectsACompactedTombstoneOnSim(t *testing.T) {
	for name, trusting := range map[string]bool{"checked": false, "trusting (negative control)": true} {
		t.Run(name, func(t *testing.T) {
			w := newWarmWorld(t, store.Transactional)
			w.produce("bob=+2", "dave=+4")
			w.run("bank", nil)
			w.produce("bob=close")
			w.other()
			// The cleaner's first pass keeps the tombstone and sets its
			// delete horizon; a pass delete.retention.ms later removes it.
			snaps := store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: 1}
			if err := w.c.Compact(snaps); err != nil {
				t.Fatal(err)
			}
			w.c.Advance(sim.DefaultDeleteRetention)
			if err := w.c.Compact(snaps); err != nil {
				t.Fatal(err)
			}
			var st store.Backend
			if trusting {
				st = trustingStore{w.store}
			}
			err := w.runChecked("bank", st)
			t.Logf("the state check: %v; recoveries: %v", err, w.recoveries())
			if (err != nil) != trusting {
				t.Fatalf("the state check says %v; want a failure exactly for the trusting store", err)
			}
		})
	}
}

// trustingStore is a store whose recovery from a checkpoint ignores the
// checkpoint's age: the variant without the retention check.
type trustingStore struct{ store.Backend }

func (s trustingStore) Acquire(ctx context.Context, a store.Acquisition) (store.Partition, error) {
	p, err := s.Backend.Acquire(ctx, a)
	if err != nil {
		return nil, err
	}
	return trustingPartition{p}, nil
}

type trustingPartition struct{ store.Partition }

func (p trustingPartition) Recover(ctx context.Context, from *store.Checkpoint) iter.Seq2[store.Snapshot, error] {
	if from == nil {
		return p.Partition.Recover(ctx, nil)
	}
	cp := *from
	cp.At = time.Now().Add(time.Hour * 24 * 365 * 100) // as if written just now
	return p.Partition.Recover(ctx, &cp)
}
