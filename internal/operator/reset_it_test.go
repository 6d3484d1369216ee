//go:build it

package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/kafkaio"
	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/wire"
)

// rsWorld is an application of the real engine on the integration run's
// broker: an input of two partitions whose exact fold is known (per-key
// sums of decimal int64 values; the value "poison" fails the fold).
type rsWorld struct {
	t       *testing.T
	brokers []string
	app     string
	input   string
	cl      *kgo.Client
	adm     *kadm.Client
	tool    *Tool
	dir     string // the engines' cache directory, kept across runs (warm)
	records int    // produced, poison included
}

const rsPartitions = 2

func newRSWorld(t *testing.T) *rsWorld {
	brokers := kafkatest.Brokers(t)
	app := fmt.Sprintf("op%d", time.Now().UnixNano())
	w := &rsWorld{t: t, brokers: brokers, app: app, input: app + "-in", dir: t.TempDir()}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	w.cl, w.adm = cl, kadm.NewClient(cl)
	ctx := context.Background()
	compact := "compact"
	if err := kafka.CreateTopic(ctx, cl, w.input, rsPartitions, 1, nil); err != nil {
		t.Fatal(err)
	}
	snaps := kafka.DefaultSnapshotTopic(app, w.input)
	if err := kafka.CreateTopic(ctx, cl, snaps, rsPartitions, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = w.adm.DeleteTopics(context.Background(), w.input, snaps) })
	tool, err := Open(ctx, Conn{Brokers: brokers}, Target{Application: app, Input: w.input}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tool.Close)
	w.tool = tool
	return w
}

// produce writes key=value records to partition p, at time at (now if
// zero), and returns the offset of the last.
func (w *rsWorld) produce(p int32, at time.Time, kvs ...string) int64 {
	w.t.Helper()
	var last int64
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		r := &kgo.Record{Topic: w.input, Partition: p, Key: []byte(k), Value: []byte(v), Timestamp: at}
		res := w.cl.ProduceSync(context.Background(), r)
		if err := res.FirstErr(); err != nil {
			w.t.Fatal(err)
		}
		last = res[0].Record.Offset
		w.records++
	}
	return last
}

// sums is the exact fold of kvs, poison left out.
func sums(kvs ...string) map[string]int64 {
	out := map[string]int64{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[k] += n
		}
	}
	return out
}

func sumFold(folds *atomic.Int64) engine.FoldFunc[int64] {
	return func(_ []byte, s int64, _ bool, rec engine.Record) (engine.Result[int64], error) {
		folds.Add(1)
		n, err := strconv.ParseInt(string(rec.Value), 10, 64)
		if err != nil {
			return engine.Result[int64]{}, fmt.Errorf("not a number: %q", rec.Value)
		}
		return engine.Set(s + n), nil
	}
}

// recoveryLog keeps the engine's "partition recovered" log lines.
type recoveryLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *recoveryLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *recoveryLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *recoveryLog) WithGroup(string) slog.Handler            { return l }
func (l *recoveryLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "partition recovered" {
		return nil
	}
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, "%s=%v ", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	return nil
}

func (l *recoveryLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// rsRun is one run of the engine, on the world's cache directory.
type rsRun struct {
	e      *engine.Engine[int64]
	cancel context.CancelFunc
	done   chan error
	folds  atomic.Int64
	log    recoveryLog
}

// run starts the engine: a dynamic member, which leaves the group when
// it stops.
func (w *rsWorld) run() *rsRun {
	w.t.Helper()
	r := &rsRun{done: make(chan error, 1)}
	b, err := kafka.New(context.Background(), kafka.Config{Mode: store.Transactional, SeedBrokers: w.brokers, Application: w.app})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = b.Close() })
	e, err := engine.New(engine.Config[int64]{Fold: sumFold(&r.folds), Codec: engine.Int64(), Store: b, Dir: w.dir,
		CommitInterval: 300 * time.Millisecond, Logger: slog.New(&r.log)})
	if err != nil {
		w.t.Fatal(err)
	}
	r.e = e
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		r.done <- e.Run(ctx, kafkaio.Config{SeedBrokers: w.brokers, Group: w.app, Topics: []string{w.input},
			DynamicMembership: true, SessionTimeout: 6 * time.Second})
	}()
	w.t.Cleanup(func() { cancel(); <-r.done; _ = e.Close() })
	return r
}

// stop stops the run and waits until it left the group and closed its
// cache, returning what Run returned.
func (w *rsWorld) stop(r *rsRun) error {
	w.t.Helper()
	r.cancel()
	err := <-r.done
	r.done <- err // for the cleanup
	if cerr := r.e.Close(); cerr != nil {
		w.t.Fatalf("closing the engine: %v", cerr)
	}
	w.waitNoMembers()
	return err
}

