package service

import (
	"context"
	"errors"
	"fmt"

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
