// Package core is the engine's per-partition logic as a pure,
// deterministic state machine: no I/O, no clock, no goroutines. The caller
// feeds it what happened (a recovered snapshot, an input record, a tick with
// the time, the outcome of a snapshot write) and carries out what it asks
// for (snapshot writes, the committable offset, output records). The same
// core runs under the simulated cluster, kfake and real Kafka.
//
// State lives in memory while it is used and in a KV the caller provides
// (Pebble in production, memory in tests) otherwise, so a partition's state
// may exceed memory.
package core

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"slices"

	"github.com/snapfence/snapfence/internal/input"
	"github.com/snapfence/snapfence/store"
)

// Record is one input record, as a source polls it. The engine's Record
// has the same fields in the same order, so the engine hands its records
// over by a pointer conversion.
type Record = input.Record

// Op is what a Change does to a key's state. The zero Op is Keep, so a
// zero Change changes nothing: a fold that forgets to say what it did
// cannot reset a key to its zero state.
type Op uint8

const (
	// Keep leaves the state as it was (the Change may still carry outputs).
	Keep Op = iota
	// Set replaces the state with Change.State.
	Set
	// Delete removes the key's state (a tombstone keeps its offset).
	Delete
)

// Change is what a fold or tick made of a key's state. O is the type of
// the outputs, which the core only passes on: the engine's own Output, so
// that outputs are never converted on their way out.
type Change[S, O any] struct {
	Op Op
	// State is the new state when Op is Set; ignored otherwise.
	State   S
	Outputs []O
	// Timers are the changes of the key's timers, applied in order after
	// Op.
	Timers []TimerOp
}

// FoldFunc folds one record into a key's state (exists is false for a new
// or deleted key). rec is the core's: the fold must not keep it.
type FoldFunc[S, O any] func(key []byte, state S, exists bool, rec *Record) (Change[S, O], error)

// TickFunc is called for every live key on a tick, with the time in Unix
// milliseconds.
type TickFunc[S, O any] func(key []byte, state S, nowMillis int64) (Change[S, O], error)

// Codec encodes states for snapshots and for the KV.
type Codec[S any] interface {
	Encode(S) ([]byte, error)
	Decode([]byte) (S, error)
}

// BytesCodec is the identity codec of []byte states.
type BytesCodec struct{}

func (BytesCodec) Encode(b []byte) ([]byte, error) { return b, nil }
func (BytesCodec) Decode(b []byte) ([]byte, error) { return b, nil }

// KV is the local cache the core keeps cold state in. Values returned by
// Get and Scan are valid until the next call that changes the KV.
type KV interface {
	Get(key []byte) (value []byte, ok bool, err error)
	Set(key, value []byte) error
	Delete(key []byte) error
	// Scan yields every entry whose key starts with prefix, in key order.
	Scan(prefix []byte) iter.Seq2[[]byte, []byte]
	// DeletePrefix removes every entry whose key starts with prefix.
	DeletePrefix(prefix []byte) error
	// Apply writes ws atomically: after a crash either all of them or
	// none of them are there, and every write applied before them is.
	// It keeps none of ws's slices once it returns: the core reuses them.
	Apply(ws []Write) error
}

// Write is one write of a KV.Apply batch.
type Write struct {
	Key, Value []byte
	Delete     bool
}

// FoldError names the record a fold failed on. Nothing past it is
// committed: the record is not consumed.
type FoldError struct {
	Input  store.TopicPartition
	Offset int64
	Key    []byte
	// Panic is the recovered value if the fold panicked.
	Panic any
	Err   error
	// Timer is the timer whose handler failed; nil for a fold or a tick.
	Timer *store.Timer
}

func (e *FoldError) Error() string {
	what := fmt.Sprint(e.Err)
	if e.Panic != nil {
		what = fmt.Sprintf("panic: %v", e.Panic)
	}
	if e.Timer != nil {
		return fmt.Sprintf("engine: %v timer at %d of %s key %q failed: %s", e.Timer.Kind, e.Timer.At, e.Input, e.Key, what)
	}
	if e.Offset < 0 {
		return fmt.Sprintf("engine: tick of %s key %q failed: %s", e.Input, e.Key, what)
	}
	return fmt.Sprintf("engine: fold of %s offset %d key %q failed: %s", e.Input, e.Offset, e.Key, what)
}

func (e *FoldError) Unwrap() error { return e.Err }

// StateError names a cached or recovered state that does not decode.
type StateError struct {
	Input  store.TopicPartition
	Key    []byte
	Offset int64
	Err    error
}

func (e *StateError) Error() string {
	return fmt.Sprintf("engine: %s: the state of key %q (input offset %d) does not decode: %v", e.Input, e.Key, e.Offset, e.Err)
}

func (e *StateError) Unwrap() error { return e.Err }

// DefaultHotKeys is how many keys' decoded states a core keeps in memory.
const DefaultHotKeys = 1 << 16

// Config configures a Core.
type Config[S, O any] struct {
	Input store.TopicPartition
	Fold  FoldFunc[S, O]
	Tick  TickFunc[S, O]
	// Timer runs a key's due timer; nil refuses every Change that sets
	// one (ErrNoTimerHandler).
	Timer TimerFunc[S, O]
	Codec Codec[S]
	// Assigned is the offset the input resumes from.
	Assigned int64
	// HotKeys bounds the decoded states kept in memory; the rest live
	// encoded in the KV. Default DefaultHotKeys.
	HotKeys int
	// Warm keeps the partition's committed states and checkpoint in the
	// KV (a delta recovery follows); otherwise New drops them (a full
	// recovery follows). Uncommitted states are dropped either way.
	Warm bool
	// Refused are the records, ticks and timers whose outputs the broker
	// refused for good in an earlier run of the partition: each fails
	// with its Err when it comes again, without running the fold or
	// handler, for the poison policy (a run that makes the same outputs
	// would be refused the same way).
	Refused []Refusal
}

// Refusal names a record (Offset), a key's tick (Offset -1, Key), or a
// key's timer (Offset -1, Key, Timer) whose outputs were refused, and why.
type Refusal struct {
	Offset int64
	Key    []byte
	Timer  *store.Timer
	Err    error
}

// refusedAt is a Refusal's record, tick or timer, as a map key.
type refusedAt struct {
	offset  int64
	key     string
	timer   store.Timer
	isTimer bool
}

// refusal takes the refusal of at, if there is one.
func (c *Core[S, O]) refusal(at refusedAt) error {
	if len(c.refused) == 0 {
		return nil
	}
	err, ok := c.refused[at]
	if ok {
		delete(c.refused, at)
	}
	return err
}

// Fired is the outputs of one key's tick or timer (Timer nil: a tick).
type Fired[O any] struct {
	Key     []byte
	Timer   *store.Timer
	Outputs []O
}

