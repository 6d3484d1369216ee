package world

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"sync"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// Violation is a broken invariant: its number and name (docs/design.md,
// "Invariants of the simulated cluster"), the step after which it was
// found (1-based; 0 at quiescence) and what was seen.
type Violation struct {
	Invariant int    `json:"invariant"`
	Name      string `json:"name"`
	Step      int    `json:"step"`
	Detail    string `json:"detail"`
}

func (v Violation) String() string {
	at := fmt.Sprintf("after step %d", v.Step)
	if v.Step == 0 {
		at = "at quiescence"
	}
	return fmt.Sprintf("invariant %d %s violated %s: %s", v.Invariant, v.Name, at, v.Detail)
}

// The invariants, by number.
var invariantNames = map[int]string{
	1:  "NoStaleOverwrite",
	2:  "CommittedOffsetNeverAhead",
	3:  "ExactlyOnceState",
	4:  "AbortedWritesInvisible",
	5:  "RecoveryComplete",
	6:  "Liveness",
	7:  "OutputAtLeastOnce",
	8:  "OutputExactlyOnce",
	9:  "WarmCacheExact",
	10: "TimerFiresOnce",
	11: "PromotionReadsDelta",
	12: "LookupCaughtUp",
}

// InvariantName names invariant n.
func InvariantName(n int) string { return invariantNames[n] }

// checker checks the invariants. Recovery checks (4, 5, the diagnosis of
// 6) run inside the members' recoveries, through checkedBackend, and are
// collected here.
type checker struct {
	w *World
	// seen is each key's highest snapshot offset a reader has seen (1).
	seen map[string]int64
	// outputs counts the outputs emitted per event, "partition:offset" (7).
	outputs map[string]int
	// pending are violations found inside member steps, reported with
	// the step.
	pending []Violation
	// stale says, for each input partition and identity, whether its
	// store's last read of that identity for a call returned an identity
	// older than the member's own when its last step began (6): a design
	// that caches the identity. The engine's identity is the one its
	// client had after its last poll (published once that poll's
	// rebalance callbacks ran), and with writes in flight a call runs
	// after the step that started it: when the group moved on meanwhile
	// (a rebalance began, or the step's poll joined a new generation and
	// has not published it yet), the coordinator rightly rejects the
	// identity, and the member, up to date when it reaps the outcome, was
	// not fenced as a valid owner. A partition's calls run one at a time,
	// so the last read of the identity is the fenced call's. The reads run
	// on the store's goroutines.
	//
	// An identity of another member id is older only if the member held
	// that id before the one it had when the step began (heldIDs, in the
	// order holds saw them): a client that rejoined as new within the
	// step (its eviction heard in the background) reads a newer one.
	identityMu sync.Mutex
	stale      map[identityRead]bool
	stepStart  map[*member]store.GroupIdentity
	heldIDs    map[*member]map[string]int
}

func newChecker(w *World) checker {
	return checker{w: w, seen: map[string]int64{}, outputs: map[string]int{}, stale: map[identityRead]bool{}, stepStart: map[*member]store.GroupIdentity{}, heldIDs: map[*member]map[string]int{}}
}

// observedIdentity is the identity reader a member's store reads for
// each call, noting whether it read a stale identity (checker.stale).
type observedIdentity struct {
	store.IdentityReader
	w     *World
	m     *member
	input store.TopicPartition
}

type identityRead struct {
	input store.TopicPartition
	id    store.GroupIdentity
}

func (o observedIdentity) CurrentIdentity() store.GroupIdentity {
	id := o.IdentityReader.CurrentIdentity()
	c := &o.w.checker
	c.identityMu.Lock()
	start, ok := c.stepStart[o.m]
	older := id.Generation < start.Generation
	if id.MemberID != start.MemberID {
		at, held := c.heldIDs[o.m][id.MemberID]
		startAt, startHeld := c.heldIDs[o.m][start.MemberID]
		older = held && startHeld && at < startAt
	}
	c.stale[identityRead{o.input, id}] = ok && start.Valid() && older
	c.identityMu.Unlock()
	return id
}

// readStale reports whether input's store last read id when it was
// older than its member's identity at the start of the member's step.
func (c *checker) readStale(input store.TopicPartition, id store.GroupIdentity) bool {
	c.identityMu.Lock()
	defer c.identityMu.Unlock()
	return c.stale[identityRead{input, id}]
}

