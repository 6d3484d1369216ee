package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
)

// printer writes the readable report: per run, a timeline of the steps
// with what each caused, the final state beside the exact fold; then a
// verdict per invariant and per expectation.
type printer struct {
	w       io.Writer
	verbose bool
	color   bool

	// per run: each member's last state, each key's newest acknowledged
	// write, so the timeline can say what a line means
	members map[int]history.Op
	newest  map[string]history.Op
}

func newPrinter(w io.Writer, o options) *printer {
	color := false
	if f, ok := w.(*os.File); ok && !o.noColor && os.Getenv("NO_COLOR") == "" {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			color = true
		}
	}
	return &printer{w: w, verbose: o.verbose, color: color}
}

const (
	red   = "\x1b[31m"
	green = "\x1b[32m"
	dim   = "\x1b[2m"
	bold  = "\x1b[1m"
	reset = "\x1b[0m"
)

func (p *printer) paint(code, s string) string {
	if !p.color {
		return s
	}
	return code + s + reset
}

func (p *printer) printf(format string, args ...any) { fmt.Fprintf(p.w, format, args...) }

// clock formats a virtual time offset from the start: +m:ss.mmm.
func clock(d time.Duration) string {
	m := d / time.Minute
	s := (d % time.Minute) / time.Second
	ms := (d % time.Second) / time.Millisecond
	if ms == 0 {
		return fmt.Sprintf("+%d:%02d", m, s)
	}
	return fmt.Sprintf("+%d:%02d.%03d", m, s, ms)
}

func (p *printer) report(rep report) {
	p.printf("%s  %s\n", p.paint(bold, rep.Scenario), p.paint(dim, "(world: "+rep.World+")"))
	p.printf("%s\n", rep.Summary)
	for _, r := range rep.Runs {
		title := r.ModeName + " mode"
		if r.Outputs != "" {
			title = r.Outputs + " outputs (" + r.ModeName + " mode)"
		}
		p.printf("\n%s\n", p.paint(bold, fmt.Sprintf("── %s %s", title, strings.Repeat("─", max(0, 65-len(title))))))
		p.timeline(r)
		p.final(r)
	}
	p.outputTable(rep)
	p.verdict(rep)
}

// timeline prints each step and, under it, what it caused.
func (p *printer) timeline(r run) {
	reads := map[int][]history.Op{} // a recovery's snapshots, by read
	for _, op := range r.Ops {
		if op.Kind == history.Read {
			reads[op.Read] = append(reads[op.Read], op)
		}
	}
	p.members, p.newest = map[int]history.Op{}, map[string]history.Op{}
	p.printf("  %-10s %4s  %s\n", "time", "step", "what happened")
	// A member's consecutive outputs with one outcome make one line.
	var emits []history.Op
	flush := func() {
		if len(emits) > 0 {
			p.printf("  %-10s %4s    %s\n", "", "", p.emits(r.Outputs, emits))
			emits = nil
		}
	}
	for _, op := range r.Ops {
		if op.Kind == history.Emit {
			if len(emits) > 0 && (emits[0].Member != op.Member || emits[0].Outcome != op.Outcome || emits[0].Err != op.Err) {
				flush()
			}
			emits = append(emits, op)
			continue
		}
		flush()
		if op.Kind == history.Step {
			if op.StepNo == 0 {
				p.printf("  %-10s %4s  %s\n", clock(op.At), "", p.paint(bold, "quiesce: faults lifted, every member polled to the end of the input"))
				continue
			}
			p.printf("  %-10s %4d  %s\n", clock(op.At), op.StepNo, p.paint(bold, op.Detail))
			continue
		}
		if line := p.event(op, reads); line != "" {
			p.printf("  %-10s %4s    %s\n", "", "", line)
		}
	}
	flush()
}

