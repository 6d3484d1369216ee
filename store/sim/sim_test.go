package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

var (
	in0  = store.TopicPartition{Topic: "in", Partition: 0}
	in1  = store.TopicPartition{Topic: "in", Partition: 1}
	snp0 = store.TopicPartition{Topic: "snaps", Partition: 0}
)

func newCluster(t *testing.T) *Cluster {
	t.Helper()
	c := New(Config{Seed: 7})
	if err := c.CreateTopic("in", TopicConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic("snaps", TopicConfig{Partitions: 2, Compacted: true}); err != nil {
		t.Fatal(err)
	}
	return c
}

func rec(key, value string) wire.Record {
	return wire.Record{Key: []byte(key), Value: []byte(value)}
}

func keys(es []Entry) string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%s@%d", e.Record.Key, e.Offset))
	}
	return fmt.Sprint(out)
}

func offsets(t *testing.T, c *Cluster, tp store.TopicPartition) string {
	t.Helper()
	_, lso, hw, err := c.Offsets(tp)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("lso=%d hw=%d", lso, hw)
}

func read(t *testing.T, c *Cluster, committed bool) string {
	t.Helper()
	es, err := c.Read(snp0, committed)
	if err != nil {
		t.Fatal(err)
	}
	return keys(es)
}

func TestOpenTransactionPinsTheLastStableOffset(t *testing.T) {
	c := newCluster(t)
	c.Produce(snp0, rec("a", "1"))
	p := c.InitProducerID("tx", 0)
	produced(t)(p.Produce(snp0, rec("b", "2")))
	c.Produce(snp0, rec("c", "3"))
	if got := offsets(t, c, snp0); got != "lso=1 hw=3" {
		t.Fatalf("with b's transaction open: %s, want lso=1 hw=3", got)
	}
	if got := read(t, c, true); got != "[a@0]" {
		t.Fatalf("read_committed = %s: it must stop at the LSO", got)
	}
	if got := read(t, c, false); got != "[a@0 b@1 c@2]" {
		t.Fatalf("read_uncommitted = %s", got)
	}
	mustNil(t, p.EndTxn(true))
	if got := read(t, c, true); got != "[a@0 b@1 c@2]" {
		t.Fatalf("after COMMIT read_committed = %s; the marker at 3 is not a record", got)
	}
	if got := offsets(t, c, snp0); got != "lso=4 hw=4" {
		t.Fatalf("after COMMIT: %s", got)
	}
}

func TestAbortHidesTheTransactionsRecordsOnly(t *testing.T) {
	c := newCluster(t)
	p := c.InitProducerID("tx", 0)
	produced(t)(p.Produce(snp0, rec("t1", "")))
	c.Produce(snp0, rec("p2", ""))
	produced(t)(p.Produce(snp0, rec("t2", "")))
	mustNil(t, p.EndTxn(false))
	c.Produce(snp0, rec("p3", ""))
	if got := read(t, c, true); got != "[p2@1 p3@4]" {
		t.Fatalf("read_committed after ABORT = %s, want the other producer's records only", got)
	}
}

func TestInitProducerIDFencesAndAbortsThePreviousHolder(t *testing.T) {
	c := newCluster(t)
	old := c.InitProducerID("tx", 0)
	produced(t)(old.Produce(snp0, rec("unfinished", "")))
	fresh := c.InitProducerID("tx", 0)
	if got := offsets(t, c, snp0); got != "lso=2 hw=2" {
		t.Fatalf("after takeover: %s, want the open transaction aborted", got)
	}
	// Kafka 4's answers: the partition's leader refuses the old epoch's
	// Produce (INVALID_PRODUCER_EPOCH), the transaction coordinator its
	// EndTxn (PRODUCER_FENCED).
	if _, err := old.Produce(snp0, rec("zombie", "")); !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("old producer's produce: %v, want INVALID_PRODUCER_EPOCH", err)
	}
	if err := old.EndTxn(true); !errors.Is(err, kerr.ProducerFenced) {
		t.Fatalf("old producer's commit: %v, want PRODUCER_FENCED", err)
	}
	produced(t)(fresh.Produce(snp0, rec("next", "")))
	mustNil(t, fresh.EndTxn(true))
	if got := read(t, c, true); got != "[next@2]" {
		t.Fatalf("read_committed = %s", got)
	}
}

