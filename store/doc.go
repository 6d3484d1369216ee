// Package store is the contract between the snapfence engine and a snapshot
// backend.
//
// A backend keeps, for each input topic-partition, the latest snapshot of each
// key, and binds every snapshot write to the input partition's committed
// offset. The engine acquires a [Partition] when the consumer group assigns it
// an input partition, recovers every snapshot from it, writes snapshots as
// keys change, stages the committable offset, and commits it periodically and
// on revoke. The engine never knows which backend it has: store/kafka is the
// production backend, store/sim a deterministic model of Kafka, and
// store/storetest the suite every backend must pass.
//
// # Invariants
//
// The names below are used across code, tests and docs/design.md.
//
//   - I1 GatedWrite: in [Transactional] mode every snapshot write is in a
//     transaction that also commits the input partition's offset with the
//     driving consumer's group identity, read live for that transaction. A
//     coordinator rejection aborts the writes.
//   - I2 OffsetNeverLeads: a transaction that advances the committed offset
//     contains, or follows, every write queued before the offset was staged.
//   - I3 SeededOffset: the staged offset starts at the assigned offset, so the
//     very first write is gated too.
//   - I4 NoUnfencedCommit: an identity with an empty member id or a generation
//     below 1 is refused; nothing is committed with it.
//   - I5 HighWatermarkBound: recovery reads read_committed up to the high
//     watermark captured before the read, never up to the last stable offset.
//   - I6 StallNamed: a recovery that makes no progress for the stall timeout
//     fails with [RecoveryStalledError] naming the cause.
//   - I7 TakeoverAborts: acquisition aborts the previous owner's unfinished
//     transaction before recovery reads.
//   - I8 CappedBatch: no transaction carries more than the caps: at most
//     MaxWritesPerTransaction writes, of at most MaxBytesPerTransaction
//     bytes in all (store/wire's SnapshotBytes), except that a single
//     write larger than the byte cap goes alone; offset-only commits ride
//     along without using the caps. The byte cap is bounded by the
//     transaction timeout's time budget ([TransactionBytesBudget]).
package store
