package engine

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The engine's directory inside Config.Dir, and the marker in it that says
// the directory is the engine's: "snapfence cache format N", then, for an
// engine's cache, a line "application NAME" naming the application
// (store/kafka's Config.Application) whose state it holds.
const (
	// CacheDirName is the directory the engine keeps its cache in,
	// inside Config.Dir.
	CacheDirName = "snapfence-cache"
	// CacheMarkerName is the file in CacheDirName that marks the directory
	// as the engine's, with the format of its content.
	CacheMarkerName = "SNAPFENCE"

	cacheFormat       = 1
	cacheMarkerPrefix = "snapfence cache format "
	cacheMarkerApp    = "application "
)

// The ways a cache directory is refused, for errors.Is; a *CacheDirError
// matches the one it reports.
var (
	// ErrCacheDirNotOwned: Config.Dir/snapfence-cache exists and is not the
	// engine's: it is not a directory, or it holds files but no marker
	// (CacheMarkerName), or a marker the engine did not write, or one that
	// names another application. The engine touched nothing in it.
	ErrCacheDirNotOwned = errors.New("engine: cache directory not the engine's")
	// ErrCacheDirInUse: another engine, in this process or another, has
	// the cache directory open (Pebble's lock on it is held).
	ErrCacheDirInUse = errors.New("engine: cache directory in use")
	// ErrCacheDirFormat: the directory's marker names a format this
	// engine does not know (a newer snapfence's cache). The engine touched
	// nothing in it.
	ErrCacheDirFormat = errors.New("engine: cache directory of an unknown format")
)

// CacheDirError reports a cache directory the engine could not use.
type CacheDirError struct {
	// Path is the directory: Config.Dir/snapfence-cache (or Config.Dir
	// itself when it could not be created).
	Path string
	// Kind is ErrCacheDirNotOwned, ErrCacheDirInUse or ErrCacheDirFormat;
	// nil when the file system or Pebble failed.
	Kind error
	// Detail says what the engine found or was doing.
	Detail string
	// Err is the file system's or Pebble's error, if any.
	Err error
}

func (e *CacheDirError) Error() string {
	msg := fmt.Sprintf("engine: cache directory %s: %s", e.Path, e.Detail)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns Kind and Err, whichever are set.
func (e *CacheDirError) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.Kind, e.Err} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// claimCacheDir returns dir/snapfence-cache, created and marked if it does
// not exist, once it is sure the directory is the engine's: marked with a
// marker of the format it knows, or empty (then it marks it). It deletes
// nothing and never writes into a directory that holds anything but its
// marker or is not marked. It does not lock the directory: Pebble's lock
// does, before anything in it is changed. app is the application whose
// state the cache holds ("" for a View's, which holds any application's):
// a marker naming another is refused. A marker that names none (written
// before applications were named) is accepted and left as it is.
func claimCacheDir(dir, app string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", &CacheDirError{Path: dir, Detail: "creating Config.Dir", Err: err}
	}
	owned := filepath.Join(dir, CacheDirName)
	if err := os.Mkdir(owned, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", &CacheDirError{Path: owned, Detail: "creating the directory", Err: err}
	}
	st, err := os.Stat(owned)
	if err != nil {
		return "", &CacheDirError{Path: owned, Detail: "checking the directory", Err: err}
	}
	if !st.IsDir() {
		return "", &CacheDirError{Path: owned, Kind: ErrCacheDirNotOwned,
			Detail: "it is not a directory, so it is not the engine's; it was left as it is (move it or choose another Config.Dir)"}
	}
	// Twice at most: another engine may mark the directory between this
	// one's look and its marking; its marker is then read like any other.
	for range 2 {
		marked, err := checkMarker(owned, app)
		if marked || err != nil {
			return owned, err
		}
		err = writeMarker(owned, app)
		if !errors.Is(err, fs.ErrExist) {
			return owned, err
		}
	}
	return owned, &CacheDirError{Path: owned, Detail: "its marker " + CacheMarkerName + " keeps appearing and vanishing"}
}

