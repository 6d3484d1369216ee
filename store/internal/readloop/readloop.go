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
		for pos < target {
			wait := cfg.PollWait
			if cfg.StallTimeout > 0 {
				wait = lastProgress.Add(cfg.StallTimeout).Sub(cfg.Now())
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
				progress(pos >= target, nil)
				continue
			}
			if cfg.StallTimeout > 0 && now.Sub(lastProgress) >= cfg.StallTimeout {
				fail(diagnose(ctx, cfg, src, pos, target, now.Sub(lastProgress)))
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
