package world

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/internal/history"
)

// What every world shares: the engines' fold and codec, the input's
// partitioning, the ledger of input events that the invariants are
// checked against, and those checks.

// Fold is the engines' fold: balances per key, deposits and withdrawals,
// "close" deletes; one output per event, naming it ("partition:offset").
func Fold(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
	out := []engine.Output{{Topic: OutputTopic, Key: key, Value: []byte(history.OutputValue(rec.Partition, rec.Offset))}}
	n, closed, d, err := parseValue(string(rec.Value))
	switch {
	case err != nil:
		return engine.Result[int]{}, err
	case closed:
		return engine.Delete[int]().With(out...), nil
	case d > 0: // Config.Timers
		return engine.Set(state + n).With(out...).SetTimer(engine.Timer{Kind: engine.ProcessingTime, At: TimerAt(rec.Timestamp, d, rec.Offset)}), nil
	}
	return engine.Set(state + n).With(out...), nil
}

// IntCodec encodes the fold's state as decimal text.
type IntCodec struct{}

func (IntCodec) Encode(n int) ([]byte, error) { return strconv.AppendInt(nil, int64(n), 10), nil }
func (IntCodec) Decode(b []byte) (int, error) { return strconv.Atoi(string(b)) }

// PartitionOf is the input partition of a key among partitions.
func PartitionOf(key string, partitions int) int32 {
	var h uint32
	for _, b := range []byte(key) {
		h = h*31 + uint32(b)
	}
	return int32(h % uint32(partitions))
}

// Value is an input event's value for delta: the amount, or "close".
func Value(delta int) string {
	if delta == 0 {
		return "close"
	}
	return strconv.Itoa(delta)
}

// Event is one input event.
type Event struct {
	Partition int32
	Offset    int64
	Key       string
	Delta     int // 0: close
	// TimerAt is when the timer the event set is due (Config.Timers);
	// zero if it set none.
	TimerAt time.Time
}

// Ledger is a world's input events in production order: the truth.
type Ledger []Event

// FoldOf folds key's events that keep returns, as the engines' fold does.
func (l Ledger) FoldOf(key string, keep func(Event) bool) (state int, exists bool) {
	for _, e := range l {
		if e.Key != key || !keep(e) {
			continue
		}
		if e.Delta == 0 {
			state, exists = 0, false
			continue
		}
		state, exists = state+e.Delta, true
	}
	return state, exists
}

func (l Ledger) count(key string) int {
	n := 0
	for _, e := range l {
		if e.Key == key {
			n++
		}
	}
	return n
}

// Visible is a key's latest snapshot as read back.
type Visible struct {
	Offset    int64
	Value     string
	Tombstone bool
}

func describe(v Visible, ok bool) string {
	switch {
	case !ok:
		return "without a snapshot"
	case v.Tombstone:
		return fmt.Sprintf("deleted at input offset %d", v.Offset)
	}
	return fmt.Sprintf("%s as of input offset %d", v.Value, v.Offset)
}

// stateOf names a visible snapshot's state: its value, or that the key
// was deleted (a tombstone has no value to show).
func stateOf(v Visible) string {
	if v.Tombstone {
		return "deleted"
	}
	return "value " + v.Value
}

// Violate is a violation of invariant n after step (0: at quiescence).
func Violate(n, step int, format string, args ...any) Violation {
	return Violation{Invariant: n, Name: InvariantName(n), Step: step, Detail: fmt.Sprintf(format, args...)}
}

// CheckNoStaleOverwrite is invariant 1: no key's readable snapshot goes
// back to an older fold than seen (the highest offset seen per key, which
// it updates).
func CheckNoStaleOverwrite(step int, seen map[string]int64, snaps map[string]Visible) []Violation {
	var vs []Violation
	for _, key := range SortedKeys(snaps) {
		v := snaps[key]
		if prev, ok := seen[key]; ok && v.Offset < prev {
			vs = append(vs, Violate(1, step,
				"key %s: the visible snapshot went back from the fold up to input offset %d to the one up to %d (%s)", key, prev, v.Offset, stateOf(v)))
		}
		seen[key] = max(seen[key], v.Offset)
	}
	return vs
}

