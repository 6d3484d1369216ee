package kafka

import (
	"context"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/internal/kafkatopic"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// Produce implements backend.Link (Plain): every record goes straight to
// the backend's shared producer, which batches across writes and
// partitions and keeps the order of one partition's records; it returns
// once every record is acknowledged or failed.
func (p *partition) Produce(ctx context.Context, recs []wire.Record) []error {
	// Not ProduceSync: its results come in the order the promises fire.
	errs := make([]error, len(recs))
	var wg sync.WaitGroup
	wg.Add(len(recs))
	for i, r := range recs {
		p.b.plain.Produce(ctx, p.record(r), func(_ *kgo.Record, err error) {
			errs[i] = kafkatopic.MarkRefused(err)
			wg.Done()
		})
	}
	wg.Wait()
	return errs
}

// CommitOffset implements backend.Link (Plain): a plain OffsetCommit
// through the group with id, checked by the skeleton (I4), and no binding
// to the writes.
func (p *partition) CommitOffset(ctx context.Context, id store.GroupIdentity, offset int64) error {
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
