package engine_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// emitWorld is a kfake cluster on a virtual network with an output topic
// "out" of 3 partitions, for tests inside a synctest bubble.
type emitWorld struct {
	t   *testing.T
	net *kfake.VirtualNetwork
	c   *kfake.Cluster
	cl  *kgo.Client
	adm *kadm.Client
}

func newEmitWorld(t *testing.T) *emitWorld {
	w := &emitWorld{t: t, net: new(kfake.VirtualNetwork)}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ListenFn(w.net.Listen))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	w.c = c
	w.cl = w.client()
	w.adm = kadm.NewClient(w.cl)
	if err := kafka.CreateTopic(context.Background(), w.cl, "out", 3, 1, nil); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *emitWorld) client(opts ...kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(w.c.ListenAddrs()...), kgo.Dialer(w.net.DialContext)}, opts...)...)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(cl.Close)
	return cl
}

func (w *emitWorld) emitter(mod func(*kafkaio.EmitterConfig)) *kafkaio.Emitter {
	cfg := kafkaio.EmitterConfig{SeedBrokers: w.c.ListenAddrs(), ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext)}}
	if mod != nil {
		mod(&cfg)
	}
	em, err := kafkaio.NewEmitter(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = em.Close() })
	return em
}

// read returns every record of topic, read_uncommitted, up to its end.
func (w *emitWorld) read(topic string) []*kgo.Record {
	w.t.Helper()
	ends, err := w.adm.ListEndOffsets(context.Background(), topic)
	if err != nil || ends.Error() != nil {
		w.t.Fatalf("end offsets of %s: %v %v", topic, err, ends.Error())
	}
	var out []*kgo.Record
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset == 0 {
			return
		}
		cl := w.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {o.Partition: kgo.NewOffset().AtStart()}}))
		if err := kafkatest.ReadTo(cl, o.Offset, func(r *kgo.Record) { out = append(out, r) }); err != nil {
			w.t.Fatal(err)
		}
		cl.Close()
	})
	return out
}

// Every output lands in the partition Kafka's default partitioner gives its
// key (store.OutputPartition, as exactly-once batches), with its value and
// headers, one key's outputs in order.
func TestKafkaEmitterDeliversByKeyWithHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newEmitWorld(t)
		em := w.emitter(nil)
		var outs []engine.Output
		for i := range 40 {
			key := fmt.Sprintf("k%d", i%10)
			outs = append(outs, engine.Output{Topic: "out", Key: []byte(key), Value: []byte(fmt.Sprint(i)),
				Headers: []store.Header{{Key: "origin", Value: []byte(key)}, {Key: "n", Value: []byte(fmt.Sprint(i))}}})
		}
		if err := em.Emit(context.Background(), outs[:20]); err != nil {
			t.Fatal(err)
		}
		if err := em.Emit(context.Background(), outs[20:]); err != nil {
			t.Fatal(err)
		}
		recs := w.read("out")
		if len(recs) != len(outs) {
			t.Fatalf("read %d records, want %d", len(recs), len(outs))
		}
		last := map[string]int{}
		partitions := map[int32]bool{}
		for _, r := range recs {
			if want := store.OutputPartition(r.Key, 3); r.Partition != want {
				t.Errorf("key %s in partition %d, want %d", r.Key, r.Partition, want)
			}
			partitions[r.Partition] = true
			var n int
			fmt.Sscan(string(r.Value), &n)
			if prev, ok := last[string(r.Key)]; ok && n <= prev {
				t.Errorf("key %s: %d after %d", r.Key, n, prev)
			}
			last[string(r.Key)] = n
			if len(r.Headers) != 2 || r.Headers[0].Key != "origin" || string(r.Headers[0].Value) != string(r.Key) ||
				r.Headers[1].Key != "n" || string(r.Headers[1].Value) != string(r.Value) {
				t.Errorf("record %s=%s has headers %v", r.Key, r.Value, r.Headers)
			}
		}
		if len(partitions) < 2 {
			t.Errorf("ten keys all in partitions %v", partitions)
		}
	})
}

