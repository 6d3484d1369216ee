//go:build it

package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/storetest"
	"github.com/snapfence/snapfence/store/wire"
)

// A hanging transaction as a broker that lost the tail of
// __transaction_state leaves it, on a real broker: the partition's own
// transactional.id commits a snapshot, then opens a transaction on the
// snapshot partition; the broker is stopped and its __transaction_state
// log cut back to its end before that transaction (the coordinator keeps
// the committed one, forgets the open one), and restarted. The takeover's
// InitProducerID then finds the id complete and bumps its epoch without
// aborting anything: the transaction stays open on the snapshot partition
// and pins its last stable offset. The store must report it with the
// abort command (option off), and abort it itself (option on), after
// which the recovery reads what was committed and nothing else.
func TestAHangingTransactionTheCoordinatorForgotOnKafka(t *testing.T) {
	brokerHarness{}.RunOnOwnCluster(t, func(t *testing.T, sw storetest.World) {
		f := forget(t, sw.(*brokerWorld), 0, false)
		w, ctx, in, snap, start, pid, epoch := f.w, context.Background(), f.in, f.snap, f.start, f.pid, f.epoch
		newBackend, m := f.newBackend, f.m

		recoverOnce := func(abort bool) (keys []string, logs *lockedBuffer, err error) {
			logs = &lockedBuffer{}
			b := newBackend(abort, logs)
			p, err := b.Acquire(ctx, store.Acquisition{Input: in, Identity: store.IdentityFunc(m.Identity)})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = b.Close() }()
			for s, err := range p.Recover(ctx, nil) {
				if err != nil {
					return keys, logs, err
				}
				keys = append(keys, string(s.Key)+"="+string(s.Value))
			}
			return keys, logs, nil
		}

		// Off: reported, with the command, and left alone.
		_, logs, err := recoverOnce(false)
		var he *kafka.HangingTransactionError
		if !errors.As(err, &he) || !errors.Is(err, store.ErrHangingTransaction) {
			t.Fatalf("err = %v, want a HangingTransactionError\n%s", err, logs)
		}
		if len(he.Hanging) != 1 || he.Hanging[0].Partition != snap || he.Hanging[0].ProducerID != pid ||
			he.Hanging[0].StartOffset != start || !he.Hanging[0].OwnLineage {
			t.Fatalf("hanging = %+v, want producer %d (epoch %d) on %s at %d, of the own lineage", he.Hanging, pid, epoch, snap, start)
		}
		cmd := fmt.Sprintf("abort --topic %s --partition %d --start-offset %d", snap.Topic, snap.Partition, start)
		if !strings.Contains(err.Error(), cmd) {
			t.Fatalf("%q does not give the command %q", err, cmd)
		}
		if lso, _ := w.stable(t, snap); lso != start {
			t.Fatalf("the last stable offset moved to %d with AbortHangingTransactions off", lso)
		}

		// On: aborted by the store, and the recovery reads what was
		// committed only.
		keys, logs, err := recoverOnce(true)
		if err != nil || fmt.Sprint(keys) != "[k=committed]" {
			t.Fatalf("keys %v err %v, want only k=committed\n%s", keys, err, logs)
		}
		if lso, hw := w.stable(t, snap); lso != hw {
			t.Fatalf("after the abort the last stable offset is %d, the end %d", lso, hw)
		}
		if !strings.Contains(logs.String(), "aborted a hanging transaction") {
			t.Fatalf("no log line of the abort:\n%s", logs)
		}
	})
}

// forgotten is a broker whose coordinator forgot a transaction of in's
// own transactional.id that is open on in's snapshot partition from
// start.
type forgotten struct {
	w        *brokerWorld
	in, snap store.TopicPartition
	m        storetest.Member
	start    int64
	pid      int64
	epoch    int16
	// committed is the group's committed offset of in before the
	// forgotten transaction.
	committed  int64
	newBackend func(abort bool, logs *lockedBuffer) *kafka.Backend
}