// stepStarted notes m's identity as its step begins.
func (c *checker) stepStarted(m *member) {
	id := m.src.Identity()
	c.identityMu.Lock()
	c.stepStart[m] = id
	c.identityMu.Unlock()
	c.holds(m)
}

// holds notes the member id m holds as one of its steps, polls or not,
// begins: the first time, as the newest of m's ids.
func (c *checker) holds(m *member) {
	id := m.src.Identity()
	c.identityMu.Lock()
	defer c.identityMu.Unlock()
	if c.heldIDs[m] == nil {
		c.heldIDs[m] = map[string]int{}
	}
	if _, ok := c.heldIDs[m][id.MemberID]; !ok {
		c.heldIDs[m][id.MemberID] = len(c.heldIDs[m])
	}
}

func (c *checker) violation(n int, format string, args ...any) Violation {
	return Violate(n, c.w.steps, format, args...)
}

func (c *checker) report(v Violation) { c.pending = append(c.pending, v) }

// emitted counts each output's event (its value names it).
func (c *checker) emitted(outs []engine.Output) {
	for _, o := range outs {
		c.outputs[string(o.Value)]++
	}
}

// stepEnded notes a member step's end. A step that fails for its context
// (the world cancelled it) is expected; any other error is the engine's
// and shows in the member's errors.
//
// 6: a poll step of a member that is up to date with the group (its
// client's generation or epoch is the coordinator's) and owns the
// partition must not be fenced on it: a fenced valid owner loses its
// flow for nothing, and a design that keeps fencing it never makes
// progress (the spec's generation captured at assignment). A flush
// without a poll may be: the member has not read the group's news. Nor
// may a call whose identity was not older than the member's at the start
// of its step (readStale): with writes in flight it runs after the step
// that started it, and the group may have moved on since (see
// checker.stale).
func (c *checker) stepEnded(m *member, _ error) {
	if !m.polling || m.state != running {
		return
	}
	errs := m.r.Errors()
	if len(errs) <= m.errsBefore {
		return
	}
	id := m.src.Identity()
	current, _ := c.w.c.MemberEpochs(Group, id.MemberID)
	owned := m.src.Member().Owned()
	// A failed recovery leaves no partial state: a flow runs only on a
	// recovery that ended well (a later one may have, after a restart).
	for _, tp := range m.r.Flows() {
		if err := m.recovered[tp.Partition]; err != nil {
			c.report(c.violation(6, "member m%d runs a flow for %s whose last recovery failed: %v", m.slot, tp, err))
		}
	}
	for _, err := range errs[m.errsBefore:] {
		var fe *store.FencedError
		if !errors.As(err, &fe) || current < 0 || id.Generation != current || !slices.Contains(owned, fe.Input) || !c.readStale(fe.Input, fe.Identity) {
			continue
		}
		c.report(c.violation(6,
			"member m%d was fenced on %s while it owned it at the group's current generation %d: %v", m.slot, fe.Input, current, err))
	}
}

// snapshots reads every snapshot partition read_committed and returns
// each key's latest snapshot.
func (c *checker) snapshots() map[string]Visible {
	out := map[string]Visible{}
	for p := range c.w.cfg.Partitions {
		tp := store.TopicPartition{Topic: snapshotTopic, Partition: int32(p)}
		ents, err := c.w.c.Read(tp, true)
		if err != nil {
			panic(fmt.Sprintf("world: reading %s: %v", tp, err))
		}
		for _, e := range ents {
			s, kind, err := wire.DecodeRecord(tp, e.Offset, e.Record)
			if err != nil || kind == wire.KindOffsetMarker {
				continue // corrupt records fail recoveries; markers carry no state
			}
			out[string(s.Key)] = Visible{Offset: s.Offset, Value: string(s.Value), Tombstone: s.Tombstone}
		}
	}
	return out
}

// committedSnapshots returns each key's latest committed snapshot, also
// those a read_committed reader cannot reach yet (behind an open
// transaction's last stable offset): what a recovery will return.
func (c *checker) committedSnapshots() map[string]Visible {
	out := map[string]Visible{}
	for p := range c.w.cfg.Partitions {
		for _, s := range c.w.committedSnapshotsOf(store.TopicPartition{Topic: snapshotTopic, Partition: int32(p)}) {
			out[string(s.Key)] = Visible{Offset: s.Offset, Value: string(s.Value), Tombstone: s.Tombstone}
		}
	}
	return out
}

