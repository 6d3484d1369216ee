package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// The failure model's tests on the simulated cluster (docs/operations.md):
// each class surfaces where the model says, the committed state is the
// exact fold of every record before the failure point, and the log has no
// storm.

// errorLines counts the ERROR records of a log.
func (l *logCount) errorLines() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k, c := range l.counts {
		if len(k) > 5 && k[:6] == "ERROR " {
			n += c
		}
	}
	return n
}

// A poison record under the default policy: Run returns the *FoldError
// naming topic, partition, offset and key, after committing everything
// before the record (the other partition to its end, through the clean
// leave). Restarted with SkipPoison, the engine goes past it: the final
// state is the exact fold of every other record, each once.
func TestPoisonRecordStopsRunAfterCommittingWhatCameBeforeOnSim(t *testing.T) {
	w := newSimWorld(t)
	w.produce("bob=+5", "alice=+3", "dave=+1")
	bad := store.TopicPartition{Topic: "accounts", Partition: 1} // len("bob") is odd
	_, _, badOffset, _ := w.c.Offsets(bad)
	w.produce("bob=lots", "bob=+2", "dave=+4", "carol=+7")

	logs := &logCount{}
	e := w.engineWith(func(c *engine.Config[int]) { c.Logger = slog.New(logs) })
	err := w.runner(e).Run(context.Background())
	fe, ok := errors.AsType[*engine.FoldError](err)
	if !ok {
		t.Fatalf("Run = %v, want an *engine.FoldError", err)
	}
	if fe.Input != bad || fe.Offset != badOffset || string(fe.Key) != "bob" || fe.Err == nil {
		t.Fatalf("FoldError = %+v, want accounts/1 offset %d key bob", fe, badOffset)
	}
	if off, _ := w.c.CommittedOffset("bank", bad); off != badOffset {
		t.Fatalf("accounts/1 committed at %d, want %d: everything before the poison record, nothing past it", off, badOffset)
	}
	other := store.TopicPartition{Topic: "accounts", Partition: 0}
	if _, _, end, _ := w.c.Offsets(other); !w.committedAt(other, end) {
		t.Fatalf("accounts/0 not committed to its end %d after the stop", end)
	}
	if n := logs.errorLines(); n != 1 {
		t.Fatalf("%d ERROR lines, want 1:\n%s", n, logs)
	}

	skip := w.engineWith(func(c *engine.Config[int]) { c.Poison = engine.SkipPoison })
	r := w.runner(skip)
	w.drain(r)
	w.check(r) // "lots" is no amount: the ledger skipped it too
}

func (w *simWorld) committedAt(tp store.TopicPartition, offset int64) bool {
	off, _ := w.c.CommittedOffset("bank", tp)
	return off == offset
}

// engineWith is engine with the configuration changed.
func (w *simWorld) engineWith(mod func(*engine.Config[int])) *engine.Engine[int] {
	cfg := engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: w.store,
		PersistInterval: time.Second, CommitInterval: 2 * time.Second}
	mod(&cfg)
	e, err := engine.New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	return e
}

// Skipping poison records logs at a bounded rate: a thousand bad records
// make one WARN line and no ERROR, and every one is counted.
func TestSkippedPoisonLogsAtABoundedRateOnSim(t *testing.T) {
	w := newSimWorld(t)
	for range 1000 {
		w.produce("bob=lots")
	}
	w.produce("bob=+1")
	logs := &logCount{}
	r := w.runner(w.engineWith(func(c *engine.Config[int]) {
		c.Poison = engine.SkipPoison
		c.Logger = slog.New(logs)
	}))
	w.drain(r)
	w.check(r)
	bad := store.TopicPartition{Topic: "accounts", Partition: 1}
	if n, e := logs.count(slog.LevelWarn, bad.String()), logs.errorLines(); n != 1 || e != 0 {
		t.Fatalf("%d WARN and %d ERROR lines for 1000 skipped records, want 1 and 0:\n%s", n, e, logs)
	}
}

