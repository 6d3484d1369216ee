// Command enrichment is a runnable example of the snapfence engine as a
// consume-transform-produce service with exactly-once output: an order
// enrichment service reading "order_events" and writing "enriched_orders"
// for billing and analytics.
//
// Input topic "order_events": key = order id, value = a JSON order event,
// {"id":"ev-00001","order":"o-0001","type":"created","seller":"s-1",
// "amount":1250}, then "paid", "shipped" or "cancelled" for the same order.
// The per-key state is the order: status, seller, amount, event count. Each
// event emits one record to "enriched_orders" (key = order id): the event,
// its input position ("partition:offset"), the order's state after it, and
// the seller's data (name, country, commission rate, the commission on the
// order's amount). An order whose seller is not in the seller table gives
// records marked "unknown_seller" (and "seller_error" if the seller's row
// is not JSON); an event that is not JSON, or makes no sense in the
// order's status (shipped before paid, anything after cancelled), gives a
// record marked "invalid" with the reason, and leaves the status as it
// was. Neither stops the service.
//
// Seller data comes from the compacted topic "sellers" (key = seller id,
// value = JSON seller), which another service keeps. Each instance follows
// it live: a view.View with view.Config.Plain, a read_committed replica
// read through the instance's own store backend (as each process has its
// own), kept following by View.Run, and looked up by the fold (View.Get),
// as a Kafka Streams GlobalKTable is. The view is in engine.Config.Tables,
// so a partition folds nothing until the view has read the topic up to
// where it ended when the view opened: no order is enriched against a
// table still loading. A seller change reaches the records folded after
// the view applied it, with no restart. The table is not part of the
// engine's state because that state is per input partition (a snapshot of
// a key lives in the partition's snapshot topic partition and moves with
// it on a rebalance), while every partition needs every seller; and
// sellers are not keyed by order id, so they cannot be co-partitioned with
// the orders. If "sellers" is empty, the program seeds it from a built-in
// static table, so a run needs nothing else.
//
// A lookup is not replay-stable: a record replayed after a crash or a
// rebalance is joined with the seller's newest row, which may not be the
// row its first fold saw (docs/design.md, "Lookup joins"). An enrichment
// that wants the current seller takes that; this run makes the check
// exact by changing the table only between the batches, when nothing is
// left to replay: every record's seller row is known.
//
// By default the outputs are exactly-once (engine.Config.ExactlyOnce, on a
// Transactional store/kafka backend): they are produced by the input
// partition's transactional producer in the transaction that also writes
// the snapshots of the orders the batch changed and commits the input
// offset after it. With -at-least-once they go out through Emit and the
// built-in at-least-once emitter (kafkaio.Emitter, an idempotent
// producer) instead, before the offsets that cover them are committed, for
// comparison. The state is an Order, stored as JSON by the built-in
// engine.JSON codec.
//
// The run: two instances of the service (two engines in one consumer
// group) share the three input partitions. A first batch of order events
// is produced and folded until every input offset is committed. Then
// seller s-1's commission rate goes up 3 points in "sellers", and the run
// waits until the views of both instances show the new row (it looks
// again at each change a view applies). A second batch is produced, and
// instance A is killed at the end of the poll in
// which it folds the first events of it: no flush, no revoke, no commit
// after that poll (at least once, it is killed right after emitting the
// poll's outputs, before the commit that poll could have made). It prints
// how many events it folded that no commit of its covers: exactly once,
// their outputs were only in its memory, in the open batch; at least once,
// they are in "enriched_orders" already. A killed process's session would
// expire after the session timeout; to spare the wait the dead instance's
// consumer leaves the group (its revoke reaches no engine: the process is
// dead), and instance B takes A's partitions over (aborting any
// transaction A left open) and replays them from the committed offsets.
// Then "enriched_orders" is read read_committed and
// checked against the input: every input event must have exactly one
// enriched record (counted by input position), with the right content (the
// seller joined from the table: a record of the first batch carries the
// seller rows the run found, one of the second batch, replays by B
// included, s-1's new row; the order's state as folding the order's
// events once each, in order, gives). The summary gives events in,
// outputs read, duplicates, missing and wrong records, and how many
// records of s-1's orders carry its old and its new row; a run in which
// no later record carries the new row fails. Exactly-once, any
// duplicate, missing or wrong record fails the run (exit status 1);
// at-least-once, duplicates are expected after the kill (outputs A emitted
// but never committed are emitted again by B) and only missing or wrong
// records fail it.
//
// Run it on an embedded kfake cluster on 127.0.0.1:
//
//	go run ./examples/enrichment
//	go run ./examples/enrichment -at-least-once
//
// or against a real cluster:
//
//	go run ./examples/enrichment -brokers 127.0.0.1:9092
//
// Against a cluster the topics are created if missing (3 partitions,
// "sellers" 1; the broker's default replication; kafka.CreateTopic returns
// once a new topic is served), under a prefix: -prefix, by default
// "enrichment-<UTC time>-" so that runs do not meet. A run leaves behind the
// topics <prefix>order_events, <prefix>order_events-snapshots (compacted),
// <prefix>enriched_orders and <prefix>sellers (compacted), the consumer
// group <prefix>enrichment and the transactional ids
// <prefix>enrichment-<prefix>order_events-<partition>. A run with the
// prefix of an earlier one continues from that run's committed offsets
// (and raises s-1's rate again) and checks the whole input topic; the
// earlier runs' records without their seller data, as only those runs
// knew where their update fell.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"
	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/internal/input"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