// A missing output topic without CreateTopics: Emit returns at once (one
// Metadata request, no retry loop, nothing produced) a *store.ConfigError
// that matches store.ErrMisconfigured and names the topic and the fix;
// and again on the next call, as the topic is not cached as missing.
func TestKafkaEmitterMissingTopicIsAConfigErrorAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newEmitWorld(t)
		var produces atomic.Int32
		w.c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
			produces.Add(1)
			return nil, nil, false
		})
		em := w.emitter(nil)
		outs := []engine.Output{{Topic: "out", Key: []byte("a"), Value: []byte("1")}, {Topic: "nope", Key: []byte("b"), Value: []byte("2")}}
		for range 2 {
			start := time.Now()
			err := em.Emit(context.Background(), outs)
			took := time.Since(start)
			t.Logf("after %v: %v", took, err)
			var ce *store.ConfigError
			var ee *engine.EmitError
			if !errors.Is(err, store.ErrMisconfigured) || !errors.As(err, &ce) || !errors.As(err, &ee) {
				t.Fatalf("err = %v, want an *EmitError with a *store.ConfigError", err)
			}
			if ce.Subject != `output topic "nope"` || !strings.Contains(ce.Fix, "CreateTopics") || !strings.Contains(err.Error(), "--topic nope") {
				t.Errorf("%q does not name the topic and the fix", err)
			}
			if ee.Failed != 2 || ee.Total != 2 || ee.Topic != "nope" || string(ee.Key) != "b" {
				t.Errorf("EmitError %+v, want both outputs failed, the first at nope/b", ee)
			}
			if took > 100*time.Millisecond {
				t.Errorf("the missing topic took %v of virtual time to report; kfake answers at once", took)
			}
		}
		if n := produces.Load(); n != 0 {
			t.Errorf("%d Produce requests for a batch with a missing topic", n)
		}
		if td, _ := w.adm.ListTopics(context.Background(), "nope"); td.Has("nope") && td["nope"].Err == nil {
			t.Error("the missing topic was created")
		}
	})
}

// With CreateTopics a missing output topic is created with the configured
// partitions and configs, and Emit returns once it is served (late here:
// kafkatest.ServeLate refuses its first ListOffsets), without waiting out
// the client's metadata min age (5 s) that the failed lookup cached.
func TestKafkaEmitterCreatesMissingTopics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newEmitWorld(t)
		late := kafkatest.ServeLate(w.c, 3)
		em := w.emitter(func(c *kafkaio.EmitterConfig) {
			c.CreateTopics, c.TopicPartitions, c.TopicConfigs = true, 4, map[string]string{"retention.ms": "3600000"}
		})
		var outs []engine.Output
		for i := range 12 {
			outs = append(outs, engine.Output{Topic: "fresh", Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")})
		}
		start := time.Now()
		if err := em.Emit(context.Background(), outs); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took >= time.Second {
			t.Errorf("creating and writing a topic took %v of virtual time", took)
		}
		if !late.Served("fresh") {
			t.Errorf("Emit returned after %d of 3 refused ListOffsets, before the topic was served", late.Refused("fresh"))
		}
		td, err := w.adm.ListTopics(context.Background(), "fresh")
		if err != nil || len(td["fresh"].Partitions) != 4 {
			t.Fatalf("created topic: %v %v", td, err)
		}
		rc, err := w.adm.DescribeTopicConfigs(context.Background(), "fresh")
		if err != nil {
			t.Fatal(err)
		}
		if c, err := rc.On("fresh", nil); err != nil || !hasConfig(c, "retention.ms", "3600000") {
			t.Errorf("configs of the created topic: %v %v", c, err)
		}
		recs := w.read("fresh")
		if len(recs) != len(outs) {
			t.Fatalf("read %d records, want %d", len(recs), len(outs))
		}
		for _, r := range recs {
			if want := store.OutputPartition(r.Key, 4); r.Partition != want {
				t.Errorf("key %s in partition %d, want %d", r.Key, r.Partition, want)
			}
		}
	})
}

func hasConfig(rc kadm.ResourceConfig, key, value string) bool {
	for _, c := range rc.Configs {
		if c.Key == key && c.Value != nil && *c.Value == value {
			return true
		}
	}
	return false
}

