// Package kafkaio is the engine's input and output on Kafka, over
// franz-go: a Config is the input an engine folds (Engine.Run, Join), a
// member of a consumer group; an Emitter delivers the outputs of an
// at-least-once engine (engine.Config.Emit, StartEmit). The engine itself
// imports no Kafka client: this package plugs one in.
//
//	err := e.Run(ctx, kafkaio.Config{SeedBrokers: brokers, Topics: []string{"orders"}})
package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/internal/chanmutex"
	"github.com/snapfence/snapfence/internal/input"
	"github.com/snapfence/snapfence/store"
)

// Config is an engine's input on Kafka: its consumer group, topics and
// franz-go client settings. Zero values take the defaults given; Open
// checks the whole configuration before it connects, and a value that
// cannot work is a *store.ConfigError naming the field and the fix.
//
// The group settings (SessionTimeout, HeartbeatInterval, RebalanceTimeout)
// are those of the classic group protocol (the default, and the balancers
// of ClientOpts). Under the consumer protocol (KIP-848,
// kgo.ServerSideBalancer) the broker sets the session timeout and
// heartbeat interval: group.consumer.session.timeout.ms (45 s by default)
// and group.consumer.heartbeat.interval.ms (5 s), or the group's own
// consumer.session.timeout.ms and consumer.heartbeat.interval.ms
// (kafka-configs.sh --entity-type groups); SessionTimeout and
// HeartbeatInterval are not sent.
type Config struct {
	// SeedBrokers, Group and Topics are required, but Engine.Run takes
	// an empty Group as the store's application (kafka.Config.Application).
	SeedBrokers []string
	Group       string
	// Topics are the input topics. Each must exist when the source starts
	// (or CreateTopics is set): a missing one is a *store.ConfigError
	// naming it.
	Topics []string
	// MaxPollRecords bounds one poll; default DefaultMaxPollRecords
	// (10000).
	MaxPollRecords int

	// SessionTimeout is how long the group coordinator waits for a
	// heartbeat before it declares this member dead and moves its
	// partitions (session.timeout.ms); default DefaultSessionTimeout
	// (10 s). It bounds the failover after a crash: the survivors take
	// over a dead member's partitions about SessionTimeout after it died.
	// It must lie within the broker's group.min.session.timeout.ms and
	// group.max.session.timeout.ms (6 s and 30 min by default); outside,
	// Poll returns a *store.ConfigError.
	SessionTimeout time.Duration
	// HeartbeatInterval is the time between heartbeats
	// (heartbeat.interval.ms); default DefaultHeartbeatInterval (1 s), or
	// a third of SessionTimeout if that is shorter. It must be below
	// SessionTimeout. Under the classic protocol the other members learn of
	// a rebalance from a heartbeat's answer, so it adds up to one interval
	// to every takeover.
	HeartbeatInterval time.Duration
	// RebalanceTimeout is how long the group waits for its members to
	// rejoin once a rebalance started (rebalance.timeout.ms, also sent
	// under the consumer protocol); default DefaultRebalanceTimeout
	// (1 min). A member rejoins after the poll it is folding and the
	// revoke-time flush of the partitions it gives up; one that takes
	// longer is dropped from the group (safe: its writes are fenced, but
	// its partitions recover again). A long timeout costs nothing while
	// members are healthy.
	RebalanceTimeout time.Duration
	// InstanceID is the member's static identity (group.instance.id,
	// KIP-345; static membership): a member that restarts with the same
	// InstanceID within SessionTimeout gets its partitions back without
	// a rebalance, so a rolling restart recovers each partition from its
	// cache (a delta) instead of moving it. Default: the identity the
	// engine keeps in its cache directory (engine.Config.Dir), made once
	// for that directory, so an instance that keeps its Dir is static
	// without configuring anything; with no Dir (a cache in memory,
	// which a restart loses anyway), or with DynamicMembership, dynamic
	// membership. Set it only to choose the name (a StatefulSet pod's,
	// say): it must be unique in the group and stable across restarts of
	// one instance; a second running process with the same id fences the
	// first, whose Poll then returns a *store.ConfigError.
	//
	// A static member's clean stop (Close) keeps its partitions
	// assigned to it until it rejoins or SessionTimeout passes: a deploy
	// that restarts it within SessionTimeout moves nothing, but a
	// partition stands still while the instance is down. Raise
	// SessionTimeout to cover a restart that takes longer (30 s to a few
	// minutes); an instance removed for good (a scale-in) leaves its
	// partitions unserved for SessionTimeout, unless it runs with
	// LeaveOnClose (docs/operations.md, "Rolling restarts").
	InstanceID string
	// DynamicMembership joins as a dynamic member even when the engine's
	// cache directory gives this instance a stable identity: a clean stop
	// leaves the group, and its partitions move at once (to members that
	// hold them warm, under the default balancer), but a restarted
	// instance is a new member: it gets back the partitions its cache
	// holds only as far as the balance moves partitions to it (the
	// default balancer, classic protocol), or by chance (the consumer
	// protocol), and recovers the others in full. Default false. It
	// cannot be set with InstanceID.
	DynamicMembership bool
	// LeaveOnClose makes a static member's Close leave the group for good,
	// as a dynamic member's does: its partitions move at once instead of
	// waiting SessionTimeout for a restart. Set it on an instance that
	// will not come back (a scale-in, a one-off run); a restart with it
	// recovers its partitions from wherever the balance puts them.
	// Default false: a static member's partitions wait for its restart.
	LeaveOnClose bool
	// Endpoint is the address this instance serves queries at
	// ("http://10.0.0.5:8080"), advertised to the rest of the group so
	// that any instance can say which one serves a key
	// (engine.GroupPartition.Endpoint, engine.Engine.Locate). It travels
	// as the group member's client.id (EndpointClientID), the one field
	// of a member every group protocol describes; a kgo.ClientID in
	// ClientOpts overrides it. Default "": nothing advertised.
	Endpoint string

	// CreateTopics creates missing input topics, with CreatePartitions
	// partitions and CreateReplicationFactor replicas, instead of failing
	// with a *store.ConfigError. Default false: an input topic is usually
	// another application's, and a wrong name should fail, not create an
	// empty topic.
	CreateTopics bool
	// CreatePartitions is the partition count of an input topic that
	// CreateTopics creates; default -1, the broker's num.partitions (1
	// unless configured). Choose it with care: the partition count of an
	// input topic is the engine's parallelism, and changing it later moves
	// keys between partitions, away from their snapshots.
	CreatePartitions int32
	// CreateReplicationFactor is the replication factor of an input topic
	// that CreateTopics creates; default -1, the broker's
	// default.replication.factor.
	CreateReplicationFactor int16

	// ClientOpts are appended to the consumer's options (so they override
	// the engine's, e.g. kgo.FetchMaxWait, default DefaultFetchMaxWait,
	// and the fields above): TLS, SASL, a
	// balancer (default the engine's warm balancer, protocol
	// WarmBalancerName: cooperative and sticky as franz-go's
	// cooperative-sticky, and a partition that moves goes to a member
	// whose cache holds it, a standby replica or a returning member's
	// cache, and moves away from a live owner only once the member taking
	// it has warmed it up (engine.StandbyStatus.WarmUp; the owner serves
	// it meanwhile); a group with a member that does not know it falls back to
	// cooperative-sticky; kgo.RangeBalancer() for classic eager), or
	// kgo.ServerSideBalancer() for the consumer protocol (KIP-848, where
	// the broker assigns and no client balancer runs). The input-topic
	// check at start uses them too.
	// The consumer is two franz-go clients, a group member and a
	// group-less client that fetches the records: both take ClientOpts,
	// but the group options (kgo.GroupOpt) go to the member only, and a
	// subscription (kgo.ConsumeTopics, kgo.ConsumePartitions) to neither.
	ClientOpts []kgo.Opt
}

