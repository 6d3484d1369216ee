package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// txns records transaction events; it is no RecoveryObserver.
type txns struct {
	name string
	log  *[]string
}

func (o txns) OnTransaction(e store.TransactionEvent) {
	*o.log = append(*o.log, fmt.Sprintf("%s tx %d", o.name, e.Offset))
}

// both records both kinds of event.
type both struct{ txns }

func (o both) OnRecovery(e store.RecoveryEvent) {
	*o.log = append(*o.log, fmt.Sprintf("%s recovery %d/%d", o.name, e.Position, e.Target))
}

func TestObserversFanOutInOrderAndForwardRecoveryEvents(t *testing.T) {
	var log []string
	a, b, c := both{txns{"a", &log}}, txns{"b", &log}, both{txns{"c", &log}}
	// A nil observer is skipped; a nested fan-out is flattened.
	obs := store.Observers(a, nil, store.Observers(b, c))
	obs.OnTransaction(store.TransactionEvent{Offset: 7})
	r, ok := obs.(store.RecoveryObserver)
	if !ok {
		t.Fatal("Observers is not a RecoveryObserver")
	}
	r.OnRecovery(store.RecoveryEvent{Position: 1, Target: 2})
	want := []string{"a tx 7", "b tx 7", "c tx 7", "a recovery 1/2", "c recovery 1/2"}
	if !slices.Equal(log, want) {
		t.Fatalf("events = %q, want %q", log, want)
	}
	// None at all: an observer that does nothing, never a nil one.
	empty := store.Observers()
	empty.OnTransaction(store.TransactionEvent{})
	empty.(store.RecoveryObserver).OnRecovery(store.RecoveryEvent{})
}

// A backend given Observers reports to each: its transactions to all, its
// recovery reads to the RecoveryObservers among them.
func TestObserversOnABackend(t *testing.T) {
	c := sim.New(sim.Config{Seed: 1})
	if err := c.CreateTopic("in", sim.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic("obs-in-snapshots", sim.TopicConfig{Partitions: 1, Compacted: true}); err != nil {
		t.Fatal(err)
	}
	var log []string
	b, err := c.NewBackend(sim.BackendConfig{Mode: store.Plain, Application: "obs",
		Observer: store.Observers(txns{"plain", &log}, both{txns{"both", &log}})})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	id := store.IdentityFunc(func() store.GroupIdentity { return store.GroupIdentity{Group: "g", MemberID: "m", Generation: 1} })
	ctx := context.Background()
	p, err := b.Acquire(ctx, store.Acquisition{Input: store.TopicPartition{Topic: "in"}, Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	if errs := p.StartWriteBatch(ctx, []store.Snapshot{{Key: []byte("k"), Value: []byte("v"), Offset: 3}}).Wait(ctx); errs[0] != nil {
		t.Fatal(errs[0])
	}
	for _, err := range p.Recover(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
	}
	var tx, rec []string
	for _, l := range log {
		if slices.Contains([]string{"plain tx 0", "both tx 0"}, l) {
			tx = append(tx, l)
		} else {
			rec = append(rec, l)
		}
	}
	if !slices.Equal(tx, []string{"plain tx 0", "both tx 0"}) {
		t.Errorf("transaction events = %q, want the write's to both observers, in order", tx)
	}
	if len(rec) == 0 || rec[len(rec)-1] != "both recovery 1/1" {
		t.Errorf("recovery events = %q, want the read's, to the RecoveryObserver only, ending at 1/1", rec)
	}
}

// Several observers on one backend: a count of committed transactions and
// a log of failed ones.
func ExampleObservers() {
	var committed, failed int
	obs := store.Observers(
		store.ObserverFunc(func(e store.TransactionEvent) {
			if e.Err == nil {
				committed++
			}
		}),
		store.ObserverFunc(func(e store.TransactionEvent) {
			if e.Err != nil {
				failed++
			}
		}),
	)
	// Pass obs as the backend's Observer (kafka.Config.Observer,
	// sim.BackendConfig.Observer); here, two events by hand.
	obs.OnTransaction(store.TransactionEvent{})
	obs.OnTransaction(store.TransactionEvent{Err: store.ErrFenced})
	fmt.Println(committed, failed)
	// Output: 1 1
}
