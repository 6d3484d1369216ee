// Command simulate runs rebalance scenarios against snapfence and shows
// what happens: a stale owner tries to overwrite a partition's snapshots,
// the state is corrupted without the fence (Plain mode) and the write is
// fenced with it (Transactional mode).
//
// With no arguments it runs kafka-flow#732 on the embedded simulated
// cluster in both modes, prints a timeline of each and a verdict per
// invariant, and exits 0 when each mode behaved as expected.
//
//	go run ./cmd/simulate                      # #732, plain then transactional
//	go run ./cmd/simulate -list                # the named scenarios
//	go run ./cmd/simulate -scenario NAME       # one of them
//	go run ./cmd/simulate -seed 7 -steps 40    # a random scenario
//	go run ./cmd/simulate -explore 1000        # 1000 random scenarios
//	go run ./cmd/simulate -html out.html       # the timeline as swimlanes
//	go run ./cmd/simulate -json -              # the history as JSON lines
//	go run ./cmd/simulate -world kfake         # on kfake, the real client
//	go run ./cmd/simulate -world kafka -brokers 127.0.0.1:9092
//	go run ./cmd/simulate -outputs compare     # at-least-once vs exactly-once outputs
//
// Exit codes: 0 every expectation met; 1 an invariant was violated where
// it should hold, or held where a negative control expects a violation;
// 2 a usage or setup error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// Exit codes.
const (
	exitOK       = 0
	exitViolated = 1
	exitUsage    = 2
)

func main() {
	os.Exit(simulate(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command's flags.
type options struct {
	scenario  string
	list      bool
	mode      string
	world     string
	protocol  string
	seed      uint64
	steps     int
	explore   int
	replay    string
	jsonOut   string
	htmlOut   string
	verbose   bool
	noColor   bool
	outputs   string // none, at-least-once, exactly-once or compare
	kafka     kafkaOptions
	seedGiven bool
	stderr    io.Writer    // where -v's notes of a world go (not a flag)
	bridge    *kfakeBridge // the kfake world's test binary, built once (not a flag)
}

// usageError is a flag or setup error: exit 2, with its message.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.scenario, "scenario", "", "run the named scenario (default stale-flush-on-revoke, kafka-flow#732; -list names them)")
	fs.BoolVar(&o.list, "list", false, "list the named scenarios and exit")
	fs.StringVar(&o.mode, "mode", "", "plain or transactional (default: each mode the scenario has expectations for; transactional for random scenarios)")
	fs.StringVar(&o.world, "world", "sim", "where to run: sim (the simulated cluster), kfake (franz-go against kfake in virtual time) or kafka (a real broker, -brokers)")
	fs.StringVar(&o.protocol, "protocol", "", "the group protocol: eager, cooperative or consumer (default: the scenario's; eager for random scenarios; -explore rotates all three)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of a random scenario (with -steps), or the first seed of -explore")
	fs.IntVar(&o.steps, "steps", 0, "run a random scenario of this many steps (seeded by -seed)")
	fs.IntVar(&o.explore, "explore", 0, "run this many random scenarios (sim world), report violations with a minimal trace")
	fs.StringVar(&o.replay, "replay", "", "run the steps in this JSON file (as -explore writes them)")
	fs.StringVar(&o.jsonOut, "json", "", "write the history as JSON lines to this file (- for standard output)")
	fs.StringVar(&o.htmlOut, "html", "", "write the timeline as a self-contained HTML page to this file")
	fs.BoolVar(&o.verbose, "v", false, "show every event of the history (input events, every snapshot read, log ends)")
	fs.BoolVar(&o.noColor, "no-color", false, "no ANSI colours (default: colours only on a terminal)")
	fs.StringVar(&o.outputs, "outputs", outputsNone, "the folds' outputs to an output topic, read back read_committed and checked (invariant 8): none, at-least-once, exactly-once, or compare (both, in Transactional mode; default scenario "+defaultOutputsScenario+")")
	o.kafka.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: simulate [flags]\n\nRuns rebalance scenarios against snapfence and shows a stale owner's writes corrupt the state without the fence and fenced with it.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return o, usagef("unexpected argument %q (flags only; -h lists them)", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) { o.seedGiven = o.seedGiven || f.Name == "seed" })
	switch o.mode {
	case "", "plain", "transactional":
	default:
		return o, usagef("-mode %q: want plain or transactional", o.mode)
	}
	switch o.world {
	case "sim", "kfake", "kafka":
	default:
		return o, usagef("-world %q: want sim, kfake or kafka", o.world)
	}
	if _, err := parseProtocol(o.protocol); err != nil {
		return o, err
	}
	if err := validateOutputs(o); err != nil {
		return o, err
	}
	if o.steps < 0 || o.explore < 0 {
		return o, usagef("-steps and -explore take a positive number")
	}
	exclusive := 0
	for _, set := range []bool{o.scenario != "", o.steps > 0 && o.explore == 0, o.explore > 0, o.replay != "", o.list} {
		if set {
			exclusive++
		}
	}
	if exclusive > 1 {
		return o, usagef("-scenario, -steps, -explore, -replay and -list exclude each other")
	}
	if o.seedGiven && o.steps == 0 && o.explore == 0 {
		return o, usagef("-seed seeds a random scenario: give -steps N (or -explore N)")
	}
	if o.explore > 0 && o.world != "sim" {
		return o, usagef("-explore runs on the simulated cluster only (-world sim): thousands of scenarios a minute")
	}
	if o.world == "kafka" {
		if err := o.kafka.validate(); err != nil {
			return o, err
		}
	} else if o.kafka.set() {
		return o, usagef("-brokers, -tls* and -sasl* are for -world kafka")
	}
	return o, nil
}

func parseProtocol(s string) (sim.Protocol, error) {
	switch s {
	case "":
		return 0, nil
	case "eager":
		return sim.ClassicEager, nil
	case "cooperative":
		return sim.ClassicCooperative, nil
	case "consumer":
		return sim.Consumer, nil
	}
	return 0, usagef("-protocol %q: want eager, cooperative or consumer", s)
}

func protocolName(p sim.Protocol) string {
	switch p {
	case sim.ClassicCooperative:
		return "cooperative"
	case sim.Consumer:
		return "consumer"
	}
	return "eager"
}

// simulate is the command: it returns the exit code.
func simulate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "simulate: %v\n", err)
		return exitUsage
	}
	o.stderr = stderr
	o.bridge = &kfakeBridge{}
	defer o.bridge.close()
	out := newPrinter(stdout, o)
	if o.list {
		listScenarios(stdout, o.outputs != outputsNone)
		return exitOK
	}
	if o.explore > 0 {
		return explore(ctx, o, stdout, stderr)
	}
	rep, err := buildAndRun(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "simulate: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) {
			return exitUsage
		}
		return exitUsage // a world that cannot be set up
	}
	if err := writeOutputs(o, rep, stdout); err != nil {
		fmt.Fprintf(stderr, "simulate: %v\n", err)
		return exitUsage
	}
	if o.jsonOut != "-" {
		out.report(rep)
	}
	for _, r := range rep.Runs {
		if !r.ok() {
			return exitViolated
		}
	}
	return exitOK
}

