package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
)

// get is a query that must succeed.
func get(t *testing.T, e *engine.Engine[int], tp store.TopicPartition, key string, mode engine.ReadMode) (int, bool, int64) {
	t.Helper()
	got, ok, err := e.Get(context.Background(), tp, []byte(key), mode)
	if err != nil {
		t.Fatalf("Get(%s, %s, %v): %v", tp, key, mode, err)
	}
	return got.State, ok, got.Offset
}

// rangeKeys is a range that must succeed, as "key=state" in order.
func rangeKeys(t *testing.T, e *engine.Engine[int], tp store.TopicPartition, mode engine.ReadMode) []string {
	t.Helper()
	var out []string
	for en, err := range e.Range(context.Background(), tp, mode) {
		if err != nil {
			t.Fatalf("Range(%s, %v): %v", tp, mode, err)
		}
		out = append(out, fmt.Sprintf("%s=%d", en.Key, en.State))
	}
	return out
}

// flushedByHand is an engine of w that flushes only in FlushAll.
func flushedByHand(w *simWorld) *engine.Engine[int] {
	e, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: w.store,
		PersistInterval: time.Hour, CommitInterval: time.Hour})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	return e
}

// stepAll steps r until it runs both partitions, and once more: what was
// produced is folded.
func stepAll(t *testing.T, r *engine.Member[int]) {
	t.Helper()
	for {
		if err := r.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(r.Flows()) == 2 {
			break
		}
	}
	if err := r.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A committed read shows a fold only once its snapshot is durable; a
// latest read shows it at once; both say the offset they reflect.
func TestQueryCommittedAndLatestOnSim(t *testing.T) {
	w := newSimWorld(t)
	e := flushedByHand(w)
	r := w.runner(e)
	w.produce("alice=+10", "carol=+7") // partition 1 (odd lengths)
	stepAll(t, r)
	if s, ok, off := get(t, e, accounts1, "alice", engine.ReadLatest); !ok || s != 10 || off != 0 {
		t.Fatalf("latest alice = %d, %t @%d; want 10 @0", s, ok, off)
	}
	if s, ok, off := get(t, e, accounts1, "alice", engine.ReadCommitted); ok || off != -1 {
		t.Fatalf("committed alice = %d, %t @%d before any flush; want none", s, ok, off)
	}
	if got := rangeKeys(t, e, accounts1, engine.ReadLatest); !slices.Equal(got, []string{"alice=10", "carol=7"}) {
		t.Fatalf("latest range = %v", got)
	}
	if got := rangeKeys(t, e, accounts1, engine.ReadCommitted); len(got) != 0 {
		t.Fatalf("committed range before any flush = %v", got)
	}
	r.FlushAll(context.Background())
	if s, ok, off := get(t, e, accounts1, "alice", engine.ReadCommitted); !ok || s != 10 || off != 0 {
		t.Fatalf("committed alice = %d, %t @%d; want 10 @0", s, ok, off)
	}
	w.produce("alice=+1", "carol=close")
	if err := r.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s, _, off := get(t, e, accounts1, "alice", engine.ReadLatest); s != 11 || off != 2 {
		t.Fatalf("latest alice = %d @%d; want 11 @2", s, off)
	}
	if s, _, _ := get(t, e, accounts1, "alice", engine.ReadCommitted); s != 10 {
		t.Fatalf("committed alice = %d; want 10 (the fold of offset 2 is not durable)", s)
	}
	if _, ok, off := get(t, e, accounts1, "carol", engine.ReadLatest); ok || off != 3 {
		t.Fatalf("latest carol exists=%t @%d; want deleted @3", ok, off)
	}
	if got := rangeKeys(t, e, accounts1, engine.ReadLatest); !slices.Equal(got, []string{"alice=11"}) {
		t.Fatalf("latest range = %v", got)
	}
	if got := rangeKeys(t, e, accounts1, engine.ReadCommitted); !slices.Equal(got, []string{"alice=10", "carol=7"}) {
		t.Fatalf("committed range = %v", got)
	}
	r.FlushAll(context.Background())
	if got := rangeKeys(t, e, accounts1, engine.ReadCommitted); !slices.Equal(got, []string{"alice=11"}) {
		t.Fatalf("committed range after the flush = %v", got)
	}
}

// A range reads a page at a time: one over more keys than a page, some
// only folded, some deleted, yields each live key once, in order.
func TestQueryRangeAcrossPagesOnSim(t *testing.T) {
	w := newSimWorld(t)
	e := flushedByHand(w)
	r := w.runner(e)
	var evs []string
	for i := range 700 {
		evs = append(evs, fmt.Sprintf("k%04d=+%d", i, i)) // 5 bytes: partition 1
	}
	w.produce(evs...)
	stepAll(t, r)
	r.FlushAll(context.Background())
	// Now some changes that are not durable: new keys between committed
	// ones, and deletes.
	evs = evs[:0]
	for i := range 700 {
		switch i % 7 {
		case 0:
			evs = append(evs, fmt.Sprintf("k%04d=close", i))
		case 3:
			evs = append(evs, fmt.Sprintf("k%04d=+1", i))
		}
	}
	var late []string
	for i := range 300 {
		late = append(late, fmt.Sprintf("j%04d=+1", i))
	}
	w.produce(append(evs, late...)...)
	if err := r.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 300 {
		want = append(want, fmt.Sprintf("j%04d=1", i))
	}
	for i := range 700 {
		switch i % 7 {
		case 0:
		case 3:
			want = append(want, fmt.Sprintf("k%04d=%d", i, i+1))
		default:
			want = append(want, fmt.Sprintf("k%04d=%d", i, i))
		}
	}
	if got := rangeKeys(t, e, accounts1, engine.ReadLatest); !slices.Equal(got, want) {
		t.Fatalf("latest range: %d keys, want %d; first differences: %v", len(got), len(want), firstDiff(got, want))
	}
	var committed []string
	for i := range 700 {
		committed = append(committed, fmt.Sprintf("k%04d=%d", i, i))
	}
	if got := rangeKeys(t, e, accounts1, engine.ReadCommitted); !slices.Equal(got, committed) {
		t.Fatalf("committed range: %d keys, want %d; first differences: %v", len(got), len(committed), firstDiff(got, committed))
	}
	// Stopping early stops.
	n := 0
	for range e.Range(context.Background(), accounts1, engine.ReadCommitted) {
		n++
		if n == 3 {
			break
		}
	}
}

func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("at %d: %q, want %q", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(got), len(want))
}

