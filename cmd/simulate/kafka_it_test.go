//go:build it

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/internal/world/kfakeworld"
	"github.com/snapfence/snapfence/props"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// TestKafkaWorld runs the default scenario, kafka-flow#732, on the shared
// broker (`make it`) in both modes, as `simulate -world kafka -brokers`
// does: the stale owner's write lands over the newer one without the
// fence and is fenced with it; nothing but the report is printed, and the
// world leaves no topic and no goroutine behind.
func TestKafkaWorld(t *testing.T) {
	brokers := strings.Join(kafkatest.Brokers(t), ",")
	names := recordNames(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	var stdout, stderr bytes.Buffer
	code := simulate(ctx, []string{"-no-color", "-world", "kafka", "-brokers", brokers}, &stdout, &stderr)
	t.Logf("kafka-flow#732 in both modes on the broker: %s", time.Since(start).Round(100*time.Millisecond))
	out := stdout.String()
	if code != exitOK {
		t.Fatalf("exit %d, want 0; stderr: %s\n%s", code, stderr.String(), out)
	}
	if stderr.Len() > 0 {
		t.Errorf("without -v the command printed to stderr: %s", stderr.String())
	}
	plain, transactional, ok := strings.Cut(out, "── transactional mode")
	if !ok || !strings.Contains(plain, "── plain mode") {
		t.Fatalf("no plain then transactional timeline:\n%s", out)
	}
	for _, must := range []string{"stale-flush-on-revoke  (world: kafka)", "← stale: replaces m1's newer a=115@2"} {
		if !strings.Contains(plain, must) {
			t.Errorf("the plain run does not say %q:\n%s", must, plain)
		}
	}
	if !regexp.MustCompile(`m0 writes a=15@1 to p1 \(generation 1\) · FENCED`).MatchString(transactional) {
		t.Errorf("the transactional run does not show m0's stale write fenced:\n%s", transactional)
	}
	if !strings.Contains(transactional, "as expected: the corruption is reproduced without the fence and prevented with it") {
		t.Errorf("no verdict as expected:\n%s", transactional)
	}
	noTopicsLeft(t, brokers, *names)
	noGoroutinesLeft(t)
}

// TestKafkaWorldJSON runs a few steps on the broker with `-json -` and -v:
// the standard output is the JSON lines alone, every line parses, the ops
// carry the history; -v's notes go to the standard error.
func TestKafkaWorldJSON(t *testing.T) {
	brokers := strings.Join(kafkatest.Brokers(t), ",")
	names := recordNames(t)
	steps, _ := json.Marshal([]world.Step{
		{Kind: world.Join, Member: 0},
		{Kind: world.Produce, Key: "a", Delta: 10},
		{Kind: world.Poll, Member: 0},
	})
	replay := filepath.Join(t.TempDir(), "steps.json")
	if err := os.WriteFile(replay, steps, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	var stdout, stderr bytes.Buffer
	code := simulate(ctx, []string{"-world", "kafka", "-brokers", brokers, "-replay", replay, "-json", "-", "-v"}, &stdout, &stderr)
	t.Logf("3 steps and quiescence on the broker: %s", time.Since(start).Round(100*time.Millisecond))
	if code != exitOK {
		t.Fatalf("exit %d, want 0; stderr: %s\n%s", code, stderr.String(), stdout.String())
	}
	if !strings.Contains(stderr.String(), "simulate: kafka: deleted topics") {
		t.Errorf("-v did not note the topics' deletion on stderr: %s", stderr.String())
	}
	seen := map[string]int{}
	var produced, wrote, final bool
	for i, line := range strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %d is not JSON: %v: %s", i+1, err, line)
		}
		typ, _ := m["type"].(string)
		seen[typ]++
		if i == 0 && (typ != "scenario" || m["world"] != "kafka") {
			t.Fatalf("the first line is not the scenario on kafka: %s", line)
		}
		if typ == "op" {
			var op history.Op
			if err := json.Unmarshal([]byte(line), &op); err != nil {
				t.Fatalf("line %d is not an op: %v", i+1, err)
			}
			produced = produced || op.Kind == history.Produce && op.Key == "a" && op.Delta == 10
			wrote = wrote || op.Kind == history.Write && op.Key == "a" && op.Value == "10" && op.Outcome == history.OK
		}
		if typ == "final" {
			final = m["key"] == "a" && m["ok"] == true
		}
	}
	if seen["scenario"] != 1 || seen["expectation"] == 0 || !produced || !wrote || !final {
		t.Fatalf("types seen %v; the produce %t, the write %t, the final state %t:\n%s", seen, produced, wrote, final, stdout.String())
	}
	noTopicsLeft(t, brokers, *names)
	noGoroutinesLeft(t)
}

// recordNames records the names of the worlds the command runs (other
// runs may share the broker).
func recordNames(t *testing.T) *[]string {
	var names []string
	name := kafkaName
	kafkaName = func(mode store.Mode) string {
		n := name(mode)
		names = append(names, "snapfence-simulate-"+n)
		return n
	}
	t.Cleanup(func() { kafkaName = name })
	return &names
}

