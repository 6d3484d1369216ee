package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/wire"
)

// fakeOp is an application's topics on a kfake cluster: an input of two
// partitions and its snapshot topic, written as the store writes them.
type fakeOp struct {
	t     *testing.T
	c     *kfake.Cluster
	cl    *kgo.Client
	adm   *kadm.Client
	tool  *Tool
	app   string
	input string
}

func newFakeOp(t *testing.T) *fakeOp {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f := &fakeOp{t: t, c: c, app: "totals", input: "orders"}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	f.cl, f.adm = cl, kadm.NewClient(cl)
	ctx := context.Background()
	compact := "compact"
	// kfake keeps group offsets outside any topic; the store looks the
	// group's offsets partition up in one, for its transactions.
	if err := kafka.CreateTopic(ctx, cl, "__consumer_offsets", 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := kafka.CreateTopic(ctx, cl, f.input, 2, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := kafka.CreateTopic(ctx, cl, f.snapshots(), 2, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
		t.Fatal(err)
	}
	f.tool, err = Open(ctx, Conn{Brokers: c.ListenAddrs()}, Target{Application: f.app, Input: f.input}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.tool.Close)
	return f
}

func (f *fakeOp) snapshots() string { return kafka.DefaultSnapshotTopic(f.app, f.input) }

func (f *fakeOp) produce(rs ...*kgo.Record) {
	f.t.Helper()
	if err := f.cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeOp) events(p int32, at time.Time, kvs ...string) {
	f.t.Helper()
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		f.produce(&kgo.Record{Topic: f.input, Partition: p, Key: []byte(k), Value: []byte(v), Timestamp: at})
	}
}

// snapshot writes a snapshot record of application app.
func (f *fakeOp) snapshot(app string, p int32, key string, offset int64) {
	w := wire.EncodeSnapshot(app, store.Snapshot{Key: []byte(key), Value: []byte("1"), Offset: offset})
	var hs []kgo.RecordHeader
	for _, h := range w.Headers {
		hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	f.produce(&kgo.Record{Topic: f.snapshots(), Partition: p, Key: w.Key, Value: w.Value, Headers: hs})
}

func (f *fakeOp) commit(p int32, at int64) {
	f.t.Helper()
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: f.input, Partition: p, At: at, LeaderEpoch: -1, Metadata: wire.CommitMetadata(f.app)})
	if err := f.tool.commit(context.Background(), os); err != nil {
		f.t.Fatal(err)
	}
}

// world renders what a verb may change: committed offsets and the
// snapshot partitions' extents.
func (f *fakeOp) world() string {
	f.t.Helper()
	ctx := context.Background()
	c, err := f.tool.committedOffsets(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	s, err1 := f.adm.ListStartOffsets(ctx, f.snapshots())
	e, err2 := f.adm.ListEndOffsets(ctx, f.snapshots())
	if err := errors.Join(err1, err2); err != nil {
		f.t.Fatal(err)
	}
	var b strings.Builder
	for p := range int32(2) {
		so, _ := s.Lookup(f.snapshots(), p)
		eo, _ := e.Lookup(f.snapshots(), p)
		fmt.Fprintf(&b, "p%d committed %d %q snapshots [%d,%d); ", p, c[p].At, c[p].Metadata, so.Offset, eo.Offset)
	}
	return b.String()
}

// join makes a live member of the application's group, returning its
// client (close it to leave).
func (f *fakeOp) join() *kgo.Client {
	f.t.Helper()
	m, err := kgo.NewClient(kgo.SeedBrokers(f.c.ListenAddrs()...), kgo.ConsumerGroup(f.app), kgo.ConsumeTopics(f.input),
		kgo.SessionTimeout(6*time.Second))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(m.Close)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		m.PollFetches(ctx)
		cancel()
		if _, ms, err := f.tool.members(context.Background()); err == nil && len(ms) > 0 {
			return m
		}
	}
	f.t.Fatal("the member did not join within 30s")
	return nil
}

func TestResetPlanDryRunAndApply(t *testing.T) {
	f := newFakeOp(t)
	f.events(0, time.Time{}, "a=1", "b=2", "a=3")
	f.events(1, time.Time{}, "x=1")
	f.snapshot(f.app, 0, "a", 2)
	f.snapshot(f.app, 0, "b", 1)
	f.snapshot(f.app, 1, "x", 0)
	f.commit(0, 3)
	f.commit(1, 1)
	ctx := context.Background()

	before := f.world()
	p, err := f.tool.PlanReset(ctx, ResetOptions{ToEarliest: true})
	if err != nil {
		t.Fatal(err)
	}
	if after := f.world(); after != before {
		t.Fatalf("planning changed things:\nbefore %s\nafter  %s", before, after)
	}
	text := p.String()
	for _, want := range []string{"commit offset 0 of input orders/0", "commit offset 0 of input orders/1", "delete the records of snapshot partition totals-orders-snapshots/0 below 2",
		"delete the records of snapshot partition totals-orders-snapshots/1 below 1", "fold of the whole input", "dry run: nothing changed", "restore the configuration"} {
		if !strings.Contains(text, want) {
			t.Errorf("the plan's text lacks %q:\n%s", want, text)
		}
	}
	if p.Inputs[0].Committed != 3 || p.Inputs[0].To != 0 || p.Snapshots[0].Records != 2 || p.Snapshots[1].Records != 1 {
		t.Fatalf("plan = %+v", p)
	}
	if err := f.tool.ApplyReset(ctx, p); err != nil {
		t.Fatal(err)
	}
	md := wire.CommitMetadata(f.app)
	want := fmt.Sprintf("p0 committed 0 %q snapshots [2,2); p1 committed 0 %q snapshots [1,1); ", md, md)
	if got := f.world(); got != want || !p.Executed {
		t.Fatalf("after the reset:\n got %s\nwant %s", got, want)
	}
	if strings.Contains(p.String(), "dry run") {
		t.Errorf("an executed plan's text says dry run:\n%s", p)
	}
}

