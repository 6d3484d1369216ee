package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/internal/kafkatest"
)

// The default mode end to end, in process: kfake, two instances, one
// killed mid-stream, the read_committed check. Every input event has
// exactly one enriched record, and no goroutine is left behind.
func TestExactlyOnceEmbedded(t *testing.T) {
	before := goroutineIDs()
	printed := runOK(t)
	const events = firstBatch + secondBatch
	for name, want := range map[string]int{"events in": events, "outputs read_committed": events, "duplicates": 0, "missing": 0, "wrong content": 0} {
		if got := count(t, printed, name); got != want {
			t.Errorf("%s = %d, want %d\noutput:\n%s", name, got, want, printed)
		}
	}
	for _, s := range []string{"mode exactly-once", "seeded sellers with 6 sellers", "seller s-1 updated: commission 1200 -> 1500 bps; the views of instances A and B show it",
		"instance A killed after folding", "exactly once: every input event"} {
		if !strings.Contains(printed, s) {
			t.Errorf("output lacks %q\noutput:\n%s", s, printed)
		}
	}
	checkSellerUpdateShown(t, printed)
	if count(t, printed, "marked unknown-seller") == 0 {
		t.Errorf("no record marked unknown-seller: the run does not show the missing seller\noutput:\n%s", printed)
	}
	checkNoLeak(t, before)
}

// -at-least-once: the same run with outputs through Emit. Instance A is
// killed right after it emitted outputs it never committed, so B emits
// them again: duplicates, which do not fail the run; nothing is missing.
func TestAtLeastOnceEmbedded(t *testing.T) {
	before := goroutineIDs()
	printed := runOK(t, "-at-least-once")
	const events = firstBatch + secondBatch
	dups := count(t, printed, "duplicates")
	if dups == 0 {
		t.Errorf("no duplicates after the kill\noutput:\n%s", printed)
	}
	if got := count(t, printed, "outputs read_committed"); got != events+dups {
		t.Errorf("outputs read_committed = %d, want %d events + %d duplicates", got, events, dups)
	}
	for name, want := range map[string]int{"events in": events, "missing": 0, "wrong content": 0} {
		if got := count(t, printed, name); got != want {
			t.Errorf("%s = %d, want %d\noutput:\n%s", name, got, want, printed)
		}
	}
	if !strings.Contains(printed, fmt.Sprintf("at least once: every input event has an enriched record, and each is right; %d duplicates", dups)) {
		t.Errorf("no at-least-once verdict\noutput:\n%s", printed)
	}
	checkSellerUpdateShown(t, printed)
	checkNoLeak(t, before)
}

