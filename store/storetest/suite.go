package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// Run runs the whole contract suite against h.
func Run(t *testing.T, h Harness) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if own, ok := h.(ClusterOfItsOwn); ok && truncates[c.name] {
				own.RunOnOwnCluster(t, c.body)
				return
			}
			h.Run(t, c.body)
		})
	}
}

// cases are the contract suite's cases, in the order Run runs them.
var cases = []struct {
	name string
	body func(t *testing.T, w World)
}{
	{"EveryWriteCommitsOnce/cap=1", everyWriteCommitsOnce(1)},
	{"EveryWriteCommitsOnce/cap=256", everyWriteCommitsOnce(256)},
	{"BatchesNeverExceedTheCap", batchesNeverExceedTheCap},
	{"BatchesNeverExceedTheByteCap", batchesNeverExceedTheByteCap},
	{"OversizeWriteGoesAlone", oversizeWriteGoesAlone},
	{"OffsetOnlyCommit", offsetOnlyCommit},
	{"OffsetCommitsRideWithoutUsingTheCap", offsetCommitsRide},
	{"FirstWriteCommitsTheSeededOffset", firstWriteCommitsSeededOffset},
	{"CommittedOffsetNeverLeadsItsWrites", committedOffsetNeverLeads},
	{"MissingIdentityFailsLoudly", missingIdentityFailsLoudly},
	{"IdentityIsReadLivePerTransaction", identityReadLive},
	{"CommitFailureReachesEveryWaiter", commitFailureReachesEveryWaiter},
	{"RecoveryDrainsToTheHighWatermark", recoveryDrainsToHighWatermark},
	{"RecoveryOfAnEmptyPartitionEndsAtOnce", recoveryOfEmptyPartition},
	{"RecoveryProgressReachesTheAcquisitionHook", recoveryProgressHook},
	{"StalledRecovery/OpenTransaction", stalledOpenTransaction},
	{"StalledRecovery/Truncation", stalledTruncation},
	{"StalledRecovery/PlainTruncation", stalledTruncationPlain},
	{"StalledRecovery/Undetermined", stalledUndetermined},
	{"SlowProgressingRecoveryOutlivesTheDeadline", slowProgressingRecovery},
	{"StaleOwner/WriteFencedNewerSurvives", staleOwnerFenced},
	{"StaleOwner/GenerationAloneFences", generationAloneFences},
	{"StaleOwner/FirstWriteGatedBySeededOffset", staleFirstWriteGated},
	{"StaleOwner/OffsetOnlyCommitRejected", staleOffsetOnlyRejected},
	{"TakeoverAbortsCrashedOwnerTransaction", takeoverAborts},
	{"AssignedOffsetResolvedAfterTheTakeover", assignedOffsetResolvedAfterTakeover},
	{"ConcurrentDistinctKeysAllDurable", concurrentDistinctKeys},
	{"WriteBatch/Transactional/InOrderInCappedBatches", batchWritesInOrder(store.Transactional)},
	{"WriteBatch/Plain/InOrder", batchWritesInOrder(store.Plain)},
	{"Issue732/Plain/StaleFlushCorrupts", issue732(store.Plain)},
	{"Issue732/Transactional/NewerSnapshotSurvives", issue732(store.Transactional)},
	{"TombstoneKeepsItsOffset", tombstoneKeepsOffset},
	{"TimersRoundTrip", timersRoundTrip},
	{"CorruptRecordNamesPartitionAndOffset", corruptRecord},
	{"AnotherApplicationsRecordIsRefused", anotherApplicationsRecord},
	{"AnotherApplicationsTransactionalIDIsNotTakenOver", anotherApplicationsTransactionalID},
	{"AnotherApplicationsClaimedIDIsNotTakenOver", anotherApplicationsClaimedID},
	{"ClaimBesideAnOpenTransaction", claimBesideAnOpenTransaction},
	{"OversizeSnapshotNamesKey", oversizeSnapshot},
	{"LargestAllowedSnapshotCommits", largestAllowedSnapshot},
	{"ReservedKeyRefused", reservedKey},
	{"ClosedPartitionRefusesWrites", closedPartition},
	{"ExactlyOnceBatch/SnapshotsOutputsAndOffsetCommitTogether", batchCommitsTogether},
	{"ExactlyOnceBatch/StaleBatchLeavesNothing", staleBatchLeavesNothing},
	{"ExactlyOnceBatch/InvalidOutputRefusesTheWholeBatch", invalidOutputRefusesBatch},
	{"ExactlyOnceBatch/OutputTheBrokerRefusesIsNamed", brokerRefusedOutput},
	{"ExactlyOnceBatch/MissingOrUndeclaredOutputTopicIsNamed", missingOutputTopic},
	{"ExactlyOnceBatch/PlainModeRefuses", plainRefusesBatch},
	{"ExactlyOnceBatch/CrashedBatchVisibleOnlyReadUncommitted", crashedBatchReadUncommitted},
	{"ExactlyOnceBatch/OutputsWithoutSnapshots", outputsWithoutSnapshots},
	{"Checkpoint/DeltaReadsWhatFollows", checkpointDeltaReadsWhatFollows},
	{"Checkpoint/RefusedWithTheReason", checkpointRefused},
	{"Checkpoint/PlainRefused", checkpointPlainRefused},
	{"Checkpoint/LostAfterAFailedTransaction", checkpointLostAfterAFailure},
	{"Checkpoint/StartedWritesKeepOrderAndTheirPositions", startedWritesKeepOrderAndTheirPositions},
	{"StartedCommitDependsOnEarlierWrites", startedCommitDependsOnEarlierWrites},
	{"Follow/ReadsCommittedOnlyAndWritesNothing", followReadsCommittedOnly},
	{"Follow/FromACheckpoint", followFromCheckpoint},
	{"Follow/Refused", followRefused},
	{"Follow/AnyTopicRaw", followTopicRaw},
}

// truncates are the cases that cut a log (World.Truncate), which may mean
// stopping the cluster: see ClusterOfItsOwn.
var truncates = map[string]bool{"StalledRecovery/Truncation": true, "StalledRecovery/PlainTruncation": true}

func input(w World, p int32) store.TopicPartition {
	return store.TopicPartition{Topic: w.InputTopic(), Partition: p}
}

var transactional = BackendConfig{Mode: store.Transactional}

// 1. Every queued write commits exactly once with its offset; no
// transaction exceeds the cap.
func everyWriteCommitsOnce(limit int) func(t *testing.T, w World) {
	return func(t *testing.T, w World) {
		m := w.Join(t)
		in := input(w, 0)
		o := acquire(t, w, BackendConfig{Mode: store.Transactional, MaxWritesPerTransaction: limit}, in, 0, m.Identity())
		const n = 300
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { errs[i] = o.Write(context.Background(), snap(fmt.Sprintf("k%03d", i), "v", int64(i))) })
		}
		wg.Wait()
		for i, err := range errs {
			mustNil(t, fmt.Sprintf("write k%03d", i), err)
		}
		got := w.ReadSnapshots(t, in)
		if len(got) != n {
			t.Fatalf("read back %d snapshots, want %d exactly once each", len(got), n)
		}
		seen := map[string]bool{}
		for _, s := range got {
			var i int64
			if _, err := fmt.Sscanf(string(s.Key), "k%03d", &i); err != nil || s.Offset != i || seen[string(s.Key)] {
				t.Fatalf("snapshot %s@%d: wrong offset or duplicate", s.Key, s.Offset)
			}
			seen[string(s.Key)] = true
		}
		total := 0
		for _, e := range o.rec.committed() {
			if len(e.Writes) > limit {
				t.Fatalf("a transaction carried %d writes, cap %d", len(e.Writes), limit)
			}
			total += len(e.Writes)
		}
		if total != n {
			t.Fatalf("transactions carried %d writes, want %d", total, n)
		}
	}
}

// 1. With a transaction in flight, queued writes form batches of at most
// the cap, in queue order.
func batchesNeverExceedTheCap(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, BackendConfig{Mode: store.Transactional, MaxWritesPerTransaction: 3}, in, 0, m.Identity())
	entered, release := o.id.holdNext()
	first := writeAsync(o, snap("k0", "v", 0))
	<-entered // k0's transaction is in flight, holding the partition
	var rest []<-chan error
	for i := 1; i <= 7; i++ {
		rest = append(rest, writeAsync(o, snap(fmt.Sprintf("k%d", i), "v", int64(i))))
		o.awaitQueued(t, w, i) // queued in this order
	}
	release()
	mustNil(t, "k0", <-first)
	for i, ch := range rest {
		mustNil(t, fmt.Sprintf("k%d", i+1), <-ch)
	}
	var sizes []int
	for _, e := range o.rec.committed() {
		sizes = append(sizes, len(e.Writes))
	}
	if fmt.Sprint(sizes) != "[1 3 3 1]" {
		t.Fatalf("writes per transaction = %v, want [1 3 3 1]: the queued 7 drained in batches of the cap 3", sizes)
	}
}

