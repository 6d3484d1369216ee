package cache

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

// The engine's directory inside the directory it is given (Config.Dir),
// and the marker in it that says the directory is the engine's:
// "snapfence cache format N", then, for an engine's cache, a line
// "application NAME" naming the application whose state it holds.
// Package engine exports the two names as CacheDirName and
// CacheMarkerName.
const (
	DirName    = "snapfence-cache"
	MarkerName = "SNAPFENCE"

	dirFormat    = 1
	markerPrefix = "snapfence cache format "
	markerApp    = "application "
)

// The ways a directory is refused, for errors.Is; a *DirError matches the
// one it reports. Package engine reports each as its own sentinel
// (ErrCacheDirNotOwned and so on), whose meaning it documents.
var (
	ErrDirNotOwned = errors.New("engine: cache directory not the engine's")
	ErrDirInUse    = errors.New("engine: cache directory in use")
	ErrDirFormat   = errors.New("engine: cache directory of an unknown format")
)

// DirError reports a directory the cache could not use; package engine
// gives it to users as a *CacheDirError with the same fields.
type DirError struct {
	// Path is the directory: dir/snapfence-cache, or dir itself when it
	// could not be created.
	Path string
	// Kind is ErrDirNotOwned, ErrDirInUse or ErrDirFormat; nil when the
	// file system or Pebble failed.
	Kind error
	// Detail says what the cache found or was doing.
	Detail string
	// Err is the file system's or Pebble's error, if any.
	Err error
}

func (e *DirError) Error() string {
	msg := fmt.Sprintf("engine: cache directory %s: %s", e.Path, e.Detail)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns Kind and Err, whichever are set.
func (e *DirError) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.Kind, e.Err} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// claimDir returns dir/snapfence-cache, created and marked if it does
// not exist, once it is sure the directory is the engine's: marked with a
// marker of the format it knows, or empty (then it marks it). It deletes
// nothing and never writes into a directory that holds anything but its
// marker or is not marked. It does not lock the directory: Pebble's lock
// does, before anything in it is changed. app is the application whose
// state the cache holds ("" for a View's, which holds any application's):
// a marker naming another is refused. A marker that names none (written
// before applications were named) is accepted and left as it is.
func claimDir(dir, app string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", &DirError{Path: dir, Detail: "creating Config.Dir", Err: err}
	}
	owned := filepath.Join(dir, DirName)
	if err := os.Mkdir(owned, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", &DirError{Path: owned, Detail: "creating the directory", Err: err}
	}
	st, err := os.Stat(owned)
	if err != nil {
		return "", &DirError{Path: owned, Detail: "checking the directory", Err: err}
	}
	if !st.IsDir() {
		return "", &DirError{Path: owned, Kind: ErrDirNotOwned,
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
	return owned, &DirError{Path: owned, Detail: "its marker " + MarkerName + " keeps appearing and vanishing"}
}

// checkMarker reports whether owned is marked as the engine's, with the
// format it knows. An unmarked directory that holds anything is refused;
// so is a marker of another format, or one the engine did not write (an
// empty one too, which a crash between creating the marker and syncing it
// could leave: the engine cannot tell it from a file it did not create).
func checkMarker(owned, app string) (bool, error) {
	entries, err := os.ReadDir(owned)
	if err != nil {
		return false, &DirError{Path: owned, Detail: "listing the directory", Err: err}
	}
	var others []string
	for _, e := range entries {
		if e.Name() != MarkerName {
			name := e.Name()
			if e.IsDir() {
				name += "/"
			}
			others = append(others, name)
		}
	}
	content, err := os.ReadFile(filepath.Join(owned, MarkerName))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if len(others) > 0 {
			return false, &DirError{Path: owned, Kind: ErrDirNotOwned,
				Detail: fmt.Sprintf("it holds %s but no %s marker, so it is not the engine's; nothing in it was touched "+
					"(empty it, or choose another Config.Dir)", listNames(others), MarkerName)}
		}
		return false, nil
	case err != nil:
		return false, &DirError{Path: owned, Detail: "reading its marker " + MarkerName, Err: err}
	}
	if len(content) == 0 {
		return false, &DirError{Path: owned, Kind: ErrDirNotOwned,
			Detail: fmt.Sprintf("its %s marker is empty, which a crash while an engine created it could leave, but the engine "+
				"cannot tell it from a file it did not create; nothing in it was touched (remove the directory if it is the engine's)",
				MarkerName)}
	}
	text, ok := strings.CutPrefix(string(content), markerPrefix)
	formatLine, rest, _ := strings.Cut(text, "\n")
	format, err := strconv.Atoi(formatLine)
	if !ok || err != nil || format < 1 {
		return false, &DirError{Path: owned, Kind: ErrDirNotOwned,
			Detail: fmt.Sprintf("its %s file says %q, not %q, so it is not the engine's; nothing in it was touched",
				MarkerName, clip(content), markerPrefix+"N")}
	}
	if format != dirFormat {
		return false, &DirError{Path: owned, Kind: ErrDirFormat,
			Detail: fmt.Sprintf("its marker says format %d; this engine knows format %d; nothing in it was touched", format, dirFormat)}
	}
	if owner, named := strings.CutPrefix(strings.TrimSuffix(rest, "\n"), markerApp); named && app != "" && owner != app {
		return false, &DirError{Path: owned, Kind: ErrDirNotOwned,
			Detail: fmt.Sprintf("it holds the state of application %q, and this engine is application %q; nothing in it was touched "+
				"(give each application a Config.Dir of its own)", owner, app)}
	}
	return true, nil
}

// writeMarker creates the marker in the empty directory owned, durably,
// before the cache writes anything there. It fails with fs.ErrExist if
// another engine created it first.
func writeMarker(owned, app string) error {
	path := filepath.Join(owned, MarkerName)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return err
	}
	if err != nil {
		return &DirError{Path: owned, Detail: "creating its marker " + MarkerName, Err: err}
	}
	marker := fmt.Sprintf("%s%d\n", markerPrefix, dirFormat)
	if app != "" {
		marker += markerApp + app + "\n"
	}
	_, err = io.WriteString(f, marker)
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = syncDir(owned)
	}
	if err != nil {
		return &DirError{Path: owned, Detail: "writing its marker " + MarkerName, Err: err}
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
