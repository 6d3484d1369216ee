package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/internal/kafkatopic"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/internal/backend"
	"github.com/snapfence/snapfence/store/internal/groupcommit"
	"github.com/snapfence/snapfence/store/wire"
)

// partition is one acquired input partition's link to the cluster
// (backend.Link): its transactional producer, the raw requests of its
// transactions, its plain writes and offset commits, its recovery reader.
type partition struct {
	b       *Backend
	input   store.TopicPartition
	inputID [16]byte
	snap    store.TopicPartition
	topic   backend.SnapshotTopic

	mu   sync.Mutex
	prod *kgo.Client // Transactional: this partition's producer
	// pid and epoch are what the takeover's InitProducerID returned (-1
	// before it, and for a standby's link, which takes nothing over):
	// the partition's own lineage, for AbortHangingTransactions.
	pid   int64
	epoch int16
	// fatal is a producer error the client cannot recover from (fenced,
	// invalid epoch or state, a timeout abort). The partition stays
	// fenced; a new Acquire replaces the client under the same
	// transactional.id. Re-initialising here instead would bump the epoch
	// and could fence the partition's rightful new owner.
	fatal error
}

var _ backend.Link = (*partition)(nil)

// Snapshots implements backend.Link.
func (p *partition) Snapshots() backend.SnapshotTopic { return p.topic }

// Release implements backend.Link: it closes the producer, once.
func (p *partition) Release() {
	p.mu.Lock()
	prod := p.prod
	p.prod = nil
	p.mu.Unlock()
	if prod != nil {
		prod.Close()
	}
}

// Takeover implements backend.Link: it creates the partition's
// transactional producer and initialises its producer id. franz-go
// retries CONCURRENT_TRANSACTIONS while the broker aborts the previous
// owner's transaction, so this returns once that abort is done, or fails
// with a *TakeoverStalledError after RecoveryStallTimeout.
func (p *partition) Takeover(ctx context.Context, txnID string) error {
	cfg := &p.b.cfg
	// The batch cap goes first: a user's own ProducerBatchMaxBytes
	// (ClientOpts) overrides it.
	opts := append(append([]kgo.Opt{kgo.ProducerBatchMaxBytesFn(p.b.outputLimits.BatchCap)}, cfg.clientOpts()...),
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(p.b.set.TransactionTimeout),
		// Record.Partition is honoured only with the manual partitioner:
		// snapshot partition N must get input partition N's keys.
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(p.snap.Topic),
		// Transactions force acks=all and idempotence; say so.
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)
	prod, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka: %s: producer %q: %w", p.input, txnID, err)
	}
	// Bounded: a coordinator that never finishes an earlier transaction
	// of the id (one that lost the tail of __transaction_state can leave
	// it in PrepareCommit, its markers refused) answers
	// CONCURRENT_TRANSACTIONS, which franz-go retries for ever.
	stall := p.b.set.RecoveryStallTimeout
	ictx, cancel := context.WithTimeout(ctx, stall)
	pid, epoch, err := prod.ProducerID(ictx)
	cancel()
	if err != nil {
		prod.Close()
		if ctx.Err() == nil && errors.Is(ictx.Err(), context.DeadlineExceeded) {
			return p.b.takeoverStalled(ctx, p.input, p.snap, txnID, stall, err)
		}
		if errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
			return p.b.txnIDRefused(txnID, "the takeover of "+p.input.String(), err)
		}
		return fmt.Errorf("kafka: %s: initialising transactional.id %q (the takeover): %w", p.input, txnID, err)
	}
	p.mu.Lock()
	old := p.prod
	p.prod, p.pid, p.epoch = prod, pid, epoch
	p.mu.Unlock()
	if old != nil {
		old.Close() // a second takeover (renew)
	}
	return nil
}

// Claim implements backend.Link: a transaction of the marker alone, with
// no offset commit.
func (p *partition) Claim(ctx context.Context, marker wire.Record, id store.GroupIdentity) error {
	p.mu.Lock()
	prod := p.prod
	p.mu.Unlock()
	if prod == nil {
		return store.ErrClosed
	}
	err := prod.BeginTransaction()
	if err == nil {
		if err = kafkatopic.MarkRefused(prod.ProduceSync(ctx, p.record(marker)).FirstErr()); err == nil {
			// Often the producer's first records to the snapshot topic:
			// see awaitPublished.
			err = p.awaitPublished(ctx, prod, p.snap)
		}
		if err != nil {
			if aerr := prod.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
				err = errors.Join(err, fmt.Errorf("aborting: %w", aerr))
			}
		} else {
			err = prod.EndTransaction(ctx, kgo.TryCommit)
		}
	}
	switch {
	case err == nil:
		return nil
	case isFatal(err):
		return p.fenced(id, err)
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return p.writeRefused(groupcommit.Batch{}, err)
	}
	return fmt.Errorf("kafka: %s: the first transaction after the takeover: %w", p.input, err)
}

