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

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/storetest"
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
		f := forget(t, sw.(*brokerWorld), 0)
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
			for s, err := range p.Recover(ctx) {
				if err != nil {
					return keys, logs, err
				}
				keys = append(keys, string(s.Key)+"="+string(s.Value))
			}
			return keys, logs, nil
		}

		// Off: reported, with the command, and left alone.
		_, logs, err := recoverOnce(false)
		var he *store.HangingTransactionError
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
	w          *brokerWorld
	in, snap   store.TopicPartition
	m          storetest.Member
	start      int64
	pid        int64
	epoch      int16
	newBackend func(abort bool, logs *lockedBuffer) *kafka.Backend
}

// forget commits k=committed through the store, opens the transaction to
// forget and cuts __transaction_state back to its end before it, less
// drop records of the committed transaction's state (1: its
// CompleteCommit, so the coordinator is left ending it).
func forget(t *testing.T, w *brokerWorld, drop int64) forgotten {
	t.Helper()
	ctx := context.Background()
	in := store.TopicPartition{Topic: w.input, Partition: 0}
	snap := snapTP(in)
	m := w.Join(t)
	newBackend := func(abort bool, logs *lockedBuffer) *kafka.Backend {
		b, err := kafka.New(ctx, kafka.Config{
			Mode: store.Transactional, SeedBrokers: w.seeds(), TransactionalIDPrefix: w.prefix,
			AbortHangingTransactions: abort, RecoveryStallTimeout: 20 * time.Second,
			Logger: slog.New(slog.NewTextHandler(logs, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}

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
		[]store.WireRecord{store.EncodeSnapshot(store.Snapshot{Key: []byte("ghost"), Value: []byte("never committed")})})
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if end := w.listEnd(t, txnState, 0); end <= stateEnd {
		t.Fatalf("__transaction_state ends at %d, as before the transaction (%d): nothing to forget", end, stateEnd)
	}
	w.cutAndRestart(t, txnState, stateEnd-drop)
	if lso, hw := w.stable(t, snap); lso != start || hw != start+1 {
		t.Fatalf("after the restart the snapshot partition's last stable offset is %d and its end %d, want %d and %d (the transaction open)", lso, hw, start, start+1)
	}
	return forgotten{w: w, in: in, snap: snap, m: m, start: start, pid: pid, epoch: epoch, newBackend: newBackend}
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
// must fail after the stall timeout with a *store.TakeoverStalledError
// naming the coordinator's state and the open transaction, with its abort
// command, not wait silently.
func TestATakeoverTheCoordinatorNeverAnswersFailsOnKafka(t *testing.T) {
	brokerHarness{}.RunOnOwnCluster(t, func(t *testing.T, sw storetest.World) {
		f := forget(t, sw.(*brokerWorld), 1)
		b := f.newBackend(false, &lockedBuffer{})
		began := time.Now()
		_, err := b.Acquire(context.Background(), store.Acquisition{Input: f.in, Identity: store.IdentityFunc(f.m.Identity)})
		var te *store.TakeoverStalledError
		if !errors.As(err, &te) || !errors.Is(err, store.ErrTakeoverStalled) {
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
