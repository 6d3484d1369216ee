package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// The checkpoint cases: Position and Recover from a checkpoint (delta
// recovery).

// A delta from a checkpoint reads exactly what was committed after it,
// by this owner and by the next one, and the next owner's position
// covers it all.
func checkpointDeltaReadsWhatFollows(t *testing.T, w World) {
	in := input(w, 0)
	a := w.Join(t)
	first := acquire(t, w, transactional, in, 0, a.Identity())
	if _, ok := first.Position(); ok {
		t.Fatal("Position is valid before any recovery")
	}
	mustNil(t, "recover", collect(first.Recover(context.Background(), nil)).err)
	// The first takeover of the empty partition committed its claim (an
	// offset marker): recovery read it, and the position is past it.
	cp0, ok := first.Position()
	if _, hw := w.StableOffsets(t, in); !ok || hw < 2 || cp0.Offset > hw || cp0.Offset < hw-1 {
		t.Fatalf("Position after recovering a partition that holds only its claim = %+v, %t; want valid at the high watermark %d (or before the commit marker), past the claim", cp0, ok, hw)
	}
	mustNil(t, "write a", first.Write(context.Background(), snap("a", "1", 1)))
	mustNil(t, "write b", first.Write(context.Background(), snap("b", "2", 2)))
	cp, ok := first.Position()
	if _, hw := w.StableOffsets(t, in); !ok || cp.Offset > hw || cp.Offset < hw-1 {
		t.Fatalf("Position after two writes = %+v, %t; want valid at the high watermark %d (or before the commit marker)", cp, ok, hw)
	}
	if r := collect(first.Recover(context.Background(), &cp)); r.err != nil || len(r.snaps) != 0 {
		t.Fatalf("a delta from the position read %s (err %v), want nothing", describe(r.snaps), r.err)
	}
	mustNil(t, "write b again", first.Write(context.Background(), snap("b", "3", 3)))
	mustNil(t, "delete a", first.Write(context.Background(), store.Snapshot{Key: []byte("a"), Offset: 4, Tombstone: true}))
	mustNil(t, "close", first.Close())

	b := w.Join(t) // the partition moves
	next := acquire(t, w, transactional, in, 0, b.Identity())
	r := collect(next.Recover(context.Background(), &cp))
	mustNil(t, "recover from the checkpoint", r.err)
	if got := describe(r.snaps); len(r.snaps) != 2 || string(r.snaps[0].Key) != "b" || string(r.snaps[0].Value) != "3" ||
		string(r.snaps[1].Key) != "a" || !r.snaps[1].Tombstone {
		t.Fatalf("the delta read %s, want b=3 then a's tombstone: only what followed the checkpoint", got)
	}
	mustNil(t, "write c", next.Write(context.Background(), snap("c", "4", 5)))
	end, ok := next.Position()
	if _, hw := w.StableOffsets(t, in); !ok || end.Offset > hw || end.Offset < hw-1 || end.TopicID != cp.TopicID {
		t.Fatalf("the next owner's Position = %+v, %t; want valid at the high watermark %d (or before the commit marker), topic %x", end, ok, hw, cp.TopicID)
	}
	r = collect(next.Recover(context.Background(), &end))
	if r.err != nil || len(r.snaps) != 0 {
		t.Fatalf("a delta from the end read %s (err %v), want nothing", describe(r.snaps), r.err)
	}
}

// A checkpoint that is no valid base is refused before anything is read,
// with the reason.
func checkpointRefused(t *testing.T, w World) {
	in := input(w, 1)
	m := w.Join(t)
	o := acquire(t, w, transactional, in, 0, m.Identity())
	mustNil(t, "recover", collect(o.Recover(context.Background(), nil)).err)
	mustNil(t, "write", o.Write(context.Background(), snap("k", "1", 1)))
	cp, ok := o.Position()
	if !ok {
		t.Fatal("no position after a recovery and a write")
	}
	otherTopic := cp
	otherTopic.TopicID[0] ^= 0xff
	ahead := cp
	ahead.Offset += 10
	old := cp
	old.At = w.Now().Add(-25 * time.Hour) // the default delete.retention.ms is 24 h
	for reason, c := range map[string]store.Checkpoint{
		store.CheckpointTopicRecreated:     otherTopic,
		store.CheckpointAboveLogEnd:        ahead,
		store.CheckpointTombstoneRetention: old,
	} {
		r := collect(o.Recover(context.Background(), &c))
		ce, isCE := errors.AsType[*store.CheckpointError](r.err)
		if !isCE || ce.Reason != reason || !errors.Is(r.err, store.ErrCheckpointUnusable) || len(r.snaps) != 0 {
			t.Fatalf("Recover from %+v = %s, %v; want nothing read and a *CheckpointError for %s", c, describe(r.snaps), r.err, reason)
		}
	}
}

