package kafkatest

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/store"
)

// DecodeRecord is store.DecodeRecord of r, a record fetched from a
// snapshot partition of topic: the readers of snapshot topics outside the
// store (the tools' verifiers, the test worlds' checkers) decode what
// they fetch as recovery does.
func DecodeRecord(topic string, r *kgo.Record) (store.Snapshot, store.RecordKind, error) {
	wr := store.WireRecord{Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		wr.Headers = append(wr.Headers, store.Header{Key: h.Key, Value: h.Value})
	}
	return store.DecodeRecord(store.TopicPartition{Topic: topic, Partition: r.Partition}, r.Offset, wr)
}
