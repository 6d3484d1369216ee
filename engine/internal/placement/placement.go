// Package placement places each partition's standby replicas on the
// members of a group. Every member computes the same placement from the
// same group report, with no coordination: rendezvous (highest random
// weight) hashing ranks the members for each partition by a hash of the
// member's name with the partition, and the replicas go to the best
// ranked members that do not own it and keep fewer than their share
// (consistent hashing with bounded loads). A member that joins or leaves
// moves few of the others' replicas, and no member keeps more than its
// share, rounded up.
package placement

import (
	"encoding/binary"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/snapfence/snapfence/store"
)

// Partition is a partition and its owner's name ("" if no one owns it).
type Partition struct {
	TP    store.TopicPartition
	Owner string
}

// Place gives each of parts its n standby replicas among members (names,
// in any order; duplicates and "" ignored): for each partition, in
// partition order, the best ranked members that do not own it and keep
// fewer replicas than the share, ceil(replicas ÷ members); past the
// share only when no member under it is left. A partition gets fewer than
// n when the group has fewer than n members besides its owner.
func Place(parts []Partition, members []string, n int) map[store.TopicPartition][]string {
	out := map[store.TopicPartition][]string{}
	ms := slices.Compact(slices.Sorted(slices.Values(members)))
	ms = slices.DeleteFunc(ms, func(m string) bool { return m == "" })
	if n <= 0 || len(ms) == 0 {
		return out
	}
	ordered := slices.Clone(parts)
	slices.SortFunc(ordered, func(a, b Partition) int { return a.TP.Compare(b.TP) })
	total := 0
	for _, p := range ordered {
		others := len(ms)
		if slices.Contains(ms, p.Owner) {
			others--
		}
		total += min(n, others)
	}
	share := (total + len(ms) - 1) / len(ms)
	load := map[string]int{}
	for _, p := range ordered {
		ranked := rank(p.TP, p.Owner, ms)
		var chosen []string
		for _, m := range ranked {
			if len(chosen) == n {
				break
			}
			if load[m] < share {
				chosen = append(chosen, m)
			}
		}
		for _, m := range ranked { // past the share: only when no one under it is left
			if len(chosen) == n {
				break
			}
			if !slices.Contains(chosen, m) {
				chosen = append(chosen, m)
			}
		}
		for _, m := range chosen {
			load[m]++
		}
		out[p.TP] = chosen
	}
	return out
}

// rank is the members but owner, best first for tp.
func rank(tp store.TopicPartition, owner string, members []string) []string {
	type ranked struct {
		name  string
		score uint64
	}
	rs := make([]ranked, 0, len(members))
	for _, m := range members {
		if m != owner {
			rs = append(rs, ranked{m, score(m, tp)})
		}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.name
	}
	return out
}

// score is member's weight for tp: FNV-1a of the two, mixed so that
// names differing in one byte still rank apart evenly.
func score(member string, tp store.TopicPartition) uint64 {
	h := fnv.New64a()
	h.Write([]byte(member))
	h.Write([]byte{0})
	h.Write([]byte(tp.Topic))
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(tp.Partition))
	h.Write(b[:])
	return mix(h.Sum64())
}

// mix is splitmix64's finalizer.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