// A tick that fails on a key is poison as a fold is: under SkipPoison the
// key keeps its state and the others tick.
func TestFailingTickIsSkippedUnderSkipPoisonOnSim(t *testing.T) {
	w := newSimWorld(t)
	w.produce("bob=+5", "alice=+3")
	r := w.runner(w.engineWith(func(c *engine.Config[int]) {
		c.Poison = engine.SkipPoison
		c.TickInterval = time.Second
		c.Tick = func(key []byte, state int, _ time.Time) (engine.Result[int], error) {
			if string(key) == "bob" {
				return engine.Keep[int](), errors.New("bob cannot tick")
			}
			return engine.Set(state * 2), nil
		}
	}))
	w.drain(r)
	for range 2 {
		if err := r.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		w.c.Advance(time.Second)
	}
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	bob, _, _ := r.State(tp, []byte("bob"))
	alice, _, _ := r.State(tp, []byte("alice"))
	if bob != 5 || alice < 6 {
		t.Fatalf("bob %d (want 5: its tick fails), alice %d (want doubled at least once)", bob, alice)
	}
}

// The default policy on a failing tick ends the runner with the
// *FoldError (offset -1: a tick).
func TestFailingTickStopsRunByDefaultOnSim(t *testing.T) {
	w := newSimWorld(t)
	w.produce("bob=+5")
	r := w.runner(w.engineWith(func(c *engine.Config[int]) {
		c.TickInterval = time.Second
		c.Tick = func([]byte, int, time.Time) (engine.Result[int], error) { panic("tick bug") }
	}))
	err := w.stepUntilError(r, 10*time.Second, nil)
	fe, ok := errors.AsType[*engine.FoldError](err)
	if !ok || fe.Offset != -1 || fe.Panic != "tick bug" {
		t.Fatalf("Step = %v, want the tick's *engine.FoldError", err)
	}
}

// deadLetters reads the dead-letter topic as a read_committed consumer:
// "origin partition:offset" → count, checking each letter's headers.
func (w *eosWorld) deadLetters(t *testing.T) map[string]int {
	seen := map[string]int{}
	for p := range int32(2) {
		ents, err := w.c.Read(store.TopicPartition{Topic: "dead", Partition: p}, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Control != sim.NoControl {
				continue
			}
			h := map[string]string{}
			for _, x := range e.Record.Headers {
				h[x.Key] = string(x.Value)
			}
			if h[engine.HeaderDeadLetterTopic] != "accounts" || h[engine.HeaderDeadLetterError] == "" {
				t.Fatalf("dead letter %q without its origin or error: %v", e.Record.Value, h)
			}
			seen[h[engine.HeaderDeadLetterPartition]+":"+h[engine.HeaderDeadLetterOffset]]++
		}
	}
	return seen
}