// A delivery failure is Emit's error: a retriable one once the delivery
// timeout has passed, a permanent one (a denied write) at once, as a
// *store.ConfigError. The emitter delivers again once the fault is gone.
func TestKafkaEmitterSurfacesDeliveryFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newEmitWorld(t)
		em := w.emitter(func(c *kafkaio.EmitterConfig) { c.DeliveryTimeout = 3 * time.Second })
		outs := []engine.Output{{Topic: "out", Key: []byte("a"), Value: []byte("1")}, {Topic: "out", Key: []byte("b"), Value: []byte("2")}}
		if err := em.Emit(context.Background(), outs); err != nil { // the topic is checked and cached
			t.Fatal(err)
		}
		var failing atomic.Value
		w.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
			w.c.KeepControl()
			code, _ := failing.Load().(int16)
			if code == 0 {
				return nil, nil, false
			}
			return produceFailure(req.(*kmsg.ProduceRequest), code), nil, true
		})

		failing.Store(kerr.NotEnoughReplicas.Code)
		start := time.Now()
		err := em.Emit(context.Background(), outs)
		took := time.Since(start)
		var ee *engine.EmitError
		if !errors.As(err, &ee) || ee.Failed != 2 || ee.Total != 2 || errors.Is(err, store.ErrMisconfigured) {
			t.Fatalf("err = %v, want an *EmitError for both outputs, not a configuration error", err)
		}
		if !errors.Is(err, kerr.NotEnoughReplicas) && !errors.Is(err, kgo.ErrRecordTimeout) {
			t.Errorf("err = %v, want the broker's error or the record timeout", err)
		}
		t.Logf("retriable, after %v: %v", took, err)
		if took < 3*time.Second || took > 10*time.Second {
			t.Errorf("a retriable failure was returned after %v; the delivery timeout is 3s", took)
		}

		failing.Store(kerr.TopicAuthorizationFailed.Code)
		err = em.Emit(context.Background(), outs)
		var ce *store.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, kerr.TopicAuthorizationFailed) || ce.Subject != `output topic "out"` {
			t.Fatalf("err = %v, want a *store.ConfigError for the denied write", err)
		}
		t.Logf("denied: %v", err)

		failing.Store(int16(0))
		if err := em.Emit(context.Background(), outs); err != nil {
			t.Fatalf("after the fault: %v", err)
		}
	})
}

// produceFailure answers every partition of req with code.
func produceFailure(req *kmsg.ProduceRequest, code int16) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// An output without a topic fails the call before anything is sent; after
// Close, Emit returns ErrEmitterClosed.
func TestKafkaEmitterRefusesAndCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newEmitWorld(t)
		em := w.emitter(nil)
		err := em.Emit(context.Background(), []engine.Output{{Topic: "out", Key: []byte("a")}, {Key: []byte("b")}})
		if !errors.Is(err, store.ErrInvalidOutput) {
			t.Fatalf("err = %v, want store.ErrInvalidOutput", err)
		}
		if recs := w.read("out"); len(recs) != 0 {
			t.Fatalf("%d records written by a refused call", len(recs))
		}
		if err := em.Emit(context.Background(), nil); err != nil {
			t.Fatalf("no outputs: %v", err)
		}
		if err := em.Close(); err != nil {
			t.Fatal(err)
		}
		if err := em.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if err := em.Emit(context.Background(), []engine.Output{{Topic: "out"}}); !errors.Is(err, kafkaio.ErrEmitterClosed) {
			t.Fatalf("Emit after Close = %v, want ErrEmitterClosed", err)
		}
		if _, err := kafkaio.NewEmitter(kafkaio.EmitterConfig{}); !errors.Is(err, store.ErrMisconfigured) {
			t.Fatalf("no SeedBrokers: %v, want a configuration error", err)
		}
	})
}

// The emitter as an engine's Config.Emit, and as its StartEmit: every
// balance change reaches the output topic, in the partition of its key.
func TestKafkaEmitterAsTheEnginesEmit(t *testing.T) {
	for _, start := range []bool{false, true} {
		name := "Emit"
		if start {
			name = "StartEmit"
		}
		t.Run(name, func(t *testing.T) { testKafkaEmitterAsTheEnginesEmit(t, start) })
	}
}

