package props

import (
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
)

// Exactly-once outputs hold: with world.Config.ExactlyOnce no random
// scenario (crashes with transactions open, stale owners woken from
// pauses and evictions, foreign open transactions, persists, rebalances)
// violates any invariant, 8 included: a read_committed reader of the
// output topic sees every input event's output exactly once. Under each
// group protocol, -rapid.checks scenarios (3000 in make test).
func TestExactlyOnceHoldsEveryInvariant(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			var stats Stats
			start := time.Now()
			rapid.Check(t, Property(world.Config{Mode: store.Transactional, Protocol: p, ExactlyOnce: true}, &stats))
			t.Logf("%d scenarios in %s (%.0f a minute); steps: %s", stats.Scenarios, time.Since(start).Round(time.Millisecond),
				float64(stats.Scenarios)/time.Since(start).Minutes(), stats.Coverage())
		})
	}
}

// The negative control of exactly-once outputs: with the outputs produced
// at least once (a plain producer in Emit) the same generator finds
// duplicated outputs (invariant 8), and shrinks the scenario. (Under
// classic eager only: each protocol finds them in a few seconds, and make
// test's budget is the exactly-once property's.)
func TestAtLeastOnceOutputsAreCaughtDuplicating(t *testing.T) {
	for _, p := range protocols[:1] {
		t.Run(p.String(), func(t *testing.T) {
			report := failureOf(t, Property(world.Config{Mode: store.Transactional, Protocol: p, ProduceOutputs: true}, nil), 10)
			if report == "" {
				t.Fatal("at-least-once outputs: no violation found in 10 tries; the exactly-once property cannot fail")
			}
			last := lastFailure(report)
			if !strings.HasPrefix(last, "invariant 8 ") || !strings.Contains(last, "duplicated-output") {
				t.Fatalf("at-least-once outputs: found a violation, but not a duplicated output (8):\n%s", report)
			}
			steps := shrunkSteps(report)
			if steps == 0 || steps > 20 {
				t.Fatalf("the minimal trace has %d steps; want it shrunk to at most 20:\n%s", steps, report)
			}
			t.Logf("caught and shrunk to %d steps:\n%s", steps, last)
		})
	}
}
