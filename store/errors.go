package store

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors, for errors.Is. The typed errors below match them.
var (
	// ErrFenced: the group coordinator or the transaction coordinator
	// rejected this owner (stale generation or member epoch, unknown
	// member, fenced producer). Nothing of the transaction is visible.
	ErrFenced = errors.New("store: fenced")
	// ErrMissingIdentity: the driving consumer has no valid group identity
	// yet (empty member id or a generation below 1). Nothing was committed.
	ErrMissingIdentity = errors.New("store: missing group identity")
	// ErrRecoveryStalled: a recovery read made no progress for the stall
	// timeout.
	ErrRecoveryStalled = errors.New("store: recovery stalled")
	// ErrCorruptRecord: a record in the snapshot partition cannot be
	// decoded as a snapfence snapshot.
	ErrCorruptRecord = errors.New("store: corrupt snapshot record")
	// ErrValueTooLarge: a snapshot is larger than the configured limit.
	ErrValueTooLarge = errors.New("store: snapshot too large")
	// ErrReservedKey: the key is reserved for snapfence's own records.
	ErrReservedKey = errors.New("store: reserved key")
	// ErrInvalidOutput: an output record of an exactly-once batch has no
	// topic or is for the snapshot topic.
	ErrInvalidOutput = errors.New("store: invalid output record")
	// ErrClosed: the partition or backend is closed.
	ErrClosed = errors.New("store: closed")
	// ErrEarlierWriteFailed: a started commit (Partition.StartCommit) was
	// refused because a write started before it on the partition failed,
	// was refused, or left the queue: committing past it would cover a
	// change that is not durable. Nothing was committed.
	ErrEarlierWriteFailed = errors.New("store: a write started before the commit failed")
	// ErrNotTransactional: an exactly-once batch (Partition.StartCommitBatch)
	// asked of a Plain-mode partition, which has no transaction to put it
	// in. The error that wraps it names the partition.
	ErrNotTransactional = errors.New("store: the partition is not transactional")
	// ErrOffsetUnstable: the group's committed offset of an input
	// partition is held by a transaction that has not ended (Kafka answers
	// a RequireStable offset fetch with UNSTABLE_OFFSET_COMMIT), so the
	// partition cannot resume from it yet. A source's
	// ResolveAssignedOffset returns it (wrapped) rather than wait; the
	// backend's Acquire turns it into an error of its own that names what
	// holds the offset (store/kafka's *UnstableOffsetError), a HeldError.
	ErrOffsetUnstable = errors.New("store: committed offset held by an open transaction")
	// ErrMisconfigured: a permanent configuration problem (a missing or
	// wrongly configured topic, an option that cannot work, a
	// transactional.id prefix another application uses). Retrying cannot
	// help: the engine's Run returns it. Backends' own sentinels for such
	// problems (kafka.ErrTopicMissing, kafka.ErrTopicConfig) match it,
	// and so does every *ConfigError.
	ErrMisconfigured = errors.New("store: misconfigured")
	// ErrTimedOut: a transaction, write or offset commit did not end
	// within the transaction timeout (a partition leader or coordinator
	// unavailable, most likely). A transient failure: the partition is
	// re-acquired, whose new producer fences whatever the old one left
	// open, and retried. It does not match context.DeadlineExceeded,
	// which means the caller's own context ended.
	ErrTimedOut = errors.New("store: timed out")
	// ErrCheckpointUnusable: a local copy's checkpoint is not a valid
	// base for a delta recovery (a *CheckpointError says why); recover
	// in full.
	ErrCheckpointUnusable = errors.New("store: checkpoint unusable")
	// ErrHangingTransaction: a transaction is open on a partition the
	// store reads or writes and no transaction coordinator has it ongoing
	// (it was forgotten, as after an unclean loss of the tail of
	// __transaction_state): no producer will ever end it, and it pins the
	// partition's last stable offset until it is aborted. store/kafka's
	// *HangingTransactionError matches it.
	ErrHangingTransaction = errors.New("store: hanging transaction")
	// ErrForeignState: an acquisition met state of another application:
	// a snapshot record that names another application, or a
	// transactional.id another application's transactions use. It is
	// refused before the partition takes anything over or reads any of
	// it (*ForeignStateError); it matches ErrMisconfigured too.
	ErrForeignState = errors.New("store: another application's state")
	// ErrOutputRefused: the broker refused an output record of an
	// exactly-once batch in a way no retry of the same record cures (too
	// large for its topic, invalid for it, corrupt); see
	// OutputRefusedError.
	ErrOutputRefused = errors.New("store: output record refused")
	// ErrRecordRefused: the broker refused a record for good: too large
	// for its topic or the broker, invalid for the topic, or corrupt. A
	// retry of the same record meets the same, so the failure is the
	// record's, not the cluster's. Backends and emitters mark such
	// errors to match it; the engine hands the inputs that made them to
	// its poison policy rather than retrying them.
	ErrRecordRefused = errors.New("store: record refused for good")
)

