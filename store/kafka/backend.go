package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/internal/kafkatopic"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/internal/backend"
	"github.com/snapfence/snapfence/store/internal/readloop"
	"github.com/snapfence/snapfence/store/wire"
)

// Errors of the start-up checks; they wrap what was found. Both are
// permanent configuration problems: they match store.ErrMisconfigured too.
var (
	// ErrTopicMissing: the input, snapshot or output topic does not exist.
	ErrTopicMissing error = misconfigured("kafka: topic missing")
	// ErrTopicConfig: the snapshot topic is configured wrongly.
	ErrTopicConfig error = misconfigured("kafka: wrong topic configuration")
)

// misconfigured is a sentinel that also matches store.ErrMisconfigured.
type misconfigured string

func (e misconfigured) Error() string { return string(e) }

func (e misconfigured) Is(target error) bool { return target == store.ErrMisconfigured }

// Backend is a store.Backend on a Kafka cluster: the shared backend
// skeleton (store/internal/backend) over the cluster's seam, a broker of
// franz-go clients (this type) and a link per acquired partition.
type Backend struct {
	core *backend.Backend
	cfg  Config
	// set is the checked configuration every backend shares, defaults
	// filled in; the rest of cfg is Kafka's own.
	set   backend.Config
	admin *kgo.Client
	adm   *kadm.Client
	// tv2: the cluster runs transactions under KIP-890 part 2, so a
	// TxnOffsetCommit (v5+) adds the offsets partition itself and no
	// AddOffsetsToTxn is sent.
	tv2   bool
	plain *kgo.Client // the shared producer of Plain mode
	// commitMetadata goes with every input offset committed
	// (wire.CommitMetadata).
	commitMetadata string

	mu sync.Mutex
	// outputTopics caches the partition counts of exactly-once output
	// topics. (A topic that grows partitions keeps its old count here:
	// keyed outputs keep their partition, as with a producer whose
	// metadata is stale.)
	outputTopics map[string]int
	// outputLimits are the output topics' max.message.bytes and
	// cleanup.policy: the producers' batch cap, and keyless.
	outputLimits *kafkatopic.Limits
}

var (
	_ store.Backend  = (*Backend)(nil)
	_ backend.Broker = (*broker)(nil)
)

// broker is the Backend as the skeleton's backend.Broker, kept off the
// Backend's exported method set.
type broker struct{ b *Backend }

