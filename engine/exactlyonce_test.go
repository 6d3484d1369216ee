package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// audited is balance with one more output per input record: its
// "partition:offset" on topic "audit", so a reader of that topic can tell
// which inputs it saw and how often.
var audited = auditedTo("audit", "balances")

// auditedTo is audited with its output topics named.
func auditedTo(audit, balances string) engine.FoldFunc[int] {
	return func(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
		res, err := balance(key, state, exists, rec)
		if err == nil {
			for i := range res.Outputs() {
				res.Outputs()[i].Topic = balances
			}
			res = res.With(engine.Output{Topic: audit, Key: key,
				Value: fmt.Appendf(nil, "%d:%d", rec.Partition, rec.Offset)})
		}
		return res, err
	}
}

// eosWorld is simWorld with the output topics and engines whose outputs
// go through the store's transactions (exactlyOnce) or, at least once, to
// the output topics by a plain producer.
type eosWorld struct {
	*simWorld
	exactlyOnce bool
	// mods change every engine's configuration.
	mods []func(*engine.Config[int])
}

func newEOSWorld(t *testing.T, exactlyOnce bool) *eosWorld {
	w := &eosWorld{simWorld: newSimWorld(t), exactlyOnce: exactlyOnce}
	for _, topic := range []string{"audit", "balances"} {
		if err := w.c.CreateTopic(topic, sim.TopicConfig{Partitions: 2}); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func (w *eosWorld) engine(commitEvery time.Duration, mod ...func(*engine.Config[int])) *engine.Engine[int] {
	cfg := engine.Config[int]{Fold: audited, Codec: intCodec{}, Store: w.store, CommitInterval: commitEvery,
		PersistInterval: commitEvery, ExactlyOnce: w.exactlyOnce, OutputTopics: []string{"audit", "balances"}}
	if !w.exactlyOnce {
		cfg.Emit = w.emitPlain
	}
	for _, m := range append(slices.Clone(w.mods), mod...) {
		m(&cfg)
	}
	e, err := engine.New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	return e
}

// emitPlain is at-least-once output: a plain producer appends the outputs
// as the fold makes them.
func (w *eosWorld) emitPlain(_ context.Context, outs []engine.Output) error {
	for _, o := range outs {
		cfg, _ := w.c.Topic(o.Topic)
		tp := store.TopicPartition{Topic: o.Topic, Partition: store.OutputPartition(o.Key, cfg.Partitions)}
		if _, err := w.c.Produce(tp, wire.Record{Key: o.Key, Value: o.Value, Headers: o.Headers}); err != nil {
			return err
		}
	}
	return nil
}

// audit counts each input record's outputs on the audit topic, as a
// consumer of the given isolation sees them.
func (w *eosWorld) audit(readCommitted bool) map[string]int { return w.values("audit", readCommitted) }

// values counts the values of topic's records (of two partitions), as a
// consumer of the given isolation sees them.
func (w *eosWorld) values(topic string, readCommitted bool) map[string]int {
	seen := map[string]int{}
	for p := range int32(2) {
		ents, err := w.c.Read(store.TopicPartition{Topic: topic, Partition: p}, readCommitted)
		if err != nil {
			w.t.Fatal(err)
		}
		for _, e := range ents {
			if e.Control == sim.NoControl {
				seen[string(e.Record.Value)]++
			}
		}
	}
	return seen
}

// inputs lists every input record as "partition:offset".
func (w *eosWorld) inputs() []string {
	var all []string
	for p := range int32(2) {
		_, _, end, _ := w.c.Offsets(store.TopicPartition{Topic: "accounts", Partition: p})
		for o := range end {
			all = append(all, fmt.Sprintf("%d:%d", p, o))
		}
	}
	return all
}

// exactlyOnce reports how seen departs from every input's output exactly
// once: duplicates, losses, outputs of no input.
func (w *eosWorld) departures(seen map[string]int) []string {
	var bad []string
	for _, in := range w.inputs() {
		switch n := seen[in]; {
		case n == 0:
			bad = append(bad, in+" lost")
		case n > 1:
			bad = append(bad, fmt.Sprintf("%s ×%d", in, n))
		}
		delete(seen, in)
	}
	for out := range seen {
		bad = append(bad, out+" of no input")
	}
	sort.Strings(bad)
	return bad
}

// zombieScript: owner a folds a batch and pauses before committing it;
// the group evicts a and b takes both partitions over, replays and
// commits; then a wakes, still believing it owns them, and commits its
// batch.
func zombieScript(t *testing.T, w *eosWorld) (zombieErrs []error) {
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
	w.produce("alice=+1", "bob=+2", "carol=+7")
	if err := a.Step(ctx); err != nil { // folds (and, at least once, emits); commits nothing
		t.Fatal(err)
	}
	member := a.Source().(*simsource.Source).Member()
	member.Stall()
	w.c.Advance(time.Minute) // a's session expires
	b := w.runner(w.engine(time.Second))
	w.drain(b)
	member.Resume()
	a.FlushAll(ctx) // the zombie's commit
	w.drain(b)
	w.check(b)
	return a.Errors()
}

// The exactly-once property through a stale owner: a read_committed
// consumer of the output topic sees every input's outputs exactly once,
// and the stale owner's batch is fenced. (Its producer was fenced by the
// new owner's takeover, so it writes nothing at all: not even a
// read_uncommitted reader sees its outputs.)
func TestExactlyOnceOutputsThroughAStaleOwnerOnSim(t *testing.T) {
	w := newEOSWorld(t, true)
	errs := zombieScript(t, w)
	if len(errs) == 0 || !errors.Is(errs[len(errs)-1], store.ErrFenced) {
		t.Fatalf("the stale owner's batch was not fenced: %v", errs)
	}
	if bad := w.departures(w.audit(true)); len(bad) > 0 {
		t.Fatalf("read_committed: outputs not exactly once: %v", bad)
	}
}

// A batch whose transaction the coordinator aborts after its records are
// in the log (a commit that comes after transaction.timeout.ms): a
// read_committed consumer sees each input's outputs once, from the folds
// that ran again after the rewind; a read_uncommitted consumer sees the
// aborted batch's outputs as well, as duplicates.
func TestExactlyOnceAbortedOutputsAreSeenReadUncommittedOnSim(t *testing.T) {
	w := newEOSWorld(t, true)
	ctx := context.Background()
	r := w.runner(w.engine(time.Hour))
	w.produce("alice=+10", "bob=+5")
	for range 3 {
		if err := r.Step(ctx); err != nil {
			t.Fatal(err)
		}
		w.c.Advance(time.Second)
	}
	r.FlushAll(ctx)
	w.produce("alice=+1", "bob=+2", "carol=+7")
	if err := r.Step(ctx); err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		w.c.TimeOutAtCommit(fmt.Sprintf("bank-accounts-%d", p))
	}
	r.FlushAll(ctx) // the batch aborts after its produce
	if errs := r.Errors(); len(errs) != 1 || !errors.Is(errs[0], store.ErrFenced) {
		t.Fatalf("want the batch of accounts/1 to fail, fenced, got %v", errs)
	}
	for range 3 { // the rewind: the flow restarts after the next poll
		if err := r.Step(ctx); err != nil {
			t.Fatal(err)
		}
		w.c.Advance(time.Second)
	}
	r.FlushAll(ctx)
	if !w.caughtUp() {
		t.Fatal("the rewound partition did not commit to the end of its input")
	}
	w.check(r)
	if bad := w.departures(w.audit(true)); len(bad) > 0 {
		t.Fatalf("read_committed: outputs not exactly once: %v", bad)
	}
	dup := w.departures(w.audit(false))
	want := []string{"1:2 ×2", "1:3 ×2", "1:4 ×2"} // alice=+1, bob=+2, carol=+7
	if !slices.Equal(dup, want) {
		t.Fatalf("read_uncommitted sees %v, want the aborted batch's outputs twice: %v", dup, want)
	}
	t.Logf("read_uncommitted sees the aborted batch's outputs again: %v", dup)
}

// The negative control: at-least-once outputs, same script, and the
// stale owner's outputs are duplicates every reader sees.
func TestAtLeastOnceOutputsDuplicateThroughAStaleOwnerOnSim(t *testing.T) {
	w := newEOSWorld(t, false)
	zombieScript(t, w)
	bad := w.departures(w.audit(true))
	if len(bad) == 0 {
		t.Fatal("at-least-once outputs through a stale owner showed no duplicate: the exactly-once test proves nothing")
	}
	for _, d := range bad {
		if !strings.Contains(d, "×") {
			t.Fatalf("at least once may duplicate, never lose: %v", bad)
		}
	}
}

// A crash loses the open batch, outputs and all; the next owner folds the
// records again and emits their outputs once.
func TestExactlyOnceOutputsThroughACrashOnSim(t *testing.T) {
	w := newEOSWorld(t, true)
	ctx := context.Background()
	a := w.runner(w.engine(time.Second))
	w.produce("alice=+10", "bob=+5", "alice=+1")
	w.drain(a)
	w.produce("bob=+2", "carol=+7", "dave=+3")
	if err := a.Step(ctx); err != nil {
		t.Fatal(err)
	}
	crashOnSim(t, a)
	w.c.Advance(time.Minute) // session timeout: a is evicted
	b := w.runner(w.engine(time.Second))
	w.drain(b)
	w.check(b)
	if bad := w.departures(w.audit(true)); len(bad) > 0 {
		t.Fatalf("read_committed: outputs not exactly once: %v", bad)
	}
}

// flakyBackend fails chosen StartCommitBatch calls of its partitions: before
// the batch reaches the cluster, or after it committed (an EndTxn whose
// answer was lost).
type flakyBackend struct {
	store.Backend
	fail func(n int) (before, after bool)
	n    int
}

func (b *flakyBackend) Acquire(ctx context.Context, a store.Acquisition) (store.Partition, error) {
	p, err := b.Backend.Acquire(ctx, a)
	if err != nil {
		return nil, err
	}
	return &flakyPartition{Partition: p, b: b}, nil
}

type flakyPartition struct {
	store.Partition
	b *flakyBackend
}

var errLostAnswer = errors.New("flaky: the answer to EndTxn was lost")

// StartCommitBatch is the engine's way in: the sim's outcome is known
// before it returns, so the flakiness is decided then too.
func (p *flakyPartition) StartCommitBatch(ctx context.Context, batch store.Batch) store.Pending {
	p.b.n++
	before, after := p.b.fail(p.b.n)
	if before {
		return flakyOutcome{errors.New("flaky: the transaction failed before it began")}
	}
	err := p.Partition.StartCommitBatch(ctx, batch).Wait(ctx)[0]
	if err == nil && after {
		return flakyOutcome{errLostAnswer}
	}
	return flakyOutcome{err}
}

// flakyOutcome is a store.Pending done with err, and no position: a
// failed batch vouches for nothing.
type flakyOutcome struct{ err error }

func (flakyOutcome) Done() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func (o flakyOutcome) Wait(context.Context) []error     { return []error{o.err} }
func (flakyOutcome) Position() (store.Checkpoint, bool) { return store.Checkpoint{}, false }

// A batch that fails rewinds its partition to the committed state, and
// the folds run again: whether the batch in fact committed or not, every
// input's outputs are seen once, and the state is the exact fold.
func TestExactlyOnceBatchFailureRewindsOnSim(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after bool
	}{{"aborted", true, false}, {"committed, answer lost", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newEOSWorld(t, true)
			flaky := &flakyBackend{Backend: w.store, fail: func(n int) (bool, bool) {
				if n%3 == 2 {
					return tc.before, tc.after
				}
				return false, false
			}}
			e := w.engine(time.Second, func(c *engine.Config[int]) { c.Store = flaky })
			r := w.runner(e)
			ctx := context.Background()
			for i := range 8 {
				w.produce(fmt.Sprintf("alice=+%d", i), fmt.Sprintf("bob=+%d", i), "carol=+1")
				for range 2 {
					_ = r.Step(ctx)
					w.c.Advance(time.Second)
				}
			}
			w.drain(r)
			w.check(r)
			if len(r.Errors()) == 0 {
				t.Fatal("no batch failed: the test injected nothing")
			}
			if bad := w.departures(w.audit(true)); len(bad) > 0 {
				t.Fatalf("read_committed: outputs not exactly once after %d failed batches: %v", len(r.Errors()), bad)
			}
		})
	}
}

