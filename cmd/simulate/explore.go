package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/props"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// defaultExploreSteps is the length of an explored scenario.
const defaultExploreSteps = 30

// maxShown is how many violations -explore shows in full.
const maxShown = 3

// explore runs o.explore random scenarios on the simulated cluster
// (seeds o.seed, o.seed+1, ...; the protocols in turn unless -protocol),
// with a progress line on stderr, and shows each violation found (up to
// maxShown) shrunk to a minimal trace with the command that replays it.
//
// Transactional mode (the default) expects no violation; Plain mode is
// the negative control and expects at least one.
func explore(ctx context.Context, o options, stdout, stderr io.Writer) int {
	mode := store.Transactional
	if o.mode == "plain" {
		mode = store.Plain
	}
	protocols := []sim.Protocol{sim.ClassicEager, sim.ClassicCooperative, sim.Consumer}
	if o.protocol != "" {
		p, _ := parseProtocol(o.protocol)
		protocols = []sim.Protocol{p}
	}
	n := o.steps
	if n == 0 {
		n = defaultExploreSteps
	}
	gen := props.ScenarioGen(world.Config{Mode: mode}.WithDefaults(), n)
	progress := newProgress(stderr, o.explore)
	p := newPrinter(stdout, o)
	found := 0
	start := time.Now()
	for i := range o.explore {
		if ctx.Err() != nil {
			break
		}
		seed := o.seed + uint64(i)
		protocol := protocols[i%len(protocols)]
		steps := gen.Example(int(seed))
		vs := runSteps(mode, protocol, seed, steps)
		if len(vs) > 0 {
			found++
			if found <= maxShown {
				progress.clear()
				p.counterexample(mode, protocol, seed, n, steps, vs[0])
			}
		}
		progress.update(i+1, found)
	}
	progress.done(found)
	elapsed := time.Since(start)
	p.printf("\n%d scenarios of %d steps (%s mode) in %s: %.0f a minute; %d with a violation\n",
		o.explore, n, modeName(mode), elapsed.Round(time.Millisecond), float64(o.explore)/elapsed.Minutes(), found)
	switch {
	case mode == store.Transactional && found == 0:
		p.printf("%s\n", p.paint(green, "as expected: every invariant held in every scenario"))
		return exitOK
	case mode == store.Plain && found > 0:
		p.printf("%s\n", p.paint(green, "as expected: without the fence, random scenarios corrupt the state"))
		return exitOK
	case mode == store.Plain:
		p.printf("%s\n", p.paint(red, "unexpected: Plain mode (no fence) held every invariant; more scenarios may find it"))
		return exitViolated
	}
	p.printf("%s\n", p.paint(red, "unexpected: an invariant was violated with the fence"))
	return exitViolated
}

// runSteps runs steps on a fresh simulated world and returns the
// violations of the first step that had any (or of quiescence).
func runSteps(mode store.Mode, protocol sim.Protocol, seed uint64, steps []world.Step) []world.Violation {
	w, err := world.New(world.Config{Seed: seed, Mode: mode, Protocol: protocol})
	if err != nil {
		panic(fmt.Sprintf("simulate: the simulated world: %v", err))
	}
	return world.RunSteps(w, steps)
}

// shrink removes steps while the scenario still violates the same
// invariant (world.Shrink). The simulated world is deterministic, so the
// result replays.
func shrink(mode store.Mode, protocol sim.Protocol, seed uint64, steps []world.Step, invariant int) []world.Step {
	return world.Shrink(steps, func(s []world.Step) bool {
		return world.HasViolation(runSteps(mode, protocol, seed, s), invariant)
	})
}

// counterexample shows a violation: shrunk, with the commands that
// replay it.
func (p *printer) counterexample(mode store.Mode, protocol sim.Protocol, seed uint64, n int, steps []world.Step, v world.Violation) {
	minimal := shrink(mode, protocol, seed, steps, v.Invariant)
	vs := runSteps(mode, protocol, seed, minimal)
	if len(vs) > 0 {
		v = vs[0]
	}
	p.printf("\n%s seed %d (%s, %s mode)\n", p.paint(red, "violation:"), seed, protocolName(protocol), modeName(mode))
	p.printf("  %s\n", v)
	p.printf("  minimal trace (%d of %d steps):\n", len(minimal), len(steps))
	for _, line := range strings.Split(strings.TrimRight(world.Trace(minimal), "\n"), "\n") {
		p.printf("    %s\n", line)
	}
	file := filepath.Join(os.TempDir(), fmt.Sprintf("simulate-%s-%s-seed%d.json", modeName(mode), protocolName(protocol), seed))
	raw, _ := json.Marshal(minimal)
	if err := os.WriteFile(file, raw, 0o644); err == nil {
		p.printf("  replay the minimal trace: go run ./cmd/simulate -replay %s -protocol %s -mode %s\n", file, protocolName(protocol), modeName(mode))
	}
	p.printf("  replay the whole scenario: go run ./cmd/simulate -seed %d -steps %d -protocol %s -mode %s\n", seed, n, protocolName(protocol), modeName(mode))
}

// progress is a progress line: a bar on a terminal, a line every tenth
// otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	total int
	start time.Time
	last  time.Time
	tenth int
}

func newProgress(w io.Writer, total int) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progress{w: w, tty: tty, total: total, start: time.Now()}
}

func (p *progress) line(done, found int) string {
	const width = 30
	filled := width * done / max(p.total, 1)
	rate := float64(done) / time.Since(p.start).Minutes()
	return fmt.Sprintf("[%s%s] %*d/%d  %7.0f scenarios/min  %d violations",
		strings.Repeat("#", filled), strings.Repeat("-", width-filled), len(fmt.Sprint(p.total)), done, p.total, rate, found)
}

func (p *progress) update(done, found int) {
	if p.tty {
		if time.Since(p.last) < 100*time.Millisecond && done < p.total {
			return
		}
		p.last = time.Now()
		fmt.Fprintf(p.w, "\r%s", p.line(done, found))
		return
	}
	if tenth := 10 * done / max(p.total, 1); tenth > p.tenth {
		p.tenth = tenth
		fmt.Fprintln(p.w, p.line(done, found))
	}
}

func (p *progress) clear() {
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", 90))
	}
}

func (p *progress) done(found int) {
	if p.tty {
		fmt.Fprintln(p.w)
	}
}