// Defaults of Config.
const (
	// DefaultMaxPollRecords is MaxPollRecords' default.
	DefaultMaxPollRecords = 10000
	// DefaultFetchMaxWait is the consumer's fetch wait (Java's default).
	DefaultFetchMaxWait = 500 * time.Millisecond
	// DefaultSessionTimeout is SessionTimeout's default: 10 s, Kafka's
	// default before 3.0. Kafka 3.0 raised session.timeout.ms to 45 s
	// (KIP-735) to ride out long pauses of Java clients; franz-go's
	// heartbeats run on their own goroutine, so a long fold does not
	// miss them, and a member dropped by mistake is safe here (its stale
	// writes are fenced). What a long timeout costs a stateful consumer
	// is the failover after a crash: its partitions stand still for the
	// whole timeout. 10 s is within every broker's default range (6 s to
	// 30 min).
	DefaultSessionTimeout = 10 * time.Second
	// DefaultHeartbeatInterval is HeartbeatInterval's default: 1 s, a
	// tenth of the default session (Kafka asks for at most a third), so
	// that a rebalance reaches the other members within a second.
	DefaultHeartbeatInterval = time.Second
	// DefaultRebalanceTimeout is RebalanceTimeout's default (franz-go's).
	DefaultRebalanceTimeout = time.Minute
)

// The bounds franz-go puts on the group timeouts.
const (
	minGroupTimeout = 100 * time.Millisecond
	maxGroupTimeout = math.MaxInt32 * time.Millisecond
)

// topicCheckTimeout bounds the input-topic check at start while the
// brokers do not answer.
const topicCheckTimeout = 30 * time.Second

// resolve returns cfg with its defaults applied, or a *store.ConfigError
// for the first field that cannot work. It is the one place Config
// is checked.
func (cfg Config) resolve() (Config, error) {
	if err := cfg.checkRequired(); err != nil {
		return Config{}, err
	}
	if cfg.MaxPollRecords < 0 {
		return Config{}, badConfigField("MaxPollRecords", fmt.Sprintf("%d is negative", cfg.MaxPollRecords), "leave it 0 for the default (10000) or set a positive bound")
	}
	if cfg.MaxPollRecords == 0 {
		cfg.MaxPollRecords = DefaultMaxPollRecords
	}
	if err := cfg.resolveGroupTimeouts(); err != nil {
		return Config{}, err
	}
	if cfg.InstanceID != "" && cfg.DynamicMembership {
		return Config{}, badConfigField("DynamicMembership", fmt.Sprintf("set with InstanceID %q", cfg.InstanceID), "set InstanceID for static membership or DynamicMembership for dynamic, not both")
	}
	if cfg.InstanceID != "" {
		if p := store.NameProblem(cfg.InstanceID); p != "" {
			return Config{}, badConfigField("InstanceID", fmt.Sprintf("%q: %s", cfg.InstanceID, p), "use letters, digits, '.', '_' and '-' (a pod name, say), or leave it empty for dynamic membership")
		}
	}
	if err := cfg.resolveTopicCreation(); err != nil {
		return Config{}, err
	}
	if strings.ContainsAny(cfg.Endpoint, " \t\r\n") || len(cfg.Endpoint) > maxEndpointLen {
		return Config{}, badConfigField("Endpoint", fmt.Sprintf("%q has white space or is over %d bytes", cfg.Endpoint, maxEndpointLen), `give a URL such as "http://10.0.0.5:8080"`)
	}
	return cfg, nil
}

// badConfigField is the *store.ConfigError for a Config field.
func badConfigField(field, problem, fix string) error {
	return &store.ConfigError{Subject: "kafkaio.Config." + field, Problem: problem, Fix: fix}
}

// checkRequired checks the fields that have no default: the brokers, the
// group and the input topics, whose names must be Kafka's.
func (cfg Config) checkRequired() error {
	switch {
	case len(cfg.SeedBrokers) == 0:
		return badConfigField("SeedBrokers", "empty", `name at least one broker, "host:port"`)
	case cfg.Group == "":
		return badConfigField("Group", "empty", "name the consumer group (it owns the committed offsets)")
	case len(cfg.Topics) == 0:
		return badConfigField("Topics", "empty", "name at least one input topic")
	}
	for _, t := range cfg.Topics {
		if p := store.NameProblem(t); p != "" {
			return badConfigField("Topics", fmt.Sprintf("topic %q: %s", t, p), "use the input topic's name as Kafka spells it")
		}
	}
	return nil
}

// resolveGroupTimeouts applies the defaults of the group timeouts and
// checks them against franz-go's bounds. The heartbeat's default and
// bound depend on the session timeout, so that one is resolved first.
func (cfg *Config) resolveGroupTimeouts() error {
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.SessionTimeout < minGroupTimeout || cfg.SessionTimeout > maxGroupTimeout {
		return badConfigField("SessionTimeout", fmt.Sprintf("%v is outside %v..%v", cfg.SessionTimeout, minGroupTimeout, maxGroupTimeout),
			"leave it 0 for the default (10s) or set a value within the broker's group.min.session.timeout.ms and group.max.session.timeout.ms")
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = min(DefaultHeartbeatInterval, cfg.SessionTimeout/3)
	}
	if cfg.HeartbeatInterval < 0 || cfg.HeartbeatInterval >= cfg.SessionTimeout {
		return badConfigField("HeartbeatInterval", fmt.Sprintf("%v is not between 0 and the session timeout %v", cfg.HeartbeatInterval, cfg.SessionTimeout),
			"leave it 0 for the default (1s, or a third of SessionTimeout if shorter) or set at most a third of SessionTimeout")
	}
	if cfg.RebalanceTimeout == 0 {
		cfg.RebalanceTimeout = DefaultRebalanceTimeout
	}
	if cfg.RebalanceTimeout < minGroupTimeout || cfg.RebalanceTimeout > maxGroupTimeout {
		return badConfigField("RebalanceTimeout", fmt.Sprintf("%v is outside %v..%v", cfg.RebalanceTimeout, minGroupTimeout, maxGroupTimeout),
			"leave it 0 for the default (1m) or set how long a member may take to finish its poll and revoke-time flush")
	}
	return nil
}

