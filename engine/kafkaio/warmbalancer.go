package kafkaio

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/store"
)

// WarmBalancerName is the classic group protocol name of the engine's
// balancer (warmBalancer).
const WarmBalancerName = "snapfence-warm"

// warmBalancer is the member's group balancer under the classic protocol,
// unless ClientOpts choose another: cooperative and sticky, as franz-go's
// cooperative-sticky, and where a partition must move (its owner left or
// died, or the balance needs it elsewhere) it goes to a member whose
// cache holds it warm (a standby replica, or the cache of a member that
// owned it before a restart), which then recovers only a delta. Each
// member says which partitions it holds warm in its join metadata's user
// data; the group's leader balances. The group falls back to
// cooperative-sticky while a member that does not know this protocol is
// in it (a rolling upgrade).
//
// A partition whose owner is still in the group moves only to a member
// that has caught it up (a warm-up, as Kafka Streams' warm-up replicas):
// where the balance wants it on a member that can warm partitions up but
// has not, it stays with its owner, and the assignment's user data names
// it to that member as a warm-up. The member follows it as a replica, and
// once the replica is within input.WarmUpLag of the log end it lists it
// as ready in its join metadata and rejoins; the next balance moves it.
// The owner serves the partition until then, so the move costs the new
// owner a delta, not a full recovery.
type warmBalancer struct {
	// warm lists the partitions this member holds warm.
	warm func() []store.TopicPartition
	// warmUp receives the warm-ups of each assignment this member syncs
	// (nil: the member cannot warm partitions up); ready lists the
	// warm-ups it has caught up.
	warmUp func([]store.TopicPartition)
	ready  func() []store.TopicPartition
}

// warmData is a member's user data: the partitions it holds warm, whether
// it can warm partitions up, and the warm-ups it has caught up; by topic,
// sorted. In a steady group (no warm-ups) it changes only with the
// caches, so that a static member's restart rejoins with the metadata it
// left with, and is given its assignment back without a rebalance.
type warmData struct {
	Warm   map[string][]int32 `json:"warm,omitempty"`
	WarmUp bool               `json:"warm_up,omitempty"`
	Ready  map[string][]int32 `json:"ready,omitempty"`
}

// warmAssignment is a member's assignment user data: the partitions it is
// to warm up.
type warmAssignment struct {
	WarmUp map[string][]int32 `json:"warm_up,omitempty"`
}

// byTopic is tps grouped by topic, each topic's partitions sorted, for the
// topics in interests (nil: all); nil if none.
func byTopic(tps []store.TopicPartition, interests []string) map[string][]int32 {
	var out map[string][]int32
	for _, tp := range tps {
		if interests != nil && !slices.Contains(interests, tp.Topic) {
			continue
		}
		if out == nil {
			out = map[string][]int32{}
		}
		if !slices.Contains(out[tp.Topic], tp.Partition) {
			out[tp.Topic] = append(out[tp.Topic], tp.Partition)
		}
	}
	for _, ps := range out {
		slices.Sort(ps) // a stable encoding: a rejoin with the same caches changes nothing
	}
	return out
}

// fromTopics is the partitions of m, in order.
func fromTopics(m map[string][]int32) []store.TopicPartition {
	var out []store.TopicPartition
	for _, t := range slices.Sorted(maps.Keys(m)) {
		for _, p := range m[t] {
			out = append(out, store.TopicPartition{Topic: t, Partition: p})
		}
	}
	return out
}

func (*warmBalancer) ProtocolName() string { return WarmBalancerName }
func (*warmBalancer) IsCooperative() bool  { return true }

func (b *warmBalancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = interests
	meta.Generation = generation
	for _, topic := range slices.Sorted(maps.Keys(current)) {
		owned := kmsg.NewConsumerMemberMetadataOwnedPartition()
		owned.Topic, owned.Partitions = topic, slices.Sorted(slices.Values(current[topic]))
		meta.OwnedPartitions = append(meta.OwnedPartitions, owned)
	}
	data := warmData{WarmUp: b.warmUp != nil}
	if b.warm != nil {
		data.Warm = byTopic(b.warm(), interests)
	}
	if b.ready != nil {
		data.Ready = byTopic(b.ready(), interests)
	}
	meta.UserData, _ = json.Marshal(data) // map keys sorted by encoding/json
	return meta.AppendTo(nil)
}