const (
	partitions = 3
	// deadline bounds every wait of a run: joining, committing, reading.
	deadline = 2 * time.Minute
	// Batch sizes of the two phases, in events.
	firstBatch  = 300
	secondBatch = 200
)

// topics are a run's names, under its prefix.
type topics struct {
	input, snapshots, output, sellers, group, txnPrefix string
}

func names(prefix string) topics {
	input := prefix + "order_events"
	return topics{
		input:     input,
		snapshots: kafka.DefaultSnapshotTopic(prefix+"enrichment", input),
		output:    prefix + "enriched_orders",
		sellers:   prefix + "sellers",
		group:     prefix + "enrichment",
		txnPrefix: prefix + "enrichment",
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "enrichment:", err)
		os.Exit(1)
	}
}

// run is the whole program; main and the tests call it.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("enrichment", flag.ContinueOnError)
	fs.SetOutput(stdout)
	brokers := fs.String("brokers", "", "Kafka brokers, host:port[,host:port...] (default: an embedded kfake cluster)")
	prefix := fs.String("prefix", "", `prefix of the topics, group and transactional ids (default: none embedded, "enrichment-<UTC time>-" with -brokers)`)
	atLeastOnce := fs.Bool("at-least-once", false, "emit the outputs with the at-least-once emitter (Emit) instead of in the input's transactions")
	verbose := fs.Bool("v", false, "print the engine's logs")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	out := &lockedWriter{w: stdout} // the engine's logger writes from other goroutines
	logOut := io.Discard
	if *verbose {
		logOut = out
	}
	logger := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{ReplaceAttr: dropTime}))

	seeds := strings.Split(*brokers, ",")
	if *brokers == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return fmt.Errorf("starting kfake: %w", err)
		}
		defer c.Close()
		seeds = c.ListenAddrs()
		fmt.Fprintf(out, "embedded kfake cluster on %s\n", seeds[0])
	} else if *prefix == "" {
		*prefix = "enrichment-" + time.Now().UTC().Format("20060102T150405.000000") + "-"
	}
	t := names(*prefix)
	mode := "exactly-once"
	if *atLeastOnce {
		mode = "at-least-once"
	}
	fmt.Fprintf(out, "mode %s; topics %s -> %s, sellers %s\n", mode, t.input, t.output, t.sellers)

	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := createTopics(ctx, cl, t); err != nil {
		return err
	}
	// The table as it is before the run changes it, and where the run's
	// input starts: what the check expects of the first batch.
	sellers, err := readSellers(ctx, seeds, cl, t.sellers, out)
	if err != nil {
		return err
	}
	runStart, err := endOffsets(ctx, cl, t.input)
	if err != nil {
		return err
	}

	s := &service{seeds: seeds, t: t, exactlyOnce: !*atLeastOnce,
		logger: logger, committed: newCommitWatch()}
	a, err := s.start(ctx, "A")
	if err != nil {
		return err
	}
	defer a.stop()
	b, err := s.start(ctx, "B")
	if err != nil {
		return err
	}
	defer b.stop()
	if err := awaitSplit(ctx, a, b); err != nil {
		return err
	}

	rng := rand.New(rand.NewPCG(1, 2)) // the same events every run
	gen := newGenerator(rng)
	if err := s.produceAndAwait(ctx, cl, gen.events(firstBatch), out, "first", a, b); err != nil {
		return err
	}
	// Every record of the first batch is folded and committed; the
	// seller changes now, and the second batch is produced only once
	// both instances' views show the change, so that every record of it
	// (replays included) must carry the new row.
	upd, err := s.updateSeller(ctx, cl, sellers, out, a, b)
	if err != nil {
		return err
	}

	a.killAt.Store(int64(gen.seq) + 1) // A dies once it folds an event of the second batch
	evs := gen.events(secondBatch)
	if err := produce(ctx, cl, t.input, evs); err != nil {
		return err
	}
	fmt.Fprintf(out, "second batch: produced %d events\n", len(evs))
	select {
	case <-a.done:
		if !errors.Is(a.err, errKilled) {
			return fmt.Errorf("instance A stopped before it was killed: %v", a.err)
		}
	case <-ctx.Done():
		return fmt.Errorf("instance A never folded the second batch: %w", ctx.Err())
	}
	pending := a.crash()
	fmt.Fprintf(out, "instance A killed after folding %d events it never committed; instance B takes its partitions over\n", pending)
	if err := s.awaitCommitted(ctx, cl, b); err != nil {
		return fmt.Errorf("second batch: %w", err)
	}
	fmt.Fprintln(out, "second batch: every input offset committed")
	if err := b.stop(); err != nil {
		return fmt.Errorf("instance B: %w", err)
	}

	res, err := check(ctx, seeds, t, runStart, sellers, upd)
	if err != nil {
		return err
	}
	return res.report(out, s.exactlyOnce)
}

