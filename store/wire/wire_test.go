package wire_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

var tp = store.TopicPartition{Topic: "orders-snapshots", Partition: 3}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, s := range []store.Snapshot{
		{Key: []byte("k"), Value: []byte("state"), Offset: 41},
		{Key: []byte("k"), Value: []byte{}, Offset: 0},
		{Key: []byte("k"), Offset: 77, Tombstone: true},
		{Key: []byte("k"), Value: []byte("state"), Offset: 41, Timers: []store.Timer{{Kind: store.EventTime, At: -5}, {Kind: store.ProcessingTime, At: 1 << 40}}},
	} {
		got, kind, err := wire.DecodeRecord(tp, 5, wire.EncodeSnapshot("", s))
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		if kind == wire.KindOffsetMarker || !bytes.Equal(got.Key, s.Key) || !bytes.Equal(got.Value, s.Value) ||
			got.Offset != s.Offset || got.Tombstone != s.Tombstone || (s.Tombstone && got.Value != nil) ||
			!slices.Equal(got.Timers, s.Timers) {
			t.Fatalf("round trip of %+v gave %+v (%c)", s, got, kind)
		}
	}
}

// A key without timers is written as format version 1, byte-identical to
// a record of a snapfence without timers; one with timers as version 2,
// which a reader of version 1 only refuses (it cannot drop them unseen).
func TestTimersOnlyInVersion2(t *testing.T) {
	plain := wire.EncodeSnapshot("", store.Snapshot{Key: []byte("k"), Value: []byte("v"), Offset: 1})
	if len(plain.Headers) != 3 || string(plain.Headers[0].Value) != "1" {
		t.Fatalf("a key without timers has headers %+v, want the three of version 1", plain.Headers)
	}
	timed := wire.EncodeSnapshot("", store.Snapshot{Key: []byte("k"), Value: []byte("v"), Offset: 1,
		Timers: []store.Timer{{Kind: store.ProcessingTime, At: 7}}})
	if len(timed.Headers) != 4 || string(timed.Headers[0].Value) != "2" || timed.Headers[3].Key != wire.HeaderTimers {
		t.Fatalf("a key with timers has headers %+v, want version 2 with %s", timed.Headers, wire.HeaderTimers)
	}
	if string(plain.Headers[0].Value) != "1" {
		t.Fatal("encoding timers changed another record's headers")
	}
	// A tombstone never carries timers.
	dead := wire.EncodeSnapshot("", store.Snapshot{Key: []byte("k"), Offset: 1, Tombstone: true, Timers: []store.Timer{{Kind: store.EventTime}}})
	if len(dead.Headers) != 3 {
		t.Fatalf("a tombstone has headers %+v", dead.Headers)
	}
	if err := wire.CheckWrite(tp, store.Snapshot{Key: []byte("k"), Offset: 1, Tombstone: true, Timers: []store.Timer{{Kind: store.EventTime}}}, 0); err == nil ||
		!strings.Contains(err.Error(), "tombstone with timers") {
		t.Fatalf("CheckWrite of a tombstone with timers: %v", err)
	}
	if err := wire.CheckWrite(tp, store.Snapshot{Key: []byte("k"), Value: []byte("v"), Timers: []store.Timer{{Kind: 'x'}}}, 0); err == nil ||
		!strings.Contains(err.Error(), "unknown kind") {
		t.Fatalf("CheckWrite of a timer of no kind: %v", err)
	}
}

func TestOffsetMarkerDecodesAsMarker(t *testing.T) {
	r := wire.EncodeOffsetMarker("", 12, store.GroupIdentity{MemberID: "m", Generation: 3})
	_, kind, err := wire.DecodeRecord(tp, 9, r)
	if err != nil || kind != wire.KindOffsetMarker {
		t.Fatalf("kind %c err %v, want an offset marker", kind, err)
	}
}

