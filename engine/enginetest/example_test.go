package enginetest_test

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/enginetest"
	"github.com/snapfence/snapfence/engine/view"
)

// exampleT stands in for the *testing.T a test gives New, which an
// Example does not have: it prints a failure (and panics on a fatal one,
// which must not return), and runs the cleanups when the example ends.
type exampleT struct{ cleanups []func() }

func (t *exampleT) Helper()                           {}
func (t *exampleT) Errorf(format string, args ...any) { fmt.Printf("FAIL: "+format+"\n", args...) }
func (t *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Context() context.Context          { return context.Background() }

func (t *exampleT) end() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// total is the examples' fold: each record's value is an amount, added to
// its key's total, which is emitted to "totals".
func total(key []byte, sum int64, _ bool, rec engine.Record) (engine.Result[int64], error) {
	n, err := strconv.ParseInt(string(rec.Value), 10, 64)
	if err != nil {
		return engine.Result[int64]{}, err
	}
	sum += n
	return engine.Set(sum).With(engine.Output{Topic: "totals", Key: key, Value: []byte(strconv.FormatInt(sum, 10))}), nil
}

// A fold over four partitions and two members: records in, committed
// states and outputs out, and a third member joining midway.
func Example() {
	t := &exampleT{} // in a test: the test's t
	defer t.end()

	d := enginetest.New(t, enginetest.Config[int64]{
		Engine: engine.Config[int64]{Fold: total, Codec: engine.Int64(), OutputTopics: []string{"totals"}},
		Topic:  "orders", // 4 partitions, 2 members by default
	})
	d.Produce("orders", "alice", "10")
	d.Produce("orders", "bob", "3")
	d.Settle() // folded and committed
	d.AddMember()
	d.Produce("orders", "alice", "5")
	d.Settle()

	alice, _ := d.State("alice")
	fmt.Println("members:", d.Members())
	fmt.Println("alice:", alice)
	for _, o := range d.Outputs("totals") {
		fmt.Printf("output %s=%s\n", o.Key, o.Value)
	}
	d.CheckExact() // every key's state is the exact fold of its records
	// Output:
	// members: [0 1 2]
	// alice: 15
	// output alice=10
	// output alice=15
	// output bob=3
}

// The failure the fence exists for, in a test: alice's owner folds +5 and
// pauses before it commits; the group gives its partition to another member, which folds
// +100; the paused owner wakes and flushes alice=15 over the new owner's
// 115. The fence rejects the stale flush, so the state is 115.
func ExampleDriver_StaleOwner() {
	t := &exampleT{}
	defer t.end()
	d := enginetest.New(t, enginetest.Config[int64]{
		Engine: engine.Config[int64]{Fold: total, Codec: engine.Int64(), OutputTopics: []string{"totals"}},
		Topic:  "orders",
	})
	d.Produce("orders", "alice", "10")
	d.Settle()
	d.Produce("orders", "alice", "5") // the owner folds it, then pauses
	rep := d.StaleOwner(d.Owner("alice"), func() {
		d.Produce("orders", "alice", "100") // the new owner folds it
	})
	fmt.Printf("stale owner: member %d held %v; %d writes fenced, %d landed\n", rep.Member, rep.Held, len(rep.Fenced), len(rep.Landed))
	alice, _ := d.State("alice")
	fmt.Println("alice:", alice)
	// Output:
	// stale owner: member 0 held [orders/1]; 1 writes fenced, 0 landed
	// alice: 115
}

// A member crashes after it folded and emitted, before it committed: the
// survivor replays from the committed offset. The state counts each record
// once; the outputs, at least once, show the replay.
func ExampleDriver_Crash() {
	t := &exampleT{}
	defer t.end()
	d := enginetest.New(t, enginetest.Config[int64]{
		Engine: engine.Config[int64]{Fold: total, Codec: engine.Int64(), OutputTopics: []string{"totals"}},
		Topic:  "orders",
	})
	d.Produce("orders", "alice", "10")
	d.Settle()
	d.Produce("orders", "alice", "5")
	d.Step() // folded and emitted, not committed
	d.Crash(d.Owner("alice"))

	alice, _ := d.State("alice")
	fmt.Println("alice:", alice)
	for _, o := range d.Outputs("totals") {
		fmt.Printf("output %s=%s\n", o.Key, o.Value)
	}
	// Output:
	// alice: 15
	// output alice=10
	// output alice=15
	// output alice=15
}

// A processing-time timer, set from the record's Now, fires when virtual
// time reaches it: here a key expires an hour after its record.
func ExampleDriver_Advance() {
	t := &exampleT{}
	defer t.end()
	d := enginetest.New(t, enginetest.Config[int64]{
		Engine: engine.Config[int64]{
			Fold: func(key []byte, n int64, _ bool, rec engine.Record) (engine.Result[int64], error) {
				return engine.Set(n + 1).SetTimer(engine.Timer{Kind: engine.ProcessingTime, At: rec.Now.Add(time.Hour)}), nil
			},
			OnTimer: func(key []byte, n int64, _ engine.Timer) (engine.Result[int64], error) {
				return engine.Delete[int64](), nil
			},
			Codec: engine.Int64(),
		},
		Topic: "sessions",
	})
	d.Produce("sessions", "ada", "")
	d.Settle()
	d.Advance(59 * time.Minute)
	_, ok := d.State("ada")
	fmt.Println("after 59 min:", ok)
	d.Advance(2 * time.Minute)
	_, ok = d.State("ada")
	fmt.Println("after 61 min:", ok)
	// Output:
	// after 59 min: true
	// after 61 min: false
}

// A fold that looks customers up in a table declared with view.NewLookup:
// the driver opens it on the simulated cluster and steps it before the
// members, so a row produced to its topic is there for the next fold.
func Example_lookupTable() {
	t := &exampleT{}
	defer t.end()
	customers := view.NewLookup(view.Config[string]{Topic: "customers", Plain: true, Codec: engine.String()})
	d := enginetest.New(t, enginetest.Config[string]{
		Engine: engine.Config[string]{
			Codec:  engine.String(),
			Tables: []engine.Table{customers},
			Fold: func(_ []byte, _ string, _ bool, rec engine.Record) (engine.Result[string], error) {
				name, ok, err := customers.Get(rec.Value)
				if err != nil || !ok {
					return engine.Set("unknown customer " + string(rec.Value)), err
				}
				return engine.Set(name), nil
			},
		},
		Topic: "orders",
	})
	d.Produce("customers", "c1", "Ada")
	d.Produce("orders", "o1", "c1")
	d.Produce("orders", "o2", "c2")
	d.Settle()
	for _, o := range []string{"o1", "o2"} {
		st, _ := d.State(o)
		fmt.Printf("%s: %s\n", o, st)
	}
	// Output:
	// o1: Ada
	// o2: unknown customer c2
}
