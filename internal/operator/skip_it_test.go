//go:build it

package operator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store/wire"
)

// A poison record stops its partition; with the engine stopped, skip
// moves the partition past it, and the next run (on the same warm cache)
// reaches exactly the fold of the input without that one record.
func TestSkipPoisonRecordOnKafka(t *testing.T) {
	w := newRSWorld(t)
	before := []string{"a=1", "b=2", "a=3"}
	after := []string{"b=5", "a=100", "c=7"}
	w.produce(0, time.Time{}, before...)
	poison := w.produce(0, time.Time{}, "b=poison")
	w.produce(0, time.Time{}, after...)
	w.produce(1, time.Time{}, rsEvents1...)

	r := w.run()
	var fe *engine.FoldError
	if err := w.ended(r); !errors.As(err, &fe) || fe.Offset != poison || fe.Input.Partition != 0 {
		t.Fatalf("Run = %v, want the *FoldError of partition 0 offset %d", err, poison)
	}

	ctx := context.Background()
	if _, err := w.tool.PlanSkip(ctx, SkipOptions{Partition: 0, Offset: poison + 1}); err == nil || !strings.Contains(err.Error(), "stopped at offset") {
		t.Fatalf("PlanSkip of another offset = %v, want a refusal naming the committed offset", err)
	}
	plan, err := w.tool.PlanSkip(ctx, SkipOptions{Partition: 0, Offset: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan:\n%s", plan)
	if plan.Committed != poison || plan.Record.Offset != poison || plan.To != poison+1 || plan.Record.Key != `"b"` || plan.Record.Head != `"poison"` {
		t.Fatalf("plan = %+v", plan)
	}
	if c, _ := w.tool.committed(ctx); c[0].At != poison {
		t.Fatalf("the dry run moved the offset: %v", c[0])
	}
	if err := w.tool.ApplySkip(ctx, plan); err != nil {
		t.Fatal(err)
	}
	if c, _ := w.tool.committed(ctx); c[0].At != poison+1 || c[0].Metadata != wire.CommitMetadata(w.app) {
		t.Fatalf("committed after the skip: %+v", c[0])
	}

	r = w.run()
	w.caughtUp(r)
	if err := w.stop(r); err != nil {
		t.Fatal(err)
	}
	w.checkState(sums(append(append(append([]string{}, before...), after...), rsEvents1...)...))
}

// Skip is refused while the application runs.
func TestSkipRefusedWhileRunningOnKafka(t *testing.T) {
	w := newRSWorld(t)
	w.produce(0, time.Time{}, "a=1")
	r := w.run()
	w.caughtUp(r)
	_, err := w.tool.PlanSkip(context.Background(), SkipOptions{Partition: 0, Offset: -1})
	var live *LiveMembersError
	if !errors.As(err, &live) || len(live.Members) != 1 {
		t.Fatalf("PlanSkip while an engine runs = %v, want a *LiveMembersError", err)
	}
	if err := w.stop(r); err != nil {
		t.Fatal(err)
	}
}