// ParseSyncAssignment parses this member's assignment, and hands its
// warm-ups on (none clears the last ones).
func (b *warmBalancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(assignment); err != nil {
		return nil, fmt.Errorf("sync assignment parse failed: %v", err) // as kgo.ParseConsumerSyncAssignment
	}
	assigned := make(map[string][]int32, len(a.Topics))
	for _, t := range a.Topics {
		assigned[t.Topic] = t.Partitions
	}
	if b.warmUp != nil {
		var data warmAssignment
		if len(a.UserData) > 0 {
			_ = json.Unmarshal(a.UserData, &data) // another balancer's user data: no warm-ups
		}
		b.warmUp(fromTopics(data.WarmUp))
	}
	return assigned, nil
}

func (b *warmBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	cb, err := kgo.NewConsumerBalancer(b, members)
	if err != nil {
		return nil, nil, err
	}
	return cb, cb.MemberTopics(), nil
}

// Balance implements kgo.ConsumerBalancerBalance.
func (b *warmBalancer) Balance(cb *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	var ms []warmMember
	cb.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		wm := warmMember{m: m, generation: meta.Generation, topics: map[string]bool{}, warm: map[store.TopicPartition]bool{},
			ready: map[store.TopicPartition]bool{}}
		for _, t := range meta.Topics {
			wm.topics[t] = true
		}
		for _, o := range meta.OwnedPartitions {
			for _, p := range o.Partitions {
				wm.owned = append(wm.owned, store.TopicPartition{Topic: o.Topic, Partition: p})
			}
		}
		var data warmData
		if json.Unmarshal(meta.UserData, &data) == nil {
			for _, tp := range fromTopics(data.Warm) {
				wm.warm[tp] = true
			}
			for _, tp := range fromTopics(data.Ready) {
				wm.ready[tp] = true
			}
			wm.canWarmUp = data.WarmUp
		}
		ms = append(ms, wm)
	})
	var parts []store.TopicPartition
	for _, t := range slices.Sorted(maps.Keys(topics)) {
		for p := range topics[t] {
			parts = append(parts, store.TopicPartition{Topic: t, Partition: p})
		}
	}
	plan := cb.NewPlan()
	assigned, warmUps := balanceWarm(ms, parts)
	for i, tps := range assigned {
		for _, tp := range tps {
			plan.AddPartition(ms[i].m, tp.Topic, tp.Partition)
		}
	}
	plan.AdjustCooperative(cb)
	out := warmPlan{plan: plan, warmUps: map[string][]store.TopicPartition{}}
	for i, tps := range warmUps {
		if len(tps) > 0 {
			out.warmUps[ms[i].m.MemberID] = tps
		}
	}
	return out
}

// warmPlan is a balance plan with each member's warm-ups in its
// assignment's user data.
type warmPlan struct {
	plan    *kgo.BalancePlan
	warmUps map[string][]store.TopicPartition
}

func (p warmPlan) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment {
	out := p.plan.IntoSyncAssignment()
	for i := range out {
		tps := p.warmUps[out[i].MemberID]
		if len(tps) == 0 {
			continue
		}
		var a kmsg.ConsumerMemberAssignment
		if err := a.ReadFrom(out[i].MemberAssignment); err != nil {
			continue // franz-go's own encoding: cannot fail
		}
		a.UserData, _ = json.Marshal(warmAssignment{WarmUp: byTopic(tps, nil)})
		out[i].MemberAssignment = a.AppendTo(nil)
	}
	return out
}

// warmMember is a member as its join metadata describes it.
type warmMember struct {
	m          *kmsg.JoinGroupResponseMember
	generation int32
	topics     map[string]bool
	owned      []store.TopicPartition
	warm       map[store.TopicPartition]bool
	// canWarmUp: the member follows the warm-ups it is given; ready are
	// those it has caught up.
	canWarmUp bool
	ready     map[store.TopicPartition]bool
}

