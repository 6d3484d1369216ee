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

// Standby replicas on kfake, through Run and the Kafka source: two
// members each follow the other's partition; the one killed hands its
// partition to the other, whose takeover recovers the delta from its
// replica, and the snapshots after it are exact.
func TestStandbyFailoverOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		for i := range 10 {
			w.produce("alice=+"+strconv.Itoa(i+1), "bob=+1", "carol=+2", "dave=+3", "erin=+4")
		}
		logs := [2]*logCount{{}, {}}
		var es [2]*engine.Engine[int]
		for i := range es {
			es[i] = w.engineWith(func(c *engine.Config[int]) { c.Standby, c.Logger = true, slog.New(logs[i]) })
		}
		rA, kill := w.killableRunner(es[0], protocols["classic-eager"])
		rB := w.runner(es[1], protocols["classic-eager"])
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Go(func() { errs[0] = rA.Run(ctx) })
		wg.Go(func() { errs[1] = rB.Run(ctx) })
		defer wg.Wait()
		defer cancel()

		// followed: each member follows the partition it does not own,
		// caught up and vouched for.
		followed := func(e *engine.Engine[int]) bool {
			st := e.Status()
			if len(st.Partitions) != 1 || len(st.Standbys) != 1 {
				return false
			}
			sb := st.Standbys[0]
			return sb.Input != st.Partitions[0].Input && sb.Vouched && sb.Lag == 0
		}
		both := func() bool { return w.caughtUp() && followed(es[0]) && followed(es[1]) }
		waitUntil(t, "both members caught up, each following the other's partition", both)
		w.produce("dave=+100", "erin=close", "bob=+7")
		waitUntil(t, "both members caught up again, each following the other's partition", both)
		moved := es[0].Status().Partitions[0].Input
		recoveryLines(logs[1]) // forget the first recoveries
		crashAndLeave(t, rA, kill)
		waitUntil(t, "the survivor owns both partitions and is caught up", func() bool {
			st := es[1].Status()
			return len(st.Partitions) == 2 && st.Ready() && w.caughtUp()
		})
		got := recoveryLines(logs[1])[moved.String()]
		if !strings.HasPrefix(got, "delta ") {
			t.Fatalf("the takeover of %s recovered %q, want a delta from the replica", moved, got)
		}
		t.Logf("the takeover of %s recovered %q (kind, full reason, snapshots read)", moved, got)
		if st := es[1].Status(); len(st.Standbys) != 0 {
			t.Fatalf("standbys %+v while the member owns every partition", st.Standbys)
		}
		w.produce("dave=+1", "alice=+1")
		waitUntil(t, "the survivor caught up", w.caughtUp)
		cancel()
		wg.Wait()
		if errs[1] != nil {
			t.Fatalf("the survivor's Run = %v", errs[1])
		}
		fresh := w.runner(w.engine(), protocols["classic-eager"])
		w.drain(fresh)
		w.check(fresh)
		if err := fresh.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := logs[1].errorLines(); n != 0 {
			t.Fatalf("%d ERROR lines, want 0:\n%s", n, logs[1])
		}
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
