package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/internal/readloop"
	"github.com/snapfence/snapfence/store/wire"
)

// Source implements backend.Link: a group-less consumer of its own for
// one recovery read: no group, no offset commits, since a committed offset
// would shorten the next recovery. The user's options come first, without
// their group options (userOpts), and what the read rests on after them,
// so that they cannot change it (last wins): the partition from its start,
// the isolation level, the control records.
func (p *partition) Source(_ context.Context, from int64) (readloop.Source, func(), error) {
	return p.b.newSource(p.snap, from, p.b.set.Mode == store.Transactional, p)
}

// newSource is a group-less reader of tp from from (0: the log start),
// read_committed or not; p is the partition whose recovery it is, if
// any.
func (b *Backend) newSource(snap store.TopicPartition, from int64, readCommitted bool, p *partition) (readloop.Source, func(), error) {
	level := kgo.ReadUncommitted()
	if readCommitted {
		level = kgo.ReadCommitted()
	}
	start := kgo.NewOffset().AtStart()
	at := start
	if from > 0 {
		at = kgo.NewOffset().At(from)
	}
	opts := append(b.cfg.clientOpts(), userOpts(b.cfg.ReaderOpts)...)
	opts = append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{snap.Topic: {snap.Partition: at}}),
		// An offset out of range (the log start moved past the
		// position) resumes at the start, never at the end.
		kgo.ConsumeStartOffset(start), kgo.ConsumeResetOffset(start),
		kgo.FetchIsolationLevel(level),
		// franz-go hands neither control records nor aborted data to
		// the caller by default, so a partition that ends in markers
		// never shows a record at target-1. Kept control records
		// carry the position over them.
		kgo.KeepControlRecords(),
		// A fetch session saves nothing on a reader of one partition, and
		// franz-go v1.22.3's Close ends a live session without holding off
		// the fetch in flight, whose answer updates it (a data race, seen
		// on kfake under the race detector): a reader closes often.
		kgo.DisableFetchSessions(),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka: reader of %s: %w", snap, err)
	}
	return &source{admin: b.admin, reader: cl, tp: snap, pos: from, p: p}, cl.Close, nil
}

type source struct {
	admin  *kgo.Client
	reader *kgo.Client
	tp     store.TopicPartition
	pos    int64
	// p is the partition whose recovery this is (nil for a standby's
	// follow, which has no producer of its own), and logged the hanging
	// transactions this read has logged.
	p      *partition
	logged map[hangingKey]bool
}

// HighWatermark lists the log end as a read_uncommitted reader sees it:
// the high watermark, not the last stable offset.
func (s *source) HighWatermark(ctx context.Context) (int64, error) {
	return listEnd(ctx, s.admin, s.tp, 0)
}

// LogStart lists the log start offset.
func (s *source) LogStart(ctx context.Context) (int64, error) {
	return listOffset(ctx, s.admin, s.tp, 0, -2)
}

// LastStable lists the end as a read_committed reader sees it.
func (s *source) LastStable(ctx context.Context) (int64, error) {
	return listEnd(ctx, s.admin, s.tp, 1)
}

func listEnd(ctx context.Context, cl *kgo.Client, tp store.TopicPartition, isolation int8) (int64, error) {
	return listOffset(ctx, cl, tp, isolation, -1)
}

// listOffset lists the latest (-1) or earliest (-2) offset of tp.
func listOffset(ctx context.Context, cl *kgo.Client, tp store.TopicPartition, isolation int8, timestamp int64) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = isolation
	t := kmsg.NewListOffsetsRequestTopic()
	t.Topic = tp.Topic
	p := kmsg.NewListOffsetsRequestTopicPartition()
	p.Partition, p.Timestamp = tp.Partition, timestamp
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("kafka: listing offset %d of %s: %w", timestamp, tp, err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rt.Topic == tp.Topic && rp.Partition == tp.Partition {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return 0, fmt.Errorf("kafka: listing the end offset of %s: %w", tp, err)
				}
				return rp.Offset, nil
			}
		}
	}
	return 0, fmt.Errorf("kafka: listing the end offset of %s: no answer for the partition", tp)
}

