// Package core is the engine's per-partition logic as a pure,
// deterministic state machine: no I/O, no clock, no goroutines. The caller
// feeds it what happened (a recovered snapshot, an input record, a tick with
// the time, the outcome of a snapshot write) and carries out what it asks
// for (snapshot writes, the committable offset, output records). The same
// core runs under the simulated cluster, kfake and real Kafka.
//
// State lives in a KV the caller provides (Pebble in production, memory in
// tests), so a partition's state may exceed memory.
package core

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"

	"github.com/snapfence/snapfence/store"
)

// Record is one input record.
type Record struct {
	Offset int64
	Key    []byte
	Value  []byte
	// Timestamp in Unix milliseconds, as Kafka carries it.
	Timestamp int64
	Headers   []store.Header
}

// Output is a record a fold asks to emit.
type Output struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []store.Header
}

// Change is what a fold or tick made of a key's state.
type Change struct {
	// State is the new encoded state; ignored when Delete or Keep.
	State []byte
	// Delete removes the key's state (a tombstone keeps its offset).
	Delete bool
	// Keep leaves the state as it was (only outputs, if any).
	Keep    bool
	Outputs []Output
}

// FoldFunc folds one record into a key's encoded state (exists is false for
// a new or deleted key).
type FoldFunc func(key, state []byte, exists bool, rec Record) (Change, error)

// TickFunc is called for every live key on a tick, with the time in Unix
// milliseconds.
type TickFunc func(key, state []byte, nowMillis int64) (Change, error)

// KV is the local cache the core keeps state in. Values returned by Get
// and Scan are valid until the next call that changes the KV.
type KV interface {
	Get(key []byte) (value []byte, ok bool, err error)
	Set(key, value []byte) error
	Delete(key []byte) error
	// Scan yields every entry whose key starts with prefix, in key order.
	Scan(prefix []byte) iter.Seq2[[]byte, []byte]
	// DeletePrefix removes every entry whose key starts with prefix.
	DeletePrefix(prefix []byte) error
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
}

func (e *FoldError) Error() string {
	what := fmt.Sprint(e.Err)
	if e.Panic != nil {
		what = fmt.Sprintf("panic: %v", e.Panic)
	}
	return fmt.Sprintf("engine: fold of %s offset %d key %q failed: %s", e.Input, e.Offset, e.Key, what)
}

func (e *FoldError) Unwrap() error { return e.Err }

// Config configures a Core.
type Config struct {
	Input store.TopicPartition
	Fold  FoldFunc
	Tick  TickFunc
	// Assigned is the offset the input resumes from.
	Assigned int64
}

// Core is one input partition's state machine.
type Core struct {
	cfg Config
	kv  KV
	// Key prefixes in the KV; they keep partitions apart.
	statePrefix, dirtyPrefix, heldPrefix []byte
	// consumed is the offset after the last record fed.
	consumed int64
	// inflight: keys taken for a write, with the last folded offset that
	// write carries.
	inflight map[string]int64
	stopped  error
}

