package core

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/snapfence/snapfence/store"
)

// The core's tests are scripts: each line is a step, and "->" gives what
// the step must answer. The fold sums integers per key; "+N" adds N, "del"
// deletes, "boom" panics. Every fold emits "key:sum" as an output.
//
//	assign N           a new core resuming at input offset N
//	recover K=V@O      a recovered snapshot (K=~@O for a tombstone)
//	fold K@O OP        feed a record; answers the outputs, or "skip"
//	flush [N]          the snapshots to write (at most N)
//	done K ok|fail     a write's outcome
//	committable        the committable offset
//	state K            the key's state
//	tick               add 100 to every live key
//	drop               drop the partition's cache
func runScript(t *testing.T, script string) {
	t.Helper()
	var c *Core[[]byte]
	kv := NewMemKV()
	in := store.TopicPartition{Topic: "in", Partition: 3}
	fold := func(key, state []byte, exists bool, rec Record) (Change[[]byte], error) {
		op := string(rec.Value)
		if op == "boom" {
			panic("boom")
		}
		if op == "del" {
			return Change[[]byte]{Delete: true, Outputs: []Output{{Key: key, Value: []byte("deleted")}}}, nil
		}
		sum := 0
		if exists {
			sum, _ = strconv.Atoi(string(state))
		}
		n, err := strconv.Atoi(op)
		if err != nil {
			return Change[[]byte]{}, fmt.Errorf("bad op %q", op)
		}
		sum += n
		v := strconv.Itoa(sum)
		return Change[[]byte]{State: []byte(v), Outputs: []Output{{Key: key, Value: []byte(v)}}}, nil
	}
	tick := func(key, state []byte, now int64) (Change[[]byte], error) {
		sum, _ := strconv.Atoi(string(state))
		return Change[[]byte]{State: []byte(strconv.Itoa(sum + 100))}, nil
	}
	for i, line := range strings.Split(strings.TrimSpace(script), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		step, want, _ := strings.Cut(line, "->")
		step, want = strings.TrimSpace(step), strings.TrimSpace(want)
		f := strings.Fields(step)
		var got string
		switch f[0] {
		case "assign":
			n, _ := strconv.ParseInt(f[1], 10, 64)
			var err error
			c, err = New(Config[[]byte]{Input: in, Fold: fold, Tick: tick, Codec: BytesCodec{}, Assigned: n}, kv)
			got = errString(err)
		case "recover":
			kvs, off, _ := strings.Cut(f[1], "@")
			k, v, _ := strings.Cut(kvs, "=")
			o, _ := strconv.ParseInt(off, 10, 64)
			s := store.Snapshot{Key: []byte(k), Value: []byte(v), Offset: o, Tombstone: v == "~"}
			if s.Tombstone {
				s.Value = nil
			}
			got = errString(c.Recovered(s))
		case "fold":
			k, off, _ := strings.Cut(f[1], "@")
			o, _ := strconv.ParseInt(off, 10, 64)
			outs, err := c.Fold(&Record{Offset: o, Key: []byte(k), Value: []byte(f[2])})
			switch {
			case err != nil:
				got = err.Error()
			case outs == nil:
				got = "skip"
			default:
				got = outputs(outs)
			}
		case "flush":
			limit := 0
			if len(f) > 1 {
				limit, _ = strconv.Atoi(f[1])
			}
			snaps, err := c.Flush(limit)
			got = errString(err)
			if err == nil {
				var parts []string
				for _, s := range snaps {
					if s.Tombstone {
						parts = append(parts, fmt.Sprintf("%s=~@%d", s.Key, s.Offset))
					} else {
						parts = append(parts, fmt.Sprintf("%s=%s@%d", s.Key, s.Value, s.Offset))
					}
				}
				got = "[" + strings.Join(parts, " ") + "]"
			}
		case "done":
			var werr error
			if f[2] == "fail" {
				werr = errors.New("fenced")
			}
			got = errString(c.WriteDone([]byte(f[1]), werr))
		case "committable":
			got = strconv.FormatInt(c.Committable(), 10)
		case "state":
			v, ok, err := c.State([]byte(f[1]))
			got = fmt.Sprintf("%s %t %s", v, ok, errString(err))
			got = strings.TrimSpace(got)
		case "tick":
			_, err := c.Tick(0)
			got = errString(err)
		case "drop":
			got = errString(c.Drop())
		case "keys":
			got = strconv.Itoa(c.Keys())
		default:
			t.Fatalf("line %d: unknown step %q", i+1, f[0])
		}
		if want != "" && got != want {
			t.Fatalf("line %d: %s\n got: %s\nwant: %s", i+1, step, got, want)
		}
	}
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

func TestFoldFlushCommit(t *testing.T) {
	runScript(t, `
		assign 10
		committable      -> 10
		fold a@10 1      -> a:1
		fold b@11 5      -> b:5
		fold a@12 2      -> a:3
		# a holds 10, b holds 11: nothing is durable yet
		committable      -> 10
		flush            -> [a=3@12 b=5@11]
		done b ok
		committable      -> 10
		done a ok
		committable      -> 13
		flush            -> []
	`)
}

// A flush round is the keys dirty when it begins, in key order, handed out
// a batch at a time: the same keys share a batch on every run.
func TestFlushTakesRoundsInKeyOrder(t *testing.T) {
	runScript(t, `
		assign 0
		fold e@0 1       -> e:1
		fold c@1 1       -> c:1
		fold a@2 1       -> a:1
		fold d@3 1       -> d:1
		fold b@4 1       -> b:1
		flush 2          -> [a=1@2 b=1@4]
		done a ok
		done b ok
		# dirtied during the round: they wait for the next one
		fold 0@5 1       -> 0:1
		fold a@6 1       -> a:2
		flush 2          -> [c=1@1 d=1@3]
		done c fail
		done d ok
		# the round's last batch is short
		flush 2          -> [e=1@0]
		done e ok
		committable      -> 1
		# the next round: what is dirty now, the failed write included
		flush 2          -> [0=1@5 a=2@6]
		flush 2          -> [c=1@1]
		done 0 ok
		done a ok
		done c ok
		committable      -> 7
		flush 2          -> []
	`)
}

func TestReplayAfterRecoveryIsSkipped(t *testing.T) {
	runScript(t, `
		assign 5
		recover a=7@8
		recover b=~@9
		# the consumer resumes at the committed 5: a's 5..8 and b's 9 are in
		# the snapshots already
		fold a@6 100     -> skip
		fold a@8 100     -> skip
		fold b@9 1       -> skip
		fold a@10 1      -> a:8
		fold b@11 2      -> b:2
		state a          -> 8 true ok
	`)
}

func TestAKeyChangedDuringItsWriteStaysDirty(t *testing.T) {
	runScript(t, `
		assign 0
		fold a@0 1       -> a:1
		flush            -> [a=1@0]
		fold a@1 1       -> a:2
		# taken but not yet durable: a second flush does not take it again
		flush            -> []
		done a ok
		# the write covered offset 0 only; a still holds 1
		committable      -> 1
		flush            -> [a=2@1]
		done a ok
		committable      -> 2
	`)
}

func TestFailedWriteKeepsTheKeyDirty(t *testing.T) {
	runScript(t, `
		assign 0
		fold a@0 1       -> a:1
		flush            -> [a=1@0]
		done a fail
		committable      -> 0
		flush            -> [a=1@0]
		done a ok
		committable      -> 1
	`)
}

func TestDeleteKeepsItsOffset(t *testing.T) {
	runScript(t, `
		assign 0
		fold a@0 4       -> a:4
		fold a@1 del     -> a:deleted
		state a          -> false ok
		flush            -> [a=~@1]
		done a ok
		fold a@1 9       -> skip
		fold a@2 3       -> a:3
	`)
}

func TestFoldPanicNamesTheRecordAndCommitsNothingPastIt(t *testing.T) {
	runScript(t, `
		assign 0
		fold a@0 1       -> a:1
		fold k@1 boom    -> engine: fold of in/3 offset 1 key "k" failed: panic: boom
		# the partition is stopped at the bad record
		fold a@2 1       -> engine: fold of in/3 offset 1 key "k" failed: panic: boom
		committable      -> 0
	`)
}

func TestTickChangesAreFlushed(t *testing.T) {
	runScript(t, `
		assign 0
		fold a@0 1       -> a:1
		flush            -> [a=1@0]
		done a ok
		tick
		state a          -> 101 true ok
		flush            -> [a=101@0]
		done a ok
		committable      -> 1
	`)
}

func TestDropLeavesNothingBehind(t *testing.T) {
	runScript(t, `
		assign 0
		fold a@0 1       -> a:1
		fold b@1 1       -> b:1
		keys             -> 2
		drop
		keys             -> 0
		flush            -> []
		committable      -> 2
	`)
}

// Two partitions share one KV without seeing each other's keys.
func TestPartitionsAreKeptApart(t *testing.T) {
	kv := NewMemKV()
	sum := func(key, state []byte, exists bool, rec Record) (Change[[]byte], error) {
		return Change[[]byte]{State: rec.Value}, nil
	}
	a, _ := New(Config[[]byte]{Input: store.TopicPartition{Topic: "t", Partition: 1}, Fold: sum, Codec: BytesCodec{}}, kv)
	b, _ := New(Config[[]byte]{Input: store.TopicPartition{Topic: "t", Partition: 10}, Fold: sum, Codec: BytesCodec{}}, kv)
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
	sum := func(key, state []byte, exists bool, rec Record) (Change[[]byte], error) {
		return Change[[]byte]{State: rec.Value}, nil
	}
	c, err := New(Config[[]byte]{Input: store.TopicPartition{Topic: "t"}, Fold: sum, Codec: BytesCodec{}, HotKeys: 1}, kv)
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
	add := func(key, state []byte, exists bool, rec Record) (Change[[]byte], error) {
		n, _ := strconv.Atoi(string(state))
		d, _ := strconv.Atoi(string(rec.Value))
		return Change[[]byte]{State: []byte(strconv.Itoa(n + d))}, nil
	}
	c, err := New(Config[[]byte]{Input: store.TopicPartition{Topic: "t"}, Fold: add, Codec: BytesCodec{}, HotKeys: 4}, kv)
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
	set := func(key, state []byte, exists bool, rec Record) (Change[[]byte], error) {
		return Change[[]byte]{State: rec.Value}, nil
	}
	tick := func(key, state []byte, now int64) (Change[[]byte], error) {
		seen = append(seen, string(key))
		return Change[[]byte]{Keep: true, Outputs: []Output{{Key: key, Value: state}}}, nil
	}
	c, err := New(Config[[]byte]{Input: store.TopicPartition{Topic: "t"}, Fold: set, Tick: tick, Codec: BytesCodec{}, HotKeys: 2}, NewMemKV())
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
	outs, err := c.Tick(0)
	if err != nil {
		t.Fatal(err)
	}
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
	set := func(key, state []byte, exists bool, rec Record) (Change[[]byte], error) {
		return Change[[]byte]{State: rec.Value}, nil
	}
	c, err := New(Config[[]byte]{Input: store.TopicPartition{Topic: "t"}, Fold: set, Codec: BytesCodec{}, HotKeys: 8}, NewMemKV())
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
