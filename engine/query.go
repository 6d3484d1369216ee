package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/store"
)

// Queries: a running engine's state, read from any goroutine.
//
// A committed read (ReadCommitted) reads the local cache alone: it never
// waits for the poll loop. The cache holds each key's committed state apart
// from the states being folded, and the runner changes them only in atomic
// batches, so a read sees a state some snapshot of the key had. While
// nobody reads, the runner writes the committed states to the cache at
// most once a second; a committed read has it write each commit again
// from the next one (Member.settledAt), so the reads that follow it see
// each commit. It reads only a partition whose flow runs here,
// and checks after the read that the same flow still runs: a partition
// revoked, failed or recovered again meanwhile (its committed states being
// replaced) answers *NotOwnedError, never a state of another ownership or
// another partition (the cache's keys carry their partition).
//
// A latest read (ReadLatest) reads the flow's memory, so it takes the
// runner's lock: it waits for the fold of the current poll, or a recovery
// in a rebalance callback, up to ctx.

// ReadMode is which state a query reads.
type ReadMode uint8

const (
	// ReadCommitted reads each key's committed state: that of its last
	// durable snapshot, what a crash of this instance leaves (the
	// default). It never waits for the poll loop. The first committed
	// read after a second or more without one may see a state up to a
	// second older (the cache defers its writes while nobody reads).
	ReadCommitted ReadMode = iota
	// ReadLatest reads each key's latest folded state, changes not yet in
	// a durable snapshot included (a crash may undo them; the replay
	// folds them again). It waits for the poll loop's current step.
	ReadLatest
)

func (m ReadMode) String() string {
	switch m {
	case ReadCommitted:
		return "committed"
	case ReadLatest:
		return "latest"
	}
	return fmt.Sprintf("ReadMode(%d)", uint8(m))
}

// Entry is a key's state as a query read it.
type Entry[S any] struct {
	Key   []byte
	State S
	// Offset is the input offset of the last record folded into State:
	// the read reflects the key's records up to it. A deleted key keeps
	// the offset of its delete; -1 for a key that never had state.
	Offset int64
}

// ErrNotOwned is what a query of a partition this instance does not
// serve now wraps (a *NotOwnedError says which, and why).
var ErrNotOwned = errors.New("partition not owned by this instance")

// NotOwnedError is a query of a partition whose state this instance does
// not serve now: not assigned here (another member owns it, or no one),
// assigned but not recovered yet (State says how far), stopped, or the
// engine is not running. errors.Is(err, ErrNotOwned) holds.
type NotOwnedError struct {
	Input store.TopicPartition
	// State is the partition's state on this instance, if it is assigned
	// here ("" otherwise): starting, recovering, waiting or stopped.
	State PartitionState
	// Reason says why, for people.
	Reason string
}

func (e *NotOwnedError) Error() string {
	return fmt.Sprintf("engine: query of %s: %s", e.Input, e.Reason)
}

func (e *NotOwnedError) Unwrap() error { return ErrNotOwned }

// queryPage is how many keys a range reads at a time: each page is read
// under one check of ownership (and, for ReadLatest, one hold of the
// runner's lock), and the caller's loop body runs between pages.
const queryPage = 256

// Get reads key's state in input partition input, as mode says, from any
// goroutine while Run runs. exists is false for a key without state (or
// deleted); Entry.Offset is still the offset its read reflects. A
// partition this instance does not serve now gets a *NotOwnedError
// (errors.Is ErrNotOwned): ask the member that owns it. For a key written
// with Kafka's default partitioner, its partition is
// store.OutputPartition(key, partitions).
func (e *Engine[S]) Get(ctx context.Context, input store.TopicPartition, key []byte, mode ReadMode) (Entry[S], bool, error) {
	r := e.runner.Load()
	if r == nil {
		return Entry[S]{Key: key, Offset: -1}, false, &NotOwnedError{Input: input, Reason: "the engine is not running (no Run, no runner)"}
	}
	return r.Get(ctx, input, key, mode)
}

