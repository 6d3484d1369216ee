package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
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
			c.Standby, c.Logger = standby, slog.New(p.logs[i])
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
				t.Fatalf("standbys %+v without Config.Standby", st.Standbys)
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

// Standby needs a store that can follow, in Transactional mode, and says
// so at New.
func TestStandbyMisconfiguredOnSim(t *testing.T) {
	w := newSimWorld(t)
	plain, err := w.c.NewBackend(sim.BackendConfig{Mode: store.Plain, CreateTopics: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]store.Backend{
		"a Plain store":              plain,
		"a store that cannot follow": unfollowing{w.store},
	} {
		_, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: st, Standby: true})
		var ce *store.ConfigError
		if !errors.As(err, &ce) || ce.Subject != "engine.Config.Standby" {
			t.Fatalf("%s: New = %v, want a *store.ConfigError for Config.Standby", name, err)
		}
	}
}
