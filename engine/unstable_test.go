package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// logCount counts the engine's log records per level that name an input
// partition, to check a wait logs once and fails once (no storm).
type logCount struct {
	mu     sync.Mutex
	counts map[string]int // "LEVEL input"
	lines  []string
}

func (l *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCount) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logCount) WithGroup(string) slog.Handler            { return l }
func (l *logCount) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = map[string]int{}
	}
	input, line := "", r.Level.String()+" "+r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "input" {
			input = a.Value.String()
		}
		if err, ok := a.Value.Any().(error); ok && a.Key == "err" && errors.Is(err, store.ErrOffsetUnstable) {
			l.counts[r.Level.String()+" unstable "+input]++
		}
		line += " " + a.String()
		return true
	})
	l.counts[r.Level.String()+" "+input]++
	l.lines = append(l.lines, line)
	return nil
}

func (l *logCount) count(level slog.Level, input string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[level.String()+" "+input]
}

func (l *logCount) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// checkUnstable checks the error that ended a runner whose partition in
// could not be acquired: typed, naming the partition, its transactional.id,
// the producer holding the snapshot partition and the command that aborts
// it, after waiting at least timeout; and one warning and one error logged
// for the partition.
func checkUnstable(t *testing.T, err error, in store.TopicPartition, txnID string, timeout time.Duration,
	holder func(kafka.OpenTransaction) bool, logs *logCount) *kafka.UnstableOffsetError {
	t.Helper()
	t.Logf("the runner ended with: %v", err)
	ue, ok := errors.AsType[*kafka.UnstableOffsetError](err)
	if !ok || !errors.Is(err, store.ErrOffsetUnstable) {
		t.Fatalf("Step returned %v (%T), want a *kafka.UnstableOffsetError; logs:\n%s", err, err, logs)
	}
	if ue.Input != in || ue.TransactionalID != txnID || ue.Waited < timeout {
		t.Fatalf("error names %s, %q, waited %s; want %s, %q, at least %s: %v", ue.Input, ue.TransactionalID, ue.Waited, in, txnID, timeout, err)
	}
	i := slices.IndexFunc(ue.Open, holder)
	if i < 0 {
		t.Fatalf("the holding transaction is not among the open ones %v: %v", ue.Open, err)
	}
	if cmd := ue.Open[i].AbortCommand(ue.Bootstrap); !strings.Contains(err.Error(), cmd) || !strings.Contains(cmd, fmt.Sprintf("--start-offset %d", ue.Open[i].StartOffset)) {
		t.Fatalf("the message lacks the abort command %q: %v", cmd, err)
	}
	if w, e := logs.count(slog.LevelWarn, "unstable "+in.String()), logs.count(slog.LevelError, "unstable "+in.String()); w != 1 || e != 1 {
		t.Fatalf("logged the held offset of %s in %d warnings and %d errors, want 1 and 1:\n%s", in, w, e, logs)
	}
	return ue
}

// forgetHeldTransaction leaves the partition's own transactional.id with a
// transaction the coordinator forgot: a snapshot of in's snapshot
// partition and an offset commit of in, open for good (as after an unclean
// failure of the broker that held __transaction_state), so no takeover can
// end it. Its producer initialisation fences the partition's current owner.
func (w *simWorld) forgetHeldTransaction(in, snap store.TopicPartition) {
	w.t.Helper()
	txnID := fmt.Sprintf("bank-%s-%d", in.Topic, in.Partition)
	prod := w.c.InitProducerID(txnID, 0)
	if _, err := prod.Produce(snap, wire.EncodeSnapshot("", store.Snapshot{Key: []byte("dave"), Value: []byte("1"), Offset: 0})); err != nil {
		w.t.Fatal(err)
	}
	if err := prod.TxnOffsetCommit(store.GroupIdentity{Group: "bank", Generation: -1}, map[store.TopicPartition]int64{in: 1}); err != nil {
		w.t.Fatal(err)
	}
	w.c.ForgetTransaction(txnID)
}