// ended waits until the run ends by itself, then closes it as stop
// does, returning what Run returned.
func (w *rsWorld) ended(r *rsRun) error {
	w.t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
	case <-time.After(2 * time.Minute):
		w.t.Fatal("the engine did not stop by itself within 2m")
	}
	return w.stop(r)
}

// waitFor polls cond until it holds, failing after timeout.
func (w *rsWorld) waitFor(what string, timeout time.Duration, cond func() (bool, string)) {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, s := cond()
		if ok {
			return
		}
		last = s
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
	}
	w.t.Fatalf("%s: not within %v; last: %s", what, timeout, last)
}

func (w *rsWorld) waitNoMembers() {
	w.waitFor("the group empty", time.Minute, func() (bool, string) {
		_, err := w.tool.noMembers(context.Background())
		return err == nil, fmt.Sprint(err)
	})
}

// caughtUp waits until every input partition's committed offset is its
// end, committed with the application's metadata.
func (w *rsWorld) caughtUp(r *rsRun) {
	w.waitFor("the engine committed to the end of the input", 2*time.Minute, func() (bool, string) {
		select {
		case err := <-r.done:
			r.done <- err
			w.t.Fatalf("the engine stopped: %v", err)
		default:
		}
		st, err := w.tool.Status(context.Background())
		if err != nil {
			return false, err.Error()
		}
		for _, p := range st.Partitions {
			if p.End > 0 && (p.Committed != p.End || p.CommittedBy != w.app) {
				return false, fmt.Sprintf("%+v", st.Partitions)
			}
		}
		return true, ""
	})
}

// running waits until the run has recovered every partition.
func (w *rsWorld) running(r *rsRun) {
	w.waitFor("every partition running", 2*time.Minute, func() (bool, string) {
		st := r.e.Status()
		n := 0
		for _, p := range st.Partitions {
			if p.State == engine.StateRunning {
				n++
			}
		}
		return n == rsPartitions, fmt.Sprintf("%+v", st.Partitions)
	})
}

// state reads every key's committed state from the snapshot topic.
func (w *rsWorld) state() map[string]int64 {
	w.t.Helper()
	out := map[string]int64{}
	for p := range int32(rsPartitions) {
		es, err := w.tool.Dump(context.Background(), p, "int64")
		if err != nil {
			w.t.Fatal(err)
		}
		for _, e := range es {
			if e.DecodeErr != "" {
				w.t.Fatalf("key %q: %s", e.Key, e.DecodeErr)
			}
			out[e.Key] = e.State.(int64)
		}
	}
	return out
}

func (w *rsWorld) checkState(want map[string]int64) {
	w.t.Helper()
	got := w.state()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		w.t.Fatalf("state in the snapshot topic:\n got %v\nwant %v", got, want)
	}
}

