package history

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
)

// A history is written as a script of operations; each test names the
// anomalies it must produce, or none.

func produce(p int32, off int64, key string, delta int) Op {
	return Op{Kind: Produce, Member: -1, Partition: p, Offset: off, Key: key, Delta: delta}
}

func write(m int, key, value string, off int64, outcome Outcome) Op {
	return Op{Kind: Write, Member: m, Key: key, Value: value, Offset: off, Outcome: outcome}
}

func tombstone(m int, key string, off int64) Op {
	return Op{Kind: Write, Member: m, Key: key, Offset: off, Tombstone: true, Outcome: OK}
}

func commit(m int, off int64) Op { return Op{Kind: Commit, Member: m, Offset: off, Outcome: OK} }

func read(n int, final bool, got ...Op) []Op {
	start := Op{Kind: ReadStart, Read: n}
	if final {
		start.Detail = FinalRead
	}
	out := []Op{start}
	for _, g := range got {
		out = append(out, Op{Kind: Read, Read: n, Key: g.Key, Value: g.Value, Offset: g.Offset, Tombstone: g.Tombstone})
	}
	return append(out, Op{Kind: ReadEnd, Read: n, Outcome: OK})
}

func script(parts ...any) []Op {
	var ops []Op
	for _, p := range parts {
		switch p := p.(type) {
		case Op:
			ops = append(ops, p)
		case []Op:
			ops = append(ops, p...)
		}
	}
	for i := range ops {
		ops[i].Index = i
	}
	return ops
}

func kinds(as []Anomaly) []AnomalyKind {
	var out []AnomalyKind
	for _, a := range as {
		out = append(out, a.Kind)
	}
	return out
}

func expect(t *testing.T, ops []Op, want ...AnomalyKind) {
	t.Helper()
	got := Check(ops)
	for _, a := range got {
		t.Logf("%s", a)
	}
	if !slices.Equal(kinds(got), want) {
		t.Fatalf("anomalies %v, want %v", kinds(got), want)
	}
}

func TestAFencedHandoverIsClean(t *testing.T) {
	expect(t, script(
		produce(0, 0, "a", 10), produce(0, 1, "a", 5),
		write(0, "a", "10", 0, OK), commit(0, 1),
		read(1, false, write(0, "a", "10", 0, OK)), // m1 takes over
		write(1, "a", "15", 1, OK), commit(1, 2),
		write(0, "a", "15", 1, Fenced), // the stale owner
		produce(0, 2, "a", 0), tombstone(1, "a", 2), commit(1, 3),
		read(2, true), // the tombstone compacted away
	))
}

func TestIssue732IsALostWriteARegressionAndALostFold(t *testing.T) {
	expect(t, script(
		produce(0, 0, "a", 10), produce(0, 1, "a", 5), produce(0, 2, "a", 100),
		write(1, "a", "115", 2, OK), commit(1, 3),
		write(0, "a", "15", 1, OK), // the stale owner, unfenced
		read(1, true, write(0, "a", "15", 1, OK)),
	), Regression, LostWrite, LostFold)
}

func TestAReadOfAFencedWriteIsAnAbortedRead(t *testing.T) {
	expect(t, script(
		produce(0, 0, "a", 10),
		write(0, "a", "10", 0, Fenced),
		read(1, false, write(0, "a", "10", 0, OK)),
	), AbortedRead)
}

func TestAReadOfAnAbandonedWriteIsAnAbortedRead(t *testing.T) {
	abandoned := Op{Kind: Abandon, Key: "crash", Value: "-1", Offset: 1 << 40, Outcome: Unknown}
	expect(t, script(
		abandoned,
		read(1, false, abandoned),
	), AbortedRead)
}

func TestAnUnknownWriteMayBeRead(t *testing.T) {
	expect(t, script(
		produce(0, 0, "a", 10),
		write(0, "a", "10", 0, Unknown),
		read(1, false, write(0, "a", "10", 0, OK)),
	))
}

