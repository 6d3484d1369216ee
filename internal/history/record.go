package history

import (
	"context"
	"errors"
	"iter"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/snapfence/snapfence/store"
)

// Backend wraps be so that every call of member's engine into its store
// is recorded in r, with its outcome.
func Backend(be store.Backend, r *Recorder, member int) store.Backend {
	return &backend{Backend: be, r: r, member: member}
}

type backend struct {
	store.Backend
	r      *Recorder
	member int
}

func (b *backend) Acquire(ctx context.Context, a store.Acquisition) (store.Partition, error) {
	p, err := b.Backend.Acquire(ctx, a)
	op := Op{Kind: Acquire, Member: b.member, Partition: a.Input.Partition, Outcome: outcomeOf(err), Err: errString(err), Code: ErrorCode(err)}
	if err == nil {
		op.Offset = p.CommittedOffset()
	}
	b.r.Add(op)
	if err != nil {
		return nil, err
	}
	return &partition{Partition: p, b: b, id: a.Identity, input: a.Input}, nil
}

type partition struct {
	store.Partition
	b     *backend
	id    store.IdentityReader
	input store.TopicPartition

	mu     sync.Mutex
	staged int64
	// lastRecorded is closed once the call started last is recorded.
	lastRecorded chan struct{}
}

func (p *partition) generation() int32 {
	if p.id == nil {
		return -1
	}
	return p.id.CurrentIdentity().Generation
}

func (p *partition) recordWrite(s store.Snapshot, err error) {
	outcome := outcomeOf(err)
	if err != nil && outcome != NoIdentity && p.b.Mode() == store.Plain {
		// A plain write goes to the log with no transaction to abort it:
		// its failure says nothing of whether it landed.
		outcome = Unknown
	}
	p.b.r.Add(Op{Kind: Write, Member: p.b.member, Partition: p.input.Partition,
		Key: string(s.Key), Offset: s.Offset, Value: string(s.Value), Tombstone: s.Tombstone,
		Generation: p.generation(), Outcome: outcome, Err: errString(err), Code: ErrorCode(err)})
}

func (p *partition) recordWrites(snaps []store.Snapshot, errs []error) {
	for i, s := range snaps {
		p.recordWrite(s, errs[i])
	}
}

// StartWriteBatch records each write of the batch once its outcome is
// known (see recordWhenDone); the batch goes to the store as one call, so
// a recorded run is the same run as an unrecorded one.
func (p *partition) StartWriteBatch(ctx context.Context, snaps []store.Snapshot) store.Pending {
	return p.recordWhenDone(p.Partition.StartWriteBatch(ctx, snaps), func(errs []error) { p.recordWrites(snaps, errs) })
}

// Commit records the offset committed, or, on failure, the offset staged:
// the highest asked for, as the store stages it.
func (p *partition) Commit(ctx context.Context, offset int64) error {
	staged := p.stage(offset)
	err := p.Partition.Commit(ctx, offset)
	off := staged
	if err == nil {
		off = p.CommittedOffset()
	}
	p.recordCommit(off, err)
	return err
}

// StartCommit records the commit once its outcome is known, with the
// offset staged when it started: the partition's committed offset by the
// time it is recorded may be a later call's (the calls after it may have
// landed too).
func (p *partition) StartCommit(ctx context.Context, offset int64) store.Pending {
	staged := p.stage(offset)
	return p.recordWhenDone(p.Partition.StartCommit(ctx, offset), func(errs []error) { p.recordCommit(staged, errs[0]) })
}

func (p *partition) stage(offset int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.staged = max(p.staged, offset)
	return p.staged
}

// recordCommit records a commit of offset off with outcome err.
func (p *partition) recordCommit(off int64, err error) {
	p.b.r.Add(Op{Kind: Commit, Member: p.b.member, Partition: p.input.Partition, Offset: off,
		Generation: p.generation(), Outcome: outcomeOf(err), Err: errString(err), Code: ErrorCode(err)})
}

