package view

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
)

// ErrNotOpen: a Lookup was read, run or stepped before its runner opened
// it (Lookup.Open).
// It matches engine.ErrTableUnavailable: a fold that returns it folds
// its record again once the table is open.
var ErrNotOpen = fmt.Errorf("view: lookup not open (its runner opens it on its store backend with Lookup.Open): %w", engine.ErrTableUnavailable)

// ErrAlreadyOpen: Open was called on a Lookup that is open, or being
// opened.
var ErrAlreadyOpen = errors.New("view: lookup already open")

// Opener is a table of engine.Config.Tables that its runner opens: a
// table declared without a store (a *Lookup), which the code that runs the
// engine opens on its own backend before the engine folds, keeps reading
// while the engine runs, and closes after it. A runner type-asserts each
// entry of Config.Tables to Opener and, for each one that is:
//
//   - calls Open once, with the backend it runs the engine on (store/kafka's
//     on Kafka, store/sim's in tests), before the engine's first poll;
//   - then either runs Run in a goroutine of its own until it shuts down
//     (on Kafka), or calls Step between the engine's steps (a caller that
//     drives virtual time, as on the simulated cluster);
//   - calls Close once the engine has stopped.
//
// A partition of the engine folds nothing until each of its tables has
// caught up (engine.Table's WaitCaughtUp), so a table that is never opened
// holds its partitions back until engine.Config.TableTimeout fails them.
type Opener interface {
	// Open opens the table on b: its topic's partitions are counted, its
	// cache opened, and a follower of each partition held. It does not
	// read yet. It fails on a configuration b cannot serve (a
	// *store.ConfigError naming the field), a missing topic (an error
	// matching store.ErrMisconfigured), a cache directory that is not the
	// table's; a failed Open may be retried. A second Open is
	// ErrAlreadyOpen, an Open after Close ErrClosed.
	Open(ctx context.Context, b store.Backend) error
	// Run keeps the table reading until ctx ends or Close is called (then
	// it returns nil), or a partition fails: it returns the failure, and
	// a later Run opens the partition again; see View.Run.
	Run(ctx context.Context) error
	// Step reads each partition once without waiting; see View.Step.
	Step(ctx context.Context) error
	// Close stops Run and closes the table; an unopened table is closed
	// too (its waiters return ErrClosed).
	Close() error
}

// Lookup is a table the fold looks up (a lookup join), declared before any
// store exists: the code that builds the engine's Config declares it with
// NewLookup, lists it in Config.Tables and calls Get in the fold; whoever
// runs the engine opens it on its own backend (Open, the Opener interface)
// and reads it as a View (Run, or Step) until it closes it. So the fold's
// code names its tables without building a store backend, and the same
// Config runs against Kafka and in tests on the simulated cluster
// (package engine/enginetest).
//
// Before Open, Get returns ErrNotOpen and WaitCaughtUp waits for Open
// (the engine's partitions wait with it, Config.TableTimeout at most).
// Once open it is the View that Open made (View returns it). Its methods
// are safe from any goroutine.
type Lookup[S any] struct {
	cfg Config[S]
	bad error // what NewLookup's check found: Open's error
	// v is the open view; nil before Open (and after a failed one).
	// Reads load it without the lock: a fold's Get costs no mutex.
	v atomic.Pointer[View[S]]
	// opened is closed once Open succeeded, or Close was called: it
	// wakes the waiters of WaitCaughtUp.
	opened chan struct{}

	mu      sync.Mutex
	opening bool
	closed  bool
}

var (
	_ engine.Table = (*Lookup[int])(nil)
	_ Opener       = (*Lookup[int])(nil)
)

// NewLookup declares a lookup table of cfg, which must leave Store nil:
// the runner gives the backend to Open. It checks cfg as New does, but a
// declaration returns no error, so that the code that builds an
// engine.Config stays a list of its tables: a field that cannot work (a
// *store.ConfigError naming it) is Open's error, which the runner
// returns at its start (service.New, enginetest.New), as is what needs
// the backend (for a table of snapshots, that it is Transactional). Err
// reports it earlier, for a caller who wants it at the declaration.
// A table of snapshots (Plain unset) reads the snapshot topic the runner's
// backend names for Topic: that of the backend's application.
func NewLookup[S any](cfg Config[S]) *Lookup[S] {
	_, err := cfg.check(true)
	return &Lookup[S]{cfg: cfg, bad: err, opened: make(chan struct{})}
}

