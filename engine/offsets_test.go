package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/snapfence/snapfence/internal/input"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/store"
)

// failOffsetFetches makes kfake answer the next n OffsetFetch requests
// with code for every partition of the input topic (n < 0: all of them).
func (w *fakeWorld) failOffsetFetches(t *testing.T, code int16, n int) {
	t.Helper()
	topics, err := w.adm.ListTopics(context.Background(), "accounts")
	if err != nil {
		t.Fatal(err)
	}
	id := topics["accounts"].ID
	var left atomic.Int64
	left.Store(int64(n))
	w.c.ControlKey(int16(kmsg.OffsetFetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		w.c.KeepControl()
		if n >= 0 && left.Add(-1) < 0 {
			return nil, nil, false
		}
		req := kreq.(*kmsg.OffsetFetchRequest)
		resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
		for _, g := range req.Groups {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group = g.Group
			rt := kmsg.NewOffsetFetchResponseGroupTopic()
			rt.Topic, rt.TopicID = "accounts", id
			for p := range int32(2) {
				rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				rp.Partition, rp.Offset, rp.LeaderEpoch, rp.ErrorCode = p, -1, -1, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			rg.Topics = append(rg.Topics, rt)
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil, true
	})
}

// A committed-offset read that fails is an error, never "no offset":
// resuming from the log start would fold again what the snapshots hold.
// UNSTABLE_OFFSET_COMMIT (a transactional commit waiting for its markers)
// is asked again until the offset lands.
func TestCommittedOffsetReadErrorsAreNotAbsentOffsets(t *testing.T) {
	tp := store.TopicPartition{Topic: "accounts", Partition: 0}
	src := func(t *testing.T, w *fakeWorld) input.Source {
		r := w.runner(w.engine(), kgo.Balancers(kgo.RangeBalancer()))
		t.Cleanup(func() { _ = r.Close(context.Background()) })
		return r.Source()
	}
	t.Run("unstable, then committed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newFakeWorld(t)
			w.produce("alice=+1", "bob=+2")
			commit(t, w, tp, 1)
			s := src(t, w)
			w.failOffsetFetches(t, kerr.UnstableOffsetCommit.Code, 3)
			off, err := s.CommittedOffset(context.Background(), tp)
			if err != nil || off != 1 {
				t.Fatalf("CommittedOffset = %d, %v; want 1 once the commit is stable", off, err)
			}
		})
	})
	t.Run("a failing read", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newFakeWorld(t)
			s := src(t, w)
			w.failOffsetFetches(t, kerr.UnknownServerError.Code, -1)
			off, err := s.CommittedOffset(context.Background(), tp)
			if !errors.Is(err, kerr.UnknownServerError) {
				t.Fatalf("CommittedOffset = %d, %v; want the read's error, not the log start", off, err)
			}
		})
	})
}

// commit commits offset for tp in the world's group as a group-less admin
// commit would (the group is empty).
func commit(t *testing.T, w *fakeWorld, tp store.TopicPartition, offset int64) {
	t.Helper()
	offs := make(kadm.Offsets)
	offs.AddOffset(tp.Topic, tp.Partition, offset, -1)
	if err := w.adm.CommitAllOffsets(context.Background(), "bank", offs); err != nil {
		t.Fatal(err)
	}
}
