package engine

import (
	"bytes"
	"errors"
	"fmt"
	"iter"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// PebbleKV is the local cache on Pebble. It is a cache, rebuilt by
// recovery on every start, so it writes without a WAL and without syncs;
// nothing in it is ever taken for committed state.
type PebbleKV struct {
	db *pebble.DB
	// failed is the first iteration error; once set every call returns
	// it, so the flow using the cache stops instead of reading wrong state.
	failed atomic.Pointer[error]
}

func (k *PebbleKV) fail(err error) error {
	err = fmt.Errorf("engine: cache: %w", err)
	k.failed.CompareAndSwap(nil, &err)
	return *k.failed.Load()
}

func (k *PebbleKV) check() error {
	if p := k.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// OpenPebble opens (and empties) the cache in dir, or in memory if dir is
// empty.
func OpenPebble(dir string) (*PebbleKV, error) {
	opts := &pebble.Options{DisableWAL: true, Logger: quietLogger{}}
	if dir == "" {
		opts.FS = vfs.NewMem()
		dir = "cache"
	} else if err := vfs.Default.RemoveAll(dir); err != nil {
		// A cache left by a crash holds uncommitted state: never reuse it.
		return nil, fmt.Errorf("engine: clearing the cache in %s: %w", dir, err)
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("engine: opening the cache in %s: %w", dir, err)
	}
	return &PebbleKV{db: db}, nil
}

// Get implements core.KV.
func (k *PebbleKV) Get(key []byte) ([]byte, bool, error) {
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
func (k *PebbleKV) Set(key, value []byte) error {
	if err := k.check(); err != nil {
		return err
	}
	if err := k.db.Set(key, value, pebble.NoSync); err != nil {
		return fmt.Errorf("engine: cache write: %w", err)
	}
	return nil
}

// Delete implements core.KV.
func (k *PebbleKV) Delete(key []byte) error {
	if err := k.db.Delete(key, pebble.NoSync); err != nil {
		return fmt.Errorf("engine: cache delete: %w", err)
	}
	return nil
}

// Scan implements core.KV.
func (k *PebbleKV) Scan(prefix []byte) iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		if k.check() != nil {
			return
		}
		it, err := k.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
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

// DeletePrefix implements core.KV.
func (k *PebbleKV) DeletePrefix(prefix []byte) error {
	if err := k.db.DeleteRange(prefix, prefixEnd(prefix), pebble.NoSync); err != nil {
		return fmt.Errorf("engine: cache delete: %w", err)
	}
	return nil
}

// Close closes the database.
func (k *PebbleKV) Close() error { return k.db.Close() }

func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// quietLogger drops Pebble's informational logs; errors reach the flow as
// errors from the KV.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("engine: pebble: "+format, args...))
}
