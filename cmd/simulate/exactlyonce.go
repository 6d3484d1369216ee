package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
)

// The -outputs modes: where the folds' outputs go.
const (
	// outputsNone: the outputs are only counted (invariant 7), as before
	// the flag: the default, and its output unchanged.
	outputsNone = "none"
	// outputsAtLeastOnce: the engines' Emit produces the outputs to the
	// output topic with a plain producer (world.Config.ProduceOutputs).
	outputsAtLeastOnce = "at-least-once"
	// outputsExactlyOnce: the outputs go in the batches' transactions
	// (engine.Config.ExactlyOnce, world.Config.ExactlyOnce).
	outputsExactlyOnce = "exactly-once"
	// outputsCompare: the scenario twice in Transactional mode, at least
	// once then exactly once.
	outputsCompare = "compare"
)

// defaultOutputsScenario is what -outputs runs without -scenario: a stale
// owner's batch and a crash mid-transaction, where at-least-once outputs
// are duplicated.
const defaultOutputsScenario = "crash-and-stale-owner"

// outputScenarios are the exactly-once outputs' scripted scenarios
// (internal/world/outputs.go), named for -scenario with -outputs. Their
// expectations are the output modes' (outputExpectations).
var outputScenarios = []world.Scenario{
	{
		Name:    defaultOutputsScenario,
		Summary: "m0 folds and pauses with a batch it has not committed; m1 takes over; m0 wakes and flushes its stale batch; m1 crashes with a transaction open; m2 takes over",
		Steps:   world.CrashAndStaleOwner,
	},
	{
		Name:    "crash-stale-owner-and-foreign",
		Summary: "crash-and-stale-owner with a foreign producer's transaction open on a snapshot partition when m2 takes over: m2's recovery waits behind it until it aborts",
		Steps:   world.CrashStaleOwnerAndForeign,
	},
}

func outputScenarioNamed(name string) (world.Scenario, bool) {
	for _, s := range outputScenarios {
		if s.Name == name {
			return s, true
		}
	}
	return world.Scenario{}, false
}

// outputsOn reports whether -outputs sends the outputs to a topic.
func (o options) outputsOn() bool { return o.outputs != "" && o.outputs != outputsNone }

// outputFlags are the worlds' Config.ExactlyOnce and ProduceOutputs of an
// output mode.
func outputFlags(outputs string) (exactlyOnce, produce bool) {
	return outputs == outputsExactlyOnce, outputs == outputsAtLeastOnce
}

func validateOutputs(o options) error {
	switch o.outputs {
	case outputsNone:
		if _, ok := outputScenarioNamed(o.scenario); ok {
			return usagef("-scenario %s is an output scenario: give -outputs at-least-once, exactly-once or compare", o.scenario)
		}
		return nil
	case outputsAtLeastOnce, outputsExactlyOnce, outputsCompare:
	default:
		return usagef("-outputs %q: want none, at-least-once, exactly-once or compare", o.outputs)
	}
	if o.mode == "plain" {
		return usagef("-outputs runs in Transactional mode (exactly-once output needs it, and at-least-once beside it differs only in the outputs): drop -mode plain")
	}
	if o.explore > 0 {
		return usagef("-outputs does not combine with -explore: give -scenario, -seed N -steps N or -replay")
	}
	return nil
}

// outputRuns are the output modes to run, one run each.
func outputRuns(o options) []string {
	if o.outputs == outputsCompare {
		return []string{outputsAtLeastOnce, outputsExactlyOnce}
	}
	return []string{o.outputs}
}

// outputExpectations replace a scenario's own under -outputs (those were
// written for its snapshots and offsets, not its outputs): exactly once,
// every invariant holds and a read_committed reader saw every input
// event's output once; at least once, the negative control, a
// read_committed reader saw some event's output more than once, and
// nothing was lost or invented (invariants 1-7 hold).
func outputExpectations(outputs string) []world.Expectation {
	if outputs == outputsExactlyOnce {
		return []world.Expectation{world.HoldsAll(), {
			Says: "a read_committed reader of the output topic sees every input event's output exactly once",
			Failed: func(r world.Run) string {
				return eachSeen(r.Ops, func(n int) bool { return n == 1 })
			},
		}}
	}
	return []world.Expectation{{
		Says: "a read_committed reader sees some input event's output more than once (invariant 8, duplicated-output): the negative control bites",
		Failed: func(r world.Run) string {
			for _, v := range r.Violations {
				if v.Invariant == 8 && strings.Contains(v.Detail, string(history.DuplicatedOutput)) {
					return ""
				}
			}
			return "no output was duplicated: the scenario does not tell at-least-once from exactly-once"
		},
	}, {
		Says: "and no output is lost or invented: every invariant but 8 holds, and 8 only for duplicates",
		Failed: func(r world.Run) string {
			for _, v := range r.Violations {
				if v.Invariant != 8 || !strings.Contains(v.Detail, string(history.DuplicatedOutput)) {
					return v.String()
				}
			}
			return eachSeen(r.Ops, func(n int) bool { return n >= 1 })
		},
	}}
}

