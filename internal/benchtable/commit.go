package main

// The commit interval (`make bench-commit`; docs/benchmarks.md, "Commit
// interval"): per variant, an output mode and its CommitInterval, one row
// joining two benchmarks of package engine. BenchmarkCommitInterval
// (build tag `it`, a real broker): the engine's throughput on a backlog,
// in interleaved rounds, so the i-th sample of a variant pairs with the
// i-th of the 1 min one: its ratios are the medians of those per-round
// ratios. BenchmarkCommitIntervalCrash (the simulated cluster, virtual
// time, one sample): what a crash re-emits, and how old committed reads
// and the group's committed offsets get.

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

const (
	commitBench = "BenchmarkCommitInterval"
	crashBench  = "BenchmarkCommitIntervalCrash"
	// commitBase is the variant the ratios compare with: the interval
	// the engine defaulted to before the measurement.
	commitBase = "at-least-once-1m"
)

// commitVariants are the benchmarks' sub-benchmarks, in the order they
// run.
var commitVariants = []struct{ sub, label string }{
	{"at-least-once-100ms", "at least once, 100 ms"},
	{"at-least-once-250ms", "at least once, 250 ms"},
	{"at-least-once-1s", "at least once, 1 s (the default)"},
	{"at-least-once-5s", "at least once, 5 s"},
	{"at-least-once-1m", "at least once, 1 min (baseline)"},
	{"exactly-once-100ms", "exactly once, 100 ms (its default)"},
}

// commitBenches reports whether name is a result of either benchmark.
func commitBenches(name string) bool {
	return strings.HasPrefix(name, commitBench+"/") || strings.HasPrefix(name, crashBench+"/")
}

// onlyCommit reports whether every benchmark of the input is one of the
// two (then the table is the commit interval's alone).
func onlyCommit(s samples) bool { return s.only(commitBenches) }

// renderCommit prints the table: the broker's columns, then the crash's.
func renderCommit(w io.Writer, s samples) {
	rounds := 0
	for _, v := range commitVariants {
		rounds = max(rounds, len(s[commitBench+"/"+v.sub]["records/s"]))
	}
	inputs := "1M"
	if n, ok := s.median(commitBench+"/"+commitBase, "inputs"); ok && n != 1e6 {
		inputs = fmt.Sprintf("%.0f", n)
	}
	fmt.Fprintf(w, "\nCommit interval: throughput on a real broker (BenchmarkCommitInterval: a backlog of %s records over 100k keys, 8 partitions, from the first fold until every offset is committed, medians of %d rounds; ratio = the 1 min op's of the same round) and a crash on the simulated cluster (BenchmarkCommitIntervalCrash: %s records/s, the crash one step before a commit is due; virtual time)\n",
		inputs, rounds, crashRateOf(s))
	width := len("variant")
	for _, v := range commitVariants {
		width = max(width, len(v.label))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\t records/s\t ratio\t snapshots/1M\t txns/1M\t txn ms\t CPU s\t broker CPU s\t CPU ratio\t dups\t refolds\t read age max ms\t read age mean ms\t lag max\t\n", width, "variant")
	base := commitBench + "/" + commitBase
	for _, v := range commitVariants {
		name, crash := commitBench+"/"+v.sub, crashBench+"/"+v.sub
		cell := func(bench, unit, f string) string {
			m, ok := s.median(bench, unit)
			return format(m, ok, f)
		}
		rat, cpuRat := "1.00x", "1.00x"
		if v.sub != commitBase {
			rat = formatRatio(pairedRatio(s[name]["records/s"], s[base]["records/s"]))
			cpuRat = formatRatio(pairedRatio(totalCPU(s, name), totalCPU(s, base)))
		}
		if _, ok := s[name]; !ok {
			rat, cpuRat = "—", "—"
		}
		fmt.Fprintf(tw, "%-*s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t\n", width, v.label,
			cell(name, "records/s", "%.0f"), rat, cell(name, "snapshots/1M", "%.0f"), cell(name, "txns/1M", "%.0f"),
			txnMs(s, name), cell(name, "cpu-s", "%.2f"), cell(name, "broker-cpu-s", "%.2f"), cpuRat,
			cell(crash, "dups", "%.0f"), cell(crash, "refolds", "%.0f"), cell(crash, "age-max-ms", "%.0f"),
			cell(crash, "age-mean-ms", "%.0f"), cell(crash, "lag-max", "%.0f"))
	}
	tw.Flush()
}

// crashRateOf is the crash benchmark's input rate (records/s).
func crashRateOf(s samples) string {
	for _, v := range commitVariants {
		if r, ok := s.median(crashBench+"/"+v.sub, "input-rate"); ok {
			return fmt.Sprintf("%.0f", r)
		}
	}
	return "?"
}

// totalCPU is each sample's CPU of the benchmark process and the broker.
func totalCPU(s samples, name string) []float64 {
	cpu, broker := s[name]["cpu-s"], s[name]["broker-cpu-s"]
	if len(broker) != len(cpu) {
		return cpu // the broker's process was not known
	}
	out := make([]float64, len(cpu))
	for i := range cpu {
		out[i] = cpu[i] + broker[i]
	}
	return out
}

// txnMs is the median of each sample's mean transaction time: its txn-s
// over its transactions (txns/1M scaled back to its inputs).
func txnMs(s samples, name string) string {
	secs, perM, inputs := s[name]["txn-s"], s[name]["txns/1M"], s[name]["inputs"]
	var ms []float64
	for i := range min(len(secs), len(perM), len(inputs)) {
		if n := perM[i] * inputs[i] / 1e6; n > 0 {
			ms = append(ms, secs[i]*1000/n)
		}
	}
	m, ok := median(ms)
	return format(m, ok, "%.1f")
}