func TestResetToDatetimeNeedsDropState(t *testing.T) {
	f := newFakeOp(t)
	at := time.Now().Add(-time.Hour)
	f.events(0, at.Add(-time.Minute), "a=1", "a=2")
	f.events(0, at.Add(time.Minute), "a=3")
	f.commit(0, 3)
	ctx := context.Background()
	p, err := f.tool.PlanReset(ctx, ResetOptions{ToDatetime: at})
	if err != nil {
		t.Fatal(err)
	}
	if p.Inputs[0].To != 2 || p.Inputs[1].To != 0 || !strings.Contains(p.String(), "NOT CONFIRMED") || !strings.Contains(p.StateAfter, "NOT of the whole input") {
		t.Fatalf("plan = %+v\n%s", p, p)
	}
	before := f.world()
	if err := f.tool.ApplyReset(ctx, p); !errors.Is(err, ErrDropStateNotConfirmed) {
		t.Fatalf("ApplyReset without DropState = %v", err)
	}
	if after := f.world(); after != before {
		t.Fatalf("a refused reset changed things:\nbefore %s\nafter  %s", before, after)
	}
	if _, err := f.tool.PlanReset(ctx, ResetOptions{ToEarliest: true, ToDatetime: at}); err == nil {
		t.Fatal("PlanReset with both -to-earliest and -to-datetime: no error")
	}
}

func TestResetRefusesLiveMembers(t *testing.T) {
	f := newFakeOp(t)
	f.events(0, time.Time{}, "a=1")
	m := f.join()
	_, err := f.tool.PlanReset(context.Background(), ResetOptions{ToEarliest: true})
	var live *LiveMembersError
	if !errors.As(err, &live) || len(live.Members) != 1 || !strings.Contains(err.Error(), live.Members[0].ID) || live.Members[0].Host == "" {
		t.Fatalf("PlanReset with a member = %v, want a *LiveMembersError naming it", err)
	}
	p := &ResetPlan{Application: f.app, Group: f.app, Input: f.input, SnapshotTopic: f.snapshots(), To: "earliest"}
	if err := f.tool.ApplyReset(context.Background(), p); !errors.As(err, &live) {
		t.Fatalf("ApplyReset with a member = %v, want a *LiveMembersError", err)
	}
	m.Close()
}

func TestResetRefusesForeignRecords(t *testing.T) {
	f := newFakeOp(t)
	f.snapshot(f.app, 1, "a", 0)
	f.snapshot("other", 1, "b", 0)
	_, err := f.tool.PlanReset(context.Background(), ResetOptions{ToEarliest: true})
	var fr *ForeignRecordsError
	if !errors.As(err, &fr) || fr.Application != "other" || fr.Partition != 1 || fr.Offset != 1 {
		t.Fatalf("PlanReset over another application's record = %v, want a *ForeignRecordsError", err)
	}
	// A record that is no snapfence snapshot at all.
	g := newFakeOp(t)
	g.produce(&kgo.Record{Topic: g.snapshots(), Partition: 0, Key: []byte("k"), Value: []byte("v")})
	if _, err := g.tool.PlanReset(context.Background(), ResetOptions{ToEarliest: true}); !errors.As(err, &fr) || fr.Offset != 0 {
		t.Fatalf("PlanReset over a foreign record = %v, want a *ForeignRecordsError", err)
	}
}

func TestResetRefusesOpenTransaction(t *testing.T) {
	f := newFakeOp(t)
	txn, err := kgo.NewClient(kgo.SeedBrokers(f.c.ListenAddrs()...), kgo.TransactionalID("someone-else"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	ctx := context.Background()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	w := wire.EncodeSnapshot(f.app, store.Snapshot{Key: []byte("a"), Value: []byte("1"), Offset: 0})
	if err := txn.ProduceSync(ctx, &kgo.Record{Topic: f.snapshots(), Partition: 0, Key: w.Key, Value: w.Value}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	_, err = f.tool.PlanReset(ctx, ResetOptions{ToEarliest: true})
	var open *OpenTransactionsError
	if !errors.As(err, &open) || !strings.Contains(err.Error(), f.snapshots()+"/0") {
		t.Fatalf("PlanReset with an open transaction = %v, want an *OpenTransactionsError naming it", err)
	}
	if err := txn.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
}
