package placement

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/snapfence/snapfence/store"
)

func members(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("host-%d-5f3a9c", i)
	}
	return out
}

// parts are n partitions, owned round-robin by ms.
func parts(n int, ms []string) []Partition {
	out := make([]Partition, n)
	for i := range out {
		out[i] = Partition{TP: store.TopicPartition{Topic: "orders", Partition: int32(i)}, Owner: ms[i%len(ms)]}
	}
	return out
}

// The same inputs in any order give the same places; never the owner,
// never a member twice, n of them while there are enough members.
func TestPlaceIsDeterministicAndSkipsTheOwner(t *testing.T) {
	ms := members(5)
	ps := parts(32, ms)
	for n := range 6 {
		got := Place(ps, ms, n)
		rms, rps := slices.Clone(ms), slices.Clone(ps)
		slices.Reverse(rms)
		slices.Reverse(rps)
		if again := Place(rps, append(rms, rms[0], ""), n); !maps.EqualFunc(got, again, slices.Equal) {
			t.Fatalf("n=%d: %v, and %v with the inputs reversed", n, got, again)
		}
		for _, p := range ps {
			places := got[p.TP]
			if want := min(n, len(ms)-1); len(places) != want {
				t.Fatalf("%v n=%d: %d places %v, want %d", p.TP, n, len(places), places, want)
			}
			if slices.Contains(places, p.Owner) {
				t.Fatalf("%v: the owner %s keeps a standby", p.TP, p.Owner)
			}
			if len(slices.Compact(slices.Sorted(slices.Values(places)))) != len(places) {
				t.Fatalf("%v: a member twice in %v", p.TP, places)
			}
		}
	}
}

// loads is each member's replica count.
func loads(placed map[store.TopicPartition][]string) map[string]int {
	out := map[string]int{}
	for _, ms := range placed {
		for _, m := range ms {
			out[m]++
		}
	}
	return out
}

// No member keeps more than its share, rounded up: the replicas a member
// keeps follow the replica count, not the group's size.
func TestPlaceKeepsEachMemberWithinItsShare(t *testing.T) {
	for _, c := range []struct{ members, parts, n int }{{3, 8, 1}, {3, 32, 1}, {6, 32, 1}, {12, 64, 1}, {6, 64, 2}, {4, 3, 2}} {
		ms := members(c.members)
		got := Place(parts(c.parts, ms), ms, c.n)
		share := (c.n*c.parts + c.members - 1) / c.members
		for m, l := range loads(got) {
			if l > share {
				t.Errorf("%+v: %s keeps %d replicas, the share is %d", c, m, l, share)
			}
		}
	}
}

// A member leaving moves its own replicas and few others: at most as many
// again as it kept.
func TestPlaceMovesFewReplicasWhenAMemberLeaves(t *testing.T) {
	for _, c := range []struct{ members, parts, n int }{{4, 32, 1}, {6, 32, 1}, {6, 64, 2}} {
		ms := members(c.members)
		gone := ms[2]
		rest := slices.DeleteFunc(slices.Clone(ms), func(m string) bool { return m == gone })
		ps := parts(c.parts, rest) // owners among those that stay
		before, after := Place(ps, ms, c.n), Place(ps, rest, c.n)
		had, moved := 0, 0
		for _, p := range ps {
			for _, m := range before[p.TP] {
				switch {
				case m == gone:
					had++
				case !slices.Contains(after[p.TP], m):
					moved++
				}
			}
		}
		t.Logf("%+v: the leaver kept %d; %d others' replicas moved", c, had, moved)
		if moved > had {
			t.Errorf("%+v: %d replicas of members that stayed moved, more than the %d the leaver kept", c, moved, had)
		}
	}
}
