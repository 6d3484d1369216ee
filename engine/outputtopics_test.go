package engine_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/sim"
)

// Under ExactlyOnce an output for a topic Config.OutputTopics does not
// list stops the run with a configuration error naming the topic and the
// field, before its transaction begins: nothing of the batch commits.
func TestAnUndeclaredOutputTopicStopsRunOnSim(t *testing.T) {
	w := newSimWorld(t)
	if err := w.c.CreateTopic("balances", sim.TopicConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	w.produce("alice=+1", "dave=+2")
	e := w.engineWith(func(c *engine.Config[int]) { c.ExactlyOnce, c.OutputTopics = true, []string{"audit-not-balances"} })
	if err := w.c.CreateTopic("audit-not-balances", sim.TopicConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	r := w.runner(e)
	err := w.stepUntilError(r, 10*time.Second, nil)
	ce, ok := errors.AsType[*store.ConfigError](err)
	if !ok || ce.Subject != `output topic "balances"` || !strings.Contains(err.Error(), "Config.OutputTopics") ||
		!errors.Is(err, store.ErrMisconfigured) {
		t.Fatalf("Step = %v, want a *store.ConfigError naming output topic \"balances\" and Config.OutputTopics", err)
	}
	for p := range int32(2) {
		if off, ok := w.c.CommittedOffset("bank", store.TopicPartition{Topic: "accounts", Partition: p}); ok {
			t.Fatalf("accounts/%d committed %d though its batch was refused", p, off)
		}
	}
}

func TestOutputTopicsAreChecked(t *testing.T) {
	w := newSimWorld(t)
	_, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: w.store, ExactlyOnce: true,
		OutputTopics: []string{"ok", "not ok"}})
	ce, ok := errors.AsType[*store.ConfigError](err)
	if !ok || ce.Subject != "engine.Config.OutputTopics[1]" {
		t.Fatalf("New = %v, want a *store.ConfigError naming OutputTopics[1]", err)
	}
}

// leftoverStore is a store whose takeovers of one partition find a
// transaction of the partition's lineage left open until released: what
// store/kafka answers while a forgotten batch is open (and
// AbortHangingTransactions is off), until an operator aborts it.
type leftoverStore struct {
	store.Backend
	held store.TopicPartition
	mu   sync.Mutex
	open bool
	// outputs are the Outputs of every acquisition, in order.
	outputs [][]string
}

func (s *leftoverStore) Acquire(ctx context.Context, a store.Acquisition) (store.Partition, error) {
	s.mu.Lock()
	s.outputs = append(s.outputs, a.Outputs)
	open := s.open && a.Input == s.held
	s.mu.Unlock()
	if open {
		return nil, &kafka.HangingTransactionError{Takeover: true, Input: a.Input, Snapshots: a.Input,
			Hanging: []kafka.HangingTransaction{{OpenTransaction: kafka.OpenTransaction{
				Partition: store.TopicPartition{Topic: "balances", Partition: 1}, ProducerID: 7, StartOffset: 3}, OwnLineage: true}},
			NotAborted: "kafka.Config.AbortHangingTransactions is off", Bootstrap: "broker:9092"}
	}
	return s.Backend.Acquire(ctx, a)
}

// A partition whose takeover finds a transaction of its lineage left open
// waits, reported held with the reason, while the other partition folds
// and commits; once the transaction is aborted it resumes in the same
// runner, and every acquisition declared the output topics.
func TestATakeoverThatFindsATransactionLeftOpenWaitsOnSim(t *testing.T) {
	w := newSimWorld(t)
	if err := w.c.CreateTopic("balances", sim.TopicConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	ls := &leftoverStore{Backend: w.store, held: accounts0, open: true}
	w.store = ls
	w.produce("dave=+1", "bob=+5") // dave: accounts/0; bob: accounts/1
	r := w.runner(w.engineWith(func(c *engine.Config[int]) {
		c.ExactlyOnce, c.OutputTopics, c.UnstableOffsetTimeout = true, []string{"balances"}, time.Hour
	}))
	ctx := context.Background()
	step := func() {
		t.Helper()
		if err := r.Step(ctx); err != nil {
			t.Fatal(err)
		}
		w.c.Advance(time.Second)
	}
	for range 60 {
		if w.committedAtEnd(accounts1) {
			break
		}
		step()
	}
	if !w.committedAtEnd(accounts1) || slices.Contains(r.Flows(), accounts0) {
		t.Fatalf("accounts/1 committed to its end %v, flows %v: want accounts/1 done while accounts/0 waits", w.committedAtEnd(accounts1), r.Flows())
	}
	w.produce("alice=+3") // accounts/1 goes on
	for range 10 {
		step()
	}
	if !w.committedAtEnd(accounts1) {
		t.Fatal("accounts/1 stopped while accounts/0 waited")
	}
	i := slices.IndexFunc(r.Status().Partitions, func(p engine.PartitionStatus) bool { return p.Input == accounts0 })
	if i < 0 {
		t.Fatalf("accounts/0 is not in the status %+v", r.Status().Partitions)
	}
	if p := r.Status().Partitions[i]; p.State != engine.StateWaiting || !p.Held || !errors.Is(p.Err, store.ErrHangingTransaction) ||
		!strings.Contains(p.Err.Error(), "abort --topic balances --partition 1 --start-offset 3") {
		t.Fatalf("accounts/0's status %+v, want waiting, held, with the hanging transaction and its command", p)
	}
	ls.mu.Lock()
	ls.open = false // the operator's abort
	ls.mu.Unlock()
	w.drain(r)
	if !slices.Contains(r.Flows(), accounts0) {
		t.Fatalf("accounts/0 did not resume after the abort (flows %v)", r.Flows())
	}
	w.check(r)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, outs := range ls.outputs {
		if !slices.Equal(outs, []string{"balances"}) {
			t.Fatalf("an acquisition declared outputs %q, want [balances]", outs)
		}
	}
}