// Core is one input partition's state machine.
//
// A key's state is decoded once, when first touched, and kept in memory
// (hot) while it is used; it is encoded only for a snapshot write, and
// written to the KV when its snapshot is durable or when memory runs over
// HotKeys. So a fold costs a map lookup, not a KV read and write.
type Core[S, O any] struct {
	cfg Config[S, O]
	kv  KV
	// refused are Config.Refused, each removed once it has failed.
	refused map[refusedAt]error
	// The partition's entries in a shared KV, under three prefixes:
	// statePrefix holds committed states only (each one a snapshot the
	// store reported durable, or a recovered one), overlayPrefix the
	// states of dirty keys evicted from memory, checkpointKey the store's
	// checkpoint of the committed states. A crash, a teardown or a
	// restart drops the overlay: what survives is committed.
	statePrefix   []byte
	overlayPrefix []byte
	checkpointKey []byte
	// timerPrefix holds the index of the committed states' timers
	// (timers.go).
	timerPrefix []byte
	tm          timers
	// overlaid: the keys with an entry under overlayPrefix: dirty ones,
	// and landed ones until the pending writes that delete it are applied.
	overlaid map[string]struct{}
	// pending: the committed-state writes of WriteDone, applied with the
	// checkpoint by Durable (or before the next change).
	pending []Write
	// pendingState: the index in pending of each key's committed-state
	// write: a key committed again before they are applied replaces it
	// (Defer).
	pendingState map[string]int
	// deferred: the newest checkpoint Defer was given; it covers the
	// pending writes, and goes with them.
	deferred []byte
	// pendingBuf holds the pending writes' keys; a new one is begun when
	// it fills.
	pendingBuf []byte
	// unoverlaid: the keys whose overlay the pending writes delete; they
	// stay overlaid until those are applied.
	unoverlaid []string
	hot        map[string]*slot[S]
	// dirty: keys whose change is not in a durable snapshot, each with the
	// first input offset it holds.
	dirty map[string]int64
	// inflight: keys taken for a write, with what that write carries.
	inflight map[string]written
	// hotOrder is the hot keys in the order they became hot, oldest first:
	// eviction takes them in this order. An entry whose slot is no longer
	// the key's hot slot is stale and skipped.
	hotOrder []hotEntry[S]
	// onlyHotInKV: every key with an entry in the partition's part of the
	// KV is hot, so a key that is not hot has no state and its first
	// touch reads nothing. It holds from a Drop (a partition started
	// afresh, or a first start) until a key leaves the hot set, a
	// recovered snapshot is not kept hot, a replicated one is written, or
	// the uncommitted states are dropped.
	onlyHotInKV bool
	// flushRound is what is left of the current flush round: the keys that
	// were dirty when it began, in key order. Flush hands them out a batch
	// at a time.
	flushRound []string
	// consumed is the offset after the last record fed.
	consumed int64
	stopped  error
	// poisoned is the record a fold failed on: no later record is fed
	// until Skip passes it.
	poisoned *FoldError
}

// hotEntry is a key of hotOrder with the slot it was made hot with.
type hotEntry[S any] struct {
	key  string
	slot *slot[S]
}

type slot[S any] struct {
	live   bool
	offset int64 // input offset of the last event folded into the state
	state  S
	// timers are the key's timers, sorted by (At, Kind); nil for most
	// keys. Never written to: a new slice replaces it.
	timers []store.Timer
	// dirty and busy mirror the key's membership of Core.dirty and
	// Core.inflight while the slot is the key's hot slot (set by makeHot,
	// kept by apply, flush and WriteDone), so that a fold of a hot key
	// costs one map lookup, not three. A slot that is not hot (a cold key
	// peeked, an evicted one) is never read for them.
	dirty, busy bool
	// key is the key of the hot map's entry, which apply marks dirty
	// with: a string made once, when the key became hot.
	key string
}

type written struct {
	offset int64
	entry  []byte // the KV entry to keep once the write is durable
	// timers is the written state's timers, nil for a key that has
	// none and removed none (most keys: the map's values stay small).
	timers *writtenTimers
	// stale: the key changed after the write was taken (a fold or a
	// tick while it was in flight), so it stays dirty once the write
	// lands. A tick leaves the key's offset alone, so the offset alone
	// cannot tell.
	stale bool
}

// writtenTimers are a written state's timers, whose KV index entries go
// with it, and the timers removed before it (unindex), whose entries go
// then.
type writtenTimers struct{ timers, unindex []store.Timer }

// writtenTimersOf is what a write of a state with timers, after removals
// unindex, carries; nil when both are empty.
func writtenTimersOf(timers, unindex []store.Timer) *writtenTimers {
	if len(timers) == 0 && len(unindex) == 0 {
		return nil
	}
	return &writtenTimers{timers: timers, unindex: unindex}
}

// New returns a core for one partition, with an empty state for it in kv.
func New[S, O any](cfg Config[S, O], kv KV) (*Core[S, O], error) {
	if cfg.HotKeys <= 0 {
		cfg.HotKeys = DefaultHotKeys
	}
	pp := partitionPrefix(cfg.Input)
	c := &Core[S, O]{
		cfg: cfg, kv: kv, consumed: cfg.Assigned,
		statePrefix: append([]byte{'s'}, pp...), overlayPrefix: append([]byte{'d'}, pp...), checkpointKey: append([]byte{'c'}, pp...),
		timerPrefix: append([]byte{'t'}, pp...), tm: newTimers(),
		hot: map[string]*slot[S]{}, dirty: map[string]int64{}, inflight: map[string]written{}, overlaid: map[string]struct{}{},
		pendingState: map[string]int{},
		refused:      map[refusedAt]error{},
	}
	for _, r := range cfg.Refused {
		at := refusedAt{offset: r.Offset}
		if r.Offset < 0 {
			at.key = string(r.Key)
			if r.Timer != nil {
				at.timer = *r.Timer
				at.isTimer = true
			}
		}
		c.refused[at] = r.Err
	}
	drop := c.Drop
	if cfg.Warm {
		drop = c.DropUncommitted
	}
	if err := drop(); err != nil {
		return nil, err
	}
	return c, nil
}

func partitionPrefix(tp store.TopicPartition) []byte {
	b := binary.AppendUvarint(nil, uint64(len(tp.Topic)))
	b = append(b, tp.Topic...)
	return binary.BigEndian.AppendUint32(b, uint32(tp.Partition))
}

// An entry is a key's state in the KV: flags, the input offset of the last
// event folded into it, its timers if it has any (flagTimers), the encoded
// state.
const (
	flagLive    = 1
	entryHeader = 9
)

func encodeEntry(live bool, offset int64, timers []store.Timer, state []byte) []byte {
	return appendEntry(make([]byte, 0, entryHeader+timersSize(timers)+len(state)), live, offset, timers, state)
}

