// Package history records what a world's clients did and saw, and checks
// it, in the spirit of Jepsen's Kafka workload: every input event
// produced, every snapshot write and offset commit made through the Store
// API with its outcome, and every snapshot a recovery read returned.
//
// The checker (Check) knows nothing of the engine's own bookkeeping (its
// cache, its committable offsets): it judges the history against the
// input events alone, with its own model of the workload's fold, and
// reports lost writes, aborted reads, duplicated and lost folds, and
// regressions.
//
// The recorder sits between an engine and its store (Backend), so the
// same history is taken in every world: the simulated cluster, kfake and
// a real broker.
package history

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kind names an operation.
type Kind string

// The operations of a history.
const (
	// Step is a step of the world's driver (Detail says which).
	Step Kind = "step"
	// Produce is an input event: Partition, Offset, Key, Delta (0: close).
	Produce Kind = "produce"
	// Write is one snapshot write of Member: Partition (the input
	// partition), Key, Offset (the input offset of the last event folded),
	// Value, Tombstone, and its Outcome.
	Write Kind = "write"
	// Commit is an offset commit of Member: Partition, Offset (the offset
	// committed), Generation, and its Outcome.
	Commit Kind = "commit"
	// ReadStart begins recovery read Read of Partition by Member; Detail
	// DeltaRead marks a delta read from the checkpoint at Offset.
	ReadStart Kind = "read-start"
	// Read is one snapshot recovery read Read returned.
	Read Kind = "read"
	// ReadEnd ends recovery read Read: Outcome ok, or failed with Err.
	ReadEnd Kind = "read-end"
	// Acquire is Member's takeover of Partition (Offset: the offset it
	// resumes from), and its Outcome.
	Acquire Kind = "acquire"
	// Abandon is a write left in an open transaction by a crashed
	// process; nothing ever acknowledged it.
	Abandon Kind = "abandon"
	// Member is a member's state as the world saw it after a step, when it
	// changed: Detail (running, paused, crashed, absent), Generation (its
	// consumer's generation or member epoch), Owned (its partitions).
	Member Kind = "member"
	// Log is a snapshot partition's ends after a step, when they changed:
	// HW (the high watermark) and LSO (the last stable offset).
	Log Kind = "log"
	// Emit is one output record Member's engine handed on: Partition and
	// Offset name the input event it is the output of (ParseOutput), Key
	// and Value are the record's; its Outcome is the plain produce's (at
	// least once) or that of the transaction that carried it (exactly
	// once).
	Emit Kind = "emit"
	// OutputRead begins a reader's read of the whole output topic, once
	// every event has been processed: Detail is its isolation
	// (ReadCommitted or ReadUncommitted). The Output ops after it with the
	// same Detail are what it saw.
	OutputRead Kind = "output-read"
	// Offsets is an input partition's offsets once the world quiesced,
	// before its final read: Partition, Offset (the group's committed
	// offset, 0 if none) and HW (the input's end offset).
	Offsets Kind = "offsets"
	// Unexpressed is a step the world could not carry out (Detail says
	// why): a compaction or a truncation on a real broker.
	Unexpressed Kind = "unexpressed"
	// Drift is, on a world in real time, how far its wall time ran past
	// the time its steps asked for, once it quiesces (Detail).
	Drift Kind = "drift"
	// Query is Member's committed read (engine.ReadCommitted) of Key, of
	// input Partition: Value and Offset are the state it answered and the
	// offset of the last event folded into it, Outcome OK; Detail
	// QueryAbsent if it answered no state, QueryNotOwned (Outcome
	// Failed, Err) if the member does not serve the partition.
	Query Kind = "query"
	// View is a change the world's view of the snapshot topic applied:
	// Partition, Key, Value or Tombstone, and Offset (the input offset of
	// the last event folded into the state).
	View Kind = "view"
	// Output is one record an output reader saw (Detail: its isolation):
	// Partition and Offset name the input event it is the output of (-1
	// and -1 if its value names none), Key and Value are the record's.
	Output Kind = "output"
)

// The details of a Query that answered no state.
const (
	QueryAbsent   = "absent"
	QueryNotOwned = "not-owned"
)

// The isolations of an output reader (OutputRead, Output: Detail).
const (
	ReadCommitted   = "read_committed"
	ReadUncommitted = "read_uncommitted"
)

