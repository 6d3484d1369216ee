//go:build it

package engine_test

import (
	"testing"

	"github.com/snapfence/snapfence/internal/kafkatest"
)

// BenchmarkWarmRestartBroker is BenchmarkWarmRestart (warm_bench_test.go)
// on the integration tier's real broker (SNAPFENCE_KAFKA_BROKERS; `make
// bench-warm` starts one): the same fixture, variants and rounds, with
// topics of their own, deleted at the end. It is a benchmark only: `go
// test -tags it` without -bench runs none of it.
func BenchmarkWarmRestartBroker(b *testing.B) {
	benchWarm(b, kafkatest.Brokers(b), warmIssue17(), true)
}
