package engine

import (
	"bytes"
	"fmt"
	"strconv"
	"time"

	"github.com/snapfence/snapfence/internal/input"
	"github.com/snapfence/snapfence/store"
)

// PoisonPolicy is what the engine does with a poison record: one its fold
// fails or panics on (a record the fold cannot decode, an input it
// refuses), one that makes an output the broker refuses for good (too
// large for its topic's max.message.bytes, or invalid for it), or a key
// whose tick or timer handler fails or makes such an output. Going past a
// failed timer removes it. Replaying such a record fails again, so
// retrying cannot help: the choice is to stop or to go past it, as with
// Kafka Streams' exception handlers. (To go past an input whose output
// the broker refused, the partition restarts from its committed state,
// and the input fails there without being folded: the other outputs of
// its poll or exactly-once batch are sent again.)
//
// A stored state that the Codec cannot decode is not a poison record:
// going past it would lose the key's state, not one input, so
// Config.UndecodableState decides it (UndecodableStatePolicy), whatever
// the PoisonPolicy.
type PoisonPolicy uint8

const (
	// StopOnPoison, the default: the partition commits everything it
	// folded before the record, and Run returns the *FoldError, which
	// names the topic, partition, offset and key. The record is not
	// consumed: a restarted engine meets it again.
	StopOnPoison PoisonPolicy = iota
	// SkipPoison skips the record: the key keeps its state, the record
	// counts as consumed, and the failure is logged (at a bounded rate)
	// and counted in snapfence_poison_records_total.
	SkipPoison
	// DeadLetterPoison skips the record as SkipPoison does and sends it to
	// Config.DeadLetterTopic: its key, its value and its headers, plus
	// headers naming its origin and the error (HeaderDeadLetterTopic and
	// the others). Under ExactlyOnce the dead letter goes into the
	// partition's transaction with the rest of the batch, so a
	// read_committed reader sees it exactly once; otherwise it goes to
	// Config.Emit with the poll's outputs, at least once.
	DeadLetterPoison
)

func (p PoisonPolicy) String() string {
	switch p {
	case StopOnPoison:
		return "stop"
	case SkipPoison:
		return "skip"
	case DeadLetterPoison:
		return "dead-letter"
	}
	return fmt.Sprintf("PoisonPolicy(%d)", uint8(p))
}

// UndecodableStatePolicy is what the engine does with a key whose
// recovered snapshot the Codec cannot decode: usually a deploy that
// changed the state type without a codec that reads the old encoding
// (VersionedCodec). It is separate from the PoisonPolicy on purpose: a
// team that skips bad input does not mean to delete the state a codec
// change made unreadable.
type UndecodableStatePolicy uint8

const (
	// StopOnUndecodableState, the default: the partition stops before it
	// is running, with nothing deleted or written, and Run returns the
	// *RecoveredStateError naming the key and the input offset of the
	// snapshot recovery read for it. Deploy a codec that reads the old
	// encoding and the next recovery goes on from the same snapshots.
	StopOnUndecodableState UndecodableStatePolicy = iota
	// DiscardUndecodableState deletes every key whose snapshot does not
	// decode: the key starts empty, a tombstone replaces its snapshot
	// with the next flush, and its state is lost (under DeadLetterPoison
	// its bytes also go to the dead-letter topic, kind "state"). Each key
	// is logged at a bounded rate and counted in
	// snapfence_undecodable_states_total{action="discarded"}. Choose it
	// only when losing those keys' state is meant.
	DiscardUndecodableState
)

func (p UndecodableStatePolicy) String() string {
	switch p {
	case StopOnUndecodableState:
		return "stop"
	case DiscardUndecodableState:
		return "discard"
	}
	return fmt.Sprintf("UndecodableStatePolicy(%d)", uint8(p))
}

// The headers a dead letter carries besides the record's own.
const (
	// HeaderDeadLetterTopic, HeaderDeadLetterPartition and
	// HeaderDeadLetterOffset name the record's origin; the offset is -1
	// for a tick's failure (the dead letter then has the key and no
	// value).
	HeaderDeadLetterTopic     = "snapfence.dlt.topic"
	HeaderDeadLetterPartition = "snapfence.dlt.partition"
	HeaderDeadLetterOffset    = "snapfence.dlt.offset"
	// HeaderDeadLetterTimestamp is the record's timestamp, Unix
	// milliseconds.
	HeaderDeadLetterTimestamp = "snapfence.dlt.timestamp"
	// HeaderDeadLetterError is the error's text; for a panic, "panic: "
	// and the value.
	HeaderDeadLetterError = "snapfence.dlt.error"
	// HeaderDeadLetterKind is what failed: "record" (a fold; the letter
	// is the record), "tick" (a key's tick; no value), "timer" (a key's
	// timer, skipped and removed; no value, and HeaderDeadLetterTimestamp
	// is the timer's At) or "state" (a recovered state that does not
	// decode, discarded under DiscardUndecodableState; the value is the
	// state's bytes, the offset the input offset its snapshot held, and
	// the key was deleted).
	HeaderDeadLetterKind = "snapfence.dlt.kind"
)

// stateDeadLetter is the dead letter of a recovered state that does not
// decode.
func stateDeadLetter(topic string, se *RecoveredStateError) Output {
	return Output{Topic: topic, Key: bytes.Clone(se.Key), Value: bytes.Clone(se.value), Headers: []store.Header{
		{Key: HeaderDeadLetterTopic, Value: []byte(se.Input.Topic)},
		{Key: HeaderDeadLetterPartition, Value: strconv.AppendInt(nil, int64(se.Input.Partition), 10)},
		{Key: HeaderDeadLetterOffset, Value: strconv.AppendInt(nil, se.Offset, 10)},
		{Key: HeaderDeadLetterError, Value: []byte(se.Err.Error())},
		{Key: HeaderDeadLetterKind, Value: []byte("state")},
	}}
}

// deadLetter is the dead letter of a record (nil for a tick) that failed
// with fe.
func deadLetter(topic string, rec *input.Record, fe *FoldError) Output {
	what := fmt.Sprint(fe.Err)
	if fe.Panic != nil {
		what = fmt.Sprintf("panic: %v", fe.Panic)
	}
	// Copies: an exactly-once batch keeps its outputs past the poll whose
	// records they came from.
	o := Output{Topic: topic, Key: bytes.Clone(fe.Key)}
	var ts time.Time
	kind := "tick"
	if fe.Timer != nil {
		kind = "timer"
		ts = fe.Timer.At
	}
	if rec != nil {
		kind = "record"
		o.Value = bytes.Clone(rec.Value)
		for _, h := range rec.Headers {
			o.Headers = append(o.Headers, store.Header{Key: h.Key, Value: bytes.Clone(h.Value)})
		}
		ts = rec.Timestamp
	}
	o.Headers = append(o.Headers,
		store.Header{Key: HeaderDeadLetterTopic, Value: []byte(fe.Input.Topic)},
		store.Header{Key: HeaderDeadLetterPartition, Value: strconv.AppendInt(nil, int64(fe.Input.Partition), 10)},
		store.Header{Key: HeaderDeadLetterOffset, Value: strconv.AppendInt(nil, fe.Offset, 10)},
		store.Header{Key: HeaderDeadLetterError, Value: []byte(what)},
		store.Header{Key: HeaderDeadLetterKind, Value: []byte(kind)},
	)
	if !ts.IsZero() {
		o.Headers = append(o.Headers, store.Header{Key: HeaderDeadLetterTimestamp, Value: strconv.AppendInt(nil, ts.UnixMilli(), 10)})
	}
	return o
}
