package kfakeworld

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/store"
)

// stall508 is the scenario of seed 508 of rapid.SliceOfN(stepGen, 20, 40)
// (the step generator TestRandomScenariosOnKfake had then, before it drew
// with props.StepGen; props' lengths), which
// stalled the classic eager group in 3 or 4 runs in 30 while the members
// had franz-go's rebalance timeout (1 min): m1, the leader, is evicted
// (step 24) while the join it sent completes, m0 and m2 wait in SyncGroup
// for it, and kfake miscounts the round
// (TestKfakeMiscountsAMemberExpiredWhileSyncing). At quiescence the group
// sat in PreparingRebalance for the 5 min of Quiesce, its three members at
// generation 3, each with a JoinGroup parked, and the committed offsets
// short of the input's ends (invariant 6).
var stall508 = []world.Step{
	{Kind: world.Truncate, Partition: 1},
	{Kind: world.Poll, Member: 0},
	{Kind: world.Truncate, Partition: 1},
	{Kind: world.Produce, Key: "a", Delta: -2},
	{Kind: world.Leave, Member: 2},
	{Kind: world.Leave, Member: 0},
	{Kind: world.Advance, D: 6 * time.Second},
	{Kind: world.Evict, Member: 0},
	{Kind: world.Produce, Key: "a", Delta: 11},
	{Kind: world.Join, Member: 1},
	{Kind: world.Join, Member: 2},
	{Kind: world.Poll, Member: 1},
	{Kind: world.Produce, Key: "c", Delta: -1},
	{Kind: world.Flush, Member: 2},
	{Kind: world.Poll, Member: 1},
	{Kind: world.Flush, Member: 2},
	{Kind: world.Join, Member: 0},
	{Kind: world.Evict, Member: 0},
	{Kind: world.Produce, Key: "d", Delta: -1},
	{Kind: world.ForeignEnd, Commit: true},
	{Kind: world.ForeignOpen, Partition: 1, Hang: true},
	{Kind: world.Poll, Member: 1},
	{Kind: world.Produce, Key: "e", Delta: -3},
	{Kind: world.Evict, Member: 1},
	{Kind: world.Truncate, Partition: 0},
	{Kind: world.Flush, Member: 0},
	{Kind: world.Advance, D: 11 * time.Second},
	{Kind: world.Pause, Member: 0},
	{Kind: world.Evict, Member: 1},
	{Kind: world.Produce, Key: "a", Delta: -3},
	{Kind: world.Produce, Key: "a", Delta: 9},
	{Kind: world.Poll, Member: 0},
	{Kind: world.Produce, Key: "b", Delta: 9},
	{Kind: world.Poll, Member: 2},
	{Kind: world.Evict, Member: 2},
	{Kind: world.Produce, Key: "a", Delta: 7},
	{Kind: world.Evict, Member: 1},
	{Kind: world.ForeignEnd, Commit: true},
	{Kind: world.Advance, D: 6 * time.Second},
	{Kind: world.Poll, Member: 1},
}

// stall508Runs is how many times TestALeaderEvictedBeforeSyncingDoesNotStall
// runs stall508: with franz-go's rebalance timeout, 42 runs in 300 stalled
// (the goroutines' scheduling in the bubble decides whose session timer
// kfake runs first), so 30 runs would all pass by chance about once in 90;
// with the world's, none in 300.
const stall508Runs = 30

// The world's classic rebalance timeout (rebalanceTimeout) keeps kfake's
// miscount from happening and from holding the round: stall508 reaches
// quiescence (invariant 6) every run.
//
// Every invariant is judged. Under the race detector stall508 also broke
// invariant 2 or 5 (a lost write of key d or b) about once in 70 runs:
// franz-go's EndTransaction turning a commit into a silent abort, which
// store/kafka now prevents (TestAFirstTransactionCommitsWhenItsTopicIsPublishedLate).
func TestALeaderEvictedBeforeSyncingDoesNotStall(t *testing.T) {
	cfg := Config{Mode: store.Transactional}
	for run := range stall508Runs {
		synctest.Test(t, func(t *testing.T) {
			if vs := Run(cfg, stall508); len(vs) > 0 {
				t.Fatalf("run %d of %d: %s\n%s", run+1, stall508Runs, vs[0], world.Trace(stall508))
			}
		})
	}
}

