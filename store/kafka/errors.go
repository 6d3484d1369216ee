package kafka

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/snapfence/snapfence/store"
)

// ErrTakeoverStalled: an acquisition's takeover (the initialisation of
// the partition's transactional.id) did not finish within the stall
// timeout; see TakeoverStalledError.
var ErrTakeoverStalled = errors.New("store: takeover stalled")

// OpenTransaction is a transaction found open on a partition: what Kafka's
// DescribeProducers reports, and what the transaction coordinators know of
// its producer.
type OpenTransaction struct {
	// Partition is where the transaction is open.
	Partition store.TopicPartition
	// ProducerID and ProducerEpoch are the producer that holds it.
	ProducerID    int64
	ProducerEpoch int16
	// StartOffset is the transaction's first offset on Partition: the
	// last stable offset cannot pass it until the transaction ends.
	StartOffset int64
	// TransactionalID is the transactional.id a coordinator maps to
	// ProducerID now; empty when no coordinator knows the producer (it
	// forgot the transaction, as after an unclean loss of
	// __transaction_state): no takeover can end such a transaction.
	TransactionalID string
}

// AbortCommand is the Kafka command that aborts the transaction on its
// partition (KIP-664), given a bootstrap address.
func (o OpenTransaction) AbortCommand(bootstrap string) string {
	return fmt.Sprintf("kafka-transactions.sh --bootstrap-server %s abort --topic %s --partition %d --start-offset %d",
		bootstrap, o.Partition.Topic, o.Partition.Partition, o.StartOffset)
}

func (o OpenTransaction) String() string {
	holder := "unknown to every transaction coordinator"
	if o.TransactionalID != "" {
		holder = "transactional.id " + o.TransactionalID
	}
	return fmt.Sprintf("producer %d epoch %d (%s) open on %s since offset %d",
		o.ProducerID, o.ProducerEpoch, holder, o.Partition, o.StartOffset)
}

// HangingTransaction is an open transaction found hanging: open on its
// partition while no transaction coordinator has its producer's
// transaction ongoing.
type HangingTransaction struct {
	OpenTransaction
	// CoordinatorEpoch is the coordinator epoch the partition recorded
	// for the producer, which an abort's markers must carry.
	CoordinatorEpoch int32
	// OwnLineage: the producer is proven to be of the partition's own
	// transactional.id (its producer id is the one the takeover got, or
	// the one the coordinator reports for the transactional.id, at an
	// epoch no later than theirs). Only such a transaction does the store
	// abort itself (Config.AbortHangingTransactions).
	OwnLineage bool
}

// HangingTransactionError reports a recovery read of a snapshot partition
// held by hanging transactions (see store.ErrHangingTransaction): what the
// partition's producers and the transaction coordinator report, why the
// store did not abort them, and the commands that do. A recovery that
// waited its stall timeout returns it with Stall set: it then matches
// store.ErrRecoveryStalled too.
type HangingTransactionError struct {
	// Snapshots is the snapshot partition whose read is held, or whose
	// input partition's takeover found the transactions (Takeover).
	Snapshots store.TopicPartition
	// Takeover is set when the takeover of Input found them left open by
	// a producer of the partition's own lineage, on any partition its
	// transactions write (the snapshot partition, the group's offsets
	// partition, an output partition): the partition writes nothing until
	// they are aborted, as its next transaction would commit them.
	Takeover bool
	Input    store.TopicPartition
	// TransactionalID is the partition's own transactional.id, and
	// Coordinator what its transaction coordinator reports of it (state,
	// producer id and epoch), or why it could not be asked.
	TransactionalID string
	Coordinator     string
	// Hanging are the hanging transactions, those open on Snapshots first.
	Hanging []HangingTransaction
	// NotAborted says why the store did not abort them itself.
	NotAborted string
	// Bootstrap is a broker address for the commands in the message.
	Bootstrap string
	// Stall is the stalled read, once the stall timeout passed.
	Stall *store.RecoveryStalledError
	// AbortErr is why the store's own abort failed, if it tried.
	AbortErr error
}