// New connects to the cluster and returns a backend. It checks the
// configuration, not the topics: those are checked at each Acquire.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	set, err := backend.Config{
		Name: "kafka", Mode: cfg.Mode, Application: cfg.Application, TransactionalIDPrefix: cfg.TransactionalIDPrefix,
		SnapshotTopic: cfg.SnapshotTopic, MaxWritesPerTransaction: cfg.MaxWritesPerTransaction,
		MaxBytesPerTransaction: cfg.MaxBytesPerTransaction,
		MaxValueBytes:          cfg.MaxValueBytes, TransactionTimeout: cfg.TransactionTimeout,
		RecoveryStallTimeout: cfg.RecoveryStallTimeout, Observer: cfg.Observer, Logger: cfg.Logger, Now: cfg.Now,
		ReleaseSuperseded: true,
	}.Check()
	if err != nil {
		return nil, err
	}
	if len(cfg.SeedBrokers) == 0 {
		return nil, errors.New("kafka: SeedBrokers is required")
	}
	if err := cfg.checkOpts(); err != nil {
		return nil, err
	}
	if cfg.AbortHangingTransactions && set.Mode != store.Transactional {
		return nil, &store.ConfigError{Subject: "Config.AbortHangingTransactions",
			Problem: fmt.Sprintf("is set in %s mode, which has no transactional.id lineage to prove a transaction its own", set.Mode),
			Fix:     "use Mode store.Transactional, or leave AbortHangingTransactions false"}
	}
	if cfg.OutputTopicPartitions < 0 || cfg.OutputTopicReplicationFactor < 0 {
		return nil, &store.ConfigError{Subject: "Config.OutputTopicPartitions and OutputTopicReplicationFactor",
			Problem: fmt.Sprintf("are %d and %d", cfg.OutputTopicPartitions, cfg.OutputTopicReplicationFactor),
			Fix:     "give a positive count, or 0 for the broker's default"}
	}
	admin, err := kgo.NewClient(cfg.clientOpts()...)
	if err != nil {
		return nil, fmt.Errorf("kafka: admin client: %w", err)
	}
	b := &Backend{cfg: cfg, set: set, commitMetadata: wire.CommitMetadata(set.Application), admin: admin, adm: kadm.NewClient(admin), outputTopics: map[string]int{}, outputLimits: kafkatopic.NewLimits()}
	if set.Mode == store.Transactional {
		if b.tv2, err = transactionVersion2(ctx, admin); err != nil {
			admin.Close()
			return nil, err
		}
	} else {
		opts := append(cfg.clientOpts(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if b.plain, err = kgo.NewClient(opts...); err != nil {
			admin.Close()
			return nil, fmt.Errorf("kafka: plain producer: %w", err)
		}
	}
	b.core = backend.New(set, &broker{b})
	return b, nil
}

// transactionVersion2 reports whether the cluster finalized
// transaction.version 2 (KIP-890 part 2) and serves TxnOffsetCommit v5+.
func transactionVersion2(ctx context.Context, cl *kgo.Client) (bool, error) {
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		return false, fmt.Errorf("kafka: api versions: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return false, fmt.Errorf("kafka: api versions: %w", err)
	}
	txnOffsetCommitV5 := false
	for _, k := range resp.ApiKeys {
		if k.ApiKey == int16(kmsg.TxnOffsetCommit) && k.MaxVersion >= 5 {
			txnOffsetCommitV5 = true
		}
	}
	for _, f := range resp.FinalizedFeatures {
		if f.Name == "transaction.version" && f.MaxVersionLevel >= 2 {
			return txnOffsetCommitV5, nil
		}
	}
	return false, nil
}

// Application is the application's name (Config.Application, or the
// transactional.id prefix when that is unset).
func (b *Backend) Application() string { return b.set.Application }

// Mode reports the backend's mode.
func (b *Backend) Mode() store.Mode { return b.set.Mode }

// TransactionalID is the transactional.id of an input partition's
// producer (store.TransactionalID): stable, with nothing per assignment in
// it, so every owner of the partition shares it and a new owner's
// initialisation aborts what the previous one left open.
func (b *Backend) TransactionalID(input store.TopicPartition) string {
	return b.core.TransactionalID(input)
}

// SnapshotPartition is the snapshot partition of an input partition.
func (b *Backend) SnapshotPartition(input store.TopicPartition) store.TopicPartition {
	return b.core.SnapshotPartition(input)
}

// Acquire implements store.Backend: it checks the topics, and in
// Transactional mode initialises the partition's producer before it returns,
// which fences the previous owner and aborts its unfinished transaction.
func (b *Backend) Acquire(ctx context.Context, a store.Acquisition) (store.Partition, error) {
	return b.core.Acquire(ctx, a)
}

// Close releases every partition and client.
func (b *Backend) Close() error { return b.core.Close() }

// Open implements backend.Broker: the topic checks, the declared output
// topics' among them (outputPartitions: each must exist, or is created
// with Config.CreateOutputTopics), so a missing one fails the partition's
// first acquisition rather than its first batch.
func (br *broker) Open(ctx context.Context, input, snap store.TopicPartition, outputs []string) (backend.Link, error) {
	inputID, topic, err := br.b.checkTopics(ctx, input, snap)
	if err != nil {
		return nil, err
	}
	for _, t := range outputs {
		if _, err := br.b.outputPartitions(ctx, t); err != nil {
			return nil, err
		}
	}
	return &partition{b: br.b, input: input, inputID: inputID, snap: snap, topic: topic, pid: -1}, nil
}

// Leftover implements backend.Broker.
func (br *broker) Leftover(ctx context.Context, a store.Acquisition, l backend.Link, txnID string) error {
	return br.b.leftover(ctx, a, l.(*partition), txnID)
}

// Claimed implements backend.Broker: DescribeTransactions of txnID, the
// snapshot partition's end and last stable offsets, and the group's
// committed offset when it matters. An id the coordinator does not know is unclaimed.
func (br *broker) Claimed(ctx context.Context, txnID string, snap, input store.TopicPartition, group string) (backend.IDState, error) {
	var st backend.IDState
	ends, err := br.b.adm.ListEndOffsets(ctx, snap.Topic)
	end, err := listedOffset(ends, err, snap, "end offset")
	if err != nil {
		return st, err
	}
	st.SnapshotsEmpty = end == 0
	if !st.SnapshotsEmpty {
		stable, err := br.b.adm.ListCommittedOffsets(ctx, snap.Topic)
		lso, err := listedOffset(stable, err, snap, "last stable offset")
		if err != nil {
			return st, err
		}
		st.SnapshotsStable = lso > 0
	}
	d, ok, err := br.describeTransaction(ctx, txnID)
	switch {
	case errors.Is(err, kerr.UnsupportedVersion):
		return st, fmt.Errorf("%w: %w", backend.ErrNoClaims, err)
	case errors.Is(err, kerr.TransactionalIDNotFound) || (err == nil && !ok):
		return st, nil
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return st, br.b.txnIDRefused(txnID, "the check of whose it is, before the takeover of "+input.String(), err)
	case err != nil:
		return st, err
	}
	st.Claimed = d.State != "Empty" || d.ProducerEpoch > 0
	switch d.State {
	case "Ongoing", "PrepareCommit", "PrepareAbort":
		st.Ongoing = true
		d.Topics.EachPartitions(func(topic string, parts []int32) {
			for _, p := range parts {
				st.Partitions = append(st.Partitions, store.TopicPartition{Topic: topic, Partition: p})
			}
		})
	}
	if st.Claimed && st.SnapshotsEmpty {
		offs, err := br.b.adm.FetchOffsets(ctx, group)
		if err == nil {
			err = offs.Error()
		}
		if err != nil {
			return st, err
		}
		_, st.GroupCommitted = offs.Lookup(input.Topic, input.Partition)
	}
	return st, nil
}

// Unstable implements backend.Broker.
func (br *broker) Unstable(ctx context.Context, a store.Acquisition, l backend.Link, txnID string, err error) (bool, error) {
	return br.b.unstableOffset(ctx, a, l.(*partition), txnID, err)
}

// listedOffset is tp's offset in l, a kadm listing such as
// ListEndOffsets returned with err; what names the offset in an error.
func listedOffset(l kadm.ListedOffsets, err error, tp store.TopicPartition, what string) (int64, error) {
	if err == nil {
		err = l.Error()
	}
	if err != nil {
		return 0, err
	}
	o, ok := l.Lookup(tp.Topic, tp.Partition)
	if !ok {
		return 0, fmt.Errorf("kafka: no %s for %s", what, tp)
	}
	return o.Offset, nil
}

// txnIDRefused is the *store.ConfigError of an ACL that refuses the
// principal txnID, in what: permanent, as retrying the acquisition cannot
// cure an ACL. WRITE implies the DESCRIBE that DescribeTransactions needs.
func (b *Backend) txnIDRefused(txnID, what string, err error) error {
	return &store.ConfigError{Subject: fmt.Sprintf("transactional.id %q", txnID),
		Problem: fmt.Sprintf("the principal may not use it (%s)", what),
		Fix: fmt.Sprintf("grant the principal WRITE on TRANSACTIONAL_ID prefix %q as a PREFIXED ACL "+
			"(kafka-acls.sh --add --allow-principal User:... --operation Write --transactional-id %s --resource-pattern-type prefixed)",
			b.cfg.TransactionalIDPrefix+"-", b.cfg.TransactionalIDPrefix+"-"),
		Err: err}
}

// describeTransaction is DescribeTransactions of txnID, asked again while
// its coordinator is moving or loading (a retriable error: on a fresh
// cluster the first use of a transaction coordinator answers
// COORDINATOR_NOT_AVAILABLE for a while), as the takeover's
// InitProducerID is, within the transaction timeout. The error is the
// request's or the id's own.
func (br *broker) describeTransaction(ctx context.Context, txnID string) (kadm.DescribedTransaction, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, br.b.set.TransactionTimeout)
	defer cancel()
	backoff := coordinatorBackoff
	for {
		ds, err := br.b.adm.DescribeTransactions(ctx, txnID)
		d, ok := ds[txnID]
		if err == nil && ok {
			err = d.Err
		}
		if err == nil || !kerr.IsRetriable(err) {
			return d, ok, err
		}
		if perr := pause(ctx, &backoff, coordinatorBackoffMax); perr != nil {
			return d, ok, fmt.Errorf("describing transactional.id %q: %w (%w)", txnID, err, perr)
		}
	}
}

