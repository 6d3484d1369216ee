package backend

import (
	"errors"
	"strings"
	"testing"
	"time"

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
		{Config{Name: "x", Mode: store.Transactional, Application: "a/b"}, `x: misconfigured: Config.Application: "a/b": '/' is not allowed`},
	} {
		if _, err := c.cfg.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
	got, err := Config{Name: "x", Mode: store.Plain, Application: "app"}.Check()
	if err != nil {
		t.Fatal(err)
	}
	if got.SnapshotTopic("in") != "app-in-snapshots" || got.TransactionalIDPrefix != "app" || !got.SnapshotTopicIsDefault || got.MaxWritesPerTransaction != store.DefaultMaxWritesPerTransaction ||
		got.MaxValueBytes != store.DefaultMaxValueBytes || got.TransactionTimeout != store.DefaultTransactionTimeout ||
		got.RecoveryStallTimeout != store.DefaultRecoveryStallTimeout || got.Logger == nil || got.Now == nil {
		t.Fatalf("defaults not filled in: %+v", got)
	}
	if id := store.TransactionalID("app", store.TopicPartition{Topic: "orders", Partition: 3}); id != "app-orders-3" {
		t.Fatalf("transactional.id %q, want app-orders-3", id)
	}
	// A deployment of before Application names itself by its prefix,
	// which it keeps.
	old, err := Config{Name: "x", Mode: store.Transactional, TransactionalIDPrefix: "orders-flow"}.Check()
	if err != nil || old.Application != "orders-flow" || old.TransactionalIDPrefix != "orders-flow" {
		t.Fatalf("prefix only: %+v, %v", old, err)
	}
}

// The byte cap's default is store.DefaultMaxBytesPerTransaction under the
// default transaction timeout, and the timeout's time budget under a
// shorter one; an explicit cap above the budget is refused with a
// *store.ConfigError naming both fixes, one at the budget is taken.
func TestCheckBoundsTheByteCapByTheTransactionTimeout(t *testing.T) {
	base := Config{Name: "x", Mode: store.Plain}
	got, err := base.Check()
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxBytesPerTransaction != store.DefaultMaxBytesPerTransaction {
		t.Fatalf("default byte cap %d, want %d", got.MaxBytesPerTransaction, store.DefaultMaxBytesPerTransaction)
	}
	if b := store.TransactionBytesBudget(store.DefaultTransactionTimeout); b != 30<<20 {
		t.Fatalf("budget of the default timeout = %d, want 30 MiB (1 MiB/s for 30 s)", b)
	}

	short := base
	short.TransactionTimeout = 10 * time.Second
	if got, err = short.Check(); err != nil {
		t.Fatal(err)
	}
	if got.MaxBytesPerTransaction != 5<<20 {
		t.Fatalf("default byte cap under a 10 s timeout = %d, want its budget, 5 MiB", got.MaxBytesPerTransaction)
	}

	short.MaxBytesPerTransaction = 5 << 20
	if _, err := short.Check(); err != nil {
		t.Fatalf("a byte cap at the budget: %v", err)
	}
	short.MaxBytesPerTransaction = 5<<20 + 1
	_, err = short.Check()
	var ce *store.ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, store.ErrMisconfigured) || ce.Subject != "Config.MaxBytesPerTransaction" ||
		!strings.HasPrefix(err.Error(), "x: ") || !strings.Contains(ce.Fix, "at most 5242880") || !strings.Contains(ce.Fix, "at least 11s") {
		t.Fatalf("a byte cap over the budget: %v, want a *store.ConfigError naming the budget and a timeout of 11s", err)
	}
}