func testKafkaEmitterAsTheEnginesEmit(t *testing.T, start bool) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		em := w.emitter(t, kafkaio.EmitterConfig{CreateTopics: true, TopicPartitions: 2})
		r := w.runner(w.engineWith(func(c *engine.Config[int]) {
			if start {
				c.StartEmit = em.StartEmit
			} else {
				c.Emit = em.Emit
			}
		}), protocols["classic-cooperative"])
		defer r.Close(context.Background())
		w.produce("alice=10", "bob=5", "alice=-3", "carol=7", "bob=1")
		w.drain(r)
		ew := &emitWorld{t: t, net: w.net, c: w.c, cl: w.prod, adm: w.adm}
		last := map[string]string{}
		for _, rec := range ew.read("balances") {
			if want := store.OutputPartition(rec.Key, 2); rec.Partition != want {
				t.Errorf("key %s in partition %d, want %d", rec.Key, rec.Partition, want)
			}
			last[string(rec.Key)] = string(rec.Value)
		}
		for k, v := range w.want {
			if last[k] != fmt.Sprint(v) {
				t.Errorf("last output of %s = %q, want %d", k, last[k], v)
			}
		}
	})
}

// The emitter's CheckTopics as Config.CheckOutputTopics: a missing output
// topic ends Run at its start with the *store.ConfigError naming it,
// before any record is folded; with CreateTopics it is created and the
// engine runs.
func TestKafkaEmitterChecksTheOutputTopicsAtRunStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		for _, create := range []bool{false, true} {
			em, err := kafkaio.NewEmitter(kafkaio.EmitterConfig{SeedBrokers: w.c.ListenAddrs(),
				ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext)}, CreateTopics: create, TopicPartitions: 2})
			if err != nil {
				t.Fatal(err)
			}
			folds := 0
			r := w.runner(w.engineWith(func(c *engine.Config[int]) {
				c.StartEmit, c.CheckOutputTopics, c.OutputTopics = em.StartEmit, em.CheckTopics, []string{"balances"}
				c.Fold = func(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
					folds++
					return balance(key, state, exists, rec)
				}
			}), protocols["classic-cooperative"])
			w.produce("alice=10", "bob=5")
			if !create {
				err := r.Run(context.Background())
				ce, ok := errors.AsType[*store.ConfigError](err)
				if !ok || ce.Subject != `output topic "balances"` || folds != 0 {
					t.Fatalf("Run = %v after %d folds, want the *store.ConfigError of output topic \"balances\" before any", err, folds)
				}
			} else {
				w.drain(r)
				if folds == 0 {
					t.Fatal("nothing folded with the topic created")
				}
				_ = r.Close(context.Background())
			}
			_ = em.Close()
		}
	})
}

// Without Config.CheckOutputTopics the Kafka source checks them: a missing
// dead-letter topic ends Run before anything is folded, naming it, with
// the emitter wired the plain way (StartEmit alone).
func TestTheSourceChecksTheOutputTopicsByDefaultOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		em := w.emitter(t, kafkaio.EmitterConfig{})
		folds := 0
		r := w.runner(w.engineWith(func(c *engine.Config[int]) {
			c.StartEmit, c.Poison, c.DeadLetterTopic = em.StartEmit, engine.DeadLetterPoison, "accounts-dlt"
			c.Fold = func(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
				folds++
				return balance(key, state, exists, rec)
			}
		}), protocols["classic-cooperative"])
		w.produce("alice=10", "bob=5")
		err := r.Run(context.Background())
		ce, ok := errors.AsType[*store.ConfigError](err)
		if !ok || ce.Subject != `output topic "accounts-dlt"` || folds != 0 || !strings.Contains(ce.Fix, "CheckTopics") {
			t.Fatalf("Run = %v after %d folds, want the *store.ConfigError of output topic \"accounts-dlt\" before any", err, folds)
		}
	})
}

// With the emitter's check wired (Config.CheckOutputTopics), an output
// topic not listed in Config.OutputTopics is checked at its first
// output, before the outputs are handed to the emitter: a missing
// one ends Run at once with the *store.ConfigError naming it, not after
// the emitter's delivery timeout or the next commit's wait, and nothing
// is committed past the outputs.
func TestAnUnlistedMissingOutputTopicEndsRunAtItsFirstOutputOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		em := w.emitter(t, kafkaio.EmitterConfig{})
		r := w.runner(w.engineWith(func(c *engine.Config[int]) {
			c.StartEmit, c.CheckOutputTopics, c.CommitInterval = em.StartEmit, em.CheckTopics, time.Minute
		}), protocols["classic-cooperative"])
		w.produce("alice=10", "bob=5")
		begin := time.Now() // virtual time
		err := r.Run(context.Background())
		ce, ok := errors.AsType[*store.ConfigError](err)
		if !ok || ce.Subject != `output topic "balances"` {
			t.Fatalf("Run = %v, want the *store.ConfigError of output topic \"balances\"", err)
		}
		if took := time.Since(begin); took >= kafkaio.DefaultDeliveryTimeout {
			t.Errorf("Run returned after %v of virtual time: the delivery timeout, not the check", took)
		}
		// alice and bob are in partition 1.
		if committedAtEnd(w.adm, "bank", store.TopicPartition{Topic: "accounts", Partition: 1}) {
			t.Error("accounts/1 committed past outputs that were never delivered")
		}
	})
}

