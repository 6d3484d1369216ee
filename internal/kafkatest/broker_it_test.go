//go:build it

package kafkatest_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store/kafka"
)

// TestBrokerTransactions is the smoke test of the shared broker: it runs
// transaction.version 2, and a record produced in a committed transaction
// reaches a read_committed consumer.
func TestBrokerTransactions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seeds := kafkatest.Brokers(t)

	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)

	versions, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if versions.ErrorCode != 0 {
		t.Fatalf("ApiVersions error code %d", versions.ErrorCode)
	}
	var tv int16 = -1
	for _, f := range versions.FinalizedFeatures {
		if f.Name == "transaction.version" {
			tv = f.MaxVersionLevel
		}
	}
	if tv != 2 {
		t.Fatalf("finalized transaction.version = %d (-1: absent), want 2; features %+v", tv, versions.FinalizedFeatures)
	}

	topic := fmt.Sprintf("kafkatest-smoke-%d", time.Now().UnixNano())
	if err := kafka.CreateTopic(ctx, admin, topic, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := adm.DeleteTopics(context.Background(), topic); err != nil {
			t.Errorf("delete topic %s: %v", topic, err)
		}
	}()

	producer, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.TransactionalID(topic+"-txn"),
		kgo.DefaultProduceTopic(topic),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	if err := producer.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := producer.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: []byte("v1")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	if err := producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit: %v", err)
	}

	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	var got []*kgo.Record
	for len(got) == 0 {
		fetches := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no record consumed: %v", err)
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			t.Fatalf("fetch %s/%d: %v", topic, partition, err)
		})
		got = append(got, fetches.Records()...)
	}
	r := got[0]
	if len(got) != 1 || string(r.Key) != "k" || string(r.Value) != "v1" || r.Offset != 0 {
		t.Fatalf("consumed %d records, first %q=%q at %d; want one, k=v1 at 0", len(got), r.Key, r.Value, r.Offset)
	}
	if !r.Attrs.IsTransactional() {
		t.Errorf("record not marked transactional")
	}

	// The commit marker follows the record: the log ends at 2.
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if end, ok := ends.Lookup(topic, 0); !ok || end.Err != nil || end.Offset != 2 {
		t.Fatalf("end offset of %s/0 = %+v (found %v), want 2", topic, end, ok)
	}
}

// TestStartStop starts a broker of the test's own, talks to it and stops
// it.
func TestStartStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := kafkatest.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Error(err)
		}
	})

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].NodeID != 1 || md.Brokers[0].Host != "127.0.0.1" {
		t.Fatalf("brokers %+v, want node 1 on 127.0.0.1", md.Brokers)
	}

	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", b.Addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after Stop", b.Addr)
	}
	if err := b.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}
