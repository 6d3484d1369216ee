package main

// BenchmarkLimit (engine/limit_bench_it_test.go, build tag `it`, a real
// broker; `make bench-limit`): the end-to-end benchmark. A bare
// franz-go consume-produce-commit program (the limit, the baseline)
// against the engine at least once and exactly once, and Kafka Streams
// (the peer, at the same guarantees and commit intervals) when the input
// has it, on a backlog of 1M records, until every input offset is
// committed. The sub-benchmarks run
// in interleaved rounds (limit, at-least-once, exactly-once, limit#01,
// ...), so the i-th sample of an engine variant pairs with the i-th of the
// limit: its ratio is the median of those per-round ratios.
//
// Two tables: the variants' throughput, transactions, snapshots, CPU (the
// benchmark process's and the broker's) and the time waiting for outputs'
// acks, in transactions and in the engine's flushes, with the ratio to the
// limit's records/s; then the engine variants'
// transactions per 1M inputs against the goal, one transaction
// per partition per commit interval (the benchmark reports the goal of
// each op, goal-txns/1M: 8 x its measured seconds / its commit interval,
// scaled to 1M inputs), with the median of the per-op ratios. Then the
// issue's targets.

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

const limitBench = "BenchmarkLimit"

// limitVariants are the benchmark's sub-benchmarks; the first is the
// baseline of the others. The peers (Kafka Streams) have no store
// transactions: they are left out of the second table, and out of the
// first when the input has none of them.
var limitVariants = []struct {
	sub, name, label string
	peer             bool
}{
	{"limit", "limit", "limit: bare franz-go loop (baseline)", false},
	{"at-least-once", "engine at-least-once", "engine at-least-once (snapshots, kafkaio.Emitter)", false},
	{"exactly-once", "engine exactly-once", "engine exactly-once (ExactlyOnce)", false},
	{"at-least-once-emit", "engine at-least-once, Emit", "engine at-least-once with Emit (the loop waits for the acks)", false},
	{"kafka-streams-at-least-once", "Kafka Streams at-least-once", "Kafka Streams at-least-once (RocksDB, the limit's commit interval)", true},
	{"kafka-streams-exactly-once", "Kafka Streams exactly-once", "Kafka Streams exactly-once (exactly_once_v2, RocksDB)", true},
}

// limitThroughputTargets are the goals on records/s, as ratios to
// the limit's of the same round; limitTxnGoal is the most transactions
// per 1M inputs, as a multiple of the goal.
var limitThroughputTargets = []limitTarget{
	{"at-least-once", "engine at-least-once at least 0.85x the limit's records/s (ratio >= 0.85)", 0.85},
	{"exactly-once", "engine exactly-once at least 0.5x the limit's records/s (ratio >= 0.50)", 0.5},
}

const limitTxnGoal = 2.0

// limitTarget is a variant's goal on records/s: at least min times the
// limit's.
type limitTarget struct {
	sub, text string
	min       float64
}

// limitSection is the first table; its title gives the backlog's size
// (the benchmark's inputs, 1M unless -limit.records said otherwise).
func limitSection(s samples) section {
	inputs := "1M"
	if n, ok := s.median(limitBench+"/"+limitVariants[0].sub, "inputs"); ok && n != 1e6 {
		inputs = fmt.Sprintf("%.0f", n)
	}
	sec := section{
		title: "End to end against the limit: BenchmarkLimit on a real broker, a backlog of " + inputs + " records over 100k keys, 8 partitions, per-key sum, one output per input, until every input offset is committed; ratio = records/s / the limit's of the same round; work ratio = the limit's consumed s / the row's (the work, without the wait for the commit tick that ends it)",
		cols: []column{
			{head: "commit ms", unit: "commit-ms", format: "%.0f"},
			{head: "measured s", unit: "measured-s", format: "%.2f"},
			{head: "consumed s", unit: "consumed-s", format: "%.2f"},
			{head: "records/s", unit: "records/s", format: "%.0f"},
			{head: "ratio", unit: "records/s", ratio: true},
			{head: "work ratio", unit: "consumed-s", ratio: true, inverse: true},
			{head: "txns/1M", unit: "txns/1M", format: "%.0f"},
			{head: "snapshots/1M", unit: "snapshots/1M", format: "%.0f"},
			{head: "CPU s", unit: "cpu-s", format: "%.2f"},
			{head: "broker CPU s", unit: "broker-cpu-s", format: "%.2f"},
			{head: "emit s", unit: "emit-s", format: "%.2f"},
			{head: "txn s", unit: "txn-s", format: "%.2f"},
			{head: "flush s", unit: "flush-s", format: "%.2f"},
			{head: "start ms", unit: "start-ms", format: "%.0f"},
		},
	}
	base := limitBench + "/" + limitVariants[0].sub
	for i, v := range limitVariants {
		if _, ok := s[limitBench+"/"+v.sub]; v.peer && !ok {
			continue
		}
		r := row{bench: limitBench + "/" + v.sub, label: v.label, unit: "records/s"}
		if i > 0 {
			r.base = base
		}
		sec.rows = append(sec.rows, r)
	}
	return sec
}