// ConfigError names a permanent configuration problem: what is wrong
// (Subject: a topic, an option, a transactional.id), what was found, and
// the fix. It matches ErrMisconfigured and Err.
type ConfigError struct {
	// Subject is what is misconfigured, as the user names it: `topic
	// "orders"`, "Config.DeadLetterTopic", `transactional.id prefix "app"`.
	Subject string
	// Problem is what was found.
	Problem string
	// Fix is what to do about it.
	Fix string
	// Err is the underlying error, if any.
	Err error
}

func (e *ConfigError) Error() string {
	s := fmt.Sprintf("misconfigured: %s: %s", e.Subject, e.Problem)
	if e.Fix != "" {
		s += "; fix: " + e.Fix
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrMisconfigured and Err, if set.
func (e *ConfigError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrMisconfigured, e.Err}
	}
	return []error{ErrMisconfigured}
}

// FencedError reports a rejected transaction. Reason is the coordinator's
// answer (for example kerr.IllegalGeneration); errors.Is matches both
// ErrFenced and Reason.
type FencedError struct {
	Input    TopicPartition
	Identity GroupIdentity
	// TransactionalID is the producer's transactional.id when the
	// producer itself was fenced: another process initialised the same
	// id (a new owner of the partition, or another flow with the same
	// prefix).
	TransactionalID string
	Reason          error
}

func (e *FencedError) Error() string {
	if e.TransactionalID != "" {
		return fmt.Sprintf("store: %s fenced: producer %q was fenced by a newer one with the same transactional.id "+
			"(a new owner of the partition, or another flow using the same prefix): %v", e.Input, e.TransactionalID, e.Reason)
	}
	return fmt.Sprintf("store: %s fenced: commit as %s rejected: %v", e.Input, e.Identity, e.Reason)
}

// Unwrap returns ErrFenced and the reason.
func (e *FencedError) Unwrap() []error { return []error{ErrFenced, e.Reason} }

// MissingIdentityError reports a commit refused because the driving
// consumer has not joined its group yet.
type MissingIdentityError struct {
	Input    TopicPartition
	Identity GroupIdentity
}

func (e *MissingIdentityError) Error() string {
	return fmt.Sprintf("store: %s: refusing to commit without a valid group identity (%s); "+
		"has the consumer joined its group?", e.Input, e.Identity)
}

// Unwrap returns ErrMissingIdentity.
func (e *MissingIdentityError) Unwrap() error { return ErrMissingIdentity }

// StallCause is the diagnosed reason a recovery read stopped advancing.
type StallCause int8

const (
	// StallUndetermined: the log end could not be re-read.
	StallUndetermined StallCause = iota
	// StallTruncation: the log end is below the captured target; records
	// the read was promised are gone. An operator must decide between an
	// offset reset and a restore.
	StallTruncation
	// StallOpenTransaction: the log end is at or above the target; an open
	// (possibly hanging) transaction pins the last stable offset.
	StallOpenTransaction
)

