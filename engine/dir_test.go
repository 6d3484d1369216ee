package engine_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// Config.Dir through New: the user's files in Dir survive the engines that
// run on it, and a second engine on the same Dir is refused while the
// first runs.
func TestConfigDirKeepsTheUsersFiles(t *testing.T) {
	b, err := sim.New(sim.Config{}).NewBackend(sim.BackendConfig{Mode: store.Plain})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	users := map[string]string{"important.txt": "keep me", filepath.Join("sub", "nested.txt"): "me too"}
	for name, content := range users {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: b, Dir: dir}
	first, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	second, err := engine.New(cfg)
	var de *engine.CacheDirError
	if err == nil {
		_ = second.Close()
		t.Fatal("a second engine opened the same Dir")
	}
	if !errors.Is(err, engine.ErrCacheDirInUse) || !errors.As(err, &de) || de.Path != filepath.Join(dir, engine.CacheDirName) {
		t.Fatalf("second engine: %v, want ErrCacheDirInUse naming %s", err, filepath.Join(dir, engine.CacheDirName))
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := engine.New(cfg)
	if err != nil {
		t.Fatalf("reopening the engine's own Dir: %v", err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	for name, content := range users {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != content {
			t.Errorf("%s after the engines ran: %q %v, want %q", name, got, err, content)
		}
	}
}