func appendEntry(b []byte, live bool, offset int64, timers []store.Timer, state []byte) []byte {
	var flags byte
	if live {
		flags = flagLive
	}
	if len(timers) > 0 {
		flags |= flagTimers
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint64(b, uint64(offset))
	if len(timers) > 0 {
		b = appendTimers(b, timers)
	}
	return append(b, state...)
}

func (c *Core[S, O]) stateKey(k []byte) []byte {
	return append(append(make([]byte, 0, len(c.statePrefix)+len(k)), c.statePrefix...), k...)
}

func (c *Core[S, O]) overlayKey(k []byte) []byte {
	return append(append(make([]byte, 0, len(c.overlayPrefix)+len(k)), c.overlayPrefix...), k...)
}

// decodeEntry decodes a KV entry of key k.
func (c *Core[S, O]) decodeEntry(k, v []byte) (*slot[S], error) {
	return decodeEntryOf(c.cfg.Input, c.cfg.Codec, k, v)
}

// decodeEntryOf decodes a KV entry of input's key k with codec.
func decodeEntryOf[S any](input store.TopicPartition, codec Codec[S], k, v []byte) (*slot[S], error) {
	if len(v) < entryHeader {
		return nil, fmt.Errorf("engine: corrupt cache entry of key %q", k)
	}
	sl := &slot[S]{live: v[0]&flagLive != 0, offset: int64(binary.BigEndian.Uint64(v[1:9]))}
	state := v[entryHeader:]
	if v[0]&flagTimers != 0 {
		var ok bool
		if sl.timers, state, ok = decodeTimers(state); !ok {
			return nil, fmt.Errorf("engine: corrupt timers in the cache entry of key %q", k)
		}
	}
	if sl.live {
		s, err := codec.Decode(bytes.Clone(state))
		if err != nil {
			return nil, &StateError{Input: input, Key: bytes.Clone(k), Offset: sl.offset, Err: err}
		}
		sl.state = s
	}
	return sl, nil
}

// load returns the key's slot, reading it from the KV if it is not hot
// (and keeping it hot); nil if the key has no state at all.
func (c *Core[S, O]) load(k []byte) (*slot[S], error) {
	sl, cold, err := c.peek(k)
	if err == nil && cold {
		c.makeHot(string(k), sl)
	}
	return sl, err
}

func (c *Core[S, O]) makeHot(k string, sl *slot[S]) {
	_, sl.dirty = c.dirty[k]
	_, sl.busy = c.inflight[k]
	sl.key = k
	c.hot[k] = sl
	c.hotOrder = append(c.hotOrder, hotEntry[S]{key: k, slot: sl})
}

// peek is load without keeping a cold key hot: for flushes, which touch
// every dirty key once.
func (c *Core[S, O]) peek(k []byte) (sl *slot[S], cold bool, err error) {
	if sl, ok := c.hot[string(k)]; ok {
		return sl, false, nil
	}
	return c.peekCold(k)
}

// peekCold reads a key that is not hot from the KV.
func (c *Core[S, O]) peekCold(k []byte) (sl *slot[S], cold bool, err error) {
	if c.onlyHotInKV {
		return nil, false, nil
	}
	key := c.stateKey(k)
	if c.isOverlaid(k) {
		key = c.overlayKey(k)
	}
	v, ok, err := c.kv.Get(key)
	if err != nil || !ok {
		return nil, false, err
	}
	sl, err = c.decodeEntry(k, v)
	return sl, err == nil, err
}

// isOverlaid reports whether k's state is in the overlay; most partitions
// have none, and then it costs no lookup.
func (c *Core[S, O]) isOverlaid(k []byte) bool {
	if len(c.overlaid) == 0 {
		return false
	}
	_, ok := c.overlaid[string(k)]
	return ok
}

// Recovered loads one recovered snapshot. Snapshots arrive in log order; a
// later one of a key replaces an earlier one. It goes to the KV as it came,
// encoded: a key is decoded when first touched.
func (c *Core[S, O]) Recovered(s store.Snapshot) error {
	c.onlyHotInKV = false
	return c.recovered(s)
}

// recovered is Recovered, leaving onlyHotInKV to the caller.
func (c *Core[S, O]) recovered(s store.Snapshot) error {
	if err := c.settle(); err != nil {
		return err
	}
	delete(c.hot, string(s.Key))
	s.Timers = sortedTimers(s.Timers)
	entry := encodeEntry(!s.Tombstone, s.Offset, s.Timers, s.Value)
	if len(s.Timers) == 0 {
		return c.kv.Set(c.stateKey(s.Key), entry)
	}
	for _, t := range s.Timers {
		c.hint(string(s.Key), t)
	}
	return c.kv.Apply(c.indexWrites([]Write{{Key: c.stateKey(s.Key), Value: entry}}, s.Key, s.Timers))
}

// KeepsRecovered reports whether RecoveredState keeps key's decoded state
// in memory: the key is hot already (an earlier snapshot of it), or there
// is room under HotKeys. A caller decodes a copy of the snapshot only
// then: a state the core keeps must not share the store's bytes.
func (c *Core[S, O]) KeepsRecovered(key []byte) bool {
	_, hot := c.hot[string(key)]
	return hot || len(c.hot) < c.cfg.HotKeys
}

// RecoveredState is Recovered for a live snapshot whose state the caller
// decoded (to check it): the state is kept in memory when KeepsRecovered
// says so, so that the key's first touch need not decode it again. The
// core keeps state: the caller must not change it after.
func (c *Core[S, O]) RecoveredState(s store.Snapshot, state S) error {
	if s.Tombstone {
		return fmt.Errorf("engine: a tombstone of key %q recovered with a state", s.Key)
	}
	s.Timers = sortedTimers(s.Timers)
	prev, wasHot := c.hot[string(s.Key)]
	keep := wasHot || len(c.hot) < c.cfg.HotKeys
	if !keep {
		c.onlyHotInKV = false
	}
	if err := c.recovered(s); err != nil {
		c.onlyHotInKV = false
		return err
	}
	switch {
	case wasHot:
		// The key's slot again, updated: its entry in hotOrder stays
		// valid, and a key recovered many times adds none.
		prev.live, prev.offset, prev.state, prev.timers = true, s.Offset, state, s.Timers
		c.hot[string(s.Key)] = prev
	case keep:
		c.makeHot(string(s.Key), &slot[S]{live: true, offset: s.Offset, state: state, timers: s.Timers})
	}
	return nil
}

// Replicated writes snapshots a standby read (committed, in log order)
// with checkpoint (nil: none), in one atomic KV batch: a standby's copy
// of a partition it does not own. The core must hold nothing else of the
// partition (no fold ran on it).
func (c *Core[S, O]) Replicated(snaps []store.Snapshot, checkpoint []byte) error {
	c.onlyHotInKV = false
	ws := make([]Write, 0, len(snaps)+1)
	for _, s := range snaps {
		s.Timers = sortedTimers(s.Timers)
		ws = append(ws, Write{Key: c.stateKey(s.Key), Value: encodeEntry(!s.Tombstone, s.Offset, s.Timers, s.Value)})
		ws = c.indexWrites(ws, s.Key, s.Timers)
	}
	if checkpoint != nil {
		ws = append(ws, Write{Key: c.checkpointKey, Value: checkpoint})
	}
	if len(ws) == 0 {
		return nil
	}
	return c.kv.Apply(ws)
}

// Fold feeds one input record. A record at or below the key's last folded
// offset was already folded (a replay after recovery) and is skipped: the
// exactly-once state effect. It returns the outputs to emit.
//
// A fold that fails or panics returns a *FoldError naming the record, and
// the core refuses every later record with it (nothing past the record is
// consumed, so nothing past it is committable) until Skip passes it.
// Flush, WriteDone and Committable go on working: what was folded before
// the record is intact.
func (c *Core[S, O]) Fold(rec *Record) ([]O, error) {
	if c.stopped != nil {
		return nil, c.stopped
	}
	if c.poisoned != nil {
		return nil, c.poisoned
	}
	if rec.Offset < c.cfg.Assigned {
		return nil, nil // before the resume point
	}
	if !rec.Timestamp.IsZero() {
		c.tm.watermark = max(c.tm.watermark, rec.Timestamp.UnixMilli())
	}
	sl, err := c.load(rec.Key)
	if err != nil {
		return nil, c.stop(err)
	}
	if sl != nil && rec.Offset <= sl.offset {
		c.consumed = max(c.consumed, rec.Offset+1)
		return nil, nil
	}
	var state S
	exists := false
	if sl != nil {
		state, exists = sl.state, sl.live
	}
	var ch Change[S, O]
	if rerr := c.refusal(refusedAt{offset: rec.Offset}); rerr != nil {
		err = &FoldError{Input: c.cfg.Input, Offset: rec.Offset, Key: rec.Key, Err: rerr}
	} else {
		ch, err = c.callFold(rec, state, exists)
	}
	if err == nil && len(ch.Timers) > 0 {
		if cerr := c.checkTimers(&ch, ch.Op == Set || ch.Op == Keep && exists); cerr != nil {
			err = &FoldError{Input: c.cfg.Input, Offset: rec.Offset, Key: rec.Key, Err: cerr}
		}
	}
	if err != nil {
		// The record is poison, not the cache: what was folded before it
		// can still be flushed and committed (the engine commits it before
		// it stops, or skips the record), so the core is not stopped.
		c.poisoned = err.(*FoldError)
		return nil, err
	}
	if err := c.apply(rec.Key, sl, ch, rec.Offset, nil); err != nil {
		return nil, c.stop(err)
	}
	c.consumed = max(c.consumed, rec.Offset+1)
	return ch.Outputs, nil
}

// Skip passes the record a fold failed on (the poison policy skips it):
// the key keeps its state, the record counts as consumed, and the core
// folds again from the next record.
func (c *Core[S, O]) Skip(fe *FoldError) error {
	if c.poisoned == nil || fe != c.poisoned {
		return fmt.Errorf("engine: %s: skip of offset %d, which did not fail", c.cfg.Input, fe.Offset)
	}
	c.poisoned = nil
	c.consumed = max(c.consumed, fe.Offset+1)
	return nil
}

// Discard deletes key, whose recovered state the engine could not decode
// (the poison policy skips it): the key is absent from now on, and its
// tombstone goes with the next flush. Recover the key as a tombstone at
// its snapshot's offset first, so that replays below it stay skipped.
func (c *Core[S, O]) Discard(key []byte) error {
	sl, err := c.load(key)
	if err != nil {
		return c.stop(err)
	}
	return c.stop(c.apply(key, sl, Change[S, O]{Op: Delete}, -1, nil))
}

// Poisoned is the record a fold failed on, if the core waits for it to be
// skipped.
func (c *Core[S, O]) Poisoned() *FoldError { return c.poisoned }

func (c *Core[S, O]) callFold(rec *Record, state S, exists bool) (ch Change[S, O], err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &FoldError{Input: c.cfg.Input, Offset: rec.Offset, Key: rec.Key, Panic: p}
		}
	}()
	ch, err = c.cfg.Fold(rec.Key, state, exists, rec)
	if err != nil {
		err = &FoldError{Input: c.cfg.Input, Offset: rec.Offset, Key: rec.Key, Err: err}
	}
	return ch, err
}

