package main

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// testdata/limit.txt is a real run (stdout) of `make bench-limit` (3
// rounds, Kafka 4.3.1) on the 2-vCPU VM of docs/benchmarks.md.
func readLimit(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/limit.txt")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The rounds' sub-benchmarks (limit, limit#01, ...) are samples of one
// benchmark, in the order they ran; an engine variant's ratio pairs its
// i-th sample with the limit's i-th.
func TestParseLimitRounds(t *testing.T) {
	s, _, failed := parseString(t, readLimit(t))
	if failed {
		t.Error("the sample reports a failure")
	}
	for _, v := range limitVariants {
		if v.peer {
			continue // the sample predates them: TestRenderLimitPeers
		}
		name := limitBench + "/" + v.sub
		if n := len(s[name]["records/s"]); n != 3 {
			t.Errorf("%s: %d samples of records/s, want 3 (one per round)", name, n)
		}
		if n := len(s[name]["cpu-s"]); n != 3 {
			t.Errorf("%s: %d samples of cpu-s, want 3", name, n)
		}
	}
	for _, unit := range []string{"txns/1M", "snapshots/1M", "goal-txns/1M"} {
		if n := len(s[limitBench+"/limit"][unit]); n != 0 {
			t.Errorf("the limit reports %s (%d samples): it has no transactions", unit, n)
		}
		for _, v := range limitVariants[1:] {
			if v.peer {
				continue
			}
			if n := len(s[limitBench+"/"+v.sub][unit]); n != 3 {
				t.Errorf("%s: %d samples of %s, want 3", v.sub, n, unit)
			}
		}
	}
	for name := range s {
		if strings.Contains(name, "#") {
			t.Errorf("benchmark %q kept its run suffix", name)
		}
	}
	sec := limitSection(s)
	alo, lim := s[limitBench+"/at-least-once"]["records/s"], s[limitBench+"/limit"]["records/s"]
	want, _ := pairedRatio(alo, lim)
	got, ok := ratioOf(s, sec.rows[1], "records/s")
	if !ok || !near(got, want) {
		t.Errorf("at-least-once ratio %v (%v), want the median of the per-round ratios %v", got, ok, want)
	}
	eos := s[limitBench+"/exactly-once"]
	wantTxn, _ := pairedRatio(eos["txns/1M"], eos["goal-txns/1M"])
	if got, ok := limitTxnRatio(s, "exactly-once"); !ok || !near(got, wantTxn) {
		t.Errorf("exactly-once txns / goal %v (%v), want %v", got, ok, wantTxn)
	}
}

// The goal of an op is 8 partitions x its measured seconds / its commit
// interval, per 1M inputs: the benchmark reports it, and the sample's
// values agree with the other metrics of the same op.
func TestLimitGoalFromSample(t *testing.T) {
	s, _, _ := parseString(t, readLimit(t))
	for _, v := range limitVariants[1:] {
		if v.peer {
			continue
		}
		m := s[limitBench+"/"+v.sub]
		n := len(m["goal-txns/1M"])
		if n == 0 || len(m["measured-s"]) != n || len(m["commit-ms"]) != n || len(m["inputs"]) != n {
			t.Fatalf("%s: samples of goal-txns/1M, measured-s, commit-ms, inputs: %d, %d, %d, %d; want as many of each, at least one",
				v.sub, n, len(m["measured-s"]), len(m["commit-ms"]), len(m["inputs"]))
		}
		for i := range n {
			want := 8 * m["measured-s"][i] / (m["commit-ms"][i] / 1e3) * 1e6 / m["inputs"][i]
			if got := m["goal-txns/1M"][i]; got < 0.99*want || got > 1.01*want {
				t.Errorf("%s run %d: goal %v, want 8 x %v s / %v ms per 1M inputs = %v", v.sub, i, got, m["measured-s"][i], m["commit-ms"][i], want)
			}
		}
	}
}

// An input of only BenchmarkLimit prints its two tables and its targets
// alone.
func TestRenderLimitAlone(t *testing.T) {
	out := renderString(t, readLimit(t))
	for _, want := range []string{
		"End to end against the limit: BenchmarkLimit on a real broker, a backlog of 1M records",
		"limit: bare franz-go loop (baseline)",
		"engine at-least-once (snapshots, kafkaio.Emitter)",
		"engine exactly-once (ExactlyOnce)",
		"Transactions per 1M inputs against the goal",
		"\nTargets\n",
		"engine at-least-once at least 0.85x the limit's records/s (ratio >= 0.85): ",
		"engine exactly-once at least 0.5x the limit's records/s (ratio >= 0.50): ",
		"engine at-least-once transactions within 2x of one per partition per commit interval (txns / goal <= 2): ",
		"engine exactly-once transactions within 2x of one per partition per commit interval (txns / goal <= 2): ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	for _, no := range []string{"Experiment A", "Engine throughput", "Warm restarts", "Exactly-once output", "missing", "not measured"} {
		if strings.Contains(out, no) {
			t.Errorf("%q in\n%s", no, out)
		}
	}
	// The limit's row has no transactions and no flushes: dashes, not
	// zeros (txns/1M, snapshots/1M, txn s, flush s).
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, "(baseline)") && !strings.Contains(line, "1.00x") {
			t.Errorf("the limit's row has no ratio 1.00x: %q", line)
		}
		if strings.Contains(line, "(baseline)") && strings.Count(line, "—") != 4 {
			t.Errorf("the limit's row: want dashes for txns/1M, snapshots/1M, txn s and flush s: %q", line)
		}
	}
	// Each target line carries a verdict.
	i := strings.Index(out, "\nTargets\n")
	targets := strings.Split(strings.TrimSpace(out[i:]), "\n")[1:]
	if len(targets) != 4 {
		t.Fatalf("%d target lines, want 4:\n%s", len(targets), out[i:])
	}
	for _, l := range targets {
		if !strings.HasSuffix(l, "(met)") && !strings.HasSuffix(l, "(NOT MET)") {
			t.Errorf("target without a verdict: %q", l)
		}
	}
}

