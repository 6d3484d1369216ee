package enginetest

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/snapfence/snapfence/store"
)

// Step is one poll of every live member at the current virtual time (the
// tables first), then moves virtual time on by PollInterval. The members
// fold what they fetch, and flush, commit, tick and fire timers only as
// their intervals make due: what a test wants before a Crash that must
// find changes folded and not committed.
func (d *Driver[S]) Step() {
	d.t.Helper()
	d.round("Step")
	d.cluster.Advance(d.cfg.PollInterval)
}

// round polls every table, then every live member, once.
func (d *Driver[S]) round(helper string) {
	d.t.Helper()
	for _, tb := range d.tables {
		if err := tb.opener.Step(d.ctx()); err != nil {
			d.t.Fatalf("enginetest: %s: table %s: %v", helper, tb.name, err)
		}
	}
	for _, m := range d.live() {
		if err := m.m.Step(d.ctx()); err != nil {
			d.t.Fatalf("enginetest: %s: member %d stopped: %v", helper, m.num, err)
		}
	}
}

// Settle polls every live member, PollInterval of virtual time apart,
// until the group has settled: no rebalance is under way, every input
// partition runs on a live member, every table has read all it can, and every input record is
// folded and committed (each member flushes and commits once its
// partitions are caught up, as on a clean shutdown: Member.FlushAll).
// The outputs are then all visible to a read_committed consumer. A group
// that does not settle within SettleTimeout fails the test with a report
// of each partition's owner and committed offset and each member's
// errors.
func (d *Driver[S]) Settle() {
	d.t.Helper()
	d.settle("Settle")
}

func (d *Driver[S]) settle(helper string) {
	d.t.Helper()
	if len(d.live()) == 0 {
		d.t.Fatalf("enginetest: %s: no live member to settle the group (AddMember starts one)", helper)
	}
	deadline := d.cluster.Now().Add(d.cfg.SettleTimeout)
	for {
		d.round(helper)
		if d.settled() {
			return
		}
		if !d.cluster.Now().Before(deadline) {
			d.t.Fatalf("enginetest: %s: the group did not settle within %v of virtual time (SettleTimeout):\n%s", helper, d.cfg.SettleTimeout, d.report())
		}
		d.cluster.Advance(d.cfg.PollInterval)
	}
}

// settled reports whether the group is stable with every input partition
// running on a live member, every table has read to its log's end and,
// once both hold, whether the members' flush and commit have committed
// every input record.
func (d *Driver[S]) settled() bool {
	if !d.stable() {
		return false
	}
	for _, tb := range d.tables {
		if tb.status == nil {
			continue
		}
		for _, p := range tb.status().Partitions {
			if p.Lag != 0 {
				return false
			}
		}
	}
	for _, m := range d.live() {
		m.m.FlushAll(d.ctx())
	}
	for _, tp := range d.inputs {
		if off, end := d.committed(tp); off != end {
			return false
		}
	}
	return true
}

// stable reports whether the group's coordinator has every input
// partition assigned in a stable round (a classic group between rounds: a
// rebalance under way, a cooperative follow-up round still to come, is
// not stable), every live member has caught up with it (its identity's
// generation, or member epoch, is the group's: under the consumer
// protocol a member's epoch advances only once it has revoked what it
// must), and the live members' flows run every partition, each once.
func (d *Driver[S]) stable() bool {
	assigned := d.cluster.GroupAssigned(d.cfg.Application)
	slices.SortFunc(assigned, compareTP)
	if !slices.Equal(assigned, d.inputs) {
		return false
	}
	gen := d.cluster.GroupGeneration(d.cfg.Application)
	var running []store.TopicPartition
	for _, m := range d.live() {
		if m.src.Member().Identity().Generation != gen {
			return false
		}
		running = append(running, m.m.Flows()...)
	}
	slices.SortFunc(running, compareTP)
	return slices.Equal(running, d.inputs)
}

func compareTP(a, b store.TopicPartition) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return int(a.Partition) - int(b.Partition)
}

// committed is tp's committed offset (0 if none) and its log end.
func (d *Driver[S]) committed(tp store.TopicPartition) (off, end int64) {
	_, _, end, err := d.cluster.Offsets(tp)
	if err != nil {
		d.t.Fatalf("enginetest: %s: %v", tp, err)
	}
	off, _ = d.cluster.CommittedOffset(d.cfg.Application, tp)
	return off, end
}

// report describes the group for a failure: each input partition's
// committed offset and owner, each member's state and errors, each
// table's lag, and the outputs Emit could not deliver.
func (d *Driver[S]) report() string {
	var b strings.Builder
	for _, tp := range d.inputs {
		off, end := d.committed(tp)
		var owners []string
		for _, m := range d.members {
			if slices.Contains(m.src.Member().Owned(), tp) && (m.state == live || m.state == paused) {
				owners = append(owners, fmt.Sprintf("member %d (%s)", m.num, m.state))
			}
		}
		if len(owners) == 0 {
			owners = []string{"no member"}
		}
		fmt.Fprintf(&b, "  %s: committed %d of %d, assigned to %s\n", tp, off, end, strings.Join(owners, ", "))
	}
	for _, m := range d.members {
		fmt.Fprintf(&b, "  member %d: %s, running %v", m.num, m.state, m.m.Flows())
		errs := m.m.Errors()
		if len(errs) > 0 {
			b.WriteString(", errors:")
			for _, err := range errs[max(0, len(errs)-5):] {
				fmt.Fprintf(&b, "\n    %v", err)
			}
		}
		b.WriteString("\n")
	}
	for _, tb := range d.tables {
		if tb.status != nil {
			fmt.Fprintf(&b, "  table %s: %+v\n", tb.name, tb.status().Partitions)
		}
	}
	d.mu.Lock()
	for _, err := range d.emitErrs {
		fmt.Fprintf(&b, "  emit: %v\n", err)
	}
	d.mu.Unlock()
	return b.String()
}

// Advance moves virtual time on by dur, PollInterval at a time, polling
// every live member at each step, so that processing-time timers, ticks,
// periodic flushes and commits, and session timeouts happen as they would
// in dur of a real run; then it settles (Settle), unless no member is
// live. A timer is due at the first poll at or after its time.
func (d *Driver[S]) Advance(dur time.Duration) {
	d.t.Helper()
	if dur < 0 {
		d.t.Fatalf("enginetest: Advance(%v): time does not go back", dur)
	}
	for dur > 0 {
		step := min(dur, d.cfg.PollInterval)
		d.cluster.Advance(step)
		dur -= step
		d.round("Advance")
	}
	if len(d.live()) > 0 {
		d.settle("Advance")
	}
}