// offsets lists the committed input offsets and the snapshot partitions'
// log starts and ends: what a dry run must leave alone.
func (w *rsWorld) offsets() string {
	w.t.Helper()
	ctx := context.Background()
	c, err := w.tool.committed(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	snaps := w.tool.Target().SnapshotTopic
	s, err1 := w.adm.ListStartOffsets(ctx, snaps)
	e, err2 := w.adm.ListEndOffsets(ctx, snaps)
	if err := errors.Join(err1, err2); err != nil {
		w.t.Fatal(err)
	}
	var b strings.Builder
	for p := range int32(rsPartitions) {
		so, _ := s.Lookup(snaps, p)
		eo, _ := e.Lookup(snaps, p)
		fmt.Fprintf(&b, "p%d committed %d %q snapshots [%d,%d) ", p, c[p].At, c[p].Metadata, so.Offset, eo.Offset)
	}
	return b.String()
}

var rsEvents0 = []string{"a=1", "b=2", "a=3", "c=10", "b=-4", "a=5"}
var rsEvents1 = []string{"x=7", "y=8", "x=9", "z=100"}

// A full run, an idle warm restart, then reset -to-earliest: refused
// while an engine runs, a dry run changes nothing, and once applied an
// engine restarted on its warm cache refolds the whole input, once.
func TestResetToEarliestRefoldsOnKafka(t *testing.T) {
	w := newRSWorld(t)
	w.produce(0, time.Time{}, rsEvents0...)
	w.produce(1, time.Time{}, rsEvents1...)
	want := sums(append(append([]string{}, rsEvents0...), rsEvents1...)...)

	r := w.run()
	w.caughtUp(r)
	if err := w.stop(r); err != nil {
		t.Fatal(err)
	}
	w.checkState(want)

	// A second run with nothing to fold: its recovery (a delta from the
	// cache) leaves the cache's checkpoint at the snapshot partitions'
	// high watermarks.
	r = w.run()
	w.running(r)
	ctx := context.Background()
	_, err := w.tool.PlanReset(ctx, ResetOptions{ToEarliest: true})
	var live *LiveMembersError
	if !errors.As(err, &live) || len(live.Members) != 1 || live.Members[0].Host == "" || !strings.Contains(err.Error(), live.Members[0].Host) {
		t.Fatalf("PlanReset while an engine runs = %v, want a *LiveMembersError naming its member and host", err)
	}
	if err := w.stop(r); err != nil {
		t.Fatal(err)
	}
	t.Logf("recoveries of the idle run:\n%s", r.log.String())

	before := w.offsets()
	plan, err := w.tool.PlanReset(ctx, ResetOptions{ToEarliest: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan:\n%s", plan)
	if after := w.offsets(); after != before {
		t.Fatalf("the dry run changed things:\nbefore %s\nafter  %s", before, after)
	}
	if plan.Executed || len(plan.Inputs) != rsPartitions || plan.Inputs[0].To != 0 || plan.Inputs[0].Committed != int64(len(rsEvents0)) {
		t.Fatalf("plan = %+v", plan)
	}
	if err := w.tool.ApplyReset(ctx, plan); err != nil {
		t.Fatal(err)
	}
	after := w.offsets()
	md := wire.CommitMetadata(w.app)
	for p := range int32(rsPartitions) {
		s := plan.Snapshots[p]
		if wantP := fmt.Sprintf("p%d committed 0 %q snapshots [%d,%d) ", p, md, s.End, s.End); !strings.Contains(after, wantP) {
			t.Fatalf("after the reset: %s; want %s", after, wantP)
		}
	}
	if st := w.state(); len(st) != 0 {
		t.Fatalf("state after the reset = %v, want none", st)
	}
	if cs, err := w.tool.topicConfigs(ctx); err != nil || configText(cs) != configText(plan.SnapshotConfigs) || *cs["cleanup.policy"] != "compact" {
		t.Fatalf("the snapshot topic's configuration after the reset: %s (%v), want %s", configText(cs), err, configText(plan.SnapshotConfigs))
	}

	r = w.run()
	w.caughtUp(r)
	if err := w.stop(r); err != nil {
		t.Fatal(err)
	}
	t.Logf("recoveries after the reset:\n%s", r.log.String())
	if got := r.folds.Load(); got != int64(w.records) {
		t.Errorf("the engine folded %d records after the reset, want all %d (recoveries: %s)", got, w.records, r.log.String())
	}
	w.checkState(want)
}

// Reset to a datetime, confirmed: the engine, on its warm cache, refolds
// from that time with empty state, so each key's state is the fold of
// the records from then on only.
func TestResetToDatetimeRefoldsFromThenOnKafka(t *testing.T) {
	w := newRSWorld(t)
	at := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	old0, old1 := []string{"a=1", "b=2"}, []string{"x=7"}
	new0, new1 := []string{"a=100", "c=5"}, []string{"x=1000", "y=3"}
	w.produce(0, at.Add(-time.Minute), old0...)
	w.produce(1, at.Add(-time.Minute), old1...)
	w.produce(0, at.Add(time.Minute), new0...)
	w.produce(1, at.Add(time.Minute), new1...)

	r := w.run()
	w.caughtUp(r)
	if err := w.stop(r); err != nil {
		t.Fatal(err)
	}
	w.checkState(sums(append(append(append(append([]string{}, old0...), old1...), new0...), new1...)...))
	r = w.run()
	w.running(r)
	if err := w.stop(r); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	plan, err := w.tool.PlanReset(ctx, ResetOptions{ToDatetime: at})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.tool.ApplyReset(ctx, plan); !errors.Is(err, ErrDropStateNotConfirmed) {
		t.Fatalf("ApplyReset to a datetime without DropState = %v, want ErrDropStateNotConfirmed", err)
	}
	plan, err = w.tool.PlanReset(ctx, ResetOptions{ToDatetime: at, DropState: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan:\n%s", plan)
	if !strings.Contains(plan.StateAfter, "NOT of the whole input") || plan.Inputs[0].To != int64(len(old0)) || plan.Inputs[1].To != int64(len(old1)) {
		t.Fatalf("plan = %+v", plan)
	}
	if err := w.tool.ApplyReset(ctx, plan); err != nil {
		t.Fatal(err)
	}
	r = w.run()
	w.caughtUp(r)
	if err := w.stop(r); err != nil {
		t.Fatal(err)
	}
	t.Logf("recoveries after the reset:\n%s", r.log.String())
	w.checkState(sums(append(append([]string{}, new0...), new1...)...))
}
