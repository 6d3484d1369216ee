package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
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

// twoMembers starts a (the group's leader: it joins first) and b in w's
// group, both classic-cooperative with the given session and heartbeat,
// b with instance id (static membership when not empty), and steps both
// until each runs one partition. It returns them, the group's generation
// then, and a stop for b's stepping goroutine.
func twoMembers(t *testing.T, w *fakeWorld, session time.Duration, instanceID string, protocol kgo.Opt) (a, b *engine.Member[int], stepB func() error) {
	t.Helper()
	newRunner := func(id string) *engine.Member[int] {
		r, err := w.engine().Join(kafkaio.Config{
			SeedBrokers: w.c.ListenAddrs(), Group: "bank", Topics: []string{"accounts"},
			SessionTimeout: session, HeartbeatInterval: 200 * time.Millisecond, InstanceID: id,
			ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext), protocol},
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a = newRunner("")
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	for len(a.Flows()) != 2 {
		if err := a.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	b = newRunner(instanceID)
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
// once, well within the session timeout. With an InstanceID it does not:
// the partition moves only when the session expires.
func TestCloseLeavesGroupUnlessStatic(t *testing.T) {
	const session = 10 * time.Second
	for _, c := range []struct {
		name, instanceID string
	}{{"dynamic", ""}, {"static", "member-b"}} {
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
					if id := req.(*kmsg.HeartbeatRequest).InstanceID; id != nil && *id == c.instanceID {
						mu.Lock()
						lastHeartbeat = time.Now()
						mu.Unlock()
					}
					return nil, nil, false
				})
				a, b, stopB := twoMembers(t, w, session, c.instanceID, protocols["classic-cooperative"])
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
				if c.instanceID != "" && lastHeartbeat.Before(start) {
					took = time.Since(lastHeartbeat)
				}
				mu.Unlock()
				t.Logf("%s: a took the partition over %v after b's Close (or its last heartbeat before it)", c.name, took)
				if c.instanceID == "" && took >= session/2 {
					t.Fatalf("dynamic: took %v, the session is %v: Close did not leave", took, session)
				}
				if c.instanceID != "" && took < session {
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
				a, b, stopB := twoMembers(t, w, 30*time.Second, "member-b", protocols[name])
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
