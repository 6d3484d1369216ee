// Package sim is a deterministic, in-memory model of the Apache Kafka 4.x
// behaviour snapfence depends on, and a store.Backend over it.
//
// The model has partition logs with transactional batches, COMMIT and ABORT
// control markers, the high watermark and the last stable offset;
// transactional ids with producer ids and epochs; a transaction coordinator
// that aborts on takeover and on timeout; and a group coordinator with the
// classic (eager and cooperative) and consumer (KIP-848) protocols that
// validates transactional offset commits as Kafka does.
//
// Time is virtual: it moves only when Advance is called. Nothing in the
// package reads the machine's clock or starts a goroutine, so the same seed
// and the same operations give a byte-identical History.
//
// Where kfake and Kafka differ, the sim follows Kafka. Where the sim
// simplifies, the doc comment of the operation says so.
package sim

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/snapfence/snapfence/internal/kafkatopic"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// Config configures a Cluster. Zero values take the defaults given.
type Config struct {
	// Seed seeds every choice the cluster makes (member ids).
	Seed uint64
	// SessionTimeout evicts a member that has not heartbeated; default
	// DefaultSessionTimeout (45 s).
	SessionTimeout time.Duration
	// RebalanceTimeout bounds a classic round; default 1 min.
	RebalanceTimeout time.Duration
	// AbortScanInterval is the coordinator's scan for timed-out
	// transactions (transaction.abort.timed.out.transaction.cleanup.interval.ms);
	// default 10s.
	AbortScanInterval time.Duration
	// KIP1251 accepts a consumer-protocol commit with a lagging member
	// epoch for partitions the member still owns, as brokers 4.3.0+ do.
	// Default on; set DisableKIP1251 to model older brokers.
	DisableKIP1251 bool
	// SerialWakeups makes reads woken from a wait (a change, the clock)
	// wait for their turn, oldest first, until the driver calls Wake; see
	// Parked. Off, woken reads go on at once.
	SerialWakeups bool
}

// Cluster is a simulated Kafka cluster. Its methods are safe for concurrent
// use; blocking reads wait for a change or for virtual time to pass.
type Cluster struct {
	mu      sync.Mutex
	cfg     Config
	clk     clock
	rng     *rand.Rand
	logs    map[string][]*partitionLog
	configs map[string]TopicConfig
	// topicSeq numbers the topics created, for their ids.
	topicSeq uint64
	txns     map[string]*txnState
	// forgotten are transactions the coordinator lost while they were
	// open (ForgetTransaction): still open on their partitions, their
	// offset commits pending, and ended only by AbortForgotten.
	forgotten []*txnState
	groups    map[string]*group
	nextPID   int64
	changed   chan struct{}
	// parked are the reads waiting for a change or for virtual time. A
	// waiter is moved to woken by whoever wakes it (a change, the clock),
	// under the lock, so the counts never include a read that runs.
	// Woken reads go on one at a time, oldest first, when the driver calls
	// Wake. parkedChanged is closed and replaced whenever either changes.
	parked        map[*waiter]struct{}
	woken         []*waiter
	waiterSeq     uint64
	parkedChanged chan struct{}
	history       []Event
	faults        faults
	// deferred are the started calls in flight (BackendConfig.WriteLatency),
	// oldest first.
	deferred []*deferredCall
}

type faults struct {
	failLogEnd      error
	failProduce     map[store.TopicPartition]error
	fetchLatency    time.Duration
	fetchMaxRecords int
}

// Event is one entry of the cluster's history.
type Event struct {
	At     time.Duration `json:"at"`
	Kind   string        `json:"kind"`
	Detail string        `json:"detail"`
}

// TopicConfig is a topic's configuration.
type TopicConfig struct {
	Partitions int
	Compacted  bool
	// DeleteRetention is the topic's delete.retention.ms: Compact removes
	// a key's last tombstone once this has passed since it was appended.
	// Default DefaultDeleteRetention (Kafka's 24 h).
	DeleteRetention time.Duration
	// MaxMessageBytes is the topic's max.message.bytes: Produce refuses a
	// record whose key, value and headers are larger with
	// MESSAGE_TOO_LARGE. 0: no limit.
	MaxMessageBytes int
	// ID is the topic's id, set by CreateTopic (unique in the cluster:
	// a topic deleted and created again gets a new one); ignored as input.
	ID [16]byte
}

