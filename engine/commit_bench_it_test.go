//go:build it

package engine_test

// BenchmarkCommitInterval: the engine's throughput at each of
// commitVariants' commit intervals, on the integration tier's real broker
// (SNAPFENCE_KAFKA_BROKERS; `make bench-commit` starts one and runs
// BenchmarkCommitIntervalCrash beside it; docs/benchmarks.md, "Commit
// interval"). A benchmark only: `go test -tags it` without -bench runs
// none of it.
//
// Each op is one of BenchmarkLimit's engine ops (limit_bench_it_test.go:
// a backlog of -limit.records, 1M, over 100k keys in 8 partitions, a
// per-key sum, one output per input through a kafkaio.Emitter's
// StartEmit at least once, or in the transactions exactly once; Pebble
// on disk) with the variant's CommitInterval, PersistInterval following
// it, except that the engine commits (Member.FlushAll) as soon as it has
// folded the last record: the measured part, from the first fold until
// every input offset is committed, then holds all the work of the
// backlog (the folds, the outputs, every snapshot and commit) and no wait
// for a commit tick, which would otherwise make a 1 min interval's op a
// minute long. A tick that falls inside the backlog does its work there,
// as in production; a backlog shorter than the interval writes each key's
// snapshot once, at the end, which a service running for longer than
// the interval also pays once an interval.
//
// The variants run in -commit.rounds interleaved rounds (100ms, 250ms,
// ..., exactly-once, 100ms#01, ...); benchtable pairs each op with the
// 1 min op of its round. Reported per op: BenchmarkLimit's metrics
// (records/s, consumed-s, txns/1M, snapshots/1M, cpu-s, broker-cpu-s,
// txn-s, ...).

import (
	"flag"
	"testing"

	"github.com/snapfence/snapfence/internal/kafkatest"
)

var commitRounds = flag.Int("commit.rounds", 3, "BenchmarkCommitInterval: rounds of the variants, interleaved")

func BenchmarkCommitInterval(b *testing.B) {
	brokers := kafkatest.Brokers(b)
	for round := 1; round <= *commitRounds; round++ {
		for _, cv := range commitVariants {
			v := limitVariant{name: cv.name, interval: cv.interval, flushAtEnd: true,
				start: func(lr *limitRun) func() error { return lr.startEngine(cv.eos, false) }}
			b.Run(cv.name, func(b *testing.B) {
				for range b.N {
					runLimit(b, brokers, v, round)
				}
			})
		}
	}
}