// resolveTopicCreation applies the defaults of the settings CreateTopics
// creates input topics with: 0 and -1 both mean the broker's.
func (cfg *Config) resolveTopicCreation() error {
	switch {
	case cfg.CreatePartitions == 0:
		cfg.CreatePartitions = -1
	case cfg.CreatePartitions < -1:
		return badConfigField("CreatePartitions", fmt.Sprintf("%d is negative", cfg.CreatePartitions), "set a partition count, or 0 or -1 for the broker's num.partitions")
	}
	switch {
	case cfg.CreateReplicationFactor == 0:
		cfg.CreateReplicationFactor = -1
	case cfg.CreateReplicationFactor < -1:
		return badConfigField("CreateReplicationFactor", fmt.Sprintf("%d is negative", cfg.CreateReplicationFactor), "set a replication factor, or 0 or -1 for the broker's default.replication.factor")
	}
	return nil
}

// The source's wait for a committed offset that a transaction holds
// (UNSTABLE_OFFSET_COMMIT): 5 ms doubling, ~75 ms in all, long enough for
// the markers of the transaction the takeover just ended.
const (
	committedOffsetFirstRetry = 5 * time.Millisecond
	committedOffsetLastRetry  = 40 * time.Millisecond
)

// kafkaSource is a Source of two franz-go clients. Offsets are never
// committed through it: the store commits them inside its transactions.
//
// The group client (member) only keeps the membership: it joins, heartbeats,
// runs the rebalance callbacks and gives the identity the store's
// transactional offset commits carry; its input topics are paused before
// it could fetch anything. The records come from a direct, group-less
// client (cl), read_committed, to which a partition is added at the
// offset the engine resolved for it (Seek) and from which it is removed
// once the engine has given it up. franz-go's group consumer fetches the
// committed offsets of a whole assignment in one request with
// RequireStable, and retries it without bound while one of them is held
// by an open transaction, fetching none meanwhile; the engine resolves
// each partition's offset alone (CommittedOffset), so one held partition
// waits alone and the others of its assignment are folded. The member's
// own fetch of those offsets still runs, paused topics or not, and harms
// nothing: its heartbeats and rejoins run beside it, and a new session
// cancels it.
type kafkaSource struct {
	cfg Config
	// instanceFromCache: cfg.InstanceID is the engine's cache's identity,
	// not the user's.
	instanceFromCache bool
	member            *kgo.Client
	cl                *kgo.Client
	adm               *kadm.Client
	group             string
	buf               []input.Record // reused by every Poll: valid until the next
	// logEnd is each partition's high watermark from the last fetch
	// response that carried it, or from a ListOffsets (Poll and LogEnd
	// run on one goroutine).
	logEnd map[store.TopicPartition]int64
	// unknownEnd are the partitions LogEnd was asked of and had no high
	// watermark for; the next Poll lists their end offsets, at most once
	// per logEndRefresh (lastListed).
	unknownEnd map[store.TopicPartition]bool
	lastListed time.Time

	// turn is held by Poll from its start until PollDone, and by a
	// rebalance callback while it runs: callbacks run between polls,
	// never while a poll's records are folded (the member is not polled,
	// so franz-go's BlockRebalanceOnPoll cannot do it). A channel of one
	// slot, as the runner's lock, so that a wait for it counts as blocked
	// in a testing/synctest bubble.
	turn chanmutex.Mutex
	// polling: Poll holds the turn (Poll and PollDone run on the
	// runner's goroutine).
	polling bool

	mu sync.Mutex
	// cancelPoll ends the poll in flight, if any, so that a callback
	// waiting for the turn gets it within moments, not after the poll's
	// wait.
	cancelPoll context.CancelFunc
	// rebalancing counts the callbacks waiting for the turn or running:
	// a poll that starts meanwhile returns at once.
	rebalancing int
	// rebalanced is closed when rebalancing drops back to 0 (nil while it
	// is 0): a poll waits on it before it takes the turn, so that a
	// callback on its way to the turn goes first. Without it a runner
	// that steps in a loop could take the turn again and again before
	// the callback's goroutine is scheduled, each poll returning at once.
	rebalanced chan struct{}
	// consumed are the partitions added to cl.
	consumed map[store.TopicPartition]bool
	// seeks are the positions a rebalance callback's handler set, added
	// to cl together once it returns (nil outside a callback): added one
	// at a time, the first partition's fetch would be in flight, parked
	// for up to the fetch wait, before the next one's could start.
	seeks map[store.TopicPartition]int64
}

// logEndRefresh is the least time between two ListOffsets requests for
// the high watermarks no fetch response carried.
const logEndRefresh = 10 * time.Second

// listUnknownEnds lists the end offsets of the partitions LogEnd had
// none for. franz-go passes on only the fetch responses with records or
// errors, so a partition at its end since its assignment would
// otherwise show no log end and no lag for as long as it is idle. The
// request is bounded (a second) and its failure leaves the ends unknown:
// a status, not a reason to fail the poll.
func (s *kafkaSource) listUnknownEnds(ctx context.Context) {
	if len(s.unknownEnd) == 0 || time.Since(s.lastListed) < logEndRefresh {
		return
	}
	s.lastListed = time.Now()
	topics := map[string]bool{}
	for tp := range s.unknownEnd {
		topics[tp.Topic] = true
	}
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	ends, err := s.adm.ListEndOffsets(lctx, slices.Sorted(maps.Keys(topics))...)
	if err != nil {
		return
	}
	for tp := range s.unknownEnd {
		if o, ok := ends.Lookup(tp.Topic, tp.Partition); ok && o.Err == nil {
			if _, fetched := s.logEnd[tp]; !fetched {
				s.logEnd[tp] = o.Offset
			}
			delete(s.unknownEnd, tp)
		}
	}
}

