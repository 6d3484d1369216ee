package engine_test

// BenchmarkRecoveryPause (kfake, real time) and BenchmarkRecoveryPauseBroker
// (build tag `it`, a real broker): how long the partitions a
// member already runs stop folding while a partition newly assigned to it
// recovers cold, and how long until the new one is recovered.
//
// The fixture is warm_bench_test.go's, of two input partitions holding
// -warm.keys keys between them (so the moving partition holds half) and
// no writer. Set-up (untimed): member A starts with FullRecovery (every
// recovery it makes reads the whole snapshot partition, as a member
// without a cache does) and takes both partitions; member B joins on an
// empty Dir, and the cooperative-sticky balancer moves one partition to
// it. A producer then writes to A's partition, one record a millisecond,
// and A folds them. Each op kills B as crashAndLeave does (its consumer
// leaves the group: the partition moves at once) and ends at A's
// `partition recovered` line for it. A sampler reads A's fold count every
// millisecond; pause-ms is the longest stretch in the op with no fold of
// A's own partition, recovery-ms the kill to the line. B's next round
// joins again and takes the partition back (untimed).
//
// A benchmark only: `go test` without -bench runs none of this.

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/store"
)

func BenchmarkRecoveryPause(b *testing.B) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	benchRecoveryPause(b, c.ListenAddrs(), false)
}

// benchRecoveryPause seeds the fixture on the cluster at addrs and runs
// the rounds. On a shared broker (shared) the fixture's topics are
// deleted at the end.
func benchRecoveryPause(b *testing.B, addrs []string, shared bool) {
	fx := newWarmFixture(b, addrs, warmShape{keys: *warmKeys, partitions: 2, noWriter: true})
	fx.deleteTopics = shared
	defer fx.close()
	a := fx.launch(b, b.TempDir(), warmMember{full: true, want: 2, heartbeat: *warmHeartbeat})
	a.waitRecovered(b)
	defer a.stop(b)
	for round := range *warmRounds {
		b.Run("cold", func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				other := fx.launch(b, b.TempDir(), warmMember{killable: true, want: 1, heartbeat: *warmHeartbeat})
				other.waitRecovered(b)
				own, moving := fx.split(b, a, other)
				before := len(a.log.recoveries())
				stream := fx.stream(b, own)
				sampler := sampleFolds(&a.folded)
				stream.waitFolded(b, a)
				b.StartTimer()
				killAt := time.Now()
				other.kill(b)
				rec := waitRecovery(b, a, before, moving)
				b.StopTimer()
				pause := sampler.stop(killAt, rec.at)
				stream.stop()
				other.stop(b)
				if rec.kind != "full" || rec.snapshots < fx.shape.keys/2 {
					b.Fatalf("round %d: %s recovered %s from %d snapshots, want a full recovery of at least %d", round, moving, rec.kind, rec.snapshots, fx.shape.keys/2)
				}
				b.ReportMetric(float64(pause.Milliseconds()), "pause-ms")
				b.ReportMetric(float64(rec.at.Sub(killAt).Milliseconds()), "recovery-ms")
				b.ReportMetric(float64(rec.snapshots), "snapshots")
				b.StartTimer()
			}
		})
	}
}

// split waits until a and other each own one partition, in the same
// generation, and returns a's and the other's.
func (fx *warmFixture) split(b *testing.B, a, other *warmOwner) (own, moving store.TopicPartition) {
	b.Helper()
	deadline := time.Now().Add(warmDeadline)
	for tick := time.NewTicker(20 * time.Millisecond); ; <-tick.C {
		sa, so := a.r.Status(), other.r.Status()
		if len(sa.Partitions) == 1 && len(so.Partitions) == 1 && sa.Ready() && so.Ready() && sa.Identity.Generation == so.Identity.Generation {
			tick.Stop()
			return sa.Partitions[0].Input, so.Partitions[0].Input
		}
		if time.Now().After(deadline) {
			b.Fatalf("the partitions were not split in %v: %+v; %+v", warmDeadline, sa, so)
		}
	}
}

// inputStream produces to one input partition, a record a millisecond.
type inputStream struct {
	done     chan struct{}
	finished chan struct{}
}

// stream starts writing to tp: records of its keys, each a new version
// (the fold parses the value).
func (fx *warmFixture) stream(b *testing.B, tp store.TopicPartition) *inputStream {
	s := &inputStream{done: make(chan struct{}), finished: make(chan struct{})}
	var keys []int
	for i := range fx.shape.keys {
		if fx.keyPartition(i) == tp.Partition && len(keys) < 1000 {
			keys = append(keys, i)
		}
	}
	go func() {
		defer close(s.finished)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
			i := keys[n%len(keys)]
			fx.prod.Produce(context.Background(), &kgo.Record{Topic: fx.input, Partition: tp.Partition, Key: warmKey(i),
				Value: []byte(strconv.Itoa(1 + n))}, func(*kgo.Record, error) {})
		}
	}()
	return s
}

// waitFolded waits until a has folded some of the stream's records.
func (s *inputStream) waitFolded(b *testing.B, a *warmOwner) {
	b.Helper()
	from := a.folded.Load()
	deadline := time.Now().Add(warmDeadline)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for a.folded.Load() < from+100 {
		if time.Now().After(deadline) {
			b.Fatalf("the running partition folded nothing in %v", warmDeadline)
		}
		<-tick.C
	}
}

func (s *inputStream) stop() {
	close(s.done)
	<-s.finished
}

// foldSampler reads a fold counter every millisecond and keeps when it
// last moved.
type foldSampler struct {
	done     chan struct{}
	finished chan struct{}
	// gaps are the stretches without a fold: each one's start and end.
	gaps [][2]time.Time
}

func sampleFolds(folded *atomic.Int64) *foldSampler {
	s := &foldSampler{done: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(s.finished)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		last, lastAt := folded.Load(), time.Now()
		for {
			select {
			case <-s.done:
				s.gaps = append(s.gaps, [2]time.Time{lastAt, time.Now()})
				return
			case now := <-tick.C:
				if n := folded.Load(); n != last {
					s.gaps = append(s.gaps, [2]time.Time{lastAt, now})
					last, lastAt = n, now
				}
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the longest stretch without a fold
// that overlaps [from, to].
func (s *foldSampler) stop(from, to time.Time) time.Duration {
	close(s.done)
	<-s.finished
	var longest time.Duration
	for _, g := range s.gaps {
		if g[1].Before(from) || g[0].After(to) {
			continue
		}
		longest = max(longest, g[1].Sub(g[0]))
	}
	return longest
}

// waitRecovery waits for o's `partition recovered` line for tp after the
// first before ones.
func waitRecovery(b *testing.B, o *warmOwner, before int, tp store.TopicPartition) warmRecovery {
	b.Helper()
	deadline := time.Now().Add(warmDeadline)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		if recs := o.log.recoveries(); len(recs) > before {
			for _, r := range recs[before:] {
				if r.input == tp.String() {
					return r
				}
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s not recovered in %v: %+v\n%s", tp, warmDeadline, o.r.Status(), o.log.problems())
		}
	}
}
