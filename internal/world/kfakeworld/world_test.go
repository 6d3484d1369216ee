package kfakeworld

import (
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

func runAll(t *testing.T, cfg Config, steps []world.Step) (vs []world.Violation, ops []history.Op) {
	t.Helper()
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, s := range steps {
		vs = append(vs, w.Apply(s)...)
	}
	vs = append(vs, w.Quiesce()...)
	return vs, w.History().Ops()
}

func TestIssue732OnKfake(t *testing.T) {
	t.Run("transactional", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			vs, _ := runAll(t, Config{Mode: store.Transactional}, world.Scenario732)
			for _, v := range vs {
				t.Errorf("%s", v)
			}
		})
	})
	t.Run("plain", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			vs, ops := runAll(t, Config{Mode: store.Plain}, world.Scenario732)
			found := map[int]bool{}
			for _, v := range vs {
				t.Logf("%s", v)
				found[v.Invariant] = true
			}
			if !found[1] || !found[3] {
				t.Fatalf("plain mode: want the stale overwrite (1) and a wrong final state (3), got %v", vs)
			}
			// The history shows it too: the stale write acknowledged after
			// the newer one, the next read missing the newer one, and the
			// final state missing the events it folded.
			anomalies := map[history.AnomalyKind]bool{}
			for _, a := range history.Check(ops) {
				anomalies[a.Kind] = true
			}
			for _, k := range []history.AnomalyKind{history.Regression, history.LostWrite, history.LostFold} {
				if !anomalies[k] {
					t.Errorf("plain mode: the history shows no %s, got %v", k, history.Check(ops))
				}
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
		world.Resume, world.Evict, world.Crash, world.ForeignOpen, world.ForeignEnd, world.Truncate, world.Poll, world.Poll, world.Poll}
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
		case world.Truncate:
			s.Partition = rapid.IntRange(0, cfg.Partitions-1).Draw(t, "partition")
		case world.ForeignEnd:
			s.Commit = rapid.Bool().Draw(t, "commit")
		default:
			s.Member = rapid.IntRange(0, cfg.Members-1).Draw(t, "member")
		}
		return s
	})
}
