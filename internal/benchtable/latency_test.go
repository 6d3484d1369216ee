package main

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// testdata/latency.txt is a real run (stdout) of BenchmarkLatency (the
// five default variants at 10, 50 and 90%, Kafka 4.3.1) on the 2-vCPU VM
// of docs/benchmarks.md.
func readLatency(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/latency.txt")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestLatencyLayout(t *testing.T) {
	s, _, failed := parseString(t, readLatency(t))
	if failed {
		t.Error("the sample reports a failure")
	}
	variants, rates := latencyLayout(s, "latency")
	want := []string{"limit", "at-least-once", "exactly-once", "kafka-streams-at-least-once", "kafka-streams-exactly-once"}
	if !slices.Equal(variants, want) {
		t.Errorf("variants %q, want %q", variants, want)
	}
	for _, v := range want {
		if got := rates[v]; !slices.Equal(got, []string{"10%", "50%", "90%"}) {
			t.Errorf("%s: rates %q, want 10%%, 50%%, 90%%", v, got)
		}
	}
}

// Each engine variant's p99 is over Kafka Streams' at the same guarantee
// and rate; each variant's maximum over the limit's.
func TestRenderLatency(t *testing.T) {
	in := readLatency(t)
	s, _, _ := parseString(t, in)
	if !onlyLatency(s) {
		t.Fatal("the sample holds more than BenchmarkLatency")
	}
	out := renderString(t, in)
	for _, no := range []string{"Targets", "End to end against the limit", "missing"} {
		if strings.Contains(out, no) {
			t.Errorf("%q in\n%s", no, out)
		}
	}
	rows := map[string][]string{} // variant label -> its rows' cells
	var label string
	for line := range strings.SplitSeq(out, "\n") {
		for _, v := range latencyVariants {
			if strings.HasPrefix(strings.TrimLeft(line, " "), v.label+" ") {
				label = v.label
			}
		}
		if label != "" && strings.Contains(line, "%") && !strings.HasPrefix(line, "Latency:") {
			rows[label] = append(rows[label], line)
		}
	}
	for _, v := range []string{"limit", "at-least-once", "exactly-once", "kafka-streams-at-least-once", "kafka-streams-exactly-once"} {
		l, _ := latencyLabel(v)
		if n := len(rows[l]); n != 3 {
			t.Errorf("%s: %d rows, want 3 (one per rate):\n%s", v, n, out)
		}
	}
	cases := []struct{ v, peer string }{
		{"at-least-once", "kafka-streams-at-least-once"},
		{"exactly-once", "kafka-streams-exactly-once"},
	}
	for _, c := range cases {
		for i, r := range []string{"10%", "50%", "90%"} {
			mine := s[latencyBench+"/latency/"+c.v+"/"+r]["p99-ms"]
			theirs := s[latencyBench+"/latency/"+c.peer+"/"+r]["p99-ms"]
			want := formatRatio(pairedRatio(mine, theirs))
			l, _ := latencyLabel(c.v)
			if len(rows[l]) > i && !strings.Contains(rows[l][i], " "+want+" ") {
				t.Errorf("%s at %s: want the p99 ratio %s in %q", c.v, r, want, rows[l][i])
			}
		}
		want := formatRatio(pairedRatio(s[latencyBench+"/max/"+c.v]["records/s"], s[latencyBench+"/max/limit"]["records/s"]))
		l, _ := latencyLabel(c.v)
		if len(rows[l]) > 0 && !strings.Contains(rows[l][0], " "+want+" ") {
			t.Errorf("%s: want the max ratio %s on its first row %q", c.v, want, rows[l][0])
		}
	}
	// The limit and the peers: 1.00x where they are the baseline, no p99
	// ratio for the limit.
	l, _ := latencyLabel("limit")
	if len(rows[l]) == 3 && (!strings.Contains(rows[l][0], " 1.00x ") || strings.Contains(rows[l][1], "x ")) {
		t.Errorf("the limit's rows: want 1.00x for its maximum only:\n%s", strings.Join(rows[l], "\n"))
	}
	for _, v := range []string{"kafka-streams-at-least-once", "kafka-streams-exactly-once"} {
		l, _ := latencyLabel(v)
		for _, row := range rows[l] {
			if !strings.Contains(row, " 1.00x ") {
				t.Errorf("%s: want a p99 ratio of 1.00x in %q", v, row)
			}
		}
	}
}

