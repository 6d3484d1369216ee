//go:build it

package kafkaio

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store/kafka"
)

// ConfirmOwner on Apache Kafka: the coordinator's describe of a classic
// group and of a consumer-protocol group (KIP-848) confirm the member as
// its partitions' owner and no other member id.
func TestConfirmOwnerOnKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for name, balancer := range map[string]kgo.Opt{
		"classic":  kgo.Balancers(kgo.RangeBalancer()),
		"consumer": kgo.ServerSideBalancer(),
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			topic := fmt.Sprintf("confirm-%s-%d", name, time.Now().UnixNano())
			if err := kafka.CreateTopic(ctx, cl, topic, 2, 1, nil); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { adm.DeleteTopics(context.Background(), topic) })
			checkConfirmOwner(t, Config{SeedBrokers: brokers, Group: topic, Topics: []string{topic},
				ClientOpts: []kgo.Opt{balancer}})
		})
	}
}
