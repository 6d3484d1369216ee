package engine_test

// BenchmarkWarmRestartFailover (kfake) and BenchmarkWarmRestartFailoverBroker
// (build tag `it`, a real broker): the failover of one partition
// holding 1M keys (-warm.keys) of 100 B, to a member with a standby
// replica of it (Config.Standby, caught up) against a cold one (Standby
// off, an empty Dir). `make bench-failover` runs both and prints the
// table; docs/benchmarks.md, "Warm restarts", "Failover to a standby",
// has the numbers. The members heartbeat every -warm.heartbeat (100 ms):
// a member learns of the rebalance from a heartbeat's answer, so with a
// standby most of a failover is that wait, and the default 1 s would
// measure the heartbeat rather than the replica.
//
// The fixture is warm_bench_test.go's, of one input partition and no
// writer: seeded once by an owner that folds one record per key and stops
// cleanly. Then an owner (the active member) starts on the seed's Dir and
// recovers its delta, untimed. Each op (sub-benchmarks cold, standby,
// cold#01, standby#01, ...: each standby op paired with the cold op just
// before it) is:
//
//   - prepare (untimed): a new member joins the group, on an empty Dir of
//     its own, with a kill switch (crash_test.go); the active keeps the
//     partition (franz-go's cooperative-sticky balancer, checked). cold:
//     Standby off; the op waits for the member's first (empty)
//     assignment, in the active's generation (the join's rebalance over
//     for both). standby: Standby on; the op waits for its replica of
//     the partition to be caught up and vouched for (StandbyStatus
//     Vouched, Lag 0).
//   - the timed failover: the active is killed as crashAndLeave kills (the
//     kill switch, then its consumer leaves the group: no session timeout
//     is measured, and nothing of the active is flushed or revoked), until
//     the new member's `partition recovered` log line (its Logger: the
//     benchmark waits for it, it never sleeps).
//   - check (untimed): the recovery's kind (cold: full, no_checkpoint;
//     standby: delta), the snapshots it read (cold: every key's; standby:
//     at most warmFailoverSlack) and warmSampled random keys' state (the
//     same keys every op) through
//     the new member's Member.State. The killed active is closed; the new
//     member is the active of the next op.
//
// Reported: failover-ms (the kill to the line), join-ms (the kill to the
// takeover's start: the leave and the rebalance), recovery-ms (the
// takeover: PartitionStatus.Recovery.Duration, the fence and the snapshot
// read), snapshots and delta-partitions.
//
// They are benchmarks only: `go test` without -bench runs none of this.

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/snapfence/snapfence/engine"
)

// warmFailoverSlack bounds the snapshots a caught-up standby's takeover
// may read: the active writes nothing once seeded, so its delta is empty
// but for what the log may hold past the replica's checkpoint.
const warmFailoverSlack = 1000

// warmFailoverShape is the failover: 1M keys in one partition.
func warmFailoverShape() warmShape {
	return warmShape{keys: *warmKeys, partitions: 1, noWriter: true}
}

// failoverVariant is a sub-benchmark of a failover round.
type failoverVariant struct {
	name    string
	standby bool   // the new member's Config.Standby
	kind    string // its takeover's recovery kind
}

var failoverVariants = []failoverVariant{
	{name: "cold", kind: "full"},
	{name: "standby", standby: true, kind: "delta"},
}

// BenchmarkWarmRestartFailover runs the failover rounds on a one-broker
// kfake cluster on loopback TCP (real time).
func BenchmarkWarmRestartFailover(b *testing.B) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	benchFailover(b, c.ListenAddrs(), false)
}

// benchFailover seeds a one-partition fixture on the cluster at addrs and
// runs the failover rounds. On a shared broker (shared) the fixture's
// topics are deleted at the end.
func benchFailover(b *testing.B, addrs []string, shared bool) {
	fx := newWarmFixture(b, addrs, warmFailoverShape())
	fx.deleteTopics = shared
	defer fx.close()
	active := fx.launch(b, fx.warmDir, warmMember{killable: true, want: 1, heartbeat: *warmHeartbeat})
	active.waitRecovered(b)
	defer func() { active.stop(b) }()
	outer := b
	for range *warmRounds {
		for _, v := range failoverVariants {
			b.Run(v.name, func(b *testing.B) {
				for range b.N {
					b.StopTimer()
					// next outlives this sub-benchmark (it is the next
					// one's active): its Dir and its cleanup are the
					// outer benchmark's.
					next := fx.launch(b, outer.TempDir(), warmMember{killable: true, standby: v.standby, want: 1, life: outer, heartbeat: *warmHeartbeat})
					fx.waitFollower(b, active, next, v.standby)
					b.StartTimer()
					killAt := time.Now()
					active.kill(b)
					next.waitRecovered(b)
					b.StopTimer()
					next.status = next.r.Status()
					active.stop(b)
					active = next
					fx.checkFailover(b, v, next)
					fx.checkSample(b, next)
					next.reportFailover(b, killAt)
					b.StartTimer()
				}
			})
		}
	}
}

