package engine

import "github.com/snapfence/snapfence/engine/internal/core"

// Result is what a fold, tick or timer handler made of a key's state: a
// new state (Set), a delete (Delete), or nothing (Keep), the outputs to
// emit (With), emitted at least once (exactly once to read_committed
// consumers under Config.ExactlyOnce), and the key's timers it sets or
// cancels (SetTimer, CancelTimer).
//
// The zero Result changes nothing and emits nothing: it is Keep. Its
// fields are unexported, so a state is replaced only by a Result made with
// Set, and a key deleted only by one made with Delete; a fold or tick that
// returns Result[S]{} leaves the key as it was and writes no snapshot,
// rather than resetting the key to the zero S (docs/design.md, "A fold's
// result", says why).
type Result[S any] struct {
	// change is the core's form: a Result passes to the core as it is.
	change core.Change[S, Output]
}

// Set returns a Result that replaces the key's state with state.
func Set[S any](state S) Result[S] {
	return Result[S]{change: core.Change[S, Output]{Op: core.Set, State: state}}
}

// Delete returns a Result that deletes the key's state. The key keeps the
// offset it was deleted at, so a replay after the delete is still skipped.
func Delete[S any]() Result[S] {
	return Result[S]{change: core.Change[S, Output]{Op: core.Delete}}
}

// Keep returns a Result that leaves the key's state as it was: the zero
// Result, spelt out, for a fold that only emits (Keep[S]().With(outs...)).
func Keep[S any]() Result[S] { return Result[S]{} }

// With returns r with outs added to its outputs. The first outputs are
// kept as given, not copied (the engine never changes them); later ones
// are appended to a copy, so r itself is never changed.
func (r Result[S]) With(outs ...Output) Result[S] {
	if cur := r.change.Outputs; cur == nil {
		r.change.Outputs = outs
	} else if len(outs) > 0 {
		r.change.Outputs = append(cur[:len(cur):len(cur)], outs...)
	}
	return r
}

// State is the state r sets; the zero S if r deletes or keeps.
func (r Result[S]) State() S { return r.change.State }

// Deleted reports whether r deletes the key's state.
func (r Result[S]) Deleted() bool { return r.change.Op == core.Delete }

// Kept reports whether r leaves the key's state as it was (the zero
// Result, Keep).
func (r Result[S]) Kept() bool { return r.change.Op != core.Set && r.change.Op != core.Delete }

// Outputs are the records r emits.
func (r Result[S]) Outputs() []Output { return r.change.Outputs }
