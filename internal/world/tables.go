package world

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/view"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// Lookup tables (Config.Tables): TableTopic is a compacted topic of plain
// key/values the world writes, each row a new version of its key (a
// number, unique over the whole table: the row's sequence number) or a
// delete; some in a transaction of the table's producer, left open until
// TableEnd or its timeout. The table's model is every write with its
// offset and fate.
//
// Every member process has a View of the table (view.View, Plain), the
// engine's one Table (Config.Tables), and a fold that looks its key up
// in it before it folds as Fold does (the state and outputs do not
// depend on the row: the ledger's checks stay exact). The view reads only
// when a ReadTable step lets it, and while a partition waits for it
// (worldTable.WaitCaughtUp: what View.Run does on its own), so folds see
// rows as old as the docs allow.
//
// Invariant 12 (LookupCaughtUp) is what docs/design.md ("Lookup joins",
// L1; "Views", V1) promises a fold of its lookups, checked at each one:
//
//   - the partition folds nothing before the table caught up to the high
//     watermark each of its partitions had when the view opened: no
//     transaction of the table below those targets is still open;
//   - the row returned is one a committed write wrote (or none: a delete,
//     or no row), never an open or aborted transaction's;
//   - it is no older than the key's newest committed write below the
//     view's target (the row the view must have read when it caught up);
//   - it is no older than a row an earlier lookup of the key in the same
//     process returned (the view applies its log in order).
//
// The docs promise nothing more: the table is not in step with the input,
// so a row written before an input record may not be in the view yet
// when the record is folded. TableStats counts how often a lookup saw a
// row older than the key's newest committed one (Stale), and older than
// the one committed before its input record was produced
// (OlderThanInput): both happen, and neither is a violation.

// TableTopic is the lookup table's topic (Config.Tables).
const TableTopic = "rates"

// tableTxnID is the table producer's transactional.id.
const tableTxnID = "rates-writer"

type writeFate int

const (
	fateOpen writeFate = iota
	fateCommitted
	fateAborted
)

// tableWrite is one write of the table.
type tableWrite struct {
	seq       int // the row's version: its value
	key       string
	partition int32
	offset    int64
	del       bool
	txn       bool
	fate      writeFate
	// tick is the table's clock when the write was committed.
	tick int
}

// TableStats counts the lookups of a world's folds.
type TableStats struct {
	// Lookups counts the folds' lookups.
	Lookups int
	// Waits counts the partitions' starts that found the table not caught
	// up and waited for it.
	Waits int
	// Stale counts the lookups that returned a row older than the key's
	// newest committed one then.
	Stale int
	// OlderThanInput counts the lookups that returned a row older than
	// the key's newest one committed before the input record was
	// produced (which the docs do not promise).
	OlderThanInput int
}

// table is the world's model of the lookup table. Writes come from the
// driver's steps, lookups from the members' folds.
type table struct {
	mu     sync.Mutex
	writes []tableWrite
	seq    int
	// tick counts the table's commits (a plain write, a transaction's
	// commit).
	tick int
	// producer is the open transaction's producer; nil when none is open.
	producer *sim.Producer
	// produced is the table's tick when each input event was produced.
	produced map[[2]int64]int
	stats    TableStats
}

func newTable() *table { return &table{produced: map[[2]int64]int{}} }

// TableStats counts the lookups so far (zero without Tables).
func (w *World) TableStats() TableStats {
	if w.table == nil {
		return TableStats{}
	}
	w.table.mu.Lock()
	defer w.table.mu.Unlock()
	return w.table.stats
}

func (w *World) tableTP(key string) store.TopicPartition {
	return store.TopicPartition{Topic: TableTopic, Partition: PartitionOf(key, w.cfg.Partitions)}
}

// resolve marks the open transaction's writes aborted once the
// transaction ended without the world ending it (its timeout). t.mu is
// held.
func (t *table) resolve(w *World) {
	if t.producer == nil {
		return
	}
	if _, _, ongoing, _, _ := w.c.TransactionState(tableTxnID); ongoing {
		return
	}
	t.end(fateAborted)
}

// end gives the open transaction's writes their fate. t.mu is held.
func (t *table) end(fate writeFate) {
	t.tick++
	for i := range t.writes {
		if x := &t.writes[i]; x.txn && x.fate == fateOpen {
			x.fate, x.tick = fate, t.tick
		}
	}
	t.producer = nil
}

