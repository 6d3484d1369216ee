//go:build it

package kfakeworld

import (
	"testing"

	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
)

// TestViewShowsOnlyCommittedSnapshotsOnKfake on Kafka 4.3.1, in real
// time: a view open while a stale owner flushes (fenced by the producer
// epoch, and by the generation under classic cooperative) and while a
// crashed owner's open transaction waits for the takeover's abort shows
// only the committed snapshots.
func TestViewShowsOnlyCommittedSnapshotsOnKafka(t *testing.T) {
	aborted := 0
	for _, name := range []string{"stale-flush-on-revoke", "takeover-abort-after-hard-crash", "revoke-flush-classic-cooperative"} {
		s, ok := world.ScenarioNamed(name)
		if !ok {
			t.Fatalf("no scenario %q", name)
		}
		t.Run(name, func(t *testing.T) {
			w, err := New(Config{Mode: store.Transactional, Protocol: s.Protocol, Brokers: kafkatest.Brokers(t), Logf: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			failed, n := watchScenario(t, w, s.Steps)
			for _, f := range failed {
				t.Error(f)
			}
			t.Logf("%d aborted snapshot records in the log", n)
			aborted += n
		})
	}
	if aborted == 0 {
		t.Fatal("no scenario left an aborted snapshot in the log: the check is vacuous")
	}
}
