package world

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/store"
)

func replicate(m int) Step { return Step{Kind: Replicate, Member: m} }
func wipe(m int) Step      { return Step{Kind: Wipe, Member: m} }

var standby = Config{Mode: store.Transactional, Standby: true}

// splitOwners is m0 folding and committing a key on each partition, then
// m1 joining, the group split between them, and each member's replica
// reading what it does not own.
// The violations go to vs; with vs nil, any fails t.
func splitOwners(t *testing.T, w *World, vs *[]Violation) (a, b string) {
	t.Helper()
	do := func(steps ...Step) {
		t.Helper()
		if vs == nil {
			apply(t, w, steps...)
			return
		}
		for _, s := range steps {
			*vs = append(*vs, w.Apply(s)...)
		}
	}
	a, b = keyOn(t, 0, 2), keyOn(t, 1, 2)
	do(steps(join(0), produce(a, 5), produce(b, 2), committed(0), join(1))...)
	for range 10 {
		if len(w.members[0].src.Member().Owned()) == 1 && len(w.members[1].src.Member().Owned()) == 1 {
			break
		}
		do(poll(1), poll(0), advance(time.Second))
	}
	if len(w.members[0].src.Member().Owned()) != 1 || len(w.members[1].src.Member().Owned()) != 1 {
		t.Fatalf("the group did not split: m0 owns %v, m1 %v", w.members[0].src.Member().Owned(), w.members[1].src.Member().Owned())
	}
	do(steps(produce(a, 3), produce(b, 4), committed(0), committed(1), replicate(0), replicate(1))...)
	return a, b
}

// promotions lists w's promotions as "replica kind [reason]".
func promotions(w *World) []string {
	var out []string
	for _, p := range w.Promotions() {
		s := p.Replica + " " + p.Kind
		if p.Kind != "delta" {
			s += " " + p.Reason
		}
		out = append(out, s)
	}
	return out
}

// A member whose replica of a partition is current takes it over when its
// owner leaves, crashes, or is wiped with its disk, and recovers a delta
// from its replica's checkpoint; the states are the committed snapshots.
// With the replica's checkpoints dropped (the broken variant), the same
// promotion reads in full and is caught (11).
func TestAPromotionFromACurrentReplicaReadsADelta(t *testing.T) {
	for _, down := range []Step{leave(0), crash(0)} {
		t.Run(string(down.Kind), func(t *testing.T) {
			for _, cfg := range []Config{standby, {Mode: store.Transactional, Standby: true, WarmRestarts: true}} {
				w, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				splitOwners(t, w, nil)
				before := len(w.Promotions())
				apply(t, w, down, advance(11*time.Second), poll(1), poll(1))
				if vs := w.Quiesce(); len(vs) > 0 {
					t.Fatalf("%v", vs)
				}
				got := promotions(w)[before:]
				t.Logf("warm %t: promotions after %s: %v", cfg.WarmRestarts, down, got)
				if !slices.Contains(got, "current delta") {
					t.Fatalf("warm %t: the promotions after %s were %v; want one from a current replica, a delta", cfg.WarmRestarts, down, got)
				}
			}
		})
	}
	for _, c := range []struct {
		name    string
		variant func(*Config)
		want    int
	}{
		{"checkpoints dropped", func(c *Config) { c.StandbyCheckpointsDropped = true }, 11},
		{"skips records", func(c *Config) { c.StandbySkipsRecords = true }, 9},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := standby
			c.variant(&cfg)
			w, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			var vs []Violation
			splitOwners(t, w, &vs)
			for _, s := range []Step{crash(0), advance(11 * time.Second), poll(1), poll(1)} {
				vs = append(vs, w.Apply(s)...)
			}
			if len(vs) == 0 || vs[0].Invariant != c.want {
				t.Fatalf("violations %v; want %d", vs, c.want)
			}
			t.Logf("caught: %s", vs[0])
		})
	}
}

