package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/store/wire"
)

// Skip moves one input partition past the record it is stopped on (a
// poison record under engine.StopOnPoison), by committing the offset
// after it, while none of the application's members runs.
//
// Why a commit is all it takes: the engine stops on the record without
// folding it, so no snapshot reflects it, and the committable offset is
// the smallest offset still held, so the committed offset is the
// record's. A key whose snapshot is ahead of the record (flushed while
// the record's offset was held) already holds its own records after it,
// and skips them on replay as it skips every record at or below its
// snapshot's offset. So with the offset after the record committed,
// every key's state is exactly the fold of the input with that one
// record left out.

// SkipOptions says which partition to move, past which record.
type SkipOptions struct {
	Partition int32
	// Offset is the record to skip; negative: the one at the committed
	// offset. Given, it must be the committed offset (or, past a
	// transaction marker there, the first record after it).
	Offset int64
}

// SkipPlan is what a skip does, computed before anything changes.
type SkipPlan struct {
	Application string `json:"application"`
	Group       string `json:"group"`
	Input       string `json:"input"`
	Partition   int32  `json:"partition"`
	// Committed is the group's committed offset (-1: none, and the
	// partition starts at its log start), CommittedBy the application
	// its metadata names ("" when it is not snapfence's).
	Committed   int64  `json:"committed"`
	CommittedBy string `json:"committed_by,omitempty"`
	// Record is the record skipped.
	Record SkippedRecord `json:"record"`
	// To is the offset committed, with Metadata.
	To       int64  `json:"to"`
	Metadata string `json:"metadata"`
	// Steps are what ApplySkip does, in order.
	Steps    []string `json:"steps"`
	Executed bool     `json:"executed"`
}

// SkippedRecord is the record a skip goes past.
type SkippedRecord struct {
	Offset    int64     `json:"offset"`
	Key       string    `json:"key"`
	Timestamp time.Time `json:"timestamp"`
	ValueSize int       `json:"value_size"`
	// Head is the value's first bytes, quoted when they are text, else
	// in hex.
	Head    string `json:"head"`
	Headers int    `json:"headers"`
}

// skipHead is how many of the value's bytes a plan shows.
const skipHead = 64

// PlanSkip computes a skip of o.Partition past the record at its
// committed offset: it refuses while the group has any member, while a
// transaction is open on the partition's snapshot partition or the
// group's offsets, and when o.Offset is given and is not where the
// partition is stopped. Nothing changes.
func (tool *Tool) PlanSkip(ctx context.Context, o SkipOptions) (*SkipPlan, error) {
	t := tool.t
	n, err := tool.partitions(ctx, t.Input)
	if err != nil {
		return nil, err
	}
	if o.Partition < 0 || o.Partition >= n {
		return nil, fmt.Errorf("input %q has partitions 0 to %d, not %d", t.Input, n-1, o.Partition)
	}
	if _, err := tool.noMembers(ctx); err != nil {
		return nil, err
	}
	if err := tool.openTransactions(ctx, []int32{o.Partition}); err != nil {
		return nil, err
	}
	p := &SkipPlan{Application: t.Application, Group: t.Group, Input: t.Input, Partition: o.Partition,
		Committed: -1, Metadata: wire.CommitMetadata(t.Application)}
	committed, err := tool.committedOffsets(ctx)
	if err != nil {
		return nil, err
	}
	from := int64(-1)
	if c, ok := committed[o.Partition]; ok {
		p.Committed, from = c.At, c.At
		p.CommittedBy, _ = wire.CommitApplication(c.Metadata)
	} else {
		// No commit yet: the partition stops on its first record, if the
		// application starts a partition at its log start.
		starts, err := tool.adm.ListStartOffsets(ctx, t.Input)
		if err != nil {
			return nil, fmt.Errorf("listing the start offsets of %q: %w", t.Input, err)
		}
		s, ok := starts.Lookup(t.Input, o.Partition)
		if !ok || s.Err != nil {
			return nil, fmt.Errorf("listing the start of %s/%d: %v", t.Input, o.Partition, missing(s.Err))
		}
		if o.Offset < 0 {
			return nil, fmt.Errorf("group %q has no committed offset of %s/%d: give -offset explicitly (the partition's log start is %d)",
				t.Group, t.Input, o.Partition, s.Offset)
		}
		from = s.Offset
	}
	rec, err := tool.recordAt(ctx, o.Partition, from)
	if err != nil {
		return nil, err
	}
	if o.Offset >= 0 && o.Offset != from && o.Offset != rec.Offset {
		return nil, fmt.Errorf("%s/%d is stopped at offset %d (%s), not %d: skip moves a partition past the record it is stopped on, and nothing else",
			t.Input, o.Partition, from, committedText(p.Committed), o.Offset)
	}
	p.Record = rec
	p.To = rec.Offset + 1
	p.describe()
	return p, nil
}

func committedText(c int64) string {
	if c < 0 {
		return "no committed offset; the log start"
	}
	return "the committed offset"
}

