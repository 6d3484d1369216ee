// Package cache is the engine's local cache: a core.KV over Pebble, the
// ownership of its directory (the marker that says a directory is the
// engine's, and the lock that keeps one engine in it), and the codec of
// the checkpoints the cache keeps beside the states.
package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/snapfence/snapfence/engine/internal/core"
)

// KV is the local cache on Pebble. It writes without a WAL and
// without syncs: a crash loses the writes since the last memtable flush,
// and leaves the database as it was after some earlier write, every batch
// whole (Pebble flushes memtables in sequence order). That is all the
// warm restart needs: the core keeps only committed states and their
// checkpoint outside its overlay, in batches whose checkpoint never runs
// ahead of the states (core.Durable), so an older state of the cache is
// an older, valid checkpoint; the delta recovery reads the rest again.
// Close flushes, so that a clean stop keeps the latest checkpoint.
type KV struct {
	db *pebble.DB
	// lock is the on-disk cache's directory lock, held from before the
	// cache is cleared until after the database is closed; nil in memory.
	lock *pebble.Lock
	// failed is the first iteration error; once set every call returns
	// it, so the flow using the cache stops instead of reading wrong state.
	failed atomic.Pointer[error]
	// compactions gets a signal when a compaction ends (one slot: a
	// signal not taken yet stands for any number).
	compactions chan struct{}
	// queries guards the database against Close while a query reads it
	// from another goroutine (queryReader); closed is set under it.
	queries sync.RWMutex
	closed  bool
	// instance is the on-disk cache's identity (Instance).
	instance string
}

// errClosed is a query's read of a closed engine's cache.
var errClosed = errors.New("engine: the engine is closed")

// Queries is the cache as queries read it: from any goroutine, never
// failing the cache for the flows (a query's failure is its own), and
// never after Close.
func (k *KV) Queries() core.ReadKV { return queryReader{k} }

// queryReader is what Queries returns.
type queryReader struct{ k *KV }

// Get implements core.ReadKV.
func (q queryReader) Get(key []byte) ([]byte, bool, error) {
	q.k.queries.RLock()
	defer q.k.queries.RUnlock()
	if q.k.closed {
		return nil, false, errClosed
	}
	v, closer, err := q.k.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("engine: cache read: %w", err)
	}
	defer closer.Close()
	return bytes.Clone(v), true, nil
}

// Range implements core.ReadKV: one iterator, which sees the database as
// of its creation.
func (q queryReader) Range(lower, upper []byte, fn func(k, v []byte) bool) error {
	q.k.queries.RLock()
	defer q.k.queries.RUnlock()
	if q.k.closed {
		return errClosed
	}
	it, err := q.k.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("engine: cache read: %w", err)
	}
	for ok := it.First(); ok && fn(it.Key(), it.Value()); ok = it.Next() {
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fmt.Errorf("engine: cache read: %w", err)
	}
	return nil
}

func (k *KV) fail(err error) error {
	err = fmt.Errorf("engine: cache: %w", err)
	k.failed.CompareAndSwap(nil, &err)
	return *k.failed.Load()
}