// CheckCommittedCovered is invariant 2: every event below its partition's
// committed offset is in its key's committed snapshot (durable), or the
// key's fold is closed. Partitions for which check is false are skipped.
func (l Ledger) CheckCommittedCovered(step int, committed []int64, check func(partition int32) bool, durable map[string]Visible) []Violation {
	last := map[string]Event{}
	for _, e := range l {
		if check(e.Partition) && e.Offset < committed[e.Partition] {
			last[e.Key] = e
		}
	}
	var vs []Violation
	for _, key := range SortedKeys(last) {
		e := last[key]
		v, ok := durable[key]
		end := committed[e.Partition]
		_, open := l.FoldOf(key, func(x Event) bool { return x.Partition == e.Partition && x.Offset < end })
		switch {
		case ok && v.Offset >= e.Offset:
		case !ok && !open:
		default:
			vs = append(vs, Violate(2, step,
				"input partition %d is committed at %d, but key %s's event at offset %d is not in its committed snapshot (%s)",
				e.Partition, end, key, e.Offset, describe(v, ok)))
		}
	}
	return vs
}

// CheckAtQuiescence is invariants 3 (every key's snapshot is the exact
// fold of its events) and 7 (every event has an output; outputs counts
// them by "partition:offset").
func (l Ledger) CheckAtQuiescence(snaps map[string]Visible, outputs map[string]int) []Violation {
	var vs []Violation
	keys := map[string]bool{}
	for _, e := range l {
		keys[e.Key] = true
	}
	for _, key := range SortedKeys(keys) {
		want, exists := l.FoldOf(key, func(Event) bool { return true })
		v, ok := snaps[key]
		switch {
		case !exists && (!ok || v.Tombstone):
		case exists && ok && !v.Tombstone && history.StateSum(v.Value) == fmt.Sprint(want):
		default:
			wantS := "closed"
			if exists {
				wantS = fmt.Sprint(want)
			}
			vs = append(vs, Violate(3, 0, "key %s is %s, the exact fold of its %d events is %s", key, describe(v, ok), l.count(key), wantS))
		}
	}
	for _, e := range l {
		if outputs[history.OutputValue(e.Partition, e.Offset)] == 0 {
			vs = append(vs, Violate(7, 0, "the event at %s/%d offset %d (key %s) has no output", InputTopic, e.Partition, e.Offset, e.Key))
		}
	}
	return vs
}

// SortedKeys is m's keys in order.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Stepper is a world: the sim world, or the kfake world.
type Stepper interface {
	Apply(Step) []Violation
	Quiesce() []Violation
	Close()
}

// RunSteps applies steps to w, then quiesces it, and returns the
// violations, stopping at the first step that had any; it closes w.
func RunSteps(w Stepper, steps []Step) []Violation {
	defer w.Close()
	for _, s := range steps {
		if vs := w.Apply(s); len(vs) > 0 {
			return vs
		}
	}
	return w.Quiesce()
}

// ApplyAll applies every step to w, a violation not ending the run (a
// timeline shows what followed), then quiesces it, and returns the
// violations. It leaves w open: its history is the caller's to read.
func ApplyAll(w interface {
	Apply(Step) []Violation
	Quiesce() []Violation
}, steps []Step) []Violation {
	var vs []Violation
	for _, s := range steps {
		vs = append(vs, w.Apply(s)...)
	}
	return append(vs, w.Quiesce()...)
}

// historyInvariant is the invariant each anomaly of the history checker
// breaks.
var historyInvariant = map[history.AnomalyKind]int{
	history.Regression:     1,
	history.CommitAhead:    2,
	history.DuplicatedFold: 3,
	history.LostFold:       3,
	history.WrongState:     3,
	history.AbortedRead:    4,
	history.PhantomRead:    4,
	history.LostWrite:      5,

	history.DuplicatedOutput: 8,
	history.LostOutput:       8,
	history.PhantomOutput:    8,
}

// CheckHistory runs the history checker (internal/history) over a world's
// recorded history and reports each anomaly as a violation of the
// invariant it breaks, after the step of its last operation.
func CheckHistory(ops []history.Op) []Violation {
	var vs []Violation
	for _, a := range history.Check(ops) {
		step := ops[a.Ops[len(a.Ops)-1]].StepNo
		vs = append(vs, Violate(historyInvariant[a.Kind], step, "history: %s", a))
	}
	return vs
}