// OutputValue is the value of the output of the input event at
// partition@offset, "partition:offset": what ParseOutput reads.
func OutputValue(partition int32, offset int64) string {
	return strconv.FormatInt(int64(partition), 10) + ":" + strconv.FormatInt(offset, 10)
}

// ParseOutput reads the input event an output's value names,
// "partition:offset"; ok is false if it names none.
func ParseOutput(value string) (partition int32, offset int64, ok bool) {
	p, o, found := strings.Cut(value, ":")
	if !found {
		return -1, -1, false
	}
	pn, err1 := strconv.ParseInt(p, 10, 32)
	on, err2 := strconv.ParseInt(o, 10, 64)
	if err1 != nil || err2 != nil {
		return -1, -1, false
	}
	return int32(pn), on, true
}

// Outcome is how a write, commit or read ended.
type Outcome string

// The outcomes.
const (
	// OK: acknowledged (durable, committed).
	OK Outcome = "ok"
	// Fenced: refused by the fence (a stale owner); definitely not
	// committed.
	Fenced Outcome = "fenced"
	// Failed: refused or aborted; definitely not committed in the
	// transactional mode (a plain write's failure is indeterminate).
	Failed Outcome = "failed"
	// Unknown: the caller gave up (its context ended); it may have
	// committed.
	Unknown Outcome = "unknown"
	// NoIdentity: refused before anything was sent, for want of a group
	// identity (the consumer had not joined): nothing committed.
	NoIdentity Outcome = "no-identity"
)

// Op is one operation of a history. Fields an operation's kind does not
// use are zero.
type Op struct {
	Index      int           `json:"index"`
	At         time.Duration `json:"at"`             // virtual time since the world began
	StepNo     int           `json:"step,omitempty"` // the driver's step during which it happened
	Kind       Kind          `json:"kind"`
	Member     int           `json:"member"`
	Partition  int32         `json:"partition"`
	Key        string        `json:"key,omitempty"`
	Offset     int64         `json:"offset"`
	Value      string        `json:"value,omitempty"`
	Tombstone  bool          `json:"tombstone,omitempty"`
	Delta      int           `json:"delta,omitempty"`
	Generation int32         `json:"generation,omitempty"`
	Owned      []int32       `json:"owned,omitempty"`
	HW         int64         `json:"hw,omitempty"`
	LSO        int64         `json:"lso,omitempty"`
	Read       int           `json:"read,omitempty"`
	Outcome    Outcome       `json:"outcome,omitempty"`
	Err        string        `json:"err,omitempty"`
	// Code is the Kafka error code the call was answered with
	// (ILLEGAL_GENERATION, PRODUCER_FENCED, ...), where Err carries one:
	// the field the worlds are compared by, as their messages differ.
	Code   string `json:"code,omitempty"`
	Detail string `json:"detail,omitempty"`
}

