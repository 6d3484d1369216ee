package props

import (
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/internal/world/kfakeworld"
	"github.com/snapfence/snapfence/store"
)

// timerConfigs are the worlds with timers (world.Config.Timers): each
// protocol, at least once with outputs in flight, exactly once, and with
// warm restarts; variant (if set) changes each.
func timerConfigs(t *testing.T, variant func(*world.Config)) []world.Config {
	base := cacheBase(t)
	var out []world.Config
	for _, p := range protocols {
		for _, cfg := range []world.Config{
			{Mode: store.Transactional, Protocol: p, Timers: true, PipelinedEmits: true},
			{Mode: store.Transactional, Protocol: p, Timers: true, ExactlyOnce: true},
			{Mode: store.Transactional, Protocol: p, Timers: true, WarmRestarts: true, CacheDir: base},
		} {
			if variant != nil {
				variant(&cfg)
			}
			out = append(out, cfg)
		}
	}
	return out
}

// Timers hold: events that set timers for their keys, among crashes,
// rebalances, warm restarts, pauses and fences, break no invariant, and
// at quiescence each timer set since its key was last closed has fired
// exactly once in the key's committed state (invariant 10). Every
// scenario draws its world among timerConfigs: -rapid.checks scenarios in
// all.
func TestTimersHoldEveryInvariant(t *testing.T) {
	var stats Stats
	start := time.Now()
	rapid.Check(t, PropertyOf(timerConfigs(t, nil), &stats))
	t.Logf("%d scenarios in %s (%.0f a minute), %d timer firings committed; steps: %s", stats.Scenarios, time.Since(start).Round(time.Millisecond),
		float64(stats.Scenarios)/time.Since(start).Minutes(), stats.TimerFirings, stats.Coverage())
	if !t.Failed() && stats.TimerFirings == 0 {
		t.Fatalf("no timer fired in %d scenarios", stats.Scenarios)
	}
}

// The negative control of timers: a design that persists a firing's
// effect but not the timer's removal brings the timer back with the next
// recovery, and it fires again; the generator finds it (invariant 10) and
// shrinks the scenario.
func TestTimerRemovalsLostAreCaught(t *testing.T) {
	report := failureOf(t, PropertyOf(timerConfigs(t, func(c *world.Config) { c.TimerRemovalsLost = true }), nil), 10)
	if report == "" {
		t.Fatal("timer removals lost: no violation found in 10 tries; the timer property cannot fail")
	}
	last := lastFailure(report)
	if !strings.HasPrefix(last, "invariant 10 ") {
		t.Fatalf("timer removals lost: found a violation, but not of 10:\n%s", report)
	}
	if steps := shrunkSteps(report); steps == 0 || steps > 20 {
		t.Fatalf("timer removals lost: the minimal trace has %d steps; want it shrunk to at most 20:\n%s", steps, report)
	}
	t.Logf("timer removals lost: caught and shrunk to %d steps:\n%s", shrunkSteps(report), last)
}

// Timers hold on the kfake world too (real franz-go clients and
// store/kafka against kfake, the records' timestamps the producer's):
// kfakeScenarios random scenarios per protocol.
func TestKfakeTimersHoldEveryInvariant(t *testing.T) {
	kfakeHoldsEveryInvariant(t, kfakeworld.Config{Mode: store.Transactional, Timers: true}, kfakeScenarios)
}
