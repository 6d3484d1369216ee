package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/storetest"
	"github.com/snapfence/snapfence/store/wire"
)

// lockedBuffer is a log sink safe for the backend's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// forgetful is how a kfake cluster is made to hold a hanging transaction:
// a transaction really open on the snapshot partition (kfake's partition
// state, DescribeProducers and the last stable offset all show it), held
// by a producer that the coordinators, as the clients see them, no longer
// know. kfake's coordinator cannot lose state, so the transaction is
// opened under a shadow transactional.id (which the takeover of the
// partition's own does not abort), and the two coordinator look-ups are
// intercepted: ListTransactions lists no transactional.id for the
// producer (nothing maps it any more), and, for an own-lineage hang,
// DescribeTransactions of the partition's transactional.id answers what a
// coordinator that lost the tail of __transaction_state answers after the
// takeover: Empty, with the hanging producer's id at a later epoch.
type forgetful struct {
	pid   int64
	epoch int16
	start int64
	// shadow is the shadow transaction's producer.
	shadow *kgo.Client
}

const (
	ownLineage     = true
	foreignLineage = false
)

// hang opens the shadow transaction with one record for key on in's
// snapshot partition and makes the coordinators forget it; own says
// whether DescribeTransactions maps its producer to in's transactional.id.
func hang(t *testing.T, w *fakeWorld, in store.TopicPartition, key string, own bool) forgetful {
	t.Helper()
	return hangOn(t, w, in, snapTP(in), key, own)
}

// hangOn is hang with the shadow transaction's record on tp.
func hangOn(t *testing.T, w *fakeWorld, in, tp store.TopicPartition, key string, own bool) forgetful {
	t.Helper()
	start := w.listEnd(t, tp, 0)
	cl := w.openTransaction(t, "shadow-"+key, 15*time.Minute, tp,
		[]wire.Record{wire.EncodeSnapshot("", store.Snapshot{Key: []byte(key), Value: []byte("never committed")})})
	pid, epoch, err := cl.ProducerID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f := forgetful{pid: pid, epoch: epoch, start: start, shadow: cl}
	txnID := fmt.Sprintf("%s-%s-%d", prefix, in.Topic, in.Partition)
	w.c.ControlKey(int16(kmsg.ListTransactions), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		w.c.KeepControl()
		req := kreq.(*kmsg.ListTransactionsRequest)
		for _, p := range req.ProducerIDFilters {
			if p == pid {
				return req.ResponseKind(), nil, true // nothing maps the producer
			}
		}
		return nil, nil, false
	})
	if own {
		// The lineage's first takeover claimed the snapshot partition (a
		// marker there), as the store's does: an id of this lineage
		// never stands beside an empty snapshot partition.
		w.ProduceForeign(t, in, wire.EncodeOffsetMarker(storetest.Application, 0, store.GroupIdentity{}))
		w.c.ControlKey(int16(kmsg.DescribeTransactions), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			w.c.KeepControl()
			req := kreq.(*kmsg.DescribeTransactionsRequest)
			if len(req.TransactionalIDs) != 1 || req.TransactionalIDs[0] != txnID {
				return nil, nil, false
			}
			resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
			st := kmsg.NewDescribeTransactionsResponseTransactionState()
			st.TransactionalID, st.State, st.ProducerID, st.ProducerEpoch, st.TimeoutMillis = txnID, "Empty", pid, epoch+1, 60000
			resp.TransactionStates = append(resp.TransactionStates, st)
			return resp, nil, true
		})
	}
	return f
}

// hangingRun is one recovery of in by a new owner after a committed
// snapshot k=committed and a hanging (or ongoing) transaction.
type hangingRun struct {
	w    *fakeWorld
	in   store.TopicPartition
	keys []string
	err  error
	logs *lockedBuffer
}

