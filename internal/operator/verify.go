package operator

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// The checks a violation names, stable for scripts.
const (
	// CheckOffsetRegression: a key's committed snapshot holds a lower
	// input offset than an earlier committed snapshot of the key (a stale
	// overwrite: recovery reads the older state).
	CheckOffsetRegression = "offset-regression"
	// CheckForeignRecord: a committed snapshot record names another
	// application as its writer.
	CheckForeignRecord = "foreign-record"
	// CheckCorruptRecord: a committed record does not decode.
	CheckCorruptRecord = "corrupt-record"
	// CheckOffsetMoved: a committed input offset was not committed by the
	// application (no CommitMetadata of its own), so it may be ahead of
	// the state.
	CheckOffsetMoved = "offset-moved"
	// CheckStateMissing: an input offset is committed past the log start
	// while the snapshot partition holds nothing of the application.
	CheckStateMissing = "state-missing"
	// CheckHangingTransaction: a transaction no coordinator has ongoing
	// is open on a snapshot or offsets partition.
	CheckHangingTransaction = "hanging-transaction"
	// CheckReadMismatch: a record read read_committed is not the record
	// read read_uncommitted at its offset.
	CheckReadMismatch = "read-mismatch"
)

// The invariants Verify checks, each by the checks above.
const (
	InvariantSnapshotOffsets  = "snapshot-offsets"  // offset-regression
	InvariantSnapshotWriters  = "snapshot-writers"  // foreign-record, corrupt-record
	InvariantCommittedOffsets = "committed-offsets" // offset-moved, state-missing
	InvariantTransactions     = "transactions"      // hanging-transaction
	InvariantReads            = "reads"             // read-mismatch
)

var invariantOf = map[string]string{
	CheckOffsetRegression:   InvariantSnapshotOffsets,
	CheckForeignRecord:      InvariantSnapshotWriters,
	CheckCorruptRecord:      InvariantSnapshotWriters,
	CheckOffsetMoved:        InvariantCommittedOffsets,
	CheckStateMissing:       InvariantCommittedOffsets,
	CheckHangingTransaction: InvariantTransactions,
	CheckReadMismatch:       InvariantReads,
}

// Invariant statuses.
const (
	StatusOK            = "ok"
	StatusViolated      = "violated"
	StatusNotApplicable = "not-applicable"
)

// MaxListedViolations bounds the violations listed per check and
// partition: a topic full of another application's records would
// otherwise make a report as large as the topic. The rest are counted
// (VerifyReport.Omitted, VerifyPartition.Violations).
const MaxListedViolations = 50

// VerifyReport is what Verify found.
type VerifyReport struct {
	Application   string `json:"application"`
	Input         string `json:"input"`
	Group         string `json:"group"`
	SnapshotTopic string `json:"snapshot_topic"`
	// Mode is "transactional" or "plain".
	Mode string `json:"mode"`
	// Invariants are the invariants checked, each ok, violated or not
	// applicable (with why).
	Invariants []VerifyInvariant `json:"invariants"`
	// Violations are the violations found, at most MaxListedViolations
	// per check and partition; Omitted counts the others.
	Violations []Violation `json:"violations"`
	Omitted    int         `json:"omitted,omitempty"`
	// Partitions are the snapshot partitions read, with what was found
	// of their input partitions.
	Partitions []VerifyPartition `json:"partitions"`
	// Notes are findings that are not violations.
	Notes []string `json:"notes,omitempty"`
}

// VerifyInvariant is one invariant's verdict.
type VerifyInvariant struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	// Why says why it is not applicable.
	Why string `json:"why,omitempty"`
	// Violations counts its violations, listed or not.
	Violations int `json:"violations"`
}

// Violation is one broken invariant, where it is broken.
type Violation struct {
	// Check is one of the Check constants.
	Check string `json:"check"`
	// Partition is the input partition, which is also its snapshot
	// partition's number.
	Partition int32 `json:"partition"`
	// Key is the key concerned, if any: as text when it is UTF-8, else
	// "0x" and its hex.
	Key string `json:"key,omitempty"`
	// Detail says what and where, in one sentence.
	Detail string `json:"detail"`
}

