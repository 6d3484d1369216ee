package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// A missing input topic fails Join and Run at once with a
// *store.ConfigError naming the topic and the fix; the consumer never joins
// the group.
func TestMissingInputTopicOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		cfg := kafkaio.Config{SeedBrokers: w.c.ListenAddrs(), Group: "bank", Topics: []string{"accounts", "acounts"},
			ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext)}}
		start := time.Now()
		_, err := w.engine().Join(cfg)
		cerr, ok := errors.AsType[*store.ConfigError](err)
		if !ok || cerr.Subject != `topic "acounts"` || !strings.Contains(cerr.Fix, "CreateTopics") {
			t.Fatalf("Join: %v, want a *store.ConfigError naming topic acounts", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("the check took %v", d)
		}
		if err := w.engine().Run(context.Background(), cfg); !errors.Is(err, store.ErrMisconfigured) || !strings.Contains(err.Error(), `"acounts"`) {
			t.Fatalf("Run: %v", err)
		}
		groups, err := w.adm.ListGroups(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(groups) != 0 {
			t.Fatalf("groups %v: the consumer joined although a topic was missing", groups.Groups())
		}
	})
}

// CreateTopics creates a missing input topic with the partitions and
// replication asked for, and the engine consumes it.
func TestCreateInputTopicsOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		ctx := context.Background()
		compact := "compact"
		if err := kafka.CreateTopic(ctx, w.prod, "bank-ledger-snapshots", 3, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
			t.Fatal(err)
		}
		r, err := w.engine().Join(kafkaio.Config{
			SeedBrokers: w.c.ListenAddrs(), Group: "bank", Topics: []string{"ledger"},
			CreateTopics: true, CreatePartitions: 3, CreateReplicationFactor: 1,
			ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext)},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		tds, err := w.adm.ListTopics(ctx, "ledger")
		if err != nil || tds["ledger"].Err != nil || len(tds["ledger"].Partitions) != 3 {
			t.Fatalf("created topic: %+v %v", tds["ledger"], err)
		}
		tp := store.TopicPartition{Topic: "ledger", Partition: 2}
		for _, v := range []string{"10", "5", "-3"} {
			if err := w.prod.ProduceSync(ctx, &kgo.Record{Topic: "ledger", Partition: 2, Key: []byte("alice"), Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		for !committedAtEnd(w.adm, "bank", tp) {
			if err := r.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if got, ok, err := r.State(tp, []byte("alice")); err != nil || !ok || got != 12 {
			t.Fatalf("alice: %d %v %v, want 12", got, ok, err)
		}
	})
}

// membership is how twoMembers' b joins.
type membership struct {
	instanceID string              // kafkaio.Config.InstanceID
	dynamic    bool                // kafkaio.Config.DynamicMembership
	leave      bool                // kafkaio.Config.LeaveOnClose
	engine     *engine.Engine[int] // nil: w.engine(), on a Dir of its own
}

// twoMembers starts a (the group's leader: it joins first; a dynamic
// member) and b in w's group, both with the given protocol, session and
// heartbeat, b joining as m says, and steps both until each runs one
// partition. It returns them and a stop for b's stepping goroutine.
func twoMembers(t *testing.T, w *fakeWorld, session time.Duration, m membership, protocol kgo.Opt) (a, b *engine.Member[int], stepB func() error) {
	t.Helper()
	newRunner := func(e *engine.Engine[int], id string, dynamic, leave bool) *engine.Member[int] {
		if e == nil {
			e = w.engine()
		}
		r, err := e.Join(kafkaio.Config{
			SeedBrokers: w.c.ListenAddrs(), Group: "bank", Topics: []string{"accounts"},
			SessionTimeout: session, HeartbeatInterval: 200 * time.Millisecond, InstanceID: id, DynamicMembership: dynamic,
			LeaveOnClose: leave, ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext), protocol},
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a = newRunner(nil, "", true, false)
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	for len(a.Flows()) != 2 {
		if err := a.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	b = newRunner(m.engine, m.instanceID, m.dynamic, m.leave)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var bErr error
	wg.Go(func() {
		for ctx.Err() == nil {
			if err := b.Step(ctx); err != nil && ctx.Err() == nil {
				bErr = err
				return
			}
		}
	})
	stepB = func() error { cancel(); wg.Wait(); return bErr }
	for len(a.Flows()) != 1 || len(b.Flows()) != 1 {
		if err := a.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return a, b, stepB
}

// Close leaves the group: the other member takes the partition over at
// once, well within the session timeout. A static member does not, with
// an InstanceID or with its Dir's identity (the default with a Dir): the
// partition moves only when the session expires; unless LeaveOnClose,
// under either protocol.
func TestCloseLeavesGroupUnlessStatic(t *testing.T) {
	const session = 10 * time.Second
	for _, c := range []struct {
		name     string
		m        membership
		static   bool // joins with an instance id
		holds    bool // its partition waits for the session
		protocol string
	}{
		{"dynamic", membership{dynamic: true}, false, false, "classic-cooperative"},
		{"InstanceID", membership{instanceID: "member-b"}, true, true, "classic-cooperative"},
		{"the Dir's identity", membership{}, true, true, "classic-cooperative"},
		{"the Dir's identity, LeaveOnClose", membership{leave: true}, true, false, "classic-cooperative"},
		{"consumer: the Dir's identity, LeaveOnClose", membership{leave: true}, true, false, "consumer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t)
				w.produce("alice=10", "bob=5")
				// A static member's session runs from its last
				// heartbeat, which may come up to an interval before
				// its Close.
				var mu sync.Mutex
				var lastHeartbeat time.Time
				w.c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
					w.c.KeepControl()
					if req.(*kmsg.HeartbeatRequest).InstanceID != nil { // b's: a is dynamic
						mu.Lock()
						lastHeartbeat = time.Now()
						mu.Unlock()
					}
					return nil, nil, false
				})
				a, b, stopB := twoMembers(t, w, session, c.m, protocols[c.protocol])
				if id := b.Source().Identity().InstanceID; (id != "") != c.static {
					t.Fatalf("b joined with instance id %q", id)
				}
				if err := stopB(); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				if err := b.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
				for len(a.Flows()) != 2 {
					if err := a.Step(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				took := time.Since(start)
				mu.Lock()
				if c.holds && lastHeartbeat.Before(start) {
					took = time.Since(lastHeartbeat)
				}
				mu.Unlock()
				t.Logf("%s: a took the partition over %v after b's Close (or its last heartbeat before it)", c.name, took)
				// A leave is news at a's next heartbeat: at once under the
				// classic protocol, up to the server's heartbeat interval
				// (5 s) under the consumer protocol; a hold, the session.
				limit := session / 2
				if c.protocol == "consumer" {
					limit = session
				}
				if !c.holds && took >= limit {
					t.Fatalf("%s: took %v, the session is %v: Close did not leave", c.name, took, session)
				}
				if c.holds && took < session {
					t.Fatalf("static: took %v, before the session (%v) expired: Close left the group", took, session)
				}
				w.produce("alice=1")
				w.drain(a)
				w.check(a)
			})
		})
	}
}

// A static member that closes and starts again with the same InstanceID
// within the session gets its partition back, and the other member keeps
// its own throughout. Under the classic eager protocol (range) there is no
// rebalance at all: the member rejoins at the generation the group had.
// Under cooperative-sticky the coordinator rebalances once (the new
// process's subscription names no owned partitions, so its protocol
// metadata differs from the old one's), but incrementally: nothing is
// revoked from the other member.
func TestStaticMemberRestartKeepsAssignment(t *testing.T) {
	for _, name := range []string{"classic-eager", "classic-cooperative"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t)
				w.produce("alice=10", "bob=5")
				a, b, stopB := twoMembers(t, w, 30*time.Second, membership{instanceID: "member-b"}, protocols[name])
				if err := stopB(); err != nil {
					t.Fatal(err)
				}
				gen := a.Source().Identity().Generation
				held, aHeld := b.Flows(), a.Flows()
				if err := b.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
				w.produce("alice=1", "bob=2")
				b2, err := w.engine().Join(kafkaio.Config{
					SeedBrokers: w.c.ListenAddrs(), Group: "bank", Topics: []string{"accounts"},
					SessionTimeout: 30 * time.Second, HeartbeatInterval: 200 * time.Millisecond, InstanceID: "member-b",
					ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext), protocols[name]},
				})
				if err != nil {
					t.Fatal(err)
				}
				defer b2.Close(context.Background())
				start := time.Now()
				for len(b2.Flows()) != 1 {
					if err := b2.Step(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				if got := b2.Flows(); got[0] != held[0] {
					t.Fatalf("restarted static member runs %v, held %v before", got, held)
				}
				if g := b2.Source().Identity().Generation; name == "classic-eager" && g != gen {
					t.Fatalf("generation %d -> %d: the restart rebalanced", gen, g)
				}
				if d := time.Since(start); d >= 30*time.Second {
					t.Fatalf("the restarted member waited %v, the session", d)
				}
				if got := a.Flows(); len(got) != 1 || got[0] != aHeld[0] {
					t.Fatalf("a runs %v, ran %v", got, aHeld)
				}
			})
		})
	}
}

