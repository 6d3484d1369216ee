//go:build it

package engine_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// On the real broker, Engine.Run watched through its HealthHandler by a
// real HTTP client, as a Kubernetes probe would: /readyz becomes ready
// once both partitions are recovered, the lag of each reaches 0 once its
// records are committed, and /livez turns 503 once Run has returned. A
// partition with no record at all, and a restart that resumes at the end
// of both partitions (nothing to fetch, nothing to commit), show their
// log ends and a lag of 0 too.
func TestHealthHandlerOnKafka(t *testing.T) {
	t.Run("records in both partitions", func(t *testing.T) {
		w := newBrokerWorld(t)
		w.produce("alice=+1", "bob=+2", "carol=+3", "dave=+4", "erin=+5")
		healthHandlerOnKafka(t, w, true)
	})
	t.Run("partition 0 idle", func(t *testing.T) {
		w := newBrokerWorld(t)
		w.produce("alice=+1", "bob=+2", "carol=+3")
		healthHandlerOnKafka(t, w, true)
	})
	t.Run("restarted at the end", func(t *testing.T) {
		w := newBrokerWorld(t)
		w.produce("alice=+1", "bob=+2", "carol=+3", "dave=+4", "erin=+5")
		healthHandlerOnKafka(t, w, true)
		healthHandlerOnKafka(t, w, false)
	})
}

// healthHandlerOnKafka runs an engine on w's input until its /readyz is
// ready at lag 0 (committed: and it committed every partition with
// records), then stops it.
func healthHandlerOnKafka(t *testing.T, w *brokerWorld, committed bool) {
	m, reg := newMetrics(t)
	b, err := kafka.New(context.Background(), kafka.Config{Mode: store.Transactional, SeedBrokers: w.brokers,
		TransactionalIDPrefix: w.topic, Observer: m.StoreObserver()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	e, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: b, Dir: t.TempDir(),
		PersistInterval: 200 * time.Millisecond, CommitInterval: 400 * time.Millisecond, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	h := serveHealth(t, e, reg)
	if code, _ := h.ready(); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz %d before Run, want 503", code)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		ran <- e.Run(ctx, kafkaio.Config{SeedBrokers: w.brokers, Group: w.topic + "-group", Topics: []string{w.topic},
			ClientOpts: []kgo.Opt{kgo.SessionTimeout(6 * time.Second)}})
	}()

	ends, err := w.adm.ListEndOffsets(context.Background(), w.topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset })
	// The probe's view: poll /readyz as a kubelet does, until it is
	// ready with every partition at lag 0, or a minute has gone.
	probe := time.NewTicker(50 * time.Millisecond)
	defer probe.Stop()
	deadline := time.After(time.Minute)
	for caughtUp := false; !caughtUp; {
		select {
		case err := <-ran:
			t.Fatalf("Run returned %v before the engine caught up", err)
		case <-deadline:
			_, rb := h.ready()
			t.Fatalf("not ready at lag 0 in a minute: %+v", rb)
		case <-probe.C:
		}
		code, rb := h.ready()
		caughtUp = code == http.StatusOK && len(rb.Partitions) == 2
		for _, p := range rb.Partitions {
			caughtUp = caughtUp && p.Lag == 0 && p.CommittedOffset == want[p.Partition]
		}
	}
	h.wantCaughtUp(w.topic, want, committed)
	if code, _ := h.live(); code != http.StatusOK {
		t.Fatalf("/livez %d while running, want 200", code)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if code, _ := h.live(); code != http.StatusServiceUnavailable {
		t.Fatalf("/livez %d after Run returned, want 503", code)
	}
}
