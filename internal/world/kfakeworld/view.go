package kfakeworld

import (
	"context"
	"fmt"

	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// readView lets the world's view of the snapshot topic read once (a
// read-view step), opening it first if it is not open: another service's
// reader of the application's state, with store/kafka's read_committed
// reader on a client of its own, outside every member's freezer. Each
// change it applies is recorded (a history.View op), and the checker
// holds it to invariant 4 as internal/world's does. The read does not
// wait for records, so it moves no virtual time.
func (w *World) readView() {
	ctx := context.Background()
	if w.view == nil {
		be, err := kafka.New(ctx, kafka.Config{Mode: store.Transactional, SeedBrokers: w.seeds, Application: w.prefix + "-view",
			SnapshotTopic: func(string) string { return w.snapshotTopic }, ClientOpts: w.storeClientOpts(w.net.DialContext)})
		if err != nil {
			panic(fmt.Sprintf("kfakeworld: the view's backend: %v", err))
		}
		v, err := view.New(ctx, view.Config[int]{Store: be, Topic: w.input, Codec: world.IntCodec{},
			Partitioner: func(key []byte, n int32) int32 { return world.PartitionOf(string(key), int(n)) },
			OnChange:    func(ch view.Change[int]) { w.rec.Add(world.ViewOp(ch)) }})
		if err != nil {
			_ = be.Close()
			panic(fmt.Sprintf("kfakeworld: the view of the snapshot topic: %v", err))
		}
		w.view, w.viewBackend = v, be
	}
	if err := w.view.Step(ctx); err != nil {
		panic(fmt.Sprintf("kfakeworld: the view's read: %v", err))
	}
}

// closeView closes the view of the snapshot topic, if a step opened it.
func (w *World) closeView() {
	if w.view == nil {
		return
	}
	_ = w.view.Close()
	_ = w.viewBackend.Close()
	w.view, w.viewBackend = nil, nil
}
