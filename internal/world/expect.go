package world

import (
	"fmt"
	"strings"
	"time"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/store"
)

// Run is what a scenario's run left: its history and the invariant
// violations found.
type Run struct {
	Ops        []history.Op
	Violations []Violation
}

// Expectation is one outcome a named scenario must have.
type Expectation struct {
	// Says what must happen, in words.
	Says string
	// Failed returns why the run does not show it ("": it does).
	Failed func(Run) string
}

// Check returns the expectations run does not meet, each with why.
func Check(run Run, exp []Expectation) []string {
	var out []string
	for _, e := range exp {
		if why := e.Failed(run); why != "" {
			out = append(out, fmt.Sprintf("%s: %s", e.Says, why))
		}
	}
	return out
}

// HoldsAll: no invariant is violated.
func HoldsAll() Expectation {
	return Expectation{Says: "every invariant holds", Failed: func(r Run) string {
		if len(r.Violations) == 0 {
			return ""
		}
		return fmt.Sprintf("%d violations, the first: %s", len(r.Violations), r.Violations[0])
	}}
}

// Violates: each of the invariants is violated (a negative outcome: the
// corruption the fence prevents).
func Violates(invariants ...int) Expectation {
	var names []string
	for _, n := range invariants {
		names = append(names, fmt.Sprintf("%d %s", n, InvariantName(n)))
	}
	return Expectation{Says: "violates " + strings.Join(names, ", "), Failed: func(r Run) string {
		var missing []string
		for _, n := range invariants {
			if !HasViolation(r.Violations, n) {
				missing = append(missing, InvariantName(n))
			}
		}
		if len(missing) == 0 {
			return ""
		}
		return "not violated: " + strings.Join(missing, ", ")
	}}
}

func storeCalls(r Run, member int) []history.Op {
	var out []history.Op
	for _, op := range r.Ops {
		if op.Member == member && (op.Kind == history.Write || op.Kind == history.Commit) {
			out = append(out, op)
		}
	}
	return out
}

// Fenced: a write or commit of member after step is fenced, and none of
// them is acknowledged.
func Fenced(member, step int) Expectation {
	return Expectation{Says: fmt.Sprintf("m%d's writes after step %d are fenced, none lands", member, step), Failed: func(r Run) string {
		fenced := false
		for _, op := range storeCalls(r, member) {
			if op.StepNo <= step && op.StepNo != 0 {
				continue
			}
			if op.StepNo == 0 {
				break // quiescence: the member may rejoin
			}
			switch op.Outcome {
			case history.OK:
				return "acknowledged: " + op.String()
			case history.Fenced:
				fenced = true
			}
		}
		if !fenced {
			return "nothing was fenced"
		}
		return ""
	}}
}

// Lands: the writes and commits of member after step are acknowledged,
// and at least one was made.
func Lands(member, step int) Expectation {
	return Expectation{Says: fmt.Sprintf("m%d's writes after step %d land", member, step), Failed: func(r Run) string {
		n := 0
		for _, op := range storeCalls(r, member) {
			if op.StepNo <= step && op.StepNo != 0 {
				continue
			}
			if op.StepNo == 0 {
				break
			}
			if op.Outcome != history.OK {
				return "not acknowledged: " + op.String()
			}
			n++
		}
		if n == 0 {
			return "nothing was written"
		}
		return ""
	}}
}

// NeverFenced: no store call of any member is fenced.
func NeverFenced() Expectation {
	return Expectation{Says: "no member is fenced", Failed: func(r Run) string {
		for _, op := range r.Ops {
			if op.Outcome == history.Fenced {
				return op.String()
			}
		}
		return ""
	}}
}

// CommitsUnder: member's offset commits are acknowledged under at least
// n generations (or member epochs) of one assignment: the group moved on
// and the member's retained partitions went on committing.
func CommitsUnder(member, n int) Expectation {
	return Expectation{Says: fmt.Sprintf("m%d commits under %d generations without losing its partitions", member, n), Failed: func(r Run) string {
		gens := map[int32]bool{}
		for _, op := range r.Ops {
			if op.Member == member && op.Kind == history.Commit && op.Outcome == history.OK && op.StepNo != 0 {
				gens[op.Generation] = true
			}
		}
		if len(gens) < n {
			return fmt.Sprintf("acknowledged under %d", len(gens))
		}
		return ""
	}}
}

// NothingUngated: no write or commit goes out with the pre-join
// generation: each one made before the member's consumer knew its
// generation was refused (missing identity) before anything was sent.
func NothingUngated() Expectation {
	return Expectation{Says: "nothing goes out with the pre-join generation: a flush before the member knows its generation is refused for the missing identity", Failed: func(r Run) string {
		for _, op := range r.Ops {
			if (op.Kind == history.Write || op.Kind == history.Commit) && op.Generation < 1 && op.Outcome != history.NoIdentity {
				return op.String()
			}
		}
		return ""
	}}
}

