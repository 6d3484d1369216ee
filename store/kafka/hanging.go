package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/internal/readloop"
)

var _ readloop.PinChecker = (*source)(nil)

// hangingKey names one hanging transaction, for logging it once per read.
type hangingKey struct {
	tp    store.TopicPartition
	pid   int64
	start int64
}

// The coordinator states in which a transaction is ongoing: the
// coordinator will end it (or is ending it) itself.
var ongoingStates = []string{"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"}

// CheckPinned implements readloop.PinChecker: a recovery read waiting at
// the last stable offset looks for hanging transactions on its snapshot
// partition (findHanging), logs each once, and with
// Config.AbortHangingTransactions aborts those of its own lineage.
func (s *source) CheckPinned(ctx context.Context, _ int64) (bool, readloop.Hanging) {
	p := s.p
	if p == nil || p.b.set.Mode != store.Transactional {
		return false, nil
	}
	h := p.findHanging(ctx)
	if h == nil {
		return false, nil
	}
	b := p.b
	var aborted bool
	if h.NotAborted, h.AbortErr, aborted = b.abortOwn(ctx, h.Hanging, h.TransactionalID, h.Coordinator, "snapshots", s.tp.String()); aborted {
		p.renew(ctx, h.TransactionalID)
		return true, nil
	}
	fresh := false
	for _, t := range h.Hanging {
		k := hangingKey{t.Partition, t.ProducerID, t.StartOffset}
		if !s.logged[k] {
			fresh = true
			if s.logged == nil {
				s.logged = map[hangingKey]bool{}
			}
			s.logged[k] = true
		}
	}
	if fresh || h.AbortErr != nil {
		b.set.Logger.Error("recovery is held by a hanging transaction", "snapshots", s.tp.String(), "err", h)
	}
	return false, h.stalled
}

// stalled is e as the error of a recovery read that stalled behind its
// transactions: it then matches store.ErrRecoveryStalled too.
func (e *HangingTransactionError) stalled(stall *store.RecoveryStalledError) error {
	e.Stall = stall
	return e
}

// abortOwn aborts hs with Config.AbortHangingTransactions when every one
// is proven of txnID's own lineage, logging each abort with where (a
// log key and value); otherwise it says why not, or how the abort failed.
func (b *Backend) abortOwn(ctx context.Context, hs []HangingTransaction, txnID, coordinator, whereKey, where string) (notAborted string, abortErr error, aborted bool) {
	switch {
	case !b.cfg.AbortHangingTransactions:
		return "kafka.Config.AbortHangingTransactions is off", nil, false
	case !allOwn(hs):
		return "its producer is not proven to be of the partition's own transactional.id (a producer id no " +
			"coordinator maps to it at an epoch no earlier than the transaction's), so it may be another application's", nil, false
	}
	if err := b.abortHanging(ctx, hs); err != nil {
		return "", err, false
	}
	for _, t := range hs {
		b.set.Logger.Warn("aborted a hanging transaction of the partition's own transactional.id (AbortHangingTransactions)",
			whereKey, where, "partition", t.Partition.String(), "producer_id", t.ProducerID,
			"producer_epoch", t.ProducerEpoch, "coordinator_epoch", t.CoordinatorEpoch, "start_offset", t.StartOffset,
			"transactional_id", txnID, "coordinator", coordinator)
	}
	return "", nil, true
}

func allOwn(hs []HangingTransaction) bool {
	for _, h := range hs {
		if !h.OwnLineage {
			return false
		}
	}
	return len(hs) > 0
}

// findHanging returns the hanging transactions on the partition's snapshot
// partition (and, of the same producers, on the output partitions the
// backend knows), or nil if there are none or it cannot tell.
func (p *partition) findHanging(ctx context.Context) *HangingTransactionError {
	b := p.b
	txnID := b.TransactionalID(p.input)
	set := kadm.TopicsSet{p.snap.Topic: {p.snap.Partition: {}}}
	b.addOutputs(set)
	ownPID, ownEpoch := p.lineage()
	hanging, coordinator := b.findHanging(ctx, txnID, p.snap, set, ownPID, ownEpoch, false)
	if len(hanging) == 0 {
		return nil
	}
	return &HangingTransactionError{Snapshots: p.snap, TransactionalID: txnID, Bootstrap: b.cfg.SeedBrokers[0],
		Coordinator: coordinator, Hanging: hanging}
}

