package enginetest

import (
	"errors"
	"slices"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
)

// memberState is where a member is in its life.
type memberState int8

const (
	live    memberState = iota
	paused              // in StaleOwner: stalled, holding what it folded
	crashed             // Crash: never stepped again
	left                // RemoveMember: closed cleanly
)

func (s memberState) String() string {
	return [...]string{"live", "paused", "crashed", "left"}[s]
}

// member is one member of the group: an engine (a process) and its
// member of the consumer group.
type member[S any] struct {
	num   int
	e     *engine.Engine[S]
	m     *engine.Member[S]
	src   *simsource.Source
	state memberState
}

// addMember starts a member: an engine of its own, joined to the group.
// It joins at its first poll.
func (d *Driver[S]) addMember() *member[S] {
	num := len(d.members)
	e, err := engine.New(d.ecfg)
	if err != nil {
		d.t.Fatalf("enginetest: starting member %d: %v", num, err)
	}
	m, err := e.Join(simsource.New(d.cluster, d.cfg.Application, d.cfg.Protocol, d.cfg.MaxPoll, d.cfg.Topic))
	if err != nil {
		_ = e.Close()
		d.t.Fatalf("enginetest: member %d joining: %v", num, err)
	}
	src, ok := m.Source().(*simsource.Source)
	if !ok {
		d.t.Fatalf("enginetest: member %d's source is a %T", num, m.Source())
	}
	mb := &member[S]{num: num, e: e, m: m, src: src}
	d.members = append(d.members, mb)
	return mb
}

// member is member i, which must be live; else the test fails, naming
// helper.
func (d *Driver[S]) member(helper string, i int) *member[S] {
	d.t.Helper()
	if i < 0 || i >= len(d.members) {
		d.t.Fatalf("enginetest: %s(%d): no member %d (members are numbered from 0 in the order they joined; %d so far)", helper, i, i, len(d.members))
	}
	m := d.members[i]
	if m.state != live {
		d.t.Fatalf("enginetest: %s(%d): member %d is %s", helper, i, i, m.state)
	}
	return m
}

// live are the live members, in order.
func (d *Driver[S]) live() []*member[S] {
	var ms []*member[S]
	for _, m := range d.members {
		if m.state == live {
			ms = append(ms, m)
		}
	}
	return ms
}

// Members lists the live members' numbers, in order. Members are numbered
// from 0 in the order they joined; a number is never reused.
func (d *Driver[S]) Members() []int {
	var nums []int
	for _, m := range d.live() {
		nums = append(nums, m.num)
	}
	return nums
}

// Member is live member i's engine.Member, for what the driver has no
// helper for (Status, Errors, Get). Stepping or closing it behind the
// driver's back is the test's business.
func (d *Driver[S]) Member(i int) *engine.Member[S] {
	d.t.Helper()
	return d.member("Member", i).m
}

// AddMember starts a member (an engine of its own, with its own cache),
// which joins the group: a rebalance. It returns the member's number once
// the group has settled (Settle).
func (d *Driver[S]) AddMember() int {
	d.t.Helper()
	m := d.addMember()
	d.settle("AddMember")
	return m.num
}

// RemoveMember stops member i cleanly, as a rolling restart or a scale
// down does: it flushes and commits what it folded and leaves the group
// (engine.Member.Close), and the others take its partitions over (a
// rebalance). It returns once the group has settled, unless no member is
// left.
func (d *Driver[S]) RemoveMember(i int) {
	d.t.Helper()
	m := d.member("RemoveMember", i)
	if err := m.m.Close(d.ctx()); err != nil {
		d.t.Fatalf("enginetest: RemoveMember(%d): %v", i, err)
	}
	m.state = left
	if err := m.e.Close(); err != nil {
		d.t.Fatalf("enginetest: RemoveMember(%d): closing its engine: %v", i, err)
	}
	if len(d.live()) > 0 {
		d.settle("RemoveMember")
	}
}

// Crash kills member i, as a SIGKILL or a lost machine does: it never
// polls, flushes, commits or leaves again, and what it folded and did not
// commit is lost with it. The group evicts it once its session times out
// (SessionTimeout of virtual time, the survivors polling meanwhile), and
// the survivors take its partitions over, recover the committed state and
// replay the input from the committed offset. Crash returns once the
// group has settled, unless no member is left (then the partitions wait
// for AddMember).
//
// To crash a member between a fold and its commit, produce records and
// Step before Crash: Settle commits everything.
func (d *Driver[S]) Crash(i int) {
	d.t.Helper()
	m := d.member("Crash", i)
	m.src.Member().Stall()
	m.m.Abandon()
	m.state = crashed
	if err := m.e.Close(); err != nil {
		d.t.Fatalf("enginetest: Crash(%d): closing its engine: %v", i, err)
	}
	if len(d.live()) > 0 {
		d.settle("Crash")
	}
}

