//go:build it

package kafka_test

import (
	"testing"

	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store/storetest"
)

// On Kafka, in real time, on fresh topics and a fresh group of the
// integration run's broker: the backend's group requests are only
// counted, so the group itself shows that no backend client joined it (a
// join would add a member or rebalance it) or committed for it.
func TestGroupOptionsOfTheUserAreIgnoredOnKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	for _, c := range groupOptsCases() {
		t.Run(c.String(), func(t *testing.T) {
			brokerHarness{brokers}.run(t, nil, brokers, func(t *testing.T, w storetest.World) {
				testGroupOptionsIgnored(t, w.(*brokerWorld).world, c, false, func() {})
			})
		})
	}
}
