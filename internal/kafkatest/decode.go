package kafkatest

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// DecodeRecord is wire.DecodeRecord of r, a record fetched from a
// snapshot partition of topic: the readers of snapshot topics outside the
// store (the tools' verifiers, the test worlds' checkers) decode what
// they fetch as recovery does.
func DecodeRecord(topic string, r *kgo.Record) (store.Snapshot, wire.RecordKind, error) {
	wr := wire.Record{Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		wr.Headers = append(wr.Headers, store.Header{Key: h.Key, Value: h.Value})
	}
	return wire.DecodeRecord(store.TopicPartition{Topic: topic, Partition: r.Partition}, r.Offset, wr)
}
