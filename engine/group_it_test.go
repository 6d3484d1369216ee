//go:build it

package engine_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
)

// brokerLag is the group's committed offset and lag of every partition of
// w's input as Kafka's consumer-groups tool computes them: the committed
// offset (kadm.FetchOffsets), and the log end minus it.
func (w *brokerWorld) brokerLag() map[int32][2]int64 {
	w.t.Helper()
	ctx := context.Background()
	committed, err := w.adm.FetchOffsets(ctx, w.topic+"-group")
	if err != nil {
		w.t.Fatal(err)
	}
	ends, err := w.adm.ListEndOffsets(ctx, w.topic)
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[int32][2]int64{}
	ends.Each(func(e kadm.ListedOffset) {
		if c, ok := committed.Lookup(e.Topic, e.Partition); ok && c.Err == nil && c.At >= 0 {
			out[e.Partition] = [2]int64{c.At, e.Offset - c.At}
		}
	})
	return out
}

// On the real broker, an idle partition's status and lag metric agree
// with the group's committed offsets and lag as Kafka's tools show them,
// within moments of the commit landing rather than a commit interval
// later (10 s here).
func TestIdleStatusAgreesWithTheBrokerOnKafka(t *testing.T) {
	w := newBrokerWorld(t)
	m, reg := newMetrics(t)
	r := w.runnerWith(kgo.Balancers(kgo.CooperativeStickyBalancer()), func(c *engine.Config[int]) {
		c.Observer, c.PersistInterval, c.CommitInterval = m, time.Hour, 10*time.Second
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	w.produce("alice=+1", "bob=+2", "dave=+4", "erin=+5", "bob=+7")
	ends, err := w.adm.ListEndOffsets(context.Background(), w.topic)
	if err != nil {
		t.Fatal(err)
	}
	const within = 2 * time.Second
	var agreedAt time.Time // when the broker first showed both partitions at lag 0
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the broker never showed the input committed to its end: %v", w.brokerLag())
		}
		broker := w.brokerLag()
		if agreedAt.IsZero() {
			caught := len(broker) == 2
			for p, cl := range broker {
				e, _ := ends.Lookup(w.topic, p)
				caught = caught && cl[0] == e.Offset && cl[1] == 0
			}
			if !caught {
				continue
			}
			agreedAt = time.Now()
		}
		st := r.Status()
		agree := len(st.Partitions) == 2
		for _, p := range st.Partitions {
			cl := broker[p.Input.Partition]
			agree = agree && p.CommittedOffset == cl[0] && p.Lag == cl[1]
		}
		if agree {
			for _, p := range st.Partitions {
				if v := groupGaugeValue(t, reg, "snapfence_consumer_lag", p.Input); v != 0 {
					t.Fatalf("snapfence_consumer_lag of %s = %v, want 0 as the broker shows", p.Input, v)
				}
			}
			return
		}
		if time.Since(agreedAt) > within {
			t.Fatalf("%v after the broker showed %v the status still shows %+v", time.Since(agreedAt), broker, st.Partitions)
		}
	}
}

