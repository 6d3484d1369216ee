package kfakeworld

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/snapfence/snapfence/internal/kafkatest"
)

// truncate cuts snapshot partition p back to its last stable offset, as
// the simulated world does, when everything above that offset belongs to
// open transactions (no marker, no record outside a transaction: a
// finished transaction's records above the last stable offset have their
// marker above it too), so that nothing committed or aborted is lost. The
// cluster is closed, the partition's segment files are cut at the first
// batch at or past the last stable offset, and the cluster is restarted
// from its data directory on the same address; the clients reconnect.
//
// kfake keeps no transaction state across a restart: it replays every
// partition's log (the world removes each partition's snapshot.json so
// that none is loaded from a snapshot whose last stable offset an open
// transaction pins), aborts every transaction left open in a log, and
// bumps its producer's epoch (kfake persist.go, loadPartitionFullReplay
// and loadFromDisk). So unlike the simulated world's (and Kafka's, whose
// transaction coordinator keeps its state), this truncation also aborts
// every open transaction, as if each had timed out: a crashed member's,
// the foreign one (even a hanging one), a paused member's.
func (w *World) truncate(p int32) {
	lsos, hws := w.snapshotEnds()
	lso, hw := lsos[p], hws[p]
	if lso >= hw || !w.onlyOpenTransactions(p, lso, hw) {
		return
	}
	w.c.Close()
	cutSegments(filepath.Join(w.partitionDir(w.snapshotTopic, p), "*.dat"), lso)
	snaps, err := filepath.Glob(filepath.Join(w.dir, "partitions", "*", "snapshot.json"))
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: %v", err))
	}
	for _, f := range snaps {
		if err := os.Remove(f); err != nil {
			panic(fmt.Sprintf("kfakeworld: %v", err))
		}
	}
	if err := w.startCluster(); err != nil {
		panic(fmt.Sprintf("kfakeworld: restarting: %v", err))
	}
	ends, err := w.adm.ListEndOffsets(context.Background(), w.snapshotTopic)
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: listing the ends of %s after the restart: %v", w.snapshotTopic, err))
	}
	if o, _ := ends.Lookup(w.snapshotTopic, p); o.Err != nil || o.Offset != lso {
		panic(fmt.Sprintf("kfakeworld: %s/%d cut at %d ends at %d after the restart (%v)", w.snapshotTopic, p, lso, o.Offset, o.Err))
	}
}

// snapshotEnds lists every snapshot partition's last stable offset (the
// end a read_committed reader sees) and high watermark (a
// read_uncommitted reader's): the two differ exactly while a transaction
// has records open on the partition.
func (w *World) snapshotEnds() (lsos, hws []int64) {
	listedLSOs, err := w.adm.ListCommittedOffsets(context.Background(), w.snapshotTopic)
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: listing the last stable offsets of %s: %v", w.snapshotTopic, err))
	}
	listedHWs, err := w.adm.ListEndOffsets(context.Background(), w.snapshotTopic)
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: listing the ends of %s: %v", w.snapshotTopic, err))
	}
	lsos, hws = make([]int64, Partitions), make([]int64, Partitions)
	for p := range int32(Partitions) {
		lso, ok1 := listedLSOs.Lookup(w.snapshotTopic, p)
		hw, ok2 := listedHWs.Lookup(w.snapshotTopic, p)
		if !ok1 || !ok2 || lso.Err != nil || hw.Err != nil {
			panic(fmt.Sprintf("kfakeworld: the offsets of %s/%d: %v, %v", w.snapshotTopic, p, lso.Err, hw.Err))
		}
		lsos[p], hws[p] = lso.Offset, hw.Offset
	}
	return lsos, hws
}

// onlyOpenTransactions reports whether every record of snapshot partition
// p in [from, to) is a transactional data record: no control record (a
// marker: some transaction there ended) and no record outside a
// transaction. It reads read_uncommitted (uncommittedLog).
func (w *World) onlyOpenTransactions(p int32, from, to int64) bool {
	for _, r := range w.uncommittedLog(p, from, to) {
		if r.Attrs.IsControl() || !r.Attrs.IsTransactional() {
			return false
		}
	}
	return true
}

// partitionDir is a partition's directory in the cluster's data directory
// (kfake persist.go, partDir).
func (w *World) partitionDir(topic string, p int32) string {
	return filepath.Join(w.dir, "partitions", fmt.Sprintf("%s-%d", url.PathEscape(topic), p))
}

// cutSegments cuts the segment files of pattern at end
// (kafkatest.CutSegments).
func cutSegments(pattern string, end int64) {
	if err := kafkatest.CutSegments(pattern, end); err != nil {
		panic(fmt.Sprintf("kfakeworld: %v", err))
	}
}