// leftover is Broker.Leftover: after the takeover, the transactions of
// the partition's own lineage still open on its snapshot partition, the
// group's offsets partition or a partition of a declared output topic.
// The takeover's InitProducerID aborted every transaction the coordinator
// knew of, and Kafka takes a later epoch's writes to a partition into the
// transaction still open there, so the partition's next transaction would
// commit a forgotten one's outputs with its own. Each found is aborted
// (AbortHangingTransactions) on every partition it touched, or reported;
// the partition writes nothing meanwhile. What cannot be described is
// logged, and the acquisition goes on: the recovery and the committed
// offset still catch a forgotten transaction on the snapshot or offsets
// partition.
func (b *Backend) leftover(ctx context.Context, a store.Acquisition, p *partition, txnID string) error {
	set := kadm.TopicsSet{p.snap.Topic: {p.snap.Partition: {}}}
	if group := a.Identity.CurrentIdentity().Group; group != "" {
		if op, err := b.groupOffsetsPartition(ctx, group); err == nil {
			set.Add(offsetsTopic, op)
		}
	}
	b.addOutputs(set)
	ownPID, ownEpoch := p.lineage()
	hanging, coordinator := b.findHanging(ctx, txnID, p.snap, set, ownPID, ownEpoch, true)
	if len(hanging) == 0 {
		return nil
	}
	e := &HangingTransactionError{Snapshots: p.snap, Takeover: true, Input: a.Input, TransactionalID: txnID,
		Bootstrap: b.cfg.SeedBrokers[0], Coordinator: coordinator, Hanging: hanging}
	var aborted bool
	if e.NotAborted, e.AbortErr, aborted = b.abortOwn(ctx, hanging, txnID, coordinator, "input", a.Input.String()); aborted {
		p.renew(ctx, txnID)
		return nil
	}
	// Not logged here: the caller retries the acquisition, and the engine
	// logs the wait once, with this error, and shows it in the status.
	return e
}

// lineage is the producer id and epoch the partition's takeover got (-1
// before it).
func (p *partition) lineage() (int64, int16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid, p.epoch
}

// addOutputs adds every partition of the output topics the backend knows
// to set: a transaction of the partition's lineage may be open there too.
func (b *Backend) addOutputs(set kadm.TopicsSet) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for topic, n := range b.outputTopics {
		for i := range int32(n) {
			set.Add(topic, i)
		}
	}
}

