// Command snapfence inspects, checks, repairs and resets a snapfence
// application on its Kafka cluster: the partitions and who serves them,
// the committed state of a key or a partition, the invariants that can be
// checked from outside, the application's hanging transactions, and a
// reset or a skip past one record that keeps the state and the offsets
// together.
//
//	snapfence status  -brokers localhost:9092 -app order-totals -input orders
//	snapfence get     ... -codec json alice
//	snapfence dump    ... -partition 0
//	snapfence verify  ...
//	snapfence hanging ... [-abort]
//	snapfence reset   ... -to-earliest [-dry-run=false]
//	snapfence reset   ... -to-datetime 2026-12-01T00:00:00Z -drop-state [-dry-run=false]
//	snapfence skip    ... -partition 2 [-dry-run=false]
//
// Every verb takes the same connection settings as the engine (brokers,
// TLS, SASL) from flags or a JSON file (-config), prints text for people
// or JSON for scripts (-json), and answers -h. It exits 0 on success, 1
// when it fails or finds a violation or refuses, 2 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"
)

// verb is one of the command's verbs.
type verb struct {
	name, args, summary string
	// run does the verb; its report goes to out. A returned errFound
	// exits 1 without another message.
	run func(ctx context.Context, v *invocation) error
	// extra binds the verb's own flags.
	extra func(fs *flag.FlagSet, v *invocation)
}

// invocation is a verb's flags and where it prints.
type invocation struct {
	flags
	fs        *flag.FlagSet
	out       io.Writer
	partition int
	codec     string
	offset    int64
	abort     bool
	dryRun    bool
	earliest  bool
	datetime  string
	dropState bool
	log       *slog.Logger
}

// errFound: the verb found what it reports (a violation, a refusal); its
// report said so already.
var errFound = errors.New("found")

var verbs []verb

func init() {
	verbs = []verb{
		{name: "status", summary: "per input partition: the member serving it, offsets, lag, the snapshot partition's ends and open transactions", run: runStatus},
		{name: "get", args: "KEY", summary: "a key's committed state and the input offset it reflects", run: runGet, extra: stateFlags},
		{name: "dump", summary: "every key's committed state in one snapshot partition", run: runDump, extra: stateFlags},
		{name: "verify", summary: "check the snapshot topic's invariants from outside; exit 1 naming each violation", run: runVerify},
		{name: "hanging", summary: "list the application's hanging transactions; -abort those proven its own", run: runHanging,
			extra: func(fs *flag.FlagSet, v *invocation) {
				fs.BoolVar(&v.abort, "abort", false, "abort each partition's hanging transactions when every one is proven of its own transactional.id")
			}},
		{name: "reset", summary: "reprocess from scratch or from a time: rewind the input offsets and clear the state together (no member may run)", run: runReset,
			extra: func(fs *flag.FlagSet, v *invocation) {
				fs.BoolVar(&v.earliest, "to-earliest", false, "reprocess the whole input")
				fs.StringVar(&v.datetime, "to-datetime", "", "reprocess the input from this `time` (RFC 3339), with the state cleared")
				fs.BoolVar(&v.dropState, "drop-state", false, "confirm that -to-datetime deletes the whole state: the state after it is the fold of the input from that time on only")
				fs.BoolVar(&v.dryRun, "dry-run", true, "print the plan only; -dry-run=false carries it out")
			}},
		{name: "skip", summary: "move one stopped partition past the record it stops on, keeping the state exact (the partition must not be served)", run: runSkip,
			extra: func(fs *flag.FlagSet, v *invocation) {
				fs.IntVar(&v.partition, "partition", -1, "the input `partition` to move (required)")
				fs.Int64Var(&v.offset, "offset", -1, "the `offset` of the record to skip: must be the partition's committed offset (default: that offset)")
				fs.BoolVar(&v.dryRun, "dry-run", true, "print the plan only; -dry-run=false carries it out")
			}},
	}
}

func stateFlags(fs *flag.FlagSet, v *invocation) {
	fs.IntVar(&v.partition, "partition", -1, "the snapshot `partition` (default for get: the key's partition under Kafka's default partitioner)")
	fs.StringVar(&v.codec, "codec", "raw", "decode states with this `codec`: raw, json, string, int64 or uint64 (engine's built-in codecs)")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command with args, and returns its exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	var vb *verb
	for i := range verbs {
		if verbs[i].name == args[0] {
			vb = &verbs[i]
		}
	}
	if vb == nil {
		fmt.Fprintf(stderr, "snapfence: unknown verb %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	inv := &invocation{out: stdout}
	fs := flag.NewFlagSet("snapfence "+vb.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	inv.fs = fs
	inv.bind(fs)
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this `long`")
	verbose := fs.Bool("v", false, "log the store's diagnostics to stderr")
	if vb.extra != nil {
		vb.extra(fs, inv)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: snapfence %s [flags] %s\n\n%s.\n\nflags:\n", vb.name, vb.args, vb.summary)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if *verbose {
		inv.log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	if err := vb.run(ctx, inv); err != nil {
		if !errors.Is(err, errFound) {
			fmt.Fprintf(stderr, "snapfence %s: %v\n", vb.name, err)
		}
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

// usageError is a wrong use of a verb's flags or arguments.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usage(w io.Writer) {
	fmt.Fprintf(w, "snapfence inspects, checks, repairs and resets a snapfence application on Kafka.\n\nusage: snapfence VERB [flags] [args]\n\nverbs:\n")
	for _, v := range verbs {
		fmt.Fprintf(w, "  %-8s %s\n", v.name, v.summary)
	}
	fmt.Fprintf(w, `
Every verb takes -brokers, -app and -input (or -config FILE, a JSON file
with "brokers", "application", "input", "group", "snapshot_topic",
"transactional_id_prefix", "plain", "tls": {"ca_file", "cert_file",
"key_file", "server_name"} and "sasl": {"mechanism", "user",
"password_file"}), -json for JSON output, and -h for its own flags.
The SASL password is read from -sasl-password-file or $SNAPFENCE_SASL_PASSWORD.
Exit codes: 0 done, 1 failed, found a violation or refused, 2 usage.
`)
}