// awaitSplit waits until the two instances share the input partitions, so
// that killing A hands work over to B.
func awaitSplit(ctx context.Context, a, b *instance) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		na, nb := a.flows(), b.flows()
		if na > 0 && nb > 0 && na+nb == partitions {
			return nil
		}
		select {
		case <-tick.C:
		case <-a.done:
			return fmt.Errorf("instance A stopped: %v", a.err)
		case <-b.done:
			return fmt.Errorf("instance B stopped: %v", b.err)
		case <-ctx.Done():
			return fmt.Errorf("the instances did not share the partitions (A %d, B %d): %w", na, nb, ctx.Err())
		}
	}
}

// ---- the service ----

// Event is an input record's value.
type Event struct {
	ID     string `json:"id"`
	Order  string `json:"order"`
	Type   string `json:"type"` // created, paid, shipped, cancelled
	Seller string `json:"seller,omitempty"`
	Amount int64  `json:"amount,omitempty"` // cents; created only
}

// Order is the per-key state.
type Order struct {
	Status string `json:"status"`
	Seller string `json:"seller"`
	Amount int64  `json:"amount"`
	Events int    `json:"events"`
}

// Seller is a value of the sellers table.
type Seller struct {
	Name          string `json:"name"`
	Country       string `json:"country"`
	CommissionBPS int64  `json:"commission_bps"` // basis points
}

// Enriched is an output record's value.
type Enriched struct {
	Input         string  `json:"input"` // the input event's "partition:offset"
	Event         Event   `json:"event"`
	Order         Order   `json:"order"`
	Seller        *Seller `json:"seller,omitempty"`
	UnknownSeller bool    `json:"unknown_seller,omitempty"`
	SellerError   string  `json:"seller_error,omitempty"` // the seller's row does not decode
	Commission    int64   `json:"commission"`             // cents
	Invalid       string  `json:"invalid,omitempty"`
}

// apply folds one event into an order. Transitions that make no sense
// (paid before created, anything after cancelled) count the event and keep
// the status; the enriched record says so.
func apply(o Order, exists bool, ev Event) (Order, string) {
	o.Events++
	switch {
	case ev.Type == "created" && !exists:
		o.Status, o.Seller, o.Amount = "created", ev.Seller, ev.Amount
		return o, ""
	case !exists:
		o.Status = "unknown"
	case o.Status == "cancelled":
	case ev.Type == "paid" && o.Status == "created",
		ev.Type == "shipped" && o.Status == "paid",
		ev.Type == "cancelled" && o.Status != "shipped":
		o.Status = ev.Type
		return o, ""
	}
	return o, fmt.Sprintf("%s ignored in status %s", ev.Type, o.Status)
}

// sellerTable is where the fold looks sellers up: an instance's live
// view of the sellers topic (*view.View[Seller]), or, for the check and
// the tests, a map.
type sellerTable interface {
	Get(id []byte) (Seller, bool, error)
}

// sellerMap is a sellerTable held in memory.
type sellerMap map[string]Seller

func (m sellerMap) Get(id []byte) (Seller, bool, error) {
	s, ok := m[string(id)]
	return s, ok, nil
}

// enrich folds an input record into its order and makes the enriched
// record: the fold's logic, shared by the check. folded is false for a
// record that is not an event of the order: the order is unchanged. A
// seller row that does not decode gives a record marked with the error,
// as an unknown seller does: bad data in the table does not stop the
// service.
func enrich(sellers sellerTable, o Order, exists bool, rec engine.Record) (_ Order, _ Enriched, folded bool) {
	out := Enriched{Input: fmt.Sprintf("%d:%d", rec.Partition, rec.Offset)}
	var ev Event
	if err := json.Unmarshal(rec.Value, &ev); err != nil || ev.Order != string(rec.Key) {
		// Not an event of this order: recorded, not folded.
		out.Invalid = fmt.Sprintf("not an event of order %q: %q", rec.Key, rec.Value)
		out.Order = o
		return o, out, false
	}
	out.Event = ev
	o, out.Invalid = apply(o, exists, ev)
	out.Order = o
	switch s, ok, err := sellers.Get([]byte(o.Seller)); {
	case err != nil:
		out.UnknownSeller = true
		out.SellerError = err.Error()
	case ok:
		out.Seller = &s
		out.Commission = o.Amount * s.CommissionBPS / 10000
	default:
		out.UnknownSeller = true
	}
	return o, out, true
}

type service struct {
	seeds       []string
	t           topics
	exactlyOnce bool
	logger      *slog.Logger
	committed   *commitWatch
}

// fold is the engine's fold: enrich with the sellers of the table, its
// record the output.
func (s *service) fold(sellers sellerTable, key []byte, o Order, exists bool, rec engine.Record) (engine.Result[Order], error) {
	o, out, folded := enrich(sellers, o, exists, rec)
	v, err := json.Marshal(out)
	if err != nil {
		return engine.Result[Order]{}, err
	}
	outs := []engine.Output{{Topic: s.t.output, Key: key, Value: v}}
	if !folded {
		return engine.Keep[Order]().With(outs...), nil
	}
	return engine.Set(o).With(outs...), nil
}