func (k *KV) check() error {
	if p := k.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// Open opens the cache of the application app ("" for a View),
// in memory if dir is empty. Otherwise the
// cache lives in dir/snapfence-cache (DirName), which the engine
// creates (dir too, if missing) and marks as its own with a file
// SNAPFENCE (MarkerName); nothing else in dir is ever touched. It
// refuses, touching nothing, a dir/snapfence-cache that is not the
// engine's (ErrDirNotOwned), of a format it does not know
// (ErrDirFormat), or that another engine has open (ErrDirInUse),
// each as a *DirError naming the directory.
//
// A cache of an earlier layout (no layoutKey, as format 1 wrote before
// warm restarts, when a crash could leave uncommitted states among the
// committed ones) is emptied at open, through the database, so no file is
// removed but those Pebble itself retires. One of the current layout is
// kept: its committed states and checkpoints are checked per partition
// at acquisition (delta or full recovery), its overlays dropped.
func Open(dir, app string) (*KV, error) {
	compactions := make(chan struct{}, 1)
	opts := options(compactions)
	if dir == "" {
		opts.FS = vfs.NewMem()
		db, err := pebble.Open("cache", opts)
		if err != nil {
			return nil, fmt.Errorf("engine: opening the cache in memory: %w", err)
		}
		return &KV{db: db, compactions: compactions}, nil
	}
	owned, err := claimDir(dir, app)
	if err != nil {
		return nil, err
	}
	lock, err := pebble.LockDirectory(owned, vfs.Default)
	if err != nil {
		// The lock file is created, then locked: a failure to create it is
		// the file system's (a *fs.PathError); a failure to lock it is
		// another process's lock (EAGAIN or EACCES from fcntl) or, in this
		// process, Pebble's own record of the lock.
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) {
			return nil, &DirError{Path: owned, Detail: "creating its lock file", Err: err}
		}
		return nil, &DirError{Path: owned, Kind: ErrDirInUse,
			Detail: "another engine has it open (each engine needs a Config.Dir of its own)", Err: err}
	}
	opts.Lock = lock
	db, err := pebble.Open(owned, opts)
	if err != nil {
		_ = lock.Close()
		return nil, &DirError{Path: owned, Detail: "opening the cache", Err: err}
	}
	kv := &KV{db: db, lock: lock, compactions: compactions}
	if err := kv.upgrade(); err != nil {
		_ = kv.Close()
		return nil, &DirError{Path: owned, Detail: "clearing a cache of an earlier layout", Err: err}
	}
	if kv.instance, err = kv.ensureInstance(); err != nil {
		_ = kv.Close()
		return nil, &DirError{Path: owned, Detail: "keeping the cache's instance identity", Err: err}
	}
	return kv, nil
}

// layoutKey holds the layout of the database's content; core's keys
// start with 's', 'd', 'c' or 't', so it is apart from them.
var layoutKey = []byte("\x00layout")

// cacheLayout is the current layout: core's committed states, overlays,
// checkpoints and timer index. Layout 3 added timers to the state entries
// (a flag bit an older engine would ignore, misreading the entry) and the
// 't' index; a cache of another layout is emptied, whichever is newer.
const cacheLayout = "3"

// upgrade empties a database of an earlier layout and marks it current.
func (k *KV) upgrade() error {
	v, closer, err := k.db.Get(layoutKey)
	if err == nil {
		layout := string(v)
		_ = closer.Close()
		if layout == cacheLayout {
			return nil
		}
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return err
	}
	// The instance identity outlives the layout: a new one would cost the
	// group a rebalance for nothing.
	id, idCloser, idErr := k.db.Get(instanceKey)
	var keep []byte
	if idErr == nil {
		keep = bytes.Clone(id)
		_ = idCloser.Close()
	}
	if err := k.clear(); err != nil {
		return err
	}
	if err := k.db.Set(layoutKey, []byte(cacheLayout), pebble.NoSync); err != nil {
		return err
	}
	if keep != nil {
		if err := k.db.Set(instanceKey, keep, pebble.NoSync); err != nil {
			return err
		}
	}
	return k.db.Flush() // no WAL: the mark is durable once flushed
}

// options are the cache's Pebble options; compactions hears of
// every compaction's end.
func options(compactions chan struct{}) *pebble.Options {
	return &pebble.Options{DisableWAL: true, Logger: quietLogger{}, EventListener: &pebble.EventListener{
		CompactionEnd: func(pebble.CompactionInfo) {
			select {
			case compactions <- struct{}{}:
			default:
			}
		},
	}}
}