func TestASnapshotNobodyWroteIsAPhantomRead(t *testing.T) {
	expect(t, script(read(1, false, write(0, "z", "1", 0, OK))), PhantomRead)
}

func TestFoldsAreJudgedByTheInputAlone(t *testing.T) {
	t.Run("duplicated", func(t *testing.T) {
		expect(t, script(
			produce(0, 0, "a", 10), produce(0, 1, "a", 5),
			write(0, "a", "20", 1, OK), // 10 twice
			write(0, "a", "20", 1, OK), // reported once per key
		), DuplicatedFold)
	})
	t.Run("lost", func(t *testing.T) {
		expect(t, script(
			produce(0, 0, "a", 10), produce(0, 1, "a", 5),
			write(0, "a", "5", 1, OK),
		), LostFold)
	})
	t.Run("wrong", func(t *testing.T) {
		expect(t, script(
			produce(0, 0, "a", 10),
			write(0, "a", "7", 0, OK),
		), WrongState)
	})
	t.Run("a live snapshot of a closed key", func(t *testing.T) {
		expect(t, script(
			produce(0, 0, "a", 10), produce(0, 1, "a", 0),
			write(0, "a", "10", 1, OK),
		), WrongState)
	})
}

func TestACommitPastAnUncoveredEventIsCommitAhead(t *testing.T) {
	t.Run("no snapshot", func(t *testing.T) {
		expect(t, script(produce(0, 0, "a", 10), commit(0, 1)), CommitAhead)
	})
	t.Run("an older snapshot", func(t *testing.T) {
		expect(t, script(
			produce(0, 0, "a", 10), produce(0, 1, "a", 5),
			write(0, "a", "10", 0, OK), commit(0, 2),
		), CommitAhead)
	})
	t.Run("a closed key needs its tombstone", func(t *testing.T) {
		expect(t, script(
			produce(0, 0, "a", 10), write(0, "a", "10", 0, OK),
			produce(0, 1, "a", 0), commit(0, 2),
		), CommitAhead)
	})
	t.Run("a key opened and closed between commits needs nothing", func(t *testing.T) {
		expect(t, script(produce(0, 0, "a", 10), produce(0, 1, "a", 0), commit(0, 2)))
	})
	t.Run("a commit with nothing below it", func(t *testing.T) {
		expect(t, script(produce(0, 0, "a", 10), commit(0, 0)))
	})
}

func TestAReadThatFailedClaimsNothing(t *testing.T) {
	expect(t, script(
		produce(0, 0, "a", 10), write(0, "a", "10", 0, OK),
		Op{Kind: ReadStart, Read: 1},
		Op{Kind: ReadEnd, Read: 1, Outcome: Failed, Err: "stalled"},
	))
}

func TestOtherPartitionsAreNotExpected(t *testing.T) {
	w := write(0, "b", "1", 0, OK)
	w.Partition = 1
	p := produce(1, 0, "b", 1)
	expect(t, script(p, w, read(1, false)))
}

func emit(m int, p int32, off int64, outcome Outcome) Op {
	return EmitOp(m, []byte("k"), fmt.Appendf(nil, "%d:%d", p, off), outcome, nil)
}

// outputs is a final read of the output topic by a reader of isolation,
// seeing the outputs of the given input events.
func outputs(isolation string, events ...[2]int64) []Op {
	out := []Op{{Kind: OutputRead, Member: -1, Detail: isolation}}
	for _, e := range events {
		out = append(out, Op{Kind: Output, Member: -1, Partition: int32(e[0]), Offset: e[1], Key: "k",
			Value: fmt.Sprintf("%d:%d", e[0], e[1]), Detail: isolation})
	}
	return out
}

