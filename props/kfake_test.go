package props

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/internal/world/kfakeworld"
	"github.com/snapfence/snapfence/store"
)

// kfakeScenarios is how many random scenarios TestKfakeWorldHoldsEveryInvariant
// runs per protocol on the kfake world (~25 ms each on one core).
const kfakeScenarios = 100

// The fence holds on the kfake world too: real franz-go clients and
// store/kafka against kfake, in a synctest bubble per scenario. The
// scenarios are drawn with StepGen, by rapid's Example with the scenario's
// number as its seed, not by rapid.Check: rapid's shrink deadline (30 s)
// runs on the clock of the bubble it is called in, which the minutes of
// virtual time of one scenario exhaust at once, and this package's
// TestMain sets -rapid.checks to 3000 for the simulated cluster. A failure
// is shrunk by world.Shrink, each candidate in a bubble of its own, and
// prints the seed, the minimal trace and the whole one, which replay (up
// to the scheduling of the clients' goroutines, which synctest does not
// fix).
func TestKfakeWorldHoldsEveryInvariant(t *testing.T) {
	kfakeHoldsEveryInvariant(t, kfakeworld.Config{Mode: store.Transactional}, kfakeScenarios)
}

// kfakeHoldsEveryInvariant runs scenarios random scenarios of a kfake world
// of cfg under each protocol, and fails on the first violation.
func kfakeHoldsEveryInvariant(t *testing.T, cfg kfakeworld.Config, scenarios int) {
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			cfg := cfg
			cfg.Protocol = p
			gen := rapid.SliceOfN(StepGen(cfg.StepConfig()), 20, 40)
			start := time.Now()
			for seed := range scenarios {
				steps := gen.Example(seed)
				if vs := runOnKfake(t, cfg, steps); len(vs) > 0 {
					minimal, v := shrinkOnKfake(t, cfg, steps, vs[0])
					t.Fatalf("scenario %d: %s\nminimal trace (%d of %d steps):\n%s\nthe whole scenario:\n%s",
						seed, v, len(minimal), len(steps), world.Trace(minimal), world.Trace(steps))
				}
			}
			t.Logf("%d scenarios in %s", scenarios, time.Since(start).Round(time.Millisecond))
		})
	}
}

// runOnKfake runs steps on a fresh kfake world of cfg in a synctest bubble
// of its own, and returns its violations.
func runOnKfake(t *testing.T, cfg kfakeworld.Config, steps []world.Step) (vs []world.Violation) {
	synctest.Test(t, func(t *testing.T) { vs = kfakeworld.Run(cfg, steps) })
	return vs
}

// shrinkOnKfake shrinks steps, which violated v, to a scenario that
// still violates v's invariant, and returns it with the violation its
// last failing run gave.
func shrinkOnKfake(t *testing.T, cfg kfakeworld.Config, steps []world.Step, v world.Violation) ([]world.Step, world.Violation) {
	last := v
	minimal := world.Shrink(steps, func(s []world.Step) bool {
		for _, got := range runOnKfake(t, cfg, s) {
			if got.Invariant == v.Invariant {
				last = got
				return true
			}
		}
		return false
	})
	return minimal, last
}

// A failure on the kfake world shrinks there as on the sim world:
// kafka-flow#732 in Plain mode loses the steps the stale overwrite does
// not need, and what is left still overwrites.
func TestKfakeWorldFailureShrinks(t *testing.T) {
	cfg := kfakeworld.Config{Mode: store.Plain}
	steps := world.Scenario732
	var stale world.Violation
	for _, v := range runOnKfake(t, cfg, steps) {
		if v.Invariant == 1 {
			stale = v
			break
		}
	}
	if stale.Invariant != 1 {
		t.Fatalf("kafka-flow#732 in Plain mode on kfake: no stale overwrite (invariant 1) to shrink")
	}
	minimal, last := shrinkOnKfake(t, cfg, steps, stale)
	t.Logf("%s\nminimal trace (%d of %d steps):\n%s", last, len(minimal), len(steps), world.Trace(minimal))
	if len(minimal) >= len(steps) || last.Invariant != 1 {
		t.Fatalf("shrunk to %d of %d steps (last violation %s): want fewer steps that still violate invariant 1", len(minimal), len(steps), last)
	}
}

// kafka-flow#732 on the kfake world (internal/world's scenario): Plain
// mode lets the paused member's stale flush land, Transactional fences it.
func TestKfakeWorldPlainReproducesTheCorruption(t *testing.T) {
	run := func(t *testing.T, mode store.Mode) (vs []world.Violation) {
		w, err := kfakeworld.New(kfakeworld.Config{Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		for _, s := range world.Scenario732 {
			vs = append(vs, w.Apply(s)...)
		}
		return append(vs, w.Quiesce()...)
	}
	t.Run("plain", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			vs := run(t, store.Plain)
			found := false
			for _, v := range vs {
				t.Logf("%s", v)
				found = found || v.Invariant == 1 || v.Invariant == 3
			}
			if !found {
				t.Fatalf("plain mode: want the stale overwrite (1) or a wrong final state (3), got %v", vs)
			}
		})
	})
	t.Run("transactional", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			for _, v := range run(t, store.Transactional) {
				t.Errorf("%s", v)
			}
		})
	})
}

// kfakeExactlyOnceScenarios is how many random scenarios
// TestKfakeWorldExactlyOnceHoldsEveryInvariant runs per protocol.
const kfakeExactlyOnceScenarios = 30

// Exactly-once outputs hold on the kfake world too: with ExactlyOnce, no
// random scenario breaks any invariant, 8 included (store/kafka's
// transactions carry the outputs; franz-go's read_committed consumer reads
// them back). Drawn as TestKfakeWorldHoldsEveryInvariant draws them.
func TestKfakeWorldExactlyOnceHoldsEveryInvariant(t *testing.T) {
	kfakeHoldsEveryInvariant(t, kfakeworld.Config{Mode: store.Transactional, ExactlyOnce: true}, kfakeExactlyOnceScenarios)
}

// The negative control on kfake: with at-least-once outputs, some of the
// same scenarios duplicate an output (invariant 8).
func TestKfakeWorldAtLeastOnceOutputsAreCaughtDuplicating(t *testing.T) {
	cfg := kfakeworld.Config{Mode: store.Transactional, ProduceOutputs: true}
	gen := rapid.SliceOfN(StepGen(cfg.StepConfig()), 20, 40)
	for seed := range kfakeExactlyOnceScenarios {
		steps := gen.Example(seed)
		for _, v := range runOnKfake(t, cfg, steps) {
			if v.Invariant == 8 && strings.Contains(v.Detail, "duplicated-output") {
				minimal, last := shrinkOnKfake(t, cfg, steps, v)
				t.Logf("caught in scenario %d: %s\nminimal trace (%d of %d steps):\n%s", seed, last, len(minimal), len(steps), world.Trace(minimal))
				return
			}
		}
	}
	t.Fatalf("at-least-once outputs: no duplicate in %d scenarios; the exactly-once property cannot fail", kfakeExactlyOnceScenarios)
}
