package kafkaio_test

import (
	"context"
	"log"
	"strconv"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// A running sum per key whose every change goes to a topic, at least
// once, through a kafkaio.Emitter. StartEmit rather than Emit: a poll's
// outputs are on their way while the next poll is folded, and the engine
// waits for them before it writes a snapshot or commits an offset.
func ExampleEmitter() {
	ctx := context.Background()
	seeds := []string{"127.0.0.1:9092"}
	backend, err := kafka.New(ctx, kafka.Config{Mode: store.Transactional, SeedBrokers: seeds, TransactionalIDPrefix: "sums"})
	if err != nil {
		log.Fatal(err)
	}
	defer backend.Close()
	em, err := kafkaio.NewEmitter(kafkaio.EmitterConfig{SeedBrokers: seeds})
	if err != nil {
		log.Fatal(err)
	}
	defer em.Close() // after the engine's Run has returned

	e, err := engine.New(engine.Config[int64]{
		Fold: func(key []byte, sum int64, _ bool, rec engine.Record) (engine.Result[int64], error) {
			n, err := strconv.ParseInt(string(rec.Value), 10, 64)
			if err != nil {
				return engine.Result[int64]{}, err
			}
			sum += n
			return engine.Set(sum).With(engine.Output{Topic: "sums", Key: key, Value: strconv.AppendInt(nil, sum, 10)}), nil
		},
		Codec:     engine.Int64(),
		Store:     backend,
		StartEmit: em.StartEmit,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	if err := e.Run(ctx, kafkaio.Config{SeedBrokers: seeds, Group: "sums", Topics: []string{"numbers"}}); err != nil {
		log.Fatal(err)
	}
}