// eachSeen returns why not every input event's output was seen by the
// read_committed reader a number of times ok accepts ("": it was).
func eachSeen(ops []history.Op, ok func(int) bool) string {
	if !slices.ContainsFunc(ops, func(op history.Op) bool {
		return op.Kind == history.OutputRead && op.Detail == history.ReadCommitted
	}) {
		return "the output topic was not read"
	}
	counts := history.OutputCounts(ops, history.ReadCommitted)
	var bad []string
	for _, op := range ops {
		if op.Kind != history.Produce {
			continue
		}
		if n := counts[history.OutputValue(op.Partition, op.Offset)]; !ok(n) {
			bad = append(bad, fmt.Sprintf("p%d@%d seen %d times", op.Partition, op.Offset, n))
		}
	}
	if len(bad) > 0 {
		return strings.Join(bad, ", ")
	}
	return ""
}

// emits describes a member's consecutive outputs with one outcome: the
// plain producer's (at least once) or their transaction's (exactly once).
func (p *printer) emits(outputs string, ops []history.Op) string {
	var events []string
	for _, op := range ops {
		events = append(events, fmt.Sprintf("p%d@%d %s", op.Partition, op.Offset, op.Key))
	}
	first := ops[0]
	what := fmt.Sprintf("m%d produces the outputs of %s", first.Member, strings.Join(events, ", "))
	if outputs == outputsExactlyOnce {
		what = fmt.Sprintf("m%d's transaction carries the outputs of %s", first.Member, strings.Join(events, ", "))
	}
	return p.outcome(what, first)
}

// outputEvent describes an output read op (-v only).
func outputEvent(op history.Op) string {
	if op.Kind == history.OutputRead {
		return fmt.Sprintf("a final reader reads the output topic %s", op.Detail)
	}
	if op.Partition < 0 {
		return fmt.Sprintf("a final reader (%s) sees an output %s=%s that names no input event", op.Detail, op.Key, op.Value)
	}
	return fmt.Sprintf("a final reader (%s) sees the output of p%d@%d %s", op.Detail, op.Partition, op.Offset, op.Key)
}

// outputTable prints, per input event, how many times the final readers
// of the output topic saw its output in each run: read_committed (what a
// downstream consumer must read) and read_uncommitted.
func (p *printer) outputTable(rep report) {
	var runs []run
	for _, r := range rep.Runs {
		if r.Outputs != "" {
			runs = append(runs, r)
		}
	}
	if len(runs) == 0 {
		return
	}
	type event struct {
		p     int32
		off   int64
		key   string
		delta int
	}
	seen := map[string]bool{}
	var events []event
	for _, r := range runs {
		for _, op := range r.Ops {
			if op.Kind == history.Produce && !seen[history.OutputValue(op.Partition, op.Offset)] {
				seen[history.OutputValue(op.Partition, op.Offset)] = true
				events = append(events, event{op.Partition, op.Offset, op.Key, op.Delta})
			}
		}
	}
	slices.SortFunc(events, func(a, b event) int { return cmp.Or(cmp.Compare(a.p, b.p), cmp.Compare(a.off, b.off)) })
	p.printf("\n%s\n", p.paint(bold, "outputs: how many times a reader of the output topic saw each input event's output"))
	const committedW, uncommittedW = 17, 16 // a cell: "2 ✗ duplicated", "2"
	head := fmt.Sprintf("  %-12s %-5s %-6s", "", "", "")
	sub := fmt.Sprintf("  %-12s %-5s %-6s", "input event", "key", "delta")
	for _, r := range runs {
		head += "  " + padRight(r.Outputs, committedW+uncommittedW)
		sub += "  " + padRight("read_committed", committedW) + padRight("read_uncommitted", uncommittedW)
	}
	p.printf("%s\n%s\n", strings.TrimRight(head, " "), strings.TrimRight(sub, " "))
	committed := make([]map[string]int, len(runs))
	uncommitted := make([]map[string]int, len(runs))
	for i, r := range runs {
		committed[i], uncommitted[i] = history.OutputCounts(r.Ops, history.ReadCommitted), history.OutputCounts(r.Ops, history.ReadUncommitted)
	}
	for _, e := range events {
		delta := "close"
		if e.delta != 0 {
			delta = fmt.Sprintf("%+d", e.delta)
		}
		line := fmt.Sprintf("  %-12s %-5s %-6s", fmt.Sprintf("p%d@%d", e.p, e.off), e.key, delta)
		v := history.OutputValue(e.p, e.off)
		for i := range runs {
			n := committed[i][v]
			mark := p.paint(green, "✓")
			switch {
			case n == 0:
				mark = p.paint(red, "✗ lost")
			case n > 1:
				mark = p.paint(red, "✗ duplicated")
			}
			line += "  " + padRight(fmt.Sprintf("%d %s", n, mark), committedW) + padRight(fmt.Sprint(uncommitted[i][v]), uncommittedW)
		}
		p.printf("%s\n", strings.TrimRight(line, " "))
	}
}

// padRight pads s with spaces to width columns on the screen (its colour
// codes take none).
func padRight(s string, width int) string {
	return s + strings.Repeat(" ", max(0, width-utf8.RuneCountInString(stripColor(s))))
}

func stripColor(s string) string {
	for _, c := range []string{red, green, dim, bold, reset} {
		s = strings.ReplaceAll(s, c, "")
	}
	return s
}
