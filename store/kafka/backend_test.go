package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

func newBackend(t *testing.T, w *fakeWorld, cfg kafka.Config) (*kafka.Backend, error) {
	t.Helper()
	cfg.SeedBrokers = w.c.ListenAddrs()
	cfg.ClientOpts = append(cfg.ClientOpts, kgo.Dialer(w.net.DialContext))
	b, err := kafka.New(context.Background(), cfg)
	if err == nil {
		t.Cleanup(func() { _ = b.Close() })
	}
	return b, err
}

// A member of group, joined, and its live identity.
func joinGroup(t *testing.T, w *fakeWorld, group string) store.IdentityReader {
	t.Helper()
	cl := w.client(t, kgo.ConsumerGroup(group), kgo.ConsumeTopics(inputTopic), kgo.Balancers(kgo.RangeBalancer()))
	for range 600 {
		if _, gen := cl.GroupMetadata(); gen > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return store.IdentityFunc(func() store.GroupIdentity {
		m, gen := cl.GroupMetadata()
		return store.GroupIdentity{Group: group, MemberID: m, Generation: gen}
	})
}

// Two flows that share a transactional.id prefix and an input topic fence
// each other's producers: the first one's next write fails loudly, naming
// the transactional.id, and nothing of it lands.
func TestPrefixCollisionIsLoud(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		in := store.TopicPartition{Topic: inputTopic, Partition: 0}
		cfg := kafka.Config{Mode: store.Transactional, Application: prefix, TransactionalIDPrefix: "shared"}
		flowA, err := newBackend(t, w, cfg)
		if err != nil {
			t.Fatal(err)
		}
		flowB, err := newBackend(t, w, cfg)
		if err != nil {
			t.Fatal(err)
		}
		a, err := flowA.Acquire(context.Background(), store.Acquisition{Input: in, Identity: joinGroup(t, w, "flow-a")})
		if err != nil {
			t.Fatal(err)
		}
		if err := writeOne(context.Background(), a, store.Snapshot{Key: []byte("k"), Value: []byte("a1"), Offset: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := flowB.Acquire(context.Background(), store.Acquisition{Input: in, Identity: joinGroup(t, w, "flow-b")}); err != nil {
			t.Fatal(err)
		}
		err = writeOne(context.Background(), a, store.Snapshot{Key: []byte("k"), Value: []byte("a2"), Offset: 2})
		var fe *store.FencedError
		if !errors.As(err, &fe) || !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
			t.Fatalf("err = %v, want a FencedError for a fenced producer", err)
		}
		if fe.TransactionalID != "shared-orders-0" || !strings.Contains(err.Error(), `"shared-orders-0"`) || !strings.Contains(err.Error(), "same prefix") {
			t.Fatalf("%q does not name the transactional.id and the prefix collision", err)
		}
		// Fenced is final for this handle: no silent re-initialisation
		// that would fence the other flow back.
		if err := writeOne(context.Background(), a, store.Snapshot{Key: []byte("k"), Value: []byte("a3"), Offset: 3}); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("second write after the fence: %v", err)
		}
		if got := w.ReadSnapshots(t, in); len(got) != 1 || string(got[0].Value) != "a1" {
			t.Fatalf("snapshots = %v, want only a1", got)
		}
	})
}

func TestTopicChecksNameWhatIsWrong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		ctx := context.Background()
		del := "delete"
		if err := kafka.CreateTopic(ctx, w.admin, "plainly", 2, 1, nil); err != nil {
			t.Fatal(err)
		}
		if err := kafka.CreateTopic(ctx, w.admin, prefix+"-plainly-snapshots", 2, 1, map[string]*string{"cleanup.policy": &del}); err != nil {
			t.Fatal(err)
		}
		if err := kafka.CreateTopic(ctx, w.admin, "wide", 3, 1, nil); err != nil {
			t.Fatal(err)
		}
		compact := "compact"
		if err := kafka.CreateTopic(ctx, w.admin, prefix+"-wide-snapshots", 2, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
			t.Fatal(err)
		}
		if err := kafka.CreateTopic(ctx, w.admin, "fresh", 2, 1, nil); err != nil {
			t.Fatal(err)
		}
		// An input whose snapshots are under the name of earlier versions.
		if err := kafka.CreateTopic(ctx, w.admin, "legacy", 1, 1, nil); err != nil {
			t.Fatal(err)
		}
		if err := kafka.CreateTopic(ctx, w.admin, "legacy-snapshots", 1, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
			t.Fatal(err)
		}
		id := joinGroup(t, w, group)
		b, err := newBackend(t, w, kafka.Config{Mode: store.Transactional, TransactionalIDPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			input    string
			sentinel error
			says     string
		}{
			{"missing", kafka.ErrTopicMissing, `input topic "missing" does not exist`},
			{"fresh", kafka.ErrTopicMissing, `snapshot topic "sf-test-fresh-snapshots" of input topic "fresh" does not exist`},
			{"plainly", kafka.ErrTopicConfig, `"sf-test-plainly-snapshots" has cleanup.policy="delete"`},
			{"wide", kafka.ErrTopicConfig, `"sf-test-wide-snapshots" has 2 partitions, fewer than the 3`},
			{"legacy", store.ErrMisconfigured, `snapshot topic "sf-test-legacy-snapshots": does not exist, but "legacy-snapshots", the snapshot topic of input "legacy" before applications were named, does`},
		} {
			_, err := b.Acquire(ctx, store.Acquisition{Input: store.TopicPartition{Topic: c.input}, Identity: id})
			if !errors.Is(err, c.sentinel) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%s: err = %v, want %v saying %s", c.input, err, c.sentinel, c.says)
			}
		}
		create, err := newBackend(t, w, kafka.Config{Mode: store.Transactional, TransactionalIDPrefix: prefix, CreateTopics: true})
		if err != nil {
			t.Fatal(err)
		}
		// CreateTopics does not create an empty topic beside the legacy one.
		if _, err := create.Acquire(ctx, store.Acquisition{Input: store.TopicPartition{Topic: "legacy"}, Identity: id}); !errors.Is(err, store.ErrMisconfigured) {
			t.Errorf("CreateTopics beside a legacy snapshot topic: err = %v, want the legacy topic named", err)
		}
		p, err := create.Acquire(ctx, store.Acquisition{Input: store.TopicPartition{Topic: "fresh", Partition: 1}, Identity: id})
		if err != nil {
			t.Fatalf("CreateTopics: %v", err)
		}
		// A recovery right after the creation: the topic is served.
		for _, err := range p.Recover(ctx, nil) {
			if err != nil {
				t.Fatalf("recovering a just-created snapshot topic: %v", err)
			}
		}
		if err := writeOne(ctx, p, store.Snapshot{Key: []byte("k"), Value: []byte("v"), Offset: 0}); err != nil {
			t.Fatal(err)
		}
		td, err := w.adm.ListTopics(ctx, "sf-test-fresh-snapshots")
		if err != nil || len(td["sf-test-fresh-snapshots"].Partitions) != 2 {
			t.Fatalf("created snapshot topic: %v %v", td, err)
		}
	})
}

