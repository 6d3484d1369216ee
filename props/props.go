// Package props generates random scenarios of the simulated cluster
// (internal/world) for property tests: interleavings of input events,
// polls, flushes, time, joins, leaves, pauses, evictions, crashes, foreign
// transactions and compaction, run against the real engine and store and
// checked against the fencing invariants after every step.
package props

import (
	"fmt"
	"sync"
	"time"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/world"
)

// weights is how often each step kind is drawn: mostly input, polls and
// time, with the faults rarer.
var weights = []struct {
	kind world.Kind
	n    int
}{
	{world.Produce, 8},
	{world.Advance, 5},
	{world.Flush, 2},
	{world.Persist, 1},
	{world.SlowFetches, 1},
	{world.Join, 3},
	{world.Leave, 1},
	{world.Pause, 2},
	{world.Resume, 2},
	{world.Evict, 1},
	{world.Crash, 1},
	{world.ForeignOpen, 1},
	{world.ForeignEnd, 1},
	{world.Compact, 1},
	{world.Truncate, 1},
	// Last: rapid's SampledFrom favours the ends of the list.
	{world.Poll, 10},
}

var kinds = func() []world.Kind {
	var out []world.Kind
	for _, w := range weights {
		for range w.n {
			out = append(out, w.kind)
		}
	}
	return out
}()

// Keys are the input's keys: few, so that keys collide across members.
var Keys = []string{"a", "b", "c", "d", "e"}

var durations = []time.Duration{time.Second, 3 * time.Second, 6 * time.Second, 11 * time.Second, 31 * time.Second, 61 * time.Second}

// StepGen draws one step for a world of cfg (defaults filled in).
func StepGen(cfg world.Config) *rapid.Generator[world.Step] {
	return rapid.Custom(func(t *rapid.T) world.Step {
		s := world.Step{Kind: rapid.SampledFrom(kinds).Draw(t, "kind")}
		switch s.Kind {
		case world.Produce:
			s.Key = rapid.SampledFrom(Keys).Draw(t, "key")
			s.Delta = rapid.IntRange(-3, 12).Draw(t, "delta") // 0 closes the account
		case world.SlowFetches:
			s.D = rapid.SampledFrom([]time.Duration{0, 2 * time.Second, 6 * time.Second}).Draw(t, "d")
		case world.Poll, world.Flush, world.Persist, world.Join, world.Leave, world.Pause, world.Resume, world.Evict, world.Crash:
			s.Member = rapid.IntRange(0, cfg.Members-1).Draw(t, "member")
		case world.Advance:
			s.D = rapid.SampledFrom(durations).Draw(t, "d")
		case world.ForeignOpen:
			s.Partition = rapid.IntRange(0, cfg.Partitions-1).Draw(t, "partition")
			s.Hang = rapid.Bool().Draw(t, "hang")
		case world.ForeignEnd:
			s.Commit = rapid.Bool().Draw(t, "commit")
		case world.Compact, world.Truncate:
			s.Partition = rapid.IntRange(0, cfg.Partitions-1).Draw(t, "partition")
		}
		return s
	})
}

// Stats counts what the properties ran: scenarios, and steps per kind.
type Stats struct {
	mu        sync.Mutex
	Scenarios int
	Steps     map[world.Kind]int
}

func (s *Stats) add(steps []world.Step) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Steps == nil {
		s.Steps = map[world.Kind]int{}
	}
	s.Scenarios++
	for _, st := range steps {
		s.Steps[st.Kind]++
	}
}

// Coverage formats the step counts.
func (s *Stats) Coverage() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ""
	for _, w := range weights {
		out += fmt.Sprintf("%s %d  ", w.kind, s.Steps[w.kind])
	}
	return out
}

// Property is the fencing property for worlds of cfg: a random scenario
// (rapid's Repeat: -rapid.steps steps on average, 30 by default), every
// invariant checked after every step and at quiescence. A violation fails
// with the invariant and the trace; rapid shrinks the scenario to a
// minimal one and prints the seed that replays it.
func Property(cfg world.Config, stats *Stats) func(*rapid.T) {
	return func(t *rapid.T) {
		w, err := world.New(cfg)
		if err != nil {
			t.Fatalf("world: %v", err)
		}
		defer w.Close()
		gen := StepGen(w.Config())
		var steps []world.Step
		fail := func(vs []world.Violation) {
			t.Fatalf("%s\n%d steps:\n%s", vs[0], len(steps), world.Trace(steps))
		}
		t.Repeat(map[string]func(*rapid.T){
			"step": func(t *rapid.T) {
				s := gen.Draw(t, "step")
				steps = append(steps, s)
				if vs := w.Apply(s); len(vs) > 0 {
					fail(vs)
				}
			},
		})
		stats.add(steps)
		if vs := w.Quiesce(); len(vs) > 0 {
			fail(vs)
		}
	}
}