// renew takes the partition over again after the store aborted a
// transaction of its own lineage that the first takeover could not end:
// the coordinator that forgot it may have handed out the same epoch
// again, and Kafka takes a write of that epoch whose sequence the aborted
// transaction already used as a duplicate, acknowledging it without
// writing it. A new InitProducerID bumps the epoch, which starts the
// sequences over. A renewal that fails leaves the partition's producer
// unusable: its next transaction fails, and the partition is acquired
// again.
func (p *partition) renew(ctx context.Context, txnID string) {
	if err := p.Takeover(ctx, txnID); err != nil {
		p.mu.Lock()
		if p.fatal == nil {
			p.fatal = fmt.Errorf("kafka: %s: taking over again after aborting a hanging transaction: %w", p.input, err)
		}
		p.mu.Unlock()
	}
}

// Transact implements backend.Link: one transaction of the group commit,
// with id read live and checked by the skeleton (I1, I4).
func (p *partition) Transact(ctx context.Context, batch groupcommit.Batch, id store.GroupIdentity) (int64, error) {
	p.mu.Lock()
	prod, fatal := p.prod, p.fatal
	p.mu.Unlock()
	if fatal != nil {
		return -1, p.fenced(id, fatal)
	}
	if prod == nil {
		return -1, store.ErrClosed
	}
	// The output topics are checked before the transaction begins: a
	// missing one (a *store.ConfigError) opens and aborts nothing.
	counts, err := p.b.outputCounts(ctx, batch.Outputs)
	if err != nil {
		return -1, fmt.Errorf("kafka: %s: %w", p.input, err)
	}
	if err := p.b.keyless(p.input, batch.Outputs, counts); err != nil {
		return -1, err
	}
	end, err := p.transact(ctx, prod, batch, id, counts)
	if err == nil {
		return end, nil
	}
	if isFatal(err) {
		p.mu.Lock()
		p.fatal = err
		p.mu.Unlock()
		p.b.set.Logger.Warn("snapshot producer fenced; the partition must be re-acquired",
			"input", p.input.String(), "transactional_id", p.b.TransactionalID(p.input), "err", err)
	}
	var fe *store.FencedError
	if errors.As(err, &fe) {
		return -1, fe
	}
	if isFatal(err) {
		return -1, p.fenced(id, err)
	}
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		// Permanent: a replayed transaction meets the same ACLs.
		return -1, p.writeRefused(batch, err)
	}
	return -1, fmt.Errorf("kafka: %s: transaction failed: %w", p.input, err)
}

// writeRefused is the *store.ConfigError of a transaction whose records
// the broker refused with TOPIC_AUTHORIZATION_FAILED. A broker that takes
// the partitions in the Produce itself (KIP-890 part 2) refuses each topic
// on its own, and the error names the refused ones; one answering an
// AddPartitionsToTxn fails every record of the transaction with the same
// code, and the error names them all, saying it could not tell which.
func (p *partition) writeRefused(batch groupcommit.Batch, err error) error {
	topics := []string{p.snap.Topic}
	for _, o := range batch.Outputs {
		if !slices.Contains(topics, o.Topic) {
			topics = append(topics, o.Topic)
		}
	}
	var re *refusedError
	if len(topics) == 1 {
		re = &refusedError{topics: topics}
	} else if !errors.As(err, &re) || len(re.topics) == 0 || len(re.topics) == len(topics) {
		re = nil
	}
	if re != nil {
		subject := fmt.Sprintf("topic %q", re.topics[0])
		if len(re.topics) > 1 {
			subject = fmt.Sprintf("topics %q", re.topics)
		}
		problem := fmt.Sprintf("the snapshot producer of %s may not write to it (WRITE refused)", p.input)
		if rest := without(topics, re.topics); len(rest) > 0 {
			problem += fmt.Sprintf("; the transaction, which also wrote %q, was aborted", rest)
		}
		return &store.ConfigError{Subject: subject, Problem: problem,
			Fix: fmt.Sprintf("grant the principal WRITE on %s (kafka-acls.sh --add --allow-principal User:NAME --operation Write --topic %s)", subject, strings.Join(re.topics, " --topic ")),
			Err: err}
	}
	return &store.ConfigError{Subject: fmt.Sprintf("topics %q", topics),
		Problem: fmt.Sprintf("the snapshot producer of %s may not write the transaction's records: WRITE is refused on at least one of them, and the broker did not say which", p.input),
		Fix:     fmt.Sprintf("grant the principal WRITE on the snapshot topic %q and on every output topic (kafka-acls.sh --add --allow-principal User:NAME --operation Write --topic T)", p.snap.Topic),
		Err:     err}
}

