package props

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

var protocols = []sim.Protocol{sim.ClassicEager, sim.ClassicCooperative, sim.Consumer}

// The fence holds: in Transactional mode no random scenario violates any
// invariant, under each group protocol. rapid runs -rapid.checks
// scenarios per protocol (100 by default).
func TestTransactionalModeHoldsEveryInvariant(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			var stats Stats
			start := time.Now()
			rapid.Check(t, Property(world.Config{Mode: store.Transactional, Protocol: p}, &stats))
			t.Logf("%d scenarios in %s (%.0f a minute); steps: %s", stats.Scenarios, time.Since(start).Round(time.Millisecond),
				float64(stats.Scenarios)/time.Since(start).Minutes(), stats.Coverage())
		})
	}
}

// The fence holds in scenarios drawn with ChunkGen's macros, which line
// up stale owners, crashes with writes in flight and revoke-time flushes
// (docs/testing.md, "Scenarios to catch a broken variant"): most of them
// contain a fenced call, and none may break an invariant.
func TestMacroScenariosHoldEveryInvariant(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			var stats Stats
			start := time.Now()
			rapid.Check(t, MacroPropertyOf([]world.Config{{Mode: store.Transactional, Protocol: p}}, &stats))
			t.Logf("%d scenarios in %s (%.0f a minute); steps: %s", stats.Scenarios, time.Since(start).Round(time.Millisecond),
				float64(stats.Scenarios)/time.Since(start).Minutes(), stats.Coverage())
		})
	}
}

// The fence holds with writes in flight: the engines fold on while their
// flushes, commits and exactly-once batches wait for virtual time in the
// simulated cluster, so rebalances, fences, crashes and the partitions'
// moves land between a write's start and its end. Latencies below and
// above the steps' advances of time, at least once and exactly once,
// with warm restarts (a cache checkpoint must never cover a write the
// cache was not told of). At least once the outputs are in flight too
// (Config.StartEmit): a member that crashes loses a poll's outputs, so
// nothing durable may cover them (invariant 7).
func TestWritesInFlightHoldEveryInvariant(t *testing.T) {
	var cfgs []world.Config
	for _, p := range protocols {
		for _, latency := range []time.Duration{20 * time.Millisecond, 3 * time.Second} {
			cfgs = append(cfgs,
				world.Config{Mode: store.Transactional, Protocol: p, WriteLatency: latency, PipelinedEmits: true},
				world.Config{Mode: store.Transactional, Protocol: p, WriteLatency: latency, ExactlyOnce: true},
				world.Config{Mode: store.Transactional, Protocol: p, WriteLatency: latency, WarmRestarts: true, PipelinedEmits: true})
		}
	}
	var stats Stats
	start := time.Now()
	rapid.Check(t, PropertyOf(cfgs, &stats))
	t.Logf("%d scenarios in %s; %d steps ended with calls in flight, %d with outputs in flight; steps: %s", stats.Scenarios,
		time.Since(start).Round(time.Millisecond), stats.StepsInFlight, stats.StepsOutputsInFlight, stats.Coverage())
	// Not vacuous: the invariants were checked while writes were on
	// their way (a sim that completed every call in its caller passed
	// this test once without testing anything).
	if !t.Failed() && stats.StepsInFlight == 0 {
		t.Fatalf("no step of %d scenarios ended with a call in flight", stats.Scenarios)
	}
	if !t.Failed() && stats.StepsOutputsInFlight == 0 {
		t.Fatalf("no step of %d scenarios ended with outputs in flight", stats.Scenarios)
	}
}

var exploreFor = flag.Duration("props.duration", 3*time.Second,
	"how long TestExplore runs random scenarios (make props-long sets it)")

// TestExplore runs the Transactional property for -props.duration,
// rotating through the protocols, then through them again with standby
// replicas (standbyConfigs) and with a lookup table (tableConfigs), and
// reports scenarios per minute and the coverage of steps every minute and
// at the end. (In make test's 3 s it runs the first only.)
func TestExplore(t *testing.T) {
	var stats Stats
	start, lastReport := time.Now(), time.Now()
	report := func() {
		elapsed := time.Since(start)
		t.Logf("%s: %d scenarios, %.0f a minute; steps: %s", elapsed.Round(time.Second), stats.Scenarios,
			float64(stats.Scenarios)/elapsed.Minutes(), stats.Coverage())
		if len(stats.Promotions) > 0 || stats.Tables.Lookups > 0 {
			t.Logf("recoveries after acquisitions, by replica: %s; %+v", stats.PromotionCoverage(), stats.Tables)
		}
	}
	for i := 0; time.Since(start) < *exploreFor; i++ {
		p := protocols[i%len(protocols)]
		kind := []string{"", "standby/", "tables/"}[i/len(protocols)%3]
		t.Run(kind+p.String(), func(t *testing.T) {
			cfgs := []world.Config{{Mode: store.Transactional, Protocol: p}}
			switch kind {
			case "standby/":
				cfgs = ofProtocol(standbyConfigs(t, nil), p)
			case "tables/":
				cfgs = ofProtocol(tableConfigs(nil), p)
			}
			rapid.Check(t, PropertyOf(cfgs, &stats))
		})
		if t.Failed() {
			return
		}
		if time.Since(lastReport) >= time.Minute {
			report()
			lastReport = time.Now()
		}
	}
	report()
}

