package history

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// AnomalyKind names what a checker found.
type AnomalyKind string

// The anomalies.
const (
	// LostWrite: an acknowledged snapshot write, the newest of its key when
	// a recovery read began, is missing from what the read returned.
	LostWrite AnomalyKind = "lost-write"
	// AbortedRead: a read returned a snapshot that only fenced, failed
	// or abandoned writes wrote (a recovery read, a committed read of a
	// member, a Query, or a view's change, a View).
	AbortedRead AnomalyKind = "aborted-read"
	// PhantomRead: a read returned a snapshot that no write wrote (a
	// Query or a View: none before it).
	PhantomRead AnomalyKind = "phantom-read"
	// DuplicatedFold: an acknowledged snapshot folds an input event twice.
	DuplicatedFold AnomalyKind = "duplicated-fold"
	// LostFold: an acknowledged snapshot misses an input event at or below
	// its offset, or the final read misses one.
	LostFold AnomalyKind = "lost-fold"
	// WrongState: an acknowledged snapshot is not the fold of its key's
	// events up to its offset, in a way that no single duplicated or lost
	// event explains.
	WrongState AnomalyKind = "wrong-state"
	// Regression: an acknowledged write of a key went back to an older
	// input offset than one acknowledged before it.
	Regression AnomalyKind = "regression"
	// CommitAhead: an acknowledged offset commit passed an input event that
	// no acknowledged snapshot of its key covered.
	CommitAhead AnomalyKind = "commit-ahead"
	// DuplicatedOutput: a read_committed reader of the output topic saw an
	// input event's output more than once.
	DuplicatedOutput AnomalyKind = "duplicated-output"
	// LostOutput: an input event below its partition's acknowledged
	// committed offset has no output a read_committed reader saw.
	LostOutput AnomalyKind = "lost-output"
	// PhantomOutput: a read_committed reader saw an output that names no
	// input event, or more copies of an event's output than emits that may
	// have committed (the rest were in fenced or failed transactions:
	// aborted outputs).
	PhantomOutput AnomalyKind = "phantom-output"
)

// Anomaly is one thing the checker found, with the operations (indexes)
// that show it.
type Anomaly struct {
	Kind   AnomalyKind `json:"kind"`
	Key    string      `json:"key,omitempty"`
	Detail string      `json:"detail"`
	Ops    []int       `json:"ops"`
}

func (a Anomaly) String() string {
	return fmt.Sprintf("%s: %s (ops %v)", a.Kind, a.Detail, a.Ops)
}

// FinalRead is the Detail of the ReadStart of a world's final read, once
// every event has been processed: it must cover every event.
const FinalRead = "final"

// DeltaRead is the Detail of the ReadStart of a delta recovery read (from
// a checkpoint, Offset): what it returns must have been written, as any
// read's, but it need not return what was written below the checkpoint.
const DeltaRead = "delta"

type pk struct {
	p   int32
	key string
}

type checker struct {
	ops    []Op
	events map[pk][]Op // Produce ops by partition and key, in offset order
	out    []Anomaly
}

// Check checks a history and returns its anomalies, in the order of the
// operations that show them. The workload is the worlds' balances fold:
// each event adds its Delta to its key's state; Delta 0 closes the key (a
// tombstone); a state is written as its decimal value.
func Check(ops []Op) []Anomaly {
	c := &checker{ops: ops, events: map[pk][]Op{}}
	for _, op := range ops {
		if op.Kind == Produce {
			k := pk{op.Partition, op.Key}
			c.events[k] = append(c.events[k], op)
		}
	}
	for k := range c.events {
		slices.SortFunc(c.events[k], func(a, b Op) int { return cmp.Compare(a.Offset, b.Offset) })
	}
	c.checkWrites()
	c.checkCommits()
	c.checkReads()
	c.checkOutputs()
	slices.SortStableFunc(c.out, func(a, b Anomaly) int { return cmp.Compare(a.Ops[len(a.Ops)-1], b.Ops[len(b.Ops)-1]) })
	return c.out
}

func (c *checker) report(kind AnomalyKind, key string, ops []int, format string, args ...any) {
	c.out = append(c.out, Anomaly{Kind: kind, Key: key, Detail: fmt.Sprintf(format, args...), Ops: ops})
}

