//go:build it

package engine_test

import (
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/internal/netfreeze"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// Group timeouts of the fence tests: short, so a frozen member is evicted
// in seconds. Under the classic protocol the partitions move when the first
// of the frozen member's session and the join round's rebalance timeout
// expires: here the session, after ~3 s (with the two swapped, 5 s and 2 s,
// they moved after ~2 s). Under the consumer protocol (KIP-848) the session
// timeout is the broker's group.consumer.session.timeout.ms (6 s in
// it/kafka), and a frozen member never hears of the revocation that would
// start its rebalance timeout, so the partitions move after ~6 s whatever
// the client's rebalance timeout.
const (
	fenceSessionTimeout   = 3 * time.Second
	fenceRebalanceTimeout = 8 * time.Second
	fenceHeartbeat        = 500 * time.Millisecond
)

// fenceMember is one engine process: its own store backend, cache and
// group consumer, with one freezer over the consumer's connections and one
// over the store's (producers, recovery readers, the admin client).
type fenceMember struct {
	t               *testing.T
	consumer, store *netfreeze.Freezer
	r               *engine.Member[int]
	closed          bool
}

// memberOpts: a lazy member flushes and commits only when told to
// (FlushAll): its intervals are an hour. A member with a frozen store has
// its store side frozen before it joins.
type memberOpts struct{ lazy, frozenStore bool }

// member starts a member of w's group.
func (w *brokerWorld) member(mode store.Mode, protocol kgo.Opt, o memberOpts) *fenceMember {
	t := w.t
	var tcp net.Dialer
	m := &fenceMember{t: t, consumer: netfreeze.New(tcp.DialContext), store: netfreeze.New(tcp.DialContext)}
	b, err := kafka.New(context.Background(), kafka.Config{Mode: mode, SeedBrokers: w.brokers,
		TransactionalIDPrefix: w.topic, ClientOpts: []kgo.Opt{kgo.Dialer(m.store.Dial)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if o.frozenStore {
		m.store.Freeze()
	}
	persist, commit := 200*time.Millisecond, 400*time.Millisecond
	if o.lazy {
		persist, commit = time.Hour, time.Hour
	}
	e, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: b, Dir: t.TempDir(),
		PersistInterval: persist, CommitInterval: commit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	m.r, err = e.Join(kafkaio.Config{ // dynamic: the scenarios are the spec's, of dynamic members
		SeedBrokers: w.brokers, Group: w.topic + "-group", Topics: []string{w.topic}, DynamicMembership: true,
		ClientOpts: []kgo.Opt{protocol, kgo.Dialer(m.consumer.Dial),
			kgo.SessionTimeout(fenceSessionTimeout), kgo.RebalanceTimeout(fenceRebalanceTimeout),
			kgo.HeartbeatInterval(fenceHeartbeat)},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Runs before the engine and backend are closed (cleanups run last
	// first), and on a failed test too: nothing stays blocked or open.
	t.Cleanup(func() { m.close() })
	return m
}

func (m *fenceMember) freeze() { m.consumer.Freeze(); m.store.Freeze() }

// close thaws the member and leaves the group; it returns the leave's error.
func (m *fenceMember) close() error {
	m.consumer.Thaw()
	m.store.Thaw()
	if m.closed {
		return nil
	}
	m.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return m.r.Close(ctx)
}

// stepUntil steps the member until cond holds, at most d.
func (m *fenceMember) stepUntil(d time.Duration, what string, cond func() bool) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for !cond() {
		if err := m.r.Step(ctx); err != nil {
			m.t.Fatalf("waiting until %s: %v (errors: %v)", what, err, m.r.Errors())
		}
	}
}

// holds reports whether the member runs both partitions' flows and every
// account's state in them is want's.
func (w *brokerWorld) holds(r *engine.Member[int], want ledger) bool {
	if len(r.Flows()) != 2 {
		return false
	}
	for _, key := range []string{"alice", "bob", "carol", "dave", "erin"} {
		got, ok, err := r.State(store.TopicPartition{Topic: w.topic, Partition: int32(len(key) % 2)}, []byte(key))
		if err != nil {
			return false
		}
		if v, wok := want[key]; ok != wok || got != v {
			return false
		}
	}
	return true
}

// committed reads the group's committed offsets and the input's ends, per
// partition. A transaction's offset commit is pending until its markers
// are written, a little after EndTxn returns, and a stable read answers
// UNSTABLE_OFFSET_COMMIT for it meanwhile: such a read is polled again.
func (w *brokerWorld) committed() (committed, ends map[int32]int64) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	listed, err := w.adm.ListEndOffsets(ctx, w.topic)
	if err != nil {
		w.t.Fatal(err)
	}
	ends = map[int32]int64{}
	for p := range int32(2) {
		o, ok := listed.Lookup(w.topic, p)
		if !ok || o.Err != nil {
			w.t.Fatalf("end of %s/%d: %v", w.topic, p, o.Err)
		}
		ends[p] = o.Offset
	}
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		offs, err := w.adm.FetchOffsets(kadm.RequireStable(ctx), w.topic+"-group")
		committed = map[int32]int64{}
		for p := range int32(2) {
			if o, ok := offs.Lookup(w.topic, p); ok && o.Err != nil {
				err = errors.Join(err, o.Err)
			} else if ok {
				committed[p] = o.At
			}
		}
		if err == nil {
			return committed, ends
		}
		select {
		case <-ctx.Done():
			w.t.Fatalf("reading the committed offsets: %v", err)
		case <-poll.C:
		}
	}
}

// committedReaching waits, at most 10s, until the group's committed
// offsets are the input's ends, and returns them. FlushAll returns once
// its transactions ended (EndTxn answered), but their offsets become
// readable only when the coordinator has written the markers to
// __consumer_offsets, a moment later: meanwhile Kafka 4.3.1 answers a
// stable read of a partition whose first commit is pending with no
// offset at all (not UNSTABLE_OFFSET_COMMIT), and the partitions' two
// transactions land in either order.
func (w *brokerWorld) committedReaching() map[int32]int64 {
	w.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		committed, ends := w.committed()
		if maps.Equal(committed, ends) {
			return committed
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("after A's flush the group committed %v, want the input's ends %v (waited 10s)", committed, ends)
		}
		<-poll.C
	}
}

// kafka-flow#732 end to end on Kafka 4.3.1, with real rebalances, under
// each consumer protocol and in both store modes. Member A folds events it
// never flushes, then pauses (no steps, no network: its heartbeats stop).
// B joins, takes both partitions once the group gives up on A, folds newer
// events on the same keys, flushes and commits. A wakes: its store side
// first, so it flushes its stale state with its stale identity before its
// consumer learns it was evicted. A fresh member C then recovers.
// Transactional: A's flush is fenced on both partitions and C's state is
// the exact fold of the input (on Kafka 4.3.1 the producer epoch stops A
// first: B's takeover has fenced A's producer under the shared
// transactional.id; TestGenerationFenceOnKafka isolates the generation).
// Plain: A's stale snapshots land (its offset commit is rejected, too
// late), the offset stays B's, and C recovers A's stale value for exactly
// the keys A held dirty.
func TestFenceOnKafka(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(protocols)) {
		for _, mode := range []store.Mode{store.Transactional, store.Plain} {
			t.Run(name+"/"+mode.String(), func(t *testing.T) { fenceScript(t, protocols[name], mode) })
		}
	}
}

// pausedOwner runs steps 1 to 3 of the scenario: A alone folds, flushes
// and commits a first batch of events, folds a second one on keys of both
// partitions without flushing it, and pauses. It returns A, its stale fold
// and the keys A holds dirty.
func (w *brokerWorld) pausedOwner(protocol kgo.Opt, mode store.Mode) (a *fenceMember, stale ledger, dirty []string) {
	t := w.t
	t.Helper()
	// 1. A alone: folds everything, flushes and commits.
	w.produce("alice=+10", "bob=+5", "carol=+7", "dave=+1", "erin=+3", "alice=+2", "dave=+4")
	a = w.member(mode, protocol, memberOpts{lazy: true})
	a.stepUntil(30*time.Second, "A holds the first events", func() bool { return w.holds(a.r, w.want) })
	a.r.FlushAll(context.Background())
	if errs := a.r.Errors(); len(errs) > 0 {
		t.Fatalf("A's first flush: %v", errs)
	}
	flushed := w.committedReaching()

	// 2. A folds more events on keys of both its partitions and holds
	// them dirty: nothing flushed, nothing committed.
	w.produce("alice=+100", "dave=+20")
	a.stepUntil(30*time.Second, "A folds the second events", func() bool { return w.holds(a.r, w.want) })
	if c, _ := w.committed(); !maps.Equal(c, flushed) {
		t.Fatalf("A committed %v before the pause; the scenario needs its state dirty at %v", c, flushed)
	}

	// 3. A's pause: no steps, and neither its consumer nor its store
	// reaches the broker.
	a.freeze()
	return a, maps.Clone(w.want), []string{"alice", "dave"}
}

func fenceScript(t *testing.T, protocol kgo.Opt, mode store.Mode) {
	start := time.Now()
	w := newBrokerWorld(t)
	a, stale, dirty := w.pausedOwner(protocol, mode)
	paused := time.Now()

	// 4. B joins and gets both partitions once the group evicts A; it
	// recovers A's flushed state, replays A's dirty events, folds newer
	// events on the same keys, flushes and commits to the end.
	b := w.member(mode, protocol, memberOpts{})
	b.stepUntil(40*time.Second, "B owns both partitions", func() bool { return len(b.r.Flows()) == 2 })
	moved := time.Since(paused)
	w.produce("alice=+1000", "dave=+300", "carol=+50", "bob=-2")
	w.drain(b.r)
	checkLedger(t, w.want, w.topic, b.r)

	// 5. A wakes. Its application thread runs first: the store side
	// thaws, and A flushes its dirty state and commits with the identity
	// it published before the pause. Then its consumer thaws and it leaves.
	a.store.Thaw()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	a.r.FlushAll(ctx)
	cancel()
	aErrs := a.r.Errors()
	closeErr := a.close()
	t.Logf("A's stale flush: %v; A's leave: %v", aErrs, closeErr)
	fenced := fences(t, aErrs)

	// 6. The verdict: B leaves cleanly, a fresh member C recovers.
	if err := b.close(); err != nil {
		t.Fatal(err)
	}
	if errs := b.r.Errors(); len(errs) > 0 {
		t.Fatalf("B: %v", errs)
	}
	c := w.member(mode, protocol, memberOpts{})
	w.drain(c.r)
	switch mode {
	case store.Transactional:
		if len(fenced) != 2 {
			t.Fatalf("A's stale flush was fenced on %d of its 2 partitions; A's errors: %v", len(fenced), aErrs)
		}
		checkLedger(t, w.want, w.topic, c.r)
	case store.Plain:
		// The corruption: exactly the keys A held dirty went back to A's
		// stale fold, and the offset B committed skips the events
		// between; every other key is exact.
		for _, key := range []string{"alice", "bob", "carol", "dave", "erin"} {
			got, ok, err := c.r.State(store.TopicPartition{Topic: w.topic, Partition: int32(len(key) % 2)}, []byte(key))
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			want := w.want[key]
			if slices.Contains(dirty, key) {
				if stale[key] == want {
					t.Fatalf("%s: A's stale fold %d equals the exact fold; the scenario cannot tell them apart", key, want)
				}
				want = stale[key]
			}
			if !ok || got != want {
				t.Fatalf("%s = %d (%t) after recovery, want %d (exact fold %d, A's stale fold %d)",
					key, got, ok, want, w.want[key], stale[key])
			}
		}
		t.Logf("plain: alice and dave recovered as A's stale %d and %d; the exact folds are %d and %d",
			stale["alice"], stale["dave"], w.want["alice"], w.want["dave"])
	}
	t.Logf("B owned both partitions %v after A paused; the case took %v", moved.Round(10*time.Millisecond),
		time.Since(start).Round(10*time.Millisecond))
}

// fences returns the store.ErrFenced errors among errs, by input partition,
// and logs them.
func fences(t *testing.T, errs []error) map[store.TopicPartition]*store.FencedError {
	t.Helper()
	out := map[store.TopicPartition]*store.FencedError{}
	for _, err := range errs {
		var fe *store.FencedError
		if errors.Is(err, store.ErrFenced) && errors.As(err, &fe) {
			out[fe.Input] = fe
			t.Logf("fenced %s: identity %s/%d, transactional.id %q, reason %v",
				fe.Input, fe.Identity.MemberID, fe.Identity.Generation, fe.TransactionalID, fe.Reason)
		}
	}
	return out
}

// soleOwner reports whether the group has settled with m as its only
// member, assigned both input partitions.
func (w *brokerWorld) soleOwner(consumerProtocol bool, m *fenceMember) bool {
	id := m.r.Source().Identity().MemberID
	if id == "" {
		return false
	}
	ctx := context.Background()
	group := w.topic + "-group"
	var members []string
	var assigned kadm.TopicsSet
	if consumerProtocol {
		gs, err := w.adm.DescribeConsumerGroups(ctx, group)
		if err != nil || gs[group].Err != nil {
			return false
		}
		g := gs[group]
		for _, m := range g.Members {
			members = append(members, m.MemberID)
		}
		assigned = g.AssignedPartitions()
	} else {
		gs, err := w.adm.DescribeGroups(ctx, group)
		if err != nil || gs[group].Err != nil || gs[group].State != "Stable" {
			return false
		}
		g := gs[group]
		for _, m := range g.Members {
			members = append(members, m.MemberID)
		}
		assigned = g.AssignedPartitions()
	}
	return slices.Equal(members, []string{id}) && assigned.Lookup(w.topic, 0) && assigned.Lookup(w.topic, 1)
}

// The generation fence alone, end to end on Kafka 4.3.1, under each
// consumer protocol. In TestFenceOnKafka the new owner's takeover has
// already fenced A's producer (same transactional.id) by the time A
// flushes, so the producer epoch stops A before its group identity is
// looked at. Here A wakes in the takeover window instead: the group has
// evicted A and given both partitions to B, but B's store is paused, so its
// partitions-assigned callback has not initialised the producers yet. A's
// producer is live and unfenced; only its stale member id and generation
// (member epoch) can stop it, and they do. (The final state is the exact
// fold either way, since A's write would precede B's recovery; what this
// test proves is the coordinator's rejection of A's identity.)
func TestGenerationFenceOnKafka(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(protocols)) {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			w := newBrokerWorld(t)
			protocol := protocols[name]
			a, _, _ := w.pausedOwner(protocol, store.Transactional)
			paused := time.Now()

			// B joins with its store side paused: the group hands it both
			// partitions, and its callback waits before the takeover.
			b := w.member(store.Transactional, protocol, memberOpts{frozenStore: true})
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			poll := time.NewTicker(50 * time.Millisecond)
			defer poll.Stop()
			for !w.soleOwner(name == "consumer", b) {
				select {
				case <-ctx.Done():
					t.Fatal("the group did not settle with B as its sole member in 40s")
				case <-poll.C:
				}
			}
			moved := time.Since(paused)

			// A wakes in the window and flushes its dirty state.
			a.store.Thaw()
			fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
			a.r.FlushAll(fctx)
			fcancel()
			aErrs := a.r.Errors()
			closeErr := a.close()
			t.Logf("A's stale flush: %v; A's leave: %v", aErrs, closeErr)
			fenced := fences(t, aErrs)
			if len(fenced) != 2 {
				t.Fatalf("A's stale flush was fenced on %d of its 2 partitions; A's errors: %v", len(fenced), aErrs)
			}
			for tp, fe := range fenced {
				if fe.TransactionalID != "" || errors.Is(fe.Reason, kerr.ProducerFenced) || errors.Is(fe.Reason, kerr.InvalidProducerEpoch) {
					t.Fatalf("%s: fenced by the producer epoch (%v), want the group coordinator's rejection of A's identity", tp, fe.Reason)
				}
			}

			// B's store resumes: the takeover, recovery, newer events.
			b.store.Thaw()
			b.stepUntil(30*time.Second, "B runs both partitions", func() bool { return len(b.r.Flows()) == 2 })
			w.produce("alice=+1000", "dave=+300", "carol=+50", "bob=-2")
			w.drain(b.r)
			checkLedger(t, w.want, w.topic, b.r)
			if err := b.close(); err != nil {
				t.Fatal(err)
			}
			if errs := b.r.Errors(); len(errs) > 0 {
				t.Fatalf("B: %v", errs)
			}
			c := w.member(store.Transactional, protocol, memberOpts{})
			w.drain(c.r)
			checkLedger(t, w.want, w.topic, c.r)
			t.Logf("the group settled on B %v after A paused; the case took %v", moved.Round(10*time.Millisecond),
				time.Since(start).Round(10*time.Millisecond))
		})
	}
}