// noTopicsLeft fails if a topic of the worlds named is on the broker: a
// world deletes its topics when it closes.
func noTopicsLeft(t *testing.T, brokers string, names []string) {
	t.Helper()
	if len(names) == 0 {
		t.Fatal("no world ran")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var left []string
	waitUntil(t, 10*time.Second, func() bool {
		topics, err := adm.ListTopics(context.Background())
		if err != nil {
			return false
		}
		left = slices.DeleteFunc(topics.Names(), func(n string) bool {
			return !slices.ContainsFunc(names, func(w string) bool { return strings.HasPrefix(n, w) })
		})
		return len(left) == 0
	}, func() string { return "topics left on the broker: " + strings.Join(left, ", ") })
}

// noGoroutinesLeft fails if a goroutine of a world's clients or processes
// is still running (a closed franz-go client's goroutines end soon after
// Close returns).
func noGoroutinesLeft(t *testing.T) {
	t.Helper()
	var left []string
	waitUntil(t, 10*time.Second, func() bool {
		buf := make([]byte, 1<<22)
		buf = buf[:runtime.Stack(buf, true)]
		left = left[:0]
		for _, g := range strings.Split(string(buf), "\n\n") {
			for _, pkg := range []string{"franz-go/pkg/kgo.", "internal/world/kfakeworld.", "internal/netfreeze.", "snapfence/engine."} {
				if strings.Contains(g, pkg) {
					left = append(left, g)
					break
				}
			}
		}
		return len(left) == 0
	}, func() string { return "goroutines left:\n" + strings.Join(left, "\n\n") })
}

// waitUntil checks cond every 50 ms until it holds, failing the test with
// why() after d.
func waitUntil(t *testing.T, d time.Duration, cond func() bool, why func() string) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatal(why())
		case <-tick.C:
		}
	}
}

// The sim, kfake and the broker run named scenarios to the same outcome
// (each key's final state, the invariants violated, each partition's last
// acknowledged commit and its committed and end offsets at quiescence):
// the broker is the reference the sim's model and kfake follow. The fence
// and takeover levels are logged: on a broker a step is no instant, and a
// round that completes on the sim at one step may complete during the
// next. join-at-client-start and a-pause-outlasts-a-waiting-poll are the
// scenarios of the sim's model fixes (a member joins its group when its
// client starts; a poll's wait runs out while its process is paused):
// they must meet their expectations on the broker too;
// a-view-shows-committed-states has
// another service's view read the snapshot topic. With -simulate.agreement the test runs
// the agreement table's scenarios instead, the broker's twice, and logs
// the table (docs/testing.md).
func TestSimAndKafkaAgreeOnNamedScenarios(t *testing.T) {
	brokers := strings.Join(kafkatest.Brokers(t), ",")
	names := recordNames(t)
	o := options{kafka: kafkaOptions{brokers: brokers}, stderr: io.Discard}
	scenarios := []string{"join-at-client-start", "a-pause-outlasts-a-waiting-poll", "stale-flush-on-revoke", "revoke-flush-consumer", "a-view-shows-committed-states"}
	if *agreementTable {
		scenarios = agreementScenarios
	}
	var table agreement
	for _, name := range scenarios {
		t.Run(name, func(t *testing.T) {
			s, ok := world.ScenarioNamed(name)
			if !ok {
				t.Fatalf("no scenario %q", name)
			}
			runs := compareWithSim(t, o, s, 0)
			for _, v := range runs.kafka.Expectations {
				if !v.Met {
					t.Errorf("on the broker: %s: %s", v.Says, v.Why)
				}
			}
			if *agreementTable {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				again, err := runKafka(ctx, o, s, store.Transactional, "")
				if err != nil {
					t.Fatal(err)
				}
				table.add(runs, again)
			}
		})
	}
	if *agreementTable {
		t.Logf("the agreement table over %d named scenarios:\n%s", len(scenarios), table)
	}
	noTopicsLeft(t, brokers, *names)
	noGoroutinesLeft(t)
}

var agreementTable = flag.Bool("simulate.agreement", false,
	"TestSimAndKafkaAgreeOnNamedScenarios: run the agreement table's named scenarios, the broker's twice, and log the table")

// agreementScenarios are the agreement table's: kafka-flow#732's family,
// the crashes and the foreign transaction, every named scenario a broker
// can run up to the first one it cannot (a truncated log).
var agreementScenarios = []string{
	"stale-flush-on-revoke", "stale-periodic-flush", "first-flush-gated-by-seeded-offset",
	"flush-before-first-join", "two-overlapping-stale-owners", "generation-bump-keeps-partitions",
	"double-handover-crashed-owners", "takeover-abort-after-hard-crash", "foreign-open-transaction-across-recovery",
}

// agreement counts, per pair of worlds, the scenarios that agree at each
// level.
type agreement struct {
	rows [4][3]int // sim~Kafka, kfake~Kafka, sim~kfake, Kafka~Kafka; outcome, fences, takeovers
}

