package core

import (
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/snapfence/snapfence/store"
)

// A key's timers live in its slot, with its state: in the KV entry (after
// the flags, a count and 9 bytes a timer), in its snapshot (store.Snapshot
// .Timers), so they move and survive as the state does. A key without
// timers costs nothing: its entry and its snapshot are as they were before
// timers.
//
// Which timers are due is found through hints: per clock a min-heap in
// memory of (at, key) of every timer a key holds now, and in the KV, under
// timerPrefix, an index entry of every timer a committed state holds,
// written in the same atomic batch as that state. A hint may be stale (its
// timer cancelled, fired, or its key recovered anew); a due hint is
// checked against the key's slot before its timer fires, so hints only
// need to be a superset. A warm core rebuilds its heaps from the KV index,
// reading one entry per committed timer and none per key.

// TimerOp is one change of a key's timers: set (or cancel) Timer. A
// Change's ops apply in order, after its Op (a Delete drops the key's
// timers).
type TimerOp struct {
	Timer  store.Timer
	Cancel bool
}

// TimerFunc runs a key's due timer t. The key has state: a key without
// state holds no timers. The timer is removed with the Change's effect, in
// the same state change.
type TimerFunc[S, O any] func(key []byte, state S, t store.Timer) (Change[S, O], error)

// The ways a Change's timers are refused; each comes back as a *FoldError
// of the fold or timer that made it.
var (
	// ErrTimerWithoutState: a Change sets a timer on a key that has no
	// state after it (a Delete, or Keep of a key without state). A
	// tombstone carries no timers: compaction removes it.
	ErrTimerWithoutState = errors.New("engine: a timer set on a key without state (a Result that deletes, or keeps a key that has no state)")
	// ErrNoTimerHandler: a Change sets a timer and the engine has no timer
	// handler to run it.
	ErrNoTimerHandler = errors.New("engine: a timer set without a timer handler (set Config.OnTimer)")
	// ErrTimerKind: a timer of neither clock.
	ErrTimerKind = errors.New("engine: a timer of an unknown kind (use ProcessingTime or EventTime)")
)

// flagTimers marks an entry that carries timers.
const flagTimers = 2

// appendTimers appends an entry's timers: a count, then each timer.
func appendTimers(b []byte, ts []store.Timer) []byte {
	b = binary.AppendUvarint(b, uint64(len(ts)))
	for _, t := range ts {
		b = append(b, byte(t.Kind))
		b = binary.BigEndian.AppendUint64(b, uint64(t.At))
	}
	return b
}

// decodeTimers reads an entry's timers from b, returning them and the rest.
func decodeTimers(b []byte) ([]store.Timer, []byte, bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n == 0 || n > uint64(len(b)-w)/9 {
		return nil, nil, false
	}
	b = b[w:]
	ts := make([]store.Timer, n)
	for i := range ts {
		ts[i] = store.Timer{Kind: store.TimerKind(b[0]), At: int64(binary.BigEndian.Uint64(b[1:9]))}
		b = b[9:]
	}
	return ts, b, true
}

func timersSize(ts []store.Timer) int {
	if len(ts) == 0 {
		return 0
	}
	return binary.MaxVarintLen64 + 9*len(ts)
}

func compareTimers(a, b store.Timer) int {
	return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.Kind, b.Kind))
}

// sortedTimers is ts as the core keeps a key's timers: sorted by (At,
// Kind), without duplicates. A snapshot's are already (the core wrote
// them), unless another writer's were not: a recovered one is checked.
func sortedTimers(ts []store.Timer) []store.Timer {
	for i := 1; i < len(ts); i++ {
		if compareTimers(ts[i-1], ts[i]) >= 0 { // out of order, or twice
			ts = slices.Clone(ts)
			slices.SortFunc(ts, compareTimers)
			return slices.Compact(ts)
		}
	}
	if len(ts) == 0 {
		return nil
	}
	return ts
}

// hasTimer reports whether the sorted ts holds t.
func hasTimer(ts []store.Timer, t store.Timer) bool {
	_, ok := slices.BinarySearchFunc(ts, t, compareTimers)
	return ok
}