// apply records a change of key k folded at offset (-1 for a tick or a
// timer; fired is the timer, removed with the change) and marks the key
// dirty, holding the first offset not yet in a durable snapshot.
func (c *Core[S, O]) apply(k []byte, sl *slot[S], ch Change[S, O], offset int64, fired *store.Timer) error {
	var old, timers []store.Timer
	if sl != nil {
		old, timers = sl.timers, sl.timers
	}
	if fired != nil || len(ch.Timers) > 0 || ch.Op == Delete && len(old) > 0 {
		timers = nextTimers(old, fired, &ch)
	}
	retimed := !timersEqual(old, timers)
	if ch.Op != Set && ch.Op != Delete && !retimed {
		return nil // Keep, the zero Op
	}
	if sl == nil {
		sl = &slot[S]{offset: -1}
		c.makeHot(string(k), sl)
	}
	if sl.busy {
		if w, ok := c.inflight[sl.key]; ok && !w.stale {
			w.stale = true
			c.inflight[sl.key] = w
		}
	}
	// A Keep that changed the timers folded its record too: its offset is
	// the key's, so that a replay does not set them again.
	sl.offset = max(offset, sl.offset)
	if ch.Op == Set || ch.Op == Delete {
		sl.live = ch.Op == Set
		var zero S
		sl.state = zero
		if sl.live {
			sl.state = ch.State
		}
	}
	if retimed {
		sl.timers = timers
		c.retimed(sl.key, old, timers)
	}
	if fired != nil && hasTimer(timers, *fired) {
		c.hint(sl.key, *fired) // set again by its handler: its hint was taken
	}
	if !sl.dirty {
		held := offset
		if offset < 0 { // a tick: nothing to replay; hold what is consumed
			held = c.consumed
		}
		c.dirty[sl.key] = held
		sl.dirty = true
	}
	return c.evict()
}

