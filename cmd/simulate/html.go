package main

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

// The HTML page (-html FILE) draws each run's history as swimlanes over
// the steps: a lane per member (its state, generation and partitions, and
// its writes and commits coloured by outcome), a lane per snapshot
// partition (its high watermark and last stable offset, and the writes to
// it), and a lane of invariant violations. Steps during which two members
// both believe they own a partition (the overlap window) are shaded. The
// page is self-contained: inline CSS and SVG, no script, no font or asset
// from the network. It is also well-formed XML, so tests can read it with
// encoding/xml; the elements that carry meaning have data-* attributes.

// The page's colours.
const (
	htmlColOK        = "#2e9e44" // an acknowledged write or commit
	htmlColFenced    = "#d62728" // refused by the fence, or aborted
	htmlColGrey      = "#8c8c8c" // failed or unknown
	htmlColNoID      = "#ff7f0e" // refused for the missing identity
	htmlColRunning   = "#a9c8f2"
	htmlColPaused    = "#d3bff0"
	htmlColCrashed   = "#4d4d4d"
	htmlColOverlap   = "#fde0e0" // the overlap window's columns
	htmlColBand      = "#f2b8b8" // its band over the header
	htmlColHW        = "#1f5fa8"
	htmlColLSO       = "#333333"
	htmlColOpenTxn   = "#ffc966" // between the LSO and the HW
	htmlColViolation = "#7a0019"
	htmlColStale     = "#a34f00"
	htmlColText      = "#1a1a1a"
	htmlColDim       = "#6b6b6b"
)

// The timeline's geometry, in pixels.
const (
	htmlLabelW    = 120  // the lanes' names
	htmlStepsW    = 1180 // the width the step columns aim at
	htmlMinColW   = 14
	htmlMaxColW   = 60
	htmlEndGap    = 10 // between the last step and the quiescence column
	htmlRightPad  = 16
	htmlBandH     = 18 // the overlap band
	htmlDescH     = 126
	htmlNumH      = 15
	htmlTimeH     = 15
	htmlHeaderH   = htmlBandH + htmlDescH + htmlNumH + htmlTimeH + 4
	htmlMarkStep  = 14 // a marker's pitch
	htmlRowH      = 14 // a row of markers or labels
	htmlBarH      = 18
	htmlPlotH     = 26 // a partition's HW and LSO plot
	htmlViolLaneH = 24
)

