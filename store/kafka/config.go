// Package kafka is snapfence's production store backend, on franz-go.
//
// In Transactional mode every input partition gets a transactional producer
// with the stable transactional.id "<prefix>-<input topic>-<partition>".
// Acquire initialises it, which fences the previous owner's producer and
// aborts its unfinished transaction. Every transaction carries the queued
// snapshot records and a transactional offset commit of the input
// partition's committed offset, made with the driving consumer's member id
// and generation (or member epoch) as read at that moment; any error the
// group coordinator answers aborts the transaction. Recovery captures the
// high watermark, then reads read_committed until its position reaches it,
// failing with a diagnosed store.RecoveryStalledError if it stops moving.
//
// # The application
//
// A backend belongs to one application (Config.Application), unique on the
// cluster like a group id. It names the snapshot topics
// ("<application>-<input>-snapshots") and the transactional.id prefix by
// default, and every snapshot record carries it, so two applications on
// one input never share state by default, and an acquisition that meets
// another application's record or transactional.id fails with a
// *store.ForeignStateError before it takes anything over. So an
// application started with another's TransactionalIDPrefix is refused
// before it fences the other's producers: the coordinator's state of each
// id, the snapshot partition and the group's offsets show whose it is
// (docs/operations.md, "Applications").
//
// On a cluster with ACLs the producer's principal needs, for the prefix (a
// PREFIXED TransactionalId ACL): Write and Describe on TransactionalId
// "<prefix>-"; Write, Describe and Read on the snapshot topic; Read on the
// consumer group (TxnOffsetCommit); Describe and DescribeConfigs on the
// input and snapshot topics (start-up checks); Create on the snapshot topic
// only with CreateTopics.
package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/internal/backend"
)