func (c StallCause) String() string {
	switch c {
	case StallTruncation:
		return "truncation"
	case StallOpenTransaction:
		return "open transaction"
	}
	return "undetermined"
}

// RecoveryStalledError reports a recovery read that made no progress for
// the stall timeout.
type RecoveryStalledError struct {
	// Snapshots is the snapshot partition being read.
	Snapshots TopicPartition
	// Position is the next offset the read was waiting for.
	Position int64
	// Target is the high watermark captured before the read.
	Target int64
	// LogEnd is the log end re-read at the deadline, or -1 if the re-read
	// failed.
	LogEnd int64
	// Cause is the diagnosis drawn from LogEnd.
	Cause StallCause
	// Stalled is how long the read made no progress.
	Stalled time.Duration
	// ReadErr is why the log end could not be re-read, for
	// StallUndetermined.
	ReadErr error
}

func (e *RecoveryStalledError) Error() string {
	s := fmt.Sprintf("store: recovery of %s stalled for %s at offset %d of target %d: ",
		e.Snapshots, e.Stalled, e.Position, e.Target)
	switch e.Cause {
	case StallTruncation:
		s += fmt.Sprintf("log end %d is below the target: the log was truncated and records are lost; "+
			"an operator must reset offsets or restore", e.LogEnd)
	case StallOpenTransaction:
		s += fmt.Sprintf("log end %d is at or above the target: an open or hanging transaction pins the "+
			"last stable offset (see kafka-transactions.sh find-hanging)", e.LogEnd)
	default:
		s += fmt.Sprintf("cause undetermined: re-reading the log end failed: %v", e.ReadErr)
	}
	return s
}

// Unwrap returns ErrRecoveryStalled and the re-read error, if any.
func (e *RecoveryStalledError) Unwrap() []error {
	if e.ReadErr != nil {
		return []error{ErrRecoveryStalled, e.ReadErr}
	}
	return []error{ErrRecoveryStalled}
}

// HeldError is the error of an acquisition refused because a transaction
// holds the input partition's committed offset (it matches
// ErrOffsetUnstable). The caller retries such an acquisition; one that
// gives up returns Held(waited), which says how long it waited.
type HeldError interface {
	error
	// Held is the error as reported after the caller waited for waited.
	Held(waited time.Duration) error
}

// UndeclaredOutputError names an output of an exactly-once batch for a
// topic the partition's Acquisition.Outputs does not list: the store
// looks for transactions left open only on the topics it knows, so it
// writes to no other. It matches ErrInvalidOutput and ErrMisconfigured:
// the fold makes the same output again on replay, so only declaring the
// topic cures it.
type UndeclaredOutputError struct {
	Input TopicPartition
	Topic string
	Key   []byte
	// Declared are the topics the acquisition declared.
	Declared []string
}

func (e *UndeclaredOutputError) Error() string {
	return fmt.Sprintf("store: %s: output record of key %q is for topic %q, which the partition's acquisition does not declare (declared: %q)",
		e.Input, printableKey(e.Key), e.Topic, e.Declared)
}

// Unwrap returns ErrInvalidOutput and ErrMisconfigured.
func (e *UndeclaredOutputError) Unwrap() []error { return []error{ErrInvalidOutput, ErrMisconfigured} }

// ForeignStateError names state of another application met by an
// acquisition of Application: a record of the snapshot partition written
// by Owner (Offset), or a transactional.id whose transactions write to
// partitions of another application (TransactionalID, Evidence). Nothing
// was taken over, folded or written. It matches ErrForeignState and
// ErrMisconfigured: two applications never share a snapshot topic or a
// transactional.id, and only a change of configuration cures it.
type ForeignStateError struct {
	Input     TopicPartition
	Snapshots TopicPartition
	// Application is the acquiring application; Owner the other one, as
	// its record names it ("" when a transaction is the evidence).
	Application string
	Owner       string
	// Offset is the offset of Owner's record in Snapshots; -1 when a
	// transaction is the evidence.
	Offset int64
	// TransactionalID is set when the evidence is the id's transaction.
	TransactionalID string
	// Evidence says what showed the id to be another application's.
	Evidence string
}

