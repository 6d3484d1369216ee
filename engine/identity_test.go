package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/internal/input"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// unjoined is a source whose member has not joined its group yet.
type unjoined struct{ now time.Time }

func (unjoined) Poll(context.Context, func() time.Duration) ([]input.Record, error) { return nil, nil }
func (unjoined) PollDone()                                                          {}
func (unjoined) Identity() store.GroupIdentity                                      { return store.GroupIdentity{Generation: -1} }
func (unjoined) CommittedOffset(context.Context, store.TopicPartition) (int64, error) {
	return 0, nil
}
func (unjoined) ConfirmOwner(ctx context.Context, tp store.TopicPartition, id store.GroupIdentity) error {
	return &input.NotOwnerError{Input: tp, Identity: id, Why: "the member is unknown"}
}
func (unjoined) Seek(store.TopicPartition, int64)                           {}
func (unjoined) Pause(store.TopicPartition)                                 {}
func (unjoined) Resume(store.TopicPartition)                                {}
func (u unjoined) Now() time.Time                                           { return u.now }
func (unjoined) Close(context.Context) error                                { return nil }
func (unjoined) LogEnd(store.TopicPartition) (int64, bool)                  { return 0, false }
func (unjoined) Go(f func())                                                { f() }
func (unjoined) Partitions(context.Context) ([]store.TopicPartition, error) { return nil, nil }
func (unjoined) DescribeGroup(context.Context) (input.GroupReport, error) {
	return input.GroupReport{}, nil
}
func (unjoined) CheckTopics(context.Context, []string) error { return nil }
func (unjoined) Sleep(context.Context, time.Duration)        {}

// keepingEngine is an engine whose fold keeps every state, on a
// transactional sim backend over topic accounts (2 partitions); both are
// closed with t.
func keepingEngine(t *testing.T) (*sim.Backend, *Engine[[]byte]) {
	t.Helper()
	c := sim.New(sim.Config{Seed: 3})
	if err := c.CreateTopic("accounts", sim.TopicConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	b, err := c.NewBackend(sim.BackendConfig{Mode: store.Transactional, TransactionalIDPrefix: "bank", CreateTopics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	e, err := New(Config[[]byte]{Fold: func([]byte, []byte, bool, Record) (Result[[]byte], error) { return Keep[[]byte](), nil },
		Codec: core.BytesCodec{}, Store: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = CloseAbandoning(e) })
	return b, e
}

// Before the first join nothing is published, and the store refuses to
// commit with what the runner's identity reader reads.
func TestWriteBeforeTheFirstJoinFailsLoudly(t *testing.T) {
	b, e := keepingEngine(t)
	r, err := e.Join(input.OpenFunc(func(input.Opening) (input.Source, error) { return unjoined{}, nil }))
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Acquire(context.Background(), store.Acquisition{
		Input: store.TopicPartition{Topic: "accounts", Partition: 0}, Identity: identity[[]byte]{r},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	err = p.StartWriteBatch(context.Background(), []store.Snapshot{{Key: []byte("k"), Value: []byte("1"), Offset: 0}}).Wait(context.Background())[0]
	if !errors.Is(err, store.ErrMissingIdentity) {
		t.Fatalf("write before the first join: %v, want ErrMissingIdentity", err)
	}
}