// fold is key k's state after its events up to and including offset.
func (c *checker) fold(k pk, offset int64) (state int, exists bool) {
	for _, e := range c.events[k] {
		if e.Offset > offset {
			break
		}
		if e.Delta == 0 {
			state, exists = 0, false
			continue
		}
		state, exists = state+e.Delta, true
	}
	return state, exists
}

// TimerMark is what a timer's firing adds to its key's state in the
// worlds with timers (world.Config.Timers): a state is the sum of its
// key's events plus TimerMark per firing, and the checks of the fold judge
// the sum (StateSum). Sums stay far below it.
const TimerMark = 1 << 32

// SplitState splits a state into the sum of its key's events and the
// number of timer firings in it.
func SplitState(v int) (sum, firings int) {
	firings = (v + TimerMark/2) / TimerMark
	if v+TimerMark/2 < 0 {
		firings = -((-(v + TimerMark/2) + TimerMark - 1) / TimerMark)
	}
	return v - firings*TimerMark, firings
}

// StateSum is a snapshot's value as the sum of its key's events (the
// value itself if it is not a number).
func StateSum(value string) string {
	v, err := strconv.Atoi(value)
	if err != nil {
		return value
	}
	sum, _ := SplitState(v)
	return strconv.Itoa(sum)
}

func describe(state int, exists bool) string {
	if !exists {
		return "closed"
	}
	return strconv.Itoa(state)
}

func snapshotOf(op Op) string {
	if op.Tombstone {
		return fmt.Sprintf("%s=tombstone@%d", op.Key, op.Offset)
	}
	return fmt.Sprintf("%s=%s@%d", op.Key, op.Value, op.Offset)
}

// checkWrites judges every acknowledged write: its state is the fold of
// its key's events up to its offset (one report per key: a wrong state
// is carried into every later one), and it never goes back to an older
// offset than one acknowledged before it.
func (c *checker) checkWrites() {
	wrong := map[pk]bool{}
	newest := map[pk]Op{}
	for _, op := range c.ops {
		if op.Kind != Write || op.Outcome != OK {
			continue
		}
		k := pk{op.Partition, op.Key}
		if prev, ok := newest[k]; ok && op.Offset < prev.Offset {
			c.report(Regression, op.Key, []int{prev.Index, op.Index},
				"m%d wrote %s after %s was acknowledged (m%d)", op.Member, snapshotOf(op), snapshotOf(prev), prev.Member)
		}
		if prev, ok := newest[k]; !ok || op.Offset >= prev.Offset {
			newest[k] = op
		}
		if wrong[k] {
			continue
		}
		state, exists := c.fold(k, op.Offset)
		if op.Tombstone == !exists && (op.Tombstone || StateSum(op.Value) == strconv.Itoa(state)) {
			continue
		}
		wrong[k] = true
		got, err := strconv.Atoi(StateSum(op.Value))
		kind, why := WrongState, ""
		if err == nil && !op.Tombstone && exists {
			for _, e := range c.events[k] {
				if e.Offset > op.Offset || e.Delta == 0 {
					continue
				}
				if got == state+e.Delta {
					kind, why = DuplicatedFold, fmt.Sprintf(": the event at offset %d (%+d) is in it twice", e.Offset, e.Delta)
					break
				}
				if got == state-e.Delta {
					kind, why = LostFold, fmt.Sprintf(": the event at offset %d (%+d) is missing", e.Offset, e.Delta)
					break
				}
			}
		}
		c.report(kind, op.Key, []int{op.Index},
			"m%d wrote %s, but the fold of %s's events up to offset %d is %s%s", op.Member, snapshotOf(op), op.Key, op.Offset, describe(state, exists), why)
	}
}

