package main

// BenchmarkLatency (engine/latency_bench_it_test.go, build tag `it`, a
// real broker; `make bench-latency`): end-to-end latency. Per variant
// (BenchmarkLimit's: the bare loop, the engine, Kafka Streams), its own
// maximum first (max/<variant>: a backlog, as BenchmarkLimit measures it,
// unless -latency.max gave it), then a feed at fractions of it
// (latency/<variant>/<pct>%: p50-ms, p99-ms, max-ms, the achieved
// records/s, the inputs counted).
//
// With -latency.same, every variant is also fed at fractions of the
// smallest maximum (same/<variant>/<pct>%): the same rates for all, in a
// second table of the same columns.
//
// One table, a row per variant and rate: the variant's maximum and its
// ratio to the limit's (on its first row), then per rate the latencies
// and the ratio of the row's p99 to Kafka Streams' p99 at the same
// guarantee and rate (the engine at least once, and with Emit, against
// Kafka Streams at least once; exactly once against exactly once). With
// several samples, the medians, and ratios that are the medians of the
// per-sample ratios (the i-th sample of each, as the runs ran).

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

const latencyBench = "BenchmarkLatency"

// latencyVariants are the variants the table knows, in its order: label,
// and the Kafka Streams variant of the same guarantee (peer; "" for none,
// and for the peers themselves, whose ratio is 1.00x).
var latencyVariants = []struct{ sub, label, peer string }{
	{"limit", "limit: bare franz-go loop", ""},
	{"at-least-once", "engine at-least-once (StartEmit)", "kafka-streams-at-least-once"},
	{"at-least-once-emit", "engine at-least-once (Emit)", "kafka-streams-at-least-once"},
	{"exactly-once", "engine exactly-once", "kafka-streams-exactly-once"},
	{"kafka-streams-at-least-once", "Kafka Streams at-least-once", ""},
	{"kafka-streams-exactly-once", "Kafka Streams exactly-once", ""},
}

// latencyBenches reports whether name is a BenchmarkLatency result.
func latencyBenches(name string) bool {
	return name == latencyBench || strings.HasPrefix(name, latencyBench+"/")
}

// onlyLatency reports whether every benchmark of the input is one of
// BenchmarkLatency (then the table is its alone).
func onlyLatency(s samples) bool { return s.only(latencyBenches) }

// latencyLayout is what the input holds: the variants in the table's
// order (known ones first, then others by name), and the rates of each
// (the "<pct>%" of the sub-benchmarks' names, in increasing order).
func latencyLayout(s samples, kind string) (variants []string, rates map[string][]string) {
	rates = map[string][]string{}
	seen := map[string]bool{}
	var others []string
	for name := range s {
		rest, ok := strings.CutPrefix(name, latencyBench+"/")
		if !ok {
			continue
		}
		var v string
		switch {
		case strings.HasPrefix(rest, "max/"):
			v = strings.TrimPrefix(rest, "max/")
		case strings.HasPrefix(rest, kind+"/"):
			i := strings.LastIndexByte(rest, '/')
			v = rest[len(kind)+1 : i]
			rates[v] = append(rates[v], rest[i+1:])
		default:
			continue
		}
		if !seen[v] {
			seen[v] = true
			if !slices.ContainsFunc(latencyVariants, func(k struct{ sub, label, peer string }) bool { return k.sub == v }) {
				others = append(others, v)
			}
		}
	}
	for _, k := range latencyVariants {
		if seen[k.sub] {
			variants = append(variants, k.sub)
		}
	}
	slices.Sort(others)
	variants = append(variants, others...)
	pct := func(r string) float64 {
		f, _ := strconv.ParseFloat(strings.TrimSuffix(r, "%"), 64)
		return f
	}
	for v := range rates {
		slices.SortFunc(rates[v], func(a, b string) int {
			switch pa, pb := pct(a), pct(b); {
			case pa < pb:
				return -1
			case pa > pb:
				return 1
			}
			return strings.Compare(a, b)
		})
		rates[v] = slices.Compact(rates[v])
	}
	return variants, rates
}