// limitBenches reports whether name is a BenchmarkLimit result.
func limitBenches(name string) bool {
	return name == limitBench || strings.HasPrefix(name, limitBench+"/")
}

// onlyLimit reports whether every benchmark of the input is one of
// BenchmarkLimit (then the table is the limit's sections alone).
func onlyLimit(s samples) bool { return s.only(limitBenches) }

// renderLimit prints the two tables (the targets are limitTargets').
func renderLimit(w io.Writer, s samples) {
	renderColumns(w, s, limitSection(s))
	fmt.Fprintln(w, "\nTransactions per 1M inputs against the goal of one per partition per commit interval (goal = 8 x measured s / commit interval, per 1M inputs); ratio = txns / goal, the median of the per-run ratios")
	width := len("variant")
	for _, v := range limitVariants[1:] {
		width = max(width, len(v.label))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\t commit ms\t measured s\t txns/1M\t goal txns/1M\t txns / goal\t\n", width, "variant")
	for _, v := range limitVariants[1:] {
		if v.peer {
			continue
		}
		name := limitBench + "/" + v.sub
		if _, ok := s[name]; !ok {
			fmt.Fprintf(tw, "%-*s\t missing\t\t\t\t\t\n", width, v.label)
			continue
		}
		cell := func(unit, f string) string {
			m, ok := s.median(name, unit)
			return format(m, ok, f)
		}
		rat, ok := limitTxnRatio(s, v.sub)
		fmt.Fprintf(tw, "%-*s\t %s\t %s\t %s\t %s\t %s\t\n", width, v.label, cell("commit-ms", "%.0f"), cell("measured-s", "%.2f"),
			cell("txns/1M", "%.0f"), cell("goal-txns/1M", "%.0f"), formatWideRatio(rat, ok))
	}
	tw.Flush()
}

// limitTxnRatio is the median of a variant's per-run txns / goal.
func limitTxnRatio(s samples, sub string) (float64, bool) {
	name := limitBench + "/" + sub
	return pairedRatio(s[name]["txns/1M"], s[name]["goal-txns/1M"])
}

// limitTargets are the lines of the targets.
func limitTargets(s samples) []string {
	var out []string
	verdict := func(ok, met bool) string {
		switch {
		case !ok:
			return "not measured"
		case met:
			return "met"
		}
		return "NOT MET"
	}
	sec := limitSection(s)
	for _, t := range limitThroughputTargets {
		for _, r := range sec.rows {
			if r.bench == limitBench+"/"+t.sub {
				rat, ok := ratioOf(s, r, "records/s")
				out = append(out, fmt.Sprintf("%s: %s (%s)", t.text, formatRatio(rat, ok), verdict(ok, rat >= t.min)))
			}
		}
	}
	for _, v := range limitVariants[1:] {
		if !slices.ContainsFunc(limitThroughputTargets, func(t limitTarget) bool { return t.sub == v.sub }) {
			continue // a variant for comparison (Emit), with no target
		}
		rat, ok := limitTxnRatio(s, v.sub)
		out = append(out, fmt.Sprintf("%s transactions within %.0fx of one per partition per commit interval (txns / goal <= %.0f): %s (%s)",
			v.name, limitTxnGoal, limitTxnGoal, formatWideRatio(rat, ok), verdict(ok, rat <= limitTxnGoal)))
	}
	return out
}