// notOwned asserts that err is a *NotOwnedError of tp.
func notOwned(t *testing.T, err error, tp store.TopicPartition) *engine.NotOwnedError {
	t.Helper()
	ne, ok := errors.AsType[*engine.NotOwnedError](err)
	if !ok || !errors.Is(err, engine.ErrNotOwned) || ne.Input != tp {
		t.Fatalf("err = %v; want a *NotOwnedError of %s", err, tp)
	}
	return ne
}

// A query of a partition this instance does not serve gets the typed
// error, and after a rebalance each instance answers for what it owns and
// nothing else: the partition that moved away answers ErrNotOwned though
// its committed states are still in the old owner's cache.
func TestQueryOwnershipAcrossARebalanceOnSim(t *testing.T) {
	w := newSimWorld(t)
	ea := w.engine()
	_, _, err := ea.Get(context.Background(), accounts1, []byte("alice"), engine.ReadCommitted)
	notOwned(t, err, accounts1)
	ra := w.runner(ea)
	w.produce("alice=+10", "bob=+5")
	w.drain(ra)
	other := store.TopicPartition{Topic: "other", Partition: 0}
	for _, mode := range []engine.ReadMode{engine.ReadCommitted, engine.ReadLatest} {
		_, _, err := ea.Get(context.Background(), other, []byte("alice"), mode)
		if ne := notOwned(t, err, other); ne.State != "" {
			t.Fatalf("state of an unassigned partition = %q", ne.State)
		}
		for _, err := range ea.Range(context.Background(), other, mode) {
			notOwned(t, err, other)
		}
	}
	if got := ea.Readable(); !slices.Equal(got, []store.TopicPartition{accounts0, accounts1}) {
		t.Fatalf("Readable = %v", got)
	}

	eb := w.engine()
	rb := w.runner(eb)
	w.produce("alice=+1", "bob=+1")
	w.drain(ra, rb)
	var moved, kept store.TopicPartition
	switch {
	case slices.Equal(rb.Flows(), []store.TopicPartition{accounts0}):
		moved, kept = accounts0, accounts1
	case slices.Equal(rb.Flows(), []store.TopicPartition{accounts1}):
		moved, kept = accounts1, accounts0
	default:
		t.Fatalf("after the rebalance b owns %v, a %v", rb.Flows(), ra.Flows())
	}
	for _, mode := range []engine.ReadMode{engine.ReadCommitted, engine.ReadLatest} {
		_, _, err := ea.Get(context.Background(), moved, []byte("bob"), mode)
		notOwned(t, err, moved)
		_, _, err = eb.Get(context.Background(), kept, []byte("bob"), mode)
		notOwned(t, err, kept)
	}
	for key, state := range map[string]int{"alice": 11, "bob": 6} {
		tp := store.TopicPartition{Topic: "accounts", Partition: int32(len(key) % 2)}
		owner := ea
		if tp == moved {
			owner = eb
		}
		for _, mode := range []engine.ReadMode{engine.ReadCommitted, engine.ReadLatest} {
			if s, ok, _ := get(t, owner, tp, key, mode); !ok || s != state {
				t.Fatalf("%s on its owner (%v) = %d, %t; want %d", key, mode, s, ok, state)
			}
		}
	}
	// A bad mode is a clear error, not a panic.
	if _, _, err := ea.Get(context.Background(), kept, []byte("bob"), engine.ReadMode(9)); !errors.Is(err, store.ErrMisconfigured) {
		t.Fatalf("bad mode: %v", err)
	}
	if err := rb.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, _, err = eb.Get(context.Background(), moved, []byte("bob"), engine.ReadCommitted)
	notOwned(t, err, moved)
}

