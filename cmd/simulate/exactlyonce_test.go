package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapfence/snapfence/internal/history"
)

// -outputs compare on the simulated cluster is deterministic: a golden
// file. Whatever its wording, it must show the duplicates of at-least-once
// outputs, none of exactly-once ones, and invariant 8.
func TestOutputsCompareGolden(t *testing.T) {
	code, out, errs := simulateArgs(t, "-no-color", "-outputs", "compare")
	if code != exitOK {
		t.Fatalf("exit %d, want 0; stderr: %s\n%s", code, errs, out)
	}
	golden := filepath.Join("testdata", "outputs-compare.golden")
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
		t.Fatalf("the -outputs compare output changed (go test ./cmd/simulate -run OutputsCompareGolden -update, then review the diff):\n%s", out)
	}
	for _, must := range []string{
		"── at-least-once outputs (transactional mode)",
		"── exactly-once outputs (transactional mode)",
		"m0 produces the outputs of p0@0 b, p1@0 a · ok",                                            // at least once: a plain produce at the fold
		"m0's transaction carries the outputs of p1@1 a, p1@2 c · FENCED (INVALID_PRODUCER_EPOCH)",  // the stale owner's batch, refused on the data path as Kafka refuses it
		"m1's transaction carries the outputs of p0@2 d · failed (abandoned in an open transaction", // the crash
		"p0@1         b     +2      2 ✗ duplicated   2                 1 ✓              1",
		"8 OutputExactlyOnce              VIOLATED ×4     holds",
		"as expected: at-least-once outputs are duplicated for a read_committed reader, exactly-once outputs are not",
	} {
		if !strings.Contains(out, must) {
			t.Errorf("-outputs compare does not say %q", must)
		}
	}
}

// The exit code: 0 when each output mode behaves as it should, 1 when the
// negative control finds no duplicate (a scenario that cannot tell the
// two apart), and invariant 8 in the verdict only under -outputs.
func TestOutputsExitCodes(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		says []string
	}{
		{[]string{"-outputs", "exactly-once"}, exitOK, []string{"8 OutputExactlyOnce              holds", "as expected: a read_committed reader sees every output exactly once"}},
		{[]string{"-outputs", "at-least-once"}, exitOK, []string{"8 OutputExactlyOnce              VIOLATED ×4", "✓ a read_committed reader sees some input event's output more than once"}},
		{[]string{"-outputs", "compare", "-scenario", "crash-stale-owner-and-foreign"}, exitOK, []string{"8 OutputExactlyOnce              VIOLATED"}},
		{[]string{"-outputs", "compare", "-scenario", "stale-flush-on-revoke"}, exitOK, []string{"stale-flush-on-revoke", "8 OutputExactlyOnce"}},
		// Nothing crashes or goes stale in these 40 steps: at least once
		// duplicates nothing, so the comparison proves nothing.
		{[]string{"-outputs", "compare", "-seed", "3", "-steps", "40"}, exitViolated, []string{
			"✗ a read_committed reader sees some input event's output more than once (invariant 8, duplicated-output): the negative control bites: no output was duplicated",
			"unexpected: an expectation above was not met"}},
	} {
		code, out, errs := simulateArgs(t, append([]string{"-no-color"}, c.args...)...)
		if code != c.code {
			t.Errorf("simulate %s: exit %d, want %d\n%s%s", strings.Join(c.args, " "), code, c.code, out, errs)
			continue
		}
		for _, s := range c.says {
			if !strings.Contains(out, s) {
				t.Errorf("simulate %s does not say %q:\n%s", strings.Join(c.args, " "), s, out)
			}
		}
	}
	if _, out, _ := simulateArgs(t, "-no-color"); strings.Contains(out, "OutputExactlyOnce") {
		t.Error("the default names invariant 8: it checks no output topic")
	}
}

func TestOutputsUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"-outputs", "twice"}, `-outputs "twice": want none, at-least-once, exactly-once or compare`},
		{[]string{"-outputs", "compare", "-mode", "plain"}, "-outputs runs in Transactional mode"},
		{[]string{"-outputs", "compare", "-explore", "3"}, "-outputs does not combine with -explore"},
		{[]string{"-scenario", "crash-and-stale-owner"}, "-scenario crash-and-stale-owner is an output scenario: give -outputs"},
	} {
		code, _, errs := simulateArgs(t, c.args...)
		if code != exitUsage || !strings.Contains(errs, c.says) {
			t.Errorf("simulate %s: exit %d, stderr %q; want exit 2 saying %q", strings.Join(c.args, " "), code, errs, c.says)
		}
	}
}

// -json under -outputs: every line after the first names its run's
// outputs; the history has the outputs' ops (emit, output-read, output);
// invariant 8 is violated in the at-least-once run and only there.
func TestOutputsJSONLines(t *testing.T) {
	code, out, errs := simulateArgs(t, "-outputs", "compare", "-json", "-")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	kinds := map[string]map[history.Kind]int{}
	violations := map[string]int{}
	for i, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		var m struct {
			Type      string       `json:"type"`
			Mode      string       `json:"mode"`
			Outputs   string       `json:"outputs"`
			Kind      history.Kind `json:"kind"`
			Invariant int          `json:"invariant"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %d is not JSON: %v: %s", i+1, err, line)
		}
		if i == 0 {
			continue
		}
		if m.Mode != "transactional" || (m.Outputs != outputsAtLeastOnce && m.Outputs != outputsExactlyOnce) {
			t.Fatalf("line %d: mode %q outputs %q: %s", i+1, m.Mode, m.Outputs, line)
		}
		switch m.Type {
		case "op":
			if kinds[m.Outputs] == nil {
				kinds[m.Outputs] = map[history.Kind]int{}
			}
			kinds[m.Outputs][m.Kind]++
		case "violation":
			if m.Invariant != 8 {
				t.Errorf("line %d: invariant %d violated: %s", i+1, m.Invariant, line)
			}
			violations[m.Outputs]++
		}
	}
	for _, run := range []string{outputsAtLeastOnce, outputsExactlyOnce} {
		for _, k := range []history.Kind{history.Emit, history.OutputRead, history.Output} {
			if kinds[run][k] == 0 {
				t.Errorf("the %s run's history has no %s op", run, k)
			}
		}
	}
	if violations[outputsAtLeastOnce] == 0 || violations[outputsExactlyOnce] != 0 {
		t.Errorf("invariant 8 violated %d times at least once (want some), %d exactly once (want none)", violations[outputsAtLeastOnce], violations[outputsExactlyOnce])
	}
}

// -list -outputs MODE names the output scenarios too, after the others.
func TestListWithOutputsNamesTheOutputScenarios(t *testing.T) {
	code, out, _ := simulateArgs(t, "-list", "-outputs", "compare")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	tail := lines[len(lines)-len(outputScenarios):]
	for i, s := range outputScenarios {
		if !strings.HasPrefix(tail[i], s.Name+" ") || !strings.Contains(tail[i], s.Summary) {
			t.Errorf("line %q does not name %s with its summary", tail[i], s.Name)
		}
	}
	if _, plain, _ := simulateArgs(t, "-list"); strings.Contains(plain, defaultOutputsScenario) {
		t.Errorf("-list without -outputs names %s", defaultOutputsScenario)
	}
}
