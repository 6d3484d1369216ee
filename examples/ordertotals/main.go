// Command ordertotals keeps each customer's order total and count: an order in, an
// enriched order out (the name from the "customers" table), a notice after an idle
// hour, and GET /keys/{customer} on :8080.
//
//	go run ./examples/ordertotals                        # embedded cluster, with demo orders
//	go run ./examples/ordertotals -brokers localhost:9092
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/service"
	"github.com/snapfence/snapfence/engine/view"
)

// Order is an input record's value; its key is the customer.
type Order struct {
	ID    string `json:"id"`
	Cents int64  `json:"cents"`
}

// Totals is a customer's state.
type Totals struct {
	Orders int       `json:"orders"`
	Cents  int64     `json:"cents"`
	Idle   time.Time `json:"idle"` // when the inactivity timer fires
}

// Enriched is the output of one order.
type Enriched struct {
	Order    Order  `json:"order"`
	Customer string `json:"customer"`
	Totals   Totals `json:"totals"`
}

// Config is the application's logic: its fold, timer and table. main
// runs it as a service; the tests run it on the simulated cluster.
func Config() engine.Config[Totals] {
	customers := view.NewLookup(view.Config[string]{Topic: "customers", Plain: true, Codec: engine.String()})
	fold := func(key []byte, t Totals, _ bool, rec engine.Record) (engine.Result[Totals], error) {
		var o Order
		if err := json.Unmarshal(rec.Value, &o); err != nil {
			return engine.Result[Totals]{}, fmt.Errorf("order: %w", err)
		}
		name, _, err := customers.Get(key)
		if err != nil {
			return engine.Result[Totals]{}, err
		}
		old := engine.Timer{Kind: engine.ProcessingTime, At: t.Idle} // none for a new customer: no error
		t.Orders, t.Cents, t.Idle = t.Orders+1, t.Cents+o.Cents, rec.Now.Add(time.Hour)
		out, _ := json.Marshal(Enriched{Order: o, Customer: name, Totals: t})
		return engine.Set(t).With(engine.Output{Topic: "enriched-orders", Key: key, Value: out}).
			CancelTimer(old).SetTimer(engine.Timer{Kind: engine.ProcessingTime, At: t.Idle}), nil
	}
	onTimer := func(key []byte, t Totals, _ engine.Timer) (engine.Result[Totals], error) {
		out, _ := json.Marshal(t)
		return engine.Keep[Totals]().With(engine.Output{Topic: "inactive-customers", Key: key, Value: out}), nil
	}
	return engine.Config[Totals]{Fold: fold, OnTimer: onTimer, Codec: engine.JSON[Totals](), Tables: []engine.Table{customers},
		OutputTopics: []string{"enriched-orders", "inactive-customers"},
		Poison:       engine.DeadLetterPoison, DeadLetterTopic: "order-totals-dead-letters"}
}

func main() {
	brokers := flag.String("brokers", service.Embedded, `Kafka's "host:port", or "embedded"`)
	demo := flag.Bool("demo", false, "produce a few customers and orders at start (always on the embedded cluster)")
	addr := flag.String("http", ":8080", "where to serve /keys/{customer}, /readyz, /metrics")
	dir := flag.String("dir", "", "a cache directory of this instance's own, kept across restarts (on a broker): a restart gets its partitions back and recovers only what changed")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := Config()
	cfg.Logger, cfg.Dir = slog.Default(), *dir
	svc, err := service.New(ctx, service.Config[Totals]{
		Application:  "order-totals",
		Brokers:      []string{*brokers},
		Input:        "orders",
		CreateTopics: true,
		Partitions:   4, // of a topic it creates: up to 4 instances share the work
		HTTP:         *addr,
		Engine:       cfg,
	})
	if err == nil && (*demo || *brokers == service.Embedded) {
		err = produceDemo(ctx, svc.Brokers())
	}
	if err == nil {
		slog.Info("serving", "endpoint", svc.Endpoint(), "try", "curl localhost"+*addr+"/keys/alice")
		err = svc.Run(ctx)
	}
	if err != nil {
		slog.Error("ordertotals", "err", err)
		os.Exit(1)
	}
}

// produceDemo writes two customers and a few orders.
func produceDemo(ctx context.Context, brokers []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	recs := []*kgo.Record{{Topic: "customers", Key: []byte("alice"), Value: []byte("Alice Liddell")},
		{Topic: "customers", Key: []byte("bob"), Value: []byte("Bob Dobbs")}}
	for i, c := range []string{"alice", "bob", "alice"} {
		v, _ := json.Marshal(Order{ID: fmt.Sprint("o-", i), Cents: int64(1000 + 250*i)})
		recs = append(recs, &kgo.Record{Topic: "orders", Key: []byte(c), Value: v})
	}
	return cl.ProduceSync(ctx, recs...).FirstErr()
}