// Range yields the keys with state of input partition input, in key
// order, with their states as mode says, from any goroutine while Run
// runs. It reads a page of keys at a time, and each key's entry is as of
// its page: a range over a partition that folds meanwhile is not one
// snapshot of it. Under ReadLatest a key first created after the range
// began may be missed. A partition this instance does not serve, at the
// start or at any page, ends the range with a *NotOwnedError: the entries
// yielded before it were the partition's. A cache failure or an
// undecodable state ends it with that error.
func (e *Engine[S]) Range(ctx context.Context, input store.TopicPartition, mode ReadMode) iter.Seq2[Entry[S], error] {
	r := e.runner.Load()
	if r == nil {
		return func(yield func(Entry[S], error) bool) {
			yield(Entry[S]{Offset: -1}, &NotOwnedError{Input: input, Reason: "the engine is not running (no Run, no runner)"})
		}
	}
	return r.Range(ctx, input, mode)
}

// Readable lists the partitions whose state this instance serves now
// (their flows run: recovered, not stopped), in order.
func (e *Engine[S]) Readable() []store.TopicPartition {
	r := e.runner.Load()
	if r == nil {
		return nil
	}
	return r.queries.list()
}

// readers is a runner's partitions open to committed reads: those whose
// flow runs, each with the reader made when it started, so that a read
// can tell that the flow it began under is still the one running.
type readers[S any] struct {
	mu sync.Mutex
	m  map[store.TopicPartition]*readHandle[S]
}

type readHandle[S any] struct{ rd core.CommittedReader[S] }

func (q *readers[S]) open(tp store.TopicPartition, c *core.Core[S, Output]) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.m == nil {
		q.m = map[store.TopicPartition]*readHandle[S]{}
	}
	q.m[tp] = &readHandle[S]{rd: c.CommittedReader()}
}

// close closes tp to reads, before its flow is torn down.
func (q *readers[S]) close(tp store.TopicPartition) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.m, tp)
}

func (q *readers[S]) get(tp store.TopicPartition) *readHandle[S] {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.m[tp]
}

func (q *readers[S]) list() []store.TopicPartition {
	q.mu.Lock()
	defer q.mu.Unlock()
	return sortedKeys(q.m)
}

// notOwned is the error of a query of tp, which has no running flow.
func (r *Member[S]) notOwned(tp store.TopicPartition) error {
	st, ok := r.status.partition(tp)
	switch {
	case !ok:
		return &NotOwnedError{Input: tp, Reason: "not assigned to this instance"}
	case st.State == StateRunning:
		// Between the flow's end and the board's update.
		return &NotOwnedError{Input: tp, State: st.State, Reason: "its flow is restarting here"}
	default:
		reason := fmt.Sprintf("assigned here but %s, not serving yet", st.State)
		if st.Err != nil {
			reason += ": " + st.Err.Error()
		}
		return &NotOwnedError{Input: tp, State: st.State, Reason: reason}
	}
}

// Get is Engine.Get on this runner.
func (r *Member[S]) Get(ctx context.Context, tp store.TopicPartition, key []byte, mode ReadMode) (Entry[S], bool, error) {
	none := Entry[S]{Key: key, Offset: -1}
	if err := ctx.Err(); err != nil {
		return none, false, err
	}
	switch mode {
	case ReadCommitted:
		h := r.queries.get(tp)
		if h == nil {
			return none, false, r.notOwned(tp)
		}
		r.committedReads.Add(1)
		e, ok, err := h.rd.Get(r.e.kv.Queries(), key)
		if r.queries.get(tp) != h {
			return none, false, r.notOwned(tp)
		}
		return Entry[S](e), ok, fromCore(err)
	case ReadLatest:
		if err := r.mu.LockContext(ctx); err != nil {
			return none, false, err
		}
		defer r.mu.Unlock()
		f, ok := r.sched.Flow(tp)
		if !ok {
			return none, false, r.notOwned(tp)
		}
		e, ok, err := f.core.Peek(key)
		return Entry[S](e), ok, fromCore(err)
	}
	return none, false, &store.ConfigError{Subject: "engine.ReadMode", Problem: fmt.Sprintf("%v is not a read mode", mode),
		Fix: "use engine.ReadCommitted or engine.ReadLatest"}
}

