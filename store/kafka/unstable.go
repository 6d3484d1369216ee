package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf16"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/snapfence/snapfence/store"
)

// offsetsTopic is Kafka's internal topic of consumer group offsets.
const offsetsTopic = "__consumer_offsets"

// unstableOffset diagnoses an acquisition whose committed offset a
// transaction holds although the takeover ran: what the coordinator knows of
// the partition's transactional.id, and the transactions open on the two
// partitions every transaction of the input partition writes (its snapshot
// partition and the group's offsets partition), with the commands that
// abort them. Diagnosing never fails the acquisition any further: what it
// cannot learn is said in DiagnoseErr.
//
// A transaction open on the offsets partition that no coordinator has
// ongoing is hanging (findHanging): a coordinator that lost the tail of
// __transaction_state forgot it, so the takeover's InitProducerID could
// not abort it, and the group coordinator holds the offset until someone
// writes its abort marker. It is reported in Hanging, and with
// Config.AbortHangingTransactions, when every one is of the partition's
// own lineage, aborted (aborted true: resolve the offset again).
func (b *Backend) unstableOffset(ctx context.Context, a store.Acquisition, p *partition, txnID string, err error) (aborted bool, _ error) {
	e := &UnstableOffsetError{Input: a.Input, Group: a.Identity.CurrentIdentity().Group,
		TransactionalID: txnID, Bootstrap: b.cfg.SeedBrokers[0], Err: err}
	e.Coordinator, e.Open, e.DiagnoseErr = b.diagnoseTransactions(ctx, e.Group, p.snap, txnID)
	if b.set.Mode != store.Transactional || !slices.ContainsFunc(e.Open, func(o OpenTransaction) bool { return o.Partition.Topic == offsetsTopic }) {
		return false, e
	}
	op, perr := b.groupOffsetsPartition(ctx, e.Group)
	if perr != nil {
		return false, e
	}
	offsets := store.TopicPartition{Topic: offsetsTopic, Partition: op}
	set := kadm.TopicsSet{p.snap.Topic: {p.snap.Partition: {}}, offsetsTopic: {op: {}}}
	b.addOutputs(set)
	ownPID, ownEpoch := p.lineage()
	e.Hanging, _ = b.findHanging(ctx, txnID, offsets, set, ownPID, ownEpoch, false)
	if len(e.Hanging) == 0 {
		return false, e
	}
	e.NotAborted, e.AbortErr, aborted = b.abortOwn(ctx, e.Hanging, txnID, e.Coordinator, "input", a.Input.String())
	if aborted {
		p.renew(ctx, txnID)
	}
	return aborted, e
}

// takeoverStalled diagnoses a takeover whose InitProducerID the
// coordinator kept refusing (CONCURRENT_TRANSACTIONS: it is still ending
// an earlier transaction of the id, and may never, if it lost the tail of
// __transaction_state and its markers are refused) for stalled.
func (b *Backend) takeoverStalled(ctx context.Context, input, snap store.TopicPartition, txnID string, stalled time.Duration, err error) error {
	e := &TakeoverStalledError{Input: input, TransactionalID: txnID, Bootstrap: b.cfg.SeedBrokers[0], Stalled: stalled, Err: err}
	e.Coordinator, e.Open, e.DiagnoseErr = b.diagnoseTransactions(ctx, "", snap, txnID)
	return e
}

// diagnoseTransactions is what the coordinator knows of txnID, and the
// transactions open on snap and, with a group, the group's offsets
// partition; what it cannot learn is in diagErr.
func (b *Backend) diagnoseTransactions(ctx context.Context, group string, snap store.TopicPartition, txnID string) (coordinator string, open []OpenTransaction, diagErr error) {
	var errs []error
	if ds, derr := b.adm.DescribeTransactions(ctx, txnID); derr != nil {
		errs = append(errs, fmt.Errorf("describing transactional.id %s: %w", txnID, derr))
	} else if d, ok := ds[txnID]; ok && d.Err == nil {
		coordinator = fmt.Sprintf("%s, producer %d epoch %d", d.State, d.ProducerID, d.ProducerEpoch)
	} else if ok {
		coordinator = fmt.Sprintf("an error (%v)", d.Err)
	}
	set := kadm.TopicsSet{snap.Topic: {snap.Partition: {}}}
	if group != "" {
		if op, perr := b.groupOffsetsPartition(ctx, group); perr != nil {
			errs = append(errs, perr)
		} else {
			set[offsetsTopic] = map[int32]struct{}{op: {}}
		}
	}
	described, derr := b.openTransactions(ctx, set)
	if derr != nil {
		errs = append(errs, derr)
	}
	var pids []int64
	for _, o := range described {
		open = append(open, o.OpenTransaction)
		pids = append(pids, o.ProducerID)
	}
	if len(pids) > 0 {
		listed, lerr := b.adm.ListTransactions(ctx, pids, nil)
		if lerr != nil {
			errs = append(errs, fmt.Errorf("listing the transactions of producers %v: %w", pids, lerr))
		}
		for i, o := range open {
			for _, t := range listed {
				if t.ProducerID == o.ProducerID {
					open[i].TransactionalID = t.TxnID
				}
			}
		}
	}
	// The snapshot partition first: a transaction open there is the
	// partition's own lineage (or a prefix collision).
	slices.SortStableFunc(open, func(x, y OpenTransaction) int {
		return boolInt(x.Partition.Topic == offsetsTopic) - boolInt(y.Partition.Topic == offsetsTopic)
	})
	return coordinator, open, errors.Join(errs...)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// errNoOffsetsTopic: the cluster lists no __consumer_offsets (kfake keeps
// its groups' offsets outside any topic).
var errNoOffsetsTopic = errors.New("not found")

// groupOffsetsPartition is the partition of __consumer_offsets that holds
// group's offsets: Java's String.hashCode of the group id, made
// non-negative (Utils.abs), modulo the topic's partition count, as Kafka's
// group coordinator places it.
func (b *Backend) groupOffsetsPartition(ctx context.Context, group string) (int32, error) {
	details, err := b.adm.ListTopics(ctx, offsetsTopic)
	if err != nil {
		return 0, fmt.Errorf("describing %s: %w", offsetsTopic, err)
	}
	td, ok := details[offsetsTopic]
	if !ok || td.Err != nil || len(td.Partitions) == 0 {
		return 0, fmt.Errorf("describing %s: %w (%v)", offsetsTopic, errNoOffsetsTopic, td.Err)
	}
	return javaGroupPartition(group, len(td.Partitions)), nil
}

func javaGroupPartition(group string, partitions int) int32 {
	var h int32
	for _, c := range utf16.Encode([]rune(group)) {
		h = 31*h + int32(c)
	}
	if h == -1<<31 {
		h = 0 // Utils.abs(Integer.MIN_VALUE)
	} else if h < 0 {
		h = -h
	}
	return h % int32(partitions)
}
