package kfakeworld

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// snapshots reads every snapshot partition read_committed up to its last
// stable offset, with a fresh client outside any group, and returns each
// key's latest snapshot. It reads only what is below the last stable
// offset, which a fetch returns at once: no virtual time passes.
func (w *World) snapshots() map[string]world.Visible {
	return latest(w.snapshotLogs())
}

// latest is each key's last snapshot in logs.
func latest(logs [][]store.Snapshot) map[string]world.Visible {
	out := map[string]world.Visible{}
	for _, snaps := range logs {
		for _, s := range snaps {
			out[string(s.Key)] = world.Visible{Offset: s.Offset, Value: string(s.Value), Tombstone: s.Tombstone}
		}
	}
	return out
}

// snapshotLogs reads every snapshot partition read_committed up to its
// last stable offset, as snapshots does, and returns each partition's
// snapshots in log order (offset markers left out).
func (w *World) snapshotLogs() [][]store.Snapshot {
	lsos, err := w.adm.ListCommittedOffsets(context.Background(), w.snapshotTopic)
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: listing the last stable offsets of %s: %v", w.snapshotTopic, err))
	}
	out := make([][]store.Snapshot, Partitions)
	for p := range int32(Partitions) {
		o, ok := lsos.Lookup(w.snapshotTopic, p)
		if !ok || o.Err != nil {
			panic(fmt.Sprintf("kfakeworld: the last stable offset of %s/%d: %v", w.snapshotTopic, p, o.Err))
		}
		if o.Offset > 0 {
			out[p] = w.readSnapshots(p, o.Offset)
		}
	}
	return out
}

func (w *World) readSnapshots(p int32, lso int64) []store.Snapshot {
	tp := store.TopicPartition{Topic: w.snapshotTopic, Partition: p}
	var out []store.Snapshot
	w.scanLog(p, lso, kgo.ReadCommitted(), func(r *kgo.Record) {
		if r.Attrs.IsControl() {
			return
		}
		if s, ok := decode(tp, r); ok {
			out = append(out, s)
		}
	})
	return out
}

// scanLog reads snapshot partition p from its start to end (exclusive)
// at isolation level, control records kept, with a fresh client outside
// any group, and hands each record below end to fn.
func (w *World) scanLog(p int32, end int64, level kgo.IsolationLevel, fn func(*kgo.Record)) {
	w.scanTopic(w.snapshotTopic, p, end, level, fn)
}

// scanTopic reads partition p of topic as scanLog does.
func (w *World) scanTopic(topic string, p int32, end int64, level kgo.IsolationLevel, fn func(*kgo.Record)) {
	tp := store.TopicPartition{Topic: topic, Partition: p}
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.seeds...), kgo.Dialer(w.net.DialContext),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(level), kgo.KeepControlRecords())
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: reader: %v", err))
	}
	defer cl.Close()
	if err := kafkatest.ReadTo(cl, end, fn); err != nil {
		panic(fmt.Sprintf("kfakeworld: reading %s: %v", tp, err))
	}
}

// decode decodes a snapshot record; offset markers and corrupt records
// (which fail recoveries) carry no state.
func decode(tp store.TopicPartition, r *kgo.Record) (store.Snapshot, bool) {
	s, kind, err := kafkatest.DecodeRecord(tp.Topic, r)
	if err != nil || kind == wire.KindOffsetMarker {
		return store.Snapshot{}, false
	}
	return s, true
}

