// Package props generates random scenarios of the simulated cluster
// (internal/world) for property tests: interleavings of input events,
// polls, flushes, time, joins, leaves, pauses, evictions, crashes, foreign
// transactions and compaction, run against the real engine and store and
// checked against the fencing invariants after every step.
package props

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
)

// weights is how often each step kind is drawn: mostly input, polls and
// time, with the faults rarer.
var weights = []struct {
	kind world.Kind
	n    int
}{
	{world.Produce, 8},
	{world.Advance, 5},
	{world.Flush, 2},
	{world.Persist, 1},
	{world.SlowFetches, 1},
	{world.Join, 3},
	{world.Leave, 1},
	{world.Pause, 2},
	{world.Resume, 2},
	{world.Evict, 1},
	{world.Crash, 1},
	{world.ForeignOpen, 1},
	{world.ForeignEnd, 1},
	{world.Compact, 1},
	{world.Truncate, 1},
	// Last: rapid's SampledFrom favours the ends of the list.
	{world.Poll, 10},
}

// warmWeights are the weights for worlds with world.Config.WarmRestarts:
// weights with more restarts (crashes, leaves, joins) and the recreation
// of the snapshot topic.
var warmWeights = func() []struct {
	kind world.Kind
	n    int
} {
	out := slices.Clone(weights)
	for i, w := range out {
		switch w.kind {
		case world.Join:
			out[i].n = 4
		case world.Leave, world.Crash:
			out[i].n = 2
		}
	}
	return slices.Insert(out, len(out)-1, struct {
		kind world.Kind
		n    int
	}{world.Recreate, 1})
}()

// withSteps is weights with extra's steps added before the last (Poll).
func withSteps(weights []struct {
	kind world.Kind
	n    int
}, extra ...struct {
	kind world.Kind
	n    int
}) []struct {
	kind world.Kind
	n    int
} {
	out := slices.Clone(weights)
	return slices.Insert(out, len(out)-1, extra...)
}

type weight = struct {
	kind world.Kind
	n    int
}

// standbyWeights are the weights for worlds with world.Config.Standby:
// warmWeights (restarts, and the recreation of the snapshot topic: a
// replica's checkpoint refused) with the replicas' reads, and
// standbyWarmWeights also the loss of a member's disk, under
// WarmRestarts.
var (
	standbyWeights     = withSteps(warmWeights, weight{world.Replicate, 3})
	standbyWarmWeights = withSteps(warmWeights, weight{world.Replicate, 3}, weight{world.Wipe, 1})
)

// tableWeights are the weights for worlds with world.Config.Tables:
// weights with the table's writes (plain, and in a transaction) and its
// views' reads.
var tableWeights = withSteps(weights, weight{world.TablePut, 4}, weight{world.TableOpen, 1}, weight{world.TableEnd, 1}, weight{world.ReadTable, 3})

func kindsOf(weights []struct {
	kind world.Kind
	n    int
}) []world.Kind {
	var out []world.Kind
	for _, w := range weights {
		for range w.n {
			out = append(out, w.kind)
		}
	}
	return out
}

var kinds, warmKinds = kindsOf(weights), kindsOf(warmWeights)

var standbyKinds, standbyWarmKinds, tableKinds = kindsOf(standbyWeights), kindsOf(standbyWarmWeights), kindsOf(tableWeights)

// Keys are the input's keys: few, so that keys collide across members.
var Keys = []string{"a", "b", "c", "d", "e"}

var durations = []time.Duration{time.Second, 3 * time.Second, 6 * time.Second, 11 * time.Second, 31 * time.Second, 61 * time.Second}

// warmDurations are durations with longer ones, past the usable age of a
// checkpoint (world.Config.DeleteRetention less the store's margin).
var warmDurations = append(slices.Clone(durations), 2*time.Minute, 4*time.Minute)

// timerDelays are the delays of the timers a Produce sets under
// world.Config.Timers (0: none): below and above the persist and commit
// intervals and the session timeout.
var timerDelays = []time.Duration{0, 0, 2 * time.Second, 7 * time.Second, 31 * time.Second}