// committedSnapshotsOf decodes tp's committed snapshot records (offset
// markers skipped), in log order.
func (w *World) committedSnapshotsOf(tp store.TopicPartition) []store.Snapshot {
	ents, err := w.c.Entries(tp)
	if err != nil {
		panic(fmt.Sprintf("world: reading %s: %v", tp, err))
	}
	committed := committedEntries(ents)
	var out []store.Snapshot
	for _, e := range ents {
		if _, ok := committed[e.Offset]; !ok {
			continue
		}
		s, kind, err := wire.DecodeRecord(tp, e.Offset, e.Record)
		if err == nil && kind != wire.KindOffsetMarker {
			out = append(out, s)
		}
	}
	return out
}

// afterStep checks the invariants that hold after every step (1, 2, the
// revoke half of 6) and returns them with any found inside the step.
func (c *checker) afterStep(s Step) []Violation {
	vs := c.pending
	c.pending = nil
	// 1. A key's visible snapshot never goes back to an older fold.
	vs = append(vs, CheckNoStaleOverwrite(c.w.steps, c.seen, c.snapshots())...)
	// 2. Every input event below a partition's committed offset is
	// covered by its key's committed snapshot (or the key is deleted).
	all := func(int32) bool { return true }
	vs = append(vs, c.w.ledger.CheckCommittedCovered(c.w.steps, c.w.committedOffsets(), all, c.committedSnapshots())...)
	// 9. A current owner's state of every key whose events are all below
	// the committed offset is the committed snapshot's.
	vs = append(vs, c.warmCache()...)
	// 6. No flow of a partition its member no longer owns keeps running.
	for _, m := range c.w.members {
		if m.state != running || m.busy != nil {
			continue
		}
		owned := m.src.Member().Owned()
		for _, tp := range m.r.Flows() {
			if !slices.Contains(owned, tp) {
				vs = append(vs, c.violation(6,
					"member m%d still runs the flow of %s after losing it (owns %v)", m.slot, tp, owned))
			}
		}
	}
	return vs
}

// atQuiescence checks what must hold once every fault is lifted and every
// event processed: the exact fold (3) and the outputs (7).
func (c *checker) atQuiescence() []Violation {
	vs := c.pending
	c.pending = nil
	vs = append(vs, c.warmCache()...)
	snaps := c.snapshots()
	if c.w.cfg.Timers {
		vs = append(vs, c.w.ledger.CheckTimers(snaps)...)
	}
	return append(vs, c.w.ledger.CheckAtQuiescence(snaps, c.outputs)...)
}

// warmCache checks invariant 9 under WarmRestarts: the state a running
// member's engine holds of a key equals the key's latest committed
// snapshot (its value; absent for a tombstone or no snapshot), for every
// flow of a partition the member owns at the group's current generation
// and every key of that partition whose input events all lie below the
// partition's committed offset; at quiescence, every key. Whatever the
// cache kept and a delta recovery added, the two together must be the
// committed snapshots: a deleted key brought back (a tombstone compacted
// away since the checkpoint, a topic recreated without it) or a stale
// state (a snapshot the delta never read) breaks it. Such a member is the
// partition's only writer since its recovery, and the committed offset
// covers each such key's events, so its state is the key's committed
// snapshot, which is the fold of its events (2).
func (c *checker) warmCache() []Violation {
	if !c.w.cfg.WarmRestarts && !c.w.cfg.Standby {
		return nil
	}
	var vs []Violation
	var committed map[string]Visible // once needed
	offsets := c.w.committedOffsets()
	last := map[string]Event{} // each key's last input event
	for _, e := range c.w.ledger {
		last[e.Key] = e
	}
	for _, m := range c.w.members {
		if m.state != running || m.busy != nil {
			continue
		}
		id := m.src.Identity()
		if current, _ := c.w.c.MemberEpochs(Group, id.MemberID); current < 0 || current != id.Generation {
			continue
		}
		owned := m.src.Member().Owned()
		for _, tp := range m.r.Flows() {
			if !slices.Contains(owned, tp) {
				continue
			}
			for _, key := range SortedKeys(last) {
				if e := last[key]; e.Partition != tp.Partition || e.Offset >= offsets[tp.Partition] {
					continue
				}
				if committed == nil {
					committed = c.committedSnapshots()
				}
				got, ok, err := m.r.State(tp, []byte(key))
				if err != nil {
					vs = append(vs, c.violation(9, "member m%d could not read key %s's state in %s: %v", m.slot, key, tp, err))
					continue
				}
				want, has := committed[key]
				switch {
				case !ok && (!has || want.Tombstone):
				case ok && has && !want.Tombstone && want.Value == strconv.Itoa(got):
				case ok && has && !want.Tombstone && c.w.cfg.Timers && timerWarmOK(want.Value, got):
				default:
					gotS := "absent"
					if ok {
						gotS = strconv.Itoa(got)
					}
					vs = append(vs, c.violation(9,
						"member m%d holds key %s of %s as %s, but its committed snapshot is %s (the partition is committed at %d)",
						m.slot, key, tp, gotS, describe(want, has), offsets[tp.Partition]))
				}
			}
		}
	}
	return vs
}