// DefaultDeleteRetention is TopicConfig.DeleteRetention's default, Kafka's
// delete.retention.ms default.
const DefaultDeleteRetention = 24 * time.Hour

// DefaultSessionTimeout is Config.SessionTimeout's default, Kafka's
// session.timeout.ms default.
const DefaultSessionTimeout = 45 * time.Second

// New returns an empty cluster at virtual time Epoch.
func New(cfg Config) *Cluster {
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.RebalanceTimeout <= 0 {
		cfg.RebalanceTimeout = time.Minute
	}
	if cfg.AbortScanInterval <= 0 {
		cfg.AbortScanInterval = 10 * time.Second
	}
	return &Cluster{
		cfg:     cfg,
		clk:     clock{now: Epoch},
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5f3759df)),
		logs:    map[string][]*partitionLog{},
		configs: map[string]TopicConfig{},
		txns:    map[string]*txnState{},
		groups:  map[string]*group{},
		changed: make(chan struct{}),
	}
}

// Now is the cluster's virtual time.
func (c *Cluster) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clk.now
}

// Sleep waits d of virtual time, or until ctx ends. The wait is parked
// as a read's is (Parked), so that a driver stepping members on
// goroutines of their own sees it and stays deterministic.
func (c *Cluster) Sleep(ctx context.Context, d time.Duration) {
	c.mu.Lock()
	timer, wt := c.parkForLocked(d, false)
	c.mu.Unlock()
	select {
	case <-timer:
	case <-ctx.Done():
	}
	c.resume(ctx, wt)
}

// Advance moves virtual time forward by d. On the way it stops at every
// pending timer and every abort scan, in order, and applies what time does:
// sessions expire, rebalance rounds time out, transactions time out.
func (c *Cluster) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	end := c.clk.now.Add(d)
	for {
		next := end
		if t, ok := c.clk.nextTimer(); ok && t.Before(next) {
			next = t
		}
		if t, ok := c.nextDeferred(); ok && t.Before(next) {
			next = t
		}
		scan := c.clk.now.Truncate(c.cfg.AbortScanInterval).Add(c.cfg.AbortScanInterval)
		if scan.Before(next) {
			next = scan
		}
		if next.After(c.clk.now) {
			c.clk.set(next)
		} else {
			c.clk.set(c.clk.now) // fire timers due now
		}
		c.expireTxnsOnScanLocked()
		c.housekeepGroupsLocked()
		c.changedLocked()
		c.runDueLocked()
		if !c.clk.now.Before(end) {
			return
		}
	}
}

// expireTxnsOnScanLocked aborts timed-out transactions only at abort-scan
// instants, as the coordinator's periodic scan does.
func (c *Cluster) expireTxnsOnScanLocked() {
	if c.clk.now.Sub(Epoch)%c.cfg.AbortScanInterval == 0 {
		c.expireTxnsLocked()
	}
}

func (c *Cluster) housekeepGroupsLocked() {
	for _, name := range sortedKeys(c.groups) {
		g := c.groups[name]
		for _, id := range sortedKeys(g.members) {
			if c.clk.now.Sub(g.members[id].lastHeartbeat) >= c.cfg.SessionTimeout {
				delete(g.members, id)
				c.record("member_removed", "group=%s member=%s reason=session_timeout", name, id)
				c.triggerLocked(g)
			}
		}
		c.completeLocked(g)
	}
}

// CreateTopic creates a topic; creating an existing topic is an error.
func (c *Cluster) CreateTopic(name string, cfg TopicConfig) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.logs[name]; ok {
		return fmt.Errorf("sim: topic %q already exists", name)
	}
	if cfg.Partitions < 1 {
		return fmt.Errorf("sim: topic %q needs at least one partition", name)
	}
	if cfg.DeleteRetention <= 0 {
		cfg.DeleteRetention = DefaultDeleteRetention
	}
	c.topicSeq++
	cfg.ID = [16]byte{}
	binary.BigEndian.PutUint64(cfg.ID[8:], c.topicSeq)
	parts := make([]*partitionLog, cfg.Partitions)
	for i := range parts {
		parts[i] = newPartitionLog(&c.clk)
	}
	c.logs[name] = parts
	c.configs[name] = cfg
	c.record("create_topic", "topic=%s partitions=%d compacted=%t", name, cfg.Partitions, cfg.Compacted)
	return nil
}

