package world

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/snapfence/snapfence/internal/history"
)

// The levels at which two worlds' runs of the same steps are compared,
// each a canonical text of what one history says at that level: equal
// texts agree, and a diff of two shows where they part.
//
//   - Outcome: what a user of the state would see at the end: each key's
//     final read_committed state, the invariants violated, the last
//     acknowledged commit of each partition, and each input partition's
//     committed and end offsets at quiescence.
//   - Fences: which calls were fenced, at which step, by which member,
//     of which partition, with which Kafka error code.
//   - Takeovers: which member took over which partition at which step.
//
// Within a step the order of calls is the clients' scheduling, which no
// world fixes, so each level lists its items sorted, not as they came.

// Outcome is a history's outcome level (ops, with the run's violations).
func Outcome(ops []history.Op, vs []Violation) string {
	var b strings.Builder
	for _, k := range history.FinalStates(ops) {
		fmt.Fprintf(&b, "final p%d %s=%s\n", k.Partition, k.Key, k.Got)
	}
	invariants := map[int]bool{}
	for _, v := range vs {
		invariants[v.Invariant] = true
	}
	for _, n := range slices.Sorted(maps.Keys(invariants)) {
		fmt.Fprintf(&b, "violated invariant %d\n", n)
	}
	commits := map[int32]int64{}
	for _, op := range ops {
		if op.Kind == history.Commit && op.Outcome == history.OK {
			commits[op.Partition] = max(commits[op.Partition], op.Offset)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(commits)) {
		fmt.Fprintf(&b, "committed p%d@%d\n", p, commits[p])
	}
	for _, op := range ops {
		if op.Kind == history.Offsets {
			fmt.Fprintf(&b, "at quiescence p%d committed %d of %d\n", op.Partition, op.Offset, op.HW)
		}
	}
	return b.String()
}

// Fences is a history's fence level.
func Fences(ops []history.Op) string {
	var lines []string
	for _, op := range ops {
		if op.Outcome == history.Fenced {
			lines = append(lines, fmt.Sprintf("step %03d m%d %s p%d %s", op.StepNo, op.Member, op.Kind, op.Partition, op.Code))
		}
	}
	return sortedLines(lines)
}

// KafkaCodes reads kfake's PRODUCER_FENCED in a fence level as Kafka 4's
// INVALID_PRODUCER_EPOCH: kfake answers an old producer epoch's Produce
// with the first, Kafka with the second, and it is the same fence.
func KafkaCodes(fences string) string {
	return strings.ReplaceAll(fences, "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")
}

// Takeovers is a history's takeover level: each acknowledged takeover.
func Takeovers(ops []history.Op) string {
	var lines []string
	for _, op := range ops {
		if op.Kind == history.Acquire && op.Outcome == history.OK {
			lines = append(lines, fmt.Sprintf("step %03d m%d takes over p%d", op.StepNo, op.Member, op.Partition))
		}
	}
	return sortedLines(lines)
}

func sortedLines(lines []string) string {
	slices.SortFunc(lines, cmp.Compare)
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}