// sizedSnap is a snapshot of key whose record (recordBytes) is n bytes.
func sizedSnap(key string, n int, offset int64) store.Snapshot {
	s := store.Snapshot{Key: []byte(key), Offset: offset}
	s.Value = []byte(strings.Repeat("v", n-recordBytes(s)))
	return s
}

// recordBytes is the size of s as a record of Application: what the byte
// cap counts.
func recordBytes(s store.Snapshot) int {
	return wire.SnapshotBytes(s) + wire.ApplicationHeaderBytes(Application)
}

// committedBytes is the bytes (recordBytes) of each committed
// transaction's writes.
func committedBytes(o *owner) []int {
	var out []int
	for _, e := range o.rec.committed() {
		n := 0
		for _, s := range e.Writes {
			n += recordBytes(s)
		}
		out = append(out, n)
	}
	return out
}

// 1. The byte cap cuts what the count cap would not: with a transaction
// in flight, seven queued writes of 1000 bytes under a cap of 3000 bytes
// (and a count cap of 100) drain three by three, in queue order, and all
// are durable.
func batchesNeverExceedTheByteCap(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, BackendConfig{Mode: store.Transactional, MaxWritesPerTransaction: 100, MaxBytesPerTransaction: 3000}, in, 0, m.Identity())
	entered, release := o.id.holdNext()
	first := writeAsync(o, sizedSnap("k0", 1000, 0))
	<-entered
	var rest []<-chan error
	for i := 1; i <= 7; i++ {
		rest = append(rest, writeAsync(o, sizedSnap(fmt.Sprintf("k%d", i), 1000, int64(i))))
		o.awaitQueued(t, w, i)
	}
	release()
	mustNil(t, "k0", <-first)
	for i, ch := range rest {
		mustNil(t, fmt.Sprintf("k%d", i+1), <-ch)
	}
	if got := fmt.Sprint(committedBytes(o)); got != "[1000 3000 3000 1000]" {
		t.Fatalf("bytes per transaction = %s, want [1000 3000 3000 1000]: the queued 7 drained three by three under the byte cap", got)
	}
	if got := w.ReadSnapshots(t, in); len(got) != 8 {
		t.Fatalf("read back %s, want the 8 writes", describe(got))
	}
}

// 1. A write larger than the byte cap is neither refused nor stuck: it
// commits in a transaction of its own, the write queued before it in the
// transaction before, the writes after it in the next; alone on an idle
// partition, it commits at once.
func oversizeWriteGoesAlone(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, BackendConfig{Mode: store.Transactional, MaxWritesPerTransaction: 100, MaxBytesPerTransaction: 2000}, in, 0, m.Identity())
	mustNil(t, "a lone write over the byte cap", o.Write(context.Background(), sizedSnap("big0", 10000, 0)))
	entered, release := o.id.holdNext()
	first := writeAsync(o, sizedSnap("k0", 1000, 1))
	<-entered
	var rest []<-chan error
	for i, s := range []store.Snapshot{sizedSnap("a", 1000, 2), sizedSnap("big1", 10000, 3), sizedSnap("b", 1000, 4), sizedSnap("c", 1000, 5)} {
		rest = append(rest, writeAsync(o, s))
		o.awaitQueued(t, w, i+1)
	}
	release()
	mustNil(t, "k0", <-first)
	for i, ch := range rest {
		mustNil(t, fmt.Sprintf("write %d", i), <-ch)
	}
	if got := fmt.Sprint(committedBytes(o)); got != "[10000 1000 1000 10000 2000]" {
		t.Fatalf("bytes per transaction = %s, want [10000 1000 1000 10000 2000]: each write over the cap alone", got)
	}
	if got := w.ReadSnapshots(t, in); len(got) != 6 {
		t.Fatalf("read back %s, want the 6 writes", describe(got))
	}
}

// 2. An offset-only commit is a transaction with no writes that really
// commits; recovery does not see anything of it.
func offsetOnlyCommit(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, transactional, in, 0, m.Identity())
	mustNil(t, "commit", o.Commit(context.Background(), 10))
	if off, ok := w.CommittedOffset(t, in); !ok || off != 10 {
		t.Fatalf("group committed offset = %d (%t), want 10", off, ok)
	}
	if got := o.CommittedOffset(); got != 10 {
		t.Fatalf("CommittedOffset() = %d, want 10", got)
	}
	txs := o.rec.committed()
	if len(txs) != 1 || len(txs[0].Writes) != 0 || !txs[0].OffsetAdvanced || txs[0].Offset != 10 {
		t.Fatalf("transactions = %+v, want one offset-only transaction committing 10", txs)
	}
	if got := w.ReadSnapshots(t, in); len(got) != 0 {
		t.Fatalf("snapshots after an offset-only commit = %s, want none", describe(got))
	}
	r := collect(o.Recover(context.Background(), nil))
	mustNil(t, "recover", r.err)
	if len(r.snaps) != 0 {
		t.Fatalf("recovered %s after an offset-only commit, want nothing", describe(r.snaps))
	}
}

// 2. Commits queued among writes ride in their transactions without
// using the cap.
func offsetCommitsRide(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, BackendConfig{Mode: store.Transactional, MaxWritesPerTransaction: 2}, in, 0, m.Identity())
	entered, release := o.id.holdNext()
	first := writeAsync(o, snap("k0", "v", 0))
	<-entered
	w1 := writeAsync(o, snap("k1", "v", 1))
	o.awaitQueued(t, w, 1)
	w2 := writeAsync(o, snap("k2", "v", 2))
	o.awaitQueued(t, w, 2)
	c := commitAsync(o, 3)
	o.awaitQueued(t, w, 3)
	w3 := writeAsync(o, snap("k3", "v", 3))
	o.awaitQueued(t, w, 4)
	release()
	for i, ch := range []<-chan error{first, w1, w2, c, w3} {
		mustNil(t, fmt.Sprintf("step %d", i), <-ch)
	}
	var shape []string
	for _, e := range o.rec.committed() {
		shape = append(shape, fmt.Sprintf("%dw@%d/%t", len(e.Writes), e.Offset, e.OffsetAdvanced))
	}
	want := "[1w@0/false 2w@3/true 1w@3/false]"
	if fmt.Sprint(shape) != want {
		t.Fatalf("transactions = %v, want %s: the commit rides with k1,k2 at cap 2", shape, want)
	}
	if off, _ := w.CommittedOffset(t, in); off != 3 {
		t.Fatalf("committed offset = %d, want 3", off)
	}
}

// 3. The first write carries the seeded assigned offset; a write never
// advances it.
func firstWriteCommitsSeededOffset(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, transactional, in, 42, m.Identity())
	// Stage 100 without committing it: a commit refused before anything is
	// sent (no identity, I4) leaves its offset staged.
	o.id.publish(store.GroupIdentity{Group: m.Identity().Group, Generation: -1})
	if err := o.Commit(context.Background(), 100); !errors.Is(err, store.ErrMissingIdentity) {
		t.Fatalf("commit without an identity: err = %v, want ErrMissingIdentity", err)
	}
	o.id.publish(m.Identity())
	mustNil(t, "write", o.Write(context.Background(), snap("k", "v", 99)))
	if off, ok := w.CommittedOffset(t, in); !ok || off != 42 {
		t.Fatalf("committed offset after the first write = %d (%t), want the seeded 42", off, ok)
	}
	mustNil(t, "commit", o.Commit(context.Background(), 100))
	if off, _ := w.CommittedOffset(t, in); off != 100 {
		t.Fatalf("committed offset after Commit = %d, want 100", off)
	}
}

// 3. A commit queued after writes is committed with them or after them,
// never before.
func committedOffsetNeverLeads(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, BackendConfig{Mode: store.Transactional, MaxWritesPerTransaction: 1}, in, 0, m.Identity())
	entered, release := o.id.holdNext()
	first := writeAsync(o, snap("a", "v", 0))
	<-entered
	var ws []<-chan error
	for i := 1; i <= 3; i++ {
		ws = append(ws, writeAsync(o, snap(fmt.Sprintf("k%d", i), "v", int64(i))))
		o.awaitQueued(t, w, i)
	}
	c := commitAsync(o, 4)
	o.awaitQueued(t, w, 4)
	release()
	mustNil(t, "first", <-first)
	for _, ch := range ws {
		mustNil(t, "write", <-ch)
	}
	mustNil(t, "commit", <-c)
	advancedAt := -1
	lastWrite := -1
	for i, e := range o.rec.committed() {
		if e.OffsetAdvanced && e.Offset == 4 && advancedAt < 0 {
			advancedAt = i
		}
		for _, s := range e.Writes {
			if s.Offset < 4 {
				lastWrite = i
			}
		}
	}
	if advancedAt < lastWrite {
		t.Fatalf("offset 4 committed in transaction %d, before the write it covers in transaction %d", advancedAt, lastWrite)
	}
}