func newDeadLetterWorld(t *testing.T, exactlyOnce bool) *eosWorld {
	w := newEOSWorld(t, exactlyOnce)
	if err := w.c.CreateTopic("dead", sim.TopicConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	w.mods = append(w.mods, func(c *engine.Config[int]) {
		c.Poison, c.DeadLetterTopic = engine.DeadLetterPoison, "dead"
	})
	return w
}

// poisonAt produces a poison record for bob and returns its origin
// "partition:offset".
func (w *eosWorld) poisonAt() string {
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	_, _, end, _ := w.c.Offsets(tp)
	w.produce("bob=oops")
	return "1:" + strconv.FormatInt(end, 10)
}

// Under ExactlyOnce a dead letter is in the batch's transaction: a stale
// owner's batch with a poison record in it is fenced, the new owner
// dead-letters the record again, and a read_committed reader sees the
// dead letter once; every other input's outputs once, the state exact.
func TestDeadLetterExactlyOnceThroughAStaleOwnerOnSim(t *testing.T) {
	w := newDeadLetterWorld(t, true)
	poison := staleOwnerWithPoison(t, w)
	checkDeadLetterOnce(t, w, poison, true)
}

// staleOwnerWithPoison is zombieScript with a poison record in the stale
// owner's batch.
func staleOwnerWithPoison(t *testing.T, w *eosWorld) (poison string) {
	ctx := context.Background()
	a := w.runner(w.engine(time.Hour))
	w.produce("alice=+10", "bob=+5")
	for range 3 {
		if err := a.Step(ctx); err != nil {
			t.Fatal(err)
		}
		w.c.Advance(time.Second)
	}
	a.FlushAll(ctx)
	w.produce("alice=+1")
	poison = w.poisonAt()
	w.produce("carol=+7")
	if err := a.Step(ctx); err != nil { // folds, dead-letters; commits nothing
		t.Fatal(err)
	}
	crashOnSim(t, a) // stalls: a zombie
	w.c.Advance(time.Minute)
	b := w.runner(w.engine(time.Second))
	w.drain(b)
	a.Source().(interface{ Member() *sim.Member }).Member().Resume()
	a.FlushAll(ctx) // the zombie's commit, dead letter and all
	w.drain(b)
	w.check(b)
	return poison
}

// checkDeadLetterOnce: the poison record's dead letter is seen once by a
// read_committed reader (atLeast: at least once), and every other input's
// outputs as the mode promises.
func checkDeadLetterOnce(t *testing.T, w *eosWorld, poison string, exactly bool) {
	t.Helper()
	dl := w.deadLetters(t)
	want := []string{poison + " lost"} // a poison record has no output of its own
	got := w.departures(w.audit(true))
	if exactly && (dl[poison] != 1 || len(dl) != 1 || !slices.Equal(got, want)) {
		t.Fatalf("read_committed: dead letters %v (want %s once), output departures %v (want %v)", dl, poison, got, want)
	}
	if !exactly && dl[poison] < 1 {
		t.Fatalf("dead letter of %s lost: %v", poison, dl)
	}
	t.Logf("dead letters seen read_committed: %v", dl)
}

// Through a crash: the crashed owner's open batch, dead letter and all, is
// lost; the next owner dead-letters the record once.
func TestDeadLetterExactlyOnceThroughACrashOnSim(t *testing.T) {
	w := newDeadLetterWorld(t, true)
	ctx := context.Background()
	a := w.runner(w.engine(time.Second))
	w.produce("alice=+10", "bob=+5")
	w.drain(a)
	poison := w.poisonAt()
	w.produce("carol=+7", "dave=+3")
	if err := a.Step(ctx); err != nil {
		t.Fatal(err)
	}
	crashOnSim(t, a)
	w.c.Advance(time.Minute)
	b := w.runner(w.engine(time.Second))
	w.drain(b)
	w.check(b)
	checkDeadLetterOnce(t, w, poison, true)
}

// The negative control: at least once, the stale owner's dead letter goes
// out through Emit at once, and the new owner's replay sends it again: the
// exactly-once check above would fail.
func TestDeadLetterAtLeastOnceDuplicatesThroughAStaleOwnerOnSim(t *testing.T) {
	w := newDeadLetterWorld(t, false)
	poison := staleOwnerWithPoison(t, w)
	checkDeadLetterOnce(t, w, poison, false)
	if n := w.deadLetters(t)[poison]; n < 2 {
		t.Fatalf("at least once, the stale owner's dead letter and the replay's: %d, want 2 or more", n)
	}
}

// Options that cannot work are refused by New with a *store.ConfigError
// naming the field.
func TestNewRefusesBadOptions(t *testing.T) {
	w := newSimWorld(t)
	tick := func([]byte, int, time.Time) (engine.Result[int], error) { return engine.Keep[int](), nil }
	for _, c := range []struct {
		field string
		mod   func(*engine.Config[int])
	}{
		{"Fold", func(c *engine.Config[int]) { c.Fold = nil }},
		{"Codec", func(c *engine.Config[int]) { c.Codec = nil }},
		{"Store", func(c *engine.Config[int]) { c.Store = nil }},
		{"TickInterval", func(c *engine.Config[int]) { c.Tick = tick }},
		{"TickInterval", func(c *engine.Config[int]) { c.TickInterval = time.Second }},
		{"Poison", func(c *engine.Config[int]) { c.Poison = 9 }},
		{"DeadLetterTopic", func(c *engine.Config[int]) { c.Poison = engine.DeadLetterPoison }},
		{"DeadLetterTopic", func(c *engine.Config[int]) { c.DeadLetterTopic = "dead" }},
		{"Emit", func(c *engine.Config[int]) { c.Poison, c.DeadLetterTopic = engine.DeadLetterPoison, "dead" }},
		{"Emit and StartEmit", func(c *engine.Config[int]) {
			c.Emit = func(context.Context, []engine.Output) error { return nil }
			c.StartEmit = func(context.Context, []engine.Output) func() error { return nil }
		}},
		{"CommitInterval", func(c *engine.Config[int]) { c.CommitInterval = -time.Second }},
		{"HotKeys", func(c *engine.Config[int]) { c.HotKeys = -1 }},
	} {
		cfg := engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: w.store}
		c.mod(&cfg)
		e, err := engine.New(cfg)
		if err == nil {
			_ = e.Close()
		}
		ce, ok := errors.AsType[*store.ConfigError](err)
		if !ok || ce.Subject != "engine.Config."+c.field || !errors.Is(err, store.ErrMisconfigured) || ce.Fix == "" {
			t.Errorf("%s: New = %v, want a *store.ConfigError naming engine.Config.%s with a fix", c.field, err, c.field)
		}
	}
}

