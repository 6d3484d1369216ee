package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
)

// htmlTestRun runs steps in mode on the simulated cluster and assembles
// the run as the command does, checked against exp.
func htmlTestRun(t *testing.T, steps []world.Step, mode store.Mode, exp []world.Expectation) run {
	t.Helper()
	w, err := world.New(world.Config{Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var vs []world.Violation
	for _, st := range steps {
		vs = append(vs, w.Apply(st)...)
	}
	vs = append(vs, w.Quiesce()...)
	ops := w.Recorder().Ops()
	cfg := w.Config()
	r := run{
		Mode: mode, ModeName: map[store.Mode]string{store.Plain: "plain", store.Transactional: "transactional"}[mode],
		Members: cfg.Members, Partitions: cfg.Partitions, Steps: steps,
		Ops: ops, Violations: vs, Final: history.FinalStates(ops),
	}
	for _, e := range exp {
		why := e.Failed(world.Run{Ops: ops, Violations: vs})
		r.Expectations = append(r.Expectations, verdict{Says: e.Says, Met: why == "", Why: why})
	}
	return r
}

// htmlTestReport is kafka-flow#732 in both modes, as the command's default.
func htmlTestReport(t *testing.T) report {
	t.Helper()
	s, ok := world.ScenarioNamed("stale-flush-on-revoke")
	if !ok || !slices.EqualFunc(s.Steps, world.Scenario732, func(a, b world.Step) bool { return a == b }) {
		t.Fatal("stale-flush-on-revoke is not world.Scenario732")
	}
	rep := report{Scenario: s.Name, Summary: s.Summary, World: "sim"}
	for _, mode := range []store.Mode{store.Plain, store.Transactional} {
		rep.Runs = append(rep.Runs, htmlTestRun(t, s.Steps, mode, s.Expect(mode)))
	}
	return rep
}

func htmlRender(t *testing.T, rep report) string {
	t.Helper()
	var buf bytes.Buffer
	if err := writeHTML(&buf, rep); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// htmlNode is an element of the page, read with encoding/xml.
type htmlNode struct {
	name     string
	attr     map[string]string
	children []*htmlNode
	text     strings.Builder // the text of the element and its descendants
}

func htmlParse(t *testing.T, doc string) *htmlNode {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	d.Strict = true
	root := &htmlNode{name: "#document", attr: map[string]string{}}
	stack := []*htmlNode{root}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			line := strings.Split(doc, "\n")
			n, _ := d.InputPos()
			ctx := ""
			if n-1 < len(line) && n > 0 {
				ctx = line[n-1]
			}
			t.Fatalf("not well-formed: %v (line %d: %.200s)", err, n, ctx)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			n := &htmlNode{name: tok.Name.Local, attr: map[string]string{}}
			for _, a := range tok.Attr {
				n.attr[a.Name.Local] = a.Value
			}
			top := stack[len(stack)-1]
			top.children = append(top.children, n)
			stack = append(stack, n)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			for _, n := range stack {
				n.text.Write(tok)
			}
		}
	}
	if len(stack) != 1 {
		t.Fatalf("%d elements left open", len(stack)-1)
	}
	return root
}

// find returns the elements under n that match.
func (n *htmlNode) find(match func(*htmlNode) bool) []*htmlNode {
	var out []*htmlNode
	for _, c := range n.children {
		if match(c) {
			out = append(out, c)
		}
		out = append(out, c.find(match)...)
	}
	return out
}

func (n *htmlNode) hasClass(c string) bool {
	return slices.Contains(strings.Fields(n.attr["class"]), c)
}

func htmlWithClass(name, class string) func(*htmlNode) bool {
	return func(n *htmlNode) bool { return n.name == name && n.hasClass(class) }
}

func htmlWithAttrs(name string, kv ...string) func(*htmlNode) bool {
	return func(n *htmlNode) bool {
		if n.name != name {
			return false
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if n.attr[kv[i]] != kv[i+1] {
				return false
			}
		}
		return true
	}
}

// htmlSection is the page's section of the run in mode.
func htmlSection(t *testing.T, page *htmlNode, mode string) *htmlNode {
	t.Helper()
	s := page.find(htmlWithAttrs("section", "data-mode", mode))
	if len(s) != 1 {
		t.Fatalf("%d sections for mode %s, want 1", len(s), mode)
	}
	return s[0]
}

func TestHTMLIsSelfContainedAndWellFormed(t *testing.T) {
	page := htmlRender(t, htmlTestReport(t))
	htmlParse(t, page)

	svgs := regexp.MustCompile(`(?s)<svg\b.*?</svg>`).FindAllString(page, -1)
	if len(svgs) < 3 { // a timeline per run and the legend
		t.Fatalf("%d SVG fragments, want at least 3", len(svgs))
	}
	for _, s := range svgs {
		htmlParse(t, s)
	}

	rest := strings.ReplaceAll(page, `xmlns="http://www.w3.org/2000/svg"`, "")
	for _, bad := range []string{"http://", "https://", "<script", "<link", "@import", "@font-face", " src=", "//fonts"} {
		if i := strings.Index(rest, bad); i >= 0 {
			t.Errorf("the page has %q: ...%s...", bad, rest[max(0, i-60):min(len(rest), i+60)])
		}
	}
	for _, u := range regexp.MustCompile(`url\(([^)]*)\)`).FindAllStringSubmatch(page, -1) {
		if !strings.HasPrefix(u[1], "#") {
			t.Errorf("the page refers to %s", u[0])
		}
	}
}

func TestHTMLShowsTheStaleOwnerAndTheFence(t *testing.T) {
	rep := htmlTestReport(t)
	page := htmlParse(t, htmlRender(t, rep))

	if !strings.Contains(page.text.String(), rep.Scenario) || !strings.Contains(page.text.String(), rep.Summary) {
		t.Error("the heading does not name the scenario and its summary")
	}
	for _, r := range rep.Runs {
		sec := htmlSection(t, page, r.ModeName)

		// A lane per member that appears in the history, one per snapshot partition.
		want := map[string]bool{}
		for _, op := range r.Ops {
			if op.Member >= 0 {
				want[strconv.Itoa(op.Member)] = true
			}
		}
		got := map[string]bool{}
		for _, l := range sec.find(htmlWithClass("g", "member")) {
			if got[l.attr["data-member"]] {
				t.Errorf("%s: two lanes for member %s", r.ModeName, l.attr["data-member"])
			}
			got[l.attr["data-member"]] = true
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: member lanes %v, want one per member that appears %v", r.ModeName, got, want)
		}
		lanes := sec.find(htmlWithClass("g", "partition"))
		if len(lanes) != r.Partitions {
			t.Errorf("%s: %d partition lanes, want %d", r.ModeName, len(lanes), r.Partitions)
		}
		for i, l := range lanes {
			if l.attr["data-partition"] != strconv.Itoa(i) {
				t.Errorf("%s: partition lane %d is for p%s", r.ModeName, i, l.attr["data-partition"])
			}
		}

		// Every write and commit is marked in its member's lane, with its
		// outcome and the op's text as its tooltip.
		for _, op := range r.Ops {
			if op.Kind != history.Write && op.Kind != history.Commit {
				continue
			}
			lane := sec.find(htmlWithAttrs("g", "class", "lane member", "data-member", strconv.Itoa(op.Member)))
			if len(lane) != 1 {
				t.Fatalf("%s: no lane for m%d", r.ModeName, op.Member)
			}
			marks := lane[0].find(func(n *htmlNode) bool {
				return n.hasClass("op") && strings.Contains(n.text.String(), op.String())
			})
			if len(marks) != 1 || marks[0].attr["data-outcome"] != string(op.Outcome) || marks[0].attr["data-step"] != strconv.Itoa(op.StepNo) {
				t.Errorf("%s: %s is not marked once in m%d's lane with its outcome and step", r.ModeName, op, op.Member)
			}
		}

		// The overlap window: m1 took over at step 13 while m0, paused,
		// still believed it owned both partitions; it flushes at step 20.
		shaded := map[string]bool{}
		for _, c := range sec.find(htmlWithClass("rect", "overlap")) {
			shaded[c.attr["data-step"]] = true
		}
		for s := 13; s <= 20; s++ {
			if !shaded[strconv.Itoa(s)] {
				t.Errorf("%s: step %d is not shaded as the overlap window", r.ModeName, s)
			}
		}
		for s := 1; s < 13; s++ {
			if shaded[strconv.Itoa(s)] {
				t.Errorf("%s: step %d is shaded as the overlap window; only m0 owned anything", r.ModeName, s)
			}
		}

		// The expectations, each met.
		exps := sec.find(htmlWithClass("li", "expectation"))
		if len(exps) != len(r.Expectations) {
			t.Errorf("%s: %d expectations shown, want %d", r.ModeName, len(exps), len(r.Expectations))
		}
		for _, e := range exps {
			if e.attr["data-met"] != "true" {
				t.Errorf("%s: expectation shown as not met: %s", r.ModeName, e.text.String())
			}
		}
		if n := len(sec.find(htmlWithClass("li", "violation"))); n != len(r.Violations) {
			t.Errorf("%s: %d violations listed, want %d", r.ModeName, n, len(r.Violations))
		}
	}

	plain, txn := htmlSection(t, page, "plain"), htmlSection(t, page, "transactional")
	fencedWrite := htmlWithAttrs("g", "class", "op", "data-kind", "write", "data-outcome", "fenced")

	// Transactional: m0's stale flush at the last step is fenced, shown
	// in its lane and in p1's, and labelled.
	if n := len(txn.find(fencedWrite)); n == 0 {
		t.Error("transactional: no fenced write shown")
	}
	m0 := txn.find(htmlWithAttrs("g", "class", "lane member", "data-member", "0"))[0]
	last := strconv.Itoa(len(world.Scenario732))
	if len(m0.find(func(n *htmlNode) bool { return fencedWrite(n) && n.attr["data-step"] == last })) == 0 {
		t.Errorf("transactional: m0's write at step %s is not shown fenced", last)
	}
	if len(m0.find(func(n *htmlNode) bool {
		return htmlWithClass("text", "fenced")(n) && strings.Contains(n.text.String(), "fenced")
	})) == 0 {
		t.Error(`transactional: no "fenced" label in m0's lane`)
	}
	p1 := txn.find(htmlWithAttrs("g", "class", "lane partition", "data-partition", "1"))[0]
	if len(p1.find(fencedWrite)) == 0 {
		t.Error("transactional: the fenced write is not marked on snapshots p1")
	}
	if n := len(txn.find(htmlWithClass("circle", "stale"))); n != 0 {
		t.Errorf("transactional: %d stale writes shown landing", n)
	}

	// Plain: nothing fences the write; it lands, stale.
	if n := len(plain.find(fencedWrite)); n != 0 {
		t.Errorf("plain: %d fenced writes shown", n)
	}
	if n := len(plain.find(htmlWithClass("circle", "stale"))); n == 0 {
		t.Error("plain: m0's stale write is not shown landing")
	}
	if len(plain.find(htmlWithClass("g", "violation"))) == 0 {
		t.Error("plain: no violation marked on the timeline")
	}

	// The final state: key a is wrong in plain, right in transactional.
	if rows := plain.find(htmlWithAttrs("tr", "class", "key mismatch", "data-key", "a")); len(rows) != 1 {
		t.Error("plain: the final state of key a is not shown as a mismatch")
	}
	if rows := txn.find(htmlWithAttrs("tr", "data-key", "a")); len(rows) != 1 || rows[0].hasClass("mismatch") {
		t.Error("transactional: key a is missing from the final states or shown as a mismatch")
	}
	if rows := txn.find(func(n *htmlNode) bool { return n.name == "tr" && n.hasClass("mismatch") }); len(rows) != 0 {
		t.Errorf("transactional: %d final-state mismatches shown", len(rows))
	}
}

// Long runs scale the columns down to fit the page; short ones do not
// blow them up.
func TestHTMLScalesTheColumns(t *testing.T) {
	for _, n := range []int{1, 4} {
		var steps []world.Step
		for range n {
			steps = append(steps, world.Scenario732...)
		}
		rep := report{Scenario: "long", World: "sim", Runs: []run{htmlTestRun(t, steps, store.Transactional, nil)}}
		page := htmlParse(t, htmlRender(t, rep))
		svg := page.find(htmlWithClass("svg", "timeline"))
		if len(svg) != 1 {
			t.Fatalf("%d steps: %d timelines", len(steps), len(svg))
		}
		width, _ := strconv.Atoi(svg[0].attr["width"])
		if width < 600 || width > 1400 {
			t.Errorf("%d steps: the timeline is %d px wide, want 600 to 1400", len(steps), width)
		}
		if got := len(svg[0].find(htmlWithClass("g", "step"))); got != len(steps)+1 {
			t.Errorf("%d steps: %d step columns, want %d and the end", len(steps), got, len(steps))
		}
	}
}
