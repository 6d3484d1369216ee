package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/prom"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// noted is balance, except that a value that is no amount is a note,
// copied into an output to the audit topic (the key's state is kept).
func noted(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
	if _, err := strconv.Atoi(string(rec.Value)); err != nil && string(rec.Value) != "close" {
		return engine.Set(state).With(engine.Output{Topic: "audit", Key: key, Value: rec.Value}), nil
	}
	return balance(key, state, exists, rec)
}

func modeName(exactlyOnce bool) string {
	if exactlyOnce {
		return "exactly-once"
	}
	return "at-least-once"
}

// bigNote is a note whose output is over the default MaxOutputBytes
// (999,000) and the producer's default batch limit (1,000,012).
var bigNote = strings.Repeat("n", 1_020_071)

// An output over MaxOutputBytes is the record's failure, in both output
// modes: under the default policy Run returns the *engine.FoldError naming
// the record (its Err an *engine.OutputTooLargeError) after committing
// everything before it, instead of restarting for ever (at least once)
// or ending with a store error that bypasses the policy (exactly once).
func TestOversizeOutputStopsWithTheRecordsFoldErrorOnSim(t *testing.T) {
	for _, eos := range []bool{false, true} {
		t.Run(modeName(eos), func(t *testing.T) {
			w := newEOSWorld(t, eos)
			w.produce("bob=+5", "alice=+3")
			bad := store.TopicPartition{Topic: "accounts", Partition: 1}
			_, _, badOffset, _ := w.c.Offsets(bad)
			w.produce("bob="+bigNote, "bob=+2")
			r := w.runner(w.engine(time.Second, func(c *engine.Config[int]) { c.Fold = noted }))
			err := w.stepUntilError(r, 20*time.Second, nil)
			fe, ok := errors.AsType[*engine.FoldError](err)
			if !ok || fe.Input != bad || fe.Offset != badOffset || string(fe.Key) != "bob" {
				t.Fatalf("Step = %v, want the *engine.FoldError of %s offset %d key bob", err, bad, badOffset)
			}
			ote, ok := errors.AsType[*engine.OutputTooLargeError](err)
			if !ok || ote.Topic != "audit" || ote.Size != len("bob")+len(bigNote) || ote.Limit != engine.DefaultMaxOutputBytes {
				t.Fatalf("FoldError.Err = %v, want an *engine.OutputTooLargeError for audit of %d bytes", fe.Err, len("bob")+len(bigNote))
			}
			if !errors.Is(err, store.ErrValueTooLarge) {
				t.Fatalf("%v does not match store.ErrValueTooLarge", err)
			}
			if off, _ := w.c.CommittedOffset("bank", bad); off != badOffset {
				t.Fatalf("%s committed at %d, want %d: everything before the record", bad, off, badOffset)
			}
		})
	}
}

// Under DeadLetterPoison the record whose output is too large is
// dead-lettered (without its value, which would not fit either, saying
// so) and the partition goes on: every other record is folded and its
// outputs delivered, in the same poll or exactly-once batch.
func TestOversizeOutputIsDeadLetteredAndTheRestGoesOnOnSim(t *testing.T) {
	for _, eos := range []bool{false, true} {
		t.Run(modeName(eos), func(t *testing.T) {
			w := newDeadLetterWorld(t, eos)
			w.produce("bob=+5", "alice=+3")
			tp := store.TopicPartition{Topic: "accounts", Partition: 1}
			_, _, badOffset, _ := w.c.Offsets(tp)
			w.produce("bob="+bigNote, "bob=+2", "carol=small note", "alice=+1")
			r := w.runner(w.engine(time.Second, func(c *engine.Config[int]) { c.Fold = noted }))
			w.drain(r)
			w.check(r)
			dl := w.deadLetters(t)
			origin := "1:" + strconv.FormatInt(badOffset, 10)
			if dl[origin] < 1 || len(dl) != 1 {
				t.Fatalf("dead letters %v, want %s's", dl, origin)
			}
			for p := range int32(2) {
				ents, err := w.c.Read(store.TopicPartition{Topic: "dead", Partition: p}, true)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range ents {
					if e.Control != sim.NoControl {
						continue
					}
					var why string
					for _, h := range e.Record.Headers {
						if h.Key == engine.HeaderDeadLetterError {
							why = string(h.Value)
						}
					}
					if len(e.Record.Value) != 0 || !strings.Contains(why, "MaxOutputBytes") || !strings.Contains(why, "left out") {
						t.Fatalf("dead letter of %d bytes, error %q: want no value and the reason", len(e.Record.Value), why)
					}
				}
			}
			if got := w.audit(true); got["small note"] < 1 || got[bigNote] != 0 {
				t.Fatalf("audit outputs: small note %d times, the big one %d: want the small one delivered, the big one not", got["small note"], got[bigNote])
			}
		})
	}
}

