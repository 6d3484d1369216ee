package kfakeworld

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
)

// keysOf is the first n one-letter keys ("a", "b", ...) of input
// partition p.
func keysOf(p int32, n int) []string {
	var out []string
	for c := 'a'; len(out) < n; c++ {
		if k := string(c); world.PartitionOf(k, Partitions) == p {
			out = append(out, k)
		}
	}
	return out
}

// logLine is one record of a snapshot partition, as a comparable line:
// offset, producer, kind (the control type or the data's), key, value,
// headers.
func logLine(r *kgo.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "@%d pid %d ", r.Offset, r.ProducerID)
	if r.Attrs.IsControl() {
		fmt.Fprintf(&b, "control %x", r.Key)
		return b.String()
	}
	fmt.Fprintf(&b, "data %q=%q", r.Key, r.Value)
	if r.Value == nil {
		b.WriteString("(null)")
	}
	for _, h := range r.Headers {
		fmt.Fprintf(&b, " %s:%x", h.Key, h.Value)
	}
	return b.String()
}

func logLines(log []*kgo.Record) []string {
	out := make([]string, len(log))
	for i, r := range log {
		out[i] = logLine(r)
	}
	return out
}

// readAll reads snapshot partition p up to its high watermark.
func readAll(t *testing.T, w *World, p int32) []*kgo.Record {
	t.Helper()
	_, hw := offsets(t, w, p)
	if hw == 0 {
		return nil
	}
	return w.uncommittedLog(p, 0, hw)
}

// latestData is each key's last data record in log.
func latestData(log []*kgo.Record) map[string]*kgo.Record {
	out := map[string]*kgo.Record{}
	for _, r := range log {
		if !r.Attrs.IsControl() {
			out[string(r.Key)] = r
		}
	}
	return out
}

func apply(t *testing.T, w *World, steps ...world.Step) {
	t.Helper()
	for _, s := range steps {
		if vs := w.Apply(s); len(vs) > 0 {
			t.Fatalf("%s: %v", s, vs)
		}
	}
}

// writeSnapshots has m0 own every partition and write several snapshots
// of each key of keys, then one of last, each round flushed and committed
// on its own (its own batches, its own transactions). The last batch,
// which kfake's cleaner never cleans (the active segment), is then a
// commit marker (transactional mode) or last's snapshot (plain mode): the
// records it would keep are each key's latest.
func writeSnapshots(t *testing.T, w *World, keys []string, last string) {
	t.Helper()
	apply(t, w, world.Step{Kind: world.Join, Member: 0}, world.Step{Kind: world.Poll, Member: 0})
	round := func(produce ...world.Step) {
		t.Helper()
		apply(t, w, produce...)
		apply(t, w,
			world.Step{Kind: world.Poll, Member: 0},
			world.Step{Kind: world.Advance, D: 6 * time.Second},
			world.Step{Kind: world.Poll, Member: 0},
			world.Step{Kind: world.Flush, Member: 0},
			world.Step{Kind: world.Advance, D: time.Second},
		)
	}
	for n := range 3 {
		var produce []world.Step
		for i, k := range keys {
			produce = append(produce, world.Step{Kind: world.Produce, Key: k, Delta: 1 + n + i})
		}
		round(produce...)
	}
	round(world.Step{Kind: world.Produce, Key: last, Delta: 7})
}

