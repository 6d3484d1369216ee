package props

import (
	"flag"
	"testing"
	"testing/synctest"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/internal/world/kfakeworld"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// differentialSeeds is how many random scenarios per protocol
// TestSimAndKfakeAgree runs on both worlds.
var differentialSeeds = flag.Int("differential.seeds", 200, "TestSimAndKfakeAgree: random scenarios per protocol")

// differentialSteps is the length of its scenarios.
const differentialSteps = 20

// runLevels is one world's run of a scenario at the compared levels.
type runLevels struct{ outcome, fences, takeovers string }

func levelsOf(ops []history.Op, vs []world.Violation) runLevels {
	return runLevels{world.Outcome(ops, vs), world.Fences(ops), world.Takeovers(ops)}
}

// simLevels runs steps on the simulated cluster (world.ApplyAll).
func simLevels(t *testing.T, cfg world.Config, steps []world.Step) runLevels {
	w, err := world.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	vs := world.ApplyAll(w, steps)
	return levelsOf(w.Recorder().Ops(), vs)
}

// kfakeLevels runs steps as simLevels does, on kfake, in a bubble of its
// own.
func kfakeLevels(t *testing.T, cfg kfakeworld.Config, steps []world.Step) (l runLevels) {
	synctest.Test(t, func(t *testing.T) {
		w, err := kfakeworld.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		vs := world.ApplyAll(w, steps)
		l = levelsOf(w.History().Ops(), vs)
	})
	return l
}

// The simulated cluster and kfake (franz-go's real clients) run the same
// random scenarios to the same outcome: each key's final state, the
// invariants violated and each partition's last acknowledged commit. A
// property test on the sim is a statement about the real client only as
// far as this holds. The fence and takeover levels, where the two models
// of the group still differ (the sim's member joins at its first poll,
// franz-go's when its client starts; kfake moves its groups only while
// time does), are measured and reported, not asserted: docs/testing.md,
// "The worlds compared", has the table.
func TestSimAndKfakeAgree(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			kcfg := kfakeworld.Config{Mode: store.Transactional, Protocol: p}
			gen := rapid.SliceOfN(StepGen(kcfg.StepConfig()), differentialSteps, differentialSteps)
			var outcomes, fences, takeovers, fenced, kfakeFences, kfakeTakeovers int
			for seed := range *differentialSeeds {
				steps := gen.Example(seed)
				s := simLevels(t, world.Config{Seed: uint64(seed), Mode: store.Transactional, Protocol: p}, steps)
				k := kfakeLevels(t, kcfg, steps)
				// kfake against itself: the noise of its clients'
				// scheduling, which synctest does not fix.
				if again := kfakeLevels(t, kcfg, steps); again.fences == k.fences {
					kfakeFences++
					if again.takeovers == k.takeovers {
						kfakeTakeovers++
					}
				}
				if s.outcome != k.outcome {
					t.Errorf("scenario %d: the outcomes differ\nsim:\n%skfake:\n%ssteps:\n%s", seed, s.outcome, k.outcome, world.Trace(steps))
				} else {
					outcomes++
				}
				if s.fences == k.fences {
					fences++
				}
				if s.fences == k.fences && s.takeovers == k.takeovers {
					takeovers++
				}
				if k.fences != "" {
					fenced++
				}
			}
			n := *differentialSeeds
			t.Logf("%s: %d scenarios of %d steps: sim~kfake outcome %d/%d, fences %d/%d, takeovers %d/%d; kfake~kfake fences %d/%d, takeovers %d/%d; %d with a fenced call on kfake",
				p, n, differentialSteps, outcomes, n, fences, n, takeovers, n, kfakeFences, n, kfakeTakeovers, n, fenced)
		})
	}
}

// A negative control of the comparison: the same steps on two
// configurations that must differ in outcome (Plain and Transactional
// modes on kafka-flow#732) do differ, so agreement is not an artefact of
// levels that say nothing.
func TestDifferentialCatchesADifference(t *testing.T) {
	plain := simLevels(t, world.Config{Mode: store.Plain, Protocol: sim.ClassicEager}, world.Scenario732)
	fenced := simLevels(t, world.Config{Mode: store.Transactional, Protocol: sim.ClassicEager}, world.Scenario732)
	if plain.outcome == fenced.outcome {
		t.Fatalf("Plain and Transactional kafka-flow#732 have one outcome:\n%s", plain.outcome)
	}
	if plain.fences == fenced.fences {
		t.Fatalf("Plain and Transactional kafka-flow#732 have the same fences:\n%s", plain.fences)
	}
	t.Logf("plain:\n%stransactional:\n%s", plain.outcome, fenced.outcome)
}
