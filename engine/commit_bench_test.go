package engine_test

// BenchmarkCommitIntervalCrash: what the commit interval costs a service
// in a crash and in its committed reads, on the simulated cluster in
// virtual time (docs/benchmarks.md, "Commit interval"; `make
// bench-commit` runs it with BenchmarkCommitInterval, the same
// variants' throughput on a real broker, and prints one table).
//
// Per variant (commitVariants): a member folds a steady input of
// crashRate records/s over crashPartitions partitions (crashKeys keys
// each, one output per input record), stepped every crashStep of virtual
// time. After each step it reads, committed (Engine.Get with
// ReadCommitted), a key that every step's first record of a partition
// touches, and the group's committed offsets. Once it has committed
// twice, it crashes one step before its next commit is due, the most a
// crash can cost: it is never stepped again, nothing is flushed, and
// its member is evicted when its session expires. A second member takes
// over, folds to the input's end and commits, and the output topic is
// read read_committed. Reported per op:
//
//   - dups: outputs the read_committed reader saw more than once (at
//     least once, the new owner's re-emits of what the old one emitted
//     since its last commit; exactly once, none);
//   - refolds: input records the new owner folded again;
//   - age-max-ms, age-mean-ms: how old the committed read is, from the
//     first commit to the crash: at each step, the virtual time since the
//     input record whose offset the read reflects was produced;
//   - lag-max: the most input records past the group's committed offsets
//     (what snapfence_group_lag shows), over the same steps;
//   - inputs: the records produced before the crash; input-rate:
//     crashRate; commit-ms: the variant's CommitInterval.
//
// Virtual time has no transaction time: on a broker, add each
// transaction's duration (BenchmarkCommitInterval's txn-s over its
// txns) to the ages. The numbers are a function of the variant alone, so
// one sample is enough (-benchtime=1x -count=1).

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// commitVariant is a sub-benchmark of BenchmarkCommitIntervalCrash and of
// BenchmarkCommitInterval (the broker's, build tag `it`): an output mode
// and its CommitInterval (PersistInterval left to follow it).
type commitVariant struct {
	name     string
	eos      bool
	interval time.Duration
}

var commitVariants = []commitVariant{
	{"at-least-once-100ms", false, 100 * time.Millisecond},
	{"at-least-once-250ms", false, 250 * time.Millisecond},
	{"at-least-once-1s", false, time.Second},
	{"at-least-once-5s", false, 5 * time.Second},
	{"at-least-once-1m", false, time.Minute},
	{"exactly-once-100ms", true, 100 * time.Millisecond},
}

const (
	crashRate       = 1000 // input records per second
	crashPartitions = 2
	crashKeys       = 500 // per partition
	crashStep       = 10 * time.Millisecond
	crashClock      = "clock" // the key every step's first record of a partition touches
)

func BenchmarkCommitIntervalCrash(b *testing.B) {
	for _, v := range commitVariants {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				runCommitCrash(b, v)
			}
		})
	}
}

// crashRun is one op: the cluster, the produce times of the input's
// records, and the folds each member made.
type crashRun struct {
	b        *testing.B
	v        commitVariant
	c        *sim.Cluster
	backend  store.Backend
	produced [crashPartitions][]time.Time // by offset
}

