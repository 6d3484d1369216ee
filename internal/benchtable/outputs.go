package main

// BenchmarkOutputs (engine/eos_bench_it_test.go, build tag `it`, a real
// broker; `make bench-outputs`): at-least-once outputs (Config.Emit)
// against exactly-once (Config.ExactlyOnce). Its sub-benchmarks are
// <mode>/commit=<interval>/<measure>; the table has a row per interval and
// metric of a measure, with the two modes' medians side by side and the
// ratio exactly-once / at-least-once.
//
// The ratio is the median of the per-run ratios (the i-th sample of
// exactly-once over the i-th of at-least-once, as the other sections pair
// samples) when the two modes have the same number of samples of the
// metric, all of at-least-once's non-zero; otherwise (a run failed or was
// cut short, so the samples do not pair up) it is the ratio of the medians.
// Each row says which.

import (
	"cmp"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

const (
	outputsBench   = "BenchmarkOutputs"
	modeAtLeast    = "at-least-once"
	modeExactly    = "exactly-once"
	outputsTitle   = "Exactly-once output: BenchmarkOutputs on a real broker; at-least-once (Emit, plain producer) against exactly-once (ExactlyOnce); ratio = exactly-once / at-least-once"
	outputsPaired  = "paired"
	outputsMedians = "medians"
)

// outputsName matches a BenchmarkOutputs sub-benchmark (the GOMAXPROCS
// suffix already removed): mode, interval, measure.
var outputsName = regexp.MustCompile(`^BenchmarkOutputs/(at-least-once|exactly-once)/commit=([^/]+)/(throughput|latency)$`)

// outputsMetric is a row of an interval: a metric of one measure.
type outputsMetric struct {
	measure, unit, label, format string
}

// outputsMetrics are the rows of an interval, in order: throughput's
// records/s, latency's quantiles, and each measure's transactions (the
// store's, in the measurement) and their mean duration.
var outputsMetrics = []outputsMetric{
	{"throughput", "records/s", "throughput records/s", "%.0f"},
	{"throughput", "txns", "throughput txns", "%.0f"},
	{"throughput", "txn-ms", "throughput txn ms (mean)", "%.1f"},
	{"latency", "p50-ms", "latency p50 ms", "%.1f"},
	{"latency", "p90-ms", "latency p90 ms", "%.1f"},
	{"latency", "p99-ms", "latency p99 ms", "%.1f"},
	{"latency", "max-ms", "latency max ms", "%.1f"},
	{"latency", "txns", "latency txns", "%.0f"},
	{"latency", "txn-ms", "latency txn ms (mean)", "%.1f"},
}

// outputsCell is one mode's samples of a row's metric; bench is "" when the
// input has no such sub-benchmark.
type outputsCell struct {
	bench   string
	samples []float64
}

// outputsRow is a row of the table.
type outputsRow struct {
	interval string
	metric   outputsMetric
	alo, eos outputsCell
	// ratio is exactly-once over at-least-once; how is outputsPaired
	// (the median of the per-run ratios of pairs runs) or outputsMedians
	// (the ratio of the medians); ok is false when there is none.
	ratio float64
	how   string
	pairs int
	ok    bool
}

// outputsBenches reports whether name is a BenchmarkOutputs result.
func outputsBenches(name string) bool {
	return name == outputsBench || strings.HasPrefix(name, outputsBench+"/")
}

// onlyOutputs reports whether every benchmark of the input is one of
// BenchmarkOutputs (then the table is the outputs section alone).
func onlyOutputs(s samples) bool { return s.only(outputsBenches) }

// outputsIntervals are the commit intervals in the input, shortest first
// (those that are not durations after the rest, by name).
func outputsIntervals(s samples) []string {
	var ivs []string
	for name := range s {
		if m := outputsName.FindStringSubmatch(name); m != nil && !slices.Contains(ivs, m[2]) {
			ivs = append(ivs, m[2])
		}
	}
	slices.SortFunc(ivs, func(a, b string) int {
		da, errA := time.ParseDuration(a)
		db, errB := time.ParseDuration(b)
		switch {
		case errA == nil && errB == nil && da != db:
			return cmp.Compare(da, db)
		case errA == nil && errB != nil:
			return -1
		case errA != nil && errB == nil:
			return 1
		}
		return strings.Compare(a, b)
	})
	return ivs
}

// outputsTable is the rows of the table, interval by interval.
func outputsTable(s samples) []outputsRow {
	var rows []outputsRow
	for _, iv := range outputsIntervals(s) {
		for _, m := range outputsMetrics {
			r := outputsRow{interval: iv, metric: m}
			cell := func(mode string) outputsCell {
				name := fmt.Sprintf("%s/%s/commit=%s/%s", outputsBench, mode, iv, m.measure)
				if _, ok := s[name]; !ok {
					return outputsCell{}
				}
				return outputsCell{bench: name, samples: s[name][m.unit]}
			}
			r.alo, r.eos = cell(modeAtLeast), cell(modeExactly)
			r.ratio, r.how, r.pairs, r.ok = outputsRatio(r.alo.samples, r.eos.samples)
			rows = append(rows, r)
		}
	}
	return rows
}

// outputsRatio is eos over alo: the median of the per-run ratios if the
// samples pair up (as many of each, at-least-once's all non-zero), else the
// ratio of the medians.
func outputsRatio(alo, eos []float64) (ratio float64, how string, pairs int, ok bool) {
	if len(alo) > 0 && len(alo) == len(eos) && !slices.Contains(alo, 0) {
		r, _ := pairedRatio(eos, alo)
		return r, outputsPaired, len(alo), true
	}
	a, okA := median(alo)
	e, okE := median(eos)
	if !okA || !okE || a == 0 {
		return 0, "", 0, false
	}
	return e / a, outputsMedians, 0, true
}

// formatWideRatio is formatRatio, with no decimals from 10x on (exactly-
// once's latency is hundreds of times at-least-once's).
func formatWideRatio(v float64, ok bool) string {
	if ok && v >= 10 {
		return format(v, ok, "%.0fx")
	}
	return formatRatio(v, ok)
}

// renderOutputs prints the BenchmarkOutputs section: a row per interval and
// metric, then the duplicates the read_committed consumer saw.
func renderOutputs(w io.Writer, s samples) {
	n := 0
	for name, units := range s {
		if outputsName.MatchString(name) {
			n = max(n, len(units["ns/op"]))
		}
	}
	fmt.Fprintf(w, "\n%s (samples: %d)\n", outputsTitle, n)
	fmt.Fprintln(w, "medians; ratio = the median of the per-run ratios (i-th run over i-th run) where the modes' runs pair up, else the ratio of the medians (column \"ratio of\")")
	rows := outputsTable(s)
	width, ivWidth := len("metric"), len("commit")
	for _, r := range rows {
		width, ivWidth = max(width, len(r.metric.label)), max(ivWidth, len(r.interval))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\t %-*s\t %s\t %s\t ratio\t ratio of\t samples\t\n", ivWidth, "commit", width, "metric", modeAtLeast, modeExactly)
	for _, r := range rows {
		c := func(cell outputsCell) string {
			if cell.bench == "" {
				return "missing"
			}
			v, ok := median(cell.samples)
			return format(v, ok, r.metric.format)
		}
		how := "—"
		switch {
		case r.ok && r.how == outputsPaired:
			how = fmt.Sprintf("%d paired runs", r.pairs)
		case r.ok:
			how = "medians"
		}
		fmt.Fprintf(tw, "%-*s\t %-*s\t %s\t %s\t %s\t %s\t %d/%d\t\n", ivWidth, r.interval, width, r.metric.label,
			c(r.alo), c(r.eos), formatWideRatio(r.ratio, r.ok), how, len(r.alo.samples), len(r.eos.samples))
	}
	tw.Flush()
	// dups is reported only when non-zero: a sample without it saw none.
	var dups []string
	names := make([]string, 0, len(s))
	for name := range s {
		if outputsName.MatchString(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if d := s[name]["dups"]; len(d) > 0 {
			dups = append(dups, fmt.Sprintf("%s: %v in %d of %d runs", strings.TrimPrefix(name, outputsBench+"/"), d, len(d), len(s[name]["ns/op"])))
		}
	}
	if len(dups) == 0 {
		fmt.Fprintln(w, "dups (outputs the read_committed consumer saw twice): none")
		return
	}
	fmt.Fprintln(w, "dups (outputs the read_committed consumer saw twice):")
	for _, d := range dups {
		fmt.Fprintln(w, "  "+d)
	}
}
