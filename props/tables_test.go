package props

import (
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
)

// tableConfigs are the worlds with a lookup table (world.Config.Tables):
// each protocol, at least once and exactly once; variant (if set)
// changes each.
func tableConfigs(variant func(*world.Config)) []world.Config {
	var out []world.Config
	for _, eos := range []bool{false, true} {
		for _, p := range protocols {
			cfg := world.Config{Mode: store.Transactional, Protocol: p, ExactlyOnce: eos, Tables: true}
			if variant != nil {
				variant(&cfg)
			}
			out = append(out, cfg)
		}
	}
	return out
}

// Lookup tables hold: the world writes, overwrites and deletes the
// table's rows (some in transactions left open, committed, aborted or
// timed out), the members' views read at their own pace, and the folds
// look their keys up. No random scenario violates any invariant, 12
// included: every lookup returns a committed row, no older than the
// table had when the view opened (a partition waits for its tables) nor
// than an earlier lookup of the process returned. Every scenario draws
// its world among tableConfigs: -rapid.checks scenarios in all. Not
// vacuous: it fails unless partitions waited for their table, and
// lookups returned rows older than the newest (the docs allow it; the
// property must not assert more).
func TestLookupTablesHoldEveryInvariant(t *testing.T) {
	var stats Stats
	start := time.Now()
	rapid.Check(t, PropertyOf(tableConfigs(nil), &stats))
	ts := stats.Tables
	t.Logf("%d scenarios in %s (%.0f a minute); steps: %s", stats.Scenarios, time.Since(start).Round(time.Millisecond),
		float64(stats.Scenarios)/time.Since(start).Minutes(), stats.Coverage())
	t.Logf("%d lookups; %d partition starts waited for the table; %d lookups returned a row older than the newest committed, %d older than the one committed before their input record was produced",
		ts.Lookups, ts.Waits, ts.Stale, ts.OlderThanInput)
	if !t.Failed() && (ts.Lookups == 0 || ts.Waits == 0 || ts.Stale == 0) {
		t.Fatalf("vacuous: %d lookups, %d waits, %d stale lookups in %d scenarios", ts.Lookups, ts.Waits, ts.Stale, stats.Scenarios)
	}
}

// The negative controls of lookup tables, each a broken design that
// invariant 12 must catch and rapid shrink to at most 20 steps: an engine
// that folds without waiting for its tables (a fold sees a row older than
// the table had when the view opened), and views that read
// read_uncommitted (a fold sees a row of an open or aborted transaction).
func TestBrokenLookupTablesAreCaught(t *testing.T) {
	for _, c := range []struct {
		name    string
		variant func(*world.Config)
	}{
		{"tables not awaited", func(c *world.Config) { c.TablesNotAwaited = true }},
		{"views read uncommitted", func(c *world.Config) { c.FollowUncommitted = true }},
	} {
		t.Run(c.name, func(t *testing.T) {
			report := failureOf(t, PropertyOf(tableConfigs(c.variant), nil), 10)
			if report == "" {
				t.Fatalf("%s: no violation found in 10 tries; the table property cannot fail", c.name)
			}
			last := lastFailure(report)
			if !strings.HasPrefix(last, "invariant 12 ") {
				t.Fatalf("%s: found a violation, but not of 12:\n%s", c.name, report)
			}
			if steps := shrunkSteps(report); steps == 0 || steps > 20 {
				t.Fatalf("%s: the minimal trace has %d steps; want it shrunk to at most 20:\n%s", c.name, steps, report)
			}
			t.Logf("%s: caught and shrunk to %d steps:\n%s", c.name, shrunkSteps(report), last)
		})
	}
}
