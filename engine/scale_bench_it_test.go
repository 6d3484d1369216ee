//go:build it

package engine_test

import (
	"testing"

	"github.com/snapfence/snapfence/internal/kafkatest"
)

// BenchmarkOwnedPartitionsBroker is BenchmarkOwnedPartitions
// (scale_bench_test.go) on the integration tier's real broker
// (SNAPFENCE_KAFKA_BROKERS; `make bench-scale` starts one), where the
// process's sockets, goroutines and memory are the instance's alone. A
// benchmark only: `go test -tags it` without -bench runs none of it.
func BenchmarkOwnedPartitionsBroker(b *testing.B) {
	benchOwnedPartitions(b, kafkatest.Brokers(b))
}