// instance is one process of the service: its store backend, its live
// view of the sellers table, its engine and group member, stepped by a
// goroutine of its own.
type instance struct {
	name    string
	backend *kafka.Backend
	emitter *kafkaio.Emitter // at least once: the outputs' producer
	e       *engine.Engine[Order]
	r       *engine.Member[Order]
	cancel  context.CancelFunc
	done    chan struct{} // closed when the step loop has ended, with err
	err     error

	// sellers is the instance's view of the sellers topic, read through
	// its own backend (as a process has one), kept following by a
	// goroutine of its own: viewDone is closed when its Run has returned,
	// with viewErr. sellerChanged hears every change it applies.
	sellers       *view.View[Seller]
	viewDone      chan struct{}
	viewErr       error
	sellerChanged *broadcast

	// killAt arms the kill: the instance dies once it folds an event
	// whose sequence number is at least killAt (0: never).
	killAt atomic.Int64
	dying  atomic.Bool
	// dead is set when the instance is killed: its consumer's rebalance
	// callbacks no longer reach its runner (deadHandler).
	dead atomic.Bool

	mu       sync.Mutex
	folded   map[int32][]int64 // input offsets folded, per partition
	commitAt map[int32]int64   // the offset its last committed transaction carried
}

var errKilled = errors.New("killed")

func (s *service) start(ctx context.Context, name string) (_ *instance, err error) {
	in := &instance{name: name, done: make(chan struct{}), viewDone: make(chan struct{}), sellerChanged: newBroadcast(),
		folded: map[int32][]int64{}, commitAt: map[int32]int64{}}
	defer func() {
		if err != nil {
			in.close()
		}
	}()
	logger := s.logger.With("instance", name)
	in.backend, err = kafka.New(ctx, kafka.Config{
		Mode: store.Transactional, SeedBrokers: s.seeds, TransactionalIDPrefix: s.t.txnPrefix,
		Observer: store.ObserverFunc(func(ev store.TransactionEvent) {
			if ev.Err == nil && ev.OffsetAdvanced {
				in.mu.Lock()
				in.commitAt[ev.Input.Partition] = max(in.commitAt[ev.Input.Partition], ev.Offset)
				in.mu.Unlock()
				s.committed.advance(ev.Input.Partition, ev.Offset)
			}
		}),
		Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	// The sellers table: a live read_committed replica of the compacted
	// topic, read through the instance's backend (any mode reads a plain
	// topic). It is in memory, so every start reads the topic from its
	// start.
	in.sellers, err = view.New(ctx, view.Config[Seller]{
		Store: in.backend, Topic: s.t.sellers, Plain: true, Codec: engine.JSON[Seller](),
		OnChange: func(view.Change[Seller]) { in.sellerChanged.notify() },
		Logger:   logger,
	})
	if err != nil {
		return nil, fmt.Errorf("instance %s: the sellers view: %w", name, err)
	}
	go func() {
		defer close(in.viewDone)
		if err := in.sellers.Run(ctx); err != nil && !errors.Is(err, view.ErrClosed) {
			in.viewErr = fmt.Errorf("instance %s: the sellers view: %w", name, err)
		}
	}()
	cfg := engine.Config[Order]{
		Fold: func(key []byte, o Order, exists bool, rec engine.Record) (engine.Result[Order], error) {
			in.mu.Lock()
			in.folded[rec.Partition] = append(in.folded[rec.Partition], rec.Offset)
			in.mu.Unlock()
			if at := in.killAt.Load(); at > 0 && seqOf(rec.Value) >= at {
				in.dying.Store(true)
			}
			return s.fold(in.sellers, key, o, exists, rec)
		},
		Codec:        engine.JSON[Order](),
		Store:        in.backend,
		ExactlyOnce:  s.exactlyOnce, // CommitInterval: 100 ms by default
		OutputTopics: []string{s.t.output},
		// A partition folds nothing until the view has read the sellers
		// topic up to where it ended when the view opened.
		Tables: []engine.Table{in.sellers},
		Logger: logger,
	}
	if !s.exactlyOnce {
		// The exactly-once default, for a like-for-like comparison
		// (PersistInterval follows it).
		cfg.CommitInterval = engine.DefaultExactlyOnceCommitInterval
		// The instance's own producer: idempotent, each output in the
		// partition of its key (as the exactly-once path puts it).
		in.emitter, err = kafkaio.NewEmitter(kafkaio.EmitterConfig{SeedBrokers: s.seeds, Logger: logger})
		if err != nil {
			return nil, err
		}
		cfg.Emit = func(ctx context.Context, outs []engine.Output) error {
			if err := in.emitter.Emit(ctx, outs); err != nil {
				return err
			}
			if in.dying.Load() {
				// Killed right after its outputs went out, before the
				// commit that would cover them.
				return errKilled
			}
			return nil
		}
	}
	in.e, err = engine.New(cfg)
	if err != nil {
		return nil, err
	}
	newSource := kafkaio.Config{
		SeedBrokers: s.seeds, Group: s.t.group, Topics: []string{s.t.input},
	}
	in.r, err = in.e.Join(input.Wrapped(newSource, func(h input.Handler) input.Handler {
		return deadHandler{h: h, dead: &in.dead}
	}))
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	in.cancel = cancel
	go func() {
		defer close(in.done)
		in.err = in.loop(runCtx)
	}()
	return in, nil
}

// loop steps the runner until ctx ends, a step fails or the instance is
// killed.
func (in *instance) loop(ctx context.Context) error {
	for ctx.Err() == nil {
		select {
		case <-in.viewDone:
			// The table no longer follows its topic: folding on would
			// join with stale sellers.
			if in.viewErr != nil {
				return in.viewErr
			}
			return fmt.Errorf("instance %s: the sellers view stopped", in.name)
		default:
		}
		err := in.r.Step(ctx)
		if in.dying.Load() {
			return errKilled
		}
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("instance %s: %w", in.name, err)
		}
	}
	return nil
}

func (in *instance) flows() int { return len(in.r.Flows()) }

// wait ends the step loop and returns its error.
func (in *instance) wait() error {
	in.cancel()
	<-in.done
	return in.err
}

// crash kills the instance as a killed process: its step loop ends and
// its runner is never stepped or closed again (no flush, no commit, no
// revoke: the runner is abandoned). A dead process's consumer would stay in the group until its
// session expired; to spare the wait it leaves the group here, its revoke
// reaching no runner (deadHandler). Its engine (the cache, with the
// folded state never committed) and its store backend are closed. It
// returns how many folded events its commits did not cover.
func (in *instance) crash() int {
	_ = in.wait()
	in.dead.Store(true)
	in.mu.Lock()
	pending := 0
	for p, offs := range in.folded {
		for _, o := range offs {
			if o >= in.commitAt[p] {
				pending++
			}
		}
	}
	in.mu.Unlock()
	_ = in.r.Source().Close(context.Background())
	in.r.Abandon() // never closed, as in a dead process; its engine may close
	in.r = nil
	in.close()
	return pending
}

// deadHandler passes a consumer's rebalance callbacks on to its runner
// while the process lives; once it is dead (killed), they reach nothing,
// as nothing runs in a dead process.
type deadHandler struct {
	h    input.Handler
	dead *atomic.Bool
}

func (d deadHandler) Assigned(ctx context.Context, tps []store.TopicPartition) {
	if !d.dead.Load() {
		d.h.Assigned(ctx, tps)
	}
}

func (d deadHandler) Revoked(ctx context.Context, tps []store.TopicPartition) {
	if !d.dead.Load() {
		d.h.Revoked(ctx, tps)
	}
}

func (d deadHandler) Lost(ctx context.Context, tps []store.TopicPartition) {
	if !d.dead.Load() {
		d.h.Lost(ctx, tps)
	}
}

// stop stops the instance cleanly: it leaves the group, and the revoke
// flushes and commits. Idempotent.
func (in *instance) stop() error {
	err := in.wait()
	in.close()
	if errors.Is(err, errKilled) {
		return nil
	}
	return err
}

// close closes what the instance opened, in the reverse order: the runner
// (its revoke flushes and commits), the engine, the emitter, the view (and
// waits for its Run), the backend the view read through. It is also the
// clean-up of a start that failed half-way. Idempotent.
func (in *instance) close() {
	if in.r != nil {
		_ = in.r.Close(context.Background())
		in.r = nil
	}
	if in.e != nil {
		_ = in.e.Close()
		in.e = nil
	}
	if in.emitter != nil {
		_ = in.emitter.Close()
		in.emitter = nil
	}
	if in.sellers != nil {
		_ = in.sellers.Close()
		<-in.viewDone
		in.sellers = nil
	}
	if in.backend != nil {
		_ = in.backend.Close()
		in.backend = nil
	}
}

// ---- committing ----

// commitWatch follows the input offsets the instances' transactions
// committed.
type commitWatch struct {
	mu      sync.Mutex
	at      map[int32]int64
	changed chan struct{} // closed and replaced on every advance
}

func newCommitWatch() *commitWatch {
	return &commitWatch{at: map[int32]int64{}, changed: make(chan struct{})}
}

func (w *commitWatch) advance(p int32, off int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if off > w.at[p] {
		w.at[p] = off
		close(w.changed)
		w.changed = make(chan struct{})
	}
}

// reached reports whether every partition of ends is committed to its end,
// and a channel closed on the next advance.
func (w *commitWatch) reached(ends map[int32]int64) (bool, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, end := range ends {
		if w.at[p] < end {
			return false, w.changed
		}
	}
	return true, w.changed
}

func (w *commitWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprint(w.at)
}

// broadcast wakes every waiter on each notify.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{} // closed and replaced on every notify
}

