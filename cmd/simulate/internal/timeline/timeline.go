// Package timeline draws cmd/simulate's runs as an HTML page (-html
// FILE): each run's history as swimlanes over the steps: a lane per member
// (its state, generation and partitions, and its writes and commits
// coloured by outcome), a lane per snapshot partition (its high watermark
// and last stable offset, and the writes to it), and a lane of invariant
// violations. Steps during which two members both believe they own a
// partition (the overlap window) are shaded. The page is self-contained:
// inline CSS and SVG, no script, no font or asset from the network. It is
// also well-formed XML, so tests can read it with encoding/xml; the
// elements that carry meaning have data-* attributes.
package timeline

import (
	"fmt"
	"html"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
)

// Page is what the page shows: a scenario and its runs, one section each.
type Page struct {
	Scenario string
	Summary  string
	World    string // sim, kfake or kafka
	Seed     uint64
	Runs     []Run
}

// Run is one run of the scenario: its steps, its history and how it was
// judged. The names are the caller's, so the page needs no notion of
// modes or outputs.
type Run struct {
	Label   string // names the run: the section's data-mode, the timeline's aria-label
	Title   string // the run's verdict badges: "Plain", "Exactly-once outputs"
	Heading string // the section's heading: "Plain mode"

	Members    int // member slots
	Partitions int // snapshot partitions (at least; the history may show more)
	Steps      []world.Step
	Ops        []history.Op
	Violations []world.Violation
	// Expectations are the run's expected outcomes, each met or not.
	Expectations []Expectation
	// Final is each key's state after the run beside the exact fold of
	// its events.
	Final []history.KeyState
}

// Expectation is one expected outcome of a run and whether it was met.
type Expectation struct {
	Says string
	Met  bool
	Why  string // when not met
}

// ok reports whether every expectation of the run was met.
func (r Run) ok() bool {
	for _, v := range r.Expectations {
		if !v.Met {
			return false
		}
	}
	return true
}

// The page's colours.
const (
	colOK        = "#2e9e44" // an acknowledged write or commit
	colFenced    = "#d62728" // refused by the fence, or aborted
	colGrey      = "#8c8c8c" // failed or unknown
	colNoID      = "#ff7f0e" // refused for the missing identity
	colRunning   = "#a9c8f2"
	colPaused    = "#d3bff0"
	colCrashed   = "#4d4d4d"
	colOverlap   = "#fde0e0" // the overlap window's columns
	colBand      = "#f2b8b8" // its band over the header
	colHW        = "#1f5fa8"
	colLSO       = "#333333"
	colOpenTxn   = "#ffc966" // between the LSO and the HW
	colViolation = "#7a0019"
	colStale     = "#a34f00"
	colText      = "#1a1a1a"
	colDim       = "#6b6b6b"
)

// The timeline's geometry, in pixels.
const (
	labelW    = 120  // the lanes' names
	stepsW    = 1180 // the width the step columns aim at
	minColW   = 14
	maxColW   = 60
	endGap    = 10 // between the last step and the quiescence column
	rightPad  = 16
	bandH     = 18 // the overlap band
	descH     = 126
	numH      = 15
	timeH     = 15
	headerH   = bandH + descH + numH + timeH + 4
	markStep  = 14 // a marker's pitch
	rowH      = 14 // a row of markers or labels
	barH      = 18
	plotH     = 26 // a partition's HW and LSO plot
	violLaneH = 24
)