// Open implements engine.Input: the engine calls it as a member starts.
// It checks cfg (a *store.ConfigError names a field that cannot work),
// takes the engine's application as the group if cfg has none, then checks
// that every input topic exists, creating the missing ones if
// cfg.CreateTopics is set: a missing topic is a *store.ConfigError naming
// it, returned as soon as a broker answers (the check waits up to 30 s for
// one). Only then does the consumer join the group.
func (cfg Config) Open(o input.Opening) (input.Source, error) {
	if cfg.Group == "" {
		cfg.Group = o.Application
	}
	cfg, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	var instanceFromCache bool
	if cfg.InstanceID == "" && !cfg.DynamicMembership && o.Instance != "" {
		cfg.InstanceID, instanceFromCache = o.Instance, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), topicCheckTimeout)
	defer cancel()
	if err := checkInputTopics(ctx, cfg); err != nil {
		return nil, err
	}
	s := &kafkaSource{cfg: cfg, instanceFromCache: instanceFromCache, group: cfg.Group, logEnd: map[store.TopicPartition]int64{},
		unknownEnd: map[store.TopicPartition]bool{}, turn: make(chanmutex.Mutex, 1), consumed: map[store.TopicPartition]bool{}}
	cl, err := kgo.NewClient(directClientOpts(cfg)...)
	if err != nil {
		return nil, fmt.Errorf("kafkaio: consumer: %w", err)
	}
	s.cl, s.adm = cl, kadm.NewClient(cl)
	member, err := kgo.NewClient(s.memberClientOpts(o)...)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafkaio: consumer: %w", err)
	}
	member.PauseFetchTopics(cfg.Topics...)
	s.member = member
	return s, nil
}

var _ engine.Input = Config{}

// directClientOpts are the options of the client that fetches the
// records. It takes the user's options but their group options (franz-go
// refuses them without a group) and their subscription (it consumes only
// what the engine adds).
func directClientOpts(cfg Config) []kgo.Opt {
	direct := []kgo.Opt{
		kgo.SeedBrokers(cfg.SeedBrokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Java's fetch.max.wait.ms, not franz-go's 5 s: a fetch
		// parked on quiet partitions holds back the first fetch of
		// partitions just added, and so a takeover's replay, for up
		// to this long. (ClientOpts may set another.)
		kgo.FetchMaxWait(DefaultFetchMaxWait),
	}
	for _, o := range cfg.ClientOpts {
		if _, group := o.(kgo.GroupOpt); !group {
			direct = append(direct, o)
		}
	}
	return append(direct, kgo.ConsumeTopics(), kgo.ConsumePartitions(nil))
}

// memberClientOpts are the options of the group member, whose rebalance
// callbacks hand the partitions to h between two polls; the user's
// options come last, so they override the engine's.
func (s *kafkaSource) memberClientOpts(o input.Opening) []kgo.Opt {
	cfg, h := s.cfg, o.Handler
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.SeedBrokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.HeartbeatInterval(cfg.HeartbeatInterval),
		kgo.RebalanceTimeout(cfg.RebalanceTimeout),
		// The store commits offsets, inside its transactions.
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(func(ctx context.Context, member *kgo.Client, m map[string][]int32) {
			// Before the member's own offset fetch starts, which
			// would then fetch records: the topics stay paused for
			// good (franz-go keeps a pause across assignments).
			member.PauseFetchTopics(cfg.Topics...)
			s.rebalance(func() { h.Assigned(ctx, tps(m)) }, nil)
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) {
			s.rebalance(func() { h.Revoked(ctx, tps(m)) }, m)
		}),
		kgo.OnPartitionsLost(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) {
			s.rebalance(func() { h.Lost(ctx, tps(m)) }, m)
		}),
	}
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	if cfg.Endpoint != "" {
		opts = append(opts, kgo.ClientID(EndpointClientID(cfg.Endpoint)))
	}
	if !choosesBalancing(cfg.ClientOpts) {
		wb := &warmBalancer{warmUp: o.WarmUp, ready: o.WarmedUp}
		if o.Warm != nil {
			wb.warm = func() []store.TopicPartition { return o.Warm(cfg.Group) }
		}
		opts = append(opts, kgo.Balancers(wb, kgo.CooperativeStickyBalancer()))
	}
	return append(opts, cfg.ClientOpts...)
}

// rebalance runs a rebalance callback's handler call between two polls:
// it ends the poll in flight, waits for the turn, and runs it. released
// are the partitions the callback gives up: once the handler is done with
// them they leave the direct client, dropping whatever it fetched of them
// (a partition assigned again starts over at the offset the engine
// resolves).
func (s *kafkaSource) rebalance(handle func(), released map[string][]int32) {
	s.mu.Lock()
	s.rebalancing++
	if s.rebalanced == nil {
		s.rebalanced = make(chan struct{})
	}
	if s.cancelPoll != nil {
		s.cancelPoll()
	}
	s.mu.Unlock()
	s.turn.Lock()
	defer func() {
		s.mu.Lock()
		s.rebalancing--
		if s.rebalancing == 0 {
			close(s.rebalanced)
			s.rebalanced = nil
		}
		s.mu.Unlock()
		s.turn.Unlock()
	}()
	s.mu.Lock()
	s.seeks = map[store.TopicPartition]int64{}
	s.mu.Unlock()
	handle()
	s.mu.Lock()
	seeks := s.seeks
	s.seeks = nil
	s.mu.Unlock()
	s.position(seeks)
	if len(released) == 0 {
		return
	}
	s.mu.Lock()
	drop := map[string][]int32{}
	for _, tp := range tps(released) {
		if s.consumed[tp] {
			drop[tp.Topic] = append(drop[tp.Topic], tp.Partition)
			delete(s.consumed, tp)
		}
	}
	s.mu.Unlock()
	s.cl.RemoveConsumePartitions(drop)
	s.cl.ResumeFetchPartitions(released) // a later assignment starts unpaused
}

// checkInputTopics makes sure every input topic exists, creating the
// missing ones if cfg.CreateTopics is set, with a client of its own (the
// consumer does not join the group with a topic missing). It retries
// while no broker answers, until ctx ends.
func checkInputTopics(ctx context.Context, cfg Config) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.SeedBrokers...)}, cfg.ClientOpts...)...)
	if err != nil {
		return fmt.Errorf("kafkaio: input topic check: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	created := false
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		missing, err := missingTopics(ctx, adm, cfg.Topics, "input")
		if err == nil && len(missing) == 0 {
			return nil
		}
		var cerr *store.ConfigError
		if errors.As(err, &cerr) {
			return err
		}
		if err == nil && !cfg.CreateTopics {
			return &store.ConfigError{
				Subject: fmt.Sprintf("topic %q", missing[0]),
				Problem: fmt.Sprintf("the input topic does not exist (kafkaio.Config.Topics %q, brokers %v)", cfg.Topics, cfg.SeedBrokers),
				Fix: fmt.Sprintf("create it (kafka-topics.sh --create --topic %s --partitions N), correct kafkaio.Config.Topics, "+
					"or set kafkaio.Config.CreateTopics", missing[0]),
			}
		}
		if err == nil && !created {
			if err := createInputTopics(ctx, adm, cfg, missing); err != nil {
				return err
			}
			created = true // now wait until the metadata lists them
			continue
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("created topics %q not served yet", missing)
			}
			return fmt.Errorf("kafkaio: input topic check %q: no answer in %v: %w", cfg.Topics, topicCheckTimeout, err)
		case <-time.After(backoff):
		}
	}
}

