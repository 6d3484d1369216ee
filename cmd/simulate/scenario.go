package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/props"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// defaultScenario is what runs with no arguments: kafka-flow#732.
const defaultScenario = "stale-flush-on-revoke"

// scenarioFor is the scenario the options ask for: a named one (the
// default without arguments), a random one (-steps), or replayed steps
// (-replay). A random or replayed scenario expects every invariant to
// hold in Transactional mode and nothing of Plain mode.
func scenarioFor(o options) (world.Scenario, error) {
	protocol, _ := parseProtocol(o.protocol)
	switch {
	case o.steps > 0:
		cfg := world.Config{Mode: store.Transactional}.WithDefaults()
		steps := rapid.SliceOfN(props.StepGen(cfg), o.steps, o.steps).Example(int(o.seed))
		return world.Scenario{
			Name:          fmt.Sprintf("random-%d", o.seed),
			Summary:       fmt.Sprintf("%d random steps drawn from seed %d", o.steps, o.seed),
			Protocol:      protocol,
			Steps:         steps,
			Transactional: []world.Expectation{world.HoldsAll()},
		}, nil
	case o.replay != "":
		raw, err := os.ReadFile(o.replay)
		if err != nil {
			return world.Scenario{}, usagef("-replay: %v", err)
		}
		var steps []world.Step
		if text := strings.TrimSpace(string(raw)); strings.HasPrefix(text, "[") {
			if err := json.Unmarshal(raw, &steps); err != nil {
				return world.Scenario{}, usagef("-replay %s: not a JSON list of steps: %v", o.replay, err)
			}
		} else if steps, err = world.ParseSteps(text); err != nil {
			return world.Scenario{}, usagef("-replay %s: neither a JSON list of steps nor steps one a line: %v", o.replay, err)
		}
		return world.Scenario{
			Name:          "replay",
			Summary:       fmt.Sprintf("%d steps replayed from %s", len(steps), o.replay),
			Protocol:      protocol,
			Steps:         steps,
			Transactional: []world.Expectation{world.HoldsAll()},
		}, nil
	}
	name := o.scenario
	if name == "" {
		name = defaultScenario
		if o.outputsOn() {
			name = defaultOutputsScenario
		}
	}
	s, ok := world.ScenarioNamed(name)
	if !ok && o.outputsOn() {
		s, ok = outputScenarioNamed(name)
	}
	if !ok {
		return world.Scenario{}, usagef("no scenario %q (-list names them)", name)
	}
	if s.SimOnly != "" && o.world != "sim" {
		return world.Scenario{}, usagef("-scenario %s runs on the sim only (-world sim): %s", name, s.SimOnly)
	}
	if o.protocol != "" {
		s.Protocol = protocol
	}
	return s, nil
}

// buildAndRun runs the scenario the options ask for in each of its modes
// on the world they name.
func buildAndRun(ctx context.Context, o options) (report, error) {
	s, err := scenarioFor(o)
	if err != nil {
		return report{}, err
	}
	ms, _ := modes(o, s)
	if len(ms) == 0 && !o.outputsOn() {
		return report{}, usagef("scenario %s has no expectations for -mode %s", s.Name, o.mode)
	}
	rep := report{Scenario: s.Name, Summary: s.Summary, World: o.world, Seed: o.seed}
	type spec struct {
		mode    store.Mode
		outputs string
	}
	var specs []spec
	if !o.outputsOn() {
		for _, mode := range ms {
			specs = append(specs, spec{mode, ""})
		}
	} else {
		for _, outputs := range outputRuns(o) {
			specs = append(specs, spec{store.Transactional, outputs})
		}
	}
	for _, sp := range specs {
		var r run
		switch o.world {
		case "sim":
			r = runSim(s, sp.mode, sp.outputs, o.seed)
		case "kfake":
			r, err = runKfake(ctx, o, s, sp.mode, sp.outputs)
		case "kafka":
			r, err = runKafka(ctx, o, s, sp.mode, sp.outputs)
		}
		if err != nil {
			return report{}, err
		}
		rep.Runs = append(rep.Runs, r)
	}
	return rep, nil
}

// runSim runs s in mode on the simulated cluster. Every step is applied
// (a violation does not stop the run: the timeline shows what followed),
// then the world is quiesced.
func runSim(s world.Scenario, mode store.Mode, outputs string, seed uint64) run {
	exactlyOnce, produce := outputFlags(outputs)
	w, err := world.New(world.Config{Seed: seed, Mode: mode, Protocol: s.Protocol,
		ExactlyOnce: exactlyOnce, ProduceOutputs: produce})
	if err != nil {
		panic(fmt.Sprintf("simulate: the simulated world: %v", err)) // its own topics: a bug
	}
	defer w.Close()
	vs := world.ApplyAll(w, s.Steps)
	cfg := w.Config()
	return finish(s, mode, outputs, cfg.Members, cfg.Partitions, w.Recorder().Ops(), vs)
}

// finish assembles a run from what a world left. Under -outputs (outputs
// not ""), the expectations are the output mode's, not the scenario's.
func finish(s world.Scenario, mode store.Mode, outputs string, members, partitions int, ops []history.Op, vs []world.Violation) run {
	r := run{
		Mode: mode, ModeName: modeName(mode), Outputs: outputs, Members: members, Partitions: partitions,
		Steps: s.Steps, Ops: ops, Violations: vs, Final: history.FinalStates(ops),
	}
	if r.Violations == nil {
		r.Violations = []world.Violation{}
	}
	res := world.Run{Ops: ops, Violations: vs}
	exp := s.Expect(mode)
	if outputs != "" {
		exp = outputExpectations(outputs)
	}
	for _, e := range exp {
		why := e.Failed(res)
		r.Expectations = append(r.Expectations, verdict{Says: e.Says, Met: why == "", Why: why})
	}
	if r.Expectations == nil {
		r.Expectations = []verdict{}
	}
	return r
}

func modeName(m store.Mode) string {
	if m == store.Plain {
		return "plain"
	}
	return "transactional"
}

// protocolOf is the protocol a run of s uses.
func protocolOf(s world.Scenario) sim.Protocol {
	if s.Protocol == 0 {
		return sim.ClassicEager
	}
	return s.Protocol
}
