package timeline

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

// testRun runs steps in mode on the simulated cluster and assembles the
// run as cmd/simulate does, checked against exp.
func testRun(t *testing.T, steps []world.Step, mode store.Mode, exp []world.Expectation) Run {
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
	name := map[store.Mode]string{store.Plain: "plain", store.Transactional: "transactional"}[mode]
	title := strings.ToUpper(name[:1]) + name[1:]
	r := Run{
		Label: name, Title: title, Heading: title + " mode",
		Members: cfg.Members, Partitions: cfg.Partitions, Steps: steps,
		Ops: ops, Violations: vs, Final: history.FinalStates(ops),
	}
	for _, e := range exp {
		why := e.Failed(world.Run{Ops: ops, Violations: vs})
		r.Expectations = append(r.Expectations, Expectation{Says: e.Says, Met: why == "", Why: why})
	}
	return r
}

// testPage is kafka-flow#732 in both modes, as cmd/simulate's default.
func testPage(t *testing.T) Page {
	t.Helper()
	s, ok := world.ScenarioNamed("stale-flush-on-revoke")
	if !ok || !slices.EqualFunc(s.Steps, world.Scenario732, func(a, b world.Step) bool { return a == b }) {
		t.Fatal("stale-flush-on-revoke is not world.Scenario732")
	}
	page := Page{Scenario: s.Name, Summary: s.Summary, World: "sim"}
	for _, mode := range []store.Mode{store.Plain, store.Transactional} {
		page.Runs = append(page.Runs, testRun(t, s.Steps, mode, s.Expect(mode)))
	}
	return page
}

func render(t *testing.T, page Page) string {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, page); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// node is an element of the page, read with encoding/xml.
type node struct {
	name     string
	attr     map[string]string
	children []*node
	text     strings.Builder // the text of the element and its descendants
}

