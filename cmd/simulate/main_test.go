package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// simulateArgs runs the command with args and returns its exit code and
// what it wrote.
func simulateArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errs bytes.Buffer
	code = simulate(context.Background(), args, &out, &errs)
	return code, out.String(), errs.String()
}

// The default output, on the simulated cluster, is deterministic: a
// golden file. Run with -update after an intended change and review the
// diff.
func TestDefaultOutputGolden(t *testing.T) {
	code, out, errs := simulateArgs(t, "-no-color")
	if code != exitOK {
		t.Fatalf("exit %d, want 0; stderr: %s", code, errs)
	}
	golden := filepath.Join("testdata", "default.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Fatalf("the default output changed (go test ./cmd/simulate -run Golden -update, then review the diff):\n%s", out)
	}
	// What the golden file must say, whatever its wording.
	for _, must := range []string{
		"← stale: replaces m1's newer a=115@2", // plain: the stale write lands
		"FENCED",                               // transactional: it does not
		"as expected: the corruption is reproduced without the fence and prevented with it",
	} {
		if !strings.Contains(out, must) {
			t.Errorf("the default output does not say %q", must)
		}
	}
}

func TestUsageErrorsExitTwoWithAClearMessage(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
		{[]string{"-mode", "fenced"}, `-mode "fenced": want plain or transactional`},
		{[]string{"-world", "moon"}, `-world "moon": want sim, kfake or kafka`},
		{[]string{"-protocol", "range"}, `-protocol "range": want eager, cooperative or consumer`},
		{[]string{"-scenario", "nope"}, `no scenario "nope" (-list names them)`},
		{[]string{"-world", "kafka"}, "-world kafka needs -brokers host:port"},
		{[]string{"-brokers", "h:1"}, "-brokers, -tls* and -sasl* are for -world kafka"},
		{[]string{"-world", "kafka", "-brokers", "h:1", "-sasl", "plain"}, "-sasl plain needs -sasl-user and -sasl-password"},
		{[]string{"-world", "kafka", "-brokers", "h:1", "-sasl", "gssapi", "-sasl-user", "u"}, `-sasl "gssapi": want plain, scram-sha-256 or scram-sha-512`},
		{[]string{"-world", "kafka", "-brokers", "h:1", "-tls-cert", "c.pem"}, "-tls-cert and -tls-key go together"},
		{[]string{"-seed", "3"}, "-seed seeds a random scenario: give -steps N"},
		{[]string{"-scenario", "stale-flush-on-revoke", "-steps", "3"}, "exclude each other"},
		{[]string{"-explore", "3", "-world", "kfake"}, "-explore runs on the simulated cluster only"},
		{[]string{"-replay", "/nonexistent/steps.json"}, "-replay: open /nonexistent/steps.json"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		code, _, errs := simulateArgs(t, c.args...)
		if code != exitUsage || !strings.Contains(errs, c.says) {
			t.Errorf("simulate %s: exit %d, stderr %q; want exit 2 saying %q", strings.Join(c.args, " "), code, errs, c.says)
		}
	}
}