// VerifyPartition is what Verify read of one partition.
type VerifyPartition struct {
	Partition int32 `json:"partition"`
	// Committed and Uncommitted are the records read read_committed and
	// read_uncommitted (offset markers included).
	Committed   int `json:"records_committed"`
	Uncommitted int `json:"records_uncommitted"`
	// Keys is how many keys have a committed snapshot (tombstones
	// included, offset markers not).
	Keys int `json:"keys"`
	// Aborted counts the records of aborted transactions; Open those of
	// transactions still open (or records written) while Verify read.
	Aborted int `json:"aborted"`
	Open    int `json:"open"`
	// NoApplication counts committed records without an application
	// header (written before applications were named).
	NoApplication int `json:"no_application,omitempty"`
	// CommittedOffset is the group's committed input offset (-1: none)
	// and CommittedBy the application its metadata names ("" when none).
	CommittedOffset int64  `json:"committed_offset"`
	CommittedBy     string `json:"committed_by,omitempty"`
	// Violations counts the partition's violations, listed or not.
	Violations int `json:"violations"`
}

// OK reports whether no invariant is violated.
func (r *VerifyReport) OK() bool {
	return len(r.Violations) == 0 && r.Omitted == 0
}

// Text renders the report for people: one line per violation, the notes,
// the partitions' counts and a summary line.
func (r *VerifyReport) Text(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "verify: application %s, input %s, group %s, snapshot topic %s (%s mode)\n",
		r.Application, r.Input, r.Group, r.SnapshotTopic, r.Mode)
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "VIOLATION %s partition %d: %s\n", v.Check, v.Partition, v.Detail)
	}
	if r.Omitted > 0 {
		fmt.Fprintf(&b, "VIOLATION ... and %d more not listed (at most %d per check and partition)\n", r.Omitted, MaxListedViolations)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	records := 0
	for _, p := range r.Partitions {
		records += p.Committed
		fmt.Fprintf(&b, "partition %d: %d records committed, %d read uncommitted, %d keys, %d aborted, %d open",
			p.Partition, p.Committed, p.Uncommitted, p.Keys, p.Aborted, p.Open)
		if p.CommittedOffset >= 0 {
			fmt.Fprintf(&b, ", input offset %d committed", p.CommittedOffset)
			if p.CommittedBy != "" {
				fmt.Fprintf(&b, " by %s", p.CommittedBy)
			}
		}
		b.WriteString("\n")
	}
	var held, na, violated []string
	for _, inv := range r.Invariants {
		switch inv.Status {
		case StatusOK:
			held = append(held, inv.Name)
		case StatusNotApplicable:
			na = append(na, inv.Name)
			fmt.Fprintf(&b, "not applicable: %s: %s\n", inv.Name, inv.Why)
		default:
			violated = append(violated, fmt.Sprintf("%s (%d)", inv.Name, inv.Violations))
		}
	}
	if r.OK() {
		fmt.Fprintf(&b, "OK: %s hold over %d partitions, %d committed records", strings.Join(held, ", "), len(r.Partitions), records)
	} else {
		fmt.Fprintf(&b, "FAIL: %s of %s over %d partitions, %d committed records",
			plural(len(r.Violations)+r.Omitted, "violation"), strings.Join(violated, ", "), len(r.Partitions), records)
	}
	if len(na) > 0 {
		fmt.Fprintf(&b, "; not applicable: %s", strings.Join(na, ", "))
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// verification builds a report.
type verification struct {
	r      *VerifyReport
	parts  map[int32]*VerifyPartition
	counts map[string]int // violations by invariant
	listed map[string]int // listed violations by check and partition
}

func (v *verification) partition(p int32) *VerifyPartition {
	if vp, ok := v.parts[p]; ok {
		return vp
	}
	vp := &VerifyPartition{Partition: p, CommittedOffset: -1}
	v.parts[p] = vp
	return vp
}

func (v *verification) violate(check string, p int32, key []byte, format string, args ...any) {
	v.counts[invariantOf[check]]++
	v.partition(p).Violations++
	id := fmt.Sprintf("%s/%d", check, p)
	if v.listed[id] >= MaxListedViolations {
		v.r.Omitted++
		return
	}
	v.listed[id]++
	x := Violation{Check: check, Partition: p, Detail: fmt.Sprintf(format, args...)}
	if key != nil {
		x.Key = keyText(key)
	}
	v.r.Violations = append(v.r.Violations, x)
}

func (v *verification) note(format string, args ...any) {
	v.r.Notes = append(v.r.Notes, fmt.Sprintf(format, args...))
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func keyText(k []byte) string {
	if utf8.Valid(k) {
		return string(k)
	}
	return "0x" + hex.EncodeToString(k)
}

// Verify checks the invariants an operator can check from outside the
// application: it reads every partition of the snapshot topic from its
// start, read_committed and read_uncommitted side by side, and the
// group's committed offsets and the open transactions. It checks that no
// key's committed snapshot goes back in input offset, that every
// committed record is the application's and decodes, that the committed
// input offsets were committed by the application over a state that
// exists (Transactional mode), and that no transaction hangs
// (Transactional mode). Against a running application its transactions
// in flight show as notes and open records, not violations. It returns
// an error, rather than a report, when
// it cannot read what a check needs: a check that did not run must not
// read as one that passed.
func (tool *Tool) Verify(ctx context.Context) (*VerifyReport, error) {
	t := tool.t
	mode := "transactional"
	if t.Plain {
		mode = "plain"
	}
	v := &verification{
		r: &VerifyReport{Application: t.Application, Input: t.Input, Group: t.Group, SnapshotTopic: t.SnapshotTopic,
			Mode: mode, Violations: []Violation{}},
		parts: map[int32]*VerifyPartition{}, counts: map[string]int{}, listed: map[string]int{},
	}
	inputs, err := tool.partitions(ctx, t.Input)
	if err != nil {
		return nil, err
	}
	snaps, err := tool.partitions(ctx, t.SnapshotTopic)
	switch {
	case errors.Is(err, ErrTopicMissing):
		snaps = 0
		v.note("the snapshot topic %q does not exist: no state is kept for the input", t.SnapshotTopic)
	case err != nil:
		return nil, err
	case snaps != inputs:
		v.note("the snapshot topic %q has %d partitions, the input %q %d: partition N of the snapshot topic holds input partition N's keys, so keys read from a partition the input lacks are no input's",
			t.SnapshotTopic, snaps, t.Input, inputs)
	}
	for p := range max(inputs, snaps) {
		v.partition(p)
	}

	// Ends before the reads: a record below the snapshot partition's last
	// stable offset is decided (committed or aborted), so the two reads
	// must agree on it, whatever is written while they run.
	stable := map[int32]int64{}
	if snaps > 0 {
		lsos, err := tool.adm.ListCommittedOffsets(ctx, t.SnapshotTopic)
		if err != nil {
			return nil, fmt.Errorf("listing the last stable offsets of %q: %w", t.SnapshotTopic, err)
		}
		for p := range snaps {
			o, ok := lsos.Lookup(t.SnapshotTopic, p)
			if !ok || o.Err != nil {
				return nil, fmt.Errorf("listing the last stable offset of %s/%d: %v", t.SnapshotTopic, p, missing(o.Err))
			}
			stable[p] = o.Offset
		}
	}
	own := map[int32]int{} // committed records of the application, by partition
	for p := range snaps {
		n, err := tool.verifyPartition(ctx, v, p, stable[p])
		if err != nil {
			return nil, err
		}
		own[p] = n
	}
	if err := tool.verifyOffsets(ctx, v, inputs, own); err != nil {
		return nil, err
	}
	if err := tool.verifyTransactions(ctx, v, min(inputs, snaps)); err != nil {
		return nil, err
	}

	na := map[string]string{}
	if t.Plain {
		na[InvariantCommittedOffsets] = "Plain mode commits its offsets through its consumer, without the application's metadata and apart from its snapshots"
		na[InvariantTransactions] = "Plain mode writes no transactions"
	}
	for _, name := range []string{InvariantSnapshotOffsets, InvariantSnapshotWriters, InvariantCommittedOffsets, InvariantTransactions, InvariantReads} {
		inv := VerifyInvariant{Name: name, Status: StatusOK, Violations: v.counts[name]}
		switch {
		case na[name] != "":
			inv.Status, inv.Why = StatusNotApplicable, na[name]
		case inv.Violations > 0:
			inv.Status = StatusViolated
		}
		v.r.Invariants = append(v.r.Invariants, inv)
	}
	for _, p := range slices.Sorted(maps.Keys(v.parts)) {
		v.r.Partitions = append(v.r.Partitions, *v.parts[p])
	}
	return v.r, nil
}

// keyAt is where a key's highest committed input offset so far is.
type keyAt struct {
	input, snapshot int64
}

// stream is one read of a partition, record by record, on a goroutine
// of its own: the two reads go side by side, so that neither is held in
// memory.
type stream struct {
	ch  chan record
	err error // set before ch is closed
}

func (tool *Tool) stream(ctx context.Context, tp store.TopicPartition, committed bool) *stream {
	s := &stream{ch: make(chan record, 256)}
	go func() {
		defer close(s.ch)
		s.err = tool.readPartition(ctx, tp, committed, func(r record) error {
			select {
			case s.ch <- r:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	return s
}

// verifyPartition reads snapshot partition p both ways and checks its
// committed records; stable is its last stable offset before the reads.
// It returns how many committed records are the application's (with or
// without an application header).
func (tool *Tool) verifyPartition(ctx context.Context, v *verification, p int32, stable int64) (own int, err error) {
	tp := store.TopicPartition{Topic: tool.t.SnapshotTopic, Partition: p}
	vp := v.partition(p)
	rctx, cancel := context.WithCancel(ctx)
	c, u := tool.stream(rctx, tp, true), tool.stream(rctx, tp, false)
	defer func() {
		// The readers end on the cancel; wait for them, so that none
		// outlives Verify.
		cancel()
		for range c.ch {
		}
		for range u.ch {
		}
	}()

	keys := map[string]keyAt{}
	var next *record // the uncommitted read's next record, not yet matched
	pull := func() (bool, error) {
		if next != nil {
			return true, nil
		}
		r, ok := <-u.ch
		if !ok {
			return false, u.err
		}
		vp.Uncommitted++
		next = &r
		return true, nil
	}
	last := int64(-1) // the last committed record's offset
	missing := 0      // committed records the uncommitted read did not see
	for rc := range c.ch {
		vp.Committed++
		last = rc.offset
		// The uncommitted read's records before rc are decided (below a
		// committed record) and not committed: aborted.
		for {
			ok, err := pull()
			if err != nil {
				return 0, err
			}
			if !ok || next.offset >= rc.offset {
				break
			}
			vp.Aborted++
			next = nil
		}
		switch {
		case next != nil && next.offset == rc.offset:
			if !sameRecord(next.r, rc.r) {
				v.violate(CheckReadMismatch, p, rc.r.Key, "%s offset %d: the record read read_committed differs from the one read read_uncommitted at the same offset", tp, rc.offset)
			}
			next = nil
		case rc.offset < stable:
			// Not a violation: the log cleaner may compact a record away
			// between the two reads.
			missing++
		}
		if tool.checkRecord(v, tp, rc, keys) {
			own++
		}
	}
	if c.err != nil {
		return 0, c.err
	}
	// The rest of the uncommitted read is past the last committed record:
	// aborted below the last stable offset, else open while read.
	for {
		ok, err := pull()
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		if next.offset < max(stable, last+1) {
			vp.Aborted++
		} else {
			vp.Open++
		}
		next = nil
	}
	vp.Keys = len(keys)
	if missing > 0 {
		v.note("partition %d: %s read read_committed not seen by the read_uncommitted read (compacted away between the two reads, if the log cleaner ran)",
			p, plural(missing, "record"))
	}
	if vp.NoApplication > 0 {
		v.note("partition %d: %s without an application header: written before applications were named, their writer cannot be told",
			p, plural(vp.NoApplication, "committed record"))
	}
	if vp.Open > 0 {
		v.note("partition %d: %s past the last stable offset, of transactions open while verify read", p, plural(vp.Open, "record"))
	}
	return own, nil
}

// checkRecord checks one committed record, keeping each key's highest
// input offset in keys; it reports whether the record is the
// application's.
func (tool *Tool) checkRecord(v *verification, tp store.TopicPartition, rc record, keys map[string]keyAt) bool {
	p := tp.Partition
	app, named := wire.RecordApplication(rc.r)
	if named && string(app) != tool.t.Application {
		v.violate(CheckForeignRecord, p, rc.r.Key, "%s offset %d: key %q was written by application %q, not %q: another application writes to this snapshot topic",
			tp, rc.offset, rc.r.Key, app, tool.t.Application)
		return false
	}
	if !named {
		v.partition(p).NoApplication++
	}
	s, kind, err := wire.DecodeRecord(tp, rc.offset, rc.r)
	if err != nil {
		v.violate(CheckCorruptRecord, p, rc.r.Key, "%v", err)
		return true
	}
	if kind == wire.KindOffsetMarker {
		// Markers carry the offset a transaction committed, not a key's
		// state: recovery skips them.
		return true
	}
	prev, seen := keys[string(s.Key)]
	switch {
	case !seen || s.Offset > prev.input:
		keys[string(s.Key)] = keyAt{input: s.Offset, snapshot: rc.offset}
	case s.Offset < prev.input:
		// The highest stays: every later record is compared with what the
		// key once committed, not with the stale one.
		v.violate(CheckOffsetRegression, p, s.Key, "key %q went back in input offset on %s: its snapshot at offset %d holds input offset %d, below input offset %d of its snapshot at offset %d (a stale overwrite: recovery reads the older state)",
			s.Key, tp, rc.offset, s.Offset, prev.input, prev.snapshot)
	}
	return true
}

func sameRecord(a, b wire.Record) bool {
	if !bytes.Equal(a.Key, b.Key) || !bytes.Equal(a.Value, b.Value) || (a.Value == nil) != (b.Value == nil) || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}

// verifyOffsets checks the group's committed input offsets against the
// state (Transactional mode), and records them in the partitions' counts
// in either mode. own is the count of the application's committed records
// by snapshot partition.
func (tool *Tool) verifyOffsets(ctx context.Context, v *verification, inputs int32, own map[int32]int) error {
	t := tool.t
	committed, err := tool.committed(ctx)
	if err != nil {
		return err
	}
	starts, err := tool.adm.ListStartOffsets(ctx, t.Input)
	if err != nil {
		return fmt.Errorf("listing the start offsets of %q: %w", t.Input, err)
	}
	want := wire.CommitMetadata(t.Application)
	for p := range inputs {
		c, ok := committed[p]
		if !ok {
			continue
		}
		vp := v.partition(p)
		vp.CommittedOffset = c.At
		vp.CommittedBy, _ = wire.CommitApplication(c.Metadata)
		if t.Plain {
			continue
		}
		if c.Metadata != want {
			v.violate(CheckOffsetMoved, p, nil, "input partition %s/%d: the committed offset %d carries metadata %q, not %q: it was moved outside the application (as kafka-consumer-groups --reset-offsets does), so inputs below it may be missing from the state; `snapfence skip` and `snapfence reset` are the ways that move it keeping state and offset together",
				t.Input, p, c.At, c.Metadata, want)
		}
		s, ok := starts.Lookup(t.Input, p)
		if !ok || s.Err != nil {
			return fmt.Errorf("listing the start offset of %s/%d: %v", t.Input, p, missing(s.Err))
		}
		if c.At > s.Offset && own[p] == 0 {
			v.violate(CheckStateMissing, p, nil, "input partition %s/%d: group %q committed offset %d, past the input's log start %d, but snapshot partition %s/%d holds no committed record of application %q: the snapshot topic was deleted or recreated under the offsets, and the state of the input below %d is gone",
				t.Input, p, t.Group, c.At, s.Offset, t.SnapshotTopic, p, t.Application, c.At)
		}
	}
	return nil
}

// verifyTransactions lists the transactions open on the first n snapshot
// partitions and on the group's offsets partition (Transactional mode):
// a hanging one is a violation, an ongoing one a note.
func (tool *Tool) verifyTransactions(ctx context.Context, v *verification, n int32) error {
	if tool.store == nil {
		return nil
	}
	// The group's offsets partition is every input partition's: each
	// transaction is reported once.
	type txnAt struct {
		partition string
		producer  int64
		start     int64
	}
	seen := map[txnAt]bool{}
	for p := range n {
		ts, err := tool.store.Transactions(ctx, store.TopicPartition{Topic: tool.t.Input, Partition: p}, tool.t.Group)
		if err != nil {
			return fmt.Errorf("listing the transactions open on input partition %s/%d's partitions: %w", tool.t.Input, p, err)
		}
		for _, x := range ts {
			at := txnAt{x.Partition.String(), x.ProducerID, x.StartOffset}
			if seen[at] {
				continue
			}
			seen[at] = true
			txn := txnOf(x, tool.bootstrap)
			if !x.Hanging {
				v.note("%s: a transaction of %q is open since offset %d, ongoing (a running member's, or ended by its coordinator at its timeout)",
					txn.Partition, txn.TransactionalID, txn.StartOffset)
				continue
			}
			whose := "not proven the application's"
			if x.Own {
				whose = "of the partition's own transactional.id"
			}
			v.violate(CheckHangingTransaction, p, nil, "%s: producer %d epoch %d holds a transaction open since offset %d that no coordinator has ongoing (%s); it holds the partition's last stable offset until aborted: %s",
				txn.Partition, txn.ProducerID, txn.ProducerEpoch, txn.StartOffset, whose, txn.AbortCommand)
		}
	}
	return nil
}
