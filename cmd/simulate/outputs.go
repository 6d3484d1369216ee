package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/snapfence/snapfence/cmd/simulate/internal/timeline"
	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
)

// writeOutputs writes the JSON lines and the HTML page the options ask
// for.
func writeOutputs(o options, rep report, stdout io.Writer) error {
	if o.jsonOut != "" {
		if err := writeTo(o.jsonOut, stdout, func(w io.Writer) error { return writeJSON(w, rep) }); err != nil {
			return fmt.Errorf("-json: %w", err)
		}
	}
	if o.htmlOut != "" {
		if err := writeTo(o.htmlOut, stdout, func(w io.Writer) error { return timeline.Write(w, timelinePage(rep)) }); err != nil {
			return fmt.Errorf("-html: %w", err)
		}
	}
	return nil
}

func writeTo(path string, stdout io.Writer, write func(io.Writer) error) error {
	if path == "-" {
		return write(stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	if err := write(bw); err != nil {
		_ = f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// The JSON lines: one object a line, each with its "type":
//
//	scenario     the first line: scenario, summary, world, seed
//	op           one operation of a run's history (history.Op's fields)
//	violation    an invariant violation (world.Violation's fields)
//	expectation  an expected outcome, met or not
//	final        a key's final state beside the exact fold
//
// Every line after the first has "mode" (plain or transactional) and,
// under -outputs, "outputs" (at-least-once or exactly-once): which run.
type jsonScenario struct {
	Type     string `json:"type"`
	Scenario string `json:"scenario"`
	Summary  string `json:"summary"`
	World    string `json:"world"`
	Seed     uint64 `json:"seed"`
}

type jsonOp struct {
	Type    string `json:"type"`
	Mode    string `json:"mode"`
	Outputs string `json:"outputs,omitempty"`
	history.Op
}

type jsonViolation struct {
	Type    string `json:"type"`
	Mode    string `json:"mode"`
	Outputs string `json:"outputs,omitempty"`
	world.Violation
}

type jsonExpectation struct {
	Type    string `json:"type"`
	Mode    string `json:"mode"`
	Outputs string `json:"outputs,omitempty"`
	verdict
}

type jsonFinal struct {
	Type    string `json:"type"`
	Mode    string `json:"mode"`
	Outputs string `json:"outputs,omitempty"`
	history.KeyState
	OK bool `json:"ok"`
}

func writeJSON(w io.Writer, rep report) error {
	enc := json.NewEncoder(w)
	if err := enc.Encode(jsonScenario{"scenario", rep.Scenario, rep.Summary, rep.World, rep.Seed}); err != nil {
		return err
	}
	for _, r := range rep.Runs {
		for _, op := range r.Ops {
			if err := enc.Encode(jsonOp{"op", r.ModeName, r.Outputs, op}); err != nil {
				return err
			}
		}
		for _, v := range r.Violations {
			if err := enc.Encode(jsonViolation{"violation", r.ModeName, r.Outputs, v}); err != nil {
				return err
			}
		}
		for _, e := range r.Expectations {
			if err := enc.Encode(jsonExpectation{"expectation", r.ModeName, r.Outputs, e}); err != nil {
				return err
			}
		}
		for _, k := range r.Final {
			if err := enc.Encode(jsonFinal{"final", r.ModeName, r.Outputs, k, k.OK()}); err != nil {
				return err
			}
		}
	}
	return nil
}
