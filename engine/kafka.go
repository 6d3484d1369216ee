package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/store"
)

// KafkaConfig configures the franz-go consumer of Run and NewKafkaSource.
type KafkaConfig struct {
	// SeedBrokers, Group and Topics are required.
	SeedBrokers []string
	Group       string
	Topics      []string
	// MaxPollRecords bounds one poll; default DefaultMaxPollRecords
	// (10000).
	MaxPollRecords int
	// ClientOpts are appended to the consumer's options (so they override
	// the engine's, e.g. kgo.FetchMaxWait, default DefaultFetchMaxWait):
	// TLS, SASL, a
	// balancer (default franz-go's cooperative-sticky; kgo.RangeBalancer()
	// for classic eager), or kgo.ServerSideBalancer... for the consumer
	// protocol (KIP-848).
	ClientOpts []kgo.Opt
}

// Defaults of KafkaConfig.
const (
	// DefaultMaxPollRecords is MaxPollRecords' default.
	DefaultMaxPollRecords = 10000
	// DefaultFetchMaxWait is the consumer's fetch wait (Java's default).
	DefaultFetchMaxWait = 500 * time.Millisecond
)

// The source's wait for a committed offset that a transaction holds
// (UNSTABLE_OFFSET_COMMIT): 5 ms doubling, ~75 ms in all, long enough for
// the markers of the transaction the takeover just ended.
const (
	committedOffsetFirstRetry = 5 * time.Millisecond
	committedOffsetLastRetry  = 40 * time.Millisecond
)

// kafkaSource is a franz-go group consumer as a Source. Offsets are never
// committed through it: the store commits them inside its transactions.
type kafkaSource struct {
	cfg   KafkaConfig
	cl    *kgo.Client
	adm   *kadm.Client
	group string
	buf   []Record // reused by every Poll: valid until the next
	// logEnd is each partition's high watermark from the last fetch
	// response that carried it (Poll and LogEnd run on one goroutine).
	logEnd map[store.TopicPartition]int64
}

// NewKafkaSource returns a factory for Engine.NewRunner.
func NewKafkaSource(cfg KafkaConfig) func(Handler) (Source, error) {
	return func(h Handler) (Source, error) {
		if len(cfg.SeedBrokers) == 0 || cfg.Group == "" || len(cfg.Topics) == 0 {
			return nil, errors.New("engine: SeedBrokers, Group and Topics are required")
		}
		if cfg.MaxPollRecords <= 0 {
			cfg.MaxPollRecords = DefaultMaxPollRecords
		}
		opts := []kgo.Opt{
			kgo.SeedBrokers(cfg.SeedBrokers...),
			kgo.ConsumerGroup(cfg.Group),
			kgo.ConsumeTopics(cfg.Topics...),
			// The store commits offsets, inside its transactions.
			kgo.DisableAutoCommit(),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			// Rebalances run between polls, never in the middle of
			// folding a poll's records.
			kgo.BlockRebalanceOnPoll(),
			// Java's fetch.max.wait.ms, not franz-go's 5 s: a fetch
			// parked on quiet partitions holds back the first fetch of
			// partitions just assigned, and so a takeover's replay, for
			// up to this long. (ClientOpts may set another.)
			kgo.FetchMaxWait(DefaultFetchMaxWait),
			kgo.OnPartitionsAssigned(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) {
				h.Assigned(ctx, tps(m))
			}),
			kgo.OnPartitionsRevoked(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) {
				h.Revoked(ctx, tps(m))
			}),
			kgo.OnPartitionsLost(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) {
				h.Lost(ctx, tps(m))
			}),
		}
		cl, err := kgo.NewClient(append(opts, cfg.ClientOpts...)...)
		if err != nil {
			return nil, fmt.Errorf("engine: consumer: %w", err)
		}
		return &kafkaSource{cfg: cfg, cl: cl, adm: kadm.NewClient(cl), group: cfg.Group, logEnd: map[store.TopicPartition]int64{}}, nil
	}
}

// tps flattens a callback's partitions, in order: the handler acquires and
// flushes them in the order given.
func tps(m map[string][]int32) []store.TopicPartition {
	var out []store.TopicPartition
	for t, ps := range m {
		for _, p := range ps {
			out = append(out, store.TopicPartition{Topic: t, Partition: p})
		}
	}
	slices.SortFunc(out, compareTP)
	return out
}

