package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
)

// heldTable is a table whose catch-up the test holds: while held,
// WaitCaughtUp waits for the release or its context, and counts itself
// in waiting.
type heldTable struct {
	mu      sync.Mutex
	release chan struct{} // nil: not held
	waiting int
	gaveUp  int // waits that ended on their context
}

func (t *heldTable) Name() string { return "held" }

func (t *heldTable) WaitCaughtUp(ctx context.Context) error {
	t.mu.Lock()
	release := t.release
	if release != nil {
		t.waiting++
	}
	t.mu.Unlock()
	if release == nil {
		return nil
	}
	defer func() {
		t.mu.Lock()
		t.waiting--
		t.mu.Unlock()
	}()
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		t.mu.Lock()
		t.gaveUp++
		t.mu.Unlock()
		return ctx.Err()
	}
}

func (t *heldTable) hold() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.release = make(chan struct{})
}

func (t *heldTable) letGo() {
	t.mu.Lock()
	defer t.mu.Unlock()
	close(t.release)
	t.release = nil
}

func (t *heldTable) counts() (waiting, gaveUp int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waiting, t.gaveUp
}

// A partition newly assigned to a member is taken over and recovered off
// its polling goroutine: the partition it already runs goes on folding
// and committing while the new one waits for its table (held here for as
// long as the test likes; TableTimeout is an hour), and the new one folds
// nothing until its table has caught up. Then it runs, with every key's
// state exact.
func TestRunningPartitionsFoldWhileANewOneRecoversOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		w.produce("alice=+1", "bob=+2", "dave=+3", "erin=+4")
		protocol := protocols["classic-cooperative"]
		table := &heldTable{}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a := w.runner(w.engineWith(func(c *engine.Config[int]) {
			c.Tables, c.TableTimeout = []engine.Table{table}, time.Hour
		}), protocol)
		aDone := make(chan error, 1)
		go func() { aDone <- a.Run(ctx) }()
		waitUntil(t, "a runs both partitions", func() bool { return w.caughtUp() && len(a.Flows()) == 2 })

		bctx, bcancel := context.WithCancel(ctx)
		b := w.runner(w.engine(), protocol)
		bDone := make(chan error, 1)
		go func() { bDone <- b.Run(bctx) }()
		waitUntil(t, "a and b run one partition each", func() bool { return len(a.Flows()) == 1 && len(b.Flows()) == 1 })
		moving, own := b.Flows()[0], a.Flows()[0]

		// b leaves; a takes moving over, and its recovery waits for the
		// table.
		table.hold()
		bcancel()
		if err := <-bDone; err != nil {
			t.Fatalf("b's Run: %v", err)
		}
		waitUntil(t, "a's recovery of the moving partition waits for the table", func() bool {
			waiting, _ := table.counts()
			return waiting == 1
		})

		// Meanwhile a folds and commits its own partition.
		key := map[int32]string{0: "dave", 1: "alice"}[own.Partition]
		w.produce(key + "=+10")
		waitUntil(t, "a folds and commits its own partition while the other recovers", func() bool {
			got, ok, err := a.State(own, []byte(key))
			return err == nil && ok && got == w.want[key] && w.committed(own) == w.endOffset(own)
		})
		if slices.Contains(a.Flows(), moving) {
			t.Fatalf("%s runs before its table caught up", moving)
		}
		if st := partitionState(a.Status(), moving); st != engine.StateStarting && st != engine.StateRecovering {
			t.Fatalf("%s is %q while its recovery waits, want starting or recovering", moving, st)
		}

		table.letGo()
		waitUntil(t, "a runs both partitions again", func() bool { return w.caughtUp() && len(a.Flows()) == 2 })
		w.check(a)
		cancel()
		if err := <-aDone; err != nil {
			t.Fatalf("a's Run: %v", err)
		}
	})
}

// heldTakeover is a store whose takeover of one input partition waits
// until the test lets it go, or its context ends: a coordinator that
// takes its time, say, to abort a predecessor's transaction.
type heldTakeover struct {
	store.Backend
	held    int32
	release chan struct{}
}

