package kfakeworld

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// joining is a scenario's start in which m1's JoinGroup is parked at the
// coordinator: m0 owns both input partitions, m1 has joined with its
// member id and waits for m0 to rejoin (m0 learns of the rebalance at its
// next heartbeat).
var joining = []world.Step{
	{Kind: world.Produce, Key: "a", Delta: 1}, // partition 1
	{Kind: world.Produce, Key: "b", Delta: 1}, // partition 0
	{Kind: world.Join, Member: 0},
	{Kind: world.Poll, Member: 0},
	{Kind: world.Advance, D: time.Second},
	{Kind: world.Poll, Member: 0},
	{Kind: world.Join, Member: 1},
	{Kind: world.Poll, Member: 1},
}

// group describes the world's consumer group: its state and how many
// members it has.
func group(t *testing.T, w *World) (state string, members int) {
	t.Helper()
	gs, err := w.adm.DescribeGroups(context.Background(), world.Group)
	if err != nil {
		t.Fatalf("describing the group: %v", err)
	}
	g := gs[world.Group]
	if g.Err != nil {
		t.Fatalf("describing the group: %v", g.Err)
	}
	return g.State, len(g.Members)
}

// startJoining runs joining and checks that m1 is still joining.
func startJoining(t *testing.T, w *World) {
	t.Helper()
	for _, s := range joining {
		if vs := w.Apply(s); len(vs) > 0 {
			t.Fatalf("%s: %v", s, vs)
		}
	}
	if gen := w.members[1].p.r.Source().Identity().Generation; gen > 0 {
		t.Fatalf("m1 has generation %d: not joining", gen)
	}
	if state, n := group(t, w); state != "PreparingRebalance" || n != 2 {
		t.Fatalf("the group is %s with %d members, want PreparingRebalance with m0 and the joining m1", state, n)
	}
}

// A member that crashes while its JoinGroup is parked is removed once its
// session expires, as on Kafka: the join completes with it (its response
// goes to a process that is gone), and its session, armed then, runs out.
// The partition it was given goes back to m0, which folds what was
// produced there after the crash.
func TestACrashWhileJoiningEndsWithTheSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, err := New(Config{Mode: store.Transactional})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		startJoining(t, w)
		for _, s := range []world.Step{
			{Kind: world.Crash, Member: 1},
			{Kind: world.Produce, Key: "a", Delta: 2},
			{Kind: world.Produce, Key: "b", Delta: 2},
			{Kind: world.Advance, D: 3 * time.Second}, // m0 rejoins: the join completes with m1
		} {
			if vs := w.Apply(s); len(vs) > 0 {
				t.Fatalf("%s: %v", s, vs)
			}
		}
		if state, n := group(t, w); state != "Stable" || n != 2 {
			t.Fatalf("after the join: the group is %s with %d members, want Stable with m0 and the crashed m1", state, n)
		}
		w.Apply(world.Step{Kind: world.Advance, D: w.cfg.SessionTimeout})
		if _, n := group(t, w); n != 1 {
			t.Fatalf("a session timeout after the join: the group has %d members, want m0 alone", n)
		}
		for _, v := range w.Quiesce() {
			t.Errorf("%s", v)
		}
	})
}

