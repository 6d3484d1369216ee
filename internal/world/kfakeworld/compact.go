package kfakeworld

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// compact runs kfake's log cleaner over the snapshot topic, in place,
// when no transaction has records open on any snapshot partition and the
// cleaner would not leave a trap for read_committed readers (see
// cleanerWouldDropAnAbort), and does nothing otherwise. It reports whether
// the cleaner ran.
//
// kfake has a log cleaner (Cluster.Compact; data.go, (*Cluster).compact),
// run in the cluster's own goroutine, with no restart. For every
// partition of a topic whose cleanup.policy is compact it cleans every
// batch but the last (the active segment, never cleaned): the records
// superseded by a later record of the same key are removed from their
// batches, and the records of aborted transactions with them; offsets are
// kept (the log has gaps), headers survive (a batch that lost records is
// rewritten uncompressed), a batch left empty is removed, a tombstone
// stays until delete.retention.ms (a day by default, longer than any
// scenario) has passed since it was written. Where it departs from Kafka,
// and what the world does about it:
//
//   - it cleans past the last stable offset: a record of an open
//     transaction counts as its key's latest and removes the committed
//     record it would supersede if it committed. Kafka never cleans at or
//     past the first unstable offset. Hence the first precondition: no
//     transaction open, the last stable offset (where read_committed
//     ends) equal to the high watermark (where read_uncommitted ends);
//   - it has no trigger for one partition: Cluster.Compact cleans every
//     partition of every compacted topic, so the preconditions are checked
//     on every snapshot partition, and a compact step (which names a
//     partition, as the simulated world's does) cleans them all. Kafka's
//     cleaner may clean any partition at any time: this is one of its
//     schedules;
//   - it removes a producer's transaction markers as soon as none of its
//     data survives in the cleaned range, while it keeps listing the
//     producer's aborted transactions in fetch responses. Kafka keeps a
//     marker until delete.retention.ms after its own transaction's data is
//     gone. Hence the second precondition (cleanerWouldDropAnAbort);
//   - it moves the log start offset up to the first batch that survives
//     (Kafka's stays): a reader starting at the log start reads the same;
//   - it also runs on its own, without the preconditions, every
//     log.cleaner.backoff.ms (an hour of virtual time by default, counted
//     from the cluster's start or restart): a scenario that runs that
//     long gets a cleaning unguarded.
func (w *World) compact() bool {
	lsos, hws := w.snapshotEnds()
	for p := range lsos {
		if lsos[p] != hws[p] {
			return false
		}
	}
	foreign := w.foreignProducer()
	for p := range int32(Partitions) {
		if hws[p] > 0 && cleanerWouldDropAnAbort(logRecords(w.uncommittedLog(p, 0, hws[p])), foreign) {
			return false
		}
	}
	w.c.Compact()
	return true
}

