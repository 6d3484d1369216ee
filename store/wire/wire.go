// Package wire is the record format of snapfence's snapshot partitions:
// how a snapshot, a tombstone and an offset marker are framed as a Kafka
// record (key, value and headers) and read back, what a record weighs
// (SnapshotBytes), and the checks a write must pass before it is framed.
// store/kafka and store/sim write and read snapshot partitions with it;
// tools and tests that read a snapshot topic decode with it. The engine
// sees only store.Snapshot.
package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"github.com/snapfence/snapfence/store"
)

// FormatVersion is the snapshot record format this code writes for a key
// with timers; a key without timers is written as version 1
// (FormatVersionNoTimers), byte-identical to a record of a snapfence
// without timers. Readers accept exactly the versions they know and fail
// clearly on others, so a reader that predates timers refuses a record
// that carries some instead of dropping them.
const FormatVersion = 2

// FormatVersionNoTimers is the format of a record without timers: version 2
// is version 1 with the HeaderTimers header.
const FormatVersionNoTimers = 1

// Header names of a snapshot record. The key and value of the Kafka record
// are the snapshot's key and state, so tools that know nothing of snapfence
// still see them; the format lives in headers.
const (
	HeaderVersion = "snapfence.v" // decimal format version
	HeaderOffset  = "snapfence.o" // 8-byte big-endian input offset
	HeaderKind    = "snapfence.k" // one byte: RecordKind
	// HeaderTimers is the key's timers (version 2 only): 9 bytes each, a
	// store.TimerKind and the 8-byte big-endian At.
	HeaderTimers = "snapfence.t"
	// HeaderApplication is the name of the application that wrote the
	// record (the store's Application), in both versions. A record
	// without it was written before applications were named, and is read
	// as any application's.
	HeaderApplication = "snapfence.a"
)

// OffsetMarkerKey is the key of the offset marker record a backend may write
// to make an offset-only transaction real. Writes of this key are refused
// with store.ErrReservedKey; all marker records share it, so compaction
// keeps one.
var OffsetMarkerKey = []byte("\x00snapfence.offset-marker")

// RecordKind tells what a snapshot-partition record is.
type RecordKind byte

const (
	KindSnapshot     RecordKind = 's'
	KindTombstone    RecordKind = 'd'
	KindOffsetMarker RecordKind = 'm'
)

// Record is a record as the broker stores it: of a snapshot partition,
// or of any topic the simulated cluster is given (sim.Cluster.Produce).
type Record struct {
	Key     []byte
	Value   []byte
	Headers []store.Header
}

var (
	versionBytes       = []byte(strconv.Itoa(FormatVersionNoTimers))
	timersVersionBytes = []byte(strconv.Itoa(FormatVersion))
)

// timerBytes is the size of one timer in HeaderTimers.
const timerBytes = 9

// EncodeSnapshot frames s as a record written by the application app
// (HeaderApplication; none if app is empty). A tombstone has a nil value,
// so compaction removes the key after delete.retention.ms; its offset
// header stays until then.
func EncodeSnapshot(app string, s store.Snapshot) Record {
	kind := KindSnapshot
	value := s.Value
	if s.Tombstone {
		kind, value = KindTombstone, nil
	} else if value == nil {
		value = []byte{}
	}
	hs := headers(kind, s.Offset, app)
	if len(s.Timers) > 0 && !s.Tombstone {
		hs = withTimers(hs, s.Timers)
	}
	return Record{Key: s.Key, Value: value, Headers: hs}
}

// withTimers is hs (version 1 headers) as version 2, with the timers'
// header; only keys with timers pay for it.
func withTimers(hs []store.Header, ts []store.Timer) []store.Header {
	b := make([]byte, 0, timerBytes*len(ts))
	for _, t := range ts {
		b = append(b, byte(t.Kind))
		b = binary.BigEndian.AppendUint64(b, uint64(t.At))
	}
	out := make([]store.Header, len(hs), len(hs)+1)
	copy(out, hs)
	out[0].Value = timersVersionBytes
	return append(out, store.Header{Key: HeaderTimers, Value: b})
}

