package enginetest_test

import (
	"testing"

	"github.com/snapfence/snapfence/engine/enginetest"
	"github.com/snapfence/snapfence/store/sim"
)

// Every rebalance protocol of the simulated cluster runs the helpers:
// joins, a clean leave, a crash and a stale owner, the state exact after
// each.
func TestEveryProtocol(t *testing.T) {
	for _, p := range []sim.Protocol{sim.ClassicEager, sim.ClassicCooperative, sim.Consumer} {
		t.Run(p.String(), func(t *testing.T) {
			cfg := config(false)
			cfg.Protocol = p
			cfg.Members = 3
			d := enginetest.New(t, cfg)
			keys := []string{"alice", "bob", "carol", "dave", "erin", "frank"}
			for _, k := range keys {
				d.Produce("orders", k, "1")
			}
			d.Settle()
			rep := staleScript(d)
			if len(rep.Fenced) == 0 || len(rep.Landed) != 0 {
				t.Fatalf("stale owner: %d fenced, %d landed", len(rep.Fenced), len(rep.Landed))
			}
			for _, k := range keys {
				d.Produce("orders", k, "2")
			}
			d.Step()
			d.Crash(d.Owner("bob"))
			d.AddMember()
			balanced(t, d)
			for _, k := range keys {
				d.Produce("orders", k, "3")
			}
			d.RemoveMember(d.Members()[0])
			balanced(t, d)
			d.CheckExact()
		})
	}
}

// balanced fails the test unless every live member runs a partition (the
// tests have no more members than partitions): a settled group has
// handed the partitions out.
func balanced(t *testing.T, d *enginetest.Driver[int64]) {
	t.Helper()
	for _, m := range d.Members() {
		if len(d.Member(m).Flows()) == 0 {
			t.Errorf("member %d runs no partition once the group settled", m)
		}
	}
}