// An acquisition that creates the snapshot topic (CreateTopics) returns
// once the topic is served, and without waiting out the admin client's
// metadata min age (franz-go's default, 5 s). The new topic is served
// late (kafkatest.ServeLate: three ListOffsets refused, as Kafka refuses
// them for a moment after it answers CreateTopics), so a recovery that
// started before it is served would fail. And the topic check lists the
// snapshot topic before it exists, so the admin client caches "unknown
// topic" for it; a wait that reads the cache, or a ListOffsets sharded by
// it, sees the topic only once that entry is 5 s old. In virtual time the
// duration is exact: kfake answers at once, so anything near the min age
// is the cache.
func TestAnAcquisitionThatCreatesItsSnapshotTopicReturnsOnceItIsServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		ctx := context.Background()
		if err := kafka.CreateTopic(ctx, w.admin, "fresh", 2, 1, nil); err != nil {
			t.Fatal(err)
		}
		late := kafkatest.ServeLate(w.c, 3)
		b, err := newBackend(t, w, kafka.Config{Mode: store.Transactional, TransactionalIDPrefix: prefix, CreateTopics: true})
		if err != nil {
			t.Fatal(err)
		}
		id := store.IdentityFunc(func() store.GroupIdentity { return store.GroupIdentity{Group: group} })
		start := time.Now()
		p, err := b.Acquire(ctx, store.Acquisition{Input: store.TopicPartition{Topic: "fresh", Partition: 1}, Identity: id})
		if err != nil {
			t.Fatalf("CreateTopics: %v", err)
		}
		acquired := time.Since(start)
		if !late.Served("sf-test-fresh-snapshots") {
			t.Errorf("the acquisition returned after %d of 3 refused ListOffsets, before its new snapshot topic was served", late.Refused("sf-test-fresh-snapshots"))
		}
		if acquired >= time.Second {
			t.Errorf("acquiring a partition whose snapshot topic it created took %v of virtual time; the metadata min age is 5s, and kfake answers at once", acquired)
		}
		for _, err := range p.Recover(ctx, nil) {
			if err != nil {
				t.Fatalf("recovering a just-created snapshot topic: %v", err)
			}
		}
		recovered := time.Since(start)
		if recovered-acquired >= time.Second {
			t.Errorf("recovering a just-created snapshot topic took %v of virtual time", recovered-acquired)
		}
		t.Logf("acquired after %v, recovered after %v (virtual time)", acquired, recovered)
	})
}

func TestConfigurationErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		// A backend without a name may follow topics (a View), and acquires
		// nothing: the refusal names the field.
		unnamed, err := newBackend(t, w, kafka.Config{Mode: store.Transactional})
		if err != nil {
			t.Fatal(err)
		}
		var ce *store.ConfigError
		if _, err := unnamed.Acquire(context.Background(), store.Acquisition{Input: store.TopicPartition{Topic: inputTopic}, Identity: joinGroup(t, w, group)}); !errors.As(err, &ce) || ce.Subject != "Config.Application" {
			t.Errorf("no application: %v", err)
		}
		if _, err := newBackend(t, w, kafka.Config{Mode: store.Transactional, Application: "orders app"}); err == nil || !strings.Contains(err.Error(), "Config.Application") {
			t.Errorf("an application name with a space: %v", err)
		}
		if _, err := kafka.New(context.Background(), kafka.Config{Mode: store.Plain}); err == nil || !strings.Contains(err.Error(), "SeedBrokers") {
			t.Errorf("no brokers: %v", err)
		}
		if _, err := newBackend(t, w, kafka.Config{}); err == nil || !strings.Contains(err.Error(), "invalid mode") {
			t.Errorf("no mode: %v", err)
		}
	})
}
