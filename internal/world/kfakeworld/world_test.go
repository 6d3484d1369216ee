package kfakeworld

import (
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

func runAll(t *testing.T, cfg Config, steps []world.Step) (vs []world.Violation) {
	t.Helper()
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, s := range steps {
		vs = append(vs, w.Apply(s)...)
	}
	return append(vs, w.Quiesce()...)
}

func TestIssue732OnKfake(t *testing.T) {
	t.Run("transactional", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			for _, v := range runAll(t, Config{Mode: store.Transactional}, world.Scenario732) {
				t.Errorf("%s", v)
			}
		})
	})
	t.Run("plain", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			vs := runAll(t, Config{Mode: store.Plain}, world.Scenario732)
			found := map[int]bool{}
			for _, v := range vs {
				t.Logf("%s", v)
				found[v.Invariant] = true
			}
			if !found[1] || !found[3] {
				t.Fatalf("plain mode: want the stale overwrite (1) and a wrong final state (3), got %v", vs)
			}
		})
	})
}

// A few random scenarios under each protocol, for the race detector: the
// world's goroutines (member steps, background shutdowns, the clients').
// props/kfake_test.go runs more.
func TestRandomScenariosOnKfake(t *testing.T) {
	for _, p := range []sim.Protocol{sim.ClassicEager, sim.ClassicCooperative, sim.Consumer} {
		t.Run(p.String(), func(t *testing.T) {
			cfg := Config{Mode: store.Transactional, Protocol: p}
			gen := rapid.SliceOfN(stepGen(cfg.StepConfig()), 10, 40)
			for seed := range 3 {
				steps := gen.Example(seed)
				synctest.Test(t, func(t *testing.T) {
					if vs := Run(cfg, steps); len(vs) > 0 {
						t.Fatalf("seed %d: %s\n%s", seed, vs[0], world.Trace(steps))
					}
				})
			}
		})
	}
}

// stepGen draws steps of every kind (props.StepGen's, which this package
// cannot import: props imports the worlds).
func stepGen(cfg world.Config) *rapid.Generator[world.Step] {
	kinds := []world.Kind{world.Produce, world.Produce, world.Advance, world.Flush, world.Join, world.Leave, world.Pause,
		world.Resume, world.Evict, world.Crash, world.ForeignOpen, world.ForeignEnd, world.Poll, world.Poll, world.Poll}
	durations := []time.Duration{time.Second, 3 * time.Second, 6 * time.Second, 11 * time.Second, 31 * time.Second, 61 * time.Second}
	return rapid.Custom(func(t *rapid.T) world.Step {
		s := world.Step{Kind: rapid.SampledFrom(kinds).Draw(t, "kind")}
		switch s.Kind {
		case world.Produce:
			s.Key = rapid.SampledFrom([]string{"a", "b", "c", "d", "e"}).Draw(t, "key")
			s.Delta = rapid.IntRange(-3, 12).Draw(t, "delta")
		case world.Advance:
			s.D = rapid.SampledFrom(durations).Draw(t, "d")
		case world.ForeignOpen:
			s.Partition = rapid.IntRange(0, cfg.Partitions-1).Draw(t, "partition")
			s.Hang = rapid.Bool().Draw(t, "hang")
		case world.ForeignEnd:
			s.Commit = rapid.Bool().Draw(t, "commit")
		default:
			s.Member = rapid.IntRange(0, cfg.Members-1).Draw(t, "member")
		}
		return s
	})
}