// 4. A missing group identity is refused; nothing is committed or written.
func missingIdentityFailsLoudly(t *testing.T, w World) {
	in := input(w, 0)
	m := w.Join(t)
	joined := m.Identity()
	for _, id := range []store.GroupIdentity{
		{Group: joined.Group, MemberID: "", Generation: -1},
		{Group: joined.Group, MemberID: "", Generation: joined.Generation},
		{Group: joined.Group, MemberID: joined.MemberID, Generation: 0},
		{Group: joined.Group, MemberID: joined.MemberID, Generation: -1},
	} {
		o := acquire(t, w, transactional, in, 5, id)
		err := o.Write(context.Background(), snap("k", "v", 1))
		var mi *store.MissingIdentityError
		if !errors.Is(err, store.ErrMissingIdentity) || !errors.As(err, &mi) || mi.Input != in {
			t.Fatalf("write with %v: err = %v, want a MissingIdentityError naming %s", id, err, in)
		}
		if err := o.Commit(context.Background(), 7); !errors.Is(err, store.ErrMissingIdentity) {
			t.Fatalf("commit with %v: err = %v, want ErrMissingIdentity", id, err)
		}
		plain := acquire(t, w, BackendConfig{Mode: store.Plain}, in, 5, id)
		if err := plain.Commit(context.Background(), 7); !errors.Is(err, store.ErrMissingIdentity) {
			t.Fatalf("plain commit with %v: err = %v, want ErrMissingIdentity", id, err)
		}
	}
	if off, ok := w.CommittedOffset(t, in); ok {
		t.Fatalf("an offset %d was committed without a valid identity", off)
	}
	if got := w.ReadSnapshots(t, in); len(got) != 0 {
		t.Fatalf("snapshots written without a valid identity: %s", describe(got))
	}
}

// 5. The identity is read for every transaction, never cached.
func identityReadLive(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, transactional, in, 0, m.Identity())
	mustNil(t, "first write", o.Write(context.Background(), snap("k", "v1", 1)))
	w.Rebalance(t)
	o.id.publish(m.Identity()) // as the engine does after the poll
	mustNil(t, "second write", o.Write(context.Background(), snap("k", "v2", 2)))
	txs := o.rec.committed()
	if len(txs) != 2 || txs[0].Identity.Generation != 1 || txs[1].Identity.Generation != 2 {
		t.Fatalf("generations of the transactions = %+v, want 1 then 2", txs)
	}
}

// 6. A failed commit aborts the transaction and reaches every waiter.
func commitFailureReachesEveryWaiter(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, transactional, in, 0, m.Identity())
	entered, release := o.id.holdNext()
	first := writeAsync(o, snap("k0", "v", 0))
	<-entered
	a := writeAsync(o, snap("k1", "v", 1))
	o.awaitQueued(t, w, 1)
	b := writeAsync(o, snap("k2", "v", 2))
	o.awaitQueued(t, w, 2)
	w.Rebalance(t) // the published identity is now a generation behind
	release()
	for i, ch := range []<-chan error{first, a, b} {
		if err := <-ch; !errors.Is(err, store.ErrFenced) {
			t.Fatalf("waiter %d: err = %v, want ErrFenced", i, err)
		}
	}
	if got := w.ReadSnapshots(t, in); len(got) != 0 {
		t.Fatalf("aborted writes are visible: %s", describe(got))
	}
	if lso, hw := w.StableOffsets(t, in); lso != hw {
		t.Fatalf("a transaction is left open: last stable %d, high watermark %d", lso, hw)
	}
}

// 7. Recovery reads to the high watermark captured at its start: a
// committed snapshot above a foreign open transaction is returned once
// that transaction resolves.
func recoveryDrainsToHighWatermark(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, transactional, in, 0, m.Identity())
	mustNil(t, "write a", o.Write(context.Background(), snap("a", "1", 1)))
	end := w.ForeignTransaction(t, in, false, wire.EncodeSnapshot("", snap("foreign", "x", 2)))
	mustNil(t, "write b", o.Write(context.Background(), snap("b", "2", 3)))
	lso, hw := w.StableOffsets(t, in)
	if lso >= hw {
		t.Fatalf("the foreign transaction does not pin the LSO (lso %d, hw %d)", lso, hw)
	}
	res := recoverAsync(o)
	o.rec.awaitRecovery(t, "to read up to the open transaction", func(e store.RecoveryEvent) bool { return e.Position >= lso })
	w.Settle()
	if r, done := ready(res); done {
		t.Fatalf("recovery finished behind an open transaction with %s (err %v): it read to the LSO, not the high watermark", describe(r.snaps), r.err)
	}
	end(false)
	r := <-res
	mustNil(t, "recover", r.err)
	got := latest(r.snaps)
	if len(got) != 2 || string(got["a"].Value) != "1" || string(got["b"].Value) != "2" {
		t.Fatalf("recovered %s, want a=1 and b=2", describe(r.snaps))
	}
}

// 7. A partition with nothing in it recovers nothing, at once.
func recoveryOfEmptyPartition(t *testing.T, w World) {
	m := w.Join(t)
	o := acquire(t, w, stallConfig(w), input(w, 1), 0, m.Identity())
	start := w.Now()
	r := collect(o.Recover(context.Background(), nil))
	mustNil(t, "recover", r.err)
	if len(r.snaps) != 0 || w.Now().Sub(start) >= time.Second {
		t.Fatalf("recovered %s after %s from an empty partition", describe(r.snaps), w.Now().Sub(start))
	}
}

// 7b. The acquisition's Progress hook hears every event of the read the
// backend's RecoveryObserver hears, in the same order, with the snapshots
// returned so far counted (tombstones included, offset markers not).
func recoveryProgressHook(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, transactional, in, 0, m.Identity())
	mustNil(t, "write a", o.Write(context.Background(), snap("a", "1", 1)))
	mustNil(t, "delete b", o.Write(context.Background(), store.Snapshot{Key: []byte("b"), Offset: 2, Tombstone: true}))
	mustNil(t, "commit", o.Commit(context.Background(), 3))
	rec := &recorder{}
	b := w.Backend(t, transactional)
	p, err := b.Acquire(context.Background(), store.Acquisition{Input: in, AssignedOffset: 3, Identity: newIdentity(m.Identity()),
		Progress: rec.OnRecovery})
	if err != nil {
		t.Fatalf("acquire %s: %v", in, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	r := collect(p.Recover(context.Background(), nil))
	mustNil(t, "recover", r.err)
	rec.mu.Lock()
	evs := rec.recoveries
	rec.mu.Unlock()
	if len(evs) == 0 {
		t.Fatal("the acquisition's Progress hook heard nothing")
	}
	first, last := evs[0], evs[len(evs)-1]
	if first.Records != 0 || first.Done || first.Target < 3 {
		t.Fatalf("first event %+v, want the read's start (0 records, target past the 2 writes and the commit)", first)
	}
	if !last.Done || last.Err != nil || last.Position < last.Target || last.Records != int64(len(r.snaps)) || len(r.snaps) != 2 {
		t.Fatalf("last event %+v after recovering %s, want done at the target with 2 records", last, describe(r.snaps))
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Position < evs[i-1].Position || evs[i].Records < evs[i-1].Records {
			t.Fatalf("progress went back: %+v then %+v", evs[i-1], evs[i])
		}
	}
}

func stallConfig(w World) BackendConfig {
	timeout, _ := w.StallTimeout()
	return BackendConfig{Mode: store.Transactional, RecoveryStallTimeout: timeout}
}

// 8. A read pinned by a transaction that never resolves fails at the
// deadline with the open-transaction diagnosis.
func stalledOpenTransaction(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	timeout, slack := w.StallTimeout()
	o := acquire(t, w, stallConfig(w), in, 0, m.Identity())
	mustNil(t, "write a", o.Write(context.Background(), snap("a", "1", 1)))
	w.ForeignTransaction(t, in, true, wire.EncodeSnapshot("", snap("foreign", "x", 2)))
	mustNil(t, "write b", o.Write(context.Background(), snap("b", "2", 3)))
	pin, hw := w.StableOffsets(t, in)
	res := recoverAsync(o)
	o.rec.awaitRecovery(t, "to read up to the open transaction", func(e store.RecoveryEvent) bool { return e.Position >= pin })
	w.Settle()
	w.Advance(timeout - slack)
	if r, done := ready(res); done {
		t.Fatalf("recovery ended before the deadline: %v", r.err)
	}
	w.Advance(2 * slack)
	r := <-res
	var se *store.RecoveryStalledError
	if !errors.As(r.err, &se) || !errors.Is(r.err, store.ErrRecoveryStalled) {
		t.Fatalf("err = %v, want a RecoveryStalledError", r.err)
	}
	if se.Cause != store.StallOpenTransaction || se.Position != pin || se.Target != hw || se.LogEnd < hw {
		t.Fatalf("stall = %+v, want open transaction at position %d, target %d", se, pin, hw)
	}
	if se.Stalled < timeout {
		t.Fatalf("stalled for %s, below the %s deadline", se.Stalled, timeout)
	}
}

// 8. A log end regressed below the captured target is diagnosed as
// truncation.
func stalledTruncation(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	timeout, slack := w.StallTimeout()
	o := acquire(t, w, stallConfig(w), in, 0, m.Identity())
	mustNil(t, "write a", o.Write(context.Background(), snap("a", "1", 1)))
	w.ForeignTransaction(t, in, true, wire.EncodeSnapshot("", snap("foreign", "x", 2)))
	mustNil(t, "write b", o.Write(context.Background(), snap("b", "2", 3)))
	pin, hw := w.StableOffsets(t, in)
	res := recoverAsync(o)
	o.rec.awaitRecovery(t, "to read up to the open transaction", func(e store.RecoveryEvent) bool { return e.Position >= pin })
	w.Settle()
	w.Truncate(t, in, pin) // the pinned tail is lost
	w.Advance(timeout + slack)
	wantTruncation(t, (<-res).err, hw, pin)
}

// wantTruncation fails t unless err is a stall diagnosed as truncation:
// the log end now at logEnd, below the read's target.
func wantTruncation(t *testing.T, err error, target, logEnd int64) {
	t.Helper()
	var se *store.RecoveryStalledError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a RecoveryStalledError", err)
	}
	if se.Cause != store.StallTruncation || se.Target != target || se.LogEnd != logEnd {
		t.Fatalf("stall = %+v, want truncation: log end %d below target %d", se, logEnd, target)
	}
}

