package engine_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/snapfence/snapfence/internal/input"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
)

// A crash is the tests' to simulate, with what a killed process leaves
// behind: its runner is never stepped or closed again (no flush, no
// commit, no revoke), and its consumer falls silent, so that the group
// evicts it when its session expires. The engine has no call for it.

// crashOnSim kills r's process on the simulated cluster: its member
// stalls for good (no poll, no heartbeat, no leave), and the group evicts
// it once its session expires. r must not be stepped or closed again; it
// stops counting as open, so its engine's Close closes the cache.
func crashOnSim[S any](t *testing.T, r *engine.Member[S]) {
	t.Helper()
	s, ok := r.Source().(*simsource.Source)
	if !ok {
		t.Fatalf("source %T", r.Source())
	}
	s.Member().Stall()
	engine.Abandon(r)
}

// killSwitch stands between a runner and its source's rebalance
// callbacks: once the process is dead, they no longer reach the runner (a
// dead process runs nothing). A callback that began before the death runs
// to its end, as it would have in the live process.
type killSwitch struct {
	h    input.Handler
	dead atomic.Bool
}

// killable is newSource with a kill switch between it and the runner.
func killable(in engine.Input) (engine.Input, *killSwitch) {
	k := &killSwitch{}
	return input.Wrapped(in, func(h input.Handler) input.Handler {
		k.h = h
		return k
	}), k
}

func (k *killSwitch) Assigned(ctx context.Context, tps []store.TopicPartition) {
	if !k.dead.Load() {
		k.h.Assigned(ctx, tps)
	}
}

func (k *killSwitch) Revoked(ctx context.Context, tps []store.TopicPartition) {
	if !k.dead.Load() {
		k.h.Revoked(ctx, tps)
	}
}

func (k *killSwitch) Lost(ctx context.Context, tps []store.TopicPartition) {
	if !k.dead.Load() {
		k.h.Lost(ctx, tps)
	}
}

// crashAndLeave kills r's process (made with k: killable), then, to spare
// the wait for its session to expire, has its consumer leave the group, so
// that its partitions go to the other members at once. A dead process's
// consumer would stay in the group until its session expired (the
// property worlds' crash freezes its connections for that). r is never
// stepped or closed again, and the leave's revoke does not reach it:
// nothing is flushed or committed, and its flows' open batches are lost
// with it.
func crashAndLeave[S any](t *testing.T, r *engine.Member[S], k *killSwitch) {
	t.Helper()
	k.dead.Store(true)
	if err := r.Source().Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	engine.Abandon(r)
}