// afterStep checks the invariants that hold after every step: 1 and 2.
//
// The world does not stand still while it is read: a member's step can
// still be in flight (a poll that did not return in its slices, a flush),
// and the readers' own waits let the bubble's clock run. So the committed
// offsets are read before the snapshots: a transaction that commits
// between the two reads then adds to the snapshots read, never only to
// the offsets (read the other way round, a snapshot and the offset commit
// that follows it, both acknowledged in order, could be seen as an offset
// ahead of its snapshot). A commit that really ran ahead of its snapshot
// and was caught up before the snapshots were read is still found by the
// history's check (commit-ahead) at quiescence.
func (w *World) afterStep() []world.Violation {
	committed, stable := w.committedOffsets()
	var vs []world.Violation
	snaps := w.snapshots()
	// 1. A key's visible snapshot never goes back to an older fold.
	vs = append(vs, world.CheckNoStaleOverwrite(w.steps, w.seen, snaps)...)
	// 2. Every input event below a partition's committed offset is
	// covered by its key's committed snapshot (or the key is deleted):
	// committed, not only readable, so the snapshots committed behind an
	// open foreign transaction's last stable offset count (a recovery
	// waits for them). A partition whose committed offset is unstable (a
	// commit pending in an open transaction) is skipped.
	isStable := func(p int32) bool { return stable[p] }
	logs, open := w.committedSnapshotLogs()
	covered := w.ledger.CheckCommittedCovered(w.steps, committed, isStable, latest(logs))
	if w.real != nil {
		covered = w.awaitMarkers(committed, isStable, covered, open)
	}
	return append(vs, covered...)
}

// markerWait bounds awaitMarkers: a coordinator that decided a
// transaction writes its markers within milliseconds on this broker.
const markerWait = 10 * time.Second

// awaitMarkers reads the snapshot logs again, on a real broker, while
// invariant 2 looks broken and a transaction that was open at the first
// read is still open, at most markerWait. A transaction's markers land
// on its partitions one by one after EndTxn: the offset commit on
// __consumer_offsets can be stable while the snapshots of the same
// transaction still wait for their marker (on kfake the markers are
// written with EndTxn). The committed offsets are not read again: they
// stay those of the first read, so a commit that is ahead of every
// snapshot ever committed is still reported.
func (w *World) awaitMarkers(committed []int64, isStable func(int32) bool, vs []world.Violation, open map[openTxn]bool) []world.Violation {
	if len(vs) == 0 {
		return nil
	}
	start := time.Now()
	deadline := start.Add(markerWait)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	defer func() {
		if len(vs) == 0 {
			w.logf("after step %d invariant 2 held once the markers of the open transactions landed (%v later)", w.steps, time.Since(start).Round(time.Millisecond))
		}
	}()
	for len(vs) > 0 && len(open) > 0 && time.Now().Before(deadline) {
		<-poll.C
		logs, still := w.committedSnapshotLogs()
		for t := range open {
			if !still[t] {
				delete(open, t)
			}
		}
		vs = w.ledger.CheckCommittedCovered(w.steps, committed, isStable, latest(logs))
	}
	return vs
}

// openTxn is a transaction open on a snapshot partition: its partition,
// producer and first offset there.
type openTxn struct {
	partition int32
	producer  int64
	first     int64
}

// committedSnapshotLogs reads every snapshot partition read_uncommitted,
// control records kept, up to its high watermark, and returns each
// partition's committed snapshots in log order: the non-transactional
// records, and the records of transactions whose commit marker follows
// them (those of aborted and still open transactions left out), and the
// transactions still open.
func (w *World) committedSnapshotLogs() ([][]store.Snapshot, map[openTxn]bool) {
	ends, err := w.adm.ListEndOffsets(context.Background(), w.snapshotTopic)
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: listing the high watermarks of %s: %v", w.snapshotTopic, err))
	}
	out := make([][]store.Snapshot, Partitions)
	stillOpen := map[openTxn]bool{}
	for p := range int32(Partitions) {
		o, ok := ends.Lookup(w.snapshotTopic, p)
		if !ok || o.Err != nil {
			panic(fmt.Sprintf("kfakeworld: the high watermark of %s/%d: %v", w.snapshotTopic, p, o.Err))
		}
		if o.Offset == 0 {
			continue
		}
		tp := store.TopicPartition{Topic: w.snapshotTopic, Partition: p}
		type pending struct {
			offset int64
			epoch  int16
			s      store.Snapshot
		}
		open := map[int64][]pending{} // by producer id
		var committed []pending
		w.scanLog(p, o.Offset, kgo.ReadUncommitted(), func(r *kgo.Record) {
			if r.Attrs.IsControl() {
				// The key of a transaction marker: version (int16), type
				// (int16: 0 abort, 1 commit).
				if len(r.Key) >= 4 && binary.BigEndian.Uint16(r.Key[2:4]) == 1 {
					committed = append(committed, open[r.ProducerID]...)
				}
				delete(open, r.ProducerID)
				return
			}
			s, ok := decode(tp, r)
			if !ok {
				return
			}
			if r.Attrs.IsTransactional() {
				// A newer epoch of the producer: its transaction still
				// open under an older one ended without a marker (a
				// kfake restart aborts it so), so it was aborted.
				if prev := open[r.ProducerID]; len(prev) > 0 && prev[0].epoch < r.ProducerEpoch {
					delete(open, r.ProducerID)
				}
				open[r.ProducerID] = append(open[r.ProducerID], pending{r.Offset, r.ProducerEpoch, s})
				return
			}
			committed = append(committed, pending{r.Offset, r.ProducerEpoch, s})
		})
		slices.SortFunc(committed, func(a, b pending) int { return cmp.Compare(a.offset, b.offset) })
		for _, c := range committed {
			out[p] = append(out[p], c.s)
		}
		for pid, recs := range open {
			stillOpen[openTxn{partition: p, producer: pid, first: recs[0].offset}] = true
		}
	}
	return out, stillOpen
}

