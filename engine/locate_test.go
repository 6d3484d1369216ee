package engine_test

import (
	"errors"
	"testing"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
)

// Locate names a key's partition by the partitioner and says whether
// this instance serves it; before any group report, and for a topic
// that is not an input, it says why it cannot.
func TestLocateSaysWhichPartitionAndWhetherItIsServedHereOnSim(t *testing.T) {
	w := newSimWorld(t)
	e := w.engineWith(func(cfg *engine.Config[int]) {
		// The world's producer partitions by key length.
		cfg.Partitioner = func(key []byte, n int32) int32 { return int32(len(key)) % n }
	})
	if _, err := e.Locate("accounts", []byte("bob")); !errors.Is(err, engine.ErrNoGroupReport) {
		t.Fatalf("Locate before Run: %v, want ErrNoGroupReport", err)
	}
	r := w.runner(e)
	w.produce("bob=+7")
	w.drain(r)
	loc, err := e.Locate("accounts", []byte("bob"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.TopicPartition{Topic: "accounts", Partition: 1}); loc.Input != want || !loc.Local || !loc.Assigned {
		t.Fatalf("Locate(bob) = %+v, want %s, served here", loc, want)
	}
	if _, err := e.Locate("ledger", []byte("bob")); err == nil {
		t.Fatal("Locate on a topic that is not an input: no error")
	}
}