// nextTimers is a key's timers after ch (fired, if not nil, removed first):
// a new slice (nil if none), sorted by (At, Kind), without duplicates. The
// old one is never written to: snapshots and writes in flight share it.
func nextTimers[S, O any](old []store.Timer, fired *store.Timer, ch *Change[S, O]) []store.Timer {
	var ts []store.Timer
	if ch.Op != Delete {
		ts = slices.Clone(old)
	}
	if fired != nil {
		if i, ok := slices.BinarySearchFunc(ts, *fired, compareTimers); ok {
			ts = slices.Delete(ts, i, i+1)
		}
	}
	for _, op := range ch.Timers {
		i, ok := slices.BinarySearchFunc(ts, op.Timer, compareTimers)
		switch {
		case op.Cancel && ok:
			ts = slices.Delete(ts, i, i+1)
		case !op.Cancel && !ok:
			ts = slices.Insert(ts, i, op.Timer)
		}
	}
	if len(ts) == 0 {
		return nil
	}
	return ts
}

// checkTimers refuses a Change whose timers cannot be kept: live is
// whether the key has state after it.
func (c *Core[S, O]) checkTimers(ch *Change[S, O], live bool) error {
	for _, op := range ch.Timers {
		switch {
		case op.Timer.Kind != store.ProcessingTime && op.Timer.Kind != store.EventTime:
			return fmt.Errorf("%w: %v", ErrTimerKind, op.Timer.Kind)
		case op.Cancel:
		case c.cfg.Timer == nil:
			return ErrNoTimerHandler
		case !live:
			return ErrTimerWithoutState
		}
	}
	return nil
}

// hint is a timer's entry in a clock's heap.
type hint struct {
	at  int64
	key string
}

type hintHeap []hint