// writeHTML writes rep as a self-contained HTML page.
func writeHTML(w io.Writer, rep report) error {
	var b htmlBuf
	cols := 1
	for _, r := range rep.Runs {
		cols = max(cols, htmlStepCount(r)+1)
	}
	colW := min(htmlMaxColW, max(htmlMinColW, htmlStepsW/cols))

	b.p(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<meta name="viewport" content="width=device-width, initial-scale=1"/>
<title>%s</title>
<style>%s</style>
</head>
<body>
`, htmlEsc("simulate: "+rep.Scenario), htmlCSS)
	b.p("<header>\n<h1>%s</h1>\n<p class=\"summary\">%s</p>\n", htmlEsc(rep.Scenario), htmlEsc(rep.Summary))
	b.p("<p class=\"meta\">world <b>%s</b> · seed %d", htmlEsc(htmlOrDash(rep.World)), rep.Seed)
	if len(rep.Runs) > 0 {
		r := rep.Runs[0]
		b.p(" · %d steps · %d member slots · %d snapshot partitions", len(r.Steps), r.Members, htmlPartitionCount(r))
	}
	b.p("</p>\n<p class=\"verdicts\">")
	for i, r := range rep.Runs {
		if i > 0 {
			b.p(" ")
		}
		if r.ok() {
			b.p(`<span class="badge met">%s: as expected ✓</span>`, htmlEsc(htmlModeTitle(r)))
		} else {
			b.p(`<span class="badge unmet">%s: not as expected ✗</span>`, htmlEsc(htmlModeTitle(r)))
		}
	}
	b.p("</p>\n</header>\n")

	for i, r := range rep.Runs {
		tl := newHTMLTimeline(r)
		b.p("<section class=\"run\" data-mode=\"%s\">\n", htmlEsc(r.label()))
		if r.Outputs != "" {
			b.p("<h2>%s (%s mode)", htmlEsc(htmlModeTitle(r)), htmlEsc(r.ModeName))
		} else {
			b.p("<h2>%s mode", htmlEsc(htmlModeTitle(r)))
		}
		if r.ok() {
			b.p(` <span class="badge met">expectations met ✓</span>`)
		} else {
			b.p(` <span class="badge unmet">expectations not met ✗</span>`)
		}
		b.p("</h2>\n<p class=\"story\">%s</p>\n", tl.story())
		tl.svg(&b, fmt.Sprintf("r%d", i), colW)
		b.p("<div class=\"details\">\n")
		htmlExpectations(&b, r)
		htmlViolations(&b, r)
		htmlFinal(&b, r)
		b.p("</div>\n</section>\n")
	}
	htmlLegend(&b)
	b.p("</body>\n</html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

const htmlCSS = `
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

// htmlTimeline is one run's history arranged by step.
type htmlTimeline struct {
	r      run
	steps  int  // step columns, numbered from 1
	hasEnd bool // a last column for the quiescence (step 0)
	desc   []string
	at     []time.Duration
	endAt  time.Duration

	members []int                     // the members that appear, in order
	state   map[int][]htmlMemberState // each member's state after each step
	parts   int
	logs    [][]htmlLog // each partition's ends after each step (and at the end)

	mine   map[[2]int][]history.Op // a member's calls by [member, column]
	writes map[[2]int][]history.Op // the writes to a partition by [partition, column]
	stale  map[int]history.Op      // acknowledged writes older than one before: by op index, the newer one
	viol   map[int][]world.Violation
	// overlap is, per step column, who owns what twice ("" none).
	overlap []string
}

type htmlMemberState struct {
	detail string // absent, running, paused, crashed
	gen    int32
	owned  []int32
}

func (s htmlMemberState) same(o htmlMemberState) bool {
	return s.detail == o.detail && s.gen == o.gen && slices.Equal(s.owned, o.owned)
}

type htmlLog struct{ hw, lso int64 }

// htmlStepCount is the number of step columns of r.
func htmlStepCount(r run) int {
	n := len(r.Steps)
	for _, op := range r.Ops {
		n = max(n, op.StepNo)
	}
	return n
}

// htmlPartitionCount is the number of snapshot partitions of r.
func htmlPartitionCount(r run) int {
	n := r.Partitions
	for _, op := range r.Ops {
		switch op.Kind {
		case history.Write, history.Abandon, history.Log, history.Commit, history.Acquire:
			n = max(n, int(op.Partition)+1)
		}
	}
	return n
}

func newHTMLTimeline(r run) *htmlTimeline {
	t := &htmlTimeline{
		r: r, steps: htmlStepCount(r), parts: htmlPartitionCount(r),
		state: map[int][]htmlMemberState{},
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
		t.state[m] = make([]htmlMemberState, t.steps)
		for c := range t.state[m] {
			t.state[m][c] = htmlMemberState{detail: "absent", gen: -1}
		}
	}
	t.logs = make([][]htmlLog, t.parts)
	for p := range t.logs {
		t.logs[p] = make([]htmlLog, ncols)
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
				st := htmlMemberState{detail: op.Detail, gen: op.Generation, owned: slices.Clone(op.Owned)}
				slices.Sort(st.owned)
				for i := c; i < t.steps; i++ {
					t.state[op.Member][i] = st
				}
			}
		case history.Log:
			if int(op.Partition) < t.parts {
				for i := c; i < ncols; i++ {
					t.logs[op.Partition][i] = htmlLog{op.HW, op.LSO}
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
func (t *htmlTimeline) cols() int {
	if t.hasEnd {
		return t.steps + 1
	}
	return t.steps
}

// col is the column of step n (0: the quiescence, the last column).
func (t *htmlTimeline) col(n int) int {
	if n <= 0 {
		return t.steps
	}
	return n - 1
}

// story is the run's outcome in a sentence, as HTML.
func (t *htmlTimeline) story() string {
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
	s = append(s, fmt.Sprintf("overlap window: %s", htmlPlural(overlapSteps, "step")))
	s = append(s, fmt.Sprintf(`<span class="%s">fenced: %s, %s</span>`, htmlCls(fencedW+fencedC > 0, "unmet", ""), htmlPlural(fencedW, "write"), htmlPlural(fencedC, "commit")))
	if noID > 0 {
		s = append(s, fmt.Sprintf("refused for the missing identity: %d", noID))
	}
	s = append(s, fmt.Sprintf(`<span class="%s">stale writes that landed: %d</span>`, htmlCls(landed > 0, "unmet", ""), landed))
	s = append(s, fmt.Sprintf(`<span class="%s">invariant violations: %d</span>`, htmlCls(len(t.r.Violations) > 0, "unmet", ""), len(t.r.Violations)))
	s = append(s, fmt.Sprintf(`<span class="%s">final state: %d of %d keys wrong</span>`, htmlCls(wrong > 0, "unmet", "met"), wrong, len(t.r.Final)))
	return strings.Join(s, " · ")
}

func htmlCls(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}

func htmlPlural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// svg draws the timeline; id prefixes the SVG's ids, unique in the page.
func (t *htmlTimeline) svg(b *htmlBuf, id string, colW int) {
	ncols := t.cols()
	x0 := htmlLabelW
	colX := func(c int) int {
		x := x0 + c*colW
		if t.hasEnd && c == t.steps {
			x += htmlEndGap
		}
		return x
	}
	width := colX(ncols-1) + colW + htmlRightPad
	if ncols == 0 {
		width = x0 + htmlRightPad
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
	y := htmlHeaderH
	perRow := max(1, (colW-2)/htmlMarkStep)
	for _, m := range t.members {
		rows, labels := 1, 0
		for c := range ncols {
			ops := t.mine[[2]int{m, c}]
			rows = max(rows, (len(ops)+perRow-1)/perRow)
			labels = max(labels, len(t.cellLabels(ops)))
		}
		h := 6 + htmlBarH + 5 + rows*htmlRowH + labels*htmlRowH + 4
		lanes = append(lanes, lane{kind: "member", n: m, y: y, h: h, rows: rows, label: labels})
		y += h
	}
	for p := range t.parts {
		rows := 1
		for c := range ncols {
			rows = max(rows, (len(t.writes[[2]int{p, c}])+perRow-1)/perRow)
		}
		h := 14 + htmlPlotH + 4 + rows*htmlRowH + 4
		lanes = append(lanes, lane{kind: "partition", n: p, y: y, h: h, rows: rows})
		y += h
	}
	lanes = append(lanes, lane{kind: "invariants", y: y, h: htmlViolLaneH})
	y += htmlViolLaneH
	height := y + 2

	b.p(`<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`+"\n",
		width, height, width, height, htmlEsc(t.r.label()+" run as swimlanes"))
	b.p(`<defs><pattern id="%s-open" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="%s"/><rect width="2" height="6" fill="#e6a23c"/></pattern></defs>`+"\n", id, htmlColOpenTxn)

	// Columns: background, overlap shading, hover text.
	b.p(`<g class="columns">` + "\n")
	for c := range ncols {
		fill := "#ffffff"
		if c%2 == 1 {
			fill = "#f6f6f6"
		}
		over := c < t.steps && t.overlap[c] != ""
		if over {
			fill = htmlColOverlap
		}
		b.p(`<rect x="%d" y="%d" width="%d" height="%d" fill="%s"`, colX(c), htmlBandH, colW, height-htmlBandH, fill)
		if over {
			b.p(` class="overlap" data-step="%d"`, c+1)
		}
		b.p(`><title>%s</title></rect>`+"\n", htmlEsc(t.colTitle(c)))
	}
	if t.hasEnd {
		x := colX(t.steps) - htmlEndGap/2
		b.p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#bbbbbb" stroke-dasharray="3 3"/>`+"\n", x, htmlBandH, x, height)
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
		b.p(`<g class="overlap-band" data-from="%d" data-to="%d"><rect x="%d" y="1" width="%d" height="%d" rx="3" fill="%s"/>`, c+1, e+1, x, w, htmlBandH-3, htmlColBand)
		b.p(`<text x="%d" y="%d" font-size="11" font-weight="bold" fill="#8a1010">%s</text>`, x+4, htmlBandH-5, htmlEsc(htmlFit(text, w-8, 11, true)))
		b.p(`<title>%s</title></g>`+"\n", htmlEsc(fmt.Sprintf("steps %d to %d: %s, both believing they own it", c+1, e+1, t.overlap[c])))
		c = e + 1
	}

	// The header: each step's text, number and virtual time.
	b.p(`<g class="steps" font-size="11" fill="%s">`+"\n", htmlColText)
	descBottom := htmlBandH + htmlDescH - 4
	numY := htmlBandH + htmlDescH + htmlNumH - 3
	timeY := numY + htmlTimeH
	b.p(`<text x="%d" y="%d" fill="%s" text-anchor="end" font-size="11">step</text>`+"\n", x0-8, numY, htmlColDim)
	b.p(`<text x="%d" y="%d" fill="%s" text-anchor="end" font-size="11">virtual time</text>`+"\n", x0-8, timeY, htmlColDim)
	// Numbers every k steps when they do not all fit; a time where it
	// changes, when it does not run into the one before.
	k := 1
	for _, every := range []int{1, 2, 5, 10, 20} {
		k = every
		if htmlTextW(fmt.Sprint(t.steps), 11, true)+4 <= every*colW {
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
		b.p(`<g class="step" data-step="%d"><title>%s</title>`, t.stepNo(c), htmlEsc(t.colTitle(c)))
		b.p(`<text transform="translate(%d %d) rotate(-90)" font-size="11">%s</text>`, cx+4, descBottom, htmlEsc(htmlFit(desc, htmlDescH-8, 11, false)))
		if c >= t.steps || (c+1)%k == 0 || (k == 1 && c == 0) {
			b.p(`<text x="%d" y="%d" text-anchor="middle" font-weight="bold" font-size="11">%s</text>`, cx, numY, htmlEsc(num))
		}
		if c == 0 || c == t.steps || t.at[c] != t.at[c-1] {
			w := htmlTextW(at, 10, false)
			x, anchor, left, right := cx, "middle", cx-w/2, cx+w/2
			if left < x0 {
				x, anchor, left, right = x0+1, "start", x0+1, x0+1+w
			}
			if c == 0 || left > timeRight+3 {
				b.p(`<text x="%d" y="%d" text-anchor="%s" font-size="10" fill="%s">%s</text>`, x, timeY, anchor, htmlColDim, htmlEsc(at))
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
func (t *htmlTimeline) stepNo(c int) int {
	if c >= t.steps {
		return 0
	}
	return c + 1
}

func (t *htmlTimeline) colHeader(c int) (num, desc, at string) {
	if c >= t.steps {
		return "end", "quiesce", htmlClock(t.endAt)
	}
	return fmt.Sprint(c + 1), t.desc[c], htmlClock(t.at[c])
}

func (t *htmlTimeline) colTitle(c int) string {
	if c >= t.steps {
		return fmt.Sprintf("end %s: quiescence (every fault lifted, the members poll until they caught up), then the final read of every snapshot partition", htmlClock(t.endAt))
	}
	s := fmt.Sprintf("step %d %s: %s", c+1, htmlClock(t.at[c]), t.desc[c])
	if t.overlap[c] != "" {
		s += "\noverlap: " + t.overlap[c]
	}
	return s
}

// htmlClock formats a virtual time offset: +m:ss, +m:ss.mmm below a second.
func htmlClock(d time.Duration) string {
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
func (t *htmlTimeline) cellLabels(ops []history.Op) []htmlLabel {
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
	var out []htmlLabel
	switch {
	case fw:
		out = append(out, htmlLabel{"fenced", htmlColFenced, "fenced"})
	case fc:
		out = append(out, htmlLabel{"commit fenced", htmlColFenced, "fenced"})
	}
	var codes []string
	for _, op := range ops {
		if c := htmlFenceCode(op.Err); op.Outcome == history.Fenced && c != "" && !slices.Contains(codes, c) {
			codes = append(codes, c)
		}
	}
	for _, c := range codes {
		out = append(out, htmlLabel{c, htmlColDim, "reason"})
	}
	if landed {
		out = append(out, htmlLabel{"stale write lands", htmlColStale, "stale"})
	}
	return out
}

type htmlLabel struct{ text, color, class string }

// htmlFenceCode is the Kafka error code in a fence's message ("": none).
func htmlFenceCode(err string) string {
	for _, code := range []string{"ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "STALE_MEMBER_EPOCH", "FENCED_MEMBER_EPOCH", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"} {
		if strings.Contains(err, code) {
			return code
		}
	}
	return ""
}

func (t *htmlTimeline) memberLane(b *htmlBuf, m, y, rows, colW int, colX func(int) int) {
	b.p(`<g class="lane member" data-member="%d">`+"\n", m)
	b.p(`<text x="8" y="%d" font-size="13" font-weight="bold" fill="%s">m%d</text>`, y+6+htmlBarH-5, htmlColText, m)
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
			title += fmt.Sprintf(": generation %s, owns %s", htmlGen(s.gen), htmlOwned(s.owned, "nothing"))
		}
		b.p(`<g class="state" data-state="%s" data-from="%d" data-to="%d" data-generation="%d" data-owned="%s"><title>%s</title>`,
			htmlEsc(s.detail), c+1, e+1, s.gen, htmlEsc(htmlOwned(s.owned, "")), htmlEsc(title))
		if s.detail == "absent" {
			b.p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#c8c8c8" stroke-width="2" stroke-dasharray="2 4"/>`, x+1, barY+htmlBarH/2, x+w-1, barY+htmlBarH/2)
		} else {
			fill, ink := htmlColRunning, htmlColText
			switch s.detail {
			case "paused":
				fill = htmlColPaused
			case "crashed":
				fill, ink = htmlColCrashed, "#ffffff"
			}
			b.p(`<rect x="%d" y="%d" width="%d" height="%d" rx="3" fill="%s" stroke="#ffffff"/>`, x+1, barY, w-2, htmlBarH, fill)
			owns := "owns"
			if s.detail == "crashed" {
				owns = "held"
			}
			long := fmt.Sprintf("%s · g%s · %s %s", s.detail, htmlGen(s.gen), owns, htmlOwned(s.owned, "nothing"))
			mid := fmt.Sprintf("g%s · %s", htmlGen(s.gen), htmlOwned(s.owned, "–"))
			short := "g" + htmlGen(s.gen)
			if s.gen < 0 && len(s.owned) == 0 {
				long, mid, short = s.detail+" · not in the group yet", "joining", ""
			}
			label := ""
			for _, cand := range []string{long, mid, short} {
				if htmlTextW(cand, 11, false) <= w-8 {
					label = cand
					break
				}
			}
			if label != "" {
				b.p(`<text x="%d" y="%d" font-size="11" fill="%s">%s</text>`, x+5, barY+htmlBarH-5, ink, htmlEsc(label))
			}
		}
		b.p("</g>\n")
		c = e + 1
	}
	// The member's calls, cell by cell.
	perRow := max(1, (colW-2)/htmlMarkStep)
	markY := barY + htmlBarH + 5
	for c := range t.cols() {
		ops := t.mine[[2]int{m, c}]
		if len(ops) == 0 {
			continue
		}
		for i, op := range ops {
			row, k := i/perRow, i%perRow
			inRow := min(perRow, len(ops)-row*perRow)
			cx := colX(c) + colW/2 - (inRow*htmlMarkStep)/2 + k*htmlMarkStep + htmlMarkStep/2
			cy := markY + row*htmlRowH + htmlRowH/2
			t.marker(b, op, cx, cy, false)
		}
		ly := markY + rows*htmlRowH
		for i, l := range t.cellLabels(ops) {
			size, weight := 11, "bold"
			if l.class == "reason" {
				size, weight = 9, "normal"
			}
			x, anchor := htmlLabelX(colX(c)+colW/2, htmlTextW(l.text, size, weight == "bold"), colX(0), colX(t.cols()-1)+colW)
			b.p(`<text class="label %s" x="%d" y="%d" text-anchor="%s" font-size="%d" font-weight="%s" fill="%s">%s</text>`+"\n",
				l.class, x, ly+i*htmlRowH+10, anchor, size, weight, l.color, htmlEsc(l.text))
		}
	}
	b.p("</g>\n")
}

// htmlLabelX places a label of width w centred on cx, inside [lo, hi].
func htmlLabelX(cx, w, lo, hi int) (int, string) {
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
func (t *htmlTimeline) marker(b *htmlBuf, op history.Op, cx, cy int, inPartition bool) {
	title := op.String()
	if prev, ok := t.stale[op.Index]; ok {
		title += fmt.Sprintf("\nstale: it replaces m%d's newer %s=%s@%d", prev.Member, prev.Key, prev.Value, prev.Offset)
	}
	b.p(`<g class="op" data-kind="%s" data-outcome="%s" data-member="%d" data-partition="%d" data-step="%d"><title>%s</title>`,
		htmlEsc(string(op.Kind)), htmlEsc(string(op.Outcome)), op.Member, op.Partition, op.StepNo, htmlEsc(title))
	color := htmlOutcomeColor(op.Outcome)
	cross := func(c string) {
		b.p(`<path d="M%d %dL%d %dM%d %dL%d %d" stroke="%s" stroke-width="2.6" stroke-linecap="round"/>`, cx-4, cy-4, cx+4, cy+4, cx-4, cy+4, cx+4, cy-4, c)
	}
	switch {
	case op.Kind == history.Abandon:
		cross(htmlColGrey)
	case inPartition && (op.Outcome == history.Fenced || op.Outcome == history.Failed):
		cross(htmlColFenced)
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
		b.p(`<circle class="stale" cx="%d" cy="%d" r="6.5" fill="none" stroke="%s" stroke-width="1.8"/>`, cx, cy, htmlColStale)
	}
	b.p("</g>")
}

func htmlOutcomeColor(o history.Outcome) string {
	switch o {
	case history.OK:
		return htmlColOK
	case history.Fenced:
		return htmlColFenced
	case history.NoIdentity:
		return htmlColNoID
	}
	return htmlColGrey
}

func (t *htmlTimeline) partitionLane(b *htmlBuf, id string, p, y, colW int, colX func(int) int) {
	b.p(`<g class="lane partition" data-partition="%d">`+"\n", p)
	b.p(`<text x="8" y="%d" font-size="13" font-weight="bold" fill="%s">snapshots p%d</text>`, y+16, htmlColText, p)
	b.p(`<text x="8" y="%d" font-size="10" fill="%s">hw, lso · writes</text>`+"\n", y+29, htmlColDim)
	logs := t.logs[p]
	var top int64 = 1
	for _, l := range logs {
		top = max(top, l.hw)
	}
	plotTop := y + 14
	ly := func(v int64) int { return plotTop + htmlPlotH - int(v*htmlPlotH/top) }
	// The open transactions: the LSO below the HW.
	for c, l := range logs {
		if l.lso < l.hw {
			b.p(`<rect class="open-txn" data-step="%d" x="%d" y="%d" width="%d" height="%d" fill="url(#%s-open)" opacity="0.9"><title>%s</title></rect>`+"\n",
				t.stepNo(c), colX(c), ly(l.hw), colW, max(6, ly(l.lso)-ly(l.hw)), id,
				htmlEsc(fmt.Sprintf("p%d after %s: an open transaction: the last stable offset %d is below the high watermark %d", p, t.colName(c), l.lso, l.hw)))
		}
	}
	// The step lines: HW solid, LSO dashed.
	line := func(v func(htmlLog) int64, color, dash, class string) {
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
		line(func(l htmlLog) int64 { return l.lso }, htmlColLSO, ` stroke-dasharray="4 3"`, "lso")
		line(func(l htmlLog) int64 { return l.hw }, htmlColHW, "", "hw")
	}
	// The numbers where they change.
	for c, l := range logs {
		if c > 0 && logs[c-1] == l {
			continue
		}
		if c == 0 && l == (htmlLog{}) {
			continue
		}
		text := fmt.Sprint(l.hw)
		if l.lso != l.hw {
			text = fmt.Sprintf("%d/%d", l.hw, l.lso)
		}
		b.p(`<text class="ends" x="%d" y="%d" font-size="10" fill="%s">%s<title>%s</title></text>`+"\n",
			colX(c)+2, ly(l.hw)-3, htmlColHW, htmlEsc(text),
			htmlEsc(fmt.Sprintf("p%d after %s: high watermark %d, last stable offset %d", p, t.colName(c), l.hw, l.lso)))
	}
	// The writes to the partition.
	perRow := max(1, (colW-2)/htmlMarkStep)
	markY := plotTop + htmlPlotH + 4
	for c := range t.cols() {
		ops := t.writes[[2]int{p, c}]
		for i, op := range ops {
			row, k := i/perRow, i%perRow
			inRow := min(perRow, len(ops)-row*perRow)
			cx := colX(c) + colW/2 - (inRow*htmlMarkStep)/2 + k*htmlMarkStep + htmlMarkStep/2
			t.marker(b, op, cx, markY+row*htmlRowH+htmlRowH/2, true)
		}
	}
	b.p("</g>\n")
}

func (t *htmlTimeline) colName(c int) string {
	if c >= t.steps {
		return "the quiescence"
	}
	return fmt.Sprintf("step %d", c+1)
}

func (t *htmlTimeline) violationLane(b *htmlBuf, y, colW int, colX func(int) int) {
	b.p(`<g class="lane invariants">` + "\n")
	b.p(`<text x="8" y="%d" font-size="12" font-weight="bold" fill="%s">invariants</text>`+"\n", y+16, htmlColText)
	for c := range t.cols() {
		vs := t.viol[c]
		if len(vs) == 0 {
			continue
		}
		var lines []string
		for _, v := range vs {
			lines = append(lines, v.String())
		}
		cx, cy := colX(c)+colW/2, y+htmlViolLaneH/2
		b.p(`<g class="violation" data-step="%d" data-count="%d"><title>%s</title>`, t.stepNo(c), len(vs), htmlEsc(strings.Join(lines, "\n")))
		b.p(`<path d="M%d %dL%d %dL%d %dL%d %dZ" fill="%s"/>`, cx, cy-9, cx+9, cy, cx, cy+9, cx-9, cy, htmlColViolation)
		b.p(`<text x="%d" y="%d" text-anchor="middle" font-size="10" font-weight="bold" fill="#ffffff">%d</text>`, cx, cy+4, len(vs))
		b.p("</g>\n")
	}
	b.p("</g>\n")
}

func htmlGen(g int32) string {
	if g < 0 {
		return "–"
	}
	return fmt.Sprint(g)
}

func htmlOwned(ps []int32, none string) string {
	if len(ps) == 0 {
		return none
	}
	var s []string
	for _, p := range ps {
		s = append(s, fmt.Sprintf("p%d", p))
	}
	return strings.Join(s, " ")
}

func htmlModeTitle(r run) string {
	if r.ModeName == "" {
		return r.Mode.String()
	}
	if r.Outputs != "" {
		return strings.ToUpper(r.Outputs[:1]) + r.Outputs[1:] + " outputs"
	}
	return strings.ToUpper(r.ModeName[:1]) + r.ModeName[1:]
}

func htmlExpectations(b *htmlBuf, r run) {
	b.p("<div class=\"expectations\">\n<h3>Expectations</h3>\n<ul>\n")
	if len(r.Expectations) == 0 {
		b.p("<li class=\"none\">none</li>\n")
	}
	for _, v := range r.Expectations {
		if v.Met {
			b.p(`<li class="expectation met" data-met="true">✓ %s</li>`+"\n", htmlEsc(v.Says))
		} else {
			b.p(`<li class="expectation unmet" data-met="false">✗ %s <span class="why">— %s</span></li>`+"\n", htmlEsc(v.Says), htmlEsc(v.Why))
		}
	}
	b.p("</ul>\n</div>\n")
}

func htmlViolations(b *htmlBuf, r run) {
	b.p("<div class=\"violations\">\n<h3>Invariant violations</h3>\n<ul>\n")
	if len(r.Violations) == 0 {
		b.p("<li class=\"none\">none: every invariant holds</li>\n")
	}
	for _, v := range r.Violations {
		b.p(`<li class="violation" data-invariant="%d" data-step="%d">%s</li>`+"\n", v.Invariant, v.Step, htmlEsc(v.String()))
	}
	b.p("</ul>\n</div>\n")
}

func htmlFinal(b *htmlBuf, r run) {
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
			class, htmlEsc(k.Key), htmlEsc(k.Key), k.Partition, htmlEsc(htmlOrDash(k.Got)), htmlEsc(htmlOrDash(k.Want)), mark)
	}
	b.p("</table>\n</div>\n")
}

func htmlOrDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// htmlLegend explains the marks, each with its icon as drawn.
func htmlLegend(b *htmlBuf) {
	b.p("<footer>\n<h3>Legend</h3>\n<ul class=\"legend\">\n")
	item := func(icon, text string) {
		b.p(`<li><svg xmlns="http://www.w3.org/2000/svg" width="22" height="16" viewBox="0 0 22 16">%s</svg> %s</li>`+"\n", icon, htmlEsc(text))
	}
	bar := func(fill string) string {
		return fmt.Sprintf(`<rect x="1" y="3" width="20" height="10" rx="3" fill="%s"/>`, fill)
	}
	circle := func(fill string) string { return fmt.Sprintf(`<circle cx="11" cy="8" r="5" fill="%s"/>`, fill) }
	cross := fmt.Sprintf(`<path d="M7 4L15 12M7 12L15 4" stroke="%s" stroke-width="2.6" stroke-linecap="round"/>`, htmlColFenced)
	item(bar(htmlColRunning), "running")
	item(bar(htmlColPaused), "paused (no poll, no heartbeat)")
	item(bar(htmlColCrashed), "crashed")
	item(`<line x1="1" y1="8" x2="21" y2="8" stroke="#c8c8c8" stroke-width="2" stroke-dasharray="2 4"/>`, "absent")
	item(`<text x="2" y="12" font-size="11" fill="#1a1a1a">g2</text>`, "generation (member epoch), partitions owned")
	item(bar(htmlColOverlap), "overlap window: two members own a partition")
	item(circle(htmlColOK), "write ok")
	item(fmt.Sprintf(`<rect x="6" y="3" width="9" height="9" fill="%s"/>`, htmlColOK), "commit ok")
	item(circle(htmlColFenced), "write or commit fenced")
	item(cross, "write fenced or aborted (partition lane)")
	item(circle(htmlColGrey), "failed")
	item(fmt.Sprintf(`<circle cx="11" cy="8" r="4" fill="#ffffff" stroke="%s" stroke-width="2"/>`, htmlColGrey), "unknown")
	item(circle(htmlColNoID), "refused: no identity yet")
	item(fmt.Sprintf(`<path d="M11 3L16 12L6 12Z" fill="%s"/>`, htmlColGrey), "recovery failed")
	item(fmt.Sprintf(`<path d="M7 4L15 12M7 12L15 4" stroke="%s" stroke-width="2.6" stroke-linecap="round"/>`, htmlColGrey), "abandoned by a crash")
	item(circle(htmlColOK)+fmt.Sprintf(`<circle cx="11" cy="8" r="7" fill="none" stroke="%s" stroke-width="1.8"/>`, htmlColStale), "stale write that landed over a newer one")
	item(fmt.Sprintf(`<path d="M1 13L9 13L9 3L21 3" fill="none" stroke="%s" stroke-width="2"/>`, htmlColHW), "high watermark")
	item(fmt.Sprintf(`<path d="M1 8L21 8" stroke="%s" stroke-width="2" stroke-dasharray="4 3"/>`, htmlColLSO), "last stable offset")
	item(fmt.Sprintf(`<rect x="1" y="3" width="20" height="10" fill="%s"/>`, htmlColOpenTxn), "open transaction: lso below hw (numbers: hw/lso)")
	item(fmt.Sprintf(`<path d="M11 0L19 8L11 16L3 8Z" fill="%s"/>`, htmlColViolation), "invariant violations (count)")
	b.p("</ul>\n</footer>\n")
}

// htmlTextW estimates the width of s in px at size (DejaVu Sans is wide).
func htmlTextW(s string, size int, bold bool) int {
	per := 0.58
	if bold {
		per = 0.66
	}
	return int(float64(len([]rune(s)))*per*float64(size) + 0.5)
}

// htmlFit cuts s with an ellipsis to fit w px at size.
func htmlFit(s string, w, size int, bold bool) string {
	if htmlTextW(s, size, bold) <= w {
		return s
	}
	r := []rune(s)
	for len(r) > 0 && htmlTextW(string(r)+"…", size, bold) > w {
		r = r[:len(r)-1]
	}
	if len(r) == 0 {
		return ""
	}
	return string(r) + "…"
}

func htmlEsc(s string) string { return html.EscapeString(s) }

// htmlBuf is the page being written.
type htmlBuf struct{ strings.Builder }

func (b *htmlBuf) p(format string, args ...any) {
	if len(args) == 0 {
		b.WriteString(format)
		return
	}
	fmt.Fprintf(b, format, args...)
}
