package kafkaio

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/store"
)

func tp(p int32) store.TopicPartition { return store.TopicPartition{Topic: "orders", Partition: p} }

func tpsOf(ps ...int32) []store.TopicPartition {
	out := make([]store.TopicPartition, len(ps))
	for i, p := range ps {
		out[i] = tp(p)
	}
	return out
}

// member is a warmMember named name, of generation gen, owning owned and
// holding warm.
func member(name string, gen int32, owned, warm []int32) warmMember {
	m := warmMember{m: &kmsg.JoinGroupResponseMember{MemberID: name}, generation: gen, topics: map[string]bool{"orders": true},
		owned: tpsOf(owned...), warm: map[store.TopicPartition]bool{}}
	for _, p := range warm {
		m.warm[tp(p)] = true
	}
	return m
}

func partitionsOf(n int32) []store.TopicPartition {
	var out []store.TopicPartition
	for p := range n {
		out = append(out, tp(p))
	}
	return out
}

func sorted(ts []store.TopicPartition) []int32 {
	var out []int32
	for _, t := range ts {
		out = append(out, t.Partition)
	}
	slices.Sort(out)
	return out
}

// Every partition is assigned once, and the loads differ by one at most.
func TestBalanceWarmAssignsEveryPartitionEvenly(t *testing.T) {
	for _, c := range []struct{ members, parts int32 }{{1, 4}, {2, 4}, {3, 8}, {3, 32}, {5, 3}} {
		var ms []warmMember
		for i := range c.members {
			ms = append(ms, member(fmt.Sprint("m", i), 1, nil, nil))
		}
		out, _ := balanceWarm(ms, partitionsOf(c.parts))
		seen := map[store.TopicPartition]int{}
		lo, hi := int(c.parts), 0
		for _, ts := range out {
			lo, hi = min(lo, len(ts)), max(hi, len(ts))
			for _, t := range ts {
				seen[t]++
			}
		}
		if len(seen) != int(c.parts) || hi-lo > 1 {
			t.Fatalf("%+v: %v", c, out)
		}
		for t2, n := range seen {
			if n != 1 {
				t.Fatalf("%+v: %v assigned %d times", c, t2, n)
			}
		}
	}
}

// A balanced group keeps its assignment (sticky); a claim of a lower
// generation loses to the current owner's.
func TestBalanceWarmIsSticky(t *testing.T) {
	ms := []warmMember{member("a", 5, []int32{0, 3, 5}, nil), member("b", 5, []int32{1, 2, 4}, nil), member("c", 3, []int32{1}, nil)}
	out, _ := balanceWarm(ms[:2], partitionsOf(6))
	if !slices.Equal(sorted(out[0]), []int32{0, 3, 5}) || !slices.Equal(sorted(out[1]), []int32{1, 2, 4}) {
		t.Fatalf("a balanced group moved: %v", out)
	}
	out, _ = balanceWarm(ms, partitionsOf(6))
	if slices.Contains(sorted(out[2]), 1) || !slices.Contains(sorted(out[1]), 1) {
		t.Fatalf("a stale claim of 1 (generation 3) won over its owner's (5): %v", out)
	}
}

// The partitions of a member that left go to members that hold them warm
// (a standby replica), while they are under their share.
func TestBalanceWarmGivesOrphansToWarmMembers(t *testing.T) {
	// c (gone) owned 4 and 5; b holds 4 warm, a holds 5 warm.
	ms := []warmMember{member("a", 5, []int32{0, 1}, []int32{5}), member("b", 5, []int32{2, 3}, []int32{4})}
	out, _ := balanceWarm(ms, partitionsOf(6))
	if !slices.Equal(sorted(out[0]), []int32{0, 1, 5}) || !slices.Equal(sorted(out[1]), []int32{2, 3, 4}) {
		t.Fatalf("orphans not given to their warm holders: %v", out)
	}
	// The control: without the warm sets, cold placement by order.
	ms = []warmMember{member("a", 5, []int32{0, 1}, nil), member("b", 5, []int32{2, 3}, nil)}
	if out, _ := balanceWarm(ms, partitionsOf(6)); slices.Equal(sorted(out[0]), []int32{0, 1, 5}) {
		t.Fatalf("the control places as the warm case does: %v", out)
	}
}

// A member that comes back with its cache (dynamic: a new member) gets the
// partitions its cache holds, from the member that took them meanwhile.
func TestBalanceWarmGivesAReturningMemberItsCache(t *testing.T) {
	// b owned 1 and 3, left; a took everything; b comes back with 1 and 3 warm.
	ms := []warmMember{member("a", 7, []int32{0, 1, 2, 3}, []int32{0, 1, 2, 3}), member("b2", -1, nil, []int32{1, 3})}
	out, _ := balanceWarm(ms, partitionsOf(4))
	if !slices.Equal(sorted(out[1]), []int32{1, 3}) {
		t.Fatalf("the returning member got %v, its cache holds 1 and 3 (a keeps %v)", sorted(out[1]), sorted(out[0]))
	}
	// The control: with no cache, the plain sticky choice differs.
	ms[1] = member("b2", -1, nil, nil)
	if out, _ := balanceWarm(ms, partitionsOf(4)); slices.Equal(sorted(out[1]), []int32{1, 3}) {
		t.Fatalf("the control gives 1 and 3 too: the test proves nothing")
	}
}