// evict keeps the hot set within HotKeys: clean keys are dropped (their
// durable state is in the KV), dirty ones are written to the KV first.
// Keys go in the order they became hot, oldest first, never in the map's
// random order: which states pass through the codec, and when, is the
// same on every run.
func (c *Core[S, O]) evict() error {
	over := len(c.hot) - c.cfg.HotKeys
	if over <= 0 {
		return nil
	}
	// A clean key is dropped as its committed state is in the KV: the
	// pending ones must be there first.
	if err := c.settle(); err != nil {
		return err
	}
	over += c.cfg.HotKeys / 8 // make room for a while
	var busy []hotEntry[S]    // being written: kept, oldest still
	n := 0
	for ; n < len(c.hotOrder) && over > 0; n++ {
		e := c.hotOrder[n]
		if c.hot[e.key] != e.slot {
			continue // stale: evicted, dropped or replaced since
		}
		if e.slot.busy {
			busy = append(busy, e)
			continue
		}
		if e.slot.dirty {
			// Never over the committed state: a crash or a teardown
			// now must find the key as it was committed.
			enc, err := c.encode(e.key, e.slot)
			if err == nil {
				err = c.kv.Set(c.overlayKey([]byte(e.key)), enc)
			}
			if err == nil {
				c.overlaid[e.key] = struct{}{}
			}
			if err != nil {
				c.hotOrder = append(busy, c.hotOrder[n:]...)
				return err
			}
		}
		delete(c.hot, e.key)
		c.onlyHotInKV = false
		over--
	}
	if len(busy) > 0 {
		c.hotOrder = append(busy, c.hotOrder[n:]...)
	} else {
		c.hotOrder = c.hotOrder[n:]
	}
	if len(c.hotOrder) > 2*len(c.hot)+c.cfg.HotKeys {
		// Stale entries (keys made cold by Recovered) piled up.
		c.hotOrder = slices.DeleteFunc(c.hotOrder, func(e hotEntry[S]) bool { return c.hot[e.key] != e.slot })
	}
	return nil
}

// encode is key k's KV entry.
func (c *Core[S, O]) encode(k string, sl *slot[S]) ([]byte, error) {
	state, err := c.encodeState(k, sl)
	if err != nil {
		return nil, err
	}
	return encodeEntry(sl.live, sl.offset, sl.timers, state), nil
}

// encodeState is key k's state through the codec (nil for a deleted key).
func (c *Core[S, O]) encodeState(k string, sl *slot[S]) ([]byte, error) {
	if !sl.live {
		return nil, nil
	}
	b, err := c.cfg.Codec.Encode(sl.state)
	if err != nil {
		return nil, fmt.Errorf("engine: %s: encoding the state of key %q: %w", c.cfg.Input, k, err)
	}
	return b, nil
}

// Tick runs the tick function over every live key. A key whose tick fails
// or panics keeps its state, and the tick goes on with the next key: the
// failures come back in key order, for the engine's poison policy. err is
// a failure of the cache, which stops the core.
func (c *Core[S, O]) Tick(nowMillis int64) (fired []Fired[O], failed []*FoldError, err error) {
	if c.stopped != nil || c.cfg.Tick == nil {
		return nil, nil, c.stopped
	}
	if err := c.settle(); err != nil {
		return nil, nil, c.stop(err)
	}
	var cold [][]byte
	for k := range c.kv.Scan(c.statePrefix) {
		key := k[len(c.statePrefix):]
		_, hot := c.hot[string(key)]
		_, over := c.overlaid[string(key)]
		if !hot && !over {
			cold = append(cold, bytes.Clone(key))
		}
	}
	for k := range c.overlaid {
		if _, hot := c.hot[k]; !hot {
			cold = append(cold, []byte(k))
		}
	}
	keys := cold
	for k := range c.hot {
		keys = append(keys, []byte(k))
	}
	// In key order: the tick function sees the keys, and the outputs come
	// out, in the same order on every run.
	slices.SortFunc(keys, bytes.Compare)
	for _, k := range keys {
		sl, err := c.load(k)
		if err != nil {
			return nil, nil, c.stop(err)
		}
		if sl == nil || !sl.live {
			continue
		}
		var ch Change[S, O]
		if rerr := c.refusal(refusedAt{offset: -1, key: string(k)}); rerr != nil {
			err = &FoldError{Input: c.cfg.Input, Offset: -1, Key: k, Err: rerr}
		} else {
			ch, err = c.callTick(k, sl.state, nowMillis)
		}
		if err == nil && len(ch.Timers) > 0 {
			if cerr := c.checkTimers(&ch, ch.Op != Delete); cerr != nil {
				err = &FoldError{Input: c.cfg.Input, Offset: -1, Key: k, Err: cerr}
			}
		}
		if err != nil {
			failed = append(failed, err.(*FoldError))
			continue
		}
		if err := c.apply(k, sl, ch, -1, nil); err != nil {
			return nil, nil, c.stop(err)
		}
		if len(ch.Outputs) > 0 {
			fired = append(fired, Fired[O]{Key: k, Outputs: ch.Outputs})
		}
	}
	return fired, failed, nil
}

func (c *Core[S, O]) callTick(key []byte, state S, now int64) (ch Change[S, O], err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &FoldError{Input: c.cfg.Input, Offset: -1, Key: key, Panic: p}
		}
	}()
	ch, err = c.cfg.Tick(key, state, now)
	if err != nil {
		err = &FoldError{Input: c.cfg.Input, Offset: -1, Key: key, Err: err}
	}
	return ch, err
}

// Flush takes up to limit dirty keys (0: all) not already being written and
// returns their snapshots. Each must be reported back with WriteDone.
//
// Keys are taken in rounds: a round is the keys dirty when it begins, in
// key order, handed out limit at a time (a round's last batch may be
// short); a key dirtied meanwhile waits for the next round. So which keys
// share a batch is the same on every run, and a flush of n keys sorts them
// once. Flush(0) always takes every dirty key, in key order.
func (c *Core[S, O]) Flush(limit int) ([]store.Snapshot, error) { return c.flush(limit, false) }

// FlushLive is Flush of the live keys only: a deleted key stays dirty, its
// tombstone held for a Flush. A transactional caller writes tombstones only
// in the transaction that commits the offset past them: compaction removes
// the snapshots a tombstone supersedes, and after delete.retention.ms the
// tombstone too, so one written ahead of the committed offset would leave
// the events below that offset covered by nothing.
func (c *Core[S, O]) FlushLive(limit int) ([]store.Snapshot, error) { return c.flush(limit, true) }

func (c *Core[S, O]) flush(limit int, liveOnly bool) ([]store.Snapshot, error) {
	if c.stopped != nil {
		return nil, c.stopped
	}
	if limit <= 0 {
		c.flushRound = nil
	}
	var out []store.Snapshot
	// The snapshots' keys and the entries they will leave in the KV share
	// one buffer per call, not two allocations a key (takeWrites).
	var buf []byte
	rebuilt := false
	for limit <= 0 || len(out) < limit {
		var keys []string
		if limit <= 0 {
			// Every dirty key not being written, checked as it is taken.
			keys = c.newFlushRound()
			c.flushRound = nil
			rebuilt = true
		} else {
			keys = c.takeFlushRound(limit - len(out))
		}
		if len(keys) == 0 {
			// A new round begins only when the current one has nothing
			// left to give this call.
			if len(out) > 0 || rebuilt {
				break
			}
			rebuilt = true
			c.flushRound = c.newFlushRound()
			continue
		}
		if out == nil {
			out = make([]store.Snapshot, 0, len(keys))
		}
		var err error
		if out, buf, err = c.takeWrites(out, buf, keys, liveOnly); err != nil {
			return nil, err
		}
		if limit <= 0 {
			break // the round was taken whole
		}
	}
	return out, nil
}

