package engine

import (
	"errors"
	"fmt"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/store"
)

// FoldError names the record a fold, tick or timer handler failed on, or
// whose output the broker refused for good (Err then wraps the
// *EmitError or *store.OutputRefusedError); match it with errors.As. Under StopOnPoison (the default) Run returns it
// after committing everything before the record; the record is not
// consumed (a replay would fail again) until the fold is fixed or
// Config.Poison skips it. A failed timer stays in its key's state (it
// fires again after a restart) unless Config.Poison skips it, which
// removes it.
type FoldError struct {
	Input store.TopicPartition
	// Offset is the record's input offset; -1 for a tick or a timer.
	Offset int64
	Key    []byte
	// Panic is the recovered value if the fold panicked.
	Panic any
	Err   error
	// Timer is the timer whose OnTimer failed; nil for a fold or a tick.
	Timer *Timer
}

func (e *FoldError) Error() string { return e.core().Error() }

// core is e in the core's type, whose Error it shares.
func (e *FoldError) core() *core.FoldError {
	c := &core.FoldError{Input: e.Input, Offset: e.Offset, Key: e.Key, Panic: e.Panic, Err: e.Err}
	if e.Timer != nil {
		t := e.Timer.store()
		c.Timer = &t
	}
	return c
}

// foldError is the core's e in the engine's type.
func foldError(e *core.FoldError) *FoldError {
	fe := &FoldError{Input: e.Input, Offset: e.Offset, Key: e.Key, Panic: e.Panic, Err: e.Err}
	if e.Timer != nil {
		t := timerFromStore(*e.Timer)
		fe.Timer = &t
	}
	return fe
}

func (e *FoldError) Unwrap() error { return e.Err }

// RecoveredStateError names a state that does not decode with the
// Codec: a recovered snapshot's, or a state the cache kept. It gives the
// partition, the key and the input offset of the state: for a recovery,
// those of the key's latest snapshot, the one recovery would use (an
// earlier one it supersedes does not matter). Match it with errors.As.
// Under StopOnUndecodableState (the default) Run returns it with nothing
// deleted; DiscardUndecodableState deletes the keys instead. Config.Poison
// does not apply to it.
type RecoveredStateError struct {
	Input  store.TopicPartition
	Key    []byte
	Offset int64
	Err    error
	// Keys is how many of the partition's keys had a latest snapshot that
	// does not decode when recovery stopped, this one included (the error
	// names the first in key order); 0 for a state met when its key was
	// first touched.
	Keys int
	// value is the undecodable state, for its dead letter.
	value []byte
}

func (e *RecoveredStateError) Error() string {
	msg := fmt.Sprintf("engine: %s: the state of key %q (input offset %d) does not decode: %v", e.Input, logKey(e.Key).LogValue().String(), e.Offset, e.Err)
	if e.Keys > 1 {
		msg += fmt.Sprintf("; so do %d other keys' states", e.Keys-1)
	}
	msg += "; deploy a Codec that reads the old encoding (engine.VersionedCodec)"
	if e.Keys > 0 { // a recovery's: the policy applies
		msg += ", or set Config.UndecodableState to DiscardUndecodableState to delete such keys and their state"
	}
	return msg
}

func (e *RecoveredStateError) Unwrap() error { return e.Err }

// replaysFail reports whether a replay from the committed state meets err
// again because of what the engine's own types name: a fold that failed
// on a record, or a state that does not decode (schedule.Config.ReplaysFail).
func replaysFail(err error) bool {
	var fe *FoldError
	var se *RecoveredStateError
	return errors.As(err, &fe) || errors.As(err, &se)
}

// fromCore converts an error the core returned into the engine's exported
// types: *core.FoldError into *FoldError, *core.StateError into
// *RecoveredStateError (a copy of its fields); any other error is returned as it is. The core returns its
// typed errors unwrapped, so the runtime calls this on every error that
// comes out of a core call, before it wraps, stores or returns it: users
// match only the engine's types.
func fromCore(err error) error {
	switch e := err.(type) {
	case *core.FoldError:
		return foldError(e)
	case *core.StateError:
		return &RecoveredStateError{Input: e.Input, Key: e.Key, Offset: e.Offset, Err: e.Err}
	}
	return err
}

// EmitError reports outputs that an emitter (Config.Emit or StartEmit; engine/kafkaio.Emitter) did not deliver. Others
// of the same call may have been delivered: the engine replays the batch,
// and they are emitted again (at least once). errors.Is and errors.As
// see Err: franz-go's or the broker's error (a kerr.Error), a
// *store.ConfigError for a permanent configuration problem (a missing
// topic, a denied write), or the context's error.
type EmitError struct {
	// Failed of Total outputs of the call were not delivered.
	Failed, Total int
	// Topic, Partition and Key are the first failed output's (Partition
	// is -1 when the failure came before partitioning).
	Topic     string
	Partition int32
	Key       []byte
	// Err is the first failure's cause.
	Err error
	// Refused are the indexes in the call's outputs, in order, of those
	// the broker (or franz-go, for a record larger than its topic
	// allows) refused in a way no retry cures: too large, invalid,
	// corrupt. The engine hands the inputs that made them to
	// Config.Poison. An Emit of your own may set it too.
	Refused []int
}

func (e *EmitError) Error() string {
	where := fmt.Sprintf("topic %q", e.Topic)
	if e.Partition >= 0 {
		where = fmt.Sprintf("%s partition %d", where, e.Partition)
	}
	return fmt.Sprintf("engine: emitter: %d of %d outputs not delivered; the first, to %s with key %q: %v",
		e.Failed, e.Total, where, printableKey(e.Key), e.Err)
}

// Unwrap returns Err.
func (e *EmitError) Unwrap() error { return e.Err }

// printableKey is a key for an error message, cut to 64 bytes.
func printableKey(k []byte) string {
	const max = 64
	if len(k) > max {
		return string(k[:max]) + "..."
	}
	return string(k)
}