func recoverBehind(t *testing.T, w *fakeWorld, abort bool) hangingRun {
	t.Helper()
	in := store.TopicPartition{Topic: inputTopic, Partition: 0}
	logs := &lockedBuffer{}
	b, err := newBackend(t, w, kafka.Config{Mode: store.Transactional, TransactionalIDPrefix: prefix,
		AbortHangingTransactions: abort, RecoveryStallTimeout: time.Minute,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Acquire(context.Background(), store.Acquisition{Input: in, Identity: joinGroup(t, w, group)})
	if err != nil {
		t.Fatal(err)
	}
	r := hangingRun{w: w, in: in, logs: logs}
	for s, err := range p.Recover(context.Background(), nil) {
		if err != nil {
			r.err = err
			break
		}
		r.keys = append(r.keys, string(s.Key)+"="+string(s.Value))
	}
	return r
}

// committedThenHang writes k=committed through the store, then opens the
// hanging transaction.
func committedThenHang(t *testing.T, w *fakeWorld, own bool) forgetful {
	t.Helper()
	in := store.TopicPartition{Topic: inputTopic, Partition: 0}
	b, err := newBackend(t, w, kafka.Config{Mode: store.Transactional, TransactionalIDPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Acquire(context.Background(), store.Acquisition{Input: in, Identity: joinGroup(t, w, group)})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeOne(context.Background(), p, store.Snapshot{Key: []byte("k"), Value: []byte("committed"), Offset: 1}); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	return hang(t, w, in, "ghost", own)
}

func (r hangingRun) pinned(t *testing.T) bool {
	t.Helper()
	lso, hw := r.w.StableOffsets(t, r.in)
	return lso < hw
}

// The report: the recovery's error names the partition, the producer and
// the abort command, and matches both sentinels; one log line says it
// while the read waits, however long.
func TestAHangingTransactionIsReportedWithItsAbortCommand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		f := committedThenHang(t, w, ownLineage)
		r := recoverBehind(t, w, false)
		var he *kafka.HangingTransactionError
		if !errors.As(r.err, &he) || !errors.Is(r.err, store.ErrHangingTransaction) || !errors.Is(r.err, store.ErrRecoveryStalled) {
			t.Fatalf("err = %v, want a HangingTransactionError that is a stall", r.err)
		}
		snap := snapTP(r.in)
		if len(he.Hanging) != 1 || he.Hanging[0].Partition != snap || he.Hanging[0].ProducerID != f.pid ||
			he.Hanging[0].ProducerEpoch != f.epoch || he.Hanging[0].StartOffset != f.start || !he.Hanging[0].OwnLineage {
			t.Fatalf("hanging = %+v, want producer %d epoch %d on %s at %d, own lineage", he.Hanging, f.pid, f.epoch, snap, f.start)
		}
		cmd := fmt.Sprintf("kafka-transactions.sh --bootstrap-server %s abort --topic %s --partition %d --start-offset %d",
			w.c.ListenAddrs()[0], snap.Topic, snap.Partition, f.start)
		for _, want := range []string{cmd, fmt.Sprintf("producer %d epoch %d", f.pid, f.epoch), snap.String(), "AbortHangingTransactions is off", "Empty"} {
			if !strings.Contains(r.err.Error(), want) {
				t.Fatalf("%q does not say %q", r.err, want)
			}
		}
		if n := strings.Count(r.logs.String(), "recovery is held by a hanging transaction"); n != 1 {
			t.Fatalf("%d log lines of the hanging transaction over a minute's wait, want 1:\n%s", n, r.logs)
		}
		if !r.pinned(t) {
			t.Fatal("the hanging transaction was aborted with AbortHangingTransactions off")
		}
	})
}

// With the option, a hanging transaction of the partition's own lineage is
// aborted and the recovery completes with only what was committed.
func TestAHangingTransactionOfTheOwnLineageIsAbortedWithTheOption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		f := committedThenHang(t, w, ownLineage)
		r := recoverBehind(t, w, true)
		if r.err != nil || fmt.Sprint(r.keys) != "[k=committed]" {
			t.Fatalf("keys %v err %v, want only k=committed", r.keys, r.err)
		}
		if r.pinned(t) {
			t.Fatal("the last stable offset is still below the high watermark")
		}
		if !strings.Contains(r.logs.String(), "aborted a hanging transaction") || !strings.Contains(r.logs.String(), fmt.Sprintf("producer_id=%d", f.pid)) {
			t.Fatalf("no log line of the abort:\n%s", r.logs)
		}
	})
}

