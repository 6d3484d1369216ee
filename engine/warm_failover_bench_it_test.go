//go:build it

package engine_test

import (
	"testing"

	"github.com/snapfence/snapfence/internal/kafkatest"
)

// BenchmarkWarmRestartFailoverBroker is BenchmarkWarmRestartFailover
// (warm_failover_bench_test.go) on the integration tier's real broker
// (SNAPFENCE_KAFKA_BROKERS; `make bench-failover` starts one), with topics
// of its own, deleted at the end. It is a benchmark only: `go test -tags
// it` without -bench runs none of it.
func BenchmarkWarmRestartFailoverBroker(b *testing.B) {
	benchFailover(b, kafkatest.Brokers(b), true)
}
