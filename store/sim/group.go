package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/snapfence/snapfence/store"
)

// Protocol is a consumer group rebalance protocol.
type Protocol int8

const (
	// ClassicEager is the classic protocol with an eager assignor: every
	// rebalance revokes everything before members rejoin.
	ClassicEager Protocol = iota + 1
	// ClassicCooperative is the classic protocol with the cooperative-sticky
	// assignor: members keep what they own across a rebalance, and a moved
	// partition is revoked first and assigned in a follow-up rebalance.
	ClassicCooperative
	// Consumer is the consumer protocol (KIP-848): server-side assignment,
	// member epochs advanced by heartbeats.
	Consumer
)

func (p Protocol) String() string {
	switch p {
	case ClassicEager:
		return "classic-eager"
	case ClassicCooperative:
		return "classic-cooperative"
	case Consumer:
		return "consumer"
	}
	return fmt.Sprintf("Protocol(%d)", int8(p))
}

type groupState int8

const (
	groupEmpty groupState = iota
	groupPreparing
	groupStable
)

func (s groupState) String() string {
	return [...]string{"Empty", "PreparingRebalance", "Stable"}[s]
}

// group is the coordinator's state of one consumer group.
type group struct {
	name       string
	protocol   Protocol
	state      groupState
	generation int32 // classic generation, or the consumer protocol's group epoch
	members    map[string]*groupMember
	committed  map[store.TopicPartition]int64
	deadline   time.Time                         // end of the rebalance timeout of a pending round
	target     map[string][]store.TopicPartition // consumer protocol: target assignment
}

type groupMember struct {
	id            string
	topics        []string
	lastHeartbeat time.Time
	// classic
	rejoined   bool
	owned      []store.TopicPartition // claimed at rejoin (cooperative)
	assignment []store.TopicPartition // at the current generation
	// consumer protocol
	epoch     int32
	prevEpoch int32                  // the epoch before the current one
	assigned  []store.TopicPartition // granted, including not yet taken by the client
	// assignedAt is each assigned partition's assignment epoch (KIP-1251):
	// the member epoch at which it was granted to this member.
	assignedAt map[store.TopicPartition]int32
	revoking   []store.TopicPartition // must be revoked before the epoch advances
}

func (c *Cluster) groupLocked(name string) *group {
	g := c.groups[name]
	if g == nil {
		g = &group{name: name, members: map[string]*groupMember{}, committed: map[store.TopicPartition]int64{}}
		c.groups[name] = g
	}
	return g
}

// CommittedOffset is the group's committed offset of tp.
func (c *Cluster) CommittedOffset(group string, tp store.TopicPartition) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[group]
	if g == nil {
		return 0, false
	}
	off, ok := g.committed[tp]
	return off, ok
}

// GroupGeneration is the coordinator's current generation (classic) or
// group epoch (consumer protocol).
func (c *Cluster) GroupGeneration(group string) int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groupLocked(group).generation
}

// MemberEpochs is a member's epoch at the coordinator and the one before
// it: under the consumer protocol the member epochs, under the classic one
// the group's generation and the generation before; -1, -1 for a stranger.
func (c *Cluster) MemberEpochs(group, memberID string) (current, previous int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groupLocked(group)
	gm := g.members[memberID]
	switch {
	case gm == nil:
		return -1, -1
	case g.protocol == Consumer:
		return gm.epoch, gm.prevEpoch
	}
	return g.generation, g.generation - 1
}

// Rebalance starts a rebalance of a classic group, as a metadata change
// would, or bumps a consumer group's epoch. Members keep their partitions
// where the assignor allows; every generation moves.
func (c *Cluster) Rebalance(group string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groupLocked(group)
	c.record("rebalance_requested", "group=%s", group)
	c.triggerLocked(g)
}

// validateCommitLocked validates an offset commit's identity as Apache
// Kafka 4.x's group coordinator does (ClassicGroup.validateOffsetCommit,
// ConsumerGroup.validateOffsetCommit).
func (c *Cluster) validateCommitLocked(id store.GroupIdentity, offsets map[store.TopicPartition]int64, transactional bool) error {
	c.housekeepLocked()
	g := c.groupLocked(id.Group)
	if g.protocol == Consumer {
		if id.Generation < 0 && len(g.members) == 0 {
			return nil
		}
		if transactional && id.Generation < 0 && id.MemberID == "" && id.InstanceID == "" {
			return nil // TxnOffsetCommit validates only what is given
		}
		gm := g.members[id.MemberID]
		if gm == nil {
			return kerr.UnknownMemberID
		}
		if id.Generation != gm.epoch {
			if !c.cfg.DisableKIP1251 && id.Generation < gm.epoch && assignedSince(gm, offsets, id.Generation) {
				// KIP-1251: a lagging epoch is accepted for partitions
				// assigned to the member at or before it (assignment
				// epoch <= epoch <= member epoch), as Apache Kafka 4.3.1
				// does (store/kafka's identity matrix test).
				return nil
			}
			if transactional {
				return kerr.IllegalGeneration // STALE_MEMBER_EPOCH is mapped on the TxnOffsetCommit wire
			}
			return kerr.StaleMemberEpoch
		}
		return nil
	}
	if id.Generation < 0 && g.state == groupEmpty {
		return nil
	}
	if id.Generation >= 0 || id.MemberID != "" || id.InstanceID != "" {
		if g.members[id.MemberID] == nil {
			return kerr.UnknownMemberID
		}
		if id.Generation != g.generation {
			return kerr.IllegalGeneration
		}
	} else if !transactional && g.state != groupEmpty {
		return kerr.UnknownMemberID
	}
	return nil
}

