package world

import (
	"testing"

	"github.com/snapfence/snapfence/store"
)

// RunScenario runs a named scenario in mode on the simulated cluster.
func runScenario(t *testing.T, s Scenario, mode store.Mode) Run {
	t.Helper()
	w, err := New(Config{Mode: mode, Protocol: s.Protocol})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var vs []Violation
	for _, st := range s.Steps {
		vs = append(vs, w.Apply(st)...)
	}
	vs = append(vs, w.Quiesce()...)
	return Run{Ops: w.Recorder().Ops(), Violations: vs}
}

func TestNamedScenarios(t *testing.T) {
	for _, s := range Scenarios {
		for _, mode := range []store.Mode{store.Transactional, store.Plain} {
			exp := s.Expect(mode)
			if exp == nil {
				continue
			}
			t.Run(s.Name+"/"+mode.String(), func(t *testing.T) {
				run := runScenario(t, s, mode)
				failed := Check(run, exp)
				if len(failed) == 0 {
					return
				}
				for _, f := range failed {
					t.Errorf("%s", f)
				}
				t.Logf("steps:\n%s", Trace(s.Steps))
				for _, v := range run.Violations {
					t.Logf("%s", v)
				}
				for _, op := range run.Ops {
					t.Logf("%s", op)
				}
			})
		}
	}
}

// The expectations bite: the broken variants fail the scenarios that
// exist to catch them.
func TestNamedScenariosCatchTheBrokenVariants(t *testing.T) {
	for _, c := range []struct {
		scenario string
		cfg      Config
	}{
		{"generation-bump-keeps-partitions", Config{Mode: store.Transactional, CachedIdentity: true}},
		{"foreign-open-transaction-across-recovery", Config{Mode: store.Transactional, LSOBoundRecovery: true}},
		{"stale-flush-on-revoke", Config{Mode: store.Plain}},
		{"zombie-restart-confirms-its-ownership", Config{Mode: store.Transactional, RestartsUnconfirmed: true}},
		{"committed-reads-answer-durable-states", Config{Mode: store.Transactional, QueriesReadLatest: true}},
		{"a-view-shows-committed-states", Config{Mode: store.Transactional, FollowUncommitted: true}},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			s, ok := ScenarioNamed(c.scenario)
			if !ok {
				t.Fatalf("no scenario %s", c.scenario)
			}
			c.cfg.Protocol = s.Protocol
			w, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			var vs []Violation
			for _, st := range s.Steps {
				vs = append(vs, w.Apply(st)...)
			}
			vs = append(vs, w.Quiesce()...)
			failed := Check(Run{Ops: w.Recorder().Ops(), Violations: vs}, s.Transactional)
			if len(failed) == 0 {
				t.Fatal("the broken variant meets every expectation of the transactional mode")
			}
			for _, f := range failed {
				t.Logf("%s", f)
			}
		})
	}
}