// recordAt reads the first record of the partition at or after offset,
// read_committed as the engine reads it: the one the partition is
// stopped on.
func (tool *Tool) recordAt(ctx context.Context, partition int32, offset int64) (SkippedRecord, error) {
	t := tool.t
	lso, err := tool.adm.ListCommittedOffsets(ctx, t.Input)
	if err != nil {
		return SkippedRecord{}, fmt.Errorf("listing the last stable offsets of %q: %w", t.Input, err)
	}
	l, ok := lso.Lookup(t.Input, partition)
	if !ok || l.Err != nil {
		return SkippedRecord{}, fmt.Errorf("listing the last stable offset of %s/%d: %v", t.Input, partition, missing(l.Err))
	}
	if offset >= l.Offset {
		return SkippedRecord{}, fmt.Errorf("%s/%d has no record to skip at offset %d: its last stable offset is %d (nothing after the committed offset, or a transaction open on the input)",
			t.Input, partition, offset, l.Offset)
	}
	opts := append(tool.conn.clientOpts(), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{t.Input: {partition: kgo.NewOffset().At(offset)}}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return SkippedRecord{}, err
	}
	defer cl.Close()
	for {
		pctx, cancel := context.WithTimeout(ctx, StallTimeout)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return SkippedRecord{}, err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil && !errors.Is(ferr, context.DeadlineExceeded) {
			return SkippedRecord{}, fmt.Errorf("reading %s/%d at %d: %w", t.Input, partition, offset, ferr)
		}
		recs := fs.Records()
		if len(recs) == 0 {
			return SkippedRecord{}, fmt.Errorf("reading %s/%d at %d: no record for %v", t.Input, partition, offset, StallTimeout)
		}
		for _, r := range recs {
			if r.Offset < offset {
				continue
			}
			if r.Offset >= l.Offset {
				return SkippedRecord{}, fmt.Errorf("%s/%d has no committed record from offset %d to its last stable offset %d", t.Input, partition, offset, l.Offset)
			}
			return SkippedRecord{Offset: r.Offset, Key: printable(r.Key), Timestamp: r.Timestamp.UTC(), ValueSize: len(r.Value),
				Head: printable(r.Value[:min(len(r.Value), skipHead)]), Headers: len(r.Headers)}, nil
		}
	}
}

// printable is b quoted when it is text, else in hex.
func printable(b []byte) string {
	if b == nil {
		return "null"
	}
	if utf8.Valid(b) {
		return strconv.Quote(string(b))
	}
	return fmt.Sprintf("0x%x", b)
}

func (p *SkipPlan) describe() {
	p.Steps = []string{
		fmt.Sprintf("check that group %q still has no members, no transaction is open and %s/%d is still committed at %s",
			p.Group, p.Input, p.Partition, offsetText(p.Committed)),
		fmt.Sprintf("commit offset %d of input %s/%d for group %q, with metadata %q: the record at %d (key %s, %d bytes) is never folded",
			p.To, p.Input, p.Partition, p.Group, p.Metadata, p.Record.Offset, p.Record.Key, p.Record.ValueSize),
		"nothing else changes: no snapshot reflects the record, so every key's state stays exact for the input without it",
	}
}

// WriteText renders the plan for people.
func (p *SkipPlan) WriteText(w io.Writer) {
	fmt.Fprintf(w, "skip: application %s, group %s, input %s/%d committed at %s", p.Application, p.Group, p.Input, p.Partition, offsetText(p.Committed))
	if p.Committed >= 0 && p.CommittedBy != p.Application {
		by := p.CommittedBy
		if by == "" {
			by = "not snapfence"
		}
		fmt.Fprintf(w, " (committed by %s)", by)
	}
	fmt.Fprintln(w)
	r := p.Record
	fmt.Fprintf(w, "\nrecord skipped:\n  offset\t%d\n  key\t%s\n  timestamp\t%s\n  value\t%d bytes\n  first bytes\t%s\n  headers\t%d\n",
		r.Offset, r.Key, r.Timestamp.Format(time.RFC3339Nano), r.ValueSize, r.Head, r.Headers)
	writeSteps(w, p.Steps, p.Executed)
}

func (p *SkipPlan) String() string {
	var b strings.Builder
	p.WriteText(&b)
	return b.String()
}

// ApplySkip carries out p: it checks again that the group has no
// members, that no transaction is open and that the partition is still
// committed where p found it, then commits p.To. The commit is a plain
// one (generation -1), which a group that has members since refuses.
func (tool *Tool) ApplySkip(ctx context.Context, p *SkipPlan) error {
	t := tool.t
	if p.Application != t.Application || p.Group != t.Group || p.Input != t.Input {
		return fmt.Errorf("the plan is for application %q, group %q, input %q, not this tool's", p.Application, p.Group, p.Input)
	}
	if _, err := tool.noMembers(ctx); err != nil {
		return err
	}
	if err := tool.openTransactions(ctx, []int32{p.Partition}); err != nil {
		return err
	}
	committed, err := tool.committedOffsets(ctx)
	if err != nil {
		return err
	}
	now := int64(-1)
	if c, ok := committed[p.Partition]; ok {
		now = c.At
	}
	if now != p.Committed {
		return fmt.Errorf("%w: %s/%d is committed at %s, planned at %s", ErrPlanStale, t.Input, p.Partition, offsetText(now), offsetText(p.Committed))
	}
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: t.Input, Partition: p.Partition, At: p.To, LeaderEpoch: -1, Metadata: p.Metadata})
	if err := tool.commit(ctx, os); err != nil {
		return err
	}
	p.Executed = true
	return nil
}