// tableWrite writes key's row, a new version or a delete; in the open
// transaction (opening one if none is) if txn.
func (w *World) tableWrite(key string, del, txn bool) {
	t := w.table
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resolve(w)
	t.seq++
	rec := wire.Record{Key: []byte(key)}
	if !del {
		rec.Value = []byte(strconv.Itoa(t.seq))
	}
	tp := w.tableTP(key)
	x := tableWrite{seq: t.seq, key: key, partition: tp.Partition, del: del, txn: txn}
	var offs []int64
	var err error
	if txn {
		if t.producer == nil {
			t.producer = w.c.InitProducerID(tableTxnID, w.cfg.TransactionTimeout)
		}
		offs, err = t.producer.Produce(tp, rec)
	} else {
		t.tick++
		x.fate, x.tick = fateCommitted, t.tick
		offs, err = w.c.Produce(tp, rec)
	}
	if err != nil {
		panic(fmt.Sprintf("world: writing %s: %v", tp, err)) // the world's own topic: a bug
	}
	x.offset = offs[0]
	t.writes = append(t.writes, x)
}

// tableEnd commits or aborts the table's open transaction, if one is.
func (w *World) tableEnd(commit bool) {
	t := w.table
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resolve(w)
	if t.producer == nil {
		return
	}
	if err := t.producer.EndTxn(commit); err != nil {
		panic(fmt.Sprintf("world: ending the table's transaction: %v", err))
	}
	fate := fateAborted
	if commit {
		fate = fateCommitted
	}
	t.end(fate)
}

// produced notes the table's clock as an input event is produced.
func (t *table) producedAt(partition int32, offset int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.produced[[2]int64{int64(partition), offset}] = t.tick
}

// openView opens m's process's view of the table and notes the high
// watermark of each of its partitions, which the view lists as its
// targets.
func (w *World) openView(m *member) {
	be, err := w.c.NewBackend(sim.BackendConfig{Mode: store.Transactional, Application: "tables"})
	if err != nil {
		panic(fmt.Sprintf("world: the table's backend: %v", err))
	}
	var follower store.Backend = be
	if w.cfg.FollowUncommitted {
		follower = uncommittedTopics{Backend: be, w: w}
	}
	targets := make([]int64, w.cfg.Partitions)
	for p := range targets {
		_, _, targets[p], _ = w.c.Offsets(store.TopicPartition{Topic: TableTopic, Partition: int32(p)})
	}
	v, err := view.New(context.Background(), view.Config[int]{Store: follower, Topic: TableTopic, Plain: true, Codec: IntCodec{},
		Partitioner: func(key []byte, n int32) int32 { return PartitionOf(string(key), int(n)) }})
	if err != nil {
		panic(fmt.Sprintf("world: the table's view: %v", err))
	}
	m.view, m.viewBackend, m.viewTargets, m.lookups = v, be, targets, map[string]int64{}
}

// closeView closes m's process's view.
func (m *member) closeView() {
	if m.view != nil {
		_ = m.view.Close()
		_ = m.viewBackend.Close()
		m.view, m.viewBackend = nil, nil
	}
}

// readTable lets m's view read once, on m's goroutine.
func (w *World) readTable(m *member) {
	v := m.view
	w.run(m, func(ctx context.Context) { _ = v.Step(ctx) })
}

// worldTable is the table m's engine waits on: m's view, read while it
// waits, as View.Run would read it (one read, then a second of virtual
// time, parked on the cluster).
type worldTable struct {
	w *World
	v *view.View[int]
}

func (t worldTable) Name() string { return t.v.Name() }

func (t worldTable) WaitCaughtUp(ctx context.Context) error {
	if t.w.cfg.TablesNotAwaited {
		return nil
	}
	caught := func() (bool, error) {
		now, cancel := context.WithCancel(ctx)
		cancel()
		err := t.v.WaitCaughtUp(now)
		if err != nil && errors.Is(err, context.Canceled) && ctx.Err() == nil {
			return false, nil
		}
		return err == nil, err
	}
	for waited := false; ; waited = true {
		if ok, err := caught(); ok || err != nil {
			if ok && waited {
				t.w.table.mu.Lock()
				t.w.table.stats.Waits++
				t.w.table.mu.Unlock()
			}
			return err
		}
		if err := t.v.Step(ctx); err != nil {
			return err
		}
		if ok, err := caught(); ok || err != nil {
			t.w.table.mu.Lock()
			t.w.table.stats.Waits++
			t.w.table.mu.Unlock()
			return err
		}
		t.w.c.Sleep(ctx, time.Second)
	}
}

// lookupFold is m's process's fold: a lookup of the key in the view, which
// is checked (12), then Fold.
func (w *World) lookupFold(m *member, proc int, v *view.View[int]) func([]byte, int, bool, engine.Record) (engine.Result[int], error) {
	return func(key []byte, state int, exists bool, rec engine.Record) (engine.Result[int], error) {
		got, ok, err := v.Get(key)
		if m.proc == proc {
			w.table.looked(w, m, string(key), got, ok, err, rec)
		}
		return Fold(key, state, exists, rec)
	}
}

