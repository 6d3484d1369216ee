package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/snapfence/snapfence/store"
)

// Callbacks are a consumer's rebalance callbacks. They run on the polling
// goroutine, inside Poll or Leave, without the cluster's lock held, so they
// may use the cluster (and a store backed by it).
type Callbacks struct {
	Assigned func(m *Member, tps []store.TopicPartition)
	Revoked  func(m *Member, tps []store.TopicPartition)
	// Lost is called instead of Revoked when the member learns it was
	// removed from the group: its partitions may already have new owners.
	Lost func(m *Member, tps []store.TopicPartition)
}

// Member is one consumer of a group as its client sees it: the identity
// the client reports, and the partitions it owns. Its methods are for one
// polling goroutine.
type Member struct {
	c        *Cluster
	group    string
	protocol Protocol
	topics   []string

	id      string
	gen     int32 // the generation or member epoch the client knows; -1 before joining
	owned   []store.TopicPartition
	stalled bool
	left    bool

	// consumer protocol: what the last heartbeat told the client to do
	toRevoke []store.TopicPartition
	toAssign []store.TopicPartition
	// taking is what the client is taking over in the poll in progress:
	// granted, no longer in toAssign, not yet in owned.
	taking []store.TopicPartition
}

// NewMember returns a consumer of group, subscribed to topics, that has not
// joined yet: it joins on its first Poll. protocol 0 is ClassicEager (the
// member and the group test for each protocol by name, so an unset one
// would otherwise behave as none of them: classic rounds without the eager
// revoke).
func (c *Cluster) NewMember(group string, protocol Protocol, topics ...string) *Member {
	if protocol == 0 {
		protocol = ClassicEager
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groupLocked(group)
	if len(g.members) == 0 {
		g.protocol = protocol
	}
	return &Member{c: c, group: group, protocol: protocol, topics: topics, gen: -1}
}

// Identity is the group identity the client reports now (what
// franz-go's GroupMetadata returns).
func (m *Member) Identity() store.GroupIdentity {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	return store.GroupIdentity{Group: m.group, MemberID: m.id, Generation: m.gen}
}

// Owned lists the partitions the client owns.
func (m *Member) Owned() []store.TopicPartition {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	return slices.Clone(m.owned)
}

// Stall stops the member: it neither polls nor heartbeats (a GC pause)
// until Resume. The group moves on without it once its session expires.
func (m *Member) Stall() {
	m.c.mu.Lock()
	m.stalled = true
	m.c.record("member_stalled", "group=%s member=%s", m.group, m.id)
	m.c.mu.Unlock()
}

// Resume ends a Stall. The member carries on with what it held; its next
// Poll finds out what the group did meanwhile.
func (m *Member) Resume() {
	m.c.mu.Lock()
	m.stalled = false
	m.c.record("member_resumed", "group=%s member=%s", m.group, m.id)
	m.c.mu.Unlock()
}

// Heartbeat is the client's background heartbeat: it keeps the session
// alive and, under the consumer protocol, advances the member epoch. A
// stalled member does not heartbeat.
func (m *Member) Heartbeat() {
	c := m.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.stalled || m.left || m.id == "" {
		return
	}
	c.housekeepLocked()
	g := c.groupLocked(m.group)
	if gm := g.members[m.id]; gm != nil {
		gm.lastHeartbeat = c.clk.now
		if m.protocol == Consumer {
			m.reconcileLocked(g, gm)
		}
	}
}

// Poll is one poll of the consumer: it heartbeats, takes part in a pending
// rebalance and runs the callbacks that result. A stalled member's Poll
// does nothing.
func (m *Member) Poll(cb Callbacks) {
	if m.protocol == Consumer {
		m.pollConsumer(cb)
		return
	}
	m.pollClassic(cb)
}

// pollClassic is Poll in a classic group: heartbeat, rejoin a preparing
// round, and once the round is stable sync to its generation.
func (m *Member) pollClassic(cb Callbacks) {
	c := m.c
	c.mu.Lock()
	if m.stalled || m.left {
		c.mu.Unlock()
		return
	}
	c.housekeepLocked()
	g := c.groupLocked(m.group)
	gm := m.joinClassicLocked(g, cb)
	gm.lastHeartbeat = c.clk.now
	if g.state == groupPreparing && !gm.rejoined && !m.rejoinLocked(g, gm, cb) {
		c.mu.Unlock()
		return
	}
	c.completeLocked(g)
	if g.state != groupStable || m.gen == g.generation || !gm.rejoined {
		c.mu.Unlock()
		return
	}
	lost, added := m.syncLocked(g, gm)
	c.mu.Unlock()
	call(cb.Revoked, m, lost)
	call(cb.Assigned, m, added)
}

// joinClassicLocked returns the member's entry in g. A member the group
// removed loses its partitions first, and one without an id joins as new.
// c.mu is held; it is released while cb.Lost runs.
func (m *Member) joinClassicLocked(g *group, cb Callbacks) *groupMember {
	c := m.c
	gm := g.members[m.id]
	if m.id != "" && gm == nil {
		// Removed (session or rebalance timeout): the next heartbeat
		// answers UNKNOWN_MEMBER_ID and the client rejoins as new.
		lost := m.owned
		c.record("member_lost", "group=%s member=%s partitions=%s", m.group, m.id, fmtTPs(lost))
		m.owned, m.id, m.gen = nil, "", -1
		c.mu.Unlock()
		call(cb.Lost, m, lost)
		c.mu.Lock()
	}
	if m.id == "" {
		m.id = c.newMemberIDLocked(m.group)
		gm = &groupMember{id: m.id, topics: m.topics, lastHeartbeat: c.clk.now}
		g.members[m.id] = gm
		c.record("member_joined", "group=%s member=%s protocol=%s", m.group, m.id, m.protocol)
		c.triggerLocked(g)
	}
	return gm
}

// rejoinLocked rejoins the preparing round with what the member owns; an
// eager member revokes everything first. It reports false if the member
// was removed while cb.Revoked ran. c.mu is held; it is released while
// cb.Revoked runs.
func (m *Member) rejoinLocked(g *group, gm *groupMember, cb Callbacks) bool {
	c := m.c
	if m.protocol == ClassicEager && len(m.owned) > 0 {
		revoked := m.owned
		m.owned = nil
		c.mu.Unlock()
		call(cb.Revoked, m, revoked) // the generation is still current: an eager revoke commits
		c.mu.Lock()
		if g.members[m.id] != gm {
			return false
		}
	}
	gm.rejoined = true
	gm.owned = slices.Clone(m.owned)
	c.record("member_rejoined", "group=%s member=%s owned=%s", m.group, m.id, fmtTPs(gm.owned))
	return true
}

// syncLocked takes the stable round's generation and assignment, and
// returns the partitions the member lost and gained by it, for the
// callbacks the caller runs once c.mu is released.
func (m *Member) syncLocked(g *group, gm *groupMember) (lost, added []store.TopicPartition) {
	c := m.c
	// Sync: the client now knows the new generation, then runs callbacks.
	m.gen = g.generation
	lost = minus(m.owned, gm.assignment)
	added = minus(gm.assignment, m.owned)
	m.owned = slices.Clone(gm.assignment)
	c.record("member_synced", "group=%s member=%s generation=%d assigned=%s", m.group, m.id, m.gen, fmtTPs(m.owned))
	if len(lost) > 0 {
		c.triggerLocked(g) // cooperative: rejoin after revoking so the partitions can move
	}
	return lost, added
}

func (m *Member) pollConsumer(cb Callbacks) {
	c := m.c
	c.mu.Lock()
	if m.stalled || m.left {
		c.mu.Unlock()
		return
	}
	c.housekeepLocked()
	g := c.groupLocked(m.group)
	gm := g.members[m.id]
	if m.id != "" && gm == nil {
		lost := m.owned
		c.record("member_lost", "group=%s member=%s partitions=%s", m.group, m.id, fmtTPs(lost))
		m.owned, m.id, m.gen, m.toRevoke, m.toAssign = nil, "", -1, nil, nil
		c.mu.Unlock()
		call(cb.Lost, m, lost)
		c.mu.Lock()
	}
	if m.id == "" {
		m.id = c.newMemberIDLocked(m.group)
		gm = &groupMember{id: m.id, topics: m.topics, lastHeartbeat: c.clk.now}
		g.members[m.id] = gm
		c.record("member_joined", "group=%s member=%s protocol=%s", m.group, m.id, m.protocol)
		c.triggerLocked(g)
	}
	gm.lastHeartbeat = c.clk.now
	m.reconcileLocked(g, gm)
	revoke, assign := m.toRevoke, m.toAssign
	m.toRevoke, m.toAssign, m.taking = nil, nil, assign
	c.mu.Unlock()

	if len(revoke) > 0 {
		call(cb.Revoked, m, revoke) // the member keeps its epoch until it acknowledges
		c.mu.Lock()
		m.owned = minus(m.owned, revoke)
		if gm := g.members[m.id]; gm != nil {
			m.reconcileLocked(g, gm) // acknowledge
			assign = append(assign, m.toAssign...)
			m.toAssign, m.taking = nil, assign
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	m.owned = append(m.owned, assign...)
	slices.SortFunc(m.owned, compareTP)
	m.taking = nil
	c.mu.Unlock()
	if len(assign) > 0 {
		call(cb.Assigned, m, assign)
	}
}

// reconcileLocked is one consumer-protocol heartbeat exchange: the member
// reports what it owns, the coordinator releases what it revoked, and the
// member epoch advances only when nothing is left to revoke.
func (m *Member) reconcileLocked(g *group, gm *groupMember) {
	c := m.c
	// The member reports what it owns: a granted partition it does not
	// own, is not about to take, and did not just get, it has revoked.
	// Released, it can be granted again (to it too, if the target moved
	// back meanwhile: a release only on the revoking list would leave the
	// coordinator thinking it granted what the client already gave up).
	for _, tp := range slices.Clone(gm.assigned) {
		if !slices.Contains(m.owned, tp) && !slices.Contains(m.toAssign, tp) && !slices.Contains(m.taking, tp) {
			gm.assigned = slices.DeleteFunc(gm.assigned, func(x store.TopicPartition) bool { return x == tp })
			delete(gm.assignedAt, tp)
		}
	}
	target := g.target[m.id]
	gm.revoking = minus(gm.assigned, target)
	if len(gm.revoking) > 0 {
		m.toRevoke = minus(gm.revoking, m.toRevoke)
		m.toRevoke = slices.DeleteFunc(m.toRevoke, func(tp store.TopicPartition) bool { return !slices.Contains(m.owned, tp) })
		return
	}
	if gm.epoch != g.generation {
		gm.prevEpoch, gm.epoch = gm.epoch, g.generation
		c.record("member_epoch", "group=%s member=%s epoch=%d", m.group, m.id, gm.epoch)
	}
	for _, tp := range minus(target, gm.assigned) {
		if !c.heldByOtherLocked(g, m.id, tp) {
			gm.assigned = append(gm.assigned, tp)
			if gm.assignedAt == nil {
				gm.assignedAt = map[store.TopicPartition]int32{}
			}
			gm.assignedAt[tp] = gm.epoch
			m.toAssign = append(m.toAssign, tp)
		}
	}
	slices.SortFunc(gm.assigned, compareTP)
	m.gen = gm.epoch
}

func (c *Cluster) heldByOtherLocked(g *group, self string, tp store.TopicPartition) bool {
	for id, gm := range g.members {
		if id != self && slices.Contains(gm.assigned, tp) {
			return true
		}
	}
	return false
}

// Subscribe replaces the member's subscription, as a client's
// AddConsumeTopics does; the group rebalances.
func (m *Member) Subscribe(topics ...string) {
	c := m.c
	c.mu.Lock()
	defer c.mu.Unlock()
	m.topics = topics
	g := c.groupLocked(m.group)
	if gm := g.members[m.id]; gm != nil {
		gm.topics = topics
		c.record("member_subscribed", "group=%s member=%s topics=%s", m.group, m.id, strings.Join(topics, ","))
		c.triggerLocked(g)
	}
}

// Leave leaves the group cleanly: the client revokes what it owns, then
// tells the coordinator, which rebalances the rest.
func (m *Member) Leave(cb Callbacks) {
	c := m.c
	c.mu.Lock()
	if m.left {
		c.mu.Unlock()
		return
	}
	owned := m.owned
	c.mu.Unlock()
	call(cb.Revoked, m, owned)
	c.mu.Lock()
	defer c.mu.Unlock()
	m.left, m.owned = true, nil
	g := c.groupLocked(m.group)
	if g.members[m.id] != nil {
		delete(g.members, m.id)
		c.record("member_left", "group=%s member=%s", m.group, m.id)
		c.triggerLocked(g)
	}
}

func (c *Cluster) newMemberIDLocked(group string) string {
	return fmt.Sprintf("%s-%08x", group, c.rng.Uint32())
}

func call(f func(*Member, []store.TopicPartition), m *Member, tps []store.TopicPartition) {
	if f != nil && len(tps) > 0 {
		f(m, slices.Clone(tps))
	}
}