// latencyLabel is variant's label and its Kafka Streams counterpart (""
// for none).
func latencyLabel(v string) (label, peer string) {
	for _, k := range latencyVariants {
		if k.sub == v {
			return k.label, k.peer
		}
	}
	return v, ""
}

// renderLatency prints the table of each kind the input has: latency (at
// each variant's own maximum) and same (at the smallest).
func renderLatency(w io.Writer, s samples) {
	for _, kind := range []string{"latency", "same"} {
		if kind == "latency" || slices.ContainsFunc(slices.Collect(maps.Keys(s)), func(n string) bool { return strings.HasPrefix(n, latencyBench+"/"+kind+"/") }) {
			renderLatencyKind(w, s, kind)
		}
	}
}

func renderLatencyKind(w io.Writer, s samples, kind string) {
	variants, rates := latencyLayout(s, kind)
	n := 0
	for name := range s {
		if latencyBenches(name) {
			n = max(n, len(s[name]["p99-ms"]), len(s[name]["records/s"]))
		}
	}
	inputs := "1M"
	for _, v := range variants {
		if m, ok := s.median(latencyBench+"/max/"+v, "inputs"); ok && m != 1e6 {
			inputs = fmt.Sprintf("%.0f", m)
		}
	}
	fed := "then fed at fractions of it"
	if kind == "same" {
		fed = "then every variant fed at the same rates, fractions of the smallest maximum"
	}
	fmt.Fprintf(w, "\nLatency: BenchmarkLatency on a real broker, BenchmarkLimit's workload (100k keys, 8 partitions, per-key sum, one output per input); each variant's maximum from a backlog of %s records, %s; latency from an input's produce to its output seen by a consumer (read_committed for exactly once); samples: %d; max ratio = max records/s / the limit's; p99 ratio = p99 / Kafka Streams' p99 at the same guarantee and rate\n", inputs, fed, n)
	width := len("variant")
	for _, v := range variants {
		l, _ := latencyLabel(v)
		width = max(width, len(l))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\t max records/s\t max ratio\t rate\t records/s\t p50 ms\t p99 ms\t max ms\t p99 ratio\t inputs\t\n", width, "variant")
	limitMax := s[latencyBench+"/max/limit"]["records/s"]
	for _, v := range variants {
		label, peer := latencyLabel(v)
		maxName := latencyBench + "/max/" + v
		most, mostOK := s.median(maxName, "records/s")
		mostRatio := "—"
		switch {
		case !mostOK:
		case v == "limit":
			mostRatio = "1.00x"
		default:
			mostRatio = formatRatio(pairedRatio(s[maxName]["records/s"], limitMax))
		}
		first := fmt.Sprintf("%-*s\t %s\t %s\t", width, label, format(most, mostOK, "%.0f"), mostRatio)
		if len(rates[v]) == 0 {
			fmt.Fprintf(tw, "%s —\t\t\t\t\t\t\t\n", first)
			continue
		}
		for i, r := range rates[v] {
			if i > 0 {
				first = fmt.Sprintf("%-*s\t\t\t", width, "")
			}
			name := latencyBench + "/" + kind + "/" + v + "/" + r
			cell := func(unit, f string) string {
				m, ok := s.median(name, unit)
				return format(m, ok, f)
			}
			p99Ratio := ""
			switch {
			case strings.HasPrefix(v, "kafka-streams-"):
				p99Ratio = "1.00x"
			case peer != "":
				p99Ratio = formatRatio(pairedRatio(s[name]["p99-ms"], s[latencyBench+"/"+kind+"/"+peer+"/"+r]["p99-ms"]))
			}
			fmt.Fprintf(tw, "%s %s\t %s\t %s\t %s\t %s\t %s\t %s\t\n", first, r, cell("records/s", "%.0f"),
				cell("p50-ms", "%.1f"), cell("p99-ms", "%.1f"), cell("max-ms", "%.1f"), p99Ratio, cell("inputs", "%.0f"))
		}
	}
	tw.Flush()
}