// Config configures a Backend. Zero values take the defaults given.
type Config struct {
	// Mode is required: store.Transactional, or store.Plain for the
	// baseline.
	Mode store.Mode
	// SeedBrokers are the bootstrap brokers, "host:port". Required.
	SeedBrokers []string
	// Application names the application, once, unique on the cluster
	// like a group id (letters, digits, '.', '_' and '-'). Everything
	// the store owns is named from it by default: the snapshot topic
	// "<Application>-<input>-snapshots" (DefaultSnapshotTopic) and the
	// transactional.id prefix. Every snapshot record carries it
	// (wire.HeaderApplication), and an acquisition that meets a record
	// or a transactional.id of another application fails with a
	// *store.ForeignStateError before it takes anything over or folds
	// anything. Default TransactionalIDPrefix; one of the two is
	// required.
	Application string
	// TransactionalIDPrefix is the prefix of the producers'
	// transactional.ids; default Application. See the package
	// documentation: it is cluster-scoped. A deployment from before
	// Application existed keeps its prefix by keeping this field.
	TransactionalIDPrefix string
	// SnapshotTopic names the snapshot topic of an input topic; default
	// DefaultSnapshotTopic, "<Application>-<input>-snapshots". Partition N
	// holds input partition N's keys. Before applications were named the
	// default was "<input>-snapshots" (LegacySnapshotTopic): an
	// acquisition whose default topic is missing while that one exists
	// fails with a *store.ConfigError rather than start without the state
	// it may hold (docs/operations.md, "Upgrading to named
	// applications").
	SnapshotTopic func(input string) string
	// CreateTopics creates a missing snapshot topic (compacted, with the
	// input topic's partition count and the broker's default replication)
	// instead of failing.
	CreateTopics bool
	// CreateOutputTopics creates a missing output topic of an
	// exactly-once batch (store.Batch.Outputs), with
	// OutputTopicPartitions partitions and OutputTopicReplicationFactor
	// replicas, before the batch's transaction begins. Off by default: the
	// batch fails, before any transaction, with a *store.ConfigError
	// wrapping ErrTopicMissing that names the topic. CreateTopics does not
	// apply to output topics.
	CreateOutputTopics bool
	// OutputTopicPartitions is the partition count of an output topic
	// CreateOutputTopics creates; 0 (the default) takes the broker's
	// num.partitions.
	OutputTopicPartitions int32
	// OutputTopicReplicationFactor is the replication factor of an output
	// topic CreateOutputTopics creates; 0 (the default) takes the broker's
	// default.replication.factor.
	OutputTopicReplicationFactor int16
	// MaxWritesPerTransaction caps the writes of one transaction; default
	// store.DefaultMaxWritesPerTransaction (16384).
	MaxWritesPerTransaction int
	// MaxBytesPerTransaction caps the bytes of one transaction's writes
	// (wire.SnapshotBytes: key, value and headers of each record);
	// default store.DefaultMaxBytesPerTransaction (16 MiB), or, when
	// TransactionTimeout is under 32 s, the timeout's time budget
	// (store.TransactionBytesBudget: what 1 MiB/s writes in half the
	// timeout). New refuses a value above that budget. The cap is not
	// bounded by the size of a Produce request or of a record batch: a
	// transaction's records go out in batches of at most franz-go's
	// ProducerBatchMaxBytes (1,000,012 bytes by default, the broker's
	// message.max.bytes is 1 MiB) and in as many Produce requests as that
	// takes; those limits bound one record, which MaxValueBytes keeps
	// below them. A single write larger than the cap is not refused: it
	// goes in a transaction of its own. Exactly-once batches
	// (Partition.StartCommitBatch) are their caller's unit and never split.
	MaxBytesPerTransaction int
	// MaxValueBytes bounds a snapshot's key plus value; default
	// store.DefaultMaxValueBytes (999,000), which franz-go's default
	// ProducerBatchMaxBytes (1,000,012) holds with the record's headers
	// and framing. Above it, raise kgo.ProducerBatchMaxBytes (ClientOpts)
	// and the snapshot topic's max.message.bytes with it. (Without that
	// option, an exactly-once output topic whose max.message.bytes is
	// lower caps its produce batches: an output over it is refused alone,
	// as a *store.OutputRefusedError, not with the outputs beside it.)
	MaxValueBytes int
	// TransactionTimeout is the producers' transaction.timeout.ms; default
	// store.DefaultTransactionTimeout (1 min). It bounds every transaction
	// (one that outlives it fails, and the partition must be acquired
	// again) and, through its time budget, MaxBytesPerTransaction.
	TransactionTimeout time.Duration
	// RecoveryStallTimeout fails a recovery read that made no progress for
	// this long; default store.DefaultRecoveryStallTimeout (3 min). Both
	// modes: a Plain read never waits for a transaction, but a log cut
	// below the high watermark it captured would hold it for good. It
	// also bounds a Transactional takeover's InitProducerID, which a
	// coordinator that cannot finish an earlier transaction of the id
	// refuses for ever: the acquisition then fails with a
	// *TakeoverStalledError.
	RecoveryStallTimeout time.Duration
	// AbortHangingTransactions lets the store abort a hanging transaction
	// of its own partition itself, in a recovery or in an acquisition
	// whose committed offset it holds; off (false) by default, when the
	// store only reports it (a *HangingTransactionError, with the
	// kafka-transactions.sh abort command, in a log line and as the
	// recovery's error once its stall timeout passes; or the
	// acquisition's *UnstableOffsetError).
	//
	// A transaction hangs when it is open on the snapshot partition (or
	// on the group's __consumer_offsets partition, where it holds the
	// committed offset: the acquisition's *UnstableOffsetError
	// then lists it in Hanging) and no transaction coordinator has it
	// ongoing: the coordinator forgot it (a single broker killed with
	// SIGKILL can lose the tail of __transaction_state), so no
	// takeover's InitProducerID can end it, and it pins the last stable
	// offset (or the committed offset) for good. With this option the
	// store aborts it, as kafka-transactions.sh abort does (WriteTxnMarkers
	// ABORT with the producer id, epoch and coordinator epoch the
	// partition reports, to its leader), only when it can prove the
	// producer is of the partition's own transactional.id: the producer
	// id is the one the takeover's InitProducerID returned, or the one the
	// coordinator reports for the transactional.id, at an epoch no later
	// than theirs. Producer ids are never reused across transactional.ids,
	// and the takeover fenced every earlier epoch of that id, so no live
	// producer can still write to that transaction: aborting it loses
	// nothing that was committed, and what it held was never acknowledged
	// as committed. A transaction it cannot prove is its own (another
	// application's producer, a producer id no coordinator maps to this
	// transactional.id) is only reported; one a coordinator has ongoing
	// is not hanging and is waited for. The principal needs ClusterAction
	// on the cluster for WriteTxnMarkers. Transactional mode only: New
	// refuses it in Plain mode.
	AbortHangingTransactions bool
	// TLS, if set, dials brokers with TLS.
	TLS *tls.Config
	// SASL, if set, authenticates every connection.
	SASL sasl.Mechanism
	// ClientOpts are appended to the options of every client the backend
	// creates (producers, readers, the admin client): a dialer, a logger,
	// timeouts. They may be the options of the user's own consumer: none
	// of the backend's clients joins a group or consumes a topic because
	// of them. Every group option (kgo.ConsumerGroup, kgo.ShareGroup, the
	// auto-commit settings, the partition callbacks, balancers, session
	// timeouts: every kgo.GroupOpt) is left out, and the subscription
	// options (kgo.ConsumeTopics, kgo.ConsumePartitions) are overridden:
	// a committed offset of a recovery reader would shorten the next
	// recovery, and a backend client in the user's group would take its
	// partitions. kgo.ConsumeRegex, which franz-go cannot turn off again,
	// is refused by New (an *OptionError).
	ClientOpts []kgo.Opt
	// ReaderOpts are appended to the options of recovery readers only,
	// after ClientOpts: fetch sizes, a dialer of their own. As for
	// ClientOpts, group options are left out and kgo.ConsumeRegex is
	// refused; what a recovery read rests on is applied after both and
	// cannot be changed: the snapshot partition read directly from its
	// start (kgo.ConsumePartitions, and kgo.ConsumeStartOffset and
	// kgo.ConsumeResetOffset at the start), read_committed in
	// Transactional mode (kgo.FetchIsolationLevel), control records kept.
	ReaderOpts []kgo.Opt
	// Observer receives every finished transaction.
	Observer store.Observer
	// Logger receives the backend's logs; default discards.
	Logger *slog.Logger
	// Now is the clock for observer durations; default time.Now.
	Now func() time.Time
}

