package kfakeworld

import (
	"testing"
	"testing/synctest"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
)

// The crash scenario of timers on the kfake world: the timer m0 fired
// and did not write fires again at m1, once; the second, whose firing m1
// wrote, never again.
func TestTimerFiresOnceAcrossACrashOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vs, ops := runAll(t, Config{Mode: store.Transactional, Timers: true}, world.ScenarioTimerCrash)
		for _, v := range vs {
			t.Errorf("%s", v)
		}
		if got := world.FinalFirings(ops)["a"]; got != 2 {
			t.Fatalf("a's final state holds %d firings, want 2 (two timers, each once)", got)
		}
	})
}