// On the real broker, under either protocol: the group report agrees with
// Kafka's own lag, reports nothing unserved while the member serves every
// partition, and (classic) reports a partition added to the input, which
// no member is assigned until the members refresh their metadata, as
// unserved with its lag.
func TestGroupReportOnKafka(t *testing.T) {
	for name, protocol := range map[string]kgo.Opt{
		"classic-cooperative": kgo.Balancers(kgo.CooperativeStickyBalancer()),
		"consumer":            kgo.ServerSideBalancer(),
	} {
		t.Run(name, func(t *testing.T) {
			w := newBrokerWorld(t)
			m, reg := newMetrics(t)
			r := w.runnerWith(protocol, func(c *engine.Config[int]) {
				c.Observer, c.GroupReportInterval = m, 500*time.Millisecond
			})
			defer r.Close(context.Background())
			w.produce("alice=+1", "bob=+2", "dave=+4")
			w.drain(r)
			since := time.Now()
			stepUntil := func(what string, ok func(engine.Status) bool) engine.Status {
				t.Helper()
				for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
					if err := r.Step(context.Background()); err != nil {
						t.Fatal(err)
					}
					if st := r.Status(); ok(st) {
						return st
					}
				}
				t.Fatalf("%s: never; status %+v", what, r.Status())
				return engine.Status{}
			}
			st := stepUntil("a group report", func(st engine.Status) bool { return st.GroupReport.After(since) })
			if len(st.Unserved) != 0 || st.GroupReportErr != nil {
				t.Fatalf("status %+v: want nothing unserved while the member serves every partition", st)
			}
			broker := w.brokerLag()
			for p := range int32(2) {
				tp := store.TopicPartition{Topic: w.topic, Partition: p}
				if v := groupGaugeValue(t, reg, "snapfence_group_lag", tp); v != float64(broker[p][1]) {
					t.Fatalf("snapfence_group_lag of %s = %v, Kafka's lag %d", tp, v, broker[p][1])
				}
			}
			if name == "consumer" {
				return // the coordinator assigns a new partition at the next heartbeat
			}
			if _, err := w.adm.CreatePartitions(context.Background(), 1, w.topic); err != nil {
				t.Fatal(err)
			}
			prod, err := kgo.NewClient(kgo.SeedBrokers(w.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			if err := prod.ProduceSync(context.Background(), &kgo.Record{Topic: w.topic, Partition: 2, Key: []byte("zed"), Value: []byte("+1")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			added := store.TopicPartition{Topic: w.topic, Partition: 2}
			st = stepUntil("the added partition unserved", func(st engine.Status) bool {
				return len(st.Unserved) == 1 && st.Unserved[0].Lag == 1
			})
			if u := st.Unserved[0]; u.Input != added || u.CommittedOffset != -1 || u.LogEndOffset != 1 {
				t.Fatalf("unserved %+v, want %s with lag 1 and nothing committed", u, added)
			}
			if v := groupGaugeValue(t, reg, "snapfence_unserved_partitions", store.TopicPartition{}); v != 1 {
				t.Fatalf("snapfence_unserved_partitions = %v, want 1", v)
			}
		})
	}
}

// gaugeValue is the value of gauge name for tp (any series: an empty
// topic), or -1 if absent.
func groupGaugeValue(t *testing.T, g prometheus.Gatherer, name string, tp store.TopicPartition) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, mt := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if tp.Topic == "" || labels["topic"] == tp.Topic && labels["partition"] == strconv.Itoa(int(tp.Partition)) {
				return mt.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// noPartitionReadiness on the real broker: its coordinator describes no
// assignment while the rebalance is held up, and the member's report
// after its empty assignment finds the group settled.
func TestMemberWithNoPartitionReadyOnceTheGroupSettlesOnKafka(t *testing.T) {
	w := newBrokerWorld(t)
	coop := kgo.Balancers(kgo.CooperativeStickyBalancer())
	group := w.topic + "-group"
	noPartitionReadiness(t, noPartitionTier{
		interval: 20 * time.Second,
		other: func(opts ...kgo.Opt) *kgo.Client {
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(w.brokers...), kgo.ConsumerGroup(group),
				kgo.ConsumeTopics(w.topic), coop, kgo.DisableAutoCommit()}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cl.Close)
			return cl
		},
		describe: func() (kadm.DescribedGroup, error) {
			groups, err := w.adm.DescribeGroups(context.Background(), group)
			return groups[group], err
		},
		topic: w.topic,
		member: func(interval time.Duration) (*engine.Member[int], func() (int, readyBody)) {
			return w.runnerWith(coop, func(c *engine.Config[int]) { c.GroupReportInterval = interval }), nil
		},
	})
}
