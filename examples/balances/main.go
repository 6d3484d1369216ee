// Command balances is a runnable example of the snapfence engine: per-account
// balances folded from a topic of transactions.
//
// Input topic "transactions": key = account, value = "+N", "-N" or "close".
// The fold keeps each account's balance (an int64, encoded as decimal text
// by the built-in engine.Int64 codec), and emits "account: balance" (or
// "account: closed") to topic "balances" for every change, through the
// built-in at-least-once emitter (kafkaio.Emitter), which creates the
// topic if it is missing. Snapshots go to the compacted topic
// "balances-example-transactions-snapshots" in Kafka transactions that also commit the input
// offsets (store/kafka, Transactional mode), so the state survives
// restarts exactly once; the outputs are at-least-once.
//
// With no flags it starts an embedded kfake cluster on 127.0.0.1, produces
// a few hundred deterministic transactions, runs the engine until every
// input offset is committed, produces a second batch, runs a second engine
// (a restart: it recovers the state from the snapshots and folds only the
// new batch), then prints each account's final balance, as the last output
// record in "balances" says, beside the balance summed from the
// transactions read back from the input topic. It exits non-zero if any
// differ.
//
// With -brokers host:port it does the same against a real cluster: the
// topics are created if missing, the group is "balances-example". On a
// cluster where earlier runs left data, the expected balances are summed
// over every transaction still in the input topic, which matches the engine
// only if retention has deleted none of them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

const (
	inputTopic     = "transactions"
	application    = "balances-example"
	snapshotTopic  = "balances-example-transactions-snapshots" // kafka.DefaultSnapshotTopic(application, inputTopic)
	outputTopic    = "balances"
	group          = application
	partitions     = 3
	commitDeadline = time.Minute // a run that has not committed everything by then fails
)

var accounts = []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "balances:", err)
		os.Exit(1)
	}
}

// run is the whole program; main and the test call it.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("balances", flag.ContinueOnError)
	fs.SetOutput(stdout)
	brokers := fs.String("brokers", "", "Kafka brokers, host:port[,host:port...] (default: an embedded kfake cluster)")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	out := &lockedWriter{w: stdout} // the engine's logger writes from other goroutines

	seeds := strings.Split(*brokers, ",")
	if *brokers == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return fmt.Errorf("starting kfake: %w", err)
		}
		defer c.Close()
		seeds = c.ListenAddrs()
		fmt.Fprintf(out, "embedded kfake cluster on %s\n", seeds[0])
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := createTopics(ctx, cl); err != nil {
		return err
	}

	rng := rand.New(rand.NewPCG(1, 2)) // the same transactions every run
	for i, n := range []int{300, 60} {
		if err := produce(ctx, cl, transactions(rng, n)); err != nil {
			return err
		}
		fmt.Fprintf(out, "run %d: produced %d transactions\n", i+1, n)
		folded, err := runEngine(ctx, seeds, cl, out)
		if err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		fmt.Fprintf(out, "run %d: folded %d transactions; every input offset committed\n", i+1, folded)
	}

	want, err := readBalances(ctx, seeds, inputTopic, sumTransactions)
	if err != nil {
		return err
	}
	got, err := readBalances(ctx, seeds, outputTopic, lastOutput)
	if err != nil {
		return err
	}
	return report(out, got, want)
}

// transactions makes n transactions; every account gets at least one.
func transactions(rng *rand.Rand, n int) []*kgo.Record {
	var recs []*kgo.Record
	for i := range n {
		acct := accounts[i%len(accounts)]
		if i >= len(accounts) {
			acct = accounts[rng.IntN(len(accounts))]
		}
		v := "+" + strconv.Itoa(1+rng.IntN(100))
		switch r := rng.IntN(100); {
		case r < 30:
			v = "-" + strconv.Itoa(1+rng.IntN(50))
		case r < 32 && i >= len(accounts):
			v = "close"
		}
		recs = append(recs, &kgo.Record{Topic: inputTopic, Key: []byte(acct), Value: []byte(v)})
	}
	return recs
}