// checkCommits judges every acknowledged offset commit: each key's last
// event below the committed offset is covered by an acknowledged
// snapshot of the key written before the commit was acknowledged, or the
// key was closed and has no live snapshot to resurrect.
func (c *checker) checkCommits() {
	newest := map[pk]Op{} // by offset, acknowledged so far
	for _, op := range c.ops {
		switch {
		case op.Kind == Write && op.Outcome == OK:
			k := pk{op.Partition, op.Key}
			if prev, ok := newest[k]; !ok || op.Offset >= prev.Offset {
				newest[k] = op
			}
		case op.Kind == Commit && op.Outcome == OK:
			for _, k := range c.keysOf(op.Partition) {
				var last *Op
				for i, e := range c.events[k] {
					if e.Offset < op.Offset {
						last = &c.events[k][i]
					}
				}
				if last == nil {
					continue
				}
				w, written := newest[k]
				_, exists := c.fold(k, last.Offset)
				switch {
				case written && w.Offset >= last.Offset:
				case !exists && (!written || w.Tombstone):
				default:
					have := "no snapshot"
					ops := []int{last.Index, op.Index}
					if written {
						have = snapshotOf(w)
						ops = []int{last.Index, w.Index, op.Index}
					}
					c.report(CommitAhead, k.key, ops,
						"m%d committed partition %d at %d, past %s's event at offset %d, with %s acknowledged", op.Member, op.Partition, op.Offset, k.key, last.Offset, have)
				}
			}
		}
	}
}

func (c *checker) keysOf(p int32) []pk {
	var out []pk
	for k := range c.events {
		if k.p == p {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b pk) int { return cmp.Compare(a.key, b.key) })
	return out
}

type readState struct {
	start  Op
	got    map[string]Op // each key's last snapshot returned
	expect map[pk]Op     // each key's newest acknowledged write when the read began
}

// checkReads judges every recovery read: what it returned was written by
// a write that may have committed, and a read that ended well returned,
// for each key, at least the newest write acknowledged before it began.
func (c *checker) checkReads() {
	type sk struct {
		p          int32
		key, value string
		offset     int64
		tombstone  bool
	}
	writers := map[sk][]Op{}
	newest := map[pk]Op{}
	reads := map[int]*readState{}
	for _, op := range c.ops {
		switch op.Kind {
		case Write, Abandon:
			id := sk{op.Partition, op.Key, op.Value, op.Offset, op.Tombstone}
			writers[id] = append(writers[id], op)
			if op.Kind == Write && op.Outcome == OK {
				k := pk{op.Partition, op.Key}
				if prev, ok := newest[k]; !ok || op.Offset >= prev.Offset {
					newest[k] = op
				}
			}
		case ReadStart:
			rs := &readState{start: op, got: map[string]Op{}, expect: map[pk]Op{}}
			for k, w := range newest {
				if k.p == op.Partition {
					rs.expect[k] = w
				}
			}
			reads[op.Read] = rs
		case Read:
			if rs := reads[op.Read]; rs != nil {
				rs.got[op.Key] = op
			}
			id := sk{op.Partition, op.Key, op.Value, op.Offset, op.Tombstone}
			ws := writers[id]
			if slices.ContainsFunc(ws, func(w Op) bool { return w.Kind == Write && (w.Outcome == OK || w.Outcome == Unknown) }) {
				continue
			}
			if len(ws) == 0 {
				c.report(PhantomRead, op.Key, []int{op.Index}, "read %d of partition %d (m%d) returned %s, which no write wrote", op.Read, op.Partition, op.Member, snapshotOf(op))
				continue
			}
			c.report(AbortedRead, op.Key, []int{ws[len(ws)-1].Index, op.Index},
				"read %d of partition %d (m%d) returned %s, written only by a write that was %s", op.Read, op.Partition, op.Member, snapshotOf(op), outcomeWord(ws[len(ws)-1]))
		case Query, View:
			// A committed read, and a view of the snapshot topic, show a
			// state some write made durable before it: never a fold not
			// yet written, nor one the fence refused.
			if op.Kind == Query && (op.Outcome != OK || op.Detail != "") {
				continue
			}
			ws := writers[sk{op.Partition, op.Key, op.Value, op.Offset, op.Tombstone}]
			if slices.ContainsFunc(ws, func(w Op) bool { return w.Kind == Write && (w.Outcome == OK || w.Outcome == Unknown) }) {
				continue
			}
			reader := fmt.Sprintf("m%d's committed read of p%d answered", op.Member, op.Partition)
			if op.Kind == View {
				reader = fmt.Sprintf("the view of p%d showed", op.Partition)
			}
			if len(ws) == 0 {
				c.report(PhantomRead, op.Key, []int{op.Index}, "%s %s, which no write before it wrote", reader, snapshotOf(op))
				continue
			}
			c.report(AbortedRead, op.Key, []int{ws[len(ws)-1].Index, op.Index},
				"%s %s, written only by a write that was %s", reader, snapshotOf(op), outcomeWord(ws[len(ws)-1]))
		case ReadEnd:
			rs := reads[op.Read]
			delete(reads, op.Read)
			if rs == nil || op.Outcome != OK || rs.start.Detail == DeltaRead {
				// A delta read returns what was written since its
				// checkpoint: its completeness is the cache's and the
				// delta's together, which the world checks (invariant
				// 9), not the read's alone.
				continue
			}
			c.checkComplete(rs, op, newest)
		}
	}
}