func (a *agreement) add(r worldRuns, again run) {
	pairs := [4][2]run{{r.sim, r.kafka}, {r.kfake, r.kafka}, {r.sim, r.kfake}, {r.kafka, again}}
	for i, p := range pairs {
		levels := sameLevels(p[0], p[1])
		for j, same := range levels {
			if same {
				a.rows[i][j]++
			}
		}
	}
}

func (a agreement) String() string {
	var b strings.Builder
	b.WriteString("| worlds | outcome | fences | takeovers |\n| --- | --- | --- | --- |\n")
	for i, name := range []string{"sim ~ Kafka", "kfake ~ Kafka", "sim ~ kfake", "Kafka ~ Kafka (a rerun)"} {
		fmt.Fprintf(&b, "| %s | %d | %d | %d |\n", name, a.rows[i][0], a.rows[i][1], a.rows[i][2])
	}
	return b.String()
}

// sameLevels reports whether two runs of a scenario agree at the outcome,
// fence and takeover levels (kfake's PRODUCER_FENCED read as Kafka's
// INVALID_PRODUCER_EPOCH).
func sameLevels(a, b run) [3]bool {
	return [3]bool{
		world.Outcome(a.Ops, a.Violations) == world.Outcome(b.Ops, b.Violations),
		world.KafkaCodes(world.Fences(a.Ops)) == world.KafkaCodes(world.Fences(b.Ops)),
		world.Takeovers(a.Ops) == world.Takeovers(b.Ops),
	}
}

// Random scenarios of the differential test's kind (20 steps,
// Transactional, props.StepGen), one seed per protocol, run on the
// broker, on the sim and on kfake, the steps a broker cannot carry out
// (compaction, truncation) left out: the sim's and kfake's outcomes are
// the broker's; the fence and takeover levels are logged (on a broker a
// round completes during whichever step is running).
func TestSimAndKafkaAgreeOnRandomScenarios(t *testing.T) {
	brokers := strings.Join(kafkatest.Brokers(t), ",")
	names := recordNames(t)
	o := options{kafka: kafkaOptions{brokers: brokers}, stderr: io.Discard}
	const seed, n = 1, 20
	for _, p := range []sim.Protocol{sim.ClassicEager, sim.ClassicCooperative, sim.Consumer} {
		t.Run(p.String(), func(t *testing.T) {
			kcfg := kfakeworld.Config{Mode: store.Transactional, Protocol: p}
			steps := slices.DeleteFunc(rapid.SliceOfN(props.StepGen(kcfg.StepConfig()), n, n).Example(seed),
				func(s world.Step) bool { return s.Kind == world.Compact || s.Kind == world.Truncate })
			s := world.Scenario{Name: fmt.Sprintf("random %s seed %d", p, seed), Protocol: p, Steps: steps,
				Transactional: []world.Expectation{world.HoldsAll()}}
			t.Logf("%s:\n%s", s.Name, world.Trace(steps))
			compareWithSim(t, o, s, seed)
		})
	}
	noTopicsLeft(t, brokers, *names)
	noGoroutinesLeft(t)
}

// worldRuns are one scenario's runs on each world.
type worldRuns struct{ sim, kfake, kafka run }

// compareWithSim runs s, Transactional, on the broker, on the sim (of
// seed) and on kfake: the sim's and kfake's outcomes must be the
// broker's; whether the fences and the takeovers agree is logged.
func compareWithSim(t *testing.T, o options, s world.Scenario, seed uint64) worldRuns {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	onKafka, err := runKafka(ctx, o, s, store.Transactional, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s on the broker: %s", s.Name, time.Since(start).Round(100*time.Millisecond))
	r := worldRuns{sim: runSim(s, store.Transactional, "", seed), kfake: runKfakeHere(t, s), kafka: onKafka}
	for _, other := range []struct {
		name string
		run  run
	}{{"sim", r.sim}, {"kfake", r.kfake}} {
		if k, o := world.Outcome(onKafka.Ops, onKafka.Violations), world.Outcome(other.run.Ops, other.run.Violations); k != o {
			t.Errorf("the outcomes differ\nkafka:\n%s%s:\n%s", k, other.name, o)
		}
		same := sameLevels(other.run, onKafka)
		t.Logf("%s ~ kafka: fences agree: %t; takeovers agree: %t", other.name, same[1], same[2])
		if !same[1] {
			t.Logf("fences on kafka:\n%son %s:\n%s", world.Fences(onKafka.Ops), other.name, world.Fences(other.run.Ops))
		}
	}
	return r
}

// runKfakeHere runs s, Transactional, on kfake in a synctest bubble of
// this test.
func runKfakeHere(t *testing.T, s world.Scenario) run {
	t.Helper()
	res := runKfakeWorld(t, kfakeworld.Config{Mode: store.Transactional, Protocol: s.Protocol}, s.Steps)
	return finish(s, store.Transactional, "", res.Members, res.Partitions, res.Ops, res.Violations)
}
