package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// The engine over the sim is deterministic: the same seed and the same
// calls on a fresh cluster give a byte-identical history, the same
// outputs in the same order, and the same final states. Property tests
// replay scenarios by seed, so they depend on this.
func TestSameSeedSameEngineHistory(t *testing.T) {
	for _, tc := range []struct {
		protocol sim.Protocol
		seed     uint64
	}{
		{sim.ClassicEager, 1}, {sim.ClassicEager, 4},
		{sim.ClassicCooperative, 2}, {sim.ClassicCooperative, 5},
		{sim.Consumer, 3}, {sim.Consumer, 6},
	} {
		t.Run(fmt.Sprintf("%s/seed=%d", tc.protocol, tc.seed), func(t *testing.T) {
			a := runDeterminismScenario(t, tc.protocol, tc.seed)
			b := runDeterminismScenario(t, tc.protocol, tc.seed)
			t.Logf("history of %d events: %s", bytes.Count(a.history, []byte("\n")), historySummary(a.history))
			if !bytes.Equal(a.history, b.history) {
				t.Fatalf("same seed, different histories: %s", firstDifference(a.history, b.history))
			}
			if a.outputs != b.outputs {
				t.Fatalf("same seed, different outputs: %s", firstDifference([]byte(a.outputs), []byte(b.outputs)))
			}
			if a.final != b.final {
				t.Fatalf("same seed, different final states: %s", firstDifference([]byte(a.final), []byte(b.final)))
			}
		})
	}
}

type scenarioResult struct {
	history []byte
	outputs string // every emitted output, in order, with the emitting slot
	final   string // each slot's flows, states and errors at the end
}

// detSlot is one member process: its engine (cache) and runner.
type detSlot struct {
	e       *engine.Engine[int]
	r       *engine.Member[int]
	stalled bool
}

const (
	detTopic      = "events"
	detPartitions = 4
	detKeys       = 20
	detGroup      = "det"
)

func detKey(i int) string { return fmt.Sprintf("k%02d", i) }