func (s *kafkaSource) Poll(ctx context.Context, wait time.Duration) ([]Record, error) {
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	fs := s.cl.PollRecords(pctx, s.cfg.MaxPollRecords)
	if fs.IsClientClosed() {
		return nil, kgo.ErrClientClosed
	}
	var err error
	fs.EachError(func(t string, p int32, e error) {
		if _, ok := errors.AsType[*kgo.ErrGroupSession](e); ok {
			// The member was kicked from the group (or could not join):
			// the client rejoins by itself, and the lost-partitions
			// callback has dropped the flows. News, not a failure.
			return
		}
		if !errors.Is(e, context.DeadlineExceeded) && !errors.Is(e, context.Canceled) && err == nil {
			err = fmt.Errorf("engine: fetching %s/%d: %w", t, p, e)
		}
	})
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if p.Err == nil && p.HighWatermark >= 0 {
			s.logEnd[store.TopicPartition{Topic: p.Topic, Partition: p.Partition}] = p.HighWatermark
		}
	})
	out := s.buf[:0]
	fs.EachRecord(func(r *kgo.Record) {
		out = append(out, Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp})
		if len(r.Headers) > 0 {
			hs := make([]store.Header, len(r.Headers))
			for i, h := range r.Headers {
				hs[i] = store.Header{Key: h.Key, Value: h.Value}
			}
			out[len(out)-1].Headers = hs
		}
	})
	s.buf = out
	return out, err
}

func (s *kafkaSource) PollDone() { s.cl.AllowRebalance() }

func (s *kafkaSource) Identity() store.GroupIdentity {
	member, gen := s.cl.GroupMetadata()
	return store.GroupIdentity{Group: s.group, MemberID: member, Generation: gen}
}

// CommittedOffset reads the group's committed offset; with none, the
// partition's start (the consumer's reset offset is the start too).
//
// It never waits long for a held offset. RequireStable: called after the
// takeover aborted the previous owner's transaction, the answer is stable
// at once, or after a few milliseconds while a committing transaction's
// markers land. An offset still held after that (a transaction of another
// transactional.id, or one the coordinator forgot) is answered with
// store.ErrOffsetUnstable, and the runner retries the acquisition later
// without holding up the other partitions, up to
// Config.UnstableOffsetTimeout.
func (s *kafkaSource) CommittedOffset(ctx context.Context, tp store.TopicPartition) (int64, error) {
	for backoff := committedOffsetFirstRetry; ; backoff *= 2 {
		o, ok, err := s.fetchCommitted(ctx, tp)
		if err != nil {
			return 0, err
		}
		if ok && errors.Is(o.Err, kerr.UnstableOffsetCommit) {
			if backoff > committedOffsetLastRetry {
				return 0, fmt.Errorf("engine: committed offset of %s in group %s: %w: %w", tp, s.group, store.ErrOffsetUnstable, o.Err)
			}
			select {
			case <-ctx.Done():
				return 0, fmt.Errorf("engine: committed offset of %s: %w", tp, context.Cause(ctx))
			case <-time.After(backoff):
			}
			continue
		}
		if ok && o.Err != nil {
			// Never read an error as "no offset": resuming from the start
			// would fold events the snapshots already hold a second time.
			return 0, fmt.Errorf("engine: committed offset of %s: %w", tp, o.Err)
		}
		if ok && o.At >= 0 {
			return o.At, nil
		}
		break
	}
	starts, err := s.adm.ListStartOffsets(ctx, tp.Topic)
	if err != nil {
		return 0, err
	}
	o, ok := starts.Lookup(tp.Topic, tp.Partition)
	if !ok || o.Err != nil {
		return 0, fmt.Errorf("engine: start offset of %s: %v", tp, o.Err)
	}
	return o.Offset, nil
}

// fetchCommitted fetches the group's committed offset of tp alone, with
// RequireStable. The partition is named in the request: asked for all of a
// group's offsets, a coordinator lists only partitions with a committed
// offset, so a first commit still pending in a transaction would read as
// "none" and the partition would resume from its start.
func (s *kafkaSource) fetchCommitted(ctx context.Context, tp store.TopicPartition) (kadm.OffsetResponse, bool, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group, req.RequireStable = s.group, true
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = tp.Topic, []int32{tp.Partition}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		return kadm.OffsetResponse{}, false, fmt.Errorf("engine: committed offset of %s: %w", tp, err)
	}
	found := func(p int32, offset int64, code int16) (kadm.OffsetResponse, bool, error) {
		return kadm.OffsetResponse{Offset: kadm.Offset{Topic: tp.Topic, Partition: p, At: offset}, Err: kerr.ErrorForCode(code)}, true, nil
	}
	groupErr := kerr.ErrorForCode(resp.ErrorCode)
	for _, g := range resp.Groups { // v8+
		if groupErr == nil {
			groupErr = kerr.ErrorForCode(g.ErrorCode)
		}
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				if t.Topic == tp.Topic && p.Partition == tp.Partition && groupErr == nil {
					return found(p.Partition, p.Offset, p.ErrorCode)
				}
			}
		}
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if t.Topic == tp.Topic && p.Partition == tp.Partition && groupErr == nil {
				return found(p.Partition, p.Offset, p.ErrorCode)
			}
		}
	}
	if groupErr != nil {
		return kadm.OffsetResponse{}, false, fmt.Errorf("engine: committed offset of %s in group %s: %w", tp, s.group, groupErr)
	}
	return kadm.OffsetResponse{}, false, nil
}

