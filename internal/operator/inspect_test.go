package operator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/snapfence/snapfence/internal/operator"
	"github.com/snapfence/snapfence/internal/operator/optest"
)

// inspect runs an application over a known input on brokers and checks
// what status, get and dump report of it while it runs and once it
// stopped: who serves each partition, offsets and lag, the snapshot
// partitions' ends, and every key's exact state with the offset it
// reflects.
func inspect(t *testing.T, brokers []string) {
	ctx := context.Background()
	app := optest.App{Name: fmt.Sprint("inspect-", time.Now().UnixNano()), Input: fmt.Sprint("in-", time.Now().UnixNano()),
		Brokers: brokers, Partitions: 3}
	app.CreateInput(t)
	input := optest.Records(300, 17)
	app.Produce(t, input...)
	want := optest.Sums(input...)

	tool, err := operator.Open(ctx, operator.Conn{Brokers: brokers}, operator.Target{Application: app.Name, Input: app.Input}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tool.Close()

	run := app.Start(t)
	run.AwaitCommitted(t, 3, 2*time.Minute)
	st, err := tool.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	member := run.Svc.Status().Identity.MemberID
	if st.Members != 1 || len(st.Partitions) != 3 {
		t.Fatalf("status = %+v, want 1 member and 3 partitions", st)
	}
	for _, p := range st.Partitions {
		if p.Member != member {
			t.Fatalf("partition %d served by %q, want %q", p.Partition, p.Member, member)
		}
	}
	if err := run.Stop(); err != nil {
		t.Fatal(err)
	}

	st, err = tool.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, p := range st.Partitions {
		if p.Member != "" || p.Committed != p.End || p.Lag != 0 || p.CommittedBy != app.Name ||
			p.SnapshotLastStable != p.SnapshotHighWatermark || p.SnapshotHighWatermark <= 0 || p.Err != "" || len(p.Transactions) != 0 {
			t.Fatalf("stopped: partition %+v, want no member, committed to its end by %s, the snapshot partition stable", p, app.Name)
		}
		total += p.End
	}
	if total != int64(len(input)) {
		t.Fatalf("the input partitions end at %d records in all, want %d", total, len(input))
	}

	got := map[string]int64{}
	for p := range int32(3) {
		es, err := tool.Dump(ctx, p, "int64")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if _, dup := got[e.Key]; dup || e.Partition != p || e.DecodeErr != "" {
				t.Fatalf("dump of partition %d: %+v (again, or undecoded)", p, e)
			}
			got[e.Key] = e.State.(int64)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dumped states %v, want %v", got, want)
	}
	// k0's last record is the 290th (offsets within its partition differ,
	// but the entry's offset must be the offset of k0's last record).
	e, err := tool.Get(ctx, []byte("k0"), -1, "int64")
	if err != nil || e == nil || e.State.(int64) != want["k0"] {
		t.Fatalf("get k0 = %+v, %v; want %d", e, err, want["k0"])
	}
	if last := lastOffset(t, app, "k0"); e.Offset != last {
		t.Fatalf("get k0 reflects offset %d, want its last record's, %d", e.Offset, last)
	}
	if e, err := tool.Get(ctx, []byte("nobody"), -1, "int64"); err != nil || e != nil {
		t.Fatalf("get nobody = %+v, %v; want no state", e, err)
	}

	// Another application's name on the same input: its snapshot topic
	// does not exist, and nothing of this one's is shown as its.
	other, err := operator.Open(ctx, operator.Conn{Brokers: brokers}, operator.Target{Application: app.Name + "-other", Input: app.Input}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	st, err = other.Status(ctx)
	if err != nil || !st.SnapshotTopicMissing {
		t.Fatalf("another application's status: %+v, %v; want its snapshot topic missing", st, err)
	}
	if _, err := other.Dump(ctx, 0, "raw"); !errors.Is(err, operator.ErrTopicMissing) {
		t.Fatalf("another application's dump: %v, want ErrTopicMissing", err)
	}
	// A snapshot topic named on purpose that is another application's:
	// refused, naming the application.
	named, err := operator.Open(ctx, operator.Conn{Brokers: brokers}, operator.Target{Application: app.Name + "-other", Input: app.Input,
		SnapshotTopic: st.SnapshotTopic[:0] + app.Name + "-" + app.Input + "-snapshots"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer named.Close()
	if _, err := named.Dump(ctx, 0, "raw"); err == nil {
		t.Fatal("dumping another application's snapshot topic: no error")
	}
	// A missing input topic.
	missing, err := operator.Open(ctx, operator.Conn{Brokers: brokers}, operator.Target{Application: app.Name, Input: "no-such-input"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer missing.Close()
	if _, err := missing.Status(ctx); !errors.Is(err, operator.ErrTopicMissing) {
		t.Fatalf("status of a missing input: %v, want ErrTopicMissing", err)
	}
}

// lastOffset is the offset of key's last record in the input.
func lastOffset(t *testing.T, app optest.App, key string) int64 {
	t.Helper()
	last := int64(-1)
	for _, r := range app.ReadInput(t) {
		if string(r.Key) == key {
			last = r.Offset
		}
	}
	return last
}