// runDeterminismScenario runs a random workload drawn from seed: three
// member slots joining, leaving, stalling, crashing and restarting over a
// 4-partition topic while events on 20 keys arrive, with small flush,
// commit and tick intervals, a small transaction cap and flush batch, and
// a small hot set, so that batching, eviction and fences all happen. It
// ends by letting the group settle and checks the states against a ledger.
func runDeterminismScenario(t *testing.T, protocol sim.Protocol, seed uint64) scenarioResult {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	c := sim.New(sim.Config{Seed: seed})
	if err := c.CreateTopic(detTopic, sim.TopicConfig{Partitions: detPartitions}); err != nil {
		t.Fatal(err)
	}
	b, err := c.NewBackend(sim.BackendConfig{Mode: store.Transactional, TransactionalIDPrefix: "det",
		CreateTopics: true, MaxWritesPerTransaction: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	var outputs strings.Builder
	want := ledger{}
	var slots [3]*detSlot

	start := func(i int) {
		e, err := engine.New(engine.Config[int]{
			Fold: balance, Codec: intCodec{}, Store: b,
			Tick: func(key []byte, state int, now time.Time) (engine.Result[int], error) {
				if state%3 != 0 {
					return engine.Keep[int](), nil
				}
				return engine.Keep[int]().With(engine.Output{Topic: "ticks", Key: key,
					Value: []byte(strconv.Itoa(state) + "@" + strconv.FormatInt(now.Sub(sim.Epoch).Milliseconds(), 10))}), nil
			},
			TickInterval:    1500 * time.Millisecond,
			PersistInterval: 500 * time.Millisecond, CommitInterval: time.Second,
			FlushBatch: 2, HotKeys: 3,
			Emit: func(_ context.Context, outs []engine.Output) error {
				for _, o := range outs {
					fmt.Fprintf(&outputs, "%d %s %s=%s\n", i, o.Topic, o.Key, o.Value)
				}
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		r, err := e.Join(simsource.New(c, detGroup, protocol, 7, detTopic))
		if err != nil {
			t.Fatal(err)
		}
		slots[i] = &detSlot{e: e, r: r}
	}
	stop := func(i int) {
		if err := slots[i].e.Close(); err != nil {
			t.Fatal(err)
		}
		slots[i] = nil
	}
	pick := func(ok func(*detSlot) bool) int {
		var is []int
		for i, s := range slots {
			if s != nil && ok(s) {
				is = append(is, i)
			}
		}
		if len(is) == 0 {
			return -1
		}
		return is[rng.IntN(len(is))]
	}
	anySlot := func(*detSlot) bool { return true }
	step := func(i int) {
		if err := slots[i].r.Step(ctx); err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
	}
	produce := func() {
		k := rng.IntN(detKeys)
		v := "+" + strconv.Itoa(1+rng.IntN(9))
		if rng.IntN(25) == 0 {
			v = "close"
		}
		tp := store.TopicPartition{Topic: detTopic, Partition: int32(k % detPartitions)}
		if _, err := c.Produce(tp, wire.Record{Key: []byte(detKey(k)), Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
		want.apply(detKey(k), v)
	}

	start(0)
	const ops = 400
	crashed := -1
	for op := range ops {
		switch {
		case op == ops/3: // a crash: no flush, no revoke, no leave
			if pick(anySlot) < 0 {
				start(0)
			}
			crashed = pick(anySlot)
			crashOnSim(t, slots[crashed].r)
			stop(crashed) // its cache goes with its engine
			continue
		case op == ops/2 && slots[crashed] == nil: // and its restart
			start(crashed)
			continue
		}
		switch n := rng.IntN(100); {
		case n < 35:
			for range 1 + rng.IntN(5) {
				produce()
			}
		case n < 70:
			if i := pick(anySlot); i >= 0 {
				step(i)
			}
		case n < 84:
			d := time.Duration(100+rng.IntN(2900)) * time.Millisecond
			if rng.IntN(8) == 0 {
				d = time.Duration(20+rng.IntN(40)) * time.Second // sessions may expire
			}
			c.Advance(d)
		case n < 89:
			if i := slices.Index(slots[:], nil); i >= 0 {
				start(i)
			}
		case n < 92:
			if i := pick(func(s *detSlot) bool { return !s.stalled }); i >= 0 {
				if err := slots[i].r.Close(ctx); err != nil {
					t.Fatal(err)
				}
				stop(i)
			}
		case n < 96:
			if i := pick(func(s *detSlot) bool { return !s.stalled }); i >= 0 {
				sourceOf(t, slots[i].r).Member().Stall()
				slots[i].stalled = true
			}
		default:
			if i := pick(func(s *detSlot) bool { return s.stalled }); i >= 0 {
				sourceOf(t, slots[i].r).Member().Resume()
				slots[i].stalled = false
			}
		}
	}

	// Settle: everyone resumes and steps until the input is committed to
	// its end.
	if slots[0] == nil {
		start(0)
	}
	for _, s := range slots {
		if s != nil && s.stalled {
			sourceOf(t, s.r).Member().Resume()
			s.stalled = false
		}
	}
	settled := false
	for range 300 {
		for i, s := range slots {
			if s != nil {
				step(i)
			}
		}
		c.Advance(time.Second)
		if settled = detCaughtUp(c); settled {
			break
		}
	}
	if !settled {
		t.Fatalf("the group did not commit to the end of the input\n%s", c.HistoryJSON())
	}

	var final strings.Builder
	owner := map[store.TopicPartition]*engine.Member[int]{}
	for i, s := range slots {
		if s == nil {
			continue
		}
		flows := s.r.Flows()
		fmt.Fprintf(&final, "slot %d flows=%v\n", i, flows)
		for _, tp := range flows {
			owner[tp] = s.r
		}
		for _, err := range s.r.Errors() {
			fmt.Fprintf(&final, "slot %d error: %v\n", i, err)
		}
	}
	for k := range detKeys {
		key := detKey(k)
		tp := store.TopicPartition{Topic: detTopic, Partition: int32(k % detPartitions)}
		r := owner[tp]
		if r == nil {
			t.Fatalf("no flow owns %s after settling", tp)
		}
		got, ok, err := r.State(tp, []byte(key))
		if err != nil {
			t.Fatal(err)
		}
		w, wOK := want[key]
		if ok != wOK || got != w {
			t.Fatalf("%s = %d (%t), want %d (%t)", key, got, ok, w, wOK)
		}
		fmt.Fprintf(&final, "%s=%d,%t\n", key, got, ok)
	}
	for i, s := range slots {
		if s != nil {
			if err := s.r.Close(ctx); err != nil {
				t.Fatal(err)
			}
			stop(i)
		}
	}
	return scenarioResult{history: c.HistoryJSON(), outputs: outputs.String(), final: final.String()}
}

func detCaughtUp(c *sim.Cluster) bool {
	for p := range int32(detPartitions) {
		tp := store.TopicPartition{Topic: detTopic, Partition: p}
		_, _, end, _ := c.Offsets(tp)
		if off, _ := c.CommittedOffset(detGroup, tp); off != end {
			return false
		}
	}
	return true
}

// historySummary counts the history's events of the kinds that show what
// the scenario exercised.
func historySummary(history []byte) string {
	counts := map[string]int{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(history)), "\n") {
		var e sim.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return err.Error()
		}
		counts[e.Kind]++
		if e.Kind == "txn_end" {
			counts["txn_end "+e.Detail[strings.Index(e.Detail, "result="):]]++
		}
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, counts[k]))
	}
	return strings.Join(parts, " ")
}

// firstDifference shows the first line where a and b differ.
func firstDifference(a, b []byte) string {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return fmt.Sprintf("line %d:\n  first:  %s\n  second: %s", i+1, la[i], lb[i])
		}
	}
	return fmt.Sprintf("one is a prefix of the other (%d and %d lines)", len(la), len(lb))
}