// Backoff for a coordinator that is moving or loading: doubling from
// 10 ms to 1 s.
const (
	coordinatorBackoff    = 10 * time.Millisecond
	coordinatorBackoffMax = time.Second
)

// Close implements backend.Broker: the skeleton has released every
// partition.
func (br *broker) Close() error {
	if br.b.plain != nil {
		br.b.plain.Close()
	}
	br.b.admin.Close()
	return nil
}

// visibleTopic reports whether topic exists as far as the backend's
// principal can see: one it may not describe counts as absent (it cannot
// hold this principal's state). Another error is returned: the caller
// must not read it as absent.
func (b *Backend) visibleTopic(ctx context.Context, topic string) (bool, error) {
	details, err := b.adm.ListTopics(ctx, topic)
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	d, ok := details[topic]
	switch {
	case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) || errors.Is(d.Err, kerr.TopicAuthorizationFailed):
		return false, nil
	case d.Err != nil:
		return false, d.Err
	}
	return true, nil
}

// checkTopics checks that the input topic exists and that its snapshot
// topic exists (or creates it), is compacted and has at least as many
// partitions. It returns the input topic's id, for TxnOffsetCommit v6, and
// the snapshot topic's id and delete.retention.ms, for delta recoveries.
func (b *Backend) checkTopics(ctx context.Context, input, snap store.TopicPartition) ([16]byte, backend.SnapshotTopic, error) {
	var noID [16]byte
	var topic backend.SnapshotTopic
	details, err := b.adm.ListTopics(ctx, input.Topic, snap.Topic)
	if err != nil {
		return noID, topic, fmt.Errorf("kafka: describing topics %q and %q: %w", input.Topic, snap.Topic, err)
	}
	in, err := inputTopic(details, input)
	if err != nil {
		return noID, topic, err
	}
	sd, err := b.snapshotTopicDetail(ctx, details, input, snap, len(in.Partitions))
	if err != nil {
		return noID, topic, err
	}
	if err := checkSnapshotTopic(sd, input, snap, len(in.Partitions)); err != nil {
		return noID, topic, err
	}
	rc, err := b.snapshotTopicConfig(ctx, snap)
	if err != nil {
		return noID, topic, err
	}
	if topic, err = snapshotTopicFromConfig(sd.ID, snap, rc); err != nil {
		return noID, topic, err
	}
	return in.ID, topic, nil
}

