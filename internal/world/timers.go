package world

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/store"
)

// Timers (Config.Timers): a Produce step with a D above 0 sets a
// processing-time timer for its key, D after the event's append time
// (its timestamp), as well as adding its delta; a timer's firing adds
// history.TimerMark to the key's state, so a state is the sum of its
// events plus TimerMark per firing (history.SplitState). The checks of
// the fold judge the sum; invariant 10 judges the firings.

// TimerValue is the input value of delta with a timer d later: "5@30000".
func TimerValue(delta int, d time.Duration) string {
	return Value(delta) + "@" + strconv.FormatInt(d.Milliseconds(), 10)
}

// TimerAt is when the timer of the event at offset with timestamp ts and
// delay d is due: d after the event, plus a millisecond per offset, so
// that each event sets a timer of its own (one set again after it fired
// would be a new timer, and the checker could not tell from the ledger
// whether it was).
func TimerAt(ts time.Time, d time.Duration, offset int64) time.Time {
	return ts.Add(d + time.Duration(offset)*time.Millisecond)
}

// parseValue is an input value's delta and timer delay (0: none).
func parseValue(v string) (delta int, close bool, d time.Duration, err error) {
	amount, after, timed := strings.Cut(v, "@")
	if amount == "close" {
		return 0, true, 0, nil
	}
	if delta, err = strconv.Atoi(amount); err != nil {
		return 0, false, 0, fmt.Errorf("bad amount %q", v)
	}
	if timed {
		ms, err := strconv.ParseInt(after, 10, 64)
		if err != nil || ms <= 0 {
			return 0, false, 0, fmt.Errorf("bad timer in %q", v)
		}
		d = time.Duration(ms) * time.Millisecond
	}
	return delta, false, d, nil
}

// OnTimer is the worlds' timer handler: a firing adds TimerMark to the
// key's state, and emits nothing (each output names an input event).
func OnTimer(key []byte, state int, t engine.Timer) (engine.Result[int], error) {
	return engine.Set(state + history.TimerMark), nil
}

// CheckTimers is invariant 10: at quiescence, with time past every timer
// and every firing flushed, each key's committed snapshot holds each timer
// its events set since the key was last closed fired exactly once (a
// close drops the timers and the firings before it).
func (l Ledger) CheckTimers(snaps map[string]Visible) []Violation {
	want := map[string]map[time.Time]bool{}
	for _, e := range l {
		switch {
		case e.Delta == 0:
			delete(want, e.Key)
		case !e.TimerAt.IsZero():
			if want[e.Key] == nil {
				want[e.Key] = map[time.Time]bool{}
			}
			want[e.Key][e.TimerAt] = true
		}
	}
	var vs []Violation
	for _, key := range SortedKeys(snaps) {
		v := snaps[key]
		if v.Tombstone {
			continue
		}
		n, err := strconv.Atoi(v.Value)
		if err != nil {
			continue // invariant 3's
		}
		if _, fired := history.SplitState(n); fired != len(want[key]) {
			vs = append(vs, Violate(10, 0, "key %s's committed state %s holds %d timer firings; its events since it was last closed set %d timers, each due",
				key, v.Value, fired, len(want[key])))
		}
	}
	return vs
}

// LastTimer is when the last timer the ledger's events set is due (zero:
// none).
func (l Ledger) LastTimer() time.Time {
	var last time.Time
	for _, e := range l {
		if e.TimerAt.After(last) {
			last = e.TimerAt
		}
	}
	return last
}

// settleTimers moves time past the last timer and has every running
// member poll and flush, until a round writes nothing to the snapshot
// topic: every due timer has fired and its firing is committed (a firing
// holds no input offset back, so caughtUp does not wait for it). It
// reports whether it got there: false while a partition has no running
// flow or the group has not settled, for Quiesce to step on.
func (w *World) settleTimers() bool {
	if d := w.ledger.LastTimer().Sub(w.c.Now()); d >= 0 {
		w.advance(d + time.Second)
	}
	for range 10 {
		before := w.snapshotEnds()
		for _, m := range w.members {
			if m.state == running && m.busy == nil {
				w.step(m)
				w.settle()
			}
		}
		for _, m := range w.members {
			if m.state == running && m.busy == nil {
				w.flush(m, m.r.FlushAll)
				w.settle()
			}
		}
		w.recordState()
		if !w.everyPartitionRuns() {
			return false // a rebalance is under way: Quiesce steps on
		}
		if slices.Equal(before, w.snapshotEnds()) && w.caughtUp() {
			return true
		}
	}
	return false
}