// hangingBackends makes the backends of the hanging-transaction cases:
// Transactional, with AbortHangingTransactions as asked, logging to logs,
// each closed at the test's end.
func (w *brokerWorld) hangingBackends(t *testing.T) func(abort bool, logs *lockedBuffer) *kafka.Backend {
	return func(abort bool, logs *lockedBuffer) *kafka.Backend {
		b, err := kafka.New(context.Background(), kafka.Config{
			Mode: store.Transactional, SeedBrokers: w.seeds(), Application: storetest.Application, TransactionalIDPrefix: w.prefix,
			AbortHangingTransactions: abort, RecoveryStallTimeout: 20 * time.Second,
			Logger: slog.New(slog.NewTextHandler(logs, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
}

// forget commits k=committed through the store, opens the transaction to
// forget and cuts __transaction_state back to its end before it, less
// drop records of the committed transaction's state (1: its
// CompleteCommit, so the coordinator is left ending it). With offsets,
// the forgotten transaction also commits the input partition's offset
// (TxnOffsetCommit with the member's live identity), as every
// transaction of the store does: it is then open on the group's offsets
// partition too, and holds the committed offset.
func forget(t *testing.T, w *brokerWorld, drop int64, offsets bool) forgotten {
	t.Helper()
	ctx := context.Background()
	in := store.TopicPartition{Topic: w.input, Partition: 0}
	snap := snapTP(in)
	m := w.Join(t)
	newBackend := w.hangingBackends(t)

	// k=committed, through the store.
	b := newBackend(false, &lockedBuffer{})
	p, err := b.Acquire(ctx, store.Acquisition{Input: in, Identity: store.IdentityFunc(m.Identity)})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeOne(ctx, p, store.Snapshot{Key: []byte("k"), Value: []byte("committed"), Offset: 1}); err != nil {
		t.Fatal(err)
	}
	txnID := b.TransactionalID(in)
	_ = b.Close()
	committed := w.stableCommittedOffset(t, m.Identity().Group, in)

	// The transaction the coordinator will forget: the partition's own
	// transactional.id, one record on the snapshot partition.
	// The cut keeps the committed transaction's last state record
	// (CompleteCommit: the markers written) and nothing after.
	w.awaitTxnState(t, txnID, "CompleteCommit")
	txnState := store.TopicPartition{Topic: "__transaction_state", Partition: 0}
	stateEnd := w.listEnd(t, txnState, 0)
	// Its first record lands at the log end once the committed
	// transaction's marker is in (the last stable offset reaches the
	// end).
	start := w.stableEnd(t, snap)
	cl := w.openTransaction(t, txnID, 15*time.Minute, snap,
		[]wire.Record{wire.EncodeSnapshot("", store.Snapshot{Key: []byte("ghost"), Value: []byte("never committed")})})
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if offsets {
		w.txnOffsetCommit(t, cl, txnID, m.Identity(), in, committed+5)
	}
	if end := w.listEnd(t, txnState, 0); end <= stateEnd {
		t.Fatalf("__transaction_state ends at %d, as before the transaction (%d): nothing to forget", end, stateEnd)
	}
	w.cutAndRestart(t, txnState, stateEnd-drop)
	// The restart may have moved the group on (its member's session ran
	// on while the broker was down): go on once the restarted coordinator
	// answered the member's heartbeat and the member knows its
	// generation, so that its live identity is the group's.
	w.settleAfterRestart(t)
	if lso, hw := w.stable(t, snap); lso != start || hw != start+1 {
		t.Fatalf("after the restart the snapshot partition's last stable offset is %d and its end %d, want %d and %d (the transaction open)", lso, hw, start, start+1)
	}
	return forgotten{w: w, in: in, snap: snap, m: m, start: start, pid: pid, epoch: epoch, committed: committed, newBackend: newBackend}
}

// stable is snap's last stable offset and high watermark, now (the
// world's StableOffsets waits for open transactions to end first).
func (w *brokerWorld) stable(t *testing.T, snap store.TopicPartition) (int64, int64) {
	t.Helper()
	return w.listEnd(t, snap, 1), w.listEnd(t, snap, 0)
}

// awaitTxnState waits until txnID's coordinator reports state.
func (w *brokerWorld) awaitTxnState(t *testing.T, txnID, state string) {
	t.Helper()
	var last string
	for range 600 {
		d, err := w.adm.DescribeTransactions(context.Background(), txnID)
		if err == nil {
			if s, ok := d[txnID]; ok && s.Err == nil {
				if last = s.State; last == state {
					return
				}
			}
		}
		time.Sleep(100 * time.Millisecond) // polling an observed state
	}
	t.Fatalf("transactional.id %q is %q after a minute, want %q", txnID, last, state)
}

// stableEnd waits until snap has no open transaction (its last stable
// offset at its end) and returns that end.
func (w *brokerWorld) stableEnd(t *testing.T, snap store.TopicPartition) int64 {
	t.Helper()
	for range 600 {
		if lso, hw := w.stable(t, snap); lso == hw {
			return hw
		}
		time.Sleep(100 * time.Millisecond) // polling an observed state
	}
	t.Fatalf("%s still has an open transaction after a minute", snap)
	return 0
}

// The coordinator lost only the last record of the committed
// transaction's state (its CompleteCommit): it loads the transaction as
// PrepareCommit and tries to finish it, but the snapshot partition's
// producer has moved on to a later epoch (the forgotten transaction), so
// it never does, and answers every InitProducerID of the id with
// CONCURRENT_TRANSACTIONS, which franz-go retries for ever. The takeover
// must fail after the stall timeout with a *kafka.TakeoverStalledError
// naming the coordinator's state and the open transaction, with its abort
// command, not wait silently.
func TestATakeoverTheCoordinatorNeverAnswersFailsOnKafka(t *testing.T) {
	brokerHarness{}.RunOnOwnCluster(t, func(t *testing.T, sw storetest.World) {
		f := forget(t, sw.(*brokerWorld), 1, false)
		b := f.newBackend(false, &lockedBuffer{})
		began := time.Now()
		_, err := b.Acquire(context.Background(), store.Acquisition{Input: f.in, Identity: store.IdentityFunc(f.m.Identity)})
		var te *kafka.TakeoverStalledError
		if !errors.As(err, &te) || !errors.Is(err, kafka.ErrTakeoverStalled) {
			t.Fatalf("err = %v, want a TakeoverStalledError", err)
		}
		if waited := time.Since(began); waited < 20*time.Second {
			t.Fatalf("the takeover failed after %v, before its stall timeout (20s)", waited)
		}
		if !strings.Contains(te.Coordinator, "PrepareCommit") {
			t.Fatalf("coordinator %q, want its PrepareCommit", te.Coordinator)
		}
		if len(te.Open) != 1 || te.Open[0].Partition != f.snap || te.Open[0].ProducerID != f.pid || te.Open[0].StartOffset != f.start {
			t.Fatalf("open = %+v, want producer %d's transaction on %s at %d", te.Open, f.pid, f.snap, f.start)
		}
		cmd := fmt.Sprintf("abort --topic %s --partition %d --start-offset %d", f.snap.Topic, f.snap.Partition, f.start)
		if !strings.Contains(err.Error(), cmd) || !strings.Contains(err.Error(), "CONCURRENT_TRANSACTIONS") {
			t.Fatalf("%q does not say CONCURRENT_TRANSACTIONS and give the command %q", err, cmd)
		}
	})
}

// txnOffsetCommit commits offset of in for id's group in cl's open
// transaction.
func (w *brokerWorld) txnOffsetCommit(t *testing.T, cl *kgo.Client, txnID string, id store.GroupIdentity, in store.TopicPartition, offset int64) {
	t.Helper()
	ctx := context.Background()
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	topics, err := w.adm.ListTopics(ctx, in.Topic)
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = txnID, id.Group, pid, epoch
	req.MemberID, req.Generation = id.MemberID, id.Generation
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic, rt.TopicID = in.Topic, topics[in.Topic].ID
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = in.Partition, offset, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode); err != nil {
		t.Fatalf("TxnOffsetCommit of %s at %d: %v", in, offset, err)
	}
}

// stableCommittedOffset waits until group's committed offset of in is
// stable (the last commit's markers landed) and returns it.
func (w *brokerWorld) stableCommittedOffset(t *testing.T, group string, in store.TopicPartition) int64 {
	t.Helper()
	var err error
	for range 600 {
		var off int64
		if off, err = w.committedOffset(group, in)(context.Background()); err == nil {
			return off
		}
		if !errors.Is(err, store.ErrOffsetUnstable) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // polling an observed state
	}
	t.Fatalf("the committed offset of %s is still held after a minute: %v", in, err)
	return 0
}

// committedOffset is what the engine's offset resolution does: the
// group's committed offset of in, read stable (RequireStable), answered
// with store.ErrOffsetUnstable while a transaction holds it.
func (w *brokerWorld) committedOffset(group string, in store.TopicPartition) func(context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group, req.RequireStable = group, true
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic, rt.Partitions = in.Topic, []int32{in.Partition}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, w.admin)
		if err != nil {
			return 0, err
		}
		code, offset, found := resp.ErrorCode, int64(-1), false
		see := func(topic string, partition int32, off int64, pcode int16) {
			if topic == in.Topic && partition == in.Partition {
				found, offset = true, off
				if code == 0 {
					code = pcode
				}
			}
		}
		for _, g := range resp.Groups { // v8+
			if code == 0 {
				code = g.ErrorCode
			}
			for _, t := range g.Topics {
				for _, p := range t.Partitions {
					see(t.Topic, p.Partition, p.Offset, p.ErrorCode)
				}
			}
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				see(t.Topic, p.Partition, p.Offset, p.ErrorCode)
			}
		}
		switch err := kerr.ErrorForCode(code); {
		case errors.Is(err, kerr.UnstableOffsetCommit):
			return 0, fmt.Errorf("committed offset of %s: %w: %w", in, store.ErrOffsetUnstable, err)
		case err != nil:
			return 0, err
		case !found:
			return 0, fmt.Errorf("committed offset of %s: not in the answer", in)
		}
		return max(offset, 0), nil
	}
}

// A forgotten transaction that also committed the input's offset holds
// the group's committed offset, not only the snapshot read: the
// acquisition's offset resolution is answered UNSTABLE_OFFSET_COMMIT.
// The store must report it as hanging on the group's offsets partition
// (and the snapshot partition) with the abort commands (option off), and
// abort both itself (option on), after which the offset resolves to the
// one committed before and the recovery reads only the committed
// snapshot.
func TestAHangingTransactionHoldingTheCommittedOffsetOnKafka(t *testing.T) {
	brokerHarness{}.RunOnOwnCluster(t, func(t *testing.T, sw storetest.World) {
		f := forget(t, sw.(*brokerWorld), 0, true)
		w, ctx := f.w, context.Background()
		group := f.m.Identity().Group
		a := store.Acquisition{Input: f.in, Identity: store.IdentityFunc(f.m.Identity), ResolveAssignedOffset: w.committedOffset(group, f.in)}
		if _, err := a.ResolveAssignedOffset(ctx); !errors.Is(err, store.ErrOffsetUnstable) {
			t.Fatalf("after the restart the committed offset resolves with %v, want it held", err)
		}

		// Off: reported, with the commands, and left alone.
		logs := &lockedBuffer{}
		_, err := f.newBackend(false, logs).Acquire(ctx, a)
		var ue *kafka.UnstableOffsetError
		if !errors.As(err, &ue) || !errors.Is(err, store.ErrHangingTransaction) || !errors.Is(err, store.ErrOffsetUnstable) {
			t.Fatalf("err = %v, want an UnstableOffsetError that is a hanging transaction\n%s", err, logs)
		}
		if len(ue.Hanging) != 2 || ue.Hanging[0].Partition.Topic != "__consumer_offsets" || ue.Hanging[1].Partition != f.snap {
			t.Fatalf("hanging = %+v, want producer %d's transaction on the group's offsets partition, then on %s", ue.Hanging, f.pid, f.snap)
		}
		for _, h := range ue.Hanging {
			if h.ProducerID != f.pid || !h.OwnLineage {
				t.Fatalf("hanging = %+v, want producer %d of the own lineage", ue.Hanging, f.pid)
			}
			cmd := fmt.Sprintf("abort --topic %s --partition %d --start-offset %d", h.Partition.Topic, h.Partition.Partition, h.StartOffset)
			if !strings.Contains(err.Error(), cmd) {
				t.Fatalf("%q does not give the command %q", err, cmd)
			}
		}
		if !strings.Contains(err.Error(), "AbortHangingTransactions is off") {
			t.Fatalf("%q does not say why it was not aborted", err)
		}
		if _, err := a.ResolveAssignedOffset(ctx); !errors.Is(err, store.ErrOffsetUnstable) {
			t.Fatalf("with AbortHangingTransactions off the offset resolves (%v)", err)
		}

		// On: aborted by the store; the offset is the one committed
		// before, and the recovery reads what was committed only.
		logs = &lockedBuffer{}
		b := f.newBackend(true, logs)
		p, err := b.Acquire(ctx, a)
		if err != nil {
			t.Fatalf("acquire with AbortHangingTransactions: %v\n%s", err, logs)
		}
		if off, err := a.ResolveAssignedOffset(ctx); err != nil || off != f.committed {
			t.Fatalf("after the abort the committed offset is %d (%v), want %d, the committed transaction's", off, err, f.committed)
		}
		var keys []string
		for s, err := range p.Recover(ctx, nil) {
			if err != nil {
				t.Fatalf("recover: %v\n%s", err, logs)
			}
			keys = append(keys, string(s.Key)+"="+string(s.Value))
		}
		if fmt.Sprint(keys) != "[k=committed]" {
			t.Fatalf("keys %v, want only k=committed", keys)
		}
		if n := strings.Count(logs.String(), "aborted a hanging transaction"); n != 2 {
			t.Fatalf("%d log lines of the abort, want 2 (the offsets and the snapshot partition):\n%s", n, logs)
		}
	})
}

// forgottenWithOutput is a broker whose coordinator forgot a transaction
// of in's own transactional.id that is open on in's snapshot partition,
// on the output partition of key k, and on the group's offsets partition,
// as an engine's exactly-once batch leaves it: the batch of input offset
// 1, whose output "out-of-1" the replay makes again.
type forgottenWithOutput struct {
	forgotten
	out store.TopicPartition
}

// forgetWithOutput commits the batch of input offset 0 through the store
// (k=committed, output "out-of-0", offset 1), opens the batch of offset 1
// (a snapshot, output "out-of-1" and the commit of offset 2) under the
// same transactional.id, and cuts __transaction_state back to its end
// before it.
func forgetWithOutput(t *testing.T, w *brokerWorld) forgottenWithOutput {
	t.Helper()
	ctx := context.Background()
	in := store.TopicPartition{Topic: w.input, Partition: 0}
	snap := snapTP(in)
	out := store.TopicPartition{Topic: w.OutputTopic(), Partition: store.OutputPartition([]byte("k"), 2)}
	m := w.Join(t)
	newBackend := w.hangingBackends(t)
	b := newBackend(false, &lockedBuffer{})
	p, err := b.Acquire(ctx, store.Acquisition{Input: in, Identity: store.IdentityFunc(m.Identity), Outputs: []string{out.Topic}})
	if err != nil {
		t.Fatal(err)
	}
	if err := storetest.CommitBatch(ctx, p, store.Batch{Snapshots: []store.Snapshot{{Key: []byte("k"), Value: []byte("committed"), Offset: 0}},
		Outputs: []store.Output{{Topic: out.Topic, Key: []byte("k"), Value: []byte("out-of-0")}}, Offset: 1}); err != nil {
		t.Fatal(err)
	}
	txnID := b.TransactionalID(in)
	_ = b.Close()
	committed := w.stableCommittedOffset(t, m.Identity().Group, in)

	w.awaitTxnState(t, txnID, "CompleteCommit")
	txnState := store.TopicPartition{Topic: "__transaction_state", Partition: 0}
	stateEnd := w.listEnd(t, txnState, 0)
	start := w.stableEnd(t, snap)
	outStart := w.stableEnd(t, out)
	cl := w.client(t, kgo.TransactionalID(txnID), kgo.TransactionTimeout(15*time.Minute), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	recs := append(toKgo(snap, []wire.Record{wire.EncodeSnapshot("", store.Snapshot{Key: []byte("k"), Value: []byte("never committed"), Offset: 1})}),
		toKgo(out, []wire.Record{{Key: []byte("k"), Value: []byte("out-of-1")}})...)
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.txnOffsetCommit(t, cl, txnID, m.Identity(), in, committed+1)
	w.cutAndRestart(t, txnState, stateEnd)
	w.settleAfterRestart(t) // as in forget: the restart may have moved the group on
	for _, tp := range []store.TopicPartition{snap, out} {
		s := map[store.TopicPartition]int64{snap: start, out: outStart}[tp]
		if lso, hw := w.stable(t, tp); lso != s || hw != s+1 {
			t.Fatalf("after the restart %s's last stable offset is %d and its end %d, want %d and %d (the transaction open)", tp, lso, hw, s, s+1)
		}
	}
	return forgottenWithOutput{forgotten: forgotten{w: w, in: in, snap: snap, m: m, start: start, pid: pid, epoch: epoch,
		committed: committed, newBackend: newBackend}, out: out}
}

// replay is the new owner's replay of input offset 1: its batch makes
// "out-of-1" again. A read_committed reader of the output topic must
// then see each input's output once.
func (f forgottenWithOutput) replay(t *testing.T, p store.Partition) {
	t.Helper()
	if err := storetest.CommitBatch(context.Background(), p, store.Batch{Snapshots: []store.Snapshot{{Key: []byte("k"), Value: []byte("replayed"), Offset: 1}},
		Outputs: []store.Output{{Topic: f.out.Topic, Key: []byte("k"), Value: []byte("out-of-1")}}, Offset: 2}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, r := range f.w.ReadOutputs(t, true) {
		seen[string(r.Value)]++
	}
	if seen["out-of-0"] != 1 || seen["out-of-1"] != 1 || len(seen) != 2 {
		t.Fatalf("read_committed outputs %v, want out-of-0 and out-of-1 once each", seen)
	}
	// The replay's snapshot landed too (a write the broker took for a
	// duplicate of the forgotten one would be acknowledged, not written).
	var last string
	for _, s := range f.w.ReadSnapshots(t, f.in) {
		if string(s.Key) == "k" {
			last = string(s.Value)
		}
	}
	if last != "replayed" {
		t.Fatalf("k's last committed snapshot is %q, want the replay's", last)
	}
}

// A forgotten exactly-once batch spans the snapshot partition, the
// offsets partition and an output partition, on a real broker. With
// AbortHangingTransactions the new owner's takeover aborts it on all
// three before it writes anything, and its replayed batch's output is the
// only one a read_committed reader sees (without the output partition in
// the abort, the replay's commit marker committed the forgotten output
// too: every output of the batch twice).
func TestAForgottenBatchWithOutputsIsAbortedEverywhereOnKafka(t *testing.T) {
	brokerHarness{}.RunOnOwnCluster(t, func(t *testing.T, sw storetest.World) {
		f := forgetWithOutput(t, sw.(*brokerWorld))
		logs := &lockedBuffer{}
		b := f.newBackend(true, logs)
		p, err := b.Acquire(context.Background(), store.Acquisition{Input: f.in, Identity: store.IdentityFunc(f.m.Identity),
			Outputs: []string{f.out.Topic}, ResolveAssignedOffset: f.w.committedOffset(f.m.Identity().Group, f.in)})
		if err != nil {
			t.Fatalf("acquire: %v\n%s", err, logs)
		}
		for _, tp := range []store.TopicPartition{f.snap, f.out} {
			if !strings.Contains(logs.String(), "partition="+tp.String()) {
				t.Fatalf("no log line of the abort on %s:\n%s", tp, logs)
			}
		}
		if got := p.CommittedOffset(); got != f.committed {
			t.Fatalf("resumes at %d, want the committed %d", got, f.committed)
		}
		f.replay(t, p)
	})
}

// Without the option the takeover reports the forgotten batch on every
// partition it touched, each with its kafka-transactions.sh abort
// command, and the partition writes nothing; an operator runs the
// commands (Kafka's own tool), the next acquisition succeeds, and a
// read_committed reader sees each input's output once.
func TestAForgottenBatchWithOutputsIsReportedWithEveryCommandOnKafka(t *testing.T) {
	brokerHarness{}.RunOnOwnCluster(t, func(t *testing.T, sw storetest.World) {
		f := forgetWithOutput(t, sw.(*brokerWorld))
		ctx := context.Background()
		b := f.newBackend(false, &lockedBuffer{})
		a := store.Acquisition{Input: f.in, Identity: store.IdentityFunc(f.m.Identity), Outputs: []string{f.out.Topic},
			ResolveAssignedOffset: f.w.committedOffset(f.m.Identity().Group, f.in)}
		_, err := b.Acquire(ctx, a)
		var he *kafka.HangingTransactionError
		if !errors.As(err, &he) || !he.Takeover || !errors.Is(err, store.ErrHangingTransaction) {
			t.Fatalf("err = %v, want the takeover's HangingTransactionError", err)
		}
		where := map[string]bool{}
		for _, h := range he.Hanging {
			if h.ProducerID != f.pid || !h.OwnLineage {
				t.Fatalf("hanging %+v, want producer %d of the own lineage", h, f.pid)
			}
			where[h.Partition.Topic] = true
			if !strings.Contains(err.Error(), h.AbortCommand(he.Bootstrap)) {
				t.Fatalf("%q lacks the command for %s", err, h.Partition)
			}
		}
		if !where[f.snap.Topic] || !where[f.out.Topic] || !where["__consumer_offsets"] || len(he.Hanging) != 3 {
			t.Fatalf("hanging on %v, want the snapshot, output and offsets partitions", he.Hanging)
		}
		if lso, _ := f.w.stable(t, f.out); lso != f.w.listEnd(t, f.out, 0)-1 {
			t.Fatalf("the output partition's transaction was touched with the option off")
		}
		for _, h := range he.Hanging {
			args := strings.Fields(strings.TrimPrefix(h.AbortCommand(he.Bootstrap), "kafka-transactions.sh "))
			tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			out, err := kafkatest.RunTool(tctx, "org.apache.kafka.tools.TransactionsCommand", args...)
			cancel()
			if err != nil {
				t.Fatalf("%s: %v\n%s", h.AbortCommand(he.Bootstrap), err, out)
			}
		}
		p, err := b.Acquire(ctx, a)
		if err != nil {
			t.Fatalf("acquire after the operator's aborts: %v", err)
		}
		f.replay(t, p)
	})
}

// What an operator sees of a hanging transaction (Backend.Transactions)
// and what aborting it by hand does (Backend.AbortHangingTransactions),
// on the transaction the coordinator forgot while it held the committed
// offset: listed on both partitions, hanging, and not proven the
// partition's own by the coordinator alone (it reports an earlier epoch),
// so an abort without a takeover refuses; with one, both are aborted,
// then nothing is open and the committed offset is the one committed
// before it.
func TestAnOperatorListsAndAbortsAHangingTransactionOnKafka(t *testing.T) {
	brokerHarness{}.RunOnOwnCluster(t, func(t *testing.T, sw storetest.World) {
		f := forget(t, sw.(*brokerWorld), 0, true)
		w, ctx := f.w, context.Background()
		group := f.m.Identity().Group
		b := f.newBackend(false, &lockedBuffer{})
		ts, err := b.Transactions(ctx, f.in, group)
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != 2 {
			t.Fatalf("transactions = %+v, want producer %d's on the group's offsets partition and on %s", ts, f.pid, f.snap)
		}
		for _, x := range ts {
			if !x.Hanging || x.Own || x.OwnLineage || x.ProducerID != f.pid || x.TransactionalID != b.TransactionalID(f.in) {
				t.Fatalf("transaction %v: hanging %v, own %v, own lineage %v; want producer %d's, hanging, not proven",
					x.OpenTransaction, x.Hanging, x.Own, x.OwnLineage, f.pid)
			}
		}
		if aborted, err := b.AbortHangingTransactions(ctx, f.in, group, false); !errors.Is(err, kafka.ErrNotOwnLineage) || len(aborted) != 0 {
			t.Fatalf("without a takeover: aborted %+v, err %v; want ErrNotOwnLineage", aborted, err)
		}
		if lso, hw := w.stable(t, f.snap); lso == hw {
			t.Fatal("a refused abort ended the transaction")
		}
		aborted, err := b.AbortHangingTransactions(ctx, f.in, group, true)
		if err != nil || len(aborted) != 2 {
			t.Fatalf("aborted %+v, err %v; want both", aborted, err)
		}
		if lso, hw := w.stable(t, f.snap); lso != hw {
			t.Fatalf("after the abort the last stable offset is %d, the end %d", lso, hw)
		}
		if ts, err := b.Transactions(ctx, f.in, group); err != nil || len(ts) != 0 {
			t.Fatalf("after the abort: transactions %+v, err %v; want none", ts, err)
		}
		a := store.Acquisition{Input: f.in, Identity: store.IdentityFunc(f.m.Identity), ResolveAssignedOffset: w.committedOffset(group, f.in)}
		if off, err := a.ResolveAssignedOffset(ctx); err != nil || off != f.committed {
			t.Fatalf("after the abort the committed offset resolves to %d, %v; want %d", off, err, f.committed)
		}
	})
}