// recoveryLog records each recovery's kind and reason by partition.
type recoveryLog struct {
	engine.NopObserver
	mu   sync.Mutex
	kind map[store.TopicPartition]string
}

func (o *recoveryLog) Recovered(tp store.TopicPartition, _ int, _ time.Duration, kind, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.kind == nil {
		o.kind = map[store.TopicPartition]string{}
	}
	o.kind[tp] = kind + "/" + reason
}

func (o *recoveryLog) of(tp store.TopicPartition) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.kind[tp]
}

// With nothing configured but a Dir, a member is static: a restart on
// the same Dir within the session gets back the partition its cache
// holds, recovers it from the cache's checkpoint (a delta), and the
// other member, running all along, never takes it over; under every
// protocol. The control: a dynamic member's Close hands its partition to
// the other member at once.
func TestRestartOnItsDirGetsItsPartitionsBackWarm(t *testing.T) {
	for _, name := range []string{"classic-eager", "classic-cooperative", "consumer"} {
		for _, dynamic := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/dynamic=%v", name, dynamic), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { restartOnItsDir(t, name, dynamic) })
			})
		}
	}
}

func restartOnItsDir(t *testing.T, protocol string, dynamic bool) {
	const session = 30 * time.Second
	w := newFakeWorld(t)
	w.produce("alice=10", "bob=5")
	dir := t.TempDir()
	onDir := func(obs engine.Observer) *engine.Engine[int] {
		return w.engineWith(func(c *engine.Config[int]) { c.Dir, c.Observer = dir, obs })
	}
	eb := onDir(nil)
	a, b, stopB := twoMembers(t, w, session, membership{engine: eb, dynamic: dynamic}, protocols[protocol])
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	held, aHeld := b.Flows(), a.Flows()
	id := b.Source().Identity().InstanceID
	if (id == "") != dynamic {
		t.Fatalf("b joined with instance id %q", id)
	}
	for !committedAtEnd(w.adm, "bank", held[0]) { // its state and checkpoint in the cache
		if err := b.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	// a runs all along; did it ever take b's partition?
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var aErr error
	var moved atomic.Bool
	movedCh := make(chan struct{})
	wg.Go(func() {
		for ctx.Err() == nil {
			if err := a.Step(ctx); err != nil && ctx.Err() == nil {
				aErr = err
				return
			}
			if slices.Contains(a.Flows(), held[0]) && !moved.Swap(true) {
				close(movedCh)
			}
		}
	})
	stopA := func() { cancel(); wg.Wait() }
	defer stopA()

	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := eb.Close(); err != nil { // its Dir, free for the restart
		t.Fatal(err)
	}
	w.produce("alice=1", "bob=2")
	if dynamic {
		select {
		case <-movedCh:
		case <-time.After(session):
			t.Fatal("control: a dynamic member's partition did not move within the session after its Close")
		}
	}
	in := w.staticSource(protocols[protocol])
	in.DynamicMembership = dynamic
	rec := &recoveryLog{}
	b2, err := onDir(rec).Join(in)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close(context.Background())
	start := time.Now()
	for len(b2.Flows()) != 1 || rec.of(b2.Flows()[0]) == "" {
		if err := b2.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	stopA()
	if aErr != nil {
		t.Fatal(aErr)
	}
	if dynamic {
		if !moved.Load() {
			t.Fatal("control: a dynamic member's partition did not move at its Close")
		}
		return
	}
	if moved.Load() {
		t.Fatalf("a took %v over while its static owner restarted", held[0])
	}
	if got := b2.Source().Identity().InstanceID; got != id {
		t.Fatalf("restarted with instance id %q, was %q", got, id)
	}
	if got := b2.Flows(); got[0] != held[0] {
		t.Fatalf("restarted member runs %v, held %v before", got, held)
	}
	if got := rec.of(held[0]); got != "delta/"+engine.RecoveryCheckpoint {
		t.Fatalf("%v recovered %s, want a delta from the cache's checkpoint", held[0], got)
	}
	if d := time.Since(start); d >= session {
		t.Fatalf("the restarted member waited %v, the session", d)
	}
	if got := a.Flows(); len(got) != 1 || got[0] != aHeld[0] {
		t.Fatalf("a runs %v, ran %v", got, aHeld)
	}
}

// Two instances on copies of one Dir join with one identity: the second
// fences the first, whose step fails with a *store.ConfigError naming
// engine.Config.Dir, not the InstanceID it never set.
func TestCopiedDirIsReportedAsTheDir(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		w.produce("alice=10", "bob=5")
		dir := t.TempDir()
		first := w.engineWith(func(c *engine.Config[int]) { c.Dir = dir })
		if err := first.Close(); err != nil { // the identity is made; now copy the directory
			t.Fatal(err)
		}
		copied := t.TempDir()
		if err := os.CopyFS(copied, os.DirFS(dir)); err != nil {
			t.Fatal(err)
		}
		in := w.staticSource(protocols["classic-cooperative"])
		a, err := w.engineWith(func(c *engine.Config[int]) { c.Dir = dir }).Join(in)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close(context.Background())
		for len(a.Flows()) != 2 {
			if err := a.Step(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		b, err := w.engineWith(func(c *engine.Config[int]) { c.Dir = copied }).Join(in)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close(context.Background())
		if a.Source().Identity().InstanceID != b.Source().Identity().InstanceID {
			t.Fatal("the copy has an identity of its own: the test would prove nothing")
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() {
			for ctx.Err() == nil {
				_ = b.Step(ctx)
			}
		})
		defer func() { cancel(); wg.Wait() }()
		var stepErr error
		for range 200 {
			if stepErr = a.Step(context.Background()); stepErr != nil {
				break
			}
		}
		cerr, ok := errors.AsType[*store.ConfigError](stepErr)
		if !ok || cerr.Subject != "engine.Config.Dir" || !strings.Contains(cerr.Error(), "copies of one cache directory") {
			t.Fatalf("got %v, want a *store.ConfigError naming engine.Config.Dir", stepErr)
		}
		t.Log(stepErr)
	})
}

// Under the default balancer (the classic protocol, no balancer chosen:
// the group balances with the warm balancer), a dynamic member that comes
// back on its Dir after the other member took its partition over gets
// that partition back, the one its cache holds, and recovers it from the
// cache (a delta). (The choice itself, and its control, are
// TestBalanceWarm... in kafkaio.)
func TestWarmBalancerGivesAReturningMemberItsCacheOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		w.produce("alice=10", "bob=5")
		in := kafkaio.Config{SeedBrokers: w.c.ListenAddrs(), Group: "bank", Topics: []string{"accounts"}, DynamicMembership: true,
			HeartbeatInterval: 200 * time.Millisecond, ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext)}}
		dirB := t.TempDir()
		a, err := w.engine().Join(in)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close(context.Background())
		eb := w.engineWith(func(c *engine.Config[int]) { c.Dir = dirB })
		b, err := eb.Join(in)
		if err != nil {
			t.Fatal(err)
		}
		step := func(rs ...*engine.Member[int]) {
			for _, r := range rs {
				if err := r.Step(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		}
		for len(a.Flows()) != 1 || len(b.Flows()) != 1 {
			step(a, b)
		}
		held := b.Flows()[0]
		for !committedAtEnd(w.adm, "bank", held) {
			step(a, b)
		}
		groups, err := w.adm.DescribeGroups(context.Background(), "bank")
		if err != nil || groups["bank"].Protocol != kafkaio.WarmBalancerName {
			t.Fatalf("the group balances with %q (%v), want %q", groups["bank"].Protocol, err, kafkaio.WarmBalancerName)
		}
		if err := b.Close(context.Background()); err != nil { // leaves: a takes held over
			t.Fatal(err)
		}
		if err := eb.Close(); err != nil {
			t.Fatal(err)
		}
		for len(a.Flows()) != 2 {
			step(a)
		}
		w.produce("alice=1", "bob=2")
		rec := &recoveryLog{}
		b2, err := w.engineWith(func(c *engine.Config[int]) { c.Dir, c.Observer = dirB, rec }).Join(in)
		if err != nil {
			t.Fatal(err)
		}
		defer b2.Close(context.Background())
		for len(b2.Flows()) != 1 || len(a.Flows()) != 1 || rec.of(b2.Flows()[0]) == "" {
			step(a, b2)
		}
		if got := b2.Flows()[0]; got != held {
			t.Fatalf("the returning member runs %v; its cache holds %v", got, held)
		}
		if got := rec.of(held); got != "delta/"+engine.RecoveryCheckpoint {
			t.Fatalf("%v recovered %s, want a delta from the cache", held, got)
		}
	})
}

