package storetest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/internal/backend"
	"github.com/snapfence/snapfence/store/wire"
)

// The follower cases: Backend.Follow, the read of a standby replica.

// followed is what a follower returned until a condition held.
type followed struct {
	snaps []store.Snapshot
	cp    store.Checkpoint
	ok    bool
}

// followUntil calls f.Next until done holds of what it returned so far,
// moving the world's time between calls (virtual time: at once; real
// time: a tenth of a second, so up to 30 s).
func followUntil(t *testing.T, w World, f store.Follow, what string, done func(followed) bool) followed {
	t.Helper()
	var got followed
	for range 300 {
		snaps, cp, ok, err := f.Next(context.Background(), 0)
		if err != nil {
			t.Fatalf("following until %s: %v", what, err)
		}
		got.snaps, got.cp, got.ok = append(got.snaps, snaps...), cp, ok
		if done(got) {
			return got
		}
		w.Advance(100 * time.Millisecond)
	}
	t.Fatalf("following until %s: not reached; read %s, checkpoint %+v (vouched %t)", what, describe(got.snaps), got.cp, got.ok)
	return got
}

func follower(t *testing.T, w World, b store.Backend, in store.TopicPartition, from *store.Checkpoint) store.Follow {
	t.Helper()
	if !b.CanFollow() {
		t.Fatalf("%T cannot follow", b)
	}
	f, err := b.Follow(context.Background(), in, from)
	if err != nil {
		t.Fatalf("Follow %s from %+v: %v", in, from, err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// A follower from the log start reads the committed snapshots, never an
// open or aborted transaction's, vouches for a checkpoint once it has
// read to the last stable offset, with an At that leaves room for the
// open transaction's records to be older (15 min, Kafka's default
// transaction.max.timeout.ms), and writes nothing: the owner goes on
// committing, and a later owner's delta from the follower's checkpoint
// reads exactly what followed it.
func followReadsCommittedOnly(t *testing.T, w World) {
	in := input(w, 0)
	m := w.Join(t)
	o := acquire(t, w, transactional, in, 0, m.Identity())
	mustNil(t, "recover", collect(o.Recover(context.Background(), nil)).err)
	mustNil(t, "write a", o.Write(context.Background(), snap("a", "1", 1)))
	end := w.ForeignTransaction(t, in, false, wire.EncodeSnapshot("", snap("x", "aborted", 9)))

	f := follower(t, w, w.Backend(t, transactional), in, nil)
	got := followUntil(t, w, f, "a is read, up to the open transaction", func(g followed) bool { return len(g.snaps) >= 1 && g.ok })
	if lso, _ := w.StableOffsets(t, in); got.cp.Offset > lso || w.Now().Sub(got.cp.At) < 15*time.Minute {
		t.Fatalf("with a transaction open, the follower vouches for %+v at %v; want an offset at most the last stable offset %d and an At at least 15 min before now: the open transaction's records may be that old", got.cp, w.Now(), lso)
	}
	end(false)
	mustNil(t, "write b", o.Write(context.Background(), snap("b", "2", 2)))
	got2 := followUntil(t, w, f, "b is read and the follower caught up", func(g followed) bool {
		_, hw := w.StableOffsets(t, in)
		return len(g.snaps) >= 1 && g.ok && g.cp.Offset >= hw
	})
	all := append(got.snaps, got2.snaps...)
	if d := describe(all); len(all) != 2 || string(all[0].Key) != "a" || string(all[1].Key) != "b" {
		t.Fatalf("the follower read %s, want a=1 then b=2: the committed snapshots only", d)
	}
	if age := w.Now().Sub(got2.cp.At); age < 15*time.Minute || age > 16*time.Minute {
		t.Fatalf("the caught-up checkpoint's At is %v old, want 15 min (the transaction slack) and the time of a read", age)
	}

	// The follower fenced no one, and its checkpoint is a valid base.
	mustNil(t, "write c after following", o.Write(context.Background(), snap("c", "3", 3)))
	mustNil(t, "close", o.Close())
	next := acquire(t, w, transactional, in, 0, w.Join(t).Identity())
	r := collect(next.Recover(context.Background(), &got2.cp))
	mustNil(t, "recover from the follower's checkpoint", r.err)
	if d := describe(r.snaps); len(r.snaps) != 1 || string(r.snaps[0].Key) != "c" {
		t.Fatalf("a delta from the follower's checkpoint read %s, want c=3 only", d)
	}
}

// A follower from a checkpoint reads what followed it, tombstones too, and
// vouches at once with the checkpoint's At.
func followFromCheckpoint(t *testing.T, w World) {
	in := input(w, 1)
	o := acquire(t, w, transactional, in, 0, w.Join(t).Identity())
	mustNil(t, "recover", collect(o.Recover(context.Background(), nil)).err)
	mustNil(t, "write a", o.Write(context.Background(), snap("a", "1", 1)))
	cp, ok := o.Position()
	if !ok {
		t.Fatal("no position after a write")
	}
	f := follower(t, w, w.Backend(t, transactional), in, &cp)
	mustNil(t, "write b", o.Write(context.Background(), snap("b", "2", 2)))
	mustNil(t, "delete a", o.Write(context.Background(), store.Snapshot{Key: []byte("a"), Offset: 3, Tombstone: true}))
	got := followUntil(t, w, f, "b and a's tombstone are read", func(g followed) bool { return len(g.snaps) >= 2 })
	if d := describe(got.snaps); len(got.snaps) != 2 || string(got.snaps[0].Key) != "b" || !got.snaps[1].Tombstone {
		t.Fatalf("the follower read %s, want b=2 then a's tombstone: only what followed the checkpoint", d)
	}
	if !got.ok || got.cp.TopicID != cp.TopicID || got.cp.At.Before(cp.At) {
		t.Fatalf("checkpoint %+v (vouched %t); want vouched, topic %x, At no earlier than the base's %v", got.cp, got.ok, cp.TopicID, cp.At)
	}
	if off, hw := f.Position(); off < got.cp.Offset || hw < 0 {
		t.Fatalf("Position = %d, %d; want at least the checkpoint's %d and a listed log end", off, hw, got.cp.Offset)
	}
}

// A follower refuses a checkpoint that is no valid base, and every
// follower in Plain mode, with the reason.
func followRefused(t *testing.T, w World) {
	in := input(w, 0)
	o := acquire(t, w, transactional, in, 0, w.Join(t).Identity())
	mustNil(t, "recover", collect(o.Recover(context.Background(), nil)).err)
	mustNil(t, "write", o.Write(context.Background(), snap("k", "1", 1)))
	cp, _ := o.Position()
	cp.TopicID[0] ^= 0xff
	fl := w.Backend(t, transactional)
	if _, err := fl.Follow(context.Background(), in, &cp); !isRefusal(err, store.CheckpointTopicRecreated) {
		t.Fatalf("Follow from another topic's checkpoint = %v, want a *CheckpointError for %s", err, store.CheckpointTopicRecreated)
	}
	plain := w.Backend(t, BackendConfig{Mode: store.Plain})
	if _, err := plain.Follow(context.Background(), in, nil); !isRefusal(err, store.CheckpointPlain) {
		t.Fatalf("Plain Follow = %v, want a *CheckpointError for %s", err, store.CheckpointPlain)
	}
}

func isRefusal(err error, reason string) bool {
	ce, ok := errors.AsType[*store.CheckpointError](err)
	return ok && ce.Reason == reason && errors.Is(err, store.ErrCheckpointUnusable)
}

// snapshotPartition is input's snapshot partition under the default
// snapshot topic name of Application (every world's backends use it).
func snapshotPartition(in store.TopicPartition) store.TopicPartition {
	return store.TopicPartition{Topic: backend.DefaultSnapshotTopic(Application, in.Topic), Partition: in.Partition}
}

// A follower of any topic (Backend.FollowTopic), here the snapshot
// partition read as a plain topic by a Plain-mode backend, returns the
// committed records raw, with their own offsets, a null value as a
// tombstone, never an aborted transaction's (here the offset marker of
// the acquisition's claim, then the foreign records); its high watermark is the
// read_uncommitted log end; Partitions counts a topic's partitions and
// names a missing one.
func followTopicRaw(t *testing.T, w World) {
	in := input(w, 0)
	o := acquire(t, w, transactional, in, 0, w.Join(t).Identity()) // creates the snapshot topic
	mustNil(t, "recover", collect(o.Recover(context.Background(), nil)).err)
	mustNil(t, "close", o.Close())
	w.ProduceForeign(t, in, wire.Record{Key: []byte("k"), Value: []byte("v1")})
	end := w.ForeignTransaction(t, in, false, wire.Record{Key: []byte("k"), Value: []byte("aborted")})
	end(false)
	w.ProduceForeign(t, in, wire.Record{Key: []byte("k")}, wire.Record{Key: []byte("j"), Value: []byte{}})

	tf := w.Backend(t, BackendConfig{Mode: store.Plain})
	if !tf.CanFollow() {
		t.Fatal("the backend cannot follow a topic")
	}
	n, err := tf.Partitions(context.Background(), w.InputTopic())
	if err != nil || n < 2 {
		t.Fatalf("Partitions(%q) = %d, %v; want the input topic's count (at least 2)", w.InputTopic(), n, err)
	}
	if _, err := tf.Partitions(context.Background(), "no-such-topic"); !errors.Is(err, store.ErrMisconfigured) {
		t.Fatalf("Partitions of a missing topic = %v, want an error matching store.ErrMisconfigured", err)
	}
	snap := snapshotPartition(in)
	f, err := tf.FollowTopic(context.Background(), snap, nil)
	if err != nil {
		t.Fatalf("FollowTopic %s: %v", snap, err)
	}
	t.Cleanup(func() { _ = f.Close() })
	_, hw := w.StableOffsets(t, in)
	if got, err := f.HighWatermark(context.Background()); err != nil || got != hw {
		t.Fatalf("HighWatermark = %d, %v; want the high watermark %d", got, err, hw)
	}
	got := followUntil(t, w, f, "the four committed records are read", func(g followed) bool { return len(g.snaps) >= 4 })
	if c := got.snaps[0]; !bytes.Equal(c.Key, wire.OffsetMarkerKey) || c.Offset != 0 {
		t.Fatalf("FollowTopic read %s first; want the claim's offset marker at offset 0", describe(got.snaps[:1]))
	}
	s := got.snaps[1:]
	if len(s) != 3 || string(s[0].Value) != "v1" || s[0].Tombstone || !s[1].Tombstone || s[1].Value != nil ||
		string(s[2].Key) != "j" || s[2].Tombstone || !(s[0].Offset < s[1].Offset && s[1].Offset < s[2].Offset) {
		t.Fatalf("FollowTopic read %s; want after the claim k=v1, k's tombstone (a null value), j= (an empty value, no tombstone), in log order with their offsets, and not the aborted record", describe(got.snaps))
	}
	if s[2].Offset != hw-1 {
		t.Fatalf("the last record's offset is %d, want its own offset %d (the high watermark less one)", s[2].Offset, hw-1)
	}
	if _, err := tf.FollowTopic(context.Background(), store.TopicPartition{Topic: "no-such-topic"}, nil); !errors.Is(err, store.ErrMisconfigured) {
		t.Fatalf("FollowTopic of a missing topic = %v, want an error matching store.ErrMisconfigured", err)
	}
}
