package kafka

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/internal/groupcommit"
)

// A transaction's refused WRITE is named by the topic the broker refused
// when the produce results tell it apart (KIP-890 part 2 brokers), and by
// the transaction's whole topic set, saying so, when every record carried
// the refusal (an AddPartitionsToTxn refused).
func TestARefusedWriteNamesTheRefusedTopic(t *testing.T) {
	p := &partition{input: store.TopicPartition{Topic: "orders", Partition: 3},
		snap: store.TopicPartition{Topic: "orders-snapshots", Partition: 3}}
	batch := groupcommit.Batch{Outputs: []store.Output{{Topic: "audit"}, {Topic: "balances"}, {Topic: "audit"}}}
	result := func(topic string, err error) kgo.ProduceResult {
		return kgo.ProduceResult{Record: &kgo.Record{Topic: topic}, Err: err}
	}
	refused, fine := kerr.TopicAuthorizationFailed, error(nil)
	for _, c := range []struct {
		name    string
		results kgo.ProduceResults
		subject string
		absent  string
	}{
		{"one output refused", kgo.ProduceResults{result("orders-snapshots", fine), result("audit", refused), result("balances", fine), result("audit", refused)},
			`topic "audit"`, "did not say which"},
		{"the snapshot topic refused", kgo.ProduceResults{result("orders-snapshots", refused), result("audit", kerr.TransactionAbortable), result("balances", fine)},
			`topic "orders-snapshots"`, "did not say which"},
		{"every record refused", kgo.ProduceResults{result("orders-snapshots", refused), result("audit", refused), result("balances", refused)},
			`topics ["orders-snapshots" "audit" "balances"]`, "may not write to it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := p.writeRefused(batch, refusedTopics(c.results, c.results.FirstErr()))
			var ce *store.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, store.ErrMisconfigured) || !errors.Is(err, kerr.TopicAuthorizationFailed) {
				t.Fatalf("not a ConfigError matching ErrMisconfigured and TOPIC_AUTHORIZATION_FAILED: %v", err)
			}
			if ce.Subject != c.subject {
				t.Errorf("Subject %s, want %s", ce.Subject, c.subject)
			}
			if strings.Contains(err.Error(), c.absent) {
				t.Errorf("error says %q: %v", c.absent, err)
			}
			if !strings.Contains(err.Error(), "orders/3") {
				t.Errorf("error does not name the input partition orders/3: %v", err)
			}
		})
	}
	// A transaction of snapshots alone has one topic to name.
	err := p.writeRefused(groupcommit.Batch{}, kerr.TopicAuthorizationFailed)
	var ce *store.ConfigError
	if !errors.As(err, &ce) || ce.Subject != `topic "orders-snapshots"` {
		t.Fatalf("snapshots alone: %v", err)
	}
}