// 8. Plain mode's recovery has the deadline too. Reading
// read_uncommitted, it never waits for a transaction, but a log cut below
// the high watermark it captured would hold it for good.
func stalledTruncationPlain(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	timeout, slack := w.StallTimeout()
	cfg := stallConfig(w)
	cfg.Mode = store.Plain
	o := acquire(t, w, cfg, in, 0, m.Identity())
	mustNil(t, "write a", o.Write(context.Background(), snap("a", "1", 1)))
	_, end := w.StableOffsets(t, in)
	mustNil(t, "write b", o.Write(context.Background(), snap("b", "2", 2)))
	_, hw := w.StableOffsets(t, in)
	// One record per half deadline: the read is still on a's fetch when
	// the log loses b.
	w.SlowFetches(t, timeout/2)
	res := recoverAsync(o)
	o.rec.awaitRecovery(t, "to start", func(e store.RecoveryEvent) bool { return e.Target == hw })
	w.Settle()
	w.Truncate(t, in, end)
	w.Advance(timeout/2 + slack) // a's fetch returns: the last progress
	w.Settle()
	w.Advance(timeout + slack)
	wantTruncation(t, (<-res).err, hw, end)
}

// 8. When the diagnosis cannot re-read the log end, the cause is
// undetermined and the read error is kept.
func stalledUndetermined(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	timeout, slack := w.StallTimeout()
	o := acquire(t, w, stallConfig(w), in, 0, m.Identity())
	mustNil(t, "write a", o.Write(context.Background(), snap("a", "1", 1)))
	w.ForeignTransaction(t, in, true, wire.EncodeSnapshot("", snap("foreign", "x", 2)))
	pin, _ := w.StableOffsets(t, in)
	res := recoverAsync(o)
	o.rec.awaitRecovery(t, "to read up to the open transaction", func(e store.RecoveryEvent) bool { return e.Position >= pin })
	w.Settle()
	broken := w.FailLogEndReads(t)
	w.Advance(timeout + slack)
	r := <-res
	var se *store.RecoveryStalledError
	if !errors.As(r.err, &se) || se.Cause != store.StallUndetermined || !errors.Is(r.err, broken) || se.LogEnd != -1 {
		t.Fatalf("err = %v, want an undetermined stall wrapping the re-read failure", r.err)
	}
}

// 8. A read that keeps advancing outlives the deadline, however long it
// takes in total: each of its fetches takes half the deadline.
func slowProgressingRecovery(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	timeout, _ := w.StallTimeout()
	o := acquire(t, w, stallConfig(w), in, 0, m.Identity())
	const n = 4
	for i := range n {
		mustNil(t, "write", o.Write(context.Background(), snap(fmt.Sprintf("k%d", i), "v", int64(i))))
	}
	w.SlowFetches(t, timeout/2) // one record per half deadline
	start := w.Now()
	res := recoverAsync(o)
	var r recovered
	for {
		w.Settle()
		var done bool
		if r, done = ready(res); done {
			break
		}
		w.Advance(timeout / 6)
	}
	mustNil(t, "slow recovery", r.err)
	if len(r.snaps) != n {
		t.Fatalf("recovered %d snapshots, want %d", len(r.snaps), n)
	}
	if took := w.Now().Sub(start); took <= timeout {
		t.Fatalf("the slow read took %s; the test needs it to outlast the %s deadline", took, timeout)
	}
}

// staleSetup: member A owns input 0 and its published identity freezes
// (a GC pause); the group moves on. It returns the stale owner.
func staleSetup(t *testing.T, w World, cfg BackendConfig, assigned int64) (stale *owner, a Member) {
	a = w.Join(t)
	stale = acquire(t, w, cfg, input(w, 0), assigned, a.Identity())
	return stale, a
}

// 9. A stale owner's write is fenced and the new owner's snapshot
// survives.
func staleOwnerFenced(t *testing.T, w World) {
	in := input(w, 0)
	stale, _ := staleSetup(t, w, transactional, 0)
	mustNil(t, "stale owner's first write", stale.Write(context.Background(), snap("k", "old", 1)))
	b := w.Join(t) // rebalance: the partition moves to b
	fresh := acquire(t, w, transactional, in, 0, b.Identity())
	r := collect(fresh.Recover(context.Background(), nil))
	mustNil(t, "recover", r.err)
	mustNil(t, "new owner's write", fresh.Write(context.Background(), snap("k", "new", 5)))
	err := stale.Write(context.Background(), snap("k", "stale", 3))
	var fe *store.FencedError
	if !errors.Is(err, store.ErrFenced) || !errors.As(err, &fe) || fe.Input != in {
		t.Fatalf("stale write: err = %v, want a FencedError naming %s", err, in)
	}
	got := latest(w.ReadSnapshots(t, in))
	if string(got["k"].Value) != "new" {
		t.Fatalf("k = %q after the stale write, want the new owner's %q", got["k"].Value, "new")
	}
}

// 9. With the producer not yet fenced (no takeover), the generation alone
// rejects the stale owner: ILLEGAL_GENERATION.
func generationAloneFences(t *testing.T, w World) {
	in := input(w, 0)
	stale, a := staleSetup(t, w, transactional, 0)
	w.Rebalance(t)
	err := stale.Write(context.Background(), snap("k", "stale", 3))
	if !errors.Is(err, store.ErrFenced) || !errors.Is(err, kerr.IllegalGeneration) {
		t.Fatalf("err = %v, want ErrFenced for ILLEGAL_GENERATION", err)
	}
	if got := w.ReadSnapshots(t, in); len(got) != 0 {
		t.Fatalf("the fenced write is visible: %s", describe(got))
	}
	// The same partition with its identity refreshed commits again: the
	// fence was the generation, not the producer.
	stale.id.publish(a.Identity())
	mustNil(t, "write with the refreshed identity", stale.Write(context.Background(), snap("k", "fresh", 4)))
}

// 9. A stale owner's very first write, before any Commit, is gated by the
// seeded offset.
func staleFirstWriteGated(t *testing.T, w World) {
	in := input(w, 0)
	stale, _ := staleSetup(t, w, transactional, 7)
	w.Rebalance(t)
	if err := stale.Write(context.Background(), snap("k", "stale", 9)); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("first write: err = %v, want ErrFenced", err)
	}
	if off, ok := w.CommittedOffset(t, in); ok {
		t.Fatalf("offset %d committed by a stale first write", off)
	}
	if got := w.ReadSnapshots(t, in); len(got) != 0 {
		t.Fatalf("the stale first write is visible: %s", describe(got))
	}
}