func (s *heldTakeover) Acquire(ctx context.Context, a store.Acquisition) (store.Partition, error) {
	if a.Input.Partition == s.held {
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Backend.Acquire(ctx, a)
}

// The takeovers of a member's new partitions run side by side: one that
// waits on its coordinator holds up none of the others, which recover,
// fold and commit meanwhile, whichever partition's takeover waits. The
// waiting one runs nothing until it is taken over, then catches up, with
// every key's state exact.
func TestAWaitingTakeoverHoldsUpNoOtherPartitionOnKfake(t *testing.T) {
	for _, held := range []int32{0, 1} {
		t.Run(fmt.Sprintf("partition-%d-waits", held), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t)
				w.produce("alice=+1", "bob=+2", "dave=+3", "erin=+4")
				st := &heldTakeover{held: held, release: make(chan struct{})}
				a := w.runner(w.engineWith(func(c *engine.Config[int]) {
					st.Backend = c.Store
					c.Store = st
				}), protocols["classic-cooperative"])
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan error, 1)
				go func() { done <- a.Run(ctx) }()

				waiting := store.TopicPartition{Topic: "accounts", Partition: held}
				other := store.TopicPartition{Topic: "accounts", Partition: 1 - held}
				key := map[int32]string{0: "dave", 1: "alice"}[other.Partition]
				w.produce(key + "=+10")
				waitUntil(t, "a folds and commits the other partition while one takeover waits", func() bool {
					got, ok, err := a.State(other, []byte(key))
					return err == nil && ok && got == w.want[key] && w.committed(other) == w.endOffset(other)
				})
				if got := a.Flows(); !slices.Equal(got, []store.TopicPartition{other}) {
					t.Fatalf("a runs %v while %s's takeover waits, want only %s", got, waiting, other)
				}
				if s := partitionState(a.Status(), waiting); s != engine.StateStarting && s != engine.StateRecovering {
					t.Fatalf("%s is %q while its takeover waits, want starting or recovering", waiting, s)
				}

				close(st.release)
				waitUntil(t, "a runs both partitions", func() bool { return w.caughtUp() && len(a.Flows()) == 2 })
				w.check(a)
				cancel()
				if err := <-done; err != nil {
					t.Fatalf("a's Run: %v", err)
				}
			})
		})
	}
}

// A member that closes while its partitions recover cancels the
// recoveries: Run returns at once (not when the table's hour is up), the
// recoveries' waits end on their context, no partition ran, nothing is
// reported as a failure, and a later member recovers every key's state
// exactly.
func TestCloseCancelsTheRecoveriesInFlightOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		w.produce("alice=+1", "bob=+2", "dave=+3", "erin=+4")
		protocol := protocols["classic-cooperative"]
		first := w.runner(w.engine(), protocol)
		w.drain(first)
		if err := first.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		w.produce("alice=+5", "dave=+6")

		table := &heldTable{}
		table.hold()
		ctx, cancel := context.WithCancel(context.Background())
		a := w.runner(w.engineWith(func(c *engine.Config[int]) {
			c.Tables, c.TableTimeout = []engine.Table{table}, time.Hour
		}), protocol)
		aDone := make(chan error, 1)
		go func() { aDone <- a.Run(ctx) }()
		waitUntil(t, "a recovery waits for the table", func() bool {
			waiting, _ := table.counts()
			return waiting > 0
		})
		if flows := a.Flows(); len(flows) != 0 {
			t.Fatalf("%v run before their table caught up", flows)
		}
		closing := time.Now()
		cancel()
		if err := <-aDone; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if took := time.Since(closing); took > 2*time.Minute {
			t.Fatalf("Run returned %s after its context ended: the recoveries were not cancelled", took)
		}
		if waiting, gaveUp := table.counts(); waiting != 0 || gaveUp == 0 {
			t.Fatalf("table waits: %d still waiting, %d ended on their context; want none waiting, and the waits cancelled", waiting, gaveUp)
		}
		if errs := a.Errors(); len(errs) != 0 {
			t.Fatalf("a's errors: %v, want none (a cancelled recovery is no failure)", errs)
		}

		last := w.runner(w.engine(), protocol)
		w.drain(last)
		w.check(last)
		if err := last.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// partitionState is tp's state in st ("" if st has none).
func partitionState(st engine.Status, tp store.TopicPartition) engine.PartitionState {
	for _, p := range st.Partitions {
		if p.Input == tp {
			return p.State
		}
	}
	return ""
}