// newerByAnother reports whether n, the newest acknowledged write of w's
// key, is newer than w and was acknowledged to another member than the
// reader after the read began.
func newerByAnother(n, w, start Op) bool {
	return n.Kind == Write && n.Offset > w.Offset && n.Index > start.Index && n.Member != start.Member
}

func outcomeWord(w Op) string {
	if w.Kind == Abandon {
		return "abandoned in an open transaction"
	}
	return string(w.Outcome)
}

func (c *checker) checkComplete(rs *readState, end Op, newest map[pk]Op) {
	keys := make([]pk, 0, len(rs.expect))
	for k := range rs.expect {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b pk) int { return cmp.Compare(a.key, b.key) })
	for _, k := range keys {
		w := rs.expect[k]
		g, ok := rs.got[k.key]
		switch {
		case ok && g.Offset >= w.Offset:
		case !ok && w.Tombstone: // compaction may drop a tombstone
		case newerByAnother(newest[k], w, rs.start):
			// Compaction may drop w for a newer write of the key that
			// another member acknowledged during the read, past its
			// target: the reader is a zombie (a partition's owner is its
			// only writer while it recovers), and its writes are fenced.
		default:
			have := "nothing"
			if ok {
				have = snapshotOf(g)
			}
			c.report(LostWrite, k.key, []int{w.Index, rs.start.Index, end.Index},
				"m%d's write %s was acknowledged before read %d of partition %d began, which returned %s for the key", w.Member, snapshotOf(w), end.Read, k.p, have)
		}
	}
	if rs.start.Detail != FinalRead {
		return
	}
	for _, k := range c.keysOf(rs.start.Partition) {
		evs := c.events[k]
		last := evs[len(evs)-1]
		state, exists := c.fold(k, last.Offset)
		g, ok := rs.got[k.key]
		switch {
		case !exists && (!ok || g.Tombstone):
		case exists && ok && !g.Tombstone && StateSum(g.Value) == strconv.Itoa(state):
		default:
			have := "nothing"
			if ok {
				have = snapshotOf(g)
			}
			c.report(LostFold, k.key, []int{last.Index, end.Index},
				"the final read returned %s for %s, the fold of all its %d events is %s", have, k.key, len(evs), describe(state, exists))
		}
	}
}