// inputTopic returns the input topic's detail from details, or the error
// that it, or the input partition, does not exist.
func inputTopic(details kadm.TopicDetails, input store.TopicPartition) (kadm.TopicDetail, error) {
	in, ok := details[input.Topic]
	if !ok || errors.Is(in.Err, kerr.UnknownTopicOrPartition) {
		return in, fmt.Errorf("%w: input topic %q does not exist", ErrTopicMissing, input.Topic)
	}
	if in.Err != nil {
		return in, fmt.Errorf("kafka: input topic %q: %w", input.Topic, in.Err)
	}
	if _, ok := in.Partitions[input.Partition]; !ok {
		return in, fmt.Errorf("%w: input partition %s does not exist (the topic has %d)", ErrTopicMissing, input, len(in.Partitions))
	}
	return in, nil
}

// snapshotTopicDetail returns the snapshot topic's detail from details;
// if the topic does not exist, it creates it (when Config.CreateTopics
// allows) and describes it anew. inputPartitions is the input topic's
// partition count, the one the snapshot topic is created with.
func (b *Backend) snapshotTopicDetail(ctx context.Context, details kadm.TopicDetails, input, snap store.TopicPartition, inputPartitions int) (kadm.TopicDetail, error) {
	sd, ok := details[snap.Topic]
	if ok && !errors.Is(sd.Err, kerr.UnknownTopicOrPartition) {
		return sd, nil
	}
	if b.set.SnapshotTopicIsDefault {
		legacy := backend.LegacySnapshotTopic(input.Topic)
		found, err := b.visibleTopic(ctx, legacy)
		if err != nil {
			return sd, fmt.Errorf("kafka: describing topic %q (the snapshot topic's name before applications): %w", legacy, err)
		}
		if found {
			return sd, backend.LegacyTopicError(b.set, input.Topic, snap.Topic)
		}
	}
	if !b.cfg.CreateTopics {
		return sd, fmt.Errorf("%w: snapshot topic %q of input topic %q does not exist; create it with cleanup.policy=compact and at least %d partitions, or set CreateTopics",
			ErrTopicMissing, snap.Topic, input.Topic, inputPartitions)
	}
	if err := b.createSnapshotTopic(ctx, input, snap, inputPartitions); err != nil {
		return sd, err
	}
	listed, err := b.adm.ListTopics(ctx, snap.Topic)
	if err != nil {
		return sd, fmt.Errorf("kafka: describing topic %q: %w", snap.Topic, err)
	}
	return listed[snap.Topic], nil
}

