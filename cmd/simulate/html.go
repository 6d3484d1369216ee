package main

import (
	"strings"

	"github.com/snapfence/snapfence/cmd/simulate/internal/timeline"
)

// timelinePage is rep as the -html page (internal/timeline) shows it. The
// page knows runs only by the names given here: a run's modes and outputs
// stay this command's.
func timelinePage(rep report) timeline.Page {
	p := timeline.Page{Scenario: rep.Scenario, Summary: rep.Summary, World: rep.World, Seed: rep.Seed}
	for _, r := range rep.Runs {
		title := modeTitle(r)
		heading := title + " mode"
		if r.Outputs != "" {
			heading = title + " (" + r.ModeName + " mode)"
		}
		tr := timeline.Run{
			Label: r.label(), Title: title, Heading: heading,
			Members: r.Members, Partitions: r.Partitions, Steps: r.Steps,
			Ops: r.Ops, Violations: r.Violations, Final: r.Final,
		}
		for _, v := range r.Expectations {
			tr.Expectations = append(tr.Expectations, timeline.Expectation(v))
		}
		p.Runs = append(p.Runs, tr)
	}
	return p
}

// modeTitle names a run in the page's badges and headings: "Plain",
// "Transactional", or its outputs under -outputs ("Exactly-once outputs").
func modeTitle(r run) string {
	if r.ModeName == "" {
		return r.Mode.String()
	}
	if r.Outputs != "" {
		return strings.ToUpper(r.Outputs[:1]) + r.Outputs[1:] + " outputs"
	}
	return strings.ToUpper(r.ModeName[:1]) + r.ModeName[1:]
}
