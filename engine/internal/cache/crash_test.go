package cache

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/store"
)

// The cache through crashes, over Pebble's crash-simulating filesystem: a
// core folds, writes (committed or aborted), evicts, and the cache is
// flushed, at random; after every step the filesystem is crashed (synced
// data kept, a random share of the rest) and the cache reopened, as a
// restart would. The committed part of the reopened cache must hold, for
// every key, a state that was committed and no older than its checkpoint
// says (never an uncommitted one, never one the checkpoint has moved
// past); a delta recovery from it must give the committed state exactly.
//
// Negative controls, each run by hand when this was written and each
// caught here: a core that evicts a dirty key over its committed state
// (an uncommitted state survives a crash), and one that writes the
// checkpoint in a batch of its own before the states it covers (a crash
// between the two leaves a checkpoint over states it never saw).

func openCrashable(t *testing.T, fs vfs.FS) *KV {
	t.Helper()
	compactions := make(chan struct{}, 1)
	opts := options(compactions)
	opts.FS = fs
	db, err := pebble.Open("cache", opts)
	if err != nil {
		t.Fatalf("reopening the cache after a crash: %v", err)
	}
	kv := &KV{db: db, compactions: compactions}
	if err := kv.upgrade(); err != nil {
		t.Fatal(err)
	}
	return kv
}

// crashModel is what the store committed: commits[i] is every key's
// committed state after the i-th committed batch (checkpoint "i").
type crashModel struct {
	commits []map[string]string
}

func (m *crashModel) last() map[string]string { return m.commits[len(m.commits)-1] }

// output stands for the engine's outputs, which the core only passes on.
type output struct{}

var crashInput = store.TopicPartition{Topic: "in", Partition: 0}

// flushingKV flushes its memtable after a random share of its writes: in
// a long run a memtable fills, and is flushed, between any two batches.
type flushingKV struct {
	*KV
	rng *rand.Rand
}

func (k flushingKV) maybeFlush(err error) error {
	if err == nil && k.rng.IntN(3) == 0 {
		err = k.db.Flush()
	}
	return err
}

func (k flushingKV) Set(key, value []byte) error { return k.maybeFlush(k.KV.Set(key, value)) }
func (k flushingKV) Delete(key []byte) error     { return k.maybeFlush(k.KV.Delete(key)) }
func (k flushingKV) Apply(ws []core.Write) error { return k.maybeFlush(k.KV.Apply(ws)) }

func newCrashCore(t *testing.T, kv core.KV) *core.Core[[]byte, output] {
	t.Helper()
	c, err := core.New(core.Config[[]byte, output]{Input: crashInput, Codec: core.BytesCodec{}, HotKeys: 2, Warm: true,
		Fold: func(_ []byte, _ []byte, _ bool, rec *core.Record) (core.Change[[]byte, output], error) {
			return core.Change[[]byte, output]{Op: core.Set, State: rec.Value}, nil
		}}, kv)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// check checks the reopened cache against the model, then recovers the
// delta from its checkpoint and checks the state is the committed one.
func (m *crashModel) check(t *testing.T, c *core.Core[[]byte, output], keys []string, step string) {
	t.Helper()
	k := -1 // no checkpoint: a full recovery follows; the states must still be committed ones
	if cp, ok, err := c.Checkpoint(); err != nil {
		t.Fatal(err)
	} else if ok {
		k, _ = strconv.Atoi(string(cp))
	}
	for _, key := range keys {
		got, ok, err := c.State([]byte(key))
		if err != nil {
			t.Fatalf("%s: reading %s: %v", step, key, err)
		}
		allowed := false
		for j := max(k, 0); j < len(m.commits); j++ {
			want, wok := m.commits[j][key]
			if ok == wok && (!ok || string(got) == want) {
				allowed = true
				break
			}
		}
		if !allowed {
			t.Fatalf("%s: after the crash the cache holds %s=%q (%t) under checkpoint %d; committed since: %v", step, key, got, ok, k, m.commits[max(k, 0):])
		}
	}
	if k < 0 {
		if err := c.Drop(); err != nil {
			t.Fatal(err)
		}
		k = 0
		for key, v := range m.commits[0] {
			if err := c.Recovered(store.Snapshot{Key: []byte(key), Value: []byte(v)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The delta: every committed batch after the checkpoint, in order.
	for j := k + 1; j < len(m.commits); j++ {
		for _, key := range keys {
			if v, ok := m.commits[j][key]; ok && v != m.commits[j-1][key] {
				if err := c.Recovered(store.Snapshot{Key: []byte(key), Value: []byte(v)}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := c.Durable([]byte(strconv.Itoa(len(m.commits) - 1))); err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		got, ok, _ := c.State([]byte(key))
		want, wok := m.last()[key]
		if ok != wok || string(got) != want {
			t.Fatalf("%s: after the delta recovery %s=%q (%t), committed %q (%t)", step, key, got, ok, want, wok)
		}
	}
}

func TestCacheThroughCrashesAtEveryStep(t *testing.T) {
	keys := []string{"a", "b", "c", "d", "e"}
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed*7+1))
			fs := vfs.NewCrashableMem()
			kv := openCrashable(t, fs)
			defer func() { _ = kv.db.Close() }()
			c := newCrashCore(t, flushingKV{kv, rng})
			m := &crashModel{commits: []map[string]string{{}}}
			if err := c.Durable([]byte("0")); err != nil { // the recovery of an empty partition
				t.Fatal(err)
			}
			offset, value := int64(0), 0
			for step := range 60 {
				var what string
				switch op := rng.IntN(10); {
				case op < 5:
					key := keys[rng.IntN(len(keys))]
					value++
					what = fmt.Sprintf("fold %s=v%d", key, value)
					if _, err := c.Fold(&core.Record{Topic: crashInput.Topic, Offset: offset, Key: []byte(key), Value: fmt.Appendf(nil, "v%d", value)}); err != nil {
						t.Fatal(err)
					}
					offset++
				case op < 8:
					commit := op < 7
					what = fmt.Sprintf("flush (committed %t)", commit)
					snaps, err := c.Flush(0)
					if err != nil {
						t.Fatal(err)
					}
					next := maps.Clone(m.last())
					for _, s := range snaps {
						var werr error
						if !commit {
							werr = fmt.Errorf("aborted")
						} else {
							next[string(s.Key)] = string(s.Value)
						}
						if err := c.WriteDone(s.Key, werr); err != nil {
							t.Fatal(err)
						}
					}
					var cp []byte
					if commit && len(snaps) > 0 {
						m.commits = append(m.commits, next)
						cp = []byte(strconv.Itoa(len(m.commits) - 1))
					}
					if err := c.Durable(cp); err != nil {
						t.Fatal(err)
					}
				default:
					what = "cache flush"
					if err := kv.db.Flush(); err != nil {
						t.Fatal(err)
					}
				}
				// Crash now, and check the cache a restart would find.
				clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rand.New(rand.NewPCG(seed, uint64(step)))})
				ckv := openCrashable(t, clone)
				m.check(t, newCrashCore(t, ckv), keys, fmt.Sprintf("step %d (%s)", step, what))
				if err := ckv.db.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
