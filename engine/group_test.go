package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
// lag, in Status, /readyz and snapfence_unserved_partitions, and, left
// with no partition of its own while the group has two to give, is not
// ready. Once the rebalance ends, none is.
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
	// Both assigned, nothing lagging: nothing unserved.
	for range 6 {
		step()
	}
	if st := r.Status(); len(st.Unserved) != 0 || st.GroupReport.IsZero() || st.GroupReportErr != nil {
		t.Fatalf("status %+v: want a group report with nothing unserved while both members are assigned and nothing lags", st)
	}
	w.produce("bob=+5", "dave=+6", "alice=+7", "carl=+8")
	// A report or two later: the other member's partition is assigned,
	// but lags with its committed offset still: it is reported stalled,
	// with its owner, and its lag, which nobody commits.
	for range 12 {
		step()
	}
	st := r.Status()
	if len(st.Unserved) != 1 || !st.Unserved[0].Stalled || st.Unserved[0].Input != theirs ||
		st.Unserved[0].Owner != other.Identity().MemberID || st.Unserved[0].Lag != 2 {
		t.Fatalf("status %+v: want the other member's partition unserved, stalled, owned by %s, lag 2",
			st, other.Identity().MemberID)
	}
	_, _, end, _ := w.c.Offsets(theirs)
	committed, _ := w.c.CommittedOffset("bank", theirs)
	if end-committed != 2 {
		t.Fatalf("the other member's partition: log end %d, committed %d, want the two new records uncommitted", end, committed)
	}
	h.wantMetric(`snapfence_group_lag{partition="`+label(theirs)+`",topic="accounts"}`, 2)
	h.wantMetric(`snapfence_unserved_partitions`, 1)

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
	if !st.Joined || st.Ready() {
		t.Fatalf("status %+v: ready %t, want a joined member with no partition not ready while the group has two to give", st, st.Ready())
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
	code, body := h.get("/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz %d while the group has two partitions to give and the member none, want 503", code)
	}
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

// noPartitionTier is a cluster noPartitionReadiness runs on: kfake in
// virtual time, or a real broker.
type noPartitionTier struct {
	// interval is the member's GroupReportInterval: long beside the
	// rebalances, so that a report read on the interval alone would come
	// far too late.
	interval time.Duration
	// other is a plain member of the input's group under the
	// cooperative-sticky assignor, with opts.
	other func(opts ...kgo.Opt) *kgo.Client
	// describe describes the input's group.
	describe func() (kadm.DescribedGroup, error)
	topic    string
	// member is the engine's member of the group, under the
	// cooperative-sticky assignor, reading the group report every
	// interval; probe, if set, reads its engine's /readyz.
	member func(interval time.Duration) (r *engine.Member[int], probe func() (int, readyBody))
}

// noPartitionReadiness: a member that joins a group whose two partitions
// two other members hold is assigned nothing (more members than
// partitions, as in a rolling deploy). It is ready once a group report
// finds nothing unserved. While a rebalance that one of the others holds
// up leaves both partitions unserved, it is not ready. Once the rebalance
// ends, still with nothing assigned, it is ready at once: the report
// follows the assignment, not the next GroupReportInterval.
func noPartitionReadiness(t *testing.T, tier noPartitionTier) {
	// holder rejoins a rebalance only once AllowRebalance follows its
	// last poll: the test holds the group's rebalance up with it.
	holder := tier.other(kgo.BlockRebalanceOnPoll(), kgo.RebalanceTimeout(10*time.Minute))
	_ = tier.other()
	settled := func(members int) bool {
		g, err := tier.describe()
		return err == nil && g.Err == nil && g.State == "Stable" && len(g.Members) == members &&
			g.AssignedPartitions().Lookup(tier.topic, 0) && g.AssignedPartitions().Lookup(tier.topic, 1)
	}
	for deadline := time.Now().Add(time.Minute); !settled(2); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the two other members never held both partitions")
		}
	}

	r, probe := tier.member(tier.interval)
	defer r.Close(context.Background())
	stepUntil := func(what string, ok func(engine.Status) bool) engine.Status {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
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
	st := stepUntil("joined and ready", func(st engine.Status) bool { return st.Joined && st.Ready() })
	if len(st.Partitions) != 0 || len(st.Unserved) != 0 {
		t.Fatalf("status %+v: want a ready member with no partition and nothing unserved", st)
	}
	if probe != nil {
		if code, rb := probe(); code != http.StatusOK || len(rb.Partitions) != 0 {
			t.Fatalf("/readyz %d %+v with the group settled, want 200 with no partition", code, rb)
		}
	}

	// The holder polls, so it cannot rejoin; a fourth member's join
	// starts a rebalance that waits for it, and nothing is served.
	polled, cancel := context.WithCancel(context.Background())
	cancel()
	holder.PollFetches(polled)
	defer holder.AllowRebalance() // also when the test fails: the holder's close waits for it
	_ = tier.other()
	held := time.Now()
	st = stepUntil("both partitions unserved", func(st engine.Status) bool {
		return st.GroupReport.After(held) && len(st.Unserved) == 2
	})
	if !st.Joined || len(st.Partitions) != 0 || st.Ready() {
		t.Fatalf("status %+v: ready %t, want a joined member with no partition not ready while both are unserved", st, st.Ready())
	}
	if probe != nil {
		if code, rb := probe(); code != http.StatusServiceUnavailable || !rb.Joined {
			t.Fatalf("/readyz %d %+v while both partitions are unserved, want 503, joined", code, rb)
		}
	}

	holder.AllowRebalance()
	released := time.Now()
	st = stepUntil("ready after the rebalance", engine.Status.Ready)
	if len(st.Partitions) != 0 || len(st.Unserved) != 0 || st.GroupReport.Before(released) {
		t.Fatalf("status %+v: want a ready member with no partition, on a report read after the rebalance", st)
	}
	if took := time.Since(released); took >= tier.interval/2 {
		t.Fatalf("ready %v after the rebalance ended: the report waited for its interval (%v)", took, tier.interval)
	}
	if !settled(4) {
		t.Fatal("the group is not settled with its four members while the member reports ready")
	}
}

