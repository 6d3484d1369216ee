package engine_test

import (
	"context"
	"fmt"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// A session per key that closes after a minute without activity: each
// record moves the key's processing-time timer (cancel the old one, set a
// new one), and OnTimer closes the session when the timer is due. The
// timer travels with the key's snapshot, so it fires once even if the
// partition moves or the process restarts before it is due.
func ExampleResult_SetTimer() {
	ctx := context.Background()
	cluster := sim.New(sim.Config{Seed: 1})
	_ = cluster.CreateTopic("clicks", sim.TopicConfig{Partitions: 1})
	backend, _ := cluster.NewBackend(sim.BackendConfig{
		Mode: store.Transactional, TransactionalIDPrefix: "sessions", CreateTopics: true,
	})
	defer backend.Close()
	start := cluster.Now()

	type session struct {
		Clicks int
		Expiry time.Time // the pending timer's time, to cancel it
	}
	const idle = time.Minute
	e, err := engine.New(engine.Config[session]{
		Fold: func(key []byte, s session, exists bool, rec engine.Record) (engine.Result[session], error) {
			res := engine.Set(session{Clicks: s.Clicks + 1, Expiry: rec.Timestamp.Add(idle)})
			if exists {
				res = res.CancelTimer(engine.Timer{Kind: engine.ProcessingTime, At: s.Expiry})
			}
			return res.SetTimer(engine.Timer{Kind: engine.ProcessingTime, At: rec.Timestamp.Add(idle)}), nil
		},
		OnTimer: func(key []byte, s session, t engine.Timer) (engine.Result[session], error) {
			out := engine.Output{Topic: "sessions", Key: key, Value: fmt.Appendf(nil, "%d clicks", s.Clicks)}
			return engine.Delete[session]().With(out), nil
		},
		Codec:           engine.JSON[session](),
		Store:           backend,
		PersistInterval: time.Second,
		CommitInterval:  time.Second,
		Emit: func(_ context.Context, outs []engine.Output) error {
			for _, o := range outs {
				fmt.Printf("%v emit %s: %s=%s\n", cluster.Now().Sub(start), o.Topic, o.Key, o.Value)
			}
			return nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	r, _ := e.NewRunner(simsource.New(cluster, "sessions", sim.ClassicEager, 0, "clicks"))
	defer r.Close(ctx)

	tp := store.TopicPartition{Topic: "clicks", Partition: 0}
	click := func() { _, _ = cluster.Produce(tp, store.WireRecord{Key: []byte("ada")}) }
	for range 3 { // three clicks, 30 s apart
		click()
		_ = r.Step(ctx)
		cluster.Advance(30 * time.Second)
	}
	for range 120 { // two idle minutes
		_ = r.Step(ctx)
		cluster.Advance(time.Second)
	}
	// Output:
	// 2m0s emit sessions: ada=3 clicks
}