// Negative control: a hanging transaction whose producer no coordinator
// maps to the partition's transactional.id is only reported, option or not.
func TestAHangingTransactionOfAForeignLineageIsOnlyReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		f := committedThenHang(t, w, foreignLineage)
		r := recoverBehind(t, w, true)
		var he *kafka.HangingTransactionError
		if !errors.As(r.err, &he) || len(he.Hanging) != 1 || he.Hanging[0].ProducerID != f.pid || he.Hanging[0].OwnLineage {
			t.Fatalf("err = %v, want a HangingTransactionError of a foreign producer %d", r.err, f.pid)
		}
		if !strings.Contains(he.NotAborted, "not proven") {
			t.Fatalf("NotAborted = %q, want why it was not aborted", he.NotAborted)
		}
		if !r.pinned(t) {
			t.Fatal("a transaction of a foreign lineage was aborted")
		}
	})
}

// A transaction its coordinator has ongoing is not hanging: it is waited
// for, never aborted, and the stall is the plain one.
func TestAnOngoingTransactionIsNeverAborted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		in := store.TopicPartition{Topic: inputTopic, Partition: 0}
		w.openTransaction(t, "other-app", 15*time.Minute, snapTP(in),
			[]wire.Record{wire.EncodeSnapshot("", store.Snapshot{Key: []byte("theirs"), Value: []byte("open")})})
		r := recoverBehind(t, w, true)
		var se *store.RecoveryStalledError
		if !errors.As(r.err, &se) || se.Cause != store.StallOpenTransaction || errors.Is(r.err, store.ErrHangingTransaction) {
			t.Fatalf("err = %v, want a plain open-transaction stall", r.err)
		}
		if !r.pinned(t) {
			t.Fatal("an ongoing transaction was aborted")
		}
		if strings.Contains(r.logs.String(), "hanging") {
			t.Fatalf("an ongoing transaction was logged as hanging:\n%s", r.logs)
		}
	})
}

// A coordinator that answers every InitProducerID of the partition's
// transactional.id with CONCURRENT_TRANSACTIONS (on a real broker: one
// left ending a transaction it cannot finish, hanging_it_test.go) fails
// the takeover after the stall timeout with a TakeoverStalledError, not a
// silent wait: franz-go retries that answer for ever. Without the bound
// this test never ends.
func TestATakeoverRefusedForeverFailsAfterTheStallTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		in := store.TopicPartition{Topic: inputTopic, Partition: 0}
		txnID := fmt.Sprintf("%s-%s-%d", prefix, in.Topic, in.Partition)
		w.c.ControlKey(int16(kmsg.InitProducerID), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			w.c.KeepControl()
			req := kreq.(*kmsg.InitProducerIDRequest)
			if req.TransactionalID == nil || *req.TransactionalID != txnID {
				return nil, nil, false
			}
			resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
			resp.ErrorCode = kerr.ConcurrentTransactions.Code
			return resp, nil, true
		})
		b, err := newBackend(t, w, kafka.Config{Mode: store.Transactional, TransactionalIDPrefix: prefix, RecoveryStallTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		_, err = b.Acquire(context.Background(), store.Acquisition{Input: in, Identity: joinGroup(t, w, group)})
		var te *kafka.TakeoverStalledError
		if !errors.As(err, &te) || !errors.Is(err, kafka.ErrTakeoverStalled) || te.TransactionalID != txnID || te.Stalled != time.Minute {
			t.Fatalf("err = %v, want a TakeoverStalledError of %s after 1m", err, txnID)
		}
		if waited := time.Since(began); waited < time.Minute {
			t.Fatalf("failed after %v, before the stall timeout", waited)
		}
		if !strings.Contains(err.Error(), "CONCURRENT_TRANSACTIONS") || !strings.Contains(err.Error(), txnID) {
			t.Fatalf("%q does not name the answer and the transactional.id", err)
		}
	})
}

