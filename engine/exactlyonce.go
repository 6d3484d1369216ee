package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/snapfence/snapfence/engine/internal/schedule"
	"github.com/snapfence/snapfence/store"
)

// exactlyOnce is Config.ExactlyOnce: a partition's outputs wait in its open
// batch, and the batch goes to the store as one transaction with the
// snapshots of every key it changed and the fenced commit of the offset
// after it. A batch is sealed every CommitInterval, when it reaches
// MaxTransactionRecords or MaxTransactionBytes, and on revoke; there is no
// persist timer. A batch that fails, for any reason, rewinds its flow
// (schedule.CauseBatch): its outputs are never sent again from memory.
type exactlyOnce[S any] struct {
	r *Member[S]
	// outputs are Config.OutputTopics and the dead-letter topic, once
	// each.
	outputs []string
}

// outputTopics: the batches' transactions write the outputs.
func (m *exactlyOnce[S]) outputTopics() []string { return m.outputs }

func (m *exactlyOnce[S]) persistInterval() time.Duration { return 0 }

// folded adds a fold's outputs to f's open batch and asks for its commit
// once the batch reaches a cap (one fold's outputs are never split).
func (m *exactlyOnce[S]) folded(f *flow[S], outs []Output, src schedule.Source) bool {
	m.ticked(f, outs, src)
	cfg := &m.r.e.cfg
	return len(f.batch.outputs)+f.core.DirtyKeys() >= cfg.MaxTransactionRecords || f.batch.bytes >= cfg.MaxTransactionBytes
}

// ticked adds a tick's outputs to f's open batch.
func (m *exactlyOnce[S]) ticked(f *flow[S], outs []Output, src schedule.Source) {
	if len(outs) == 0 {
		return
	}
	for _, o := range outs {
		f.batch.bytes += len(o.Key) + len(o.Value)
	}
	f.batch.outputs = appendStoreOutputs(f.batch.outputs, outs)
	f.batch.origins = f.batch.origins.add(len(f.batch.outputs), f.tp, src)
}

// lettered adds a dead letter to f's open batch; it is reported once the
// batch's transaction commits.
func (m *exactlyOnce[S]) lettered(f *flow[S], letter Output, report func()) {
	m.ticked(f, []Output{letter}, letterSource)
	f.batch.letters = append(f.batch.letters, report)
}

// emit: the outputs leave with their batch's transaction only.
func (m *exactlyOnce[S]) emit(context.Context) error { return nil }

func (m *exactlyOnce[S]) await() error { return nil }

// persist: snapshots are written with their batch only, so it commits the
// open batch.
func (m *exactlyOnce[S]) persist(ctx context.Context, f *flow[S]) error { return m.commit(ctx, f) }

// commit writes f's open batch as one transaction: the snapshot of every
// dirty key, the outputs folded since the last batch and the commit of the
// offset after the last record folded. Every dirty key is in the batch, so
// that offset covers the whole batch.
//
// The batch is started, not awaited: the flow folds the next batch while
// it commits. The batch before it must have ended first (drain): the next
// one is folded on its outcome, and its snapshots and offset cover only
// what a committed predecessor leaves (a failed one rewinds the flow).
//
// On error the batch's outcome is unknown to the engine (an EndTxn may
// time out after the commit landed): the flow must be rewound, its outputs
// never sent again; they leave memory with the flow.
func (m *exactlyOnce[S]) commit(ctx context.Context, f *flow[S]) error {
	if err := f.core.Stopped(); err != nil {
		return fromCore(err)
	}
	if err := m.r.drain(ctx, f); err != nil {
		return err
	}
	offset := f.core.Consumed()
	if !f.core.Dirty() && len(f.batch.outputs) == 0 && offset <= f.part.CommittedOffset() {
		return nil // nothing to commit
	}
	begin := time.Now() // metrics only
	snaps, err := f.core.Flush(0)
	if err != nil {
		return fromCore(err)
	}
	outs, letters, origins := f.batch.outputs, f.batch.letters, f.batch.origins
	p := f.part.StartCommitBatch(ctx, store.Batch{Snapshots: snaps, Outputs: outs, Offset: offset})
	// The store keeps outs; the next batch's outputs and origins are
	// sized from them, as batches of one interval are alike (growing from
	// nil copies each output about twice).
	f.batch = openBatch{}
	if len(outs) > 0 {
		f.batch.outputs = make([]store.Output, 0, len(outs))
		f.batch.origins = make([]origin, 0, len(origins))
	}
	return m.r.begin(ctx, f, started{kind: startedBatch, snaps: snaps, offset: offset, pending: p, begin: begin, letters: letters, origins: origins})
}

// failure: a failed batch rewinds its flow. ErrNotTransactional means a
// store whose Mode does not match its partitions: it says so, and it fails
// again on replay (a permanent misconfiguration), so the runner ends.
func (m *exactlyOnce[S]) failure(f *flow[S], err error) (schedule.Cause, error) {
	if errors.Is(err, store.ErrNotTransactional) {
		err = fmt.Errorf("engine: %s: ExactlyOnce needs a Transactional store: %w", f.tp, err)
	}
	if ue, ok := errors.AsType[*store.UndeclaredOutputError](err); ok {
		return schedule.CauseBatch, &store.ConfigError{Subject: fmt.Sprintf("output topic %q", ue.Topic),
			Problem: fmt.Sprintf("an output of %s (key %q) goes to it, and engine.Config.OutputTopics (%q) does not list it", f.tp, ue.Key, m.outputs),
			Fix: "add it to Config.OutputTopics: under ExactlyOnce the engine must know every topic a transaction may write, " +
				"to find what a failure left open there",
			Err: err}
	}
	if m.r.sched.Classify(schedule.CauseBatch, err) != schedule.ClassTransient && !errors.Is(err, store.ErrFenced) {
		return schedule.CauseBatch, fmt.Errorf("engine: exactly-once batch of %s failed: %w", f.tp, err)
	}
	return schedule.CauseBatch, fmt.Errorf("engine: exactly-once batch of %s failed; rewinding to the committed state: %w", f.tp, err)
}

// openBatch is the outputs of a flow's open exactly-once batch, in fold
// order, and their keys' and values' size. They leave memory only inside
// the batch's transaction, or with the flow.
type openBatch struct {
	outputs []store.Output
	bytes   int
	// letters report the batch's dead letters once it committed.
	letters []func()
	// origins are where the outputs came from.
	origins origins
}