// without is the topics of all that are not in drop.
func without(all, drop []string) []string {
	var out []string
	for _, t := range all {
		if !slices.Contains(drop, t) {
			out = append(out, t)
		}
	}
	return out
}

// refusedError is a produce's TOPIC_AUTHORIZATION_FAILED with the topics
// whose records carried it, when some of the transaction's topics' records
// did not.
type refusedError struct {
	topics []string
	err    error
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("WRITE refused on %q: %v", e.topics, e.err)
}

func (e *refusedError) Unwrap() error { return e.err }

// refusedTopics is first, or, when it is TOPIC_AUTHORIZATION_FAILED, a
// *refusedError naming the topics whose records were refused, in the
// order the records were produced.
func refusedTopics(results kgo.ProduceResults, first error) error {
	if !errors.Is(first, kerr.TopicAuthorizationFailed) {
		return first
	}
	var refused []string
	for _, r := range results {
		if errors.Is(r.Err, kerr.TopicAuthorizationFailed) && !slices.Contains(refused, r.Record.Topic) {
			refused = append(refused, r.Record.Topic)
		}
	}
	return &refusedError{topics: refused, err: first}
}

// refusedOutputs is the *store.OutputRefusedError of the outputs (an
// exactly-once batch's records, in its order) that the broker refused for
// good, by results (which come in no order), or nil if it refused none.
func (p *partition) refusedOutputs(results kgo.ProduceResults, outputs []*kgo.Record) error {
	refused := map[*kgo.Record]error{}
	for _, r := range results {
		if kafkatopic.RefusedForGood(r.Err) {
			refused[r.Record] = r.Err
		}
	}
	var re *store.OutputRefusedError
	for i, r := range outputs {
		err, ok := refused[r]
		if !ok {
			continue
		}
		if re == nil {
			re = &store.OutputRefusedError{Input: p.input, Topic: r.Topic, Partition: r.Partition, Key: r.Key, Err: kafkatopic.MarkRefused(err)}
		}
		re.Outputs = append(re.Outputs, i)
	}
	if re == nil {
		return nil
	}
	return re
}

func (p *partition) fenced(id store.GroupIdentity, reason error) *store.FencedError {
	fe := &store.FencedError{Input: p.input, Identity: id, Reason: reason}
	if errors.Is(reason, kerr.ProducerFenced) || errors.Is(reason, kerr.InvalidProducerEpoch) {
		fe.TransactionalID = p.b.TransactionalID(p.input)
	}
	return fe
}

// transact is one transaction: the fenced offset commit first, then the
// records (a marker if there are none), then the commit. Any failure
// aborts.
//
// The offset commit goes first for speed and for hygiene. Under KIP-890
// part 2 (transaction.version 2) the first request of a transaction that
// follows another too closely, while the previous one's markers are still
// being written, is answered CONCURRENT_TRANSACTIONS. A Produce then waits
// out the broker's own retry (add.partitions.to.txn.retry.backoff.ms,
// 20 ms by default, read-only); our TxnOffsetCommit is retried here after
// about a millisecond instead, and the Produce that follows joins an open
// transaction at once: on Kafka 4.3 a one-at-a-time transaction takes
// ~3 ms, not the ~20 ms of the broker's retry (docs/benchmarks.md). And a
// stale owner learns it is fenced before it has written anything: its
// aborted records never reach the snapshot log.
func (p *partition) transact(ctx context.Context, prod *kgo.Client, batch groupcommit.Batch, id store.GroupIdentity, counts map[string]int) (end int64, err error) {
	if err := prod.BeginTransaction(); err != nil {
		return -1, err
	}
	produced := false
	err = p.commitOffset(ctx, prod, batch, id)
	if err == nil {
		produced = true
		end, err = p.produce(ctx, prod, batch, id, counts)
	}
	if err != nil {
		if !produced {
			// The offset commit may have opened the transaction on the
			// broker, but franz-go sends EndTxn only after a produce
			// attempt; a marker (aborted with the rest) makes it send one.
			// Otherwise the broker's transaction would stay open and the
			// next one, same epoch, would join it.
			_, _ = p.produce(ctx, prod, batch, id, counts)
		}
		if aerr := prod.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
			return -1, errors.Join(err, fmt.Errorf("aborting: %w", aerr))
		}
		return -1, err
	}
	return end, prod.EndTransaction(ctx, kgo.TryCommit)
}

