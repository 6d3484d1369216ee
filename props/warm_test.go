package props

import (
	"os"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
)

// warmConfigs are the warm worlds of the property: each protocol, with
// exactly-once outputs off and on, their caches under cacheBase.
func warmConfigs(t *testing.T, variant func(*world.Config)) []world.Config {
	base := cacheBase(t)
	var out []world.Config
	for _, eos := range []bool{false, true} {
		for _, p := range protocols {
			cfg := world.Config{Mode: store.Transactional, Protocol: p, ExactlyOnce: eos, WarmRestarts: true, CacheDir: base}
			if variant != nil {
				variant(&cfg)
			}
			out = append(out, cfg)
		}
	}
	return out
}

// cacheBase is a directory for the warm worlds' caches, removed when t
// ends: in memory (/dev/shm) where the machine has one, as Pebble's
// fsyncs of every cache opened and closed on a disk make a scenario about
// three times slower; else t.TempDir().
func cacheBase(t *testing.T) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "snapfence-props-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// Warm restarts hold: with world.Config.WarmRestarts (each member's cache
// kept across its crashes, leaves and joins, delta recoveries from its
// checkpoint, tombstones expired by compaction past a short
// delete.retention.ms, the snapshot topic recreated from a backup) no
// random scenario violates any invariant, 9 included: after every
// restart the engines' states are the committed snapshots. Every
// scenario draws its world among the three protocols, exactly-once off
// and on: -rapid.checks scenarios in all (3000 in make test).
func TestWarmRestartsHoldEveryInvariant(t *testing.T) {
	var stats Stats
	start := time.Now()
	rapid.Check(t, PropertyOf(warmConfigs(t, nil), &stats))
	t.Logf("%d scenarios in %s (%.0f a minute); steps: %s", stats.Scenarios, time.Since(start).Round(time.Millisecond),
		float64(stats.Scenarios)/time.Since(start).Minutes(), stats.Coverage())
	t.Logf("recoveries: %s", stats.RecoveryCoverage())
}

// The negative control of warm restarts: a design that trusts its cache's
// checkpoint (no check of the topic's id, of its age against
// delete.retention.ms, of the log's ends) brings deleted keys back and
// keeps stale states; the generator finds it (invariant 9, or the
// history's and the exact fold's checks once the stale state is folded
// on), and shrinks the scenario.
func TestTrustedCheckpointsAreCaught(t *testing.T) {
	report := failureOf(t, PropertyOf(warmConfigs(t, func(c *world.Config) { c.TrustCheckpoints = true }), nil), 10)
	if report == "" {
		t.Fatal("trusted checkpoints: no violation found in 10 tries; the warm property cannot fail")
	}
	last := lastFailure(report)
	found := false
	for _, w := range []string{"invariant 9 ", "invariant 3 ", "invariant 1 "} {
		found = found || strings.HasPrefix(last, w)
	}
	if !found {
		t.Fatalf("trusted checkpoints: found a violation, but not of 9, 3 or 1:\n%s", report)
	}
	steps := shrunkSteps(report)
	if steps == 0 || steps > 20 {
		t.Fatalf("the minimal trace has %d steps; want it shrunk to at most 20:\n%s", steps, report)
	}
	t.Logf("caught and shrunk to %d steps:\n%s", steps, last)
}