// checkMarker reports whether owned is marked as the engine's, with the
// format it knows. An unmarked directory that holds anything is refused;
// so is a marker of another format, or one the engine did not write (an
// empty one too, which a crash between creating the marker and syncing it
// could leave: the engine cannot tell it from a file it did not create).
func checkMarker(owned, app string) (bool, error) {
	entries, err := os.ReadDir(owned)
	if err != nil {
		return false, &CacheDirError{Path: owned, Detail: "listing the directory", Err: err}
	}
	var others []string
	for _, e := range entries {
		if e.Name() != CacheMarkerName {
			name := e.Name()
			if e.IsDir() {
				name += "/"
			}
			others = append(others, name)
		}
	}
	content, err := os.ReadFile(filepath.Join(owned, CacheMarkerName))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if len(others) > 0 {
			return false, &CacheDirError{Path: owned, Kind: ErrCacheDirNotOwned,
				Detail: fmt.Sprintf("it holds %s but no %s marker, so it is not the engine's; nothing in it was touched "+
					"(empty it, or choose another Config.Dir)", listNames(others), CacheMarkerName)}
		}
		return false, nil
	case err != nil:
		return false, &CacheDirError{Path: owned, Detail: "reading its marker " + CacheMarkerName, Err: err}
	}
	if len(content) == 0 {
		return false, &CacheDirError{Path: owned, Kind: ErrCacheDirNotOwned,
			Detail: fmt.Sprintf("its %s marker is empty, which a crash while an engine created it could leave, but the engine "+
				"cannot tell it from a file it did not create; nothing in it was touched (remove the directory if it is the engine's)",
				CacheMarkerName)}
	}
	text, ok := strings.CutPrefix(string(content), cacheMarkerPrefix)
	formatLine, rest, _ := strings.Cut(text, "\n")
	format, err := strconv.Atoi(formatLine)
	if !ok || err != nil || format < 1 {
		return false, &CacheDirError{Path: owned, Kind: ErrCacheDirNotOwned,
			Detail: fmt.Sprintf("its %s file says %q, not %q, so it is not the engine's; nothing in it was touched",
				CacheMarkerName, clip(content), cacheMarkerPrefix+"N")}
	}
	if format != cacheFormat {
		return false, &CacheDirError{Path: owned, Kind: ErrCacheDirFormat,
			Detail: fmt.Sprintf("its marker says format %d; this engine knows format %d; nothing in it was touched", format, cacheFormat)}
	}
	if owner, named := strings.CutPrefix(strings.TrimSuffix(rest, "\n"), cacheMarkerApp); named && app != "" && owner != app {
		return false, &CacheDirError{Path: owned, Kind: ErrCacheDirNotOwned,
			Detail: fmt.Sprintf("it holds the state of application %q, and this engine is application %q; nothing in it was touched "+
				"(give each application a Config.Dir of its own)", owner, app)}
	}
	return true, nil
}

// writeMarker creates the marker in the empty directory owned, durably,
// before the cache writes anything there. It fails with fs.ErrExist if
// another engine created it first.
func writeMarker(owned, app string) error {
	path := filepath.Join(owned, CacheMarkerName)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return err
	}
	if err != nil {
		return &CacheDirError{Path: owned, Detail: "creating its marker " + CacheMarkerName, Err: err}
	}
	marker := fmt.Sprintf("%s%d\n", cacheMarkerPrefix, cacheFormat)
	if app != "" {
		marker += cacheMarkerApp + app + "\n"
	}
	_, err = io.WriteString(f, marker)
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = syncDir(owned)
	}
	if err != nil {
		return &CacheDirError{Path: owned, Detail: "writing its marker " + CacheMarkerName, Err: err}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// listNames names up to three entries.
func listNames(names []string) string {
	const most = 3
	if len(names) > most {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:most], ", "), len(names)-most)
	}
	return strings.Join(names, ", ")
}

func clip(b []byte) string {
	const most = 40
	if len(b) > most {
		return string(b[:most]) + "..."
	}
	return string(b)
}
