package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/internal/kafkatopic"
	"github.com/snapfence/snapfence/store"
)

// DefaultDeliveryTimeout is EmitterConfig.DeliveryTimeout's default.
// Emit (StartEmit's wait) runs on the engine's poll loop, so it must not
// block for longer than a rebalance may wait for the loop (franz-go's
// default rebalance timeout is 60 s); Kafka's own delivery.timeout.ms is
// 2 min, for producers that do not hold a group up.
const DefaultDeliveryTimeout = 30 * time.Second

// EmitterConfig configures a Emitter. Zero values take the
// defaults given.
type EmitterConfig struct {
	// SeedBrokers are the bootstrap brokers, "host:port". Required.
	SeedBrokers []string
	// ClientOpts are appended to the producer's options: TLS, SASL, a
	// dialer, a logger, batching (kgo.ProducerLinger, default 10 ms;
	// kgo.ProducerBatchMaxBytes) and the like. They may be the options of
	// the engine's consumer (kafkaio.Config.ClientOpts): group options
	// (every kgo.GroupOpt) are left out, and the consumer's subscription
	// is emptied. Options the emitter rests on are applied after them and
	// cannot be changed: the partitioner (store.OutputPartition's, by key)
	// and the delivery timeout (DeliveryTimeout). Idempotence is
	// franz-go's default; kgo.DisableIdempotentWrite turns it off (and
	// with it the protection against duplicates from the producer's own
	// retries).
	ClientOpts []kgo.Opt
	// DeliveryTimeout bounds the delivery of one output record, retries
	// included (kgo.RecordDeliveryTimeout, Kafka's delivery.timeout.ms),
	// and each Emit's topic check; default DefaultDeliveryTimeout (30 s).
	// A record not delivered by then fails its Emit.
	DeliveryTimeout time.Duration
	// CreateTopics creates a missing output topic (off by default: a
	// missing topic fails Emit with a *store.ConfigError). It is created
	// with TopicPartitions partitions, TopicReplicationFactor replicas
	// and TopicConfigs, and Emit returns once it is served. Set
	// engine.Config.CheckOutputTopics to the emitter's CheckTopics with
	// it: the engine otherwise checks output topics through its source,
	// which creates none, and a missing one ends Run.
	CreateTopics bool
	// TopicPartitions is the partition count of a topic CreateTopics
	// creates; 0 (the default) takes the broker's num.partitions.
	TopicPartitions int32
	// TopicReplicationFactor is the replication factor of a topic
	// CreateTopics creates; 0 (the default) takes the broker's
	// default.replication.factor.
	TopicReplicationFactor int16
	// TopicConfigs are the topic configs of a topic CreateTopics creates
	// ("retention.ms", "cleanup.policy", ...); default none (the broker's
	// defaults).
	TopicConfigs map[string]string
	// Logger receives the emitter's logs (a topic created); default
	// discards.
	Logger *slog.Logger
}

// Emitter is the built-in at-least-once output: an idempotent
// franz-go producer whose Emit is a engine.Config.Emit and whose StartEmit is a
// engine.Config.StartEmit (the faster of the two: the engine folds the next poll
// while a poll's outputs are on their way). Each output goes to its
// Topic, with its key, value and headers, to the partition that Kafka's
// default partitioner gives its key (store.OutputPartition): the same
// partition an exactly-once batch, or a Java producer, would write it to,
// so a keyed downstream sees one key's outputs in order.
//
// Emit (StartEmit's wait) returns once every output is acknowledged by
// all in-sync replicas, or with an error, which makes the engine replay
// the batch: outputs are at least once. Before the first output to a
// topic it checks the topic (one Metadata request, then the partition
// count is cached; a topic that later grows partitions keeps its old
// count, as exactly-once batches do): a missing topic is a permanent
// configuration error, returned at once, or created with CreateTopics.
// CheckTopics does the same check ahead, for engine.Config.CheckOutputTopics, so
// that Run meets a missing topic before it folds anything. A record the
// broker refuses for good (MESSAGE_TOO_LARGE, INVALID_RECORD, ...) is
// named in the engine.EmitError ahead of transient failures, and ends the run
// instead of a replay that would make it again.
//
// A Emitter is safe for concurrent use. Close it after the engine.
type Emitter struct {
	cfg EmitterConfig
	cl  *kgo.Client
	adm *kadm.Client
	log *slog.Logger

	mu         sync.Mutex
	closed     bool
	partitions map[string]int     // checked topics' partition counts
	limits     *kafkatopic.Limits // output topics' max.message.bytes and cleanup.policy
}