// takeWrites takes keys for a write: it appends each one's snapshot to
// out and marks it in flight, with the KV entry to keep once the write is
// durable. Under liveOnly a deleted key is passed over. Each key and entry
// is a part of buf, capped (s[i:j:j]), so that a later append never
// writes into it.
func (c *Core[S, O]) takeWrites(out []store.Snapshot, buf []byte, keys []string, liveOnly bool) ([]store.Snapshot, []byte, error) {
	for i, k := range keys {
		sl, err := c.dirtySlot(k)
		if err != nil {
			return nil, nil, c.stop(err)
		}
		if liveOnly && !sl.live {
			continue // held: it stays dirty
		}
		state, err := c.encodeState(k, sl)
		if err != nil {
			return nil, nil, c.stop(err)
		}
		if need := len(k) + entryHeader + timersSize(sl.timers) + len(state); cap(buf)-len(buf) < need {
			// Room for the keys left if they are like this one, in
			// parts of at most 64 KiB: a small flush stays small.
			buf = make([]byte, 0, max(need, min(need*(len(keys)-i), 64<<10)))
		}
		from := len(buf)
		buf = append(buf, k...)
		key := buf[from:len(buf):len(buf)]
		from = len(buf)
		buf = appendEntry(buf, sl.live, sl.offset, sl.timers, state)
		enc := buf[from:len(buf):len(buf)]
		s := store.Snapshot{Key: key, Offset: sl.offset, Tombstone: !sl.live, Timers: sl.timers}
		if sl.live {
			s.Value = enc[len(enc)-len(state):]
		}
		c.inflight[k] = written{offset: sl.offset, entry: enc, timers: writtenTimersOf(sl.timers, c.takeUnindex(k))}
		sl.busy = true
		out = append(out, s)
	}
	return out, buf, nil
}

// dirtySlot is the state of dirty key k, hot or cold; a dirty key always
// has one.
func (c *Core[S, O]) dirtySlot(k string) (*slot[S], error) {
	sl, ok := c.hot[k]
	var err error
	if !ok {
		sl, _, err = c.peekCold([]byte(k))
	}
	if err == nil && sl == nil {
		err = fmt.Errorf("engine: dirty key %q has no state", k)
	}
	return sl, err
}

// newFlushRound is the dirty keys not being written, in key order.
func (c *Core[S, O]) newFlushRound() []string {
	round := make([]string, 0, len(c.dirty))
	for k := range c.dirty {
		if _, busy := c.inflight[k]; !busy {
			round = append(round, k)
		}
	}
	slices.Sort(round)
	return round
}

// takeFlushRound takes up to limit (0: all) keys of the current round that
// are still dirty and not being written.
func (c *Core[S, O]) takeFlushRound(limit int) []string {
	var keys []string
	n := 0
	for ; n < len(c.flushRound) && (limit <= 0 || len(keys) < limit); n++ {
		k := c.flushRound[n]
		if _, dirty := c.dirty[k]; !dirty {
			continue
		}
		if _, busy := c.inflight[k]; busy {
			continue
		}
		keys = append(keys, k)
	}
	c.flushRound = c.flushRound[n:]
	if len(c.flushRound) == 0 {
		c.flushRound = nil
	}
	return keys
}

// WriteDone reports the outcome of a snapshot write Flush asked for. On
// success the written state goes to the KV (with the next Durable) and
// the key is clean, unless it changed meanwhile: then it stays dirty,
// holding the first offset after what was written.
func (c *Core[S, O]) WriteDone(key []byte, err error) error {
	w, ok := c.inflight[string(key)]
	if !ok {
		return fmt.Errorf("engine: write of %q reported but not taken", key)
	}
	delete(c.inflight, string(key))
	sl, hot := c.hot[string(key)]
	if hot {
		sl.busy = false
	}
	if err != nil {
		if w.timers != nil && len(w.timers.unindex) > 0 { // the removals are not written yet
			c.tm.unindex[string(key)] = append(w.timers.unindex, c.tm.unindex[string(key)]...)
		}
		return nil // still dirty: a later flush writes it again
	}
	var lerr error
	if !hot {
		sl, _, lerr = c.peekCold(key)
	}
	if lerr == nil && sl == nil {
		lerr = fmt.Errorf("engine: written key %q has no state", key)
	}
	if lerr != nil {
		return c.stop(lerr)
	}
	c.commitWritten(keyString(sl, key), key, w)
	if !w.stale {
		delete(c.dirty, string(key))
		sl.dirty = false
		if c.isOverlaid(key) {
			// The overlay goes with the pending writes; until they are
			// applied it is where the KV holds the key's state (the
			// state written, as a key being written is never evicted),
			// so the key stays overlaid until then (applied).
			c.pending = append(c.pending, Write{Key: c.pendingKey(c.overlayPrefix, key), Delete: true})
			c.unoverlaid = append(c.unoverlaid, keyString(sl, key))
		}
		return nil
	}
	// Changed since: still dirty, its newer state in memory or the
	// overlay.
	c.dirty[keyString(sl, key)] = w.offset + 1
	sl.dirty = true
	return nil
}

// commitWritten queues the writes of key's written state w to the KV's
// committed states, for the next Durable. What was written is committed
// whether or not the key changed meanwhile, and a checkpoint written with
// it covers it: left out for a key changed meanwhile, a warm recovery from
// that checkpoint would find the key in neither the cache nor the delta
// after it, and replay its later events onto no state. The index of the
// committed timers changes with the committed state, in the same batch.
// A state of k still pending is replaced: only the newest is applied.
func (c *Core[S, O]) commitWritten(k string, key []byte, w written) {
	if i, ok := c.pendingState[k]; ok {
		c.pending[i].Value = w.entry
	} else {
		c.pendingState[k] = len(c.pending)
		c.pending = append(c.pending, Write{Key: c.pendingKey(c.statePrefix, key), Value: w.entry})
	}
	if w.timers != nil {
		c.pending = c.indexWrites(c.pending, key, w.timers.timers)
		for _, t := range w.timers.unindex {
			if !hasTimer(w.timers.timers, t) {
				c.pending = append(c.pending, Write{Key: c.timerKey(t, key), Delete: true})
			}
		}
	}
}

// keyString is key as a string: the hot entry's if sl is hot (no new
// string).
func keyString[S any](sl *slot[S], key []byte) string {
	if sl.key != "" {
		return sl.key
	}
	return string(key)
}