func newBroadcast() *broadcast { return &broadcast{ch: make(chan struct{})} }

func (b *broadcast) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.ch)
	b.ch = make(chan struct{})
}

// next is closed on the next notify.
func (b *broadcast) next() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

// produceAndAwait produces a batch of events and waits until the
// instances have committed the input to its end.
func (s *service) produceAndAwait(ctx context.Context, cl *kgo.Client, evs []Event, out io.Writer, batch string, running ...*instance) error {
	if err := produce(ctx, cl, s.t.input, evs); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s batch: produced %d events\n", batch, len(evs))
	if err := s.awaitCommitted(ctx, cl, running...); err != nil {
		return fmt.Errorf("%s batch: %w", batch, err)
	}
	fmt.Fprintf(out, "%s batch: every input offset committed\n", batch)
	return nil
}

// awaitCommitted waits until a transaction committed every input
// partition's end offset, or one of the (at most two) running instances
// stops.
func (s *service) awaitCommitted(ctx context.Context, cl *kgo.Client, running ...*instance) error {
	ends, err := endOffsets(ctx, cl, s.t.input)
	if err != nil {
		return err
	}
	maps.DeleteFunc(ends, func(_ int32, end int64) bool { return end == 0 })
	var done [2]chan struct{} // nil: never ready
	for i, in := range running[:min(len(running), 2)] {
		done[i] = in.done
	}
	for {
		ok, changed := s.committed.reached(ends)
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-done[0]:
			return fmt.Errorf("instance %s stopped: %v", running[0].name, running[0].err)
		case <-done[1]:
			return fmt.Errorf("instance %s stopped: %v", running[1].name, running[1].err)
		case <-ctx.Done():
			return fmt.Errorf("not every input offset was committed: %v of %v: %w", s.committed, ends, ctx.Err())
		}
	}
}