// 9. A stale offset-only commit is rejected and leaves nothing behind.
func staleOffsetOnlyRejected(t *testing.T, w World) {
	in := input(w, 0)
	stale, _ := staleSetup(t, w, transactional, 0)
	w.Rebalance(t)
	if err := stale.Commit(context.Background(), 9); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale commit: err = %v, want ErrFenced", err)
	}
	if off, ok := w.CommittedOffset(t, in); ok {
		t.Fatalf("stale commit landed: offset %d", off)
	}
	if got := stale.CommittedOffset(); got != 0 {
		t.Fatalf("CommittedOffset() = %d after a rejected commit, want 0", got)
	}
	if lso, hw := w.StableOffsets(t, in); lso != hw {
		t.Fatalf("the rejected commit left a transaction open: lso %d hw %d", lso, hw)
	}
	if got := w.ReadSnapshots(t, in); len(got) != 0 {
		t.Fatalf("the rejected commit wrote %s", describe(got))
	}
}

// 10. Acquisition aborts the crashed owner's unfinished transaction, so
// recovery does not wait for its timeout.
func takeoverAborts(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	first := acquire(t, w, transactional, in, 0, m.Identity())
	mustNil(t, "write", first.Write(context.Background(), snap("k", "committed", 1)))
	w.CrashedOwnerTransaction(t, in, wire.EncodeSnapshot("", snap("k", "unfinished", 2)))
	if lso, hw := w.StableOffsets(t, in); lso >= hw {
		t.Fatalf("the crashed owner's transaction is not open (lso %d, hw %d)", lso, hw)
	}
	next := acquire(t, w, transactional, in, 0, m.Identity())
	if lso, hw := w.StableOffsets(t, in); lso != hw {
		t.Fatalf("after acquisition lso %d != hw %d: the takeover did not abort", lso, hw)
	}
	start := w.Now()
	r := collect(next.Recover(context.Background(), nil))
	mustNil(t, "recover", r.err)
	if got := latest(r.snaps); string(got["k"].Value) != "committed" {
		t.Fatalf("recovered %s, want k=committed", describe(r.snaps))
	}
	// The crashed owner's transaction times out after 1 min; a recovery
	// that waited for it, rather than for the takeover's abort, would take
	// that long.
	if waited := w.Now().Sub(start); waited >= time.Second {
		t.Fatalf("recovery waited %s after the takeover", waited)
	}
}

// 10. An assigned offset resolved at acquisition is read after the
// takeover, and seeds the first write.
func assignedOffsetResolvedAfterTakeover(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	w.CrashedOwnerTransaction(t, in, wire.EncodeSnapshot("", snap("k", "unfinished", 2)))
	b := w.Backend(t, transactional)
	var lso, hw int64
	p, err := b.Acquire(context.Background(), store.Acquisition{
		Input: in, AssignedOffset: 1, Identity: newIdentity(m.Identity()),
		ResolveAssignedOffset: func(context.Context) (int64, error) {
			lso, hw = w.StableOffsets(t, in)
			return 33, nil
		},
	})
	mustNil(t, "acquire", err)
	t.Cleanup(func() { _ = p.Close() })
	if lso != hw {
		t.Fatalf("resolved before the takeover: lso %d, hw %d", lso, hw)
	}
	mustNil(t, "write", writeOne(context.Background(), p, snap("k", "v", 40)))
	if off, _ := w.CommittedOffset(t, in); off != 33 {
		t.Fatalf("first write committed %d, want the resolved 33", off)
	}
	boom := errors.New("offsets unavailable")
	_, err = b.Acquire(context.Background(), store.Acquisition{
		Input: in, Identity: newIdentity(m.Identity()),
		ResolveAssignedOffset: func(context.Context) (int64, error) { return 0, boom },
	})
	if !errors.Is(err, boom) {
		t.Fatalf("a failing resolver: err = %v", err)
	}
}

// 11. Concurrent writes of distinct keys are all durable and read back.
func concurrentDistinctKeys(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 1)
	o := acquire(t, w, transactional, in, 0, m.Identity())
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errs <- o.Write(context.Background(), snap(fmt.Sprintf("key-%d", i), fmt.Sprintf("value-%d", i), int64(i)))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		mustNil(t, "write", err)
	}
	r := collect(o.Recover(context.Background(), nil))
	mustNil(t, "recover", r.err)
	got := latest(r.snaps)
	for i := range n {
		if s := got[fmt.Sprintf("key-%d", i)]; string(s.Value) != fmt.Sprintf("value-%d", i) || s.Offset != int64(i) {
			t.Fatalf("key-%d recovered as %q@%d", i, s.Value, s.Offset)
		}
	}
}

// A batch written in one call (WriteBatch) lands in the order given, as
// consecutive writes: in Transactional mode the queue drains it in FIFO
// transactions of the cap. A write refused before queueing fails alone; a
// commit after the batch follows all of it.
func batchWritesInOrder(mode store.Mode) func(t *testing.T, w World) {
	return func(t *testing.T, w World) {
		m := w.Join(t)
		in := input(w, 0)
		o := acquire(t, w, BackendConfig{Mode: mode, MaxWritesPerTransaction: 3}, in, 0, m.Identity())
		var snaps []store.Snapshot
		for i := range 8 {
			snaps = append(snaps, snap(fmt.Sprintf("k%d", i), "v", int64(i)))
		}
		snaps[4] = store.Snapshot{Key: wire.OffsetMarkerKey, Value: []byte("x"), Offset: 4}
		errs := o.WriteBatch(context.Background(), snaps)
		if len(errs) != len(snaps) {
			t.Fatalf("WriteBatch of %d returned %d errors", len(snaps), len(errs))
		}
		for i, err := range errs {
			if i == 4 {
				if !errors.Is(err, store.ErrReservedKey) {
					t.Fatalf("the reserved key's write: err = %v, want ErrReservedKey", err)
				}
				continue
			}
			mustNil(t, fmt.Sprintf("k%d", i), err)
		}
		mustNil(t, "commit", o.Commit(context.Background(), 8))
		if got, want := describe(w.ReadSnapshots(t, in)), "[k0=v@0 k1=v@1 k2=v@2 k3=v@3 k5=v@5 k6=v@6 k7=v@7]"; got != want {
			t.Fatalf("snapshots = %s, want %s in batch order", got, want)
		}
		if off, _ := w.CommittedOffset(t, in); off != 8 {
			t.Fatalf("committed offset = %d, want 8", off)
		}
		if mode != store.Transactional {
			return
		}
		var shape []string
		for _, e := range o.rec.committed() {
			var keys []string
			for _, s := range e.Writes {
				keys = append(keys, string(s.Key))
			}
			shape = append(shape, fmt.Sprintf("%v/%t", keys, e.OffsetAdvanced))
		}
		if got, want := fmt.Sprint(shape), "[[k0 k1 k2]/false [k3 k5 k6]/false [k7]/false []/true]"; got != want {
			t.Fatalf("transactions = %s, want %s", got, want)
		}
	}
}

// 12. kafka-flow#732: the old owner flushes on revoke after the new owner
// flushed. Plain: the stale value wins (the corruption); Transactional: the
// new owner's value survives.
func issue732(mode store.Mode) func(t *testing.T, w World) {
	return func(t *testing.T, w World) {
		cfg := BackendConfig{Mode: mode}
		in := input(w, 0)
		a := w.Join(t)
		old := acquire(t, w, cfg, in, 0, a.Identity())
		mustNil(t, "old owner folds events 0..9", old.Write(context.Background(), snap("k", "sum(0..9)", 9)))
		mustNil(t, "old owner commits 10", old.Commit(context.Background(), 10))
		t.Logf("%s: member A owns %s, folds events 0..9 into k, writes it and commits offset 10", mode, in)

		// a pauses; b joins and takes the partition.
		b := w.Join(t)
		fresh := acquire(t, w, cfg, in, 10, b.Identity())
		r := collect(fresh.Recover(context.Background(), nil))
		mustNil(t, "new owner recovers", r.err)
		mustNil(t, "new owner folds events 10..19", fresh.Write(context.Background(), snap("k", "sum(0..19)", 19)))
		mustNil(t, "new owner commits 20", fresh.Commit(context.Background(), 20))
		t.Logf("%s: A pauses; B joins, takes %s, recovers, folds 10..19, writes k=sum(0..19) and commits 20", mode, in)

		// a wakes and flushes what it had folded during its pause.
		staleErr := old.Write(context.Background(), snap("k", "sum(0..14)", 14))
		t.Logf("%s: A wakes and flushes k=sum(0..14) on revoke: err=%v", mode, staleErr)

		next := acquire(t, w, cfg, in, 20, b.Identity())
		r = collect(next.Recover(context.Background(), nil))
		mustNil(t, "next recovery", r.err)
		got := latest(r.snaps)["k"]
		committed, _ := w.CommittedOffset(t, in)
		t.Logf("%s: the next owner recovers k=%s and resumes at committed offset %d", mode, got.Value, committed)
		switch mode {
		case store.Plain:
			if staleErr != nil {
				t.Fatalf("plain stale write failed (%v); the baseline has no fence", staleErr)
			}
			if string(got.Value) != "sum(0..14)" || committed != 20 {
				t.Fatalf("plain: recovered %q with committed offset %d; want the corruption: stale sum(0..14) resumed at 20",
					got.Value, committed)
			}
		case store.Transactional:
			if !errors.Is(staleErr, store.ErrFenced) {
				t.Fatalf("transactional stale write: err = %v, want ErrFenced", staleErr)
			}
			if string(got.Value) != "sum(0..19)" || committed != 20 {
				t.Fatalf("transactional: recovered %q with committed %d, want sum(0..19) at 20", got.Value, committed)
			}
		}
	}
}