// pendingKey is prefix+k in pendingBuf, which the pending writes' keys
// share until they are applied; both are reused after (applied).
func (c *Core[S, O]) pendingKey(prefix, k []byte) []byte {
	n := len(prefix) + len(k)
	if cap(c.pendingBuf)-len(c.pendingBuf) < n {
		c.pendingBuf = make([]byte, 0, max(n, 2*cap(c.pendingBuf), 4<<10))
	}
	from := len(c.pendingBuf)
	c.pendingBuf = append(append(c.pendingBuf, prefix...), k...)
	return c.pendingBuf[from:len(c.pendingBuf):len(c.pendingBuf)]
}

// Durable writes the committed states WriteDone reported, together with
// checkpoint (the store's, encoded by the caller; nil: the one Defer
// kept, if any), in one atomic KV batch: the checkpoint never covers
// less than the states it is written with. Call it, or Defer, after each
// batch of WriteDone calls.
func (c *Core[S, O]) Durable(checkpoint []byte) error {
	if c.stopped != nil {
		return c.stopped
	}
	if checkpoint != nil {
		c.deferred = checkpoint
	}
	return c.stop(c.settle())
}

// MaxDeferred bounds the committed states Defer keeps pending: past it,
// Defer writes them.
const MaxDeferred = 1 << 14

// Defer is Durable without the write: the committed states stay pending,
// with checkpoint, until Durable, a change that needs them in the KV
// (an eviction, a tick, a teardown), or MaxDeferred of them. A key
// committed again meanwhile is written once, its newest state. Until
// then the KV's states and checkpoint lag the store's: a committed read
// sees an older committed state, a recovery from the checkpoint reads a
// longer delta.
func (c *Core[S, O]) Defer(checkpoint []byte) error {
	if c.stopped != nil {
		return c.stopped
	}
	if checkpoint != nil {
		c.deferred = checkpoint
	}
	if len(c.pendingState) < MaxDeferred {
		return nil
	}
	return c.stop(c.settle())
}

// Deferring reports whether Defer holds committed states or a
// checkpoint the KV has not got yet.
func (c *Core[S, O]) Deferring() bool { return len(c.pending) > 0 || c.deferred != nil }

// settle applies the pending committed-state writes, with the
// checkpoint Defer kept if there is one (states may run ahead of the
// checkpoint, never behind it).
func (c *Core[S, O]) settle() error {
	ws := c.pending
	if c.deferred != nil {
		ws = append(ws, Write{Key: c.checkpointKey, Value: c.deferred})
	}
	if len(ws) == 0 {
		return nil
	}
	err := c.kv.Apply(ws)
	c.applied(ws)
	return err
}

// applied empties the pending writes once ws (them, and perhaps a
// checkpoint after them) were applied, keeping their memory for the next:
// the KV kept none of it. The entries the values point into are let go.
func (c *Core[S, O]) applied(ws []Write) {
	for _, k := range c.unoverlaid {
		delete(c.overlaid, k)
	}
	clear(c.unoverlaid)
	c.unoverlaid = c.unoverlaid[:0]
	clear(ws)
	c.pending = ws[:0]
	clear(c.pendingState)
	c.deferred = nil
	c.pendingBuf = c.pendingBuf[:0] // the last buffer; earlier ones went with their keys
}

// Checkpoint is the checkpoint last written with Durable (ok false: none
// since the partition's states were last dropped).
func (c *Core[S, O]) Checkpoint() (cp []byte, ok bool, err error) {
	v, ok, err := c.kv.Get(c.checkpointKey)
	if err != nil || !ok {
		return nil, false, err
	}
	return bytes.Clone(v), true, nil
}

// Committable is the offset that may be committed: the smallest offset
// held by a key whose change is not yet durable, or the offset after the
// last record fed when nothing is held. It never passes a change that is
// not in a durable snapshot.
func (c *Core[S, O]) Committable() int64 {
	m := c.consumed
	for _, held := range c.dirty {
		m = min(m, held)
	}
	return m
}

// CommittableIfLanded is Committable as it will be once every write in
// flight has landed: a key being written counts as durable, unless it
// changed after its write was taken (then what follows the write is
// held). A caller that commits it must make the commit depend on those
// writes (store.Partition.StartCommit): it is safe only if they land.
func (c *Core[S, O]) CommittableIfLanded() int64 {
	m := c.consumed
	for k, held := range c.dirty {
		if w, ok := c.inflight[k]; ok {
			if !w.stale {
				continue
			}
			held = w.offset + 1
		}
		m = min(m, held)
	}
	return m
}

// Untaken counts the dirty keys no write in flight carries: after a
// FlushLive, the deleted keys whose tombstones it holds.
func (c *Core[S, O]) Untaken() int {
	n := 0
	for k := range c.dirty {
		if _, ok := c.inflight[k]; !ok {
			n++
		}
	}
	return n
}

// InFlight counts the keys taken for a write and not yet reported.
func (c *Core[S, O]) InFlight() int { return len(c.inflight) }

// Consumed is the offset after the last record fed.
func (c *Core[S, O]) Consumed() int64 { return c.consumed }

// Dirty reports whether any change is not yet durable.
func (c *Core[S, O]) Dirty() bool { return len(c.dirty) > 0 }

// DirtyKeys counts the keys whose change is not yet durable: the snapshots
// the next full flush writes.
func (c *Core[S, O]) DirtyKeys() int { return len(c.dirty) }

// State returns a key's state.
func (c *Core[S, O]) State(key []byte) (state S, exists bool, err error) {
	sl, err := c.load(key)
	if err != nil || sl == nil || !sl.live {
		return state, false, err
	}
	return sl.state, true, nil
}

// Entry is a key's state as a query reads it: Offset is the input offset
// of the last event folded into State (-1: the key never had state).
type Entry[S any] struct {
	Key    []byte
	State  S
	Offset int64
}

// Peek reads a key's latest folded state without making it hot (a query
// must not change which keys stay in memory); exists is false for a key
// without state or deleted, whose offset is still returned.
func (c *Core[S, O]) Peek(key []byte) (e Entry[S], exists bool, err error) {
	sl, _, err := c.peek(key)
	if err != nil || sl == nil {
		return Entry[S]{Key: key, Offset: -1}, false, err
	}
	return Entry[S]{Key: key, State: sl.state, Offset: sl.offset}, sl.live, nil
}

