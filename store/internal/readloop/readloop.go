// Package readloop is the recovery read every backend shares: capture the
// high watermark, read until the position reaches it, and fail with a
// diagnosed RecoveryStalledError when the position stops advancing for the
// stall timeout (I5, I6).
package readloop

import (
	"context"
	"iter"
	"log/slog"
	"time"

	"github.com/snapfence/snapfence/store"
)

// Fetched is one record read from the snapshot partition.
type Fetched struct {
	Offset int64
	Record store.WireRecord
}

// Source reads one snapshot partition.
type Source interface {
	// HighWatermark reads the log end offset as a read_uncommitted reader
	// sees it: the bound the recovery must reach.
	HighWatermark(ctx context.Context) (int64, error)
	// LastStable reads the last stable offset, only to warn when the read
	// will wait.
	LastStable(ctx context.Context) (int64, error)
	// LogStart reads the log start offset: a read whose target is at or
	// below it has nothing to read.
	LogStart(ctx context.Context) (int64, error)
	// Poll returns the next visible records and the read position after
	// them. The position also moves over control markers and aborted data,
	// which are never returned. Poll waits at most wait for either.
	Poll(ctx context.Context, wait time.Duration) ([]Fetched, int64, error)
}

// PinChecker is what a Source may also be: a diagnosis of the open
// transactions that pin the read at the last stable offset, for a read
// that has waited there (pinCheckInterval).
type PinChecker interface {
	// CheckPinned looks for hanging transactions behind the read, waiting
	// at pos below its target with the last stable offset at pos. It
	// returns resumed if it ended them (the read goes on, its stall
	// deadline restarted), or the hanging transactions it found and left
	// (nil: none; an ongoing transaction is not hanging): the read goes on
	// waiting, since an operator may abort them, and fails with them if
	// its stall deadline passes.
	CheckPinned(ctx context.Context, pos int64) (resumed bool, hanging *store.HangingTransactionError)
}

// DefaultPinCheckInterval is how long a read waits at the last stable
// offset before, and between, its PinChecker's checks, at most (a fourth
// of the stall timeout if that is shorter).
const DefaultPinCheckInterval = 5 * time.Second

// Config configures a read.
type Config struct {
	Snapshots store.TopicPartition
	// From is where the read starts (a delta read from a checkpoint): the
	// log start if that is above it. 0 reads from the log start.
	From int64
	// StallTimeout fails a read that made no progress for this long; 0
	// disables the deadline (neither backend does: a log cut below the
	// target would hold the read for good).
	StallTimeout time.Duration
	// PollWait bounds one Poll when no deadline applies.
	PollWait time.Duration
	Now      func() time.Time
	Logger   *slog.Logger
	// Progress, if set, hears the read's start, advances and end.
	Progress func(store.RecoveryEvent)
	// Application, if set, is the reading application: a record that
	// names another (store.HeaderApplication) ends the read with a
	// *store.ForeignStateError for Input. Empty (a View's read) reads
	// any application's records.
	Application string
	Input       store.TopicPartition
}

// pinCheckInterval is the interval of cfg's pin checks:
// DefaultPinCheckInterval, or a fourth of the stall timeout if shorter.
func (cfg Config) pinCheckInterval() time.Duration {
	d := DefaultPinCheckInterval
	if cfg.StallTimeout > 0 {
		d = min(d, cfg.StallTimeout/4)
	}
	return max(d, time.Millisecond)
}

