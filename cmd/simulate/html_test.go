package main

import (
	"testing"

	"github.com/snapfence/snapfence/store"
)

// The page names runs as the text output does: by mode, or by outputs
// under -outputs (internal/timeline tests the page itself).
func TestTimelinePageNamesTheRuns(t *testing.T) {
	rep := report{Scenario: "s", Runs: []run{
		{Mode: store.Plain, ModeName: "plain"},
		{Mode: store.Transactional, ModeName: "transactional", Outputs: "exactly-once",
			Expectations: []verdict{{Says: "x", Met: false, Why: "y"}}},
	}}
	p := timelinePage(rep)
	want := [][3]string{
		{"plain", "Plain", "Plain mode"},
		{"exactly-once", "Exactly-once outputs", "Exactly-once outputs (transactional mode)"},
	}
	if len(p.Runs) != len(want) {
		t.Fatalf("%d runs, want %d", len(p.Runs), len(want))
	}
	for i, w := range want {
		r := p.Runs[i]
		if got := [3]string{r.Label, r.Title, r.Heading}; got != w {
			t.Errorf("run %d: label, title, heading %q, want %q", i, got, w)
		}
	}
	if e := p.Runs[1].Expectations; len(e) != 1 || e[0].Says != "x" || e[0].Met || e[0].Why != "y" {
		t.Errorf("expectations %+v, want the run's one unmet", e)
	}
}