// produce writes the batch's records, or an offset marker if it has none;
// counts are the partition counts of the outputs' topics (outputCounts).
func (p *partition) produce(ctx context.Context, prod *kgo.Client, batch groupcommit.Batch, id store.GroupIdentity, counts map[string]int) (end int64, err error) {
	var rb recordBuilder
	recs := rb.start(len(batch.Writes)+len(batch.Outputs), len(batch.Writes)*4+outputHeaders(batch.Outputs))
	for _, w := range batch.Writes {
		recs = append(recs, rb.record(p.snap, wire.EncodeSnapshot(p.b.set.Application, w)))
	}
	for _, o := range batch.Outputs {
		tp := store.TopicPartition{Topic: o.Topic, Partition: store.OutputPartition(o.Key, counts[o.Topic])}
		recs = append(recs, rb.record(tp, wire.Record{Key: o.Key, Value: o.Value, Headers: o.Headers}))
	}
	if len(recs) == 0 {
		// franz-go sends no EndTxn for a transaction in which it produced
		// nothing, although our raw TxnOffsetCommit opened it on the
		// broker; a raw EndTxn of our own would bump the epoch behind the
		// client's back. A marker record keeps the client in step.
		recs = append(recs, p.record(wire.EncodeOffsetMarker(p.b.set.Application, batch.Offset, id)))
	}
	results := prod.ProduceSync(ctx, recs...)
	if err := results.FirstErr(); err != nil {
		if re := p.refusedOutputs(results, recs[len(batch.Writes):len(batch.Writes)+len(batch.Outputs)]); re != nil {
			return -1, re
		}
		return -1, kafkatopic.MarkRefused(refusedTopics(results, err))
	}
	end = -1
	for _, r := range recs {
		if r.Topic == p.snap.Topic && r.Partition == p.snap.Partition {
			end = max(end, r.Offset+1)
		}
	}
	// Every partition the transaction wrote, and only those: the client
	// learns the metadata of no other topic, so a batch of outputs alone
	// must not wait for the snapshot partition.
	var touched []store.TopicPartition
	for _, r := range recs {
		if tp := (store.TopicPartition{Topic: r.Topic, Partition: r.Partition}); !slices.Contains(touched, tp) {
			touched = append(touched, tp)
			if err := p.awaitPublished(ctx, prod, tp); err != nil {
				return -1, err
			}
		}
	}
	return end, nil
}

// awaitPublished returns once prod lists tp, a partition the transaction
// wrote (the snapshot partition, or an exactly-once batch's output
// partition), among its topic's partitions, where EndTransaction looks for
// the partitions of the transaction.
//
// franz-go v1.22.3 sends a client's first records to a topic as soon as
// the topic's metadata arrives, and publishes the topic's partitions to
// the rest of the client only after: storePartitionsUpdate
// (kgo/topics_and_partitions.go) hands the waiting records to their
// partitions (line 471), whose sink may send them at once, before its
// deferred l.v.Store(lv) (line 414). In between, ProduceSync can return,
// and EndTransaction, which finds the transaction's partitions by walking
// the published ones (kgo/txn.go:821-828), finds none; a produce having
// been attempted, it aborts the transaction it was asked to commit and
// returns nil (txn.go:837-857). Our producer's first transaction is its
// first produce to the snapshot topic, so every acquisition meets the
// window, for as long as the metadata goroutine is descheduled (under the
// race detector about one kfake world run in a hundred: acknowledged
// writes lost). The sequence reset that follows the EndTxn answer
// (kgo/producer.go:1123-1131) misses the partition too, so the next
// transaction's batch carries the old sequence under the new epoch and is
// refused with OUT_OF_ORDER_SEQUENCE_NUMBER.
//
// franz-go says nothing when it publishes, so this polls, with
// retryConcurrent's backoff, for at most the transaction timeout (the
// broker aborts the transaction then). A published partition without a
// leader also reads as leader -1: we wait for its leader then, which a
// commit does not need, but the leader has just acknowledged the records.
// TestFranzGoCommitEndsAsAnAbortBeforeItPublishesANewTopic pins franz-go's
// behaviour; when it fails, this can go. Output topics meet the same
// window at their first produce, and are awaited the same way.
func (p *partition) awaitPublished(ctx context.Context, prod *kgo.Client, tp store.TopicPartition) error {
	ctx, cancel := context.WithTimeout(ctx, p.b.set.TransactionTimeout)
	defer cancel()
	backoff := concurrentTxnBackoff
	for logged := false; ; logged = true {
		if leader, _, _ := prod.PartitionLeader(tp.Topic, tp.Partition); leader >= 0 {
			return nil
		}
		if !logged {
			p.b.set.Logger.Debug(msgAwaitPublished, "input", p.input.String(), "partition", tp.String())
		}
		if err := pause(ctx, &backoff, concurrentTxnBackoffMax); err != nil {
			return fmt.Errorf("%s: %w", msgAwaitPublished, err)
		}
	}
}

