package kafka

import (
	"context"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/store"
)

// plainPath is the baseline write path: every write goes straight to the
// backend's shared producer, which batches across writes and partitions,
// and the offset is a plain group commit with no binding to the writes.
// Nothing queues here: this is the non-transactional producer the spec
// measures against and the one that reproduces kafka-flow#732.
type plainPath struct {
	p *partition
	// inflight is held shared by every write in flight and exclusively by
	// a commit, so an offset commit follows the writes issued before it
	// (I2 holds in Plain mode too; it is the fence that is missing).
	inflight sync.RWMutex

	mu        sync.Mutex
	staged    int64
	committed int64
	closed    bool
}

func newPlainPath(p *partition, assigned int64) *plainPath {
	return &plainPath{p: p, staged: assigned, committed: assigned}
}

// Pending is 0: Plain writes go straight to the producer.
func (w *plainPath) Pending() int { return 0 }

// WriteBatch produces every snapshot, in order, then awaits them all: the
// shared producer keeps the order of one partition's records, so they land
// in the log in the order given. The in-flight lock is held shared across
// the whole batch, so a Commit issued after WriteBatch was called follows
// every write of the batch (I2), as it follows single writes. Each write
// is observed as a Write's is, once all have landed.
func (w *plainPath) WriteBatch(ctx context.Context, snaps []store.Snapshot) []error {
	p := w.p
	errs := make([]error, len(snaps))
	w.inflight.RLock()
	defer w.inflight.RUnlock()
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	start := p.b.cfg.Now()
	done := make([]chan error, len(snaps))
	for i, s := range snaps {
		if err := store.CheckWrite(p.input, s, p.b.cfg.MaxValueBytes); err != nil {
			errs[i] = err
			continue
		}
		if closed {
			errs[i] = store.ErrClosed
			continue
		}
		ch := make(chan error, 1)
		done[i] = ch
		p.b.plain.Produce(ctx, p.record(store.EncodeSnapshot(s)), func(_ *kgo.Record, err error) { ch <- err })
	}
	for i, ch := range done {
		if ch == nil {
			continue
		}
		if err := <-ch; err != nil {
			errs[i] = fmt.Errorf("kafka: %s: write: %w", p.input, err)
		}
	}
	dur, committed := p.b.cfg.Now().Sub(start), w.Committed()
	for i, s := range snaps {
		if done[i] != nil {
			w.observe(store.TransactionEvent{Input: p.input, Writes: []store.Snapshot{s}, Offset: committed, Err: errs[i], Duration: dur})
		}
	}
	return errs
}

func (w *plainPath) Committed() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.committed
}

// Commit stages offset (the staged offset never moves back) and commits
// the staged offset through the group, once the writes in flight have
// landed.
func (w *plainPath) Commit(ctx context.Context, offset int64) error {
	p := w.p
	w.inflight.Lock()
	defer w.inflight.Unlock()
	w.mu.Lock()
	w.staged = max(w.staged, offset)
	offset, closed := w.staged, w.closed
	w.mu.Unlock()
	if closed {
		return store.ErrClosed
	}
	start := p.b.cfg.Now()
	id := p.identity.CurrentIdentity()
	err := w.commit(ctx, id, offset)
	if err == nil {
		w.mu.Lock()
		w.committed = max(w.committed, offset)
		w.mu.Unlock()
	}
	w.observe(store.TransactionEvent{Input: p.input, Offset: offset, OffsetAdvanced: true, Identity: id, Err: err,
		Duration: p.b.cfg.Now().Sub(start)})
	return err
}

func (w *plainPath) commit(ctx context.Context, id store.GroupIdentity, offset int64) error {
	p := w.p
	if !id.Valid() {
		return &store.MissingIdentityError{Input: p.input, Identity: id}
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.MemberID, req.Generation = id.Group, id.MemberID, id.Generation
	if id.InstanceID != "" {
		req.InstanceID = kmsg.StringPtr(id.InstanceID)
	}
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic, t.TopicID = p.input.Topic, p.inputID // v10+ addresses the topic by id
	pp := kmsg.NewOffsetCommitRequestTopicPartition()
	pp.Partition, pp.Offset, pp.LeaderEpoch = p.input.Partition, offset, -1
	t.Partitions = append(t.Partitions, pp)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, p.b.admin)
	if err != nil {
		return fmt.Errorf("kafka: %s: offset commit: %w", p.input, err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return &store.FencedError{Input: p.input, Identity: id, Reason: err}
			}
		}
	}
	return nil
}

func (w *plainPath) observe(e store.TransactionEvent) {
	if o := w.p.b.cfg.Observer; o != nil {
		o.OnTransaction(e)
	}
}

// Close refuses new writes and waits for those in flight.
func (w *plainPath) Close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.inflight.Lock()
	defer w.inflight.Unlock()
}