// An idle partition, whose state and offset did not change since its last
// commit, sends no transaction: an hour of commit intervals with no input
// costs nothing (not even an offset marker per interval).
func TestIdlePartitionSendsNoTransactionOnSim(t *testing.T) {
	for _, exactlyOnce := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactlyOnce=%t", exactlyOnce), func(t *testing.T) {
			c := sim.New(sim.Config{Seed: 3})
			if err := c.CreateTopic("accounts", sim.TopicConfig{Partitions: 2}); err != nil {
				t.Fatal(err)
			}
			var txns atomic.Int64
			b, err := c.NewBackend(sim.BackendConfig{Mode: store.Transactional, TransactionalIDPrefix: "bank", CreateTopics: true,
				Observer: store.ObserverFunc(func(store.TransactionEvent) { txns.Add(1) })})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			if err := c.CreateTopic("balances", sim.TopicConfig{Partitions: 2}); err != nil {
				t.Fatal(err)
			}
			w := &simWorld{t: t, c: c, store: b, want: ledger{}}
			w.produce("alice=+1", "dave=+2")
			r := w.runner(w.engineWith(func(c *engine.Config[int]) { c.ExactlyOnce, c.OutputTopics = exactlyOnce, []string{"balances"} }))
			w.drain(r)
			for range 3 { // the last commits land
				if err := r.Step(context.Background()); err != nil {
					t.Fatal(err)
				}
				w.c.Advance(time.Second)
			}
			before := txns.Load()
			for range 3600 {
				if err := r.Step(context.Background()); err != nil {
					t.Fatal(err)
				}
				w.c.Advance(time.Second)
			}
			if n := txns.Load() - before; n != 0 {
				t.Fatalf("%d transactions in an idle hour, want 0", n)
			}
			w.produce("alice=+4")
			w.drain(r)
			if txns.Load() == before {
				t.Fatal("no transaction after new input: the counter counts nothing")
			}
			w.check(r)
		})
	}
}

// Exactly-once with a missing output topic is a configuration that cannot
// work: Run returns the error naming the topic at the partition's
// acquisition, with one ERROR line, not a rewind and retry ~8 times a
// second, forever. Nothing is committed.
func TestMissingOutputTopicEndsRunOnSim(t *testing.T) {
	w := newSimWorld(t) // no "balances" topic
	w.produce("alice=+1", "dave=+2")
	logs := &logCount{}
	e := w.engineWith(func(c *engine.Config[int]) {
		c.ExactlyOnce, c.OutputTopics, c.Logger = true, []string{"balances"}, slog.New(logs)
	})
	r := w.runner(e)
	err := w.stepUntilError(r, 10*time.Second, nil)
	ce, ok := errors.AsType[*store.ConfigError](err)
	if !ok || ce.Subject != `output topic "balances"` || strings.Contains(err.Error(), "rewinding") {
		t.Fatalf("Step = %v, want a *store.ConfigError naming output topic \"balances\"", err)
	}
	if n := logs.errorLines(); n != 1 {
		t.Fatalf("%d ERROR lines, want 1:\n%s", n, logs)
	}
	for p := range int32(2) {
		if off, ok := w.c.CommittedOffset("bank", store.TopicPartition{Topic: "accounts", Partition: p}); ok {
			t.Fatalf("accounts/%d committed %d though its batch failed", p, off)
		}
	}
}

