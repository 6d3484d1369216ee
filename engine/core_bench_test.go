package engine_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/internal/cache"
	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/store"
)

// BenchmarkCoreCycle is the engine's per-record bookkeeping without a
// broker: one partition's core over Pebble on disk, folding a per-key
// running sum of 12,500 keys (one partition's share of BenchmarkLimit's
// 100k keys over 8), with the flush cycle the runner makes of it: every
// `every` records a full flush, each write reported landed, and the
// batch made durable with a checkpoint. eos flushes every 1,600 records
// (a 100 ms exactly-once batch of one partition at the limit's rate),
// alo every 75,000 (a 1 s commit: each key changes six times between).
// ns/record and allocs/record are what the engine's own CPU per record is
// made of; make bench-limit measures the whole.
func BenchmarkCoreCycle(b *testing.B) {
	const keys, records = 12_500, 250_000
	for _, v := range []struct {
		name  string
		every int
	}{{"eos", 1_600}, {"alo", 75_000}} {
		b.Run(v.name, func(b *testing.B) {
			recs := make([]core.Record, records)
			for i := range recs {
				recs[i] = core.Record{Key: fmt.Appendf(nil, "key-%06d", (i*7919)%keys), Value: []byte("+1")}
			}
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				kv, err := cache.Open(filepath.Join(b.TempDir(), "cache"), "")
				if err != nil {
					b.Fatal(err)
				}
				c, err := core.New(core.Config[int64, engine.Output]{
					Input: store.TopicPartition{Topic: "in", Partition: 0}, Codec: engine.Int64(),
					Fold: func(_ []byte, sum int64, _ bool, rec *core.Record) (core.Change[int64, engine.Output], error) {
						return core.Change[int64, engine.Output]{Op: core.Set, State: sum + int64(len(rec.Value))}, nil
					},
				}, kv)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				cycle := func() {
					snaps, err := c.Flush(0)
					if err != nil {
						b.Fatal(err)
					}
					for _, s := range snaps {
						if err := c.WriteDone(s.Key, nil); err != nil {
							b.Fatal(err)
						}
					}
					if err := c.Durable([]byte("checkpoint")); err != nil {
						b.Fatal(err)
					}
				}
				for i := range recs {
					recs[i].Offset = int64(i)
					if _, err := c.Fold(&recs[i]); err != nil {
						b.Fatal(err)
					}
					if (i+1)%v.every == 0 {
						cycle()
					}
				}
				cycle()
				b.StopTimer()
				if c.Dirty() || c.Keys() != keys {
					b.Fatalf("dirty %v, %d keys, want clean and %d", c.Dirty(), c.Keys(), keys)
				}
				if err := kv.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*records), "ns/record")
		})
	}
}