// ofProtocol is the configurations of cfgs under protocol p.
func ofProtocol(cfgs []world.Config, p sim.Protocol) []world.Config {
	var out []world.Config
	for _, c := range cfgs {
		if c.Protocol == p {
			out = append(out, c)
		}
	}
	return out
}

// failureOf runs rapid.Check on prop, up to tries times, until it finds a
// failing scenario, and returns rapid's report of the minimal one, or ""
// if every try passed. (A variant's violation needs a particular
// interleaving; one try of -rapid.checks scenarios finds Plain mode's
// about four times in five.)
func failureOf(t *testing.T, prop func(*rapid.T), tries int) string {
	t.Helper()
	for range tries {
		rec := &recordingTB{name: t.Name()}
		rapid.Check(rec, prop)
		if rec.failed {
			return rec.out.String()
		}
	}
	return ""
}

// Negative controls: each variant must be caught, and shrunk to a short
// trace.
func TestNegativeControls(t *testing.T) {
	for _, c := range negativeControls {
		t.Run(c.name, func(t *testing.T) {
			report := failureOf(t, Property(c.cfg, nil), 10)
			if report == "" {
				t.Fatalf("%s: no violation found in 10 tries; the property cannot fail", c.name)
			}
			found := false
			for _, n := range c.want {
				found = found || strings.Contains(report, fmt.Sprintf("invariant %d ", n))
			}
			if !found {
				t.Fatalf("%s: found a violation, but not of %v:\n%s", c.name, c.want, report)
			}
			steps := shrunkSteps(report)
			if steps == 0 || steps > 20 {
				t.Fatalf("%s: the minimal trace has %d steps; want it shrunk to at most 20:\n%s", c.name, steps, report)
			}
			t.Logf("%s: caught and shrunk to %d steps:\n%s", c.name, steps, lastFailure(report))
		})
	}
}

// shrunkSteps reads the step count of the last reported failure.
func shrunkSteps(report string) int {
	i := strings.LastIndex(report, " steps:\n")
	if i < 0 {
		return 0
	}
	j := strings.LastIndexAny(report[:i], "\n ") + 1
	var n int
	fmt.Sscanf(report[j:i], "%d", &n)
	return n
}

func lastFailure(report string) string {
	if i := strings.LastIndex(report, "invariant "); i >= 0 {
		return report[i:]
	}
	return report
}

// recordingTB is a rapid.TB that records a failure instead of failing
// the test: how a negative control asserts that rapid finds one.
type recordingTB struct {
	name   string
	failed bool
	out    strings.Builder
}

func (r *recordingTB) Helper()                   {}
func (r *recordingTB) Name() string              { return r.name }
func (r *recordingTB) Logf(f string, a ...any)   { fmt.Fprintf(&r.out, f+"\n", a...) }
func (r *recordingTB) Log(a ...any)              { fmt.Fprintln(&r.out, a...) }
func (r *recordingTB) Skipf(f string, a ...any)  { r.Logf(f, a...) }
func (r *recordingTB) Skip(a ...any)             { r.Log(a...) }
func (r *recordingTB) SkipNow()                  {}
func (r *recordingTB) Errorf(f string, a ...any) { r.failed = true; r.Logf(f, a...) }
func (r *recordingTB) Error(a ...any)            { r.failed = true; r.Log(a...) }
func (r *recordingTB) Fatalf(f string, a ...any) { r.failed = true; r.Logf(f, a...) }
func (r *recordingTB) Fatal(a ...any)            { r.failed = true; r.Log(a...) }
func (r *recordingTB) FailNow()                  { r.failed = true }
func (r *recordingTB) Fail()                     { r.failed = true }
func (r *recordingTB) Failed() bool              { return r.failed }

// TestMain: rapid writes a fail file for every failure it finds, which the
// negative controls find on purpose; the traces in the reports replay.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("rapid.nofailfile"); f != nil && !isSet("rapid.nofailfile") {
		_ = f.Value.Set("true")
	}
	// The default budget of `make test`: scenarios per property (rapid's
	// own default is 100); -rapid.checks overrides it.
	if f := flag.Lookup("rapid.checks"); f != nil && !isSet("rapid.checks") {
		_ = f.Value.Set("3000")
	}
	// The negative controls assert a short shrunk trace; rapid stops
	// shrinking after -rapid.shrinktime of wall time (30 s by default),
	// which a loaded CI machine spent with the trace still at 25 steps.
	// The shrink's result must not depend on the machine's load.
	if f := flag.Lookup("rapid.shrinktime"); f != nil && !isSet("rapid.shrinktime") {
		_ = f.Value.Set("10m")
	}
	os.Exit(m.Run())
}

func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