// A Plain-mode partition has no position and refuses every checkpoint:
// nothing fences another writer out of its snapshot partition.
func checkpointPlainRefused(t *testing.T, w World) {
	in := input(w, 0)
	m := w.Join(t)
	o := acquire(t, w, BackendConfig{Mode: store.Plain}, in, 0, m.Identity())
	mustNil(t, "recover", collect(o.Recover(context.Background(), nil)).err)
	mustNil(t, "write", o.Write(context.Background(), snap("k", "1", 1)))
	if cp, ok := o.Position(); ok {
		t.Fatalf("Plain Position = %+v, valid; want none", cp)
	}
	r := collect(o.Recover(context.Background(), &store.Checkpoint{}))
	if ce, ok := errors.AsType[*store.CheckpointError](r.err); !ok || ce.Reason != store.CheckpointPlain {
		t.Fatalf("Plain Recover from a checkpoint = %v, want a *CheckpointError for %s", r.err, store.CheckpointPlain)
	}
}

// A failed transaction loses the position for good: its outcome may be
// unknown, so nothing after it is vouched for.
func checkpointLostAfterAFailure(t *testing.T, w World) {
	in := input(w, 0)
	stale, _ := staleSetup(t, w, transactional, 0)
	mustNil(t, "recover", collect(stale.Recover(context.Background(), nil)).err)
	if _, ok := stale.Position(); !ok {
		t.Fatal("no position after the recovery")
	}
	b := w.Join(t)
	fresh := acquire(t, w, transactional, in, 0, b.Identity())
	mustNil(t, "recover", collect(fresh.Recover(context.Background(), nil)).err)
	if err := stale.Write(context.Background(), snap("k", "stale", 3)); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale write: %v, want fenced", err)
	}
	if cp, ok := stale.Position(); ok {
		t.Fatalf("Position after a fenced transaction = %+v, valid; want none", cp)
	}
}

// Writes and a commit started back to back, none awaited before the
// next starts, land in the order they were started, and each one's
// Pending carries the position as of its own end: a delta from it reads
// exactly what was started after it, so a copy kept with that position
// never vouches for a write it has not been told of.
func startedWritesKeepOrderAndTheirPositions(t *testing.T, w World) {
	in := input(w, 0)
	a := w.Join(t)
	o := acquire(t, w, BackendConfig{Mode: store.Transactional, MaxWritesPerTransaction: 1}, in, 0, a.Identity())
	ctx := context.Background()
	mustNil(t, "recover", collect(o.Recover(ctx, nil)).err)
	started := []store.Pending{
		o.StartWriteBatch(ctx, []store.Snapshot{snap("a", "1", 1), snap("b", "1", 2)}),
		o.StartWriteBatch(ctx, []store.Snapshot{snap("a", "2", 3)}),
		o.StartCommit(ctx, 4),
		o.StartWriteBatch(ctx, []store.Snapshot{snap("c", "1", 4)}),
	}
	cps := startedPositions(t, ctx, started)
	if got, want := describe(w.ReadSnapshots(t, in)), "[a=1@1 b=1@2 a=2@3 c=1@4]"; got != want {
		t.Fatalf("snapshots = %s, want %s: in the order started", got, want)
	}
	if off, _ := w.CommittedOffset(t, in); off != 4 || o.CommittedOffset() != 4 {
		t.Fatalf("committed offset = %d (partition says %d), want 4", off, o.CommittedOffset())
	}
	for i, want := range []string{"[a=2@3 c=1@4]", "[c=1@4]", "[c=1@4]", "[]"} {
		r := collect(o.Recover(ctx, &cps[i]))
		mustNil(t, fmt.Sprintf("delta from call %d's position", i), r.err)
		if got := describe(r.snaps); got != want {
			t.Fatalf("a delta from call %d's position read %s, want %s: only what was started after it", i, got, want)
		}
	}
	// A refused write queues nothing: its Pending is done, with no
	// position to vouch for.
	p := o.StartWriteBatch(ctx, []store.Snapshot{{Key: wire.OffsetMarkerKey, Value: []byte("x"), Offset: 5}})
	if errs := p.Wait(ctx); !errors.Is(errs[0], store.ErrReservedKey) {
		t.Fatalf("a reserved key's started write: %v, want ErrReservedKey", errs)
	}
	if cp, ok := p.Position(); ok {
		t.Fatalf("a refused write's Pending has position %+v", cp)
	}
}