func (o Op) String() string {
	switch o.Kind {
	case Step:
		return fmt.Sprintf("#%d step %d: %s", o.Index, o.StepNo, o.Detail)
	case Produce:
		return fmt.Sprintf("#%d produce p%d@%d %s %+d", o.Index, o.Partition, o.Offset, o.Key, o.Delta)
	case Write, Abandon:
		v := o.Value
		if o.Tombstone {
			v = "tombstone"
		}
		return fmt.Sprintf("#%d m%d %s p%d %s=%s@%d: %s%s", o.Index, o.Member, o.Kind, o.Partition, o.Key, v, o.Offset, o.Outcome, errSuffix(o.Err))
	case Commit:
		return fmt.Sprintf("#%d m%d commit p%d offset %d generation %d: %s%s", o.Index, o.Member, o.Partition, o.Offset, o.Generation, o.Outcome, errSuffix(o.Err))
	case Acquire:
		return fmt.Sprintf("#%d m%d acquire p%d (resumes at %d): %s%s", o.Index, o.Member, o.Partition, o.Offset, o.Outcome, errSuffix(o.Err))
	case ReadStart:
		if o.Detail == DeltaRead {
			return fmt.Sprintf("#%d m%d read %d of p%d starts (a delta from offset %d)", o.Index, o.Member, o.Read, o.Partition, o.Offset)
		}
		return fmt.Sprintf("#%d m%d read %d of p%d starts", o.Index, o.Member, o.Read, o.Partition)
	case Read:
		v := o.Value
		if o.Tombstone {
			v = "tombstone"
		}
		return fmt.Sprintf("#%d m%d read %d of p%d: %s=%s@%d", o.Index, o.Member, o.Read, o.Partition, o.Key, v, o.Offset)
	case ReadEnd:
		return fmt.Sprintf("#%d m%d read %d of p%d ends: %s%s", o.Index, o.Member, o.Read, o.Partition, o.Outcome, errSuffix(o.Err))
	case View:
		v := o.Value
		if o.Tombstone {
			v = "tombstone"
		}
		return fmt.Sprintf("#%d view of p%d: %s=%s@%d", o.Index, o.Partition, o.Key, v, o.Offset)
	case Query:
		switch o.Detail {
		case QueryAbsent:
			return fmt.Sprintf("#%d m%d query p%d %s: no state", o.Index, o.Member, o.Partition, o.Key)
		case QueryNotOwned:
			return fmt.Sprintf("#%d m%d query p%d %s: not owned%s", o.Index, o.Member, o.Partition, o.Key, errSuffix(o.Err))
		}
		return fmt.Sprintf("#%d m%d query p%d: %s=%s@%d", o.Index, o.Member, o.Partition, o.Key, o.Value, o.Offset)
	case Member:
		return fmt.Sprintf("#%d m%d %s generation %d owns %v", o.Index, o.Member, o.Detail, o.Generation, o.Owned)
	case Log:
		return fmt.Sprintf("#%d snapshots p%d high watermark %d last stable offset %d", o.Index, o.Partition, o.HW, o.LSO)
	case Emit:
		return fmt.Sprintf("#%d m%d emit %s (output of p%d@%d): %s%s", o.Index, o.Member, o.Value, o.Partition, o.Offset, o.Outcome, errSuffix(o.Err))
	case OutputRead:
		return fmt.Sprintf("#%d output read (%s) starts", o.Index, o.Detail)
	case Output:
		return fmt.Sprintf("#%d output read (%s): %s=%s (output of p%d@%d)", o.Index, o.Detail, o.Key, o.Value, o.Partition, o.Offset)
	case Offsets:
		return fmt.Sprintf("#%d input p%d at quiescence: committed %d of %d", o.Index, o.Partition, o.Offset, o.HW)
	case Unexpressed:
		return fmt.Sprintf("#%d not carried out: %s", o.Index, o.Detail)
	case Drift:
		return fmt.Sprintf("#%d %s", o.Index, o.Detail)
	}
	return fmt.Sprintf("#%d %s", o.Index, o.Kind)
}

func errSuffix(err string) string {
	if err == "" {
		return ""
	}
	return " (" + err + ")"
}

// Recorder collects a history. Its methods are safe for concurrent use
// (members record from goroutines of their own).
type Recorder struct {
	mu    sync.Mutex
	now   func() time.Duration
	step  int
	ops   []Op
	reads int

	// started are the started calls not yet recorded, in start order
	// (across partitions): RecordDone records those that ended.
	startedMu sync.Mutex
	started   []*recordedPending
	inCaller  bool // RecordInCaller
}

// NewRecorder returns an empty recorder; now tells the virtual time since
// the world began.
func NewRecorder(now func() time.Duration) *Recorder {
	return &Recorder{now: now}
}

// Add appends op, stamped with its index, the time and the current step.
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	op.Index, op.At, op.StepNo = len(r.ops), r.now(), r.step
	r.ops = append(r.ops, op)
}

// BeginStep records the driver's step n (1-based), described by detail;
// the operations after it belong to it.
func (r *Recorder) BeginStep(n int, detail string) {
	r.mu.Lock()
	r.step = n
	r.mu.Unlock()
	r.Add(Op{Kind: Step, Member: -1, Detail: detail})
}

func (r *Recorder) newRead() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	return r.reads
}

// Ops returns a copy of the history so far.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// JSON returns the history as JSON lines.
func (r *Recorder) JSON() []byte {
	var out []byte
	for _, op := range r.Ops() {
		b, _ := json.Marshal(op)
		out = append(append(out, b...), '\n')
	}
	return out
}