// The option needs the transactional.id lineage that only Transactional
// mode has: New refuses it in Plain mode, naming the field.
func TestAbortHangingTransactionsNeedsTransactionalMode(t *testing.T) {
	_, err := kafka.New(context.Background(), kafka.Config{Mode: store.Plain, SeedBrokers: []string{"127.0.0.1:1"}, AbortHangingTransactions: true})
	var ce *store.ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, store.ErrMisconfigured) || ce.Subject != "Config.AbortHangingTransactions" {
		t.Fatalf("err = %v, want a ConfigError of Config.AbortHangingTransactions", err)
	}
}

// Only the deadline makes a stall: a takeover refused for good (here, no
// permission on the transactional.id) fails with that refusal at once.
func TestATakeoverRefusedOutrightIsNotAStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		in := store.TopicPartition{Topic: inputTopic, Partition: 0}
		w.c.ControlKey(int16(kmsg.InitProducerID), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			w.c.KeepControl()
			req := kreq.(*kmsg.InitProducerIDRequest)
			if req.TransactionalID == nil {
				return nil, nil, false
			}
			resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
			resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
			return resp, nil, true
		})
		b, err := newBackend(t, w, kafka.Config{Mode: store.Transactional, TransactionalIDPrefix: prefix, RecoveryStallTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		_, err = b.Acquire(context.Background(), store.Acquisition{Input: in, Identity: joinGroup(t, w, group)})
		if err == nil || errors.Is(err, kafka.ErrTakeoverStalled) || !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
			t.Fatalf("err = %v, want the authorization failure, not a stall", err)
		}
		if waited := time.Since(began); waited >= time.Minute {
			t.Fatalf("failed after %v: waited out the stall timeout", waited)
		}
	})
}

// offsetsTP is the group's offsets partition in offsetsHang's cluster.
var offsetsTP = store.TopicPartition{Topic: "__consumer_offsets", Partition: 0}

// offsetsHang makes a forgotten transaction hold the committed offset
// rather than the snapshot read: open on the group's offsets partition,
// as a transaction's TxnOffsetCommit leaves it when its coordinator
// forgot it (seen on a broker killed with SIGKILL). kfake keeps group
// offsets outside any topic, so __consumer_offsets here is a topic of the
// test's own (one partition: the group's is 0) that the shadow
// transaction writes, and the acquisition's offset resolution follows the
// group coordinator's rule: the offset is held (UNSTABLE_OFFSET_COMMIT)
// while a transaction is open on the group's offsets partition, and
// resolves once it is aborted.
func offsetsHang(t *testing.T, w *fakeWorld, own bool) (forgetful, store.Acquisition) {
	t.Helper()
	if err := kafka.CreateTopic(context.Background(), w.admin, offsetsTP.Topic, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	in := store.TopicPartition{Topic: inputTopic, Partition: 0}
	f := hangOn(t, w, in, offsetsTP, "offsets", own)
	a := store.Acquisition{Input: in, Identity: joinGroup(t, w, group), ResolveAssignedOffset: func(ctx context.Context) (int64, error) {
		if lso, hw := w.listEnd(t, offsetsTP, 1), w.listEnd(t, offsetsTP, 0); lso < hw {
			return 0, fmt.Errorf("committed offset of %s: %w: UNSTABLE_OFFSET_COMMIT", in, store.ErrOffsetUnstable)
		}
		return 0, nil
	}}
	return f, a
}

func (w *fakeWorld) offsetsHeld(t *testing.T) bool {
	t.Helper()
	return w.listEnd(t, offsetsTP, 1) < w.listEnd(t, offsetsTP, 0)
}

// The report, when the forgotten transaction holds the committed offset:
// the acquisition's error is an UnstableOffsetError that lists it as
// hanging, with its abort command and why the store left it, and matches
// ErrHangingTransaction as well as ErrOffsetUnstable.
func TestAHangingTransactionOnTheOffsetsPartitionIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		f, a := offsetsHang(t, w, ownLineage)
		b, err := newBackend(t, w, kafka.Config{Mode: store.Transactional, TransactionalIDPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.Acquire(context.Background(), a)
		var ue *kafka.UnstableOffsetError
		if !errors.As(err, &ue) || !errors.Is(err, store.ErrOffsetUnstable) || !errors.Is(err, store.ErrHangingTransaction) {
			t.Fatalf("err = %v, want an UnstableOffsetError that is a hanging transaction", err)
		}
		if len(ue.Hanging) != 1 || ue.Hanging[0].Partition != offsetsTP || ue.Hanging[0].ProducerID != f.pid ||
			ue.Hanging[0].ProducerEpoch != f.epoch || ue.Hanging[0].StartOffset != f.start || !ue.Hanging[0].OwnLineage {
			t.Fatalf("hanging = %+v, want producer %d epoch %d on %s at %d, own lineage", ue.Hanging, f.pid, f.epoch, offsetsTP, f.start)
		}
		cmd := fmt.Sprintf("kafka-transactions.sh --bootstrap-server %s abort --topic %s --partition %d --start-offset %d",
			w.c.ListenAddrs()[0], offsetsTP.Topic, offsetsTP.Partition, f.start)
		for _, want := range []string{cmd, "AbortHangingTransactions is off", "Empty", a.Input.String()} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%q does not say %q", err, want)
			}
		}
		if !w.offsetsHeld(t) {
			t.Fatal("the hanging transaction was aborted with AbortHangingTransactions off")
		}
	})
}