// Given the maxima (-latency.max), the input has no max/ benchmarks: the
// maxima are dashes, the p99 ratios are still there; an engine variant
// without its peer gets a dash.
func TestRenderLatencyPartial(t *testing.T) {
	var kept []string
	for line := range strings.SplitSeq(readLatency(t), "\n") {
		if strings.Contains(line, "/max/") || strings.Contains(line, "kafka-streams-exactly-once") {
			continue
		}
		kept = append(kept, line)
	}
	out := renderString(t, strings.Join(kept, "\n"))
	l, _ := latencyLabel("exactly-once")
	found := false
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(strings.TrimLeft(line, " "), l+" ") {
			found = true
			if strings.Count(line, "—") != 3 {
				t.Errorf("exactly-once without its maximum and its peer: want dashes for the maximum, its ratio and the p99 ratio: %q", line)
			}
		}
		if strings.Contains(line, "Kafka Streams exactly-once") {
			t.Errorf("a variant the input does not have: %q", line)
		}
	}
	if !found {
		t.Errorf("no row of exactly-once in\n%s", out)
	}
}

// Mixed with BenchmarkLimit, the latency table follows the limit's, and
// the limit's table has the peers' rows when the input has them.
func TestRenderLatencyMixed(t *testing.T) {
	out := renderString(t, readLimit(t)+"\n"+readLatency(t))
	limit, latency := strings.Index(out, "End to end against the limit"), strings.Index(out, "\nLatency: ")
	if limit < 0 || latency < limit {
		t.Errorf("the latency table (at %d) should follow the limit's (at %d):\n%s", latency, limit, out)
	}
	if strings.Contains(out, "Kafka Streams at-least-once (RocksDB") {
		t.Errorf("the limit's table has a peer row without the peer's results:\n%s", out)
	}
	// bench-limit's output is these two alone: their tables and the
	// limit's targets, none of the store's.
	for _, no := range []string{"Experiment A", "Recovery:", "missing", "not measured"} {
		if strings.Contains(out, no) {
			t.Errorf("%q in\n%s", no, out)
		}
	}
	if !strings.Contains(out, "\nTargets\n  engine at-least-once at least 0.85x") {
		t.Errorf("no limit targets in\n%s", out)
	}
}

// The same-rate feeds make a second table, whose p99 ratios pair the
// same-rate rows.
func TestRenderLatencyAtTheSameRates(t *testing.T) {
	in := `BenchmarkLatency/max/at-least-once-2 1 1 ns/op 500000 records/s 1000000 inputs
BenchmarkLatency/max/kafka-streams-at-least-once-2 1 1 ns/op 100000 records/s 1000000 inputs
BenchmarkLatency/latency/at-least-once/10%-2 1 1 ns/op 20 p50-ms 300 p99-ms 400 max-ms 50000 records/s 450000 inputs
BenchmarkLatency/latency/kafka-streams-at-least-once/10%-2 1 1 ns/op 60 p50-ms 120 p99-ms 130 max-ms 10000 records/s 90000 inputs
BenchmarkLatency/same/at-least-once/10%-2 1 1 ns/op 10 p50-ms 60 p99-ms 80 max-ms 10000 records/s 90000 inputs
BenchmarkLatency/same/kafka-streams-at-least-once/10%-2 1 1 ns/op 60 p50-ms 120 p99-ms 130 max-ms 10000 records/s 90000 inputs
`
	out := renderString(t, in)
	own, same, ok := strings.Cut(out, "fractions of the smallest maximum")
	if !ok {
		t.Fatalf("no same-rate table in\n%s", out)
	}
	if !strings.Contains(own, "2.50x") || strings.Contains(own, "0.50x") {
		t.Errorf("own-rate table: want the p99 ratio 2.50x (300/120) alone:\n%s", own)
	}
	if !strings.Contains(same, "0.50x") || strings.Contains(same, "2.50x") {
		t.Errorf("same-rate table: want the p99 ratio 0.50x (60/120) alone:\n%s", same)
	}
}

// testdata/limit-latency.txt is a whole `make bench-limit` (BenchmarkLimit
// then BenchmarkLatency, Kafka 4.3.1, the 2-vCPU VM of
// docs/benchmarks.md): its three tables, the limit's targets, nothing of
// the store's.
func TestRenderBenchLimit(t *testing.T) {
	b, err := os.ReadFile("testdata/limit-latency.txt")
	if err != nil {
		t.Fatal(err)
	}
	out := renderString(t, string(b))
	for _, want := range []string{"End to end against the limit", "work ratio", "then fed at fractions of it", "fractions of the smallest maximum", "\nTargets\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	for _, no := range []string{"Experiment A", "missing", "not measured"} {
		if strings.Contains(out, no) {
			t.Errorf("%q in\n%s", no, out)
		}
	}
}
