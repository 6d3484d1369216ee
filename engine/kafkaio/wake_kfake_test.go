package kafkaio

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/input"
	"github.com/snapfence/snapfence/store"
)

type noCallbacks struct{}

func (noCallbacks) Assigned(context.Context, []store.TopicPartition) {}
func (noCallbacks) Revoked(context.Context, []store.TopicPartition)  {}
func (noCallbacks) Lost(context.Context, []store.TopicPartition)     {}

// The Kafka source's Go ends the poll in flight once its work returns: a
// recovery's outcome is taken in when it ends, not after the poll's wait
// (up to a commit interval).
func TestKafkaSourceGoEndsThePollItsWorkWaitsFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := new(kfake.VirtualNetwork)
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ListenFn(net.Listen))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		src, err := Config{
			SeedBrokers: c.ListenAddrs(), Group: "g", Topics: []string{"in"}, CreateTopics: true,
			ClientOpts: []kgo.Opt{kgo.Dialer(net.DialContext)},
		}.Open(input.Opening{Handler: noCallbacks{}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = src.Close(context.Background()) }()
		pollFor := func(wait time.Duration) time.Duration {
			start := time.Now()
			if _, err := src.Poll(context.Background(), func() time.Duration { return wait }); err != nil {
				t.Fatal(err)
			}
			src.PollDone()
			return time.Since(start)
		}
		poll := func() time.Duration { return pollFor(time.Minute) }
		// The member joins first: its assignment's callback ends a poll
		// too.
		for !src.Identity().Valid() {
			pollFor(100 * time.Millisecond)
		}
		pollFor(time.Second)

		// Work that ends while a poll waits ends it.
		release := make(chan struct{})
		src.Go(func() { <-release })
		polled := make(chan time.Duration, 1)
		go func() { polled <- poll() }()
		synctest.Wait() // the poll waits
		close(release)
		if took := <-polled; took > 10*time.Second {
			t.Fatalf("the poll waited %s: the work's end did not end it", took)
		}

		// Work that ended between polls leaves the next poll's wait be:
		// the runner bounds it itself while a recovery is in flight
		// (pollWait).
		ended := make(chan struct{})
		src.Go(func() { close(ended) })
		<-ended
		synctest.Wait()
		if took := poll(); took < time.Minute {
			t.Fatalf("a later poll returned after %s, before its wait", took)
		}
	})
}
