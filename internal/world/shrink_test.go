package world

import (
	"slices"
	"testing"
)

// Shrink keeps exactly the steps the failure needs, in their order.
func TestShrinkKeepsOnlyTheStepsTheFailureNeeds(t *testing.T) {
	var steps []Step
	for i := range 13 {
		steps = append(steps, Step{Kind: Produce, Key: "k", Delta: i})
	}
	// The "failure": deltas 3 and 9 both present, 3 before 9.
	fails := func(s []Step) bool {
		i := slices.IndexFunc(s, func(st Step) bool { return st.Delta == 3 })
		j := slices.IndexFunc(s, func(st Step) bool { return st.Delta == 9 })
		return i >= 0 && j > i
	}
	got := Shrink(steps, fails)
	want := []Step{{Kind: Produce, Key: "k", Delta: 3}, {Kind: Produce, Key: "k", Delta: 9}}
	if !slices.Equal(got, want) {
		t.Fatalf("shrunk to %v, want %v", got, want)
	}
	if len(steps) != 13 || steps[3].Delta != 3 {
		t.Fatalf("the input was changed: %v", steps)
	}
}

// A scenario no removal keeps failing is returned whole.
func TestShrinkLeavesAMinimalScenario(t *testing.T) {
	steps := []Step{{Kind: Join}, {Kind: Poll}}
	got := Shrink(steps, func(s []Step) bool { return len(s) == 2 })
	if !slices.Equal(got, steps) {
		t.Fatalf("shrunk to %v, want %v", got, steps)
	}
}
