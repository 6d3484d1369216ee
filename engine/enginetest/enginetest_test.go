package enginetest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/enginetest"
	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// sum adds each record's value to its key's total and emits the total to
// "totals", tagged with the input's partition and offset
// ("total@partition:offset"), so that a reader can tell how often it saw
// each input's output.
func sum(key []byte, total int64, _ bool, rec engine.Record) (engine.Result[int64], error) {
	n, err := strconv.ParseInt(string(rec.Value), 10, 64)
	if err != nil {
		return engine.Result[int64]{}, fmt.Errorf("bad amount %q", rec.Value)
	}
	total += n
	return engine.Set(total).With(engine.Output{Topic: "totals", Key: key,
		Value: fmt.Appendf(nil, "%d@%d:%d", total, rec.Partition, rec.Offset)}), nil
}

// config is the tests' driver configuration: sum over "orders", at least
// once unless exactlyOnce.
func config(exactlyOnce bool) enginetest.Config[int64] {
	return enginetest.Config[int64]{
		Engine: engine.Config[int64]{Fold: sum, Codec: engine.Int64(), OutputTopics: []string{"totals"}, ExactlyOnce: exactlyOnce},
		Topic:  "orders",
	}
}

// outputsPerInput counts the outputs on "totals" by the input that made
// them ("partition:offset").
func outputsPerInput(d *enginetest.Driver[int64]) map[string]int {
	n := map[string]int{}
	for _, o := range d.Outputs("totals") {
		_, in, _ := strings.Cut(string(o.Value), "@")
		n[in]++
	}
	return n
}

