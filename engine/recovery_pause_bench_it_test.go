//go:build it

package engine_test

import (
	"testing"

	"github.com/snapfence/snapfence/internal/kafkatest"
)

// BenchmarkRecoveryPauseBroker is BenchmarkRecoveryPause
// (recovery_pause_bench_test.go) on the integration tier's real broker
// (SNAPFENCE_KAFKA_BROKERS), with topics of its own, deleted at the end.
// It is a benchmark only: `go test -tags it` without -bench runs none of
// it.
func BenchmarkRecoveryPauseBroker(b *testing.B) {
	benchRecoveryPause(b, kafkatest.Brokers(b), true)
}
