package core

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/snapfence/snapfence/store"
)

// Output is the type of the outputs in these tests: the core only passes
// its outputs on, whatever their type.
type Output = store.Output

// The core's scripts are datadriven files under testdata/, one per
// behaviour, each run on a fresh core: a directive is a step, and what
// follows "----" is what the step must answer. `go test ./engine/internal/core
// -rewrite` writes the answers the core gives now; the diff is the review.
// The fold sums integers per key: op=N adds N, op=del deletes, op=boom
// panics. Every fold emits "key:sum" as an output.
//
//	assign offset=N [hot=H] [warm]    a new core resuming at input offset N
//	                                  (H hot keys; warm: keep the committed
//	                                  states and checkpoint in the KV)
//	recover key=K value=V offset=O    a recovered snapshot
//	recover key=K tombstone offset=O  a recovered tombstone
//	fold key=K offset=O op=OP         feed a record; answers the outputs, or "skip"
//	flush [max=N] [live]              the snapshots to write (at most N;
//	                                  live: FlushLive, tombstones held)
//	done key=K ok|fail                a write's outcome
//	committable [if-landed]           the committable offset (if-landed:
//	                                  as if every write in flight landed)
//	untaken                           the dirty keys no write in flight carries
//	state key=K                       the key's state
//	tick                              add 100 to every live key
//	drop                              drop the partition's cache
//	durable [cp=C]                    write what is done, with checkpoint C
//	defer [cp=C]                      Defer: keep what is done, and C, for later
//	committed key=K                   the key's committed state in the KV, as
//	                                  a committed read sees it
//	checkpoint                        the checkpoint in the KV
//	drop-uncommitted                  drop all but the committed states
//	keys                              the number of keys the partition holds
//
// Timers (timers.go): a timer is written p<ms> (processing time) or e<ms>
// (event time). A fold's record may carry set=T,T... and cancel=T,...
// (its Change's timer ops, set first) and ts=<ms> (its timestamp), and
// op=keep keeps the state (emitting "key:kept"); a key's
// snapshots list its timers in braces. The timer handler adds 1000 to the
// key's sum and emits "key:fired-T"; a timer at 666 panics, and one at 777
// sets the same kind of timer 1000 later (a repeating timer), one at 888
// sets itself again.
//
//	assign ... [no-timers]            no timer handler
//	recover ... timers=T,...          a recovered snapshot with timers
//	fire now=N                        fire what is due at processing time N
//	                                  and at the watermark; answers the
//	                                  outputs, then each failure
//	skip-timer                        skip the last failed timer
//	timers key=K                      the key's timers
//	due now=N                         whether a timer may be due (TimersDue)
//	watermark                         the event-time watermark
//	index                             the KV's timer index entries
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := newScript()
		datadriven.RunTest(t, path, s.step)
	})
}

// script is one file's core, its fold and its tick.
type script struct {
	c    *Core[[]byte, Output]
	kv   *MemKV
	in   store.TopicPartition
	fold FoldFunc[[]byte, Output]
	tick TickFunc[[]byte, Output]
	// lastFailed is the last timer failure fire answered.
	lastFailed *FoldError
}

func newScript() *script {
	s := &script{kv: NewMemKV(), in: store.TopicPartition{Topic: "in", Partition: 3}}
	s.fold = func(key, state []byte, exists bool, rec *Record) (Change[[]byte, Output], error) {
		op := string(rec.Value)
		if op == "boom" {
			panic("boom")
		}
		if op == "del" {
			return Change[[]byte, Output]{Op: Delete, Outputs: []Output{{Key: key, Value: []byte("deleted")}}, Timers: timerOps(rec.Headers)}, nil
		}
		sum := 0
		if exists {
			sum, _ = strconv.Atoi(string(state))
		}
		ops := timerOps(rec.Headers)
		if op == "keep" {
			return Change[[]byte, Output]{Timers: ops, Outputs: []Output{{Key: key, Value: []byte("kept")}}}, nil
		}
		n, err := strconv.Atoi(op)
		if err != nil {
			return Change[[]byte, Output]{}, fmt.Errorf("bad op %q", op)
		}
		sum += n
		v := strconv.Itoa(sum)
		return Change[[]byte, Output]{Op: Set, State: []byte(v), Outputs: []Output{{Key: key, Value: []byte(v)}}, Timers: ops}, nil
	}
	s.tick = func(key, state []byte, now int64) (Change[[]byte, Output], error) {
		sum, _ := strconv.Atoi(string(state))
		return Change[[]byte, Output]{Op: Set, State: []byte(strconv.Itoa(sum + 100))}, nil
	}
	return s
}

