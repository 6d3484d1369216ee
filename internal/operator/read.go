package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// StallTimeout bounds a read that stops making progress short of the end
// it captured (a partition without a leader, a log cut below it).
const StallTimeout = time.Minute

// record is a snapshot-partition record as read.
type record struct {
	offset int64
	r      wire.Record
}

// readPartition reads tp from its start to the end it has when the read
// begins (the last stable offset read_committed, the high watermark
// read_uncommitted), giving each record to fn in log order. Records of
// aborted transactions are not read read_committed; read_uncommitted
// reads them. Control records are read (so that a log ending in a
// transaction's marker is read to its end) but not given to fn.
func (tool *Tool) readPartition(ctx context.Context, tp store.TopicPartition, committed bool, fn func(record) error) error {
	var ends map[int32]int64
	lo, err := tool.adm.ListStartOffsets(ctx, tp.Topic)
	if err != nil {
		return fmt.Errorf("listing the start of %s: %w", tp, err)
	}
	hi, err := tool.adm.ListEndOffsets(ctx, tp.Topic)
	if committed {
		hi, err = tool.adm.ListCommittedOffsets(ctx, tp.Topic)
	}
	if err != nil {
		return fmt.Errorf("listing the end of %s: %w", tp, err)
	}
	ends = map[int32]int64{}
	s, ok1 := lo.Lookup(tp.Topic, tp.Partition)
	e, ok2 := hi.Lookup(tp.Topic, tp.Partition)
	if !ok1 || !ok2 || s.Err != nil || e.Err != nil {
		return fmt.Errorf("partition %s: %w", tp, ErrTopicMissing)
	}
	ends[tp.Partition] = e.Offset
	if s.Offset >= e.Offset {
		return nil
	}
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	opts := append(tool.conn.clientOpts(), kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{tp.Topic: {tp.Partition: kgo.NewOffset().At(s.Offset)}}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	end := e.Offset
	pos := s.Offset
	for pos < end {
		pctx, cancel := context.WithTimeout(ctx, StallTimeout)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		progressed := false
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				ferr = err
			}
		})
		if ferr != nil {
			return fmt.Errorf("reading %s: %w", tp, ferr)
		}
		for _, r := range fs.Records() {
			if r.Offset >= end {
				pos = end
				break
			}
			pos, progressed = r.Offset+1, true
			if r.Attrs.IsControl() {
				continue
			}
			rec := record{offset: r.Offset, r: wire.Record{Key: r.Key, Value: r.Value, Headers: headers(r.Headers)}}
			if err := fn(rec); err != nil {
				return err
			}
		}
		if !progressed {
			return fmt.Errorf("reading %s: no progress for %v at offset %d, short of %d", tp, StallTimeout, pos, end)
		}
	}
	return nil
}

func headers(hs []kgo.RecordHeader) []store.Header {
	out := make([]store.Header, len(hs))
	for i, h := range hs {
		out[i] = store.Header{Key: h.Key, Value: h.Value}
	}
	return out
}
