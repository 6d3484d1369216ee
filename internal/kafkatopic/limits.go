package kafkatopic

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/snapfence/snapfence/store"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
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
// batch; a producer that checks Keyless refuses a keyless record alone.
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

// Keyless is the refusal of a record without a key (key nil) to topic,
// if Read found topic compacted: the broker would refuse it with
// INVALID_RECORD, and with it every record of its produce batch, so the
// producer refuses it alone, before sending. Otherwise nil.
func (l *Limits) Keyless(topic string, key []byte) error {
	if key != nil {
		return nil
	}
	l.mu.Lock()
	compacted := l.compacted[topic]
	l.mu.Unlock()
	if !compacted {
		return nil
	}
	return fmt.Errorf("an output without a key to compacted topic %q: %w", topic, kerr.InvalidRecord)
}

// RefusedForGood reports whether a produce error is one that no retry of
// the same record cures: the record is too large for the broker or the
// topic (franz-go refuses one too large for any batch on its own), or the
// broker refuses it as invalid or corrupt. Such a failure is the
// record's, not the cluster's. CORRUPT_MESSAGE is retriable to franz-go
// (a checksum broken on the way), which retries it within the delivery
// timeout; one that outlasts it is the record's.
func RefusedForGood(err error) bool {
	if errors.Is(err, store.ErrRecordRefused) {
		return true
	}
	for _, e := range []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.CorruptMessage} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// MarkRefused is err, matching store.ErrRecordRefused too when it is a
// refusal for good (RefusedForGood): so that the engine tells one from a
// transient failure without knowing Kafka's errors. Its text is err's.
func MarkRefused(err error) error {
	if err == nil || errors.Is(err, store.ErrRecordRefused) || !RefusedForGood(err) {
		return err
	}
	return refusedError{err}
}

type refusedError struct{ err error }

func (e refusedError) Error() string   { return e.err.Error() }
func (e refusedError) Unwrap() []error { return []error{e.err, store.ErrRecordRefused} }