func runCommitCrash(b *testing.B, v commitVariant) {
	b.StopTimer() // the numbers are virtual time's; the op's wall time is no result
	cr := &crashRun{b: b, v: v, c: sim.New(sim.Config{Seed: 1})}
	for _, t := range []string{"input", "audit"} {
		if err := cr.c.CreateTopic(t, sim.TopicConfig{Partitions: crashPartitions}); err != nil {
			b.Fatal(err)
		}
	}
	backend, err := cr.c.NewBackend(sim.BackendConfig{Mode: store.Transactional, TransactionalIDPrefix: "crash", CreateTopics: true})
	if err != nil {
		b.Fatal(err)
	}
	defer backend.Close()
	cr.backend = backend
	ctx := context.Background()

	// The old owner, until its crash.
	var lastA [crashPartitions]int64
	ea := cr.engine(func(p int32, off int64) { lastA[p] = off })
	a, err := ea.Join(simsource.New(cr.c, "crash", sim.ClassicEager, 0, "input"))
	if err != nil {
		b.Fatal(err)
	}
	tp0 := store.TopicPartition{Topic: "input", Partition: 0}
	perStep := crashRate * int(crashStep) / int(time.Second) / crashPartitions
	var (
		commits    int
		lastCommit time.Time
		committed  int64
		ages       []time.Duration
		ageMax     time.Duration
		lagMax     int64
	)
	for steps := 0; ; steps++ {
		if steps > int(4*v.interval/crashStep)+1000 {
			b.Fatalf("%s: %d commits in %d steps; the crash needs two", v.name, commits, steps)
		}
		now := cr.c.Now()
		if commits > 0 {
			// Before the step: what a reader saw for the last crashStep.
			ageMax, lagMax = cr.sample(ea, now, &ages, ageMax, lagMax)
		}
		if commits >= 2 && now.Sub(lastCommit) >= v.interval {
			break // this step would commit: crash before it
		}
		cr.produce(perStep)
		if err := a.Step(ctx); err != nil {
			b.Fatal(err)
		}
		if off, ok := cr.c.CommittedOffset("crash", tp0); ok && off != committed {
			committed, lastCommit = off, now
			commits++
		}
		cr.c.Advance(crashStep)
	}
	inputs := cr.inputs()
	a.Source().(*simsource.Source).Member().Stall()
	engine.Abandon(a)
	cr.c.Advance(time.Minute) // the session expires: a is evicted

	// The new owner, to the input's end.
	refolds := 0
	eb := cr.engine(func(p int32, off int64) {
		if off <= lastA[p] {
			refolds++
		}
	})
	bm, err := eb.Join(simsource.New(cr.c, "crash", sim.ClassicEager, 0, "input"))
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; !cr.caughtUp(); i++ {
		if i == 1000 {
			b.Fatalf("%s: the new owner did not reach the input's end", v.name)
		}
		if err := bm.Step(ctx); err != nil {
			b.Fatal(err)
		}
		bm.FlushAll(ctx) // its commit need not wait for the interval
		cr.c.Advance(crashStep)
	}
	if err := bm.Close(ctx); err != nil {
		b.Fatal(err)
	}
	dups := cr.duplicates(inputs)
	for _, e := range []*engine.Engine[int]{ea, eb} {
		if err := engine.CloseAbandoning(e); err != nil {
			b.Fatal(err)
		}
	}

	var sum time.Duration
	for _, a := range ages {
		sum += a
	}
	b.ReportMetric(float64(dups), "dups")
	b.ReportMetric(float64(refolds), "refolds")
	b.ReportMetric(float64(ageMax.Milliseconds()), "age-max-ms")
	b.ReportMetric(float64(sum.Milliseconds())/float64(max(len(ages), 1)), "age-mean-ms")
	b.ReportMetric(float64(lagMax), "lag-max")
	b.ReportMetric(float64(inputs), "inputs")
	b.ReportMetric(crashRate, "input-rate")
	b.ReportMetric(float64(v.interval.Milliseconds()), "commit-ms")
}

// sample reads e's committed state of the clock key of every partition
// and the group's committed offsets at now: it adds their ages to ages
// and returns the larger maxima.
func (cr *crashRun) sample(e *engine.Engine[int], now time.Time, ages *[]time.Duration, ageMax time.Duration, lagMax int64) (time.Duration, int64) {
	for p := range int32(crashPartitions) {
		tp := store.TopicPartition{Topic: "input", Partition: p}
		ent, ok, err := e.Get(context.Background(), tp, []byte(crashClock), engine.ReadCommitted)
		if err != nil {
			cr.b.Fatal(err)
		}
		if !ok {
			continue // its first snapshot is not durable yet
		}
		age := now.Sub(cr.produced[p][ent.Offset])
		*ages = append(*ages, age)
		ageMax = max(ageMax, age)
	}
	return ageMax, max(lagMax, cr.lag())
}