// missingTopics returns the topics that the cluster's metadata does not
// list, or does not yet list with a leader for every partition after a
// creation. A topic this client may not describe is a *store.ConfigError.
// CheckTopics implements TopicChecker: the output and dead-letter topics
// the runner checks at its start (engine.Config.CheckOutputTopics' default).
func (s *kafkaSource) CheckTopics(ctx context.Context, topics []string) error {
	missing, err := missingTopics(ctx, s.adm, topics, "output")
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return &store.ConfigError{Subject: fmt.Sprintf("output topic %q", missing[0]),
			Problem: fmt.Sprintf("does not exist (engine.Config.OutputTopics and DeadLetterTopic: %q)", topics),
			Fix: fmt.Sprintf("create it (kafka-topics.sh --create --topic %s), or have the emitter create it at start: "+
				"kafkaio.EmitterConfig.CreateTopics with engine.Config.CheckOutputTopics set to the emitter's CheckTopics", missing[0])}
	}
	return nil
}

// missingTopics lists those of topics that do not exist or have no
// leader yet; kind says what they are, for the errors ("input",
// "output").
func missingTopics(ctx context.Context, adm *kadm.Client, topics []string, kind string) ([]string, error) {
	tds, err := adm.ListTopics(ctx, topics...)
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		// Permanent: the answer, not a missing one.
		return nil, &store.ConfigError{Subject: fmt.Sprintf("topics %q", topics), Problem: fmt.Sprintf("the consumer may not describe the %s topics", kind),
			Fix: "grant the principal DESCRIBE on each (kafka-acls.sh --operation Describe --topic T; READ and WRITE imply it)", Err: err}
	}
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, t := range topics {
		td, ok := tds[t]
		switch {
		case !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition):
			missing = append(missing, t)
		case errors.Is(td.Err, kerr.TopicAuthorizationFailed):
			return nil, &store.ConfigError{Subject: fmt.Sprintf("topic %q", t), Problem: fmt.Sprintf("the consumer may not describe the %s topic", kind),
				Fix: "grant the principal DESCRIBE on the topic (kafka-acls.sh --operation Describe --topic T; READ and WRITE imply it)", Err: td.Err}
		case td.Err != nil:
			return nil, fmt.Errorf("topic %q: %w", t, td.Err)
		case len(td.Partitions) == 0:
			missing = append(missing, t)
		default:
			for _, p := range td.Partitions {
				if p.Err != nil || p.Leader < 0 {
					missing = append(missing, t)
					break
				}
			}
		}
	}
	return missing, nil
}

// createInputTopics creates the missing input topics. A request the
// broker refuses for good (bad partition count or replication, a policy,
// no ACL) is a *store.ConfigError.
func createInputTopics(ctx context.Context, adm *kadm.Client, cfg Config, topics []string) error {
	resps, err := adm.CreateTopics(ctx, cfg.CreatePartitions, cfg.CreateReplicationFactor, nil, topics...)
	if err != nil {
		return fmt.Errorf("kafkaio: creating input topics %q: %w", topics, err)
	}
	for _, t := range topics {
		r, ok := resps[t]
		if !ok || r.Err == nil || errors.Is(r.Err, kerr.TopicAlreadyExists) {
			continue
		}
		subject := fmt.Sprintf("topic %q", t)
		switch {
		case errors.Is(r.Err, kerr.InvalidPartitions):
			return &store.ConfigError{Subject: subject, Problem: fmt.Sprintf("the broker refused to create it with %d partitions", cfg.CreatePartitions),
				Fix: "set kafkaio.Config.CreatePartitions to a positive count (or -1 for the broker's num.partitions)", Err: r.Err}
		case errors.Is(r.Err, kerr.InvalidReplicationFactor), errors.Is(r.Err, kerr.InvalidReplicaAssignment):
			return &store.ConfigError{Subject: subject, Problem: fmt.Sprintf("the broker refused to create it with replication factor %d", cfg.CreateReplicationFactor),
				Fix: "set kafkaio.Config.CreateReplicationFactor to at most the number of brokers (or -1 for default.replication.factor)", Err: r.Err}
		case errors.Is(r.Err, kerr.TopicAuthorizationFailed), errors.Is(r.Err, kerr.ClusterAuthorizationFailed),
			errors.Is(r.Err, kerr.PolicyViolation), errors.Is(r.Err, kerr.InvalidTopicException), errors.Is(r.Err, kerr.InvalidConfig):
			return &store.ConfigError{Subject: subject, Problem: "the broker refused to create the missing input topic",
				Fix: "create it yourself (kafka-topics.sh --create), or grant the principal CREATE on it", Err: r.Err}
		default:
			return fmt.Errorf("kafkaio: creating input topic %q: %w", t, r.Err)
		}
	}
	return nil
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
	slices.SortFunc(out, store.TopicPartition.Compare)
	return out
}