// Mixed with other benchmarks, the limit's tables print after theirs and
// its targets join the common block; without BenchmarkLimit, nothing of
// it prints.
func TestRenderLimitMixed(t *testing.T) {
	out := renderString(t, readOutputs(t)+"\n"+readWarm(t)+"\n"+readLimit(t))
	if strings.Count(out, "\nTargets\n") != 1 {
		t.Errorf("want one Targets block:\n%s", out)
	}
	lines := strings.Split(out, "\n")
	at := func(prefix string) int {
		return slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
	}
	warm, limit, targets := at("Warm restarts, kfake"), at("End to end against the limit"), at("Targets")
	if warm < 0 || limit < 0 || targets < 0 || !(warm < limit && limit < targets) {
		t.Errorf("sections at %d (warm), %d (limit), %d (targets):\n%s", warm, limit, targets, out)
	}
	if !strings.Contains(out, "engine exactly-once transactions within 2x") {
		t.Errorf("no limit target in\n%s", out)
	}
	without := renderString(t, readWarm(t))
	if strings.Contains(without, "against the limit") || strings.Contains(without, "limit's records/s") {
		t.Errorf("limit sections without BenchmarkLimit:\n%s", without)
	}
}

// testdata/limit-kstreams.txt is a real run (stdout) of BenchmarkLimit
// with Kafka Streams (3 rounds, the six default variants, Kafka 4.3.1)
// on the 2-vCPU VM of docs/benchmarks.md. The peers get rows in the first
// table, with their ratio to the limit and dashes for what only the
// engine reports, and none in the transactions' table or the targets.
func TestRenderLimitPeers(t *testing.T) {
	b, err := os.ReadFile("testdata/limit-kstreams.txt")
	if err != nil {
		t.Fatal(err)
	}
	in := string(b)
	s, _, _ := parseString(t, in)
	out := renderString(t, in)
	txns := strings.Index(out, "Transactions per 1M inputs")
	if txns < 0 {
		t.Fatalf("no transactions' table in\n%s", out)
	}
	for _, v := range limitVariants {
		if !v.peer {
			continue
		}
		name := limitBench + "/" + v.sub
		if n := len(s[name]["records/s"]); n != 3 {
			t.Errorf("%s: %d samples of records/s, want 3", name, n)
		}
		i := strings.Index(out, v.label)
		if i < 0 || i > txns {
			t.Errorf("%s: no row in the first table:\n%s", v.sub, out)
			continue
		}
		if strings.Contains(out[txns:], v.label) {
			t.Errorf("%s: a row in the transactions' table:\n%s", v.sub, out)
		}
		line := out[i : i+strings.IndexByte(out[i:], '\n')]
		want := formatRatio(pairedRatio(s[name]["records/s"], s[limitBench+"/limit"]["records/s"]))
		if !strings.Contains(line, " "+want+" ") {
			t.Errorf("%s: want the ratio %s in %q", v.sub, want, line)
		}
		// txns/1M, snapshots/1M, emit s, txn s, flush s.
		if n := strings.Count(line, "—"); n != 5 {
			t.Errorf("%s: %d dashes, want 5 (txns/1M, snapshots/1M, emit s, txn s, flush s): %q", v.sub, n, line)
		}
	}
	if n := strings.Count(out[strings.Index(out, "\nTargets\n"):], "\n  "); n != 4 {
		t.Errorf("%d target lines, want the engine's 4:\n%s", n, out)
	}
}
