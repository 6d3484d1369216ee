package props

import (
	"flag"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

var (
	catchTrials = flag.Int("catch.trials", 3, "TestScenariosToCatchEachControl: independent searches per negative control")
	catchSteps  = flag.Int("catch.steps", 30, "TestScenariosToCatchEachControl: steps per random scenario (simulate -explore's default)")
	catchSingle = flag.Bool("catch.single-steps", false, "TestScenariosToCatchEachControl: draw single steps only (StepGen), not ChunkGen's macros: the baseline, which does not catch every control")
)

// catchCap is how many scenarios a search draws at most: a control not
// caught by then fails the test.
const catchCap = 2000

// negativeControl is a broken variant of the engine or store, and the
// invariants its breakage violates.
type negativeControl struct {
	name string
	cfg  world.Config
	want []int // any of these invariants
}

// negativeControls are the broken variants every search of random
// scenarios must catch.
var negativeControls = []negativeControl{
	{"plain mode (no fence)", world.Config{Mode: store.Plain}, []int{1, 3}},
	// The spec: a generation captured at assignment goes stale when a
	// rebalance keeps the member's partitions (cooperative), and the
	// still-valid owner is fenced for good: a livelock.
	{"identity cached at assignment", world.Config{Mode: store.Transactional, CachedIdentity: true, Protocol: sim.ClassicCooperative}, []int{1, 3, 6}},
	{"recovery bounded by the LSO", world.Config{Mode: store.Transactional, LSOBoundRecovery: true}, []int{5}},
	// With writes in flight: a commit that does not wait for the
	// snapshot writes started before it.
	{"commits ahead of the writes in flight", world.Config{Mode: store.Transactional, WriteLatency: 3 * time.Second, CommitAheadOfWrites: true}, []int{2}},
	// With outputs in flight: an emit acked before its outputs are
	// delivered, so that writes and commits pass them.
	{"outputs acked before they are delivered", world.Config{Mode: store.Transactional, PipelinedEmits: true, EmitsAckedEarly: true}, []int{7}},
}

// macroControls are broken variants of what only ChunkGen's macros
// draw (queries, the view of the snapshot topic): the random searches
// must catch them, the single-step properties cannot
// (TestNegativeControls).
var macroControls = []negativeControl{
	// A lookup that answers the fold's memory for a committed read.
	{"committed reads answered from the fold's memory", world.Config{Mode: store.Transactional, QueriesReadLatest: true}, []int{4}},
	// Another service's view of the snapshot topic that reads
	// read_uncommitted.
	{"a view that reads uncommitted", world.Config{Mode: store.Transactional, FollowUncommitted: true}, []int{4}},
}

// scenariosToCatch draws random scenarios of steps steps for c's world,
// seeds from first upward, as simulate -explore does, and returns how
// many it ran up to and including the first with a violation of one of
// c's invariants (0: none in catchCap), and how many of them had a
// fenced call.
func scenariosToCatch(t *testing.T, c negativeControl, first, steps int) (n, fenced int) {
	gen := ScenarioGen(c.cfg.WithDefaults(), steps)
	if *catchSingle {
		gen = rapid.SliceOfN(StepGen(c.cfg.WithDefaults()), steps, steps)
	}
	for i := range catchCap {
		seed := first + i
		vs, f := runSeeded(t, c.cfg, seed, gen.Example(seed))
		if f {
			fenced++
		}
		for _, v := range vs {
			if slices.Contains(c.want, v.Invariant) {
				return i + 1, fenced
			}
		}
	}
	return 0, fenced
}

// Every negative control is caught by random scenarios within catchCap,
// in each of catch.trials independent searches; the mean number of
// scenarios a search ran is reported (docs/testing.md, "Scenarios to
// catch a broken variant", from -catch.trials 60).
func TestScenariosToCatchEachControl(t *testing.T) {
	for _, c := range slices.Concat(negativeControls, macroControls) {
		t.Run(c.name, func(t *testing.T) {
			total, fenced := 0, 0
			for trial := range *catchTrials {
				n, f := scenariosToCatch(t, c, 1+trial*100_003, *catchSteps)
				if n == 0 {
					t.Fatalf("%s: not caught in %d random scenarios (search %d)", c.name, catchCap, trial)
				}
				total += n
				fenced += f
			}
			t.Logf("%s: caught after %.1f scenarios on average (%d searches); %.0f%% of the scenarios run had a fenced call",
				c.name, float64(total)/float64(*catchTrials), *catchTrials, 100*float64(fenced)/float64(total))
		})
	}
}

// Most random scenarios of simulate -explore's length reach the fence:
// on the correct engine, under each protocol, more than half of them
// have a fenced call. (Seeds 1 to 300: the sim is deterministic, so the
// share is the same on every run. With -catch.single-steps it reports
// the baseline, and fails.)
func TestMostScenariosReachTheFence(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			cfg := world.Config{Mode: store.Transactional, Protocol: p}
			gen := ScenarioGen(cfg.WithDefaults(), *catchSteps)
			if *catchSingle {
				gen = rapid.SliceOfN(StepGen(cfg.WithDefaults()), *catchSteps, *catchSteps)
			}
			const scenarios = 300
			fenced := 0
			for seed := 1; seed <= scenarios; seed++ {
				if _, f := runSeeded(t, cfg, seed, gen.Example(seed)); f {
					fenced++
				}
			}
			t.Logf("%s: %d of %d scenarios had a fenced call", p, fenced, scenarios)
			if 2*fenced <= scenarios {
				t.Errorf("%s: %d of %d random scenarios had a fenced call; most must", p, fenced, scenarios)
			}
		})
	}
}

// runSeeded runs steps to quiescence in a world of cfg with seed, and
// returns the violations and whether a call was fenced.
func runSeeded(t *testing.T, cfg world.Config, seed int, steps []world.Step) ([]world.Violation, bool) {
	t.Helper()
	cfg.Seed = uint64(seed)
	w, err := world.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	vs := world.RunSteps(w, steps)
	return vs, world.Fences(w.Recorder().Ops()) != ""
}