// createSnapshotTopic creates the compacted snapshot topic with
// partitions partitions, and logs whether this call or another created it.
//
// CreateTopic returns once every partition is served, and leaves b.admin's
// cached metadata of the topic fresh. That matters here: the ListTopics
// before it cached "unknown topic" for it, and kadm's requests
// (ListTopics, DescribeTopicConfigs) and the recovery's sharded ListOffsets
// read that cache for the metadata min age (5 s by default). A wait that
// listed the topic through kadm saw it only once that entry expired: every
// acquisition that created its snapshot topic took over 5 s.
func (b *Backend) createSnapshotTopic(ctx context.Context, input, snap store.TopicPartition, partitions int) error {
	compact := "compact"
	start := b.set.Now()
	created, err := kafkatopic.Create(ctx, b.admin, snap.Topic, int32(partitions), -1, map[string]*string{"cleanup.policy": &compact})
	if err != nil {
		return fmt.Errorf("kafka: snapshot topic of input topic %q: %w", input.Topic, err)
	}
	msg := "created snapshot topic"
	if !created {
		msg = "snapshot topic was created meanwhile"
	}
	b.set.Logger.Info(msg, "topic", snap.Topic, "partitions", partitions, "served_after", b.set.Now().Sub(start))
	return nil
}

// checkSnapshotTopic checks that the snapshot topic's detail sd carries no
// error and that the topic has at least inputPartitions partitions:
// partition N holds input partition N's keys.
func checkSnapshotTopic(sd kadm.TopicDetail, input, snap store.TopicPartition, inputPartitions int) error {
	if errors.Is(sd.Err, kerr.TopicAuthorizationFailed) {
		return &store.ConfigError{Subject: fmt.Sprintf("snapshot topic %q", snap.Topic),
			Problem: "the backend may not describe it",
			Fix:     fmt.Sprintf("grant the principal READ and WRITE on the topic (kafka-acls.sh --operation Read --operation Write --topic %s)", snap.Topic),
			Err:     sd.Err}
	}
	if sd.Err != nil {
		return fmt.Errorf("kafka: snapshot topic %q: %w", snap.Topic, sd.Err)
	}
	if len(sd.Partitions) < inputPartitions {
		return fmt.Errorf("%w: snapshot topic %q has %d partitions, fewer than the %d of input topic %q: partition N must hold input partition N's keys",
			ErrTopicConfig, snap.Topic, len(sd.Partitions), inputPartitions, input.Topic)
	}
	return nil
}

