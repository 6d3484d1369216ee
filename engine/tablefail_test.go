package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
)

// A fold whose table lookup fails (the table down, a partition of it
// failed) is not a poison record: the partition restarts from its
// committed state and folds the record again once the table answers, so
// nothing is dead-lettered and the state is exact. The negative control
// returns the same failure without ErrTableUnavailable: the record is
// dead-lettered as poison, and its deposit is lost from the state.
func TestAFailedTableLookupIsFoldedAgainNotPoisonOnSim(t *testing.T) {
	for _, c := range []struct {
		name        string
		wrap        func(error) error
		deadLetters int
	}{
		{"table unavailable", func(err error) error { return fmt.Errorf("looking bob up: %w: %w", err, engine.ErrTableUnavailable) }, 0},
		{"negative control: a plain error", func(err error) error { return fmt.Errorf("looking bob up: %w", err) }, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newSimWorld(t)
			down := 2 // the table fails bob's first two lookups
			var letters int
			e := w.engineWith(func(cfg *engine.Config[int]) {
				cfg.Poison, cfg.DeadLetterTopic = engine.DeadLetterPoison, "dead"
				cfg.Emit = func(_ context.Context, outs []engine.Output) error {
					for _, o := range outs {
						if o.Topic == "dead" {
							letters++
						}
					}
					return nil
				}
				cfg.CheckOutputTopics = func(context.Context, []string) error { return nil }
				cfg.Fold = func(key []byte, st int, exists bool, rec engine.Record) (engine.Result[int], error) {
					if string(key) == "bob" && down > 0 {
						down--
						return engine.Result[int]{}, c.wrap(errors.New("connection refused"))
					}
					return balance(key, st, exists, rec)
				}
			})
			r := w.runner(e)
			w.produce("alice=+5", "bob=+7", "bob=+1")
			w.drain(r)
			if letters != c.deadLetters {
				t.Fatalf("%d dead letters, want %d", letters, c.deadLetters)
			}
			if c.deadLetters == 0 {
				w.check(r)
				return
			}
			if st, _, _ := r.State(store.TopicPartition{Topic: "accounts", Partition: 1}, []byte("bob")); st == 8 {
				t.Fatal("the dead-lettered deposit is in bob's state")
			}
		})
	}
}