func (e *ForeignStateError) Error() string {
	if e.TransactionalID != "" {
		return fmt.Sprintf("store: %s: transactional.id %q is another application's: %s; application %q did not take it over, "+
			"so the other keeps running; fix: give every application its own TransactionalIDPrefix (the default is the application's name)",
			e.Input, e.TransactionalID, e.Evidence, e.Application)
	}
	return fmt.Sprintf("store: %s: snapshot partition %s holds state of application %q (a record at offset %d), and this is application %q: "+
		"two applications never share a snapshot topic; nothing of it was folded or written; fix: give this application its own snapshot topic "+
		"(the default, \"<application>-<input>-snapshots\", is), or read the other's state with a View",
		e.Input, e.Snapshots, e.Owner, e.Offset, e.Application)
}

// Unwrap returns ErrForeignState and ErrMisconfigured.
func (e *ForeignStateError) Unwrap() []error { return []error{ErrForeignState, ErrMisconfigured} }

// OutputRefusedError reports output records of an exactly-once batch
// that the broker refused for good: too large for the topic's
// max.message.bytes, or invalid for it (a record without a key on a
// compacted topic). The batch's transaction was aborted; a replay makes
// the same records and meets the same refusal, so it is the records'
// failure, not the cluster's. It matches ErrOutputRefused and Err (the
// broker's error, a kerr.Error).
type OutputRefusedError struct {
	Input TopicPartition
	// Outputs are the refused records' indexes in Batch.Outputs, in
	// order; at least one. A broker refuses a whole produce batch for one
	// invalid record in it, so a record listed here may be refused only
	// for sharing a batch with another.
	Outputs []int
	// Topic, Partition and Key are the first refused record's.
	Topic     string
	Partition int32
	Key       []byte
	Err       error
}

func (e *OutputRefusedError) Error() string {
	more := ""
	if n := len(e.Outputs); n > 1 {
		more = fmt.Sprintf(" (and %d other outputs of the batch)", n-1)
	}
	return fmt.Sprintf("store: %s: the broker refused the output for topic %q partition %d with key %q%s: %v",
		e.Input, e.Topic, e.Partition, printableKey(e.Key), more, e.Err)
}

// Unwrap returns ErrOutputRefused and Err.
func (e *OutputRefusedError) Unwrap() []error { return []error{ErrOutputRefused, e.Err} }

// CorruptRecordError names a snapshot record that cannot be decoded.
type CorruptRecordError struct {
	Snapshots TopicPartition
	Offset    int64
	Reason    string
}

func (e *CorruptRecordError) Error() string {
	return fmt.Sprintf("store: corrupt snapshot record at %s offset %d: %s", e.Snapshots, e.Offset, e.Reason)
}

// Unwrap returns ErrCorruptRecord.
func (e *CorruptRecordError) Unwrap() error { return ErrCorruptRecord }

// ValueTooLargeError names a snapshot, or an output record of an
// exactly-once batch, over the size limit.
type ValueTooLargeError struct {
	Input TopicPartition
	// OutputTopic is set when the record is an output for that topic.
	OutputTopic string
	Key         []byte
	Size        int
	Limit       int
}

func (e *ValueTooLargeError) Error() string {
	if e.OutputTopic != "" {
		return fmt.Sprintf("store: %s key %q: output record for topic %q of %d bytes exceeds the limit of %d bytes",
			e.Input, printableKey(e.Key), e.OutputTopic, e.Size, e.Limit)
	}
	return fmt.Sprintf("store: %s key %q: snapshot of %d bytes exceeds the limit of %d bytes",
		e.Input, printableKey(e.Key), e.Size, e.Limit)
}

// Unwrap returns ErrValueTooLarge.
func (e *ValueTooLargeError) Unwrap() error { return ErrValueTooLarge }

func printableKey(k []byte) string {
	const max = 64
	if len(k) > max {
		return string(k[:max]) + "..."
	}
	return string(k)
}