// kfake differs from Kafka here: a member whose connection is closed
// while its JoinGroup is parked may stay in the group, assigned, for good
// (until another member's join or leave rebalances the group), so its
// partitions are never consumed. When the join completes, kfake replies
// to every member through (*group).reply (kfake groups.go), which arms
// the member's session timer (updateHeartbeat) only if
// (*clientReq).reply returns true (client_conn.go); that selects between
// the connection's response channel, which has room, and the closed
// connection's done channel, so it fails half the time at random. The
// member then has no session timer; the pending-sync timer of
// completeRebalance would remove it after the rebalance timeout, but the
// leader's SyncGroup stops that timer (completeLeaderSync calls
// clearPendingSync). Kafka arms every member's session when a join
// completes, whatever became of the response (GroupCoordinator.onCompleteJoin:
// completeAndScheduleNextHeartbeatExpiration for each member; 4.x
// GroupMetadataManager.completeClassicGroupJoin:
// rescheduleClassicGroupMemberHeartbeat), and its pending-sync expiration
// (onExpirePendingSync) removes members that never synced in the Stable
// state too.
//
// The world's crash therefore leaves a crashed consumer's connections open
// and silent (TestACrashWhileJoiningEndsWithTheSession). This test pins
// kfake's behaviour with closed connections: the race makes a single run
// keep the member with probability 1/2, so it runs the scenario until one
// does, up to 40 times; if none does, kfake has changed, and the world's
// crash could close the consumer's connections again.
func TestKfakeKeepsAJoinerWhoseConnectionClosed(t *testing.T) {
	kept := func(t *testing.T) (kept bool) {
		synctest.Test(t, func(t *testing.T) {
			w, err := New(Config{Mode: store.Transactional})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			startJoining(t, w)
			// The crash as it was: every connection closed.
			m, p := w.members[1], w.members[1].p
			p.consumer.Kill()
			p.store.Kill()
			p.cbs.die()
			w.retire(m, crashed, func() {
				_ = p.r.Source().Close(context.Background())
			})
			w.Apply(world.Step{Kind: world.Advance, D: 3 * time.Second})
			// Past the session and the rebalance timeout (the world's,
			// and franz-go's default, 60 s, too), m0 polling all along.
			for range 10 {
				w.Apply(world.Step{Kind: world.Advance, D: 11 * time.Second})
				w.Apply(world.Step{Kind: world.Poll, Member: 0})
			}
			state, n := group(t, w)
			kept = state == "Stable" && n == 2
		})
		return kept
	}
	for run := range 40 {
		if kept(t) {
			t.Logf("run %d: the member whose connection closed while joining is still in the group, assigned, 113 s later", run)
			return
		}
	}
	t.Fatal("in 40 runs, kfake always removed a member whose connection closed while its JoinGroup was parked: kfake now arms its session as Kafka does")
}

// keyOn is the first of a, b, c, ... that lands on input partition p.
func keyOn(t *testing.T, p int32) string {
	t.Helper()
	for c := 'a'; c <= 'z'; c++ {
		if world.PartitionOf(string(c), Partitions) == p {
			return string(c)
		}
	}
	t.Fatalf("no one-letter key on partition %d", p)
	return ""
}

// members is how many members the world's group has, under its protocol.
func members(t *testing.T, w *World) int {
	t.Helper()
	if w.cfg.Protocol == sim.Consumer {
		gs, err := w.adm.DescribeConsumerGroups(context.Background(), world.Group)
		if err == nil {
			err = gs.Error()
		}
		if err != nil {
			t.Fatalf("describing the group: %v", err)
		}
		return len(gs[world.Group].Members)
	}
	_, n := group(t, w)
	return n
}

// flows are the partitions m's runner has flows for, once m is idle: a
// poll with nothing to fold goes on in the background until its next
// flush is due, and a recovery in a callback holds the runner, so time
// is advanced a second at a time until neither is in flight (at most
// 20 s).
func flows(t *testing.T, w *World, m *member) []store.TopicPartition {
	t.Helper()
	for range 20 {
		if m.p.idle() {
			return m.p.r.Flows()
		}
		apply(t, w, world.Step{Kind: world.Advance, D: time.Second})
	}
	t.Fatalf("m%d was still busy after 20 s", m.slot)
	return nil
}