func TestOutputsExactlyOnceAreClean(t *testing.T) {
	expect(t, script(
		produce(0, 0, "a", 10), produce(0, 1, "a", 5),
		emit(0, 0, 0, OK), emit(0, 0, 1, Fenced), // a stale owner's batch
		write(0, "a", "10", 0, OK), commit(0, 1),
		emit(1, 0, 1, OK), write(1, "a", "15", 1, OK), commit(1, 2),
		outputs(ReadCommitted, [2]int64{0, 0}, [2]int64{0, 1}),
		// read_uncommitted sees the fenced batch's output too: no anomaly
		outputs(ReadUncommitted, [2]int64{0, 0}, [2]int64{0, 1}, [2]int64{0, 1}),
	))
}

func TestAnOutputSeenTwiceIsDuplicated(t *testing.T) {
	expect(t, script(
		produce(0, 0, "a", 10),
		emit(0, 0, 0, OK), emit(1, 0, 0, OK), // at least once: replayed after a crash
		write(1, "a", "10", 0, OK), commit(1, 1),
		outputs(ReadCommitted, [2]int64{0, 0}, [2]int64{0, 0}),
	), DuplicatedOutput)
}

func TestACommittedEventWithoutOutputIsLost(t *testing.T) {
	expect(t, script(
		produce(0, 0, "a", 10), produce(0, 1, "a", 5), produce(0, 2, "a", 1),
		emit(0, 0, 0, OK), write(0, "a", "15", 1, OK), commit(0, 2),
		outputs(ReadCommitted, [2]int64{0, 0}),
	), LostOutput)
}

func TestAnEventAboveTheCommittedOffsetMayHaveNoOutput(t *testing.T) {
	expect(t, script(
		produce(0, 0, "a", 10), produce(0, 1, "a", 5),
		emit(0, 0, 0, OK), write(0, "a", "10", 0, OK), commit(0, 1),
		outputs(ReadCommitted, [2]int64{0, 0}),
	))
}

func TestWithoutAnOutputReadOutputsAreNotJudged(t *testing.T) {
	expect(t, script(
		produce(0, 0, "a", 10), write(0, "a", "10", 0, OK), commit(0, 1),
		outputs(ReadUncommitted), // no read_committed reader
	))
}

func TestPhantomOutputs(t *testing.T) {
	t.Run("an output of no input event", func(t *testing.T) {
		expect(t, script(
			produce(0, 0, "a", 10), emit(0, 0, 0, OK), write(0, "a", "10", 0, OK), commit(0, 1),
			outputs(ReadCommitted, [2]int64{0, 0}, [2]int64{0, 7}),
		), PhantomOutput)
	})
	t.Run("an output of a fenced transaction", func(t *testing.T) {
		expect(t, script(
			produce(0, 0, "a", 10),
			emit(0, 0, 0, Fenced), write(0, "a", "10", 0, Fenced),
			outputs(ReadCommitted, [2]int64{0, 0}),
		), PhantomOutput)
	})
	t.Run("an aborted copy beside the committed one", func(t *testing.T) {
		expect(t, script(
			produce(0, 0, "a", 10),
			emit(0, 0, 0, Fenced), emit(1, 0, 0, OK), write(1, "a", "10", 0, OK), commit(1, 1),
			outputs(ReadCommitted, [2]int64{0, 0}, [2]int64{0, 0}),
		), DuplicatedOutput, PhantomOutput)
	})
	t.Run("an unknown outcome may have committed", func(t *testing.T) {
		expect(t, script(
			produce(0, 0, "a", 10),
			emit(0, 0, 0, Unknown), write(0, "a", "10", 0, Unknown),
			outputs(ReadCommitted, [2]int64{0, 0}),
		))
	})
}

func TestParseOutput(t *testing.T) {
	for _, tc := range []struct {
		in  string
		p   int32
		off int64
		ok  bool
	}{{"1:42", 1, 42, true}, {"0:0", 0, 0, true}, {"x", -1, -1, false}, {"1:", -1, -1, false}, {":3", -1, -1, false}} {
		p, off, ok := ParseOutput(tc.in)
		if p != tc.p || off != tc.off || ok != tc.ok {
			t.Errorf("ParseOutput(%q) = %d, %d, %t; want %d, %d, %t", tc.in, p, off, ok, tc.p, tc.off, tc.ok)
		}
	}
}