// EncodeOffsetMarker frames the marker record of an offset-only
// transaction of the application app. Its value says what was committed,
// for humans.
func EncodeOffsetMarker(app string, offset int64, id store.GroupIdentity) Record {
	v := fmt.Sprintf("offset=%d member=%s generation=%d", offset, id.MemberID, id.Generation)
	return Record{Key: OffsetMarkerKey, Value: []byte(v), Headers: headers(KindOffsetMarker, offset, app)}
}

// headers frames a record's headers in one allocation: a snapshot is
// framed per input record changed, so this is on the engine's hot path.
// The application header comes last, so that version 2's timers header
// is appended after it and the first three stay where readers of version
// 1 found them.
func headers(kind RecordKind, offset int64, app string) []store.Header {
	f := new(struct {
		hs   [4]store.Header
		kind [1]byte
		off  [8]byte
	})
	f.kind[0] = byte(kind)
	binary.BigEndian.PutUint64(f.off[:], uint64(offset))
	f.hs = [4]store.Header{
		{Key: HeaderVersion, Value: versionBytes},
		{Key: HeaderKind, Value: f.kind[:]},
		{Key: HeaderOffset, Value: f.off[:]},
	}
	if app == "" {
		return f.hs[:3]
	}
	// The name's bytes are shared, not copied: every record of a backend
	// carries the same name, and a header's value is only ever read.
	f.hs[3] = store.Header{Key: HeaderApplication, Value: unsafe.Slice(unsafe.StringData(app), len(app))}
	return f.hs[:]
}

// RecordApplication returns the application a snapshot-partition record
// names (HeaderApplication), and false for a record that names none.
func RecordApplication(r Record) ([]byte, bool) {
	for _, h := range r.Headers {
		if h.Key == HeaderApplication {
			return h.Value, true
		}
	}
	return nil, false
}

// ApplicationHeaderBytes is what HeaderApplication adds to a record of the
// application app (EncodeSnapshot); SnapshotBytes leaves it out.
func ApplicationHeaderBytes(app string) int {
	if app == "" {
		return 0
	}
	return len(HeaderApplication) + len(app)
}

// DecodeRecord decodes a record read at offset of the snapshot partition
// tp. An offset marker decodes with KindOffsetMarker and is not a snapshot:
// recovery skips it. Anything that is not a well-formed snapfence record of
// a known version is a *store.CorruptRecordError naming tp and offset.
func DecodeRecord(tp store.TopicPartition, offset int64, r Record) (store.Snapshot, RecordKind, error) {
	corrupt := func(reason string) (store.Snapshot, RecordKind, error) {
		return store.Snapshot{}, 0, &store.CorruptRecordError{Snapshots: tp, Offset: offset, Reason: reason}
	}
	h := readHeaders(r.Headers)
	if problem := h.checkVersion(); problem != "" {
		return corrupt(problem)
	}
	if !h.haveKind || len(h.kind) != 1 {
		return corrupt(fmt.Sprintf("missing or malformed %s header", HeaderKind))
	}
	if !h.haveOffset || len(h.offset) != 8 {
		return corrupt(fmt.Sprintf("missing or malformed %s header", HeaderOffset))
	}
	s := store.Snapshot{Key: r.Key, Offset: int64(binary.BigEndian.Uint64(h.offset))}
	if s.Offset < 0 {
		return corrupt(fmt.Sprintf("negative input offset %d", s.Offset))
	}
	k := RecordKind(h.kind[0])
	if problem := h.decodeBody(&s, k, r); problem != "" {
		return corrupt(problem)
	}
	return s, k, nil
}

// recordHeaders are the snapfence headers of a record; the have fields
// say which it carries.
type recordHeaders struct {
	version, kind, offset, timers                 []byte
	haveVersion, haveKind, haveOffset, haveTimers bool
}

