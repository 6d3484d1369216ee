package kfakeworld

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
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
			w.retire(m, crashed, func() {
				p.r.Crash()
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