const msgAwaitPublished = "waiting for the producer to publish a partition of the transaction before ending it"

// Backoff for a transactional request answered CONCURRENT_TRANSACTIONS:
// the previous transaction's markers are being written, which on a healthy
// cluster takes a millisecond or two. Doubling from 1 ms to 32 ms, retried
// until the context ends (franz-go's own loop is likewise ctx-bounded: the
// condition can last as long as a marker drain).
const (
	concurrentTxnBackoff    = time.Millisecond
	concurrentTxnBackoffMax = 32 * time.Millisecond
)

// retryConcurrent runs send until it returns anything but
// CONCURRENT_TRANSACTIONS.
func retryConcurrent(ctx context.Context, send func() error) error {
	backoff := concurrentTxnBackoff
	for {
		err := send()
		if !errors.Is(err, kerr.ConcurrentTransactions) {
			return err
		}
		if cerr := pause(ctx, &backoff, concurrentTxnBackoffMax); cerr != nil {
			return errors.Join(err, cerr)
		}
	}
}

// pause waits out *backoff and doubles it (up to most), or returns the
// context's cause if it ends first.
func pause(ctx context.Context, backoff *time.Duration, most time.Duration) error {
	t := time.NewTimer(*backoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
	}
	*backoff = min(2**backoff, most)
	return nil
}

// commitOffset is the fenced transactional offset commit of batch.Offset
// with identity id (AddOffsetsToTxn first without transaction.version 2).
func (p *partition) commitOffset(ctx context.Context, prod *kgo.Client, batch groupcommit.Batch, id store.GroupIdentity) error {
	// KIP-890: every EndTxn bumps the epoch, so read it for every
	// transaction.
	pid, epoch, err := prod.ProducerID(ctx)
	if err != nil {
		return err
	}
	txnID := p.b.TransactionalID(p.input)
	if !p.b.tv2 {
		if err := addOffsetsToTxn(ctx, prod, txnID, pid, epoch, id.Group); err != nil {
			return err
		}
	}
	req := p.txnOffsetCommitRequest(txnID, pid, epoch, batch, id)
	return retryConcurrent(ctx, func() error {
		resp, err := req.RequestWith(ctx, prod)
		if err != nil {
			return err
		}
		return p.txnOffsetCommitError(resp, id)
	})
}

// addOffsetsToTxn adds group's offsets partition to the producer's open
// transaction, as a transaction before transaction.version 2 must before
// its TxnOffsetCommit.
func addOffsetsToTxn(ctx context.Context, prod *kgo.Client, txnID string, pid int64, epoch int16, group string) error {
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = txnID, pid, epoch, group
	return retryConcurrent(ctx, func() error {
		resp, err := add.RequestWith(ctx, prod)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	})
}