func parse(t *testing.T, doc string) *node {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	d.Strict = true
	root := &node{name: "#document", attr: map[string]string{}}
	stack := []*node{root}
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
			n := &node{name: tok.Name.Local, attr: map[string]string{}}
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
func (n *node) find(match func(*node) bool) []*node {
	var out []*node
	for _, c := range n.children {
		if match(c) {
			out = append(out, c)
		}
		out = append(out, c.find(match)...)
	}
	return out
}

func (n *node) hasClass(c string) bool {
	return slices.Contains(strings.Fields(n.attr["class"]), c)
}

func withClass(name, class string) func(*node) bool {
	return func(n *node) bool { return n.name == name && n.hasClass(class) }
}

func withAttrs(name string, kv ...string) func(*node) bool {
	return func(n *node) bool {
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

// section is the page's section of the run in mode.
func section(t *testing.T, page *node, mode string) *node {
	t.Helper()
	s := page.find(withAttrs("section", "data-mode", mode))
	if len(s) != 1 {
		t.Fatalf("%d sections for mode %s, want 1", len(s), mode)
	}
	return s[0]
}

func TestHTMLIsSelfContainedAndWellFormed(t *testing.T) {
	page := render(t, testPage(t))
	parse(t, page)

	svgs := regexp.MustCompile(`(?s)<svg\b.*?</svg>`).FindAllString(page, -1)
	if len(svgs) < 3 { // a timeline per run and the legend
		t.Fatalf("%d SVG fragments, want at least 3", len(svgs))
	}
	for _, s := range svgs {
		parse(t, s)
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
	rep := testPage(t)
	page := parse(t, render(t, rep))

	if !strings.Contains(page.text.String(), rep.Scenario) || !strings.Contains(page.text.String(), rep.Summary) {
		t.Error("the heading does not name the scenario and its summary")
	}
	for _, r := range rep.Runs {
		sec := section(t, page, r.Label)

		// A lane per member that appears in the history, one per snapshot partition.
		want := map[string]bool{}
		for _, op := range r.Ops {
			if op.Member >= 0 {
				want[strconv.Itoa(op.Member)] = true
			}
		}
		got := map[string]bool{}
		for _, l := range sec.find(withClass("g", "member")) {
			if got[l.attr["data-member"]] {
				t.Errorf("%s: two lanes for member %s", r.Label, l.attr["data-member"])
			}
			got[l.attr["data-member"]] = true
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: member lanes %v, want one per member that appears %v", r.Label, got, want)
		}
		lanes := sec.find(withClass("g", "partition"))
		if len(lanes) != r.Partitions {
			t.Errorf("%s: %d partition lanes, want %d", r.Label, len(lanes), r.Partitions)
		}
		for i, l := range lanes {
			if l.attr["data-partition"] != strconv.Itoa(i) {
				t.Errorf("%s: partition lane %d is for p%s", r.Label, i, l.attr["data-partition"])
			}
		}

		// Every write and commit is marked in its member's lane, with its
		// outcome and the op's text as its tooltip.
		for _, op := range r.Ops {
			if op.Kind != history.Write && op.Kind != history.Commit {
				continue
			}
			lane := sec.find(withAttrs("g", "class", "lane member", "data-member", strconv.Itoa(op.Member)))
			if len(lane) != 1 {
				t.Fatalf("%s: no lane for m%d", r.Label, op.Member)
			}
			marks := lane[0].find(func(n *node) bool {
				return n.hasClass("op") && strings.Contains(n.text.String(), op.String())
			})
			if len(marks) != 1 || marks[0].attr["data-outcome"] != string(op.Outcome) || marks[0].attr["data-step"] != strconv.Itoa(op.StepNo) {
				t.Errorf("%s: %s is not marked once in m%d's lane with its outcome and step", r.Label, op, op.Member)
			}
		}

		// The overlap window: m1 took over at step 12 (its client's group
		// work while time passed) while m0, paused, still believed it
		// owned both partitions; it flushes at step 20.
		shaded := map[string]bool{}
		for _, c := range sec.find(withClass("rect", "overlap")) {
			shaded[c.attr["data-step"]] = true
		}
		for s := 12; s <= 20; s++ {
			if !shaded[strconv.Itoa(s)] {
				t.Errorf("%s: step %d is not shaded as the overlap window", r.Label, s)
			}
		}
		for s := 1; s < 12; s++ {
			if shaded[strconv.Itoa(s)] {
				t.Errorf("%s: step %d is shaded as the overlap window; only m0 owned anything", r.Label, s)
			}
		}

		// The expectations, each met.
		exps := sec.find(withClass("li", "expectation"))
		if len(exps) != len(r.Expectations) {
			t.Errorf("%s: %d expectations shown, want %d", r.Label, len(exps), len(r.Expectations))
		}
		for _, e := range exps {
			if e.attr["data-met"] != "true" {
				t.Errorf("%s: expectation shown as not met: %s", r.Label, e.text.String())
			}
		}
		if n := len(sec.find(withClass("li", "violation"))); n != len(r.Violations) {
			t.Errorf("%s: %d violations listed, want %d", r.Label, n, len(r.Violations))
		}
	}

	plain, txn := section(t, page, "plain"), section(t, page, "transactional")
	fencedWrite := withAttrs("g", "class", "op", "data-kind", "write", "data-outcome", "fenced")

	// Transactional: m0's stale flush at the last step is fenced, shown
	// in its lane and in p1's, and labelled.
	if n := len(txn.find(fencedWrite)); n == 0 {
		t.Error("transactional: no fenced write shown")
	}
	m0 := txn.find(withAttrs("g", "class", "lane member", "data-member", "0"))[0]
	last := strconv.Itoa(len(world.Scenario732))
	if len(m0.find(func(n *node) bool { return fencedWrite(n) && n.attr["data-step"] == last })) == 0 {
		t.Errorf("transactional: m0's write at step %s is not shown fenced", last)
	}
	if len(m0.find(func(n *node) bool {
		return withClass("text", "fenced")(n) && strings.Contains(n.text.String(), "fenced")
	})) == 0 {
		t.Error(`transactional: no "fenced" label in m0's lane`)
	}
	p1 := txn.find(withAttrs("g", "class", "lane partition", "data-partition", "1"))[0]
	if len(p1.find(fencedWrite)) == 0 {
		t.Error("transactional: the fenced write is not marked on snapshots p1")
	}
	if n := len(txn.find(withClass("circle", "stale"))); n != 0 {
		t.Errorf("transactional: %d stale writes shown landing", n)
	}

	// Plain: nothing fences the write; it lands, stale.
	if n := len(plain.find(fencedWrite)); n != 0 {
		t.Errorf("plain: %d fenced writes shown", n)
	}
	if n := len(plain.find(withClass("circle", "stale"))); n == 0 {
		t.Error("plain: m0's stale write is not shown landing")
	}
	if len(plain.find(withClass("g", "violation"))) == 0 {
		t.Error("plain: no violation marked on the timeline")
	}

	// The final state: key a is wrong in plain, right in transactional.
	if rows := plain.find(withAttrs("tr", "class", "key mismatch", "data-key", "a")); len(rows) != 1 {
		t.Error("plain: the final state of key a is not shown as a mismatch")
	}
	if rows := txn.find(withAttrs("tr", "data-key", "a")); len(rows) != 1 || rows[0].hasClass("mismatch") {
		t.Error("transactional: key a is missing from the final states or shown as a mismatch")
	}
	if rows := txn.find(func(n *node) bool { return n.name == "tr" && n.hasClass("mismatch") }); len(rows) != 0 {
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
		rep := Page{Scenario: "long", World: "sim", Runs: []Run{testRun(t, steps, store.Transactional, nil)}}
		page := parse(t, render(t, rep))
		svg := page.find(withClass("svg", "timeline"))
		if len(svg) != 1 {
			t.Fatalf("%d steps: %d timelines", len(steps), len(svg))
		}
		width, _ := strconv.Atoi(svg[0].attr["width"])
		if width < 600 || width > 1400 {
			t.Errorf("%d steps: the timeline is %d px wide, want 600 to 1400", len(steps), width)
		}
		if got := len(svg[0].find(withClass("g", "step"))); got != len(steps)+1 {
			t.Errorf("%d steps: %d step columns, want %d and the end", len(steps), got, len(steps))
		}
	}
}