// TestCompact: kfake's cleaner, run by the compact step, leaves each key's
// latest record at its offset and removes the superseded ones; a member
// taking over recovers the latest of each key, and every invariant and
// the history hold at quiescence.
func TestCompact(t *testing.T) {
	for _, mode := range []store.Mode{store.Transactional, store.Plain} {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w, err := New(Config{Mode: mode})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				const p = 0
				keys := keysOf(p, 3)
				writeSnapshots(t, w, keys[:2], keys[2])
				lso, hw := offsets(t, w, p)
				if lso != hw {
					t.Fatalf("before: last stable offset %d, high watermark %d: a transaction is open", lso, hw)
				}
				before := readAll(t, w, p)
				want := latestData(before)
				for _, k := range keys[:2] {
					if n := slices.IndexFunc(before, func(r *kgo.Record) bool { return string(r.Key) == k }); n < 0 || want[k] == before[n] {
						t.Fatalf("before: key %s has no superseded record:\n%s", k, strings.Join(logLines(before), "\n"))
					}
				}

				apply(t, w, world.Step{Kind: world.Compact, Partition: p})

				after := readAll(t, w, p)
				if l, h := offsets(t, w, p); l != lso || h != hw {
					t.Fatalf("after: last stable offset %d, high watermark %d, want %d, %d", l, h, lso, hw)
				}
				// Every record left is the one the log held at its offset
				// (offsets and headers kept), every data record left is
				// its key's latest, and every key's latest is left.
				at := map[int64]string{}
				for _, r := range before {
					at[r.Offset] = logLine(r)
				}
				data := map[string]bool{}
				for _, r := range after {
					if at[r.Offset] != logLine(r) {
						t.Errorf("after: %s, before: %q", logLine(r), at[r.Offset])
					}
					if r.Attrs.IsControl() {
						continue
					}
					if want[string(r.Key)] == nil || want[string(r.Key)].Offset != r.Offset {
						t.Errorf("after: %s is superseded", logLine(r))
					}
					data[string(r.Key)] = true
				}
				for k := range want {
					if !data[k] {
						t.Errorf("after: key %q's latest record is gone", k)
					}
				}
				if len(after) >= len(before) || after[len(after)-1].Offset != hw-1 {
					t.Errorf("after: %d records ending at %d, before: %d ending at %d", len(after), after[len(after)-1].Offset, len(before), hw-1)
				}
				if t.Failed() {
					t.Fatalf("before:\n%s\nafter:\n%s", strings.Join(logLines(before), "\n"), strings.Join(logLines(after), "\n"))
				}
				t.Logf("compacted p%d from %d records to %d:\n%s", p, len(before), len(after), strings.Join(logLines(after), "\n"))

				// m1 takes over from the crashed m0 and recovers.
				apply(t, w,
					world.Step{Kind: world.Crash, Member: 0},
					world.Step{Kind: world.Join, Member: 1},
					world.Step{Kind: world.Poll, Member: 1},
					world.Step{Kind: world.Advance, D: 11 * time.Second},
					world.Step{Kind: world.Poll, Member: 1},
				)
				for _, v := range w.Quiesce() {
					t.Errorf("%s", v)
				}
				// m1's recoveries of p read each key's latest snapshot, once.
				reads := map[int]map[string][]string{}
				ok := map[int]bool{}
				for _, op := range w.History().Ops() {
					if op.Member != 1 || op.Partition != p {
						continue
					}
					switch op.Kind {
					case history.ReadStart:
						reads[op.Read] = map[string][]string{}
					case history.Read:
						reads[op.Read][op.Key] = append(reads[op.Read][op.Key], op.Value)
					case history.ReadEnd:
						ok[op.Read] = op.Outcome == history.OK
					}
				}
				recovered := 0
				for n, got := range reads {
					if !ok[n] {
						continue
					}
					recovered++
					for _, k := range keys {
						if w := []string{string(want[k].Value)}; !slices.Equal(got[k], w) {
							t.Errorf("m1's recovery %d read %s = %q, want %q", n, k, got[k], w)
						}
					}
				}
				if recovered == 0 {
					t.Errorf("m1 did not recover p%d", p)
				}
			})
		})
	}
}

// TestCompactWithATransactionOpen: while a transaction is open on a
// snapshot partition (this one or the other: kfake's cleaner cleans them
// all), the compact step does nothing; once it ends, it cleans.
func TestCompactWithATransactionOpen(t *testing.T) {
	for _, open := range []int{0, 1} {
		t.Run(fmt.Sprintf("open on p%d", open), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w, err := New(Config{Mode: store.Transactional})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				const p = 0
				keys := keysOf(p, 3)
				writeSnapshots(t, w, keys[:2], keys[2])
				apply(t, w, world.Step{Kind: world.ForeignOpen, Partition: open})
				if lso, hw := offsets(t, w, int32(open)); lso >= hw {
					t.Fatalf("p%d: last stable offset %d, high watermark %d: no transaction open", open, lso, hw)
				}
				before := logLines(readAll(t, w, p))
				apply(t, w, world.Step{Kind: world.Compact, Partition: p})
				if after := logLines(readAll(t, w, p)); !slices.Equal(after, before) {
					t.Fatalf("compacted with a transaction open on p%d:\nbefore:\n%s\nafter:\n%s", open, strings.Join(before, "\n"), strings.Join(after, "\n"))
				}
				apply(t, w, world.Step{Kind: world.ForeignEnd, Commit: true})
				lsos, hws := w.snapshotEnds()
				apply(t, w, world.Step{Kind: world.Compact, Partition: p})
				if after := readAll(t, w, p); len(after) >= len(before) {
					other := readAll(t, w, 1-p)
					t.Fatalf("not compacted once the transaction ended (last stable offsets %v, high watermarks %v, foreign %d, guard %t/%t):\n%s\np%d:\n%s", lsos, hws, w.foreignProducer(),
						cleanerWouldDropAnAbort(logRecords(after), w.foreignProducer()), cleanerWouldDropAnAbort(logRecords(other), w.foreignProducer()),
						strings.Join(logLines(after), "\n"), 1-p, strings.Join(logLines(other), "\n"))
				}
				for _, v := range w.Quiesce() {
					t.Errorf("%s", v)
				}
			})
		})
	}
}