func TestEveryEndTxnBumpsTheEpoch(t *testing.T) {
	c := newCluster(t)
	p := c.InitProducerID("tx", 0)
	for i := range 3 {
		produced(t)(p.Produce(snp0, rec("k", "")))
		mustNil(t, p.EndTxn(true))
		if p.epoch != int16(i+1) {
			t.Fatalf("epoch after %d transactions = %d (KIP-890 bumps it on every EndTxn)", i+1, p.epoch)
		}
	}
}

func TestTimedOutTransactionAbortsAtTheNextAbortScan(t *testing.T) {
	c := newCluster(t)
	p := c.InitProducerID("tx", time.Minute)
	c.Advance(3 * time.Second)
	produced(t)(p.Produce(snp0, rec("k", "")))
	c.Advance(time.Minute - time.Second) // 62s: timed out at 63s
	if got := offsets(t, c, snp0); got != "lso=0 hw=1" {
		t.Fatalf("before the timeout: %s", got)
	}
	c.Advance(time.Second) // 63s: due, but the scan runs at 70s
	if got := offsets(t, c, snp0); got != "lso=0 hw=1" {
		t.Fatalf("between timeout and scan: %s", got)
	}
	c.Advance(7 * time.Second)
	if got := offsets(t, c, snp0); got != "lso=2 hw=2" {
		t.Fatalf("after the abort scan: %s", got)
	}
	if _, err := p.Produce(snp0, rec("late", "")); !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("the timed-out producer's produce: %v, want INVALID_PRODUCER_EPOCH", err)
	}
	if err := p.EndTxn(true); !errors.Is(err, kerr.ProducerFenced) {
		t.Fatalf("the timed-out producer's commit: %v, want PRODUCER_FENCED", err)
	}
}

func TestHangingTransactionNeverResolvesByItself(t *testing.T) {
	c := newCluster(t)
	p := c.InitProducerID("tx", time.Minute)
	produced(t)(p.Produce(snp0, rec("k", "")))
	c.Hang("tx")
	c.Advance(time.Hour)
	if got := offsets(t, c, snp0); got != "lso=0 hw=1" {
		t.Fatalf("hanging transaction resolved: %s", got)
	}
	c.AbortHanging("tx")
	if got := offsets(t, c, snp0); got != "lso=2 hw=2" {
		t.Fatalf("after the admin abort: %s", got)
	}
}

func TestCompactionNeverCleansPastTheLastStableOffset(t *testing.T) {
	c := newCluster(t)
	c.Produce(snp0, rec("k", "1"), rec("k", "2"))
	p := c.InitProducerID("tx", 0)
	produced(t)(p.Produce(snp0, rec("k", "3")))
	c.Produce(snp0, rec("k", "4"))
	mustNil(t, c.Compact(snp0))
	es, _ := c.Entries(snp0)
	if got := keys(es); got != "[k@1 k@2 k@3]" {
		t.Fatalf("after compaction with a transaction open from 2: %s, want only k@0 cleaned", got)
	}
	mustNil(t, p.EndTxn(false))
	mustNil(t, c.Compact(snp0))
	if got := read(t, c, true); got != "[k@3]" {
		t.Fatalf("after the abort and compaction: %s", got)
	}
}