func (h hintHeap) Len() int { return len(h) }
func (h hintHeap) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].key < h[j].key
}
func (h hintHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *hintHeap) Push(x any)   { *h = append(*h, x.(hint)) }
func (h *hintHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// timerRef is a timer of a key: a hint's identity, so that a heap holds
// each at most once.
type timerRef struct {
	kind store.TimerKind
	at   int64
	key  string
}

// timers is a core's timer bookkeeping.
type timers struct {
	// heaps are the hints, processing time first.
	heaps [2]hintHeap
	// queued are the hints in the heaps.
	queued map[timerRef]struct{}
	// watermark is the largest timestamp, in Unix milliseconds, of the
	// records fed since the core was made (math.MinInt64: none).
	watermark int64
	// unindex holds, per key, the timers removed from its state since its
	// last write was taken: their KV index entries go once a write
	// without them is committed.
	unindex map[string][]store.Timer
}

func newTimers() timers {
	return timers{queued: map[timerRef]struct{}{}, watermark: math.MinInt64, unindex: map[string][]store.Timer{}}
}

func heapOf(k store.TimerKind) int {
	if k == store.EventTime {
		return 1
	}
	return 0
}

// hint queues a timer of key, unless it is queued already.
func (c *Core[S, O]) hint(key string, t store.Timer) {
	ref := timerRef{kind: t.Kind, at: t.At, key: key}
	if _, ok := c.tm.queued[ref]; ok {
		return
	}
	c.tm.queued[ref] = struct{}{}
	heap.Push(&c.tm.heaps[heapOf(t.Kind)], hint{at: t.At, key: key})
}

// timerKey is the KV index entry of key's timer t: kind, at (sign bit
// flipped, so that the entries sort by time), key.
func (c *Core[S, O]) timerKey(t store.Timer, key []byte) []byte {
	b := make([]byte, 0, len(c.timerPrefix)+9+len(key))
	b = append(b, c.timerPrefix...)
	b = append(b, byte(t.Kind))
	b = binary.BigEndian.AppendUint64(b, uint64(t.At)^(1<<63))
	return append(b, key...)
}

// indexWrites are the KV index entries of a committed state's timers.
func (c *Core[S, O]) indexWrites(ws []Write, key []byte, ts []store.Timer) []Write {
	for _, t := range ts {
		ws = append(ws, Write{Key: c.timerKey(t, key), Value: []byte{}})
	}
	return ws
}

// loadHints queues the timers of the KV index: the committed states'.
func (c *Core[S, O]) loadHints() error {
	for k := range c.kv.Scan(c.timerPrefix) {
		b := k[len(c.timerPrefix):]
		if len(b) < 9 {
			return fmt.Errorf("engine: %s: corrupt timer index entry %q", c.cfg.Input, k)
		}
		t := store.Timer{Kind: store.TimerKind(b[0]), At: int64(binary.BigEndian.Uint64(b[1:9]) ^ (1 << 63))}
		c.hint(string(b[9:]), t)
	}
	return nil
}

// Watermark is the event-time watermark: the largest record timestamp, in
// Unix milliseconds, fed since the core was made (ok false: none yet).
func (c *Core[S, O]) Watermark() (int64, bool) {
	return c.tm.watermark, c.tm.watermark != math.MinInt64
}

// TimersDue reports whether a timer may be due at nowMillis (processing
// time) or at the watermark (event time): one look at each heap.
func (c *Core[S, O]) TimersDue(nowMillis int64) bool {
	p, e := c.tm.heaps[0], c.tm.heaps[1]
	return len(p) > 0 && p[0].at <= nowMillis || len(e) > 0 && e[0].at <= c.tm.watermark
}

// NextProcessingTimer is when the earliest processing-time timer may be
// due, in Unix milliseconds (ok false: none), for the poll's wait: a hint,
// so at worst an early wake.
func (c *Core[S, O]) NextProcessingTimer() (at int64, ok bool) {
	if p := c.tm.heaps[0]; len(p) > 0 {
		return p[0].at, true
	}
	return 0, false
}

// Timers returns a key's timers, sorted by (At, Kind).
func (c *Core[S, O]) Timers(key []byte) ([]store.Timer, error) {
	sl, err := c.load(key)
	if err != nil || sl == nil {
		return nil, err
	}
	return slices.Clone(sl.timers), nil
}

// FireTimers runs every timer due: processing-time ones at or before
// nowMillis, event-time ones at or before the watermark, in the order of
// their time (then key, processing time first). Each fired timer is
// removed in the same state change as its handler's effect, so the key's
// next snapshot carries both or neither. A timer whose handler fails or
// panics stays in its key's state, and the firing goes on with the next:
// the failures come back in order, for the engine's poison policy
// (SkipTimer removes one). err is a failure of the cache, which stops
// the core.
func (c *Core[S, O]) FireTimers(nowMillis int64) (fired []Fired[O], failed []*FoldError, err error) {
	if c.stopped != nil || c.poisoned != nil {
		return nil, nil, c.stopped
	}
	// The timers due now, taken before any fires: one that a handler sets
	// in the past fires at the next call (the next record or poll), not
	// in this one, so a handler that always does cannot spin here.
	var due []timerRef
	for h, limit := range [2]int64{nowMillis, c.tm.watermark} {
		kind := store.ProcessingTime
		if h == 1 {
			kind = store.EventTime
		}
		for hs := &c.tm.heaps[h]; len(*hs) > 0 && (*hs)[0].at <= limit; {
			x := heap.Pop(hs).(hint)
			ref := timerRef{kind: kind, at: x.at, key: x.key}
			delete(c.tm.queued, ref)
			due = append(due, ref)
		}
	}
	slices.SortFunc(due, func(a, b timerRef) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.key, b.key), -cmp.Compare(a.kind, b.kind))
	})
	for _, ref := range due {
		t := store.Timer{Kind: ref.kind, At: ref.at}
		key := []byte(ref.key)
		sl, err := c.load(key)
		if err != nil {
			return nil, nil, c.stop(err)
		}
		if sl == nil || !hasTimer(sl.timers, t) {
			if err := c.staleHint(key, t); err != nil {
				return nil, nil, c.stop(err)
			}
			continue
		}
		var ch Change[S, O]
		if rerr := c.refusal(refusedAt{offset: -1, key: ref.key, timer: t, isTimer: true}); rerr != nil {
			err = &FoldError{Input: c.cfg.Input, Offset: -1, Key: key, Timer: &t, Err: rerr}
		} else {
			ch, err = c.callTimer(key, sl.state, t)
		}
		if err == nil {
			if cerr := c.checkTimers(&ch, ch.Op == Set || ch.Op == Keep && sl.live); cerr != nil {
				err = &FoldError{Input: c.cfg.Input, Offset: -1, Key: key, Timer: &t, Err: cerr}
			}
		}
		if err != nil {
			failed = append(failed, err.(*FoldError))
			continue
		}
		if err := c.apply(key, sl, ch, -1, &t); err != nil {
			return nil, nil, c.stop(err)
		}
		if len(ch.Outputs) > 0 {
			fired = append(fired, Fired[O]{Key: key, Timer: &t, Outputs: ch.Outputs})
		}
	}
	return fired, failed, nil
}