// DefaultSnapshotTopic is the default snapshot topic of an input topic in
// the application app: "<app>-<input>-snapshots".
func DefaultSnapshotTopic(app, input string) string { return backend.DefaultSnapshotTopic(app, input) }

// LegacySnapshotTopic is the snapshot topic snapfence named before
// applications were, "<input>-snapshots": set it as Config.SnapshotTopic
// to keep a deployment's state where it is.
func LegacySnapshotTopic(input string) string { return backend.LegacySnapshotTopic(input) }

// clientOpts are the options every client starts from: connection
// settings, snapfence's defaults, then the user's ClientOpts, which may
// override the defaults, without their group options and with no
// subscription (userOpts).
func (cfg *Config) clientOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.SeedBrokers...),
		// Every write waits for its record to land, and the group commit
		// (or, in Plain mode, the records that pile up while a request is
		// in flight) already batches; a linger is pure latency. franz-go's
		// default is 10 ms.
		kgo.ProducerLinger(0),
	}
	if cfg.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(cfg.TLS))
	}
	if cfg.SASL != nil {
		opts = append(opts, kgo.SASL(cfg.SASL))
	}
	return append(opts, userOpts(cfg.ClientOpts)...)
}

// userOpts are the user's options as a backend client takes them: none
// of the backend's clients is a group member or subscribes to anything.
// franz-go's options are last-wins, but forcing a group off after them
// is not enough: kgo.ConsumerGroup("") clears the group, yet the
// auto-commit and callback options (kgo.DisableAutoCommit,
// kgo.AutoCommitMarks, kgo.GreedyAutoCommit, kgo.AutoCommitCallback,
// kgo.OnPartitionsAssigned and the like) cannot be unset, and franz-go
// rejects them on a client without a group. So every kgo.GroupOpt is
// left out (each has a meaning only in a group), and the subscription,
// which is a ConsumerOpt among fetch settings that must stay, is
// overridden: kgo.ConsumeTopics() with no topics empties it,
// kgo.ConsumePartitions(nil) too (the recovery reader sets its own after
// these). kgo.ConsumeRegex cannot be undone (no option sets it false):
// checkOpts refuses it, and franz-go itself kgo.ConsumeExcludeTopics
// without it.
func userOpts(opts []kgo.Opt) []kgo.Opt {
	out := make([]kgo.Opt, 0, len(opts)+2)
	for _, o := range opts {
		if _, group := o.(kgo.GroupOpt); !group {
			out = append(out, o)
		}
	}
	return append(out, kgo.ConsumeTopics(), kgo.ConsumePartitions(nil))
}

