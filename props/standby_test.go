package props

import (
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
)

// standbyConfigs are the worlds with standby replicas
// (world.Config.Standby): each protocol, exactly-once outputs off and on,
// a replica on every other member or one replica placed by count,
// the caches in memory (a new process has no copy) and on disk
// (WarmRestarts, under cacheBase: a restart keeps its copies, and the
// wipe step loses them); variant (if set) changes each.
func standbyConfigs(t *testing.T, variant func(*world.Config)) []world.Config {
	base := cacheBase(t)
	var out []world.Config
	for _, warm := range []bool{false, true} {
		for _, eos := range []bool{false, true} {
			for _, p := range protocols {
				// Every other member keeps a replica (0), or one does,
				// placed by the group report (1 of 3 slots).
				for _, n := range []int{0, 1} {
					cfg := world.Config{Mode: store.Transactional, Protocol: p, ExactlyOnce: eos, Standby: true, StandbyReplicas: n}
					if warm {
						cfg.WarmRestarts, cfg.CacheDir = true, base
					}
					if variant != nil {
						variant(&cfg)
					}
					out = append(out, cfg)
				}
			}
		}
	}
	return out
}

// Standby replicas hold: members follow the partitions they do not own
// into their caches (replicate steps let them read), and partitions move
// to members whose copy is current, behind, not yet vouched for, refused
// by the store (its checkpoint too old, the topic recreated) or lost
// (crashes, a wiped disk). No random scenario violates any invariant: the
// states after every promotion are the committed snapshots (9), a
// replica reads only committed snapshots (4), and a promotion whose
// replica the store had vouched for recovers a delta unless the store
// refused its checkpoint (11). Every scenario draws its world among
// standbyConfigs: -rapid.checks scenarios in all. Not vacuous: it fails
// unless deltas from current and from behind replicas, a vouched
// replica's checkpoint refused, and promotions with no replica or one
// not yet vouched for all happened.
func TestStandbyReplicasHoldEveryInvariant(t *testing.T) {
	var stats Stats
	start := time.Now()
	rapid.Check(t, PropertyOf(standbyConfigs(t, nil), &stats))
	t.Logf("%d scenarios in %s (%.0f a minute); steps: %s", stats.Scenarios, time.Since(start).Round(time.Millisecond),
		float64(stats.Scenarios)/time.Since(start).Minutes(), stats.Coverage())
	t.Logf("recoveries after acquisitions, by replica: %s", stats.PromotionCoverage())
	if t.Failed() {
		return
	}
	for _, want := range [][]string{{"current delta"}, {"behind delta"}, {"current full ", "behind full "}, {"none full "}, {"unvouched full "}} {
		n := 0
		for _, prefix := range want {
			n += stats.PromotionsOf(prefix)
		}
		if n == 0 {
			t.Errorf("no promotion %q in %d scenarios", want, stats.Scenarios)
		}
	}
}

// standbyControl runs the standby property over worlds changed by
// variant; it must find a violation of one of want and shrink it to at
// most 20 steps.
func standbyControl(t *testing.T, name string, variant func(*world.Config), want ...string) {
	t.Helper()
	report := failureOf(t, PropertyOf(standbyConfigs(t, variant), nil), 10)
	if report == "" {
		t.Fatalf("%s: no violation found in 10 tries; the standby property cannot fail", name)
	}
	last := lastFailure(report)
	found := false
	for _, w := range want {
		found = found || strings.HasPrefix(last, w)
	}
	if !found {
		t.Fatalf("%s: found a violation, but not of %v:\n%s", name, want, report)
	}
	if steps := shrunkSteps(report); steps == 0 || steps > 20 {
		t.Fatalf("%s: the minimal trace has %d steps; want it shrunk to at most 20:\n%s", name, steps, report)
	}
	t.Logf("%s: caught and shrunk to %d steps:\n%s", name, shrunkSteps(report), last)
}

// The negative controls of standby replicas, each a broken replica:
//
//   - one that loses records (hands its engine every other snapshot it
//     reads, with the checkpoints of all): a promotion's delta leaves a
//     stale state (9, or 3 and 1 once it is folded on);
//   - one that drops the store's checkpoints: its copy is never vouched
//     for, and its promotions read in full (11);
//   - one that reads read_uncommitted: it takes in an open or aborted
//     transaction's snapshot (4).
func TestBrokenStandbyReplicasAreCaught(t *testing.T) {
	t.Run("replica skips records", func(t *testing.T) {
		standbyControl(t, "replica skips records", func(c *world.Config) { c.StandbySkipsRecords = true },
			"invariant 9 ", "invariant 3 ", "invariant 1 ")
	})
	t.Run("replica's checkpoints dropped", func(t *testing.T) {
		standbyControl(t, "replica's checkpoints dropped", func(c *world.Config) { c.StandbyCheckpointsDropped = true }, "invariant 11 ")
	})
	t.Run("replica reads uncommitted", func(t *testing.T) {
		standbyControl(t, "replica reads uncommitted", func(c *world.Config) { c.FollowUncommitted = true }, "invariant 4 ")
	})
}
