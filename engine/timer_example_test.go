package engine_test

import (
	"context"
	"fmt"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
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
		Mode: store.Transactional, Application: "sessions", CreateTopics: true,
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
	r, _ := e.Join(simsource.New(cluster, "sessions", sim.ClassicEager, 0, "clicks"))
	defer r.Close(ctx)

	tp := store.TopicPartition{Topic: "clicks", Partition: 0}
	click := func() { _, _ = cluster.Produce(tp, wire.Record{Key: []byte("ada")}) }
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

// An event-time timer follows the records' timestamps, not the clock: a
// payment is due a minute after its invoice's timestamp, and the reminder
// fires right after the first record of the partition stamped at or past
// that, however late it is folded. (Here the records' timestamps are
// their append times on the simulated clock.)
func ExampleTimer_eventTime() {
	ctx := context.Background()
	cluster := sim.New(sim.Config{Seed: 1})
	_ = cluster.CreateTopic("invoices", sim.TopicConfig{Partitions: 1})
	backend, _ := cluster.NewBackend(sim.BackendConfig{
		Mode: store.Transactional, Application: "billing", CreateTopics: true,
	})
	defer backend.Close()

	e, err := engine.New(engine.Config[string]{
		Fold: func(key []byte, status string, exists bool, rec engine.Record) (engine.Result[string], error) {
			fmt.Printf("fold %s %s\n", key, rec.Value)
			if string(rec.Value) == "paid" {
				return engine.Delete[string](), nil // drops the reminder
			}
			due := engine.Timer{Kind: engine.EventTime, At: rec.Timestamp.Add(time.Minute)}
			return engine.Set("open").SetTimer(due), nil
		},
		OnTimer: func(key []byte, status string, t engine.Timer) (engine.Result[string], error) {
			fmt.Printf("remind %s: %s invoice past due\n", key, status)
			return engine.Set("overdue"), nil
		},
		Codec: engine.String(),
		Store: backend,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	r, _ := e.Join(simsource.New(cluster, "billing", sim.ClassicEager, 0, "invoices"))
	defer r.Close(ctx)

	tp := store.TopicPartition{Topic: "invoices", Partition: 0}
	send := func(key, value string) {
		_, _ = cluster.Produce(tp, wire.Record{Key: []byte(key), Value: []byte(value)})
		_ = r.Step(ctx)
	}
	wait := func(d time.Duration) { // the clock moves; the member polls
		for range int(d / time.Second) {
			cluster.Advance(time.Second)
			_ = r.Step(ctx)
		}
	}
	send("inv-1", "issued")
	send("inv-2", "issued")
	wait(10 * time.Second)
	send("inv-2", "paid")
	wait(2 * time.Minute)   // past inv-1's due time: nothing fires without a record
	send("inv-3", "issued") // stamped past it
	// Output:
	// fold inv-1 issued
	// fold inv-2 issued
	// fold inv-2 paid
	// fold inv-3 issued
	// remind inv-1: open invoice past due
}