func TestTruncationRegressesTheLogEnd(t *testing.T) {
	c := newCluster(t)
	c.Produce(snp0, rec("a", ""), rec("b", ""), rec("c", ""))
	mustNil(t, c.Truncate(snp0, 1))
	if got := offsets(t, c, snp0); got != "lso=1 hw=1" {
		t.Fatalf("after truncation: %s", got)
	}
	c.Produce(snp0, rec("d", ""))
	if got := read(t, c, true); got != "[a@0 d@1]" {
		t.Fatalf("after truncation and a new record: %s", got)
	}
}

// joined returns members of a group that all know the current generation.
func joined(t *testing.T, c *Cluster, p Protocol, n int) []*Member {
	t.Helper()
	var ms []*Member
	for range n {
		ms = append(ms, c.NewMember("g", p, "in"))
	}
	pollAll(ms, Callbacks{})
	return ms
}

func pollAll(ms []*Member, cb Callbacks) {
	for range 6 {
		for _, m := range ms {
			m.Poll(cb)
		}
	}
}

func txnCommit(c *Cluster, id store.GroupIdentity) error {
	p := c.InitProducerID("check-"+id.MemberID, 0)
	defer p.EndTxn(false)
	return p.TxnOffsetCommit(id, map[store.TopicPartition]int64{in0: 1})
}

// The identity matrix of Kafka 4.x's ClassicGroup.validateOffsetCommit.
func TestClassicCommitValidation(t *testing.T) {
	c := newCluster(t)
	empty := store.GroupIdentity{Group: "g", Generation: -1}
	if err := txnCommit(c, empty); err != nil {
		t.Fatalf("empty group, no identity: %v, want accepted", err)
	}
	if err := c.OffsetCommit(empty, map[store.TopicPartition]int64{in0: 1}); err != nil {
		t.Fatalf("empty group, plain, no identity: %v, want accepted", err)
	}
	m := joined(t, c, ClassicEager, 1)[0]
	c.Rebalance("g")
	pollAll([]*Member{m}, Callbacks{})
	id := m.Identity()
	if id.Generation != 2 {
		t.Fatalf("generation = %d, want 2", id.Generation)
	}
	cases := []struct {
		id          store.GroupIdentity
		txn, plain  error
		description string
	}{
		{id, nil, nil, "current member and generation"},
		{with(id, id.MemberID, 1), kerr.IllegalGeneration, kerr.IllegalGeneration, "stale generation"},
		{with(id, id.MemberID, 3), kerr.IllegalGeneration, kerr.IllegalGeneration, "future generation"},
		{with(id, "stranger", 2), kerr.UnknownMemberID, kerr.UnknownMemberID, "unknown member"},
		{with(id, id.MemberID, -1), kerr.IllegalGeneration, kerr.IllegalGeneration, "member without generation"},
		{with(id, "", 2), kerr.UnknownMemberID, kerr.UnknownMemberID, "generation without member"},
		{with(id, "", -1), nil, kerr.UnknownMemberID, "no identity: a transactional commit is NOT validated"},
	}
	for _, tc := range cases {
		if err := txnCommit(c, tc.id); !errors.Is(err, tc.txn) || (tc.txn == nil && err != nil) {
			t.Errorf("%s: TxnOffsetCommit = %v, want %v", tc.description, err, tc.txn)
		}
		err := c.OffsetCommit(tc.id, map[store.TopicPartition]int64{in0: 1})
		if !errors.Is(err, tc.plain) || (tc.plain == nil && err != nil) {
			t.Errorf("%s: OffsetCommit = %v, want %v", tc.description, err, tc.plain)
		}
	}
}

func with(id store.GroupIdentity, member string, gen int32) store.GroupIdentity {
	id.MemberID, id.Generation = member, gen
	return id
}

