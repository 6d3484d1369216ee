package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
)

// The transient class on kfake (docs/operations.md): the snapshot
// partition's leader refuses every write for five minutes, either as
// franz-go retries by itself (NOT_LEADER_FOR_PARTITION: each transaction
// runs into the transaction timeout) or as it does not (an error it fails
// the write on at once). Run goes on; the partition restarts from the
// committed state with a backoff, so the broker sees a few attempts, not
// one a second; the restarts are in the status and a metric, logged at
// WARN at a bounded rate, never ERROR; once the leader is back the state
// is the fold of every record, each once.
func TestTransientFailureRestartsWithBackoffOnKfake(t *testing.T) {
	const outage = 5 * time.Minute
	for name, tc := range map[string]struct {
		err *kerr.Error
		// maxRestarts bounds the restarts in the outage (-1: not
		// checked): the restart backoff doubles from 200 ms to 30 s with
		// jitter down to half (docs/operations.md), so at most about 8
		// restarts in the first 26 s and one per 15 s after; without a
		// backoff a restart would follow each 1 s persist.
		maxRestarts int
		// is is what the restarts' failure matches.
		is error
	}{
		"retried by franz-go until the transaction timeout": {err: kerr.NotLeaderForPartition, maxRestarts: -1, is: store.ErrTimedOut},
		"failed by franz-go at once":                        {err: kerr.UnknownServerError, maxRestarts: 8 + int(outage/(15*time.Second)) + 1, is: kerr.UnknownServerError},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t)
				hot := store.TopicPartition{Topic: "accounts", Partition: 1}
				w.produce("bob=+5", "alice=+3", "dave=+1")
				logs := &logCount{}
				e := w.engineWith(func(c *engine.Config[int]) { c.Logger = slog.New(logs) })
				r := w.runner(e, protocols["classic-cooperative"])
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				var runErr error
				ran := make(chan struct{})
				wg.Go(func() { defer close(ran); runErr = r.Run(ctx) })
				defer wg.Wait()
				defer cancel()
				for !w.caughtUp() {
					time.Sleep(100 * time.Millisecond)
				}
				h := w.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "bank-accounts-snapshots", Err: tc.err, Count: -1})
				w.produce("bob=+1", "alice=+2", "dave=+4")
				time.Sleep(outage)
				select {
				case <-ran:
					t.Fatalf("Run returned %v during a transient outage", runErr)
				default:
				}
				ps := partitionStatus(t, e.Status(), hot)
				t.Logf("after the outage: %s restarts %d, last failure: %v; the broker refused %d writes", ps.State, ps.Restarts, ps.LastFailure, h.Hits())
				if ps.Restarts < 2 || !errors.Is(ps.LastFailure, tc.is) {
					t.Fatalf("%s: %d restarts, last failure %v; want at least 2, matching %v", hot, ps.Restarts, ps.LastFailure, tc.is)
				}
				if tc.maxRestarts > 0 && ps.Restarts > tc.maxRestarts {
					t.Fatalf("%d restarts in %v, want at most %d: the restarts do not back off", ps.Restarts, outage, tc.maxRestarts)
				}
				h.Remove()
				for !w.caughtUp() {
					time.Sleep(100 * time.Millisecond)
				}
				cancel()
				wg.Wait()
				if runErr != nil {
					t.Fatalf("Run = %v", runErr)
				}
				// The rate bound is per partition (both snapshot
				// partitions refused writes).
				maxWarns := int(outage/(30*time.Second)) + 1
				for p := range int32(2) {
					in := store.TopicPartition{Topic: "accounts", Partition: p}
					if warns := logs.count(slog.LevelWarn, in.String()); warns == 0 || warns > maxWarns {
						t.Fatalf("%d WARN lines for %s, want 1 to %d (at most one per 30 s):\n%s", warns, in, maxWarns, logs)
					}
				}
				if n := logs.errorLines(); n != 0 {
					t.Fatalf("%d ERROR lines, want 0:\n%s", n, logs)
				}
				fresh := w.runner(w.engine(), protocols["classic-cooperative"])
				w.drain(fresh)
				w.check(fresh)
				if err := fresh.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// partitionStatus is tp's entry in st.
func partitionStatus(t *testing.T, st engine.Status, tp store.TopicPartition) engine.PartitionStatus {
	t.Helper()
	for _, ps := range st.Partitions {
		if ps.Input == tp {
			return ps
		}
	}
	t.Fatalf("%s is not in the status %+v", tp, st)
	return engine.PartitionStatus{}
}