// everyPartitionRuns reports whether every input partition has a running
// flow on a running member: only a flow fires its timers.
func (w *World) everyPartitionRuns() bool {
	for p := range w.cfg.Partitions {
		tp := store.TopicPartition{Topic: InputTopic, Partition: int32(p)}
		if !slices.ContainsFunc(w.members, func(m *member) bool {
			return m.state == running && m.busy == nil && slices.Contains(m.r.Flows(), tp)
		}) {
			return false
		}
	}
	return true
}

func (w *World) snapshotEnds() []int64 {
	ends := make([]int64, w.cfg.Partitions)
	for p := range ends {
		_, _, ends[p], _ = w.c.Offsets(store.TopicPartition{Topic: snapshotTopic, Partition: int32(p)})
	}
	return ends
}

// timerWarmOK is invariant 9 for a world with timers: an engine's state
// of a key may be ahead of its committed snapshot by firings not yet
// written (a firing holds no input offset back), never by events.
func timerWarmOK(committed string, got int) bool {
	want, err := strconv.Atoi(committed)
	if err != nil {
		return false
	}
	wantSum, wantFired := history.SplitState(want)
	gotSum, gotFired := history.SplitState(got)
	return wantSum == gotSum && gotFired >= wantFired
}

// removalsLost is the TimerRemovalsLost variant: every snapshot of a key
// is written with every timer any snapshot of the key carried since its
// last tombstone, so a fired timer's removal never reaches the store.
type removalsLost struct {
	mu   sync.Mutex
	seen map[string][]store.Timer
}

func (r *removalsLost) rewrite(snaps []store.Snapshot) []store.Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(snaps)
	for i, s := range out {
		k := string(s.Key)
		if s.Tombstone {
			delete(r.seen, k)
			continue
		}
		ts := slices.Clone(s.Timers)
		for _, t := range r.seen[k] {
			if !slices.Contains(ts, t) {
				ts = append(ts, t)
			}
		}
		slices.SortFunc(ts, func(a, b store.Timer) int {
			if a.At != b.At {
				return int(a.At - b.At)
			}
			return int(a.Kind) - int(b.Kind)
		})
		r.seen[k] = ts
		out[i].Timers = ts
	}
	return out
}

// The write paths of checkedPartition, for TimerRemovalsLost.

func (p *checkedPartition) rewrite(snaps []store.Snapshot) []store.Snapshot {
	if p.w.lost == nil {
		return snaps
	}
	return p.w.lost.rewrite(snaps)
}

func (p *checkedPartition) StartWriteBatch(ctx context.Context, snaps []store.Snapshot) store.Pending {
	return p.Partition.StartWriteBatch(ctx, p.rewrite(snaps))
}

// ScenarioTimerCrash: a timer fires on m0, whose firing is not written when it
// crashes; m1 takes the partition over, recovers the timer and fires it
// again, once. Then a timer whose firing m1 flushed, and a leave: it
// never fires again.
var ScenarioTimerCrash = []Step{
	{Kind: Join, Member: 0},
	{Kind: Produce, Key: "a", Delta: 1, D: 2 * time.Second},
	{Kind: Poll, Member: 0},
	{Kind: Flush, Member: 0}, // the timer is committed
	{Kind: Advance, D: 3 * time.Second},
	{Kind: Poll, Member: 0}, // it fires; the firing is not written
	{Kind: Crash, Member: 0},
	{Kind: Join, Member: 1},
	{Kind: Advance, D: 11 * time.Second}, // m0's session expires
	{Kind: Poll, Member: 1},              // m1 recovers the timer and fires it
	{Kind: Poll, Member: 1},
	{Kind: Produce, Key: "a", Delta: 2, D: 2 * time.Second},
	{Kind: Poll, Member: 1},
	{Kind: Advance, D: 3 * time.Second},
	{Kind: Poll, Member: 1},
	{Kind: Flush, Member: 1}, // the second firing is committed
	{Kind: Leave, Member: 1},
	{Kind: Join, Member: 2},
	{Kind: Advance, D: 11 * time.Second},
	{Kind: Poll, Member: 2},
}

// FinalFirings are the timer firings in each key's state as the final read
// returned it.
func FinalFirings(ops []history.Op) map[string]int {
	final := map[int]bool{}
	out := map[string]int{}
	for _, op := range ops {
		switch {
		case op.Kind == history.ReadStart && op.Detail == history.FinalRead:
			final[op.Read] = true
		case op.Kind == history.Read && final[op.Read] && !op.Tombstone:
			v, _ := strconv.Atoi(op.Value)
			_, out[op.Key] = history.SplitState(v)
		}
	}
	return out
}