// cleanerWouldDropAnAbort reports whether kfake's cleaner, run over a
// partition whose records (read_uncommitted, control records included,
// no transaction open) are log, would remove an abort marker that a
// read_committed reader needs.
//
// kfake removes every control batch of a producer none of whose data
// survives the cleaning (pass 3 of (*Cluster).compact), abort markers
// included, but keeps the producer's aborted transactions in its index
// until the log start offset passes them, and lists them in the fetch
// responses of a read_committed reader that starts at or before their
// end. franz-go's reader then drops every batch of that producer from
// the aborted transaction's first offset on, until it meets an abort
// marker of the producer: with the marker gone, whatever the producer
// commits later in the partition is taken for aborted. The data of a
// snapfence producer can be all aborted or all superseded (a fenced
// owner's writes, offset markers a later one superseded) and be followed
// by more of its writes (the partition's next owner writes on the same
// transactional ID): the precondition refuses such a cleaning. The
// foreign producer (foreign, -1 if unknown) is exempt: it writes only
// offset markers, which no reader returns, so nothing a reader returns
// changes when one of them is taken for aborted.
//
// The cleaner cleans the log but its last batch. A control batch holds
// one record, so if the last record is a marker, the last batch is that
// marker; otherwise the last batch is within the trailing run of data
// records of the last record's producer, none of which is counted as
// surviving here (a safe overestimate of what the cleaner removes).
//
// A transaction aborted without a marker (kfake's restart, in truncate,
// aborts the transactions a log shows open and writes no marker) is not
// seen: its data counts as committed here.
func cleanerWouldDropAnAbort(log []logRecord, foreign int64) bool {
	if len(log) == 0 {
		return false
	}
	cleanable := len(log) - 1
	if last := log[cleanable]; !last.Control {
		for cleanable > 0 && !log[cleanable-1].Control && log[cleanable-1].ProducerID == last.ProducerID {
			cleanable--
		}
	}
	// Which data records are aborted: a producer's transactional data up
	// to its next marker, if that is an abort.
	aborted := map[int64]bool{} // by offset
	pending := map[int64][]int64{}
	aborts := map[int64]bool{} // producers with an abort marker in the cleaned range
	for i, r := range log {
		switch {
		case r.Control:
			if r.isAbortMarker() {
				for _, o := range pending[r.ProducerID] {
					aborted[o] = true
				}
				if i < cleanable {
					aborts[r.ProducerID] = true
				}
			}
			delete(pending, r.ProducerID)
		case r.Transactional:
			pending[r.ProducerID] = append(pending[r.ProducerID], r.Offset)
		}
	}
	// What survives the cleaning: each key's latest live record (kfake's
	// passes 1 and 2; keyless records are removed).
	live := func(r logRecord) bool { return !r.Control && !aborted[r.Offset] && r.Key != nil }
	latest := map[string]int64{}
	for _, r := range log[:cleanable] {
		if live(r) {
			latest[string(r.Key)] = r.Offset
		}
	}
	surviving := map[int64]bool{}
	for _, r := range log[:cleanable] {
		if live(r) && latest[string(r.Key)] == r.Offset {
			surviving[r.ProducerID] = true
		}
	}
	for pid := range aborts {
		if !surviving[pid] && pid != foreign {
			return true
		}
	}
	return false
}

// logRecord is what cleanerWouldDropAnAbort needs of a record.
type logRecord struct {
	Offset, ProducerID     int64
	Control, Transactional bool
	Key                    []byte
}

func logRecords(rs []*kgo.Record) []logRecord {
	out := make([]logRecord, len(rs))
	for i, r := range rs {
		out[i] = logRecord{Offset: r.Offset, ProducerID: r.ProducerID, Control: r.Attrs.IsControl(), Transactional: r.Attrs.IsTransactional(), Key: r.Key}
	}
	return out
}

// isAbortMarker reports whether control record r is an abort marker: its
// key is a version (int16) and a type (int16), 0 for an abort, 1 for a
// commit.
func (r logRecord) isAbortMarker() bool {
	return len(r.Key) >= 4 && binary.BigEndian.Uint16(r.Key[2:4]) == 0
}

// foreignProducer is the producer ID of the foreign transactional ID, -1
// if it has none (no foreign transaction was ever opened).
func (w *World) foreignProducer() int64 {
	described, err := w.adm.DescribeTransactions(context.Background(), foreignID)
	if err != nil {
		return -1
	}
	d, ok := described[foreignID]
	if !ok || d.Err != nil {
		return -1
	}
	return d.ProducerID
}

// uncommittedLog reads snapshot partition p in [from, to), read_uncommitted,
// control records included, from a fresh client outside any group. What
// it reads is below the high watermark, which a fetch returns at once: no
// virtual time passes. A compacted log has gaps: the records are those
// the log holds, in offset order.
func (w *World) uncommittedLog(p int32, from, to int64) []*kgo.Record {
	start := kgo.NewOffset().At(from)
	if from == 0 {
		start = kgo.NewOffset().AtStart() // the cleaner may have moved the log start
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.seeds...), kgo.Dialer(w.net.DialContext),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{w.snapshotTopic: {p: start}}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())
	if err != nil {
		panic(fmt.Sprintf("kfakeworld: reader: %v", err))
	}
	defer cl.Close()
	var out []*kgo.Record
	for pos := from; pos < to; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		fs := cl.PollFetches(ctx)
		cancel()
		if err := fs.Err0(); err != nil {
			panic(fmt.Sprintf("kfakeworld: reading %s/%d: %v", w.snapshotTopic, p, err))
		}
		fs.EachRecord(func(r *kgo.Record) {
			pos = max(pos, r.Offset+1)
			if r.Offset < to {
				out = append(out, r)
			}
		})
	}
	return out
}