func TestExitOneWhenAnExpectationFails(t *testing.T) {
	// The cooperative scenario's expectation (the revoke-time flush is
	// fenced) does not hold under the eager protocol, which commits it.
	code, out, _ := simulateArgs(t, "-no-color", "-scenario", "revoke-flush-classic-cooperative", "-protocol", "eager")
	if code != exitViolated || !strings.Contains(out, "✗ m0's revoke-time flush") {
		t.Fatalf("exit %d, want 1 with the failed expectation shown:\n%s", code, out)
	}
	// A negative control that finds nothing: one short scenario without
	// the fence.
	code, out, _ = simulateArgs(t, "-no-color", "-explore", "1", "-steps", "2", "-mode", "plain")
	if code != exitViolated || !strings.Contains(out, "unexpected: Plain mode (no fence) held every invariant") {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
}

func TestEveryNamedScenarioMeetsItsExpectations(t *testing.T) {
	for _, s := range world.Scenarios {
		code, out, errs := simulateArgs(t, "-no-color", "-scenario", s.Name)
		if code != exitOK {
			t.Errorf("%s: exit %d\n%s%s", s.Name, code, out, errs)
		}
	}
}

func TestListNamesEveryScenario(t *testing.T) {
	code, out, _ := simulateArgs(t, "-list")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(world.Scenarios) {
		t.Fatalf("%d lines for %d scenarios:\n%s", len(lines), len(world.Scenarios), out)
	}
	for i, s := range world.Scenarios {
		if !strings.HasPrefix(lines[i], s.Name+" ") || !strings.Contains(lines[i], s.Summary) {
			t.Errorf("line %d %q does not name %s with its summary", i, lines[i], s.Name)
		}
	}
}

// The JSON lines: every line an object with a known type; the first the
// scenario; ops carry the history's fields and a mode; the fence and the
// corruption are in it.
func TestJSONLinesSchema(t *testing.T) {
	code, out, errs := simulateArgs(t, "-json", "-")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	kinds := []history.Kind{history.Step, history.Produce, history.Write, history.Commit, history.ReadStart,
		history.Read, history.ReadEnd, history.Acquire, history.Abandon, history.Member, history.Log, history.Offsets, history.Unexpressed, history.Drift,
		history.Emit, history.OutputRead, history.Output} // the last three under -outputs (TestOutputsJSONLines)
	seen := map[string]int{}
	var fenced, stale bool
	for i, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %d is not JSON: %v: %s", i+1, err, line)
		}
		typ, _ := m["type"].(string)
		seen[typ]++
		if i == 0 {
			if typ != "scenario" || m["scenario"] != defaultScenario || m["world"] != "sim" {
				t.Fatalf("the first line is not the scenario: %s", line)
			}
			continue
		}
		if mode := m["mode"]; mode != "plain" && mode != "transactional" {
			t.Fatalf("line %d has no mode: %s", i+1, line)
		}
		switch typ {
		case "op":
			var op history.Op
			if err := json.Unmarshal([]byte(line), &op); err != nil {
				t.Fatalf("line %d is not an op: %v", i+1, err)
			}
			if !slices.Contains(kinds, op.Kind) {
				t.Fatalf("line %d: unknown op kind %q", i+1, op.Kind)
			}
			for _, field := range []string{"index", "at", "kind", "member", "partition", "offset"} {
				if _, ok := m[field]; !ok {
					t.Fatalf("line %d: an op without %q: %s", i+1, field, line)
				}
			}
			fenced = fenced || (m["mode"] == "transactional" && op.Outcome == history.Fenced)
		case "violation":
			for _, field := range []string{"invariant", "name", "step", "detail"} {
				if _, ok := m[field]; !ok {
					t.Fatalf("line %d: a violation without %q: %s", i+1, field, line)
				}
			}
			stale = stale || (m["mode"] == "plain" && m["invariant"] == float64(1))
		case "expectation":
			if _, ok := m["met"].(bool); !ok {
				t.Fatalf("line %d: an expectation without met: %s", i+1, line)
			}
		case "final":
			if _, ok := m["ok"].(bool); !ok || m["key"] == nil || m["want"] == nil {
				t.Fatalf("line %d: a final state without key, want, ok: %s", i+1, line)
			}
		default:
			t.Fatalf("line %d: unknown type %q", i+1, typ)
		}
	}
	if seen["scenario"] != 1 || seen["op"] == 0 || seen["expectation"] == 0 || seen["final"] == 0 {
		t.Fatalf("types seen: %v", seen)
	}
	if !fenced || !stale {
		t.Fatalf("the history does not show the fence (%t) and the stale overwrite (%t)", fenced, stale)
	}
}

func TestExploreFindsPlainCorruptionAndReplaysIt(t *testing.T) {
	code, out, _ := simulateArgs(t, "-no-color", "-explore", "3000", "-mode", "plain")
	if code != exitOK || !strings.Contains(out, "violation: seed") {
		t.Fatalf("exit %d, want 0 with a violation shown:\n%s", code, out)
	}
	// The replay command it prints runs the minimal trace.
	m := regexp.MustCompile(`-replay (\S+) -protocol (\S+) -mode plain`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no replay command:\n%s", out)
	}
	defer os.Remove(m[1])
	code, replayed, errs := simulateArgs(t, "-no-color", "-replay", m[1], "-protocol", m[2], "-mode", "plain")
	if code != exitOK || !strings.Contains(replayed, "VIOLATED") {
		t.Fatalf("the replay: exit %d, want 0 showing the violation:\n%s%s", code, replayed, errs)
	}
}

func TestExploreTransactionalHoldsEverything(t *testing.T) {
	code, out, _ := simulateArgs(t, "-no-color", "-explore", "90")
	if code != exitOK || !strings.Contains(out, "as expected: every invariant held in every scenario") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestRandomScenarioRuns(t *testing.T) {
	code, out, _ := simulateArgs(t, "-no-color", "-seed", "7", "-steps", "25")
	if code != exitOK || !strings.Contains(out, "random-7") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	_, again, _ := simulateArgs(t, "-no-color", "-seed", "7", "-steps", "25")
	if again != out {
		t.Fatal("the same seed gave two outputs")
	}
}

// -replay reads steps one a line, as a trace prints them, as well as the
// JSON -explore writes; a line that is no step is a usage error naming it.
func TestReplayReadsTheScenarioLanguage(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.txt"), filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(good, []byte("# kafka-flow#732, short\njoin m0\nproduce a=+10\npoll m0\npoll m0\npause m0\njoin m1\nadvance 11s\npoll m1\nresume m0\nflush m0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("join m0\ndance m1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if code := simulate(context.Background(), []string{"-no-color", "-replay", good}, &out, &errs); code != exitOK {
		t.Fatalf("exit %d: %s\n%s", code, errs.String(), out.String())
	}
	if !strings.Contains(out.String(), "10 steps replayed from") || !strings.Contains(out.String(), "9  resume m0") || !strings.Contains(out.String(), "as expected") {
		t.Errorf("the replay does not show the steps and the verdict:\n%s", out.String())
	}
	out.Reset()
	errs.Reset()
	if code := simulate(context.Background(), []string{"-replay", bad}, &out, &errs); code != exitUsage {
		t.Fatalf("exit %d for a bad step, want %d", code, exitUsage)
	}
	if !strings.Contains(errs.String(), `line 2: step "dance m1": no such step`) {
		t.Errorf("the error does not name the line: %s", errs.String())
	}
}