// cleanerWouldDropAnAbort on logs made by hand: a producer whose data is
// all aborted or superseded, with an abort marker in the cleaned range,
// is refused unless it is the foreign one; the last batch is not
// cleaned.
func TestCleanerWouldDropAnAbort(t *testing.T) {
	const a, b, foreign = 1, 2, 3
	data := func(o, pid int64, key string) logRecord {
		return logRecord{Offset: o, ProducerID: pid, Transactional: true, Key: []byte(key)}
	}
	marker := func(o, pid int64, commit bool) logRecord {
		k := []byte{0, 0, 0, 0}
		if commit {
			k[3] = 1
		}
		return logRecord{Offset: o, ProducerID: pid, Control: true, Transactional: true, Key: k}
	}
	plain := func(o, pid int64, key string) logRecord {
		return logRecord{Offset: o, ProducerID: pid, Key: []byte(key)}
	}
	for _, c := range []struct {
		name string
		log  []logRecord
		want bool
	}{
		{"empty", nil, false},
		{"plain", []logRecord{plain(0, a, "k"), plain(1, a, "k"), plain(2, b, "k")}, false},
		{"all of a's data aborted", []logRecord{data(0, a, "k"), marker(1, a, false), data(2, b, "m"), marker(3, b, true)}, true},
		{"a's aborted, then committed", []logRecord{data(0, a, "k"), marker(1, a, false), data(2, a, "k"), marker(3, a, true), data(4, b, "m"), marker(5, b, true)}, false},
		{"a's committed data superseded", []logRecord{data(0, a, "k"), marker(1, a, true), data(2, a, "m"), marker(3, a, false), data(4, b, "k"), marker(5, b, true)}, true},
		{"the foreign's", []logRecord{data(0, foreign, "m"), marker(1, foreign, false), data(2, a, "k"), marker(3, a, true)}, false},
		{"the abort is the last batch", []logRecord{data(0, a, "k"), marker(1, a, true), data(2, b, "k"), data(3, a, "m"), marker(4, a, false)}, false},
		{"a's only survivor may be in the last batch", []logRecord{data(0, a, "k"), marker(1, a, false), plain(2, b, "m"), plain(3, a, "k")}, true},
		{"b's survivor is in the cleaned range", []logRecord{data(0, b, "k"), marker(1, b, false), plain(2, b, "m"), plain(3, a, "k")}, false},
	} {
		if got := cleanerWouldDropAnAbort(c.log, foreign); got != c.want {
			t.Errorf("%s: %t, want %t", c.name, got, c.want)
		}
	}
}

// TestKfakeCleanerDropsAnAbortMarkerReadersNeed pins the kfake behaviour
// cleanerWouldDropAnAbort guards against: producer x's only transaction
// aborted between two of y's committed ones; the cleaner removes x's aborted data
// and its abort marker (none of x's data survives) but still lists the
// aborted transaction to read_committed readers, and franz-go then takes
// x's next committed transaction for aborted too.
func TestKfakeCleanerDropsAnAbortMarkerReadersNeed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, err := New(Config{Mode: store.Transactional})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ctx := context.Background()
		// txn runs one transaction of transactional ID id, from a client
		// of its own (as the world's foreign producer does): the same
		// producer ID each time, a new epoch.
		txn := func(id, key string, commit bool) {
			t.Helper()
			cl, err := kgo.NewClient(kgo.SeedBrokers(w.seeds...), kgo.Dialer(w.net.DialContext),
				kgo.TransactionalID(id), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			r := &kgo.Record{Topic: w.snapshotTopic, Partition: 0, Key: []byte(key), Value: []byte(key)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatal(err)
			}
		}
		producerOf := func(key string) int64 {
			t.Helper()
			_, hw := offsets(t, w, 0)
			for _, r := range w.uncommittedLog(0, 0, hw) {
				if string(r.Key) == key {
					return r.ProducerID
				}
			}
			t.Fatalf("no record %q", key)
			return 0
		}
		txn("y", "first", true) // survives: the log start stays below x's abort
		txn("x", "aborted", false)
		txn("y", "y", true)
		x := producerOf("aborted")
		_, hw := offsets(t, w, 0)
		if !cleanerWouldDropAnAbort(logRecords(w.uncommittedLog(0, 0, hw)), -1) {
			t.Fatal("the precondition lets the cleaner run")
		}
		if w.compact() {
			t.Fatal("the compact step ran the cleaner")
		}
		w.c.Compact() // as the step would without the precondition
		txn("x", "later", true)
		if pid := producerOf("later"); pid != x {
			t.Fatalf("x's producer ID went from %d to %d: the test shows nothing", x, pid)
		}
		_, hw = offsets(t, w, 0)
		t.Logf("the log after:\n%s", strings.Join(logLines(w.uncommittedLog(0, 0, hw)), "\n"))
		cl, err := kgo.NewClient(kgo.SeedBrokers(w.seeds...), kgo.Dialer(w.net.DialContext),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{w.snapshotTopic: {0: kgo.NewOffset().AtStart()}}),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var got []string
		for pos := int64(0); pos < hw; {
			pctx, cancel := context.WithTimeout(ctx, time.Minute)
			fs := cl.PollFetches(pctx)
			cancel()
			if err := fs.Err0(); err != nil {
				t.Fatalf("reading at %d: %v", pos, err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				pos = max(pos, r.Offset+1)
				if !r.Attrs.IsControl() {
					got = append(got, string(r.Key))
				}
			})
		}
		if slices.Contains(got, "later") {
			t.Fatalf("read_committed read %q: x's later commit is seen (kfake keeps the marker or forgets the aborted transaction now: the precondition can go)", got)
		}
		t.Logf("read_committed read %q: x's later commit is taken for aborted", got)
	})
}