// Err is what NewLookup's check of the Config found (a
// *store.ConfigError naming the field), which Open returns; nil for a
// declaration that can open.
func (l *Lookup[S]) Err() error { return l.bad }

// PlainTopic is the topic a table of plain key/values reads (plain
// false for a table of snapshots): what a runner that creates topics
// creates, compacted, when it is missing.
func (l *Lookup[S]) PlainTopic() (topic string, plain bool) { return l.cfg.Topic, l.cfg.Plain }

// Open opens the table on b (New with Config.Store set to b) and owns the
// View it made: Run, Step, Get and Close go to it. See Opener.Open.
func (l *Lookup[S]) Open(ctx context.Context, b store.Backend) error {
	if l.bad != nil {
		return l.bad
	}
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		return ErrClosed
	case l.opening || l.v.Load() != nil:
		l.mu.Unlock()
		return ErrAlreadyOpen
	}
	// New may wait on the cluster; reads and Close must not wait for it.
	l.opening = true
	l.mu.Unlock()

	cfg := l.cfg
	cfg.Store = b
	v, err := New(ctx, cfg)

	l.mu.Lock()
	defer l.mu.Unlock()
	l.opening = false
	switch {
	case err != nil:
		return err
	case l.closed: // closed while it opened
		return errors.Join(ErrClosed, v.Close())
	}
	l.v.Store(v)
	close(l.opened)
	return nil
}

// view is the open View, or ErrNotOpen (ErrClosed once closed).
func (l *Lookup[S]) view() (*View[S], error) {
	if v := l.v.Load(); v != nil {
		return v, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	return nil, fmt.Errorf("table %s: %w", l.cfg.Topic, ErrNotOpen)
}

// View is the View that Open made; nil before Open.
func (l *Lookup[S]) View() *View[S] { return l.v.Load() }

// Name is the topic the table reads: View.Name once open (for a table of
// snapshots, the snapshot topic the backend names); Config.Topic before.
func (l *Lookup[S]) Name() string {
	if v := l.v.Load(); v != nil {
		return v.Name()
	}
	return l.cfg.Topic
}

// Get is View.Get; before Open it returns ErrNotOpen, after Close
// ErrClosed.
func (l *Lookup[S]) Get(key []byte) (state S, exists bool, err error) {
	v, err := l.view()
	if err != nil {
		return state, false, err
	}
	return v.Get(key)
}

// Status is View.Status; before Open (and after a failed one) a Status
// that names the table and holds no partition, not caught up.
func (l *Lookup[S]) Status() Status {
	if v := l.v.Load(); v != nil {
		return v.Status()
	}
	return Status{Topic: l.cfg.Topic}
}

// WaitCaughtUp waits for Open (or ctx, or Close), then is
// View.WaitCaughtUp. An end of ctx before Open returns an error matching
// both ErrNotOpen and ctx's error.
func (l *Lookup[S]) WaitCaughtUp(ctx context.Context) error {
	select {
	case <-l.opened:
	case <-ctx.Done():
		return fmt.Errorf("table %s: waiting for its runner to open it: %w", l.cfg.Topic, errors.Join(ErrNotOpen, ctx.Err()))
	}
	v, err := l.view()
	if err != nil {
		return err
	}
	return v.WaitCaughtUp(ctx)
}

// Run is View.Run; ErrNotOpen before Open.
func (l *Lookup[S]) Run(ctx context.Context) error {
	v, err := l.view()
	if err != nil {
		return err
	}
	return v.Run(ctx)
}

// Step is View.Step; ErrNotOpen before Open.
func (l *Lookup[S]) Step(ctx context.Context) error {
	v, err := l.view()
	if err != nil {
		return err
	}
	return v.Step(ctx)
}

// Close closes the View if Open made one (View.Close), and the Lookup:
// a later Open returns ErrClosed, and the waiters of WaitCaughtUp wake
// with it. A second Close does nothing.
func (l *Lookup[S]) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	v := l.v.Load()
	if v == nil {
		close(l.opened)
	}
	l.mu.Unlock()
	if v != nil {
		return v.Close()
	}
	return nil
}