// assignedSince reports whether every partition of offsets is assigned to
// gm with an assignment epoch at or below epoch.
func assignedSince(gm *groupMember, offsets map[store.TopicPartition]int64, epoch int32) bool {
	for tp := range offsets {
		at, ok := gm.assignedAt[tp]
		if !ok || !slices.Contains(gm.assigned, tp) || at > epoch {
			return false
		}
	}
	return true
}

// OffsetCommit is a plain consumer-group offset commit, validated like
// Kafka validates one.
func (c *Cluster) OffsetCommit(id store.GroupIdentity, offsets map[store.TopicPartition]int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.validateCommitLocked(id, offsets, false); err != nil {
		c.record("offset_commit_rejected", "%s offsets=%s err=%s", fmtIdentity(id), fmtOffsets(offsets), errName(err))
		return err
	}
	g := c.groupLocked(id.Group)
	for tp, off := range offsets {
		g.committed[tp] = off
	}
	c.record("offset_commit", "%s offsets=%s", fmtIdentity(id), fmtOffsets(offsets))
	return nil
}

// triggerLocked starts a rebalance: classic groups prepare a new round,
// consumer groups bump the group epoch and recompute the target.
func (c *Cluster) triggerLocked(g *group) {
	if g.protocol == Consumer {
		g.generation++
		g.target = c.assignLocked(g, func(gm *groupMember) []store.TopicPartition { return gm.assigned })
		c.record("group_epoch", "group=%s epoch=%d target=%s", g.name, g.generation, fmtTarget(g.target))
		return
	}
	if len(g.members) == 0 {
		g.generation++
		g.state = groupEmpty
		c.record("group_empty", "group=%s generation=%d", g.name, g.generation)
		return
	}
	if g.state != groupPreparing {
		g.state = groupPreparing
		g.deadline = c.clk.now.Add(c.cfg.RebalanceTimeout)
		for _, gm := range g.members {
			gm.rejoined = false
		}
		c.record("rebalance_started", "group=%s generation=%d", g.name, g.generation)
	}
}

// completeLocked ends a classic round once every member rejoined or the
// rebalance timeout passed.
func (c *Cluster) completeLocked(g *group) {
	if g.protocol == Consumer || g.state != groupPreparing {
		return
	}
	late := !c.clk.now.Before(g.deadline)
	for _, id := range sortedKeys(g.members) {
		gm := g.members[id]
		if gm.rejoined {
			continue
		}
		if !late {
			return
		}
		delete(g.members, id)
		c.record("member_removed", "group=%s member=%s reason=rebalance_timeout", g.name, id)
	}
	if len(g.members) == 0 {
		g.generation++
		g.state = groupEmpty
		c.record("group_empty", "group=%s generation=%d", g.name, g.generation)
		return
	}
	g.generation++
	g.state = groupStable
	prev := func(gm *groupMember) []store.TopicPartition {
		if g.protocol == ClassicCooperative {
			return gm.owned
		}
		return gm.assignment
	}
	assign := c.assignLocked(g, prev)
	if g.protocol == ClassicCooperative {
		// A partition claimed by one member and assigned to another is
		// revoked this round and assigned in the next one.
		// (In id order: were a partition claimed twice, the same claim
		// would win on every run.)
		claimed := map[store.TopicPartition]string{}
		for _, id := range sortedKeys(g.members) {
			for _, tp := range g.members[id].owned {
				claimed[tp] = id
			}
		}
		for id, tps := range assign {
			assign[id] = slices.DeleteFunc(tps, func(tp store.TopicPartition) bool {
				owner, ok := claimed[tp]
				return ok && owner != id
			})
		}
	}
	for id, gm := range g.members {
		gm.assignment = assign[id]
	}
	c.record("rebalance_completed", "group=%s generation=%d assignment=%s", g.name, g.generation, fmtTarget(assign))
}