// committedEntries is what a partition holds committed: every
// non-transactional record, and the records of committed transactions.
func committedEntries(ents []sim.Entry) map[int64]sim.Entry {
	out := map[int64]sim.Entry{}
	open := map[int64][]sim.Entry{}
	for _, e := range ents {
		switch {
		case e.Control == sim.CommitMarker:
			for _, x := range open[e.ProducerID] {
				out[x.Offset] = x
			}
			delete(open, e.ProducerID)
		case e.Control == sim.AbortMarker:
			delete(open, e.ProducerID)
		case e.Control != sim.NoControl:
		case !e.Transactional:
			out[e.Offset] = e
		case e.Aborted:
		default:
			open[e.ProducerID] = append(open[e.ProducerID], e)
		}
	}
	return out
}

// checkedBackend wraps a member's store backend: it checks every recovery
// (4, 5, the stall diagnosis of 6) and applies the broken variants.
type checkedBackend struct {
	store.Backend
	w *World
	m *member
}

func (b *checkedBackend) Acquire(ctx context.Context, a store.Acquisition) (store.Partition, error) {
	if b.w.cfg.CachedIdentity {
		// The consumer's generation as the assignment callback sees it,
		// kept for the life of the partition.
		a.Identity = frozenIdentity(b.m.src.Identity())
	}
	a.Identity = observedIdentity{IdentityReader: a.Identity, w: b.w, m: b.m, input: a.Input}
	var promo *promotion
	if b.w.standby != nil {
		promo = b.w.standby.acquiring(b.w, b.m, a.Input.Partition)
	}
	p, err := b.Backend.Acquire(ctx, a)
	if err != nil {
		return nil, err
	}
	return &checkedPartition{Partition: p, w: b.w, m: b.m, input: a.Input, snap: store.TopicPartition{Topic: snapshotTopic, Partition: a.Input.Partition}, promo: promo}, nil
}

type frozenIdentity store.GroupIdentity

func (f frozenIdentity) CurrentIdentity() store.GroupIdentity { return store.GroupIdentity(f) }

type checkedPartition struct {
	store.Partition
	w     *World
	m     *member
	input store.TopicPartition
	snap  store.TopicPartition
	// promo is the acquisition's promotion (Config.Standby); nil without.
	promo *promotion
}

// StartCommit is the store's, but under CommitAheadOfWrites the offset is
// also committed at once, ahead of the writes queued before it.
func (p *checkedPartition) StartCommit(ctx context.Context, offset int64) store.Pending {
	if p.w.cfg.CommitAheadOfWrites {
		_ = p.w.c.OffsetCommit(p.m.src.Identity(), map[store.TopicPartition]int64{p.input: offset})
	}
	return p.Partition.StartCommit(ctx, offset)
}

// Recover checks a recovery: in full (recoverFull) or from a checkpoint
// (recoverDelta).
func (p *checkedPartition) Recover(ctx context.Context, from *store.Checkpoint) iter.Seq2[store.Snapshot, error] {
	if from == nil {
		return p.recoverFull(ctx)
	}
	return p.recoverDelta(ctx, *from)
}