func (e *HangingTransactionError) Error() string {
	var b strings.Builder
	if e.Takeover {
		fmt.Fprintf(&b, "store: the takeover of input partition %s found a transaction of its own lineage left open, with no transaction coordinator having it ongoing; the partition writes nothing until it is aborted, as its next transaction would commit it", e.Input)
	} else {
		fmt.Fprintf(&b, "store: recovery of %s is held by a hanging transaction, open with no transaction coordinator having it ongoing", e.Snapshots)
	}
	if e.Stall != nil {
		fmt.Fprintf(&b, " (stalled for %s at offset %d of target %d)", e.Stall.Stalled, e.Stall.Position, e.Stall.Target)
	}
	b.WriteString(": ")
	writeHangingList(&b, e.Hanging)
	if e.TransactionalID != "" {
		fmt.Fprintf(&b, "; the partition's transactional.id %q", e.TransactionalID)
		if e.Coordinator != "" {
			fmt.Fprintf(&b, ": its coordinator reports %s", e.Coordinator)
		}
	}
	writeHangingAbort(&b, e.Hanging, e.NotAborted, e.AbortErr, e.Bootstrap)
	writeFindHanging(&b, e.Bootstrap)
	return b.String()
}

// writeHangingList writes the hanging transactions.
func writeHangingList(b *strings.Builder, hs []HangingTransaction) {
	for i, h := range hs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(b, "%s, coordinator epoch %d", h.OpenTransaction, h.CoordinatorEpoch)
	}
}

// writeHangingAbort writes why the store did not abort hs, or how its
// abort failed, then the commands that abort them.
func writeHangingAbort(b *strings.Builder, hs []HangingTransaction, notAborted string, abortErr error, bootstrap string) {
	if notAborted != "" {
		fmt.Fprintf(b, "; not aborted by the store: %s", notAborted)
	}
	if abortErr != nil {
		fmt.Fprintf(b, "; the store's abort failed: %v", abortErr)
	}
	b.WriteString("; to abort (only what no live producer owns): ")
	for i, h := range hs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(h.AbortCommand(bootstrap))
	}
}

// Unwrap returns store.ErrHangingTransaction, the stall
// (store.ErrRecoveryStalled) and the abort error, those set.
func (e *HangingTransactionError) Unwrap() []error {
	errs := []error{store.ErrHangingTransaction}
	if e.Stall != nil {
		errs = append(errs, e.Stall)
	}
	if e.AbortErr != nil {
		errs = append(errs, e.AbortErr)
	}
	return errs
}

// TakeoverStalledError reports an acquisition whose takeover did not
// finish: the transaction coordinator kept answering the initialisation of
// the partition's transactional.id with CONCURRENT_TRANSACTIONS (it is
// still ending an earlier transaction of the id) for the stall timeout.
// A healthy coordinator ends that transaction within seconds; one that
// lost the tail of __transaction_state can be left ending a transaction
// whose markers the partitions refuse, for ever, while a later transaction
// of the id stays open on the snapshot partition. The acquisition is
// retried; an operator resolves the open transactions.
type TakeoverStalledError struct {
	// Input is the input partition; TransactionalID its transactional.id.
	Input           store.TopicPartition
	TransactionalID string
	// Coordinator is what the transaction coordinator reports of
	// TransactionalID (state, producer id and epoch), or why it could not
	// be asked.
	Coordinator string
	// Open are the transactions open on the snapshot partition.
	Open []OpenTransaction
	// Bootstrap is a broker address for the commands in the message.
	Bootstrap string
	// Stalled is how long the takeover waited.
	Stalled time.Duration
	// DiagnoseErr is why the coordinator or the open transactions could
	// not be described; Err is the client's last answer.
	DiagnoseErr, Err error
}

func (e *TakeoverStalledError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "store: the takeover of input partition %s by transactional.id %q made no progress for %s: its transaction coordinator keeps answering CONCURRENT_TRANSACTIONS (it is still ending an earlier transaction of the id)", e.Input, e.TransactionalID, e.Stalled)
	if e.Coordinator != "" {
		fmt.Fprintf(&b, "; it reports %s", e.Coordinator)
	}
	if len(e.Open) > 0 {
		b.WriteString("; open on the snapshot partition: ")
		writeOpen(&b, e.Open, e.Bootstrap)
	}
	if e.DiagnoseErr != nil {
		fmt.Fprintf(&b, "; diagnosis incomplete: %v", e.DiagnoseErr)
	}
	fmt.Fprintf(&b, "; look for more with: kafka-transactions.sh --bootstrap-server %s find-hanging --broker-id <each broker>", e.Bootstrap)
	return b.String()
}

