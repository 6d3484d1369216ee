package operator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/store/wire"
)

func TestSkipPlanDryRunAndApply(t *testing.T) {
	f := newFakeOp(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.events(0, at, "a=1", "b=poison-and-then-some", "a=2")
	f.commit(0, 1)
	ctx := context.Background()

	_, err := f.tool.PlanSkip(ctx, SkipOptions{Partition: 0, Offset: 2})
	if err == nil || !strings.Contains(err.Error(), "stopped at offset 1") {
		t.Fatalf("PlanSkip of offset 2 = %v, want a refusal naming the committed offset 1", err)
	}
	if _, err := f.tool.PlanSkip(ctx, SkipOptions{Partition: 1, Offset: -1}); err == nil || !strings.Contains(err.Error(), "no committed offset") {
		t.Fatalf("PlanSkip of a partition with no commit = %v", err)
	}
	if _, err := f.tool.PlanSkip(ctx, SkipOptions{Partition: 2, Offset: -1}); err == nil {
		t.Fatal("PlanSkip of a partition that does not exist: no error")
	}
	before := f.world()
	p, err := f.tool.PlanSkip(ctx, SkipOptions{Partition: 0, Offset: 1})
	if err != nil {
		t.Fatal(err)
	}
	if after := f.world(); after != before {
		t.Fatalf("planning changed things:\nbefore %s\nafter  %s", before, after)
	}
	r := p.Record
	if p.Committed != 1 || p.To != 2 || r.Offset != 1 || r.Key != `"b"` || r.ValueSize != 20 || r.Head != `"poison-and-then-some"` || !r.Timestamp.Equal(at) {
		t.Fatalf("plan = %+v", p)
	}
	text := p.String()
	for _, want := range []string{"commit offset 2 of input orders/0", `key	"b"`, "20 bytes", "dry run: nothing changed", "2026-01-02T03:04:05Z"} {
		if !strings.Contains(text, want) {
			t.Errorf("the plan's text lacks %q:\n%s", want, text)
		}
	}
	if err := f.tool.ApplySkip(ctx, p); err != nil {
		t.Fatal(err)
	}
	c, _ := f.tool.committedOffsets(ctx)
	if c[0].At != 2 || c[0].Metadata != wire.CommitMetadata(f.app) || !p.Executed {
		t.Fatalf("committed after the skip: %+v", c[0])
	}
	// The plan again: the offset moved since.
	if err := f.tool.ApplySkip(ctx, p); !errors.Is(err, ErrPlanStale) {
		t.Fatalf("applying a plan twice = %v, want ErrPlanStale", err)
	}
	// Nothing left to skip past the end.
	f.commit(0, 3)
	if _, err := f.tool.PlanSkip(ctx, SkipOptions{Partition: 0, Offset: -1}); err == nil || !strings.Contains(err.Error(), "no record to skip") {
		t.Fatalf("PlanSkip at the end = %v", err)
	}
}

func TestSkipRefusesLiveMembers(t *testing.T) {
	f := newFakeOp(t)
	f.events(0, time.Time{}, "a=1")
	f.commit(0, 0)
	m := f.join()
	_, err := f.tool.PlanSkip(context.Background(), SkipOptions{Partition: 0, Offset: -1})
	var live *LiveMembersError
	if !errors.As(err, &live) || len(live.Members) != 1 {
		t.Fatalf("PlanSkip with a member = %v, want a *LiveMembersError", err)
	}
	m.Close()
}
