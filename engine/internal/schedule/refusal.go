package schedule

import (
	"fmt"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/store"
)

// A broker refuses some outputs for good (too large for their topic,
// invalid for it), and a replay would make them again: the failure is the
// input's that made them, and the poison policy decides (Scheduler.Failed
// with a *Refusal). The runtime finds the inputs, from where each run of
// its buffered outputs came from; the scheduler decides with them.

// Source is what made a run of outputs: an input record (Offset ≥ 0), or
// a key's tick or timer (Offset -1); Letter: a dead letter, whose
// refusal the policy cannot skip (a dead letter is the policy's own
// output).
type Source struct {
	Offset int64
	Key    []byte
	Timer  *store.Timer
	Letter bool
}

// Refusal is a refusal of outputs, as the scheduler sees it: the sources
// of the refused outputs, by partition, and the error.
type Refusal struct {
	Err error
	// By are the refused sources of each partition, each once, in
	// buffer order; Letter: a dead letter was refused.
	By     map[store.TopicPartition][]Source
	Letter bool
}

func (r *Refusal) Error() string { return r.Err.Error() }
func (r *Refusal) Unwrap() error { return r.Err }

// coreRefusals are srcs as core.Config.Refused, each failing with err.
func coreRefusals(srcs []Source, err error) []core.Refusal {
	rs := make([]core.Refusal, len(srcs))
	for i, s := range srcs {
		rs[i] = core.Refusal{Offset: s.Offset, Key: s.Key, Timer: s.Timer, Err: err}
	}
	return rs
}

// refusedLetterError is why a run ends when a dead letter is refused: the
// policy has no way past it.
func refusedLetterError(tp store.TopicPartition, err error) error {
	return fmt.Errorf("engine: %s: the broker refused a dead letter for good (Config.DeadLetterTopic): %w", tp, err)
}