func (s *kafkaSource) Poll(ctx context.Context, wait func() time.Duration) ([]input.Record, error) {
	s.mu.Lock()
	rebalanced := s.rebalanced
	s.mu.Unlock()
	if rebalanced != nil {
		select {
		case <-rebalanced:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.polling = true
	fs := s.fetch(ctx, wait())
	if fs.IsClientClosed() {
		return nil, kgo.ErrClientClosed
	}
	news, err := s.memberNews()
	fs = append(fs, news...)
	if err == nil {
		err = fetchError(fs)
	}
	s.noteLogEnds(fs)
	s.listUnknownEnds(ctx)
	return s.records(fs), err
}

// fetch polls the direct client for up to wait. A rebalance callback
// waiting for the turn goes first: then it takes only what is buffered,
// and a callback that comes during the wait ends it (rebalance).
func (s *kafkaSource) fetch(ctx context.Context, wait time.Duration) kgo.Fetches {
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	s.mu.Lock()
	if s.rebalancing > 0 {
		cancel() // the callback goes first: take only what is buffered
	}
	s.cancelPoll = cancel
	s.mu.Unlock()
	fs := s.cl.PollRecords(pctx, s.cfg.MaxPollRecords)
	s.mu.Lock()
	s.cancelPoll = nil
	s.mu.Unlock()
	return fs
}

// memberNews takes the member's news (a session lost, a join refused):
// franz-go queues it as a fetch error, which a poll without a context
// takes without waiting. The error is the first refusal of the
// configuration among it.
func (s *kafkaSource) memberNews() (kgo.Fetches, error) {
	var err error
	//lint:ignore SA1012 a nil context is franz-go's documented non-blocking drain
	news := s.member.PollRecords(nil, 1)
	news.EachError(func(_ string, _ int32, e error) {
		if _, ok := errors.AsType[*kgo.ErrGroupSession](e); ok {
			// The member was kicked from the group (or could not join):
			// the client rejoins by itself, and the lost-partitions
			// callback has dropped the flows. News, not a failure,
			// unless the broker refuses the configuration for good.
			if cerr := s.groupConfigError(e); cerr != nil && err == nil {
				err = cerr
			}
		}
	})
	return news, err
}

// fetchError is the first error of fs that fails the poll: not the
// member's session errors (memberNews), nor the end of the poll's wait,
// nor a client closed meanwhile.
func fetchError(fs kgo.Fetches) error {
	var err error
	fs.EachError(func(t string, p int32, e error) {
		if _, ok := errors.AsType[*kgo.ErrGroupSession](e); ok {
			return
		}
		if !errors.Is(e, context.DeadlineExceeded) && !errors.Is(e, context.Canceled) && !errors.Is(e, kgo.ErrClientClosed) && err == nil {
			err = fmt.Errorf("kafkaio: fetching %s/%d: %w", t, p, e)
		}
	})
	return err
}

// noteLogEnds keeps the high watermarks the fetch responses of fs
// carried, for LogEnd.
func (s *kafkaSource) noteLogEnds(fs kgo.Fetches) {
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if p.Err == nil && p.HighWatermark >= 0 {
			s.logEnd[store.TopicPartition{Topic: p.Topic, Partition: p.Partition}] = p.HighWatermark
		}
	})
}

// records are the records of fs, in s.buf: valid until the next poll.
func (s *kafkaSource) records(fs kgo.Fetches) []input.Record {
	out := s.buf[:0]
	fs.EachRecord(func(r *kgo.Record) {
		out = append(out, input.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp})
		if len(r.Headers) > 0 {
			hs := make([]store.Header, len(r.Headers))
			for i, h := range r.Headers {
				hs[i] = store.Header{Key: h.Key, Value: h.Value}
			}
			out[len(out)-1].Headers = hs
		}
	})
	s.buf = out
	return out
}

// PollDone gives the turn to the rebalance callbacks waiting for it.
func (s *kafkaSource) PollDone() {
	if s.polling {
		s.polling = false
		s.turn.Unlock()
	}
}