// noPartitionReadiness on kfake, in virtual time.
func TestMemberWithNoPartitionReadyOnceTheGroupSettlesOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		coop := protocols["classic-cooperative"]
		noPartitionReadiness(t, noPartitionTier{
			interval: time.Minute,
			other: func(opts ...kgo.Opt) *kgo.Client {
				return w.client(append([]kgo.Opt{kgo.ConsumerGroup("bank"), kgo.ConsumeTopics("accounts"), coop,
					kgo.DisableAutoCommit()}, opts...)...)
			},
			describe: func() (kadm.DescribedGroup, error) {
				groups, err := w.adm.DescribeGroups(context.Background(), "bank")
				return groups["bank"], err
			},
			topic: "accounts",
			member: func(interval time.Duration) (*engine.Member[int], func() (int, readyBody)) {
				m, reg := newMetrics(t)
				e := w.engineWith(func(c *engine.Config[int]) { c.Observer, c.GroupReportInterval = m, interval })
				h := serveHealthOn(t, w.net, e, reg)
				return w.runner(e, coop), h.ready
			},
		})
	})
}

// Ready's rule on statuses as a member reports them: a member holding
// partitions is ready on their states alone, whatever the group report
// says; one holding none is ready only on a report that was read, did
// not fail, and found nothing unserved.
func TestReadyWithNoPartitionRestsOnTheGroupReport(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	running := []engine.PartitionStatus{{Input: store.TopicPartition{Topic: "accounts"}, State: engine.StateRunning}}
	unserved := []engine.UnservedPartition{{Input: store.TopicPartition{Topic: "accounts", Partition: 1}, CommittedOffset: -1, LogEndOffset: 3, Lag: 3}}
	for _, c := range []struct {
		name string
		st   engine.Status
		want bool
	}{
		{"partitions, no report", engine.Status{Live: true, Joined: true, Partitions: running}, true},
		{"partitions, another partition unserved", engine.Status{Live: true, Joined: true, Partitions: running, Unserved: unserved, GroupReport: at}, true},
		{"no partition, nothing unserved", engine.Status{Live: true, Joined: true, GroupReport: at}, true},
		{"no partition, a partition unserved", engine.Status{Live: true, Joined: true, Unserved: unserved, GroupReport: at}, false},
		{"no partition, no report read yet or reports off", engine.Status{Live: true, Joined: true}, false},
		{"no partition, the last report failed", engine.Status{Live: true, Joined: true, GroupReport: at, GroupReportErr: errors.New("describe timed out")}, false},
		{"no partition, not joined", engine.Status{Live: true, GroupReport: at}, false},
	} {
		if got := c.st.Ready(); got != c.want {
			t.Errorf("%s: ready %t, want %t", c.name, got, c.want)
		}
	}
}