// unstableEngine is an engine on the world's store whose acquisitions wait
// at most timeout for a held committed offset, logging into logs.
func (w *simWorld) unstableEngine(timeout time.Duration, logs *logCount) *engine.Engine[int] {
	e, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: w.store,
		PersistInterval: time.Second, CommitInterval: 2 * time.Second, UnstableOffsetTimeout: timeout, Logger: slog.New(logs)})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	return e
}

// stepUntilError steps r a second of virtual time apart until it fails, for
// at most limit; each step, progress is told whether p0 has a flow.
func (w *simWorld) stepUntilError(r *engine.Member[int], limit time.Duration, progress func()) error {
	for range int(limit / time.Second) {
		if err := r.Step(context.Background()); err != nil {
			return err
		}
		if progress != nil {
			progress()
		}
		w.c.Advance(time.Second)
	}
	return nil
}

var (
	accounts0 = store.TopicPartition{Topic: "accounts", Partition: 0}
	accounts1 = store.TopicPartition{Topic: "accounts", Partition: 1}
	snaps0    = store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: 0}
)

// A partition whose own transactional.id left a transaction the
// coordinator forgot (so the takeover aborts nothing) is held at its
// re-acquisition: it waits, paused, while the other partition folds and
// commits; after UnstableOffsetTimeout of virtual time Step fails with a
// typed error naming the partition, its transactional.id, the open
// producer and the abort command, logged once as a warning and once as an
// error. After the operator's abort a new runner recovers both partitions
// exactly.
func TestAHeldCommittedOffsetStopsOnlyItsPartitionOnSim(t *testing.T) {
	w := newSimWorld(t)
	w.produce("dave=+1", "bob=+5") // dave: accounts/0; bob: accounts/1
	logs := &logCount{}
	const timeout = 30 * time.Second
	r := w.runner(w.unstableEngine(timeout, logs))
	w.drain(r)
	w.forgetHeldTransaction(accounts0, snaps0) // fences r's producer of accounts/0
	w.produce("erin=+2", "alice=+3")           // erin: accounts/0; alice: accounts/1
	p1Done := false
	err := w.stepUntilError(r, 3*timeout, func() {
		if !slices.Contains(r.Flows(), accounts0) && w.committedAtEnd(accounts1) {
			p1Done = true
			w.produce("carol=+4") // accounts/1 goes on while accounts/0 waits
		}
	})
	if !p1Done {
		t.Fatalf("accounts/1 was not committed to its end while accounts/0 waited (flows %v, err %v)\n%s", r.Flows(), err, logs)
	}
	checkUnstable(t, err, accounts0, "bank-accounts-0", timeout, func(o kafka.OpenTransaction) bool {
		return o.Partition == snaps0 && o.StartOffset > 0 && o.TransactionalID == ""
	}, logs)
	if err2 := r.Step(context.Background()); !errors.Is(err2, store.ErrOffsetUnstable) {
		t.Fatalf("the next Step returned %v, want the same error again", err2)
	}
	w.recoverAfterAbort(r)
}

// A held offset at assignment: the first acquisition waits too (the
// callback returns at once; franz-go and the sim's source hold back the
// fetch of the whole assignment meanwhile, as Kafka's clients do), and the
// wait ends with the typed error.
func TestAHeldCommittedOffsetAtAssignmentFailsLoudlyOnSim(t *testing.T) {
	w := newSimWorld(t)
	if err := w.c.CreateTopic("bank-accounts-snapshots", sim.TopicConfig{Partitions: 2, Compacted: true}); err != nil {
		t.Fatal(err)
	}
	w.produce("dave=+1", "bob=+5", "erin=+2", "alice=+3")
	w.forgetHeldTransaction(accounts0, snaps0)
	logs := &logCount{}
	const timeout = 30 * time.Second
	r := w.runner(w.unstableEngine(timeout, logs))
	err := w.stepUntilError(r, 3*timeout, nil)
	checkUnstable(t, err, accounts0, "bank-accounts-0", timeout, func(o kafka.OpenTransaction) bool {
		return o.Partition == snaps0 && o.StartOffset == 0 && o.TransactionalID == ""
	}, logs)
	w.recoverAfterAbort(r)
}

