package kafkatest

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadTo polls cl, a client consuming one partition from its start, until
// its position passes end, and calls fn with every record below end
// (control records too, if cl keeps them). A poll that fails, or that
// fetches nothing for a minute, ends the read with its error.
func ReadTo(cl *kgo.Client, end int64, fn func(*kgo.Record)) error {
	for pos := int64(0); pos < end; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		fs := cl.PollFetches(ctx)
		cancel()
		if err := fs.Err0(); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			pos = max(pos, r.Offset+1)
			if r.Offset < end {
				fn(r)
			}
		})
	}
	return nil
}
