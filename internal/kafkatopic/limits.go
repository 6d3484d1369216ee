package kafkatopic

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
)

// DefaultBatchCap is franz-go's default ProducerBatchMaxBytes, Kafka's
// default max.message.bytes.
const DefaultBatchCap = 1_000_012

// Limits are what output topics' configurations say a producer may send
// them, for the producers of outputs (the engine's emitter and
// store/kafka's exactly-once batches). Safe for concurrent use.
//
// A broker refuses a whole produce batch for one record it refuses: a
// batch over the topic's max.message.bytes, or a keyless record on a
// compacted topic, fails every record in it alike, and the engine could
// not tell which output's input is at fault. With BatchCap as the
// client's ProducerBatchMaxBytesFn franz-go sends no batch over the limit
// and refuses on its own, before sending, only a record too large for any
// batch; a producer that checks Compacted refuses a keyless record alone.
type Limits struct {
	mu        sync.Mutex
	caps      map[string]int32
	compacted map[string]bool
}

// NewLimits returns Limits that know no topic yet.
func NewLimits() *Limits {
	return &Limits{caps: map[string]int32{}, compacted: map[string]bool{}}
}

// Read reads the max.message.bytes and cleanup.policy of topics, those
// the principal may read (DESCRIBE_CONFIGS is not among an output topic's
// minimum ACLs: without it the producer keeps franz-go's default batch
// cap, and the broker alone refuses keyless records). Call it before a
// topic's first record is produced, when franz-go asks BatchCap.
func (l *Limits) Read(ctx context.Context, adm *kadm.Client, topics ...string) {
	if len(topics) == 0 {
		return
	}
	configs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, rc := range configs {
		if rc.Err != nil {
			continue
		}
		for _, c := range rc.Configs {
			switch {
			case c.Value == nil:
			case c.Key == "max.message.bytes":
				if n, err := strconv.ParseInt(*c.Value, 10, 32); err == nil && n > 0 && n < DefaultBatchCap {
					l.caps[rc.Name] = int32(n)
				}
			case c.Key == "cleanup.policy":
				l.compacted[rc.Name] = slices.Contains(strings.Split(*c.Value, ","), "compact")
			}
		}
	}
}

// BatchCap is a ProducerBatchMaxBytesFn: topic's max.message.bytes where
// it is below DefaultBatchCap, or DefaultBatchCap.
func (l *Limits) BatchCap(topic string) int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.caps[topic]; ok {
		return c
	}
	return DefaultBatchCap
}

// Compacted reports whether Read found topic compacted.
func (l *Limits) Compacted(topic string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.compacted[topic]
}