// New returns a core for one partition, with an empty state for it in kv.
func New(cfg Config, kv KV) (*Core, error) {
	p := partitionPrefix(cfg.Input)
	c := &Core{
		cfg: cfg, kv: kv, consumed: cfg.Assigned, inflight: map[string]int64{},
		statePrefix: append([]byte{'s'}, p...),
		dirtyPrefix: append([]byte{'d'}, p...),
		heldPrefix:  append([]byte{'h'}, p...),
	}
	if err := c.Drop(); err != nil {
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
// event folded into it, the encoded state.
const (
	flagLive    = 1
	entryHeader = 9
)

type entry struct {
	live   bool
	offset int64
	state  []byte
}

func decodeEntry(v []byte) (entry, error) {
	if len(v) < entryHeader {
		return entry{}, errors.New("engine: corrupt cache entry")
	}
	return entry{live: v[0]&flagLive != 0, offset: int64(binary.BigEndian.Uint64(v[1:9])), state: v[9:]}, nil
}

func encodeEntry(e entry) []byte {
	b := make([]byte, entryHeader, entryHeader+len(e.state))
	if e.live {
		b[0] = flagLive
	}
	binary.BigEndian.PutUint64(b[1:9], uint64(e.offset))
	return append(b, e.state...)
}

func (c *Core) key(prefix, k []byte) []byte {
	return append(append(make([]byte, 0, len(prefix)+len(k)), prefix...), k...)
}

func (c *Core) heldKey(offset int64, k []byte) []byte {
	b := binary.BigEndian.AppendUint64(append([]byte{}, c.heldPrefix...), uint64(offset))
	return append(b, k...)
}

// Recovered loads one recovered snapshot. Snapshots arrive in log order; a
// later one of a key replaces an earlier one.
func (c *Core) Recovered(s store.Snapshot) error {
	e := entry{live: !s.Tombstone, offset: s.Offset, state: s.Value}
	return c.kv.Set(c.key(c.statePrefix, s.Key), encodeEntry(e))
}

// Fold feeds one input record. A record at or below the key's last folded
// offset was already folded (a replay after recovery) and is skipped: the
// exactly-once state effect. It returns the outputs to emit.
func (c *Core) Fold(rec Record) ([]Output, error) {
	if c.stopped != nil {
		return nil, c.stopped
	}
	if rec.Offset < c.cfg.Assigned {
		return nil, nil // before the resume point
	}
	sk := c.key(c.statePrefix, rec.Key)
	v, ok, err := c.kv.Get(sk)
	if err != nil {
		return nil, c.stop(err)
	}
	var e entry
	if ok {
		if e, err = decodeEntry(v); err != nil {
			return nil, c.stop(err)
		}
		if rec.Offset <= e.offset {
			c.consumed = max(c.consumed, rec.Offset+1)
			return nil, nil
		}
	}
	ch, err := c.callFold(rec, e.state, ok && e.live)
	if err != nil {
		return nil, c.stop(err)
	}
	if err := c.apply(rec.Key, sk, e, ok, ch, rec.Offset); err != nil {
		return nil, c.stop(err)
	}
	c.consumed = max(c.consumed, rec.Offset+1)
	return ch.Outputs, nil
}

func (c *Core) callFold(rec Record, state []byte, exists bool) (ch Change, err error) {
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

// apply stores a change of key k, folded at offset, and marks the key
// dirty, holding the first offset not yet in a durable snapshot.
func (c *Core) apply(k, sk []byte, prev entry, existed bool, ch Change, offset int64) error {
	if ch.Keep {
		return nil
	}
	e := entry{live: !ch.Delete, offset: max(offset, prev.offset), state: ch.State}
	if ch.Delete {
		e.state = nil
	}
	if err := c.kv.Set(sk, encodeEntry(e)); err != nil {
		return err
	}
	dk := c.key(c.dirtyPrefix, k)
	if _, dirty, err := c.kv.Get(dk); err != nil || dirty {
		return err
	}
	held := offset
	if offset < 0 { // a tick: nothing to replay, hold what is consumed
		held = c.consumed
	}
	if err := c.kv.Set(dk, binary.BigEndian.AppendUint64(nil, uint64(held))); err != nil {
		return err
	}
	return c.kv.Set(c.heldKey(held, k), nil)
}

// Tick runs the tick function over every live key.
func (c *Core) Tick(nowMillis int64) ([]Output, error) {
	if c.stopped != nil || c.cfg.Tick == nil {
		return nil, c.stopped
	}
	type pending struct {
		key []byte
		e   entry
	}
	var live []pending
	for k, v := range c.kv.Scan(c.statePrefix) {
		e, err := decodeEntry(v)
		if err != nil {
			return nil, c.stop(err)
		}
		if e.live {
			e.state = bytes.Clone(e.state)
			live = append(live, pending{bytes.Clone(k[len(c.statePrefix):]), e})
		}
	}
	var outs []Output
	for _, p := range live {
		ch, err := c.callTick(p.key, p.e.state, nowMillis)
		if err != nil {
			return nil, c.stop(err)
		}
		if err := c.apply(p.key, c.key(c.statePrefix, p.key), p.e, true, ch, -1); err != nil {
			return nil, c.stop(err)
		}
		outs = append(outs, ch.Outputs...)
	}
	return outs, nil
}

func (c *Core) callTick(key, state []byte, now int64) (ch Change, err error) {
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

// Flush takes every dirty key not already being written and returns the
// snapshots to write. Each must be reported back with WriteDone.
func (c *Core) Flush() ([]store.Snapshot, error) {
	if c.stopped != nil {
		return nil, c.stopped
	}
	var out []store.Snapshot
	for dk := range c.kv.Scan(c.dirtyPrefix) {
		k := bytes.Clone(dk[len(c.dirtyPrefix):])
		if _, busy := c.inflight[string(k)]; busy {
			continue
		}
		v, ok, err := c.kv.Get(c.key(c.statePrefix, k))
		if err != nil || !ok {
			return nil, c.stop(errors.Join(err, fmt.Errorf("engine: dirty key %q has no state", k)))
		}
		e, err := decodeEntry(v)
		if err != nil {
			return nil, c.stop(err)
		}
		s := store.Snapshot{Key: k, Offset: e.offset, Tombstone: !e.live}
		if e.live {
			s.Value = bytes.Clone(e.state)
		}
		c.inflight[string(k)] = e.offset
		out = append(out, s)
	}
	return out, nil
}

// WriteDone reports the outcome of a snapshot write Flush asked for. On
// success the key is clean unless it changed meanwhile, in which case it
// stays dirty, holding the first offset after what was written.
func (c *Core) WriteDone(key []byte, err error) error {
	written, ok := c.inflight[string(key)]
	if !ok {
		return fmt.Errorf("engine: write of %q reported but not taken", key)
	}
	delete(c.inflight, string(key))
	if err != nil {
		return nil // still dirty: a later flush writes it again
	}
	v, ok, gerr := c.kv.Get(c.key(c.statePrefix, key))
	if gerr != nil {
		return c.stop(gerr)
	}
	e, derr := decodeEntry(v)
	if !ok || derr != nil {
		return c.stop(errors.Join(derr, fmt.Errorf("engine: written key %q has no state", key)))
	}
	dk := c.key(c.dirtyPrefix, key)
	hv, dirty, gerr := c.kv.Get(dk)
	if gerr != nil || !dirty {
		return c.stop(gerr)
	}
	held := int64(binary.BigEndian.Uint64(hv))
	if err := c.kv.Delete(c.heldKey(held, key)); err != nil {
		return c.stop(err)
	}
	if e.offset == written {
		return c.stop(c.kv.Delete(dk))
	}
	next := written + 1
	if err := c.kv.Set(dk, binary.BigEndian.AppendUint64(nil, uint64(next))); err != nil {
		return c.stop(err)
	}
	return c.stop(c.kv.Set(c.heldKey(next, key), nil))
}

// Committable is the offset that may be committed: the smallest offset
// held by a key whose change is not yet durable, or the offset after the
// last record fed when nothing is held. It never passes a change that is
// not in a durable snapshot.
func (c *Core) Committable() int64 {
	for hk := range c.kv.Scan(c.heldPrefix) {
		return min(int64(binary.BigEndian.Uint64(hk[len(c.heldPrefix):])), c.consumed)
	}
	return c.consumed
}

// Dirty reports whether any change is not yet durable.
func (c *Core) Dirty() bool {
	for range c.kv.Scan(c.dirtyPrefix) {
		return true
	}
	return false
}

// State returns a key's encoded state.
func (c *Core) State(key []byte) (state []byte, exists bool, err error) {
	v, ok, err := c.kv.Get(c.key(c.statePrefix, key))
	if err != nil || !ok {
		return nil, false, err
	}
	e, err := decodeEntry(v)
	if err != nil || !e.live {
		return nil, false, err
	}
	return bytes.Clone(e.state), true, nil
}

// Keys counts the keys with live state.
func (c *Core) Keys() int {
	n := 0
	for _, v := range c.kv.Scan(c.statePrefix) {
		if len(v) > 0 && v[0]&flagLive != 0 {
			n++
		}
	}
	return n
}

// Drop removes every trace of the partition from the KV: after a revoke or
// a fence, the cache holds nothing the next owner might mistake for
// committed.
func (c *Core) Drop() error {
	for _, p := range [][]byte{c.statePrefix, c.dirtyPrefix, c.heldPrefix} {
		if err := c.kv.DeletePrefix(p); err != nil {
			return err
		}
	}
	clear(c.inflight)
	return nil
}

// Stopped is the error that stopped the core, if any.
func (c *Core) Stopped() error { return c.stopped }

func (c *Core) stop(err error) error {
	if err != nil && c.stopped == nil {
		c.stopped = err
	}
	return err
}