// listScenarios prints the named scenarios, one line each; with
// outputs (-list -outputs MODE), the output scenarios after them.
func listScenarios(w io.Writer, outputs bool) {
	width := 0
	for _, s := range world.Scenarios {
		width = max(width, len(s.Name))
	}
	if outputs {
		for _, s := range outputScenarios {
			width = max(width, len(s.Name))
		}
		defer func() {
			for _, s := range outputScenarios {
				fmt.Fprintf(w, "%-*s  %-11s  %-26s  %s\n", width, s.Name, protocolName(protocolOf(s)), "outputs (transactional)", s.Summary)
			}
		}()
	}
	for _, s := range world.Scenarios {
		modes := []string{}
		if s.Transactional != nil {
			modes = append(modes, "transactional")
		}
		if s.Plain != nil {
			modes = append(modes, "plain")
		}
		fmt.Fprintf(w, "%-*s  %-11s  %-26s  %s\n", width, s.Name, protocolName(s.Protocol), strings.Join(modes, ", "), s.Summary)
	}
}

// modes are the modes to run: the one asked for, or every mode the
// scenario has expectations for.
func modes(o options, s world.Scenario) ([]store.Mode, error) {
	switch o.mode {
	case "plain":
		return []store.Mode{store.Plain}, nil
	case "transactional":
		return []store.Mode{store.Transactional}, nil
	}
	var out []store.Mode
	if s.Plain != nil {
		out = append(out, store.Plain)
	}
	if s.Transactional != nil {
		out = append(out, store.Transactional)
	}
	return out, nil
}