// recoverFull checks a recovery from the log start: every snapshot it
// returns is committed (4), it returns every key's snapshot committed
// when it started (5), and a stall is diagnosed (6).
func (p *checkedPartition) recoverFull(ctx context.Context) iter.Seq2[store.Snapshot, error] {
	c := &p.w.checker
	return func(yield func(store.Snapshot, error) bool) {
		// 5: what was committed when the read started.
		want := map[string]store.Snapshot{} // each key's newest
		committed := map[string]bool{}      // 4: by snapshotID, reread on a miss
		for _, s := range p.w.committedSnapshotsOf(p.snap) {
			if w, ok := want[string(s.Key)]; !ok || s.Offset >= w.Offset {
				want[string(s.Key)] = s
			}
			committed[snapshotID(s)] = true
		}
		got := map[string]int64{}
		inner := p.Partition.Recover(ctx, nil)
		if p.w.cfg.LSOBoundRecovery {
			inner = p.readToLSO()
		}
		for s, err := range inner {
			if err != nil {
				p.checkStall(err)
				p.m.recovered[p.snap.Partition] = err
				yield(s, err)
				return
			}
			p.checkCommitted(committed, s, "a recovery")
			got[string(s.Key)] = max(got[string(s.Key)], s.Offset)
			if !yield(s, nil) {
				return
			}
		}
		p.m.recovered[p.snap.Partition] = nil
		var now map[string]int64 // each key's newest committed offset, once needed
		for _, key := range SortedKeys(want) {
			w := want[key]
			g, ok := got[key]
			if !(ok && g >= w.Offset) && now == nil {
				now = map[string]int64{}
				for _, x := range p.w.committedSnapshotsOf(p.snap) {
					now[string(x.Key)] = max(now[string(x.Key)], x.Offset)
				}
			}
			switch {
			case ok && g >= w.Offset:
			case !ok && w.Tombstone:
				// Compaction may remove a tombstone while the read is on
				// its way (Kafka keeps one for delete.retention.ms; the
				// simulated cluster not at all): a key deleted at the
				// tombstone's offset and a key without a snapshot replay
				// to the same state, as the replay ends with the delete.
			case now[key] > w.Offset:
				// A newer snapshot of the key was committed since the
				// read started, past its target, and compaction dropped
				// the wanted one for it. Only a newer owner of the
				// partition can commit there during a read: the reader is
				// a zombie, whose writes its producer's fence aborts (a
				// legitimate owner's partition has no other writer while
				// it recovers).
			default:
				c.report(c.violation(5,
					"a recovery of %s ended without key %s's snapshot as of input offset %d, committed before it started (it returned %d)",
					p.snap, key, w.Offset, g))
			}
		}
	}
}

// checkCommitted is check 4: every snapshot a recovery returns is
// committed (perhaps since the read started: behind an open transaction);
// committed are the snapshotIDs known committed, reread on a miss.
func (p *checkedPartition) checkCommitted(committed map[string]bool, s store.Snapshot, what string) {
	p.w.checkCommitted(p.snap, committed, s, what)
}

// StartCommitBatch is the store's, but under TombstonesAheadOfCommit an
// at-least-once batch (no outputs) that carries a tombstone is written
// without its offset, before it returns: each write of a batch carries
// the committed offset, as a persist's does.
func (p *checkedPartition) StartCommitBatch(ctx context.Context, b store.Batch) store.Pending {
	b.Snapshots = p.rewrite(b.Snapshots)
	if !p.tombstonesAhead(b) {
		return p.Partition.StartCommitBatch(ctx, b)
	}
	return donePending{p.writeWithoutOffset(ctx, b)}
}

// writeWithoutOffset writes b's snapshots and waits for them:
// TombstonesAheadOfCommit's batch.
func (p *checkedPartition) writeWithoutOffset(ctx context.Context, b store.Batch) error {
	for _, err := range p.Partition.StartWriteBatch(ctx, b.Snapshots).Wait(ctx) {
		if err != nil {
			return err
		}
	}
	return nil
}

// tombstonesAhead reports whether TombstonesAheadOfCommit writes b
// without its offset.
func (p *checkedPartition) tombstonesAhead(b store.Batch) bool {
	if !p.w.cfg.TombstonesAheadOfCommit || p.w.cfg.ExactlyOnce || len(b.Outputs) > 0 {
		return false
	}
	return slices.ContainsFunc(b.Snapshots, func(s store.Snapshot) bool { return s.Tombstone })
}

// donePending is a store.Pending whose outcome, err, is known.
type donePending struct{ err error }

func (donePending) Done() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func (d donePending) Wait(context.Context) []error     { return []error{d.err} }
func (donePending) Position() (store.Checkpoint, bool) { return store.Checkpoint{}, false }

