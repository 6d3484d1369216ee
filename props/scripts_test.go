package props

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/internal/world/kfakeworld"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// TestWorldScripts runs the scenario scripts under testdata/scripts: each
// is steps in the scenario language (world.ParseStep, what a trace
// prints), run unchanged on every world it names, and what the runs left
// at the compared levels (internal/world/levels.go). Rewrite the expected
// output with -rewrite and review it as a diff.
//
//	run worlds=(sim,kfake) [mode=transactional|plain] [protocol=eager|cooperative|consumer]
//	<steps, one a line>
//	----
//	<the outcome and the fences the worlds agree on, and the sim's takeovers>
//
// Where the worlds agree on the outcome and the fences, the output says
// it once; where they do not, it shows each world's, so a known
// difference (kfake's PRODUCER_FENCED where Kafka and the sim answer
// INVALID_PRODUCER_EPOCH, a kfake round that fences where the sim's does
// not) is written down and reviewed, and a new one shows as a diff.
// Takeovers are the sim's (kfake's vary with its clients' scheduling,
// docs/testing.md, "The worlds compared").
func TestWorldScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/scripts", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "run" {
				d.Fatalf(t, "unknown command %q (run)", d.Cmd)
			}
			worlds, mode, protocol := []string{"sim"}, store.Transactional, sim.ClassicEager
			for _, a := range d.CmdArgs {
				switch {
				case a.Key == "worlds":
					worlds = a.Vals
				case a.Key == "mode" && len(a.Vals) == 1 && a.Vals[0] == "plain":
					mode = store.Plain
				case a.Key == "mode" && len(a.Vals) == 1 && a.Vals[0] == "transactional":
				case a.Key == "protocol" && len(a.Vals) == 1:
					p, ok := map[string]sim.Protocol{"eager": sim.ClassicEager, "cooperative": sim.ClassicCooperative, "consumer": sim.Consumer}[a.Vals[0]]
					if !ok {
						d.Fatalf(t, "protocol %q: want eager, cooperative or consumer", a.Vals[0])
					}
					protocol = p
				default:
					d.Fatalf(t, "unknown argument %s", a)
				}
			}
			steps, err := world.ParseSteps(d.Input)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			runs := map[string]runLevels{}
			for _, name := range worlds {
				switch name {
				case "sim":
					runs[name] = simLevels(t, world.Config{Mode: mode, Protocol: protocol}, steps)
				case "kfake":
					runs[name] = kfakeLevels(t, kfakeworld.Config{Mode: mode, Protocol: protocol}, steps)
				default:
					d.Fatalf(t, "world %q: want sim or kfake (a broker runs the scripts in cmd/simulate's integration tier)", name)
				}
			}
			first := runs[worlds[0]]
			var b strings.Builder
			for _, name := range worlds {
				if r := runs[name]; r.outcome != first.outcome || r.fences != first.fences {
					for _, name := range worlds {
						fmt.Fprintf(&b, "%s outcome:\n%s%s fences:\n%s", name, runs[name].outcome, name, runs[name].fences)
					}
					return b.String()
				}
			}
			fmt.Fprintf(&b, "outcome:\n%sfences:\n%s", first.outcome, first.fences)
			if r, ok := runs["sim"]; ok {
				fmt.Fprintf(&b, "takeovers (sim):\n%s", r.takeovers)
			}
			return b.String()
		})
	})
}

// The scripts are the named scenarios (world.Scenarios) as text: one
// file each, named after it, its summary the first line, and a run of
// its steps under its protocol for each mode it has expectations in, on
// kfake too unless only the sim can run it. A scenario changed in one
// place and not the other fails here.
func TestScriptsAreTheNamedScenarios(t *testing.T) {
	files, err := os.ReadDir("testdata/scripts")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, s := range world.Scenarios {
		named[s.Name] = true
		raw, err := os.ReadFile(filepath.Join("testdata/scripts", s.Name))
		if err != nil {
			t.Errorf("%s: no script: %v", s.Name, err)
			continue
		}
		text := string(raw)
		if first, _, _ := strings.Cut(text, "\n"); first != "# "+s.Summary {
			t.Errorf("%s: the script's first line is not the scenario's summary:\n%s\n# %s", s.Name, first, s.Summary)
		}
		protocol := map[sim.Protocol]string{sim.ClassicEager: "eager", sim.ClassicCooperative: "cooperative", sim.Consumer: "consumer"}[cmp.Or(s.Protocol, sim.ClassicEager)]
		worlds := "(sim,kfake)"
		if s.SimOnly != "" {
			worlds = "sim"
		}
		runs := scriptRuns(text)
		for _, mode := range []store.Mode{store.Transactional, store.Plain} {
			header := fmt.Sprintf("run worlds=%s mode=%s protocol=%s", worlds, strings.ToLower(mode.String()), protocol)
			input, ok := runs[header]
			if (s.Expect(mode) != nil) != ok {
				t.Errorf("%s: a run %q in the script: %t; expectations in %s mode: %t", s.Name, header, ok, mode, s.Expect(mode) != nil)
				continue
			}
			if !ok {
				continue
			}
			steps, err := world.ParseSteps(input)
			if err != nil {
				t.Errorf("%s: %v", s.Name, err)
				continue
			}
			if !slices.Equal(steps, s.Steps) {
				t.Errorf("%s, %s: the script's steps are not the scenario's:\n%s\nwant:\n%s", s.Name, header, world.Trace(steps), world.Trace(s.Steps))
			}
		}
		if len(runs) != len(slices.DeleteFunc([]store.Mode{store.Transactional, store.Plain}, func(m store.Mode) bool { return s.Expect(m) == nil })) {
			t.Errorf("%s: the script has %d runs: %v", s.Name, len(runs), slices.Collect(maps.Keys(runs)))
		}
	}
	for _, f := range files {
		if !named[f.Name()] {
			t.Errorf("testdata/scripts/%s is no named scenario", f.Name())
		}
	}
}

// scriptRuns returns a script's runs: each run line with the steps under
// it.
func scriptRuns(text string) map[string]string {
	runs := map[string]string{}
	var header string
	var steps []string
	inSteps := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "run "):
			header, steps, inSteps = line, nil, true
		case line == "----" && inSteps:
			runs[header] = strings.Join(steps, "\n")
			inSteps = false
		case inSteps:
			steps = append(steps, line)
		}
	}
	return runs
}