// findHanging returns the transactions hanging on pinned (a snapshot
// partition whose read is held, or the group's offsets partition that
// holds a committed offset) and, of the same producers, on the rest of
// set (which holds pinned), the ones on pinned first; and what txnID's
// coordinator reports of it. None if there are none or it cannot tell.
// With ownOnly, the transactions of txnID's own lineage hanging anywhere
// in set, and no others.
//
// A transaction is hanging when DescribeProducers shows it open and no
// coordinator has its producer's transaction ongoing: neither the one
// txnID is at (DescribeTransactions) nor any other that maps the producer
// id (ListTransactions). The producers are described again after the
// coordinators are asked, and only a transaction still open at the same
// start offset counts: one that a coordinator ended in between (its
// markers land before it reports the transaction complete) is not
// hanging. Whatever fails to answer means "cannot tell": nothing is
// reported, and the caller waits as before.
//
// OwnLineage is proven by the producer id: the one the takeover of txnID
// got (ownPID, ownEpoch; -1 for none) or the one txnID's coordinator
// reports, at an epoch no later than theirs.
func (b *Backend) findHanging(ctx context.Context, txnID string, pinned store.TopicPartition, set kadm.TopicsSet, ownPID int64, ownEpoch int16, ownOnly bool) ([]HangingTransaction, string) {
	log := b.set.Logger
	open, err := b.openTransactions(ctx, set)
	if err != nil {
		if ownOnly {
			// The only look at the output partitions: say so.
			log.Warn("cannot look for transactions of the partition's own lineage left open", "partition", pinned.String(),
				"transactional_id", txnID, "err", err)
		} else {
			log.Debug("cannot look for hanging transactions", "partition", pinned.String(), "err", err)
		}
		return nil, ""
	}
	pinning := pinningProducers(open, pinned, ownOnly)
	if len(pinning) == 0 {
		return nil, ""
	}
	pids := slices.Sorted(maps.Keys(pinning))
	own, coordinator, err := b.describeOwnTransaction(ctx, txnID)
	if err != nil {
		log.Debug("cannot look for hanging transactions", "transactional_id", txnID, "err", err)
		return nil, ""
	}
	listed, err := b.adm.ListTransactions(ctx, pids, nil)
	if err != nil {
		log.Debug("cannot look for hanging transactions", "producers", pids, "err", err)
		return nil, ""
	}
	ongoing := ongoingProducers(listed, own, txnID)
	again, err := b.openTransactions(ctx, set)
	if err != nil {
		log.Debug("cannot look for hanging transactions", "partition", pinned.String(), "err", err)
		return nil, ""
	}
	lineage := ownLineage{txnID: txnID, pid: ownPID, epoch: ownEpoch, coordinator: own}
	var hanging []HangingTransaction
	for _, o := range open {
		if !pinning[o.ProducerID] || ongoing[o.ProducerID] != "" || !slices.Contains(again, o) {
			continue
		}
		t := lineage.hanging(o, listed)
		if ownOnly && !t.OwnLineage {
			continue
		}
		hanging = append(hanging, t)
	}
	// The pinned partition first: the one that holds the caller.
	slices.SortStableFunc(hanging, func(x, y HangingTransaction) int {
		return boolInt(x.Partition != pinned) - boolInt(y.Partition != pinned)
	})
	return hanging, coordinator
}

// pinningProducers returns the producers findHanging looks at: those with
// a transaction open on the pinned partition, or with ownOnly anywhere.
func pinningProducers(open []openTxn, pinned store.TopicPartition, ownOnly bool) map[int64]bool {
	pinning := map[int64]bool{}
	for _, o := range open {
		if ownOnly || o.Partition == pinned {
			pinning[o.ProducerID] = true
		}
	}
	return pinning
}

// describeOwnTransaction asks txnID's coordinator for its transaction. It
// returns the transaction (nil if the coordinator reports none, or an
// error for it) and what the coordinator reports, in words; the error is
// the request's.
func (b *Backend) describeOwnTransaction(ctx context.Context, txnID string) (*kadm.DescribedTransaction, string, error) {
	ds, err := b.adm.DescribeTransactions(ctx, txnID)
	switch d, ok := ds[txnID]; {
	case err != nil:
		return nil, "", err
	case !ok:
		return nil, "nothing", nil
	case d.Err != nil:
		return nil, fmt.Sprintf("an error (%v)", d.Err), nil
	default:
		return &d, fmt.Sprintf("%s, producer %d epoch %d", d.State, d.ProducerID, d.ProducerEpoch), nil
	}
}

// ongoingProducers maps each producer id a coordinator has a transaction
// ongoing for to that transaction's transactional.id: those in listed, and
// own's (txnID's, nil for none).
func ongoingProducers(listed kadm.ListedTransactions, own *kadm.DescribedTransaction, txnID string) map[int64]string {
	ongoing := map[int64]string{}
	for _, t := range listed {
		if slices.Contains(ongoingStates, t.State) {
			ongoing[t.ProducerID] = t.TxnID
		}
	}
	if own != nil && slices.Contains(ongoingStates, own.State) {
		ongoing[own.ProducerID] = txnID
	}
	return ongoing
}

// ownLineage is what proves a producer of txnID's own lineage: the
// producer id and epoch its takeover got (pid -1 for none), or the
// transaction its coordinator reports (nil for none).
type ownLineage struct {
	txnID       string
	pid         int64
	epoch       int16
	coordinator *kadm.DescribedTransaction
}