// checkOutputs judges what a read_committed reader of the output topic
// saw at the end (OutputRead, Output), if the history has such a read:
// every input event below its partition's acknowledged committed offset
// has exactly one output, and no output names no event or comes from a
// transaction that did not commit.
func (c *checker) checkOutputs() {
	type ev struct {
		p   int32
		off int64
	}
	read := false
	seen := map[ev][]int{} // the Output ops of each event
	var order []ev
	emits := map[ev][]Op{}
	committed := map[int32]int64{}
	for _, op := range c.ops {
		switch {
		case op.Kind == OutputRead && op.Detail == ReadCommitted:
			read = true
		case op.Kind == Output && op.Detail == ReadCommitted:
			e := ev{op.Partition, op.Offset}
			if _, ok := seen[e]; !ok {
				order = append(order, e)
			}
			seen[e] = append(seen[e], op.Index)
		case op.Kind == Emit:
			e := ev{op.Partition, op.Offset}
			emits[e] = append(emits[e], op)
		case op.Kind == Commit && op.Outcome == OK:
			committed[op.Partition] = max(committed[op.Partition], op.Offset)
		}
	}
	if !read {
		return
	}
	produced := map[ev]Op{}
	var inputs []Op
	for _, op := range c.ops {
		if op.Kind == Produce {
			produced[ev{op.Partition, op.Offset}] = op
			inputs = append(inputs, op)
		}
	}
	for _, e := range order {
		got := seen[e]
		in, ok := produced[e]
		if !ok {
			c.report(PhantomOutput, "", got, "the output %q names no input event", c.ops[got[0]].Value)
			continue
		}
		if len(got) > 1 {
			c.report(DuplicatedOutput, in.Key, append([]int{in.Index}, got...),
				"a read_committed reader saw the output of p%d@%d (key %s) %d times", e.p, e.off, in.Key, len(got))
		}
		es := emits[e]
		if len(es) == 0 {
			continue // the world recorded no emits: nothing to tell an aborted output by
		}
		mayCommit := 0
		var aborted []int
		for _, x := range es {
			if x.Outcome == OK || x.Outcome == Unknown {
				mayCommit++
			} else {
				aborted = append(aborted, x.Index)
			}
		}
		if len(got) > mayCommit {
			c.report(PhantomOutput, in.Key, append(aborted, got...),
				"a read_committed reader saw the output of p%d@%d (key %s) %d times, but only %d of its %d emits may have committed (the others were in transactions %s)",
				e.p, e.off, in.Key, len(got), mayCommit, len(es), outcomesOf(es))
		}
	}
	for _, in := range inputs {
		e := ev{in.Partition, in.Offset}
		if in.Offset >= committed[in.Partition] || len(seen[e]) > 0 {
			continue
		}
		c.report(LostOutput, in.Key, []int{in.Index},
			"the event at p%d@%d (key %s) is below the committed offset %d, but a read_committed reader saw no output of it", in.Partition, in.Offset, in.Key, committed[in.Partition])
	}
}

func outcomesOf(es []Op) string {
	var out []string
	for _, e := range es {
		if e.Outcome != OK && e.Outcome != Unknown {
			out = append(out, string(e.Outcome))
		}
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ", ")
}

// OutputCounts counts the outputs a reader of the given isolation saw at
// the end (Output ops), by the input event they name, "partition:offset".
func OutputCounts(ops []Op, isolation string) map[string]int {
	out := map[string]int{}
	for _, op := range ops {
		if op.Kind == Output && op.Detail == isolation {
			out[op.Value]++
		}
	}
	return out
}

// KeyState is one key's state at the end of a history: what the final
// read returned (Got) and the fold of all the key's input events (Want),
// each a decimal value, "closed", or "" (nothing).
type KeyState struct {
	Key       string `json:"key"`
	Partition int32  `json:"partition"`
	Got       string `json:"got"`
	Want      string `json:"want"`
}

// OK reports whether the final read returned the correct state.
func (k KeyState) OK() bool {
	return k.Got == k.Want || (k.Want == "closed" && k.Got == "")
}

// FinalStates lists every key with input events, in key order, with what
// the final read (FinalRead) returned and what it should have.
func FinalStates(ops []Op) []KeyState {
	c := &checker{ops: ops, events: map[pk][]Op{}}
	for _, op := range ops {
		if op.Kind == Produce {
			k := pk{op.Partition, op.Key}
			c.events[k] = append(c.events[k], op)
		}
	}
	final := map[int]bool{}
	got := map[pk]Op{}
	for _, op := range ops {
		switch {
		case op.Kind == ReadStart && op.Detail == FinalRead:
			final[op.Read] = true
		case op.Kind == Read && final[op.Read]:
			got[pk{op.Partition, op.Key}] = op
		}
	}
	var out []KeyState
	for k, evs := range c.events {
		slices.SortFunc(evs, func(a, b Op) int { return cmp.Compare(a.Offset, b.Offset) })
		state, exists := c.fold(k, evs[len(evs)-1].Offset)
		ks := KeyState{Key: k.key, Partition: k.p, Want: describe(state, exists)}
		if g, ok := got[k]; ok {
			ks.Got = StateSum(g.Value)
			if g.Tombstone {
				ks.Got = "closed"
			}
		}
		out = append(out, ks)
	}
	slices.SortFunc(out, func(a, b KeyState) int { return cmp.Compare(a.Key, b.Key) })
	return out
}