// snapshotTopicConfig describes the snapshot topic's configuration.
func (b *Backend) snapshotTopicConfig(ctx context.Context, snap store.TopicPartition) (kadm.ResourceConfig, error) {
	configs, err := b.adm.DescribeTopicConfigs(ctx, snap.Topic)
	var rc kadm.ResourceConfig
	if err == nil {
		if rc, err = configs.On(snap.Topic, nil); err == nil {
			err = rc.Err
		}
	}
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		return rc, &store.ConfigError{Subject: fmt.Sprintf("snapshot topic %q", snap.Topic),
			Problem: "the backend may not read its configuration (cleanup.policy must contain compact)",
			Fix:     fmt.Sprintf("grant the principal DESCRIBE_CONFIGS on the topic (kafka-acls.sh --operation DescribeConfigs --topic %s)", snap.Topic),
			Err:     err}
	}
	if err != nil {
		return rc, fmt.Errorf("kafka: describing the configuration of snapshot topic %q: %w", snap.Topic, err)
	}
	return rc, nil
}

// snapshotTopicFromConfig reads the snapshot topic's delete.retention.ms
// from its configuration rc (the default if the broker does not report
// it), and checks that its cleanup.policy compacts: otherwise retention
// deletes old snapshots.
func snapshotTopicFromConfig(id [16]byte, snap store.TopicPartition, rc kadm.ResourceConfig) (backend.SnapshotTopic, error) {
	topic := backend.SnapshotTopic{ID: id, DeleteRetention: defaultDeleteRetention}
	for _, c := range rc.Configs {
		if c.Key == "delete.retention.ms" && c.Value != nil {
			if ms, err := strconv.ParseInt(*c.Value, 10, 64); err == nil {
				topic.DeleteRetention = time.Duration(ms) * time.Millisecond
			}
		}
		if c.Key == "cleanup.policy" {
			policy := ""
			if c.Value != nil {
				policy = *c.Value
			}
			if !slices.Contains(strings.Split(policy, ","), "compact") {
				return topic, fmt.Errorf("%w: snapshot topic %q has cleanup.policy=%q; it must be compacted (cleanup.policy=compact), or old snapshots are deleted by retention",
					ErrTopicConfig, snap.Topic, policy)
			}
		}
	}
	return topic, nil
}

// defaultDeleteRetention is Kafka's default delete.retention.ms (24 h),
// for a broker that does not report it.
const defaultDeleteRetention = 24 * time.Hour

// outputCounts returns the partition count of every topic of outs
// (outputPartitions).
func (b *Backend) outputCounts(ctx context.Context, outs []store.Output) (map[string]int, error) {
	if len(outs) == 0 {
		return nil, nil
	}
	counts := map[string]int{}
	for _, o := range outs {
		if _, ok := counts[o.Topic]; ok {
			continue
		}
		n, err := b.outputPartitions(ctx, o.Topic)
		if err != nil {
			return nil, err
		}
		counts[o.Topic] = n
	}
	return counts, nil
}

// outputPartitions returns the partition count of an output topic, which
// it checks once (and with Config.CreateOutputTopics creates): a missing
// topic is a *store.ConfigError wrapping ErrTopicMissing.
func (b *Backend) outputPartitions(ctx context.Context, topic string) (int, error) {
	b.mu.Lock()
	n, ok := b.outputTopics[topic]
	b.mu.Unlock()
	if ok {
		return n, nil
	}
	n, err := b.describeOutput(ctx, topic)
	if errors.Is(err, ErrTopicMissing) && b.cfg.CreateOutputTopics {
		n, err = b.createOutput(ctx, topic)
	}
	if err != nil {
		return 0, err
	}
	b.outputLimits.Read(ctx, b.adm, topic)
	b.mu.Lock()
	b.outputTopics[topic] = n
	b.mu.Unlock()
	return n, nil
}