// event describes op in a line, or "" when it is noise without -v.
func (p *printer) event(op history.Op, reads map[int][]history.Op) string {
	switch op.Kind {
	case history.Produce:
		if p.verbose {
			return fmt.Sprintf("input p%d@%d %s %s", op.Partition, op.Offset, op.Key, world.Value(op.Delta))
		}
	case history.Acquire:
		if op.Outcome != history.OK {
			return fmt.Sprintf("m%d fails to take over p%d: %s", op.Member, op.Partition, op.Err)
		}
		return fmt.Sprintf("m%d takes over p%d (resumes the input at offset %d)", op.Member, op.Partition, op.Offset)
	case history.ReadStart:
		if p.verbose {
			return fmt.Sprintf("%s starts reading p%d", who(op.Member), op.Partition)
		}
	case history.Read:
		if p.verbose {
			return fmt.Sprintf("%s reads %s", who(op.Member), snapshot(op))
		}
	case history.ReadEnd:
		if op.Member < 0 && !p.verbose {
			return "" // the final read: shown as the final state
		}
		if op.Outcome != history.OK {
			return p.paint(red, fmt.Sprintf("%s's recovery of p%d fails: %s", who(op.Member), op.Partition, op.Err))
		}
		var got []string
		for _, s := range latestPerKey(reads[op.Read]) {
			got = append(got, snapshot(s))
		}
		if len(got) == 0 {
			got = []string{"nothing"}
		}
		return fmt.Sprintf("%s recovers p%d: %s", who(op.Member), op.Partition, strings.Join(got, ", "))
	case history.Write:
		line := p.outcome(fmt.Sprintf("m%d writes %s to p%d (generation %d)", op.Member, snapshot(op), op.Partition, op.Generation), op)
		if op.Outcome == history.OK {
			if prev, ok := p.newest[op.Key]; ok && prev.Offset > op.Offset {
				line += p.paint(red, fmt.Sprintf("  ← stale: replaces m%d's newer %s", prev.Member, snapshot(prev)))
			} else {
				p.newest[op.Key] = op
			}
		}
		return line
	case history.Commit:
		return p.outcome(fmt.Sprintf("m%d commits p%d at offset %d (generation %d)", op.Member, op.Partition, op.Offset, op.Generation), op)
	case history.Abandon:
		return fmt.Sprintf("m%d dies with %s open in a transaction on p%d", op.Member, snapshot(op), op.Partition)
	case history.View:
		return fmt.Sprintf("the view of the snapshot topic shows %s (p%d)", snapshot(op), op.Partition)
	case history.Query:
		switch op.Detail {
		case history.QueryAbsent:
			return fmt.Sprintf("m%d answers a committed read of %s (p%d): no state", op.Member, op.Key, op.Partition)
		case history.QueryNotOwned:
			return fmt.Sprintf("m%d answers a committed read of %s (p%d): not served here (%s)", op.Member, op.Key, op.Partition, op.Err)
		}
		return fmt.Sprintf("m%d answers a committed read of %s (p%d): %s", op.Member, op.Key, op.Partition, snapshot(op))
	case history.Member:
		prev, seen := p.members[op.Member]
		p.members[op.Member] = op
		switch {
		case op.Detail == "absent":
			return fmt.Sprintf("m%d is gone", op.Member)
		case op.Detail == "crashed":
			return fmt.Sprintf("m%d has crashed", op.Member)
		case op.Detail == "paused":
			return fmt.Sprintf("m%d pauses (a GC pause: no poll, no heartbeat), holding %s at generation %d", op.Member, partitions(op.Owned), op.Generation)
		case op.Generation < 0 && len(op.Owned) == 0:
			return fmt.Sprintf("m%d starts: a new process, its client joins the group and waits for the round to complete", op.Member)
		case seen && prev.Detail == "paused":
			return fmt.Sprintf("m%d wakes, still believing it owns %s at generation %d", op.Member, partitions(op.Owned), op.Generation)
		}
		return fmt.Sprintf("m%d is at generation %d, owns %s", op.Member, op.Generation, partitions(op.Owned))
	case history.OutputRead, history.Output:
		if p.verbose {
			return outputEvent(op)
		}
	case history.Log:
		if p.verbose {
			return fmt.Sprintf("snapshots p%d: high watermark %d, last stable offset %d", op.Partition, op.HW, op.LSO)
		}
	case history.Unexpressed:
		return "not carried out on this world: " + op.Detail
	case history.Drift:
		return op.Detail
	case history.Offsets:
		if p.verbose {
			return fmt.Sprintf("input p%d at quiescence: committed %d of %d", op.Partition, op.Offset, op.HW)
		}
	}
	return ""
}

func (p *printer) outcome(what string, op history.Op) string {
	switch op.Outcome {
	case history.OK:
		return what + " · " + p.paint(green, "ok")
	case history.Fenced:
		return what + " · " + p.paint(red, "FENCED") + " " + p.paint(dim, "("+reason(op)+")")
	}
	return what + " · " + p.paint(red, string(op.Outcome)) + " " + p.paint(dim, "("+op.Err+")")
}

// reason is the Kafka error code a fenced call was answered with, or its
// message.
func reason(op history.Op) string {
	if op.Code != "" {
		return op.Code
	}
	err := op.Err
	for _, code := range []string{"ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "STALE_MEMBER_EPOCH", "FENCED_MEMBER_EPOCH", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"} {
		if strings.Contains(err, code) {
			return code
		}
	}
	return err
}

func who(member int) string {
	if member < 0 {
		return "a final reader"
	}
	return fmt.Sprintf("m%d", member)
}