// The member balances with the warm balancer unless the user's options
// choose: the consumer protocol, or balancers of their own.
func TestChoosesBalancing(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []kgo.Opt
		want bool
	}{
		{"nothing", nil, false},
		{"other options", []kgo.Opt{kgo.ClientID("x"), kgo.SessionTimeout(time.Minute)}, false},
		{"the consumer protocol", []kgo.Opt{kgo.ServerSideBalancer()}, true},
		{"range", []kgo.Opt{kgo.Balancers(kgo.RangeBalancer())}, true},
		{"cooperative-sticky", []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer())}, true},
		{"cooperative-sticky and range", []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer(), kgo.RangeBalancer())}, true},
	} {
		if got := choosesBalancing(c.opts); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// A partition whose owner is in the group moves only to a member that has
// caught it up: until then it stays with its owner, named to the new
// member as a warm-up. A partition whose owner is gone moves at once.
func TestBalanceWarmMovesAPartitionOnlyOnceWarmedUp(t *testing.T) {
	warming := func(m warmMember, ready ...int32) warmMember {
		m.canWarmUp = true
		m.ready = map[store.TopicPartition]bool{}
		for _, p := range ready {
			m.ready[tp(p)] = true
		}
		return m
	}
	// a owns all four; b joins, cold.
	ms := []warmMember{member("a", 5, []int32{0, 1, 2, 3}, nil), warming(member("b", -1, nil, nil))}
	out, warmUps := balanceWarm(ms, partitionsOf(4))
	if !slices.Equal(sorted(out[0]), []int32{0, 1, 2, 3}) || len(out[1]) != 0 || len(warmUps[1]) != 2 || len(warmUps[0]) != 0 {
		t.Fatalf("a cold member took partitions from a live owner: assigned %v, warm-ups %v", out, warmUps)
	}
	// b has caught up what it was given: they move.
	given := sorted(warmUps[1])
	ms[1] = warming(member("b", -1, nil, given), given...)
	out, warmUps = balanceWarm(ms, partitionsOf(4))
	if !slices.Equal(sorted(out[1]), given) || len(warmUps[1]) != 0 {
		t.Fatalf("b caught up %v and got %v (warm-ups %v)", given, sorted(out[1]), warmUps[1])
	}
	// The control: a member that cannot warm partitions up takes them cold.
	ms[1] = member("b", -1, nil, nil)
	out, warmUps = balanceWarm(ms, partitionsOf(4))
	if len(out[1]) != 2 || len(warmUps[1]) != 0 {
		t.Fatalf("the control: %v, warm-ups %v", out, warmUps)
	}
	// An orphan (its owner c gone) moves at once, cold or not.
	ms = []warmMember{member("a", 5, []int32{0, 1}, nil), warming(member("b", 5, []int32{2}, nil))}
	out, warmUps = balanceWarm(ms, partitionsOf(4))
	if !slices.Contains(sorted(out[0]), 3) && !slices.Contains(sorted(out[1]), 3) || len(warmUps[0])+len(warmUps[1]) != 0 {
		t.Fatalf("the orphan 3 waited for a warm-up: %v, warm-ups %v", out, warmUps)
	}
}

// The leader's plan carries each member's warm-ups in its assignment; the
// member's balancer hands them on as it parses its assignment.
func TestWarmUpsTravelInTheAssignment(t *testing.T) {
	members := []kmsg.JoinGroupResponseMember{{MemberID: "a"}, {MemberID: "b"}}
	meta := func(b *warmBalancer, owned map[string][]int32) []byte {
		return b.JoinGroupMetadata([]string{"orders"}, owned, 5)
	}
	var gotB []store.TopicPartition
	var calls int
	a := &warmBalancer{warmUp: func([]store.TopicPartition) {}}
	b := &warmBalancer{warmUp: func(tps []store.TopicPartition) { gotB, calls = tps, calls+1 }}
	members[0].ProtocolMetadata = meta(a, map[string][]int32{"orders": {0, 1, 2, 3}})
	members[1].ProtocolMetadata = meta(b, nil)
	gb, _, err := a.MemberBalancer(members)
	if err != nil {
		t.Fatal(err)
	}
	plan := a.Balance(gb.(*kgo.ConsumerBalancer), map[string]int32{"orders": 4})
	for _, sa := range plan.IntoSyncAssignment() {
		bal := a
		if sa.MemberID == "b" {
			bal = b
		}
		assigned, err := bal.ParseSyncAssignment(sa.MemberAssignment)
		if err != nil {
			t.Fatal(err)
		}
		if sa.MemberID == "a" && len(assigned["orders"]) != 4 || sa.MemberID == "b" && len(assigned["orders"]) != 0 {
			t.Fatalf("%s assigned %v", sa.MemberID, assigned)
		}
	}
	if calls != 1 || len(gotB) != 2 {
		t.Fatalf("b was handed warm-ups %v (%d calls), want two", gotB, calls)
	}
	// b catches them up and says so: the next plan moves them, and names
	// no warm-ups (which clears b's).
	b.ready = func() []store.TopicPartition { return gotB }
	members[1].ProtocolMetadata = meta(b, nil)
	gb, _, _ = a.MemberBalancer(members)
	plan = a.Balance(gb.(*kgo.ConsumerBalancer), map[string]int32{"orders": 4})
	for _, sa := range plan.IntoSyncAssignment() {
		if sa.MemberID == "b" {
			if _, err := b.ParseSyncAssignment(sa.MemberAssignment); err != nil {
				t.Fatal(err)
			}
		}
	}
	if calls != 2 || len(gotB) != 0 {
		t.Fatalf("after the move b's warm-ups are %v (%d calls), want none", gotB, calls)
	}
}
