package engine_test

import (
	"context"
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// On the simulated cluster, a member that keeps its partitions but does
// not process them (dead, or stuck) and a rebalance it holds up: the
// survivor's own status never shows those partitions, but its group
// report does. While the other member is assigned its partition, the
// survivor reports that partition's growing lag (snapfence_group_lag);
// while the rebalance waits for the other member, nobody is assigned
// anything and the survivor reports both partitions unserved, with their
// lag, in Status, /readyz and snapfence_unserved_partitions. Once the
// rebalance ends, none is.
func TestGroupReportShowsUnservedPartitionsOnSim(t *testing.T) {
	w := newSimWorld(t)
	m, reg := newMetrics(t)
	e, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: w.store,
		PersistInterval: time.Second, CommitInterval: time.Second, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	h := serveHealth(t, e, reg)
	w.produce("alice=+1", "bob=+2", "carl=+3", "dave=+4") // two to each partition
	r := w.runner(e)
	other := w.c.NewMember("bank", sim.ClassicEager, "accounts") // joins, then never processes anything
	step := func() {
		t.Helper()
		if err := r.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		other.Heartbeat()
		w.c.Advance(time.Second)
	}
	for i := 0; len(r.Flows()) != 1 || len(other.Owned()) != 1; i++ {
		if i == 60 {
			t.Fatalf("the partitions never split between the two members: %v and %v", r.Flows(), other.Owned())
		}
		step()
		other.Poll(sim.Callbacks{})
	}
	theirs := other.Owned()[0]
	w.produce("bob=+5", "dave=+6", "alice=+7", "carl=+8")
	// A report or two later: the other member's partition is assigned
	// (not unserved), and its lag, which nobody commits, is reported.
	for range 12 {
		step()
	}
	st := r.Status()
	if len(st.Unserved) != 0 || st.GroupReport.IsZero() || st.GroupReportErr != nil {
		t.Fatalf("status %+v: want a group report with nothing unserved while both members are assigned", st)
	}
	_, _, end, _ := w.c.Offsets(theirs)
	committed, _ := w.c.CommittedOffset("bank", theirs)
	if end-committed != 2 {
		t.Fatalf("the other member's partition: log end %d, committed %d, want the two new records uncommitted", end, committed)
	}
	h.wantMetric(`snapfence_group_lag{partition="`+label(theirs)+`",topic="accounts"}`, 2)
	h.wantMetric(`snapfence_unserved_partitions`, 0)

	// A rebalance that the other member holds up (it heartbeats but
	// does not rejoin): the survivor revoked everything (eager), and
	// nobody is assigned anything until the rebalance times out.
	w.c.Rebalance("bank")
	for range 8 {
		step()
	}
	st = r.Status()
	if len(st.Partitions) != 0 || len(st.Unserved) != 2 {
		t.Fatalf("status %+v: want no partition of its own and both unserved while the rebalance waits", st)
	}
	for _, u := range st.Unserved {
		_, _, end, _ := w.c.Offsets(u.Input)
		committed, ok := w.c.CommittedOffset("bank", u.Input)
		if !ok {
			committed = 0
		}
		if u.LogEndOffset != end || u.Lag != end-committed {
			t.Fatalf("unserved %+v: want log end %d and lag %d", u, end, end-committed)
		}
		if u.Input == theirs && u.Lag != 2 {
			t.Fatalf("unserved %+v: nobody committed the other member's partition's last two records, want lag 2", u)
		}
	}
	h.wantMetric(`snapfence_unserved_partitions`, 2)
	_, body := h.get("/readyz")
	var rb struct {
		Unserved []struct {
			Topic     string `json:"topic"`
			Partition int32  `json:"partition"`
			Lag       int64  `json:"lag"`
		} `json:"unserved"`
	}
	if err := json.Unmarshal(body, &rb); err != nil || len(rb.Unserved) != 2 || rb.Unserved[0].Topic != "accounts" {
		t.Fatalf("/readyz %s (%v): want both partitions unserved", body, err)
	}

	// The rebalance times out without the other member: the survivor
	// serves both, and nothing is unserved.
	for i := 0; len(r.Flows()) != 2 || len(r.Status().Unserved) != 0; i++ {
		if i == 120 {
			t.Fatalf("the survivor never served both partitions: %+v", r.Status())
		}
		step()
	}
	h.wantMetric(`snapfence_unserved_partitions`, 0)
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.metric(`snapfence_group_lag{partition="0",topic="accounts"}`); ok {
		t.Fatal("a closed runner still reports the group's lag")
	}
}

func label(tp store.TopicPartition) string { return string(rune('0' + tp.Partition)) }

// On kfake with franz-go and store/kafka: the Kafka source describes the
// group under either protocol. With the member serving every partition
// nothing is unserved and the group lag of each partition is the one its
// status shows; a partition added to the input, which no member is
// assigned until the members next learn the topic's metadata, is reported
// unserved with its lag.
func TestGroupReportOnKfake(t *testing.T) {
	for _, name := range []string{"classic-cooperative", "consumer"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t)
				m, reg := newMetrics(t)
				e := w.engineWith(func(c *engine.Config[int]) { c.Observer = m })
				h := serveHealthOn(t, w.net, e, reg)
				w.produce("alice=+1", "bob=+2", "dave=+4")
				r := w.runner(e, protocols[name])
				defer r.Close(context.Background())
				w.drain(r)
				for i := 0; r.Status().GroupReport.IsZero() || !r.Status().GroupReport.After(time.Now().Add(-time.Second)); i++ {
					if i == 100 {
						t.Fatalf("no fresh group report: %+v", r.Status())
					}
					if err := r.Step(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				st := r.Status()
				if len(st.Unserved) != 0 || st.GroupReportErr != nil {
					t.Fatalf("status %+v: want nothing unserved while the member serves every partition", st)
				}
				for _, p := range st.Partitions {
					h.wantMetric(`snapfence_group_lag{partition="`+label(p.Input)+`",topic="accounts"}`, float64(p.Lag))
				}
				if name == "consumer" {
					return // the coordinator assigns a new partition at the next heartbeat
				}
				if _, err := w.adm.CreatePartitions(context.Background(), 1, "accounts"); err != nil {
					t.Fatal(err)
				}
				added := store.TopicPartition{Topic: "accounts", Partition: 2}
				prod := w.client(kgo.RecordPartitioner(kgo.ManualPartitioner())) // knows the new partition
				if err := prod.ProduceSync(context.Background(), &kgo.Record{Topic: "accounts", Partition: 2, Key: []byte("zed"), Value: []byte("+1")}).FirstErr(); err != nil {
					t.Fatal(err)
				}
				for i := 0; ; i++ {
					if i == 100 {
						t.Fatalf("the added partition never reported unserved: %+v", r.Status())
					}
					if err := r.Step(context.Background()); err != nil {
						t.Fatal(err)
					}
					if st := r.Status(); len(st.Unserved) == 1 {
						if u := st.Unserved[0]; u.Input != added || u.CommittedOffset != -1 || u.LogEndOffset != 1 || u.Lag != 1 {
							t.Fatalf("unserved %+v, want %s with lag 1 and nothing committed", u, added)
						}
						break
					}
				}
				h.wantMetric(`snapfence_unserved_partitions`, 1)
				h.wantMetric(`snapfence_group_lag{partition="2",topic="accounts"}`, 1)
			})
		})
	}
}