func produce(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) error {
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("producing transactions: %w", err)
	}
	return nil
}

// fold is the user's logic: one transaction into one account's balance.
func fold(key []byte, balance int64, exists bool, rec engine.Record) (engine.Result[int64], error) {
	acct := string(key)
	if string(rec.Value) == "close" {
		if !exists {
			return engine.Keep[int64](), nil
		}
		return engine.Delete[int64]().With(output(acct, "closed")), nil
	}
	n, err := strconv.ParseInt(string(rec.Value), 10, 64)
	if err != nil {
		return engine.Result[int64]{}, fmt.Errorf("bad amount %q", rec.Value)
	}
	balance += n
	return engine.Set(balance).With(output(acct, strconv.FormatInt(balance, 10))), nil
}

func output(acct, balance string) engine.Output {
	return engine.Output{Topic: outputTopic, Key: []byte(acct), Value: []byte(acct + ": " + balance)}
}

// runEngine runs one engine, as one process would, until every input offset
// is committed, then stops it (a clean leave). It returns how many records
// the fold folded.
func runEngine(ctx context.Context, seeds []string, cl *kgo.Client, out io.Writer) (int, error) {
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, inputTopic)
	if err != nil {
		return 0, err
	}
	if err := ends.Error(); err != nil {
		return 0, err
	}
	committed := newCommitWatch(ends)

	backend, err := kafka.New(ctx, kafka.Config{
		Mode: store.Transactional, SeedBrokers: seeds, Application: application,
		Observer: committed,
	})
	if err != nil {
		return 0, err
	}
	defer backend.Close()
	// The outputs' producer: idempotent, each output in the partition of
	// its key; a delivery failure fails the poll, which is replayed.
	emitter, err := kafkaio.NewEmitter(kafkaio.EmitterConfig{
		SeedBrokers: seeds, CreateTopics: true, TopicPartitions: partitions,
	})
	if err != nil {
		return 0, err
	}
	defer emitter.Close() // after the engine's Run has returned
	var folded atomic.Int64
	e, err := engine.New(engine.Config[int64]{
		Fold: func(key []byte, balance int64, exists bool, rec engine.Record) (engine.Result[int64], error) {
			folded.Add(1)
			return fold(key, balance, exists, rec)
		},
		Codec: engine.Int64(),
		Store: backend,
		// No Dir: the local cache is in memory. It is rebuilt from the
		// snapshots on every start either way.
		// Outputs are produced before the offsets that cover them are
		// committed (every CommitInterval, 1 s by default); a crash in
		// between emits them again. StartEmit: the next poll is folded
		// while a poll's outputs are on their way.
		StartEmit: emitter.StartEmit,
		// The emitter checks (and creates) the output topics, at the
		// start and at each new topic's first output.
		CheckOutputTopics: emitter.CheckTopics,
		Logger:            slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{ReplaceAttr: dropTime})),
	})
	if err != nil {
		return 0, err
	}
	defer e.Close()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- e.Run(runCtx, kafkaio.Config{SeedBrokers: seeds, Group: group, Topics: []string{inputTopic}})
	}()
	deadline := time.NewTimer(commitDeadline)
	defer deadline.Stop()
	select {
	case <-committed.done:
		cancel() // everything is committed: stop, leaving the group
		err = <-done
	case err = <-done:
		if err == nil {
			err = errors.New("the engine stopped before committing every input offset")
		}
	case <-deadline.C:
		cancel()
		<-done
		err = fmt.Errorf("not every input offset was committed after %s; committed: %s", commitDeadline, committed)
	}
	return int(folded.Load()), err
}

// commitWatch is the store's Observer: it closes done once a committed
// transaction of every input partition carried the partition's end offset.
type commitWatch struct {
	mu     sync.Mutex
	target map[int32]int64
	at     map[int32]int64
	done   chan struct{}
}