// Range is Engine.Range on this runner.
func (r *Member[S]) Range(ctx context.Context, tp store.TopicPartition, mode ReadMode) iter.Seq2[Entry[S], error] {
	return func(yield func(Entry[S], error) bool) {
		var next func(after []byte) ([]Entry[S], []byte, bool, error)
		switch mode {
		case ReadCommitted:
			next = r.committedPages(tp)
		case ReadLatest:
			next = r.latestPages(ctx, tp)
		default:
			_, _, err := r.Get(ctx, tp, nil, mode)
			yield(Entry[S]{Offset: -1}, err)
			return
		}
		var after []byte
		for {
			if err := ctx.Err(); err != nil {
				yield(Entry[S]{Offset: -1}, err)
				return
			}
			page, last, more, err := next(after)
			if err != nil {
				yield(Entry[S]{Offset: -1}, err)
				return
			}
			for _, e := range page {
				if !yield(e, nil) {
					return
				}
			}
			if !more {
				return
			}
			after = last
		}
	}
}

// committedPages reads tp's committed states a page at a time, each page
// under the flow it began with.
func (r *Member[S]) committedPages(tp store.TopicPartition) func(after []byte) ([]Entry[S], []byte, bool, error) {
	h0 := r.queries.get(tp)
	return func(after []byte) ([]Entry[S], []byte, bool, error) {
		h := r.queries.get(tp)
		if h == nil || h != h0 {
			return nil, nil, false, r.notOwned(tp)
		}
		r.committedReads.Add(1)
		page, last, more, err := h.rd.Page(r.e.kv.Queries(), after, queryPage)
		if r.queries.get(tp) != h {
			return nil, nil, false, r.notOwned(tp)
		}
		return convertEntries(page), last, more, fromCore(err)
	}
}

// latestPages reads tp's latest states a page at a time: the page's keys
// are the next committed ones merged with the keys dirty when the range
// began (a key with state is one or the other), and each is read under
// the runner's lock, from the flow the range began with.
func (r *Member[S]) latestPages(ctx context.Context, tp store.TopicPartition) func(after []byte) ([]Entry[S], []byte, bool, error) {
	var f0 *flow[S]
	var dirty []string
	begun := false
	return func(after []byte) ([]Entry[S], []byte, bool, error) {
		if err := r.mu.LockContext(ctx); err != nil {
			return nil, nil, false, err
		}
		defer r.mu.Unlock()
		f, ok := r.sched.Flow(tp)
		if !ok || (begun && f != f0) {
			return nil, nil, false, r.notOwned(tp)
		}
		if !begun {
			f0, dirty, begun = f, f.core.DirtySorted(), true
		}
		// The page's committed keys (a key deleted there whose latest
		// state is live again is dirty: among the dirty keys).
		committed, last, more, err := f.core.CommittedReader().Page(r.e.kv.Queries(), after, queryPage)
		if err != nil {
			return nil, nil, false, fromCore(err)
		}
		keys := make([]string, 0, len(committed))
		for _, e := range committed {
			keys = append(keys, string(e.Key))
		}
		// The dirty keys up to the page's last key (all of them on the
		// last page).
		for len(dirty) > 0 && after != nil && dirty[0] <= string(after) {
			dirty = dirty[1:]
		}
		for len(dirty) > 0 && (!more || dirty[0] <= string(last)) {
			keys = append(keys, dirty[0])
			dirty = dirty[1:]
		}
		sortUnique(&keys)
		var page []Entry[S]
		for _, k := range keys {
			e, live, err := f.core.Peek([]byte(k))
			if err != nil {
				return nil, nil, false, fromCore(err)
			}
			if live {
				page = append(page, Entry[S](e))
			}
		}
		return page, last, more, nil
	}
}

func convertEntries[S any](in []core.Entry[S]) []Entry[S] {
	out := make([]Entry[S], len(in))
	for i, e := range in {
		out[i] = Entry[S](e)
	}
	return out
}

// sortUnique sorts keys and removes repeats.
func sortUnique(keys *[]string) {
	slices.Sort(*keys)
	*keys = slices.Compact(*keys)
}
