package engine

import (
	"errors"
	"fmt"

	"github.com/snapfence/snapfence/engine/internal/cache"
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
)

// The ways a cache directory is refused, for errors.Is; a *CacheDirError
// matches the one it reports.
var (
	// ErrCacheDirNotOwned: Config.Dir/snapfence-cache exists and is not the
	// engine's: it is not a directory, or it holds files but no marker
	// (CacheMarkerName), or a marker the engine did not write, or one that
	// names another application. The engine touched nothing in it.
	ErrCacheDirNotOwned = cache.ErrDirNotOwned
	// ErrCacheDirInUse: another engine, in this process or another, has
	// the cache directory open (Pebble's lock on it is held).
	ErrCacheDirInUse = cache.ErrDirInUse
	// ErrCacheDirFormat: the directory's marker names a format this
	// engine does not know (a newer snapfence's cache). The engine touched
	// nothing in it.
	ErrCacheDirFormat = cache.ErrDirFormat
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

// openCache opens the engine's cache (cache.Open): in memory if dir is
// empty, else in dir/snapfence-cache. A directory it refuses is a
// *CacheDirError.
func openCache(dir, app string) (*cache.KV, error) {
	kv, err := cache.Open(dir, app)
	if de, ok := errors.AsType[*cache.DirError](err); ok {
		return nil, fromCacheDir(de)
	}
	return kv, err
}

// fromCacheDir is the cache's refusal of a directory as the engine
// reports it (the sentinels are the cache's own).
func fromCacheDir(de *cache.DirError) *CacheDirError {
	return &CacheDirError{Path: de.Path, Kind: de.Kind, Detail: de.Detail, Err: de.Err}
}
