package engine

import (
	"context"
	"slices"
	"time"

	"github.com/snapfence/snapfence/engine/internal/schedule"
)

// outputMode is how a partition's outputs, snapshots and offset commits
// reach the store: atLeastOnce or exactlyOnce (Config.ExactlyOnce). It is
// the only place that knows the mode: the scheduler and the runtime call
// it and never branch on the mode themselves.
type outputMode[S any] interface {
	// persistInterval is the persist timer's period; 0: no persist timer.
	persistInterval() time.Duration
	// folded takes a fold's outputs, made by src; commitNow asks for the
	// partition's commit before its next record (a full exactly-once
	// batch).
	folded(f *flow[S], outs []Output, src schedule.Source) (commitNow bool)
	// ticked takes the outputs of a key's tick or timer, src.
	ticked(f *flow[S], outs []Output, src schedule.Source)
	// lettered takes a dead letter of f, and report, which counts and
	// logs it once it is written: with the emit that delivers it, or the
	// batch whose transaction commits it. A dead letter lost with a
	// failed emit or batch is made again by the replay, and reported
	// then.
	lettered(f *flow[S], letter Output, report func())
	// emit hands over the outputs taken since the last emit, if the mode
	// emits them outside the store; a failure is an *emitFailure.
	emit(ctx context.Context) error
	// await waits for the outputs emit left in flight, if any; a failure
	// is an *emitFailure.
	await() error
	// persist writes f's dirty keys without advancing the committed
	// offset.
	persist(ctx context.Context, f *flow[S]) error
	// commit makes what f folded durable and commits its offset.
	commit(ctx context.Context, f *flow[S]) error
	// failure is how a failed persist or commit of f is reported to the
	// scheduler: its cause, and the error as the user sees it.
	failure(f *flow[S], err error) (schedule.Cause, error)
	// outputTopics are the topics a partition's store transactions may
	// write outputs to (store.Acquisition.Outputs).
	outputTopics() []string
}

// newOutputMode is the mode r's configuration asks for.
func newOutputMode[S any](r *Member[S]) outputMode[S] {
	if cfg := &r.e.cfg; cfg.ExactlyOnce {
		outs := slices.Clone(cfg.OutputTopics)
		if cfg.DeadLetterTopic != "" {
			outs = append(outs, cfg.DeadLetterTopic)
		}
		slices.Sort(outs)
		return &exactlyOnce[S]{r: r, outputs: slices.Compact(outs)}
	}
	return &atLeastOnce[S]{r: r}
}
