// Command chaos runs a keyed-state workload on a replicated Kafka cluster
// (it/kafka/cluster) while it injects faults one at a time, then checks
// that the state, the outputs and the offsets came through exactly.
//
// The workload: -members engine processes (this program, run as children
// with -member, each on a cache directory of its own) in one group over an
// input topic of -partitions partitions (replication factor 3), fed by a
// producer throughout. Every input record carries a unique sequence number
// (its value) and one of -keys keys. The fold keeps per key the count, the
// sum and an order-sensitive hash of the sequence numbers it folded, and
// emits one output per input naming the input's partition, offset and
// sequence number: exactly once under -mode eos (engine.Config.ExactlyOnce),
// at least once under -mode alo (kafkaio.Emitter); -mode both runs one
// after the other on fresh topics.
//
// The faults, in an order drawn from -seed (the same seed, the same
// schedule; it is printed at the start): an engine process SIGKILLed and
// started again on its directory, stopped cleanly (SIGTERM) and started
// again, SIGSTOPped until the group has moved its partitions away and then
// SIGCONTinued (a zombie that wakes up); a broker node SIGKILLed (in turn
// the active controller and the leaders of __transaction_state and
// __consumer_offsets partitions, as `it/kafka/cluster leaders` names them)
// and started again, and a node restarted cleanly; with -kills-in-outage,
// a node SIGKILLed, an engine process SIGKILLed while it is down, then
// the node and the engine started again. After each fault the
// run waits for recovery, observed: for a broker fault `cluster
// wait-healthy`, and for every fault every input partition running again
// on exactly one live member (the members' status lines) with every member
// owning some. Every wait has a deadline that fails the run naming what it
// waited for; nothing sleeps a fixed time to synchronise. With -duration
// the faults are spread over that time and the producer runs as long.
//
// Then, with the producer stopped and every partition's committed offset
// observed at the input's end, the verifier reads the topics back: (1)
// every key's last committed snapshot (read_committed) is the exact fold
// of its inputs in offset order; (2) read_committed, the output topic
// holds every input's output exactly once under eos, at least once under
// alo (the duplicates counted), and a read_committed consumer that read
// the outputs throughout the run saw exactly the same; (3) no committed snapshot of a key has a
// smaller count than the one before it (read_committed: a stale
// overwrite), and read_uncommitted regressions (aborted writes) are
// counted as information; (4) `kafka-transactions find-hanging` finds
// nothing on any broker, and no snapshot or output partition has its last
// stable offset below its end; (5) every partition's committed offset is
// the input's end. The report goes to stdout and, with -report FILE, as
// JSON to FILE; the exit status is 1 on any loss, any exactly-once
// duplicate, any stale overwrite, any hanging or open transaction, any
// member that died on its own, or any failed wait.
//
// The report also says whether a hanging transaction (one its coordinator
// forgot) was met: the store's log lines that abort or report one, or a
// held partition's error naming one; the holds the members' status showed
// (-abort-hanging runs the members with
// kafka.Config.AbortHangingTransactions); and the longest time a partition
// that was not held folded nothing while one was. -summarize prints one
// table of several runs' -report files: `make probe` (it/chaos/probe)
// repeats a run on a fresh single-node broker each time.
//
//	make chaos-short                                   # < 8 min: eos, 7 faults
//	make chaos CHAOSARGS='-seed 7'                     # the default size (21 faults), both modes
//	it/kafka/cluster run go run ./it/chaos -seed 7 -mode alo   # by hand
//	make probe PROBERUNS=7 PROBEARGS='-broker-kills 3'          # the fault probe, a fresh single node a run
//
// The cluster comes from SNAPFENCE_KAFKA_BROKERS and SNAPFENCE_KAFKA_CLUSTER
// (`it/kafka/cluster run` sets both); -brokers and -cluster override them.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// state is a key's state: what the verifier recomputes from the input.
type state struct {
	N   int64  `json:"n"`   // records folded
	Sum int64  `json:"sum"` // sum of their sequence numbers
	H   uint64 `json:"h"`   // order-sensitive hash of the sequence numbers
}

// step folds one sequence number into s; the verifier uses it too.
func (s state) step(seq int64) state {
	s.N++
	s.Sum += seq
	s.H = (s.H ^ uint64(seq)) * 1099511628211
	return s
}