// DirtySorted is the keys whose latest state is not committed, in key
// order: with the committed states, every key a latest-state range
// yields.
func (c *Core[S, O]) DirtySorted() []string {
	keys := make([]string, 0, len(c.dirty))
	for k := range c.dirty {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ReadKV is what a committed-state read needs of the KV. It is called
// from goroutines other than the core's owner, so an implementation must
// allow reads concurrent with the owner's writes (Pebble does), and its
// failures must not stop the core (they are the reader's).
type ReadKV interface {
	Get(key []byte) (value []byte, ok bool, err error)
	// Range calls fn for the entries with lower <= key < upper, in key
	// order, as of one moment, until fn returns false.
	Range(lower, upper []byte, fn func(k, v []byte) bool) error
}

// CommittedReader reads a partition's committed states (each one that of
// a durable snapshot) from the KV alone, so it may run on any goroutine
// while the core's owner folds: the owner changes committed states only
// in atomic batches (Durable). It reads nothing of the core's memory. The
// caller must make sure the partition's committed states are not being
// replaced meanwhile (a recovery): the engine reads only partitions whose
// flow runs, and checks after each read that it still does.
type CommittedReader[S any] struct {
	input  store.TopicPartition
	prefix []byte
	codec  Codec[S]
}

// CommittedReader is a reader of c's committed states.
func (c *Core[S, O]) CommittedReader() CommittedReader[S] {
	return CommittedReader[S]{input: c.cfg.Input, prefix: c.statePrefix, codec: c.cfg.Codec}
}

// Get reads key's committed state; exists is false for a key without one
// or deleted (whose offset is still returned).
func (r CommittedReader[S]) Get(kv ReadKV, key []byte) (e Entry[S], exists bool, err error) {
	e = Entry[S]{Key: key, Offset: -1}
	v, ok, err := kv.Get(append(bytes.Clone(r.prefix), key...))
	if err != nil || !ok {
		return e, false, err
	}
	return r.Decode(key, v)
}

// Prefix is the KV prefix of the partition's committed states: a key's
// entry is at Prefix followed by the key.
func (r CommittedReader[S]) Prefix() []byte { return r.prefix }

// Decode decodes key's committed entry v, read under Prefix; live is
// false for a tombstone (whose offset is still returned).
func (r CommittedReader[S]) Decode(key, v []byte) (e Entry[S], live bool, err error) {
	e = Entry[S]{Key: key, Offset: -1}
	sl, err := decodeEntryOf(r.input, r.codec, key, v)
	if err != nil {
		return e, false, err
	}
	e.State, e.Offset = sl.state, sl.offset
	return e, sl.live, nil
}

// Page reads up to n committed entries after key after (nil: from the
// first), in key order: the live ones are returned decoded, deleted ones
// skipped. last is the last key read (live or not; nil when none was):
// the next page starts after it; more says whether one may follow.
func (r CommittedReader[S]) Page(kv ReadKV, after []byte, n int) (page []Entry[S], last []byte, more bool, err error) {
	lower := append(bytes.Clone(r.prefix), after...)
	if after != nil {
		lower = append(lower, 0) // the first key after after
	}
	read := 0
	var derr error
	err = kv.Range(lower, PrefixEnd(r.prefix), func(k, v []byte) bool {
		if read == n {
			more = true
			return false
		}
		read++
		key := bytes.Clone(k[len(r.prefix):])
		last = key
		if len(v) > 0 && v[0]&flagLive == 0 {
			return true
		}
		e, _, err := r.Decode(key, v)
		if err != nil {
			derr = err
			return false
		}
		page = append(page, e)
		return true
	})
	return page, last, more, errors.Join(err, derr)
}

// PrefixEnd is the first key after every key with prefix (nil: none):
// the upper bound of a scan of the prefix.
func PrefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Keys counts the keys with live state.
func (c *Core[S, O]) Keys() int {
	n := 0
	live := func(v []byte) bool { return len(v) > 0 && v[0]&flagLive != 0 }
	for k, v := range c.kv.Scan(c.statePrefix) {
		key := k[len(c.statePrefix):]
		_, hot := c.hot[string(key)]
		_, over := c.overlaid[string(key)]
		if !hot && !over && live(v) {
			n++
		}
	}
	for k := range c.overlaid {
		if _, hot := c.hot[k]; !hot {
			if v, ok, err := c.kv.Get(c.overlayKey([]byte(k))); err == nil && ok && live(v) {
				n++
			}
		}
	}
	for _, sl := range c.hot {
		if sl.live {
			n++
		}
	}
	return n
}

// Drop removes every trace of the partition from memory and the KV, its
// checkpoint first (so that a crash in the middle leaves no checkpoint
// over a partial set of states): a full recovery follows.
func (c *Core[S, O]) Drop() error {
	c.forget()
	if err := c.kv.Apply([]Write{{Key: c.checkpointKey, Delete: true}}); err != nil {
		return err
	}
	if err := c.kv.DeletePrefix(c.overlayPrefix); err != nil {
		return err
	}
	if err := c.kv.DeletePrefix(c.timerPrefix); err != nil {
		return err
	}
	if err := c.kv.DeletePrefix(c.statePrefix); err != nil {
		return err
	}
	c.onlyHotInKV = true
	return nil
}

// DropUncommitted removes from memory and the KV everything of the
// partition that is not committed (after a revoke, a fence, a crash):
// the committed states and their checkpoint stay, for a delta recovery.
func (c *Core[S, O]) DropUncommitted() error {
	err := c.settle() // committed: WriteDone said so
	c.forget()
	err = errors.Join(err, c.kv.DeletePrefix(c.overlayPrefix))
	if err != nil {
		return err
	}
	// The committed states' timers are what is left to fire.
	return c.loadHints()
}

func (c *Core[S, O]) forget() {
	c.onlyHotInKV = false
	clear(c.hot)
	clear(c.dirty)
	clear(c.inflight)
	clear(c.overlaid)
	c.pending, c.pendingBuf, c.unoverlaid, c.deferred = nil, nil, nil, nil
	clear(c.pendingState)
	c.hotOrder, c.flushRound = nil, nil
	c.tm = newTimers()
}

// Stopped is the error that stopped the core, if any.
func (c *Core[S, O]) Stopped() error { return c.stopped }

func (c *Core[S, O]) stop(err error) error {
	if err != nil && c.stopped == nil {
		c.stopped = err
	}
	return err
}

// CheckpointPrefix begins every checkpoint's key: a scan of it lists the
// partitions whose checkpoints a KV holds (a partition owned or followed
// in this cache, now or before a restart).
var CheckpointPrefix = []byte{'c'}

// CheckpointPartition is the partition of a key under CheckpointPrefix
// (ok false: not a checkpoint's key).
func CheckpointPartition(k []byte) (store.TopicPartition, bool) {
	if len(k) < 1 || k[0] != 'c' {
		return store.TopicPartition{}, false
	}
	n, w := binary.Uvarint(k[1:])
	if w <= 0 || uint64(len(k)-1-w) != n+4 {
		return store.TopicPartition{}, false
	}
	rest := k[1+w:]
	return store.TopicPartition{Topic: string(rest[:n]), Partition: int32(binary.BigEndian.Uint32(rest[n:]))}, true
}