// recoverDelta checks a delta recovery: every snapshot it returns is
// committed (4), and a read that fails other than by the store refusing
// the checkpoint is diagnosed (6) and noted, as recoverFull does. Its
// completeness is the cache's and the delta's together: the engine's
// states are checked against the committed snapshots (9). Under
// TrustCheckpoints the checkpoint is made to fit first.
func (p *checkedPartition) recoverDelta(ctx context.Context, cp store.Checkpoint) iter.Seq2[store.Snapshot, error] {
	return func(yield func(store.Snapshot, error) bool) {
		if p.w.cfg.TrustCheckpoints {
			cp = p.trusted(cp)
		}
		committed := map[string]bool{}
		for _, s := range p.w.committedSnapshotsOf(p.snap) {
			committed[snapshotID(s)] = true
		}
		for s, err := range p.Partition.Recover(ctx, &cp) {
			if err != nil {
				ce, refused := errors.AsType[*store.CheckpointError](err)
				if !refused {
					p.checkStall(err)
					p.m.recovered[p.snap.Partition] = err
				} else if p.promo != nil {
					p.w.standby.mu.Lock()
					p.promo.refused = ce.Reason
					p.w.standby.mu.Unlock()
				}
				yield(s, err)
				return
			}
			p.checkCommitted(committed, s, "a delta recovery")
			if !yield(s, nil) {
				return
			}
		}
		p.m.recovered[p.snap.Partition] = nil
	}
}

// trusted is the broken variant's checkpoint: cp made to pass the store's
// checks, as a design that trusts its cache would (the topic's current id,
// written just now, its offset within the log).
func (p *checkedPartition) trusted(cp store.Checkpoint) store.Checkpoint {
	if cfg, ok := p.w.c.Topic(p.snap.Topic); ok {
		cp.TopicID = cfg.ID
	}
	cp.At = p.w.c.Now()
	if start, _, hw, err := p.w.c.Offsets(p.snap); err == nil {
		cp.Offset = min(max(cp.Offset, start), hw)
	}
	return cp
}

// snapshotID identifies a snapshot record by what it says.
func snapshotID(s store.Snapshot) string {
	return fmt.Sprintf("%q/%d/%t/%q", s.Key, s.Offset, s.Tombstone, s.Value)
}

// checkStall checks a stalled recovery against the world (6): a log end
// now below the read's target is a truncation; else a foreign transaction
// open on the partition is an open transaction. And it failed at its
// deadline: no sooner, and no later than the slice of time the world
// advances at once (the read goes on at the end of a slice).
func (p *checkedPartition) checkStall(err error) {
	var se *store.RecoveryStalledError
	if !errors.As(err, &se) {
		return
	}
	c := &p.w.checker
	_, _, hw, _ := p.w.c.Offsets(p.snap)
	var want store.StallCause
	switch {
	case hw < se.Target:
		want = store.StallTruncation
	case p.w.foreign != nil && p.w.foreign.tp == p.snap:
		want = store.StallOpenTransaction
	default:
		return // a crashed owner's transaction (its takeover is the member's own): either diagnosis fits
	}
	if se.Cause != want {
		c.report(c.violation(6, "a recovery of %s stalled with the diagnosis %s, but the world had %s (log end %d, target %d)",
			p.snap, se.Cause, want, hw, se.Target))
	}
	timeout := p.w.cfg.StallTimeout
	if se.Stalled < timeout || se.Stalled > timeout+p.w.cfg.SessionTimeout/3 {
		c.report(c.violation(6, "a recovery of %s stalled after %s, its deadline is %s", p.snap, se.Stalled, timeout))
	}
}

// readToLSO is the broken variant's recovery: read_committed to the last
// stable offset captured at the start, instead of the high watermark.
func (p *checkedPartition) readToLSO() iter.Seq2[store.Snapshot, error] {
	return func(yield func(store.Snapshot, error) bool) {
		_, lso, _, err := p.w.c.Offsets(p.snap)
		if err != nil {
			yield(store.Snapshot{}, err)
			return
		}
		ents, _, err := p.w.c.Fetch(p.snap, 0, 1<<30, true)
		if err != nil {
			yield(store.Snapshot{}, err)
			return
		}
		for _, e := range ents {
			if e.Offset >= lso {
				break
			}
			s, kind, err := wire.DecodeRecord(p.snap, e.Offset, e.Record)
			if err != nil {
				yield(store.Snapshot{}, err)
				return
			}
			if kind == wire.KindOffsetMarker {
				continue
			}
			if !yield(s, nil) {
				return
			}
		}
	}
}