// emitter is a kafkaio.Emitter of cfg on w's cluster (its seeds and dialer
// set here), closed when the test ends.
func (w *fakeWorld) emitter(t *testing.T, cfg kafkaio.EmitterConfig) *kafkaio.Emitter {
	t.Helper()
	cfg.SeedBrokers, cfg.ClientOpts = w.c.ListenAddrs(), append(cfg.ClientOpts, kgo.Dialer(w.net.DialContext))
	em, err := kafkaio.NewEmitter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = em.Close() })
	return em
}

// An output over its topic's max.message.bytes is refused alone, and
// named in EmitError.Refused by its index: the emitter caps the topic's
// produce batches at its limit, so the outputs that would have shared the
// refused one's batch are delivered (the broker refuses an oversize batch
// whole, every record in it alike).
func TestKafkaEmitterRefusesOnlyTheOutputOverItsTopicsLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newEmitWorld(t)
		limit := "4096"
		if err := kafka.CreateTopic(context.Background(), w.cl, "small", 1, 1, map[string]*string{"max.message.bytes": &limit}); err != nil {
			t.Fatal(err)
		}
		em := w.emitter(nil)
		// Random, so that compression cannot bring a batch under the
		// limit: each of these fits alone, and any two do not.
		value := func(n int) []byte {
			b := make([]byte, n)
			_, _ = rand.Read(b)
			return b
		}
		outs := []engine.Output{
			{Topic: "small", Key: []byte("a"), Value: value(2500)},
			{Topic: "small", Key: []byte("b"), Value: value(2500)},
			{Topic: "small", Key: []byte("huge"), Value: value(5000)},
			{Topic: "small", Key: []byte("c"), Value: value(2500)},
		}
		err := em.Emit(context.Background(), outs)
		var ee *engine.EmitError
		if !errors.As(err, &ee) || !slices.Equal(ee.Refused, []int{2}) || string(ee.Key) != "huge" || !errors.Is(err, kerr.MessageTooLarge) {
			t.Fatalf("err = %v, want an *EmitError refusing output 2 (huge) with MESSAGE_TOO_LARGE", err)
		}
		got := map[string]bool{}
		for _, r := range w.read("small") {
			got[string(r.Key)] = true
		}
		if !got["a"] || !got["b"] || !got["c"] || got["huge"] {
			t.Fatalf("delivered %v, want a, b and c", got)
		}
	})
}

// An output without a key to a compacted topic, which Kafka refuses with
// INVALID_RECORD together with every record of its produce batch, is
// refused alone, before it is sent, and named in EmitError.Refused; the
// outputs beside it are delivered.
func TestKafkaEmitterRefusesOnlyAKeylessOutputToACompactedTopic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newEmitWorld(t)
		compact := "compact"
		if err := kafka.CreateTopic(context.Background(), w.cl, "latest", 1, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
			t.Fatal(err)
		}
		em := w.emitter(nil)
		outs := []engine.Output{
			{Topic: "latest", Key: []byte("a"), Value: []byte("1")},
			{Topic: "latest", Value: []byte("no key")},
			{Topic: "latest", Key: []byte("b"), Value: []byte("2")},
		}
		err := em.Emit(context.Background(), outs)
		var ee *engine.EmitError
		if !errors.As(err, &ee) || !slices.Equal(ee.Refused, []int{1}) || ee.Failed != 1 || !errors.Is(err, kerr.InvalidRecord) {
			t.Fatalf("err = %v, want an *EmitError refusing output 1 alone with INVALID_RECORD", err)
		}
		got := map[string]bool{}
		for _, r := range w.read("latest") {
			got[string(r.Value)] = true
		}
		if !got["1"] || !got["2"] || got["no key"] {
			t.Fatalf("delivered %v, want 1 and 2", got)
		}
	})
}