func TestBadRecordsNamePartitionAndOffset(t *testing.T) {
	good := wire.EncodeSnapshot("", store.Snapshot{Key: []byte("k"), Value: []byte("v"), Offset: 1})
	with := func(name string, value []byte) wire.Record {
		r := wire.Record{Key: good.Key, Value: good.Value}
		for _, h := range good.Headers {
			if h.Key == name {
				if value == nil {
					continue
				}
				h.Value = value
			}
			r.Headers = append(r.Headers, h)
		}
		return r
	}
	cases := map[string]struct {
		rec  wire.Record
		want string
	}{
		"foreign":            {wire.Record{Key: []byte("k"), Value: []byte("{}")}, "not written by snapfence"},
		"future version":     {with(wire.HeaderVersion, []byte("3")), `format version "3" is not supported`},
		"no kind":            {with(wire.HeaderKind, nil), "malformed snapfence.k"},
		"short offset":       {with(wire.HeaderOffset, []byte{1, 2}), "malformed snapfence.o"},
		"negative offset":    {with(wire.HeaderOffset, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), "negative input offset"},
		"unknown kind":       {with(wire.HeaderKind, []byte("z")), "unknown record kind"},
		"null snapshot":      {wire.Record{Key: good.Key, Headers: good.Headers}, "null value"},
		"tombstone w/ value": {with(wire.HeaderKind, []byte("d")), "tombstone record with a value"},
		"v2 without timers":  {with(wire.HeaderVersion, []byte("2")), "format version 2 without a snapfence.t header"},
		"timers in v1":       {withHeader(good, wire.HeaderTimers, []byte("p12345678")), "snapfence.t header in a format version 1"},
		"short timers":       {withHeader(withV2(good), wire.HeaderTimers, []byte("p1234")), "malformed snapfence.t header (5 bytes)"},
		"empty timers":       {withHeader(withV2(good), wire.HeaderTimers, []byte{}), "malformed snapfence.t header (0 bytes)"},
		"bad timer kind":     {withHeader(withV2(good), wire.HeaderTimers, []byte("z12345678")), "unknown timer kind"},
		"tombstone w/ timer": {withHeader(withV2(wire.EncodeSnapshot("", store.Snapshot{Key: []byte("k"), Offset: 1, Tombstone: true})), wire.HeaderTimers, []byte("p12345678")), "tombstone record with timers"},
	}
	for name, c := range cases {
		_, _, err := wire.DecodeRecord(tp, 1234, c.rec)
		var ce *store.CorruptRecordError
		if !errors.As(err, &ce) || !errors.Is(err, store.ErrCorruptRecord) {
			t.Fatalf("%s: err = %v, want a CorruptRecordError", name, err)
		}
		if ce.Snapshots != tp || ce.Offset != 1234 || !strings.Contains(err.Error(), c.want) ||
			!strings.Contains(err.Error(), "orders-snapshots/3 offset 1234") {
			t.Fatalf("%s: %q does not name the partition, the offset and %q", name, err, c.want)
		}
	}
}

// withHeader is r with header name added.
func withHeader(r wire.Record, name string, value []byte) wire.Record {
	r.Headers = append(slices.Clip(r.Headers), store.Header{Key: name, Value: value})
	return r
}

// withV2 is r claiming format version 2.
func withV2(r wire.Record) wire.Record {
	r.Headers = slices.Clone(r.Headers)
	r.Headers[0].Value = []byte("2")
	return r
}

func FuzzDecodeRecord(f *testing.F) {
	good := wire.EncodeSnapshot("", store.Snapshot{Key: []byte("k"), Value: []byte("v"), Offset: 1})
	f.Add([]byte("k"), []byte("v"), good.Headers[0].Value, good.Headers[1].Value, good.Headers[2].Value, []byte(nil))
	timed := wire.EncodeSnapshot("", store.Snapshot{Key: []byte("k"), Value: []byte("v"), Offset: 1, Timers: []store.Timer{{Kind: store.EventTime, At: 9}}})
	f.Add([]byte("k"), []byte("v"), timed.Headers[0].Value, timed.Headers[1].Value, timed.Headers[2].Value, timed.Headers[3].Value)
	f.Fuzz(func(t *testing.T, key, value, version, kind, offset, timers []byte) {
		r := wire.Record{Key: key, Value: value, Headers: []store.Header{
			{Key: wire.HeaderVersion, Value: version}, {Key: wire.HeaderKind, Value: kind}, {Key: wire.HeaderOffset, Value: offset},
		}}
		if timers != nil {
			r.Headers = append(r.Headers, store.Header{Key: wire.HeaderTimers, Value: timers})
		}
		s, k, err := wire.DecodeRecord(tp, 7, r)
		if err != nil {
			if !errors.Is(err, store.ErrCorruptRecord) {
				t.Fatalf("error %v is not ErrCorruptRecord", err)
			}
			return
		}
		if k != wire.KindOffsetMarker {
			again, _, err := wire.DecodeRecord(tp, 7, wire.EncodeSnapshot("", s))
			if err != nil || !bytes.Equal(again.Value, s.Value) || again.Offset != s.Offset || !slices.Equal(again.Timers, s.Timers) {
				t.Fatalf("re-encoding %+v does not round-trip: %v", s, err)
			}
		}
	})
}

// SnapshotBytes is the key, value and header bytes of the record
// EncodeSnapshot frames, for snapshots, empty values and tombstones.
func TestSnapshotBytesIsTheEncodedRecordsSize(t *testing.T) {
	for _, s := range []store.Snapshot{
		{Key: []byte("k"), Value: []byte("state"), Offset: 7},
		{Key: []byte("key-00001"), Value: make([]byte, 10<<10)},
		{Key: []byte("empty")},
		{Key: []byte("gone"), Value: []byte("ignored"), Tombstone: true, Offset: 3},
		{Key: []byte("timed"), Value: []byte("v"), Offset: 3, Timers: []store.Timer{{Kind: store.EventTime, At: 1}, {Kind: store.ProcessingTime, At: 2}}},
		{Key: []byte("gone"), Tombstone: true, Offset: 3, Timers: []store.Timer{{Kind: store.EventTime, At: 1}}},
	} {
		r := wire.EncodeSnapshot("", s)
		want := len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			want += len(h.Key) + len(h.Value)
		}
		if got := wire.SnapshotBytes(s); got != want {
			t.Errorf("SnapshotBytes(%q) = %d, want %d", s.Key, got, want)
		}
	}
}
