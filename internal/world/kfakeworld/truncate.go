package kfakeworld

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
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
	lsos, err := w.adm.ListCommittedOffsets(context.Background(), snapshotTopic)
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: listing the last stable offsets of %s: %v", snapshotTopic, err))
	}
	ends, err := w.adm.ListEndOffsets(context.Background(), snapshotTopic)
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: listing the ends of %s: %v", snapshotTopic, err))
	}
	lso, ok1 := lsos.Lookup(snapshotTopic, p)
	hw, ok2 := ends.Lookup(snapshotTopic, p)
	if !ok1 || !ok2 || lso.Err != nil || hw.Err != nil {
		panic(fmt.Sprintf("kfakeworld: the offsets of %s/%d: %v, %v", snapshotTopic, p, lso.Err, hw.Err))
	}
	if lso.Offset >= hw.Offset || !w.onlyOpenTransactions(p, lso.Offset, hw.Offset) {
		return
	}
	w.c.Close()
	cutSegments(filepath.Join(w.partitionDir(snapshotTopic, p), "*.dat"), lso.Offset)
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
	ends, err = w.adm.ListEndOffsets(context.Background(), snapshotTopic)
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: listing the ends of %s after the restart: %v", snapshotTopic, err))
	}
	if o, _ := ends.Lookup(snapshotTopic, p); o.Err != nil || o.Offset != lso.Offset {
		panic(fmt.Sprintf("kfakeworld: %s/%d cut at %d ends at %d after the restart (%v)", snapshotTopic, p, lso.Offset, o.Offset, o.Err))
	}
}

// onlyOpenTransactions reports whether every record of snapshot partition
// p in [from, to) is a transactional data record: no control record (a
// marker: some transaction there ended) and no record outside a
// transaction. It reads read_uncommitted, from a fresh client; what it
// reads is below the high watermark, which a fetch returns at once.
func (w *World) onlyOpenTransactions(p int32, from, to int64) bool {
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.seeds...), kgo.Dialer(w.net.DialContext),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{snapshotTopic: {p: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: reader: %v", err))
	}
	defer cl.Close()
	only := true
	for pos := from; pos < to && only; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		fs := cl.PollFetches(ctx)
		cancel()
		if err := fs.Err0(); err != nil {
			panic(fmt.Sprintf("kfakeworld: reading %s/%d: %v", snapshotTopic, p, err))
		}
		fs.EachRecord(func(r *kgo.Record) {
			pos = max(pos, r.Offset+1)
			if r.Offset < to && (r.Attrs.IsControl() || !r.Attrs.IsTransactional()) {
				only = false
			}
		})
	}
	return only
}

// partitionDir is a partition's directory in the cluster's data directory
// (kfake persist.go, partDir).
func (w *World) partitionDir(topic string, p int32) string {
	return filepath.Join(w.dir, "partitions", fmt.Sprintf("%s-%d", url.PathEscape(topic), p))
}

// cutSegments truncates every segment file of pattern at the first record
// batch whose base offset is at or past end: kfake's .dat files are record
// batches in the wire format, each starting with its base offset (int64)
// and the length of the rest (int32). (store/kafka's tests have the same
// helper.)
func cutSegments(pattern string, end int64) {
	segs, err := filepath.Glob(pattern)
	if err != nil || len(segs) == 0 {
		panic(fmt.Sprintf("kfakeworld: no segments at %s: %v", pattern, err))
	}
	for _, seg := range segs {
		raw, err := os.ReadFile(seg)
		if err != nil {
			panic(fmt.Sprintf("kfakeworld: %v", err))
		}
		pos := 0
		for pos+12 <= len(raw) {
			if int64(binary.BigEndian.Uint64(raw[pos:pos+8])) >= end {
				break
			}
			pos += 12 + int(binary.BigEndian.Uint32(raw[pos+8:pos+12]))
		}
		if err := os.Truncate(seg, int64(pos)); err != nil {
			panic(fmt.Sprintf("kfakeworld: %v", err))
		}
	}
}
