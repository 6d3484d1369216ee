package sim_test

import (
	"context"
	"fmt"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// A follower of any topic (store.Backend.FollowTopic): its committed records
// raw, with their own offsets, a null value as a tombstone, never an
// aborted transaction's.
func ExampleBackend_FollowTopic() {
	ctx := context.Background()
	c := sim.New(sim.Config{Seed: 1})
	_ = c.CreateTopic("sellers", sim.TopicConfig{Partitions: 1, Compacted: true})
	tp := store.TopicPartition{Topic: "sellers", Partition: 0}
	_, _ = c.Produce(tp, wire.Record{Key: []byte("s1"), Value: []byte("Acme")})
	aborted := c.InitProducerID("other-app", 0)
	_, _ = aborted.Produce(tp, wire.Record{Key: []byte("s1"), Value: []byte("aborted")})
	_ = aborted.EndTxn(false)
	_, _ = c.Produce(tp, wire.Record{Key: []byte("s1")})

	b, _ := c.NewBackend(sim.BackendConfig{Mode: store.Plain})
	defer b.Close()
	n, _ := b.Partitions(ctx, "sellers")
	fmt.Println("partitions:", n)
	f, err := b.FollowTopic(ctx, tp, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	recs, _, _, _ := f.Next(ctx, 0)
	for _, r := range recs {
		fmt.Printf("offset %d: %s=%q tombstone=%t\n", r.Offset, r.Key, r.Value, r.Tombstone)
	}
	hw, _ := f.HighWatermark(ctx)
	pos, _ := f.Position()
	fmt.Printf("position %d, high watermark %d\n", pos, hw)
	// Output:
	// partitions: 1
	// offset 0: s1="Acme" tombstone=false
	// offset 3: s1="" tombstone=true
	// position 4, high watermark 4
}
