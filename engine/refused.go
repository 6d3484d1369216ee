package engine

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/internal/input"
	"github.com/snapfence/snapfence/store"
)

// A broker refuses some outputs for good: too large for their topic,
// invalid for it. A replay makes the same outputs and meets the same
// refusal, so the failure is the input's that made them, and the poison
// policy decides: StopOnPoison ends the run with a *FoldError naming the
// input record (or the key's tick or timer); SkipPoison and
// DeadLetterPoison restart the partition from its committed state with
// the input marked (core.Config.Refused), and when it comes again it
// fails without being folded, as a poison record does, and is skipped or
// dead-lettered. Nothing else is lost: the other inputs' outputs were
// never delivered (exactly once: the batch was aborted) or are delivered
// again (at least once).
//
// To name the input, each mode keeps, beside its buffered outputs, where
// each run of them came from (origins).

// source is what made a run of outputs: an input record (offset ≥ 0), or
// a key's tick or timer (offset -1); letter: a dead letter, whose
// refusal the policy cannot skip (a dead letter is the policy's own
// output).
type source struct {
	offset int64
	key    []byte
	timer  *store.Timer
	letter bool
}

func recordSource(rec *input.Record) source { return source{offset: rec.Offset, key: rec.Key} }

// firedSource is the source of a key's tick (timer nil) or timer outputs.
func firedSource(key []byte, timer *store.Timer) source {
	return source{offset: -1, key: key, timer: timer}
}

var letterSource = source{offset: -1, letter: true}

// origin says that a buffer's outputs before end, from the previous
// origin's end on, came from src of partition tp.
type origin struct {
	end int
	tp  store.TopicPartition
	src source
}

// origins are a buffer's origins, in order of their ends.
type origins []origin

// add records that the buffer's outputs up to end came from src of tp
// (none if the buffer did not grow).
func (os origins) add(end int, tp store.TopicPartition, src source) origins {
	if n := len(os); n > 0 && os[n-1].end == end {
		return os
	}
	return append(os, origin{end: end, tp: tp, src: src})
}

// of is the origin of the buffer's output i.
func (os origins) of(i int) (origin, bool) {
	j := sort.Search(len(os), func(j int) bool { return os[j].end > i })
	if j == len(os) {
		return origin{}, false
	}
	return os[j], true
}

// refusal is a refusal of outputs, as the scheduler sees it: the sources
// of the refused outputs, by partition, and the error.
type refusal struct {
	err error
	// by are the refused sources of each partition, each once, in
	// buffer order; letter: a dead letter was refused.
	by     map[store.TopicPartition][]source
	letter bool
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// refusalOf is the refusal of the outputs of a buffer at indexes, or nil
// if one of them has no origin (an Emit that reports indexes it was not
// given).
func refusalOf(err error, os origins, indexes []int) *refusal {
	if len(indexes) == 0 {
		return nil
	}
	r := &refusal{err: err, by: map[store.TopicPartition][]source{}}
	for _, i := range indexes {
		o, ok := os.of(i)
		if !ok {
			return nil
		}
		if o.src.letter {
			r.letter = true
			continue
		}
		if !slices.ContainsFunc(r.by[o.tp], func(s source) bool { return sameSource(s, o.src) }) {
			r.by[o.tp] = append(r.by[o.tp], o.src)
		}
	}
	return r
}

func sameSource(a, b source) bool {
	if a.offset >= 0 || b.offset >= 0 {
		return a.offset == b.offset
	}
	return string(a.key) == string(b.key) && (a.timer == nil) == (b.timer == nil) && (a.timer == nil || *a.timer == *b.timer)
}

// foldError is the *FoldError that names src of tp, refused with err.
func foldError(tp store.TopicPartition, src source, err error) *FoldError {
	return &FoldError{Input: tp, Offset: src.offset, Key: src.key, Timer: src.timer, Err: err}
}

// coreRefusals are srcs as core.Config.Refused, each failing with err.
func coreRefusals(srcs []source, err error) []core.Refusal {
	rs := make([]core.Refusal, len(srcs))
	for i, s := range srcs {
		rs[i] = core.Refusal{Offset: s.offset, Key: s.key, Timer: s.timer, Err: err}
	}
	return rs
}

// refusedByStore turns a batch's *store.OutputRefusedError into its
// refusal, given the batch's origins; any other error is returned as it
// is.
func refusedByStore(err error, os origins) error {
	re, ok := errors.AsType[*store.OutputRefusedError](err)
	if !ok {
		return err
	}
	if r := refusalOf(re, os, re.Outputs); r != nil {
		return r
	}
	return err
}

// refusedByEmit turns a failed emit's *EmitError that lists refused
// outputs into its refusal, given the emit's origins; any other error is
// returned as it is.
func refusedByEmit(err error, os origins) error {
	ee, ok := errors.AsType[*EmitError](err)
	if !ok || len(ee.Refused) == 0 {
		return err
	}
	if r := refusalOf(ee, os, ee.Refused); r != nil {
		return r
	}
	return err
}

// refusedLetterError is why a run ends when a dead letter is refused: the
// policy has no way past it.
func refusedLetterError(tp store.TopicPartition, err error) error {
	return fmt.Errorf("engine: %s: the broker refused a dead letter for good (Config.DeadLetterTopic): %w", tp, err)
}