// With the option, a forgotten transaction of the partition's own lineage
// that holds the committed offset is aborted, and the acquisition
// resolves the offset and succeeds.
func TestAHangingTransactionOnTheOffsetsPartitionIsAbortedWithTheOption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		f, a := offsetsHang(t, w, ownLineage)
		logs := &lockedBuffer{}
		b, err := newBackend(t, w, kafka.Config{Mode: store.Transactional, TransactionalIDPrefix: prefix,
			AbortHangingTransactions: true, Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Acquire(context.Background(), a); err != nil {
			t.Fatalf("acquire: %v", err)
		}
		if w.offsetsHeld(t) {
			t.Fatal("the offsets partition still has the transaction open")
		}
		if !strings.Contains(logs.String(), "aborted a hanging transaction") || !strings.Contains(logs.String(), fmt.Sprintf("producer_id=%d", f.pid)) {
			t.Fatalf("no log line of the abort:\n%s", logs)
		}
	})
}

// Negative control: a forgotten transaction on the offsets partition whose
// producer nothing maps to the partition's transactional.id is reported,
// option or not, and left alone.
func TestAHangingTransactionOnTheOffsetsPartitionOfAForeignLineageIsOnlyReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		f, a := offsetsHang(t, w, foreignLineage)
		b, err := newBackend(t, w, kafka.Config{Mode: store.Transactional, TransactionalIDPrefix: prefix, AbortHangingTransactions: true})
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.Acquire(context.Background(), a)
		var ue *kafka.UnstableOffsetError
		if !errors.As(err, &ue) || len(ue.Hanging) != 1 || ue.Hanging[0].ProducerID != f.pid || ue.Hanging[0].OwnLineage {
			t.Fatalf("err = %v, want an UnstableOffsetError with foreign producer %d hanging", err, f.pid)
		}
		if !strings.Contains(ue.NotAborted, "not proven") {
			t.Fatalf("NotAborted = %q, want why it was not aborted", ue.NotAborted)
		}
		if !w.offsetsHeld(t) {
			t.Fatal("a transaction of a foreign lineage was aborted")
		}
	})
}

// outputHang is a forgotten transaction of the partition's lineage (own)
// or of another (foreign) left open on partition 1 of the output topic
// only: no snapshot and no committed offset of it, so neither the
// recovery nor the offset resolution meets it; only the takeover's look
// at the declared output topics does.
func outputHang(t *testing.T, w *fakeWorld, own bool) (forgetful, store.TopicPartition, store.Acquisition) {
	t.Helper()
	in := store.TopicPartition{Topic: inputTopic, Partition: 0}
	out := store.TopicPartition{Topic: w.OutputTopic(), Partition: 1}
	f := hangOn(t, w, in, out, "ghost-output", own)
	return f, out, store.Acquisition{Input: in, Identity: joinGroup(t, w, group), Outputs: []string{w.OutputTopic()}}
}

