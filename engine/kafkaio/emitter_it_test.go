//go:build it

package kafkaio_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// The emitter on Apache Kafka: outputs with headers in their keys'
// partitions; a missing topic reported within seconds as a
// *store.ConfigError; CreateTopics creating it.
func TestKafkaEmitterOnKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	name := fmt.Sprintf("emitted-%d", time.Now().UnixNano())
	existing, missing, created := name, name+"-missing", name+"-created"
	if err := kafka.CreateTopic(ctx, cl, existing, 3, 1, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), existing, created) })

	read := func(topic string) []*kgo.Record {
		t.Helper()
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil || ends.Error() != nil {
			t.Fatalf("end offsets of %s: %v %v", topic, err, ends.Error())
		}
		var out []*kgo.Record
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset == 0 {
				return
			}
			rc, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {o.Partition: kgo.NewOffset().AtStart()}}))
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if err := kafkatest.ReadTo(rc, o.Offset, func(r *kgo.Record) { out = append(out, r) }); err != nil {
				t.Fatal(err)
			}
		})
		return out
	}
	outputs := func(topic string) []engine.Output {
		var outs []engine.Output
		for i := range 12 {
			key := fmt.Sprintf("k%d", i)
			outs = append(outs, engine.Output{Topic: topic, Key: []byte(key), Value: []byte("v"),
				Headers: []store.Header{{Key: "origin", Value: []byte(key)}}})
		}
		return outs
	}
	check := func(topic string, partitions int) {
		t.Helper()
		recs := read(topic)
		if len(recs) != 12 {
			t.Fatalf("%s: read %d records, want 12", topic, len(recs))
		}
		for _, r := range recs {
			if want := store.OutputPartition(r.Key, partitions); r.Partition != want {
				t.Errorf("%s: key %s in partition %d, want %d", topic, r.Key, r.Partition, want)
			}
			if len(r.Headers) != 1 || string(r.Headers[0].Value) != string(r.Key) {
				t.Errorf("%s: key %s has headers %v", topic, r.Key, r.Headers)
			}
		}
	}

	em, err := kafkaio.NewEmitter(kafkaio.EmitterConfig{SeedBrokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer em.Close()
	if err := em.Emit(ctx, outputs(existing)); err != nil {
		t.Fatal(err)
	}
	check(existing, 3)

	start := time.Now()
	err = em.Emit(ctx, outputs(missing))
	took := time.Since(start)
	t.Logf("after %v: %v", took, err)
	var ce *store.ConfigError
	if !errors.As(err, &ce) || ce.Subject != fmt.Sprintf("output topic %q", missing) {
		t.Fatalf("err = %v, want a *store.ConfigError naming %s", err, missing)
	}
	if took > 5*time.Second {
		t.Errorf("the missing topic took %v to report", took)
	}

	create, err := kafkaio.NewEmitter(kafkaio.EmitterConfig{SeedBrokers: brokers, CreateTopics: true, TopicPartitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer create.Close()
	start = time.Now()
	if err := create.Emit(ctx, outputs(created)); err != nil {
		t.Fatal(err)
	}
	t.Logf("created and wrote %s in %v", created, time.Since(start))
	check(created, 4)
}