func newCommitWatch(ends kadm.ListedOffsets) *commitWatch {
	w := &commitWatch{target: map[int32]int64{}, at: map[int32]int64{}, done: make(chan struct{})}
	ends.Each(func(o kadm.ListedOffset) { w.target[o.Partition] = o.Offset })
	return w
}

func (w *commitWatch) OnTransaction(e store.TransactionEvent) {
	if e.Err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.at[e.Input.Partition] = max(w.at[e.Input.Partition], e.Offset)
	for p, end := range w.target {
		if w.at[p] < end {
			return
		}
	}
	select {
	case <-w.done:
	default:
		close(w.done)
	}
}

func (w *commitWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("%v of %v", w.at, w.target)
}

// readBalances reads a topic from its start to its current end and folds
// every record into balances with apply.
func readBalances(ctx context.Context, seeds []string, topic string, apply func(map[string]int, *kgo.Record) error) (map[string]int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	left := map[int32]int64{} // partition -> end offset still to reach
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	balances := map[string]int{}
	rctx, cancel := context.WithTimeout(ctx, commitDeadline)
	defer cancel()
	for len(left) > 0 {
		fs := cl.PollFetches(rctx)
		if err := fs.Err0(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", topic, err)
		}
		var aerr error
		fs.EachRecord(func(r *kgo.Record) {
			if err := apply(balances, r); err != nil && aerr == nil {
				aerr = fmt.Errorf("%s/%d offset %d: %w", topic, r.Partition, r.Offset, err)
			}
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
		if aerr != nil {
			return nil, aerr
		}
	}
	return balances, nil
}

// sumTransactions applies one transaction: the expected balances, computed
// without the engine.
func sumTransactions(b map[string]int, r *kgo.Record) error {
	if string(r.Value) == "close" {
		delete(b, string(r.Key))
		return nil
	}
	n, err := strconv.Atoi(string(r.Value))
	b[string(r.Key)] += n
	return err
}

// lastOutput keeps each account's last "account: balance" output.
func lastOutput(b map[string]int, r *kgo.Record) error {
	_, v, _ := strings.Cut(string(r.Value), ": ")
	if v == "closed" {
		delete(b, string(r.Key))
		return nil
	}
	n, err := strconv.Atoi(v)
	b[string(r.Key)] = n
	return err
}

// report prints the table and fails if any account differs.
func report(out io.Writer, got, want map[string]int) error {
	var names []string
	for k := range got {
		names = append(names, k)
	}
	for k := range want {
		names = append(names, k)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	show := func(m map[string]int, k string) string {
		if v, ok := m[k]; ok {
			return strconv.Itoa(v)
		}
		return "closed"
	}
	fmt.Fprintf(out, "\n%-8s %8s %9s\n", "account", "engine", "expected")
	bad := 0
	for _, k := range names {
		g, w := show(got, k), show(want, k)
		mark := ""
		if g != w {
			mark, bad = "  MISMATCH", bad+1
		}
		fmt.Fprintf(out, "%-8s %8s %9s%s\n", k, g, w, mark)
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d accounts differ from the transactions", bad, len(names))
	}
	fmt.Fprintf(out, "all %d accounts match\n", len(names))
	return nil
}

// createTopics creates the program's input and snapshot topics (an
// existing one is kept) and returns once each is served: kafka.CreateTopic
// waits until every partition answers, as a broker answers
// UNKNOWN_TOPIC_OR_PARTITION for a moment after it created a topic. (The
// emitter creates the output topic; the backend could create the snapshot
// topic too, with kafka.Config.CreateTopics.)
func createTopics(ctx context.Context, cl *kgo.Client) error {
	compact := "compact"
	for topic, configs := range map[string]map[string]*string{
		inputTopic:    nil,
		snapshotTopic: {"cleanup.policy": &compact},
	} {
		if err := kafka.CreateTopic(ctx, cl, topic, partitions, -1, configs); err != nil {
			return err
		}
	}
	return nil
}

// lockedWriter serialises writes from the engine's logger and the program.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// dropTime keeps the engine's log lines free of timestamps.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
