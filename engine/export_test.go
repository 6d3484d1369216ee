package engine

// Abandon makes r, whose process a test has crashed, stop counting as an
// open runner, without closing anything of it: a killed process closes
// nothing, and the test closes the engine's cache afterwards.
func Abandon[S any](r *Member[S]) { r.Abandon() }

// CloseAbandoning closes e's cache after abandoning the runners still
// open, as a test's end leaves them (a process that exits closes
// nothing either): for cleanups.
func CloseAbandoning[S any](e *Engine[S]) error {
	e.runMu.Lock()
	open := make([]*Member[S], 0, len(e.open))
	for r := range e.open {
		open = append(open, r)
	}
	e.runMu.Unlock()
	for _, r := range open {
		r.Abandon()
	}
	return e.Close()
}

// Settled reports whether r has no takeover or recovery in flight: every
// partition it was assigned runs, waits or has stopped.
func Settled[S any](r *Member[S]) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.recovering()
}