// ErrEmitterClosed: Emit on a Emitter after Close.
var ErrEmitterClosed = errors.New("kafkaio: emitter closed")

// NewEmitter returns an emitter; it connects on the first Emit.
func NewEmitter(cfg EmitterConfig) (*Emitter, error) {
	if len(cfg.SeedBrokers) == 0 {
		return nil, &store.ConfigError{Subject: "EmitterConfig.SeedBrokers", Problem: "is empty",
			Fix: `give the bootstrap brokers, "host:port"`}
	}
	if cfg.DeliveryTimeout <= 0 {
		cfg.DeliveryTimeout = DefaultDeliveryTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TopicPartitions < 0 || cfg.TopicReplicationFactor < 0 {
		return nil, &store.ConfigError{Subject: "EmitterConfig.TopicPartitions and TopicReplicationFactor",
			Problem: fmt.Sprintf("are %d and %d", cfg.TopicPartitions, cfg.TopicReplicationFactor),
			Fix:     "give a positive count, or 0 for the broker's default"}
	}
	em := &Emitter{cfg: cfg, log: cfg.Logger, partitions: map[string]int{}, limits: kafkatopic.NewLimits()}
	// The batch cap goes first: a ProducerBatchMaxBytes of ClientOpts
	// overrides it.
	opts := []kgo.Opt{kgo.ProducerBatchMaxBytesFn(em.limits.BatchCap), kgo.SeedBrokers(cfg.SeedBrokers...)}
	for _, o := range cfg.ClientOpts {
		if _, group := o.(kgo.GroupOpt); !group {
			opts = append(opts, o)
		}
	}
	opts = append(opts,
		kgo.ConsumeTopics(), kgo.ConsumePartitions(nil), // never a consumer
		kgo.RecordPartitioner(kgo.ManualPartitioner()), // store.OutputPartition, set per record
		kgo.RecordDeliveryTimeout(cfg.DeliveryTimeout),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, &store.ConfigError{Subject: "EmitterConfig.ClientOpts", Problem: "franz-go refuses them",
			Fix: "remove the conflicting option", Err: err}
	}
	em.cl, em.adm = cl, kadm.NewClient(cl)
	return em, nil
}

// Emit produces outs and returns once each is delivered; it is a
// engine.Config.Emit, and StartEmit's two halves in one call. An output without
// a topic fails the call before anything is sent (store.ErrInvalidOutput),
// and so does a topic that does not exist (without CreateTopics: a
// *store.ConfigError naming it) or cannot be described. Otherwise every
// output is sent, and the error, if any, is an *engine.EmitError.
func (em *Emitter) Emit(ctx context.Context, outs []engine.Output) error {
	return em.StartEmit(ctx, outs)()
}

// StartEmit starts producing outs and returns wait, which returns once
// each is delivered, with Emit's errors; it is a engine.Config.StartEmit. The
// topics are checked before it returns (a new topic's first output
// waits for one Metadata request); the records are then on their way.
// Call wait once.
func (em *Emitter) StartEmit(ctx context.Context, outs []engine.Output) (wait func() error) {
	if len(outs) == 0 {
		return func() error { return nil }
	}
	em.mu.Lock()
	closed := em.closed
	em.mu.Unlock()
	if closed {
		return func() error { return ErrEmitterClosed }
	}
	counts, err := em.topicPartitions(ctx, outs)
	if err != nil {
		return func() error { return err }
	}
	slab := make([]kgo.Record, len(outs)) // one allocation, not one an output
	last, n := "", 0
	d := &delivery{em: em, total: len(outs), slab: slab}
	d.wg.Add(len(outs))
	for i, o := range outs {
		if o.Topic != last {
			last, n = o.Topic, counts[o.Topic]
		}
		// Field by field: assigning a whole kgo.Record literal copies
		// every field through the write barrier, about twice the cost.
		r := &slab[i]
		r.Topic, r.Partition, r.Key, r.Value = o.Topic, store.OutputPartition(o.Key, n), o.Key, o.Value
		if len(o.Headers) > 0 {
			r.Headers = make([]kgo.RecordHeader, len(o.Headers))
			for j, h := range o.Headers {
				r.Headers[j] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
			}
		}
	}
	done := d.done // one closure for every record
	for i := range slab {
		if err := em.limits.Keyless(outs[i].Topic, outs[i].Key); err != nil {
			done(&slab[i], err)
			continue
		}
		em.cl.Produce(ctx, &slab[i], done)
	}
	return d.wait
}

// delivery is a StartEmit call's records on their way.
type delivery struct {
	em    *Emitter
	total int
	wg    sync.WaitGroup

	mu     sync.Mutex
	failed int
	first  *engine.EmitError
	// slab holds the call's records, in the order of its outputs; index
	// finds a record's place in it, once a refusal needs it.
	slab    []kgo.Record
	index   map[*kgo.Record]int
	refused []int
}

// done is each record's promise (franz-go calls it once per record).
func (d *delivery) done(r *kgo.Record, err error) {
	defer d.wg.Done()
	if err == nil {
		return
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		// Deleted since it was checked: check it again next time.
		d.em.forget(r.Topic)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failed++
	// A refusal no retry cures names the failure: the engine takes it
	// for the output's, not the cluster's.
	if d.first == nil || !kafkatopic.RefusedForGood(d.first.Err) && kafkatopic.RefusedForGood(err) {
		d.first = &engine.EmitError{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Err: produceError(r.Topic, err)}
	}
	if kafkatopic.RefusedForGood(err) {
		if d.index == nil {
			d.index = make(map[*kgo.Record]int, len(d.slab))
			for i := range d.slab {
				d.index[&d.slab[i]] = i
			}
		}
		d.refused = append(d.refused, d.index[r])
	}
}

// wait returns once every record is delivered or failed.
func (d *delivery) wait() error {
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.first == nil {
		return nil
	}
	d.first.Failed, d.first.Total = d.failed, d.total
	slices.Sort(d.refused)
	d.first.Refused = d.refused
	return d.first
}

// produceError is err, or a *store.ConfigError wrapping it when it is a
// permanent configuration problem.
func produceError(topic string, err error) error {
	err = kafkatopic.MarkRefused(err)
	if errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
		return &store.ConfigError{Subject: fmt.Sprintf("output topic %q", topic), Problem: "the emitter may not write to it",
			Fix: "grant the producer's principal Write and Describe on the topic (and IdempotentWrite on the cluster, for Kafka before 3.0)", Err: err}
	}
	return err
}

// topicPartitions returns the partition count of every topic of outs,
// checking (and with CreateTopics creating) each topic it has not seen.
func (em *Emitter) topicPartitions(ctx context.Context, outs []engine.Output) (map[string]int, error) {
	counts := map[string]int{}
	var unknown []string
	em.mu.Lock()
	last := "" // outputs mostly go to one topic: a lookup per run of it
	for i, o := range outs {
		if o.Topic == "" {
			em.mu.Unlock()
			return nil, &engine.EmitError{Failed: len(outs), Total: len(outs), Partition: -1, Key: o.Key,
				Err: fmt.Errorf("output %d has no topic: %w", i, store.ErrInvalidOutput)}
		}
		if o.Topic == last {
			continue
		}
		last = o.Topic
		if _, ok := counts[o.Topic]; ok {
			continue
		}
		n, ok := em.partitions[o.Topic]
		counts[o.Topic] = n
		if !ok {
			unknown = append(unknown, o.Topic)
		}
	}
	em.mu.Unlock()
	if len(unknown) == 0 {
		return counts, nil
	}
	cctx, cancel := context.WithTimeout(ctx, em.cfg.DeliveryTimeout)
	defer cancel()
	found, err := em.describe(cctx, unknown)
	if err != nil {
		return nil, em.failAll(outs, unknown[0], err)
	}
	for _, topic := range unknown {
		n, ok := found[topic]
		if !ok {
			if !em.cfg.CreateTopics {
				return nil, em.failAll(outs, topic, &store.ConfigError{
					Subject: fmt.Sprintf("output topic %q", topic), Problem: "does not exist",
					Fix: fmt.Sprintf("create it (kafka-topics.sh --bootstrap-server %s --create --topic %s --partitions N), "+
						"or set EmitterConfig.CreateTopics", em.cfg.SeedBrokers[0], topic),
					Err: kerr.UnknownTopicOrPartition})
			}
			if n, err = em.create(cctx, topic); err != nil {
				return nil, em.failAll(outs, topic, err)
			}
		}
		counts[topic] = n
		em.mu.Lock()
		em.partitions[topic] = n
		em.mu.Unlock()
	}
	return counts, nil
}

// CheckTopics checks that each topic exists (with CreateTopics: creates
// it) and caches its partition count, as the first output to it would; it
// is a engine.Config.CheckOutputTopics, so that a missing output or dead-letter
// topic ends Run at its start, before anything is folded. A missing topic
// is a *store.ConfigError naming it and the fix.
func (em *Emitter) CheckTopics(ctx context.Context, topics []string) error {
	em.mu.Lock()
	closed := em.closed
	em.mu.Unlock()
	if closed {
		return ErrEmitterClosed
	}
	outs := make([]engine.Output, len(topics))
	for i, t := range topics {
		outs[i].Topic = t
	}
	_, err := em.topicPartitions(ctx, outs)
	if ee, ok := err.(*engine.EmitError); ok {
		return ee.Err
	}
	return err
}

// failAll is an *engine.EmitError for a failure before anything was sent.
func (em *Emitter) failAll(outs []engine.Output, topic string, err error) *engine.EmitError {
	e := &engine.EmitError{Failed: len(outs), Total: len(outs), Topic: topic, Partition: -1, Err: err}
	if i := slices.IndexFunc(outs, func(o engine.Output) bool { return o.Topic == topic }); i >= 0 {
		e.Key = outs[i].Key
	}
	return e
}

// describe returns the partition counts of the topics that exist.
func (em *Emitter) describe(ctx context.Context, topics []string) (map[string]int, error) {
	details, err := em.adm.ListTopics(ctx, topics...)
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		// The answer names no topic: ask for each, to name the refused one.
		for _, topic := range topics {
			if _, terr := em.adm.ListTopics(ctx, topic); errors.Is(terr, kerr.TopicAuthorizationFailed) {
				return nil, &store.ConfigError{Subject: fmt.Sprintf("output topic %q", topic), Problem: "the emitter may not describe it",
					Fix: fmt.Sprintf("grant the producer's principal WRITE on the topic (kafka-acls.sh --operation Write --topic %s; WRITE implies DESCRIBE)", topic), Err: terr}
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("describing output topics %q: %w", topics, err)
	}
	found := map[string]int{}
	for _, topic := range topics {
		td, ok := details[topic]
		switch {
		case !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition):
		case errors.Is(td.Err, kerr.TopicAuthorizationFailed):
			return nil, &store.ConfigError{Subject: fmt.Sprintf("output topic %q", topic), Problem: "the emitter may not describe it",
				Fix: "grant the producer's principal Describe and Write on the topic", Err: td.Err}
		case td.Err != nil:
			return nil, fmt.Errorf("describing output topic %q: %w", topic, td.Err)
		case len(td.Partitions) == 0:
			return nil, fmt.Errorf("output topic %q lists no partitions", topic)
		default:
			found[topic] = len(td.Partitions)
		}
	}
	em.limits.Read(ctx, em.adm, slices.Collect(maps.Keys(found))...)
	return found, nil
}

// create creates topic (CreateTopics), waits until it is served, and
// returns its partition count.
func (em *Emitter) create(ctx context.Context, topic string) (int, error) {
	partitions, replicas := em.cfg.TopicPartitions, em.cfg.TopicReplicationFactor
	if partitions == 0 {
		partitions = -1
	}
	if replicas == 0 {
		replicas = -1
	}
	var configs map[string]*string
	for k, v := range em.cfg.TopicConfigs {
		if configs == nil {
			configs = map[string]*string{}
		}
		configs[k] = &v
	}
	created, err := kafkatopic.Create(ctx, em.cl, topic, partitions, replicas, configs)
	if errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
		return 0, &store.ConfigError{Subject: fmt.Sprintf("output topic %q", topic), Problem: "does not exist, and the emitter may not create it",
			Fix: "create it, or grant the producer's principal Create on the topic", Err: err}
	}
	if err != nil {
		return 0, err
	}
	// Create left the client's metadata of the topic fresh: this reads it.
	found, err := em.describe(ctx, []string{topic})
	if err != nil {
		return 0, err
	}
	n, ok := found[topic]
	if !ok {
		return 0, fmt.Errorf("output topic %q is not listed after its creation", topic)
	}
	msg := "created output topic"
	if !created {
		msg = "output topic was created meanwhile"
	}
	em.log.Info(msg, "topic", topic, "partitions", n)
	return n, nil
}

func (em *Emitter) forget(topic string) {
	em.mu.Lock()
	delete(em.partitions, topic)
	em.mu.Unlock()
}

// Close closes the producer. An Emit in flight fails (kgo.ErrClientClosed);
// later ones return ErrEmitterClosed. Close is idempotent and returns nil.
func (em *Emitter) Close() error {
	em.mu.Lock()
	closed := em.closed
	em.closed = true
	em.mu.Unlock()
	if !closed {
		em.cl.Close()
	}
	return nil
}