// Write writes page as a self-contained HTML page; the same Page gives
// the same bytes.
func Write(w io.Writer, page Page) error {
	var b pageBuf
	cols := 1
	for _, r := range page.Runs {
		cols = max(cols, stepCount(r)+1)
	}
	colW := min(maxColW, max(minColW, stepsW/cols))

	b.p(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<meta name="viewport" content="width=device-width, initial-scale=1"/>
<title>%s</title>
<style>%s</style>
</head>
<body>
`, esc("simulate: "+page.Scenario), css)
	b.p("<header>\n<h1>%s</h1>\n<p class=\"summary\">%s</p>\n", esc(page.Scenario), esc(page.Summary))
	b.p("<p class=\"meta\">world <b>%s</b> · seed %d", esc(orDash(page.World)), page.Seed)
	if len(page.Runs) > 0 {
		r := page.Runs[0]
		b.p(" · %d steps · %d member slots · %d snapshot partitions", len(r.Steps), r.Members, partitionCount(r))
	}
	b.p("</p>\n<p class=\"verdicts\">")
	for i, r := range page.Runs {
		if i > 0 {
			b.p(" ")
		}
		if r.ok() {
			b.p(`<span class="badge met">%s: as expected ✓</span>`, esc(r.Title))
		} else {
			b.p(`<span class="badge unmet">%s: not as expected ✗</span>`, esc(r.Title))
		}
	}
	b.p("</p>\n</header>\n")

	for i, r := range page.Runs {
		tl := newChart(r)
		b.p("<section class=\"run\" data-mode=\"%s\">\n", esc(r.Label))
		b.p("<h2>%s", esc(r.Heading))
		if r.ok() {
			b.p(` <span class="badge met">expectations met ✓</span>`)
		} else {
			b.p(` <span class="badge unmet">expectations not met ✗</span>`)
		}
		b.p("</h2>\n<p class=\"story\">%s</p>\n", tl.story())
		tl.svg(&b, fmt.Sprintf("r%d", i), colW)
		b.p("<div class=\"details\">\n")
		writeExpectations(&b, r)
		writeViolations(&b, r)
		writeFinal(&b, r)
		b.p("</div>\n</section>\n")
	}
	writeLegend(&b)
	b.p("</body>\n</html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

const css = `
body { font: 14px/1.4 "DejaVu Sans", "Liberation Sans", Arial, Helvetica, sans-serif; color: #1a1a1a; background: #ffffff; margin: 16px 24px; }
h1 { font-size: 22px; margin: 0 0 2px 0; }
h2 { font-size: 17px; margin: 0 0 2px 0; }
h3 { font-size: 13px; margin: 0 0 4px 0; text-transform: uppercase; letter-spacing: 0.04em; color: #555555; }
p { margin: 2px 0; }
.summary { font-size: 15px; }
.meta { color: #6b6b6b; font-size: 13px; }
.verdicts { margin-top: 6px; }
.badge { display: inline-block; font-size: 12px; font-weight: bold; padding: 1px 8px; border-radius: 9px; vertical-align: middle; }
.badge.met { background: #e3f4e6; color: #1d6e2f; border: 1px solid #2e9e44; }
.badge.unmet { background: #fbe3e3; color: #a01c1c; border: 1px solid #d62728; }
section.run { margin-top: 14px; padding-top: 10px; border-top: 2px solid #e2e2e2; }
.story { color: #333333; font-size: 13px; margin-bottom: 4px; }
svg.timeline { display: block; margin: 4px 0 6px 0; font-family: "DejaVu Sans", "Liberation Sans", Arial, Helvetica, sans-serif; }
.details { display: flex; flex-wrap: wrap; gap: 10px 28px; font-size: 13px; }
.details > div { flex: 1 1 300px; min-width: 260px; }
.details > div.violations { flex: 2 1 480px; }
.details > div.final { flex: 0 0 auto; }
ul { margin: 0; padding-left: 0; list-style: none; }
li { margin: 1px 0; }
.met { color: #1d6e2f; }
.unmet { color: #a01c1c; }
.why { color: #6b6b6b; }
.none { color: #6b6b6b; font-style: italic; }
li.violation { color: #7a0019; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 1px 10px 1px 0; text-align: left; white-space: nowrap; }
th { color: #555555; font-weight: normal; border-bottom: 1px solid #cccccc; }
tr.mismatch td { background: #fbe3e3; color: #a01c1c; font-weight: bold; }
td.num { font-family: "DejaVu Sans Mono", "Liberation Mono", monospace; }
footer { margin-top: 14px; padding-top: 8px; border-top: 2px solid #e2e2e2; }
ul.legend { display: flex; flex-wrap: wrap; gap: 4px 22px; font-size: 12px; }
ul.legend svg { vertical-align: middle; }
`

// chart is one run's history arranged by step.
type chart struct {
	r      Run
	steps  int  // step columns, numbered from 1
	hasEnd bool // a last column for the quiescence (step 0)
	desc   []string
	at     []time.Duration
	endAt  time.Duration

	members []int                 // the members that appear, in order
	state   map[int][]memberState // each member's state after each step
	parts   int
	logs    [][]logEnds // each partition's ends after each step (and at the end)

	mine   map[[2]int][]history.Op // a member's calls by [member, column]
	writes map[[2]int][]history.Op // the writes to a partition by [partition, column]
	stale  map[int]history.Op      // acknowledged writes older than one before: by op index, the newer one
	viol   map[int][]world.Violation
	// overlap is, per step column, who owns what twice ("" none).
	overlap []string
}

type memberState struct {
	detail string // absent, running, paused, crashed
	gen    int32
	owned  []int32
}

func (s memberState) same(o memberState) bool {
	return s.detail == o.detail && s.gen == o.gen && slices.Equal(s.owned, o.owned)
}

type logEnds struct{ hw, lso int64 }

// stepCount is the number of step columns of r.
func stepCount(r Run) int {
	n := len(r.Steps)
	for _, op := range r.Ops {
		n = max(n, op.StepNo)
	}
	return n
}

// partitionCount is the number of snapshot partitions of r.
func partitionCount(r Run) int {
	n := r.Partitions
	for _, op := range r.Ops {
		switch op.Kind {
		case history.Write, history.Abandon, history.Log, history.Commit, history.Acquire:
			n = max(n, int(op.Partition)+1)
		}
	}
	return n
}

func newChart(r Run) *chart {
	t := &chart{
		r: r, steps: stepCount(r), parts: partitionCount(r),
		state: map[int][]memberState{},
		mine:  map[[2]int][]history.Op{}, writes: map[[2]int][]history.Op{},
		stale: map[int]history.Op{}, viol: map[int][]world.Violation{},
	}
	t.desc = make([]string, t.steps)
	t.at = make([]time.Duration, t.steps)
	for i, s := range r.Steps {
		t.desc[i] = s.String()
	}
	seen := map[int]bool{}
	for _, op := range r.Ops {
		if op.StepNo == 0 {
			t.hasEnd = true
		}
		if op.Member >= 0 {
			switch op.Kind {
			case history.Member, history.Write, history.Commit, history.Acquire, history.Abandon, history.ReadStart, history.ReadEnd:
				seen[op.Member] = true
			}
		}
	}
	for m := range seen {
		t.members = append(t.members, m)
	}
	slices.Sort(t.members)
	ncols := t.cols()
	for _, m := range t.members {
		t.state[m] = make([]memberState, t.steps)
		for c := range t.state[m] {
			t.state[m][c] = memberState{detail: "absent", gen: -1}
		}
	}
	t.logs = make([][]logEnds, t.parts)
	for p := range t.logs {
		t.logs[p] = make([]logEnds, ncols)
	}
	newest := map[string]history.Op{} // by key, the newest acknowledged write
	for _, op := range r.Ops {
		c := t.col(op.StepNo)
		switch op.Kind {
		case history.Step:
			if op.StepNo >= 1 {
				t.at[c] = op.At
				if op.Detail != "" {
					t.desc[c] = op.Detail
				}
			} else {
				t.endAt = op.At
			}
		case history.Member:
			if op.StepNo >= 1 {
				st := memberState{detail: op.Detail, gen: op.Generation, owned: slices.Clone(op.Owned)}
				slices.Sort(st.owned)
				for i := c; i < t.steps; i++ {
					t.state[op.Member][i] = st
				}
			}
		case history.Log:
			if int(op.Partition) < t.parts {
				for i := c; i < ncols; i++ {
					t.logs[op.Partition][i] = logEnds{op.HW, op.LSO}
				}
			}
		case history.Write, history.Abandon:
			t.writes[[2]int{int(op.Partition), c}] = append(t.writes[[2]int{int(op.Partition), c}], op)
			t.mine[[2]int{op.Member, c}] = append(t.mine[[2]int{op.Member, c}], op)
			if op.Kind == history.Write && op.Outcome == history.OK {
				if prev, ok := newest[op.Key]; ok && prev.Offset > op.Offset {
					t.stale[op.Index] = prev
				} else {
					newest[op.Key] = op
				}
			}
		case history.Commit:
			t.mine[[2]int{op.Member, c}] = append(t.mine[[2]int{op.Member, c}], op)
		case history.ReadEnd:
			if op.Member >= 0 && op.Outcome != history.OK {
				t.mine[[2]int{op.Member, c}] = append(t.mine[[2]int{op.Member, c}], op)
			}
		}
	}
	for _, v := range r.Violations {
		c := t.col(v.Step)
		t.viol[c] = append(t.viol[c], v)
	}
	t.overlap = make([]string, t.steps)
	for c := range t.steps {
		owners := map[int32][]int{}
		for _, m := range t.members {
			s := t.state[m][c]
			if s.detail != "running" && s.detail != "paused" {
				continue // a crashed process believes nothing
			}
			for _, p := range s.owned {
				owners[p] = append(owners[p], m)
			}
		}
		byOwners := map[string][]string{}
		var keys []string
		for p := range int32(t.parts) {
			if len(owners[p]) < 2 {
				continue
			}
			var who []string
			for _, m := range owners[p] {
				who = append(who, fmt.Sprintf("m%d", m))
			}
			k := strings.Join(who, " ")
			if _, ok := byOwners[k]; !ok {
				keys = append(keys, k)
			}
			byOwners[k] = append(byOwners[k], fmt.Sprintf("p%d", p))
		}
		var parts []string
		for _, k := range keys {
			parts = append(parts, k+" own "+strings.Join(byOwners[k], " "))
		}
		t.overlap[c] = strings.Join(parts, "; ")
	}
	return t
}

// cols is the number of columns: the steps and the quiescence.
func (t *chart) cols() int {
	if t.hasEnd {
		return t.steps + 1
	}
	return t.steps
}

// col is the column of step n (0: the quiescence, the last column).
func (t *chart) col(n int) int {
	if n <= 0 {
		return t.steps
	}
	return n - 1
}

// story is the run's outcome in a sentence, as HTML.
func (t *chart) story() string {
	var fencedW, fencedC, landed, noID int
	for _, op := range t.r.Ops {
		switch {
		case op.Outcome == history.Fenced && op.Kind == history.Write:
			fencedW++
		case op.Outcome == history.Fenced && op.Kind == history.Commit:
			fencedC++
		case op.Outcome == history.NoIdentity:
			noID++
		}
	}
	landed = len(t.stale)
	overlapSteps := 0
	for _, o := range t.overlap {
		if o != "" {
			overlapSteps++
		}
	}
	wrong := 0
	for _, k := range t.r.Final {
		if !k.OK() {
			wrong++
		}
	}
	var s []string
	s = append(s, fmt.Sprintf("overlap window: %s", plural(overlapSteps, "step")))
	s = append(s, fmt.Sprintf(`<span class="%s">fenced: %s, %s</span>`, cls(fencedW+fencedC > 0, "unmet", ""), plural(fencedW, "write"), plural(fencedC, "commit")))
	if noID > 0 {
		s = append(s, fmt.Sprintf("refused for the missing identity: %d", noID))
	}
	s = append(s, fmt.Sprintf(`<span class="%s">stale writes that landed: %d</span>`, cls(landed > 0, "unmet", ""), landed))
	s = append(s, fmt.Sprintf(`<span class="%s">invariant violations: %d</span>`, cls(len(t.r.Violations) > 0, "unmet", ""), len(t.r.Violations)))
	s = append(s, fmt.Sprintf(`<span class="%s">final state: %d of %d keys wrong</span>`, cls(wrong > 0, "unmet", "met"), wrong, len(t.r.Final)))
	return strings.Join(s, " · ")
}

func cls(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// svg draws the timeline; id prefixes the SVG's ids, unique in the page.
func (t *chart) svg(b *pageBuf, id string, colW int) {
	ncols := t.cols()
	x0 := labelW
	colX := func(c int) int {
		x := x0 + c*colW
		if t.hasEnd && c == t.steps {
			x += endGap
		}
		return x
	}
	width := colX(ncols-1) + colW + rightPad
	if ncols == 0 {
		width = x0 + rightPad
	}

	// The lanes' heights first: they depend on how much each cell holds.
	type lane struct {
		kind  string // member, partition, invariants
		n     int    // member or partition
		y, h  int
		rows  int // rows of markers
		label int // rows of labels (member lanes)
	}
	var lanes []lane
	y := headerH
	perRow := max(1, (colW-2)/markStep)
	for _, m := range t.members {
		rows, labels := 1, 0
		for c := range ncols {
			ops := t.mine[[2]int{m, c}]
			rows = max(rows, (len(ops)+perRow-1)/perRow)
			labels = max(labels, len(t.cellLabels(ops)))
		}
		h := 6 + barH + 5 + rows*rowH + labels*rowH + 4
		lanes = append(lanes, lane{kind: "member", n: m, y: y, h: h, rows: rows, label: labels})
		y += h
	}
	for p := range t.parts {
		rows := 1
		for c := range ncols {
			rows = max(rows, (len(t.writes[[2]int{p, c}])+perRow-1)/perRow)
		}
		h := 14 + plotH + 4 + rows*rowH + 4
		lanes = append(lanes, lane{kind: "partition", n: p, y: y, h: h, rows: rows})
		y += h
	}
	lanes = append(lanes, lane{kind: "invariants", y: y, h: violLaneH})
	y += violLaneH
	height := y + 2

	b.p(`<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`+"\n",
		width, height, width, height, esc(t.r.Label+" run as swimlanes"))
	b.p(`<defs><pattern id="%s-open" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="%s"/><rect width="2" height="6" fill="#e6a23c"/></pattern></defs>`+"\n", id, colOpenTxn)

	// Columns: background, overlap shading, hover text.
	b.p(`<g class="columns">` + "\n")
	for c := range ncols {
		fill := "#ffffff"
		if c%2 == 1 {
			fill = "#f6f6f6"
		}
		over := c < t.steps && t.overlap[c] != ""
		if over {
			fill = colOverlap
		}
		b.p(`<rect x="%d" y="%d" width="%d" height="%d" fill="%s"`, colX(c), bandH, colW, height-bandH, fill)
		if over {
			b.p(` class="overlap" data-step="%d"`, c+1)
		}
		b.p(`><title>%s</title></rect>`+"\n", esc(t.colTitle(c)))
	}
	if t.hasEnd {
		x := colX(t.steps) - endGap/2
		b.p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#bbbbbb" stroke-dasharray="3 3"/>`+"\n", x, bandH, x, height)
	}
	b.p("</g>\n")

	// The overlap band: contiguous columns with the same owners.
	for c := 0; c < t.steps; {
		if t.overlap[c] == "" {
			c++
			continue
		}
		e := c
		for e+1 < t.steps && t.overlap[e+1] == t.overlap[c] {
			e++
		}
		x, w := colX(c), colX(e)+colW-colX(c)
		text := "overlap: " + t.overlap[c]
		b.p(`<g class="overlap-band" data-from="%d" data-to="%d"><rect x="%d" y="1" width="%d" height="%d" rx="3" fill="%s"/>`, c+1, e+1, x, w, bandH-3, colBand)
		b.p(`<text x="%d" y="%d" font-size="11" font-weight="bold" fill="#8a1010">%s</text>`, x+4, bandH-5, esc(fit(text, w-8, 11, true)))
		b.p(`<title>%s</title></g>`+"\n", esc(fmt.Sprintf("steps %d to %d: %s, both believing they own it", c+1, e+1, t.overlap[c])))
		c = e + 1
	}

	// The header: each step's text, number and virtual time.
	b.p(`<g class="steps" font-size="11" fill="%s">`+"\n", colText)
	descBottom := bandH + descH - 4
	numY := bandH + descH + numH - 3
	timeY := numY + timeH
	b.p(`<text x="%d" y="%d" fill="%s" text-anchor="end" font-size="11">step</text>`+"\n", x0-8, numY, colDim)
	b.p(`<text x="%d" y="%d" fill="%s" text-anchor="end" font-size="11">virtual time</text>`+"\n", x0-8, timeY, colDim)
	// Numbers every k steps when they do not all fit; a time where it
	// changes, when it does not run into the one before.
	k := 1
	for _, every := range []int{1, 2, 5, 10, 20} {
		k = every
		if textW(fmt.Sprint(t.steps), 11, true)+4 <= every*colW {
			break
		}
	}
	narrow := k > 1
	timeRight := 0
	for c := range ncols {
		cx := colX(c) + colW/2
		num, desc, at := t.colHeader(c)
		if narrow && c < t.steps {
			desc = num + " " + desc
		}
		b.p(`<g class="step" data-step="%d"><title>%s</title>`, t.stepNo(c), esc(t.colTitle(c)))
		b.p(`<text transform="translate(%d %d) rotate(-90)" font-size="11">%s</text>`, cx+4, descBottom, esc(fit(desc, descH-8, 11, false)))
		if c >= t.steps || (c+1)%k == 0 || (k == 1 && c == 0) {
			b.p(`<text x="%d" y="%d" text-anchor="middle" font-weight="bold" font-size="11">%s</text>`, cx, numY, esc(num))
		}
		if c == 0 || c == t.steps || t.at[c] != t.at[c-1] {
			w := textW(at, 10, false)
			x, anchor, left, right := cx, "middle", cx-w/2, cx+w/2
			if left < x0 {
				x, anchor, left, right = x0+1, "start", x0+1, x0+1+w
			}
			if c == 0 || left > timeRight+3 {
				b.p(`<text x="%d" y="%d" text-anchor="%s" font-size="10" fill="%s">%s</text>`, x, timeY, anchor, colDim, esc(at))
				timeRight = right
			}
		}
		b.p("</g>\n")
	}
	b.p("</g>\n")

	for _, l := range lanes {
		b.p(`<line x1="0" y1="%d" x2="%d" y2="%d" stroke="#d0d0d0"/>`+"\n", l.y, width, l.y)
		switch l.kind {
		case "member":
			t.memberLane(b, l.n, l.y, l.rows, colW, colX)
		case "partition":
			t.partitionLane(b, id, l.n, l.y, colW, colX)
		case "invariants":
			t.violationLane(b, l.y, colW, colX)
		}
	}
	b.p(`<line x1="0" y1="%d" x2="%d" y2="%d" stroke="#d0d0d0"/>`+"\n", height-2, width, height-2)
	b.p("</svg>\n")
}

// stepNo is the step of column c (0: the quiescence).
func (t *chart) stepNo(c int) int {
	if c >= t.steps {
		return 0
	}
	return c + 1
}

func (t *chart) colHeader(c int) (num, desc, at string) {
	if c >= t.steps {
		return "end", "quiesce", clock(t.endAt)
	}
	return fmt.Sprint(c + 1), t.desc[c], clock(t.at[c])
}

func (t *chart) colTitle(c int) string {
	if c >= t.steps {
		return fmt.Sprintf("end %s: quiescence (every fault lifted, the members poll until they caught up), then the final read of every snapshot partition", clock(t.endAt))
	}
	s := fmt.Sprintf("step %d %s: %s", c+1, clock(t.at[c]), t.desc[c])
	if t.overlap[c] != "" {
		s += "\noverlap: " + t.overlap[c]
	}
	return s
}

// clock formats a virtual time offset: +m:ss, +m:ss.mmm below a second.
func clock(d time.Duration) string {
	h := d / time.Hour
	m := (d % time.Hour) / time.Minute
	s := (d % time.Minute) / time.Second
	ms := (d % time.Second) / time.Millisecond
	out := fmt.Sprintf("+%d:%02d", m, s)
	if h > 0 {
		out = fmt.Sprintf("+%d:%02d:%02d", h, m, s)
	}
	if ms != 0 {
		out += fmt.Sprintf(".%03d", ms)
	}
	return out
}

// cellLabels are the words under a member's markers in one cell: a
// fence, a stale write that landed.
func (t *chart) cellLabels(ops []history.Op) []cellLabel {
	var fw, fc, landed bool
	for _, op := range ops {
		switch {
		case op.Outcome == history.Fenced && op.Kind == history.Write:
			fw = true
		case op.Outcome == history.Fenced && op.Kind == history.Commit:
			fc = true
		}
		if _, ok := t.stale[op.Index]; ok {
			landed = true
		}
	}
	var out []cellLabel
	switch {
	case fw:
		out = append(out, cellLabel{"fenced", colFenced, "fenced"})
	case fc:
		out = append(out, cellLabel{"commit fenced", colFenced, "fenced"})
	}
	var codes []string
	for _, op := range ops {
		if c := fenceCode(op.Err); op.Outcome == history.Fenced && c != "" && !slices.Contains(codes, c) {
			codes = append(codes, c)
		}
	}
	for _, c := range codes {
		out = append(out, cellLabel{c, colDim, "reason"})
	}
	if landed {
		out = append(out, cellLabel{"stale write lands", colStale, "stale"})
	}
	return out
}

type cellLabel struct{ text, color, class string }

// fenceCode is the Kafka error code in a fence's message ("": none).
func fenceCode(err string) string {
	for _, code := range []string{"ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "STALE_MEMBER_EPOCH", "FENCED_MEMBER_EPOCH", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"} {
		if strings.Contains(err, code) {
			return code
		}
	}
	return ""
}

func (t *chart) memberLane(b *pageBuf, m, y, rows, colW int, colX func(int) int) {
	b.p(`<g class="lane member" data-member="%d">`+"\n", m)
	b.p(`<text x="8" y="%d" font-size="13" font-weight="bold" fill="%s">m%d</text>`, y+6+barH-5, colText, m)
	barY := y + 6
	states := t.state[m]
	for c := 0; c < len(states); {
		e := c
		for e+1 < len(states) && states[e+1].same(states[c]) {
			e++
		}
		s := states[c]
		x, w := colX(c), colX(e)+colW-colX(c)
		title := fmt.Sprintf("m%d %s, steps %d to %d", m, s.detail, c+1, e+1)
		if s.detail != "absent" {
			title += fmt.Sprintf(": generation %s, owns %s", genText(s.gen), ownedText(s.owned, "nothing"))
		}
		b.p(`<g class="state" data-state="%s" data-from="%d" data-to="%d" data-generation="%d" data-owned="%s"><title>%s</title>`,
			esc(s.detail), c+1, e+1, s.gen, esc(ownedText(s.owned, "")), esc(title))
		if s.detail == "absent" {
			b.p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#c8c8c8" stroke-width="2" stroke-dasharray="2 4"/>`, x+1, barY+barH/2, x+w-1, barY+barH/2)
		} else {
			fill, ink := colRunning, colText
			switch s.detail {
			case "paused":
				fill = colPaused
			case "crashed":
				fill, ink = colCrashed, "#ffffff"
			}
			b.p(`<rect x="%d" y="%d" width="%d" height="%d" rx="3" fill="%s" stroke="#ffffff"/>`, x+1, barY, w-2, barH, fill)
			owns := "owns"
			if s.detail == "crashed" {
				owns = "held"
			}
			long := fmt.Sprintf("%s · g%s · %s %s", s.detail, genText(s.gen), owns, ownedText(s.owned, "nothing"))
			mid := fmt.Sprintf("g%s · %s", genText(s.gen), ownedText(s.owned, "–"))
			short := "g" + genText(s.gen)
			if s.gen < 0 && len(s.owned) == 0 {
				long, mid, short = s.detail+" · not in the group yet", "joining", ""
			}
			label := ""
			for _, cand := range []string{long, mid, short} {
				if textW(cand, 11, false) <= w-8 {
					label = cand
					break
				}
			}
			if label != "" {
				b.p(`<text x="%d" y="%d" font-size="11" fill="%s">%s</text>`, x+5, barY+barH-5, ink, esc(label))
			}
		}
		b.p("</g>\n")
		c = e + 1
	}
	// The member's calls, cell by cell.
	perRow := max(1, (colW-2)/markStep)
	markY := barY + barH + 5
	for c := range t.cols() {
		ops := t.mine[[2]int{m, c}]
		if len(ops) == 0 {
			continue
		}
		for i, op := range ops {
			row, k := i/perRow, i%perRow
			inRow := min(perRow, len(ops)-row*perRow)
			cx := colX(c) + colW/2 - (inRow*markStep)/2 + k*markStep + markStep/2
			cy := markY + row*rowH + rowH/2
			t.marker(b, op, cx, cy, false)
		}
		ly := markY + rows*rowH
		for i, l := range t.cellLabels(ops) {
			size, weight := 11, "bold"
			if l.class == "reason" {
				size, weight = 9, "normal"
			}
			x, anchor := labelX(colX(c)+colW/2, textW(l.text, size, weight == "bold"), colX(0), colX(t.cols()-1)+colW)
			b.p(`<text class="label %s" x="%d" y="%d" text-anchor="%s" font-size="%d" font-weight="%s" fill="%s">%s</text>`+"\n",
				l.class, x, ly+i*rowH+10, anchor, size, weight, l.color, esc(l.text))
		}
	}
	b.p("</g>\n")
}

// labelX places a label of width w centred on cx, inside [lo, hi].
func labelX(cx, w, lo, hi int) (int, string) {
	switch {
	case cx-w/2 < lo:
		return lo, "start"
	case cx+w/2 > hi:
		return hi, "end"
	}
	return cx, "middle"
}

// marker draws one call: its shape says what (a write, a commit, a
// recovery, an abandoned write), its colour how it ended. In a
// partition's lane (inPartition) a write refused or aborted is a cross.
func (t *chart) marker(b *pageBuf, op history.Op, cx, cy int, inPartition bool) {
	title := op.String()
	if prev, ok := t.stale[op.Index]; ok {
		title += fmt.Sprintf("\nstale: it replaces m%d's newer %s=%s@%d", prev.Member, prev.Key, prev.Value, prev.Offset)
	}
	b.p(`<g class="op" data-kind="%s" data-outcome="%s" data-member="%d" data-partition="%d" data-step="%d"><title>%s</title>`,
		esc(string(op.Kind)), esc(string(op.Outcome)), op.Member, op.Partition, op.StepNo, esc(title))
	color := outcomeColor(op.Outcome)
	cross := func(c string) {
		b.p(`<path d="M%d %dL%d %dM%d %dL%d %d" stroke="%s" stroke-width="2.6" stroke-linecap="round"/>`, cx-4, cy-4, cx+4, cy+4, cx-4, cy+4, cx+4, cy-4, c)
	}
	switch {
	case op.Kind == history.Abandon:
		cross(colGrey)
	case inPartition && (op.Outcome == history.Fenced || op.Outcome == history.Failed):
		cross(colFenced)
	case op.Kind == history.Commit:
		b.p(`<rect x="%d" y="%d" width="10" height="10" fill="%s"/>`, cx-5, cy-5, color)
	case op.Kind == history.ReadEnd:
		b.p(`<path d="M%d %dL%d %dL%d %dZ" fill="%s"/>`, cx, cy-5, cx+5, cy+4, cx-5, cy+4, color)
	case op.Outcome == history.Unknown:
		b.p(`<circle cx="%d" cy="%d" r="4" fill="#ffffff" stroke="%s" stroke-width="2"/>`, cx, cy, color)
	default:
		b.p(`<circle cx="%d" cy="%d" r="5" fill="%s"/>`, cx, cy, color)
	}
	if _, ok := t.stale[op.Index]; ok {
		b.p(`<circle class="stale" cx="%d" cy="%d" r="6.5" fill="none" stroke="%s" stroke-width="1.8"/>`, cx, cy, colStale)
	}
	b.p("</g>")
}

func outcomeColor(o history.Outcome) string {
	switch o {
	case history.OK:
		return colOK
	case history.Fenced:
		return colFenced
	case history.NoIdentity:
		return colNoID
	}
	return colGrey
}

func (t *chart) partitionLane(b *pageBuf, id string, p, y, colW int, colX func(int) int) {
	b.p(`<g class="lane partition" data-partition="%d">`+"\n", p)
	b.p(`<text x="8" y="%d" font-size="13" font-weight="bold" fill="%s">snapshots p%d</text>`, y+16, colText, p)
	b.p(`<text x="8" y="%d" font-size="10" fill="%s">hw, lso · writes</text>`+"\n", y+29, colDim)
	logs := t.logs[p]
	var top int64 = 1
	for _, l := range logs {
		top = max(top, l.hw)
	}
	plotTop := y + 14
	ly := func(v int64) int { return plotTop + plotH - int(v*plotH/top) }
	// The open transactions: the LSO below the HW.
	for c, l := range logs {
		if l.lso < l.hw {
			b.p(`<rect class="open-txn" data-step="%d" x="%d" y="%d" width="%d" height="%d" fill="url(#%s-open)" opacity="0.9"><title>%s</title></rect>`+"\n",
				t.stepNo(c), colX(c), ly(l.hw), colW, max(6, ly(l.lso)-ly(l.hw)), id,
				esc(fmt.Sprintf("p%d after %s: an open transaction: the last stable offset %d is below the high watermark %d", p, t.colName(c), l.lso, l.hw)))
		}
	}
	// The step lines: HW solid, LSO dashed.
	line := func(v func(logEnds) int64, color, dash, class string) {
		var d strings.Builder
		for c, l := range logs {
			x1, x2, yy := colX(c), colX(c)+colW, ly(v(l))
			if c == 0 {
				fmt.Fprintf(&d, "M%d %d", x1, yy)
			} else {
				fmt.Fprintf(&d, "L%d %d", x1, yy)
			}
			fmt.Fprintf(&d, "L%d %d", x2, yy)
		}
		b.p(`<path class="%s" d="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", class, d.String(), color, dash)
	}
	if len(logs) > 0 {
		line(func(l logEnds) int64 { return l.lso }, colLSO, ` stroke-dasharray="4 3"`, "lso")
		line(func(l logEnds) int64 { return l.hw }, colHW, "", "hw")
	}
	// The numbers where they change.
	for c, l := range logs {
		if c > 0 && logs[c-1] == l {
			continue
		}
		if c == 0 && l == (logEnds{}) {
			continue
		}
		text := fmt.Sprint(l.hw)
		if l.lso != l.hw {
			text = fmt.Sprintf("%d/%d", l.hw, l.lso)
		}
		b.p(`<text class="ends" x="%d" y="%d" font-size="10" fill="%s">%s<title>%s</title></text>`+"\n",
			colX(c)+2, ly(l.hw)-3, colHW, esc(text),
			esc(fmt.Sprintf("p%d after %s: high watermark %d, last stable offset %d", p, t.colName(c), l.hw, l.lso)))
	}
	// The writes to the partition.
	perRow := max(1, (colW-2)/markStep)
	markY := plotTop + plotH + 4
	for c := range t.cols() {
		ops := t.writes[[2]int{p, c}]
		for i, op := range ops {
			row, k := i/perRow, i%perRow
			inRow := min(perRow, len(ops)-row*perRow)
			cx := colX(c) + colW/2 - (inRow*markStep)/2 + k*markStep + markStep/2
			t.marker(b, op, cx, markY+row*rowH+rowH/2, true)
		}
	}
	b.p("</g>\n")
}

func (t *chart) colName(c int) string {
	if c >= t.steps {
		return "the quiescence"
	}
	return fmt.Sprintf("step %d", c+1)
}

func (t *chart) violationLane(b *pageBuf, y, colW int, colX func(int) int) {
	b.p(`<g class="lane invariants">` + "\n")
	b.p(`<text x="8" y="%d" font-size="12" font-weight="bold" fill="%s">invariants</text>`+"\n", y+16, colText)
	for c := range t.cols() {
		vs := t.viol[c]
		if len(vs) == 0 {
			continue
		}
		var lines []string
		for _, v := range vs {
			lines = append(lines, v.String())
		}
		cx, cy := colX(c)+colW/2, y+violLaneH/2
		b.p(`<g class="violation" data-step="%d" data-count="%d"><title>%s</title>`, t.stepNo(c), len(vs), esc(strings.Join(lines, "\n")))
		b.p(`<path d="M%d %dL%d %dL%d %dL%d %dZ" fill="%s"/>`, cx, cy-9, cx+9, cy, cx, cy+9, cx-9, cy, colViolation)
		b.p(`<text x="%d" y="%d" text-anchor="middle" font-size="10" font-weight="bold" fill="#ffffff">%d</text>`, cx, cy+4, len(vs))
		b.p("</g>\n")
	}
	b.p("</g>\n")
}

func genText(g int32) string {
	if g < 0 {
		return "–"
	}
	return fmt.Sprint(g)
}

func ownedText(ps []int32, none string) string {
	if len(ps) == 0 {
		return none
	}
	var s []string
	for _, p := range ps {
		s = append(s, fmt.Sprintf("p%d", p))
	}
	return strings.Join(s, " ")
}

func writeExpectations(b *pageBuf, r Run) {
	b.p("<div class=\"expectations\">\n<h3>Expectations</h3>\n<ul>\n")
	if len(r.Expectations) == 0 {
		b.p("<li class=\"none\">none</li>\n")
	}
	for _, v := range r.Expectations {
		if v.Met {
			b.p(`<li class="expectation met" data-met="true">✓ %s</li>`+"\n", esc(v.Says))
		} else {
			b.p(`<li class="expectation unmet" data-met="false">✗ %s <span class="why">— %s</span></li>`+"\n", esc(v.Says), esc(v.Why))
		}
	}
	b.p("</ul>\n</div>\n")
}

func writeViolations(b *pageBuf, r Run) {
	b.p("<div class=\"violations\">\n<h3>Invariant violations</h3>\n<ul>\n")
	if len(r.Violations) == 0 {
		b.p("<li class=\"none\">none: every invariant holds</li>\n")
	}
	for _, v := range r.Violations {
		b.p(`<li class="violation" data-invariant="%d" data-step="%d">%s</li>`+"\n", v.Invariant, v.Step, esc(v.String()))
	}
	b.p("</ul>\n</div>\n")
}

func writeFinal(b *pageBuf, r Run) {
	b.p("<div class=\"final\">\n<h3>Final state per key</h3>\n")
	if len(r.Final) == 0 {
		b.p("<p class=\"none\">no keys</p>\n</div>\n")
		return
	}
	b.p("<table>\n<tr><th>key</th><th>partition</th><th>got (final read)</th><th>want (exact fold)</th><th></th></tr>\n")
	for _, k := range r.Final {
		mark, class := "✓", "key ok"
		if !k.OK() {
			mark, class = "✗ mismatch", "key mismatch"
		}
		b.p(`<tr class="%s" data-key="%s"><td>%s</td><td>p%d</td><td class="num">%s</td><td class="num">%s</td><td>%s</td></tr>`+"\n",
			class, esc(k.Key), esc(k.Key), k.Partition, esc(orDash(k.Got)), esc(orDash(k.Want)), mark)
	}
	b.p("</table>\n</div>\n")
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// writeLegend explains the marks, each with its icon as drawn.
func writeLegend(b *pageBuf) {
	b.p("<footer>\n<h3>Legend</h3>\n<ul class=\"legend\">\n")
	item := func(icon, text string) {
		b.p(`<li><svg xmlns="http://www.w3.org/2000/svg" width="22" height="16" viewBox="0 0 22 16">%s</svg> %s</li>`+"\n", icon, esc(text))
	}
	bar := func(fill string) string {
		return fmt.Sprintf(`<rect x="1" y="3" width="20" height="10" rx="3" fill="%s"/>`, fill)
	}
	circle := func(fill string) string { return fmt.Sprintf(`<circle cx="11" cy="8" r="5" fill="%s"/>`, fill) }
	cross := fmt.Sprintf(`<path d="M7 4L15 12M7 12L15 4" stroke="%s" stroke-width="2.6" stroke-linecap="round"/>`, colFenced)
	item(bar(colRunning), "running")
	item(bar(colPaused), "paused (no poll, no heartbeat)")
	item(bar(colCrashed), "crashed")
	item(`<line x1="1" y1="8" x2="21" y2="8" stroke="#c8c8c8" stroke-width="2" stroke-dasharray="2 4"/>`, "absent")
	item(`<text x="2" y="12" font-size="11" fill="#1a1a1a">g2</text>`, "generation (member epoch), partitions owned")
	item(bar(colOverlap), "overlap window: two members own a partition")
	item(circle(colOK), "write ok")
	item(fmt.Sprintf(`<rect x="6" y="3" width="9" height="9" fill="%s"/>`, colOK), "commit ok")
	item(circle(colFenced), "write or commit fenced")
	item(cross, "write fenced or aborted (partition lane)")
	item(circle(colGrey), "failed")
	item(fmt.Sprintf(`<circle cx="11" cy="8" r="4" fill="#ffffff" stroke="%s" stroke-width="2"/>`, colGrey), "unknown")
	item(circle(colNoID), "refused: no identity yet")
	item(fmt.Sprintf(`<path d="M11 3L16 12L6 12Z" fill="%s"/>`, colGrey), "recovery failed")
	item(fmt.Sprintf(`<path d="M7 4L15 12M7 12L15 4" stroke="%s" stroke-width="2.6" stroke-linecap="round"/>`, colGrey), "abandoned by a crash")
	item(circle(colOK)+fmt.Sprintf(`<circle cx="11" cy="8" r="7" fill="none" stroke="%s" stroke-width="1.8"/>`, colStale), "stale write that landed over a newer one")
	item(fmt.Sprintf(`<path d="M1 13L9 13L9 3L21 3" fill="none" stroke="%s" stroke-width="2"/>`, colHW), "high watermark")
	item(fmt.Sprintf(`<path d="M1 8L21 8" stroke="%s" stroke-width="2" stroke-dasharray="4 3"/>`, colLSO), "last stable offset")
	item(fmt.Sprintf(`<rect x="1" y="3" width="20" height="10" fill="%s"/>`, colOpenTxn), "open transaction: lso below hw (numbers: hw/lso)")
	item(fmt.Sprintf(`<path d="M11 0L19 8L11 16L3 8Z" fill="%s"/>`, colViolation), "invariant violations (count)")
	b.p("</ul>\n</footer>\n")
}

// textW estimates the width of s in px at size (DejaVu Sans is wide).
func textW(s string, size int, bold bool) int {
	per := 0.58
	if bold {
		per = 0.66
	}
	return int(float64(len([]rune(s)))*per*float64(size) + 0.5)
}

// fit cuts s with an ellipsis to fit w px at size.
func fit(s string, w, size int, bold bool) string {
	if textW(s, size, bold) <= w {
		return s
	}
	r := []rune(s)
	for len(r) > 0 && textW(string(r)+"…", size, bold) > w {
		r = r[:len(r)-1]
	}
	if len(r) == 0 {
		return ""
	}
	return string(r) + "…"
}

func esc(s string) string { return html.EscapeString(s) }

// pageBuf is the page being written.
type pageBuf struct{ strings.Builder }

func (b *pageBuf) p(format string, args ...any) {
	if len(args) == 0 {
		b.WriteString(format)
		return
	}
	fmt.Fprintf(b, format, args...)
}