// txnOffsetCommitRequest is the TxnOffsetCommit of batch.Offset for the
// input partition, with identity id, in the producer's transaction.
func (p *partition) txnOffsetCommitRequest(txnID string, pid int64, epoch int16, batch groupcommit.Batch, id store.GroupIdentity) *kmsg.TxnOffsetCommitRequest {
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = txnID, id.Group, pid, epoch
	req.MemberID, req.Generation = id.MemberID, id.Generation
	if id.InstanceID != "" {
		req.InstanceID = kmsg.StringPtr(id.InstanceID)
	}
	t := kmsg.NewTxnOffsetCommitRequestTopic()
	// v6 (KIP-1319) addresses the topic by id; without it the broker
	// answers UNKNOWN_TOPIC_ID. Older versions use the name.
	t.Topic, t.TopicID = p.input.Topic, p.inputID
	pp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	pp.Partition, pp.Offset, pp.LeaderEpoch = p.input.Partition, batch.Offset, -1
	pp.Metadata = &p.b.commitMetadata
	t.Partitions = append(t.Partitions, pp)
	req.Topics = append(req.Topics, t)
	return req
}

// txnOffsetCommitError is the error of a TxnOffsetCommit's answer resp:
// a store.FencedError for a partition's error code, unless the code is
// retried or fences the producer itself.
func (p *partition) txnOffsetCommitError(resp *kmsg.TxnOffsetCommitResponse, id store.GroupIdentity) error {
	if len(resp.Topics) == 0 || len(resp.Topics[0].Partitions) == 0 {
		return fmt.Errorf("TxnOffsetCommit answered for no partition")
	}
	// The fence: per-partition error codes arrive with a nil Go
	// error. Committing after ignoring one publishes the stale
	// snapshot. (franz-go itself retries the coordinator-move codes.)
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				if errors.Is(err, kerr.ConcurrentTransactions) || isFatal(err) {
					// Retried, or the producer itself is fenced
					// (exec names the transactional.id).
					return err
				}
				return &store.FencedError{Input: p.input, Identity: id, Reason: err}
			}
		}
	}
	return nil
}

// record is r as a record of the snapshot partition.
func (p *partition) record(r wire.Record) *kgo.Record { return kgoRecord(p.snap, r) }

// kgoRecord is r as a record of tp.
func kgoRecord(tp store.TopicPartition, r wire.Record) *kgo.Record {
	kr := &kgo.Record{Topic: tp.Topic, Partition: tp.Partition, Key: r.Key, Value: r.Value}
	if len(r.Headers) > 0 {
		kr.Headers = make([]kgo.RecordHeader, 0, len(r.Headers))
	}
	for _, h := range r.Headers {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return kr
}

// recordBuilder makes a transaction's records with one allocation for
// the records and one for their headers, not one a record and a header:
// a transaction carries up to MaxTransactionRecords of them.
type recordBuilder struct {
	recs []kgo.Record
	hs   []kgo.RecordHeader
}

// start sizes the builder for n records with headers headers in all, and
// returns the slice the caller appends the records to.
func (b *recordBuilder) start(n, headers int) []*kgo.Record {
	b.recs = make([]kgo.Record, 0, n)
	b.hs = make([]kgo.RecordHeader, 0, headers)
	return make([]*kgo.Record, 0, max(n, 1))
}

// record is r as a record of tp, from the builder's memory while it has
// room (kgoRecord's after).
func (b *recordBuilder) record(tp store.TopicPartition, r wire.Record) *kgo.Record {
	if len(b.recs) == cap(b.recs) || cap(b.hs)-len(b.hs) < len(r.Headers) {
		return kgoRecord(tp, r)
	}
	from := len(b.hs)
	for _, h := range r.Headers {
		b.hs = append(b.hs, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	// Field by field into the zeroed slab: appending a kgo.Record literal
	// copies every field through the write barrier, about twice the cost.
	b.recs = b.recs[:len(b.recs)+1]
	kr := &b.recs[len(b.recs)-1]
	kr.Topic, kr.Partition, kr.Key, kr.Value = tp.Topic, tp.Partition, r.Key, r.Value
	if len(r.Headers) > 0 {
		kr.Headers = b.hs[from:len(b.hs):len(b.hs)] // capped: an append by the client copies
	}
	return kr
}

// outputHeaders counts the outputs' headers.
func outputHeaders(outs []store.Output) int {
	n := 0
	for _, o := range outs {
		n += len(o.Headers)
	}
	return n
}

// isFatal reports producer errors after which franz-go's client cannot
// continue: it must be replaced by a new client with the same
// transactional.id.
func isFatal(err error) bool {
	for _, fatal := range []error{
		kerr.ProducerFenced, kerr.InvalidProducerEpoch, kerr.InvalidTxnState,
		kerr.InvalidProducerIDMapping, kerr.TransactionalIDAuthorizationFailed,
	} {
		if errors.Is(err, fatal) {
			return true
		}
	}
	return false
}