// hanging returns o as a hanging transaction: its transactional.id as a
// coordinator in listed maps its producer (txnID's if none does and it is
// of the own lineage), and whether it is of the own lineage, at an epoch
// no later than the proof's.
func (l ownLineage) hanging(o openTxn, listed kadm.ListedTransactions) HangingTransaction {
	t := HangingTransaction{OpenTransaction: o.OpenTransaction, CoordinatorEpoch: o.coordinatorEpoch}
	for _, lt := range listed {
		if lt.ProducerID == o.ProducerID {
			t.TransactionalID = lt.TxnID
		}
	}
	own := l.coordinator
	t.OwnLineage = l.pid >= 0 && o.ProducerID == l.pid && o.ProducerEpoch <= l.epoch ||
		own != nil && o.ProducerID == own.ProducerID && o.ProducerEpoch <= own.ProducerEpoch
	if t.OwnLineage && t.TransactionalID == "" {
		t.TransactionalID = l.txnID
	}
	return t
}

// openTxn is an open transaction as DescribeProducers reports it.
type openTxn struct {
	OpenTransaction
	coordinatorEpoch int32
}

// openTransactions lists the transactions open on set's partitions; the
// error says which partitions failed to answer (the list has the others').
func (b *Backend) openTransactions(ctx context.Context, set kadm.TopicsSet) ([]openTxn, error) {
	described, err := b.adm.DescribeProducers(ctx, set)
	if err != nil {
		return nil, fmt.Errorf("describing the producers of %v: %w", set.Topics(), err)
	}
	var errs []error
	described.EachPartition(func(d kadm.DescribedProducersPartition) {
		if d.Err != nil {
			errs = append(errs, fmt.Errorf("describing the producers of %s/%d: %w", d.Topic, d.Partition, d.Err))
		}
	})
	var open []openTxn
	described.EachProducer(func(d kadm.DescribedProducer) {
		if d.CurrentTxnStartOffset < 0 {
			return
		}
		open = append(open, openTxn{OpenTransaction: OpenTransaction{
			Partition:  store.TopicPartition{Topic: d.Topic, Partition: d.Partition},
			ProducerID: d.ProducerID, ProducerEpoch: d.ProducerEpoch, StartOffset: d.CurrentTxnStartOffset,
		}, coordinatorEpoch: d.CoordinatorEpoch})
	})
	return open, errors.Join(errs...)
}

// abortHanging aborts hanging transactions as kafka-transactions.sh abort
// does (KIP-664's Admin.abortTransaction): a WriteTxnMarkers request with
// an ABORT marker for the producer id, epoch and coordinator epoch the
// partition reported, sent to the partition's leader (franz-go shards the
// request by leader).
func (b *Backend) abortHanging(ctx context.Context, hs []HangingTransaction) error {
	var errs []error
	for _, h := range hs {
		m := kadm.TxnMarkers{ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch, CoordinatorEpoch: h.CoordinatorEpoch,
			Topics: kadm.TopicsSet{h.Partition.Topic: {h.Partition.Partition: {}}}}
		resp, err := b.adm.WriteTxnMarkers(ctx, m)
		if err != nil {
			errs = append(errs, fmt.Errorf("aborting producer %d's transaction on %s: %w", h.ProducerID, h.Partition, err))
			continue
		}
		answered := false
		resp.EachPartition(func(r kadm.TxnMarkersPartitionResponse) {
			if r.Topic == h.Partition.Topic && r.Partition == h.Partition.Partition {
				answered = true
				if r.Err != nil {
					errs = append(errs, fmt.Errorf("aborting producer %d's transaction on %s: %w", h.ProducerID, h.Partition, r.Err))
				}
			}
		})
		if !answered {
			errs = append(errs, fmt.Errorf("aborting producer %d's transaction on %s: no answer for the partition", h.ProducerID, h.Partition))
		}
	}
	return errors.Join(errs...)
}