// A tombstone is recovered with its offset.
func tombstoneKeepsOffset(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, transactional, in, 0, m.Identity())
	mustNil(t, "write", o.Write(context.Background(), snap("k", "v", 3)))
	mustNil(t, "delete", o.Write(context.Background(), store.Snapshot{Key: []byte("k"), Offset: 8, Tombstone: true}))
	r := collect(o.Recover(context.Background(), nil))
	mustNil(t, "recover", r.err)
	if got := latest(r.snaps)["k"]; !got.Tombstone || got.Offset != 8 || got.Value != nil {
		t.Fatalf("k recovered as %s, want a tombstone at offset 8", describe([]store.Snapshot{got}))
	}
}

// A snapshot's timers are recovered as written, through a write and an
// exactly-once batch; a later snapshot without timers recovers with none.
func timersRoundTrip(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, transactional, in, 0, m.Identity())
	ts := []store.Timer{{Kind: store.EventTime, At: -1}, {Kind: store.ProcessingTime, At: 1_700_000_000_123}}
	a, b, c := snap("a", "1", 1), snap("b", "2", 2), snap("c", "3", 3)
	a.Timers, b.Timers = ts, ts[1:]
	mustNil(t, "write", o.Write(context.Background(), a))
	mustNil(t, "batch", o.CommitBatch(context.Background(), store.Batch{Snapshots: []store.Snapshot{b, c}, Offset: 4}))
	r := collect(o.Recover(context.Background(), nil))
	mustNil(t, "recover", r.err)
	got := latest(r.snaps)
	for _, want := range []store.Snapshot{a, b, c} {
		if g := got[string(want.Key)]; fmt.Sprint(g.Timers) != fmt.Sprint(want.Timers) || string(g.Value) != string(want.Value) {
			t.Fatalf("%s recovered with timers %v, value %q; want %v, %q", want.Key, g.Timers, g.Value, want.Timers, want.Value)
		}
	}
	mustNil(t, "rewrite", o.Write(context.Background(), snap("a", "5", 5)))
	r = collect(o.Recover(context.Background(), nil))
	mustNil(t, "recover again", r.err)
	if g := latest(r.snaps)["a"]; g.Timers != nil {
		t.Fatalf("a's snapshot without timers recovered with %v", g.Timers)
	}
}

// A record snapfence did not write fails recovery with its partition and
// offset.
func corruptRecord(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, transactional, in, 0, m.Identity())
	mustNil(t, "write", o.Write(context.Background(), snap("k", "v", 3)))
	_, before := w.StableOffsets(t, in)
	w.ProduceForeign(t, in, wire.Record{Key: []byte("intruder"), Value: []byte("{}")})
	r := collect(o.Recover(context.Background(), nil))
	var ce *store.CorruptRecordError
	if !errors.As(r.err, &ce) || !errors.Is(r.err, store.ErrCorruptRecord) {
		t.Fatalf("err = %v, want a CorruptRecordError", r.err)
	}
	if ce.Offset != before || ce.Snapshots.Partition != in.Partition {
		t.Fatalf("corrupt record named at %s offset %d, want partition %d offset %d", ce.Snapshots, ce.Offset, in.Partition, before)
	}
}

// Every record names its application; a recovery reads records that name
// none (written before applications were named) and refuses one of
// another application, naming it, the offset and both applications.
func anotherApplicationsRecord(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, transactional, in, 0, m.Identity())
	mustNil(t, "write", o.Write(context.Background(), snap("k", "v", 3)))
	w.ProduceForeign(t, in, wire.EncodeSnapshot("", snap("old", "unnamed", 4)))
	r := collect(o.Recover(context.Background(), nil))
	if r.err != nil || len(r.snaps) != 2 {
		t.Fatalf("recovery = %d snapshots, %v; want k and old", len(r.snaps), r.err)
	}
	_, before := w.StableOffsets(t, in)
	w.ProduceForeign(t, in, wire.EncodeSnapshot("billing", snap("k", "theirs", 5)))
	r = collect(o.Recover(context.Background(), nil))
	var fe *store.ForeignStateError
	if !errors.As(r.err, &fe) || !errors.Is(r.err, store.ErrForeignState) || !errors.Is(r.err, store.ErrMisconfigured) {
		t.Fatalf("err = %v, want a ForeignStateError", r.err)
	}
	if fe.Owner != "billing" || fe.Application != Application || fe.Offset != before || fe.Input != in || fe.Snapshots.Partition != in.Partition {
		t.Fatalf("refusal %+v, want billing's record at offset %d of %s refused to %s", fe, before, in, Application)
	}
	for _, want := range []string{`"billing"`, `"` + Application + `"`, "View"} {
		if !strings.Contains(r.err.Error(), want) {
			t.Errorf("%q does not say %s", r.err, want)
		}
	}
}

// A second application misconfigured with the first's transactional.id
// prefix does not take the first's ids over: while the first has a
// transaction open on its snapshot partition (every transaction writes
// one there), the second's acquisition is refused, naming the id, before
// its takeover could fence the first or abort that transaction. The
// first's own takeover of the same id goes ahead.
func anotherApplicationsTransactionalID(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	w.CrashedOwnerTransaction(t, in, wire.EncodeSnapshot(Application, snap("k", "open", 1)))
	other := w.Backend(t, BackendConfig{Mode: store.Transactional, Application: "billing"})
	_, err := other.Acquire(context.Background(), store.Acquisition{Input: in, Identity: newIdentity(m.Identity())})
	var fe *store.ForeignStateError
	if !errors.As(err, &fe) || !errors.Is(err, store.ErrForeignState) || fe.TransactionalID == "" || fe.Application != "billing" {
		t.Fatalf("err = %v, want a ForeignStateError naming the transactional.id", err)
	}
	own := snapshotPartition(in).String()
	for _, want := range []string{fe.TransactionalID, own, "TransactionalIDPrefix"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %s", err, want)
		}
	}
	if lso, hw := w.StableOffsets(t, in); lso >= hw {
		t.Fatalf("the refused acquisition ended the first application's transaction (lso %d, hw %d)", lso, hw)
	}
	o := acquire(t, w, transactional, in, 0, m.Identity())
	if lso, hw := w.StableOffsets(t, in); lso != hw {
		t.Fatalf("the application's own takeover did not abort its transaction (lso %d, hw %d)", lso, hw)
	}
	mustNil(t, "a write after the own takeover", o.Write(context.Background(), snap("k", "v", 2)))
}

// The first takeover of an empty snapshot partition claims the id (a
// transaction of one marker there), so a second application with the
// same prefix, starting afresh, is refused while the first holds the id
// with no transaction open, even on an input partition that never had a
// record; the first's next write commits.
func anotherApplicationsClaimedID(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, transactional, in, 0, m.Identity())
	if lso, hw := w.StableOffsets(t, in); hw == 0 || lso != hw {
		t.Fatalf("after the first takeover of an empty partition: lso %d, hw %d; want a committed claim", lso, hw)
	}
	other := w.Backend(t, BackendConfig{Mode: store.Transactional, Application: "billing"})
	_, err := other.Acquire(context.Background(), store.Acquisition{Input: in, Identity: newIdentity(m.Identity())})
	var fe *store.ForeignStateError
	if !errors.As(err, &fe) || fe.TransactionalID == "" || fe.Application != "billing" {
		t.Fatalf("err = %v, want a ForeignStateError naming the transactional.id", err)
	}
	mustNil(t, "the first application's write after the refusal", o.Write(context.Background(), snap("k", "v", 1)))
	if r := collect(o.Recover(context.Background(), nil)); r.err != nil || len(r.snaps) != 1 {
		t.Fatalf("recovered %d snapshots, %v; want k alone (the claim is no snapshot)", len(r.snaps), r.err)
	}
}