// StepGen draws one step for a world of cfg (defaults filled in).
func StepGen(cfg world.Config) *rapid.Generator[world.Step] {
	ks, ds := kinds, durations
	switch {
	case cfg.Standby && cfg.WarmRestarts:
		ks, ds = standbyWarmKinds, warmDurations
	case cfg.Standby:
		ks, ds = standbyKinds, warmDurations
	case cfg.WarmRestarts:
		ks, ds = warmKinds, warmDurations
	}
	if cfg.Tables && !cfg.Standby && !cfg.WarmRestarts {
		ks = tableKinds
	}
	return rapid.Custom(func(t *rapid.T) world.Step {
		s := world.Step{Kind: rapid.SampledFrom(ks).Draw(t, "kind")}
		switch s.Kind {
		case world.Produce:
			s.Key = rapid.SampledFrom(Keys).Draw(t, "key")
			s.Delta = rapid.IntRange(-3, 12).Draw(t, "delta") // 0 closes the account
			// A timer for the key, or none (first: rapid shrinks to none).
			if cfg.Timers && s.Delta != 0 {
				s.D = rapid.SampledFrom(timerDelays).Draw(t, "timer")
			}
		case world.SlowFetches:
			s.D = rapid.SampledFrom([]time.Duration{0, 2 * time.Second, 6 * time.Second}).Draw(t, "d")
		case world.Poll, world.PollFirst, world.Flush, world.Persist, world.Join, world.Leave, world.Pause, world.Resume, world.Evict, world.Crash,
			world.Replicate, world.Wipe, world.ReadTable:
			s.Member = rapid.IntRange(0, cfg.Members-1).Draw(t, "member")
		case world.TablePut, world.TableOpen:
			s.Key = rapid.SampledFrom(Keys).Draw(t, "key")
			s.Delta = rapid.IntRange(0, 3).Draw(t, "row") // 0 deletes
		case world.Advance:
			s.D = rapid.SampledFrom(ds).Draw(t, "d")
		case world.ForeignOpen:
			s.Partition = rapid.IntRange(0, cfg.Partitions-1).Draw(t, "partition")
			s.Hang = rapid.Bool().Draw(t, "hang")
		case world.ForeignEnd:
			s.Commit = rapid.Bool().Draw(t, "commit")
		case world.Compact, world.Truncate:
			s.Partition = rapid.IntRange(0, cfg.Partitions-1).Draw(t, "partition")
		}
		return s
	})
}

// macroOdds: ChunkGen draws one of its macros one chunk in macroOdds, a
// single step otherwise.
const macroOdds = 3