// Recovers: member's last recovery of key's partition returns key's
// snapshot with value.
func Recovers(member int, key, value string) Expectation {
	return Expectation{Says: fmt.Sprintf("m%d recovers %s=%s", member, key, value), Failed: func(r Run) string {
		got := ""
		for _, op := range r.Ops {
			if op.Member == member && op.Kind == history.Read && op.Key == key {
				got = op.Value
			}
		}
		if got != value {
			return fmt.Sprintf("it recovered %q", got)
		}
		return ""
	}}
}

// RecoveryTakes: member's slowest recovery that ends well takes between
// lo and hi of virtual time.
func RecoveryTakes(member int, lo, hi time.Duration) Expectation {
	return Expectation{Says: fmt.Sprintf("m%d's recoveries complete, the slowest in %s to %s", member, lo, hi), Failed: func(r Run) string {
		starts := map[int]history.Op{}
		slowest := time.Duration(-1)
		for _, op := range r.Ops {
			if op.Member != member {
				continue
			}
			switch op.Kind {
			case history.ReadStart:
				starts[op.Read] = op
			case history.ReadEnd:
				if op.Outcome == history.OK {
					slowest = max(slowest, op.At-starts[op.Read].At)
				}
			}
		}
		switch {
		case slowest < 0:
			return "no recovery completed"
		case slowest < lo || slowest > hi:
			return fmt.Sprintf("the slowest took %s", slowest)
		}
		return ""
	}}
}

// Stalls: a recovery of member fails at its stall deadline with cause.
func Stalls(member int, cause store.StallCause) Expectation {
	return Expectation{Says: fmt.Sprintf("m%d's recovery stalls, diagnosed as %s", member, cause), Failed: func(r Run) string {
		for _, op := range r.Ops {
			if op.Member == member && op.Kind == history.ReadEnd && op.Outcome != history.OK {
				if op.Detail == cause.String() {
					return ""
				}
				return "it failed otherwise: " + op.String()
			}
		}
		return "no recovery failed"
	}}
}

// NoStall: no recovery fails.
func NoStall() Expectation {
	return Expectation{Says: "no recovery fails", Failed: func(r Run) string {
		for _, op := range r.Ops {
			if op.Kind == history.ReadEnd && op.Outcome != history.OK {
				return op.String()
			}
		}
		return ""
	}}
}

// RevokeFlush: member's revoke-time flush (its last write or commit) of
// the partition that taker then acquires from it has outcome.
func RevokeFlush(member, taker int, outcome history.Outcome) Expectation {
	return Expectation{Says: fmt.Sprintf("m%d's revoke-time flush of the partition m%d takes is %s", member, taker, outcome), Failed: func(r Run) string {
		last := map[int32]history.Op{}
		for _, op := range r.Ops {
			switch {
			case op.Member == member && (op.Kind == history.Write || op.Kind == history.Commit):
				last[op.Partition] = op
			case op.Member == taker && op.Kind == history.Acquire:
				c, ok := last[op.Partition]
				if !ok {
					continue
				}
				if c.Outcome != outcome {
					return "it was " + c.String()
				}
				return ""
			}
		}
		return "no handover of a partition m" + fmt.Sprint(member) + " had committed"
	}}
}

// TakesOverBeforeQuiesce: member takes over a partition during one of
// the scenario's steps, not only once the quiesce polls it.
func TakesOverBeforeQuiesce(member int) Expectation {
	return Expectation{Says: fmt.Sprintf("m%d takes over a partition before the quiesce", member), Failed: func(r Run) string {
		for _, op := range r.Ops {
			if op.Kind == history.Acquire && op.Outcome == history.OK && op.Member == member && op.StepNo > 0 {
				return ""
			}
		}
		return fmt.Sprintf("m%d took nothing over before the quiesce", member)
	}}
}

// TakesOverAfter: member takes over a partition after step and before
// the quiesce.
func TakesOverAfter(member, step int) Expectation {
	return Expectation{Says: fmt.Sprintf("m%d takes over a partition after step %d, before the quiesce", member, step), Failed: func(r Run) string {
		for _, op := range r.Ops {
			if op.Kind == history.Acquire && op.Outcome == history.OK && op.Member == member && op.StepNo > step {
				return ""
			}
		}
		return fmt.Sprintf("m%d took nothing over after step %d before the quiesce", member, step)
	}}
}

// WriteLands: a snapshot write of member after step is acknowledged.
func WriteLands(member, step int) Expectation {
	return Expectation{Says: fmt.Sprintf("a write of m%d after step %d lands", member, step), Failed: func(r Run) string {
		for _, op := range storeCalls(r, member) {
			if op.Kind == history.Write && op.StepNo > step && op.Outcome == history.OK {
				return ""
			}
		}
		return fmt.Sprintf("no write of m%d after step %d was acknowledged", member, step)
	}}
}