func (s *kafkaSource) Seek(tp store.TopicPartition, offset int64) {
	s.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{tp.Topic: {tp.Partition: {Epoch: -1, Offset: offset}}})
}

func (s *kafkaSource) Resume(tp store.TopicPartition) {
	s.cl.ResumeFetchPartitions(map[string][]int32{tp.Topic: {tp.Partition}})
}

func (s *kafkaSource) Pause(tp store.TopicPartition) {
	s.cl.PauseFetchPartitions(map[string][]int32{tp.Topic: {tp.Partition}})
}

func (s *kafkaSource) Now() time.Time { return time.Now() }

// LogEnd is tp's high watermark from the last fetch response that carried
// it. franz-go passes on only fetches with records or errors, so a
// partition with nothing fetched since its assignment has none yet.
func (s *kafkaSource) LogEnd(tp store.TopicPartition) (int64, bool) {
	o, ok := s.logEnd[tp]
	return o, ok
}

// Close leaves the group: the revoke callback flushes and tears down.
func (s *kafkaSource) Close(ctx context.Context) error {
	s.cl.AllowRebalance()
	s.cl.Close()
	return nil
}

// Run runs the engine against Kafka until ctx ends, then leaves the group
// cleanly (the revoke callback flushes and commits), and returns nil; or
// until a failure that retrying cannot fix, which it returns after
// leaving the group the same way (docs/operations.md, the failure model):
//
//   - a configuration that cannot work (a missing topic, a snapshot topic
//     that is not compacted, an option): an error matching
//     store.ErrMisconfigured, most of them a *store.ConfigError naming
//     the topic or option and the fix;
//   - a poison record under StopOnPoison: the *FoldError naming its topic,
//     partition, offset and key, after everything before it is committed;
//   - a state that does not decode (*RecoveredStateError), a snapshot
//     record that is not snapfence's (*store.CorruptRecordError), a
//     snapshot over the size limit (*store.ValueTooLargeError);
//   - a committed offset held past UnstableOffsetTimeout
//     (*store.UnstableOffsetError).
//
// Everything else is transient or expected and is retried: a failed poll
// after a backoff, a partition's failure by restarting it from its
// committed state (see Config). Those are logged at a bounded rate and
// counted in Metrics; none is returned.
func (e *Engine[S]) Run(ctx context.Context, cfg KafkaConfig) (err error) {
	defer e.trackRun()(&err)
	r, err := e.NewRunner(NewKafkaSource(cfg))
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// Backoff of Run after a poll that failed (a broker down, a network
// partition): pollFirstBackoff doubling up to pollMaxBackoff.
const (
	pollFirstBackoff = 100 * time.Millisecond
	pollMaxBackoff   = 5 * time.Second
)

// Run steps the runner until ctx ends, then closes it and returns nil; or
// until a failure ends the runner, which it returns after closing it. A
// step that fails otherwise (a poll) is retried after a backoff. This is
// Engine.Run's loop, over any source (a simsource member, in tests).
func (r *Runner[S]) Run(ctx context.Context) error {
	backoff := pollFirstBackoff
	for ctx.Err() == nil {
		err := r.Step(ctx)
		if fatal := r.fatalErr(); fatal != nil {
			_ = r.Close(context.WithoutCancel(ctx))
			return fatal
		}
		if err == nil || ctx.Err() != nil {
			backoff = pollFirstBackoff
			continue
		}
		r.mu.Lock()
		ok, n := r.logs.allow("poll", r.src.Now())
		r.mu.Unlock()
		if ok {
			r.e.log.Warn("poll failed; retrying", "backoff", backoff, "not_logged_since_last", n, "err", err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, pollMaxBackoff)
	}
	return r.Close(context.WithoutCancel(ctx))
}
