//go:build it

package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/snapfence/snapfence/internal/kafkatest"
)

// A lookup waits for its table, on Kafka 4.3.1 in real time.
func TestLookupWaitsForItsTableOnKafka(t *testing.T) {
	lookupWaitsScript(t, lookupCluster{seeds: kafkatest.Brokers(t), prefix: fmt.Sprintf("lw-%d-", time.Now().UnixNano()),
		until: func(what string, done func() bool) {
			t.Helper()
			for deadline := time.Now().Add(time.Minute); !done(); time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: not within a minute", what)
				}
			}
		}})
}