// ChunkGen draws the next piece of a scenario for a world of cfg:
// usually one step (StepGen), and one time in macroOdds an interleaving
// the fence exists for and that independent steps almost never line up.
// The overlap and the crash start with a member that joins and owns
// partitions (every member polls, so that the round its join started
// completes) and folds an event on every partition (so that it holds one
// whichever it owns):
//
//   - a stale-owner overlap (four macros in six): the member is paused
//     with its fold not yet flushed; its session expires while another
//     member takes over and folds newer events of the same key, and
//     answers a lookup of it before its flush; the paused member wakes,
//     flushes, persists, polls first (its news last) or, less often,
//     polls what it held, and answers a lookup;
//   - a crash with writes in flight: the member flushes and crashes
//     before anything else happens, with whatever of its flush is still
//     on its way (with world.Config.WriteLatency); a view of the snapshot
//     topic reads past its open transaction;
//   - a handover: a member takes over (its recovery slow, or not; the
//     key's snapshot partition pinned by another producer's open
//     transaction, or not) with an event to fold, another joins, and the
//     first polls into the rebalance, whose revoke flushes what it held.
//
// Which members, keys and final actions are drawn, so a macro can also
// be harmless (a member that owned nothing, a write that had landed).
// Most scenarios of 30 steps have a fenced call
// (TestMostScenariosReachTheFence).
func ChunkGen(cfg world.Config) *rapid.Generator[[]world.Step] {
	step := StepGen(cfg)
	return rapid.Custom(func(t *rapid.T) []world.Step {
		if rapid.IntRange(0, macroOdds-1).Draw(t, "chunk") != 0 {
			return []world.Step{step.Draw(t, "step")}
		}
		m := rapid.IntRange(0, cfg.Members-1).Draw(t, "member")
		key := rapid.SampledFrom(Keys).Draw(t, "key")
		held := world.Step{Kind: world.Produce, Key: key, Delta: rapid.IntRange(1, 12).Draw(t, "held")}
		next := (m + 1 + rapid.IntRange(0, cfg.Members-2).Draw(t, "next")) % cfg.Members
		switch rapid.IntRange(0, 5).Draw(t, "macro") {
		case 0:
			return slices.Concat(joinSettled(cfg, m), heldEverywhere(cfg, held), []world.Step{
				{Kind: world.Poll, Member: m},
				{Kind: world.Poll, Member: m},
				{Kind: world.Flush, Member: m},
				{Kind: world.Crash, Member: m},
				// Another service's view reads past the open transaction.
				{Kind: world.ReadView},
			})
		case 1:
			handover := []world.Step{{Kind: world.Join, Member: m}}
			if rapid.Bool().Draw(t, "foreign") {
				// Another producer's transaction open on the key's
				// snapshot partition pins its last stable offset
				// below the flush the recovery must read.
				handover = append(handover, world.Step{Kind: world.ForeignOpen, Partition: int(world.PartitionOf(key, cfg.Partitions)), Hang: rapid.Bool().Draw(t, "hang")})
			}
			return append(handover, []world.Step{
				held,
				{Kind: world.SlowFetches, D: rapid.SampledFrom([]time.Duration{0, 6 * time.Second}).Draw(t, "fetches")},
				{Kind: world.Join, Member: next},
				{Kind: world.Poll, Member: m},
				{Kind: world.Poll, Member: next},
			}...)
		}
		// PollFirst: a zombie's poll that hears its news last, as a
		// woken member's fetch may beat its heartbeat on a broker.
		wake := rapid.SampledFrom([]world.Kind{world.Flush, world.Persist, world.PollFirst, world.Flush, world.Persist, world.PollFirst, world.Poll}).Draw(t, "wake")
		return slices.Concat(joinSettled(cfg, m), heldEverywhere(cfg, held), []world.Step{
			{Kind: world.Poll, Member: m},
			{Kind: world.Pause, Member: m},
			{Kind: world.Join, Member: next},
			{Kind: world.Advance, D: cfg.SessionTimeout + time.Second},
			{Kind: world.Poll, Member: next},
			{Kind: world.Produce, Key: key, Delta: rapid.IntRange(1, 12).Draw(t, "newer")},
			{Kind: world.Poll, Member: next},
			// A lookup between the fold and its flush, and the woken
			// zombie's, perhaps of a state it lost.
			{Kind: world.Query, Member: next, Key: key},
			{Kind: world.Flush, Member: next},
			{Kind: world.Resume, Member: m},
			{Kind: wake, Member: m},
			{Kind: world.Query, Member: m, Key: key},
		})
	})
}

// joinSettled is m's join, then a poll of every member and m's again, so
// that the round its join started completes and m owns partitions.
func joinSettled(cfg world.Config, m int) []world.Step {
	steps := []world.Step{{Kind: world.Join, Member: m}, {Kind: world.Poll, Member: m}}
	for o := range cfg.Members {
		if o != m {
			steps = append(steps, world.Step{Kind: world.Poll, Member: o})
		}
	}
	return append(steps, world.Step{Kind: world.Poll, Member: m})
}

// heldEverywhere is held, then an event of the same size to a key on each
// other partition, so that a member folds one whichever it owns.
func heldEverywhere(cfg world.Config, held world.Step) []world.Step {
	steps := []world.Step{held}
	covered := map[int32]bool{world.PartitionOf(held.Key, cfg.Partitions): true}
	for _, k := range Keys {
		if p := world.PartitionOf(k, cfg.Partitions); !covered[p] {
			covered[p] = true
			steps = append(steps, world.Step{Kind: world.Produce, Key: k, Delta: held.Delta})
		}
	}
	return steps
}

// ScenarioGen draws a scenario of n steps for a world of cfg, chunk by
// chunk (ChunkGen), cut at n.
func ScenarioGen(cfg world.Config, n int) *rapid.Generator[[]world.Step] {
	chunk := ChunkGen(cfg)
	return rapid.Custom(func(t *rapid.T) []world.Step {
		var steps []world.Step
		for len(steps) < n {
			steps = append(steps, chunk.Draw(t, "chunk")...)
		}
		return steps[:n]
	})
}

