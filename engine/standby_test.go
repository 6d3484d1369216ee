package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// Standby replicas on the simulated cluster (docs/operations.md, "Standby
// replicas"): a member follows the partitions it does not own, and when
// their owner crashes, its takeover reads only what the owner committed
// after the replica's last read. The crashed owner's open transaction is
// never in the replica: the state after the failover is the ledger's.

// standbyPair is two members of the group "bank", each with its own
// in-memory cache, and their logs.
type standbyPair struct {
	w    *simWorld
	rs   [2]*engine.Member[int]
	logs [2]*logCount
}

func newStandbyPair(t *testing.T, standby bool) *standbyPair {
	p := &standbyPair{w: newSimWorld(t), logs: [2]*logCount{{}, {}}}
	for i := range p.rs {
		e := p.w.engineWith(func(c *engine.Config[int]) {
			c.Logger = slog.New(p.logs[i])
			if standby {
				c.StandbyReplicas = 1
			}
		})
		p.rs[i] = p.w.runner(e)
	}
	return p
}

// owner is the runner owning tp, and the other one.
func (p *standbyPair) owner(tp store.TopicPartition) (own, other int) {
	for i, r := range p.rs {
		for _, f := range r.Flows() {
			if f == tp {
				return i, 1 - i
			}
		}
	}
	p.w.t.Fatalf("no runner owns %s", tp)
	return 0, 0
}

// settle steps both runners for a few seconds of virtual time: standby
// rounds run.
func (p *standbyPair) settle() {
	p.w.t.Helper()
	for range 3 {
		for _, r := range p.rs {
			if err := r.Step(context.Background()); err != nil {
				p.w.t.Fatal(err)
			}
		}
		p.w.c.Advance(time.Second)
	}
}

func TestStandbyFailoverReadsOnlyTheDeltaOnSim(t *testing.T) {
	for _, tc := range []struct {
		name    string
		standby bool
		kind    string // the takeover's recovery: "kind reason"
	}{
		{"with a standby", true, "delta "},
		{"without (the baseline)", false, "full " + engine.RecoveryNoCheckpoint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newStandbyPair(t, tc.standby)
			w := p.w
			for i := range 20 {
				w.produce("alice=+"+strconv.Itoa(i+1), "bob=+1", "carol=+2", "dave=+3", "erin=+4")
			}
			w.drain(p.rs[0], p.rs[1])
			p.settle()
			in0 := store.TopicPartition{Topic: "accounts", Partition: 0}
			own, other := p.owner(in0)
			st := p.rs[other].Status()
			if tc.standby {
				if len(st.Standbys) != 1 || st.Standbys[0].Input != in0 || !st.Standbys[0].Vouched || st.Standbys[0].Lag != 0 {
					t.Fatalf("the other member's standbys = %+v, want %s followed, vouched, lag 0", st.Standbys, in0)
				}
				b, err := json.Marshal(st)
				if err != nil || !strings.Contains(string(b), `"standbys":[{"topic":"accounts","partition":0,`) {
					t.Fatalf("the status as JSON = %s (%v), want its standbys", b, err)
				}
			} else if len(st.Standbys) != 0 {
				t.Fatalf("standbys %+v without Config.StandbyReplicas", st.Standbys)
			}
			// More input the owner commits, which the replica reads in
			// its next rounds, and then a last change it commits after
			// them.
			w.produce("dave=+100", "erin=close")
			w.drain(p.rs[0], p.rs[1])
			p.settle()
			w.produce("dave=+1000")
			for !w.caughtUp() {
				if err := p.rs[own].Step(context.Background()); err != nil {
					t.Fatal(err)
				}
				w.c.Advance(time.Second)
			}
			// The owner crashes with a transaction of a flush open on its
			// snapshot partition: the takeover aborts it, and no reader
			// (the replica least of all) may ever see it.
			p.rs[own].Source().(*simsource.Source).Member().Stall()
			crashed := w.c.InitProducerID(store.TransactionalID("bank", in0), time.Minute)
			if _, err := crashed.Produce(store.TopicPartition{Topic: "bank-accounts-snapshots", Partition: 0},
				wire.EncodeSnapshot("", store.Snapshot{Key: []byte("dave"), Value: []byte("-999999"), Offset: 1 << 40})); err != nil {
				t.Fatal(err)
			}
			recoveryLines(p.logs[other]) // forget the first recoveries
			for range 120 {
				if err := p.rs[other].Step(context.Background()); err != nil {
					t.Fatal(err)
				}
				w.c.Advance(time.Second)
				if len(p.rs[other].Flows()) == 2 && w.caughtUp() {
					break
				}
			}
			if len(p.rs[other].Flows()) != 2 {
				t.Fatalf("the surviving member owns %v after the owner's session expired", p.rs[other].Flows())
			}
			got := recoveryLines(p.logs[other])["accounts/0"]
			if !strings.HasPrefix(got, tc.kind+" ") {
				t.Fatalf("the takeover of accounts/0 recovered %q, want %q", got, tc.kind)
			}
			if tc.standby && got != "delta  0" {
				// The replica went on following while the owner's
				// session ran out: it had read dave's last change.
				t.Fatalf("the takeover's delta read %q, want 0 snapshots: the replica had read all the crashed owner committed", got)
			}
			w.check(p.rs[other])
		})
	}
}

