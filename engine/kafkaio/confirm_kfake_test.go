package kafkaio

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/input"
	"github.com/snapfence/snapfence/store"
)

// assignments records what a source's callbacks assigned.
type assignments struct {
	mu       sync.Mutex
	assigned map[store.TopicPartition]bool
}

func (a *assignments) Assigned(_ context.Context, tps []store.TopicPartition) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, tp := range tps {
		a.assigned[tp] = true
	}
}

func (a *assignments) Revoked(_ context.Context, tps []store.TopicPartition) { a.drop(tps) }
func (a *assignments) Lost(_ context.Context, tps []store.TopicPartition)    { a.drop(tps) }

func (a *assignments) drop(tps []store.TopicPartition) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, tp := range tps {
		delete(a.assigned, tp)
	}
}

func (a *assignments) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.assigned)
}

// The coordinator confirms a member as the owner of what it was assigned,
// and refuses any other member id (an evicted member's, whose client has
// not heard of it yet) and any partition no member is assigned, under the
// classic protocol and the consumer protocol alike.
func TestConfirmOwnerAsksTheCoordinator(t *testing.T) {
	for name, balancer := range map[string]kgo.Opt{
		"classic":  kgo.Balancers(kgo.RangeBalancer()),
		"consumer": kgo.ServerSideBalancer(),
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				net := new(kfake.VirtualNetwork)
				c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ListenFn(net.Listen), kfake.SeedTopics(2, "in"))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				checkConfirmOwner(t, Config{
					SeedBrokers: c.ListenAddrs(), Group: "g", Topics: []string{"in"},
					ClientOpts: []kgo.Opt{kgo.Dialer(net.DialContext), balancer},
				})
			})
		})
	}
}

// checkConfirmOwner opens a source of cfg, whose topic has two
// partitions, polls until it is assigned both, and checks the
// coordinator's answers to ConfirmOwner.
func checkConfirmOwner(t *testing.T, cfg Config) {
	h := &assignments{assigned: map[store.TopicPartition]bool{}}
	src, err := cfg.Open(input.Opening{Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = src.Close(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for h.count() < 2 {
		if _, err := src.Poll(ctx, func() time.Duration { return 100 * time.Millisecond }); err != nil {
			t.Fatalf("polling until both partitions are assigned (%d are): %v", h.count(), err)
		}
		src.PollDone()
	}
	id := src.Identity()
	p0 := store.TopicPartition{Topic: cfg.Topics[0], Partition: 0}
	if err := src.ConfirmOwner(ctx, p0, id); err != nil {
		t.Fatalf("the owner of %s, %s: %v", p0, id, err)
	}
	stranger := id
	stranger.MemberID = "evicted-member"
	err = src.ConfirmOwner(ctx, p0, stranger)
	var notOwner *input.NotOwnerError
	if !errors.As(err, &notOwner) || !errors.Is(err, store.ErrFenced) {
		t.Fatalf("another member id, %s: got %v, want a *input.NotOwnerError matching store.ErrFenced", stranger, err)
	}
	t.Logf("another member id: %v", err)
	unassigned := store.TopicPartition{Topic: cfg.Topics[0], Partition: 7}
	if err := src.ConfirmOwner(ctx, unassigned, id); !errors.As(err, &notOwner) {
		t.Fatalf("a partition no member is assigned: got %v, want a *input.NotOwnerError", err)
	}
}
