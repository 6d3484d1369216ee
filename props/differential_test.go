package props

import (
	"flag"
	"fmt"
	"slices"
	"strings"
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
// TestSimAndKfakeAgree runs on both worlds, of single steps and of
// macros each.
var differentialSeeds = flag.Int("differential.seeds", 200, "TestSimAndKfakeAgree: random scenarios per protocol, of single steps")
var differentialMacroSeeds = flag.Int("differential.macro-seeds", 100, "TestSimAndKfakeAgree: random scenarios per protocol, of macros")

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
// far as this holds. The scenarios are of single steps (StepGen), which
// rarely reach the fence, and of macros (ChunkGen), which mostly do; a
// macro's poll-first is a poll on kfake, which cannot make that race;
// its view reads run on both, each held to invariant 4.
//
// Under the classic eager and the consumer protocol the fences agree
// too: which call of which member was fenced at which step, and with
// which error code, kfake's PRODUCER_FENCED on the data path read as the
// INVALID_PRODUCER_EPOCH Kafka answers (world.KafkaCodes). A scenario whose
// fences kfake does not repeat on a rerun is not held to it. Under
// classic cooperative the sim's second round after a revoke still runs
// later than franz-go's, so a commit in flight across it is fenced on
// kfake and not on the sim: that level is reported, as are the
// takeovers (docs/testing.md, "The worlds compared").
func TestSimAndKfakeAgree(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			kcfg := kfakeworld.Config{Mode: store.Transactional, Protocol: p}
			single := rapid.SliceOfN(StepGen(kcfg.StepConfig()), differentialSteps, differentialSteps)
			simCfg := world.Config{Mode: store.Transactional, Protocol: p}
			for _, e := range compareWorlds(t, simCfg, "single steps", *differentialSeeds, func(seed int) []world.Step { return single.Example(seed) }) {
				t.Error(e)
			}
			for _, e := range compareWorlds(t, simCfg, "macros", *differentialMacroSeeds, macroScenario(kcfg)) {
				t.Error(e)
			}
		})
	}
}

// macroScenario draws the macro scenarios of the comparison: a
// poll-first is a poll (kfake cannot make that race).
func macroScenario(kcfg kfakeworld.Config) func(seed int) []world.Step {
	macros := ScenarioGen(kcfg.StepConfig(), differentialSteps)
	return func(seed int) []world.Step {
		steps := macros.Example(seed)
		for i := range steps {
			if steps[i].Kind == world.PollFirst {
				steps[i].Kind = world.Poll
			}
		}
		return steps
	}
}

// The comparison's fence level can fail: a sim without the fence (Plain
// mode) is not fenced where kfake's transactional engine is.
func TestFenceComparisonCatchesABrokenSim(t *testing.T) {
	p := sim.Consumer
	kcfg := kfakeworld.Config{Mode: store.Transactional, Protocol: p}
	broken := world.Config{Mode: store.Plain, Protocol: p}
	errs := slices.DeleteFunc(compareWorlds(t, broken, "macros", 40, macroScenario(kcfg)),
		func(e string) bool { return !strings.Contains(e, "the fences differ") })
	if len(errs) == 0 {
		t.Fatal("a sim in Plain mode agreed with kfake on the fences of 40 macro scenarios")
	}
	t.Logf("%d of 40 macro scenarios differ at the fence level; the first:\n%s", len(errs), errs[0])
}

// pausedAtQuiesce are the slots of the members a scenario leaves paused:
// the quiesce wakes them.
func pausedAtQuiesce(steps []world.Step) map[int]bool {
	paused := map[int]bool{}
	for _, s := range steps {
		switch s.Kind {
		case world.Pause:
			paused[s.Member] = true
		case world.Resume, world.Crash, world.Leave, world.Evict:
			delete(paused, s.Member)
		}
	}
	return paused
}

// racedNews is fences without the quiesce's fences of the members it
// woke: whether a woken member's first write or the news of its eviction
// comes first is a race, which the sim gives to the write and kfake to
// the news (poll-first is the step that makes it a scenario's choice).
func racedNews(fences string, woken map[int]bool) string {
	var kept []string
	for _, line := range strings.SplitAfter(fences, "\n") {
		var member int
		if _, err := fmt.Sscanf(line, "step 000 m%d ", &member); err == nil && woken[member] {
			continue
		}
		kept = append(kept, line)
	}
	return strings.Join(kept, "")
}

// compareWorlds runs n scenarios, seeds 0 to n-1, on the sim of simCfg
// and on kfake (twice, Transactional, simCfg's protocol), logs the
// levels, and returns the disagreements asserted: of outcome, and of
// fences except under classic cooperative.
func compareWorlds(t *testing.T, simCfg world.Config, kind string, n int, scenario func(seed int) []world.Step) []string {
	t.Helper()
	p := simCfg.Protocol
	kcfg := kfakeworld.Config{Mode: store.Transactional, Protocol: p}
	var errs []string
	var outcomes, fences, takeovers, fenced, kfakeFences, kfakeTakeovers int
	for seed := range n {
		steps := scenario(seed)
		cfg := simCfg
		cfg.Seed = uint64(seed)
		s := simLevels(t, cfg, steps)
		k := kfakeLevels(t, kcfg, steps)
		// kfake against itself: the noise of its clients' scheduling,
		// which synctest does not fix.
		again := kfakeLevels(t, kcfg, steps)
		if again.fences == k.fences {
			kfakeFences++
			if again.takeovers == k.takeovers {
				kfakeTakeovers++
			}
		}
		if s.outcome != k.outcome {
			errs = append(errs, fmt.Sprintf("%s, scenario %d: the outcomes differ\nsim:\n%skfake:\n%ssteps:\n%s", kind, seed, s.outcome, k.outcome, world.Trace(steps)))
		} else {
			outcomes++
		}
		woken := pausedAtQuiesce(steps)
		agree := world.KafkaCodes(s.fences) == world.KafkaCodes(k.fences) ||
			(len(woken) > 0 && racedNews(s.fences, woken) == racedNews(world.KafkaCodes(k.fences), woken))
		if agree {
			fences++
		} else if p != sim.ClassicCooperative && again.fences == k.fences {
			errs = append(errs, fmt.Sprintf("%s, scenario %d: the fences differ\nsim:\n%skfake:\n%ssteps:\n%s", kind, seed, s.fences, k.fences, world.Trace(steps)))
		}
		if agree && s.takeovers == k.takeovers {
			takeovers++
		}
		if k.fences != "" {
			fenced++
		}
	}
	t.Logf("%s, %d scenarios of %d %s: sim~kfake outcome %d/%d, fences %d/%d, takeovers %d/%d; kfake~kfake fences %d/%d, takeovers %d/%d; %d with a fenced call on kfake",
		p, n, differentialSteps, kind, outcomes, n, fences, n, takeovers, n, kfakeFences, n, kfakeTakeovers, n, fenced)
	return errs
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