// rawMember is a classic group member driven request by request, as
// franz-go's group management would (JoinGroup, SyncGroup, Heartbeat),
// so that a test decides what it sends and when.
type rawMember struct {
	t       *testing.T
	net     *kfake.VirtualNetwork
	seeds   []string
	id      string
	session time.Duration
	gen     int32
}

// rawRebalanceTimeout is franz-go's default (kgo.RebalanceTimeout): the
// members' rebalance.timeout.ms, kfake's deadline for a join round.
const rawRebalanceTimeout = 60 * time.Second

// client returns a new client: a parked request holds its connection
// (kfake reads a connection's next request once it answered the last).
func (m *rawMember) client() *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(m.seeds...), kgo.Dialer(m.net.DialContext))
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(cl.Close)
	return cl
}

// join sends a JoinGroup in the background; the channel gets its
// response when kfake answers.
func (m *rawMember) join() <-chan *kmsg.JoinGroupResponse {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group = "g"
	req.MemberID = m.id
	req.SessionTimeoutMillis = int32(m.session.Milliseconds())
	req.RebalanceTimeoutMillis = int32(rawRebalanceTimeout.Milliseconds())
	req.ProtocolType = "consumer"
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{"t"}
	proto := kmsg.NewJoinGroupRequestProtocol()
	proto.Name, proto.Metadata = "range", meta.AppendTo(nil)
	req.Protocols = append(req.Protocols, proto)
	cl := m.client()
	out := make(chan *kmsg.JoinGroupResponse, 1)
	go func() {
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			resp = nil
		}
		out <- resp
	}()
	return out
}

// joinNow joins (taking the member id kfake requires first) and waits
// for the response, which must come at once.
func (m *rawMember) joinNow() *kmsg.JoinGroupResponse {
	m.t.Helper()
	resp := answered(m.t, m.join(), "JoinGroup")
	if resp.ErrorCode == kerr.MemberIDRequired.Code {
		m.id = resp.MemberID
		resp = answered(m.t, m.join(), "JoinGroup")
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		m.t.Fatalf("JoinGroup: %v", err)
	}
	m.gen = resp.Generation
	return resp
}

// sync sends a SyncGroup in the background (a leader's assigns nothing:
// the test needs no partitions).
func (m *rawMember) sync() <-chan *kmsg.SyncGroupResponse {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.MemberID, req.Generation = "g", m.id, m.gen
	cl := m.client()
	out := make(chan *kmsg.SyncGroupResponse, 1)
	go func() {
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			resp = nil
		}
		out <- resp
	}()
	return out
}

// heartbeat sends a Heartbeat and returns its error code.
func (m *rawMember) heartbeat() int16 {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = "g", m.id, m.gen
	resp, err := req.RequestWith(context.Background(), m.client())
	if err != nil {
		m.t.Fatalf("Heartbeat: %v", err)
	}
	return resp.ErrorCode
}

// answered returns what ch got, failing the test if nothing came (the
// request is parked) once every goroutine of the bubble is blocked.
func answered[T any](t *testing.T, ch <-chan *T, what string) *T {
	t.Helper()
	synctest.Wait()
	select {
	case resp := <-ch:
		if resp == nil {
			t.Fatalf("%s failed", what)
		}
		return resp
	default:
		t.Fatalf("%s is parked, want an answer", what)
		return nil
	}
}

