package operator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/internal/operator"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/wire"
)

const (
	vfApp   = "clicks"
	vfInput = "orders"
)

var vfSnaps = kafka.DefaultSnapshotTopic(vfApp, vfInput)

const vfOffsets = "__consumer_offsets"

// vfCluster is a kfake cluster with the application's input and snapshot
// topics (2 partitions each), on which a test writes snapshot records and
// commits offsets as the application (or something else) would.
type vfCluster struct {
	t   *testing.T
	c   *kfake.Cluster
	cl  *kgo.Client
	adm *kadm.Client
}

var vfTxnIDs atomic.Int64

func newVFCluster(t *testing.T) *vfCluster {
	t.Helper()
	// kfake keeps group offsets outside any topic; the group's offsets
	// partition the transactions check describes is a topic of the
	// test's own (one partition: the group's is 0).
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, vfInput, vfSnaps), kfake.SeedTopics(1, vfOffsets))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	w := &vfCluster{t: t, c: c, cl: cl, adm: kadm.NewClient(cl)}
	// Input to consume: committed offsets up to 10 are within the log.
	for p := range int32(2) {
		var rs []*kgo.Record
		for i := range 10 {
			rs = append(rs, &kgo.Record{Topic: vfInput, Partition: p, Key: []byte(fmt.Sprint("k", i)), Value: []byte("1")})
		}
		if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// snap is a snapshot of key at input offset off ("" value: a tombstone).
func snap(app, key, value string, off int64) wire.Record {
	s := store.Snapshot{Key: []byte(key), Value: []byte(value), Offset: off, Tombstone: value == ""}
	return wire.EncodeSnapshot(app, s)
}

func toKgo(topic string, p int32, recs []wire.Record) []*kgo.Record {
	var out []*kgo.Record
	for _, r := range recs {
		kr := &kgo.Record{Topic: topic, Partition: p, Key: r.Key, Value: r.Value}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		out = append(out, kr)
	}
	return out
}

// open begins a transaction of a transactional.id of its own with recs
// on snapshot partition p, and returns its producer.
func (w *vfCluster) open(p int32, recs ...wire.Record) *kgo.Client {
	w.t.Helper()
	return w.openOn(vfSnaps, p, recs...)
}

// openOn is open on partition p of topic.
func (w *vfCluster) openOn(topic string, p int32, recs ...wire.Record) *kgo.Client {
	w.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID(fmt.Sprintf("verify-test-%d", vfTxnIDs.Add(1))), kgo.TransactionTimeout(15*time.Minute))
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(cl.Close)
	if err := cl.BeginTransaction(); err != nil {
		w.t.Fatal(err)
	}
	if err := cl.ProduceSync(context.Background(), toKgo(topic, p, recs)...).FirstErr(); err != nil {
		w.t.Fatal(err)
	}
	return cl
}

// txn writes recs to snapshot partition p in a transaction, committed or
// aborted.
func (w *vfCluster) txn(commit bool, p int32, recs ...wire.Record) {
	w.t.Helper()
	cl := w.open(p, recs...)
	if err := cl.EndTransaction(context.Background(), kgo.TransactionEndTry(commit)); err != nil {
		w.t.Fatal(err)
	}
}

// plain writes recs to snapshot partition p without a transaction.
func (w *vfCluster) plain(p int32, recs ...wire.Record) {
	w.t.Helper()
	if err := w.cl.ProduceSync(context.Background(), toKgo(vfSnaps, p, recs)...).FirstErr(); err != nil {
		w.t.Fatal(err)
	}
}

// commitOffset commits the group's offset of input partition p with
// metadata.
func (w *vfCluster) commitOffset(p int32, at int64, metadata string) {
	w.t.Helper()
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: vfInput, Partition: p, At: at, LeaderEpoch: -1, Metadata: metadata})
	resp, err := w.adm.CommitOffsets(context.Background(), vfApp, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		w.t.Fatal(err)
	}
}

