package sim

import (
	"github.com/snapfence/snapfence/store/wire"
	"time"
)

// Control is the type of a control marker.
type Control int8

const (
	NoControl Control = iota
	CommitMarker
	AbortMarker
)

func (c Control) String() string {
	switch c {
	case CommitMarker:
		return "COMMIT"
	case AbortMarker:
		return "ABORT"
	}
	return "data"
}

// Entry is one record of a partition log, as a read_uncommitted reader sees
// it plus what the broker knows about it.
type Entry struct {
	Offset        int64
	Record        wire.Record
	ProducerID    int64
	Epoch         int16
	Transactional bool
	Control       Control
	// Aborted is set once the entry's transaction is aborted: a
	// read_committed reader never sees it.
	Aborted bool
	// Appended is when the entry was appended (virtual time).
	Appended time.Time
	// DeleteHorizon is, for a tombstone a compaction has kept as its
	// key's latest record, when a later compaction may remove it: the
	// first such compaction's time plus delete.retention.ms, as Kafka's
	// cleaner sets it (KIP-534). Zero until then.
	DeleteHorizon time.Time
}

// partitionLog is one partition of a topic. Entries are in offset order;
// compaction leaves gaps.
type partitionLog struct {
	entries []Entry
	start   int64           // log start offset
	end     int64           // log end offset = high watermark (one replica)
	open    map[int64]int64 // producer id -> first offset of its open transaction
	clk     *clock          // the cluster's, read under its lock
}

func newPartitionLog(clk *clock) *partitionLog {
	return &partitionLog{open: map[int64]int64{}, clk: clk}
}

// lastStable is the LSO: the first offset of the earliest open transaction,
// or the high watermark.
func (l *partitionLog) lastStable() int64 {
	lso := l.end
	for _, first := range l.open {
		lso = min(lso, first)
	}
	return lso
}

func (l *partitionLog) append(e Entry) int64 {
	e.Offset = l.end
	e.Appended = l.clk.now
	l.entries = append(l.entries, e)
	l.end++
	if e.Transactional && e.Control == NoControl {
		if _, ok := l.open[e.ProducerID]; !ok {
			l.open[e.ProducerID] = e.Offset
		}
	}
	return e.Offset
}

// endTxn writes a control marker for pid's open transaction; an abort
// hides the transaction's records from read_committed readers.
func (l *partitionLog) endTxn(pid int64, epoch int16, c Control) int64 {
	first, ok := l.open[pid]
	if ok && c == AbortMarker {
		for i := l.index(first); i < len(l.entries); i++ {
			e := &l.entries[i]
			if e.ProducerID == pid && e.Transactional && e.Control == NoControl {
				e.Aborted = true
			}
		}
	}
	delete(l.open, pid)
	return l.append(Entry{ProducerID: pid, Epoch: epoch, Transactional: true, Control: c})
}

// index is the position of the first entry at or above offset.
func (l *partitionLog) index(offset int64) int {
	lo, hi := 0, len(l.entries)
	for lo < hi {
		m := (lo + hi) / 2
		if l.entries[m].Offset < offset {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// read returns up to max records visible from pos and the position after
// them. readCommitted stops at the LSO and skips aborted data; both skip
// control markers, which still move the position.
func (l *partitionLog) read(pos int64, max int, readCommitted bool) ([]Entry, int64) {
	bound := l.end
	if readCommitted {
		bound = l.lastStable()
	}
	if pos < l.start {
		pos = l.start
	}
	var out []Entry
	next := pos
	for i := l.index(pos); i < len(l.entries); i++ {
		e := l.entries[i]
		if e.Offset >= bound || len(out) == max {
			break
		}
		next = e.Offset + 1
		if e.Control != NoControl || (readCommitted && e.Aborted) {
			continue
		}
		out = append(out, e)
	}
	if len(out) < max && bound > next {
		next = bound // a gap left by compaction up to the bound
	}
	return out, next
}

// truncate drops every entry at or above end, as an unclean leader election
// would.
func (l *partitionLog) truncate(end int64) {
	if end >= l.end {
		return
	}
	l.entries = l.entries[:l.index(end)]
	l.end = max(end, l.start)
	for pid, first := range l.open {
		if first >= l.end {
			delete(l.open, pid)
		}
	}
}

// compact keeps the latest committed record of each key below the first
// unstable offset and drops aborted data there. Like Kafka's cleaner it
// never cleans at or past the LSO; tombstones and markers are kept.
func (l *partitionLog) compact(deleteRetention time.Duration) int {
	bound := l.lastStable()
	latest := map[string]int64{}
	for _, e := range l.entries {
		if e.Offset >= bound {
			break
		}
		if e.Control == NoControl && !e.Aborted {
			latest[string(e.Record.Key)] = e.Offset
		}
	}
	kept := l.entries[:0]
	removed := 0
	for _, e := range l.entries {
		eligible := e.Offset < bound && e.Control == NoControl
		// A tombstone that is the key's latest record goes too, in a
		// compaction at or after its delete horizon, which the first
		// compaction to keep it sets delete.retention.ms ahead, as
		// Kafka's cleaner does (KIP-534): the records it superseded
		// went in that first compaction, so a reader that completes
		// within delete.retention.ms never sees a key's earlier state
		// without its tombstone. One that takes longer can: it keeps a
		// deleted key.
		tombstone := eligible && !e.Aborted && e.Record.Value == nil && latest[string(e.Record.Key)] == e.Offset
		if tombstone && e.DeleteHorizon.IsZero() {
			e.DeleteHorizon = l.clk.now.Add(deleteRetention)
		}
		expired := tombstone && !l.clk.now.Before(e.DeleteHorizon)
		if eligible && (e.Aborted || latest[string(e.Record.Key)] != e.Offset || expired) {
			removed++
			continue
		}
		kept = append(kept, e)
	}
	l.entries = kept
	return removed
}
