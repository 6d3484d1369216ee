package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/store"
)

// table is a lookup table the service opens on its store and runs: a
// view declared before the store exists (view.NewLookup).
type table interface {
	engine.Table
	view.Opener
}

// plainTable is a table of a topic of plain key/values, which
// CreateTopics creates (compacted) when it is missing.
type plainTable interface {
	PlainTopic() (topic string, plain bool)
}

// openTables opens every table of tables the service runs, on st. A
// table opened by its user (a view.View) is theirs to run and close.
func openTables(ctx context.Context, tables []engine.Table, st store.Backend) ([]table, error) {
	var opened []table
	for i, t := range tables {
		tt, ok := t.(table)
		if !ok {
			continue
		}
		if err := tt.Open(ctx, st); err != nil {
			return nil, errors.Join(fmt.Errorf("service: opening Engine.Tables[%d] (%s): %w", i, t.Name(), err), closeTables(opened))
		}
		opened = append(opened, tt)
	}
	return opened, nil
}

func closeTables(tables []table) error {
	var errs []error
	for _, t := range tables {
		errs = append(errs, t.Close())
	}
	return errors.Join(errs...)
}

// Table restarts back off from minTableBackoff, doubling to
// maxTableBackoff: a broker that is down is asked at most twice a minute.
const (
	minTableBackoff = 200 * time.Millisecond
	maxTableBackoff = 30 * time.Second
)

// runTable keeps t reading until ctx ends (nil). A partition of t that
// fails for a reason a retry may get past (a broker down, a leader
// moving) is opened again after a backoff, with a WARN line per retry;
// meanwhile a fold that looks it up fails with an error matching
// engine.ErrTableUnavailable, and its partition waits for the table
// rather than skip the record. A misconfiguration or a corrupt record
// ends Run with the error.
func (s *Service[S]) runTable(ctx context.Context, t table) error {
	backoff := minTableBackoff
	for {
		start := time.Now()
		err := t.Run(ctx)
		if time.Since(start) > maxTableBackoff {
			backoff = minTableBackoff // it read for a while: a new failure
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			return nil // closed
		case errors.Is(err, store.ErrMisconfigured), errors.Is(err, store.ErrCorruptRecord):
			return fmt.Errorf("service: table %s: %w", t.Name(), err)
		}
		s.warn("a lookup table failed; it is read again after a backoff", "table", t.Name(), "retry_in", backoff, "err", err)
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
		backoff = min(2*backoff, maxTableBackoff)
	}
}