// timer is the handler of the scripts' timers.
func (s *script) timer(key, state []byte, t store.Timer) (Change[[]byte, Output], error) {
	if t.At == 666 {
		panic("boom")
	}
	sum, _ := strconv.Atoi(string(state))
	ch := Change[[]byte, Output]{Op: Set, State: []byte(strconv.Itoa(sum + 1000)),
		Outputs: []Output{{Key: key, Value: []byte("fired-" + timerString(t))}}}
	if t.At == 777 {
		ch.Timers = []TimerOp{{Timer: store.Timer{Kind: t.Kind, At: t.At + 1000}}}
	}
	if t.At == 888 { // sets itself again, in the past
		ch.Timers = []TimerOp{{Timer: t}}
	}
	return ch, nil
}

// timerOps are a record's timer ops: its set and cancel headers.
func timerOps(hs []store.Header) []TimerOp {
	var ops []TimerOp
	for _, h := range hs {
		for _, t := range parseTimers(string(h.Value)) {
			ops = append(ops, TimerOp{Timer: t, Cancel: h.Key == "cancel"})
		}
	}
	return ops
}

// parseTimers parses "p100,e5".
func parseTimers(list string) []store.Timer {
	var ts []store.Timer
	for _, f := range strings.Split(list, ",") {
		if f == "" {
			continue
		}
		at, err := strconv.ParseInt(f[1:], 10, 64)
		if err != nil {
			panic(fmt.Sprintf("bad timer %q", f))
		}
		kind := store.ProcessingTime
		switch f[0] {
		case 'e':
			kind = store.EventTime
		case 'x':
			kind = 'x'
		}
		ts = append(ts, store.Timer{Kind: kind, At: at})
	}
	return ts
}

func timerString(t store.Timer) string {
	k := "p"
	if t.Kind == store.EventTime {
		k = "e"
	}
	return k + strconv.FormatInt(t.At, 10)
}