// When the group grows, a partition moves to the new member only once
// the new member has warmed it up: the balancer leaves it with its
// owner, which keeps serving it, and names it to the new member as a
// warm-up; the new member follows it as a replica, asks for a rebalance
// once caught up, and then takes it over from its cache (a delta). The
// control: under cooperative-sticky the new member takes it cold at once,
// and recovers it in full.
func TestScaleOutMovesAPartitionOnlyOnceWarmedUpOnKfake(t *testing.T) {
	for _, warm := range []bool{true, false} {
		t.Run(fmt.Sprintf("warm-balancer=%v", warm), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t)
				w.produce("alice=10", "bob=5", "carol=7", "dave=1")
				in := kafkaio.Config{SeedBrokers: w.c.ListenAddrs(), Group: "bank", Topics: []string{"accounts"},
					HeartbeatInterval: 200 * time.Millisecond, ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext)}}
				if !warm {
					in.ClientOpts = append(in.ClientOpts, kgo.Balancers(kgo.CooperativeStickyBalancer()))
				}
				step := func(rs ...*engine.Member[int]) {
					for _, r := range rs {
						if err := r.Step(context.Background()); err != nil {
							t.Fatal(err)
						}
					}
				}
				a, err := w.engine().Join(in)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close(context.Background())
				for len(a.Flows()) != 2 || !committedAtEnd(w.adm, "bank", a.Flows()[0]) || !committedAtEnd(w.adm, "bank", a.Flows()[1]) {
					step(a)
				}
				rec := &recoveryLog{}
				b, err := w.engineWith(func(c *engine.Config[int]) { c.Observer = rec }).Join(in)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close(context.Background())
				var warmedUp map[store.TopicPartition]bool
				for len(b.Flows()) != 1 || len(a.Flows()) != 1 || rec.of(b.Flows()[0]) == "" {
					step(a, b)
					warmedUp = noteWarmedUp(b, warmedUp)
					// Until b has caught a partition up, a serves both.
					if warm && warmedUp == nil && len(a.Flows()) != 2 {
						t.Fatalf("a gave up a partition (runs %v) before b warmed one up", a.Flows())
					}
				}
				w.produce("alice=1", "bob=2", "carol=3", "dave=4")
				for !w.caughtUp() {
					step(a, b)
				}
				checkLedger(t, w.want, "accounts", a, b)
				moved := b.Flows()[0]
				if !warm {
					if got := rec.of(moved); got == "delta/"+engine.RecoveryCheckpoint || warmedUp != nil {
						t.Fatalf("the control: %v recovered %s (warm-ups %v): the test proves nothing", moved, got, warmedUp)
					}
					return
				}
				if !warmedUp[moved] {
					t.Fatalf("b took %v over without warming it up (warmed up: %v)", moved, warmedUp)
				}
				if got := rec.of(moved); got != "delta/"+engine.RecoveryCheckpoint {
					t.Fatalf("%v recovered %s on the new member, want a delta from its warm-up", moved, got)
				}
				if sbs := b.Status().Standbys; len(sbs) != 0 {
					t.Fatalf("b still follows %+v after the move", sbs)
				}
			})
		})
	}
}

// noteWarmedUp adds to seen (made if nil) the partitions r follows as
// warm-ups, vouched and caught up.
func noteWarmedUp(r *engine.Member[int], seen map[store.TopicPartition]bool) map[store.TopicPartition]bool {
	for _, sb := range r.Status().Standbys {
		if sb.WarmUp && sb.Vouched && sb.Lag == 0 {
			if seen == nil {
				seen = map[store.TopicPartition]bool{}
			}
			seen[sb.Input] = true
		}
	}
	return seen
}
