package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/storetest"
)

// The output topics of exactly-once batches on kfake, in virtual time.
func TestOutputTopicsMissingOrCreatedOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		outputTopicChecks(t, w.world, time.Second)
	})
}

// outputTopicChecks: an acquisition that declares a missing output topic
// fails within fast, before anything is taken over or written, with a
// *store.ConfigError that wraps ErrTopicMissing and names the topic and
// the fix; with CreateOutputTopics the acquisition creates the topic with
// OutputTopicPartitions and the batch commits, its outputs in the
// partitions of their keys.
func outputTopicChecks(t *testing.T, w *world, fast time.Duration) {
	ctx := context.Background()
	id := store.IdentityFunc(w.Join(t).Identity)
	in := store.TopicPartition{Topic: w.input, Partition: 0}
	missing, made := w.input+"-nowhere", w.input+"-made"
	newBackend := func(cfg kafka.Config) *kafka.Backend {
		cfg.Mode, cfg.SeedBrokers, cfg.Application, cfg.TransactionalIDPrefix, cfg.Now = store.Transactional, w.seeds(), storetest.Application, w.prefix, w.now
		cfg.ClientOpts = []kgo.Opt{kgo.Dialer(w.dial)}
		b, err := kafka.New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}

	start := time.Now()
	_, err := newBackend(kafka.Config{}).Acquire(ctx, store.Acquisition{Input: in, Identity: id, Outputs: []string{w.OutputTopic(), missing}})
	took := time.Since(start)
	t.Logf("after %v: %v", took, err)
	var ce *store.ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, kafka.ErrTopicMissing) || !errors.Is(err, store.ErrMisconfigured) {
		t.Fatalf("err = %v, want a *store.ConfigError wrapping ErrTopicMissing", err)
	}
	if ce.Subject != fmt.Sprintf("output topic %q", missing) || !strings.Contains(ce.Fix, "CreateOutputTopics") ||
		!strings.Contains(err.Error(), "--topic "+missing) {
		t.Errorf("%q does not name the topic and the fix", err)
	}
	if took > fast {
		t.Errorf("the missing output topic took %v to report", took)
	}
	if off, ok := w.CommittedOffset(t, in); ok && off > 0 {
		t.Errorf("committed offset %d after the failed acquisition", off)
	}
	if snaps := w.ReadSnapshots(t, in); len(snaps) != 0 {
		t.Errorf("snapshots %v after the failed acquisition", snaps)
	}
	p, err := newBackend(kafka.Config{}).Acquire(ctx, store.Acquisition{Input: in, Identity: id, Outputs: []string{w.OutputTopic()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := storetest.CommitBatch(ctx, p, store.Batch{Outputs: []store.Output{{Topic: w.OutputTopic(), Key: []byte("k"), Value: []byte("ok")}}, Offset: 1}); err != nil {
		t.Fatalf("the next batch: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	start = time.Now()
	p, err = newBackend(kafka.Config{CreateOutputTopics: true, OutputTopicPartitions: 3}).Acquire(ctx,
		store.Acquisition{Input: in, AssignedOffset: 1, Identity: id, Outputs: []string{made}})
	if err != nil {
		t.Fatal(err)
	}
	var outs []store.Output
	for i := range 9 {
		outs = append(outs, store.Output{Topic: made, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")})
	}
	if err := storetest.CommitBatch(ctx, p, store.Batch{Outputs: outs, Offset: 2}); err != nil {
		t.Fatalf("CreateOutputTopics: %v", err)
	}
	if took := time.Since(start); took > fast {
		t.Errorf("an acquisition that created its output topic, and its batch, took %v", took)
	}
	td, err := w.adm.ListTopics(ctx, made)
	if err != nil || len(td[made].Partitions) != 3 {
		t.Fatalf("created output topic: %v %v", td, err)
	}
	w.awaitTransactionEnd(t, in)
	got := 0
	for part := range int32(3) {
		tp := store.TopicPartition{Topic: made, Partition: part}
		if end := w.listEnd(t, tp, 1); end > 0 {
			w.readTo(t, tp, end, []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}, func(r *kgo.Record) {
				got++
				if want := store.OutputPartition(r.Key, 3); r.Partition != want {
					t.Errorf("key %s in partition %d, want %d", r.Key, r.Partition, want)
				}
			})
		}
	}
	if got != len(outs) {
		t.Errorf("read %d committed outputs, want %d", got, len(outs))
	}
	if _, err := kafka.New(ctx, kafka.Config{Mode: store.Plain, SeedBrokers: w.seeds(), OutputTopicPartitions: -1}); !errors.Is(err, store.ErrMisconfigured) {
		t.Errorf("OutputTopicPartitions -1: %v, want a configuration error", err)
	}
}