// DeleteTopic deletes a topic and its records; a topic created again
// under its name has a new id.
func (c *Cluster) DeleteTopic(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.logs[name]; !ok {
		return fmt.Errorf("%w: %s", ErrUnknownTopicOrPartition, name)
	}
	delete(c.logs, name)
	delete(c.configs, name)
	c.record("delete_topic", "topic=%s", name)
	c.changedLocked()
	return nil
}

// Topic reports a topic's configuration.
func (c *Cluster) Topic(name string) (TopicConfig, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg, ok := c.configs[name]
	return cfg, ok
}

// ErrUnknownTopicOrPartition is returned for a partition that does not
// exist.
var ErrUnknownTopicOrPartition = fmt.Errorf("sim: unknown topic or partition")

func (c *Cluster) partitionLocked(tp store.TopicPartition) (*partitionLog, error) {
	parts := c.logs[tp.Topic]
	if tp.Partition < 0 || int(tp.Partition) >= len(parts) {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTopicOrPartition, tp)
	}
	return parts[tp.Partition], nil
}

// Produce appends records with an idempotent, non-transactional producer.
func (c *Cluster) Produce(tp store.TopicPartition, recs ...wire.Record) ([]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.partitionLocked(tp)
	if err != nil {
		return nil, err
	}
	if err := c.produceFaultLocked(tp); err != nil {
		return nil, err
	}
	if err := c.refusedLocked(tp.Topic, recs); err != nil {
		return nil, kafkatopic.MarkRefused(err)
	}
	offs := make([]int64, len(recs))
	for i, r := range recs {
		offs[i] = l.append(Entry{Record: cloneRecord(r)})
		c.record("produce", "tp=%s offset=%d key=%q", tp, offs[i], r.Key)
	}
	c.changedLocked()
	return offs, nil
}

// refusedLocked is the error a Kafka broker refuses recs for topic with
// for good, all of them (a produce batch is refused whole), or nil: a
// record over the topic's MaxMessageBytes, or without a key on a
// compacted topic.
func (c *Cluster) refusedLocked(topic string, recs []wire.Record) error {
	cfg := c.configs[topic]
	for _, r := range recs {
		if cfg.Compacted && r.Key == nil {
			return fmt.Errorf("sim: topic %q is compacted and a record has no key: %w", topic, kerr.InvalidRecord)
		}
		n := len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			n += len(h.Key) + len(h.Value)
		}
		if cfg.MaxMessageBytes > 0 && n > cfg.MaxMessageBytes {
			return fmt.Errorf("sim: a record of %d bytes, over topic %q's max.message.bytes of %d: %w", n, topic, cfg.MaxMessageBytes, kerr.MessageTooLarge)
		}
	}
	return nil
}

// Offsets reports a partition's log start, last stable offset and high
// watermark.
func (c *Cluster) Offsets(tp store.TopicPartition) (start, lastStable, highWatermark int64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.partitionLocked(tp)
	if err != nil {
		return 0, 0, 0, err
	}
	return l.start, l.lastStable(), l.end, nil
}

// Read returns every record visible to a reader of the given isolation,
// from the log start to its bound (the LSO for read_committed, the high
// watermark otherwise). It does not wait.
func (c *Cluster) Read(tp store.TopicPartition, readCommitted bool) ([]Entry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.partitionLocked(tp)
	if err != nil {
		return nil, err
	}
	recs, _ := l.read(0, len(l.entries), readCommitted)
	return recs, nil
}

// Fetch returns up to max records visible from offset from and the
// position after them, as one fetch of a consumer would. It does not wait.
func (c *Cluster) Fetch(tp store.TopicPartition, from int64, max int, readCommitted bool) ([]Entry, int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.partitionLocked(tp)
	if err != nil {
		return nil, from, err
	}
	ents, next := l.read(from, max, readCommitted)
	return ents, next, nil
}