// gaugeValue is the value of a gauge series of reg with the given
// labels; ok is false if there is none.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// A partition that keeps failing is not ready: after FailingRestarts
// transient restarts without a commit it shows Failing, with its last
// failure, also while it runs between two failures, the member is not
// ready, and snapfence_partition_failing is 1 for it. Once it commits
// again, it is ready.
func TestAPartitionThatKeepsFailingIsNotReadyOnSim(t *testing.T) {
	w := newSimWorld(t)
	hot := store.TopicPartition{Topic: "accounts", Partition: 1}
	labels := map[string]string{"topic": "accounts", "partition": "1"}
	reg := prometheus.NewRegistry()
	m, err := prom.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	w.produce("bob=+5", "alice=+3")
	r := w.runner(w.engineWith(func(c *engine.Config[int]) { c.Observer = m }))
	w.drain(r)
	if st := r.Status(); !st.Ready() {
		t.Fatalf("not ready after the drain: %+v", st)
	}
	refused := errors.New("NOT_LEADER_OR_FOLLOWER (simulated)")
	snaps := store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: 1}
	w.c.FailProduce(snaps, refused)
	w.produce("bob=+1")
	ctx := context.Background()
	failing := false
	for range 600 {
		if err := r.Step(ctx); err != nil {
			t.Fatal(err)
		}
		w.c.Advance(time.Second)
		ps := partitionStatus(t, r.Status(), hot)
		if ps.Restarts < engine.FailingRestarts {
			if ps.Failing {
				t.Fatalf("failing after %d restarts, want %d", ps.Restarts, engine.FailingRestarts)
			}
			continue
		}
		if ps.State != engine.StateRunning {
			continue
		}
		if !ps.Failing || r.Status().Ready() || !errors.Is(ps.LastFailure, refused) {
			t.Fatalf("%s running after %d restarts: failing %v, ready %v, last failure %v; want failing, not ready, the refusal",
				hot, ps.Restarts, ps.Failing, r.Status().Ready(), ps.LastFailure)
		}
		if v, ok := gaugeValue(t, reg, "snapfence_partition_failing", labels); !ok || v != 1 {
			t.Fatalf("snapfence_partition_failing = %v (present %v), want 1", v, ok)
		}
		failing = true
		break
	}
	if !failing {
		t.Fatalf("%s never ran failing: %+v", hot, partitionStatus(t, r.Status(), hot))
	}
	w.c.FailProduce(snaps, nil)
	w.drain(r)
	w.check(r)
	if ps := partitionStatus(t, r.Status(), hot); ps.Failing || !r.Status().Ready() {
		t.Fatalf("after a commit: failing %v, ready %v; want ready", ps.Failing, r.Status().Ready())
	}
	if v, _ := gaugeValue(t, reg, "snapfence_partition_failing", labels); v != 0 {
		t.Fatalf("snapfence_partition_failing = %v after a commit, want 0", v)
	}
}

// simTopicCheck is a Config.CheckOutputTopics over the simulated
// cluster: a missing topic is a *store.ConfigError, as kafkaio.Emitter's.
func (w *eosWorld) simTopicCheck(calls *atomic.Int32) func(context.Context, []string) error {
	return func(_ context.Context, topics []string) error {
		calls.Add(1)
		for _, topic := range topics {
			if _, ok := w.c.Topic(topic); !ok {
				return &store.ConfigError{Subject: "output topic " + strconv.Quote(topic), Problem: "does not exist", Fix: "create it"}
			}
		}
		return nil
	}
}