// readHeaders picks the snapfence headers out of hs; of a repeated one,
// the last counts.
func readHeaders(hs []store.Header) recordHeaders {
	var h recordHeaders
	for _, hd := range hs {
		switch hd.Key {
		case HeaderVersion:
			h.version, h.haveVersion = hd.Value, true
		case HeaderKind:
			h.kind, h.haveKind = hd.Value, true
		case HeaderOffset:
			h.offset, h.haveOffset = hd.Value, true
		case HeaderTimers:
			h.timers, h.haveTimers = hd.Value, true
		}
	}
	return h
}

// hasTimers reports whether the record is of FormatVersion, whose
// snapshots carry their timers.
func (h recordHeaders) hasTimers() bool { return bytes.Equal(h.version, timersVersionBytes) }

// checkVersion returns why the record's format version is missing or not
// supported, or does not match whether it carries HeaderTimers; "" if it
// is well formed.
func (h recordHeaders) checkVersion() string {
	if !h.haveVersion {
		return fmt.Sprintf("no %s header: not written by snapfence (a foreign producer on the snapshot topic?)", HeaderVersion)
	}
	v2 := h.hasTimers()
	if !v2 && !bytes.Equal(h.version, versionBytes) {
		return fmt.Sprintf("format version %q is not supported (this build reads versions %d and %d)", h.version, FormatVersionNoTimers, FormatVersion)
	}
	if h.haveTimers != v2 {
		if v2 {
			return fmt.Sprintf("format version %d without a %s header", FormatVersion, HeaderTimers)
		}
		return fmt.Sprintf("a %s header in a format version %d record", HeaderTimers, FormatVersionNoTimers)
	}
	return ""
}

// decodeBody fills s with what a record of kind k holds besides its key
// and input offset, checking that the value, the timers and the key fit
// the kind. It returns why they do not, or "".
func (h recordHeaders) decodeBody(s *store.Snapshot, k RecordKind, r Record) string {
	v2 := h.hasTimers()
	switch k {
	case KindSnapshot:
		if r.Value == nil {
			return "snapshot record with a null value"
		}
		s.Value = r.Value
		if v2 {
			timers, problem := decodeTimers(h.timers)
			if problem != "" {
				return problem
			}
			s.Timers = timers
		}
	case KindTombstone:
		if r.Value != nil {
			return "tombstone record with a value"
		}
		if v2 {
			return "tombstone record with timers"
		}
		s.Tombstone = true
	case KindOffsetMarker:
		if !bytes.Equal(r.Key, OffsetMarkerKey) {
			return fmt.Sprintf("offset marker with key %q", r.Key)
		}
		if v2 {
			return "offset marker with timers"
		}
	default:
		return fmt.Sprintf("unknown record kind %q", h.kind)
	}
	return ""
}

// decodeTimers decodes the HeaderTimers value b: one or more timers of a
// known kind. It returns why b is malformed, or "".
func decodeTimers(b []byte) ([]store.Timer, string) {
	if len(b) == 0 || len(b)%timerBytes != 0 {
		return nil, fmt.Sprintf("malformed %s header (%d bytes)", HeaderTimers, len(b))
	}
	timers := make([]store.Timer, 0, len(b)/timerBytes)
	for ; len(b) > 0; b = b[timerBytes:] {
		t := store.Timer{Kind: store.TimerKind(b[0]), At: int64(binary.BigEndian.Uint64(b[1:timerBytes]))}
		if t.Kind != store.ProcessingTime && t.Kind != store.EventTime {
			return nil, fmt.Sprintf("unknown timer kind %q in %s", b[0], HeaderTimers)
		}
		timers = append(timers, t)
	}
	return timers, ""
}

// snapshotHeaderBytes are the header bytes of a snapshot or tombstone
// record (EncodeSnapshot): three names and their values.
var snapshotHeaderBytes = len(HeaderVersion) + len(versionBytes) + len(HeaderKind) + 1 + len(HeaderOffset) + 8

