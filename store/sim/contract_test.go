package sim_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/internal/backend"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/storetest"
	"github.com/snapfence/snapfence/store/wire"
)

func TestContract(t *testing.T) {
	storetest.Run(t, harness{})
}

// The contract holds with started calls in flight too: each waits for
// virtual time (or for its caller's Wait) before it reaches the cluster.
func TestContractWithWritesInFlight(t *testing.T) {
	storetest.Run(t, harness{latency: 5 * time.Millisecond})
}

// harness runs each case on a fresh simulated cluster inside a synctest
// bubble, so Settle can wait for every goroutine to block. latency is
// the backends' WriteLatency.
type harness struct{ latency time.Duration }

func (h harness) Run(t *testing.T, body func(t *testing.T, w storetest.World)) {
	synctest.Test(t, func(t *testing.T) {
		c := sim.New(sim.Config{Seed: 1})
		if err := c.CreateTopic("orders", sim.TopicConfig{Partitions: 2}); err != nil {
			t.Fatal(err)
		}
		if err := c.CreateTopic(sim.DefaultSnapshotTopic(storetest.Application, "orders"), sim.TopicConfig{Partitions: 2, Compacted: true}); err != nil {
			t.Fatal(err)
		}
		if err := c.CreateTopic("orders-enriched", sim.TopicConfig{Partitions: 2, MaxMessageBytes: storetest.OutputMaxBytes}); err != nil {
			t.Fatal(err)
		}
		body(t, &world{c: c, latency: h.latency})
	})
}

type world struct {
	c       *sim.Cluster
	members []*sim.Member
	latency time.Duration
}

const group = "flow"

func (w *world) InputTopic() string { return "orders" }

func (w *world) OutputTopic() string { return "orders-enriched" }

func (w *world) ReadOutputs(t *testing.T, readCommitted bool) []storetest.OutputRecord {
	t.Helper()
	var out []storetest.OutputRecord
	for p := range int32(2) {
		entries, err := w.c.Read(store.TopicPartition{Topic: w.OutputTopic(), Partition: p}, readCommitted)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Control == sim.NoControl {
				out = append(out, storetest.OutputRecord{Partition: p, Key: e.Record.Key, Value: e.Record.Value})
			}
		}
	}
	return out
}

func (w *world) Backend(t *testing.T, cfg storetest.BackendConfig) store.Backend {
	t.Helper()
	b, err := w.c.NewBackend(sim.BackendConfig{
		Mode: cfg.Mode, Application: cfg.Application, TransactionalIDPrefix: storetest.Application, CreateTopics: cfg.Application != "",
		MaxWritesPerTransaction: cfg.MaxWritesPerTransaction,
		MaxBytesPerTransaction:  cfg.MaxBytesPerTransaction,
		RecoveryStallTimeout:    cfg.RecoveryStallTimeout,
		Observer:                cfg.Observer,
		WriteLatency:            w.latency,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// settleGroup polls every member until no poll changes anything.
func (w *world) settleGroup() {
	for range 10 {
		before := len(w.c.History())
		for _, m := range w.members {
			m.Poll(sim.Callbacks{})
		}
		if len(w.c.History()) == before {
			return
		}
	}
}

func (w *world) Join(t *testing.T) storetest.Member {
	m := w.c.NewMember(group, sim.ClassicEager, "orders")
	w.members = append(w.members, m)
	w.settleGroup()
	if id := m.Identity(); !id.Valid() {
		t.Fatalf("member did not join: %v", id)
	}
	return m
}

func (w *world) Rebalance(t *testing.T) {
	before := w.c.GroupGeneration(group)
	w.c.Rebalance(group)
	w.settleGroup()
	if after := w.c.GroupGeneration(group); after != before+1 {
		t.Fatalf("rebalance moved the generation from %d to %d", before, after)
	}
}

func (w *world) CommittedOffset(t *testing.T, in store.TopicPartition) (int64, bool) {
	return w.c.CommittedOffset(group, in)
}

func snapTP(in store.TopicPartition) store.TopicPartition {
	return store.TopicPartition{Topic: sim.DefaultSnapshotTopic(storetest.Application, in.Topic), Partition: in.Partition}
}

func (w *world) ReadSnapshots(t *testing.T, in store.TopicPartition) []store.Snapshot {
	t.Helper()
	entries, err := w.c.Read(snapTP(in), true)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Snapshot
	for _, e := range entries {
		s, kind, err := wire.DecodeRecord(snapTP(in), e.Offset, e.Record)
		if err != nil {
			t.Fatal(err)
		}
		if kind != wire.KindOffsetMarker {
			out = append(out, s)
		}
	}
	return out
}

func (w *world) StableOffsets(t *testing.T, in store.TopicPartition) (int64, int64) {
	_, lso, hw, err := w.c.Offsets(snapTP(in))
	if err != nil {
		t.Fatal(err)
	}
	return lso, hw
}

func (w *world) CrashedOwnerTransaction(t *testing.T, in store.TopicPartition, recs ...wire.Record) {
	p := w.c.InitProducerID(storetest.Application+"-"+in.Topic+"-"+itoa(in.Partition), 0)
	if _, err := p.Produce(snapTP(in), recs...); err != nil {
		t.Fatal(err)
	}
}

func (w *world) CrashedOwnerOutputs(t *testing.T, in store.TopicPartition, recs ...wire.Record) {
	p := w.c.InitProducerID(storetest.Application+"-"+in.Topic+"-"+itoa(in.Partition), 0)
	if _, err := p.Produce(store.TopicPartition{Topic: w.OutputTopic()}, recs...); err != nil {
		t.Fatal(err)
	}
}

func (w *world) ForeignTransaction(t *testing.T, in store.TopicPartition, hang bool, recs ...wire.Record) func(bool) {
	const id = "foreign-producer"
	p := w.c.InitProducerID(id, 0)
	if _, err := p.Produce(snapTP(in), recs...); err != nil {
		t.Fatal(err)
	}
	if hang {
		w.c.Hang(id)
	}
	return func(commit bool) {
		if err := p.EndTxn(commit); err != nil {
			t.Fatal(err)
		}
	}
}

func (w *world) ProduceForeign(t *testing.T, in store.TopicPartition, recs ...wire.Record) {
	if _, err := w.c.Produce(snapTP(in), recs...); err != nil {
		t.Fatal(err)
	}
}

func (w *world) Truncate(t *testing.T, in store.TopicPartition, end int64) {
	if err := w.c.Truncate(snapTP(in), end); err != nil {
		t.Fatal(err)
	}
}

var errLogEndUnreachable = errors.New("list offsets: broker unreachable")

func (w *world) FailLogEndReads(t *testing.T) error {
	w.c.FailLogEndReads(errLogEndUnreachable)
	return errLogEndUnreachable
}

func (w *world) SlowFetches(t *testing.T, latency time.Duration) { w.c.SlowFetches(latency, 1) }

func (w *world) Advance(d time.Duration) {
	synctest.Wait()
	w.c.Advance(d)
	synctest.Wait()
}

func (w *world) Settle() { synctest.Wait() }

// Queued asks the backend skeleton's partition, which every sim
// partition is.
func (w *world) Queued(p store.Partition) int { return p.(*backend.Partition).Pending() }

// StallTimeout: virtual time affords the production default and a second
// of slack.
func (w *world) StallTimeout() (time.Duration, time.Duration) { return 3 * time.Minute, time.Second }

func (w *world) Now() time.Time { return w.c.Now() }

func itoa(p int32) string { return string(rune('0' + p)) }