// checkSellerUpdateShown: the check saw records of the updated seller's
// orders on both sides of the update, each with the row of its side (the
// check counts only right records; a later record with the old row is
// wrong content and fails the run).
func checkSellerUpdateShown(t *testing.T, printed string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^seller s-1 updated between the batches: (\d+) earlier records carry its old row, (\d+) later records carry the new one$`).FindStringSubmatch(printed)
	if m == nil {
		t.Fatalf("no line on the seller update's records\noutput:\n%s", printed)
	}
	if m[1] == "0" || m[2] == "0" {
		t.Errorf("seller update: %s earlier, %s later records of s-1's orders, want some of each\noutput:\n%s", m[1], m[2], printed)
	}
}

func runOK(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, args, &out); err != nil {
		t.Fatalf("run %v: %v\noutput:\n%s", args, err, out.String())
	}
	return out.String()
}

// count reads a number of the summary: "name: N" or "(name: N".
func count(t *testing.T, printed, name string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\(?` + regexp.QuoteMeta(name) + `: +(\d+)`).FindStringSubmatch(printed)
	if m == nil {
		t.Fatalf("no %q in the output:\n%s", name, printed)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// An order of a seller the table lacks is enriched and marked, and an
// event that is not JSON gives a record marked invalid: neither panics
// nor fails the fold.
func TestFoldMarksUnknownSellerAndInvalidEvent(t *testing.T) {
	s := &service{t: names("")}
	sellers := sellerMap{"s-1": staticSellers["s-1"]}
	rec := func(off int64, v string) engine.Record {
		return engine.Record{Topic: "order_events", Partition: 1, Offset: off, Key: []byte("o-1"), Value: []byte(v)}
	}
	decode := func(res engine.Result[Order]) Enriched {
		t.Helper()
		if len(res.Outputs()) != 1 {
			t.Fatalf("%d outputs, want 1", len(res.Outputs()))
		}
		var e Enriched
		if err := json.Unmarshal(res.Outputs()[0].Value, &e); err != nil {
			t.Fatal(err)
		}
		return e
	}

	res, err := s.fold(sellers, []byte("o-1"), Order{}, false, rec(7, `{"id":"ev-1","order":"o-1","type":"created","seller":"s-9","amount":5000}`))
	if err != nil {
		t.Fatal(err)
	}
	e := decode(res)
	if !e.UnknownSeller || e.Seller != nil || e.Commission != 0 || e.Input != "1:7" {
		t.Errorf("unknown seller: %+v", e)
	}
	if want := (Order{Status: "created", Seller: "s-9", Amount: 5000, Events: 1}); res.State() != want {
		t.Errorf("state %+v, want %+v", res.State(), want)
	}

	res, err = s.fold(sellers, []byte("o-1"), res.State(), true, rec(8, `not json`))
	if err != nil {
		t.Fatal(err)
	}
	if e := decode(res); e.Invalid == "" || !res.Kept() {
		t.Errorf("invalid event: %+v, keep %v", e, res.Kept())
	}

	res, err = s.fold(sellers, []byte("o-1"), Order{Status: "created", Seller: "s-1", Amount: 5000, Events: 1}, true, rec(9, `{"id":"ev-2","order":"o-1","type":"paid"}`))
	if err != nil {
		t.Fatal(err)
	}
	e = decode(res)
	if e.UnknownSeller || e.Seller == nil || e.Seller.Name != "Acme Books" || e.Commission != 600 || e.Order.Status != "paid" || e.Order.Events != 2 {
		t.Errorf("known seller: %+v", e)
	}

	// A row of the table that does not decode (the view's Get returns
	// the error): the record is marked with it and the order folded.
	broken := brokenTable{err: errors.New(`seller "s-1" does not decode`)}
	res, err = s.fold(broken, []byte("o-1"), Order{Status: "created", Seller: "s-1", Amount: 5000, Events: 1}, true, rec(10, `{"id":"ev-3","order":"o-1","type":"paid"}`))
	if err != nil {
		t.Fatal(err)
	}
	e = decode(res)
	if !e.UnknownSeller || e.SellerError != broken.err.Error() || e.Seller != nil || e.Commission != 0 || res.State().Status != "paid" {
		t.Errorf("undecodable seller: %+v, state %+v", e, res.State())
	}
}

// brokenTable is a seller table whose every row fails to decode.
type brokenTable struct{ err error }

func (b brokenTable) Get([]byte) (Seller, bool, error) { return Seller{}, false, b.err }

// The live table in the fold: an instance's view.View of the sellers
// topic is what the fold reads (a compile-time check that it is a
// sellerTable).
var _ sellerTable = (*view.View[Seller])(nil)

// The order's status follows the events that make sense and records the
// rest without changing it.
func TestApply(t *testing.T) {
	o, exists := Order{}, false
	for _, c := range []struct {
		typ, status string
		ignored     bool
	}{
		{"paid", "unknown", true}, // before created
		{"created", "unknown", true},
		{"cancelled", "cancelled", false},
		{"shipped", "cancelled", true},
	} {
		var note string
		o, note = apply(o, exists, Event{Type: c.typ, Seller: "s-1"})
		exists = true
		if o.Status != c.status || (note != "") != c.ignored {
			t.Errorf("%s: status %s note %q, want %s ignored %v", c.typ, o.Status, note, c.status, c.ignored)
		}
	}
	if o.Events != 4 {
		t.Errorf("events %d, want 4", o.Events)
	}
}

// The verdict: duplicates fail an exactly-once run only; a missing or wrong
// record fails either.
func TestReportVerdicts(t *testing.T) {
	for _, c := range []struct {
		r           result
		exactlyOnce bool
		fails       bool
	}{
		{result{events: 3, outputs: 3}, true, false},
		{result{events: 3, outputs: 4, duplicates: 1}, true, true},
		{result{events: 3, outputs: 4, duplicates: 1}, false, false},
		{result{events: 3, outputs: 2, missing: 1}, false, true},
		{result{events: 3, outputs: 3, wrong: 1}, false, true},
		{result{events: 3, outputs: 4, strays: 1}, true, true},
		// The seller update: shown by later records, or the run failed
		// to show it.
		{result{events: 3, outputs: 3, updated: "s-1", carryOld: 1, carryNew: 1}, true, false},
		{result{events: 3, outputs: 3, updated: "s-1", carryOld: 2}, true, true},
	} {
		var out bytes.Buffer
		if err := c.r.report(&out, c.exactlyOnce); (err != nil) != c.fails {
			t.Errorf("%+v exactly once %v: err %v, want failure %v\n%s", c.r, c.exactlyOnce, err, c.fails, out.String())
		}
	}
}

// goroutineIDs are the ids of the goroutines running now.
func goroutineIDs() map[string]bool {
	ids := map[string]bool{}
	for _, g := range goroutines() {
		ids[goroutineID(g)] = true
	}
	return ids
}

func goroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

func goroutineID(stack string) string {
	id, _, _ := strings.Cut(strings.TrimPrefix(stack, "goroutine "), " ")
	return id
}

// checkNoLeak fails if goroutines started since before are still running.
// Closed clients and the closed cluster finish their last goroutines
// (connection readers, the cluster's loop) asynchronously once their
// sockets are closed, so it re-checks, yielding, for up to 5s; it returns
// as soon as they are gone.
func checkNoLeak(t *testing.T, before map[string]bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var leaked []string
		for _, g := range goroutines() {
			if id := goroutineID(g); !before[id] && !strings.Contains(g, "checkNoLeak") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left behind:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
		runtime.Gosched()
	}
}

// On a cluster that serves new topics late, as Kafka does for a moment
// after it answers CreateTopics (kafkatest.ServeLate: a new topic's first
// three ListOffsets are refused), the program waits until its topics are
// served (without the wait, a fresh broker answered "end offsets of
// ...-sellers: UNKNOWN_TOPIC_OR_PARTITION" up to 2 runs in 3).
func TestItsTopicsAreServedBeforeItUsesThem(t *testing.T) {
	before := goroutineIDs()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	late := kafkatest.ServeLate(c, 3)
	printed := runOK(t, "-brokers", strings.Join(c.ListenAddrs(), ","), "-prefix", "late-")
	if !strings.Contains(printed, "exactly once: every input event") {
		t.Errorf("output lacks the exactly-once verdict\noutput:\n%s", printed)
	}
	// The fault was met: every topic's refusals were used up.
	n := names("late-")
	for _, topic := range []string{n.input, n.snapshots, n.output, n.sellers} {
		if !late.Served(topic) {
			t.Errorf("%s: only %d of its 3 ListOffsets were refused", topic, late.Refused(topic))
		}
	}
	c.Close()
	checkNoLeak(t, before)
}

// A second run on the prefix of a first continues from its committed
// offsets: the sellers topic is not seeded again, s-1's rate goes up once
// more, and the check covers both runs' input (the first run's records
// without their seller data, this run's in full).
func TestRerunOnTheSamePrefix(t *testing.T) {
	before := goroutineIDs()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	args := []string{"-brokers", strings.Join(c.ListenAddrs(), ","), "-prefix", "again-"}
	first := runOK(t, args...)
	if !strings.Contains(first, "seeded again-sellers with 6 sellers") {
		t.Errorf("the first run did not seed the sellers\noutput:\n%s", first)
	}
	second := runOK(t, args...)
	if strings.Contains(second, "seeded") {
		t.Errorf("the second run seeded the sellers again\noutput:\n%s", second)
	}
	const events = 2 * (firstBatch + secondBatch)
	for name, want := range map[string]int{"events in": events, "outputs read_committed": events, "duplicates": 0, "missing": 0, "wrong content": 0} {
		if got := count(t, second, name); got != want {
			t.Errorf("%s = %d, want %d\noutput:\n%s", name, got, want, second)
		}
	}
	if !strings.Contains(second, "seller s-1 updated: commission 1500 -> 1800 bps") {
		t.Errorf("the second run did not raise s-1's rate from the first run's\noutput:\n%s", second)
	}
	checkSellerUpdateShown(t, second)
	c.Close()
	checkNoLeak(t, before)
}