// parked reports whether ch has no answer yet once every goroutine of the
// bubble is blocked.
func parked[T any](ch <-chan *T) bool {
	synctest.Wait()
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// newRawGroup starts a bare kfake cluster (the world's options) and a
// group "g" in which leader a, alone, has joined and synced: Stable at
// generation 1. b is a second member yet to join.
func newRawGroup(t *testing.T) (c *kfake.Cluster, a, b *rawMember) {
	vn := new(kfake.VirtualNetwork)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(9092), kfake.ListenFn(vn.Listen),
		kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// a's session outlasts the rebalance timeout: kfake also expires a
	// member waiting in JoinGroup, which Kafka keeps alive as well; these
	// tests do not pin that.
	a = &rawMember{t: t, net: vn, seeds: c.ListenAddrs(), session: 2 * time.Minute}
	b = &rawMember{t: t, net: vn, seeds: c.ListenAddrs(), session: 5 * time.Second}
	if resp := a.joinNow(); resp.LeaderID != a.id {
		t.Fatalf("a is not the leader")
	}
	if resp := answered(t, a.sync(), "a's SyncGroup"); resp.ErrorCode != 0 {
		t.Fatalf("a's SyncGroup: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	return c, a, b
}

// completeJoinWithB has b join and a rejoin: the round completes at
// once (both joined), generation 2 with a the leader; kfake armed both
// sessions with the JoinGroup responses.
func completeJoinWithB(t *testing.T, c *kfake.Cluster, a, b *rawMember) {
	t.Helper()
	bJoin := b.join()
	if resp := answered(t, bJoin, "b's first JoinGroup"); resp.ErrorCode != kerr.MemberIDRequired.Code {
		t.Fatalf("b's first JoinGroup: %v", kerr.ErrorForCode(resp.ErrorCode))
	} else {
		b.id = resp.MemberID
	}
	bJoin = b.join()
	if !parked(bJoin) {
		t.Fatal("b's JoinGroup was answered before a rejoined")
	}
	if got := a.joinNow(); got.Generation != 2 || got.LeaderID != a.id {
		t.Fatalf("a's rejoin: generation %d, leader %s; want 2 and a", got.Generation, got.LeaderID)
	}
	b.gen = answered(t, bJoin, "b's JoinGroup").Generation
	if state := c.GroupInfo("g").State; state != "CompletingRebalance" {
		t.Fatalf("after the join the group is %s", state)
	}
}

// kfake differs from Kafka here, and together with franz-go's retries it
// can keep a classic group in PreparingRebalance for good, every member
// waiting in JoinGroup: the seed-508 liveness failure of
// TestRandomScenariosOnKfake's generator (3 or 4 runs in 30; the world
// now avoids it, see docs/testing.md, "The kfake world", and start).
//
//  1. kfake expires a member waiting in SyncGroup when its session runs
//     out (the timer updateHeartbeat, groups.go:1504, armed when
//     (*group).reply wrote the JoinGroup response, groups.go:1713; nothing
//     refreshes it while the SyncGroup is parked, groups.go:1047-1049, and
//     franz-go sends no heartbeats then), and removeMember counts the
//     parked SyncGroup as a parked JoinGroup (groups.go:1573-1574:
//     nJoining-- for any waitingReply). From
//     then on nJoining is one short of the members waiting in JoinGroup,
//     so the round never completes by count (rebalance, groups.go:1328:
//     nJoining >= len(members)). Kafka keeps a member alive while its
//     JoinGroup or SyncGroup waits (MemberMetadata.shouldKeepAlive) and
//     decrements numMembersAwaitingJoin only for a member awaiting join
//     (GroupMetadata.remove): the join completes once every member has
//     rejoined (hasAllMembersJoined).
//  2. The round then completes only at kfake's rebalance deadline, which
//     every JoinGroup restarts (rebalance, groups.go:1332-1351: "Always
//     reset the timer"). Kafka sets it once, when the round begins:
//     maybePrepareRebalance prepares (a new DelayedJoin) only from
//     Stable, CompletingRebalance or Empty. franz-go gives a JoinGroup
//     the rebalance timeout plus kgo.RequestTimeoutOverhead (10 s) to be
//     answered (kgo client.go:874-879, v1.22.3: def +
//     RebalanceTimeoutMillis), then sends it again: each waiting member
//     every 70 s, and two or three such members leave no 60 s gap.
//
// In the world (trace of the failing run): m1, the leader, is paused by
// an evict while the join it had sent completes; m0 and m2 wait in
// SyncGroup for its assignment; the three sessions, armed together, run
// out together, and when a follower's timer runs first nJoining goes to
// -1. The members rejoin and re-send their JoinGroups every 70 s; at
// quiescence kfake's group holds three members, each with a JoinGroup
// parked, nJoining 2, in PreparingRebalance for the 5 min of Quiesce.
func TestKfakeMiscountsAMemberExpiredWhileSyncing(t *testing.T) {
	// b waits in SyncGroup for the leader a, which does not sync; b's
	// session (5 s) runs out first.
	expire := func(t *testing.T, bSyncs bool) (c *kfake.Cluster, a *rawMember) {
		c, a, b := newRawGroup(t)
		completeJoinWithB(t, c, a, b)
		if bSyncs && !parked(b.sync()) {
			t.Fatal("b's SyncGroup was answered before the leader synced")
		}
		time.Sleep(b.session + time.Second)
		synctest.Wait()
		if info := c.GroupInfo("g"); info.State != "PreparingRebalance" || len(info.Members) != 1 {
			t.Fatalf("after b's session: the group is %s with %d members, want PreparingRebalance with a alone", info.State, len(info.Members))
		}
		if code := a.heartbeat(); code != kerr.RebalanceInProgress.Code {
			t.Fatalf("a's heartbeat: %v, want REBALANCE_IN_PROGRESS", kerr.ErrorForCode(code))
		}
		return c, a
	}
	t.Run("expired before syncing: the rejoin completes the round", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, a := expire(t, false)
			if got := a.joinNow(); got.Generation != 3 {
				t.Fatalf("a's rejoin: generation %d, want 3", got.Generation)
			}
		})
	})
	t.Run("expired while syncing: the round waits for the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, a := expire(t, true)
			// a is the group's only member and has rejoined: Kafka
			// completes the join now. kfake waits for its deadline.
			aJoin := a.join()
			time.Sleep(rawRebalanceTimeout - time.Second)
			if !parked(aJoin) {
				t.Fatal("a's rejoin was answered before the rebalance timeout: kfake counts the members waiting in JoinGroup right now, and the world's short classic rebalance timeout (rebalanceTimeout) may go")
			}
			if info := c.GroupInfo("g"); info.State != "PreparingRebalance" || len(info.Members) != 1 {
				t.Fatalf("the group is %s with %d members, want PreparingRebalance with a alone", info.State, len(info.Members))
			}
			time.Sleep(2 * time.Second)
			if got := answered(t, aJoin, "a's rejoin"); got.Generation != 3 {
				t.Fatalf("a's rejoin: generation %d, want 3", got.Generation)
			}
		})
	})
	t.Run("re-sent JoinGroups restart the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, a := expire(t, true)
			// a sends its JoinGroup again every 50 s (franz-go's members
			// each every 70 s, staggered), heartbeating in between to
			// keep its session (kfake refreshes it in PreparingRebalance):
			// the round never ends.
			var aJoin <-chan *kmsg.JoinGroupResponse
			for range 5 {
				aJoin = a.join()
				time.Sleep(25 * time.Second)
				if code := a.heartbeat(); code != kerr.RebalanceInProgress.Code {
					t.Fatalf("a's heartbeat: %v, want REBALANCE_IN_PROGRESS", kerr.ErrorForCode(code))
				}
				time.Sleep(25 * time.Second)
			}
			if !parked(aJoin) || c.GroupInfo("g").State != "PreparingRebalance" {
				t.Fatal("the round ended while a's JoinGroups came less than the rebalance timeout apart: kfake's deadline no longer restarts at every JoinGroup")
			}
			// Quiet for the rebalance timeout: the round ends.
			time.Sleep(rawRebalanceTimeout - 50*time.Second + time.Second)
			if got := answered(t, aJoin, "a's last JoinGroup"); got.Generation != 3 {
				t.Fatalf("a's last JoinGroup: generation %d, want 3", got.Generation)
			}
		})
	})
}