// The consumer protocol: the stale epoch is mapped to ILLEGAL_GENERATION on
// TxnOffsetCommit; KIP-1251 accepts a lagging epoch for partitions assigned
// at or before it.
func TestConsumerProtocolCommitValidation(t *testing.T) {
	for _, kip1251 := range []bool{true, false} {
		t.Run(fmt.Sprintf("kip1251=%t", kip1251), func(t *testing.T) {
			c := New(Config{Seed: 1, DisableKIP1251: !kip1251})
			c.CreateTopic("in", TopicConfig{Partitions: 2})
			ms := joined(t, c, Consumer, 1)
			lagging := ms[0].Identity()
			ms = append(ms, joined(t, c, Consumer, 1)...)
			pollAll(ms, Callbacks{})
			a := ms[0].Identity()
			if a.Generation <= lagging.Generation || len(ms[0].Owned()) != 1 {
				t.Fatalf("a = %v owning %v after b joined", a, ms[0].Owned())
			}
			p := c.InitProducerID("tx", 0)
			owned := ms[0].Owned()[0]
			moved := minus([]store.TopicPartition{in0, in1}, ms[0].Owned())[0]
			err := p.TxnOffsetCommit(lagging, map[store.TopicPartition]int64{owned: 1})
			if kip1251 && err != nil {
				t.Fatalf("lagging epoch on an owned partition: %v, want accepted under KIP-1251", err)
			}
			if !kip1251 && !errors.Is(err, kerr.IllegalGeneration) {
				t.Fatalf("lagging epoch without KIP-1251: %v, want ILLEGAL_GENERATION", err)
			}
			if err := p.TxnOffsetCommit(with(a, a.MemberID, -1), map[store.TopicPartition]int64{owned: 1}); !errors.Is(err, kerr.IllegalGeneration) {
				t.Fatalf("member with epoch -1 on an owned partition: %v, want ILLEGAL_GENERATION (as Kafka 4.3.1 answers)", err)
			}
			if err := p.TxnOffsetCommit(lagging, map[store.TopicPartition]int64{moved: 1}); !errors.Is(err, kerr.IllegalGeneration) {
				t.Fatalf("lagging epoch on a moved partition: %v, want ILLEGAL_GENERATION", err)
			}
			if err := c.OffsetCommit(lagging, map[store.TopicPartition]int64{moved: 1}); !errors.Is(err, kerr.StaleMemberEpoch) {
				t.Fatalf("plain commit with a lagging epoch: %v, want STALE_MEMBER_EPOCH", err)
			}
			if err := p.TxnOffsetCommit(with(a, "stranger", a.Generation), map[store.TopicPartition]int64{owned: 1}); !errors.Is(err, kerr.UnknownMemberID) {
				t.Fatalf("unknown member: %v", err)
			}

			// b leaves: a gets the moved partition back at a later epoch.
			// The rule is the partition's assignment epoch, not "the
			// previous epoch": two epochs behind is fine for the partition
			// a has held throughout, and a's epoch from before the moved
			// partition came back is not.
			ms[1].Leave(Callbacks{})
			pollAll(ms[:1], Callbacks{})
			now := ms[0].Identity()
			if len(ms[0].Owned()) != 2 || now.Generation <= a.Generation {
				t.Fatalf("a = %v owning %v after b left", now, ms[0].Owned())
			}
			err = p.TxnOffsetCommit(lagging, map[store.TopicPartition]int64{owned: 1})
			if kip1251 && err != nil {
				t.Fatalf("an epoch two behind, on a partition held since it: %v, want accepted", err)
			}
			if !kip1251 && !errors.Is(err, kerr.IllegalGeneration) {
				t.Fatalf("an epoch two behind without KIP-1251: %v", err)
			}
			if err := p.TxnOffsetCommit(a, map[store.TopicPartition]int64{moved: 1}); !errors.Is(err, kerr.IllegalGeneration) {
				t.Fatalf("an epoch before the partition's assignment: %v, want ILLEGAL_GENERATION", err)
			}
			if err := p.TxnOffsetCommit(now, map[store.TopicPartition]int64{moved: 1, owned: 1}); err != nil {
				t.Fatalf("the current epoch: %v", err)
			}
		})
	}
}

