// Package optest runs a snapfence application for the operator tool's
// tests: a service whose fold sums each key's int64 values, over an input
// the test writes, so that every key's exact state is known.
package optest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/service"
)

// Poison is the value the fold refuses: a record with it stops its
// partition (engine.StopOnPoison).
const Poison = "poison"

// Sum is the fold: the sum of the key's values.
func Sum(_ []byte, s int64, _ bool, rec engine.Record) (engine.Result[int64], error) {
	if string(rec.Value) == Poison {
		return engine.Result[int64]{}, errors.New("a poison record")
	}
	v, err := strconv.ParseInt(string(rec.Value), 10, 64)
	if err != nil {
		return engine.Result[int64]{}, err
	}
	return engine.Set(s + v), nil
}

// App is an application under test.
type App struct {
	Name, Input string
	Brokers     []string
	Partitions  int32
}

// Produce writes key=value records (value a decimal int64 or Poison) to
// the input, each to its key's partition, and returns the offsets they
// got.
func (a App) Produce(t testing.TB, kvs ...[2]string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(a.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for _, kv := range kvs {
		recs = append(recs, &kgo.Record{Topic: a.Input, Key: []byte(kv[0]), Value: []byte(kv[1])})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return recs
}

// CreateInput creates the input topic.
func (a App) CreateInput(t testing.TB) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(a.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), a.Partitions, -1, nil, a.Input); err != nil {
		t.Fatal(err)
	}
}

// Running is a running instance of the application.
type Running struct {
	Svc  *service.Service[int64]
	stop context.CancelFunc
	// done is closed when Run returned, with err what it returned.
	done chan struct{}
	err  error
	once sync.Once
}

// Start runs an instance of the application until Stop.
func (a App) Start(t testing.TB) *Running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := service.New(ctx, service.Config[int64]{
		Application: a.Name, Brokers: a.Brokers, Input: a.Input, LeaveOnStop: true, CreateTopics: true,
		Engine: engine.Config[int64]{Fold: Sum, Codec: engine.Int64(), CommitInterval: 100 * time.Millisecond},
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &Running{Svc: svc, stop: cancel, done: make(chan struct{})}
	go func() {
		r.err = svc.Run(ctx)
		close(r.done)
	}()
	t.Cleanup(func() { r.Stop() })
	return r
}

// Stop stops the instance and returns what Run returned.
func (r *Running) Stop() error {
	r.once.Do(func() {
		r.stop()
		<-r.done
		_ = r.Svc.Close()
	})
	return r.err
}

// AwaitCommitted waits until every partition the instance serves has
// committed its input to its end, and a status was read with all of
// them running, or the deadline passes.
func (r *Running) AwaitCommitted(t testing.TB, partitions int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := r.Svc.Status()
		done := st.Ready() && len(st.Partitions) == partitions
		for _, p := range st.Partitions {
			if p.CommittedOffset < p.LogEndOffset || p.State != engine.StateRunning {
				done = false
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not committed to the end after %v: %+v", timeout, st)
		}
		select {
		case <-r.done:
			t.Fatalf("the service stopped: %v", r.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Sums is the exact fold of kvs: each key's sum, poison records left out.
func Sums(kvs ...[2]string) map[string]int64 {
	m := map[string]int64{}
	for _, kv := range kvs {
		if kv[1] == Poison {
			continue
		}
		v, _ := strconv.ParseInt(kv[1], 10, 64)
		m[kv[0]] += v
	}
	return m
}

// Records makes n records over keys k0..k(keys-1), values 1..n.
func Records(n, keys int) [][2]string {
	var out [][2]string
	for i := range n {
		out = append(out, [2]string{fmt.Sprint("k", i%keys), fmt.Sprint(i + 1)})
	}
	return out
}

// ReadInput reads every record of the input, partition by partition.
func (a App) ReadInput(t testing.TB) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(a.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, a.Input)
	if err != nil {
		t.Fatal(err)
	}
	var out []*kgo.Record
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset == 0 {
			return
		}
		rd, err := kgo.NewClient(kgo.SeedBrokers(a.Brokers...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{a.Input: {o.Partition: kgo.NewOffset().AtStart()}}))
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		for n := int64(0); n < o.Offset; {
			fs := rd.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				t.Fatal(err)
			}
			for _, r := range fs.Records() {
				out = append(out, r)
				n = r.Offset + 1
			}
		}
	})
	return out
}