// Entries returns the raw log of tp, control markers and aborted data
// included.
func (c *Cluster) Entries(tp store.TopicPartition) ([]Entry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.partitionLocked(tp)
	if err != nil {
		return nil, err
	}
	return slices.Clone(l.entries), nil
}

// Truncate cuts tp's log back to end, as an unclean leader election that
// lost acknowledged records would.
func (c *Cluster) Truncate(tp store.TopicPartition, end int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.partitionLocked(tp)
	if err != nil {
		return err
	}
	l.truncate(end)
	c.record("truncate", "tp=%s end=%d", tp, l.end)
	c.changedLocked()
	return nil
}

// Compact runs the log cleaner on tp. It never cleans at or past the first
// unstable offset.
func (c *Cluster) Compact(tp store.TopicPartition) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.partitionLocked(tp)
	if err != nil {
		return err
	}
	n := l.compact(c.configs[tp.Topic].DeleteRetention)
	c.record("compact", "tp=%s removed=%d", tp, n)
	c.changedLocked()
	return nil
}

// FailLogEndReads makes every high-watermark read fail with err (nil
// heals), so that a stalled recovery's diagnosis is undetermined.
func (c *Cluster) FailLogEndReads(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults.failLogEnd = err
}

// DeleteRecords moves tp's log start up to offset (Kafka's DeleteRecords,
// or retention), removing the records below it.
func (c *Cluster) DeleteRecords(tp store.TopicPartition, offset int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.partitionLocked(tp)
	if err != nil {
		return err
	}
	offset = min(offset, l.end)
	if offset <= l.start {
		return nil
	}
	l.start = offset
	l.entries = slices.DeleteFunc(l.entries, func(e Entry) bool { return e.Offset < offset })
	c.record("delete_records", "tp=%s start=%d", tp, offset)
	c.changedLocked()
	return nil
}

// FailProduce makes every produce to tp, transactional or not, fail with
// err (nil heals), as a partition whose leader is unavailable refuses
// writes: nothing is appended, and a transaction the produce was in stays
// open for its producer to abort.
func (c *Cluster) FailProduce(tp store.TopicPartition, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.faults.failProduce == nil {
		c.faults.failProduce = map[store.TopicPartition]error{}
	}
	if err == nil {
		delete(c.faults.failProduce, tp)
		return
	}
	c.faults.failProduce[tp] = err
}

func (c *Cluster) produceFaultLocked(tp store.TopicPartition) error {
	err := c.faults.failProduce[tp]
	if err != nil {
		c.record("produce_failed", "tp=%s err=%s", tp, errName(err))
	}
	return err
}

// SlowFetches makes every fetch that returns records take latency of
// virtual time and return at most maxRecords (0: unlimited).
func (c *Cluster) SlowFetches(latency time.Duration, maxRecords int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults.fetchLatency, c.faults.fetchMaxRecords = latency, maxRecords
}

// History is every event so far.
func (c *Cluster) History() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.history)
}

// HistoryJSON is the history as JSON lines.
func (c *Cluster) HistoryJSON() []byte {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	for _, e := range c.History() {
		_ = enc.Encode(e)
	}
	return []byte(b.String())
}

func (c *Cluster) record(kind, format string, args ...any) {
	c.history = append(c.history, Event{At: c.clk.now.Sub(Epoch), Kind: kind, Detail: fmt.Sprintf(format, args...)})
}

// Parked reports the reads waiting for the cluster to change or for
// virtual time to pass (a recovery behind an open transaction, or slowed by
// SlowFetches), the reads woken but not yet let go on (see Wake), and a
// channel closed when either number next changes.
//
// This is how a driver that runs members' steps on goroutines of their
// own stays deterministic: before its next step it waits until every step
// it started has finished or is parked or woken; then, while reads are
// woken, it lets the oldest go on (Wake) and waits again. One goroutine
// runs at a time, in an order fixed by the steps.
func (c *Cluster) Parked() (parked, woken int, changed <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.parkedChanged == nil {
		c.parkedChanged = make(chan struct{})
	}
	return len(c.parked), len(c.woken), c.parkedChanged
}

