package world

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// Standby replicas (Config.Standby): each member's engine follows the
// snapshot partitions it does not own into its cache (engine.Config.
// Standby), through its checked backend, which checks every snapshot a
// replica reads committed (4) and notes, per process and partition, the
// last checkpoint the store vouched for the replica's copy: the base it
// accepted when the replica opened, or the checkpoint of a read. When
// the partition moves to the member, the engine must recover from that
// copy: a delta, unless the store refuses the checkpoint (then in full,
// for the store's reason). The engine says how it recovered through its
// Observer (Recovered: kind and reason, the labels of the recovery
// metric), which is what invariant 11 judges; the states after every
// promotion, delta or not, are judged by invariant 9 as after a warm
// restart.

// replica is what the store vouched for of a process's standby copy of
// an input partition.
type replica struct {
	vouched bool
	cp      store.Checkpoint
}

// promotion is a process's acquisition of a partition: its replica as it
// was when the acquisition began, and the store's refusal of a delta, if
// it refused one.
type promotion struct {
	replica string // "current", "behind", "unvouched", "none"
	cp      store.Checkpoint
	refused string
}

// Promotion is a recovery that followed an acquisition, as the engine
// reported it (Observer.Recovered): the member's replica of the partition
// when the acquisition began ("current": the store had vouched for it up
// to the partition's last stable offset; "behind": below it;
// "unvouched": a replica the store had vouched for nothing of yet; "none":
// no replica in the process), and the recovery's kind and reason.
type Promotion struct {
	Replica, Kind, Reason string
}

// standbys is the world's record of its members' replicas and
// acquisitions. Replicas and recoveries run on the members' goroutines.
type standbys struct {
	mu sync.Mutex
	// replicas and promoting are per member slot, for its current
	// process (start resets them).
	replicas  map[int]map[int32]replica
	promoting map[int]map[int32]*promotion
	done      []Promotion
}

func newStandbys() *standbys {
	return &standbys{replicas: map[int]map[int32]replica{}, promoting: map[int]map[int32]*promotion{}}
}

// started forgets what m's last process had: a new process has no
// replica.
func (s *standbys) started(m *member) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replicas[m.slot], s.promoting[m.slot] = map[int32]replica{}, map[int32]*promotion{}
}

// Promotions are the recoveries after acquisitions so far.
func (w *World) Promotions() []Promotion {
	if w.standby == nil {
		return nil
	}
	w.standby.mu.Lock()
	defer w.standby.mu.Unlock()
	return append([]Promotion(nil), w.standby.done...)
}

// followingBackend is a member's checked backend when the engines keep
// standby replicas: its Follow checks what the replica reads.
type followingBackend struct {
	*checkedBackend
	follower store.Backend
}