// StaleOwnerReport is what a stale owner did when it woke (StaleOwner).
type StaleOwnerReport struct {
	// Member is the stale owner's number.
	Member int
	// Held are the input partitions of which it held changes when it
	// paused: folded, not committed.
	Held []store.TopicPartition
	// Fenced are its transactions (in Plain mode, its writes and
	// commits) that the fence rejected when it flushed after waking;
	// each one's Err matches store.ErrFenced.
	Fenced []store.TransactionEvent
	// Landed are those that were accepted: stale writes over the new
	// owners' state. With the fence there are none.
	Landed []store.TransactionEvent
	// Errors are the errors its flush met (the fences among them).
	Errors []error
}

// StaleOwner makes member i a stale owner, the failure the fence exists
// for. Member i polls once, folding the records produced to its
// partitions since the last poll without committing them (the test must
// have produced some), then pauses, as in a long GC pause: no poll, no
// heartbeat, its changes in memory. The group evicts it after the session
// timeout and the others take its partitions over; meanwhile (nil for
// nothing) runs in that window, to produce the records the new owners
// fold after the takeover. Once the others have settled, member i wakes,
// still believing it owns its partitions, and flushes and commits what it
// held (engine.Member.FlushAll): every one of those writes must be
// fenced, which the report shows. Then member i finds out at its next
// poll that it was evicted, rejoins, and the group settles again. The
// committed state afterwards is what the fold of each input exactly once
// gives: State, CheckExact.
//
// A stale write that lands fails the test (t.Errorf): with the fence none
// can. A member that owns no partition, or holds no change when it
// pauses, or has no other live member to take over, fails it too.
func (d *Driver[S]) StaleOwner(i int, meanwhile func()) StaleOwnerReport {
	d.t.Helper()
	m := d.member("StaleOwner", i)
	if len(d.live()) < 2 {
		d.t.Fatalf("enginetest: StaleOwner(%d): no other live member to take its partitions over (AddMember starts one)", i)
	}
	owned := m.m.Flows()
	if len(owned) == 0 {
		d.t.Fatalf("enginetest: StaleOwner(%d): member %d runs no partition (Owner(key) names the member that runs a key's)", i, i)
	}
	for _, tb := range d.tables {
		if err := tb.opener.Step(d.ctx()); err != nil {
			d.t.Fatalf("enginetest: StaleOwner(%d): table %s: %v", i, tb.name, err)
		}
	}
	if err := m.m.Step(d.ctx()); err != nil {
		d.t.Fatalf("enginetest: StaleOwner(%d): member %d: %v", i, i, err)
	}
	rep := StaleOwnerReport{Member: i}
	for _, tp := range m.m.Flows() {
		if off, end := d.committed(tp); off < end {
			rep.Held = append(rep.Held, tp)
		}
	}
	if len(rep.Held) == 0 {
		d.t.Fatalf("enginetest: StaleOwner(%d): member %d holds no change to flush when it pauses: produce records to its partitions %v (keys whose Owner is %d) before StaleOwner, after the last Settle", i, i, owned, i)
	}
	errsBefore := len(m.m.Errors())
	m.src.Member().Stall()
	m.state = paused
	if meanwhile != nil {
		meanwhile()
	}
	d.settle("StaleOwner")

	m.src.Member().Resume()
	m.state = live
	d.mu.Lock()
	d.watching, d.txns = true, nil
	d.mu.Unlock()
	m.m.FlushAll(d.ctx())
	d.mu.Lock()
	woke := d.txns
	d.watching, d.txns = false, nil
	d.mu.Unlock()
	for _, ev := range woke {
		switch {
		case ev.Err == nil:
			rep.Landed = append(rep.Landed, ev)
		case errors.Is(ev.Err, store.ErrFenced):
			rep.Fenced = append(rep.Fenced, ev)
		}
	}
	rep.Errors = slices.Clone(m.m.Errors()[errsBefore:])
	if len(rep.Landed) > 0 && d.backend.Mode() == store.Transactional {
		d.t.Errorf("enginetest: StaleOwner(%d): %d writes of the stale owner landed, the fence notwithstanding (a bug of snapfence's): %+v", i, len(rep.Landed), rep.Landed)
	}
	d.settle("StaleOwner")
	return rep
}
