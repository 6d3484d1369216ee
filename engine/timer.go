package engine

import (
	"time"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/store"
)

// Timer is a timer of one key: a fold, a tick or Config.OnTimer sets it
// with Result.SetTimer for the key it runs for, and Config.OnTimer runs
// once when it is due. A key's timers are kept with its state, in its
// snapshot, so they survive restarts and move with the partition; a key
// without timers costs nothing (docs/design.md, "Per-key timers").
type Timer struct {
	Kind TimerKind
	// At is when the timer is due, kept to the millisecond (Kafka's
	// timestamps' resolution): At and At.Truncate(time.Millisecond) are
	// the same timer.
	At time.Time
}

// TimerKind is the clock a timer follows.
type TimerKind byte

const (
	// ProcessingTime timers are due when the consumer's clock
	// (Source.Now) reaches At; the runner looks after every poll.
	ProcessingTime = TimerKind(store.ProcessingTime)
	// EventTime timers are due when the partition's event-time watermark
	// reaches At: the largest Record.Timestamp the partition has folded
	// since it was assigned (replayed records included). They fire right
	// after the record that moves the watermark there, before the next.
	EventTime = TimerKind(store.EventTime)
)

func (k TimerKind) String() string { return store.TimerKind(k).String() }

// The ways a Result's timers are refused: each makes the fold, tick or
// timer handler that returned it fail with a *FoldError that wraps it,
// which goes to Config.Poison.
var (
	// ErrTimerWithoutState: a Result sets a timer on a key that has no
	// state after it: one that deletes it, or keeps a key that has none.
	// A key's timers live with its state, and a deleted key's snapshot,
	// a tombstone, is removed by compaction.
	ErrTimerWithoutState = core.ErrTimerWithoutState
	// ErrNoTimerHandler: a Result sets a timer and Config.OnTimer is nil.
	ErrNoTimerHandler = core.ErrNoTimerHandler
	// ErrTimerKind: a Timer whose Kind is neither ProcessingTime nor
	// EventTime.
	ErrTimerKind = core.ErrTimerKind
)

// OnTimerFunc runs a key's due timer t; the key always has state (a key
// without state holds no timers). The timer is removed in the same state
// change as the Result's, so the key's next snapshot carries both: after
// a crash before that snapshot is durable the timer fires again, after
// it never. Its outputs go out as a tick's do.
type OnTimerFunc[S any] func(key []byte, state S, t Timer) (Result[S], error)

func (t Timer) store() store.Timer {
	return store.Timer{Kind: store.TimerKind(t.Kind), At: t.At.UnixMilli()}
}

func timerFromStore(t store.Timer) Timer {
	return Timer{Kind: TimerKind(t.Kind), At: time.UnixMilli(t.At)}
}

// SetTimer returns r with t set for the key r is for. Setting a timer the
// key holds already (the same Kind and At) leaves one timer. A Result
// that deletes the key, or keeps a key without state, cannot set one
// (ErrTimerWithoutState); a delete drops the key's timers.
func (r Result[S]) SetTimer(t Timer) Result[S] {
	return r.timerOp(core.TimerOp{Timer: t.store()})
}

// CancelTimer returns r with t cancelled; a timer the key does not hold is
// no error. Set and cancel apply in the order they were called.
func (r Result[S]) CancelTimer(t Timer) Result[S] {
	return r.timerOp(core.TimerOp{Timer: t.store(), Cancel: true})
}

func (r Result[S]) timerOp(op core.TimerOp) Result[S] {
	cur := r.change.Timers
	r.change.Timers = append(cur[:len(cur):len(cur)], op) // r itself never changes
	return r
}

// coreTimer is Config.OnTimer as the core calls it.
func (e *Engine[S]) coreTimer() core.TimerFunc[S, Output] {
	on := e.cfg.OnTimer
	if on == nil {
		return nil
	}
	return func(key []byte, state S, t store.Timer) (core.Change[S, Output], error) {
		res, err := on(key, state, timerFromStore(t))
		if err == nil {
			err = checkOutputs(res.change.Outputs, e.cfg.MaxOutputBytes)
		}
		return res.change, err
	}
}