// Read streams the snapshots of the partition below the high watermark
// captured at its start. Offset markers are skipped.
func Read(ctx context.Context, cfg Config, src Source) iter.Seq2[store.Snapshot, error] {
	return func(yield func(store.Snapshot, error) bool) {
		target, err := src.HighWatermark(ctx)
		if err != nil {
			yield(store.Snapshot{}, err)
			return
		}
		log := cfg.Logger
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		if lso, err := src.LastStable(ctx); err == nil && lso < target {
			log.WarnContext(ctx, "recovery target is above the last stable offset; the read waits for open transactions to resolve",
				"snapshots", cfg.Snapshots.String(), "target", target, "last_stable", lso)
		}
		pos, err := src.LogStart(ctx)
		if err != nil {
			yield(store.Snapshot{}, err)
			return
		}
		pos = max(pos, cfg.From)
		var read int64 // snapshots returned
		progress := func(done bool, err error) {
			if cfg.Progress != nil {
				cfg.Progress(store.RecoveryEvent{Snapshots: cfg.Snapshots, Target: target, Position: pos, Records: read, Done: done, Err: err})
			}
		}
		// fail ends the read with err.
		fail := func(err error) {
			progress(true, err)
			yield(store.Snapshot{}, err)
		}
		progress(pos >= target, nil)
		lastProgress := cfg.Now()
		// The pin checks: at most one per interval, once the read has
		// waited an interval since its last advance; hanging is the last
		// check's finding.
		checker, _ := src.(PinChecker)
		interval := cfg.pinCheckInterval()
		lastCheck := lastProgress
		var hanging *store.HangingTransactionError
		for pos < target {
			wait := cfg.PollWait
			if cfg.StallTimeout > 0 {
				wait = lastProgress.Add(cfg.StallTimeout).Sub(cfg.Now())
			}
			if checker != nil {
				wait = min(wait, later(lastProgress, lastCheck).Add(interval).Sub(cfg.Now()))
			}
			recs, next, err := src.Poll(ctx, max(wait, 0))
			if err != nil {
				fail(err)
				return
			}
			for _, r := range recs {
				if r.Offset >= target {
					continue // written after the read started
				}
				if cfg.Application != "" {
					if app, ok := store.RecordApplication(r.Record); ok && string(app) != cfg.Application {
						fail(&store.ForeignStateError{Input: cfg.Input, Snapshots: cfg.Snapshots,
							Application: cfg.Application, Owner: string(app), Offset: r.Offset})
						return
					}
				}
				s, kind, err := store.DecodeRecord(cfg.Snapshots, r.Offset, r.Record)
				if err != nil {
					fail(err)
					return
				}
				if kind == store.KindOffsetMarker {
					continue
				}
				read++
				if !yield(s, nil) {
					return
				}
			}
			now := cfg.Now()
			if next > pos {
				pos = next
				lastProgress = now
				hanging = nil
				progress(pos >= target, nil)
				continue
			}
			if checker != nil && now.Sub(later(lastProgress, lastCheck)) >= interval {
				lastCheck = now
				hanging = nil
				if lso, err := src.LastStable(ctx); err == nil && lso <= pos {
					var resumed bool
					resumed, hanging = checker.CheckPinned(ctx, pos)
					if resumed {
						lastProgress = cfg.Now()
						continue
					}
				}
			}
			if cfg.StallTimeout > 0 && now.Sub(lastProgress) >= cfg.StallTimeout {
				err := diagnose(ctx, cfg, src, pos, target, now.Sub(lastProgress))
				if se, ok := err.(*store.RecoveryStalledError); ok && se.Cause == store.StallOpenTransaction && hanging != nil {
					hanging.Stall = se
					err = hanging
				}
				fail(err)
				return
			}
		}
	}
}

func diagnose(ctx context.Context, cfg Config, src Source, pos, target int64, stalled time.Duration) error {
	e := &store.RecoveryStalledError{Snapshots: cfg.Snapshots, Position: max(pos, 0), Target: target, LogEnd: -1, Stalled: stalled}
	end, err := src.HighWatermark(ctx)
	switch {
	case err != nil:
		e.Cause, e.ReadErr = store.StallUndetermined, err
	case end < target:
		e.Cause, e.LogEnd = store.StallTruncation, end
	default:
		e.Cause, e.LogEnd = store.StallOpenTransaction, end
	}
	return e
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
