package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"
	"unsafe"
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
	// TimerKind and the 8-byte big-endian At.
	HeaderTimers = "snapfence.t"
	// HeaderApplication is the name of the application that wrote the
	// record (the store's Application), in both versions. A record
	// without it was written before applications were named, and is read
	// as any application's.
	HeaderApplication = "snapfence.a"
)

// OffsetMarkerKey is the key of the offset marker record a backend may write
// to make an offset-only transaction real. Writes of this key are refused
// with ErrReservedKey; all marker records share it, so compaction keeps one.
var OffsetMarkerKey = []byte("\x00snapfence.offset-marker")

// RecordKind tells what a snapshot-partition record is.
type RecordKind byte

const (
	KindSnapshot     RecordKind = 's'
	KindTombstone    RecordKind = 'd'
	KindOffsetMarker RecordKind = 'm'
)

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}

// WireRecord is a snapshot-partition record as the broker stores it.
type WireRecord struct {
	Key     []byte
	Value   []byte
	Headers []Header
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
func EncodeSnapshot(app string, s Snapshot) WireRecord {
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
	return WireRecord{Key: s.Key, Value: value, Headers: hs}
}

// withTimers is hs (version 1 headers) as version 2, with the timers'
// header; only keys with timers pay for it.
func withTimers(hs []Header, ts []Timer) []Header {
	b := make([]byte, 0, timerBytes*len(ts))
	for _, t := range ts {
		b = append(b, byte(t.Kind))
		b = binary.BigEndian.AppendUint64(b, uint64(t.At))
	}
	out := make([]Header, len(hs), len(hs)+1)
	copy(out, hs)
	out[0].Value = timersVersionBytes
	return append(out, Header{Key: HeaderTimers, Value: b})
}

// EncodeOffsetMarker frames the marker record of an offset-only
// transaction of the application app. Its value says what was committed,
// for humans.
func EncodeOffsetMarker(app string, offset int64, id GroupIdentity) WireRecord {
	v := fmt.Sprintf("offset=%d member=%s generation=%d", offset, id.MemberID, id.Generation)
	return WireRecord{Key: OffsetMarkerKey, Value: []byte(v), Headers: headers(KindOffsetMarker, offset, app)}
}

// headers frames a record's headers in one allocation: a snapshot is
// framed per input record changed, so this is on the engine's hot path.
// The application header comes last, so that version 2's timers header
// is appended after it and the first three stay where readers of version
// 1 found them.
func headers(kind RecordKind, offset int64, app string) []Header {
	f := new(struct {
		hs   [4]Header
		kind [1]byte
		off  [8]byte
	})
	f.kind[0] = byte(kind)
	binary.BigEndian.PutUint64(f.off[:], uint64(offset))
	f.hs = [4]Header{
		{Key: HeaderVersion, Value: versionBytes},
		{Key: HeaderKind, Value: f.kind[:]},
		{Key: HeaderOffset, Value: f.off[:]},
	}
	if app == "" {
		return f.hs[:3]
	}
	// The name's bytes are shared, not copied: every record of a backend
	// carries the same name, and a header's value is only ever read.
	f.hs[3] = Header{Key: HeaderApplication, Value: unsafe.Slice(unsafe.StringData(app), len(app))}
	return f.hs[:]
}

// RecordApplication returns the application a snapshot-partition record
// names (HeaderApplication), and false for a record that names none.
func RecordApplication(r WireRecord) ([]byte, bool) {
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
// a known version is a *CorruptRecordError naming tp and offset.
func DecodeRecord(tp TopicPartition, offset int64, r WireRecord) (Snapshot, RecordKind, error) {
	corrupt := func(reason string) (Snapshot, RecordKind, error) {
		return Snapshot{}, 0, &CorruptRecordError{Snapshots: tp, Offset: offset, Reason: reason}
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
	s := Snapshot{Key: r.Key, Offset: int64(binary.BigEndian.Uint64(h.offset))}
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
func readHeaders(hs []Header) recordHeaders {
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
func (h recordHeaders) decodeBody(s *Snapshot, k RecordKind, r WireRecord) string {
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
func decodeTimers(b []byte) ([]Timer, string) {
	if len(b) == 0 || len(b)%timerBytes != 0 {
		return nil, fmt.Sprintf("malformed %s header (%d bytes)", HeaderTimers, len(b))
	}
	timers := make([]Timer, 0, len(b)/timerBytes)
	for ; len(b) > 0; b = b[timerBytes:] {
		t := Timer{Kind: TimerKind(b[0]), At: int64(binary.BigEndian.Uint64(b[1:timerBytes]))}
		if t.Kind != ProcessingTime && t.Kind != EventTime {
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
func SnapshotBytes(s Snapshot) int {
	n := len(s.Key) + snapshotHeaderBytes
	if !s.Tombstone {
		n += len(s.Value)
		if len(s.Timers) > 0 {
			n += len(HeaderTimers) + timerBytes*len(s.Timers)
		}
	}
	return n
}

// TransactionBytesBudget is the time budget of a transaction as bytes:
// what TransactionBudgetRate writes in half of timeout, the producer's
// transaction timeout. A transaction is never sized above it, so that it
// can end well inside the timeout, after which the broker aborts it and
// fences the producer. The budget bounds MaxBytesPerTransaction; it is
// checked when a backend is configured, not with a clock while writes
// queue, so which writes share a transaction still depends only on the
// calls.
func TransactionBytesBudget(timeout time.Duration) int {
	return int(min(timeout.Seconds()/2*TransactionBudgetRate, float64(math.MaxInt32)))
}

// CheckWrite validates a snapshot before it is queued: the reserved key and
// the size limit. A zero limit means DefaultMaxValueBytes.
func CheckWrite(input TopicPartition, s Snapshot, limit int) error {
	if bytes.Equal(s.Key, OffsetMarkerKey) {
		return fmt.Errorf("%w: %s key %q is snapfence's offset marker", ErrReservedKey, input, s.Key)
	}
	if limit <= 0 {
		limit = DefaultMaxValueBytes
	}
	if n := len(s.Key) + len(s.Value); n > limit {
		return &ValueTooLargeError{Input: input, Key: s.Key, Size: n, Limit: limit}
	}
	if s.Offset < 0 {
		return fmt.Errorf("store: %s key %q: negative input offset %d", input, printableKey(s.Key), s.Offset)
	}
	if s.Tombstone && len(s.Timers) > 0 {
		return fmt.Errorf("store: %s key %q: a tombstone with timers (compaction removes a tombstone, and its timers with it)",
			input, printableKey(s.Key))
	}
	for _, t := range s.Timers {
		if t.Kind != ProcessingTime && t.Kind != EventTime {
			return fmt.Errorf("store: %s key %q: timer of unknown kind %v", input, printableKey(s.Key), t.Kind)
		}
	}
	return nil
}

// CheckOutput validates an output record of an exactly-once batch of
// input, whose snapshots go to snapshotTopic: it needs a topic, not the
// snapshot topic (recovery would read it as a snapshot), and key plus value
// within limit (0: DefaultMaxValueBytes).
func CheckOutput(input TopicPartition, snapshotTopic string, o Output, limit int) error {
	if o.Topic == "" {
		return fmt.Errorf("%w: %s: output record of key %q has no topic", ErrInvalidOutput, input, printableKey(o.Key))
	}
	if o.Topic == snapshotTopic {
		return fmt.Errorf("%w: %s: output record of key %q is for the snapshot topic %q; outputs go to topics of their own",
			ErrInvalidOutput, input, printableKey(o.Key), o.Topic)
	}
	if limit <= 0 {
		limit = DefaultMaxValueBytes
	}
	if n := len(o.Key) + len(o.Value); n > limit {
		return &ValueTooLargeError{Input: input, OutputTopic: o.Topic, Key: o.Key, Size: n, Limit: limit}
	}
	return nil
}

// OutputPartition is the partition of a topic with partitions partitions
// that Kafka's default partitioner gives a record with this key: the
// positive murmur2 hash of the key modulo the partition count. (A record
// without a key hashes as an empty key, so its partition is still fixed.)
// Outputs of snapfence and of a plain Kafka producer with the same key
// land in the same partition.
func OutputPartition(key []byte, partitions int) int32 {
	if partitions <= 0 {
		return 0
	}
	return int32((murmur2(key) & 0x7fffffff) % uint32(partitions))
}

// murmur2 is the 32-bit MurmurHash2 with Kafka's seed, as Kafka's
// Utils.murmur2 computes it.
func murmur2(b []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for len(b) >= 4 {
		k := binary.LittleEndian.Uint32(b)
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		b = b[4:]
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
