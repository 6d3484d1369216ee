package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// Codecs are the names of the built-in codecs a state is decoded with
// (engine.JSON, engine.String, engine.Int64, engine.Uint64), and "raw":
// the bytes as they are, as a string when they are text, else in hex.
var Codecs = []string{"raw", "json", "string", "int64", "uint64"}

// decode decodes v with the codec named.
func decode(codec string, v []byte) (any, error) {
	switch codec {
	case "", "raw":
		if utf8.Valid(v) {
			return string(v), nil
		}
		return fmt.Sprintf("%x", v), nil
	case "json":
		var x json.RawMessage
		x, err := engine.JSON[json.RawMessage]().Decode(v)
		return x, err
	case "string":
		return engine.String().Decode(v)
	case "int64":
		return engine.Int64().Decode(v)
	case "uint64":
		return engine.Uint64().Decode(v)
	}
	return nil, fmt.Errorf("unknown codec %q (one of %s)", codec, strings.Join(Codecs, ", "))
}

// Entry is a key's committed state.
type Entry struct {
	Key string `json:"key"`
	// State is the state decoded with the codec asked for; DecodeErr
	// says why it could not be.
	State     any    `json:"state,omitempty"`
	DecodeErr string `json:"decode_error,omitempty"`
	// Offset is the input offset of the last event folded into the
	// state: the state reflects the input up to and including it.
	Offset int64 `json:"offset"`
	// Partition and SnapshotOffset are where the snapshot is: its input
	// (and snapshot) partition and its offset in the snapshot partition.
	Partition      int32 `json:"partition"`
	SnapshotOffset int64 `json:"snapshot_offset"`
	// Timers are the key's timers.
	Timers []Timer `json:"timers,omitempty"`
}

// Timer is a key's timer: its clock ("processing-time" or "event-time")
// and when it is due, in Unix milliseconds.
type Timer struct {
	Kind string `json:"kind"`
	At   int64  `json:"at_unix_ms"`
}

func timers(ts []store.Timer) []Timer {
	var out []Timer
	for _, t := range ts {
		out = append(out, Timer{Kind: t.Kind.String(), At: t.At})
	}
	return out
}

// Get returns key's committed state, read read_committed from its
// snapshot partition (the input's partition of the key under Kafka's
// default partitioner, unless partition is not negative), or nil when the
// key has none (never written, or deleted).
func (tool *Tool) Get(ctx context.Context, key []byte, partition int32, codec string) (*Entry, error) {
	if _, err := decode(codec, nil); err != nil && strings.HasPrefix(err.Error(), "unknown codec") {
		return nil, err
	}
	if partition < 0 {
		n, err := tool.partitions(ctx, tool.t.Input)
		if err != nil {
			return nil, err
		}
		partition = store.OutputPartition(key, int(n))
	}
	var found *Entry
	err := tool.dump(ctx, partition, codec, func(e *Entry, deleted bool) {
		if e.Key == string(key) {
			found = e
			if deleted {
				found = nil
			}
		}
	}, key)
	return found, err
}

// Dump returns every key's committed state in a snapshot partition,
// read read_committed, in the order of the snapshots' offsets.
func (tool *Tool) Dump(ctx context.Context, partition int32, codec string) ([]*Entry, error) {
	if _, err := decode(codec, nil); err != nil && strings.HasPrefix(err.Error(), "unknown codec") {
		return nil, err
	}
	latest := map[string]*Entry{}
	var order []*Entry
	err := tool.dump(ctx, partition, codec, func(e *Entry, deleted bool) {
		if deleted {
			delete(latest, e.Key)
			return
		}
		latest[e.Key] = e
		order = append(order, e)
	}, nil)
	if err != nil {
		return nil, err
	}
	var out []*Entry
	for _, e := range order {
		if latest[e.Key] == e {
			out = append(out, e)
		}
	}
	return out, nil
}

// dump reads the snapshot partition read_committed and gives fn each
// snapshot (of key only, when key is not nil), decoded. A record of
// another application is an error: its state is not this application's.
func (tool *Tool) dump(ctx context.Context, partition int32, codec string, fn func(e *Entry, deleted bool), key []byte) error {
	tp := store.TopicPartition{Topic: tool.t.SnapshotTopic, Partition: partition}
	return tool.readPartition(ctx, tp, true, func(r record) error {
		if key != nil && !bytes.Equal(r.r.Key, key) {
			return nil
		}
		if app, ok := wire.RecordApplication(r.r); ok && string(app) != tool.t.Application {
			return fmt.Errorf("%s offset %d: a record of application %q, not %q: the snapshot topic is not this application's",
				tp, r.offset, app, tool.t.Application)
		}
		s, kind, err := wire.DecodeRecord(tp, r.offset, r.r)
		if err != nil {
			return err
		}
		if kind == wire.KindOffsetMarker {
			return nil
		}
		e := &Entry{Key: string(s.Key), Offset: s.Offset, Partition: partition, SnapshotOffset: r.offset, Timers: timers(s.Timers)}
		if !s.Tombstone {
			if e.State, err = decode(codec, s.Value); err != nil {
				e.State, e.DecodeErr = nil, err.Error()
			}
		}
		fn(e, s.Tombstone)
		return nil
	})
}
