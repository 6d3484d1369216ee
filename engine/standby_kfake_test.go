package engine_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/engine"
)

// standbyTier is a cluster the standby failover script runs on: kfake in
// virtual time, or a real broker.
type standbyTier struct {
	produce  func(events ...string)
	caughtUp func() bool
	// wait waits until cond holds, failing the test past its deadline.
	wait func(t *testing.T, what string, cond func() bool)
	// members: a runner with a kill switch and a plain one, both with
	// Standby and logging to logs; fresh: a runner of a new engine.
	members func(logs [2]*logCount) (a *engine.Member[int], kill func(), b *engine.Member[int])
	fresh   func() *engine.Member[int]
	drain   func(*engine.Member[int])
	check   func(*engine.Member[int])
}

// standbyFailover is the standby failover through Run and the Kafka
// source: two members each follow the other's partition, caught up and
// vouched for; the killed one's partition is taken over with a delta from
// the survivor's replica, and the snapshots after are exact (a fresh
// engine recovers the ledger), with no ERROR line.
func standbyFailover(t *testing.T, tier standbyTier) {
	for i := range 10 {
		tier.produce("alice=+"+strconv.Itoa(i+1), "bob=+1", "carol=+2", "dave=+3", "erin=+4")
	}
	logs := [2]*logCount{{}, {}}
	rA, kill, rB := tier.members(logs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() { errs[0] = rA.Run(ctx) })
	wg.Go(func() { errs[1] = rB.Run(ctx) })
	defer wg.Wait()
	defer cancel()

	// followed: r follows the partition it does not own, caught up and
	// vouched for.
	followed := func(r *engine.Member[int]) bool {
		st := r.Status()
		if len(st.Partitions) != 1 || len(st.Standbys) != 1 {
			return false
		}
		sb := st.Standbys[0]
		return sb.Input != st.Partitions[0].Input && sb.Vouched && sb.Lag == 0
	}
	both := func() bool { return tier.caughtUp() && followed(rA) && followed(rB) }
	tier.wait(t, "both members caught up, each following the other's partition", both)
	tier.produce("dave=+100", "erin=close", "bob=+7")
	tier.wait(t, "both members caught up again, each following the other's partition", both)
	moved := rA.Status().Partitions[0].Input
	recoveryLines(logs[1]) // forget the first recoveries
	kill()
	tier.wait(t, "the survivor owns both partitions and is caught up", func() bool {
		st := rB.Status()
		return len(st.Partitions) == 2 && st.Ready() && tier.caughtUp()
	})
	got := recoveryLines(logs[1])[moved.String()]
	if !strings.HasPrefix(got, "delta ") {
		t.Fatalf("the takeover of %s recovered %q, want a delta from the replica", moved, got)
	}
	t.Logf("the takeover of %s recovered %q (kind, full reason, snapshots read)", moved, got)
	if st := rB.Status(); len(st.Standbys) != 0 {
		t.Fatalf("standbys %+v while the member owns every partition", st.Standbys)
	}
	tier.produce("dave=+1", "alice=+1")
	tier.wait(t, "the survivor caught up", tier.caughtUp)
	cancel()
	wg.Wait()
	if errs[1] != nil {
		t.Fatalf("the survivor's Run = %v", errs[1])
	}
	fresh := tier.fresh()
	tier.drain(fresh)
	tier.check(fresh)
	if err := fresh.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := logs[1].errorLines(); n != 0 {
		t.Fatalf("%d ERROR lines, want 0:\n%s", n, logs[1])
	}
}

// The standby failover on kfake (with Standby off on one member it fails:
// nothing follows).
func TestStandbyFailoverOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		protocol := protocols["classic-eager"]
		standbyFailover(t, standbyTier{
			produce: w.produce, caughtUp: w.caughtUp, wait: waitUntil,
			members: func(logs [2]*logCount) (*engine.Member[int], func(), *engine.Member[int]) {
				with := func(i int) func(*engine.Config[int]) {
					return func(c *engine.Config[int]) { c.StandbyReplicas, c.Logger = 1, slog.New(logs[i]) }
				}
				a, k := w.killableRunner(w.engineWith(with(0)), protocol)
				return a, func() { crashAndLeave(t, a, k) }, w.runner(w.engineWith(with(1)), protocol)
			},
			fresh: func() *engine.Member[int] { return w.runner(w.engine(), protocol) },
			drain: w.drain, check: w.check,
		})
	})
}

// waitUntil waits, in a synctest bubble's virtual time, until cond holds,
// looking every 100 ms; past two minutes it fails the test with what.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 2 minutes: %s", what)
		}
	}
}