// A replica behind its partition (its member has not read since the
// owner's last commit) is a base all the same: the promotion reads the
// delta from the replica's checkpoint, and the states are the committed
// snapshots.
func TestAPromotionFromAReplicaBehindReadsTheRestOfTheDelta(t *testing.T) {
	w, err := New(standby)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	a, b := splitOwners(t, w, nil)
	// More committed by m0 after m1's last poll (its replica's last
	// read); m1 takes the partition over in its first poll after m0's
	// session expired, before its next standby round.
	apply(t, w, steps(produce(a, 7), produce(b, 8), committed(1), committed(0), crash(0), advance(11*time.Second), poll(1), poll(1))...)
	if vs := w.Quiesce(); len(vs) > 0 {
		t.Fatalf("%v", vs)
	}
	got := promotions(w)
	t.Logf("promotions %v", got)
	if !slices.Contains(got, "behind delta") {
		t.Fatalf("the promotions were %v; want one from a replica behind, a delta", got)
	}
}

// A replica that reads read_uncommitted (the broken variant) takes in the
// transaction a crashed owner left open, and is caught (4).
func TestAReplicaReadingUncommittedIsCaught(t *testing.T) {
	w2, err := New(Config{Mode: store.Transactional, Standby: true, FollowUncommitted: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	var vs []Violation
	for _, s := range steps(produce("a", 1), join(0), poll(0), join(1), poll(1), poll(0), crash(0), replicate(1)) {
		vs = append(vs, w2.Apply(s)...)
	}
	if len(vs) == 0 || vs[0].Invariant != 4 || !strings.Contains(vs[0].Detail, "standby replica") {
		t.Fatalf("violations %v; want 4, of a standby replica", vs)
	}
	t.Logf("caught: %s", vs[0])
}

// Worlds with standby replicas and with a lookup table replay from their
// seed to the same histories (the cluster's and the recorded one), the
// same promotions and the same lookups.
func TestSameStepsSameHistoryWithReplicasAndTables(t *testing.T) {
	a := keyOn(t, 0, 2)
	scenario := steps(join(0), produce(a, 5), produce("c", 1), tablePut(a), committed(0), join(1), replicate(1), poll(0),
		tableOpen("c"), produce("c", 2), replicate(0), readTable(1), crash(0), advance(11*time.Second), poll(1),
		tableEnd(true), wipe(1), join(0), join(2), replicate(2), produce(a, 0), committed(0), poll(2), Step{Kind: Recreate}, leave(0), poll(2))
	for _, cfg := range []Config{
		{Seed: 7, Mode: store.Transactional, Standby: true},
		{Seed: 7, Mode: store.Transactional, Standby: true, WarmRestarts: true},
		{Seed: 7, Mode: store.Transactional, Tables: true},
	} {
		vs, x := run(t, cfg, scenario)
		_, y := run(t, cfg, scenario)
		for _, v := range vs {
			t.Errorf("%s", v)
		}
		if !bytes.Equal(x.History(), y.History()) || !bytes.Equal(x.Recorder().JSON(), y.Recorder().JSON()) ||
			!slices.Equal(x.Promotions(), y.Promotions()) || x.TableStats() != y.TableStats() {
			t.Fatalf("%+v: the same seed and steps gave two histories", cfg)
		}
		t.Logf("standby %t, warm %t, tables %t: promotions %v, lookups %+v", cfg.Standby, cfg.WarmRestarts, cfg.Tables, promotions(x), x.TableStats())
	}
}

// A world without standby replicas or a lookup table records their
// steps as steps it could not carry out, never drops them silently (a
// script or a replay that uses them says so in its timeline).
func TestStepsOfWorldsWithoutReplicasOrTablesAreRecordedUnexpressed(t *testing.T) {
	_, w := run(t, Config{Seed: 1, Mode: store.Transactional}, steps(join(0), replicate(0), tablePut("a"), readTable(0), wipe(0)))
	n := 0
	for _, op := range w.Recorder().Ops() {
		if op.Kind == history.Unexpressed {
			n++
		}
	}
	if n != 4 {
		t.Fatalf("%d steps recorded as unexpressed, want 4", n)
	}
}
