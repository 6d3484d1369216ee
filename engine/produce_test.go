package engine_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
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
			var err error
			for range 20 {
				if err = r.Step(context.Background()); err != nil {
					break
				}
				w.c.Advance(time.Second)
			}
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