func (w *fakeWorld) outputHeld(t *testing.T, out store.TopicPartition) bool {
	t.Helper()
	return w.listEnd(t, out, 1) < w.listEnd(t, out, 0)
}

// With the option, the takeover aborts a transaction of the partition's
// own lineage left open on an output partition, before the partition
// writes anything; its first batch's outputs are then the only ones a
// read_committed reader sees.
func TestATransactionLeftOpenOnAnOutputPartitionIsAbortedAtTheTakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		f, out, a := outputHang(t, w, ownLineage)
		logs := &lockedBuffer{}
		b, err := newBackend(t, w, kafka.Config{Mode: store.Transactional, TransactionalIDPrefix: prefix,
			AbortHangingTransactions: true, Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		p, err := b.Acquire(context.Background(), a)
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		if w.outputHeld(t, out) {
			t.Fatalf("%s still has the transaction open after the takeover", out)
		}
		if s := logs.String(); !strings.Contains(s, "aborted a hanging transaction") || !strings.Contains(s, fmt.Sprintf("producer_id=%d", f.pid)) ||
			!strings.Contains(s, "partition="+out.String()) {
			t.Fatalf("no log line of the abort on %s:\n%s", out, s)
		}
		if err := storetest.CommitBatch(context.Background(), p, store.Batch{Outputs: []store.Output{{Topic: out.Topic, Key: []byte("k"), Value: []byte("once")}}, Offset: 1}); err != nil {
			t.Fatal(err)
		}
		if got := w.ReadOutputs(t, true); len(got) != 1 || string(got[0].Value) != "once" {
			t.Fatalf("read_committed outputs %v, want the batch's one", got)
		}
	})
}

// Without the option, the takeover reports it, with the command that
// aborts it, and the acquisition fails (the caller retries; nothing is
// written); once an operator aborts it as the command does, the next
// acquisition succeeds.
func TestATransactionLeftOpenOnAnOutputPartitionIsReportedAtTheTakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		f, out, a := outputHang(t, w, ownLineage)
		b, err := newBackend(t, w, kafka.Config{Mode: store.Transactional, TransactionalIDPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.Acquire(context.Background(), a)
		var he *kafka.HangingTransactionError
		if !errors.As(err, &he) || !errors.Is(err, store.ErrHangingTransaction) || !he.Takeover || he.Input != a.Input {
			t.Fatalf("err = %v, want a HangingTransactionError of the takeover of %s", err, a.Input)
		}
		if len(he.Hanging) != 1 || he.Hanging[0].Partition != out || he.Hanging[0].ProducerID != f.pid || he.Hanging[0].StartOffset != f.start || !he.Hanging[0].OwnLineage {
			t.Fatalf("hanging = %+v, want producer %d on %s at %d, own lineage", he.Hanging, f.pid, out, f.start)
		}
		cmd := fmt.Sprintf("kafka-transactions.sh --bootstrap-server %s abort --topic %s --partition %d --start-offset %d",
			w.c.ListenAddrs()[0], out.Topic, out.Partition, f.start)
		for _, want := range []string{cmd, "AbortHangingTransactions is off", "writes nothing until it is aborted"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%q does not say %q", err, want)
			}
		}
		if !w.outputHeld(t, out) {
			t.Fatal("the transaction was aborted with AbortHangingTransactions off")
		}
		// The operator's abort, as kafka-transactions.sh abort sends it.
		resp, err := w.adm.WriteTxnMarkers(context.Background(), kadm.TxnMarkers{ProducerID: he.Hanging[0].ProducerID,
			ProducerEpoch: he.Hanging[0].ProducerEpoch, CoordinatorEpoch: he.Hanging[0].CoordinatorEpoch,
			Topics: kadm.TopicsSet{out.Topic: {out.Partition: {}}}})
		if err != nil {
			t.Fatal(err)
		}
		resp.EachPartition(func(r kadm.TxnMarkersPartitionResponse) {
			if r.Err != nil {
				t.Fatalf("abort: %v", r.Err)
			}
		})
		if w.outputHeld(t, out) {
			t.Fatal("the operator's abort left the transaction open")
		}
		// kfake's coordinator still has the shadow transaction ongoing,
		// and its DescribeProducers reports what its coordinator has, not
		// what the partition's markers say (Kafka clears a producer's
		// transaction at its abort marker): end it there too.
		if err := f.shadow.EndTransaction(context.Background(), kgo.TryAbort); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Acquire(context.Background(), a); err != nil {
			t.Fatalf("acquire after the abort: %v", err)
		}
	})
}

