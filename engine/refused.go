package engine

import (
	"errors"
	"slices"
	"sort"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/engine/internal/schedule"
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
// each run of them came from (origins), and a failure hands the scheduler
// a *schedule.Refusal; the scheduler has the *FoldError made
// (refusedFoldError), the engine's type.

func recordSource(rec *input.Record) schedule.Source {
	return schedule.Source{Offset: rec.Offset, Key: rec.Key}
}

// firedSource is the source of a key's tick (timer nil) or timer outputs.
func firedSource(key []byte, timer *store.Timer) schedule.Source {
	return schedule.Source{Offset: -1, Key: key, Timer: timer}
}

var letterSource = schedule.Source{Offset: -1, Letter: true}

// origin says that a buffer's outputs before end, from the previous
// origin's end on, came from src of partition tp.
type origin struct {
	end int
	tp  store.TopicPartition
	src schedule.Source
}

// origins are a buffer's origins, in order of their ends.
type origins []origin

// add records that the buffer's outputs up to end came from src of tp
// (none if the buffer did not grow).
func (os origins) add(end int, tp store.TopicPartition, src schedule.Source) origins {
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

// refusalOf is the refusal of the outputs of a buffer at indexes, or nil
// if one of them has no origin (an Emit that reports indexes it was not
// given).
func refusalOf(err error, os origins, indexes []int) *schedule.Refusal {
	if len(indexes) == 0 {
		return nil
	}
	r := &schedule.Refusal{Err: err, By: map[store.TopicPartition][]schedule.Source{}}
	for _, i := range indexes {
		o, ok := os.of(i)
		if !ok {
			return nil
		}
		if o.src.Letter {
			r.Letter = true
			continue
		}
		if !slices.ContainsFunc(r.By[o.tp], func(s schedule.Source) bool { return sameSource(s, o.src) }) {
			r.By[o.tp] = append(r.By[o.tp], o.src)
		}
	}
	return r
}

func sameSource(a, b schedule.Source) bool {
	if a.Offset >= 0 || b.Offset >= 0 {
		return a.Offset == b.Offset
	}
	return string(a.Key) == string(b.Key) && (a.Timer == nil) == (b.Timer == nil) && (a.Timer == nil || *a.Timer == *b.Timer)
}

// refusedFoldError is the *FoldError that names src of tp, refused with
// err (schedule.Config.FoldError).
func refusedFoldError(tp store.TopicPartition, src schedule.Source, err error) error {
	return foldError(&core.FoldError{Input: tp, Offset: src.Offset, Key: src.Key, Timer: src.Timer, Err: err})
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