// event is one line a member writes on stdout.
type event struct {
	Member  string  `json:"member"`
	Ev      string  `json:"ev"` // up, status, exit
	Running []int32 `json:"running,omitempty"`
	Other   []int32 `json:"other,omitempty"` // assigned, not running
	Live    bool    `json:"live"`
	At      int64   `json:"at"` // unix nanoseconds
	Err     string  `json:"err,omitempty"`
	// Held are the partitions waiting on a transaction the takeover did
	// not end (PartitionStatus.Held), HeldErr the first one's error.
	Held    []int32 `json:"held,omitempty"`
	HeldErr string  `json:"held_err,omitempty"`
	// Folds counts the records this incarnation folded, per partition:
	// the parent sees from it when a partition last made progress.
	Folds map[int32]int64 `json:"folds,omitempty"`
}

func main() {
	var (
		member  = flag.String("member", "", "run as a member process with this name (the parent starts them)")
		brokers = flag.String("brokers", os.Getenv("SNAPFENCE_KAFKA_BROKERS"), "bootstrap brokers, comma-separated (default $SNAPFENCE_KAFKA_BROKERS)")
		cluster = flag.String("cluster", os.Getenv("SNAPFENCE_KAFKA_CLUSTER"), "the it/kafka/cluster directory, for broker faults (default $SNAPFENCE_KAFKA_CLUSTER)")
		topic   = flag.String("topic", "", "member: input topic")
		output  = flag.String("output", "", "member: output topic")
		dir     = flag.String("dir", "", "member: cache directory")
		mode    = flag.String("mode", "both", "eos (exactly-once outputs), alo (at-least-once outputs) or both, one after the other; member: eos or alo")
		session = flag.Duration("session", 0, "kafkaio.Config.SessionTimeout of the members (0: the default, 10s)")
		abortH  = flag.Bool("abort-hanging", false, "the members run with kafka.Config.AbortHangingTransactions (they abort a hanging transaction of their own partition)")
		broken  = flag.String("break", "", "a negative control: the members' fold has a deliberate bug the verifier must catch: "+
			"double-output (two outputs an input: duplicates under eos) or lose-event (every 97th sequence number is not folded: state lost)")

		seed       = flag.Uint64("seed", 0, "the schedule's seed (0: from the clock; printed either way)")
		members    = flag.Int("members", 3, "engine processes")
		partitions = flag.Int("partitions", 16, "input partitions")
		keys       = flag.Int("keys", 1000, "keys, spread over the input")
		rate       = flag.Int("rate", 200, "input records a second")
		kills      = flag.Int("kills", -1, "engine SIGKILLs, round-robin over the members (-1: 3 per member)")
		stops      = flag.Int("stops", -1, "clean engine stops and starts (-1: one per member)")
		pauses     = flag.Int("pauses", -1, "engine SIGSTOPs past the session timeout, then SIGCONT (-1: one per member)")
		bkills     = flag.Int("broker-kills", -1, "broker SIGKILLs, each node in turn (-1: one per node)")
		brestarts  = flag.Int("broker-restarts", -1, "clean broker restarts, each node in turn (-1: one per node)")
		okills     = flag.Int("kills-in-outage", 0, "broker SIGKILLs during each of which an engine process is SIGKILLed, then the node and the engine restarted")
		outage     = flag.Duration("outage", 0, "with -kills-in-outage: how long the node stays down after the engine died")
		duration   = flag.Duration("duration", 0, "the producer runs at least this long after the steady state, the faults spread evenly over it (0: the faults back to back)")
		summarize  = flag.Bool("summarize", false, "print one table of the -report JSON files given as arguments (the probe's runs) and exit")
		timeout    = flag.Duration("recover-timeout", 3*time.Minute, "deadline of every wait for recovery")
		reportFile = flag.String("report", "", "also write the report as JSON to this file")
		keep       = flag.Bool("keep", false, "keep the members' directories and logs even if the run passed")
		verbose    = flag.Bool("v", false, "print every member status change")
		only       = flag.Bool("print-schedule", false, "print the schedule the flags and seed give (for a cluster of -nodes nodes) and exit")
		nodes      = flag.Int("nodes", 3, "with -print-schedule: the cluster's node count")
	)
	flag.Parse()
	if *summarize {
		if err := summarizeReports(os.Stdout, flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			os.Exit(2)
		}
		return
	}
	if *only {
		def := func(v *int, d int) {
			if *v < 0 {
				*v = d
			}
		}
		def(kills, 3**members)
		def(stops, *members)
		def(pauses, *members)
		def(bkills, *nodes)
		def(brestarts, *nodes)
		for i, f := range makeSchedule(*seed, *members, *nodes, *kills, *stops, *pauses, *bkills, *brestarts, *okills) {
			fmt.Printf("%2d  %s\n", i+1, f)
		}
		return
	}
	if *brokers == "" {
		fmt.Fprintln(os.Stderr, "chaos: no cluster: set -brokers or SNAPFENCE_KAFKA_BROKERS (it/kafka/cluster run does)")
		os.Exit(2)
	}
	seeds := strings.Split(*brokers, ",")
	if *member != "" {
		if err := runMember(*member, seeds, *topic, *output, *dir, *mode, *broken, *session, *abortH); err != nil {
			emit(event{Member: *member, Ev: "exit", Err: err.Error()})
			os.Exit(1)
		}
		emit(event{Member: *member, Ev: "exit"})
		return
	}
	switch *broken {
	case "", breakDoubleOutput, breakLoseEvent:
	default:
		fmt.Fprintf(os.Stderr, "chaos: -break %q: %s or %s\n", *broken, breakDoubleOutput, breakLoseEvent)
		os.Exit(2)
	}
	modes := []string{*mode}
	switch *mode {
	case "both":
		modes = []string{"eos", "alo"}
	case "eos", "alo":
	default:
		fmt.Fprintf(os.Stderr, "chaos: -mode %q: eos, alo or both\n", *mode)
		os.Exit(2)
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano()) % 1000000
	}
	def := func(v *int, d int) {
		if *v < 0 {
			*v = d
		}
	}
	def(kills, 3**members)
	def(stops, *members)
	def(pauses, *members)
	c := &chaos{
		seeds: seeds, clusterDir: *cluster, seed: *seed, members: *members, partitions: int32(*partitions),
		keys: *keys, rate: *rate, session: *session, timeout: *timeout, keep: *keep, verbose: *verbose, broken: *broken,
		abortHang: *abortH, duration: *duration, outage: *outage,
	}
	if err := c.openCluster(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	def(bkills, c.nodes)
	def(brestarts, c.nodes)
	if (*bkills > 0 || *brestarts > 0 || *okills > 0) && c.cluster == nil {
		fmt.Fprintln(os.Stderr, "chaos: broker faults need the cluster's directory: -cluster or SNAPFENCE_KAFKA_CLUSTER (it/kafka/cluster run sets it), or -broker-kills 0 -broker-restarts 0 -kills-in-outage 0")
		os.Exit(2)
	}
	c.schedule = makeSchedule(*seed, *members, c.nodes, *kills, *stops, *pauses, *bkills, *brestarts, *okills)

	// Every child dies with this process, however it ends: the deferred
	// kills on the normal paths, and this handler on a signal.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "chaos: %v: killing the members\n", s)
		c.killAll()
		os.Exit(1)
	}()
	rep, err := c.run(modes)
	c.killAll()
	if rep != nil {
		rep.print(os.Stdout)
		if *reportFile != "" {
			b, _ := json.MarshalIndent(rep, "", "  ")
			if werr := os.WriteFile(*reportFile, append(b, '\n'), 0o644); werr != nil {
				fmt.Fprintln(os.Stderr, "chaos:", werr)
				os.Exit(1)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	if rep.Verdict != "pass" {
		os.Exit(1)
	}
}

var emitMu sync.Mutex

func emit(ev event) {
	if ev.At == 0 {
		ev.At = time.Now().UnixNano()
	}
	b, _ := json.Marshal(ev)
	emitMu.Lock()
	defer emitMu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

// ---- the member process ----

// outputValue is an output's value: the input's partition, offset and
// sequence number.
func outputValue(p int32, off, seq int64) []byte {
	return fmt.Appendf(nil, "%d/%d/%d", p, off, seq)
}

// The -break bugs: negative controls of the verifier, each of which a
// run must fail.
const (
	breakDoubleOutput = "double-output"
	breakLoseEvent    = "lose-event"
)

func runMember(name string, seeds []string, topic, output, dir, mode, broken string, session time.Duration, abortHanging bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("member", name)
	b, err := kafka.New(ctx, kafka.Config{Mode: store.Transactional, SeedBrokers: seeds, TransactionalIDPrefix: topic, Logger: log,
		AbortHangingTransactions: abortHanging})
	if err != nil {
		return err
	}
	defer b.Close()
	var foldsMu sync.Mutex
	folds := map[int32]int64{}
	fold := func(key []byte, s state, exists bool, rec engine.Record) (engine.Result[state], error) {
		foldsMu.Lock()
		folds[rec.Partition]++
		foldsMu.Unlock()
		seq, err := strconv.ParseInt(string(rec.Value), 10, 64)
		if err != nil {
			return engine.Result[state]{}, fmt.Errorf("input %d/%d: value %q: %w", rec.Partition, rec.Offset, rec.Value, err)
		}
		if !exists {
			s = state{}
		}
		out := engine.Output{Topic: output, Key: key, Value: outputValue(rec.Partition, rec.Offset, seq)}
		switch {
		case broken == breakDoubleOutput:
			return engine.Set(s.step(seq)).With(out).With(out), nil
		case broken == breakLoseEvent && seq%97 == 0:
			return engine.Set(s).With(out), nil
		}
		return engine.Set(s.step(seq)).With(out), nil
	}
	cfg := engine.Config[state]{Fold: fold, Codec: engine.JSON[state](), Store: b, Dir: dir, Logger: log}
	var em *kafkaio.Emitter
	switch mode {
	case "eos":
		cfg.ExactlyOnce, cfg.OutputTopics = true, []string{output}
	case "alo":
		cfg.PersistInterval = 200 * time.Millisecond
		cfg.CommitInterval = 200 * time.Millisecond
		em, err = kafkaio.NewEmitter(kafkaio.EmitterConfig{SeedBrokers: seeds, Logger: log})
		if err != nil {
			return err
		}
		cfg.StartEmit = em.StartEmit
	default:
		return fmt.Errorf("member: -mode %q: eos or alo", mode)
	}
	e, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer func() {
		_ = e.Close()
		if em != nil {
			_ = em.Close()
		}
	}()
	r, err := e.Join(kafkaio.Config{SeedBrokers: seeds, Group: topic + "-group",
		Topics: []string{topic}, SessionTimeout: session})
	if err != nil {
		return err
	}
	emit(event{Member: name, Ev: "up", Live: true})
	// The status line: every change, and every second anyway, so that the
	// parent knows how fresh its picture of this member is.
	done := make(chan struct{})
	var reporting sync.WaitGroup
	reporting.Add(1)
	go func() {
		defer reporting.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		var last event
		lastAt := time.Time{}
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			st := r.Status()
			ev := event{Member: name, Ev: "status", Live: st.Live}
			for _, ps := range st.Partitions {
				if ps.State == engine.StateRunning {
					ev.Running = append(ev.Running, ps.Input.Partition)
				} else {
					ev.Other = append(ev.Other, ps.Input.Partition)
				}
				if ps.Held {
					ev.Held = append(ev.Held, ps.Input.Partition)
					if ev.HeldErr == "" && ps.Err != nil {
						ev.HeldErr = ps.Err.Error()
					}
				}
			}
			slices.Sort(ev.Running)
			slices.Sort(ev.Other)
			slices.Sort(ev.Held)
			foldsMu.Lock()
			ev.Folds = maps.Clone(folds)
			foldsMu.Unlock()
			if st.Err != nil {
				ev.Err = st.Err.Error()
			}
			if slices.Equal(ev.Running, last.Running) && slices.Equal(ev.Other, last.Other) && ev.Live == last.Live &&
				ev.Err == last.Err && slices.Equal(ev.Held, last.Held) && maps.Equal(ev.Folds, last.Folds) && time.Since(lastAt) < time.Second {
				continue
			}
			emit(ev)
			last, lastAt = ev, time.Now()
		}
	}()
	err = r.Run(ctx)
	close(done)
	reporting.Wait()
	return err
}
