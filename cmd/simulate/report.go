package main

import (
	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
)

// report is what one invocation ran: a scenario in one or two modes, on
// one world. The text, JSON and HTML outputs are all rendered from it.
type report struct {
	Scenario string `json:"scenario"`
	Summary  string `json:"summary"`
	World    string `json:"world"` // sim, kfake or kafka
	Seed     uint64 `json:"seed"`
	Runs     []run  `json:"runs"`
}

// run is one mode's run of the scenario.
type run struct {
	Mode     store.Mode `json:"-"`
	ModeName string     `json:"mode"` // plain or transactional
	// Outputs is the run's -outputs mode, at-least-once or exactly-once
	// ("": none, the outputs only counted).
	Outputs    string       `json:"outputs,omitempty"`
	Members    int          `json:"members"`
	Partitions int          `json:"partitions"`
	Steps      []world.Step `json:"steps"`
	// Ops is the history: every step, input event, store call of the
	// members with its outcome, recovery read, member state change and
	// snapshot log end (internal/history).
	Ops        []history.Op      `json:"ops"`
	Violations []world.Violation `json:"violations"`
	// Expectations are the scenario's outcomes for the mode, each met or
	// not (a random scenario expects every invariant to hold).
	Expectations []verdict `json:"expectations"`
	// Final is each key's state after the run beside the exact fold of
	// its events.
	Final []history.KeyState `json:"final"`
}

// verdict is one expectation's outcome.
type verdict struct {
	Says string `json:"says"`
	Met  bool   `json:"met"`
	Why  string `json:"why,omitempty"` // when not met
}

// label names the run in the text and the HTML page: its mode, or its
// outputs under -outputs (always in Transactional mode).
func (r run) label() string {
	if r.Outputs != "" {
		return r.Outputs
	}
	return r.ModeName
}

// ok reports whether every expectation of the run was met.
func (r run) ok() bool {
	for _, v := range r.Expectations {
		if !v.Met {
			return false
		}
	}
	return true
}