// What a revoke-time flush meets under each protocol when it commits with
// the identity published after the previous poll (the spec's table):
// eager and consumer commit, cooperative is fenced.
func TestRevokeTimeFlushPerProtocol(t *testing.T) {
	for p, want := range map[Protocol]error{
		ClassicEager:       nil,
		ClassicCooperative: kerr.IllegalGeneration,
		Consumer:           nil,
	} {
		t.Run(p.String(), func(t *testing.T) {
			c := newCluster(t)
			a := joined(t, c, p, 1)[0]
			published := a.Identity() // the engine's post-poll read
			b := c.NewMember("g", p, "in")
			var got error
			revoked := false
			cb := Callbacks{Revoked: func(m *Member, tps []store.TopicPartition) {
				if m == a && !revoked {
					revoked = true
					prod := c.InitProducerID("flush", 0)
					got = prod.TxnOffsetCommit(published, map[store.TopicPartition]int64{tps[0]: 5})
					prod.EndTxn(got == nil)
				}
			}}
			for range 6 {
				b.Poll(cb)
				a.Poll(cb)
				published = a.Identity()
			}
			if !revoked {
				t.Fatal("a partition was never revoked from a")
			}
			if !errors.Is(got, want) || (want == nil && got != nil) {
				t.Fatalf("revoke-time flush: %v, want %v", got, want)
			}
			if len(a.Owned()) != 1 || len(b.Owned()) != 1 {
				t.Fatalf("a owns %v, b owns %v: want one each", a.Owned(), b.Owned())
			}
		})
	}
}

// A rebalance that keeps this member's partitions still moves its
// generation; only the classic eager protocol fires callbacks for it.
func TestGenerationBumpWithoutMovingPartitions(t *testing.T) {
	for p, wantCallbacks := range map[Protocol]bool{ClassicEager: true, ClassicCooperative: false, Consumer: false} {
		t.Run(p.String(), func(t *testing.T) {
			c := newCluster(t)
			m := joined(t, c, p, 1)[0]
			before := m.Identity().Generation
			owned := m.Owned()
			called := false
			c.Rebalance("g")
			pollAll([]*Member{m}, Callbacks{
				Assigned: func(*Member, []store.TopicPartition) { called = true },
				Revoked:  func(*Member, []store.TopicPartition) { called = true },
			})
			if m.Identity().Generation != before+1 || !slices.Equal(m.Owned(), owned) {
				t.Fatalf("generation %d -> %d, owned %v -> %v", before, m.Identity().Generation, owned, m.Owned())
			}
			if called != wantCallbacks {
				t.Fatalf("callbacks fired = %t, want %t", called, wantCallbacks)
			}
		})
	}
}

func TestStalledMemberIsEvictedAndLearnsItLostItsPartitions(t *testing.T) {
	for _, p := range []Protocol{ClassicEager, ClassicCooperative, Consumer} {
		t.Run(p.String(), func(t *testing.T) {
			c := newCluster(t)
			ms := joined(t, c, p, 2)
			a, b := ms[0], ms[1]
			stale := a.Identity()
			a.Stall()
			for range 6 {
				c.Advance(10 * time.Second)
				b.Heartbeat()
				b.Poll(Callbacks{})
			}
			if got := len(b.Owned()); got != 2 {
				t.Fatalf("b owns %d partitions after a's eviction, want 2", got)
			}
			if err := txnCommit(c, stale); !errors.Is(err, kerr.UnknownMemberID) {
				t.Fatalf("evicted member's commit: %v, want UNKNOWN_MEMBER_ID", err)
			}
			a.Resume()
			var lost []store.TopicPartition
			a.Poll(Callbacks{Lost: func(_ *Member, tps []store.TopicPartition) { lost = tps }})
			if len(lost) != 1 {
				t.Fatalf("a learned it lost %v, want its one partition", lost)
			}
		})
	}
}