// startedPositions waits for every started call, the last first, and
// returns their positions, each checked to be past the one before: every
// position is read once all have ended, so one read at the time of asking
// instead of at the call's own end would show. The third call is the
// commit, which may share the position of the write before it.
func startedPositions(t *testing.T, ctx context.Context, started []store.Pending) []store.Checkpoint {
	t.Helper()
	for _, p := range slices.Backward(started) {
		p.Wait(ctx)
	}
	var cps []store.Checkpoint
	for i, p := range started {
		for k, err := range p.Wait(ctx) {
			mustNil(t, fmt.Sprintf("started call %d, outcome %d", i, k), err)
		}
		select {
		case <-p.Done():
		default:
			t.Fatalf("started call %d: Wait returned its outcome but Done is open", i)
		}
		cp, ok := p.Position()
		if !ok {
			t.Fatalf("started call %d has no position", i)
		}
		// Each write is a transaction of its own (cap 1); the commit may
		// ride with the write before it (commit requests use no cap).
		if i > 0 && (cp.Offset < cps[i-1].Offset || i != 2 && cp.Offset == cps[i-1].Offset) {
			t.Fatalf("started call %d's position %d is not past call %d's %d", i, cp.Offset, i-1, cps[i-1].Offset)
		}
		cps = append(cps, cp)
	}
	return cps
}

// A started commit depends on the writes started before it: one that
// failed in its transaction (here for want of an identity) or was refused
// before queueing makes the commit fail with ErrEarlierWriteFailed, and
// nothing is committed; Commit, which waits, does not depend on them.
func startedCommitDependsOnEarlierWrites(t *testing.T, w World) {
	ctx := context.Background()
	m := w.Join(t)
	valid := m.Identity()

	in := input(w, 0)
	o := acquire(t, w, transactional, in, 0, valid)
	o.id.publish(store.GroupIdentity{Group: valid.Group, Generation: -1})
	if errs := o.StartWriteBatch(ctx, []store.Snapshot{snap("k", "v", 1)}).Wait(ctx); !errors.Is(errs[0], store.ErrMissingIdentity) {
		t.Fatalf("write without an identity: %v, want ErrMissingIdentity", errs)
	}
	o.id.publish(valid)
	if errs := o.StartCommit(ctx, 2).Wait(ctx); !errors.Is(errs[0], store.ErrEarlierWriteFailed) {
		t.Fatalf("a commit started after a failed write: %v, want ErrEarlierWriteFailed", errs)
	}
	if off, ok := w.CommittedOffset(t, in); ok {
		t.Fatalf("offset %d committed past a failed write", off)
	}
	mustNil(t, "Commit (not dependent)", o.Commit(ctx, 2))

	for _, mode := range []store.Mode{store.Transactional, store.Plain} {
		in := input(w, 1)
		o := acquire(t, w, BackendConfig{Mode: mode}, in, 0, valid)
		reserved := store.Snapshot{Key: wire.OffsetMarkerKey, Value: []byte("x"), Offset: 1}
		started := o.StartWriteBatch(ctx, []store.Snapshot{snap("a", "1", 0), reserved})
		commit := o.StartCommit(ctx, 3)
		if errs := started.Wait(ctx); errs[0] != nil || !errors.Is(errs[1], store.ErrReservedKey) {
			t.Fatalf("%v: a batch with a reserved key: %v, want a's write and ErrReservedKey", mode, errs)
		}
		if errs := commit.Wait(ctx); !errors.Is(errs[0], store.ErrEarlierWriteFailed) {
			t.Fatalf("%v: a commit started after a refused write: %v, want ErrEarlierWriteFailed", mode, errs)
		}
		if off, ok := w.CommittedOffset(t, in); ok && off >= 3 {
			t.Fatalf("%v: offset %d committed past a refused write", mode, off)
		}
	}
}
