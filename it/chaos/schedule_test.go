package main

import (
	"slices"
	"testing"
)

// The same seed gives the same schedule; another seed another order of
// the same faults.
func TestScheduleFromSeed(t *testing.T) {
	a := makeSchedule(7, 3, 3, 9, 3, 3, 3, 3, 0)
	b := makeSchedule(7, 3, 3, 9, 3, 3, 3, 3, 0)
	if !slices.Equal(a, b) {
		t.Fatalf("seed 7 gave two schedules:\n%v\n%v", a, b)
	}
	c := makeSchedule(8, 3, 3, 9, 3, 3, 3, 3, 0)
	if slices.Equal(a, c) {
		t.Fatalf("seeds 7 and 8 gave the same schedule %v", a)
	}
	count := func(s []fault) map[fault]int {
		m := map[fault]int{}
		for _, f := range s {
			m[f]++
		}
		return m
	}
	ca, cc := count(a), count(c)
	if len(a) != 21 || len(ca) != len(cc) {
		t.Fatalf("%d faults (%d distinct), want 21 and the same set under both seeds (%d)", len(a), len(ca), len(cc))
	}
	for f, n := range ca {
		if cc[f] != n {
			t.Fatalf("%v: %d under seed 7, %d under seed 8", f, n, cc[f])
		}
	}
	// Every member is killed three times, and every role and node is hit.
	for m := range 3 {
		if n := ca[fault{Kind: engineKill, Member: m}]; n != 3 {
			t.Errorf("m%d killed %d times, want 3", m, n)
		}
		if ca[fault{Kind: brokerRestart, Node: m}] != 1 {
			t.Errorf("node %d not restarted once", m)
		}
	}
	for _, r := range []string{roleController, roleTxnLeader, roleOffsLeader} {
		if ca[fault{Kind: brokerKill, Role: r}] != 1 {
			t.Errorf("no broker kill of the %s", r)
		}
	}
}