// clean writes what a Transactional application leaves: on each
// partition snapshots in increasing input offset (a key rewritten, a
// tombstone, an offset marker) and the offset committed with the
// application's metadata.
func (w *vfCluster) clean() {
	w.txn(true, 0, snap(vfApp, "a", "1", 0), snap(vfApp, "b", "2", 1))
	w.txn(true, 0, snap(vfApp, "a", "3", 4), snap(vfApp, "b", "", 5))
	w.txn(true, 0, wire.EncodeOffsetMarker(vfApp, 7, store.GroupIdentity{MemberID: "m", Generation: 1}))
	w.txn(true, 1, snap(vfApp, "c", "1", 2), snap(vfApp, "c", "2", 2), snap(vfApp, "d", "9", 8))
	w.commitOffset(0, 8, wire.CommitMetadata(vfApp))
	w.commitOffset(1, 9, wire.CommitMetadata(vfApp))
}

func (w *vfCluster) verify(target operator.Target) *operator.VerifyReport {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if target.Application == "" {
		target.Application, target.Input = vfApp, vfInput
	}
	tool, err := operator.Open(ctx, operator.Conn{Brokers: w.c.ListenAddrs()}, target, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	defer tool.Close()
	r, err := tool.Verify(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	var text bytes.Buffer
	if err := r.Text(&text); err != nil {
		w.t.Fatal(err)
	}
	w.t.Logf("verify:\n%s", text.String())
	return r
}

// only fails unless r's violations are exactly of check on partitions
// (in order), and returns them.
func only(t *testing.T, r *operator.VerifyReport, check string, partitions ...int32) []operator.Violation {
	t.Helper()
	var got []int32
	for _, v := range r.Violations {
		if v.Check != check {
			t.Fatalf("violation %+v, want only %s", v, check)
		}
		got = append(got, v.Partition)
	}
	if !slices.Equal(got, partitions) {
		t.Fatalf("%s violations on partitions %v, want %v: %+v", check, got, partitions, r.Violations)
	}
	if r.OK() {
		t.Fatal("OK with violations")
	}
	return r.Violations
}

func status(r *operator.VerifyReport) map[string]string {
	m := map[string]string{}
	for _, inv := range r.Invariants {
		m[inv.Name] = inv.Status
	}
	return m
}

// The clean case: what a Transactional application leaves holds every
// invariant; the counts are the records written.
func TestVerifyCleanTopicIsOK(t *testing.T) {
	w := newVFCluster(t)
	w.clean()
	r := w.verify(operator.Target{})
	if !r.OK() || len(r.Violations) != 0 {
		t.Fatalf("violations on a clean topic: %+v", r.Violations)
	}
	for name, st := range status(r) {
		if st != operator.StatusOK {
			t.Errorf("invariant %s is %s, want ok", name, st)
		}
	}
	if len(r.Partitions) != 2 {
		t.Fatalf("partitions %+v", r.Partitions)
	}
	p0, p1 := r.Partitions[0], r.Partitions[1]
	if p0.Committed != 5 || p0.Uncommitted != 5 || p0.Keys != 2 || p0.Aborted != 0 || p0.Open != 0 ||
		p0.CommittedOffset != 8 || p0.CommittedBy != vfApp {
		t.Errorf("partition 0: %+v", p0)
	}
	if p1.Committed != 3 || p1.Keys != 2 || p1.CommittedOffset != 9 {
		t.Errorf("partition 1: %+v", p1)
	}
	var text bytes.Buffer
	_ = r.Text(&text)
	if !strings.Contains(text.String(), "OK: ") || strings.Contains(text.String(), "VIOLATION") {
		t.Errorf("text:\n%s", text.String())
	}
}

// The negative control of invariant 1: a committed snapshot of a key
// with a lower input offset than the key's earlier one (a stale owner's
// write landing after the new owner's) is found, naming the key and both
// offsets; a record at the same input offset is not a regression.
func TestVerifyFindsAStaleOverwrite(t *testing.T) {
	w := newVFCluster(t)
	w.clean()
	w.txn(true, 1, snap(vfApp, "c", "stale", 1)) // snapshot offset: 5 (3 records, a commit marker)
	r := w.verify(operator.Target{})
	v := only(t, r, operator.CheckOffsetRegression, 1)[0]
	if v.Key != "c" {
		t.Fatalf("key %q, want c", v.Key)
	}
	for _, s := range []string{`key "c"`, "at offset 4 holds input offset 1", "below input offset 2 of its snapshot at offset 0"} {
		if !strings.Contains(v.Detail, s) {
			t.Errorf("detail %q does not say %q", v.Detail, s)
		}
	}
	if st := status(r)[operator.InvariantSnapshotOffsets]; st != operator.StatusViolated {
		t.Fatalf("snapshot-offsets is %s", st)
	}
	var text bytes.Buffer
	_ = r.Text(&text)
	if !strings.Contains(text.String(), "VIOLATION offset-regression partition 1") || !strings.Contains(text.String(), "FAIL: 1 violation of snapshot-offsets") {
		t.Errorf("text:\n%s", text.String())
	}
}

// Records of an aborted transaction that go back in offset are no
// violation: read_committed skips them, as recovery does. They are
// counted as aborted, on either side of committed records.
func TestVerifyIgnoresAnAbortedStaleWrite(t *testing.T) {
	w := newVFCluster(t)
	w.clean()
	w.txn(false, 0, snap(vfApp, "a", "stale", 1), snap(vfApp, "b", "stale", 0))
	w.txn(true, 0, snap(vfApp, "a", "4", 9))
	w.txn(false, 0, snap(vfApp, "a", "stale", 2))
	r := w.verify(operator.Target{})
	if !r.OK() {
		t.Fatalf("violations: %+v", r.Violations)
	}
	p0 := r.Partitions[0]
	if p0.Aborted != 3 || p0.Committed != 6 || p0.Uncommitted != 9 || p0.Open != 0 {
		t.Fatalf("partition 0: %+v, want 3 aborted of 9 read uncommitted, 6 committed", p0)
	}
}

// The negative control of invariant 2: another application's committed
// snapshot and a record that does not decode are violations; a record
// without an application header is a note.
func TestVerifyFindsForeignAndCorruptRecords(t *testing.T) {
	w := newVFCluster(t)
	w.clean()
	w.txn(true, 0, snap("other", "a", "x", 9))
	w.plain(1, wire.Record{Key: []byte("raw"), Value: []byte("not snapfence's")}, snap("", "legacy", "1", 9))
	r := w.verify(operator.Target{})
	if len(r.Violations) != 2 {
		t.Fatalf("violations %+v, want a foreign and a corrupt record", r.Violations)
	}
	f, c := r.Violations[0], r.Violations[1]
	if f.Check != operator.CheckForeignRecord || f.Partition != 0 || f.Key != "a" || !strings.Contains(f.Detail, `application "other", not "clicks"`) {
		t.Errorf("foreign: %+v", f)
	}
	if c.Check != operator.CheckCorruptRecord || c.Partition != 1 || c.Key != "raw" || !strings.Contains(c.Detail, "no snapfence.v header") {
		t.Errorf("corrupt: %+v", c)
	}
	if st := status(r)[operator.InvariantSnapshotWriters]; st != operator.StatusViolated {
		t.Fatalf("snapshot-writers is %s", st)
	}
	if r.Partitions[1].NoApplication != 2 || !strings.Contains(strings.Join(r.Notes, "\n"), "partition 1: 2 committed records without an application header") {
		t.Errorf("no note of the records without an application: %+v %q", r.Partitions[1], r.Notes)
	}
}

// The negative control of invariant 3's first half: an offset committed
// without the application's metadata (moved by hand) is a violation
// naming the offset and what it carries, and the commands that keep state
// and offset together; in Plain mode the invariant does not apply.
func TestVerifyFindsAnOffsetMovedByHand(t *testing.T) {
	w := newVFCluster(t)
	w.clean()
	w.commitOffset(1, 10, "")
	r := w.verify(operator.Target{})
	v := only(t, r, operator.CheckOffsetMoved, 1)[0]
	for _, s := range []string{"orders/1", "offset 10", `metadata "", not "snapfence app=clicks"`, "snapfence skip", "snapfence reset"} {
		if !strings.Contains(v.Detail, s) {
			t.Errorf("detail %q does not say %q", v.Detail, s)
		}
	}
	w.commitOffset(0, 9, wire.CommitMetadata("other"))
	only(t, w.verify(operator.Target{}), operator.CheckOffsetMoved, 0, 1)

	plain := w.verify(operator.Target{Application: vfApp, Input: vfInput, Plain: true})
	if !plain.OK() || status(plain)[operator.InvariantCommittedOffsets] != operator.StatusNotApplicable ||
		status(plain)[operator.InvariantTransactions] != operator.StatusNotApplicable {
		t.Fatalf("plain: %+v %+v", plain.Violations, plain.Invariants)
	}
}

// The negative control of invariant 3's second half: offsets committed
// by the application past the input's start over a snapshot topic that
// was deleted and recreated (or never had anything) are a violation per
// partition; a partition whose offset is at the log start is not.
func TestVerifyFindsStateMissingUnderOffsets(t *testing.T) {
	w := newVFCluster(t)
	w.clean()
	ctx := context.Background()
	if _, err := w.adm.DeleteTopic(ctx, vfSnaps); err != nil {
		t.Fatal(err)
	}
	if _, err := w.adm.CreateTopic(ctx, 2, 1, nil, vfSnaps); err != nil {
		t.Fatal(err)
	}
	w.commitOffset(1, 0, wire.CommitMetadata(vfApp))
	r := w.verify(operator.Target{})
	v := only(t, r, operator.CheckStateMissing, 0)[0]
	for _, s := range []string{"orders/0", "committed offset 8", "log start 0", "clicks-orders-snapshots/0 holds no committed record"} {
		if !strings.Contains(v.Detail, s) {
			t.Errorf("detail %q does not say %q", v.Detail, s)
		}
	}

	// The snapshot topic gone altogether: the same, and a note.
	if _, err := w.adm.DeleteTopic(ctx, vfSnaps); err != nil {
		t.Fatal(err)
	}
	r = w.verify(operator.Target{})
	only(t, r, operator.CheckStateMissing, 0)
	if !strings.Contains(strings.Join(r.Notes, "\n"), "does not exist") {
		t.Fatalf("notes %q", r.Notes)
	}
}

// The negative control of invariant 4: a transaction open on the snapshot
// partition that no coordinator has ongoing is a violation with its abort
// command; one a coordinator has ongoing is a note. kfake's coordinator
// cannot forget a transaction, so the hang is made as store/kafka's tests
// make it: a transaction really open on the partition whose producer
// ListTransactions no longer maps to a transactional.id.
func TestVerifyFindsAHangingTransaction(t *testing.T) {
	w := newVFCluster(t)
	w.clean()
	cl := w.open(0, snap(vfApp, "ghost", "never committed", 9))
	pid, _, err := cl.ProducerID(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	ongoing := w.verify(operator.Target{})
	if !ongoing.OK() || !strings.Contains(strings.Join(ongoing.Notes, "\n"), "ongoing") || ongoing.Partitions[0].Open != 1 {
		t.Fatalf("an ongoing transaction: %+v, notes %q, %+v", ongoing.Violations, ongoing.Notes, ongoing.Partitions[0])
	}

	w.c.ControlKey(int16(kmsg.ListTransactions), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		w.c.KeepControl()
		req := kreq.(*kmsg.ListTransactionsRequest)
		if slices.Contains(req.ProducerIDFilters, pid) {
			return req.ResponseKind(), nil, true // nothing maps the producer
		}
		return nil, nil, false
	})
	r := w.verify(operator.Target{})
	v := only(t, r, operator.CheckHangingTransaction, 0)[0]
	for _, s := range []string{vfSnaps + "/0", fmt.Sprintf("producer %d", pid), "since offset 8", "kafka-transactions.sh", "abort --topic " + vfSnaps + " --partition 0 --start-offset 8"} {
		if !strings.Contains(v.Detail, s) {
			t.Errorf("detail %q does not say %q", v.Detail, s)
		}
	}
	// The committed records below the hang are read and checked.
	if p0 := r.Partitions[0]; p0.Committed != 5 || p0.Open != 1 {
		t.Errorf("partition 0: %+v", p0)
	}
}

// A transaction hanging on the group's offsets partition, where it holds
// the committed offset, is a violation too, reported once although every
// input partition's look finds it.
func TestVerifyFindsAHangingTransactionOnTheOffsetsPartition(t *testing.T) {
	w := newVFCluster(t)
	w.clean()
	cl := w.openOn(vfOffsets, 0, snap(vfApp, "offsets", "never committed", 9))
	pid, _, err := cl.ProducerID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	w.c.ControlKey(int16(kmsg.ListTransactions), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		w.c.KeepControl()
		req := kreq.(*kmsg.ListTransactionsRequest)
		if slices.Contains(req.ProducerIDFilters, pid) {
			return req.ResponseKind(), nil, true
		}
		return nil, nil, false
	})
	v := only(t, w.verify(operator.Target{}), operator.CheckHangingTransaction, 0)[0]
	if !strings.Contains(v.Detail, "__consumer_offsets/0") || !strings.Contains(v.Detail, "abort --topic __consumer_offsets --partition 0 --start-offset 0") {
		t.Fatalf("detail %q", v.Detail)
	}
}

// A topic full of violations makes a report of bounded size: at most
// MaxListedViolations listed per check and partition, the rest counted.
func TestVerifyListsABoundedNumberOfViolations(t *testing.T) {
	w := newVFCluster(t)
	w.clean()
	var recs []wire.Record
	for i := range operator.MaxListedViolations + 10 {
		recs = append(recs, snap("other", fmt.Sprint("x", i), "1", 9))
	}
	w.txn(true, 0, recs...)
	r := w.verify(operator.Target{})
	if len(r.Violations) != operator.MaxListedViolations || r.Omitted != 10 || r.OK() ||
		r.Partitions[0].Violations != operator.MaxListedViolations+10 {
		t.Fatalf("%d listed, %d omitted, partition 0: %+v", len(r.Violations), r.Omitted, r.Partitions[0])
	}
	for _, inv := range r.Invariants {
		if inv.Name == operator.InvariantSnapshotWriters && inv.Violations != operator.MaxListedViolations+10 {
			t.Fatalf("%+v", inv)
		}
	}
	var text bytes.Buffer
	_ = r.Text(&text)
	if !strings.Contains(text.String(), "and 10 more not listed") || !strings.Contains(text.String(), "FAIL: 60 violations") {
		t.Fatalf("text:\n%s", text.String())
	}
}

// The report's JSON: the shape the command prints with -json.
func TestVerifyReportJSON(t *testing.T) {
	w := newVFCluster(t)
	w.clean()
	w.txn(true, 1, snap(vfApp, "c", "stale", 1))
	b, err := json.Marshal(w.verify(operator.Target{}))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"application", "input", "group", "snapshot_topic", "mode", "invariants", "violations", "partitions"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q in %s", k, b)
		}
	}
	v := m["violations"].([]any)[0].(map[string]any)
	if v["check"] != "offset-regression" || v["partition"] != 1.0 || v["key"] != "c" || v["detail"] == "" {
		t.Errorf("violation %v", v)
	}
	p := m["partitions"].([]any)[1].(map[string]any)
	for _, k := range []string{"partition", "records_committed", "records_uncommitted", "keys", "aborted", "open", "committed_offset", "violations"} {
		if _, ok := p[k]; !ok {
			t.Errorf("no %q in partition %v", k, p)
		}
	}
}
