package backend

import (
	"strings"
	"testing"

	"github.com/snapfence/snapfence/store"
)

// Check refuses what no backend can run, naming the backend, and fills in
// the spec's defaults (the backends' contract suites cover the rest of
// the skeleton).
func TestCheckRefusesAndDefaults(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "x"}, "x: invalid mode"},
		{Config{Name: "x", Mode: store.Transactional}, "x: TransactionalIDPrefix is required in transactional mode"},
	} {
		if _, err := c.cfg.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
	got, err := Config{Name: "x", Mode: store.Plain}.Check()
	if err != nil {
		t.Fatal(err)
	}
	if got.SnapshotTopic("in") != "in-snapshots" || got.MaxWritesPerTransaction != store.DefaultMaxWritesPerTransaction ||
		got.MaxValueBytes != store.DefaultMaxValueBytes || got.TransactionTimeout != store.DefaultTransactionTimeout ||
		got.RecoveryStallTimeout != store.DefaultRecoveryStallTimeout || got.Logger == nil || got.Now == nil {
		t.Fatalf("defaults not filled in: %+v", got)
	}
	if id := store.TransactionalID("app", store.TopicPartition{Topic: "orders", Partition: 3}); id != "app-orders-3" {
		t.Fatalf("transactional.id %q, want app-orders-3", id)
	}
}