// engine makes a member's engine: a per-key count, one output per input
// record naming it ("partition:offset") on the audit topic, folded
// reported to folded.
func (cr *crashRun) engine(folded func(p int32, off int64)) *engine.Engine[int] {
	cfg := engine.Config[int]{
		Fold: func(key []byte, n int, _ bool, rec engine.Record) (engine.Result[int], error) {
			folded(rec.Partition, rec.Offset)
			return engine.Set(n + 1).With(engine.Output{Topic: "audit", Key: key, Value: fmt.Appendf(nil, "%d:%d", rec.Partition, rec.Offset)}), nil
		},
		Codec: intCodec{}, Store: cr.backend, CommitInterval: cr.v.interval,
		ExactlyOnce: cr.v.eos, OutputTopics: []string{"audit"},
	}
	if !cr.v.eos {
		cfg.Emit = cr.emit
	}
	e, err := engine.New(cfg)
	if err != nil {
		cr.b.Fatal(err)
	}
	return e
}

// emit is at-least-once output: a plain producer appends the outputs to
// the audit topic.
func (cr *crashRun) emit(_ context.Context, outs []engine.Output) error {
	for _, o := range outs {
		tp := store.TopicPartition{Topic: o.Topic, Partition: store.OutputPartition(o.Key, crashPartitions)}
		if _, err := cr.c.Produce(tp, wire.Record{Key: o.Key, Value: o.Value}); err != nil {
			return err
		}
	}
	return nil
}

// produce appends n records to every input partition, the first on the
// clock key, and notes when.
func (cr *crashRun) produce(n int) {
	now := cr.c.Now()
	for p := range int32(crashPartitions) {
		recs := make([]wire.Record, n)
		for i := range recs {
			off := len(cr.produced[p])
			key := crashClock
			if i > 0 {
				key = "k" + strconv.Itoa(off%crashKeys)
			}
			recs[i] = wire.Record{Key: []byte(key), Value: []byte("+1")}
			cr.produced[p] = append(cr.produced[p], now)
		}
		if _, err := cr.c.Produce(store.TopicPartition{Topic: "input", Partition: p}, recs...); err != nil {
			cr.b.Fatal(err)
		}
	}
}

func (cr *crashRun) inputs() int {
	n := 0
	for p := range crashPartitions {
		n += len(cr.produced[p])
	}
	return n
}

// lag is the input records past the group's committed offsets.
func (cr *crashRun) lag() int64 {
	var lag int64
	for p := range int32(crashPartitions) {
		tp := store.TopicPartition{Topic: "input", Partition: p}
		off, _ := cr.c.CommittedOffset("crash", tp)
		lag += int64(len(cr.produced[p])) - off
	}
	return lag
}

func (cr *crashRun) caughtUp() bool { return cr.lag() == 0 }

// duplicates reads the audit topic read_committed: the outputs seen more
// than once. Every input must have been seen: at least once loses none.
func (cr *crashRun) duplicates(inputs int) int {
	seen := map[string]int{}
	for p := range int32(crashPartitions) {
		ents, err := cr.c.Read(store.TopicPartition{Topic: "audit", Partition: p}, true)
		if err != nil {
			cr.b.Fatal(err)
		}
		for _, e := range ents {
			if e.Control == sim.NoControl {
				seen[string(e.Record.Value)]++
			}
		}
	}
	if len(seen) != inputs {
		cr.b.Fatalf("%s: the outputs of %d inputs read_committed, want %d", cr.v.name, len(seen), inputs)
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	return dups
}