// clear deletes every key of the cache and compacts the range away, so
// the disk space is returned too.
func (k *KV) clear() error {
	it, err := k.db.NewIter(nil)
	if err != nil {
		return err
	}
	var first, last []byte
	if it.First() {
		first = bytes.Clone(it.Key())
		if it.Last() {
			last = bytes.Clone(it.Key())
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil || first == nil || last == nil {
		return err
	}
	end := append(last, 0) // the smallest key after last
	if err := k.db.DeleteRange(first, end, pebble.NoSync); err != nil {
		return err
	}
	// A manual compaction can return while a delete-only compaction it
	// set off still holds the last table of the range (Pebble moves the
	// tombstone's table to the bottom level, then deletes it in the
	// background): while tables remain and a compaction runs, wait for a
	// compaction to end and look again. Bounded: the cache is usable
	// either way, only its disk space is at stake.
	for range 10 {
		drain(k.compactions)
		if err := k.db.Compact(context.Background(), first, end, true); err != nil {
			return err
		}
		m := k.db.Metrics()
		if m.Total().TablesCount == 0 || m.Compact.NumInProgress == 0 {
			return nil
		}
		<-k.compactions
	}
	return nil
}

// drain empties a signal channel.
func drain(c chan struct{}) {
	select {
	case <-c:
	default:
	}
}

// Get implements core.KV.
func (k *KV) Get(key []byte) ([]byte, bool, error) {
	if err := k.check(); err != nil {
		return nil, false, err
	}
	v, closer, err := k.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("engine: cache read: %w", err)
	}
	defer closer.Close()
	return bytes.Clone(v), true, nil
}

// Set implements core.KV.
func (k *KV) Set(key, value []byte) error {
	if err := k.check(); err != nil {
		return err
	}
	if err := k.db.Set(key, value, pebble.NoSync); err != nil {
		return fmt.Errorf("engine: cache write: %w", err)
	}
	return nil
}

// Delete implements core.KV.
func (k *KV) Delete(key []byte) error {
	if err := k.db.Delete(key, pebble.NoSync); err != nil {
		return fmt.Errorf("engine: cache delete: %w", err)
	}
	return nil
}

// Scan implements core.KV.
func (k *KV) Scan(prefix []byte) iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		if k.check() != nil {
			return
		}
		it, err := k.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: core.PrefixEnd(prefix)})
		if err != nil {
			k.fail(err)
			return
		}
		defer func() {
			if err := errors.Join(it.Error(), it.Close()); err != nil {
				k.fail(err)
			}
		}()
		for ok := it.First(); ok; ok = it.Next() {
			if !yield(it.Key(), it.Value()) {
				return
			}
		}
	}
}

// Apply implements core.KV: one Pebble batch, whole or absent after a
// crash.
func (k *KV) Apply(ws []core.Write) error {
	if err := k.check(); err != nil {
		return err
	}
	b := k.db.NewBatch()
	defer b.Close()
	for _, w := range ws {
		var err error
		if w.Delete {
			err = b.Delete(w.Key, nil)
		} else {
			err = b.Set(w.Key, w.Value, nil)
		}
		if err != nil {
			return fmt.Errorf("engine: cache batch: %w", err)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("engine: cache batch: %w", err)
	}
	return nil
}

// DeletePrefix implements core.KV.
func (k *KV) DeletePrefix(prefix []byte) error {
	if err := k.db.DeleteRange(prefix, core.PrefixEnd(prefix), pebble.NoSync); err != nil {
		return fmt.Errorf("engine: cache delete: %w", err)
	}
	return nil
}

// NewIter is an iterator over lower <= key < upper, which sees the
// database as of its creation; the caller closes it before Close. A
// View's Range reads through it, yielding to its caller as it goes.
func (k *KV) NewIter(lower, upper []byte) (*pebble.Iterator, error) {
	return k.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
}

// Close flushes and closes the database and releases its directory.
func (k *KV) Close() error {
	k.queries.Lock() // no query reads past this
	defer k.queries.Unlock()
	if k.closed {
		return nil
	}
	k.closed = true
	var err error
	if k.lock != nil {
		err = k.db.Flush() // a clean stop keeps the last checkpoint
	}
	err = errors.Join(err, k.db.Close())
	if k.lock != nil {
		err = errors.Join(err, k.lock.Close())
	}
	return err
}

// quietLogger drops Pebble's informational logs; errors reach the flow as
// errors from the KV.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("engine: pebble: "+format, args...))
}
