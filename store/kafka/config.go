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
// # The transactional.id prefix
//
// The prefix is cluster-scoped, like a group id: one prefix per flow, unique
// on the cluster. Two flows with the same prefix and input topic fence each
// other's producers, loudly (store.ErrFenced with PRODUCER_FENCED). On a
// cluster with ACLs the producer's principal needs, for the prefix (a
// PREFIXED TransactionalId ACL): Write and Describe on TransactionalId
// "<prefix>-"; Write, Describe and Read on the snapshot topic; Read on the
// consumer group (TxnOffsetCommit); Describe and DescribeConfigs on the
// input and snapshot topics (start-up checks); Create on the snapshot topic
// only with CreateTopics.
package kafka

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/snapfence/snapfence/store"
)

// Config configures a Backend. Zero values take the defaults given.
type Config struct {
	// Mode is required: store.Transactional, or store.Plain for the
	// baseline.
	Mode store.Mode
	// SeedBrokers are the bootstrap brokers, "host:port". Required.
	SeedBrokers []string
	// TransactionalIDPrefix is required in Transactional mode. See the
	// package documentation: it is cluster-scoped.
	TransactionalIDPrefix string
	// SnapshotTopic names the snapshot topic of an input topic; default
	// "<input>-snapshots". Partition N holds input partition N's keys.
	SnapshotTopic func(input string) string
	// CreateTopics creates a missing snapshot topic (compacted, with the
	// input topic's partition count and the broker's default replication)
	// instead of failing.
	CreateTopics bool
	// MaxWritesPerTransaction caps the writes of one transaction; default
	// store.DefaultMaxWritesPerTransaction (256).
	MaxWritesPerTransaction int
	// MaxValueBytes bounds a snapshot's key plus value; default
	// store.DefaultMaxValueBytes.
	MaxValueBytes int
	// TransactionTimeout is the producers' transaction.timeout.ms; default
	// store.DefaultTransactionTimeout (1 min).
	TransactionTimeout time.Duration
	// RecoveryStallTimeout fails a recovery read that made no progress for
	// this long; default store.DefaultRecoveryStallTimeout (3 min). Both
	// modes: a Plain read never waits for a transaction, but a log cut
	// below the high watermark it captured would hold it for good.
	RecoveryStallTimeout time.Duration
	// TLS, if set, dials brokers with TLS.
	TLS *tls.Config
	// SASL, if set, authenticates every connection.
	SASL sasl.Mechanism
	// ClientOpts are appended to the options of every client the backend
	// creates (producers, readers, the admin client): a dialer, a logger,
	// timeouts.
	ClientOpts []kgo.Opt
	// ReaderOpts are appended to the options of recovery readers only.
	ReaderOpts []kgo.Opt
	// Observer receives every finished transaction.
	Observer store.Observer
	// Logger receives the backend's logs; default discards.
	Logger *slog.Logger
	// Now is the clock for observer durations; default time.Now.
	Now func() time.Time
}

// DefaultSnapshotTopic is the default snapshot topic of an input topic.
func DefaultSnapshotTopic(input string) string { return input + "-snapshots" }

func (cfg *Config) setDefaults() {
	if cfg.SnapshotTopic == nil {
		cfg.SnapshotTopic = DefaultSnapshotTopic
	}
	if cfg.MaxWritesPerTransaction <= 0 {
		cfg.MaxWritesPerTransaction = store.DefaultMaxWritesPerTransaction
	}
	if cfg.MaxValueBytes <= 0 {
		cfg.MaxValueBytes = store.DefaultMaxValueBytes
	}
	if cfg.TransactionTimeout <= 0 {
		cfg.TransactionTimeout = store.DefaultTransactionTimeout
	}
	if cfg.RecoveryStallTimeout <= 0 {
		cfg.RecoveryStallTimeout = store.DefaultRecoveryStallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
}

// clientOpts are the options every client starts from: connection
// settings, snapfence's defaults, then the user's ClientOpts, which may
// override the defaults.
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
	return append(opts, cfg.ClientOpts...)
}