// ErrUnsupportedOption: an option of Config.ClientOpts or
// Config.ReaderOpts that the backend's clients cannot take. An
// *OptionError matches it.
var ErrUnsupportedOption = errors.New("kafka: unsupported client option")

// OptionError names an option of Config.ClientOpts or Config.ReaderOpts
// that New refuses, and why.
type OptionError struct {
	// Field is "ClientOpts" or "ReaderOpts".
	Field string
	// Option is the option, as "kgo.ConsumeRegex".
	Option string
	// Reason says why the backend cannot take it.
	Reason string
	// Err is franz-go's error when it rejected the options itself.
	Err error
}

func (e *OptionError) Error() string {
	msg := fmt.Sprintf("kafka: Config.%s: %s: %s", e.Field, e.Option, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns ErrUnsupportedOption and Err, if set.
func (e *OptionError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrUnsupportedOption, e.Err}
	}
	return []error{ErrUnsupportedOption}
}

// checkOpts refuses the consumer options userOpts cannot neutralise:
// kgo.ConsumeRegex, which no option turns off again and which franz-go
// does not allow with the recovery reader's direct partition. kgo.Opt
// values are opaque, so a client that is never used holds the user's
// consumer options (kgo.ConsumerOpt: fetch settings and subscriptions;
// no dialer, no hooks, nothing that connects) and says what they set. It
// is made only when the field has a consumer option.
func (cfg *Config) checkOpts() error {
	for _, f := range []struct {
		name string
		opts []kgo.Opt
	}{{"ClientOpts", cfg.ClientOpts}, {"ReaderOpts", cfg.ReaderOpts}} {
		var consumer []kgo.Opt
		for _, o := range f.opts {
			if _, ok := o.(kgo.ConsumerOpt); ok {
				consumer = append(consumer, o)
			}
		}
		if len(consumer) == 0 {
			continue
		}
		// With the largest broker read size franz-go allows, its check that
		// the fetch size fits does not depend on a ClientOpt the probe
		// lacks; without a subscription it triggers no metadata request.
		probe, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(cfg.SeedBrokers...), kgo.BrokerMaxReadBytes(1 << 30)},
			consumer...), kgo.ConsumeTopics(), kgo.ConsumePartitions(nil))...)
		if err != nil {
			return &OptionError{Field: f.name, Option: "its consumer options", Reason: "franz-go rejects them", Err: err}
		}
		regex, _ := probe.OptValue(kgo.ConsumeRegex).(bool)
		probe.Close()
		if regex {
			return &OptionError{Field: f.name, Option: "kgo.ConsumeRegex",
				Reason: "the backend's clients never subscribe (the recovery reader reads one snapshot partition directly), " +
					"and franz-go has no option that turns regex consuming off again; leave the consumer's subscription " +
					"options (kgo.ConsumeRegex, kgo.ConsumeExcludeTopics) out of the backend's options"}
		}
	}
	return nil
}