// endOffsets lists the end offsets (high watermarks) of topic's
// partitions.
func endOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	listed, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	ends := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	return ends, nil
}

// ---- input ----

// generator makes order events: new orders and the next step of open ones.
type generator struct {
	rng    *rand.Rand
	seq    int
	orders int
	open   []string          // orders with steps left
	status map[string]string // their last event
}

func newGenerator(rng *rand.Rand) *generator {
	return &generator{rng: rng, status: map[string]string{}}
}

// sellerIDs are the sellers orders name; s-7 is in no table.
var sellerIDs = []string{"s-1", "s-2", "s-3", "s-4", "s-5", "s-6", "s-7"}

func (g *generator) events(n int) []Event {
	evs := make([]Event, 0, n)
	for range n {
		g.seq++
		ev := Event{ID: fmt.Sprintf("ev-%05d", g.seq)}
		if len(g.open) < 5 || g.rng.IntN(3) == 0 {
			g.orders++
			ev.Order, ev.Type = fmt.Sprintf("o-%04d", g.orders), "created"
			ev.Seller = sellerIDs[g.rng.IntN(len(sellerIDs))]
			ev.Amount = 100 + g.rng.Int64N(100000)
			g.open = append(g.open, ev.Order)
		} else {
			i := g.rng.IntN(len(g.open))
			ev.Order = g.open[i]
			switch r := g.rng.IntN(10); {
			case g.status[ev.Order] == "created" && r < 8:
				ev.Type = "paid"
			case g.status[ev.Order] == "paid" && r < 8:
				ev.Type = "shipped"
			case r == 9:
				ev.Type = "shipped" // out of order now and then
			default:
				ev.Type = "cancelled"
			}
			if ev.Type == "cancelled" || ev.Type == "shipped" && g.status[ev.Order] == "paid" {
				g.open = slices.Delete(g.open, i, i+1)
			}
		}
		g.status[ev.Order] = ev.Type
		evs = append(evs, ev)
	}
	return evs
}

// seqOf is an event's sequence number, from its id; 0 if it has none.
func seqOf(v []byte) int64 {
	var ev Event
	var n int64
	if json.Unmarshal(v, &ev) == nil {
		_, _ = fmt.Sscanf(ev.ID, "ev-%d", &n)
	}
	return n
}

func produce(ctx context.Context, cl *kgo.Client, topic string, evs []Event) error {
	recs := make([]*kgo.Record, len(evs))
	for i, ev := range evs {
		v, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(ev.Order), Value: v}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("producing events: %w", err)
	}
	return nil
}

// ---- the sellers table ----

// staticSellers seed an empty sellers topic.
var staticSellers = map[string]Seller{
	"s-1": {Name: "Acme Books", Country: "DE", CommissionBPS: 1200},
	"s-2": {Name: "Nordic Outdoor", Country: "SE", CommissionBPS: 900},
	"s-3": {Name: "Casa Verde", Country: "ES", CommissionBPS: 1500},
	"s-4": {Name: "Tokyo Gadgets", Country: "JP", CommissionBPS: 800},
	"s-5": {Name: "Maple Crafts", Country: "CA", CommissionBPS: 1000},
	"s-6": {Name: "Volga Tea", Country: "RU", CommissionBPS: 1100},
}

// readSellers reads the sellers topic to its end (read_committed) into a
// map: the table as the run finds it, which the check expects the first
// batch to be joined with. An empty topic is seeded from staticSellers
// first.
func readSellers(ctx context.Context, seeds []string, cl *kgo.Client, topic string, out io.Writer) (sellerMap, error) {
	recs, err := readAll(ctx, seeds, topic)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		ids := slices.Sorted(maps.Keys(staticSellers))
		seed := make([]*kgo.Record, len(ids))
		for i, id := range ids {
			v, _ := json.Marshal(staticSellers[id])
			seed[i] = &kgo.Record{Topic: topic, Key: []byte(id), Value: v}
		}
		if err := cl.ProduceSync(ctx, seed...).FirstErr(); err != nil {
			return nil, fmt.Errorf("seeding %s: %w", topic, err)
		}
		fmt.Fprintf(out, "seeded %s with %d sellers\n", topic, len(seed))
		if recs, err = readAll(ctx, seeds, topic); err != nil {
			return nil, err
		}
	}
	sellers := sellerMap{}
	for _, r := range recs {
		if r.Value == nil {
			delete(sellers, string(r.Key)) // a tombstone
			continue
		}
		var s Seller
		if err := json.Unmarshal(r.Value, &s); err != nil {
			return nil, fmt.Errorf("%s: seller %q: %w", topic, r.Key, err)
		}
		sellers[string(r.Key)] = s
	}
	fmt.Fprintf(out, "sellers table: %d sellers in %s; each instance follows it in a live view\n", len(sellers), topic)
	return sellers, nil
}