// recoverAfterAbort closes r, runs the operator's abort, and checks that a
// new runner recovers every key exactly.
func (w *simWorld) recoverAfterAbort(r *engine.Member[int]) {
	w.t.Helper()
	if err := r.Close(context.Background()); err != nil {
		w.t.Fatal(err)
	}
	w.c.AbortForgotten()
	r = w.runner(w.engine())
	w.drain(r)
	w.check(r)
	if errs := r.Errors(); len(errs) > 0 {
		w.t.Fatal(errs)
	}
}

func (w *simWorld) committedAtEnd(tp store.TopicPartition) bool {
	_, _, end, _ := w.c.Offsets(tp)
	off, _ := w.c.CommittedOffset("bank", tp)
	return off == end
}

// holdCommittedOffset opens a transaction of another transactional.id
// (txnID, as with a prefix shared by another application) that writes a
// record to snap and commits group's offset of in, and leaves it open: the
// takeover of in's own transactional.id does not end it. It returns the
// producer id and a func that aborts it.
func holdCommittedOffset(t *testing.T, opts []kgo.Opt, txnID, group string, in, snap store.TopicPartition) (int64, func()) {
	t.Helper()
	ctx := context.Background()
	p, err := kgo.NewClient(append(opts, kgo.TransactionalID(txnID), kgo.TransactionTimeout(10*time.Minute),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Topic: snap.Topic, Partition: snap.Partition, Key: []byte("intruder"), Value: []byte("1")}
	if err := p.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pid, epoch, err := p.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	topics, err := kadm.NewClient(p).ListTopics(ctx, in.Topic)
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch, req.Generation = txnID, group, pid, epoch, -1
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic, rt.TopicID = in.Topic, topics[in.Topic].ID // v6+ names the topic by id
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = in.Partition, 1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode); err != nil {
		t.Fatalf("the foreign offset commit: %v", err)
	}
	var once sync.Once
	abort := func() error {
		var err error
		once.Do(func() { err = p.EndTransaction(ctx, kgo.TryAbort) })
		return err
	}
	t.Cleanup(func() { _ = abort() }) // before p.Close: a failed test leaves nothing open
	return pid, func() {
		if err := abort(); err != nil {
			t.Fatal(err)
		}
	}
}