// At least once, the output and dead-letter topics are checked before the
// first poll (Config.CheckOutputTopics): a missing dead-letter topic ends
// the run with the *store.ConfigError naming it before anything is folded
// or committed; with the topics there the check runs once.
func TestMissingDeadLetterTopicEndsRunBeforeFoldingOnSim(t *testing.T) {
	w := newEOSWorld(t, false) // no "dead" topic
	w.produce("bob=+5", "bob=oops", "alice=+3")
	var calls atomic.Int32
	folds := 0
	e := w.engine(time.Second, func(c *engine.Config[int]) {
		c.Poison, c.DeadLetterTopic = engine.DeadLetterPoison, "dead"
		c.CheckOutputTopics = w.simTopicCheck(&calls)
		c.Fold = func(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
			folds++
			return audited(key, state, exists, rec)
		}
	})
	first := w.runner(e)
	var err error
	for range 10 { // Run, bounded: without the check it would restart for ever
		if err = first.Step(context.Background()); err != nil {
			break
		}
		w.c.Advance(time.Second)
	}
	ce, ok := errors.AsType[*store.ConfigError](err)
	if !ok || ce.Subject != `output topic "dead"` {
		t.Fatalf("Step = %v, want the *store.ConfigError of output topic \"dead\"", err)
	}
	if folds != 0 || calls.Load() != 1 {
		t.Fatalf("%d folds and %d checks before Step returned, want 0 and 1", folds, calls.Load())
	}
	for p := range int32(2) {
		if off, ok := w.c.CommittedOffset("bank", store.TopicPartition{Topic: "accounts", Partition: p}); ok {
			t.Fatalf("accounts/%d committed %d", p, off)
		}
	}

	if err := w.c.CreateTopic("dead", sim.TopicConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	calls.Store(0)
	r := w.runner(w.engine(time.Second, func(c *engine.Config[int]) {
		c.Poison, c.DeadLetterTopic = engine.DeadLetterPoison, "dead"
		c.CheckOutputTopics = w.simTopicCheck(&calls)
	}))
	w.drain(r)
	w.check(r)
	if calls.Load() != 1 {
		t.Fatalf("%d checks, want 1", calls.Load())
	}
}

// A dead letter is counted and logged once it is written, not when its
// record is skipped: while the emit that carries it fails, nothing says
// dead_lettered; once it is delivered, the count is 1 and the WARN line
// there (at least once: Emit; exactly once: the batch's transaction).
func TestDeadLetterIsCountedOnceWrittenOnSim(t *testing.T) {
	for _, eos := range []bool{false, true} {
		t.Run(modeName(eos), func(t *testing.T) {
			w := newDeadLetterWorld(t, eos)
			reg := prometheus.NewRegistry()
			m, err := prom.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			logs := &logCount{}
			dead := store.TopicPartition{Topic: "dead", Partition: store.OutputPartition([]byte("bob"), 2)}
			refused := errors.New("NOT_LEADER_OR_FOLLOWER (simulated)")
			w.c.FailProduce(dead, refused)
			w.produce("bob=+5")
			w.poisonAt()
			w.produce("alice=+3")
			r := w.runner(w.engine(time.Second, func(c *engine.Config[int]) {
				c.Observer, c.Logger = m, slog.New(logs)
			}))
			counted := func() float64 { return poisonCounted(t, reg, engine.PoisonDeadLettered) }
			ctx := context.Background()
			for range 10 {
				if err := r.Step(ctx); err != nil && !errors.Is(err, refused) {
					t.Fatal(err)
				}
				w.c.Advance(time.Second)
			}
			if n := counted(); n != 0 || strings.Contains(logs.String(), "dead_lettered") {
				t.Fatalf("while the dead-letter topic refuses writes: %v dead_lettered, logs:\n%s", n, logs)
			}
			w.c.FailProduce(dead, nil)
			w.drain(r)
			w.check(r)
			if n := counted(); n < 1 || !strings.Contains(logs.String(), "dead_lettered") {
				t.Fatalf("once written: %v dead_lettered, logs:\n%s", n, logs)
			}
		})
	}
}

// Under StopOnPoison the partition commits what it folded before the
// poison record only once those records' outputs are delivered: here the
// emit of the poll's earlier outputs fails, so nothing is committed past
// them, and a restart replays them (their outputs are made again).
func TestAPoisonStopCommitsNothingPastUndeliveredOutputsOnSim(t *testing.T) {
	w := newSimWorld(t)
	w.produce("alice=+1", "alice=+2", "alice=+3", "alice=oops")
	refused := errors.New("MESSAGE_TOO_LARGE (simulated)")
	r := w.runner(w.engineWith(func(c *engine.Config[int]) {
		c.StartEmit = func(_ context.Context, outs []engine.Output) func() error {
			return func() error { return refused }
		}
	}))
	ctx := context.Background()
	var err error
	for range 10 {
		if err = r.Step(ctx); err != nil {
			break
		}
		w.c.Advance(time.Second)
	}
	var fe *engine.FoldError
	if !errors.As(err, &fe) {
		t.Fatalf("Step = %v, want the poison record's *FoldError", err)
	}
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	if off, ok := w.c.CommittedOffset("bank", tp); ok && off > 0 {
		t.Fatalf("committed offset %d: the commit covers outputs that were never delivered", off)
	}
}

// refusingWorld is an eosWorld with a topic "notes" whose
// max.message.bytes is noteLimit, where notedTo sends notes: the broker
// refuses a longer note's output for good, in both modes (at least once,
// refusingEmit reports it as the kafkaio.Emitter does).
func refusingWorld(t *testing.T, eos bool, poison engine.PoisonPolicy) *eosWorld {
	w := newEOSWorld(t, eos)
	if err := w.c.CreateTopic("notes", sim.TopicConfig{Partitions: 2, MaxMessageBytes: noteLimit}); err != nil {
		t.Fatal(err)
	}
	if poison == engine.DeadLetterPoison {
		if err := w.c.CreateTopic("dead", sim.TopicConfig{Partitions: 2}); err != nil {
			t.Fatal(err)
		}
	}
	w.mods = append(w.mods, func(c *engine.Config[int]) {
		c.Fold = notedTo("notes")
		c.OutputTopics = append(c.OutputTopics, "notes")
		c.Poison = poison
		if poison == engine.DeadLetterPoison {
			c.DeadLetterTopic = "dead"
		}
		if !eos {
			c.Emit = w.refusingEmit
		}
	})
	return w
}

const noteLimit = 4096

// notedTo is noted with its notes sent to topic.
func notedTo(topic string) engine.FoldFunc[int] {
	return func(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
		res, err := noted(key, state, exists, rec)
		for i := range res.Outputs() {
			res.Outputs()[i].Topic = topic
		}
		return res, err
	}
}

// refusingEmit is emitPlain reporting the outputs the cluster refuses
// for good in EmitError.Refused, as the kafkaio.Emitter does; the others are
// delivered.
func (w *eosWorld) refusingEmit(_ context.Context, outs []engine.Output) error {
	var first *engine.EmitError
	for i, o := range outs {
		cfg, _ := w.c.Topic(o.Topic)
		tp := store.TopicPartition{Topic: o.Topic, Partition: store.OutputPartition(o.Key, cfg.Partitions)}
		_, err := w.c.Produce(tp, wire.Record{Key: o.Key, Value: o.Value, Headers: o.Headers})
		switch {
		case err == nil:
		case errors.Is(err, kerr.MessageTooLarge):
			if first == nil {
				first = &engine.EmitError{Topic: o.Topic, Partition: tp.Partition, Key: o.Key, Err: err}
			}
			first.Failed++
			first.Refused = append(first.Refused, i)
		default:
			return err
		}
	}
	if first != nil {
		first.Total = len(outs)
		return first
	}
	return nil
}

// An output the broker refuses for good (over its topic's
// max.message.bytes, within MaxOutputBytes) is its input record's
// failure, and goes through Config.Poison in both output modes:
// StopOnPoison ends the run with the *engine.FoldError naming the input
// partition, offset and key, and commits nothing past the record;
// SkipPoison skips the record, DeadLetterPoison dead-letters it, and the
// run goes on with every other record folded and its outputs delivered
// (exactly once: once).
func TestOutputTheBrokerRefusesGoesThroughThePoisonPolicyOnSim(t *testing.T) {
	tooLong := strings.Repeat("x", noteLimit)
	for _, eos := range []bool{false, true} {
		for _, poison := range []engine.PoisonPolicy{engine.StopOnPoison, engine.SkipPoison, engine.DeadLetterPoison} {
			t.Run(modeName(eos)+"/"+poison.String(), func(t *testing.T) {
				w := refusingWorld(t, eos, poison)
				w.produce("bob=+5", "alice=+3", "bob=first note")
				bad := store.TopicPartition{Topic: "accounts", Partition: 1}
				_, _, badOffset, _ := w.c.Offsets(bad)
				w.produce("bob="+tooLong, "bob=+2", "carol=small note", "alice=+1")
				m, reg := newMetrics(t)
				r := w.runner(w.engine(time.Second, func(c *engine.Config[int]) { c.Observer = m }))
				if poison == engine.StopOnPoison {
					err := w.stepUntilError(r, 20*time.Second, nil)
					fe, ok := errors.AsType[*engine.FoldError](err)
					if !ok || fe.Input != bad || fe.Offset != badOffset || string(fe.Key) != "bob" {
						t.Fatalf("Step = %v, want the *engine.FoldError of %s offset %d key bob", err, bad, badOffset)
					}
					if !errors.Is(err, kerr.MessageTooLarge) {
						t.Fatalf("%v does not match the broker's MESSAGE_TOO_LARGE", err)
					}
					if off, _ := w.c.CommittedOffset("bank", bad); off > badOffset {
						t.Fatalf("%s committed at %d, past the record at %d", bad, off, badOffset)
					}
					return
				}
				w.drain(r)
				w.check(r)
				got := w.values("notes", true)
				if got[tooLong] != 0 || got["small note"] < 1 || got["first note"] < 1 {
					t.Fatalf("notes: the long one %d times, small note %d, first note %d: want the others delivered, the long one not",
						got[tooLong], got["small note"], got["first note"])
				}
				if eos && (got["small note"] != 1 || got["first note"] != 1) {
					t.Fatalf("notes %v: exactly once, each once", got)
				}
				action := engine.PoisonSkipped
				if poison == engine.DeadLetterPoison {
					action = engine.PoisonDeadLettered
					dl := w.deadLetters(t)
					origin := "1:" + strconv.FormatInt(badOffset, 10)
					if dl[origin] < 1 || len(dl) != 1 || eos && dl[origin] != 1 {
						t.Fatalf("dead letters %v, want %s's (exactly once: once)", dl, origin)
					}
				}
				if n := poisonCounted(t, reg, action); n < 1 || eos && n != 1 {
					t.Fatalf("%s poison records counted %v, want the refused one", action, n)
				}
			})
		}
	}
}

// poisonCounted is snapfence_poison_records_total of action in reg.
func poisonCounted(t *testing.T, reg *prometheus.Registry, action string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "snapfence_poison_records_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "action" && l.GetValue() == action {
					return s.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A timer whose output the broker refuses for good is the timer's
// failure: under SkipPoison it is removed, as a failing handler's timer
// is, the key keeps its state, and the run goes on, in both modes.
func TestTimerOutputTheBrokerRefusesIsSkippedOnSim(t *testing.T) {
	tooLong := strings.Repeat("x", noteLimit)
	for _, eos := range []bool{false, true} {
		t.Run(modeName(eos), func(t *testing.T) {
			w := refusingWorld(t, eos, engine.SkipPoison)
			w.produce("bob=+5")
			w.c.Produce(store.TopicPartition{Topic: "accounts", Partition: 1}, wire.Record{Key: []byte("bob"), Value: []byte("remind")})
			m, reg := newMetrics(t)
			r := w.runner(w.engine(time.Second, func(c *engine.Config[int]) {
				c.Observer = m
				fold := c.Fold
				c.Fold = func(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
					if string(rec.Value) == "remind" {
						return timerFold(key, state, exists, rec)
					}
					return fold(key, state, exists, rec)
				}
				c.OnTimer = func(key []byte, state int, _ engine.Timer) (engine.Result[int], error) {
					return engine.Set(state + 1000).With(engine.Output{Topic: "notes", Key: key, Value: []byte(tooLong)}), nil
				}
			}))
			for range 3 * timerDelay / time.Second {
				if err := r.Step(context.Background()); err != nil {
					t.Fatal(err)
				}
				w.c.Advance(time.Second)
			}
			w.produce("bob=+2", "carol=small note")
			w.drain(r)
			w.check(r)
			if got := w.values("notes", true); got[tooLong] != 0 || got["small note"] < 1 {
				t.Fatalf("notes: the timer's %d times, small note %d", got[tooLong], got["small note"])
			}
			if n := poisonCounted(t, reg, engine.PoisonSkipped); n < 1 || eos && n != 1 {
				t.Fatalf("skipped poison counted %v, want the timer", n)
			}
		})
	}
}