// The first takeover claims a snapshot partition whose only records are
// an open transaction's (another writer's, hanging): those may yet be
// lost with a broker's unreplicated tail, and the partition would then be
// empty beside a claimed id, which a later acquisition of the
// application's own would take for another application's.
func claimBesideAnOpenTransaction(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	mustNil(t, "close", acquire(t, w, transactional, input(w, 1), 0, m.Identity()).Close()) // creates the snapshot topic
	end := w.ForeignTransaction(t, in, false, wire.EncodeSnapshot("", snap("foreign", "x", 2)))
	lso0, hw0 := w.StableOffsets(t, in)
	if lso0 != 0 || hw0 == 0 {
		t.Fatalf("before the takeover: lso %d, hw %d; want the foreign open transaction alone", lso0, hw0)
	}
	o := acquire(t, w, transactional, in, 0, m.Identity())
	if lso, hw := w.StableOffsets(t, in); lso != 0 || hw < hw0+2 {
		t.Fatalf("after the first takeover: lso %d, hw %d; want a committed claim (a marker and its commit marker) past the foreign record, the lso still pinned at 0", lso, hw)
	}
	end(false)
	if r := collect(o.Recover(context.Background(), nil)); r.err != nil || len(r.snaps) != 0 {
		t.Fatalf("recovered %s, %v; want nothing (the claim is no snapshot, the foreign record aborted)", describe(r.snaps), r.err)
	}
	mustNil(t, "a write after the claim", o.Write(context.Background(), snap("k", "v", 1)))
}

// An oversize snapshot is refused with its key, size and the limit.
func oversizeSnapshot(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquire(t, w, transactional, in, 0, m.Identity())
	big := make([]byte, store.DefaultMaxValueBytes+1)
	err := o.Write(context.Background(), store.Snapshot{Key: []byte("huge"), Value: big, Offset: 1})
	var te *store.ValueTooLargeError
	if !errors.As(err, &te) || string(te.Key) != "huge" || te.Limit != store.DefaultMaxValueBytes || te.Size <= te.Limit {
		t.Fatalf("err = %v, want a ValueTooLargeError naming key huge", err)
	}
	mustNil(t, "a normal write after", o.Write(context.Background(), snap("k", "v", 2)))
}

// The largest snapshot the size check admits (key plus value of
// DefaultMaxValueBytes) is written, in both modes, and reads back whole:
// with its headers and framing it must fit the backend's record-batch
// limit (franz-go's ProducerBatchMaxBytes, 1,000,012 bytes by default),
// or its transaction fails with every write batched with it, on every
// retry.
func largestAllowedSnapshot(t *testing.T, w World) {
	for i, mode := range []store.Mode{store.Transactional, store.Plain} {
		m := w.Join(t)
		in := input(w, int32(i))
		o := acquire(t, w, BackendConfig{Mode: mode}, in, 0, m.Identity())
		key := []byte("largest")
		s := store.Snapshot{Key: key, Value: []byte(strings.Repeat("v", store.DefaultMaxValueBytes-len(key))), Offset: 1}
		mustNil(t, fmt.Sprintf("%s: a write of key plus value %d bytes", mode, store.DefaultMaxValueBytes), o.Write(context.Background(), s))
		got := w.ReadSnapshots(t, in)
		if len(got) != 1 || len(got[0].Key)+len(got[0].Value) != store.DefaultMaxValueBytes {
			t.Fatalf("%s: read back %s, want the one snapshot of %d bytes", mode, describe(got), store.DefaultMaxValueBytes)
		}
	}
}

func reservedKey(t *testing.T, w World) {
	m := w.Join(t)
	o := acquire(t, w, transactional, input(w, 0), 0, m.Identity())
	err := o.Write(context.Background(), store.Snapshot{Key: wire.OffsetMarkerKey, Value: []byte("x"), Offset: 1})
	if !errors.Is(err, store.ErrReservedKey) {
		t.Fatalf("err = %v, want ErrReservedKey", err)
	}
}

func closedPartition(t *testing.T, w World) {
	m := w.Join(t)
	o := acquire(t, w, transactional, input(w, 0), 0, m.Identity())
	mustNil(t, "close", o.Close())
	if err := o.Write(context.Background(), snap("k", "v", 1)); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("write after close: err = %v, want ErrClosed", err)
	}
}

func outputs(w World, values ...string) []store.Output {
	out := make([]store.Output, len(values))
	for i, v := range values {
		out[i] = store.Output{Topic: w.OutputTopic(), Key: []byte("key-" + v), Value: []byte(v)}
	}
	return out
}

func describeOutputs(recs []OutputRecord) string {
	var b []byte
	for _, r := range recs {
		b = fmt.Appendf(b, "[p%d %s=%s]", r.Partition, r.Key, r.Value)
	}
	return string(b)
}

// 12. An exactly-once batch commits its snapshots, its outputs (each in
// the partition Kafka's partitioner gives its key) and its offset in one
// transaction, and observers hear of all three.
func batchCommitsTogether(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	rec := &recorder{}
	o := acquireOutputs(t, w, BackendConfig{Mode: store.Transactional, Observer: rec}, in, 0, m.Identity(), []string{w.OutputTopic()})
	outs := outputs(w, "o1", "o2", "o3", "o4")
	mustNil(t, "batch", o.CommitBatch(context.Background(), store.Batch{
		Snapshots: []store.Snapshot{snap("a", "1", 3), snap("b", "2", 6)}, Outputs: outs, Offset: 7,
	}))
	if got := latest(w.ReadSnapshots(t, in)); string(got["a"].Value) != "1" || string(got["b"].Value) != "2" {
		t.Fatalf("snapshots after the batch: %v", got)
	}
	if off, ok := w.CommittedOffset(t, in); !ok || off != 7 {
		t.Fatalf("committed offset %d (%v), want 7", off, ok)
	}
	if got := o.CommittedOffset(); got != 7 {
		t.Fatalf("CommittedOffset() = %d, want 7", got)
	}
	read := w.ReadOutputs(t, true)
	if len(read) != len(outs) {
		t.Fatalf("read_committed outputs %s, want the batch's %d", describeOutputs(read), len(outs))
	}
	for _, r := range read {
		if want := store.OutputPartition(r.Key, 2); r.Partition != want {
			t.Fatalf("output %s=%s in partition %d, want %d (Kafka's partitioner)", r.Key, r.Value, r.Partition, want)
		}
	}
	ev := rec.committed()
	if len(ev) != 1 || len(ev[0].Writes) != 2 || len(ev[0].Outputs) != 4 || ev[0].Offset != 7 || !ev[0].OffsetAdvanced {
		t.Fatalf("observed %+v, want one transaction of 2 writes, 4 outputs and offset 7", ev)
	}
}

// 12. A stale owner's batch is fenced, and nothing of it (snapshot,
// output or offset) becomes visible to a read_committed reader.
func staleBatchLeavesNothing(t *testing.T, w World) {
	in := input(w, 0)
	stale := acquireOutputs(t, w, transactional, in, 0, w.Join(t).Identity(), []string{w.OutputTopic()})
	w.Rebalance(t)
	err := stale.CommitBatch(context.Background(), store.Batch{
		Snapshots: []store.Snapshot{snap("k", "stale", 3)}, Outputs: outputs(w, "stale"), Offset: 4,
	})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale batch: err = %v, want ErrFenced", err)
	}
	if got := w.ReadSnapshots(t, in); len(got) != 0 {
		t.Fatalf("the fenced batch's snapshots are visible: %s", describe(got))
	}
	if got := w.ReadOutputs(t, true); len(got) != 0 {
		t.Fatalf("the fenced batch's outputs are visible read_committed: %s", describeOutputs(got))
	}
	if off, ok := w.CommittedOffset(t, in); ok {
		t.Fatalf("the fenced batch committed offset %d", off)
	}
}

// 12. A batch with an invalid output is refused whole, before anything is
// sent, with an error naming the input partition, the key and the topic.
func invalidOutputRefusesBatch(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	rec := &recorder{}
	o := acquireOutputs(t, w, BackendConfig{Mode: store.Transactional, Observer: rec}, in, 0, m.Identity(), []string{w.OutputTopic()})
	snapTopic := snapshotPartition(in).Topic
	bad := append(outputs(w, "fine"), store.Output{Topic: snapTopic, Key: []byte("k"), Value: []byte("v")})
	err := o.CommitBatch(context.Background(), store.Batch{
		Snapshots: []store.Snapshot{snap("k", "1", 1)}, Outputs: bad, Offset: 2,
	})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%s: output record of key \"k\" is for the snapshot topic %q", in, snapTopic)) {
		t.Fatalf("err = %v, want a refusal naming %s, the key and the snapshot topic", err, in)
	}
	big := store.Output{Topic: w.OutputTopic(), Key: []byte("big"), Value: make([]byte, store.DefaultMaxValueBytes)}
	err = o.CommitBatch(context.Background(), store.Batch{Outputs: []store.Output{big}, Offset: 2})
	var tl *store.ValueTooLargeError
	if !errors.As(err, &tl) || tl.OutputTopic != w.OutputTopic() || string(tl.Key) != "big" {
		t.Fatalf("err = %v, want a ValueTooLargeError naming the output topic and key", err)
	}
	if ev := rec.events(); len(ev) != 0 {
		t.Fatalf("a refused batch ran %d transactions", len(ev))
	}
	if got := w.ReadSnapshots(t, in); len(got) != 0 {
		t.Fatalf("a refused batch wrote %s", describe(got))
	}
}

