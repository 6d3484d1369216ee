package service

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/kafkatopic"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// createTopics checks that the input topic and the topics of the plain
// lookup tables exist, and creates the missing ones under CreateTopics
// (the tables' compacted). Without it a missing topic is a
// *store.ConfigError naming it, at New rather than at the first poll.
// The snapshot and output topics are the store's and the producer's to
// create (each knows their settings).
func (s *Service[S]) createTopics(ctx context.Context) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(s.brokers...)}, s.cfg.clientOpts()...)...)
	if err != nil {
		return fmt.Errorf("service: admin client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	want := map[string]map[string]*string{s.cfg.Input: nil}
	field := map[string]string{s.cfg.Input: "Input"}
	for i, t := range s.cfg.Engine.Tables {
		if p, ok := t.(plainTable); ok {
			if topic, plain := p.PlainTopic(); plain {
				want[topic] = map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
				field[topic] = fmt.Sprintf("Engine.Tables[%d]", i)
			}
		}
	}
	topics := make([]string, 0, len(want))
	for t := range want {
		topics = append(topics, t)
	}
	described, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return fmt.Errorf("service: listing topics %q on %s: %w", topics, strings.Join(s.brokers, ","), err)
	}
	for _, t := range topics {
		d, ok := described[t]
		if ok && d.Err == nil {
			continue
		}
		if ok && !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("service: describing topic %s: %w", t, d.Err)
		}
		if !s.cfg.CreateTopics {
			return &store.ConfigError{Subject: "service.Config." + field[t], Problem: fmt.Sprintf("topic %q does not exist", t),
				Fix: "create it, or set service.Config.CreateTopics", Err: kafka.ErrTopicMissing}
		}
		if err := s.createTopic(ctx, cl, t, want[t]); err != nil {
			return err
		}
	}
	return nil
}

// createTopic creates topic and waits until it is served: a reader that
// opens it at once (a table, the consumer) finds every partition.
func (s *Service[S]) createTopic(ctx context.Context, cl *kgo.Client, topic string, configs map[string]*string) error {
	n := s.cfg.Partitions
	if n == 0 {
		n = -1 // the broker's num.partitions
	}
	created, err := kafkatopic.Create(ctx, cl, topic, n, -1, configs)
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	if created {
		count := any(n)
		if n < 0 {
			count = "the broker's num.partitions"
		}
		s.logger().Info("created topic", "topic", topic, "partitions", count)
	}
	return nil
}