// SnapshotBytes is the size of s as the record a backend writes
// (EncodeSnapshot): its key, value and header bytes, without the record
// framing (a few bytes of lengths per record). The group commit sizes a
// transaction by it (MaxBytesPerTransaction).
func SnapshotBytes(s store.Snapshot) int {
	n := len(s.Key) + snapshotHeaderBytes
	if !s.Tombstone {
		n += len(s.Value)
		if len(s.Timers) > 0 {
			n += len(HeaderTimers) + timerBytes*len(s.Timers)
		}
	}
	return n
}

// CheckWrite validates a snapshot before it is queued: the reserved key and
// the size limit. A zero limit means store.DefaultMaxValueBytes.
func CheckWrite(input store.TopicPartition, s store.Snapshot, limit int) error {
	if bytes.Equal(s.Key, OffsetMarkerKey) {
		return fmt.Errorf("%w: %s key %q is snapfence's offset marker", store.ErrReservedKey, input, s.Key)
	}
	if limit <= 0 {
		limit = store.DefaultMaxValueBytes
	}
	if n := len(s.Key) + len(s.Value); n > limit {
		return &store.ValueTooLargeError{Input: input, Key: s.Key, Size: n, Limit: limit}
	}
	if s.Offset < 0 {
		return fmt.Errorf("store: %s key %q: negative input offset %d", input, printableKey(s.Key), s.Offset)
	}
	if s.Tombstone && len(s.Timers) > 0 {
		return fmt.Errorf("store: %s key %q: a tombstone with timers (compaction removes a tombstone, and its timers with it)",
			input, printableKey(s.Key))
	}
	for _, t := range s.Timers {
		if t.Kind != store.ProcessingTime && t.Kind != store.EventTime {
			return fmt.Errorf("store: %s key %q: timer of unknown kind %v", input, printableKey(s.Key), t.Kind)
		}
	}
	return nil
}

// CheckOutput validates an output record of an exactly-once batch of
// input, whose snapshots go to snapshotTopic: it needs a topic, not the
// snapshot topic (recovery would read it as a snapshot), and key plus value
// within limit (0: store.DefaultMaxValueBytes).
func CheckOutput(input store.TopicPartition, snapshotTopic string, o store.Output, limit int) error {
	if o.Topic == "" {
		return fmt.Errorf("%w: %s: output record of key %q has no topic", store.ErrInvalidOutput, input, printableKey(o.Key))
	}
	if o.Topic == snapshotTopic {
		return fmt.Errorf("%w: %s: output record of key %q is for the snapshot topic %q; outputs go to topics of their own",
			store.ErrInvalidOutput, input, printableKey(o.Key), o.Topic)
	}
	if limit <= 0 {
		limit = store.DefaultMaxValueBytes
	}
	if n := len(o.Key) + len(o.Value); n > limit {
		return &store.ValueTooLargeError{Input: input, OutputTopic: o.Topic, Key: o.Key, Size: n, Limit: limit}
	}
	return nil
}

// printableKey is a key for an error message, cut to 64 bytes, as store's
// errors print one.
func printableKey(k []byte) string {
	const max = 64
	if len(k) > max {
		return string(k[:max]) + "..."
	}
	return string(k)
}

// commitMetadataPrefix starts the metadata of every input offset a
// snapfence application commits.
const commitMetadataPrefix = "snapfence app="

// CommitMetadata is the metadata a Transactional store (and the operator
// command) commits with an input offset of the application app: an
// offset committed by anything else (a consumer-groups reset, another
// consumer) carries other metadata, so a check from outside can tell an
// offset moved past the state that covers it.
func CommitMetadata(app string) string { return commitMetadataPrefix + app }

// CommitApplication returns the application CommitMetadata names in
// metadata, and false for metadata that is not snapfence's.
func CommitApplication(metadata string) (string, bool) {
	app, ok := strings.CutPrefix(metadata, commitMetadataPrefix)
	return app, ok
}