// unfollowing is a store that cannot follow partitions.
type unfollowing struct{ store.Backend }

func (unfollowing) CanFollow() bool { return false }

// StandbyReplicas needs a store that can follow, in Transactional mode,
// and the group report, and a count that is not negative; each refusal
// says so naming the field.
func TestStandbyMisconfiguredOnSim(t *testing.T) {
	w := newSimWorld(t)
	plain, err := w.c.NewBackend(sim.BackendConfig{Mode: store.Plain, CreateTopics: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]engine.Config[int]{
		"a Plain store":               {Store: plain, StandbyReplicas: 1},
		"a store that cannot follow":  {Store: unfollowing{w.store}, StandbyReplicas: 1},
		"a negative count":            {Store: w.store, StandbyReplicas: -1},
		"no group report to place by": {Store: w.store, StandbyReplicas: 1, GroupReportInterval: -1},
	} {
		cfg.Fold, cfg.Codec = balance, intCodec{}
		_, err := engine.New(cfg)
		var ce *store.ConfigError
		if !errors.As(err, &ce) || ce.Subject != "engine.Config.StandbyReplicas" {
			t.Fatalf("%s: New = %v, want a *store.ConfigError for Config.StandbyReplicas", name, err)
		}
	}
}

// With StandbyReplicas N, each partition has exactly N replicas, none on
// its owner, spread over the group: the replicas in the whole group are N
// per partition whatever the group's size (memory and reads grow with the
// replica count, not the members), and no member keeps more than its
// share, rounded up.
func TestStandbyReplicasByCountOnSim(t *testing.T) {
	for _, c := range []struct{ members, n int }{{3, 1}, {5, 1}, {5, 2}} {
		t.Run(fmt.Sprintf("members=%d/n=%d", c.members, c.n), func(t *testing.T) {
			const parts = 12
			w := newSimWorld(t)
			if err := w.c.CreateTopic("wide", sim.TopicConfig{Partitions: parts}); err != nil {
				t.Fatal(err)
			}
			rs := make([]*engine.Member[int], c.members)
			for i := range rs {
				e := w.engineWith(func(cfg *engine.Config[int]) { cfg.StandbyReplicas = c.n })
				r, err := e.Join(simsource.New(w.c, "bank", sim.ClassicCooperative, 0, "wide"))
				if err != nil {
					t.Fatal(err)
				}
				rs[i] = r
			}
			replicas := func() (map[store.TopicPartition][]int, []int, int) {
				by, per, owned := map[store.TopicPartition][]int{}, make([]int, len(rs)), 0
				for i, r := range rs {
					st := r.Status()
					owned += len(st.Partitions)
					for _, sb := range st.Standbys {
						by[sb.Input] = append(by[sb.Input], i)
						per[i]++
						if slices.Contains(r.Flows(), sb.Input) {
							t.Fatalf("member %d keeps a replica of %s, which it owns", i, sb.Input)
						}
					}
				}
				return by, per, owned
			}
			settled := false
			for range 60 {
				for _, r := range rs {
					if err := r.Step(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				w.c.Advance(time.Second)
				by, _, owned := replicas()
				if owned == parts && len(by) == parts && !slices.ContainsFunc(slices.Collect(maps.Values(by)), func(ms []int) bool { return len(ms) != c.n }) {
					settled = true
					break
				}
			}
			by, per, owned := replicas()
			if !settled {
				t.Fatalf("after a minute: %d partitions owned, replicas %v; want %d of each of %d partitions", owned, by, c.n, parts)
			}
			total := 0
			share := (c.n*parts + c.members - 1) / c.members
			for i, n := range per {
				total += n
				if n > share {
					t.Errorf("member %d keeps %d replicas, its share is %d", i, n, share)
				}
			}
			if total != c.n*parts {
				t.Fatalf("%d replicas in the group, want %d (N per partition)", total, c.n*parts)
			}
			t.Logf("replicas per member %v", per)
		})
	}
}