// Queries from other goroutines while partitions move between two members
// (under the race detector in make race): every answer is the typed error
// or a state the key really had, read from the key's own partition.
func TestQueriesDuringRebalancesOnSim(t *testing.T) {
	w := newSimWorld(t)
	ea, eb := w.engine(), w.engine()
	ra := w.runner(ea)
	// alice (partition 1) and dave (partition 0) get +1 a step: the
	// fold of offset n makes n+1.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	answers := map[string]int{}
	// Each querier reads free-running, beside the steps, and signals the
	// end of every round of reads (rounds, one slot: a signal not taken
	// stands for any number); exited is closed when it stops.
	type querier struct{ rounds, exited chan struct{} }
	var queriers []querier
	for _, e := range []*engine.Engine[int]{ea, eb} {
		for _, mode := range []engine.ReadMode{engine.ReadCommitted, engine.ReadLatest} {
			q := querier{rounds: make(chan struct{}, 1), exited: make(chan struct{})}
			queriers = append(queriers, q)
			wg.Go(func() {
				defer close(q.exited)
				for ctx.Err() == nil {
					for _, tp := range []store.TopicPartition{accounts0, accounts1} {
						got, ok, err := e.Get(ctx, tp, []byte("alice"), mode)
						switch {
						case errors.Is(err, engine.ErrNotOwned) || errors.Is(err, context.Canceled):
							mu.Lock()
							answers["not owned"]++
							mu.Unlock()
							continue
						case err != nil:
							t.Errorf("Get: %v", err)
							return
						case tp == accounts0 && ok:
							t.Errorf("alice read from partition 0: %d", got.State)
							return
						case ok && int64(got.State) != got.Offset+1:
							// alice's n-th record (offset n-1) makes her n.
							t.Errorf("alice = %d at offset %d", got.State, got.Offset)
							return
						}
						mu.Lock()
						answers[mode.String()]++
						mu.Unlock()
						for en, err := range e.Range(ctx, tp, mode) {
							if err != nil {
								if !errors.Is(err, engine.ErrNotOwned) && !errors.Is(err, context.Canceled) {
									t.Errorf("Range: %v", err)
								}
								break
							}
							if tp == accounts0 && string(en.Key) == "alice" {
								t.Errorf("alice ranged in partition 0")
							}
						}
					}
					select {
					case q.rounds <- struct{}{}:
					default:
					}
				}
			})
		}
	}
	// observed waits until every querier has read the state the steps
	// left: a whole round begun after the steps.
	observed := func() {
		for _, q := range queriers {
			select {
			case <-q.rounds: // a round that may have begun before
			default:
			}
			for range 2 {
				select {
				case <-q.rounds:
				case <-q.exited:
					t.Fatal("a querier stopped")
				}
			}
		}
	}
	var rb *engine.Member[int]
	for i := range 40 {
		w.produce("alice=+1", "dave=+1")
		switch i {
		case 10:
			rb = w.runner(eb)
		case 25:
			if err := ra.Close(context.Background()); err != nil {
				t.Error(err)
			}
			ra = w.runner(ea)
		}
		for _, r := range []*engine.Member[int]{ra, rb} {
			if r != nil {
				if err := r.Step(context.Background()); err != nil {
					t.Error(err)
				}
			}
		}
		w.c.Advance(time.Second)
		observed()
	}
	w.drain(ra, rb)
	cancel()
	wg.Wait()
	w.check(ra, rb)
	t.Logf("answers: %v", answers)
	if answers["committed"] == 0 || answers["latest"] == 0 || answers["not owned"] == 0 {
		t.Fatalf("the queries did not see both outcomes: %v", answers)
	}
}

