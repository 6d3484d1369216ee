package engine

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapfence/snapfence/engine/internal/cache"
)

// The cache's mechanism is tested in engine/internal/cache; these test
// what users see of it: the exported names and the *CacheDirError with
// the engine's sentinels.

// The exported names are the cache package's.
func TestCacheNamesAreTheCachesOwn(t *testing.T) {
	if CacheDirName != cache.DirName || CacheMarkerName != cache.MarkerName {
		t.Fatalf("engine names %q and %q, the cache %q and %q", CacheDirName, CacheMarkerName, cache.DirName, cache.MarkerName)
	}
}

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

func closeKV(t *testing.T, kv *cache.KV) {
	t.Helper()
	if err := kv.Close(); err != nil {
		t.Fatal(err)
	}
}

// A snapfence-cache in Dir that is not the engine's is refused with the
// engine's *CacheDirError naming it, matching the engine's sentinel, and
// nothing in it (or in Dir) changes. Every way a directory is refused is
// the cache's test (engine/internal/cache); these are the two kinds, seen
// through the engine.
func TestCacheRefusesADirectoryNotItsOwn(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		kind  error
		says  string
	}{
		{"foreign files", map[string]string{"snapfence-cache/data.txt": "theirs", "snapfence-cache/deep/x": "theirs too"},
			ErrCacheDirNotOwned, "holds data.txt, deep/ but no SNAPFENCE marker"},
		{"a newer format", map[string]string{"snapfence-cache/SNAPFENCE": "snapfence cache format 2\n", "snapfence-cache/000004.sst": "x"},
			ErrCacheDirFormat, "format 2; this engine knows format 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, c.files)
			writeFiles(t, dir, map[string]string{"important.txt": "keep me"})
			before := tree(t, dir)
			kv, err := openCache(dir, "bank")
			if err == nil {
				closeKV(t, kv)
				t.Fatal("opened")
			}
			owned := filepath.Join(dir, "snapfence-cache")
			var de *CacheDirError
			if !errors.As(err, &de) || de.Path != owned || !errors.Is(err, c.kind) {
				t.Fatalf("err = %v, want a *CacheDirError for %s matching %v", err, owned, c.kind)
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

// A second engine on the same Dir fails on the lock, naming the
// directory, with the engine's ErrCacheDirInUse.
func TestSecondCacheOnTheSameDirFails(t *testing.T) {
	dir := t.TempDir()
	first, err := openCache(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer closeKV(t, first)
	second, err := openCache(dir, "")
	if err == nil {
		closeKV(t, second)
		t.Fatal("a second cache opened the same directory")
	}
	wantInUse(t, err, filepath.Join(dir, "snapfence-cache"))
}

func wantInUse(t *testing.T, err error, owned string) {
	t.Helper()
	var de *CacheDirError
	if !errors.As(err, &de) || de.Path != owned || !errors.Is(err, ErrCacheDirInUse) {
		t.Fatalf("err = %v, want a *CacheDirError for %s matching ErrCacheDirInUse", err, owned)
	}
	if !strings.Contains(err.Error(), owned) || !strings.Contains(err.Error(), "another engine has it open") {
		t.Fatalf("%q does not name %s and say it is in use", err, owned)
	}
}

// A refusal the file system causes (Config.Dir cannot be created) is a
// *CacheDirError of no kind, naming Config.Dir, wrapping the file
// system's error.
func TestCacheDirErrorOfTheFileSystem(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "a-file")
	writeFiles(t, filepath.Dir(blocker), map[string]string{"a-file": "x"})
	dir := filepath.Join(blocker, "dir")
	kv, err := openCache(dir, "")
	if err == nil {
		closeKV(t, kv)
		t.Fatal("opened a cache under a file")
	}
	var de *CacheDirError
	if !errors.As(err, &de) || de.Path != dir || de.Kind != nil || de.Err == nil {
		t.Fatalf("err = %v, want a *CacheDirError for %s of no kind with the file system's error", err, dir)
	}
	for _, kind := range []error{ErrCacheDirNotOwned, ErrCacheDirInUse, ErrCacheDirFormat} {
		if errors.Is(err, kind) {
			t.Fatalf("err = %v matches %v", err, kind)
		}
	}
	if want := "engine: cache directory " + dir + ": creating Config.Dir: "; !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("%q, want it to start %q", err, want)
	}
}
