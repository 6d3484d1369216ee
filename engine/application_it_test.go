//go:build it

package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// On Kafka 4.3.1: application A runs; B starts with another name, group
// and snapshot topic but A's transactional.id prefix. B's Run fails with
// a ForeignStateError naming the id before it took any over, and A folds
// and commits the records produced after B's start with no restart: the
// coordinator reports A's ids as committing to A's snapshot topic, where
// B never writes.
func TestASharedTransactionalIDPrefixStopsTheNewcomerOnKafka(t *testing.T) {
	w := newBrokerWorld(t)
	w.produce("alice=+10", "bob=+5", "carol=+7")
	a := w.runner(protocols["classic-cooperative"])
	w.drain(a)

	audit := w.topic + "-audit"
	b, err := kafka.New(context.Background(), kafka.Config{Mode: store.Transactional, SeedBrokers: w.brokers,
		Application: audit, TransactionalIDPrefix: w.topic, CreateTopics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.Close()
		w.adm.DeleteTopics(context.Background(), kafka.DefaultSnapshotTopic(audit, w.topic))
	})
	e, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bDone := make(chan error, 1)
	go func() {
		bDone <- e.Run(ctx, kafkaio.Config{SeedBrokers: w.brokers, Group: audit + "-group", Topics: []string{w.topic},
			ClientOpts: []kgo.Opt{kgo.SessionTimeout(6 * time.Second)}})
	}()
	w.produce("alice=+1", "dave=+4", "bob=-2")

	var bErr error
	bReturned := false
	deadline := time.Now().Add(time.Minute)
	for !(bReturned && w.caughtUp()) {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: the newcomer returned %t (%v), the first caught up %t", bReturned, bErr, w.caughtUp())
		}
		if err := a.Step(context.Background()); err != nil {
			t.Fatalf("the first application's step: %v", err)
		}
		select {
		case bErr = <-bDone:
			bReturned = true
		default:
		}
	}
	var fe *store.ForeignStateError
	if !errors.As(bErr, &fe) || !strings.HasPrefix(fe.TransactionalID, w.topic+"-") || fe.Application != audit {
		t.Fatalf("the newcomer's Run returned %v, want a ForeignStateError naming one of the first's transactional.ids", bErr)
	}
	w.check(a)
	for _, p := range a.Status().Partitions {
		if p.Restarts != 0 {
			t.Errorf("the first application's %s restarted %d times: the newcomer disturbed it", p.Input, p.Restarts)
		}
	}
	t.Logf("the newcomer: %v", bErr)
}
