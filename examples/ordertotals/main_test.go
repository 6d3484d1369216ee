package main

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine/enginetest"
)

func order(id string, cents int64) string {
	b, _ := json.Marshal(Order{ID: id, Cents: cents})
	return string(b)
}

func newDriver(t *testing.T) *enginetest.Driver[Totals] {
	d := enginetest.New(t, enginetest.Config[Totals]{Engine: Config(), Topic: "orders", Partitions: 4, Members: 3})
	d.Produce("customers", "alice", "Alice Liddell")
	return d
}

// The totals survive a member that crashes between its fold and its
// commit, and one that pauses, loses its partitions, then wakes and
// flushes what it held: the fence rejects its writes.
func TestTotalsSurviveACrashAndAStaleOwner(t *testing.T) {
	d := newDriver(t)
	d.Produce("orders", "alice", order("o1", 1000))
	d.Settle()

	d.Produce("orders", "alice", order("o2", 200))
	d.Step()                  // folded by its owner, not committed...
	d.Crash(d.Owner("alice")) // ...which dies: a survivor replays it

	d.Produce("orders", "alice", order("o3", 30)) // its owner folds it, then pauses...
	report := d.StaleOwner(d.Owner("alice"), func() {
		d.Produce("orders", "alice", order("o4", 4)) // ...and the new owner folds this
	}) // then it wakes and flushes o3's state: fenced
	if len(report.Fenced) == 0 {
		t.Fatalf("the stale owner's flush was not fenced: %+v", report)
	}
	d.Settle()
	if st, _ := d.State("alice"); st.Orders != 4 || st.Cents != 1234 {
		t.Fatalf("alice = %+v, want 4 orders and 1234 cents", st)
	}
	// Every order is enriched with the customer's name; a replay may
	// repeat one (at least once), never lose one.
	seen := map[string]bool{}
	for _, out := range d.Outputs("enriched-orders") {
		var e Enriched
		if err := json.Unmarshal(out.Value, &e); err != nil || e.Customer != "Alice Liddell" {
			t.Fatalf("output %s: %v, want alice's order with her name", out.Value, err)
		}
		seen[e.Order.ID] = true
	}
	for i := 1; i <= 4; i++ {
		if id := fmt.Sprint("o", i); !seen[id] {
			t.Fatalf("no enriched output of order %s", id)
		}
	}
}

// A customer who orders nothing for an hour is reported once; an order
// before the hour is up starts the hour again.
func TestAnIdleCustomerIsReportedAfterAnHour(t *testing.T) {
	d := newDriver(t)
	d.Produce("orders", "alice", order("o1", 100))
	d.Settle()
	d.Advance(50 * time.Minute)
	d.Produce("orders", "alice", order("o2", 100))
	d.Advance(50 * time.Minute)
	if n := len(d.Outputs("inactive-customers")); n != 0 {
		t.Fatalf("%d inactivity notices 50 minutes after the last order, want 0", n)
	}
	d.Advance(15 * time.Minute)
	outs := d.Outputs("inactive-customers")
	if len(outs) != 1 || string(outs[0].Key) != "alice" {
		t.Fatalf("inactivity notices %v, want one for alice", outs)
	}
}
