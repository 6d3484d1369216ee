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
// prints the seed and the trace, which replay (up to the scheduling of the
// clients' goroutines, which synctest does not fix).
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
				synctest.Test(t, func(t *testing.T) {
					if vs := kfakeworld.Run(cfg, steps); len(vs) > 0 {
						t.Fatalf("scenario %d: %s\n%d steps:\n%s", seed, vs[0], len(steps), world.Trace(steps))
					}
				})
			}
			t.Logf("%d scenarios in %s", scenarios, time.Since(start).Round(time.Millisecond))
		})
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
		var vs []world.Violation
		synctest.Test(t, func(t *testing.T) { vs = kfakeworld.Run(cfg, steps) })
		for _, v := range vs {
			if v.Invariant == 8 && strings.Contains(v.Detail, "duplicated-output") {
				t.Logf("caught in scenario %d: %s\n%d steps:\n%s", seed, v, len(steps), world.Trace(steps))
				return
			}
		}
	}
	t.Fatalf("at-least-once outputs: no duplicate in %d scenarios; the exactly-once property cannot fail", kfakeExactlyOnceScenarios)
}