// Determinism: the same seed and the same operations give a byte-identical
// history; another seed gives another.
func TestSameSeedSameHistory(t *testing.T) {
	run := func(seed uint64) []byte {
		c := New(Config{Seed: seed})
		c.CreateTopic("in", TopicConfig{Partitions: 3})
		c.CreateTopic("snaps", TopicConfig{Partitions: 3, Compacted: true})
		r := rand.New(rand.NewPCG(seed, 0))
		protocols := []Protocol{ClassicEager, ClassicCooperative, Consumer}
		var ms []*Member
		var prods []*Producer
		for i := range 400 {
			switch r.IntN(9) {
			case 0:
				ms = append(ms, c.NewMember(fmt.Sprintf("g%d", r.IntN(3)), protocols[r.IntN(3)], "in"))
			case 1:
				if len(ms) > 0 {
					ms[r.IntN(len(ms))].Poll(Callbacks{})
				}
			case 2:
				if len(ms) > 0 {
					m := ms[r.IntN(len(ms))]
					if r.IntN(2) == 0 {
						m.Stall()
					} else {
						m.Resume()
					}
				}
			case 3:
				c.Advance(time.Duration(r.IntN(30)) * time.Second)
			case 4:
				prods = append(prods, c.InitProducerID(fmt.Sprintf("tx%d", r.IntN(4)), 0))
			case 5:
				if len(prods) > 0 {
					p := prods[r.IntN(len(prods))]
					p.Produce(store.TopicPartition{Topic: "snaps", Partition: int32(r.IntN(3))}, rec(fmt.Sprint(i), "v"))
				}
			case 6:
				if len(prods) > 0 && len(ms) > 0 {
					p := prods[r.IntN(len(prods))]
					p.TxnOffsetCommit(ms[r.IntN(len(ms))].Identity(), map[store.TopicPartition]int64{in0: int64(i)})
					p.EndTxn(r.IntN(3) > 0)
				}
			case 7:
				c.Compact(store.TopicPartition{Topic: "snaps", Partition: int32(r.IntN(3))})
			case 8:
				c.Produce(store.TopicPartition{Topic: "snaps", Partition: int32(r.IntN(3))}, rec(fmt.Sprint(i), "plain"))
			}
		}
		return c.HistoryJSON()
	}
	a, b := run(42), run(42)
	if !bytes.Equal(a, b) {
		t.Fatal("two runs of seed 42 produced different histories")
	}
	if len(a) < 10000 {
		t.Fatalf("history of %d bytes: the workload did too little to prove anything", len(a))
	}
	if bytes.Equal(a, run(43)) {
		t.Fatal("seeds 42 and 43 produced the same history")
	}
}

// produced fails the test if a produce failed.
func produced(t *testing.T) func([]int64, error) {
	return func(_ []int64, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Sleep waits on virtual time, parked as a read is: a driver sees it in
// Parked, and it goes on only once the clock has passed its end and the
// driver lets it (Wake, with SerialWakeups).
func TestSleepWaitsOnVirtualTime(t *testing.T) {
	c := New(Config{Seed: 1, SerialWakeups: true})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Sleep(context.Background(), 200*time.Millisecond)
	}()
	waitParked := func(wantParked, wantWoken int) {
		t.Helper()
		for {
			parked, woken, changed := c.Parked()
			if parked == wantParked && woken == wantWoken {
				return
			}
			<-changed
		}
	}
	waitParked(1, 0)
	c.Advance(100 * time.Millisecond)
	if parked, woken, _ := c.Parked(); parked != 1 || woken != 0 {
		t.Fatalf("after 100ms of a 200ms sleep: %d parked, %d woken; want 1, 0", parked, woken)
	}
	c.Advance(100 * time.Millisecond)
	waitParked(0, 1)
	select {
	case <-done:
		t.Fatal("the sleep ended before the driver let it go on")
	default:
	}
	if !c.Wake() {
		t.Fatal("Wake found no woken sleep")
	}
	<-done
}