func timersString(ts []store.Timer) string {
	var parts []string
	for _, t := range ts {
		parts = append(parts, timerString(t))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// checkpointArg is the directive's cp=C, nil without one.
func checkpointArg(t *testing.T, d *datadriven.TestData) []byte {
	if !d.HasArg("cp") {
		return nil
	}
	var v string
	d.ScanArgs(t, "cp", &v)
	return []byte(v)
}

// step runs one directive and returns its answer.
func (s *script) step(t *testing.T, d *datadriven.TestData) string {
	if d.Cmd != "assign" && s.c == nil {
		d.Fatalf(t, "%s before assign", d.Cmd)
	}
	var key string
	var offset int64
	switch d.Cmd {
	case "assign":
		d.ScanArgs(t, "offset", &offset)
		hot := 0
		if d.HasArg("hot") {
			d.ScanArgs(t, "hot", &hot)
		}
		var err error
		cfg := Config[[]byte, Output]{Input: s.in, Fold: s.fold, Tick: s.tick, Timer: s.timer, Codec: BytesCodec{}, Assigned: offset,
			HotKeys: hot, Warm: d.HasArg("warm")}
		if d.HasArg("no-timers") {
			cfg.Timer = nil
		}
		s.c, err = New(cfg, s.kv)
		return errString(err)
	case "recover":
		d.ScanArgs(t, "key", &key)
		d.ScanArgs(t, "offset", &offset)
		snap := store.Snapshot{Key: []byte(key), Offset: offset, Tombstone: d.HasArg("tombstone")}
		if !snap.Tombstone {
			var v string
			d.ScanArgs(t, "value", &v)
			snap.Value = []byte(v)
		}
		if d.HasArg("timers") {
			var v string
			d.ScanArgs(t, "timers", &v)
			snap.Timers = parseTimers(v)
		}
		return errString(s.c.Recovered(snap))
	case "fold":
		var op string
		d.ScanArgs(t, "key", &key)
		d.ScanArgs(t, "offset", &offset)
		d.ScanArgs(t, "op", &op)
		rec := &Record{Offset: offset, Key: []byte(key), Value: []byte(op)}
		for _, h := range []string{"set", "cancel"} {
			if d.HasArg(h) {
				var v string
				d.ScanArgs(t, h, &v)
				rec.Headers = append(rec.Headers, store.Header{Key: h, Value: []byte(v)})
			}
		}
		if d.HasArg("ts") {
			var ts int64
			d.ScanArgs(t, "ts", &ts)
			rec.Timestamp = time.UnixMilli(ts)
		}
		outs, err := s.c.Fold(rec)
		switch {
		case err != nil:
			return err.Error()
		case outs == nil:
			return "skip"
		}
		return outputs(outs)
	case "flush":
		limit := 0
		d.MaybeScanArgs(t, "max", &limit)
		flush := s.c.Flush
		if d.HasArg("live") {
			flush = s.c.FlushLive
		}
		snaps, err := flush(limit)
		if err != nil {
			return err.Error()
		}
		var parts []string
		for _, s := range snaps {
			if s.Tombstone {
				parts = append(parts, fmt.Sprintf("%s=~@%d", s.Key, s.Offset))
			} else {
				parts = append(parts, fmt.Sprintf("%s=%s@%d", s.Key, s.Value, s.Offset))
			}
			if s.Timers != nil {
				parts[len(parts)-1] += timersString(s.Timers)
			}
		}
		return "[" + strings.Join(parts, " ") + "]"
	case "done":
		d.ScanArgs(t, "key", &key)
		var werr error
		switch {
		case d.HasArg("fail") == d.HasArg("ok"):
			d.Fatalf(t, "done wants ok or fail")
		case d.HasArg("fail"):
			werr = errors.New("fenced")
		}
		return errString(s.c.WriteDone([]byte(key), werr))
	case "committable":
		if d.HasArg("if-landed") {
			return strconv.FormatInt(s.c.CommittableIfLanded(), 10)
		}
		return strconv.FormatInt(s.c.Committable(), 10)
	case "untaken":
		return strconv.Itoa(s.c.Untaken())
	case "state":
		d.ScanArgs(t, "key", &key)
		v, ok, err := s.c.State([]byte(key))
		return strings.TrimSpace(fmt.Sprintf("%s %t %s", v, ok, errString(err)))
	case "tick":
		_, failed, err := s.c.Tick(0)
		if err == nil && len(failed) > 0 {
			var parts []string
			for _, fe := range failed {
				parts = append(parts, fe.Error())
			}
			return strings.Join(parts, "\n")
		}
		return errString(err)
	case "skip":
		fe := s.c.Poisoned()
		if fe == nil {
			return "nothing to skip"
		}
		return errString(s.c.Skip(fe))
	case "drop":
		return errString(s.c.Drop())
	case "durable":
		return errString(s.c.Durable(checkpointArg(t, d)))
	case "defer":
		return errString(s.c.Defer(checkpointArg(t, d)))
	case "committed":
		d.ScanArgs(t, "key", &key)
		e, live, err := s.c.CommittedReader().Get(s.kv, []byte(key))
		if err != nil {
			return errString(err)
		}
		if e.Offset < 0 {
			return "none"
		}
		return fmt.Sprintf("%s@%d %t", e.State, e.Offset, live)
	case "checkpoint":
		cp, ok, err := s.c.Checkpoint()
		if err != nil || !ok {
			return fmt.Sprintf("none %s", errString(err))
		}
		return string(cp)
	case "drop-uncommitted":
		return errString(s.c.DropUncommitted())
	case "keys":
		return strconv.Itoa(s.c.Keys())
	case "fire":
		var now int64
		d.ScanArgs(t, "now", &now)
		fired, failed, err := s.c.FireTimers(now)
		outs := flatten(fired)
		if err != nil {
			return err.Error()
		}
		lines := []string{outputs(outs)}
		if len(outs) == 0 {
			lines[0] = "nothing fired"
		}
		for _, fe := range failed {
			lines = append(lines, fe.Error())
			s.lastFailed = fe
		}
		return strings.Join(lines, "\n")
	case "skip-timer":
		if s.lastFailed == nil {
			return "nothing to skip"
		}
		fe := s.lastFailed
		s.lastFailed = nil
		return errString(s.c.SkipTimer(fe))
	case "timers":
		d.ScanArgs(t, "key", &key)
		ts, err := s.c.Timers([]byte(key))
		if err != nil {
			return err.Error()
		}
		return timersString(ts)
	case "due":
		var now int64
		d.ScanArgs(t, "now", &now)
		return strconv.FormatBool(s.c.TimersDue(now))
	case "watermark":
		wm, ok := s.c.Watermark()
		if !ok {
			return "none"
		}
		return strconv.FormatInt(wm, 10)
	case "index":
		var parts []string
		for k := range s.kv.Scan(s.c.timerPrefix) {
			b := k[len(s.c.timerPrefix):]
			tm := store.Timer{Kind: store.TimerKind(b[0]), At: int64(binary.BigEndian.Uint64(b[1:9]) ^ (1 << 63))}
			parts = append(parts, fmt.Sprintf("%s:%s", b[9:], timerString(tm)))
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func outputs(outs []Output) string {
	var parts []string
	for _, o := range outs {
		parts = append(parts, fmt.Sprintf("%s:%s", o.Key, o.Value))
	}
	return strings.Join(parts, " ")
}

// Two partitions share one KV without seeing each other's keys.
func TestPartitionsAreKeptApart(t *testing.T) {
	kv := NewMemKV()
	sum := func(key, state []byte, exists bool, rec *Record) (Change[[]byte, Output], error) {
		return Change[[]byte, Output]{Op: Set, State: rec.Value}, nil
	}
	a, _ := New(Config[[]byte, Output]{Input: store.TopicPartition{Topic: "t", Partition: 1}, Fold: sum, Codec: BytesCodec{}}, kv)
	b, _ := New(Config[[]byte, Output]{Input: store.TopicPartition{Topic: "t", Partition: 10}, Fold: sum, Codec: BytesCodec{}}, kv)
	a.Fold(&Record{Offset: 0, Key: []byte("k"), Value: []byte("a")})
	b.Fold(&Record{Offset: 0, Key: []byte("k"), Value: []byte("b")})
	if err := a.Drop(); err != nil {
		t.Fatal(err)
	}
	if v, ok, _ := b.State([]byte("k")); !ok || string(v) != "b" {
		t.Fatalf("b's k = %q %t after a's drop", v, ok)
	}
}

// failingKV fails every write after the first n, as a full disk would.
type failingKV struct {
	*MemKV
	n int
}

func (f *failingKV) Set(k, v []byte) error {
	if f.n--; f.n < 0 {
		return errors.New("no space left on device")
	}
	return f.MemKV.Set(k, v)
}

// A cache failure stops the partition with the cache's error: never a
// silently wrong state, and nothing committable past it.
func TestCacheFailureStopsThePartition(t *testing.T) {
	kv := &failingKV{MemKV: NewMemKV(), n: 0}
	sum := func(key, state []byte, exists bool, rec *Record) (Change[[]byte, Output], error) {
		return Change[[]byte, Output]{Op: Set, State: rec.Value}, nil
	}
	c, err := New(Config[[]byte, Output]{Input: store.TopicPartition{Topic: "t"}, Fold: sum, Codec: BytesCodec{}, HotKeys: 1}, kv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fold(&Record{Offset: 0, Key: []byte("a"), Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Fold(&Record{Offset: 1, Key: []byte("b"), Value: []byte("2")})
	if err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("fold with a failing cache: %v", err)
	}
	if _, err := c.Flush(0); err == nil || c.Stopped() == nil {
		t.Fatal("the core kept going after a cache failure")
	}
	if got := c.Committable(); got != 0 {
		t.Fatalf("committable %d after a cache failure, want 0", got)
	}
}

// With a hot set of 4 keys, states of 50 keys go to the KV and come back:
// folds, flushes and the committable offset do not notice.
func TestEvictedKeysAreFlushedFromTheKV(t *testing.T) {
	kv := NewMemKV()
	add := func(key, state []byte, exists bool, rec *Record) (Change[[]byte, Output], error) {
		n, _ := strconv.Atoi(string(state))
		d, _ := strconv.Atoi(string(rec.Value))
		return Change[[]byte, Output]{Op: Set, State: []byte(strconv.Itoa(n + d))}, nil
	}
	c, err := New(Config[[]byte, Output]{Input: store.TopicPartition{Topic: "t"}, Fold: add, Codec: BytesCodec{}, HotKeys: 4}, kv)
	if err != nil {
		t.Fatal(err)
	}
	off := int64(0)
	for round := range 3 {
		for k := range 50 {
			if _, err := c.Fold(&Record{Offset: off, Key: []byte(fmt.Sprintf("k%02d", k)), Value: []byte(strconv.Itoa(k))}); err != nil {
				t.Fatal(err)
			}
			off++
		}
		if c.Committable() != int64(round*50) {
			t.Fatalf("round %d: committable %d, want %d", round, c.Committable(), round*50)
		}
		snaps, err := c.Flush(0)
		if err != nil || len(snaps) != 50 {
			t.Fatalf("round %d: flushed %d (%v), want 50", round, len(snaps), err)
		}
		for _, s := range snaps {
			var k int
			fmt.Sscanf(string(s.Key), "k%02d", &k)
			if string(s.Value) != strconv.Itoa(k*(round+1)) {
				t.Fatalf("round %d: %s = %s, want %d", round, s.Key, s.Value, k*(round+1))
			}
			if err := c.WriteDone(s.Key, nil); err != nil {
				t.Fatal(err)
			}
		}
		if c.Dirty() || c.Committable() != off {
			t.Fatalf("round %d: dirty %t committable %d after all writes", round, c.Dirty(), c.Committable())
		}
	}
	if c.Keys() != 50 || len(c.hot) > 5 {
		t.Fatalf("keys %d, hot %d", c.Keys(), len(c.hot))
	}
}

// A tick visits the keys in key order, hot and cold alike, so its outputs
// come out in the same order on every run.
func TestTickVisitsKeysInKeyOrder(t *testing.T) {
	var seen []string
	set := func(key, state []byte, exists bool, rec *Record) (Change[[]byte, Output], error) {
		return Change[[]byte, Output]{Op: Set, State: rec.Value}, nil
	}
	tick := func(key, state []byte, now int64) (Change[[]byte, Output], error) {
		seen = append(seen, string(key))
		return Change[[]byte, Output]{Op: Keep, Outputs: []Output{{Key: key, Value: state}}}, nil
	}
	c, err := New(Config[[]byte, Output]{Input: store.TopicPartition{Topic: "t"}, Fold: set, Tick: tick, Codec: BytesCodec{}, HotKeys: 2}, NewMemKV())
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range []string{"z", "b", "y", "a", "x", "c"} {
		if _, err := c.Fold(&Record{Offset: int64(i), Key: []byte(k), Value: []byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.hot) == 6 {
		t.Fatal("nothing was evicted: the test needs cold keys")
	}
	fired, _, err := c.Tick(0)
	if err != nil {
		t.Fatal(err)
	}
	outs := flatten(fired)
	if got, want := fmt.Sprint(seen), "[a b c x y z]"; got != want {
		t.Fatalf("tick order = %s, want %s", got, want)
	}
	if got, want := outputs(outs), "a:a b:b c:c x:x y:y z:z"; got != want {
		t.Fatalf("tick outputs = %s, want %s", got, want)
	}
}

// Eviction takes the keys that became hot first, skipping those being
// written, never the map's random order.
func TestEvictionTakesTheOldestHotKeys(t *testing.T) {
	set := func(key, state []byte, exists bool, rec *Record) (Change[[]byte, Output], error) {
		return Change[[]byte, Output]{Op: Set, State: rec.Value}, nil
	}
	c, err := New(Config[[]byte, Output]{Input: store.TopicPartition{Topic: "t"}, Fold: set, Codec: BytesCodec{}, HotKeys: 8}, NewMemKV())
	if err != nil {
		t.Fatal(err)
	}
	off := int64(0)
	fold := func(keys ...string) {
		t.Helper()
		for _, k := range keys {
			if _, err := c.Fold(&Record{Offset: off, Key: []byte(k), Value: []byte(k)}); err != nil {
				t.Fatal(err)
			}
			off++
		}
	}
	hot := func() string {
		var keys []string
		for _, e := range c.hotOrder {
			if c.hot[e.key] == e.slot {
				keys = append(keys, e.key)
			}
		}
		if len(keys) != len(c.hot) {
			t.Fatalf("hot order %v does not cover the %d hot keys", keys, len(c.hot))
		}
		return strings.Join(keys, "")
	}
	fold("a", "b", "c", "d", "e", "f", "g", "h")
	if snaps, err := c.Flush(1); err != nil || len(snaps) != 1 || string(snaps[0].Key) != "a" {
		t.Fatalf("flush = %v, %v; want a", snaps, err)
	}
	// 9 hot keys: one over, and HotKeys/8 more; a is being written
	fold("i")
	if got := hot(); got != "adefghi" {
		t.Fatalf("hot = %s, want adefghi: b and c evicted, a kept while written", got)
	}
	if err := c.WriteDone([]byte("a"), nil); err != nil {
		t.Fatal(err)
	}
	fold("j", "k")
	if got := hot(); got != "efghijk" {
		t.Fatalf("hot = %s, want efghijk", got)
	}
	// an evicted key read again is the newest hot key
	if v, ok, err := c.State([]byte("b")); err != nil || !ok || string(v) != "b" {
		t.Fatalf("b = %q %t %v", v, ok, err)
	}
	if got := hot(); got != "efghijkb" {
		t.Fatalf("hot = %s, want efghijkb", got)
	}
}

// The zero Change is Keep: a fold or tick that returns it leaves the key's
// state as it was and dirties nothing, so no snapshot is written for it.
func TestZeroChangeKeepsTheState(t *testing.T) {
	zero := false
	fold := func(key, state []byte, exists bool, rec *Record) (Change[[]byte, Output], error) {
		if zero {
			return Change[[]byte, Output]{}, nil
		}
		return Change[[]byte, Output]{Op: Set, State: rec.Value}, nil
	}
	tick := func(key, state []byte, now int64) (Change[[]byte, Output], error) {
		return Change[[]byte, Output]{}, nil
	}
	c, err := New(Config[[]byte, Output]{Input: store.TopicPartition{Topic: "t"}, Fold: fold, Tick: tick, Codec: BytesCodec{}}, NewMemKV())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fold(&Record{Offset: 0, Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	snaps, err := c.Flush(0)
	if err != nil || len(snaps) != 1 {
		t.Fatalf("flush: %v, %v", snaps, err)
	}
	if err := c.WriteDone(snaps[0].Key, nil); err != nil {
		t.Fatal(err)
	}
	zero = true
	if _, err := c.Fold(&Record{Offset: 1, Key: []byte("k"), Value: []byte("w")}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Tick(0); err != nil {
		t.Fatal(err)
	}
	if c.Dirty() || c.Committable() != 2 {
		t.Fatalf("dirty %t, committable %d after zero changes; want clean at 2", c.Dirty(), c.Committable())
	}
	if snaps, err := c.Flush(0); err != nil || len(snaps) != 0 {
		t.Fatalf("flush after zero changes: %v, %v; want nothing", snaps, err)
	}
	if s, ok, err := c.State([]byte("k")); err != nil || !ok || string(s) != "v" {
		t.Fatalf("state %q (%t, %v), want v", s, ok, err)
	}
}

// flatten is the outputs of fired, in order.
func flatten(fired []Fired[Output]) []Output {
	var outs []Output
	for _, f := range fired {
		outs = append(outs, f.Outputs...)
	}
	return outs
}

// A refused record or tick fails with its refusal without running the
// fold or tick, once; the poison policy then skips it, and the rest
// folds as before.
func TestRefusedRecordAndTickFailWithoutRunning(t *testing.T) {
	refused := errors.New("refused")
	var ran []string
	fold := func(key, state []byte, exists bool, rec *Record) (Change[[]byte, Output], error) {
		ran = append(ran, "fold "+string(rec.Value))
		return Change[[]byte, Output]{Op: Set, State: rec.Value}, nil
	}
	tick := func(key, state []byte, now int64) (Change[[]byte, Output], error) {
		ran = append(ran, "tick "+string(key))
		return Change[[]byte, Output]{Op: Keep}, nil
	}
	c, err := New(Config[[]byte, Output]{Input: store.TopicPartition{Topic: "t"}, Fold: fold, Tick: tick, Codec: BytesCodec{},
		Refused: []Refusal{{Offset: 1, Err: refused}, {Offset: -1, Key: []byte("a"), Err: refused}}}, NewMemKV())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fold(&Record{Offset: 0, Key: []byte("a"), Value: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Fold(&Record{Offset: 1, Key: []byte("a"), Value: []byte("1")})
	fe, ok := err.(*FoldError)
	if !ok || fe.Offset != 1 || string(fe.Key) != "a" || !errors.Is(err, refused) {
		t.Fatalf("fold of the refused record: %v, want its FoldError with the refusal", err)
	}
	if err := c.Skip(fe); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fold(&Record{Offset: 2, Key: []byte("b"), Value: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, failed, err := c.Tick(0)
		if err != nil {
			t.Fatal(err)
		}
		if len(ran) == 2 && (len(failed) != 1 || string(failed[0].Key) != "a" || !errors.Is(failed[0], refused)) {
			t.Fatalf("first tick failed %v, want a's refusal", failed)
		}
	}
	if got, want := fmt.Sprint(ran), "[fold 0 fold 2 tick b tick a tick b]"; got != want {
		t.Fatalf("ran %s, want %s", got, want)
	}
}

// A recovery's decoded states are kept while there is room under HotKeys;
// a key recovered again updates its slot (the latest snapshot's state)
// and adds nothing to the eviction order; past the room, states go to the
// KV only.
func TestRecoveredStatesStayHotWithinTheRoom(t *testing.T) {
	c, err := New(Config[[]byte, Output]{Input: store.TopicPartition{Topic: "t"}, Codec: BytesCodec{}, HotKeys: 2}, NewMemKV())
	if err != nil {
		t.Fatal(err)
	}
	recover := func(key string, off int64) {
		t.Helper()
		s := store.Snapshot{Key: []byte(key), Value: []byte(fmt.Sprint(off)), Offset: off}
		if !c.KeepsRecovered(s.Key) {
			if err := c.Recovered(s); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := c.RecoveredState(s, bytes.Clone(s.Value)); err != nil {
			t.Fatal(err)
		}
	}
	for off := range int64(100) {
		recover("a", off)
	}
	recover("b", 100)
	recover("c", 101)
	if len(c.hot) != 2 || len(c.hotOrder) != 2 {
		t.Fatalf("%d hot keys, %d in the eviction order; want a and b, once each", len(c.hot), len(c.hotOrder))
	}
	if c.KeepsRecovered([]byte("c")) || !c.KeepsRecovered([]byte("a")) {
		t.Fatal("KeepsRecovered: want a (hot) kept, c (no room) not")
	}
	for key, want := range map[string]string{"a": "99", "b": "100", "c": "101"} {
		s, ok, err := c.State([]byte(key))
		if err != nil || !ok || string(s) != want {
			t.Fatalf("%s = %q, %v, %v; want %s", key, s, ok, err, want)
		}
	}
}

// Defer holds at most MaxDeferred committed states: a batch that brings
// the pending ones to it writes them all, with its checkpoint, however
// soon the next Durable would come.
func TestDeferWritesOnceMaxDeferredStatesArePending(t *testing.T) {
	kv := &countingKV{MemKV: NewMemKV()}
	set := func(key, state []byte, exists bool, rec *Record) (Change[[]byte, Output], error) {
		return Change[[]byte, Output]{Op: Set, State: rec.Value}, nil
	}
	c, err := New(Config[[]byte, Output]{Input: store.TopicPartition{Topic: "t"}, Fold: set, Codec: BytesCodec{}, HotKeys: 2 * MaxDeferred}, kv)
	if err != nil {
		t.Fatal(err)
	}
	kv.writes = 0
	off := int64(0)
	commit := func(keys int, cp string) {
		t.Helper()
		for k := range keys {
			if _, err := c.Fold(&Record{Offset: off, Key: fmt.Appendf(nil, "k%06d", k), Value: []byte(cp)}); err != nil {
				t.Fatal(err)
			}
			off++
		}
		snaps, err := c.Flush(0)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range snaps {
			if err := c.WriteDone(s.Key, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Defer([]byte(cp)); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint := func() string {
		cp, ok, err := c.Checkpoint()
		if err != nil || !ok {
			return "none"
		}
		return string(cp)
	}
	// The same keys again and again stay one pending state each.
	for i := range 3 {
		commit(MaxDeferred-1, fmt.Sprintf("C%d", i))
	}
	if got := checkpoint(); got != "none" {
		t.Fatalf("checkpoint %s with %d states pending, want none", got, MaxDeferred-1)
	}
	// One more key reaches the bound.
	commit(MaxDeferred, "C9")
	if got := checkpoint(); got != "C9" {
		t.Fatalf("checkpoint %s with %d states pending, want C9", got, MaxDeferred)
	}
	e, live, err := c.CommittedReader().Get(kv, fmt.Appendf(nil, "k%06d", MaxDeferred-1))
	if err != nil || !live || string(e.State) != "C9" {
		t.Fatalf("committed state of the last key: %q %t %v, want C9", e.State, live, err)
	}
	if c.Deferring() {
		t.Fatal("still deferring after the write")
	}
	// Four batches, one write of each key and one of the checkpoint.
	if kv.writes != MaxDeferred+1 {
		t.Fatalf("%d KV writes, want %d: each key's newest state and the checkpoint", kv.writes, MaxDeferred+1)
	}
}

// countingKV counts the writes applied to a MemKV.
type countingKV struct {
	*MemKV
	writes int
}

func (k *countingKV) Apply(ws []Write) error {
	k.writes += len(ws)
	return k.MemKV.Apply(ws)
}

// A partition started afresh reads nothing from the KV for a key it never
// had; once a state can be in the KV and not in memory (the uncommitted
// ones dropped after a revoke, a standby's replicated copy) a key's first
// touch reads it there again.
func TestAKeyNotInMemoryIsReadFromTheKVOnceItCanBeThere(t *testing.T) {
	tp := store.TopicPartition{Topic: "t"}
	t.Run("dropped-uncommitted", func(t *testing.T) {
		kv := NewMemKV()
		c, err := New(Config[[]byte, Output]{Input: tp, Codec: BytesCodec{}, Fold: func(_, _ []byte, _ bool, rec *Record) (Change[[]byte, Output], error) {
			return Change[[]byte, Output]{Op: Set, State: rec.Value}, nil
		}}, kv)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Fold(&Record{Offset: 0, Key: []byte("a"), Value: []byte("committed")}); err != nil {
			t.Fatal(err)
		}
		if snaps, err := c.Flush(1); err != nil || len(snaps) != 1 {
			t.Fatalf("flush = %v, %v", snaps, err)
		}
		if err := c.WriteDone([]byte("a"), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Fold(&Record{Offset: 1, Key: []byte("a"), Value: []byte("uncommitted")}); err != nil {
			t.Fatal(err)
		}
		if err := c.DropUncommitted(); err != nil {
			t.Fatal(err)
		}
		if v, ok, err := c.State([]byte("a")); err != nil || !ok || string(v) != "committed" {
			t.Fatalf("a = %q, %t, %v; want the committed state", v, ok, err)
		}
	})
	t.Run("replicated", func(t *testing.T) {
		c, err := New(Config[[]byte, Output]{Input: tp, Codec: BytesCodec{}}, NewMemKV())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Replicated([]store.Snapshot{{Key: []byte("a"), Value: []byte("replicated"), Offset: 3}}, nil); err != nil {
			t.Fatal(err)
		}
		if v, ok, err := c.State([]byte("a")); err != nil || !ok || string(v) != "replicated" {
			t.Fatalf("a = %q, %t, %v; want the replicated state", v, ok, err)
		}
	})
}
