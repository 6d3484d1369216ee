package main

// The warm-restart benchmarks (engine/warm_bench_test.go: BenchmarkWarmRestart
// on kfake, BenchmarkWarmRestartBroker on a real broker, build tag `it`;
// `make bench-warm`): per cluster, a row per variant with its times and
// the snapshots its recoveries read, and the ratio to the cold variant of
// the same round (the i-th sample of a row over the i-th of cold: the
// benchmark interleaves them, cold, warm, cold#01, warm#01, ...).
//
// The failover benchmark (engine/warm_failover_bench_test.go) is printed
// the same way. A new variant is a row in its benchmark's variants, with
// a target if it has one; a new benchmark of this kind is an entry of
// warmBenchmarks.

import "strings"

const warmBench = "BenchmarkWarmRestart"

// warmClusters are the benchmark functions, one per cluster.
var warmClusters = []struct{ bench, title string }{
	{warmBench, "kfake (one broker, loopback TCP)"},
	{warmBench + "Broker", "Apache Kafka 4.3.1 (single node, 127.0.0.1)"},
}

// warmVariants are the benchmark's variants (sub-benchmarks); the first
// is every other's baseline.
var warmVariants = []struct{ sub, label string }{
	{"cold", "cold: empty Dir, full recovery (baseline)"},
	{"warm", "warm: own Dir, delta after 1% changed while down"},
}

// warmTargets are the issue's: warm at most 0.05x cold, on the total time.
var warmTargets = []struct {
	sub, text string
	ok        func(ratio float64) bool
}{
	{"warm", "warm restart at most 0.05x the cold recovery (total time, ratio <= 0.05)", func(r float64) bool { return r <= 0.05 }},
}

// failoverClusters and failoverVariants are the failover benchmark's
// (engine/warm_failover_bench_test.go, `make bench-failover`): one
// partition of 1M keys, from the active member's kill until the other
// member recovered it, cold (Standby off, an empty Dir) against a
// caught-up standby replica. Its target: standby at most 0.1x cold.
var failoverClusters = []struct{ bench, title string }{
	{warmBench + "Failover", "kfake (one broker, loopback TCP)"},
	{warmBench + "FailoverBroker", "Apache Kafka 4.3.1 (single node, 127.0.0.1)"},
}

var failoverVariants = []struct{ sub, label string }{
	{"cold", "cold: Standby off, empty Dir, full (baseline)"},
	{"standby", "standby: caught-up replica, delta"},
}

var failoverTargets = []struct {
	sub, text string
	ok        func(ratio float64) bool
}{
	{"standby", "failover to a standby at most 0.1x cold (failover time, ratio <= 0.1)", func(r float64) bool { return r <= 0.1 }},
}

// pairedBenchmark is one of the benchmarks above: its clusters, variants
// (the first the baseline of the others, round by round), targets, and
// the section each cluster gets.
type pairedBenchmark struct {
	clusters []struct{ bench, title string }
	variants []struct{ sub, label string }
	targets  []struct {
		sub, text string
		ok        func(ratio float64) bool
	}
	name  string // the section title's lead
	title string // after the cluster's title
	unit  string // the rows' ratio unit
	cols  []column
}

// warmBenchmarks are the failover and the warm-restart benchmarks, in the
// order their sections print.
var warmBenchmarks = []pairedBenchmark{
	{
		clusters: failoverClusters, variants: failoverVariants, targets: failoverTargets, name: "Failover",
		title: ": 1 partition of 1M keys (-warm.keys) of 100 B, transactional; the active's kill (and leave) to the other member's partition recovered; ratio = time / cold of the same round",
		unit:  "failover-ms",
		cols: []column{
			{head: "failover ms", unit: "failover-ms", format: "%.0f"},
			{head: "join ms", unit: "join-ms", format: "%.0f"},
			{head: "recovery ms", unit: "recovery-ms", format: "%.0f"},
			{head: "snapshots", unit: "snapshots", format: "%.0f"},
			{head: "delta/1", unit: "delta-partitions", format: "%.0f"},
			{head: "ratio", unit: "failover-ms", ratio: true},
			{head: "recovery ratio", unit: "recovery-ms", ratio: true},
		},
	},
	{
		clusters: warmClusters, variants: warmVariants, targets: warmTargets, name: "Warm restarts",
		title: ": 1M keys (-warm.keys) of 100 B, 8 partitions, transactional; start to every partition recovered; ratio = time / cold of the same round",
		unit:  "total-ms",
		cols: []column{
			{head: "total ms", unit: "total-ms", format: "%.0f"},
			{head: "open ms", unit: "open-ms", format: "%.0f"},
			{head: "join ms", unit: "join-ms", format: "%.0f"},
			{head: "recovery ms", unit: "recovery-ms", format: "%.0f"},
			{head: "snapshots", unit: "snapshots", format: "%.0f"},
			{head: "delta/8", unit: "delta-partitions", format: "%.0f"},
			{head: "ratio", unit: "total-ms", ratio: true},
			{head: "recovery ratio", unit: "recovery-ms", ratio: true},
		},
	},
}

func warmSections() []section {
	var secs []section
	for _, pb := range warmBenchmarks {
		for _, c := range pb.clusters {
			sec := section{title: pb.name + ", " + c.title + pb.title, cols: pb.cols, optional: true}
			base := c.bench + "/" + pb.variants[0].sub
			for i, v := range pb.variants {
				r := row{bench: c.bench + "/" + v.sub, label: v.label, unit: pb.unit}
				if i > 0 {
					r.base = base
				}
				sec.rows = append(sec.rows, r)
			}
			secs = append(secs, sec)
		}
	}
	return secs
}

// warmTargetList is every benchmark's targets for every cluster, in the
// form of the other targets.
func warmTargetList() (out []target) {
	for _, pb := range warmBenchmarks {
		for _, c := range pb.clusters {
			for _, t := range pb.targets {
				out = append(out, target{bench: c.bench + "/" + t.sub, text: t.text + ", " + strings.SplitN(c.title, " (", 2)[0], ok: t.ok})
			}
		}
	}
	return out
}

// warmBenches reports whether name is a warm-restart result.
func warmBenches(name string) bool { return strings.HasPrefix(name, warmBench) }

// onlyWarm reports whether every benchmark of the input is a warm-restart
// one (then the table is the warm sections alone).
func onlyWarm(s samples) bool { return s.only(warmBenches) }
