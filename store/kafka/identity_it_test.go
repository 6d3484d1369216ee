//go:build it

package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/sim"
)

// identityCase is one (member id, generation) pair of a transactional
// offset commit, relative to the group's current member and the member's
// history.
type identityCase struct {
	name   string
	member func(current string) string
	gen    func(h epochs) int32
}

// epochs is what the member's client saw of its generations (or member
// epochs): the one before the committed partition was assigned to it, the
// one it was assigned at, the previous one and the current one.
type epochs struct{ before, assigned, previous, current int32 }

var identityCases = []identityCase{
	{"current member, current generation", same, func(h epochs) int32 { return h.current }},
	{"current member, its previous generation", same, func(h epochs) int32 { return h.previous }},
	{"current member, generation it got the partition", same, func(h epochs) int32 { return h.assigned }},
	{"current member, generation before that", same, func(h epochs) int32 { return h.before }},
	{"current member, future generation", same, func(h epochs) int32 { return h.current + 1 }},
	{"current member, generation -1", same, func(epochs) int32 { return -1 }},
	{"unknown member, current generation", func(string) string { return "stranger" }, func(h epochs) int32 { return h.current }},
	{"empty member, current generation", func(string) string { return "" }, func(h epochs) int32 { return h.current }},
	{"empty member, generation -1", func(string) string { return "" }, func(epochs) int32 { return -1 }},
}

func same(m string) string { return m }

// answer is what a coordinator said: "OK" or the error's name.
func answer(err error) string {
	if err == nil {
		return "OK"
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return err.Error()
}

// The identity matrix: which (member id, generation or member epoch) pairs
// Apache Kafka's coordinator accepts in a TxnOffsetCommit, under the
// classic and the consumer protocol, side by side with the sim's answers,
// which must be the same.
func TestIdentityMatrixMatchesTheSim(t *testing.T) {
	for _, protocol := range []sim.Protocol{sim.ClassicEager, sim.Consumer} {
		t.Run(protocol.String(), func(t *testing.T) { identityMatrix(t, protocol) })
	}
}

func identityMatrix(t *testing.T, protocol sim.Protocol) {
	brokers := kafkatest.Brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	admin, err := kgo.NewClient(base...)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	topic := fmt.Sprintf("identity-%d", time.Now().UnixNano())
	group := topic + "-group"
	if err := kafka.CreateTopic(ctx, admin, topic, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	defer adm.DeleteTopics(context.Background(), topic)
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	topicID := td[topic].ID

	// Real Kafka. The member subscribes to a second topic first, then to
	// the committed one too, so the committed partition's assignment
	// epoch is above its first; then another member subscribed only to
	// the second topic joins and leaves: two more generations, and the
	// committed partition never moves.
	if err := kafka.CreateTopic(ctx, admin, topic+"-other", 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	defer adm.DeleteTopics(context.Background(), topic+"-other")
	balancer := kgo.Balancers(kgo.RangeBalancer())
	if protocol == sim.Consumer {
		balancer = kgo.ServerSideBalancer()
	}
	var h epochs
	var member *kgo.Client
	member, err = kgo.NewClient(append(base, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic+"-other"),
		balancer, kgo.SessionTimeout(10*time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			if len(m[topic]) > 0 && h.assigned == 0 { // eager assigns it again every generation
				_, h.assigned = cl.GroupMetadata()
			}
		}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	var seen []int32 // the generations the client went through
	// poll drives the member until done holds.
	poll := func(what string, done func() bool) {
		for ctx.Err() == nil {
			pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
			member.PollFetches(pctx) // drives the group; nothing to fetch
			pcancel()
			if _, g := member.GroupMetadata(); g > 0 && (len(seen) == 0 || seen[len(seen)-1] != g) {
				seen = append(seen, g)
			}
			if done() {
				return
			}
		}
		t.Fatalf("the member did not %s (generations seen %v, partition assigned at %d)", what, seen, h.assigned)
	}
	poll("join", func() bool { return len(seen) > 0 })
	h.before = seen[len(seen)-1]
	member.AddConsumeTopics(topic)
	poll("get the committed partition", func() bool { return h.assigned > 0 })
	other, err := kgo.NewClient(append(base, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic+"-other"), balancer)...)
	if err != nil {
		t.Fatal(err)
	}
	for ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		other.PollFetches(pctx)
		pcancel()
		if _, g := other.GroupMetadata(); g > 0 {
			break
		}
	}
	other.Close() // leaves: one more generation
	poll("see the other member join and leave", func() bool { return seen[len(seen)-1] >= h.assigned+2 })
	memberID, gen := member.GroupMetadata()
	h.current, h.previous = gen, seen[len(seen)-2]

	commitReal := func(c identityCase) string {
		txnID := fmt.Sprintf("%s-%d", topic, time.Now().UnixNano())
		p, err := kgo.NewClient(append(base, kgo.TransactionalID(txnID), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := p.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		pid, epoch, err := p.ProducerID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		req := kmsg.NewPtrTxnOffsetCommitRequest()
		req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = txnID, group, pid, epoch
		req.MemberID, req.Generation = c.member(memberID), c.gen(h)
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic, rt.TopicID = topic, topicID
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = 0, 1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		got := kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
		if err := p.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Fatal(err)
		}
		return answer(got)
	}

	// The sim: the same steps.
	c := sim.New(sim.Config{Seed: 1})
	c.CreateTopic(topic, sim.TopicConfig{Partitions: 1})
	c.CreateTopic(topic+"-other", sim.TopicConfig{Partitions: 1})
	var sh epochs
	cb := sim.Callbacks{Assigned: func(m *sim.Member, tps []store.TopicPartition) {
		for _, tp := range tps {
			if tp.Topic == topic && sh.assigned == 0 {
				sh.assigned = m.Identity().Generation
			}
		}
	}}
	simPoll := func(ms ...*sim.Member) {
		for range 4 {
			for _, m := range ms {
				m.Poll(cb)
			}
		}
	}
	sm := c.NewMember(group, protocol, topic+"-other")
	simPoll(sm)
	sh.before = sm.Identity().Generation
	sm.Subscribe(topic+"-other", topic)
	simPoll(sm)
	so := c.NewMember(group, protocol, topic+"-other")
	simPoll(sm, so)
	so.Leave(sim.Callbacks{})
	simPoll(sm)
	simID := sm.Identity()
	sh.current = simID.Generation
	_, sh.previous = c.MemberEpochs(group, simID.MemberID)
	commitSim := func(cs identityCase) string {
		p := c.InitProducerID(fmt.Sprintf("sim-%s", cs.name), 0)
		defer p.EndTxn(false)
		id := store.GroupIdentity{Group: group, MemberID: cs.member(simID.MemberID), Generation: cs.gen(sh)}
		return answer(p.TxnOffsetCommit(id, map[store.TopicPartition]int64{{Topic: topic}: 1}))
	}

	var table strings.Builder
	fmt.Fprintf(&table, "%-48s %-22s %-22s\n", "TxnOffsetCommit, "+protocol.String(), "Apache Kafka", "sim")
	for _, cs := range identityCases {
		real, simmed := commitReal(cs), commitSim(cs)
		fmt.Fprintf(&table, "%-48s %-22s %-22s\n", cs.name, real, simmed)
		if real != simmed {
			t.Errorf("%s: Kafka answers %s, the sim %s", cs.name, real, simmed)
		}
	}
	t.Logf("identity matrix (Kafka's member went through %v with the partition from %d; the sim's %+v):\n%s", seen, h.assigned, sh, table.String())
}
