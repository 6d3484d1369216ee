//go:build it

package operator_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/service"
	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/internal/operator"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/internal/world/kfakeworld"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// verifyOnKafka runs Verify against target on the shared broker and logs
// its text.
func verifyOnKafka(t *testing.T, brokers []string, target operator.Target) *operator.VerifyReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tool, err := operator.Open(ctx, operator.Conn{Brokers: brokers}, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tool.Close()
	r, err := tool.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	_ = r.Text(&text)
	t.Logf("verify:\n%s", text.String())
	return r
}

func sumFold(_ []byte, total int64, _ bool, rec engine.Record) (engine.Result[int64], error) {
	n, err := strconv.ParseInt(string(rec.Value), 10, 64)
	if err != nil {
		return engine.Result[int64]{}, err
	}
	return engine.Set(total + n), nil
}

// The engine itself, in Transactional mode (engine/service on the
// broker): it folds an input on two partitions, commits to the end and
// stops; what it leaves holds every invariant Verify checks, with the
// offsets committed by the application over the snapshots that cover
// them.
func TestVerifyAfterATransactionalEngineRunOnKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	run := time.Now().UnixNano()
	app, input := fmt.Sprintf("verify-it-%d", run), fmt.Sprintf("verify-it-orders-%d", run)
	cfg := service.Config[int64]{Application: app, Brokers: brokers, Input: input, CreateTopics: true, Partitions: 2,
		Engine: engine.Config[int64]{Fold: sumFold, Codec: engine.Int64(), CommitInterval: 50 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc, err := service.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(input))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	defer func() {
		_, _ = adm.DeleteTopics(context.Background(), input, kafka.DefaultSnapshotTopic(app, input))
		_, _ = adm.DeleteGroup(context.Background(), app)
	}()
	for i := range 200 {
		r := &kgo.Record{Key: []byte("k" + strconv.Itoa(i%13)), Value: []byte(strconv.Itoa(i))}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, input)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset })
	if len(want) != 2 || want[0] == 0 || want[1] == 0 {
		t.Fatalf("input ends %v: want records on both partitions", want)
	}
	// The engine is done when the group committed the input's ends.
	deadline := time.Now().Add(2 * time.Minute) // a bound on a hang, not a timing
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		got := map[int32]int64{}
		if os, err := adm.FetchOffsetsForTopics(ctx, app, input); err == nil {
			os.Each(func(o kadm.OffsetResponse) {
				if o.Err == nil && o.At >= 0 {
					got[o.Partition] = o.At
				}
			})
		}
		if maps.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group committed %v, want the input's ends %v", got, want)
		}
		<-tick.C
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("the service: %v", err)
	}

	r := verifyOnKafka(t, brokers, operator.Target{Application: app, Input: input})
	if !r.OK() {
		t.Fatalf("violations after a Transactional run: %+v", r.Violations)
	}
	for _, inv := range r.Invariants {
		if inv.Status != operator.StatusOK {
			t.Errorf("invariant %s is %s", inv.Name, inv.Status)
		}
	}
	for _, p := range r.Partitions {
		if p.Committed == 0 || p.Keys == 0 || p.CommittedOffset != want[p.Partition] || p.CommittedBy != app {
			t.Errorf("partition %+v: want committed snapshots and the offset %d committed by %s", p, want[p.Partition], app)
		}
	}
}

// kafka-flow#732 on the broker, in the project's own scenario
// (world.Scenario732, as cmd/simulate's kafka world runs it): a paused
// owner wakes and flushes its stale state after the new owner flushed a
// newer one. In Plain mode the stale snapshot lands and Verify finds the
// stale overwrite on key "a"; in Transactional mode the stale flush is
// fenced and Verify finds nothing.
func TestVerifyScenario732OnKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	for _, mode := range []store.Mode{store.Plain, store.Transactional} {
		t.Run(mode.String(), func(t *testing.T) {
			name := fmt.Sprintf("verify-%d", time.Now().UnixNano())
			w, err := kfakeworld.New(kfakeworld.Config{Mode: mode, Brokers: brokers, Name: name, Logf: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close() // deletes the world's topics: after Verify
			var found []world.Violation
			for _, s := range world.Scenario732 {
				found = append(found, w.Apply(s)...)
			}
			t.Logf("the world's own checks: %v", found)
			// The world's names (kfakeworld's real-broker mode): its
			// application is its transactional.id prefix.
			base := "snapfence-simulate-" + name
			target := operator.Target{Application: base, Input: base, Group: base + "-group",
				SnapshotTopic: kafka.LegacySnapshotTopic(base), Plain: mode == store.Plain}
			r := verifyOnKafka(t, brokers, target)
			if mode == store.Transactional {
				if len(found) > 0 {
					t.Fatalf("the world saw violations with the fence: %v", found)
				}
				if !r.OK() {
					t.Fatalf("violations after the fenced scenario: %+v", r.Violations)
				}
				return
			}
			if !world.HasViolation(found, 1) {
				t.Fatalf("the world did not see the stale overwrite (%v): the scenario did not reproduce", found)
			}
			if len(r.Violations) != 1 {
				t.Fatalf("violations %+v, want the one stale overwrite", r.Violations)
			}
			v := r.Violations[0]
			if v.Check != operator.CheckOffsetRegression || v.Key != "a" || v.Partition != world.PartitionOf("a", kfakeworld.Partitions) {
				t.Fatalf("violation %+v, want an offset regression of key a on partition %d", v, world.PartitionOf("a", kfakeworld.Partitions))
			}
		})
	}
}