// keyless is the *store.OutputRefusedError of the outputs without a key
// to a compacted topic, or nil. The broker refuses such a record with
// INVALID_RECORD, and with it every record of its produce batch: the
// store refuses the batch before its transaction begins, naming only
// them.
func (b *Backend) keyless(input store.TopicPartition, outs []store.Output, counts map[string]int) error {
	var re *store.OutputRefusedError
	for i, o := range outs {
		err := b.outputLimits.Keyless(o.Topic, o.Key)
		if err == nil {
			continue
		}
		if re == nil {
			re = &store.OutputRefusedError{Input: input, Topic: o.Topic, Partition: store.OutputPartition(nil, counts[o.Topic]), Err: err}
		}
		re.Outputs = append(re.Outputs, i)
	}
	if re == nil {
		return nil
	}
	return re
}

// describeOutput returns the partition count of an output topic.
func (b *Backend) describeOutput(ctx context.Context, topic string) (int, error) {
	details, err := b.adm.ListTopics(ctx, topic)
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		return 0, &store.ConfigError{Subject: fmt.Sprintf("output topic %q", topic), Problem: "the producer may not describe it",
			Fix: fmt.Sprintf("grant the principal WRITE on the topic (kafka-acls.sh --operation Write --topic %s; WRITE implies DESCRIBE)", topic), Err: err}
	}
	if err != nil {
		return 0, fmt.Errorf("kafka: describing output topic %q: %w", topic, err)
	}
	td, ok := details[topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return 0, &store.ConfigError{Subject: fmt.Sprintf("output topic %q", topic), Problem: "does not exist",
			Fix: fmt.Sprintf("create it (kafka-topics.sh --bootstrap-server %s --create --topic %s --partitions N), or set kafka.Config.CreateOutputTopics",
				b.cfg.SeedBrokers[0], topic),
			Err: ErrTopicMissing}
	}
	if errors.Is(td.Err, kerr.TopicAuthorizationFailed) {
		return 0, &store.ConfigError{Subject: fmt.Sprintf("output topic %q", topic), Problem: "the producer may not describe it",
			Fix: fmt.Sprintf("grant the principal WRITE on the topic (kafka-acls.sh --operation Write --topic %s; WRITE implies DESCRIBE)", topic), Err: td.Err}
	}
	if td.Err != nil {
		return 0, fmt.Errorf("kafka: output topic %q: %w", topic, td.Err)
	}
	if len(td.Partitions) == 0 {
		return 0, fmt.Errorf("kafka: output topic %q lists no partitions", topic)
	}
	return len(td.Partitions), nil
}

// createOutput creates a missing output topic (Config.CreateOutputTopics)
// and returns its partition count once it is served.
func (b *Backend) createOutput(ctx context.Context, topic string) (int, error) {
	partitions, replicas := b.cfg.OutputTopicPartitions, b.cfg.OutputTopicReplicationFactor
	if partitions == 0 {
		partitions = -1
	}
	if replicas == 0 {
		replicas = -1
	}
	start := b.set.Now()
	created, err := kafkatopic.Create(ctx, b.admin, topic, partitions, replicas, nil)
	if errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
		return 0, &store.ConfigError{Subject: fmt.Sprintf("output topic %q", topic), Problem: "does not exist, and the backend may not create it",
			Fix: "create it, or grant the principal Create on the topic", Err: err}
	}
	if err != nil {
		return 0, fmt.Errorf("kafka: output topic: %w", err)
	}
	// Create left the admin client's metadata of the topic fresh.
	n, err := b.describeOutput(ctx, topic)
	if err != nil {
		return 0, err
	}
	msg := "created output topic"
	if !created {
		msg = "output topic was created meanwhile"
	}
	b.set.Logger.Info(msg, "topic", topic, "partitions", n, "served_after", b.set.Now().Sub(start))
	return n, nil
}

// CanFollow implements store.Backend: the backend follows partitions.
func (b *Backend) CanFollow() bool { return true }

// Partitions implements store.Backend: topic's partition count, or
// an error wrapping ErrTopicMissing.
func (b *Backend) Partitions(ctx context.Context, topic string) (int32, error) {
	return b.core.Partitions(ctx, topic)
}

