package kfakeworld

import (
	"testing"
	"testing/synctest"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
)

// The design's named scenarios (internal/world/scenarios.go), each with
// the outcome it must have, on kfake with the real clients.
func TestNamedScenariosOnKfake(t *testing.T) {
	for _, s := range world.Scenarios {
		if s.SimOnly != "" {
			t.Logf("%s runs on the sim only: %s", s.Name, s.SimOnly)
			continue
		}
		for _, mode := range []store.Mode{store.Transactional, store.Plain} {
			exp := s.Expect(mode)
			if exp == nil {
				continue
			}
			t.Run(s.Name+"/"+mode.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					vs, ops := runAll(t, Config{Mode: mode, Protocol: s.Protocol}, s.Steps)
					failed := world.Check(world.Run{Ops: ops, Violations: vs}, exp)
					if len(failed) == 0 {
						return
					}
					for _, f := range failed {
						t.Errorf("%s", f)
					}
					t.Logf("steps:\n%s", world.Trace(s.Steps))
					for _, v := range vs {
						t.Logf("%s", v)
					}
					for _, op := range ops {
						t.Logf("%s", op)
					}
				})
			})
		}
	}
}