// OutputMaxBytes is the max.message.bytes of World.OutputTopic: below
// the store's own size limit, so that only the broker refuses a record
// between the two.
const OutputMaxBytes = 64 << 10

// 12. An output the broker refuses for good (over its topic's
// max.message.bytes) fails the batch with a *store.OutputRefusedError
// naming that output, by its index in the batch, and no other; nothing of
// the batch becomes visible; the next owner commits the batch without it.
func brokerRefusedOutput(t *testing.T, w World) {
	in := input(w, 0)
	o := acquireOutputs(t, w, transactional, in, 0, w.Join(t).Identity(), []string{w.OutputTopic()})
	outs := outputs(w, "before", "huge", "after")
	outs[1].Value = make([]byte, OutputMaxBytes+1)
	err := o.CommitBatch(context.Background(), store.Batch{Snapshots: []store.Snapshot{snap("k", "1", 2)}, Outputs: outs, Offset: 3})
	var re *store.OutputRefusedError
	if !errors.As(err, &re) || !errors.Is(err, store.ErrOutputRefused) {
		t.Fatalf("err = %v, want a *store.OutputRefusedError", err)
	}
	if !slices.Equal(re.Outputs, []int{1}) || re.Topic != w.OutputTopic() || string(re.Key) != "key-huge" || re.Input != in {
		t.Fatalf("refused %v of topic %q key %q, input %s; want output 1 of %q, key-huge, input %s", re.Outputs, re.Topic, re.Key, re.Input, w.OutputTopic(), in)
	}
	if !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("err = %v, want it to match the broker's MESSAGE_TOO_LARGE", err)
	}
	if got := w.ReadOutputs(t, true); len(got) != 0 {
		t.Fatalf("the refused batch's outputs are visible: %s", describeOutputs(got))
	}
	if got := w.ReadSnapshots(t, in); len(got) != 0 {
		t.Fatalf("the refused batch's snapshots are visible: %s", describe(got))
	}
	if off, ok := w.CommittedOffset(t, in); ok {
		t.Fatalf("the refused batch committed offset %d", off)
	}
	_ = o.Close()
	next := acquireOutputs(t, w, transactional, in, 0, w.Join(t).Identity(), []string{w.OutputTopic()})
	mustNil(t, "the batch without the refused output", next.CommitBatch(context.Background(), store.Batch{
		Snapshots: []store.Snapshot{snap("k", "1", 2)}, Outputs: []store.Output{outs[0], outs[2]}, Offset: 3,
	}))
	if got := w.ReadOutputs(t, true); len(got) != 2 {
		t.Fatalf("outputs %s, want before and after", describeOutputs(got))
	}
}

// 12. An output topic that does not exist fails the acquisition that
// declares it, with a permanent configuration error (a *store.ConfigError)
// naming the topic, before anything is written; an output for a topic the
// acquisition does not declare is refused with the batch, before anything
// is sent (a *store.UndeclaredOutputError, a configuration error too).
func missingOutputTopic(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	b := w.Backend(t, transactional)
	_, err := b.Acquire(context.Background(), store.Acquisition{Input: in, Identity: newIdentity(m.Identity()),
		Outputs: []string{w.OutputTopic(), "no-such-output-topic"}})
	var ce *store.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(ce.Subject, `"no-such-output-topic"`) || !errors.Is(err, store.ErrMisconfigured) {
		t.Fatalf("err = %v, want a *store.ConfigError naming the missing output topic", err)
	}
	o := acquireOutputs(t, w, transactional, in, 0, m.Identity(), []string{w.OutputTopic()})
	err = o.CommitBatch(context.Background(), store.Batch{
		Snapshots: []store.Snapshot{snap("k", "1", 1)},
		Outputs:   append(outputs(w, "fine"), store.Output{Topic: "undeclared", Key: []byte("k")}), Offset: 2,
	})
	var ue *store.UndeclaredOutputError
	if !errors.As(err, &ue) || ue.Topic != "undeclared" || ue.Input != in || string(ue.Key) != "k" ||
		!errors.Is(err, store.ErrMisconfigured) || !errors.Is(err, store.ErrInvalidOutput) {
		t.Fatalf("err = %v, want a *store.UndeclaredOutputError naming %s, the key and the topic", err, in)
	}
	if got := w.ReadSnapshots(t, in); len(got) != 0 {
		t.Fatalf("the failed batch's snapshots are visible: %s", describe(got))
	}
	if got := w.ReadOutputs(t, false); len(got) != 0 {
		t.Fatalf("the refused batch's outputs were sent: %s", describeOutputs(got))
	}
	if off, ok := w.CommittedOffset(t, in); ok {
		t.Fatalf("the failed batch committed offset %d", off)
	}
}

// 12. A batch of outputs and an offset, with no snapshot (its folds kept
// their keys' states), commits like any other: the first transaction of a
// new owner, which has written nothing to the snapshot topic yet.
func outputsWithoutSnapshots(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	o := acquireOutputs(t, w, transactional, in, 0, m.Identity(), []string{w.OutputTopic()})
	mustNil(t, "batch", o.CommitBatch(context.Background(),
		store.Batch{Outputs: outputs(w, "o1", "o2"), Offset: 3}))
	if got := w.ReadOutputs(t, true); len(got) != 2 {
		t.Fatalf("read_committed outputs %s, want the batch's 2", describeOutputs(got))
	}
	if off, ok := w.CommittedOffset(t, in); !ok || off != 3 {
		t.Fatalf("committed offset %d (%v), want 3", off, ok)
	}
}

// 12. Plain mode has no transactions to put a batch in: it refuses.
func plainRefusesBatch(t *testing.T, w World) {
	m := w.Join(t)
	o := acquire(t, w, BackendConfig{Mode: store.Plain}, input(w, 0), 0, m.Identity())
	in := input(w, 0)
	err := o.CommitBatch(context.Background(), store.Batch{Outputs: outputs(w, "x"), Offset: 1})
	if err == nil || !strings.Contains(err.Error(), "exactly-once batches need Transactional mode") {
		t.Fatalf("err = %v, want a refusal that names Transactional mode", err)
	}
	if !errors.Is(err, store.ErrNotTransactional) || !strings.Contains(err.Error(), in.String()) {
		t.Fatalf("err = %v, want store.ErrNotTransactional naming %s", err, in)
	}
}

// 12. An owner that crashed in the middle of a batch left its outputs in an
// open transaction. read_committed never sees them, before the takeover
// (the last stable offset holds below them) or after it (the takeover
// aborts them); read_uncommitted sees them, and after the new owner's
// batch makes the same outputs again, it sees them twice.
func crashedBatchReadUncommitted(t *testing.T, w World) {
	m := w.Join(t)
	in := input(w, 0)
	var recs []wire.Record
	outs := outputs(w, "o1", "o2", "o3")
	for _, o := range outs {
		recs = append(recs, wire.Record{Key: o.Key, Value: o.Value})
	}
	// The lineage's first owner claimed the partition; a later one crashed.
	mustNil(t, "close the first owner", acquire(t, w, transactional, in, 0, m.Identity()).Close())
	w.CrashedOwnerOutputs(t, in, recs...)
	if got := w.ReadOutputs(t, false); len(got) != 3 {
		t.Fatalf("read_uncommitted sees %s of the open batch, want its 3 outputs", describeOutputs(got))
	}
	if got := w.ReadOutputs(t, true); len(got) != 0 {
		t.Fatalf("read_committed sees %s of an open batch", describeOutputs(got))
	}
	next := acquireOutputs(t, w, transactional, in, 0, m.Identity(), []string{w.OutputTopic()}) // the takeover aborts it
	if got := w.ReadOutputs(t, true); len(got) != 0 {
		t.Fatalf("read_committed sees %s of an aborted batch", describeOutputs(got))
	}
	mustNil(t, "the new owner's batch", next.CommitBatch(context.Background(),
		store.Batch{Snapshots: []store.Snapshot{snap("k", "1", 2)}, Outputs: outs, Offset: 3}))
	if got := w.ReadOutputs(t, true); len(got) != 3 {
		t.Fatalf("read_committed sees %s, want the new owner's 3 outputs once", describeOutputs(got))
	}
	if got := w.ReadOutputs(t, false); len(got) != 6 {
		t.Fatalf("read_uncommitted sees %s, want the aborted 3 and the committed 3", describeOutputs(got))
	}
}
