package cache

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/snapfence/snapfence/store"
)

// An on-disk cache has an identity of its own, a valid group member
// name, kept across reopenings and a layout upgrade; a cache in memory
// has none; two directories have two.
func TestCacheKeepsItsInstanceIdentity(t *testing.T) {
	dir := t.TempDir()
	kv := open(t, dir)
	id := kv.Instance()
	if p := store.NameProblem(id); p != "" {
		t.Fatalf("identity %q: %s", id, p)
	}
	closeKV(t, kv)

	kv = open(t, dir)
	if got := kv.Instance(); got != id {
		t.Fatalf("reopened: identity %q, want %q", got, id)
	}
	// As an earlier layout left it: the upgrade empties the cache but
	// keeps the identity.
	if err := kv.db.Delete(layoutKey, pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	fill(t, kv, "s1a")
	closeKV(t, kv)
	kv = open(t, dir)
	if got := kv.Instance(); got != id {
		t.Fatalf("after a layout upgrade: identity %q, want %q", got, id)
	}
	if keys := keysOf(kv); len(keys) > 0 {
		t.Fatalf("the upgraded cache holds %q", keys)
	}
	// A damaged identity is replaced by a valid one.
	if err := kv.db.Set(instanceKey, []byte("bad id\n"), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	closeKV(t, kv)
	kv = open(t, dir)
	if got := kv.Instance(); got == id || store.NameProblem(got) != "" {
		t.Fatalf("a damaged identity became %q", got)
	}
	closeKV(t, kv)

	other := open(t, t.TempDir())
	defer closeKV(t, other)
	if other.Instance() == id || other.Instance() == "" {
		t.Fatalf("another directory's identity is %q (the first's %q)", other.Instance(), id)
	}
	mem := open(t, "")
	defer closeKV(t, mem)
	if mem.Instance() != "" {
		t.Fatalf("a cache in memory has identity %q", mem.Instance())
	}
}
