package main

import (
	"os"
	"strings"
	"testing"
)

// testdata/warm.txt is a real run (stdout) of `make bench-warm` (5 rounds,
// kfake then Kafka 4.3.1) on the 2-vCPU VM of docs/benchmarks.md.
func readWarm(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/warm.txt")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The rounds' sub-benchmarks (cold, cold#01, ...) are samples of one
// benchmark, in the order they ran, so the i-th warm pairs with the i-th
// cold.
func TestParseWarmRounds(t *testing.T) {
	s, _, failed := parseString(t, readWarm(t))
	if failed {
		t.Error("the sample reports a failure")
	}
	for _, c := range warmClusters {
		for _, v := range warmVariants {
			name := c.bench + "/" + v.sub
			if n := len(s[name]["total-ms"]); n != 5 {
				t.Errorf("%s: %d samples of total-ms, want 5 (one per round)", name, n)
			}
		}
	}
	for name := range s {
		if strings.Contains(name, "#") {
			t.Errorf("benchmark %q kept its run suffix", name)
		}
	}
	// Paired: the ratio is the median of warm[i]/cold[i], not the ratio
	// of the medians.
	cold, warm := s["BenchmarkWarmRestart/cold"]["total-ms"], s["BenchmarkWarmRestart/warm"]["total-ms"]
	want, _ := pairedRatio(warm, cold)
	got, ok := ratioOf(s, row{bench: "BenchmarkWarmRestart/warm", base: "BenchmarkWarmRestart/cold"}, "total-ms")
	if !ok || !near(got, want) {
		t.Errorf("ratio %v (%v), want %v", got, ok, want)
	}
}

// An input of only the warm benchmarks prints their sections and targets
// alone.
func TestRenderWarmAlone(t *testing.T) {
	out := renderString(t, readWarm(t))
	for _, want := range []string{
		"Warm restarts, kfake", "Warm restarts, Apache Kafka 4.3.1",
		"cold: empty Dir, full recovery (baseline)", "warm: own Dir, delta after 1% changed while down",
		"warm restart at most 0.05x the cold recovery (total time, ratio <= 0.05), kfake:",
		"warm restart at most 0.05x the cold recovery (total time, ratio <= 0.05), Apache Kafka 4.3.1:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	for _, no := range []string{"Experiment A", "Engine throughput", "missing", "not measured"} {
		if strings.Contains(out, no) {
			t.Errorf("%q in\n%s", no, out)
		}
	}
}

// Without warm benchmarks, the output has no trace of them.
func TestRenderWithoutWarm(t *testing.T) {
	out := renderString(t, readOutputs(t))
	if strings.Contains(out, "Warm restarts") || strings.Contains(out, "warm restart") {
		t.Errorf("warm sections without warm benchmarks:\n%s", out)
	}
}

// testdata/failover.txt is a real run (stdout) of `make bench-failover` (5
// rounds, kfake then Kafka 4.3.1) on the 2-vCPU VM of docs/benchmarks.md.
func TestRenderFailover(t *testing.T) {
	b, err := os.ReadFile("testdata/failover.txt")
	if err != nil {
		t.Fatal(err)
	}
	s, _, failed := parseString(t, string(b))
	if failed {
		t.Error("the sample reports a failure")
	}
	for _, c := range failoverClusters {
		for _, v := range failoverVariants {
			name := c.bench + "/" + v.sub
			if n := len(s[name]["failover-ms"]); n != 5 {
				t.Errorf("%s: %d samples of failover-ms, want 5 (one per round)", name, n)
			}
		}
	}
	out := renderString(t, string(b))
	for _, want := range []string{
		"Failover, kfake", "Failover, Apache Kafka 4.3.1",
		"cold: Standby off, empty Dir, full (baseline)", "standby: caught-up replica, delta",
		"failover to a standby at most 0.1x cold (failover time, ratio <= 0.1), kfake:",
		"failover to a standby at most 0.1x cold (failover time, ratio <= 0.1), Apache Kafka 4.3.1:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	for _, no := range []string{"Warm restarts", "Experiment A", "missing", "not measured"} {
		if strings.Contains(out, no) {
			t.Errorf("%q in\n%s", no, out)
		}
	}
}
