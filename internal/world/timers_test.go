package world

import (
	"testing"

	"github.com/snapfence/snapfence/store"
)

func TestTimerFiresOnceAcrossACrash(t *testing.T) {
	w, err := New(Config{Mode: store.Transactional, Timers: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, s := range ScenarioTimerCrash {
		if vs := w.Apply(s); len(vs) > 0 {
			t.Fatalf("%s: %v", s, vs)
		}
	}
	if vs := w.Quiesce(); len(vs) > 0 {
		t.Fatal(vs)
	}
	if got := FinalFirings(w.Recorder().Ops())["a"]; got != 2 {
		t.Fatalf("a's final state holds %d firings, want 2 (two timers, each once)", got)
	}
}

// The negative control: with the firings' removals lost, the first timer
// comes back with every recovery, and invariant 10 says so.
func TestTimerRemovalsLostFireAgain(t *testing.T) {
	w, err := New(Config{Mode: store.Transactional, Timers: true, TimerRemovalsLost: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var vs []Violation
	for _, s := range ScenarioTimerCrash {
		vs = append(vs, w.Apply(s)...)
	}
	vs = append(vs, w.Quiesce()...)
	if len(vs) == 0 || vs[0].Invariant != 10 {
		t.Fatalf("violations %v, want invariant 10", vs)
	}
	t.Log(vs[0])
}