// Queries of engines running on kfake (Run on goroutines of their own,
// queries from the test's): the owner of a key's partition answers it,
// committed and latest; the other member answers ErrNotOwned; the
// committed state catches up with the latest once it is flushed.
func TestQueriesWhileRunningOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		ea, eb := w.engine(), w.engine()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wg sync.WaitGroup
		run := func(e *engine.Engine[int]) {
			wg.Go(func() {
				if err := e.Run(ctx, kafkaio.Config{SeedBrokers: w.c.ListenAddrs(), Group: "bank", Topics: []string{"accounts"},
					ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext)}}); err != nil {
					t.Error(err)
				}
			})
		}
		// until waits for what it observes, in the bubble's time.
		until := func(what string, done func() bool) {
			t.Helper()
			for range 600 {
				if done() {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Fatalf("%s: not within a minute", what)
		}
		run(ea)
		w.produce("alice=+10", "dave=+4", "alice=+1")
		until("alice folded on a", func() bool {
			en, ok, err := ea.Get(ctx, accounts1, []byte("alice"), engine.ReadLatest)
			return err == nil && ok && en.State == 11 && en.Offset == 1
		})
		until("alice committed on a", func() bool {
			en, ok, err := ea.Get(ctx, accounts1, []byte("alice"), engine.ReadCommitted)
			return err == nil && ok && en.State == 11
		})
		run(eb)
		until("one partition each", func() bool {
			return len(ea.Readable()) == 1 && len(eb.Readable()) == 1
		})
		w.produce("alice=+100", "dave=+40")
		for key, want := range map[string]int{"alice": 111, "dave": 44} {
			tp := store.TopicPartition{Topic: "accounts", Partition: int32(len(key) % 2)}
			owner, other := ea, eb
			if eb.Readable()[0] == tp {
				owner, other = eb, ea
			}
			until(key+" on its owner", func() bool {
				en, ok, err := owner.Get(ctx, tp, []byte(key), engine.ReadCommitted)
				return err == nil && ok && en.State == want
			})
			_, _, err := other.Get(ctx, tp, []byte(key), engine.ReadLatest)
			notOwned(t, err, tp)
			_, _, err = other.Get(ctx, tp, []byte(key), engine.ReadCommitted)
			notOwned(t, err, tp)
		}
		// Closing the cache under a Run is refused (the runner would meet
		// a closed cache), and the Run goes on.
		if err := ea.Close(); !errors.Is(err, engine.ErrRunning) {
			t.Fatalf("Close under Run = %v, want ErrRunning", err)
		}
		if _, _, err := ea.Get(ctx, accounts1, []byte("alice"), engine.ReadCommitted); err != nil && !errors.Is(err, engine.ErrNotOwned) {
			t.Fatalf("a query after the refused Close: %v", err)
		}
		cancel()
		wg.Wait()
		_, _, err := ea.Get(context.Background(), accounts1, []byte("alice"), engine.ReadCommitted)
		notOwned(t, err, accounts1)
	})
}

// Committed states reach the cache at once while committed reads come,
// and within about a second when nobody reads (the engine defers them
// otherwise): a committed read sees each commit once it reads, and a
// partition whose input stopped catches up without a read.
func TestCommittedReadsSeeCommitsWhileTheyComeAndCatchUpWhenIdleOnSim(t *testing.T) {
	w := newSimWorld(t)
	e := w.engineWith(func(c *engine.Config[int]) {
		c.PersistInterval, c.CommitInterval = 100*time.Millisecond, 100*time.Millisecond
	})
	r := w.runner(e)
	ctx := context.Background()
	step := func() {
		t.Helper()
		if err := r.Step(ctx); err != nil {
			t.Fatal(err)
		}
		w.c.Advance(100 * time.Millisecond)
	}
	committed := func() {
		t.Helper()
		for range 100 {
			step()
			if w.caughtUp() {
				return
			}
		}
		t.Fatal("the input was not committed to its end in 10 s")
	}
	stepAll(t, r)

	// Nobody reads: the commit's states are deferred, then written once
	// the partition has been idle long enough.
	w.produce("alice=+10")
	committed()
	for range 15 { // 1.5 s, no input
		step()
	}
	if s, ok, off := get(t, e, accounts1, "alice", engine.ReadCommitted); !ok || s != 10 || off != 0 {
		t.Fatalf("committed alice = %d, %t @%d after 1.5 s idle; want 10 @0", s, ok, off)
	}

	// Reads come: each commit is in the cache as soon as it is made.
	for i := range 5 {
		w.produce("alice=+1")
		committed()
		want := 11 + i
		if s, ok, off := get(t, e, accounts1, "alice", engine.ReadCommitted); !ok || s != want || off != int64(1+i) {
			t.Fatalf("committed alice = %d, %t @%d right after commit %d; want %d @%d", s, ok, off, i, want, 1+i)
		}
	}
}