// balanceWarm assigns parts to ms (in the order franz-go gives them:
// by instance id, then member id): each member gets its share, the
// partitions divided evenly (the first members one more while there is a
// remainder); a partition stays with its current owner (the claimant of
// the highest generation) while that owner is under its share; a member
// over its share gives up first the partitions another member holds
// warm; and each partition left goes to a member under its share that
// holds it warm, else to the least loaded. A member takes only
// partitions of the topics it subscribes to.
//
// Then a partition bound for a member that can warm partitions up, but
// has not caught this one up (ready), stays with its owner if the owner
// is still in the group and subscribed to it: the member is given it as
// a warm-up instead (warmUps), and the owner stays over its share until
// the member is ready. A partition whose owner is gone moves at once.
func balanceWarm(ms []warmMember, parts []store.TopicPartition) (out, warmUps [][]store.TopicPartition) {
	out = make([][]store.TopicPartition, len(ms))
	warmUps = make([][]store.TopicPartition, len(ms))
	if len(ms) == 0 {
		return out, warmUps
	}
	floor, extra := len(parts)/len(ms), len(parts)%len(ms)
	load := make([]int, len(ms))
	atCeil := 0
	canTake := func(i int) bool { return load[i] < floor || (load[i] == floor && atCeil < extra) }
	take := func(i int, tp store.TopicPartition) {
		out[i] = append(out[i], tp)
		load[i]++
		if load[i] == floor+1 {
			atCeil++
		}
	}
	valid := map[store.TopicPartition]bool{}
	for _, tp := range parts {
		valid[tp] = true
	}
	// The owner of each partition: the claimant of the highest generation
	// (a member that missed rebalances may still claim a partition moved
	// since).
	owner := map[store.TopicPartition]int{}
	for i, m := range ms {
		for _, tp := range m.owned {
			if j, ok := owner[tp]; !ok || m.generation > ms[j].generation {
				owner[tp] = i
			}
		}
	}
	// warmElsewhere: a member other than the partition's owner, and
	// subscribed to its topic, holds it warm.
	warmElsewhere := map[store.TopicPartition]bool{}
	for j, m := range ms {
		for tp := range m.warm {
			if o, owned := owner[tp]; m.topics[tp.Topic] && (!owned || o != j) {
				warmElsewhere[tp] = true
			}
		}
	}
	assigned := map[store.TopicPartition]bool{}
	for i, m := range ms {
		var mine []store.TopicPartition
		for _, tp := range m.owned {
			if owner[tp] == i && valid[tp] && m.topics[tp.Topic] && !slices.Contains(mine, tp) {
				mine = append(mine, tp)
			}
		}
		// Kept first: those no other member holds warm.
		slices.SortFunc(mine, func(a, b store.TopicPartition) int {
			wa, wb := warmElsewhere[a], warmElsewhere[b]
			switch {
			case wa == wb:
				return a.Compare(b)
			case wb:
				return -1
			}
			return 1
		})
		for _, tp := range mine {
			if canTake(i) {
				take(i, tp)
				assigned[tp] = true
			}
		}
	}
	for _, tp := range parts {
		if assigned[tp] {
			continue
		}
		best := -1
		for i, m := range ms {
			if !m.topics[tp.Topic] {
				continue
			}
			if best < 0 {
				best = i
				continue
			}
			ci, cb := canTake(i), canTake(best)
			switch {
			case ci != cb:
				if ci {
					best = i
				}
			case m.warm[tp] != ms[best].warm[tp]:
				if m.warm[tp] {
					best = i
				}
			case load[i] < load[best]:
				best = i
			}
		}
		if best >= 0 {
			take(best, tp)
		}
	}
	for i, m := range ms {
		if !m.canWarmUp {
			continue
		}
		kept := out[i][:0]
		for _, tp := range out[i] {
			if o, owned := owner[tp]; owned && o != i && ms[o].topics[tp.Topic] && !m.ready[tp] {
				out[o] = append(out[o], tp)
				warmUps[i] = append(warmUps[i], tp)
				continue
			}
			kept = append(kept, tp)
		}
		out[i] = kept
	}
	return out, warmUps
}

var _ kgo.GroupBalancer = (*warmBalancer)(nil)

// choosesBalancing reports whether opts choose how the group balances:
// the consumer protocol (kgo.ServerSideBalancer), or balancers of their
// own (kgo.Balancers, whatever they are). It reads them through a client
// of no group, which joins nothing and is closed at once, given a
// sentinel balancer first: one left in place was not chosen.
func choosesBalancing(opts []kgo.Opt) bool {
	group := []kgo.Opt{kgo.Balancers(sentinelBalancer)}
	for _, o := range opts {
		if _, ok := o.(kgo.GroupOpt); ok {
			group = append(group, o)
		}
	}
	if len(group) == 1 {
		return false
	}
	cl, err := kgo.NewClient(group...)
	if err != nil {
		return true // the member's own client will say what is wrong
	}
	defer cl.Close()
	if v, _ := cl.OptValue(kgo.ServerSideBalancer).(bool); v {
		return true
	}
	bs, _ := cl.OptValue(kgo.Balancers).([]kgo.GroupBalancer)
	return len(bs) != 1 || bs[0] != sentinelBalancer
}

// sentinelBalancer marks the balancers no option chose (choosesBalancing).
var sentinelBalancer kgo.GroupBalancer = &warmBalancer{}
