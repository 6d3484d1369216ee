package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/snapfence/snapfence/internal/operator"
)

func runVerify(ctx context.Context, v *invocation) error {
	tool, err := v.open(ctx)
	if err != nil {
		return err
	}
	defer tool.Close()
	rep, err := tool.Verify(ctx)
	if err != nil {
		return err
	}
	if err := v.print(rep, func(w io.Writer) { _ = rep.Text(w) }); err != nil {
		return err
	}
	if !rep.OK() {
		return errFound
	}
	return nil
}

func runReset(ctx context.Context, v *invocation) error {
	var o operator.ResetOptions
	switch {
	case v.earliest == (v.datetime != ""):
		return usageError{"give one of -to-earliest and -to-datetime"}
	case v.earliest:
		o.ToEarliest = true
	default:
		t, err := time.Parse(time.RFC3339, v.datetime)
		if err != nil {
			return usageError{fmt.Sprintf("-to-datetime %q: %v (RFC 3339, as 2026-12-01T00:00:00Z)", v.datetime, err)}
		}
		o.ToDatetime, o.DropState = t, v.dropState
	}
	tool, err := v.open(ctx)
	if err != nil {
		return err
	}
	defer tool.Close()
	plan, err := tool.PlanReset(ctx, o)
	if err != nil {
		return err
	}
	if !v.dryRun {
		err = tool.ApplyReset(ctx, plan)
	}
	if perr := v.print(plan, plan.WriteText); perr != nil && err == nil {
		err = perr
	}
	return err
}

func runSkip(ctx context.Context, v *invocation) error {
	if v.partition < 0 {
		return usageError{"skip needs -partition"}
	}
	tool, err := v.open(ctx)
	if err != nil {
		return err
	}
	defer tool.Close()
	plan, err := tool.PlanSkip(ctx, operator.SkipOptions{Partition: int32(v.partition), Offset: v.offset})
	if err != nil {
		return err
	}
	if !v.dryRun {
		err = tool.ApplySkip(ctx, plan)
	}
	if perr := v.print(plan, plan.WriteText); perr != nil && err == nil {
		err = perr
	}
	return err
}
