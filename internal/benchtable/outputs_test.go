package main

import (
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
)

// testdata/outputs.txt is a real run (stdout) of
//
//	it/kafka/broker run go test -tags it -run '^$' -bench BenchmarkOutputs -benchtime=1x -count=3 ./engine/
//
// on the 2-vCPU VM of docs/benchmarks.md, Kafka 4.3.1.
func readOutputs(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/outputs.txt")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func parseString(t *testing.T, in string) (samples, []string, bool) {
	t.Helper()
	s, header, failed, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	return s, header, failed
}

func renderString(t *testing.T, in string) string {
	t.Helper()
	s, header, _ := parseString(t, in)
	var b strings.Builder
	render(&b, s, header)
	return b.String()
}

func findRow(t *testing.T, rows []outputsRow, interval, label string) outputsRow {
	t.Helper()
	for _, r := range rows {
		if r.interval == interval && r.metric.label == label {
			return r
		}
	}
	t.Fatalf("no row %s %q", interval, label)
	return outputsRow{}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestParseOutputs(t *testing.T) {
	s, header, failed := parseString(t, readOutputs(t))
	if failed {
		t.Error("the sample reports a failure")
	}
	if len(header) != 4 || header[2] != "pkg: github.com/snapfence/snapfence/engine" {
		t.Errorf("header %q", header)
	}
	if len(s) != 8 {
		t.Errorf("%d benchmarks, want 8 (2 modes x 2 intervals x 2 measures): %v", len(s), slices.Sorted(maps.Keys(s)))
	}
	thr := s["BenchmarkOutputs/exactly-once/commit=100ms/throughput"]
	if want := []float64{286331, 326113, 349031}; !slices.Equal(thr["records/s"], want) {
		t.Errorf("records/s %v, want %v", thr["records/s"], want)
	}
	// txn-ms and txns are distinct units (testing prints them in that
	// order).
	if want := []float64{288, 286, 283}; !slices.Equal(thr["txns"], want) {
		t.Errorf("txns %v, want %v", thr["txns"], want)
	}
	if want := []float64{8.921, 7.461, 7.133}; !slices.Equal(thr["txn-ms"], want) {
		t.Errorf("txn-ms %v, want %v", thr["txn-ms"], want)
	}
	lat := s["BenchmarkOutputs/at-least-once/commit=1s/latency"]
	if want := []float64{36.53, 38.42, 40.02}; !slices.Equal(lat["max-ms"], want) {
		t.Errorf("max-ms %v, want %v", lat["max-ms"], want)
	}
}

func TestOutputsTable(t *testing.T) {
	s, _, _ := parseString(t, readOutputs(t))
	rows := outputsTable(s)
	if len(rows) != 2*len(outputsMetrics) {
		t.Fatalf("%d rows, want %d", len(rows), 2*len(outputsMetrics))
	}
	if rows[0].interval != "100ms" || rows[len(rows)-1].interval != "1s" {
		t.Errorf("intervals %s .. %s, want 100ms .. 1s", rows[0].interval, rows[len(rows)-1].interval)
	}
	for _, tc := range []struct {
		interval, label string
		alo, eos        float64
		// ratio: the median of the per-run ratios, worked out by hand
		// from the sample.
		ratio float64
	}{
		// 286331/291238, 326113/384110, 349031/404794
		{"100ms", "throughput records/s", 384110, 326113, 349031.0 / 404794},
		// 288/195, 286/158, 283/147
		{"100ms", "throughput txns", 158, 286, 286.0 / 158},
		// 63.99/1.377, 68.38/1.219, 66.84/1.200
		{"100ms", "latency p50 ms", 1.219, 66.84, 66.84 / 1.200},
		// 186.6/35.84, 326.2/39.73, 295.4/32.03
		{"100ms", "latency p99 ms", 35.84, 295.4, 326.2 / 39.73},
		// 235.5/49.81, 406.0/64.40, 397.5/47.86
		{"100ms", "latency max ms", 49.81, 397.5, 406.0 / 64.40},
		// 338840/474434, 339551/594580, 338850/717571
		{"1s", "throughput records/s", 594580, 338850, 339551.0 / 594580},
		// 516.3/1.103, 520.4/1.100, 518.3/1.238
		{"1s", "latency p50 ms", 1.103, 518.3, 516.3 / 1.103},
		// 1004/25.17, 1008/19.94, 1005/24.04
		{"1s", "latency p99 ms", 24.04, 1005, 1005 / 24.04},
		// 1032/36.53, 1033/38.42, 1034/40.02
		{"1s", "latency max ms", 38.42, 1033, 1033 / 38.42},
	} {
		r := findRow(t, rows, tc.interval, tc.label)
		alo, _ := median(r.alo.samples)
		eos, _ := median(r.eos.samples)
		if !near(alo, tc.alo) || !near(eos, tc.eos) {
			t.Errorf("%s %s: medians %v, %v; want %v, %v", tc.interval, tc.label, alo, eos, tc.alo, tc.eos)
		}
		if !r.ok || r.how != outputsPaired || r.pairs != 3 || !near(r.ratio, tc.ratio) {
			t.Errorf("%s %s: ratio %v (%s of %d, ok %v), want %v paired of 3", tc.interval, tc.label, r.ratio, r.how, r.pairs, r.ok, tc.ratio)
		}
	}
}

func TestOutputsRender(t *testing.T) {
	out := renderString(t, readOutputs(t))
	for _, want := range []string{
		"pkg: github.com/snapfence/snapfence/engine",
		"Exactly-once output: BenchmarkOutputs",
		"(samples: 3)",
		"dups (outputs the read_committed consumer saw twice): none",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The input is BenchmarkOutputs alone: none of the store's or the
	// engine's sections, no targets.
	for _, unwanted := range []string{"Experiment A", "Recovery", "Engine", "Targets", "missing", "samples per benchmark"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("output has %q:\n%s", unwanted, out)
		}
	}
	for _, want := range [][]string{
		{"commit", "metric", "at-least-once", "exactly-once", "ratio", "ratio", "of", "samples"},
		{"100ms", "throughput", "records/s", "384110", "326113", "0.86x", "3", "paired", "runs", "3/3"},
		{"100ms", "latency", "p50", "ms", "1.2", "66.8", "56x", "3", "paired", "runs", "3/3"},
		{"100ms", "latency", "p99", "ms", "35.8", "295.4", "8.21x", "3", "paired", "runs", "3/3"},
		{"1s", "throughput", "records/s", "594580", "338850", "0.57x", "3", "paired", "runs", "3/3"},
		{"1s", "latency", "max", "ms", "38.4", "1033.0", "27x", "3", "paired", "runs", "3/3"},
	} {
		if !hasLine(out, want) {
			t.Errorf("no line %q in\n%s", strings.Join(want, " "), out)
		}
	}
}

// hasLine reports whether a line of out has exactly the fields f.
func hasLine(out string, f []string) bool {
	for line := range strings.Lines(out) {
		if slices.Equal(strings.Fields(line), f) {
			return true
		}
	}
	return false
}

// A run cut short (here exactly-once's third throughput sample at 100 ms
// lost) leaves samples that do not pair up: that row's ratio is the ratio
// of the medians, and says so; the others stay paired.
func TestOutputsUnpaired(t *testing.T) {
	var kept []string
	dropped := false
	for line := range strings.Lines(readOutputs(t)) {
		if !dropped && strings.HasPrefix(line, "BenchmarkOutputs/exactly-once/commit=100ms/throughput-2") && strings.Contains(line, "349031 records/s") {
			dropped = true
			continue
		}
		kept = append(kept, line)
	}
	if !dropped {
		t.Fatal("the sample line to drop is not in testdata/outputs.txt")
	}
	in := strings.Join(kept, "")
	s, _, _ := parseString(t, in)
	rows := outputsTable(s)
	r := findRow(t, rows, "100ms", "throughput records/s")
	// (286331+326113)/2 over 384110
	if want := (286331.0 + 326113) / 2 / 384110; !r.ok || r.how != outputsMedians || !near(r.ratio, want) {
		t.Errorf("ratio %v (%s, ok %v), want %v of the medians", r.ratio, r.how, r.ok, want)
	}
	if r := findRow(t, rows, "100ms", "latency p99 ms"); r.how != outputsPaired {
		t.Errorf("latency p99 at 100ms: %s, want paired", r.how)
	}
	out := renderString(t, in)
	if want := []string{"100ms", "throughput", "records/s", "384110", "306222", "0.80x", "medians", "3/2"}; !hasLine(out, want) {
		t.Errorf("no line %q in\n%s", strings.Join(want, " "), out)
	}
}

// A mode missing altogether: its cells say so, the ratio is "—".
func TestOutputsMissingMode(t *testing.T) {
	var kept []string
	for line := range strings.Lines(readOutputs(t)) {
		if !strings.HasPrefix(line, "BenchmarkOutputs/exactly-once/commit=1s/") {
			kept = append(kept, line)
		}
	}
	out := renderString(t, strings.Join(kept, ""))
	if want := []string{"1s", "latency", "p50", "ms", "1.1", "missing", "—", "—", "3/0"}; !hasLine(out, want) {
		t.Errorf("no line %q in\n%s", strings.Join(want, " "), out)
	}
}

// dups is reported only when non-zero; the table lists them.
func TestOutputsDups(t *testing.T) {
	in := strings.Replace(readOutputs(t),
		"        49.81 max-ms", "         2.000 dups	        49.81 max-ms", 1)
	out := renderString(t, in)
	if want := "  at-least-once/commit=100ms/latency: [2] in 1 of 3 runs\n"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	if strings.Contains(out, "twice): none") {
		t.Errorf("output says none:\n%s", out)
	}
}

// A failed run: the failure is reported (main exits non-zero), the samples
// that were measured are tabled.
func TestOutputsFailure(t *testing.T) {
	in := readOutputs(t) + "--- FAIL: BenchmarkOutputs/exactly-once/commit=1s/latency\n    eos_bench_it_test.go:250: the paced outputs: 9000 of 10004 outputs seen\nFAIL\n"
	_, _, failed := parseString(t, in)
	if !failed {
		t.Error("failure not reported")
	}
}

// The store's benchmarks alone print no outputs section; with
// BenchmarkOutputs beside them, both, the outputs section before the
// targets.
func TestOutputsBesideOthers(t *testing.T) {
	store := `goos: linux
goarch: amd64
pkg: github.com/snapfence/snapfence/store/kafka
BenchmarkExperimentA/plain-sequential-2   	       3	 190000000 ns/op
BenchmarkExperimentA/txn-sequential-2     	       3	 800000000 ns/op	       500.0 txns/op
BenchmarkExperimentB/plain-2              	       3	 280000000 ns/op	     7000 writes/s	        70.00 MB/s
BenchmarkExperimentB/cap=256-2            	       3	 290000000 ns/op	     6900 writes/s	        69.00 MB/s	         8.000 txns/op
BenchmarkRecovery/bare-2                  	       3	  50000000 ns/op	       400.0 MB/s
BenchmarkRecovery/snapfence-2             	       3	  52000000 ns/op	       390.0 MB/s
`
	out := renderString(t, store)
	if strings.Contains(out, "Exactly-once output") || strings.Contains(out, "dups") {
		t.Errorf("store-only input prints the outputs section:\n%s", out)
	}
	if !strings.Contains(out, "Experiment A") || !strings.Contains(out, "Targets") {
		t.Errorf("store-only input lacks its sections:\n%s", out)
	}

	out = renderString(t, store+readOutputs(t))
	exp, outs, tgt := strings.Index(out, "Experiment A"), strings.Index(out, "Exactly-once output"), strings.Index(out, "Targets")
	if exp < 0 || outs < 0 || tgt < 0 || !(exp < outs && outs < tgt) {
		t.Errorf("want Experiment A, then Exactly-once output, then Targets:\n%s", out)
	}
}

func TestOutputsIntervalOrder(t *testing.T) {
	s := samples{}
	for _, iv := range []string{"2s", "500ms", "1s", "odd"} {
		s["BenchmarkOutputs/exactly-once/commit="+iv+"/latency"] = map[string][]float64{"ns/op": {1}}
	}
	if got, want := outputsIntervals(s), []string{"500ms", "1s", "2s", "odd"}; !slices.Equal(got, want) {
		t.Errorf("intervals %v, want %v", got, want)
	}
}