// Negative control: a transaction of another lineage open on an output
// partition is not the takeover's to abort, or to wait for (the output
// topic is shared with other producers): the acquisition goes on, and
// the transaction is left alone.
func TestATransactionOfAForeignLineageOnAnOutputPartitionIsLeftAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		_, out, a := outputHang(t, w, foreignLineage)
		b, err := newBackend(t, w, kafka.Config{Mode: store.Transactional, TransactionalIDPrefix: prefix, AbortHangingTransactions: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Acquire(context.Background(), a); err != nil {
			t.Fatalf("acquire: %v", err)
		}
		if !w.outputHeld(t, out) {
			t.Fatal("a foreign transaction on the output partition was aborted")
		}
	})
}

// A checkpoint that a transaction aborted after it straddles is refused
// (store.CheckpointAbortedTransaction): a local copy takes a state in once
// its transaction is acknowledged, and a broker that lost the markers of
// an acknowledged commit leaves it open for an abort to drop. Refused
// before the read when the abort came first; after it when the store
// aborted the transaction while the read waited behind it. A checkpoint
// at the transaction's start, or past its abort, is a valid base.
func TestACheckpointStraddlingAnAbortedTransactionIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		in := store.TopicPartition{Topic: inputTopic, Partition: 0}
		f := committedThenHang(t, w, ownLineage) // k=committed, then the ghost from f.start
		// A second record of the ghost, so that a read from inside it has
		// something to wait for.
		if err := f.shadow.ProduceSync(context.Background(), toKgo(snapTP(in),
			[]wire.Record{wire.EncodeSnapshot("", store.Snapshot{Key: []byte("ghost-2"), Value: []byte("never committed")})})...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		b, err := newBackend(t, w, kafka.Config{Mode: store.Transactional, TransactionalIDPrefix: prefix, AbortHangingTransactions: true})
		if err != nil {
			t.Fatal(err)
		}
		p, err := b.Acquire(context.Background(), store.Acquisition{Input: in, Identity: joinGroup(t, w, group)})
		if err != nil {
			t.Fatal(err)
		}
		td, err := w.adm.ListTopics(context.Background(), snapTP(in).Topic)
		if err != nil {
			t.Fatal(err)
		}
		base := store.Checkpoint{TopicID: td[snapTP(in).Topic].ID, At: time.Now()}
		recoverFrom := func(offset int64) error {
			cp := base
			cp.Offset = offset
			var last error
			for _, err := range p.Recover(context.Background(), &cp) {
				last = err
			}
			return last
		}
		// The store aborts the ghost while the read from inside it waits.
		err = recoverFrom(f.start + 1)
		ce, ok := errors.AsType[*store.CheckpointError](err)
		if !ok || ce.Reason != store.CheckpointAbortedTransaction || !errors.Is(err, store.ErrCheckpointUnusable) {
			t.Fatalf("a delta from inside the hanging transaction: %v, want a CheckpointError %q", err, store.CheckpointAbortedTransaction)
		}
		// Aborted now: refused before the read.
		if err := recoverFrom(f.start + 1); !errors.Is(err, store.ErrCheckpointUnusable) {
			t.Fatalf("a delta from inside the aborted transaction: %v, want it refused", err)
		}
		// Negative controls: at its start, and past its marker.
		if err := recoverFrom(f.start); err != nil {
			t.Fatalf("a delta from the transaction's start: %v", err)
		}
		if err := recoverFrom(w.listEnd(t, snapTP(in), 0)); err != nil {
			t.Fatalf("a delta from the log end: %v", err)
		}
	})
}