// updatedSeller is the seller the run changes after the first batch.
const updatedSeller = "s-1"

// sellerUpdate is the change the run made to the sellers table, and where
// the input stood when every instance's view showed it.
type sellerUpdate struct {
	id   string
	row  Seller          // the new row
	from map[int32]int64 // input end offsets once the views showed it
}

// updateSeller raises updatedSeller's commission rate by 3 points (its
// row as the run found it, or the static one) in the sellers topic, as
// another service keeping the table would, and waits until the view of
// every running instance shows the new row. It returns the update, with
// the input's end offsets after that: every input record from them on is
// folded after both views showed it.
func (s *service) updateSeller(ctx context.Context, cl *kgo.Client, sellers sellerMap, out io.Writer, running ...*instance) (sellerUpdate, error) {
	old, ok := sellers[updatedSeller]
	if !ok {
		old = staticSellers[updatedSeller]
	}
	row := old
	row.CommissionBPS += 300
	v, err := json.Marshal(row)
	if err != nil {
		return sellerUpdate{}, err
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: s.t.sellers, Key: []byte(updatedSeller), Value: v}).FirstErr(); err != nil {
		return sellerUpdate{}, fmt.Errorf("updating seller %s in %s: %w", updatedSeller, s.t.sellers, err)
	}
	for _, in := range running {
		if err := in.awaitSeller(ctx, updatedSeller, row); err != nil {
			return sellerUpdate{}, err
		}
	}
	from, err := endOffsets(ctx, cl, s.t.input)
	if err != nil {
		return sellerUpdate{}, err
	}
	fmt.Fprintf(out, "seller %s updated: commission %d -> %d bps; the views of instances %s show it\n",
		updatedSeller, old.CommissionBPS, row.CommissionBPS, instanceNames(running))
	return sellerUpdate{id: updatedSeller, row: row, from: from}, nil
}

func instanceNames(ins []*instance) string {
	names := make([]string, len(ins))
	for i, in := range ins {
		names[i] = in.name
	}
	return strings.Join(names, " and ")
}

// awaitSeller waits until the instance's view holds row for the seller:
// it looks again on every change the view applies.
func (in *instance) awaitSeller(ctx context.Context, id string, row Seller) error {
	for {
		changed := in.sellerChanged.next() // before the look, so no change is missed
		got, ok, err := in.sellers.Get([]byte(id))
		if err != nil {
			return fmt.Errorf("instance %s: seller %s in the view: %w", in.name, id, err)
		}
		if ok && got == row {
			return nil
		}
		select {
		case <-changed:
		case <-in.viewDone:
			return fmt.Errorf("instance %s: the sellers view stopped before it showed seller %s's update: %v", in.name, id, in.viewErr)
		case <-in.done:
			return fmt.Errorf("instance %s stopped: %v", in.name, in.err)
		case <-ctx.Done():
			return fmt.Errorf("instance %s: the view never showed seller %s's update (it holds %+v, exists %t): %w", in.name, id, got, ok, ctx.Err())
		}
	}
}

// readAll reads a topic from its start to its current end, read_committed,
// in partition and offset order.
func readAll(ctx context.Context, seeds []string, topic string) ([]*kgo.Record, error) {
	// Control records (transaction markers) are kept so that the end is
	// seen even where the last records before it are markers.
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	// The last stable offsets: every record before them is committed or
	// aborted.
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	left := map[int32]int64{} // partition -> end offset still to reach
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	var recs []*kgo.Record
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
			if !r.Attrs.IsControl() {
				recs = append(recs, r)
			}
		})
	}
	slices.SortFunc(recs, func(a, b *kgo.Record) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	return recs, nil
}

// ---- the check ----

type result struct {
	events, outputs, duplicates, missing, wrong, strays int
	unknownSeller, invalid                              int
	// The seller the run updated, and how many right records of its
	// orders from this run carry its row before and after the update.
	updated            string
	carryOld, carryNew int
	examples           []string
}

// era says which seller table an input record's fold had to see.
type era int

const (
	earlierRun   era = iota // input of an earlier run on the same prefix
	beforeUpdate            // this run's, before the seller update
	afterUpdate             // this run's, after every view showed it
)