// Identity is the member's: the store's offset commits carry it.
func (s *kafkaSource) Identity() store.GroupIdentity {
	member, gen := s.member.GroupMetadata()
	return store.GroupIdentity{Group: s.group, MemberID: member, Generation: gen, InstanceID: s.cfg.InstanceID}
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
// engine.Config.UnstableOffsetTimeout.
func (s *kafkaSource) CommittedOffset(ctx context.Context, tp store.TopicPartition) (int64, error) {
	for backoff := committedOffsetFirstRetry; ; backoff *= 2 {
		o, ok, err := s.fetchCommitted(ctx, tp)
		if err != nil {
			return 0, err
		}
		if ok && errors.Is(o.Err, kerr.UnstableOffsetCommit) {
			if backoff > committedOffsetLastRetry {
				return 0, fmt.Errorf("kafkaio: committed offset of %s in group %s: %w: %w", tp, s.group, store.ErrOffsetUnstable, o.Err)
			}
			select {
			case <-ctx.Done():
				return 0, fmt.Errorf("kafkaio: committed offset of %s: %w", tp, context.Cause(ctx))
			case <-time.After(backoff):
			}
			continue
		}
		if ok && o.Err != nil {
			// Never read an error as "no offset": resuming from the start
			// would fold events the snapshots already hold a second time.
			return 0, fmt.Errorf("kafkaio: committed offset of %s: %w", tp, o.Err)
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
		return 0, fmt.Errorf("kafkaio: start offset of %s: %v", tp, o.Err)
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
		return kadm.OffsetResponse{}, false, fmt.Errorf("kafkaio: committed offset of %s: %w", tp, err)
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
		return kadm.OffsetResponse{}, false, fmt.Errorf("kafkaio: committed offset of %s in group %s: %w", tp, s.group, groupErr)
	}
	return kadm.OffsetResponse{}, false, nil
}

// Seek makes tp's next fetch start at offset: the partition is (re)added
// to the direct client there, paused if it was, and whatever was fetched
// of it before is dropped.
func (s *kafkaSource) Seek(tp store.TopicPartition, offset int64) {
	s.mu.Lock()
	if s.seeks != nil {
		s.seeks[tp] = offset // in a callback: added with the others
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.position(map[store.TopicPartition]int64{tp: offset})
}

// position has cl fetch each partition of seeks from its offset, in one
// call: a partition it fetched already starts over there.
func (s *kafkaSource) position(seeks map[store.TopicPartition]int64) {
	if len(seeks) == 0 {
		return
	}
	again := map[string][]int32{}
	add := map[string]map[int32]kgo.Offset{}
	s.mu.Lock()
	for tp, offset := range seeks {
		if s.consumed[tp] {
			again[tp.Topic] = append(again[tp.Topic], tp.Partition)
		}
		s.consumed[tp] = true
		if add[tp.Topic] == nil {
			add[tp.Topic] = map[int32]kgo.Offset{}
		}
		add[tp.Topic][tp.Partition] = kgo.NewOffset().At(offset)
	}
	s.mu.Unlock()
	if len(again) > 0 {
		s.cl.RemoveConsumePartitions(again)
	}
	s.cl.AddConsumePartitions(add)
}

func (s *kafkaSource) Resume(tp store.TopicPartition) {
	s.cl.ResumeFetchPartitions(map[string][]int32{tp.Topic: {tp.Partition}})
}

func (s *kafkaSource) Pause(tp store.TopicPartition) {
	s.cl.PauseFetchPartitions(map[string][]int32{tp.Topic: {tp.Partition}})
}

func (s *kafkaSource) Now() time.Time { return time.Now() }

// Rebalance has the member rejoin its group (input.Rebalancer): under the
// classic protocol, with join metadata that changed (warm-ups caught up),
// this rebalances the group.
func (s *kafkaSource) Rebalance() { s.member.ForceRebalance() }

// Sleep implements Source: d of the wall clock, or until ctx ends.
func (s *kafkaSource) Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// LogEnd is tp's high watermark from the last fetch response that carried
// it. franz-go passes on only fetches with records or errors, so a
// partition with nothing fetched since its assignment has none at first:
// the next Poll lists it (listUnknownEnds).
func (s *kafkaSource) LogEnd(tp store.TopicPartition) (int64, bool) {
	o, ok := s.logEnd[tp]
	if !ok {
		s.unknownEnd[tp] = true
	}
	return o, ok
}

// groupConfigError is the *store.ConfigError of a group error that
// rejoining cannot cure (nil for the others).
func (s *kafkaSource) groupConfigError(err error) error {
	cerr := &store.ConfigError{Err: err}
	switch {
	case errors.Is(err, kerr.InvalidSessionTimeout):
		cerr.Subject, cerr.Problem = "kafkaio.Config.SessionTimeout", fmt.Sprintf("the broker refuses %v", s.cfg.SessionTimeout)
		cerr.Fix = "set it within the broker's group.min.session.timeout.ms and group.max.session.timeout.ms (6s and 30m by default)"
	case errors.Is(err, kerr.FencedInstanceID):
		cerr.Subject, cerr.Problem = "kafkaio.Config.InstanceID", fmt.Sprintf("another member of group %q joined with instance id %q and replaced this one", s.group, s.cfg.InstanceID)
		cerr.Fix = "give every running instance its own InstanceID"
		if s.instanceFromCache {
			cerr.Subject = "engine.Config.Dir"
			cerr.Problem = fmt.Sprintf("another member of group %q joined with instance id %q, the identity kept in this instance's cache directory, and replaced this one: two instances run on copies of one cache directory", s.group, s.cfg.InstanceID)
			cerr.Fix = "give every instance a Dir of its own, never a copy of another's (or set kafkaio.Config.DynamicMembership)"
		}
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		cerr.Subject, cerr.Problem = "kafkaio.Config.Group", fmt.Sprintf("the consumer may not join group %q", s.group)
		cerr.Fix = fmt.Sprintf("grant the principal READ on the group (kafka-acls.sh --operation Read --group %s)", s.group)
	default:
		return nil
	}
	return cerr
}

// Close leaves the group: the revoke callback flushes, commits and tears
// down, then franz-go sends LeaveGroup, so the group moves the partitions
// at once. With an InstanceID (static membership) franz-go does not leave:
// the revoke callback still flushes and commits, but the member stays in
// the group, holding its partitions until it rejoins with the same id
// (and gets them back without a rebalance) or SessionTimeout passes. (Two
// exceptions, franz-go's: under the classic protocol with a cooperative
// balancer, a static member that revoked partitions in a rebalance and
// closes before rejoining does leave, so that they are assigned; under
// the consumer protocol, a static member sends its temporary leave,
// member epoch -2, which keeps its partitions reserved the same way.)
//
// The member closes first, its revoke callback using the direct client's
// partitions and the member's identity; then the direct client.
//
// Under the consumer protocol a static member's temporary leave must name
// its instance id, which franz-go's leave does not: Kafka refuses it
// (INVALID_REQUEST), and the member stays in the group, active, until its
// session expires; its restart meanwhile is refused
// (UNRELEASED_INSTANCE_ID) and the group moves its partitions when the
// session ends. So the direct client sends the leave again, with the
// instance id, before it closes.
func (s *kafkaSource) Close(ctx context.Context) error {
	memberID, _ := s.member.GroupMetadata()
	s.member.Close()
	if s.cfg.InstanceID != "" && memberID != "" {
		lctx, cancel := context.WithTimeout(ctx, staticLeaveTimeout)
		switch {
		case s.consumerProtocol():
			// franz-go's leave omits the instance id, which Kafka
			// refuses: the member would stay until its session ends.
			req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			req.Group, req.MemberID, req.InstanceID, req.MemberEpoch = s.group, memberID, kmsg.StringPtr(s.cfg.InstanceID), -2
			if s.cfg.LeaveOnClose {
				req.MemberEpoch = -1 // for good
			}
			_, _ = req.RequestWith(lctx, s.cl) // best effort: the session ends it anyway
		case s.cfg.LeaveOnClose:
			// franz-go does not leave as a static member.
			_, _ = s.adm.LeaveGroup(lctx, kadm.LeaveGroup(s.group).InstanceIDs(s.cfg.InstanceID))
		}
		cancel()
	}
	s.cl.Close()
	return nil
}

// staticLeaveTimeout bounds Close's leave of a static member.
const staticLeaveTimeout = 5 * time.Second

// consumerProtocol reports whether the member was asked to run the
// consumer protocol (KIP-848: kgo.ServerSideBalancer). A member that fell
// back to the classic protocol (a broker without it) has its leave
// refused, which changes nothing.
func (s *kafkaSource) consumerProtocol() bool {
	v, _ := s.member.OptValue(kgo.ServerSideBalancer).(bool)
	return v
}

// Partitions implements PartitionLister: every partition of
// Config.Topics, from a metadata request bounded by ctx.
func (s *kafkaSource) Partitions(ctx context.Context) ([]store.TopicPartition, error) {
	tps, _, err := s.inputTopics(ctx)
	return tps, err
}

// inputTopics is every partition of Config.Topics and the topics'
// names by id, from one metadata request.
func (s *kafkaSource) inputTopics(ctx context.Context) ([]store.TopicPartition, map[kadm.TopicID]string, error) {
	details, err := s.adm.ListTopics(ctx, s.cfg.Topics...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafkaio: listing the partitions of %q: %w", s.cfg.Topics, err)
	}
	var out []store.TopicPartition
	names := map[kadm.TopicID]string{}
	for _, t := range s.cfg.Topics {
		d, ok := details[t]
		if !ok || d.Err != nil {
			return nil, nil, fmt.Errorf("kafkaio: listing the partitions of %q: topic %q: %v", s.cfg.Topics, t, d.Err)
		}
		names[d.ID] = t
		for _, p := range d.Partitions.Numbers() {
			out = append(out, store.TopicPartition{Topic: t, Partition: p})
		}
	}
	return out, names, nil
}

// DescribeGroup implements GroupDescriber: the partitions of
// Config.Topics with the group's committed offsets, their log starts
// and ends, and which the coordinator has assigned to a member. The
// assignment is read as a consumer-protocol group first
// (ConsumerGroupDescribe), then as a classic one (DescribeGroups: a
// classic group that rebalances is read as assigning nothing, whatever
// the coordinator describes: its partitions are being handed out).
func (s *kafkaSource) DescribeGroup(ctx context.Context) (input.GroupReport, error) {
	tps, names, err := s.inputTopics(ctx)
	if err != nil {
		return input.GroupReport{}, err
	}
	starts, err := s.adm.ListStartOffsets(ctx, s.cfg.Topics...)
	if err != nil {
		return input.GroupReport{}, fmt.Errorf("kafkaio: listing the start offsets of %q: %w", s.cfg.Topics, err)
	}
	ends, err := s.adm.ListEndOffsets(ctx, s.cfg.Topics...)
	if err != nil {
		return input.GroupReport{}, fmt.Errorf("kafkaio: listing the end offsets of %q: %w", s.cfg.Topics, err)
	}
	committed, err := s.adm.FetchOffsets(ctx, s.group)
	if err != nil {
		return input.GroupReport{}, fmt.Errorf("kafkaio: fetching the committed offsets of group %s: %w", s.group, err)
	}
	g, err := s.describeGroup(ctx, names)
	if err != nil {
		return input.GroupReport{}, err
	}
	out := input.GroupReport{Partitions: make([]input.GroupPartition, 0, len(tps)), Members: g.members}
	for _, tp := range tps {
		start, sok := starts.Lookup(tp.Topic, tp.Partition)
		end, eok := ends.Lookup(tp.Topic, tp.Partition)
		if !sok || !eok || start.Err != nil || end.Err != nil {
			return input.GroupReport{}, fmt.Errorf("kafkaio: the log start or end of %s: %v %v", tp, start.Err, end.Err)
		}
		owner, isAssigned := g.owners[tp]
		gp := input.GroupPartition{Input: tp, CommittedOffset: -1, LogStartOffset: start.Offset, LogEndOffset: end.Offset,
			Assigned: isAssigned, Endpoint: owner.endpoint, Owner: owner.name}
		if c, ok := committed.Lookup(tp.Topic, tp.Partition); ok && c.Err == nil && c.At >= 0 {
			gp.CommittedOffset = c.At
		}
		out.Partitions = append(out.Partitions, gp)
	}
	return out, nil
}

// groupOwner is the member the group's coordinator has assigned a
// partition to.
type groupOwner struct {
	memberID string
	name     string // its instance id if static, else memberID
	endpoint string // its advertised endpoint ("" if none)
}

// groupView is the group as its coordinator describes it: which member
// each partition is assigned to, the members' names (sorted), and
// whether it is a classic group that rebalances.
type groupView struct {
	owners      map[store.TopicPartition]groupOwner
	members     []string
	rebalancing bool
}

// describeGroup is the group as its coordinator describes it (names: the
// input topics' names by id, for a response that names a topic by its id
// alone). It is read as a consumer-protocol group first
// (ConsumerGroupDescribe: each member's current assignment, without the
// partitions it is revoking), then as a classic one (DescribeGroups: a
// classic group that rebalances is read as assigning nothing, whatever
// the coordinator describes: its partitions are being handed out).
func (s *kafkaSource) describeGroup(ctx context.Context, names map[kadm.TopicID]string) (groupView, error) {
	v := groupView{owners: map[store.TopicPartition]groupOwner{}}
	add := func(o groupOwner, topic string, parts []int32) {
		for _, p := range parts {
			v.owners[store.TopicPartition{Topic: topic, Partition: p}] = o
		}
	}
	member := func(memberID string, instanceID *string, clientID string) groupOwner {
		id := store.GroupIdentity{MemberID: memberID}
		if instanceID != nil {
			id.InstanceID = *instanceID
		}
		o := groupOwner{memberID: memberID, name: input.MemberName(id), endpoint: ClientIDEndpoint(clientID)}
		v.members = append(v.members, o.name)
		return o
	}
	defer func() { slices.Sort(v.members) }()
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{s.group}
	if resp, err := req.RequestWith(ctx, s.cl); err == nil && len(resp.Groups) == 1 && resp.Groups[0].ErrorCode == 0 {
		for _, m := range resp.Groups[0].Members {
			if m.MemberEpoch < 0 {
				continue // a static member's temporary leave: not there to keep a replica
			}
			o := member(m.MemberID, m.InstanceID, m.ClientID)
			for _, t := range m.Assignment.TopicPartitions {
				name := t.Topic
				if name == "" {
					name = names[t.TopicID]
				}
				add(o, name, t.Partitions)
			}
		}
		return v, nil
	}
	// Not a consumer-protocol group (or a broker without the API).
	groups, err := s.adm.DescribeGroups(ctx, s.group)
	if err != nil {
		return groupView{}, fmt.Errorf("kafkaio: describing group %s: %w", s.group, err)
	}
	g, ok := groups[s.group]
	if !ok {
		return v, nil
	}
	if g.Err != nil {
		return groupView{}, fmt.Errorf("kafkaio: describing group %s: %w", s.group, g.Err)
	}
	for _, m := range g.Members {
		o := member(m.MemberID, m.InstanceID, m.ClientID)
		if g.State != "Stable" {
			// Kafka 4's coordinator describes each member's last
			// assignment in every state, older ones none outside
			// Stable. Both are read as nothing assigned until the
			// rebalance ends: eager members have revoked everything
			// meanwhile, and a member assigned nothing must not take a
			// group still handing partitions out for settled
			// (engine.Status.Ready).
			continue
		}
		if c, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range c.Topics {
				add(o, t.Topic, t.Partitions)
			}
		}
	}
	v.rebalancing = g.State != "Stable" && g.State != "Empty" && g.State != "Dead"
	return v, nil
}

// ConfirmOwner implements Source: it describes the group as
// DescribeGroup does and looks for id's member as tp's owner. The
// generation is not compared (a describe of a classic group has none): a
// member the coordinator lists as the owner is the owner, whatever round
// its client last heard of.
func (s *kafkaSource) ConfirmOwner(ctx context.Context, tp store.TopicPartition, id store.GroupIdentity) error {
	_, names, err := s.inputTopics(ctx)
	if err != nil {
		return err
	}
	g, err := s.describeGroup(ctx, names)
	if err != nil {
		return err
	}
	owner, ok := g.owners[tp]
	switch {
	case g.rebalancing:
		return &input.NotOwnerError{Input: tp, Identity: id, Why: "the group is rebalancing"}
	case !ok:
		return &input.NotOwnerError{Input: tp, Identity: id, Why: "no member is assigned it"}
	case owner.memberID != id.MemberID:
		return &input.NotOwnerError{Input: tp, Identity: id, Why: fmt.Sprintf("member %q is assigned it", owner.memberID)}
	}
	return nil
}

// Go implements Source: f runs on a goroutine of its own, and once it
// returns the poll in flight, if any, ends, so that the runner takes its
// outcome in now, not after the poll's wait.
func (s *kafkaSource) Go(f func()) {
	go func() {
		f()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.cancelPoll != nil {
			s.cancelPoll()
		}
	}()
}
