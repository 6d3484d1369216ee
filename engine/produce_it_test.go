//go:build it

package engine_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// The produce failures on Kafka: what the broker refuses for good, and
// missing output topics, in both output modes.

// outputMode sets c's outputs exactly once, committing every commitEvery,
// or at least once through a kafkaio.Emitter that checks the output topics
// at start.
func (w *brokerWorld) outputMode(c *engine.Config[int], eos bool, commitEvery time.Duration) {
	if eos {
		w.eosConfig(commitEvery)(c)
		return
	}
	em := w.emitterOf()
	c.StartEmit, c.CheckOutputTopics = em.StartEmit, em.CheckTopics
}

// emitterOf is a kafkaio.Emitter on w's broker, closed with the test.
func (w *brokerWorld) emitterOf() *kafkaio.Emitter {
	em, err := kafkaio.NewEmitter(kafkaio.EmitterConfig{SeedBrokers: w.brokers})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = em.Close() })
	return em
}

// An output the broker refuses with MESSAGE_TOO_LARGE (the output topic's
// max.message.bytes is below the output, which is within MaxOutputBytes)
// is not transient but its input record's failure: under the default
// StopOnPoison, Run returns the *engine.FoldError naming the record at
// once, in both modes, instead of restarting the partition for ever while
// it shows running.
func TestOutputTheBrokerRefusesEndsRunOnKafka(t *testing.T) {
	for _, eos := range []bool{false, true} {
		t.Run(modeName(eos), func(t *testing.T) {
			w := newBrokerWorld(t)
			audit := w.topic + "-audit"
			small := "4096"
			if err := kafka.CreateTopic(context.Background(), w.prod, audit, 2, 1, map[string]*string{"max.message.bytes": &small}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.adm.DeleteTopics(context.Background(), audit) })
			// Random, so that the producer's compression does not bring it
			// under the limit.
			noise := make([]byte, 30_000)
			_, _ = rand.Read(noise)
			w.produce("bob=+5", "bob="+base64.StdEncoding.EncodeToString(noise))
			logs := &logCount{}
			r := w.runnerWith(protocols["classic-cooperative"], func(c *engine.Config[int]) {
				if eos {
					w.eosConfig(100 * time.Millisecond)(c)
					c.OutputTopics = []string{audit}
				} else {
					c.StartEmit = w.emitterOf().StartEmit
				}
				c.Logger = slog.New(logs)
				c.Fold = notedTo(audit)
			})
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			err := r.Run(ctx)
			if ctx.Err() != nil {
				t.Fatalf("Run did not return within 45s (returned %v); status %+v; logs:\n%s", err, r.Status(), logs)
			}
			if !errors.Is(err, kerr.MessageTooLarge) {
				t.Fatalf("Run = %v, want the broker's MESSAGE_TOO_LARGE", err)
			}
			bad := store.TopicPartition{Topic: w.topic, Partition: 1}
			if fe, ok := errors.AsType[*engine.FoldError](err); !ok || fe.Input != bad || fe.Offset != 1 || string(fe.Key) != "bob" {
				t.Fatalf("Run = %v, want the *engine.FoldError of %s offset 1 key bob", err, bad)
			}
			for _, ps := range r.Status().Partitions {
				if ps.Restarts > 0 {
					t.Fatalf("%s restarted %d times on a refusal no retry cures (last: %v)", ps.Input, ps.Restarts, ps.LastFailure)
				}
			}
			t.Logf("Run returned after %s: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
}

// An output over MaxOutputBytes (the default, which franz-go's default
// batch limit holds) under DeadLetterPoison, at least once with the
// built-in emitter and exactly once: the record is dead-lettered without
// its value, the run goes on, and every other record's output arrives.
func TestOversizeOutputIsDeadLetteredOnKafka(t *testing.T) {
	for _, eos := range []bool{false, true} {
		t.Run(modeName(eos), func(t *testing.T) {
			w := newBrokerWorld(t)
			ctx := context.Background()
			audit, dead := w.topic+"-audit", w.topic+"-dead"
			for _, topic := range []string{audit, dead} {
				if err := kafka.CreateTopic(ctx, w.prod, topic, 2, 1, nil); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { w.adm.DeleteTopics(context.Background(), audit, dead) })
			// Within the input producer's batch limit, over MaxOutputBytes.
			w.produce("bob=+5", "bob="+strings.Repeat("n", 999_500), "carol=small note", "bob=+2")
			r := w.runnerWith(protocols["classic-cooperative"], func(c *engine.Config[int]) {
				w.outputMode(c, eos, 100*time.Millisecond)
				c.OutputTopics = []string{audit}
				c.Poison, c.DeadLetterTopic = engine.DeadLetterPoison, dead
				c.Fold = notedTo(audit)
			})
			w.drain(r)
			w.check(r)
			if err := r.Close(ctx); err != nil {
				t.Fatal(err)
			}
			opts := []kgo.Opt{kgo.SeedBrokers(w.brokers...)}
			if got := readOutputs(t, opts, w.adm, audit, true); got["small note"] != 1 && !(got["small note"] >= 1 && !eos) {
				t.Fatalf("audit outputs %v, want the small note", got)
			}
			if got := readOutputs(t, opts, w.adm, dead, true); len(got) != 1 || got[""] < 1 {
				t.Fatalf("dead letters by value %v, want one without its value", got)
			}
		})
	}
}

// An output the broker refuses for good (over its topic's
// max.message.bytes, within MaxOutputBytes) under DeadLetterPoison, at
// least once with the built-in emitter and exactly once: the record that
// made it is dead-lettered, the run goes on, and every other record's
// output arrives (exactly once: once), also the ones folded with it.
func TestOutputTheBrokerRefusesIsDeadLetteredOnKafka(t *testing.T) {
	for _, eos := range []bool{false, true} {
		t.Run(modeName(eos), func(t *testing.T) {
			w := newBrokerWorld(t)
			ctx := context.Background()
			notes, dead := w.topic+"-notes", w.topic+"-dead"
			limit := "4096"
			if err := kafka.CreateTopic(ctx, w.prod, notes, 2, 1, map[string]*string{"max.message.bytes": &limit}); err != nil {
				t.Fatal(err)
			}
			if err := kafka.CreateTopic(ctx, w.prod, dead, 2, 1, nil); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.adm.DeleteTopics(context.Background(), notes, dead) })
			noise := make([]byte, 6000)
			_, _ = rand.Read(noise)
			long := base64.StdEncoding.EncodeToString(noise)
			w.produce("bob=+5", "bob=first note", "bob="+long, "bob=+2", "carol=small note", "alice=+1")
			r := w.runnerWith(protocols["classic-cooperative"], func(c *engine.Config[int]) {
				w.outputMode(c, eos, 100*time.Millisecond)
				c.OutputTopics = []string{notes}
				c.Poison, c.DeadLetterTopic = engine.DeadLetterPoison, dead
				c.Fold = notedTo(notes)
			})
			w.drain(r)
			w.check(r)
			if err := r.Close(ctx); err != nil {
				t.Fatal(err)
			}
			opts := []kgo.Opt{kgo.SeedBrokers(w.brokers...)}
			got := readOutputs(t, opts, w.adm, notes, true)
			if got[long] != 0 || got["first note"] < 1 || got["small note"] < 1 || eos && (got["first note"] != 1 || got["small note"] != 1) {
				t.Fatalf("notes read_committed: %d of them; first note %d, small note %d, the long one %d: want the first two (exactly once: once), not the long one",
					len(got), got["first note"], got["small note"], got[long])
			}
			letters := readOutputs(t, opts, w.adm, dead, true)
			if letters[long] < 1 || len(letters) != 1 || eos && letters[long] != 1 {
				t.Fatalf("dead letters read_committed: %d of them, the long note's %d times; want the long note's (exactly once: once)", len(letters), letters[long])
			}
		})
	}
}

// At least once with the built-in emitter and no output topic, the check
// at Run's start (Config.CheckOutputTopics) ends Run within seconds with
// the *store.ConfigError naming the topic, before anything is folded or
// committed; the same for a missing dead-letter topic.
func TestMissingOutputTopicEndsRunAtOnceAtLeastOnceOnKafka(t *testing.T) {
	for _, missing := range []string{"output", "dead-letter"} {
		t.Run(missing, func(t *testing.T) {
			w := newBrokerWorld(t)
			audit, dead := w.topic+"-audit", w.topic+"-dead"
			existing := dead
			if missing == "dead-letter" {
				existing = audit
			}
			if err := kafka.CreateTopic(context.Background(), w.prod, existing, 2, 1, nil); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.adm.DeleteTopics(context.Background(), existing) })
			w.produce("bob=+5", "bob=oops", "dave=+1")
			folds := 0
			r := w.runnerWith(protocols["classic-cooperative"], func(c *engine.Config[int]) {
				em := w.emitterOf()
				c.StartEmit, c.CheckOutputTopics, c.OutputTopics = em.StartEmit, em.CheckTopics, []string{audit}
				c.Poison, c.DeadLetterTopic = engine.DeadLetterPoison, dead
				c.Fold = func(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
					folds++
					return auditedTo(audit, audit)(key, state, exists, rec)
				}
			})
			start := time.Now()
			err := runWithin(t, r, 20*time.Second)
			want := audit
			if missing == "dead-letter" {
				want = dead
			}
			ce, ok := errors.AsType[*store.ConfigError](err)
			if !ok || ce.Subject != fmt.Sprintf("output topic %q", want) || folds != 0 {
				t.Fatalf("Run = %v after %d folds, want the *store.ConfigError of output topic %q before any", err, folds, want)
			}
			for p := range int32(2) {
				if got := w.committedOffset(store.TopicPartition{Topic: w.topic, Partition: p}); got != -1 {
					t.Fatalf("%s/%d committed at %d", w.topic, p, got)
				}
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Fatalf("Run returned after %s, want within seconds", took)
			}
			t.Logf("Run returned after %s: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
}

// An output without a key to a compacted topic, which Kafka refuses with
// INVALID_RECORD together with every record of its produce batch, under
// SkipPoison, at least once with the built-in emitter and exactly once:
// only the input that made it is skipped; the outputs of the inputs
// around it, in the same poll or batch and the same output partition,
// arrive.
func TestKeylessOutputToACompactedTopicIsSkippedAloneOnKafka(t *testing.T) {
	for _, eos := range []bool{false, true} {
		t.Run(modeName(eos), func(t *testing.T) {
			w := newBrokerWorld(t)
			ctx := context.Background()
			latest := w.topic + "-latest"
			compact := "compact"
			if err := kafka.CreateTopic(ctx, w.prod, latest, 1, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.adm.DeleteTopics(context.Background(), latest) })
			w.produce("bob=+5", "bob=one", "bob=nokey", "bob=two", "carol=three")
			m, reg := newMetrics(t)
			r := w.runnerWith(protocols["classic-cooperative"], func(c *engine.Config[int]) {
				w.outputMode(c, eos, time.Second)
				c.OutputTopics = []string{latest}
				c.Poison, c.Observer = engine.SkipPoison, m
				c.Fold = func(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
					res, err := notedTo(latest)(key, state, exists, rec)
					if string(rec.Value) == "nokey" {
						res.Outputs()[0].Key = nil
					}
					return res, err
				}
			})
			w.drain(r)
			w.check(r)
			if err := r.Close(ctx); err != nil {
				t.Fatal(err)
			}
			got := readOutputs(t, []kgo.Opt{kgo.SeedBrokers(w.brokers...)}, w.adm, latest, true)
			if got["nokey"] != 0 || got["one"] < 1 || got["two"] < 1 || got["three"] < 1 {
				t.Fatalf("outputs read_committed %v: want one, two and three, not the keyless one", got)
			}
			if n := poisonCounted(t, reg, engine.PoisonSkipped); n < 1 || eos && n != 1 {
				t.Fatalf("skipped poison counted %v, want the keyless output's input", n)
			}
		})
	}
}
