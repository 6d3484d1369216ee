package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/store"
)

// Transaction is a transaction open on an input partition's snapshot
// partition or on its group's offsets partition, as an operator sees it
// (Backend.Transactions).
type Transaction struct {
	HangingTransaction
	// Hanging: no transaction coordinator has its producer's transaction
	// ongoing, so nothing but an abort ends it. A transaction that is not
	// hanging is ended by its coordinator (committed, aborted, or at the
	// transaction timeout).
	Hanging bool
	// Own: the transaction is the application's. For a hanging one, its
	// producer is proven of the partition's own transactional.id
	// (OwnLineage); for one that is not, its coordinator maps its
	// producer to a transactional.id of the application's prefix.
	Own bool
}

// Transactions lists the transactions open on input's snapshot partition
// and, with group set, those on the group's partition of
// __consumer_offsets that may hold its committed offset (the
// application's, and hanging ones of no known transactional.id), each
// told ongoing or hanging
// and the application's own or not, with the proof the store uses for
// Config.AbortHangingTransactions. Unlike the store's own look, which
// reads an error as "cannot tell" and waits, this one returns it.
func (b *Backend) Transactions(ctx context.Context, input store.TopicPartition, group string) ([]Transaction, error) {
	return b.transactions(ctx, input, group, -1, -1)
}

// transactions is Transactions with the lineage a takeover of the
// partition's transactional.id proved (ownPID, ownEpoch; -1 for none).
func (b *Backend) transactions(ctx context.Context, input store.TopicPartition, group string, ownPID int64, ownEpoch int16) ([]Transaction, error) {
	if b.set.Mode != store.Transactional {
		return nil, fmt.Errorf("kafka: Transactions: %s mode has no transactions", b.set.Mode)
	}
	snap := b.SnapshotPartition(input)
	set := kadm.TopicsSet{snap.Topic: {snap.Partition: {}}}
	if group != "" {
		// A cluster that keeps offsets outside any topic has no
		// transaction open on them.
		op, err := b.groupOffsetsPartition(ctx, group)
		switch {
		case err == nil:
			set.Add(offsetsTopic, op)
		case !errors.Is(err, errNoOffsetsTopic):
			return nil, err
		}
	}
	open, err := b.openTransactions(ctx, set)
	if err != nil {
		return nil, err
	}
	if len(open) == 0 {
		return nil, nil
	}
	txnID := b.TransactionalID(input)
	own, _, err := b.describeOwnTransaction(ctx, txnID)
	if err != nil {
		return nil, fmt.Errorf("describing transactional.id %q: %w", txnID, err)
	}
	pids := slices.Sorted(maps.Keys(producerSet(open)))
	listed, err := b.adm.ListTransactions(ctx, pids, nil)
	if err != nil {
		return nil, fmt.Errorf("listing the transactions of producers %v: %w", pids, err)
	}
	ongoing := ongoingProducers(listed, own, txnID)
	lineage := ownLineage{txnID: txnID, pid: ownPID, epoch: ownEpoch, coordinator: own}
	var out []Transaction
	for _, o := range open {
		t := Transaction{HangingTransaction: lineage.hanging(o, listed)}
		if id := ongoing[o.ProducerID]; id != "" {
			t.TransactionalID = id
			t.Own = b.ownTransactionalID(id)
		} else {
			t.Hanging = true
			t.Own = t.OwnLineage
		}
		// Every group whose offsets share the partition has its
		// transactions there; only the application's, or a hanging one
		// no coordinator maps to anyone, may hold its committed offset.
		if o.Partition.Topic == offsetsTopic && !t.Own && !b.ownTransactionalID(t.TransactionalID) && (!t.Hanging || t.TransactionalID != "") {
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

// ownTransactionalID reports whether id is of the application's prefix.
func (b *Backend) ownTransactionalID(id string) bool {
	p := b.set.TransactionalIDPrefix + "-"
	return len(id) > len(p) && id[:len(p)] == p
}

func producerSet(open []openTxn) map[int64]bool {
	m := map[int64]bool{}
	for _, o := range open {
		m[o.ProducerID] = true
	}
	return m
}

// ErrNotOwnLineage is returned by AbortHangingTransactions for a hanging
// transaction not proven of the partition's own transactional.id: it may
// be another application's, and is left alone.
var ErrNotOwnLineage = errors.New("kafka: hanging transaction not proven of the partition's own lineage")

// AbortHangingTransactions aborts the hanging transactions Transactions
// finds for input, as Config.AbortHangingTransactions does: only when
// every one is proven of the partition's own transactional.id, else none
// (an error wrapping ErrNotOwnLineage names the others). It returns the
// transactions it aborted. The principal needs ClusterAction on the
// cluster (WriteTxnMarkers).
//
// With takeover, it first initialises the partition's transactional.id,
// as an acquisition's takeover does: that fences the partition's owner,
// so only for a partition no member serves. Its producer id and epoch
// then prove a transaction the coordinator forgot (which the coordinator
// alone cannot: it may report an epoch below the transaction's).
func (b *Backend) AbortHangingTransactions(ctx context.Context, input store.TopicPartition, group string, takeover bool) ([]HangingTransaction, error) {
	pid, epoch := int64(-1), int16(-1)
	if takeover {
		var err error
		if pid, epoch, err = b.initProducer(ctx, input); err != nil {
			return nil, err
		}
	}
	ts, err := b.transactions(ctx, input, group, pid, epoch)
	if err != nil {
		return nil, err
	}
	var hs []HangingTransaction
	var foreign []string
	for _, t := range ts {
		if !t.Hanging {
			continue
		}
		if !t.OwnLineage {
			foreign = append(foreign, t.OpenTransaction.String())
		}
		hs = append(hs, t.HangingTransaction)
	}
	if len(foreign) > 0 {
		return nil, fmt.Errorf("%w: %s (its producer is not one a coordinator maps to %q)", ErrNotOwnLineage,
			foreign, b.TransactionalID(input))
	}
	if len(hs) == 0 {
		return nil, nil
	}
	if err := b.abortHanging(ctx, hs); err != nil {
		return nil, err
	}
	return hs, nil
}

// initProducer initialises input's transactional.id, bounded by
// RecoveryStallTimeout, and returns the producer id and epoch it got.
func (b *Backend) initProducer(ctx context.Context, input store.TopicPartition) (int64, int16, error) {
	txnID := b.TransactionalID(input)
	prod, err := kgo.NewClient(append(b.cfg.clientOpts(), kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(b.set.TransactionTimeout))...)
	if err != nil {
		return -1, -1, err
	}
	defer prod.Close()
	ictx, cancel := context.WithTimeout(ctx, b.set.RecoveryStallTimeout)
	defer cancel()
	pid, epoch, err := prod.ProducerID(ictx)
	if err != nil {
		return -1, -1, fmt.Errorf("kafka: initialising transactional.id %q: %w", txnID, err)
	}
	return pid, epoch, nil
}