// Wake lets the oldest woken read go on; false if none is woken.
func (c *Cluster) Wake() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.woken) == 0 {
		return false
	}
	w := c.woken[0]
	c.woken = c.woken[1:]
	close(w.grant)
	c.notifyParkedLocked()
	return true
}

// waiter is a parked read: woken by any change (onChange) or once the
// virtual time reaches at; it goes on once grant is closed.
type waiter struct {
	onChange bool
	at       time.Time
	seq      uint64
	grant    chan struct{}
}

func (c *Cluster) newWaiterLocked(onChange bool, at time.Time) *waiter {
	c.waiterSeq++
	return &waiter{onChange: onChange, at: at, seq: c.waiterSeq, grant: make(chan struct{})}
}

// parkForLocked parks a wait for d of virtual time (and, with onChange,
// for any change of the cluster) and returns the timer that ends it; the
// caller unlocks, waits, then resumes wt. A wait already over is no
// park: its timer has fired.
func (c *Cluster) parkForLocked(d time.Duration, onChange bool) (timer <-chan time.Time, wt *waiter) {
	timer = c.clk.after(d)
	if d > 0 {
		wt = c.newWaiterLocked(onChange, c.clk.now.Add(d))
		c.parkLocked(wt)
	}
	return timer, wt
}

func (c *Cluster) parkLocked(w *waiter) {
	if c.parked == nil {
		c.parked = map[*waiter]struct{}{}
	}
	c.parked[w] = struct{}{}
	c.notifyParkedLocked()
}

// resume is what a parked read does once its wait is over: if a change
// or the clock woke it, it waits for its turn (Wake); if its context did,
// it takes itself off the books and goes on. Called without the lock.
func (c *Cluster) resume(ctx context.Context, w *waiter) {
	if w == nil {
		return // never parked
	}
	c.mu.Lock()
	if _, ok := c.parked[w]; ok {
		delete(c.parked, w)
		c.notifyParkedLocked()
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	select {
	case <-w.grant:
	case <-ctx.Done():
		c.mu.Lock()
		if i := slices.Index(c.woken, w); i >= 0 {
			c.woken = slices.Delete(c.woken, i, i+1)
			c.notifyParkedLocked()
		}
		c.mu.Unlock()
	}
}

func (c *Cluster) notifyParkedLocked() {
	if c.parkedChanged != nil {
		close(c.parkedChanged)
	}
	c.parkedChanged = make(chan struct{})
}

// changedLocked wakes every reader waiting for the cluster to change, and
// moves those it woke, with those whose time has come (the clock fired
// their timers), from parked to woken, oldest first.
func (c *Cluster) changedLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
	var woke []*waiter
	for w := range c.parked {
		if w.onChange || !w.at.After(c.clk.now) {
			woke = append(woke, w)
		}
	}
	if len(woke) == 0 {
		return
	}
	slices.SortFunc(woke, func(a, b *waiter) int { return cmp.Compare(a.seq, b.seq) })
	for _, w := range woke {
		delete(c.parked, w)
		if !c.cfg.SerialWakeups {
			close(w.grant)
		}
	}
	if c.cfg.SerialWakeups {
		c.woken = append(c.woken, woke...)
	}
	c.notifyParkedLocked()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func fmtIdentity(id store.GroupIdentity) string {
	return fmt.Sprintf("group=%s member=%s generation=%d", id.Group, id.MemberID, id.Generation)
}

func fmtOffsets(offs map[store.TopicPartition]int64) string {
	tps := make([]store.TopicPartition, 0, len(offs))
	for tp := range offs {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, compareTP)
	parts := make([]string, len(tps))
	for i, tp := range tps {
		parts[i] = fmt.Sprintf("%s:%d", tp, offs[tp])
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func fmtTPs(tps []store.TopicPartition) string {
	parts := make([]string, len(tps))
	for i, tp := range tps {
		parts[i] = tp.String()
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func fmtTarget(t map[string][]store.TopicPartition) string {
	parts := make([]string, 0, len(t))
	for _, id := range sortedKeys(t) {
		parts = append(parts, id+"="+fmtTPs(t[id]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}