// A zombie's read may miss a write that compaction dropped for a newer
// write of the key, acknowledged to the partition's new owner while the
// read was on its way; the same newer write by the reader itself (the
// owner, the only writer while it recovers) explains nothing.
func TestAReadMayMissAWriteANewerOwnerSuperseded(t *testing.T) {
	during := func(reader, writer int) []Op {
		return script(
			produce(0, 0, "a", 10), produce(0, 1, "a", 5), produce(0, 2, "a", 1),
			write(1, "a", "10", 0, OK), write(1, "a", "15", 1, OK),
			Op{Kind: ReadStart, Read: 1, Member: reader},
			Op{Kind: Read, Read: 1, Member: reader, Key: "a", Value: "10", Offset: 0},
			write(writer, "a", "16", 2, OK),
			Op{Kind: ReadEnd, Read: 1, Member: reader, Outcome: OK},
		)
	}
	t.Run("by the new owner", func(t *testing.T) { expect(t, during(2, 1)) })
	t.Run("by the reader", func(t *testing.T) { expect(t, during(2, 2), LostWrite) })
}

func TestSplitState(t *testing.T) {
	for _, c := range []struct{ sum, firings int }{{0, 0}, {5, 0}, {-7, 0}, {5, 3}, {-7, 2}, {1000, 1}} {
		sum, firings := SplitState(c.sum + c.firings*TimerMark)
		if sum != c.sum || firings != c.firings {
			t.Errorf("SplitState(%d + %d marks) = %d, %d", c.sum, c.firings, sum, firings)
		}
	}
	if got := StateSum(strconv.Itoa(2*TimerMark - 3)); got != "-3" {
		t.Errorf("StateSum = %s, want -3", got)
	}
}

func query(m int, key, value string, off int64) Op {
	return Op{Kind: Query, Member: m, Key: key, Value: value, Offset: off, Outcome: OK}
}

// A committed read answers a state a write made durable before it: an
// answer before its write is acknowledged is a phantom, one the fence
// refused is aborted; answering nothing, or not serving the partition,
// claims nothing.
func TestACommittedReadAnswersOnlyDurableStates(t *testing.T) {
	expect(t, script(
		produce(0, 0, "a", 10),
		Op{Kind: Query, Member: 0, Key: "a", Offset: -1, Outcome: OK, Detail: QueryAbsent},
		write(0, "a", "10", 0, OK),
		query(0, "a", "10", 0),
		Op{Kind: Query, Member: 1, Key: "a", Outcome: Failed, Detail: QueryNotOwned},
	))
	expect(t, script(
		produce(0, 0, "a", 10),
		query(0, "a", "10", 0),
		write(0, "a", "10", 0, OK),
	), PhantomRead)
	expect(t, script(
		produce(0, 0, "a", 10),
		write(0, "a", "10", 0, Fenced),
		query(0, "a", "10", 0),
	), AbortedRead)
}

// A view of the snapshot topic shows what writes made durable before it,
// deletes included: a crashed owner's open write is an aborted read.
func TestAViewShowsOnlyDurableStates(t *testing.T) {
	view := func(key, value string, off int64, deleted bool) Op {
		return Op{Kind: View, Member: -1, Key: key, Value: value, Offset: off, Tombstone: deleted}
	}
	abandoned := Op{Kind: Abandon, Key: "crash", Value: "-1", Offset: 1 << 40, Outcome: Unknown}
	expect(t, script(
		produce(0, 0, "a", 10),
		produce(0, 1, "a", 0),
		write(0, "a", "10", 0, OK),
		view("a", "10", 0, false),
		tombstone(0, "a", 1),
		view("a", "", 1, true),
	))
	expect(t, script(abandoned, view("crash", "-1", 1<<40, false)), AbortedRead)
	expect(t, script(view("z", "1", 0, false)), PhantomRead)
}