// Poll fetches once, waiting at most wait. The position moves over every
// record returned, control records included.
func (s *source) Poll(ctx context.Context, wait time.Duration) ([]readloop.Fetched, int64, error) {
	pctx, cancel := context.WithTimeout(ctx, max(wait, time.Millisecond))
	defer cancel()
	fetches := s.reader.PollFetches(pctx)
	if err := ctx.Err(); err != nil {
		return nil, s.pos, err
	}
	var out []readloop.Fetched
	var ferr error
	fetches.EachError(func(topic string, partition int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		if errors.Is(err, kerr.TopicAuthorizationFailed) {
			// Permanent: a retried recovery meets the same ACL.
			ferr = &store.ConfigError{Subject: fmt.Sprintf("snapshot topic %q", topic),
				Problem: fmt.Sprintf("the recovery of partition %d may not read it", partition),
				Fix:     fmt.Sprintf("grant the principal READ on the topic (kafka-acls.sh --operation Read --topic %s)", topic),
				Err:     err}
			return
		}
		ferr = fmt.Errorf("kafka: reading %s/%d: %w", topic, partition, err)
	})
	if ferr != nil {
		return nil, s.pos, ferr
	}
	fetches.EachRecord(func(r *kgo.Record) {
		s.pos = max(s.pos, r.Offset+1)
		if r.Attrs.IsControl() {
			return
		}
		w := wire.Record{Key: r.Key, Value: r.Value}
		for _, h := range r.Headers {
			w.Headers = append(w.Headers, store.Header{Key: h.Key, Value: h.Value})
		}
		out = append(out, readloop.Fetched{Offset: r.Offset, Record: w})
	})
	return out, s.pos, nil
}

// AbortedAcross implements backend.Link: one read_committed Fetch of the
// snapshot partition at at, to its leader, whose answer lists the aborted
// transactions that overlap what it returns (Kafka's aborted-transaction
// index: those whose abort marker is at or after at); one starting below
// at straddles it. franz-go's consumer uses that list to drop aborted
// records and does not pass it on, hence the request of its own.
func (p *partition) AbortedAcross(ctx context.Context, at int64) (int64, bool, error) {
	b := p.b
	details, err := b.adm.ListTopics(ctx, p.snap.Topic)
	if err != nil {
		return 0, false, fmt.Errorf("kafka: describing %s: %w", p.snap.Topic, err)
	}
	pd, ok := details[p.snap.Topic].Partitions[p.snap.Partition]
	if !ok || pd.Err != nil || pd.Leader < 0 {
		return 0, false, fmt.Errorf("kafka: %s has no leader (%v)", p.snap, pd.Err)
	}
	req := kmsg.NewPtrFetchRequest()
	// Kafka lists the aborted transactions overlapping the records it
	// returns; kfake only those whose marker the answer reaches, hence
	// room for more than one batch.
	const maxBytes = 64 << 10
	req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, 0, 1, maxBytes
	req.IsolationLevel, req.SessionEpoch = 1, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = p.snap.Topic, p.topic.ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p.snap.Partition, at, maxBytes
	rp.CurrentLeaderEpoch, rp.LastFetchedEpoch, rp.LogStartOffset = -1, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, b.admin.Broker(int(pd.Leader)))
	if err != nil {
		return 0, false, fmt.Errorf("kafka: fetching %s at %d: %w", p.snap, at, err)
	}
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			if rp.Partition != p.snap.Partition {
				continue
			}
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return 0, false, fmt.Errorf("kafka: fetching %s at %d: %w", p.snap, at, err)
			}
			for _, a := range rp.AbortedTransactions {
				if a.FirstOffset < at {
					return a.FirstOffset, true, nil
				}
			}
		}
	}
	return 0, false, nil
}