// SkipTimer removes the timer whose handler failed (the poison policy
// skips it): the key keeps its state, and the removal goes with its next
// snapshot.
func (c *Core[S, O]) SkipTimer(fe *FoldError) error {
	if fe.Timer == nil {
		return fmt.Errorf("engine: %s: skip of a timer of key %q that did not fail", c.cfg.Input, fe.Key)
	}
	sl, err := c.load(fe.Key)
	if err != nil {
		return c.stop(err)
	}
	if sl == nil || !hasTimer(sl.timers, *fe.Timer) {
		return nil
	}
	return c.stop(c.apply(fe.Key, sl, Change[S, O]{}, -1, fe.Timer))
}

// staleHint drops the KV index entry of a hint whose timer the key no
// longer holds, if its committed state does not hold it either (it may,
// while the removal is not yet durable: then the entry stays, for a warm
// restart that needs it).
func (c *Core[S, O]) staleHint(key []byte, t store.Timer) error {
	if err := c.settle(); err != nil {
		return err
	}
	v, ok, err := c.kv.Get(c.stateKey(key))
	if err != nil {
		return err
	}
	if ok {
		sl, err := c.decodeEntry(key, v)
		if err != nil {
			return err
		}
		if hasTimer(sl.timers, t) {
			return nil
		}
	}
	return c.kv.Delete(c.timerKey(t, key))
}

func (c *Core[S, O]) callTimer(key []byte, state S, t store.Timer) (ch Change[S, O], err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &FoldError{Input: c.cfg.Input, Offset: -1, Key: key, Timer: &t, Panic: p}
		}
	}()
	if c.cfg.Timer == nil { // a recovered timer, and no handler now
		return ch, &FoldError{Input: c.cfg.Input, Offset: -1, Key: key, Timer: &t, Err: ErrNoTimerHandler}
	}
	ch, err = c.cfg.Timer(key, state, t)
	if err != nil {
		err = &FoldError{Input: c.cfg.Input, Offset: -1, Key: key, Timer: &t, Err: err}
	}
	return ch, err
}

// retimed records what a change did to key's timers (old to now): new ones
// are queued, removed ones wait in unindex for the write that commits
// their removal.
func (c *Core[S, O]) retimed(key string, old, now []store.Timer) {
	for _, t := range now {
		if !hasTimer(old, t) {
			c.hint(key, t)
		}
	}
	for _, t := range old {
		if !hasTimer(now, t) {
			c.tm.unindex[key] = append(c.tm.unindex[key], t)
		}
	}
}

// takeUnindex hands the timers removed from key since its last write to
// the write being taken.
func (c *Core[S, O]) takeUnindex(key string) []store.Timer {
	if len(c.tm.unindex) == 0 {
		return nil
	}
	ts := c.tm.unindex[key]
	delete(c.tm.unindex, key)
	return ts
}

// timersEqual reports whether two sorted timer sets are the same.
func timersEqual(a, b []store.Timer) bool { return slices.Equal(a, b) }
