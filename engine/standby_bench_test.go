package engine_test

// BenchmarkStandbyCostByReplicaCount: what standby replicas cost each
// member, by replica count and group size, on the simulated cluster: a
// group of M members, each with a Dir of its own and StandbyReplicas N,
// over a 12-partition input of 24,000 keys with 100-byte random states. The op
// (untimed): the members run until every partition is owned and every
// replica placed, vouched and caught up; they close (flushing their
// caches), and their cache directories are measured. Reported per member:
// the replicas it keeps, and its cache on disk (own partitions and
// replicas), the mean and the largest; and the snapshots its replicas
// read. A replica keeps no decoded state in memory (Pebble's memtables
// and block cache only), so the cache on disk is its cost in state.
// docs/benchmarks.md, "Standby replicas by count", has the numbers:
//
//	go test ./engine -run '^$' -bench StandbyCostByReplicaCount -benchtime 1x

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

func BenchmarkStandbyCostByReplicaCount(b *testing.B) {
	const parts, keys, stateBytes = 12, 24000, 100
	for _, c := range []struct{ members, n int }{{3, 0}, {3, 1}, {6, 1}, {3, 2}, {6, 2}, {6, 5}} {
		b.Run(fmt.Sprintf("members=%d/replicas=%d", c.members, c.n), func(b *testing.B) {
			var replicas, meanBytes, maxBytes, read float64
			for range b.N {
				r, mean, most, snaps := standbyCost(b, c.members, c.n, parts, keys, stateBytes)
				replicas, meanBytes, maxBytes, read = replicas+r, meanBytes+mean, maxBytes+most, read+snaps
			}
			n := float64(b.N)
			b.ReportMetric(replicas/n, "replicas/member")
			b.ReportMetric(meanBytes/n/(1<<20), "cache-MiB/member")
			b.ReportMetric(maxBytes/n/(1<<20), "max-cache-MiB/member")
			b.ReportMetric(read/n, "replica-reads/member")
		})
	}
}

// standbyCost runs one group to its settled placement and measures it.
func standbyCost(b *testing.B, members, n, parts, keys, stateBytes int) (replicas, meanBytes, maxBytes, reads float64) {
	b.Helper()
	c := sim.New(sim.Config{Seed: 5})
	if err := c.CreateTopic("wide", sim.TopicConfig{Partitions: parts}); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5)) // states Pebble cannot compress
	for k := range keys {
		v := make([]byte, stateBytes)
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		if _, err := c.Produce(store.TopicPartition{Topic: "wide", Partition: int32(k % parts)}, wire.Record{Key: fmt.Appendf(nil, "k%d", k), Value: v}); err != nil {
			b.Fatal(err)
		}
	}
	be, err := c.NewBackend(sim.BackendConfig{Mode: store.Transactional, TransactionalIDPrefix: "cost", CreateTopics: true})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	dirs := make([]string, members)
	engines := make([]*engine.Engine[[]byte], members)
	rs := make([]*engine.Member[[]byte], members)
	for i := range rs {
		dirs[i] = b.TempDir()
		e, err := engine.New(engine.Config[[]byte]{
			Fold: func(_ []byte, _ []byte, _ bool, rec engine.Record) (engine.Result[[]byte], error) {
				return engine.Set(rec.Value), nil
			},
			Codec: engine.Bytes(), Store: be, Dir: dirs[i], StandbyReplicas: n,
		})
		if err != nil {
			b.Fatal(err)
		}
		engines[i] = e
		if rs[i], err = e.Join(simsource.New(c, "cost", sim.ClassicCooperative, 0, "wide")); err != nil {
			b.Fatal(err)
		}
	}
	want := min(n, members-1) * parts
	settled := func() bool {
		owned, placed := 0, 0
		for _, r := range rs {
			st := r.Status()
			for _, p := range st.Partitions {
				if p.State != engine.StateRunning || p.Lag != 0 {
					return false
				}
				owned++
			}
			for _, sb := range st.Standbys {
				if !sb.Vouched || sb.Lag != 0 {
					return false
				}
				placed++
			}
		}
		return owned == parts && placed == want
	}
	for i := 0; !settled(); i++ {
		if i == 600 {
			b.Fatalf("the group did not settle in 10 virtual minutes")
		}
		for _, r := range rs {
			if err := r.Step(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
		c.Advance(time.Second)
	}
	for i, r := range rs {
		replicas += float64(len(r.Status().Standbys))
		for _, sb := range r.Status().Standbys {
			reads += float64(sb.Position)
		}
		if err := r.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
		if err := engines[i].Close(); err != nil {
			b.Fatal(err)
		}
		size := float64(dirSize(b, dirs[i]))
		meanBytes += size
		maxBytes = max(maxBytes, size)
	}
	m := float64(members)
	return replicas / m, meanBytes / m, maxBytes, reads / m
}