// A crashed member stays in the group until its session expires, as on
// Kafka: its consumer's connections fall silent, so nothing more of it
// reaches the group (no heartbeat, no leave). Then the group evicts it,
// and the survivor takes its partition over and replays what it had
// folded, in virtual time. The crashed member writes, commits, reads and
// emits nothing after its crash.
func TestACrashedMemberIsEvictedWhenItsSessionExpiresOnKfake(t *testing.T) {
	for _, protocol := range []sim.Protocol{sim.ClassicEager, sim.ClassicCooperative, sim.Consumer} {
		t.Run(protocol.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w, err := New(Config{Mode: store.Transactional, Protocol: protocol})
				if err != nil {
					t.Fatal(err)
				}
				closed := false
				defer func() {
					if !closed {
						w.Close()
					}
				}()
				m0, m1 := w.members[0], w.members[1]
				k0, k1 := keyOn(t, 0), keyOn(t, 1)
				apply(t, w, world.Step{Kind: world.Produce, Key: k0, Delta: 1}, world.Step{Kind: world.Produce, Key: k1, Delta: 1},
					world.Step{Kind: world.Join, Member: 0}, world.Step{Kind: world.Poll, Member: 0},
					world.Step{Kind: world.Join, Member: 1})
				var lost []store.TopicPartition
				for range 20 {
					apply(t, w, world.Step{Kind: world.Poll, Member: 1}, world.Step{Kind: world.Poll, Member: 0})
					if lost = flows(t, w, m0); len(lost) == 1 && len(flows(t, w, m1)) == 1 {
						break
					}
					apply(t, w, world.Step{Kind: world.Advance, D: time.Second})
				}
				if len(lost) != 1 || len(flows(t, w, m1)) != 1 {
					t.Fatalf("the group did not split: m0 has flows %v, m1 %v", lost, flows(t, w, m1))
				}
				// Folded, and neither flushed nor committed: m0's last
				// poll has just flushed, so the next flush is not due.
				key := map[int32]string{0: k0, 1: k1}[lost[0].Partition]
				apply(t, w, world.Step{Kind: world.Produce, Key: k0, Delta: 2}, world.Step{Kind: world.Produce, Key: k1, Delta: 2},
					world.Step{Kind: world.Poll, Member: 0}, world.Step{Kind: world.Poll, Member: 1})
				if !m0.p.idle() {
					t.Fatal("m0's poll of the new events did not return")
				}
				if v, ok, err := m0.p.r.State(lost[0], []byte(key)); err != nil || !ok || v != 3 {
					t.Fatalf("m0's state of %s is %d (%t, %v), want 3: the new event is not folded", key, v, ok, err)
				}
				p := lost[0].Partition
				if committed, _ := w.committedOffsets(); committed[p] >= w.endOffsets()[p] {
					t.Fatalf("m0 committed partition %d to its end (%d) before the crash: nothing for a crash to lose", p, committed[p])
				}

				from := len(w.History().Ops())
				apply(t, w, world.Step{Kind: world.Crash, Member: 0})
				apply(t, w, world.Step{Kind: world.Advance, D: w.cfg.SessionTimeout - 2*time.Second}, world.Step{Kind: world.Poll, Member: 1})
				if n := members(t, w); n != 2 {
					t.Fatalf("%s after the crash, within the session timeout (%s), the group has %d members, want m1 and the crashed m0", w.cfg.SessionTimeout-2*time.Second, w.cfg.SessionTimeout, n)
				}
				if !m1.p.idle() {
					t.Fatal("m1's poll did not return")
				}
				if got := m1.p.r.Flows(); slices.Contains(got, lost[0]) {
					t.Fatalf("m1 has the flows %v before m0's session expired", got)
				}
				apply(t, w, world.Step{Kind: world.Advance, D: 3 * time.Second})
				if n := members(t, w); n != 1 {
					t.Fatalf("%s after the crash, past the session timeout (%s), the group has %d members, want m1 alone", w.cfg.SessionTimeout+time.Second, w.cfg.SessionTimeout, n)
				}
				for range 20 {
					apply(t, w, world.Step{Kind: world.Poll, Member: 1})
					if len(flows(t, w, m1)) == Partitions {
						break
					}
					apply(t, w, world.Step{Kind: world.Advance, D: time.Second})
				}
				if got := flows(t, w, m1); len(got) != Partitions {
					t.Fatalf("m0's session expired, and m1 has the flows %v, not every partition's", got)
				}
				for _, v := range w.Quiesce() {
					t.Errorf("%s", v)
				}
				w.Close() // the dead consumer's client closes: its revoke reaches no runner
				closed = true
				for _, op := range w.History().Ops()[from:] { // the quiescence's and the close's too
					if op.Member == 0 && op.Kind != history.Member { // a member line is the world's record, no call

						t.Errorf("m0 has crashed, and it made a %s call: %v", op.Kind, op)
					}
				}
			})
		})
	}
}