// The caps seal a batch early: no transaction carries more records than
// MaxTransactionRecords plus one fold's.
func TestExactlyOnceCapsTheTransactionOnSim(t *testing.T) {
	w := newEOSWorld(t, true)
	var sizes []int
	obs := store.ObserverFunc(func(e store.TransactionEvent) {
		if e.Err == nil {
			sizes = append(sizes, len(e.Writes)+len(e.Outputs))
		}
	})
	b, err := w.c.NewBackend(sim.BackendConfig{Mode: store.Transactional, TransactionalIDPrefix: "capped", Observer: obs, CreateTopics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	r := w.runner(w.engine(time.Hour, func(c *engine.Config[int]) { c.Store, c.MaxTransactionRecords = b, 10 }))
	for i := range 40 {
		w.produce(fmt.Sprintf("alice=+%d", i), "bob=+1")
	}
	for range 3 {
		if err := r.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		w.c.Advance(time.Second)
	}
	r.FlushAll(context.Background())
	if errs := r.Errors(); len(errs) > 0 {
		t.Fatal(errs)
	}
	if len(sizes) < 8 {
		t.Fatalf("80 records with 2 outputs each and a cap of 10 made %d transactions: %v", len(sizes), sizes)
	}
	for _, n := range sizes {
		if n > 10+2 {
			t.Fatalf("a transaction carried %d records, over the cap of 10 plus one fold's 2: %v", n, sizes)
		}
	}
	if bad := w.departures(w.audit(true)); len(bad) > 0 {
		t.Fatalf("outputs not exactly once: %v", bad)
	}
}

// ExactlyOnce needs transactions; a Plain store is refused, by name.
func TestExactlyOnceRefusesAPlainStore(t *testing.T) {
	c := sim.New(sim.Config{})
	b, err := c.NewBackend(sim.BackendConfig{Mode: store.Plain})
	if err != nil {
		t.Fatal(err)
	}
	_, err = engine.New(engine.Config[int]{Fold: audited, Codec: intCodec{}, Store: b, ExactlyOnce: true})
	var ce *store.ConfigError
	if !errors.As(err, &ce) || ce.Subject != "engine.Config.ExactlyOnce" || !strings.Contains(err.Error(), "needs a Transactional store (this one is plain)") {
		t.Fatalf("got %v, want a *store.ConfigError naming engine.Config.ExactlyOnce", err)
	}
}

// An output the store refuses (here: to the snapshot topic) fails the
// batch before anything is sent, names what and where, and commits
// nothing past it.
func TestExactlyOnceRefusesAnOutputToTheSnapshotTopicOnSim(t *testing.T) {
	w := newEOSWorld(t, true)
	bad := func(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
		return engine.Set(state + 1).With(engine.Output{Topic: "bank-accounts-snapshots", Key: key}), nil
	}
	r := w.runner(w.engine(time.Second, func(c *engine.Config[int]) { c.Fold = bad }))
	w.produce("bob=+1")
	ctx := context.Background()
	for range 3 {
		_ = r.Step(ctx)
		w.c.Advance(time.Second)
	}
	errs := r.Errors()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `accounts/1: output record of key "bob" is for the snapshot topic "bank-accounts-snapshots"`) ||
		!errors.Is(errs[0], store.ErrInvalidOutput) {
		t.Fatalf("errors = %v, want one ErrInvalidOutput naming the partition, key and topic (a replay would make the same output: no restart)", errs)
	}
	if off, _ := w.c.CommittedOffset("bank", store.TopicPartition{Topic: "accounts", Partition: 1}); off != 0 {
		t.Fatalf("committed %d past the refused batch", off)
	}
}