// Follow opens the replica's follower (under FollowUncommitted, one that
// reads read_uncommitted) and notes its base: the store vouches for
// from once it accepts it, and for nothing of a follower from the log
// start until one of its reads says so.
func (b followingBackend) Follow(ctx context.Context, input store.TopicPartition, from *store.Checkpoint) (store.Follow, error) {
	w, m := b.w, b.m
	snap := store.TopicPartition{Topic: snapshotTopic, Partition: input.Partition}
	var f store.Follow
	var err error
	if w.cfg.FollowUncommitted {
		f = w.followUncommitted(snap, false, from)
	} else {
		f, err = b.follower.Follow(ctx, input, from)
	}
	s := w.standby
	s.mu.Lock()
	switch {
	case err != nil:
		delete(s.replicas[m.slot], input.Partition)
	case from != nil:
		s.replicas[m.slot][input.Partition] = replica{vouched: true, cp: *from}
	default:
		s.replicas[m.slot][input.Partition] = replica{}
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &checkedFollow{Follow: f, w: w, m: m, input: input, snap: snap, committed: map[string]bool{}}, nil
}

// checkedFollow is a replica's follower: each snapshot it reads is
// checked committed (4), and each checkpoint noted; the broken variants
// apply here.
type checkedFollow struct {
	store.Follow
	w         *World
	m         *member
	input     store.TopicPartition
	snap      store.TopicPartition
	committed map[string]bool
	read      int // snapshots read, for StandbySkipsRecords
}

func (f *checkedFollow) Next(ctx context.Context, wait time.Duration) ([]store.Snapshot, store.Checkpoint, bool, error) {
	// What is committed as the read starts: compaction may remove a
	// snapshot the read returns (a later one of its key committed) while
	// the read is on its way (slow fetches).
	for _, x := range f.w.committedSnapshotsOf(f.snap) {
		f.committed[snapshotID(x)] = true
	}
	snaps, cp, ok, err := f.Follow.Next(ctx, wait)
	if err != nil {
		return snaps, cp, ok, err
	}
	for _, s := range snaps {
		f.w.checkCommitted(f.snap, f.committed, s, fmt.Sprintf("member m%d's standby replica", f.m.slot))
	}
	if ok {
		s := f.w.standby
		s.mu.Lock()
		s.replicas[f.m.slot][f.input.Partition] = replica{vouched: true, cp: cp}
		s.mu.Unlock()
	}
	if f.w.cfg.StandbySkipsRecords {
		kept := snaps[:0:0]
		for _, s := range snaps {
			if f.read%2 == 0 {
				kept = append(kept, s)
			}
			f.read++
		}
		snaps = kept
	}
	if f.w.cfg.StandbyCheckpointsDropped {
		ok = false
	}
	return snaps, cp, ok, nil
}

// acquiring notes that m's process is acquiring input: what its replica
// of it is now, against the snapshot partition's last stable offset
// before the takeover.
func (s *standbys) acquiring(w *World, m *member, input int32) *promotion {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.replicas[m.slot][input]
	delete(s.replicas[m.slot], input) // the flow's from now on
	p := &promotion{replica: "none"}
	switch {
	case ok && r.vouched:
		p.replica, p.cp = "behind", r.cp
		if _, lso, _, err := w.c.Offsets(store.TopicPartition{Topic: snapshotTopic, Partition: input}); err == nil && r.cp.Offset >= lso {
			p.replica = "current"
		}
	case ok:
		p.replica = "unvouched"
	}
	s.promoting[m.slot][input] = p
	return p
}

// recovered is invariant 11, judged when m's engine reports a recovery of
// input that followed an acquisition: if the store had vouched for the
// process's replica of input when the acquisition began, the recovery is
// a delta, or a full one for the reason the store refused the delta.
func (s *standbys) recovered(w *World, m *member, input int32, kind, reason string) {
	s.mu.Lock()
	p := s.promoting[m.slot][input]
	delete(s.promoting[m.slot], input)
	if p != nil {
		s.done = append(s.done, Promotion{Replica: p.replica, Kind: kind, Reason: reason})
	}
	s.mu.Unlock()
	if p == nil || (p.replica != "current" && p.replica != "behind") || kind == "delta" || (p.refused != "" && reason == p.refused) {
		return
	}
	c := &w.checker
	refusal := "the store refused no delta"
	if p.refused != "" {
		refusal = "the store refused the delta for " + p.refused
	}
	c.report(c.violation(11,
		"member m%d took %s/%d over with a standby replica the store had vouched for (%s, checkpoint at snapshot offset %d), but recovered it %s (reason %s); %s",
		m.slot, InputTopic, input, p.replica, p.cp.Offset, kind, reason, refusal))
}

// standbyObserver hears m's process's recoveries.
type standbyObserver struct {
	engine.NopObserver
	w    *World
	m    *member
	proc int
}

func (o standbyObserver) Recovered(tp store.TopicPartition, _ int, _ time.Duration, kind, reason string) {
	if o.m.proc == o.proc {
		o.w.standby.recovered(o.w, o.m, tp.Partition, kind, reason)
	}
}

// checkCommitted is check 4 of a snapshot s that a reader of tp (what)
// returned: a committed transaction wrote it (perhaps since the read
// started: behind an open transaction); committed are the snapshotIDs
// known committed, reread on a miss.
func (w *World) checkCommitted(tp store.TopicPartition, committed map[string]bool, s store.Snapshot, what string) {
	if !committed[snapshotID(s)] {
		for _, x := range w.committedSnapshotsOf(tp) {
			committed[snapshotID(x)] = true
		}
	}
	if !committed[snapshotID(s)] {
		c := &w.checker
		c.report(c.violation(4,
			"%s of %s returned %s=%s as of input offset %d, which no committed transaction wrote",
			what, tp, s.Key, s.Value, s.Offset))
	}
}

// replicate lets m's standby replicas read: a second passes (a round is
// due once a second) and m polls.
func (w *World) replicate(m *member) {
	w.advance(time.Second)
	if m.state == running && m.busy == nil {
		w.step(m)
	}
}

// wipe loses m's machine with its disk: a live m crashes, and its slot's
// cache directory is emptied.
func (w *World) wipe(m *member) {
	if m.state == running || m.state == paused {
		w.crash(m)
	}
	if m.dir == "" {
		return
	}
	if err := os.RemoveAll(m.dir); err != nil {
		panic(fmt.Sprintf("world: wiping %s: %v", m.dir, err))
	}
	if err := os.Mkdir(m.dir, 0o700); err != nil {
		panic(fmt.Sprintf("world: wiping %s: %v", m.dir, err))
	}
}

// uncommittedFollow is the FollowUncommitted variant's follower: it reads
// tp read_uncommitted from its position, records of open and aborted
// transactions included, and vouches for every read.
type uncommittedFollow struct {
	w   *World
	tp  store.TopicPartition
	raw bool // a table's records as they are; else snapshots
	pos int64
	id  [16]byte
}

// followUncommitted opens an uncommittedFollow of tp from from (nil: the
// log start).
func (w *World) followUncommitted(tp store.TopicPartition, raw bool, from *store.Checkpoint) *uncommittedFollow {
	f := &uncommittedFollow{w: w, tp: tp, raw: raw}
	if cfg, ok := w.c.Topic(tp.Topic); ok {
		f.id = cfg.ID
	}
	if from != nil {
		f.pos = from.Offset
	}
	if start, _, _, err := w.c.Offsets(tp); err == nil {
		f.pos = max(f.pos, start)
	}
	return f
}

func (f *uncommittedFollow) Next(context.Context, time.Duration) ([]store.Snapshot, store.Checkpoint, bool, error) {
	ents, next, err := f.w.c.Fetch(f.tp, f.pos, 1<<20, false)
	if err != nil {
		return nil, store.Checkpoint{}, false, err
	}
	var out []store.Snapshot
	for _, e := range ents {
		if e.Control != sim.NoControl {
			continue
		}
		if f.raw {
			out = append(out, store.Snapshot{Key: e.Record.Key, Value: e.Record.Value, Offset: e.Offset, Tombstone: e.Record.Value == nil})
			continue
		}
		s, kind, err := wire.DecodeRecord(f.tp, e.Offset, e.Record)
		if err != nil {
			return nil, store.Checkpoint{}, false, err
		}
		if kind != wire.KindOffsetMarker {
			out = append(out, s)
		}
	}
	f.pos = max(f.pos, next)
	return out, store.Checkpoint{TopicID: f.id, Offset: f.pos, At: f.w.c.Now()}, true, nil
}

func (f *uncommittedFollow) Position() (int64, int64) {
	_, _, hw, _ := f.w.c.Offsets(f.tp)
	return f.pos, hw
}

func (f *uncommittedFollow) HighWatermark(context.Context) (int64, error) {
	_, _, hw, err := f.w.c.Offsets(f.tp)
	return hw, err
}

func (f *uncommittedFollow) Close() error { return nil }

// errNoStandby is a world configuration that needs Standby without it.
var errNoStandby = errors.New("world: StandbyReplicas, StandbySkipsRecords and StandbyCheckpointsDropped need Standby")
