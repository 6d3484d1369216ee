package main

import (
	"strings"
	"testing"
)

// Experiment A's transactional one at a time has two ratios from the same
// run: to the plain producer one at a time and to the bare franz-go
// transactions, each the median of the per-sample ratios; the target of
// 1.2x is read from the second.
func TestExperimentARatioToTheBareTransactions(t *testing.T) {
	in := `BenchmarkExperimentA/plain-sequential-2      	3	 100000000 ns/op
BenchmarkExperimentA/txn-sequential-2        	3	1300000000 ns/op	500.0 txns/op
BenchmarkExperimentA/bare-txn-sequential-2   	3	1000000000 ns/op	500.0 txns/op
BenchmarkExperimentA/plain-sequential-2      	3	 200000000 ns/op
BenchmarkExperimentA/txn-sequential-2        	3	1100000000 ns/op	500.0 txns/op
BenchmarkExperimentA/bare-txn-sequential-2   	3	1000000000 ns/op	500.0 txns/op
BenchmarkExperimentA/plain-sequential-2      	3	 100000000 ns/op
BenchmarkExperimentA/txn-sequential-2        	3	1150000000 ns/op	500.0 txns/op
BenchmarkExperimentA/bare-txn-sequential-2   	3	1000000000 ns/op	500.0 txns/op
`
	out := renderString(t, in)
	var line string
	for l := range strings.Lines(out) {
		if strings.Contains(l, "transactional, one at a time") {
			line = l
		}
	}
	// Ratios to plain 13, 5.5, 11.5: median 11.5x; to bare 1.3, 1.1,
	// 1.15: median 1.15x.
	if f := strings.Fields(line); len(f) < 8 || !strings.Contains(line, " 11.50x ") || !strings.Contains(line, " 1.15x ") {
		t.Errorf("transactional one at a time: want 11.50x to plain and 1.15x to bare:\n%s", out)
	}
	if !strings.Contains(out, "within 1.2x of the bare franz-go transactions (time ratio <= 1.20): 1.15x (met)") {
		t.Errorf("the bare target is not read from the bare ratio:\n%s", out)
	}
	for l := range strings.Lines(out) {
		if strings.Contains(l, "bare franz-go transactions, one at a time") && !strings.Contains(l, " 1.00x ") {
			t.Errorf("the bare row is not marked as the second baseline: %q", l)
		}
	}
}