// A snapshot topic that is not compacted: Run returns the error at the
// first acquisition, naming the topic and the fix, with one ERROR line.
func TestUncompactedSnapshotTopicEndsRunOnSim(t *testing.T) {
	c := sim.New(sim.Config{Seed: 3})
	for topic, cfg := range map[string]sim.TopicConfig{"accounts": {Partitions: 2}, "bank-accounts-snapshots": {Partitions: 2}} {
		if err := c.CreateTopic(topic, cfg); err != nil {
			t.Fatal(err)
		}
	}
	b, err := c.NewBackend(sim.BackendConfig{Mode: store.Transactional, TransactionalIDPrefix: "bank"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	w := &simWorld{t: t, c: c, store: b, want: ledger{}}
	logs := &logCount{}
	err = w.runner(w.engineWith(func(c *engine.Config[int]) { c.Logger = slog.New(logs) })).Run(context.Background())
	ce, ok := errors.AsType[*store.ConfigError](err)
	if !ok || ce.Subject != `snapshot topic "bank-accounts-snapshots"` || !strings.Contains(ce.Fix, "cleanup.policy=compact") {
		t.Fatalf("Run = %v, want a *store.ConfigError naming the snapshot topic and the fix", err)
	}
	if n := logs.errorLines(); n != 1 {
		t.Fatalf("%d ERROR lines, want 1:\n%s", n, logs)
	}
}

// Two applications (two groups) with one transactional.id prefix on the
// same input fence each other's producers at every takeover. Rather than
// going on for ever, an application whose producer is fenced three times
// in a row while it owns the partition in one generation stops, and Run
// returns a *store.ConfigError naming the transactional.id.
func TestSharedTransactionalIDPrefixEndsRunOnSim(t *testing.T) {
	w := newSimWorld(t)
	other, err := w.c.NewBackend(sim.BackendConfig{Mode: store.Transactional, TransactionalIDPrefix: "bank", CreateTopics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	a := w.runner(w.engine())
	eb, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: other,
		PersistInterval: time.Second, CommitInterval: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.CloseAbandoning(eb) })
	b, err := eb.Join(simsource.New(w.c, "audit", sim.ClassicEager, 0, "accounts"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ended error
	for i := 0; i < 600 && ended == nil; i++ {
		w.produce("alice=+1", "dave=+1")
		for _, r := range []*engine.Member[int]{a, b} {
			if err := r.Step(ctx); err != nil {
				ended = err
				break
			}
		}
		w.c.Advance(time.Second)
	}
	ce, ok := errors.AsType[*store.ConfigError](ended)
	if !ok || !strings.HasPrefix(ce.Subject, `transactional.id "bank-accounts-`) || !strings.Contains(ce.Fix, "TransactionalIDPrefix") {
		t.Fatalf("the runners ended with %v, want a *store.ConfigError naming a bank-accounts transactional.id", ended)
	}
	t.Logf("ended with: %v", ended)
}

// A recovered state that does not decode, under DiscardUndecodableState,
// DeadLetterPoison and ExactlyOnce: the key is deleted (a tombstone
// replaces the snapshot), the state's bytes go to the dead-letter topic
// once, in the batch's transaction, and the key folds on from empty.
func TestUndecodableStateIsDeadLetteredAndDeletedOnSim(t *testing.T) {
	w := newDeadLetterWorld(t, true)
	w.mods = append(w.mods, func(c *engine.Config[int]) { c.UndecodableState = engine.DiscardUndecodableState })
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	p, err := w.store.Acquire(context.Background(), store.Acquisition{Input: tp,
		Identity: store.IdentityFunc(func() store.GroupIdentity { return store.GroupIdentity{} })})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	w.produce("alice=+2") // offset 0 of accounts/1
	snaps := store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: 1}
	if _, err := w.c.Produce(snaps, wire.EncodeSnapshot("", store.Snapshot{Key: []byte("bob"), Value: []byte("not-a-number"), Offset: 0})); err != nil {
		t.Fatal(err)
	}
	w.produce("bob=+1")
	r := w.runner(w.engine(time.Second))
	w.drain(r)
	w.check(r) // bob is 1: folded from empty
	ents, err := w.c.Read(store.TopicPartition{Topic: "dead", Partition: store.OutputPartition([]byte("bob"), 2)}, true)
	if err != nil {
		t.Fatal(err)
	}
	var letters []string
	for _, e := range ents {
		if e.Control == sim.NoControl {
			h := map[string]string{}
			for _, x := range e.Record.Headers {
				h[x.Key] = string(x.Value)
			}
			letters = append(letters, fmt.Sprintf("%s=%s kind=%s from=%s/%s", e.Record.Key, e.Record.Value,
				h[engine.HeaderDeadLetterKind], h[engine.HeaderDeadLetterTopic], h[engine.HeaderDeadLetterPartition]))
		}
	}
	if want := []string{"bob=not-a-number kind=state from=accounts/1"}; !slices.Equal(letters, want) {
		t.Fatalf("dead letters %q, want %q", letters, want)
	}
}

// The transient class on the simulated cluster: the snapshot partition
// refuses every write for five minutes (its leader unavailable). The
// runner goes on; the partition restarts from the committed state with a
// backoff (at most about 8 restarts in the first 26 s, one per 15 s
// after; without it, one a second); the restarts are in the status,
// logged at WARN at most once per 30 s, never ERROR; once the partition
// takes writes again the state is the fold of every record, each once.
func TestTransientFailureRestartsWithBackoffOnSim(t *testing.T) {
	const outage = 5 * time.Minute
	w := newSimWorld(t)
	hot := store.TopicPartition{Topic: "accounts", Partition: 1}
	w.produce("bob=+5", "alice=+3")
	logs := &logCount{}
	e := w.engineWith(func(c *engine.Config[int]) { c.Logger = slog.New(logs) })
	r := w.runner(e)
	w.drain(r)
	refused := errors.New("NOT_LEADER_OR_FOLLOWER (simulated)")
	w.c.FailProduce(store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: 1}, refused)
	w.produce("bob=+1", "alice=+2")
	if err := w.stepUntilError(r, outage, nil); err != nil {
		t.Fatalf("the runner ended in a transient outage: %v", err)
	}
	ps := partitionStatus(t, r.Status(), hot)
	t.Logf("after the outage: %s, %d restarts, last failure: %v", ps.State, ps.Restarts, ps.LastFailure)
	if maxRestarts := 8 + int(outage/(15*time.Second)) + 1; ps.Restarts < 2 || ps.Restarts > maxRestarts || !errors.Is(ps.LastFailure, refused) {
		t.Fatalf("%s: %d restarts, last failure %v; want 2 to %d, the refusal", hot, ps.Restarts, ps.LastFailure, maxRestarts)
	}
	w.c.FailProduce(store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: 1}, nil)
	w.drain(r)
	w.check(r)
	if warns, maxWarns := logs.count(slog.LevelWarn, hot.String()), int(outage/(30*time.Second))+1; warns == 0 || warns > maxWarns || logs.errorLines() != 0 {
		t.Fatalf("%d WARN lines for %s (want 1 to %d) and %d ERROR lines (want 0):\n%s", warns, hot, maxWarns, logs.errorLines(), logs)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	fresh := w.runner(w.engine())
	w.drain(fresh)
	w.check(fresh)
}

// A poison record's key is logged as its text when it is printable, and
// in hex otherwise: not as base64, which a JSON log makes of bytes.
func TestPoisonKeysAreLoggedReadably(t *testing.T) {
	w := newSimWorld(t)
	w.produce("bob=lots")
	w.c.Produce(store.TopicPartition{Topic: "accounts", Partition: 0}, wire.Record{Key: []byte{0xff, 0x01}, Value: []byte("lots")})
	var buf bytes.Buffer
	r := w.runner(w.engineWith(func(c *engine.Config[int]) {
		c.Poison = engine.SkipPoison
		c.Logger = slog.New(slog.NewJSONHandler(&buf, nil))
	}))
	w.drain(r)
	for _, want := range []string{`"key":"bob"`, `"key":"0xff01"`} {
		if !strings.Contains(buf.String(), want) {
			t.Fatalf("the log lacks %s:\n%s", want, buf.String())
		}
	}
}