// Unwrap returns ErrTakeoverStalled, the client's answer and the
// diagnosis error.
func (e *TakeoverStalledError) Unwrap() []error {
	errs := []error{ErrTakeoverStalled}
	for _, err := range []error{e.Err, e.DiagnoseErr} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// UnstableOffsetError reports an input partition whose acquisition cannot
// finish: the group's committed offset of the partition is held by a
// transaction that the takeover (the initialisation of the partition's own
// transactional.id) did not end. That is a transaction of another
// transactional.id (a prefix shared with another application), or one the
// coordinator forgot (it lost the tail of __transaction_state in an unclean
// broker failure, with replication factor 1): the transaction stays open on
// its data partitions, and only an abort ends it: an operator's, or the
// store's own for a forgotten one of the partition's lineage (Hanging,
// with Config.AbortHangingTransactions). store/sim, a model of Kafka,
// reports it too. It is a store.HeldError.
type UnstableOffsetError struct {
	// Input is the input partition, Group its consumer group.
	Input store.TopicPartition
	Group string
	// TransactionalID is the partition's own transactional.id, whose
	// takeover ran without ending the transaction.
	TransactionalID string
	// Coordinator is what the transaction coordinator reports of
	// TransactionalID (state, producer id and epoch), or why it could not
	// be asked.
	Coordinator string
	// Open are the transactions open on the partitions the input
	// partition's transactions write: its snapshot partition and the
	// group's offsets partition (transactions of the group's other
	// partitions may show there too, briefly). Empty if none could be
	// listed (see DiagnoseErr).
	Open []OpenTransaction
	// Bootstrap is a broker address for the commands in the message.
	Bootstrap string
	// Waited is how long the offset has been held; 0 for one attempt.
	Waited time.Duration
	// DiagnoseErr is why the open transactions could not be listed.
	DiagnoseErr error
	// Hanging are those of the transactions holding the offset that are
	// hanging: open on the group's offsets partition with no coordinator
	// having them ongoing (forgotten), each with its other partitions
	// (the snapshot partition, output partitions); the offsets
	// partition's first. When set, the error matches
	// store.ErrHangingTransaction too.
	Hanging []HangingTransaction
	// NotAborted says why the store did not abort Hanging itself.
	NotAborted string
	// AbortErr is why the store's own abort failed, if it tried.
	AbortErr error
	// Err is the source's answer; it wraps store.ErrOffsetUnstable.
	Err error
}

func (e *UnstableOffsetError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "store: input partition %s cannot resume: its committed offset in group %q is held by an open transaction", e.Input, e.Group)
	if e.Waited > 0 {
		fmt.Fprintf(&b, " (for %s)", e.Waited)
	}
	fmt.Fprintf(&b, " that the takeover by transactional.id %q did not end (UNSTABLE_OFFSET_COMMIT)", e.TransactionalID)
	if e.Coordinator != "" {
		fmt.Fprintf(&b, "; its coordinator reports %s", e.Coordinator)
	}
	switch {
	case len(e.Hanging) > 0:
		b.WriteString("; hanging (open, with no transaction coordinator having it ongoing): ")
		writeHangingList(&b, e.Hanging)
		writeHangingAbort(&b, e.Hanging, e.NotAborted, e.AbortErr, e.Bootstrap)
	case len(e.Open) == 0:
		b.WriteString("; no open transaction could be listed")
		if e.DiagnoseErr != nil {
			fmt.Fprintf(&b, " (%v)", e.DiagnoseErr)
		}
	default:
		b.WriteString("; open: ")
		writeOpen(&b, e.Open, e.Bootstrap)
	}
	writeFindHanging(&b, e.Bootstrap)
	return b.String()
}

// writeFindHanging writes how to find a transaction's partitions that the
// store does not know: an output topic no longer declared, say.
func writeFindHanging(b *strings.Builder, bootstrap string) {
	fmt.Fprintf(b, "; a transaction also open on partitions the store does not know (an output topic no longer declared) is found with: kafka-transactions.sh --bootstrap-server %s find-hanging --broker-id <each broker>", bootstrap)
}

// writeOpen writes the open transactions, then the commands that abort
// them.
func writeOpen(b *strings.Builder, open []OpenTransaction, bootstrap string) {
	for i, o := range open {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(o.String())
	}
	b.WriteString("; to abort (only what no live producer owns): ")
	for i, o := range open {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(o.AbortCommand(bootstrap))
	}
}

// Unwrap returns store.ErrOffsetUnstable (through Err),
// store.ErrHangingTransaction when Hanging is set, and the diagnosis and
// abort errors.
func (e *UnstableOffsetError) Unwrap() []error {
	errs := []error{store.ErrOffsetUnstable}
	if len(e.Hanging) > 0 {
		errs = append(errs, store.ErrHangingTransaction)
	}
	for _, err := range []error{e.Err, e.DiagnoseErr, e.AbortErr} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

var _ store.HeldError = (*UnstableOffsetError)(nil)

// Held is e as reported after its caller waited for waited (Waited): the
// engine's error once it gives up on the partition.
func (e *UnstableOffsetError) Held(waited time.Duration) error {
	held := *e
	held.Waited = waited
	return &held
}
