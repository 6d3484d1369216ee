//go:build it

package kafka_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/snapfence/snapfence/internal/kafkatest"
)

// The output topics of exactly-once batches on Apache Kafka: a missing one
// is reported within seconds, CreateOutputTopics creates it.
func TestOutputTopicsMissingOrCreatedOnKafka(t *testing.T) {
	seeds := kafkatest.Brokers(t)
	w := &brokerWorld{}
	name := fmt.Sprintf("outs-%d", time.Now().UnixNano())
	w.world = &world{
		input: name, group: name + "-flow", prefix: "sf-" + name, foreignID: name + "-foreign",
		seeds: func() []string { return seeds }, dial: w.dialKafka, now: w.Now,
	}
	w.createTopics(t)
	outputTopicChecks(t, w.world, 5*time.Second)
}
