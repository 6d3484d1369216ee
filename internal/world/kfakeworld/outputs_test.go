package kfakeworld

import (
	"strings"
	"testing"
	"testing/synctest"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
)

// outputsExactlyOnce fails t unless a read_committed reader of the
// output topic saw each input event's output once.
func outputsExactlyOnce(t *testing.T, ops []history.Op) {
	t.Helper()
	committed := history.OutputCounts(ops, history.ReadCommitted)
	events := 0
	for _, op := range ops {
		if op.Kind != history.Produce {
			continue
		}
		events++
		if n := committed[history.OutputValue(op.Partition, op.Offset)]; n != 1 {
			t.Errorf("read_committed saw the output of p%d@%d %d times", op.Partition, op.Offset, n)
		}
	}
	if events == 0 || len(committed) != events {
		t.Errorf("read_committed saw the outputs of %d events, the input has %d", len(committed), events)
	}
}

// With ExactlyOnce on kfake (store/kafka's transactions, franz-go's
// clients), every invariant holds, 8 included, through a stale owner and
// a crash, and through kafka-flow#732.
func TestExactlyOnceOutputsOnKfake(t *testing.T) {
	for _, sc := range []struct {
		name  string
		steps []world.Step
	}{{"crash and stale owner", world.CrashAndStaleOwner}, {"crash, stale owner and a foreign transaction", world.CrashStaleOwnerAndForeign}, {"kafka-flow#732", world.Scenario732}} {
		t.Run(sc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				vs, ops := runAll(t, Config{Mode: store.Transactional, ExactlyOnce: true}, sc.steps)
				for _, v := range vs {
					t.Errorf("%s", v)
				}
				outputsExactlyOnce(t, ops)
			})
		})
	}
}

// onlyDuplicates is the negative controls' verdict: at-least-once outputs
// through a stale owner and a crash show duplicated outputs (invariant 8),
// and nothing else breaks: no output is lost or invented.
func onlyDuplicates(t *testing.T, vs []world.Violation) {
	t.Helper()
	dup := 0
	for _, v := range vs {
		t.Logf("%s", v)
		switch {
		case v.Invariant == 8 && strings.Contains(v.Detail, string(history.DuplicatedOutput)):
			dup++
		case v.Invariant == 8:
			t.Errorf("at least once may duplicate, never lose or invent: %s", v)
		default:
			t.Errorf("at least once breaks only invariant 8: %s", v)
		}
	}
	if dup == 0 {
		t.Fatal("at-least-once outputs through a stale owner and a crash showed no duplicate: the exactly-once test proves nothing")
	}
}

// The negative control on kfake: at-least-once outputs (a plain kgo
// producer in Emit) duplicate through the same scenario, and invariant 8
// catches them.
func TestAtLeastOnceOutputsDuplicateOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vs, _ := runAll(t, Config{Mode: store.Transactional, ProduceOutputs: true}, world.CrashAndStaleOwner)
		onlyDuplicates(t, vs)
	})
}

// A batch whose commit fails after its records are in the log (kfake
// answers its EndTxn with INVALID_TXN_STATE, once): the partition rewinds
// and folds again, the transaction is aborted by the takeover, and a
// read_uncommitted reader of the output topic sees the failed batch's
// outputs as well; a read_committed one sees each input's output once.
func TestAbortedOutputsAreSeenReadUncommittedOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, err := New(Config{Mode: store.Transactional, ExactlyOnce: true})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		apply := func(steps ...world.Step) {
			t.Helper()
			for _, s := range steps {
				for _, v := range w.Apply(s) {
					t.Errorf("%s", v)
				}
			}
		}
		apply(world.Step{Kind: world.Join, Member: 0},
			world.Step{Kind: world.Produce, Key: "a", Delta: 10}, world.Step{Kind: world.Produce, Key: "b", Delta: 5},
			world.Step{Kind: world.Poll, Member: 0}, world.Step{Kind: world.Poll, Member: 0})
		failed := 0
		w.c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
			end := req.(*kmsg.EndTxnRequest)
			if !end.Commit {
				return nil, nil, false
			}
			failed++
			resp := end.ResponseKind().(*kmsg.EndTxnResponse)
			resp.ErrorCode = kerr.InvalidTxnState.Code
			return resp, nil, true
		})
		apply(world.Step{Kind: world.Produce, Key: "a", Delta: 1}, world.Step{Kind: world.Produce, Key: "b", Delta: 2},
			world.Step{Kind: world.Produce, Key: "c", Delta: 7})
		for range 4 {
			apply(world.Step{Kind: world.Poll, Member: 0}, world.Step{Kind: world.Advance, D: 11e9})
		}
		vs := w.Quiesce()
		ops := w.History().Ops()
		for _, v := range vs {
			if v.Invariant == 6 && strings.Contains(v.Detail, "exactly-once batch") {
				t.Logf("the injected failure: %s", v)
				continue
			}
			t.Errorf("%s", v)
		}
		if failed != 1 {
			t.Fatalf("%d commits failed, want the one injected", failed)
		}
		outputsExactlyOnce(t, ops)
		var unknown []string
		for _, op := range ops {
			if op.Kind == history.Emit && op.Outcome != history.OK {
				unknown = append(unknown, op.Value)
			}
		}
		if len(unknown) == 0 {
			t.Fatal("no batch failed: the test injected nothing")
		}
		uncommitted := history.OutputCounts(ops, history.ReadUncommitted)
		for _, out := range unknown {
			if uncommitted[out] < 2 {
				t.Errorf("read_uncommitted saw the output %s of the failed batch %d times, want it twice (aborted, then committed)", out, uncommitted[out])
			}
		}
		t.Logf("the failed batch's outputs %v, each seen twice read_uncommitted, once read_committed", unknown)
	})
}
