// Package kafkatopic creates Kafka topics and waits until they are served:
// the one implementation behind store/kafka.CreateTopic, the snapshot
// topics store/kafka creates, and the output topics the engine's emitter
// and store/kafka's exactly-once batches create; and what output topics
// accept from a producer (Limits, RefusedForGood).
package kafkatopic

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Timeout bounds how long Create waits for a topic to be served, unless
// its context ends first.
const Timeout = 30 * time.Second

// Create is store/kafka.CreateTopic (see its documentation); created
// reports whether this call created the topic (false: it existed).
func Create(ctx context.Context, cl *kgo.Client, topic string, partitions int32, replicationFactor int16, configs map[string]*string) (created bool, err error) {
	_, err = kadm.NewClient(cl).CreateTopic(ctx, partitions, replicationFactor, configs, topic)
	switch {
	case err == nil:
		created = true
	case errors.Is(err, kerr.TopicAlreadyExists):
	default:
		return false, fmt.Errorf("kafka: creating topic %q: %w", topic, err)
	}
	// A topic this call created must list every partition asked for; one
	// that existed, or took the broker's default count, at least one.
	want := int32(1)
	if created && partitions > 0 {
		want = partitions
	}
	return created, awaitServed(ctx, cl, topic, want)
}

// awaitServed waits, retrying every 5 to 25 ms, until a Metadata request
// lists at least want partitions of topic, each with a leader, and each
// leader answers ListOffsets for its partitions without an error.
func awaitServed(ctx context.Context, cl *kgo.Client, topic string, want int32) error {
	wctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	backoff := 5 * time.Millisecond
	var last error
	for {
		err := served(wctx, cl, topic, want)
		if err == nil {
			return nil
		}
		if last == nil || wctx.Err() == nil {
			last = err // not the wait's own end cutting a request short
		}
		t := time.NewTimer(backoff)
		select {
		case <-wctx.Done():
			t.Stop()
			if ctx.Err() != nil {
				return fmt.Errorf("kafka: topic %q is not served (last error: %v): %w", topic, last, ctx.Err())
			}
			return fmt.Errorf("kafka: topic %q is not served after %v (last error: %w)", topic, Timeout, last)
		case <-t.C:
		}
		// Kafka serves a new topic within tens to hundreds of ms; a
		// longer backoff would mostly add to that. Two small requests a
		// try, for one topic, for at most Timeout.
		backoff = min(2*backoff, 25*time.Millisecond)
	}
}

// served is one check of awaitServed: nil if every partition is served.
func served(ctx context.Context, cl *kgo.Client, topic string, want int32) error {
	// Sent with RequestWith, not through kadm (which reads the client's
	// cached metadata for the min age): the client hijacks the request,
	// sends it to a broker and stores the answer in its cache, replacing
	// whatever it held for the topic.
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	meta, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	leaders := map[int32][]int32{} // leader -> its partitions
	var n int32
	for _, t := range meta.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return fmt.Errorf("metadata: %w", err)
		}
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("metadata of partition %d: %w", p.Partition, err)
			}
			if p.Leader < 0 {
				return fmt.Errorf("metadata of partition %d: %w", p.Partition, kerr.LeaderNotAvailable)
			}
			leaders[p.Leader] = append(leaders[p.Leader], p.Partition)
			n++
		}
	}
	if n < want {
		return fmt.Errorf("metadata lists %d partitions, want %d", n, want)
	}
	// ListOffsets straight to each leader: the broker that must serve the
	// partition says whether it does.
	for leader, parts := range leaders {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for _, p := range parts {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = p, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		kresp, err := cl.Broker(int(leader)).Request(ctx, req)
		if err != nil {
			return fmt.Errorf("list offsets on broker %d: %w", leader, err)
		}
		answered := 0
		for _, t := range kresp.(*kmsg.ListOffsetsResponse).Topics {
			if t.Topic != topic {
				continue
			}
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return fmt.Errorf("list offsets of partition %d on broker %d: %w", p.Partition, leader, err)
				}
				answered++
			}
		}
		if answered != len(parts) {
			return fmt.Errorf("list offsets on broker %d answered %d of %d partitions", leader, answered, len(parts))
		}
	}
	return nil
}
