package kfakeworld

import (
	"testing"
	"testing/synctest"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/props"
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
			gen := rapid.SliceOfN(props.StepGen(cfg.StepConfig()), 10, 40)
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