// fenceProducer initialises transactional.id txnID in a client of its own,
// which fences the producer that holds it (as a prefix shared with another
// application would).
func fenceProducer(t *testing.T, opts []kgo.Opt, txnID string) {
	t.Helper()
	cl, err := kgo.NewClient(append(opts, kgo.TransactionalID(txnID))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, _, err := cl.ProducerID(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// stableAsKafka makes kfake answer a RequireStable offset fetch as Kafka
// does (KIP-447): UNSTABLE_OFFSET_COMMIT only for the partitions a pending
// transactional commit holds (here: held alone). kfake answers it for every
// partition of a group with any pending commit; where kfake and Kafka
// disagree, Kafka is right.
func (w *fakeWorld) stableAsKafka(held store.TopicPartition) {
	w.t.Helper()
	topics, err := w.adm.ListTopics(context.Background(), held.Topic)
	if err != nil {
		w.t.Fatal(err)
	}
	id := topics[held.Topic].ID // OffsetFetch v10 names topics by id
	names := func(topic string, tid [16]byte, ps []int32) bool {
		return (topic == held.Topic || tid == id) && slices.Contains(ps, held.Partition)
	}
	w.c.ControlKey(int16(kmsg.OffsetFetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		w.c.KeepControl()
		req := kr.(*kmsg.OffsetFetchRequest)
		holds := false
		for _, t := range req.Topics {
			holds = holds || names(t.Topic, [16]byte{}, t.Partitions)
		}
		for _, g := range req.Groups {
			for _, t := range g.Topics {
				holds = holds || names(t.Topic, t.TopicID, t.Partitions)
			}
		}
		if !holds {
			req.RequireStable = false // nothing it names is held
		}
		return nil, nil, false
	})
}

// heldOffsetOnKfake is the sim cases' script on kfake with store/kafka and
// a franz-go consumer, in virtual time. The offset is held by another
// transactional.id's open transaction, which the takeover cannot end
// either. atAssignment holds it before the runner starts; otherwise while
// it runs, and the partition's producer is fenced, so its flow restarts
// into the held offset while accounts/1 goes on.
func heldOffsetOnKfake(t *testing.T, atAssignment bool) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		w.produce("dave=+1", "bob=+5")
		logs := &logCount{}
		const timeout = time.Minute
		mod := func(c *engine.Config[int]) { c.UnstableOffsetTimeout, c.Logger = timeout, slog.New(logs) }
		var r *engine.Member[int]
		var pid int64
		var release func()
		if atAssignment {
			pid, release = holdCommittedOffset(t, w.opts(), "intruder", "bank", accounts0, snaps0)
			w.stableAsKafka(accounts0)
			r = w.runner(w.engineWith(mod), protocols["classic-cooperative"])
		} else {
			r = w.runner(w.engineWith(mod), protocols["classic-cooperative"])
			w.drain(r)
			pid, release = holdCommittedOffset(t, w.opts(), "intruder", "bank", accounts0, snaps0)
			fenceProducer(t, w.opts(), "bank-accounts-0")
			w.produce("erin=+2", "alice=+3")
		}
		ctx := context.Background()
		var err error
		p1Done := false
		for start := time.Now(); time.Since(start) < 5*timeout && err == nil; { // virtual time
			err = r.Step(ctx)
			if !atAssignment && !p1Done && !slices.Contains(r.Flows(), accounts0) && w.committedAtEnd(accounts1) {
				p1Done = true
				w.produce("carol=+4") // accounts/1 goes on while accounts/0 waits
			}
		}
		if !atAssignment && !p1Done {
			t.Fatalf("accounts/1 was not committed to its end while accounts/0 waited (flows %v, err %v); logs:\n%s", r.Flows(), err, logs)
		}
		checkUnstable(t, err, accounts0, "bank-accounts-0", timeout, func(o kafka.OpenTransaction) bool {
			return o.Partition == snaps0 && o.ProducerID == pid && o.TransactionalID == "intruder"
		}, logs)
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
		release()
		r = w.runner(w.engine(), protocols["classic-cooperative"])
		w.drain(r)
		w.check(r)
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestAHeldCommittedOffsetStopsOnlyItsPartitionOnKfake(t *testing.T) { heldOffsetOnKfake(t, false) }

func TestAHeldCommittedOffsetAtAssignmentFailsLoudlyOnKfake(t *testing.T) { heldOffsetOnKfake(t, true) }

// heldWorld is what heldThenReleased runs on: kfake in a synctest bubble,
// or a broker.
type heldWorld struct {
	in0, in1 store.TopicPartition
	produce  func(events ...string)
	// committedAtEnd: the group's committed offset of tp is at its end.
	committedAtEnd func(tp store.TopicPartition) bool
	// caughtUp: every input partition is committed to its end.
	caughtUp func() bool
	check    func(r *engine.Member[int])
	// hold holds in0's committed offset by another transactional.id's
	// open transaction; release ends that transaction.
	hold, release func()
	// fence fences in0's own producer, so that its flow restarts.
	fence func()
	// bound is how long one condition may take to hold: a bound, not a
	// wait; hold is how long the offset stays held while in1 folds.
	bound, holdFor time.Duration
}

// heldThenReleased holds the committed offset of in0 by a transaction
// its takeover cannot end, at its assignment (hold before the runner
// starts) or at a restart of its flow (hold, then fence it), and checks
// that in1 folds and commits everything produced to it meanwhile while
// in0 is reported waiting and held, never running; then releases the
// hold, and checks that in0 resumes in the same runner and that the
// state is the exact fold. It returns the longest time a record of in1
// waited to be folded during the hold.
func heldThenReleased(t *testing.T, w heldWorld, start func(mod func(*engine.Config[int])) *engine.Member[int], atAssignment bool) time.Duration {
	t.Helper()
	logs := &logCount{}
	// Longer than the test: the hold ends by its release only.
	mod := func(c *engine.Config[int]) { c.UnstableOffsetTimeout, c.Logger = time.Hour, slog.New(logs) }
	ctx := context.Background()
	w.produce("dave=+1", "bob=+5") // dave: in0; bob: in1
	var r *engine.Member[int]
	if atAssignment {
		w.hold()
		r = start(mod)
	} else {
		r = start(mod)
		for deadline := time.Now().Add(w.bound); !w.caughtUp() || len(r.Flows()) < 2; {
			if time.Now().After(deadline) {
				t.Fatalf("the runner did not commit to the end in %v; errors: %v", w.bound, r.Errors())
			}
			if err := r.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
		w.hold()
		w.fence()
		w.produce("erin=+2") // in0's next commit meets the fence
	}
	// held: in0 has been seen held, so it may not run until released.
	held, released := atAssignment, false
	heldState := func() engine.PartitionStatus {
		t.Helper()
		var p0, p1 engine.PartitionStatus
		for _, ps := range r.Status().Partitions {
			switch ps.Input {
			case w.in0:
				p0 = ps
			case w.in1:
				p1 = ps
			}
		}
		if p0.Held && !released {
			held = true
		}
		if held && (p0.State == engine.StateRunning || slices.Contains(r.Flows(), w.in0)) {
			t.Fatalf("%s is reported running (flows %v) while its committed offset is held: %+v", w.in0, r.Flows(), p0)
		}
		if p1.State == engine.StateStarting && !atAssignment {
			t.Fatalf("%s restarted while %s was held: %+v", w.in1, w.in0, p1)
		}
		return p0
	}
	stepUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(w.bound); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("not within %v: %s; status %+v; errors %v; logs:\n%s", w.bound, what, r.Status(), r.Errors(), logs)
			}
			if err := r.Step(ctx); err != nil {
				t.Fatalf("%s: %v; logs:\n%s", what, err, logs)
			}
			heldState()
		}
	}
	stepUntil(w.in0.String()+" held and "+w.in1.String()+" committed to its end", func() bool {
		return held && w.committedAtEnd(w.in1)
	})
	// in1 goes on: records produced to it during the hold are folded
	// (each one's wait measured) and committed, in0's too are kept.
	w.produce("erin=+2", "alice=+3") // erin: in0; alice: in1
	bob := 5
	type pending struct {
		value int
		at    time.Time
	}
	var produced []pending
	var longest time.Duration
	lastProduce := time.Time{}
	for end := time.Now().Add(w.holdFor); time.Now().Before(end); {
		if now := time.Now(); now.Sub(lastProduce) >= 100*time.Millisecond {
			w.produce("bob=+1")
			bob++
			produced, lastProduce = append(produced, pending{bob, now}), now
		}
		if err := r.Step(ctx); err != nil {
			t.Fatalf("while %s was held: %v; logs:\n%s", w.in0, err, logs)
		}
		heldState()
		got, _, err := r.State(w.in1, []byte("bob"))
		if err != nil {
			t.Fatalf("%s does not run while %s is held: %v", w.in1, w.in0, err)
		}
		for len(produced) > 0 && produced[0].value <= got {
			longest = max(longest, time.Since(produced[0].at))
			produced = produced[1:]
		}
		if len(produced) > 0 {
			longest = max(longest, time.Since(produced[0].at))
		}
	}
	w.produce("carol=+4") // in1
	stepUntil(w.in1.String()+" committed to its end again while "+w.in0.String()+" is held", func() bool { return w.committedAtEnd(w.in1) })
	p0 := heldState()
	if p0.State != engine.StateWaiting || !p0.Held || !errors.Is(p0.Err, store.ErrOffsetUnstable) {
		t.Fatalf("%s's status while its committed offset is held: %+v, want waiting, held, with the error", w.in0, p0)
	}
	if w.committedAtEnd(w.in0) {
		t.Fatalf("%s committed to its end while held", w.in0)
	}
	t.Logf("%s was held; the longest wait of a %s record to be folded meanwhile: %v", w.in0, w.in1, longest)

	// The holder's transaction ends: in0 resumes in this runner, its
	// held-retry acquiring it.
	w.release()
	held, released = false, true
	stepUntil(w.in0.String()+" resumed and every partition committed to its end", func() bool {
		return slices.Contains(r.Flows(), w.in0) && w.caughtUp()
	})
	if p0 := partitionStatus(t, r.Status(), w.in0); p0.State != engine.StateRunning || p0.Held || p0.Err != nil {
		t.Fatalf("%s after the release: %+v, want running", w.in0, p0)
	}
	w.check(r)
	if n := logs.count(slog.LevelWarn, "unstable "+w.in0.String()); n != 1 {
		t.Fatalf("logged the held offset of %s %d times, want once:\n%s", w.in0, n, logs)
	}
	if n := logs.count(slog.LevelError, "unstable "+w.in0.String()); n != 0 {
		t.Fatalf("logged the held offset of %s as an error %d times:\n%s", w.in0, n, logs)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return longest
}

// heldThenReleasedOnKfake is heldThenReleased on kfake under protocol,
// in virtual time.
func heldThenReleasedOnKfake(t *testing.T, protocol string, atAssignment bool) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		var release func()
		heldThenReleased(t, heldWorld{
			in0: accounts0, in1: accounts1,
			produce:        w.produce,
			committedAtEnd: w.committedAtEnd,
			caughtUp:       w.caughtUp,
			check:          w.check,
			hold: func() {
				_, release = holdCommittedOffset(t, w.opts(), "intruder", "bank", accounts0, snaps0)
				w.stableAsKafka(accounts0)
			},
			release: func() { release() },
			fence:   func() { fenceProducer(t, w.opts(), "bank-accounts-0") },
			bound:   5 * time.Minute, holdFor: 30 * time.Second,
		}, func(mod func(*engine.Config[int])) *engine.Member[int] {
			return w.runner(w.engineWith(mod), protocols[protocol])
		}, atAssignment)
	})
}

// A committed offset held at assignment stops only its partition: the
// other partition of the assignment folds and commits, the held one is
// reported waiting and held, and once the holder's transaction ends it
// resumes in the same runner; under each consumer protocol.
func TestAHeldCommittedOffsetAtAssignmentStopsOnlyItsPartitionOnKfake(t *testing.T) {
	for _, protocol := range []string{"classic-cooperative", "classic-eager", "consumer"} {
		t.Run(protocol, func(t *testing.T) { heldThenReleasedOnKfake(t, protocol, true) })
	}
}

// The same, held at a restart of the partition's flow (its producer
// fenced).
func TestAHeldCommittedOffsetAtRestartResumesWhenReleasedOnKfake(t *testing.T) {
	for _, protocol := range []string{"classic-cooperative", "classic-eager", "consumer"} {
		t.Run(protocol, func(t *testing.T) { heldThenReleasedOnKfake(t, protocol, false) })
	}
}