// recordWhenDone is pd, recording its outcome with record once, as soon
// as it is known and the calls p started before it are recorded (the
// store ends them in that order; a commit that rode in a write's
// transaction is recorded after the write): at once if it is known
// already (a backend that completes its calls in the caller, where the
// record then lands where the blocking call's would), otherwise from a
// goroutine that waits for it. The caller may reap the outcome steps
// later; another member may read the write before that, and the history
// must hold the write then. (Under testing/synctest the world's wait
// after a step waits for that goroutine too.)
func (p *partition) recordWhenDone(pd store.Pending, record func(errs []error)) store.Pending {
	p.mu.Lock()
	prev := p.lastRecorded
	r := &recordedPending{Pending: pd, record: record, recorded: make(chan struct{}), prev: prev, rec: p.b.r, member: p.b.member}
	p.lastRecorded = r.recorded
	p.mu.Unlock()
	if isClosed(pd.Done()) && (prev == nil || isClosed(prev)) {
		r.seen()
		return r
	}
	p.b.r.startedMu.Lock()
	p.b.r.started = append(p.b.r.started, r)
	p.b.r.startedMu.Unlock()
	if p.b.r.inCaller {
		return r // RecordDone and Wait record it
	}
	go func() {
		<-pd.Done()
		if prev != nil {
			<-prev
		}
		r.seen()
	}()
	return r
}

func isClosed[T any](c <-chan T) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

type recordedPending struct {
	store.Pending
	once     sync.Once
	record   func(errs []error)
	recorded chan struct{} // closed once recorded
	prev     chan struct{} // the partition's call started before it: recorded first
	rec      *Recorder
	member   int
}

// Recorded returns a channel closed once a call member's store started
// and is not recorded yet is recorded (its outcome known), or nil if
// none is left. A world on a real broker waits on it after a step, as it waits
// for the member's step itself: a started call runs on after the step
// that started it, and a check (or a pause of the member's network)
// must not come between.
//
// Each channel is one call's: wait on it, then ask again, until nil.
func (r *Recorder) Recorded(member int) <-chan struct{} {
	r.startedMu.Lock()
	defer r.startedMu.Unlock()
	r.keepStartedLocked(func(s *recordedPending) bool { return !isClosed(s.recorded) })
	for _, s := range r.started {
		if s.member == member {
			return s.recorded
		}
	}
	return nil
}

// RecordInCaller makes r record started calls only from RecordDone and
// from the waits of their callers, never from goroutines of its own: on a
// simulated cluster, whose goroutines run one at a time, the history's
// order is then the same on every run of a scenario (rapid replays and
// shrinks it). Call it before any call is recorded.
func (r *Recorder) RecordInCaller() { r.inCaller = true }

// RecordDone records now, in start order, every started call that has
// ended (and whose partition's earlier calls have), rather than when the
// goroutine waiting for it runs. A world calls it before it reads what
// the calls wrote, or lets another member read it: on a simulated
// cluster a started call lands during Advance or inside another call,
// and the history must hold the write before any read of it.
func (r *Recorder) RecordDone() {
	r.startedMu.Lock()
	defer r.startedMu.Unlock()
	r.keepStartedLocked(func(s *recordedPending) bool {
		if !isClosed(s.recorded) && isClosed(s.Pending.Done()) && (s.prev == nil || isClosed(s.prev)) {
			s.seen()
		}
		return !isClosed(s.recorded)
	})
}

// keepStartedLocked keeps, in order, the started calls for which keep
// holds. Called with r.startedMu held.
func (r *Recorder) keepStartedLocked(keep func(*recordedPending) bool) {
	left := r.started[:0]
	for _, s := range r.started {
		if keep(s) {
			left = append(left, s)
		}
	}
	clear(r.started[len(left):])
	r.started = left
}

func (r *recordedPending) seen() {
	r.once.Do(func() {
		r.record(r.Pending.Wait(context.Background()))
		close(r.recorded)
	})
}

// Wait returns once the outcome is recorded too, so a caller that acts
// on it (and records that) comes after it in the history.
func (r *recordedPending) Wait(ctx context.Context) []error {
	errs := r.Pending.Wait(ctx)
	if r.rec != nil && r.rec.inCaller {
		r.rec.RecordDone() // it and what its partition started before it
	}
	select {
	case <-r.recorded:
	case <-ctx.Done():
	}
	return errs
}

// StartCommitBatch records an exactly-once batch once its outcome is
// known: its snapshots as writes, its outputs as emits and its offset as
// a commit, all with the transaction's outcome. A failure other than the
// fence is recorded as unknown: the transaction may have committed (an
// answer lost), as store.Partition.StartCommitBatch says.
func (p *partition) StartCommitBatch(ctx context.Context, b store.Batch) store.Pending {
	return p.recordWhenDone(p.Partition.StartCommitBatch(ctx, b), func(errs []error) { p.recordBatch(b, errs[0]) })
}

