package main

import (
	"encoding/json"
	"flag"
	"os"
	"testing"
	"testing/synctest"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/internal/world/kfakeworld"
	"github.com/snapfence/snapfence/store"
)

var (
	bridgeSpecFile = flag.String("simulate.spec", "", "TestKfakeWorld: the scenario to run (a bridgeSpec as JSON), written by `simulate -world kfake`")
	bridgeOutFile  = flag.String("simulate.out", "", "TestKfakeWorld: where to write the world's history (a bridgeResult as JSON)")
)

// TestKfakeWorld runs a scenario on kfake in virtual time and checks its
// expectations. It is how `simulate -world kfake` runs the kfake world
// (a synctest bubble needs a test binary): the command hands it a
// scenario with -simulate.spec and reads the history from -simulate.out.
// Without them it runs kafka-flow#732 in both modes, and -outputs
// compare's scenario with at-least-once outputs (the negative control
// must bite: duplicates) and exactly-once outputs (none).
func TestKfakeWorld(t *testing.T) {
	specs := []bridgeSpec{{Name: defaultScenario, Mode: "plain"}, {Name: defaultScenario, Mode: "transactional"},
		{Steps: world.CrashAndStaleOwner, Mode: "transactional", Outputs: outputsAtLeastOnce},
		{Steps: world.CrashAndStaleOwner, Mode: "transactional", Outputs: outputsExactlyOnce}}
	if *bridgeSpecFile != "" {
		raw, err := os.ReadFile(*bridgeSpecFile)
		if err != nil {
			t.Fatal(err)
		}
		var spec bridgeSpec
		if err := json.Unmarshal(raw, &spec); err != nil {
			t.Fatal(err)
		}
		specs = []bridgeSpec{spec}
	}
	for _, spec := range specs {
		name := spec.Mode
		if spec.Outputs != "" {
			name += "/" + spec.Outputs
		}
		t.Run(name, func(t *testing.T) {
			s := world.Scenario{Steps: spec.Steps, Transactional: []world.Expectation{world.HoldsAll()}}
			if spec.Name != "" {
				var ok bool
				if s, ok = world.ScenarioNamed(spec.Name); !ok {
					t.Fatalf("no scenario %q", spec.Name)
				}
			}
			protocol, err := parseProtocol(spec.Protocol)
			if err != nil {
				t.Fatal(err)
			}
			if protocol != 0 {
				s.Protocol = protocol
			}
			mode := store.Transactional
			if spec.Mode == "plain" {
				mode = store.Plain
			}
			cfg := kfakeworld.Config{Mode: mode, Protocol: s.Protocol}
			cfg.ExactlyOnce, cfg.ProduceOutputs = outputFlags(spec.Outputs)
			res := runKfakeWorld(t, cfg, s.Steps)
			if *bridgeOutFile != "" {
				raw, _ := json.Marshal(res)
				if err := os.WriteFile(*bridgeOutFile, raw, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			r := finish(s, mode, spec.Outputs, res.Members, res.Partitions, res.Ops, res.Violations)
			for _, v := range r.Expectations {
				if !v.Met {
					t.Errorf("%s mode: %s: %s", spec.Mode, v.Says, v.Why)
				}
			}
		})
	}
}

// runKfakeWorld runs steps on a kfake world of cfg in a synctest bubble
// of t and returns what it left.
func runKfakeWorld(t *testing.T, cfg kfakeworld.Config, steps []world.Step) bridgeResult {
	t.Helper()
	var res bridgeResult
	synctest.Test(t, func(t *testing.T) {
		w, err := kfakeworld.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		res.Violations = world.ApplyAll(w, steps)
		res.Members, res.Partitions = w.Config().StepConfig().Members, kfakeworld.Partitions
		res.Ops = w.History().Ops()
	})
	return res
}
