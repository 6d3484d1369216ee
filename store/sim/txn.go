package sim

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/wire"
)

// txnState is the transaction coordinator's record of one transactional.id.
type txnState struct {
	id      string
	pid     int64
	epoch   int16
	timeout time.Duration

	ongoing    bool
	started    time.Time
	partitions []store.TopicPartition // in the order they joined
	offsets    []pendingOffsets
	hanging    bool // never times out (a hanging transaction)
	// timeOutAtEnd: the next commit finds the transaction aborted by
	// the coordinator's timeout (TimeOutAtCommit).
	timeOutAtEnd bool
	// committed: the last transaction committed and no producer
	// initialised the id since (Kafka's CompleteCommit).
	committed bool
}

type pendingOffsets struct {
	group   string
	offsets map[store.TopicPartition]int64
}

// Producer is a transactional producer's view of its transactional.id: the
// producer id and epoch it holds. A stale epoch is fenced.
type Producer struct {
	c     *Cluster
	id    string
	pid   int64
	epoch int16
}

// TransactionalID is the producer's transactional.id.
func (p *Producer) TransactionalID() string { return p.id }

// InitProducerID registers txnID, as a transactional producer's
// initTransactions does: it bumps the epoch, which fences every earlier
// holder of the id, and aborts the transaction the previous holder left
// open. (Apache Kafka answers CONCURRENT_TRANSACTIONS while the abort is
// written and the client retries; the sim completes the abort in the call,
// which is what the retrying client observes.)
func (c *Cluster) InitProducerID(txnID string, timeout time.Duration) *Producer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if timeout <= 0 {
		timeout = store.DefaultTransactionTimeout
	}
	t, ok := c.txns[txnID]
	if !ok {
		c.nextPID++
		t = &txnState{id: txnID, pid: c.nextPID, epoch: -1}
		c.txns[txnID] = t
	}
	if t.ongoing {
		c.endTxnLocked(t, AbortMarker, "takeover")
	}
	t.committed = false
	t.epoch++
	t.timeout = timeout
	c.record("init_producer_id", "txn_id=%s pid=%d epoch=%d", txnID, t.pid, t.epoch)
	c.changedLocked()
	return &Producer{c: c, id: txnID, pid: t.pid, epoch: t.epoch}
}

// checkEpoch fences a holder of an old epoch with fenced: as Kafka 4
// answers it, INVALID_PRODUCER_EPOCH on the data path (a Produce to the
// partition's leader, a TxnOffsetCommit to the group coordinator, each
// checking the epoch against the transaction's) and PRODUCER_FENCED from
// the transaction coordinator (EndTxn). Called with c.mu held.
func (p *Producer) checkEpoch(fenced error) (*txnState, error) {
	t := p.c.txns[p.id]
	if t == nil || t.pid != p.pid || t.epoch != p.epoch {
		return nil, fenced
	}
	return t, nil
}

func (p *Producer) begin(t *txnState) {
	if !t.ongoing {
		t.ongoing = true
		t.started = p.c.clk.now
		t.partitions = nil
		t.offsets = nil
	}
}

// Produce appends records to tp inside the producer's transaction,
// beginning it if needed.
func (p *Producer) Produce(tp store.TopicPartition, recs ...wire.Record) ([]int64, error) {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	t, err := p.checkEpoch(kerr.InvalidProducerEpoch)
	if err != nil {
		c.record("produce_fenced", "txn_id=%s epoch=%d tp=%s", p.id, p.epoch, tp)
		return nil, err
	}
	l, err := c.partitionLocked(tp)
	if err != nil {
		return nil, err
	}
	p.begin(t)
	if err := c.produceFaultLocked(tp); err != nil {
		return nil, err
	}
	if !containsTP(t.partitions, tp) {
		t.partitions = append(t.partitions, tp)
	}
	if err := c.refusedLocked(tp.Topic, recs); err != nil {
		return nil, err
	}
	offs := make([]int64, len(recs))
	for i, r := range recs {
		offs[i] = l.append(Entry{Record: cloneRecord(r), ProducerID: t.pid, Epoch: t.epoch, Transactional: true})
		c.record("produce", "txn_id=%s pid=%d epoch=%d tp=%s offset=%d key=%q", p.id, t.pid, t.epoch, tp, offs[i], r.Key)
	}
	c.changedLocked()
	return offs, nil
}