// waitFollower waits until next has joined the group without a partition,
// active still owning the one partition; with standby, until next's
// replica of it is caught up and vouched for. It polls the statuses (the
// condition, not a time, ends the wait).
func (fx *warmFixture) waitFollower(b *testing.B, active, next *warmOwner, standby bool) {
	b.Helper()
	ready := func() bool {
		a, n := active.r.Status(), next.r.Status()
		// Both in the same generation: the join's rebalance is over
		// for both members, so the kill does not land in it.
		if len(a.Partitions) != 1 || !a.Ready() || !n.Joined || len(n.Partitions) != 0 ||
			a.Identity.Generation != n.Identity.Generation {
			return false
		}
		if !standby {
			return true
		}
		return len(n.Standbys) == 1 && n.Standbys[0].Input == a.Partitions[0].Input &&
			n.Standbys[0].Vouched && n.Standbys[0].Lag == 0 && n.Standbys[0].Err == nil
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(warmDeadline)
	defer deadline.Stop()
	for !ready() {
		select {
		case <-tick.C:
		case err := <-next.runErr:
			next.runErr <- err
			b.Fatalf("the new member's Run returned: %v\n%s", err, next.log.problems())
		case <-deadline.C:
			b.Fatalf("not in %v: the new member following (standby %v): active %+v, new %+v\n%s", warmDeadline, standby,
				active.r.Status(), next.r.Status(), next.log.problems())
		}
	}
	if n := len(next.log.recoveries()); n != 0 {
		b.Fatalf("the new member recovered %d partitions before the failover, want none", n)
	}
}

// kill kills the owner's process as crashAndLeave does: the kill switch,
// then its consumer leaves the group (the partition moves at once).
func (o *warmOwner) kill(b *testing.B) {
	b.Helper()
	o.killed = true
	o.killSwitch.dead.Store(true)
	if err := o.r.Source().Close(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// checkFailover checks the takeover's recovery: its kind and the
// snapshots it read.
func (fx *warmFixture) checkFailover(b *testing.B, v failoverVariant, o *warmOwner) {
	b.Helper()
	recs := o.log.recoveries()
	if len(recs) != 1 {
		b.Fatalf("%s: %d recoveries, want 1", v.name, len(recs))
	}
	rec := recs[0]
	switch {
	case rec.kind != v.kind:
		b.Errorf("%s: recovered %s (reason %q), want %s", v.name, rec.kind, rec.reason, v.kind)
	case v.standby && rec.snapshots > warmFailoverSlack:
		b.Errorf("%s: read %d snapshots, want at most %d (a caught-up replica's delta)", v.name, rec.snapshots, warmFailoverSlack)
	case !v.standby && (rec.reason != engine.RecoveryNoCheckpoint || rec.snapshots < fx.shape.keys):
		b.Errorf("%s: read %d snapshots (reason %q), want at least one per key (%d), reason %q", v.name, rec.snapshots, rec.reason, fx.shape.keys, engine.RecoveryNoCheckpoint)
	}
}

// reportFailover reports the op's times and recovery.
func (o *warmOwner) reportFailover(b *testing.B, killAt time.Time) {
	rec := o.log.recoveries()[0]
	var took time.Duration
	for _, p := range o.status.Partitions {
		if p.Input.String() == rec.input {
			took = p.Recovery.Duration
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	delta := 0.0
	if rec.kind == "delta" {
		delta = 1
	}
	b.ReportMetric(ms(rec.at.Sub(killAt)), "failover-ms")
	b.ReportMetric(ms(rec.at.Add(-took).Sub(killAt)), "join-ms")
	b.ReportMetric(ms(took), "recovery-ms")
	b.ReportMetric(float64(rec.snapshots), "snapshots")
	b.ReportMetric(delta, "delta-partitions")
}
