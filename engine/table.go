package engine

import "context"

// Table is a table a fold can look up while it runs: a View (of another
// engine's snapshot topic, or of a compacted topic of plain key/values).
type Table interface {
	// Name names the table in errors and logs (the topic it reads).
	Name() string
	// WaitCaughtUp returns nil once the table has read every partition it
	// holds up to the high watermark each had when the table opened
	// (read_committed: it waits past open transactions, as a recovery
	// does), or the table's failure, or ctx's error.
	WaitCaughtUp(ctx context.Context) error
}

var _ Table = (*View[int])(nil)
