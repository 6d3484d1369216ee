package main

import (
	"os"
	"strings"
	"testing"
)

// testdata/commit.txt is a real run (stdout) of `make bench-commit` (5
// rounds, Kafka 4.3.1) on the 2-vCPU VM of docs/benchmarks.md.
func readCommit(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/commit.txt")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The rounds' sub-benchmarks are samples of one benchmark; the crash's
// single sample joins the same row; a variant's ratio is the median of
// its per-round ratios to the 1 min op of the same round.
func TestRenderCommit(t *testing.T) {
	in := readCommit(t)
	s, _, failed := parseString(t, in)
	if failed {
		t.Error("the sample reports a failure")
	}
	for _, v := range commitVariants {
		if n := len(s[commitBench+"/"+v.sub]["records/s"]); n != 5 {
			t.Errorf("%s: %d samples of records/s, want 5 (one per round)", v.sub, n)
		}
		if n := len(s[crashBench+"/"+v.sub]["dups"]); n != 1 {
			t.Errorf("%s: %d samples of the crash's dups, want 1", v.sub, n)
		}
	}
	out := renderString(t, in)
	if !strings.Contains(out, "Commit interval: throughput on a real broker") || !strings.Contains(out, "1000 records/s") {
		t.Errorf("no title with the crash's rate in\n%s", out)
	}
	if strings.Contains(out, "missing") || strings.Contains(out, "Targets") || strings.Contains(out, "Experiment A") {
		t.Errorf("more than the commit interval's table:\n%s", out)
	}
	rows := map[string][]string{}
	for line := range strings.Lines(out) {
		for _, v := range commitVariants {
			if strings.HasPrefix(strings.TrimSpace(line), v.label) {
				rows[v.sub] = strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), v.label))
			}
		}
	}
	// records/s, ratio, snapshots/1M, txns/1M, txn ms, CPU s, broker CPU
	// s, CPU ratio, dups, refolds, age max, age mean, lag max.
	for _, v := range commitVariants {
		if f := rows[v.sub]; len(f) != 13 {
			t.Fatalf("%s: %d cells %q, want 13", v.sub, len(f), f)
		}
	}
	if f := rows[commitBase]; f[1] != "1.00x" || f[7] != "1.00x" {
		t.Errorf("the baseline's ratios %s and %s, want 1.00x", f[1], f[7])
	}
	want := formatRatio(pairedRatio(s[commitBench+"/at-least-once-1s"]["records/s"], s[commitBench+"/"+commitBase]["records/s"]))
	if got := rows["at-least-once-1s"][1]; got != want {
		t.Errorf("1 s ratio %s, want the median of the per-round ratios %s", got, want)
	}
	if got := rows["exactly-once-100ms"][8]; got != "0" {
		t.Errorf("exactly once: %s duplicates read_committed, want 0", got)
	}
	if got := rows["at-least-once-1m"][8]; got != "59990" {
		t.Errorf("at least once, 1 min: %s duplicates, want 59990 (a minute at 1000/s, less a step of 10 ms)", got)
	}
}

// Mixed with other benchmarks, the table prints after theirs; without
// them, nothing of it prints.
func TestRenderCommitMixed(t *testing.T) {
	out := renderString(t, readLimit(t)+"\n"+readCommit(t))
	limit, commit := strings.Index(out, "End to end against the limit"), strings.Index(out, "Commit interval: throughput")
	if limit < 0 || commit < limit {
		t.Errorf("the limit's table at %d, the commit interval's at %d:\n%s", limit, commit, out)
	}
	if without := renderString(t, readLimit(t)); strings.Contains(without, "Commit interval") {
		t.Errorf("the commit interval's table without its benchmarks:\n%s", without)
	}
}
