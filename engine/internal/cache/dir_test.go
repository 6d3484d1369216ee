package cache

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// tree is every file and directory under root: path to content ("/" for a
// directory).
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			out[rel] = "/"
			return nil
		}
		b, err := os.ReadFile(path)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fill writes keys to the cache and flushes them to sstables, so they are
// on disk when it closes (without a WAL, unflushed keys would not be).
func fill(t *testing.T, kv *KV, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if err := kv.Set([]byte(k), []byte("v-"+k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.db.Flush(); err != nil {
		t.Fatal(err)
	}
}

// keysOf is the cache's keys but its layout mark and instance identity.
func keysOf(kv *KV) []string {
	var keys []string
	for k := range kv.Scan(nil) {
		if string(k) != string(layoutKey) && string(k) != string(instanceKey) {
			keys = append(keys, string(k))
		}
	}
	return keys
}

func open(t *testing.T, dir string) *KV {
	t.Helper()
	kv, err := Open(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func closeKV(t *testing.T, kv *KV) {
	t.Helper()
	if err := kv.Close(); err != nil {
		t.Fatal(err)
	}
}

// The user's files in Dir survive the engine's opening and reopening, and
// the engine creates nothing in Dir but its own directory, marked.
func TestCacheLeavesTheUsersFilesAlone(t *testing.T) {
	users := map[string]string{"important.txt": "keep me", "sub/nested.txt": "me too", "lost+found/x": "fsck's"}
	check := func(t *testing.T, dir, arg string) {
		writeFiles(t, dir, users)
		for range 2 { // a fresh directory, then the engine's own again
			kv := open(t, arg)
			fill(t, kv, "s1a", "s1b")
			closeKV(t, kv)
		}
		got := tree(t, dir)
		for name, content := range users {
			if got[name] != content {
				t.Errorf("%s: %q after the engine ran, want %q", name, got[name], content)
			}
		}
		var created []string
		for name := range got {
			if _, mine := users[name]; !mine && name != "sub" && name != "lost+found" && !strings.HasPrefix(name, "snapfence-cache") {
				created = append(created, name)
			}
		}
		if len(created) > 0 {
			t.Errorf("the engine created %v in Dir, outside snapfence-cache", created)
		}
		if m := got[filepath.Join("snapfence-cache", "SNAPFENCE")]; m != "snapfence cache format 1\n" {
			t.Errorf("marker = %q", m)
		}
	}
	t.Run("dir", func(t *testing.T) {
		dir := t.TempDir()
		check(t, dir, dir)
	})
	t.Run("dot", func(t *testing.T) {
		dir := t.TempDir()
		t.Chdir(dir)
		check(t, dir, ".")
	})
	t.Run("missing", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data", "flow")
		kv := open(t, dir)
		closeKV(t, kv)
		if m := tree(t, dir)[filepath.Join("snapfence-cache", "SNAPFENCE")]; m != "snapfence cache format 1\n" {
			t.Fatalf("a missing Dir: marker = %q", m)
		}
	})
}

// A snapfence-cache in Dir that is not the engine's is refused with an
// error naming it, and nothing in it (or in Dir) changes.
func TestCacheRefusesADirectoryNotItsOwn(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		kind  error
		says  string
	}{
		{"foreign files", map[string]string{"snapfence-cache/data.txt": "theirs", "snapfence-cache/deep/x": "theirs too"},
			ErrDirNotOwned, "holds data.txt, deep/ but no SNAPFENCE marker"},
		{"a file", map[string]string{"snapfence-cache": "a file"}, ErrDirNotOwned, "not a directory"},
		{"another marker", map[string]string{"snapfence-cache/SNAPFENCE": "hello"}, ErrDirNotOwned, `says "hello"`},
		{"an empty marker", map[string]string{"snapfence-cache/SNAPFENCE": "", "snapfence-cache/MANIFEST-000001": "x"},
			ErrDirNotOwned, "SNAPFENCE marker is empty"},
		{"a newer format", map[string]string{"snapfence-cache/SNAPFENCE": "snapfence cache format 2\n", "snapfence-cache/000004.sst": "x"},
			ErrDirFormat, "format 2; this engine knows format 1"},
		{"another application's", map[string]string{"snapfence-cache/SNAPFENCE": "snapfence cache format 1\napplication billing\n", "snapfence-cache/000004.sst": "x"},
			ErrDirNotOwned, `holds the state of application "billing", and this engine is application "bank"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, c.files)
			writeFiles(t, dir, map[string]string{"important.txt": "keep me"})
			before := tree(t, dir)
			kv, err := Open(dir, "bank")
			if err == nil {
				closeKV(t, kv)
				t.Fatal("opened")
			}
			owned := filepath.Join(dir, "snapfence-cache")
			var de *DirError
			if !errors.As(err, &de) || de.Path != owned || !errors.Is(err, c.kind) {
				t.Fatalf("err = %v, want a *DirError for %s matching %v", err, owned, c.kind)
			}
			if !strings.Contains(err.Error(), owned) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("%q does not name %s and say %s", err, owned, c.says)
			}
			if after := tree(t, dir); !maps.Equal(before, after) {
				t.Fatalf("the refused open changed the directory:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// A cache names the application whose state it holds, and reopens for it;
// one marked before applications were named opens for any, unchanged.
func TestCacheIsOneApplications(t *testing.T) {
	dir := t.TempDir()
	kv, err := Open(dir, "bank")
	if err != nil {
		t.Fatal(err)
	}
	closeKV(t, kv)
	marker := filepath.Join(dir, "snapfence-cache", "SNAPFENCE")
	if b, err := os.ReadFile(marker); err != nil || string(b) != "snapfence cache format 1\napplication bank\n" {
		t.Fatalf("marker %q, %v", b, err)
	}
	if kv, err = Open(dir, "bank"); err != nil {
		t.Fatalf("reopening for its application: %v", err)
	}
	closeKV(t, kv)

	old := t.TempDir()
	writeFiles(t, old, map[string]string{"snapfence-cache/SNAPFENCE": "snapfence cache format 1\n"})
	if kv, err = Open(old, "bank"); err != nil {
		t.Fatalf("a cache marked before applications were named: %v", err)
	}
	closeKV(t, kv)
	if b, _ := os.ReadFile(filepath.Join(old, "snapfence-cache", "SNAPFENCE")); string(b) != "snapfence cache format 1\n" {
		t.Fatalf("the old marker was rewritten: %q", b)
	}
}

// Reopening the engine's own directory keeps what it holds (the warm
// restart checks it per partition); a cache of the layout before warm
// restarts, which a crash could leave with uncommitted states among the
// committed ones, starts empty instead: every key gone, from the disk too.
func TestCacheReopenedKeepsItsLayoutOnly(t *testing.T) {
	t.Run("current layout", func(t *testing.T) {
		dir := t.TempDir()
		kv := open(t, dir)
		fill(t, kv, "s1a", "s1b")
		closeKV(t, kv) // a clean close flushes: nothing is lost
		kv = open(t, dir)
		defer closeKV(t, kv)
		if keys := keysOf(kv); !slices.Equal(keys, []string{"s1a", "s1b"}) {
			t.Fatalf("the reopened cache holds %q, want s1a and s1b", keys)
		}
	})
	t.Run("earlier layout", func(t *testing.T) {
		dir := t.TempDir()
		kv := open(t, dir)
		if err := kv.db.Delete(layoutKey, pebble.NoSync); err != nil { // as format 1 left it
			t.Fatal(err)
		}
		fill(t, kv, "s1a", "s1b", "s2a")
		fill(t, kv, "s3a", "\x00", "\xff\xff")
		if n := kv.db.Metrics().Total().TablesCount; n == 0 {
			t.Fatal("the keys are not in sstables: the test would prove nothing")
		}
		closeKV(t, kv)

		kv = open(t, dir)
		defer closeKV(t, kv)
		if keys := keysOf(kv); len(keys) > 0 {
			t.Fatalf("the reopened cache of the earlier layout holds %q", keys)
		}
		if n := kv.db.Metrics().Total().TablesCount; n > 1 {
			t.Fatalf("%d sstables left after clearing (the layout mark's own at most): the cleared keys still take disk", n)
		}
		fill(t, kv, "s1c")
		if keys := keysOf(kv); !slices.Equal(keys, []string{"s1c"}) {
			t.Fatalf("keys = %q, want s1c", keys)
		}
	})
	// An empty cache reopens too.
	closeKV(t, open(t, t.TempDir()))
}

// A second engine on the same Dir fails on the lock, naming the
// directory, and clears nothing of the first one's cache.
func TestSecondCacheOnTheSameDirFails(t *testing.T) {
	dir := t.TempDir()
	first := open(t, dir)
	fill(t, first, "s1a")
	second, err := Open(dir, "")
	if err == nil {
		closeKV(t, second)
		t.Fatal("a second cache opened the same directory")
	}
	wantInUse(t, err, filepath.Join(dir, "snapfence-cache"))
	if v, ok, err := first.Get([]byte("s1a")); !ok || err != nil || string(v) != "v-s1a" {
		t.Fatalf("the first cache's key after the second open: %q %v %v", v, ok, err)
	}
	fill(t, first, "s1b")
	closeKV(t, first)
	// Once the first is closed, the directory is free, and holds what the
	// first left.
	second = open(t, dir)
	defer closeKV(t, second)
	if keys := keysOf(second); !slices.Equal(keys, []string{"s1a", "s1b"}) {
		t.Fatalf("the second cache starts with %q, want the first's s1a and s1b", keys)
	}
}

func wantInUse(t *testing.T, err error, owned string) {
	t.Helper()
	var de *DirError
	if !errors.As(err, &de) || de.Path != owned || !errors.Is(err, ErrDirInUse) {
		t.Fatalf("err = %v, want a *DirError for %s matching ErrDirInUse", err, owned)
	}
	if !strings.Contains(err.Error(), owned) || !strings.Contains(err.Error(), "another engine has it open") {
		t.Fatalf("%q does not name %s and say it is in use", err, owned)
	}
}

// The holder is this test binary re-executed: it opens the cache in the
// directory the variable names, says so on stdout, and closes it when its
// stdin closes.
const cacheHolderEnv = "SNAPFENCE_CACHE_HOLDER"

func TestCacheHolderProcess(t *testing.T) {
	dir := os.Getenv(cacheHolderEnv)
	if dir == "" {
		return // only as the child of TestCacheHeldByAnotherProcess
	}
	kv := open(t, dir)
	fill(t, kv, "s1a")
	fmt.Println("HOLDING")
	_, _ = io.Copy(io.Discard, os.Stdin)
	closeKV(t, kv)
}

// Another process's engine on the same Dir: refused on Pebble's file lock
// (not only this process's record of it), and free once it exits.
func TestCacheHeldByAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run=^TestCacheHolderProcess$", "-test.v")
	child.Env = append(os.Environ(), cacheHolderEnv+"="+dir)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }() // only if the test failed before its own Wait
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && lines.Text() != "HOLDING" {
	}
	if lines.Err() != nil || lines.Text() != "HOLDING" {
		t.Fatalf("the holder did not open the cache: %v", lines.Err())
	}
	kv, err := Open(dir, "")
	if err == nil {
		closeKV(t, kv)
		t.Fatal("opened a cache another process holds")
	}
	wantInUse(t, err, filepath.Join(dir, "snapfence-cache"))
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, stdout)
	if err := child.Wait(); err != nil {
		t.Fatalf("the holder: %v", err)
	}
	kv = open(t, dir)
	defer closeKV(t, kv)
	if keys := keysOf(kv); !slices.Equal(keys, []string{"s1a"}) {
		t.Fatalf("the cache after the holder exited holds %q, want the holder's s1a", keys)
	}
}