// Stats counts what the properties ran: scenarios, steps per kind, and
// the members' recoveries by how they ended.
type Stats struct {
	mu        sync.Mutex
	Scenarios int
	Steps     map[world.Kind]int
	// Recoveries counts the recovery reads: "full" or "delta", and
	// "ok", the checkpoint's refusal reason, or "failed".
	Recoveries map[string]int
	// StepsInFlight counts the steps after which the simulated cluster
	// still had started calls in flight (sim.Cluster.CallsInFlight): the
	// checks that ran while writes were on their way.
	StepsInFlight int
	// StepsOutputsInFlight counts the steps after which a member had
	// outputs in flight (world.Config.PipelinedEmits).
	StepsOutputsInFlight int
	// TimerFirings counts the timer firings in the final reads' states
	// (world.Config.Timers).
	TimerFirings int
	// Promotions counts the recoveries that followed acquisitions
	// (world.Config.Standby) by the member's replica and how they went:
	// "current delta", "behind full older_than_delete_retention", ...
	Promotions map[string]int
	// Tables sums the worlds' lookups (world.Config.Tables).
	Tables world.TableStats
}

// addWorld counts what w's features did.
func (s *Stats) addWorld(w *world.World) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range w.Promotions() {
		if s.Promotions == nil {
			s.Promotions = map[string]int{}
		}
		key := p.Replica + " " + p.Kind
		if p.Kind != "delta" {
			key += " " + p.Reason
		}
		s.Promotions[key]++
	}
	ts := w.TableStats()
	s.Tables.Lookups += ts.Lookups
	s.Tables.Waits += ts.Waits
	s.Tables.Stale += ts.Stale
	s.Tables.OlderThanInput += ts.OlderThanInput
}

// PromotionCoverage formats the promotion counts.
func (s *Stats) PromotionCoverage() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ""
	for _, k := range slices.Sorted(maps.Keys(s.Promotions)) {
		out += fmt.Sprintf("%s %d  ", k, s.Promotions[k])
	}
	return out
}

// PromotionsOf counts the promotions whose key ("replica kind [reason]")
// has prefix.
func (s *Stats) PromotionsOf(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, c := range s.Promotions {
		if strings.HasPrefix(k, prefix) {
			n += c
		}
	}
	return n
}

func (s *Stats) add(steps []world.Step, ops []history.Op, inFlight, outputsInFlight int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Steps == nil {
		s.Steps, s.Recoveries = map[world.Kind]int{}, map[string]int{}
	}
	s.Scenarios++
	s.StepsInFlight += inFlight
	s.StepsOutputsInFlight += outputsInFlight
	for _, st := range steps {
		s.Steps[st.Kind]++
	}
	starts := map[int]history.Op{}
	for _, op := range ops {
		switch op.Kind {
		case history.ReadStart:
			starts[op.Read] = op
		case history.Read:
			if start := starts[op.Read]; start.Detail == history.FinalRead && !op.Tombstone {
				if v, err := strconv.Atoi(op.Value); err == nil {
					_, fired := history.SplitState(v)
					s.TimerFirings += fired
				}
			}
		case history.ReadEnd:
			start, ok := starts[op.Read]
			if !ok || start.Detail == history.FinalRead {
				continue
			}
			kind, end := "full", string(op.Outcome)
			if start.Detail == history.DeltaRead {
				kind = "delta"
			}
			if op.Outcome != history.OK && op.Detail != "" && kind == "delta" {
				end = op.Detail
			}
			s.Recoveries[kind+" "+end]++
		}
	}
}

// RecoveryCoverage formats the recovery counts.
func (s *Stats) RecoveryCoverage() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.Recoveries))
	for k := range s.Recoveries {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := ""
	for _, k := range keys {
		out += fmt.Sprintf("%s %d  ", k, s.Recoveries[k])
	}
	return out
}

// Coverage formats the step counts.
func (s *Stats) Coverage() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ""
	for _, w := range withSteps(standbyWarmWeights, tableWeights[len(weights)-1:len(tableWeights)-1]...) {
		if n, ok := s.Steps[w.kind]; ok || !slices.Contains(featureKinds, w.kind) {
			out += fmt.Sprintf("%s %d  ", w.kind, n)
		}
	}
	for _, k := range []world.Kind{world.PollFirst, world.Query, world.ReadView} { // drawn only in macros
		if n := s.Steps[k]; n > 0 {
			out += fmt.Sprintf("%s %d  ", k, n)
		}
	}
	return out
}

// featureKinds are the steps of some worlds only: Coverage shows them
// only when drawn.
var featureKinds = []world.Kind{world.Recreate, world.Replicate, world.Wipe, world.TablePut, world.TableOpen, world.TableEnd, world.ReadTable}