// FollowTopic implements store.Backend: a group-less
// read_committed consumer of a partition of any topic (a client of its
// own), in either mode; it writes nothing and creates nothing.
func (b *Backend) FollowTopic(ctx context.Context, tp store.TopicPartition, from *store.Checkpoint) (store.Follow, error) {
	return b.core.FollowTopic(ctx, tp, from)
}

// Partitions implements backend.Broker.
func (br *broker) Partitions(ctx context.Context, topic string) (int32, error) {
	td, err := br.b.describeTopic(ctx, topic)
	return int32(len(td.Partitions)), err
}

// describeTopic lists one topic, or says that it is missing.
func (b *Backend) describeTopic(ctx context.Context, topic string) (kadm.TopicDetail, error) {
	details, err := b.adm.ListTopics(ctx, topic)
	if err != nil {
		return kadm.TopicDetail{}, fmt.Errorf("kafka: describing topic %q: %w", topic, err)
	}
	td, ok := details[topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return td, fmt.Errorf("%w: topic %q does not exist", ErrTopicMissing, topic)
	}
	if errors.Is(td.Err, kerr.TopicAuthorizationFailed) {
		return td, &store.ConfigError{Subject: fmt.Sprintf("topic %q", topic), Problem: "the backend may not describe it",
			Fix: fmt.Sprintf("grant the principal DESCRIBE and READ on the topic (kafka-acls.sh --operation Describe --operation Read --topic %s)", topic),
			Err: td.Err}
	}
	if td.Err != nil {
		return td, fmt.Errorf("kafka: topic %q: %w", topic, td.Err)
	}
	return td, nil
}

// OpenTopic implements backend.Broker: the partition's existence, the
// topic's id and delete.retention.ms (for the checks of a checkpoint).
func (br *broker) OpenTopic(ctx context.Context, tp store.TopicPartition) (backend.TopicLink, error) {
	b := br.b
	td, err := b.describeTopic(ctx, tp.Topic)
	if err != nil {
		return nil, err
	}
	if _, ok := td.Partitions[tp.Partition]; !ok {
		return nil, fmt.Errorf("%w: partition %s does not exist (the topic has %d)", ErrTopicMissing, tp, len(td.Partitions))
	}
	topic := backend.SnapshotTopic{ID: td.ID, DeleteRetention: defaultDeleteRetention}
	configs, err := b.adm.DescribeTopicConfigs(ctx, tp.Topic)
	var rc kadm.ResourceConfig
	if err == nil {
		if rc, err = configs.On(tp.Topic, nil); err == nil {
			err = rc.Err
		}
	}
	if err != nil {
		// The retention only ages a checkpoint; without it the default
		// (24 h) stands, as for a broker that does not report it.
		b.set.Logger.Warn("describing a followed topic's configuration failed; assuming delete.retention.ms of 24 h", "topic", tp.Topic, "err", err)
	}
	for _, c := range rc.Configs {
		if c.Key == "delete.retention.ms" && c.Value != nil {
			if ms, err := strconv.ParseInt(*c.Value, 10, 64); err == nil {
				topic.DeleteRetention = time.Duration(ms) * time.Millisecond
			}
		}
	}
	return &topicLink{b: b, tp: tp, topic: topic}, nil
}

// topicLink is a follower's link to a partition of any topic.
type topicLink struct {
	b     *Backend
	tp    store.TopicPartition
	topic backend.SnapshotTopic
}

func (l *topicLink) Source(_ context.Context, from int64) (readloop.Source, func(), error) {
	return l.b.newSource(l.tp, from, true, nil)
}

func (l *topicLink) Snapshots() backend.SnapshotTopic { return l.topic }

func (l *topicLink) Release() {}

// Follow implements store.Backend: a group-less read_committed consumer
// of input's snapshot partition for a standby replica (a client of its
// own, as a recovery read has); it writes nothing.
func (b *Backend) Follow(ctx context.Context, input store.TopicPartition, from *store.Checkpoint) (store.Follow, error) {
	return b.core.Follow(ctx, input, from)
}