// check reads the input and the output topics and compares every input
// event with its enriched records. This run's records are checked in
// full: the first batch's must carry the sellers the run found (before),
// the second batch's (from upd.from on) the updated row. Records of an
// earlier run on the same prefix are checked without their seller data:
// the sellers they saw changed at a point only that run knew.
func check(ctx context.Context, seeds []string, t topics, runStart map[int32]int64, before sellerMap, upd sellerUpdate) (*result, error) {
	in, err := readAll(ctx, seeds, t.input)
	if err != nil {
		return nil, err
	}
	outs, err := readAll(ctx, seeds, t.output)
	if err != nil {
		return nil, err
	}
	after := maps.Clone(before)
	after[upd.id] = upd.row
	// What each input event's record must be: the fold's logic over the
	// input in offset order (an order's events all sit in one partition).
	type expected struct {
		value []byte
		era   era
	}
	want := map[string]expected{}
	orders := map[string]Order{}
	exists := map[string]bool{}
	for _, r := range in {
		k := string(r.Key)
		x := expected{era: beforeUpdate}
		sellers := before
		switch {
		case r.Offset < runStart[r.Partition]:
			x.era = earlierRun
		case r.Offset >= upd.from[r.Partition]:
			x.era, sellers = afterUpdate, after
		}
		o, e, folded := enrich(sellers, orders[k], exists[k], engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value})
		if folded {
			orders[k], exists[k] = o, true
		}
		if x.era == earlierRun {
			e = withoutSeller(e)
		}
		if x.value, err = json.Marshal(e); err != nil {
			return nil, err
		}
		want[e.Input] = x
	}
	res := &result{events: len(in), outputs: len(outs), updated: upd.id}
	seen := map[string]int{}
	for _, r := range outs {
		var e Enriched
		if err := json.Unmarshal(r.Value, &e); err != nil {
			res.strays++
			res.example("not an enriched record at %s/%d@%d: %q", t.output, r.Partition, r.Offset, r.Value)
			continue
		}
		w, ok := want[e.Input]
		got := r.Value
		if ok && w.era == earlierRun {
			if got, err = json.Marshal(withoutSeller(e)); err != nil {
				return nil, err
			}
		}
		right := string(w.value) == string(got)
		switch {
		case !ok:
			res.strays++
			res.example("record of no input event: %s", r.Value)
			continue
		case !right:
			res.wrong++
			res.example("input %s:\n  got  %s\n  want %s", e.Input, got, w.value)
		}
		if seen[e.Input]++; seen[e.Input] == 2 {
			res.example("input %s enriched more than once: %s", e.Input, r.Value)
		}
		if seen[e.Input] > 1 {
			res.duplicates++
			continue
		}
		if e.UnknownSeller {
			res.unknownSeller++
		}
		if e.Invalid != "" {
			res.invalid++
		}
		if right && e.Order.Seller == upd.id {
			switch w.era {
			case beforeUpdate:
				res.carryOld++
			case afterUpdate:
				res.carryNew++
			}
		}
	}
	for _, r := range in {
		if pos := fmt.Sprintf("%d:%d", r.Partition, r.Offset); seen[pos] == 0 {
			res.missing++
			res.example("input %s (%s) has no enriched record", pos, r.Value)
		}
	}
	return res, nil
}

// withoutSeller is an enriched record without what the seller table gave.
func withoutSeller(e Enriched) Enriched {
	e.Seller, e.UnknownSeller, e.SellerError, e.Commission = nil, false, "", 0
	return e
}

func (r *result) example(format string, args ...any) {
	if len(r.examples) < 5 {
		r.examples = append(r.examples, fmt.Sprintf(format, args...))
	}
}

// report prints the summary and fails on a violation of the mode's
// guarantee: any duplicate exactly once; at least once, only a loss (or a
// wrong record).
func (r *result) report(out io.Writer, exactlyOnce bool) error {
	fmt.Fprintf(out, "\nevents in:                   %d\n", r.events)
	fmt.Fprintf(out, "outputs read_committed:      %d\n", r.outputs)
	fmt.Fprintf(out, "duplicates:                  %d\n", r.duplicates)
	fmt.Fprintf(out, "missing:                     %d\n", r.missing)
	fmt.Fprintf(out, "wrong content:               %d\n", r.wrong+r.strays)
	fmt.Fprintf(out, "(marked unknown-seller:      %d; events ignored: %d)\n", r.unknownSeller, r.invalid)
	for _, e := range r.examples {
		fmt.Fprintln(out, "  "+e)
	}
	bad := r.missing + r.wrong + r.strays
	if exactlyOnce {
		bad += r.duplicates
	}
	if bad > 0 {
		return fmt.Errorf("%d violations: %d duplicates, %d missing, %d wrong", bad, r.duplicates, r.missing, r.wrong+r.strays)
	}
	if r.updated != "" {
		// Every record is right, so each of the seller's orders carries
		// the row of its batch; the update must also have been met.
		if r.carryNew == 0 {
			return fmt.Errorf("seller %s was updated, but no later record is of its orders: the run shows nothing of the update", r.updated)
		}
		fmt.Fprintf(out, "seller %s updated between the batches: %d earlier records carry its old row, %d later records carry the new one\n", r.updated, r.carryOld, r.carryNew)
	}
	if exactlyOnce {
		fmt.Fprintln(out, "exactly once: every input event has exactly one enriched record, and each is right")
	} else {
		fmt.Fprintf(out, "at least once: every input event has an enriched record, and each is right; %d duplicates\n", r.duplicates)
	}
	return nil
}

// createTopics creates the program's topics (an existing one is kept)
// and returns once each is served: kafka.CreateTopic waits until every
// partition answers, as a broker answers UNKNOWN_TOPIC_OR_PARTITION for
// a moment after it created a topic.
func createTopics(ctx context.Context, cl *kgo.Client, t topics) error {
	compact := "compact"
	for topic, configs := range map[string]map[string]*string{
		t.input:     nil,
		t.snapshots: {"cleanup.policy": &compact},
		t.output:    nil,
		t.sellers:   {"cleanup.policy": &compact},
	} {
		n := int32(partitions)
		if topic == t.sellers {
			n = 1
		}
		if err := kafka.CreateTopic(ctx, cl, topic, n, -1, configs); err != nil {
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