// TxnOffsetCommit adds an offset commit for group to the transaction. The
// group coordinator validates the identity now, as Kafka's does; a
// rejection is returned as the coordinator's error (ILLEGAL_GENERATION,
// UNKNOWN_MEMBER_ID, ...) and leaves the transaction open for the caller to
// abort.
func (p *Producer) TxnOffsetCommit(id store.GroupIdentity, offsets map[store.TopicPartition]int64) error {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	t, err := p.checkEpoch(kerr.InvalidProducerEpoch)
	if err != nil {
		return err
	}
	p.begin(t)
	if err := c.validateCommitLocked(id, offsets, true); err != nil {
		c.record("txn_offset_commit_rejected", "txn_id=%s %s offsets=%s err=%s", p.id, fmtIdentity(id), fmtOffsets(offsets), errName(err))
		return err
	}
	t.offsets = append(t.offsets, pendingOffsets{group: id.Group, offsets: offsets})
	c.record("txn_offset_commit", "txn_id=%s %s offsets=%s", p.id, fmtIdentity(id), fmtOffsets(offsets))
	return nil
}

// EndTxn commits or aborts the producer's transaction. As under KIP-890,
// every EndTxn bumps the epoch; the Producer follows it.
func (p *Producer) EndTxn(commit bool) error {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	t, err := p.checkEpoch(kerr.ProducerFenced)
	if err != nil {
		return err
	}
	if !t.ongoing {
		return nil
	}
	if commit && t.timeOutAtEnd {
		t.timeOutAtEnd = false
		c.endTxnLocked(t, AbortMarker, "timeout")
		t.epoch++
		c.changedLocked()
		return kerr.InvalidProducerEpoch
	}
	marker := AbortMarker
	if commit {
		marker = CommitMarker
	}
	c.endTxnLocked(t, marker, "end_txn")
	t.epoch++
	p.epoch = t.epoch
	c.changedLocked()
	return nil
}

// endTxnLocked writes the markers of t's transaction and, on commit,
// applies its offsets.
func (c *Cluster) endTxnLocked(t *txnState, marker Control, why string) {
	for _, tp := range t.partitions {
		if l := c.logs[tp.Topic]; l != nil && int(tp.Partition) < len(l) {
			off := l[tp.Partition].endTxn(t.pid, t.epoch, marker)
			c.record("marker", "txn_id=%s pid=%d tp=%s offset=%d type=%s reason=%s", t.id, t.pid, tp, off, marker, why)
		}
	}
	if marker == CommitMarker {
		for _, po := range t.offsets {
			g := c.groupLocked(po.group)
			for tp, off := range po.offsets {
				g.committed[tp] = off
			}
			c.record("offsets_committed", "group=%s offsets=%s txn_id=%s", po.group, fmtOffsets(po.offsets), t.id)
		}
	}
	c.record("txn_end", "txn_id=%s pid=%d epoch=%d result=%s reason=%s", t.id, t.pid, t.epoch, marker, why)
	t.ongoing, t.partitions, t.offsets = false, nil, nil
	t.committed = marker == CommitMarker
}

// TransactionState is what the coordinator knows of txnID, as Kafka's
// DescribeTransactions reports it: the producer epoch, whether a
// transaction is open and the partitions it wrote to, and whether the
// last one committed with no producer initialised since (CompleteCommit).
// known is false for an id the coordinator has no state for.
func (c *Cluster) TransactionState(txnID string) (known bool, epoch int16, ongoing bool, partitions []store.TopicPartition, committed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.txns[txnID]
	if t == nil {
		return false, 0, false, nil, false
	}
	return true, t.epoch, t.ongoing, slices.Clone(t.partitions), t.committed
}

// Hang makes txnID's open transaction hang: it never times out, as a
// transaction the coordinator lost track of (the class KIP-890 closes) would.
// Only a takeover or AbortHanging ends it.
func (c *Cluster) Hang(txnID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.txns[txnID]; t != nil {
		t.hanging = true
		c.record("hang", "txn_id=%s", txnID)
	}
}

// ForgetTransaction makes the transaction coordinator lose txnID's open
// transaction, as a single broker killed with SIGKILL can when the tail of
// __transaction_state is lost: the transaction stays open on every
// partition it wrote (the last stable offset stays below it), its offset
// commits stay pending (a RequireStable fetch answers
// UNSTABLE_OFFSET_COMMIT), and the coordinator no longer knows the
// producer: the next InitProducerID of txnID gets a new producer id and
// aborts nothing. Only AbortForgotten, the operator's abort, ends it.
func (c *Cluster) ForgetTransaction(txnID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.txns[txnID]
	if t == nil || !t.ongoing {
		return
	}
	delete(c.txns, txnID)
	c.forgotten = append(c.forgotten, t)
	c.record("forget", "txn_id=%s pid=%d epoch=%d", txnID, t.pid, t.epoch)
}

// AbortForgotten aborts every forgotten transaction on every partition it
// holds and drops its pending offset commits, as kafka-transactions.sh
// abort run for each of them does.
func (c *Cluster) AbortForgotten() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.forgotten {
		for _, tp := range t.partitions {
			if l := c.logs[tp.Topic]; l != nil && int(tp.Partition) < len(l) {
				off := l[tp.Partition].endTxn(t.pid, t.epoch, AbortMarker)
				c.record("marker", "txn_id=%s pid=%d tp=%s offset=%d type=%s reason=admin_abort", t.id, t.pid, tp, off, AbortMarker)
			}
		}
	}
	c.forgotten = nil
	c.changedLocked()
}

