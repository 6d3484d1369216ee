package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/snapfence/snapfence/store"
)

// Table is a table a fold can look up while it runs: a view.View (of
// another engine's snapshot topic, or of a compacted topic of plain
// key/values; package engine/view), or a view.Lookup, the same declared
// without a store, which whoever runs the engine opens on its own backend
// (view.Opener).
type Table interface {
	// Name names the table in errors and logs (the topic it reads).
	Name() string
	// WaitCaughtUp returns nil once the table has read every partition it
	// holds up to the high watermark each had when the table opened
	// (read_committed: it waits past open transactions, as a recovery
	// does), or the table's failure, or ctx's error.
	WaitCaughtUp(ctx context.Context) error
}

// ErrTableUnavailable is what a table's failed read matches: the table
// is not open, closed, or its partition failed (view.ErrNotOpen,
// view.ErrClosed, *view.PartitionError). A fold, OnTimer or Tick that
// returns an error matching it (a lookup's error, wrapped with %w) failed
// for its table, not for its record, so it is not a poison record: the
// partition restarts from its committed state, waits for its tables to
// catch up, and folds the record again; nothing is skipped or
// dead-lettered for a table that is down.
var ErrTableUnavailable = errors.New("engine: table unavailable")

// DefaultTableTimeout is Config.TableTimeout's default: the store's
// default recovery stall timeout, as long as a recovery may stall.
const DefaultTableTimeout = store.DefaultRecoveryStallTimeout

// TableError is a partition's start that could not wait for a table of
// Config.Tables to catch up: the table failed, or it did not catch up
// within Config.TableTimeout. The partition is not folded; it restarts
// later like a partition whose recovery failed (a table that cannot be
// read for good, a corrupt record or a missing topic, stops it).
type TableError struct {
	Input store.TopicPartition
	Table string
	Err   error
}

func (e *TableError) Error() string {
	return fmt.Sprintf("engine: %s waits for table %s to catch up before it folds: %v", e.Input, e.Table, e.Err)
}

func (e *TableError) Unwrap() error { return e.Err }

// awaitTables waits, before tp folds anything, until every table of
// Config.Tables has caught up, at most Config.TableTimeout in all.
func (e *Engine[S]) awaitTables(ctx context.Context, tp store.TopicPartition) error {
	if len(e.cfg.Tables) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeoutCause(ctx, e.cfg.TableTimeout,
		fmt.Errorf("not caught up within Config.TableTimeout (%v)", e.cfg.TableTimeout))
	defer cancel()
	for _, t := range e.cfg.Tables {
		if err := t.WaitCaughtUp(ctx); err != nil {
			if cause := context.Cause(ctx); cause != nil && ctx.Err() == context.DeadlineExceeded {
				err = cause
			}
			return &TableError{Input: tp, Table: t.Name(), Err: err}
		}
	}
	return nil
}