// Property is the fencing property for worlds of cfg: a random scenario
// (rapid's Repeat: -rapid.steps steps on average, 30 by default), every
// invariant checked after every step and at quiescence. A violation fails
// with the invariant and the trace; rapid shrinks the scenario to a
// minimal one and prints the seed that replays it.
func Property(cfg world.Config, stats *Stats) func(*rapid.T) {
	return PropertyOf([]world.Config{cfg}, stats)
}

// PropertyOf is Property for worlds of each of cfgs: every scenario draws
// one first (shrinking towards the first), so that one budget of
// scenarios covers them all.
func PropertyOf(cfgs []world.Config, stats *Stats) func(*rapid.T) {
	return propertyOf(cfgs, stats, func(cfg world.Config) *rapid.Generator[[]world.Step] {
		return rapid.Map(StepGen(cfg), func(s world.Step) []world.Step { return []world.Step{s} })
	})
}

// MacroPropertyOf is PropertyOf with scenarios drawn chunk by chunk
// (ChunkGen): most of them reach the fence. rapid shrinks a macro only as
// a whole, so a failure's minimal trace is longer than PropertyOf's.
func MacroPropertyOf(cfgs []world.Config, stats *Stats) func(*rapid.T) {
	return propertyOf(cfgs, stats, ChunkGen)
}

func propertyOf(cfgs []world.Config, stats *Stats, chunks func(world.Config) *rapid.Generator[[]world.Step]) func(*rapid.T) {
	return func(t *rapid.T) {
		cfg := cfgs[0]
		if len(cfgs) > 1 {
			cfg = cfgs[rapid.IntRange(0, len(cfgs)-1).Draw(t, "world")]
		}
		w, err := world.New(cfg)
		if err != nil {
			t.Fatalf("world: %v", err)
		}
		defer w.Close()
		gen := chunks(w.Config())
		var steps []world.Step
		inFlight, outputsInFlight := 0, 0
		fail := func(vs []world.Violation) {
			t.Fatalf("%s\n%s\n%d steps:\n%s", vs[0], describe(w.Config()), len(steps), world.Trace(steps))
		}
		t.Repeat(map[string]func(*rapid.T){
			"step": func(t *rapid.T) {
				for _, s := range gen.Draw(t, "step") {
					steps = append(steps, s)
					if vs := w.Apply(s); len(vs) > 0 {
						fail(vs)
					}
					if w.Cluster().CallsInFlight() > 0 {
						inFlight++
					}
					if w.OutputsInFlight() > 0 {
						outputsInFlight++
					}
				}
			},
		})
		vs := w.Quiesce()
		stats.add(steps, w.Recorder().Ops(), inFlight, outputsInFlight)
		stats.addWorld(w)
		if len(vs) > 0 {
			fail(vs)
		}
	}
}

// describe names a world's configuration in a failure's report.
func describe(cfg world.Config) string {
	out := fmt.Sprintf("world: %s mode, %s", cfg.Mode, cfg.Protocol)
	for _, f := range []struct {
		on   bool
		name string
	}{{cfg.ExactlyOnce, "exactly-once"}, {cfg.ProduceOutputs, "outputs produced"}, {cfg.WarmRestarts, "warm restarts"},
		{cfg.WriteLatency > 0, fmt.Sprintf("writes in flight for %v", cfg.WriteLatency)}, {cfg.CachedIdentity, "identity cached"}, {cfg.LSOBoundRecovery, "recovery bound by the LSO"}, {cfg.RestartsUnconfirmed, "restarts unconfirmed"}, {cfg.TrustCheckpoints, "checkpoints trusted"}, {cfg.TombstonesAheadOfCommit, "tombstones ahead of the commit"}, {cfg.CommitAheadOfWrites, "commits ahead of the writes"},
		{cfg.PipelinedEmits, "outputs in flight"}, {cfg.EmitsAckedEarly, "outputs acked early"},
		{cfg.Timers, "timers"}, {cfg.TimerRemovalsLost, "timer removals lost"},
		{cfg.Standby, "standby replicas"}, {cfg.StandbySkipsRecords, "replicas skip records"}, {cfg.StandbyCheckpointsDropped, "replicas' checkpoints dropped"},
		{cfg.Tables, "lookup table"}, {cfg.TablesNotAwaited, "tables not awaited"}, {cfg.FollowUncommitted, "followers read uncommitted"}} {
		if f.on {
			out += ", " + f.name
		}
	}
	return out
}