func snapshot(op history.Op) string {
	if op.Tombstone {
		return fmt.Sprintf("%s=closed@%d", op.Key, op.Offset)
	}
	return fmt.Sprintf("%s=%s@%d", op.Key, op.Value, op.Offset)
}

func partitions(ps []int32) string {
	if len(ps) == 0 {
		return "nothing"
	}
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("p%d", p))
	}
	return strings.Join(out, " ")
}

// latestPerKey keeps each key's last snapshot of a read, in key order.
func latestPerKey(ops []history.Op) []history.Op {
	last := map[string]history.Op{}
	for _, op := range ops {
		last[op.Key] = op
	}
	keys := world.SortedKeys(last)
	out := make([]history.Op, 0, len(keys))
	for _, k := range keys {
		out = append(out, last[k])
	}
	return out
}

// final prints each key's state after the run beside the exact fold.
func (p *printer) final(r run) {
	p.printf("\n  final state (read_committed)   %-6s %-10s %s\n", "key", "state", "exact fold of its events")
	for _, k := range r.Final {
		got := k.Got
		if got == "" {
			got = "-"
		}
		mark := p.paint(green, "✓")
		if !k.OK() {
			mark = p.paint(red, "✗ wrong")
		}
		p.printf("  %-30s %-6s %-10s %-10s %s\n", "", k.Key, got, k.Want, mark)
	}
}

// verdict prints, per invariant, whether each run held it, then each
// run's expectations, then one line.
func (p *printer) verdict(rep report) {
	p.printf("\n%s\n", p.paint(bold, "verdict"))
	head := fmt.Sprintf("  %-32s", "invariant")
	for _, r := range rep.Runs {
		head += fmt.Sprintf(" %-15s", r.label())
	}
	p.printf("%s\n", strings.TrimRight(head, " "))
	invariants := 7
	if slices.ContainsFunc(rep.Runs, func(r run) bool { return r.Outputs != "" }) {
		invariants = 8 // OutputExactlyOnce: checked only where the outputs go to a topic
	}
	for n := 1; n <= invariants; n++ {
		line := fmt.Sprintf("  %-32s", fmt.Sprintf("%d %s", n, world.InvariantName(n)))
		for i, r := range rep.Runs {
			count := 0
			for _, v := range r.Violations {
				if v.Invariant == n {
					count++
				}
			}
			cell := "holds"
			if count > 0 {
				cell = fmt.Sprintf("VIOLATED ×%d", count)
			}
			if i < len(rep.Runs)-1 {
				cell = fmt.Sprintf("%-15s", cell)
			}
			if count > 0 {
				cell = p.paint(red, cell)
			}
			line += " " + cell
		}
		p.printf("%s\n", line)
	}
	for _, r := range rep.Runs {
		if r.Outputs != "" {
			p.printf("\n  %s outputs expect:\n", r.Outputs)
		} else {
			p.printf("\n  %s mode expects:\n", r.ModeName)
		}
		if len(r.Expectations) == 0 {
			p.printf("    nothing (a run to look at)\n")
		}
		for _, v := range r.Expectations {
			if v.Met {
				p.printf("    %s %s\n", p.paint(green, "✓"), v.Says)
			} else {
				p.printf("    %s %s: %s\n", p.paint(red, "✗"), v.Says, v.Why)
			}
		}
	}
	p.printf("\n%s\n", p.summary(rep))
}

// summary is the one-line verdict.
func (p *printer) summary(rep report) string {
	ok := !slices.ContainsFunc(rep.Runs, func(r run) bool { return !r.ok() })
	if !ok {
		return p.paint(red, "unexpected: an expectation above was not met")
	}
	var plain, txn, alo, eo *run
	for i := range rep.Runs {
		switch rep.Runs[i].Outputs {
		case outputsAtLeastOnce:
			alo = &rep.Runs[i]
			continue
		case outputsExactlyOnce:
			eo = &rep.Runs[i]
			continue
		}
		if rep.Runs[i].ModeName == "plain" {
			plain = &rep.Runs[i]
		} else {
			txn = &rep.Runs[i]
		}
	}
	switch {
	case alo != nil && eo != nil:
		return p.paint(green, "as expected: at-least-once outputs are duplicated for a read_committed reader, exactly-once outputs are not")
	case alo != nil:
		return p.paint(green, "as expected: at-least-once outputs are duplicated for a read_committed reader, none lost")
	case eo != nil:
		return p.paint(green, "as expected: a read_committed reader sees every output exactly once, and every invariant holds")
	case plain != nil && txn != nil && len(plain.Violations) > 0 && len(txn.Violations) == 0:
		return p.paint(green, "as expected: the corruption is reproduced without the fence and prevented with it")
	case txn != nil && len(txn.Violations) == 0:
		return p.paint(green, "as expected: every invariant holds with the fence")
	}
	return p.paint(green, "as expected")
}
