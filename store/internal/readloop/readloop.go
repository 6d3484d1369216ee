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
	"github.com/snapfence/snapfence/store/wire"
)

// Fetched is one record read from the snapshot partition.
type Fetched struct {
	Offset int64
	Record wire.Record
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
	CheckPinned(ctx context.Context, pos int64) (resumed bool, hanging Hanging)
}

// Hanging is what a PinChecker found holding a read, and left: given the
// read's stall, the error the read fails with (the backend's own, naming
// the transactions) once its stall deadline passes.
type Hanging func(stall *store.RecoveryStalledError) error

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
	// names another (wire.HeaderApplication) ends the read with a
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
		r, err := start(ctx, cfg, src)
		if err != nil {
			yield(store.Snapshot{}, err)
			return
		}
		r.yield = yield
		r.run(ctx)
	}
}

// reader is the state of one read.
type reader struct {
	cfg   Config
	src   Source
	yield func(store.Snapshot, error) bool
	// target is the high watermark captured at the start, pos the read
	// position, read the count of snapshots returned.
	target, pos, read int64
	lastProgress      time.Time
	// The pin checks: at most one per interval, once the read has
	// waited an interval since its last advance; hanging is the last
	// check's finding.
	checker   PinChecker
	interval  time.Duration
	lastCheck time.Time
	hanging   Hanging
}

// start captures the read's target and its start position, warning when
// the read will wait for open transactions.
func start(ctx context.Context, cfg Config, src Source) (*reader, error) {
	target, err := src.HighWatermark(ctx)
	if err != nil {
		return nil, err
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
		return nil, err
	}
	checker, _ := src.(PinChecker)
	return &reader{cfg: cfg, src: src, target: target, pos: max(pos, cfg.From),
		checker: checker, interval: cfg.pinCheckInterval()}, nil
}

// run polls until the position reaches the target, yielding the snapshots
// below it, or until the read fails or its consumer stops.
func (r *reader) run(ctx context.Context) {
	r.progress(r.pos >= r.target, nil)
	r.lastProgress = r.cfg.Now()
	r.lastCheck = r.lastProgress
	for r.pos < r.target {
		recs, next, err := r.src.Poll(ctx, max(r.pollWait(), 0))
		if err != nil {
			r.fail(err)
			return
		}
		if !r.deliver(recs) {
			return
		}
		now := r.cfg.Now()
		if next > r.pos {
			r.pos = next
			r.lastProgress = now
			r.hanging = nil
			r.progress(r.pos >= r.target, nil)
			continue
		}
		if r.checkPinned(ctx, now) {
			continue
		}
		if r.cfg.StallTimeout > 0 && now.Sub(r.lastProgress) >= r.cfg.StallTimeout {
			r.fail(r.stallError(ctx, now))
			return
		}
	}
}

// progress tells cfg.Progress, if set, where the read is.
func (r *reader) progress(done bool, err error) {
	if r.cfg.Progress != nil {
		r.cfg.Progress(store.RecoveryEvent{Snapshots: r.cfg.Snapshots, Target: r.target, Position: r.pos, Records: r.read, Done: done, Err: err})
	}
}

// fail ends the read with err.
func (r *reader) fail(err error) {
	r.progress(true, err)
	r.yield(store.Snapshot{}, err)
}

// pollWait is how long the next Poll may wait: PollWait, or until the
// stall deadline; and no later than the next pin check.
func (r *reader) pollWait() time.Duration {
	wait := r.cfg.PollWait
	if r.cfg.StallTimeout > 0 {
		wait = r.lastProgress.Add(r.cfg.StallTimeout).Sub(r.cfg.Now())
	}
	if r.checker != nil {
		wait = min(wait, later(r.lastProgress, r.lastCheck).Add(r.interval).Sub(r.cfg.Now()))
	}
	return wait
}

// deliver yields the snapshots of recs below the target. It reports
// whether the read goes on: false once it failed (a record it cannot
// decode, or another application's) or its consumer stopped.
func (r *reader) deliver(recs []Fetched) bool {
	cfg := r.cfg
	for _, f := range recs {
		if f.Offset >= r.target {
			continue // written after the read started
		}
		if cfg.Application != "" {
			if app, ok := wire.RecordApplication(f.Record); ok && string(app) != cfg.Application {
				r.fail(&store.ForeignStateError{Input: cfg.Input, Snapshots: cfg.Snapshots,
					Application: cfg.Application, Owner: string(app), Offset: f.Offset})
				return false
			}
		}
		s, kind, err := wire.DecodeRecord(cfg.Snapshots, f.Offset, f.Record)
		if err != nil {
			r.fail(err)
			return false
		}
		if kind == wire.KindOffsetMarker {
			continue
		}
		r.read++
		if !r.yield(s, nil) {
			return false
		}
	}
	return true
}

// checkPinned runs a pin check when one is due and the read waits at the
// last stable offset, keeping its finding. It reports whether the checker
// resumed the read, which restarts the stall deadline.
func (r *reader) checkPinned(ctx context.Context, now time.Time) bool {
	if r.checker == nil || now.Sub(later(r.lastProgress, r.lastCheck)) < r.interval {
		return false
	}
	r.lastCheck = now
	r.hanging = nil
	if lso, err := r.src.LastStable(ctx); err != nil || lso > r.pos {
		return false
	}
	var resumed bool
	resumed, r.hanging = r.checker.CheckPinned(ctx, r.pos)
	if resumed {
		r.lastProgress = r.cfg.Now()
	}
	return resumed
}

// stallError is the error of a read whose stall deadline passed: the
// diagnosis, or the hanging transactions the last pin check found if the
// diagnosis is an open transaction.
func (r *reader) stallError(ctx context.Context, now time.Time) error {
	err := diagnose(ctx, r.cfg, r.src, r.pos, r.target, now.Sub(r.lastProgress))
	if se, ok := err.(*store.RecoveryStalledError); ok && se.Cause == store.StallOpenTransaction && r.hanging != nil {
		err = r.hanging(se)
	}
	return err
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