func (p *partition) recordBatch(b store.Batch, err error) {
	outcome := outcomeOf(err)
	if outcome == Failed {
		outcome = Unknown
	}
	gen := p.generation()
	part := p.input.Partition
	for _, s := range b.Snapshots {
		p.b.r.Add(Op{Kind: Write, Member: p.b.member, Partition: part,
			Key: string(s.Key), Offset: s.Offset, Value: string(s.Value), Tombstone: s.Tombstone,
			Generation: gen, Outcome: outcome, Err: errString(err), Code: ErrorCode(err)})
	}
	for _, o := range b.Outputs {
		p.b.r.Add(EmitOp(p.b.member, o.Key, o.Value, outcome, err))
	}
	off := b.Offset
	if err == nil {
		off = p.CommittedOffset()
	}
	p.b.r.Add(Op{Kind: Commit, Member: p.b.member, Partition: part, Offset: off,
		Generation: gen, Outcome: outcome, Err: errString(err), Code: ErrorCode(err)})
}

// EmitOp is the Emit op of member's output record (key, value) with the
// outcome of what carried it (err: its error, if any).
func EmitOp(member int, key, value []byte, outcome Outcome, err error) Op {
	p, o, _ := ParseOutput(string(value))
	return Op{Kind: Emit, Member: member, Partition: p, Offset: o, Key: string(key), Value: string(value), Outcome: outcome, Err: errString(err), Code: ErrorCode(err)}
}

// OutputOp is the Output op of a record (key, value) that a final reader
// of the given isolation (ReadCommitted or ReadUncommitted) saw.
func OutputOp(isolation string, key, value []byte) Op {
	op := EmitOp(-1, key, value, "", nil)
	op.Kind, op.Detail = Output, isolation
	return op
}

// OutcomeOf is the outcome an operation that returned err had.
func OutcomeOf(err error) Outcome { return outcomeOf(err) }

// Recover records the read. A delta read (from a checkpoint) is a read
// whose ReadStart's Detail is DeltaRead and Offset the checkpoint's; a
// checkpoint the store refuses ends it failed, with the reason as the
// ReadEnd's Detail.
func (p *partition) Recover(ctx context.Context, from *store.Checkpoint) iter.Seq2[store.Snapshot, error] {
	start := Op{}
	if from != nil {
		start = Op{Detail: DeltaRead, Offset: from.Offset}
	}
	return p.read(start, p.Partition.Recover(ctx, from))
}

// read records the read snaps, its ReadStart being start.
func (p *partition) read(start Op, snaps iter.Seq2[store.Snapshot, error]) iter.Seq2[store.Snapshot, error] {
	return func(yield func(store.Snapshot, error) bool) {
		r := p.b.r
		n := r.newRead()
		part := p.input.Partition
		start.Kind, start.Member, start.Partition, start.Read = ReadStart, p.b.member, part, n
		r.Add(start)
		for s, err := range snaps {
			if err != nil {
				op := Op{Kind: ReadEnd, Member: p.b.member, Partition: part, Read: n, Outcome: outcomeOf(err), Err: errString(err), Code: ErrorCode(err)}
				var se *store.RecoveryStalledError
				var ce *store.CheckpointError
				switch {
				case errors.As(err, &se):
					op.Detail = se.Cause.String()
				case errors.As(err, &ce):
					op.Detail = ce.Reason
				}
				r.Add(op)
				yield(s, err)
				return
			}
			r.Add(Op{Kind: Read, Member: p.b.member, Partition: part, Read: n,
				Key: string(s.Key), Offset: s.Offset, Value: string(s.Value), Tombstone: s.Tombstone})
			if !yield(s, nil) {
				r.Add(Op{Kind: ReadEnd, Member: p.b.member, Partition: part, Read: n, Outcome: Unknown, Err: "the reader stopped"})
				return
			}
		}
		r.Add(Op{Kind: ReadEnd, Member: p.b.member, Partition: part, Read: n, Outcome: OK})
	}
}

func outcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, store.ErrFenced):
		return Fenced
	case errors.Is(err, store.ErrMissingIdentity):
		return NoIdentity
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Unknown
	}
	return Failed
}

// ErrorCode is the code of the Kafka error in err's chain (the first a
// depth-first walk meets), or "" if it carries none.
func ErrorCode(err error) string {
	if ke, ok := errors.AsType[*kerr.Error](err); ok {
		return ke.Message
	}
	return ""
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