// A record goes to the partition Kafka's default partitioner gives its
// key, and the member that runs that partition is its Owner.
func TestProduceUsesKafkasDefaultPartitioner(t *testing.T) {
	d := enginetest.New(t, config(false))
	keys := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace"}
	for _, k := range keys {
		d.Produce("orders", k, "1")
	}
	for _, k := range keys {
		tp := store.TopicPartition{Topic: "orders", Partition: store.OutputPartition([]byte(k), enginetest.DefaultPartitions)}
		ents, err := d.Cluster().Read(tp, true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(ents, func(e sim.Entry) bool { return string(e.Record.Key) == k }) {
			t.Errorf("%s is not in %s, the partition murmur2 gives it", k, tp)
		}
		owner := d.Owner(k)
		if owner < 0 || !slices.Contains(d.Member(owner).Flows(), tp) {
			t.Errorf("Owner(%s) = %d, which does not run %s", k, owner, tp)
		}
	}
}

// Config.Topics sets an output topic's partition count: with one
// partition a read_committed reader sees every output in the order the
// folds made them.
func TestTopicsSetsPartitionCounts(t *testing.T) {
	cfg := config(false)
	cfg.Topics = map[string]int{"totals": 1}
	d := enginetest.New(t, cfg)
	if tc, _ := d.Cluster().Topic("totals"); tc.Partitions != 1 {
		t.Fatalf("totals has %d partitions, want 1", tc.Partitions)
	}
	for _, v := range []string{"1", "2", "3"} {
		d.Produce("orders", "alice", v)
		d.Settle()
	}
	var got []string
	for _, o := range d.Outputs("totals") {
		got = append(got, string(o.Value))
	}
	if want := []string{"1@1:0", "3@1:1", "6@1:2"}; !slices.Equal(got, want) {
		t.Fatalf("outputs %v, want %v", got, want)
	}
}

// Settle folds and commits everything produced; Step folds without
// committing (the control: after a Step the committed state lacks the
// records, after Settle it has them).
func TestSettleCommitsWhatStepOnlyFolds(t *testing.T) {
	d := enginetest.New(t, config(false))
	d.Produce("orders", "alice", "10")
	d.Produce("orders", "bob", "3")
	d.Settle()
	d.Produce("orders", "alice", "5")
	d.Step()
	if got, _ := d.State("alice"); got != 10 {
		t.Fatalf("after Step alice's committed state is %d, want 10: Step must not commit (CommitInterval is a minute)", got)
	}
	d.Settle()
	if got, ok := d.State("alice"); !ok || got != 15 {
		t.Fatalf("after Settle alice = %d (%t), want 15", got, ok)
	}
	if got := d.States(); len(got) != 2 || got["bob"] != 3 {
		t.Fatalf("States = %v, want alice and bob", got)
	}
	if n := len(d.Outputs("totals")); n != 3 {
		t.Fatalf("%d outputs, want one per input: 3", n)
	}
	d.CheckExact()
}

// Advance moves virtual time: a processing-time timer set from the
// record's Now fires once its time has come, and not before (the
// control).
func TestAdvanceFiresProcessingTimeTimers(t *testing.T) {
	cfg := config(false)
	cfg.Engine.Fold = func(key []byte, n int64, _ bool, rec engine.Record) (engine.Result[int64], error) {
		return engine.Set(n + 1).SetTimer(engine.Timer{Kind: engine.ProcessingTime, At: rec.Now.Add(10 * time.Minute)}), nil
	}
	cfg.Engine.OnTimer = func(key []byte, n int64, _ engine.Timer) (engine.Result[int64], error) {
		return engine.Set(-n).With(engine.Output{Topic: "totals", Key: key, Value: []byte("expired")}), nil
	}
	d := enginetest.New(t, cfg)
	d.Produce("orders", "alice", "")
	d.Settle()
	d.Advance(9 * time.Minute)
	if got, _ := d.State("alice"); got != 1 || len(d.Outputs("totals")) != 0 {
		t.Fatalf("after 9 min alice = %d with %d outputs: the 10 min timer fired early", got, len(d.Outputs("totals")))
	}
	d.Advance(2 * time.Minute)
	if got, _ := d.State("alice"); got != -1 {
		t.Fatalf("after 11 min alice = %d, want -1: the timer did not fire", got)
	}
	if outs := d.Outputs("totals"); len(outs) != 1 || string(outs[0].Value) != "expired" {
		t.Fatalf("outputs %v, want the timer's one", outs)
	}
}

// AddMember and RemoveMember rebalance: a second member takes some
// partitions, and when the first leaves the second runs them all; the
// state stays exact throughout.
func TestAddAndRemoveMemberRebalance(t *testing.T) {
	cfg := config(false)
	cfg.Members = 1
	d := enginetest.New(t, cfg)
	keys := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"}
	produce := func() {
		for i, k := range keys {
			d.Produce("orders", k, strconv.Itoa(i+1))
		}
	}
	produce()
	d.Settle()
	if got := len(d.Member(0).Flows()); got != enginetest.DefaultPartitions {
		t.Fatalf("a single member runs %d partitions, want all %d", got, enginetest.DefaultPartitions)
	}
	produce()
	second := d.AddMember()
	a, b := len(d.Member(0).Flows()), len(d.Member(second).Flows())
	if a == 0 || b == 0 || a+b != enginetest.DefaultPartitions {
		t.Fatalf("after AddMember the members run %d and %d partitions, want a share each of %d", a, b, enginetest.DefaultPartitions)
	}
	d.CheckExact()
	produce()
	d.RemoveMember(0)
	if got := d.Members(); !slices.Equal(got, []int{second}) || len(d.Member(second).Flows()) != enginetest.DefaultPartitions {
		t.Fatalf("after RemoveMember(0) members %v, the second running %v; want it alone, running all", got, d.Member(second).Flows())
	}
	if got, _ := d.State("heidi"); got != 24 {
		t.Fatalf("heidi = %d, want 3×8", got)
	}
	d.CheckExact()
}

// crashScript: the owner of alice folds records, emits their outputs and
// crashes before committing; the survivor replays them.
func crashScript(t *testing.T, exactlyOnce bool) *enginetest.Driver[int64] {
	d := enginetest.New(t, config(exactlyOnce))
	d.Produce("orders", "alice", "10")
	d.Settle()
	d.Produce("orders", "alice", "5")
	d.Produce("orders", "alice", "1")
	d.Step() // folded (and, at least once, emitted); not committed
	owner := d.Owner("alice")
	d.Crash(owner)
	if got := d.Owner("alice"); got < 0 || got == owner {
		t.Fatalf("after Crash(%d) alice's partition runs on %d, want a survivor", owner, got)
	}
	if got, _ := d.State("alice"); got != 16 {
		t.Fatalf("alice = %d after the crash, want 16", got)
	}
	d.CheckExact()
	return d
}

// A crash between fold and commit: at least once, the crashed member's
// outputs were emitted and the survivor's replay emits them again; the
// state is exact all the same.
func TestCrashReplaysFromTheCommittedOffset(t *testing.T) {
	d := crashScript(t, false)
	dups := 0
	for _, n := range outputsPerInput(d) {
		if n > 1 {
			dups++
		}
	}
	if dups != 2 {
		t.Fatalf("outputs per input %v: want the two folded before the crash twice (emitted, then replayed)", outputsPerInput(d))
	}
}

// Under ExactlyOnce the crashed member's batch never commits: a
// read_committed reader sees each input's output once (the previous test
// is the control: the same script at least once shows duplicates).
func TestCrashExactlyOnceOutputsOnce(t *testing.T) {
	d := crashScript(t, true)
	for in, n := range outputsPerInput(d) {
		if n != 1 {
			t.Fatalf("input %s's output seen %d times, want once", in, n)
		}
	}
	if n := len(outputsPerInput(d)); n != 3 {
		t.Fatalf("outputs of %d inputs, want 3", n)
	}
}

// staleScript is the lost update a stale owner makes, as a test writes
// it: alice's owner folds
// +5 and pauses before committing; another member takes over and folds
// +100; the paused owner wakes and flushes alice=15.
func staleScript(d *enginetest.Driver[int64]) enginetest.StaleOwnerReport {
	d.Produce("orders", "alice", "10")
	d.Settle()
	d.Produce("orders", "alice", "5")
	return d.StaleOwner(d.Owner("alice"), func() { d.Produce("orders", "alice", "100") })
}

// With the fence the stale owner's flush is rejected, nothing of it
// lands, and the state is the exact fold.
func TestStaleOwnerIsFenced(t *testing.T) {
	d := enginetest.New(t, config(false))
	rep := staleScript(d)
	if len(rep.Fenced) == 0 || len(rep.Landed) != 0 || len(rep.Held) != 1 {
		t.Fatalf("stale owner: %d writes fenced, %d landed, held %v; want some fenced, none landed, alice's partition held", len(rep.Fenced), len(rep.Landed), rep.Held)
	}
	for _, ev := range rep.Fenced {
		if !errors.Is(ev.Err, store.ErrFenced) {
			t.Fatalf("a fenced write's error %v does not match store.ErrFenced", ev.Err)
		}
	}
	if !slices.ContainsFunc(rep.Fenced, writes("alice", "15")) {
		t.Fatalf("no fenced transaction carried the stale alice=15: %+v", rep.Fenced)
	}
	if got, _ := d.State("alice"); got != 115 {
		t.Fatalf("alice = %d, want 115", got)
	}
	if want, _ := d.ExactFold("alice"); want != 115 {
		t.Fatalf("ExactFold(alice) = %d, want 115", want)
	}
	d.CheckExact()
}

// writes reports whether a transaction wrote key's snapshot with the
// encoded state value.
func writes(key, value string) func(store.TransactionEvent) bool {
	return func(ev store.TransactionEvent) bool {
		return slices.ContainsFunc(ev.Writes, func(s store.Snapshot) bool {
			return string(s.Key) == key && string(s.Value) == value
		})
	}
}

// The negative control: the same script without the fence (a Plain-mode
// store) lands the stale owner's write over the new owner's, and the
// committed state loses the +100; CheckExact says so.
func TestStaleOwnerWithoutTheFenceCorruptsState(t *testing.T) {
	f := &failures{t: t}
	var rep enginetest.StaleOwnerReport
	var got, want int64
	f.run(func(tb enginetest.TB) {
		d := enginetest.New(tb, enginetest.WithoutFence(config(false)))
		rep = staleScript(d)
		got, _ = d.State("alice")
		want, _ = d.ExactFold("alice")
		d.CheckExact()
	})
	if f.fatal != "" {
		t.Fatalf("the script failed: %s", f.fatal)
	}
	if !slices.ContainsFunc(rep.Landed, writes("alice", "15")) {
		t.Fatalf("without the fence the stale alice=15 did not land: %+v", rep)
	}
	if got != 15 || want != 115 {
		t.Fatalf("without the fence alice = %d (exact fold %d), want the stale 15 over 115", got, want)
	}
	if len(f.errs) != 1 || !strings.Contains(f.errs[0], `key "alice": committed state "15", want "115"`) {
		t.Fatalf("CheckExact reported %q, want alice's 15 against 115", f.errs)
	}
}

// Under ExactlyOnce the stale owner's batch, outputs included, is fenced:
// each input's output once. At least once (the control) the stale
// owner's fold of +5 was emitted, and the new owner's replay emits it
// again.
func TestStaleOwnerOutputs(t *testing.T) {
	for _, exactlyOnce := range []bool{true, false} {
		t.Run(fmt.Sprintf("exactlyOnce=%t", exactlyOnce), func(t *testing.T) {
			d := enginetest.New(t, config(exactlyOnce))
			rep := staleScript(d)
			if len(rep.Fenced) == 0 || len(rep.Landed) != 0 {
				t.Fatalf("stale owner: %d fenced, %d landed", len(rep.Fenced), len(rep.Landed))
			}
			d.CheckExact()
			twice := 0
			for _, n := range outputsPerInput(d) {
				if n > 1 {
					twice++
				}
			}
			if exactlyOnce && twice != 0 || !exactlyOnce && twice != 1 {
				t.Fatalf("outputs per input %v: %d seen twice", outputsPerInput(d), twice)
			}
		})
	}
}

// A fold's lookup table, declared with view.NewLookup, is opened by the
// driver on its cluster and stepped before the members: rows produced to
// the table's topic are there for the next fold. The driver closes it at
// the end of the test.
func TestTheDriverOpensAndStepsLookupTables(t *testing.T) {
	customers := view.NewLookup(view.Config[string]{Topic: "customers", Plain: true, Codec: engine.String()})
	t.Run("run", func(t *testing.T) {
		d := enginetest.New(t, enginetest.Config[string]{Topic: "orders", Engine: engine.Config[string]{
			Codec: engine.String(), Tables: []engine.Table{customers},
			Fold: func(_ []byte, _ string, _ bool, rec engine.Record) (engine.Result[string], error) {
				name, ok, err := customers.Get(rec.Value)
				if err != nil {
					return engine.Result[string]{}, err
				}
				if !ok {
					name = "unknown"
				}
				return engine.Set(name), nil
			},
		}})
		if customers.View() == nil {
			t.Fatal("the table is not open after New")
		}
		d.Produce("orders", "o1", "c1") // before the customer exists
		d.Produce("customers", "c1", "Ada")
		d.Produce("orders", "o2", "c1")
		d.Settle()
		d.Produce("customers", "c1", "Ada Lovelace")
		d.Produce("orders", "o3", "c1")
		d.Settle()
		for key, want := range map[string]string{"o1": "Ada", "o2": "Ada", "o3": "Ada Lovelace"} {
			if got, _ := d.State(key); got != want {
				t.Errorf("%s = %q, want %q", key, got, want)
			}
		}
	})
	if _, _, err := customers.Get([]byte("c1")); !errors.Is(err, view.ErrClosed) {
		t.Fatalf("after the test the table reads %v, want ErrClosed", err)
	}
}

// ExactFold follows the poison policy: under SkipPoison a record the fold
// fails on is skipped, by the engine and by ExactFold alike; under
// StopOnPoison (the control) ExactFold fails the test, as the engine
// stops there.
func TestExactFoldFollowsThePoisonPolicy(t *testing.T) {
	cfg := config(false)
	cfg.Engine.Poison = engine.SkipPoison
	d := enginetest.New(t, cfg)
	d.Produce("orders", "alice", "10")
	d.Produce("orders", "alice", "ten")
	d.Produce("orders", "alice", "1")
	d.Settle()
	if got, _ := d.State("alice"); got != 11 {
		t.Fatalf("alice = %d, want 11: the poison record skipped", got)
	}
	if want, _ := d.ExactFold("alice"); want != 11 {
		t.Fatalf("ExactFold(alice) = %d under SkipPoison, want 11", want)
	}
	d.CheckExact()

	f := &failures{t: t}
	f.run(func(tb enginetest.TB) {
		d := enginetest.New(tb, config(false))
		d.Produce("orders", "alice", "ten")
		d.ExactFold("alice")
	})
	if !strings.Contains(f.fatal, `ExactFold("alice"): the fold fails on orders/1 offset 0 (StopOnPoison`) {
		t.Fatalf("ExactFold under StopOnPoison: %q, want the failure naming the record", f.fatal)
	}
}

// The same script gives the same run: the cluster's histories are
// byte-identical. And a run leaves no goroutine behind: each runs in a
// synctest bubble, whose Test returns only once every goroutine started
// in it (the members' caches' among them) has ended, and fails on one
// blocked for good.
func TestSameScriptSameRun(t *testing.T) {
	var histories [2][]byte
	for i := range histories {
		synctest.Test(t, func(t *testing.T) {
			d := enginetest.New(t, config(true))
			staleScript(d)
			d.Produce("orders", "bob", "1")
			d.Step()
			d.Crash(d.Owner("bob"))
			d.AddMember()
			histories[i] = d.Cluster().HistoryJSON()
		})
	}
	if !bytes.Equal(histories[0], histories[1]) {
		t.Fatal("two runs of one script made different histories")
	}
}

// The driver's failures go through its TB, each naming what it waited
// for and what it found; none panics.
func TestFailuresAreReportedThroughTheTB(t *testing.T) {
	unlisted := config(false)
	unlisted.Engine.OutputTopics = nil
	for _, c := range []struct {
		name   string
		script func(enginetest.TB)
		want   []string
	}{
		{"no topic", func(tb enginetest.TB) {
			enginetest.New(tb, enginetest.Config[int64]{Engine: engine.Config[int64]{Fold: sum, Codec: engine.Int64()}})
		}, []string{"enginetest.Config.Topic"}},
		{"input topic in Topics", func(tb enginetest.TB) {
			cfg := config(false)
			cfg.Topics = map[string]int{"orders": 8}
			enginetest.New(tb, cfg)
		}, []string{"enginetest.Config.Topics", `input topic "orders"`}},
		{"engine misconfigured", func(tb enginetest.TB) {
			cfg := config(false)
			cfg.Engine.TickInterval = time.Second
			enginetest.New(tb, cfg)
		}, []string{"member 0", "engine.Config.TickInterval"}},
		{"poison record", func(tb enginetest.TB) {
			d := enginetest.New(tb, config(false))
			d.Produce("orders", "alice", "ten")
			d.Settle()
		}, []string{"Settle: member ", " stopped", `orders/1 offset 0 key "alice"`, `bad amount "ten"`}},
		{"output to a topic not created", func(tb enginetest.TB) {
			d := enginetest.New(tb, unlisted)
			d.Produce("orders", "alice", "1")
			d.Settle()
		}, []string{"Settle: member ", `output topic "totals": does not exist`, "list it in engine.Config.OutputTopics"}},
		{"snapshots refused", func(tb enginetest.TB) {
			d := enginetest.New(tb, config(false))
			tp := store.TopicPartition{Topic: "orders", Partition: store.OutputPartition([]byte("alice"), enginetest.DefaultPartitions)}
			d.Cluster().FailProduce(d.Backend().SnapshotPartition(tp), errors.New("leader unavailable"))
			d.Produce("orders", "alice", "1")
			d.Settle()
		}, []string{"did not settle within 5m0s", "orders/1: committed 0 of 1, assigned to member", "leader unavailable"}},
		{"stale owner without changes", func(tb enginetest.TB) {
			d := enginetest.New(tb, config(false))
			d.StaleOwner(0, nil)
		}, []string{"StaleOwner(0): member 0 holds no change to flush"}},
		{"produce to a missing topic", func(tb enginetest.TB) {
			enginetest.New(tb, config(false)).Produce("ordres", "a", "1")
		}, []string{`Produce to "ordres": no such topic`}},
		{"crash of a crashed member", func(tb enginetest.TB) {
			d := enginetest.New(tb, config(false))
			d.Crash(1)
			d.Crash(1)
		}, []string{"Crash(1): member 1 is crashed"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &failures{t: t}
			f.run(c.script)
			for _, w := range c.want {
				if !strings.Contains(f.fatal, w) {
					t.Errorf("the failure %q lacks %q", f.fatal, w)
				}
			}
		})
	}
}

// failures is a TB that records the failures of a script run with it
// rather than failing the test, so that a test can check them.
type failures struct {
	t     *testing.T
	mu    sync.Mutex
	errs  []string
	fatal string
}

// run runs script with f on a goroutine of its own, which f.Fatalf ends
// as t.Fatalf ends a test's, and returns once it has ended.
func (f *failures) run(script func(enginetest.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		script(f)
	}()
	<-done
}

func (f *failures) Helper() {}

func (f *failures) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

func (f *failures) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *failures) Cleanup(fn func()) { f.t.Cleanup(fn) }

func (f *failures) Context() context.Context { return f.t.Context() }
