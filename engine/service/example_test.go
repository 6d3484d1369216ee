package service_test

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/service"
)

// A service on the embedded cluster: orders keyed by customer, the
// running total per customer, read back by key.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	fold := func(_ []byte, total int64, _ bool, rec engine.Record) (engine.Result[int64], error) {
		cents, err := strconv.ParseInt(string(rec.Value), 10, 64)
		if err != nil {
			return engine.Result[int64]{}, err
		}
		return engine.Set(total + cents), nil
	}
	svc, err := service.New(ctx, service.Config[int64]{
		Application: "totals",
		Brokers:     []string{service.Embedded}, // or "localhost:9092"
		Input:       "orders",
		Engine:      engine.Config[int64]{Fold: fold, Codec: engine.Int64()},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()

	// A producer of the orders, on the embedded cluster.
	cl, _ := kgo.NewClient(kgo.SeedBrokers(svc.Brokers()...), kgo.DefaultProduceTopic("orders"))
	for _, cents := range []string{"1250", "300"} {
		_ = cl.ProduceSync(ctx, &kgo.Record{Key: []byte("alice"), Value: []byte(cents)}).FirstErr()
	}
	cl.Close()

	// Get reads the committed state: wait for the commit.
	for {
		if e, ok, err := svc.Get(ctx, []byte("alice")); err == nil && ok && e.State == 1550 {
			fmt.Println("alice:", e.State)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	fmt.Println("Run:", <-done)
	// Output:
	// alice: 1550
	// Run: <nil>
}