// StableCommittedOffset is CommittedOffset as a RequireStable offset fetch
// answers it: kerr.UnstableOffsetCommit while a transaction that has not
// ended holds an offset commit of tp in group.
func (c *Cluster) StableCommittedOffset(group string, tp store.TopicPartition) (int64, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	holds := func(t *txnState) bool {
		for _, po := range t.offsets {
			if _, ok := po.offsets[tp]; ok && po.group == group {
				return true
			}
		}
		return false
	}
	for _, id := range sortedKeys(c.txns) {
		if t := c.txns[id]; t.ongoing && holds(t) {
			return 0, false, kerr.UnstableOffsetCommit
		}
	}
	for _, t := range c.forgotten {
		if holds(t) {
			return 0, false, kerr.UnstableOffsetCommit
		}
	}
	g := c.groups[group]
	if g == nil {
		return 0, false, nil
	}
	off, ok := g.committed[tp]
	return off, ok, nil
}

// OpenTransactionsOn lists the transactions open on tp, as Kafka's
// DescribeProducers shows them, each with the transactional.id the
// coordinator maps its producer to ("" for a forgotten one).
func (c *Cluster) OpenTransactionsOn(tp store.TopicPartition) []kafka.OpenTransaction {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.partitionLocked(tp)
	if err != nil {
		return nil
	}
	var out []kafka.OpenTransaction
	for _, pid := range slices.Sorted(maps.Keys(l.open)) {
		o := kafka.OpenTransaction{Partition: tp, ProducerID: pid, StartOffset: l.open[pid]}
		for _, id := range sortedKeys(c.txns) {
			if t := c.txns[id]; t.pid == pid {
				o.TransactionalID, o.ProducerEpoch = id, t.epoch
			}
		}
		for _, t := range c.forgotten {
			if t.pid == pid {
				o.ProducerEpoch = t.epoch
			}
		}
		out = append(out, o)
	}
	return out
}

// DescribeTransaction is what the coordinator reports of txnID: its state,
// producer id and epoch.
func (c *Cluster) DescribeTransaction(txnID string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.txns[txnID]
	if t == nil {
		return "no state for it"
	}
	state := "Empty"
	if t.ongoing {
		state = "Ongoing"
	}
	return fmt.Sprintf("%s, producer %d epoch %d", state, t.pid, t.epoch)
}

// TimeOutAtCommit makes txnID's next commit come too late: the
// coordinator has aborted the transaction for its timeout (its markers
// written, the epoch bumped), as after a producer paused between its
// produce and its EndTxn for longer than transaction.timeout.ms. The
// EndTxn fails with INVALID_PRODUCER_EPOCH; the records it carried stay
// in the log, aborted.
func (c *Cluster) TimeOutAtCommit(txnID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.txns[txnID]; t != nil {
		t.timeOutAtEnd = true
		c.record("time_out_at_commit", "txn_id=%s", txnID)
	}
}

// AbortHanging aborts txnID's open transaction, as kafka-transactions.sh
// abort does, and bumps its epoch.
func (c *Cluster) AbortHanging(txnID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.txns[txnID]; t != nil && t.ongoing {
		c.endTxnLocked(t, AbortMarker, "admin_abort")
		t.epoch++
		t.hanging = false
		c.changedLocked()
	}
}

// expireTxnsLocked aborts transactions open past their timeout, as the
// coordinator's abort scan does, bumping the epoch so the holder is fenced.
func (c *Cluster) expireTxnsLocked() {
	for _, id := range sortedKeys(c.txns) {
		t := c.txns[id]
		if t.ongoing && !t.hanging && !c.clk.now.Before(t.started.Add(t.timeout)) {
			c.endTxnLocked(t, AbortMarker, "timeout")
			t.epoch++
			c.changedLocked()
		}
	}
}

// OpenTransactions lists the transactional ids with an open transaction.
func (c *Cluster) OpenTransactions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for _, id := range sortedKeys(c.txns) {
		if c.txns[id].ongoing {
			ids = append(ids, id)
		}
	}
	return ids
}

func containsTP(tps []store.TopicPartition, tp store.TopicPartition) bool {
	for _, x := range tps {
		if x == tp {
			return true
		}
	}
	return false
}

func cloneRecord(r wire.Record) wire.Record {
	out := wire.Record{Key: clone(r.Key), Value: clone(r.Value)}
	for _, h := range r.Headers {
		out.Headers = append(out.Headers, store.Header{Key: h.Key, Value: clone(h.Value)})
	}
	return out
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func errName(err error) string {
	if ke, ok := err.(*kerr.Error); ok {
		return ke.Message
	}
	return fmt.Sprint(err)
}