// looked checks a lookup of key by m's fold of rec (12): it returned got
// (ok) or err.
func (t *table) looked(w *World, m *member, key string, got int, ok bool, err error, rec engine.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resolve(w)
	t.stats.Lookups++
	c := &w.checker
	fail := func(format string, args ...any) {
		c.report(c.violation(12, "member m%d's fold of %s/%d offset %d (key %s) looked the key up in its table: "+format,
			append([]any{m.slot, InputTopic, rec.Partition, rec.Offset, key}, args...)...))
	}
	if err != nil {
		fail("the lookup failed: %v", err)
		return
	}
	// The view caught up to its targets: no transaction open below them.
	for _, x := range t.writes {
		if x.fate == fateOpen && x.offset < m.viewTargets[x.partition] {
			fail("the table has not caught up: the transaction writing %s of %s/%d, below the high watermark %d the view had when it opened, is still open",
				x.describe(), TableTopic, x.partition, m.viewTargets[x.partition])
			return
		}
	}
	var seen *tableWrite
	if ok {
		for i := range t.writes {
			if x := &t.writes[i]; x.key == key && !x.del && x.seq == got {
				seen = x
			}
		}
		switch {
		case seen == nil:
			fail("it returned %d, which no write of the key wrote", got)
			return
		case seen.fate == fateOpen:
			fail("it returned %s, of a transaction still open", seen.describe())
			return
		case seen.fate == fateAborted:
			fail("it returned %s, of an aborted transaction", seen.describe())
			return
		}
	}
	shown := "no row"
	if seen != nil {
		shown = seen.describe()
	}
	// No older than the key's newest committed write below the target.
	tp := w.tableTP(key)
	var floor *tableWrite
	for i := range t.writes {
		if x := &t.writes[i]; x.key == key && x.fate == fateCommitted && x.offset < m.viewTargets[tp.Partition] {
			floor = x
		}
	}
	base, known := int64(-1), false
	if floor != nil {
		if _, fresh := t.applied(key, seen, floor.offset); !fresh {
			fail("it returned %s, older than %s, committed below the high watermark %d the view had when it opened", shown, floor.describe(), m.viewTargets[tp.Partition])
			return
		}
		base, known = floor.offset, true
	}
	// No older than an earlier lookup's.
	if lb, had := m.lookups[key]; had {
		if _, fresh := t.applied(key, seen, lb); !fresh {
			fail("it returned %s, older than the row at offset %d an earlier lookup in this process returned or must have applied", shown, lb)
			return
		}
		base, known = max(base, lb), true
	}
	// The least offset of the key's log the view has applied.
	switch next, _ := t.applied(key, seen, base); {
	case seen != nil:
		m.lookups[key] = seen.offset
	case known:
		m.lookups[key] = next
	}
	t.count(key, seen, rec)
}

// applied says whether a lookup that returned seen (nil: no row) can
// come from a view that has applied the key's log up to an offset at or
// past lb, and the least such offset it must have applied.
func (t *table) applied(key string, seen *tableWrite, lb int64) (int64, bool) {
	if seen != nil {
		return seen.offset, seen.offset >= lb
	}
	for _, x := range t.writes { // in offset order per partition
		if x.key == key && x.del && x.fate == fateCommitted && x.offset >= lb {
			return x.offset, true
		}
	}
	return lb, false
}

// count counts a lookup that passed the checks in the stats.
func (t *table) count(key string, seen *tableWrite, rec engine.Record) {
	var newest, before *tableWrite
	producedAt, known := t.produced[[2]int64{int64(rec.Partition), rec.Offset}]
	for i := range t.writes {
		x := &t.writes[i]
		if x.key != key || x.fate != fateCommitted {
			continue
		}
		if newest == nil || x.offset > newest.offset {
			newest = x
		}
		if known && x.tick <= producedAt && (before == nil || x.offset > before.offset) {
			before = x
		}
	}
	if newest != nil {
		if _, fresh := t.applied(key, seen, newest.offset); !fresh {
			t.stats.Stale++
		}
	}
	if before != nil {
		if _, fresh := t.applied(key, seen, before.offset); !fresh {
			t.stats.OlderThanInput++
		}
	}
}

func (x tableWrite) describe() string {
	if x.del {
		return fmt.Sprintf("the delete of %s at offset %d", x.key, x.offset)
	}
	return fmt.Sprintf("%s=%d at offset %d", x.key, x.seq, x.offset)
}

// uncommittedTopics is the FollowUncommitted variant's table store: its
// followers read read_uncommitted.
type uncommittedTopics struct {
	store.Backend
	w *World
}

func (u uncommittedTopics) FollowTopic(_ context.Context, tp store.TopicPartition, from *store.Checkpoint) (store.Follow, error) {
	return u.w.followUncommitted(tp, true, from), nil
}
