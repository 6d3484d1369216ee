package enginetest

import (
	"bytes"
	"fmt"
	"maps"
	"slices"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// State is key's committed state: the one a recovery of its partition
// would load now, from the snapshot topic read read_committed (the last
// snapshot of the key; exists is false if it has none, or its last is a
// tombstone). Changes folded and not yet committed are not in it: Settle
// first. A snapshot that does not decode fails the test.
func (d *Driver[S]) State(key string) (state S, exists bool) {
	d.t.Helper()
	st, ok := d.snapshots(d.inputPartition([]byte(key)))[key]
	return st, ok
}

// States are every key's committed state (State), by key.
func (d *Driver[S]) States() map[string]S {
	d.t.Helper()
	all := map[string]S{}
	for _, tp := range d.inputs {
		maps.Copy(all, d.snapshots(tp))
	}
	return all
}

// snapshots are the live keys' committed states of input partition tp.
func (d *Driver[S]) snapshots(tp store.TopicPartition) map[string]S {
	d.t.Helper()
	sp := d.backend.SnapshotPartition(tp)
	ents, err := d.cluster.Read(sp, true)
	if err != nil {
		d.t.Fatalf("enginetest: reading the snapshots of %s: %v", tp, err)
	}
	last := map[string]store.Snapshot{}
	for _, e := range ents {
		if e.Control != sim.NoControl {
			continue
		}
		s, kind, err := wire.DecodeRecord(sp, e.Offset, e.Record)
		if err != nil {
			d.t.Fatalf("enginetest: the snapshots of %s: %v", tp, err)
		}
		if kind != wire.KindOffsetMarker {
			last[string(s.Key)] = s
		}
	}
	states := map[string]S{}
	for key, s := range last {
		if s.Tombstone {
			continue
		}
		st, err := d.cfg.Engine.Codec.Decode(s.Value)
		if err != nil {
			d.t.Fatalf("enginetest: key %q's committed state (%s, input offset %d) does not decode: %v", key, tp, s.Offset, err)
		}
		states[key] = st
	}
	return states
}

// Outputs are the records of topic that a read_committed consumer sees
// now, partition by partition, each in log order (one key's records are
// in one partition, in the order they were produced). Under ExactlyOnce
// they are the outputs of committed transactions only, each input's
// once; at least once, every output a fold emitted, replays' duplicates
// included. Settle first for the outputs of everything produced.
func (d *Driver[S]) Outputs(topic string) []engine.Output {
	d.t.Helper()
	cfg, ok := d.cluster.Topic(topic)
	if !ok {
		d.t.Fatalf("enginetest: Outputs(%q): no such topic", topic)
	}
	var outs []engine.Output
	for p := range int32(cfg.Partitions) {
		ents, err := d.cluster.Read(store.TopicPartition{Topic: topic, Partition: p}, true)
		if err != nil {
			d.t.Fatalf("enginetest: Outputs(%q): %v", topic, err)
		}
		for _, e := range ents {
			if e.Control == sim.NoControl {
				outs = append(outs, engine.Output{Topic: topic, Key: e.Record.Key, Value: e.Record.Value, Headers: e.Record.Headers})
			}
		}
	}
	return outs
}

// ExactFold is the state key must have: Engine.Fold applied to each of
// its input records once, in log order, from no state, as if nothing ever
// failed or moved, each state passed through the Codec as the engine
// stores it. A record the fold fails (or panics) on is skipped under
// SkipPoison and DeadLetterPoison, and fails the test under StopOnPoison.
// Timers, ticks and outputs play no part: for a fold whose state timers
// or ticks change, or whose lookups changed while it ran, it is not the
// state the engine must have. Each record's Timestamp and Now are its
// append time.
func (d *Driver[S]) ExactFold(key string) (state S, exists bool) {
	d.t.Helper()
	tp := d.inputPartition([]byte(key))
	ents, err := d.cluster.Read(tp, true)
	if err != nil {
		d.t.Fatalf("enginetest: ExactFold(%q): %v", key, err)
	}
	for _, e := range ents {
		if e.Control != sim.NoControl || !bytes.Equal(e.Record.Key, []byte(key)) {
			continue
		}
		rec := engine.Record{Topic: tp.Topic, Partition: tp.Partition, Offset: e.Offset, Key: []byte(key), Value: e.Record.Value,
			Timestamp: e.Appended, Headers: e.Record.Headers, Now: e.Appended}
		res, err := foldOnce(d.cfg.Engine.Fold, state, exists, rec)
		if err != nil {
			if d.cfg.Engine.Poison == engine.StopOnPoison {
				d.t.Fatalf("enginetest: ExactFold(%q): the fold fails on %s offset %d (StopOnPoison: the engine stops there too): %v", key, tp, e.Offset, err)
			}
			continue
		}
		switch {
		case res.Deleted():
			var zero S
			state, exists = zero, false
		case !res.Kept():
			state, exists = d.roundTrip(key, res.State()), true
		}
	}
	return state, exists
}

// foldOnce runs fold, a panic as its error (the engine treats both as a
// poison record).
func foldOnce[S any](fold engine.FoldFunc[S], state S, exists bool, rec engine.Record) (res engine.Result[S], err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return fold(rec.Key, state, exists, rec)
}

// roundTrip passes st through the Codec, as a state stored and recovered.
func (d *Driver[S]) roundTrip(key string, st S) S {
	d.t.Helper()
	b, err := d.cfg.Engine.Codec.Encode(st)
	if err == nil {
		st, err = d.cfg.Engine.Codec.Decode(b)
	}
	if err != nil {
		d.t.Fatalf("enginetest: key %q's state does not pass through the Codec: %v", key, err)
	}
	return st
}

// CheckExact fails the test (t.Errorf, one line per key) unless every
// key's committed state (State) is its exact fold (ExactFold), compared
// in the Codec's encoding: no input lost, none folded twice, no stale
// write kept, whatever the rebalances, crashes and stale owners. Call it
// after Settle, for a fold whose state only its records change (see
// ExactFold).
func (d *Driver[S]) CheckExact() {
	d.t.Helper()
	got := d.States()
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for _, tp := range d.inputs {
		ents, err := d.cluster.Read(tp, true)
		if err != nil {
			d.t.Fatalf("enginetest: CheckExact: %v", err)
		}
		for _, e := range ents {
			if e.Control == sim.NoControl {
				keys[string(e.Record.Key)] = true
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		want, wantOK := d.ExactFold(k)
		st, ok := got[k]
		if ok != wantOK || (ok && !bytes.Equal(d.encode(k, st), d.encode(k, want))) {
			d.t.Errorf("enginetest: key %q: committed state %s, want %s (the exact fold of its records)", k, d.show(k, st, ok), d.show(k, want, wantOK))
		}
	}
}

func (d *Driver[S]) encode(key string, st S) []byte {
	d.t.Helper()
	b, err := d.cfg.Engine.Codec.Encode(st)
	if err != nil {
		d.t.Fatalf("enginetest: key %q's state does not encode: %v", key, err)
	}
	return b
}

// show is a state for a message: its encoding, or that there is none.
func (d *Driver[S]) show(key string, st S, exists bool) string {
	if !exists {
		return "none"
	}
	return fmt.Sprintf("%q", d.encode(key, st))
}
