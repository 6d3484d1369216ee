package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/kafkatopic"
)

// CreateTopicTimeout bounds how long CreateTopic waits for a topic to be
// served, unless its context ends first.
const CreateTopicTimeout = kafkatopic.Timeout

// CreateTopic creates a topic and returns once every partition of it is
// served: its leader answers ListOffsets for it without an error.
// partitions or replicationFactor -1 take the broker's default; configs
// are topic configs such as "cleanup.policy". A topic that already exists
// is not an error: CreateTopic waits until it is served all the same (and
// does not compare it with the arguments).
//
// Why it waits: a broker acknowledges CreateTopics once the controller has
// committed the topic, and brokers serve its partitions a moment later. A
// request in between fails with UNKNOWN_TOPIC_OR_PARTITION, and franz-go
// returns that from a ListOffsets (kadm.ListEndOffsets and the like)
// without a retry when the metadata it sent the request by is younger
// than a second, as it is on a client that just fetched it. And a
// client that asked about the topic before creating it (as a check that it
// exists does) keeps the "unknown topic" answer cached for its
// kgo.MetadataMinAge, 5 s by default: until then its kadm requests and
// ListOffsets do not see the topic. CreateTopic sends its Metadata
// requests uncached, so the last one leaves cl's cached metadata of the
// topic fresh and listing every partition: cl's next requests see the
// topic at once.
//
// The wait is bounded by ctx and by CreateTopicTimeout (30 s), whichever
// ends first; CreateTopic may be called again to wait longer. A failure
// names the topic and the last error.
func CreateTopic(ctx context.Context, cl *kgo.Client, topic string, partitions int32, replicationFactor int16, configs map[string]*string) error {
	_, err := kafkatopic.Create(ctx, cl, topic, partitions, replicationFactor, configs)
	return err
}