// atQuiescence checks what must hold once every fault is lifted and every
// event processed: the exact fold (3) and the outputs (7); and the
// history (internal/history), with the read_committed read of every
// snapshot partition recorded as its final read.
func (w *World) atQuiescence() []world.Violation {
	committed, _ := w.committedOffsets()
	for p, end := range w.endOffsets() {
		w.rec.Add(history.Op{Kind: history.Offsets, Member: -1, Partition: int32(p), Offset: committed[p], HW: end})
	}
	logs := w.snapshotLogs()
	for p, snaps := range logs {
		// Read numbers the recorder's own (1 upward) never reach.
		n := finalReads + p
		w.rec.Add(history.Op{Kind: history.ReadStart, Member: -1, Partition: int32(p), Read: n, Detail: history.FinalRead})
		for _, s := range snaps {
			w.rec.Add(history.Op{Kind: history.Read, Member: -1, Partition: int32(p), Read: n,
				Key: string(s.Key), Offset: s.Offset, Value: string(s.Value), Tombstone: s.Tombstone})
		}
		w.rec.Add(history.Op{Kind: history.ReadEnd, Member: -1, Partition: int32(p), Read: n, Outcome: history.OK})
	}
	outputs := w.outputs
	if w.output != "" {
		w.readOutputs(kgo.ReadUncommitted())
		counts := w.readOutputs(kgo.ReadCommitted())
		if w.cfg.ExactlyOnce {
			// Emit is not called: the outputs are what a read_committed
			// consumer sees.
			outputs = counts
		}
	}
	w.mu.Lock()
	vs := w.ledger.CheckAtQuiescence(latest(logs), outputs)
	if w.cfg.Timers {
		vs = append(vs, w.ledger.CheckTimers(latest(logs))...)
	}
	w.mu.Unlock()
	return append(vs, world.CheckHistory(w.rec.Ops())...)
}

// readOutputs records in the history a read of the whole output topic at
// isolation level (to its last stable offset read_committed, to its high
// watermark read_uncommitted), by a kgo consumer outside any group, and
// returns the outputs it saw counted by the event they name
// ("partition:offset").
func (w *World) readOutputs(level kgo.IsolationLevel) map[string]int {
	iso, list := history.ReadUncommitted, w.adm.ListEndOffsets
	if level == kgo.ReadCommitted() {
		iso, list = history.ReadCommitted, w.adm.ListCommittedOffsets
	}
	ends, err := list(context.Background(), w.output)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: listing the ends of %s: %v", w.output, err))
	}
	w.rec.Add(history.Op{Kind: history.OutputRead, Member: -1, Detail: iso})
	counts := map[string]int{}
	for p := range int32(Partitions) {
		end, _ := ends.Lookup(w.output, p)
		w.scanTopic(w.output, p, end.Offset, level, func(r *kgo.Record) {
			if r.Attrs.IsControl() {
				return
			}
			w.rec.Add(history.OutputOp(iso, r.Key, r.Value))
			counts[string(r.Value)]++
		})
	}
	return counts
}

// finalReads numbers the final reads: finalReads+p for partition p.
const finalReads = 1_000_000