// assignLocked computes a balanced, sticky assignment of the partitions of
// the members' topics: each member keeps what prev says it has, up to its
// share, and the rest goes round the members in order.
func (c *Cluster) assignLocked(g *group, prev func(*groupMember) []store.TopicPartition) map[string][]store.TopicPartition {
	ids := sortedKeys(g.members)
	out := make(map[string][]store.TopicPartition, len(ids))
	if len(ids) == 0 {
		return out
	}
	all := c.subscribedPartitionsLocked(g, ids)
	// The larger shares go to the members that hold the most already (id
	// order among equals), so a member joining a group with more members
	// than partitions takes nothing from the current owners, as Kafka's
	// sticky assignors do.
	held := func(id string) int {
		n := 0
		for _, tp := range prev(g.members[id]) {
			if slices.Contains(all, tp) {
				n++
			}
		}
		return n
	}
	slices.SortStableFunc(ids, func(a, b string) int { return held(b) - held(a) })
	quota := func(i int) int { return share(i, len(all), len(ids)) }
	taken := map[store.TopicPartition]bool{}
	for i, id := range ids {
		for _, tp := range prev(g.members[id]) {
			if len(out[id]) < quota(i) && !taken[tp] && slices.Contains(all, tp) {
				out[id] = append(out[id], tp)
				taken[tp] = true
			}
		}
	}
	i := 0
	for _, tp := range all {
		if taken[tp] {
			continue
		}
		for len(out[ids[i]]) >= quota(i) {
			i = (i + 1) % len(ids)
		}
		out[ids[i]] = append(out[ids[i]], tp)
		taken[tp] = true
	}
	for id := range out {
		slices.SortFunc(out[id], compareTP)
	}
	return out
}

// subscribedPartitionsLocked returns every partition of the topics the
// members ids of g subscribe to, sorted.
func (c *Cluster) subscribedPartitionsLocked(g *group, ids []string) []store.TopicPartition {
	var all []store.TopicPartition
	seen := map[string]bool{}
	for _, id := range ids {
		for _, t := range g.members[id].topics {
			if seen[t] {
				continue
			}
			seen[t] = true
			for p := range c.logs[t] {
				all = append(all, store.TopicPartition{Topic: t, Partition: int32(p)})
			}
		}
	}
	slices.SortFunc(all, compareTP)
	return all
}

// share is the count of partitions the i-th of members gets: an equal
// share, one more for the first partitions%members.
func share(i, partitions, members int) int {
	q := partitions / members
	if i < partitions%members {
		q++
	}
	return q
}

// housekeepLocked applies what time did to groups before an operation
// looks at them: expired sessions, timed-out rounds. Transactions time out
// only at abort scans (Advance).
func (c *Cluster) housekeepLocked() { c.housekeepGroupsLocked() }

func compareTP(a, b store.TopicPartition) int {
	if a.Topic != b.Topic {
		if a.Topic < b.Topic {
			return -1
		}
		return 1
	}
	return int(a.Partition - b.Partition)
}

func minus(a, b []store.TopicPartition) []store.TopicPartition {
	var out []store.TopicPartition
	for _, tp := range a {
		if !slices.Contains(b, tp) {
			out = append(out, tp)
		}
	}
	return out
}

// ConfirmOwner reports why the coordinator does not list id's member as
// tp's owner ("" if it does), as a describe of the group answers (which
// is how a Kafka client confirms it: engine/kafkaio): the member must be
// in the group and assigned tp, under the classic protocol in a stable
// group, under the consumer protocol with tp not pending revocation.
// Generations are not compared: a member the coordinator lists as the
// owner is the owner, whatever round its client last heard of.
func (c *Cluster) ConfirmOwner(id store.GroupIdentity, tp store.TopicPartition) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.housekeepLocked()
	g := c.groupLocked(id.Group)
	gm := g.members[id.MemberID]
	why := ""
	switch {
	case gm == nil:
		why = "the member is unknown"
	case g.protocol == Consumer && (!slices.Contains(gm.assigned, tp) || slices.Contains(gm.revoking, tp)):
		why = "the member is not assigned it"
	case g.protocol != Consumer && g.state != groupStable:
		why = "the group is rebalancing"
	case g.protocol != Consumer && !slices.Contains(gm.assignment, tp):
		why = "the member is not assigned it"
	}
	if why != "" {
		c.record("owner_unconfirmed", "%s partition=%s: %s", fmtIdentity(id), tp, why)
	}
	return why
}

// GroupMembers is group's members by id, sorted, and each partition the
// coordinator has assigned (as GroupAssigned reads it) with its member.
func (c *Cluster) GroupMembers(group string) ([]string, map[store.TopicPartition]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[group]
	owners := map[store.TopicPartition]string{}
	if g == nil {
		return nil, owners
	}
	ids := sortedKeys(g.members)
	for _, id := range ids {
		for _, tp := range g.described(g.members[id]) {
			owners[tp] = id
		}
	}
	return ids, owners
}

// GroupAssigned is every partition the coordinator has assigned to a
// member of group, as a describe of the group answers (group.described).
// It changes nothing (time expires sessions: Advance).
func (c *Cluster) GroupAssigned(group string) []store.TopicPartition {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[group]
	if g == nil {
		return nil
	}
	var out []store.TopicPartition
	for _, id := range sortedKeys(g.members) {
		out = append(out, g.described(g.members[id])...)
	}
	return out
}

// described is gm's assignment as a describe of the group answers: under
// the classic protocol only while the group is stable (during a rebalance
// Kafka describes no member's assignment, and none is served), under the
// consumer protocol the member's current assignment.
func (g *group) described(gm *groupMember) []store.TopicPartition {
	switch {
	case g.protocol == Consumer:
		return gm.assigned
	case g.state == groupStable:
		return gm.assignment
	}
	return nil
}
