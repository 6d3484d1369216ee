//go:build it

package engine_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/snapfence/snapfence/engine"
)

// Standby replicas against Kafka 4.3.1, as on kfake (standby_kfake_test.go):
// each member follows the other's partition; the killed member's partition
// is taken over with a delta from the replica, and the snapshots after are
// exact.
func TestStandbyFailoverOnKafka(t *testing.T) {
	w := newBrokerWorld(t)
	for i := range 10 {
		w.produce("alice=+"+strconv.Itoa(i+1), "bob=+1", "carol=+2", "dave=+3", "erin=+4")
	}
	protocol := protocols["classic-eager"]
	logs := [2]*logCount{{}, {}}
	with := func(i int) func(*engine.Config[int]) {
		return func(c *engine.Config[int]) { c.Standby, c.Logger = true, slog.New(logs[i]) }
	}
	rA, kill := w.killableRunnerWith(protocol, with(0))
	rB := w.runnerWith(protocol, with(1))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() { errs[0] = rA.Run(ctx) })
	wg.Go(func() { errs[1] = rB.Run(ctx) })
	defer wg.Wait()
	defer cancel()

	followed := func(r *engine.Runner[int]) bool {
		st := r.Status()
		if len(st.Partitions) != 1 || len(st.Standbys) != 1 {
			return false
		}
		sb := st.Standbys[0]
		return sb.Input != st.Partitions[0].Input && sb.Vouched && sb.Lag == 0
	}
	both := func() bool { return w.caughtUp() && followed(rA) && followed(rB) }
	waitFor(t, "both members caught up, each following the other's partition", both)
	w.produce("dave=+100", "erin=close", "bob=+7")
	waitFor(t, "both members caught up again, each following the other's partition", both)
	moved := rA.Status().Partitions[0].Input
	recoveryLines(logs[1])
	crashAndLeave(t, rA, kill)
	waitFor(t, "the survivor owns both partitions and is caught up", func() bool {
		st := rB.Status()
		return len(st.Partitions) == 2 && st.Ready() && w.caughtUp()
	})
	got := recoveryLines(logs[1])[moved.String()]
	if !strings.HasPrefix(got, "delta ") {
		t.Fatalf("the takeover of %s recovered %q, want a delta from the replica", moved, got)
	}
	t.Logf("the takeover of %s recovered %q (kind, full reason, snapshots read)", moved, got)
	w.produce("dave=+1", "alice=+1")
	waitFor(t, "the survivor caught up", w.caughtUp)
	cancel()
	wg.Wait()
	if errs[1] != nil {
		t.Fatalf("the survivor's Run = %v", errs[1])
	}
	fresh := w.runner(protocol)
	w.drain(fresh)
	w.check(fresh)
	if err := fresh.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := logs[1].errorLines(); n != 0 {
		t.Fatalf("%d ERROR lines, want 0:\n%s", n, logs[1])
	}
}
