package world

import (
	"time"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// Scenario is a named scenario of the design (docs/design.md), as steps,
// with the outcome it must have in each mode. Every world runs the same
// steps: internal/world's tests run each scenario on the simulated
// cluster, kfakeworld's on kfake, and cmd/simulate shows them.
type Scenario struct {
	Name    string
	Summary string
	// Protocol is the group's protocol (zero: classic eager).
	Protocol sim.Protocol
	Steps    []Step
	// Transactional and Plain are the outcomes in each mode; a scenario
	// without expectations for a mode is not run in it.
	Transactional, Plain []Expectation
	// SimOnly, if set, says why only the simulated cluster can run the
	// scenario: it makes a scheduling choice kfake and a broker leave to
	// their own schedulers.
	SimOnly string
}

// Expect is the scenario's expectations in mode.
func (s Scenario) Expect(mode store.Mode) []Expectation {
	if mode == store.Plain {
		return s.Plain
	}
	return s.Transactional
}

// ScenarioNamed returns the scenario called name.
func ScenarioNamed(name string) (Scenario, bool) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

func join(m int) Step                { return Step{Kind: Join, Member: m} }
func poll(m int) Step                { return Step{Kind: Poll, Member: m} }
func flush(m int) Step               { return Step{Kind: Flush, Member: m} }
func persist(m int) Step             { return Step{Kind: Persist, Member: m} }
func pause(m int) Step               { return Step{Kind: Pause, Member: m} }
func resume(m int) Step              { return Step{Kind: Resume, Member: m} }
func crash(m int) Step               { return Step{Kind: Crash, Member: m} }
func leave(m int) Step               { return Step{Kind: Leave, Member: m} }
func advance(d time.Duration) Step   { return Step{Kind: Advance, D: d} }
func produce(key string, d int) Step { return Step{Kind: Produce, Key: key, Delta: d} }
func query(m int, key string) Step   { return Step{Kind: Query, Member: m, Key: key} }

func steps(parts ...any) []Step {
	var out []Step
	for _, p := range parts {
		switch p := p.(type) {
		case Step:
			out = append(out, p)
		case []Step:
			out = append(out, p...)
		}
	}
	return out
}

// ownsAfterFlush: m0 joins alone, folds a=10 and flushes and commits it,
// then folds a=15 that it has not flushed.
var ownsAfterFlush = steps(
	join(0),
	produce("a", 10),
	poll(0),
	poll(0),
	advance(10*time.Second),
	poll(0), // flush and commit a=10
	produce("a", 5),
	poll(0), // folds a=15, not flushed
)

// takesOver: member m joins and takes every partition once the paused
// owner's session expires, recovers, folds what came and newer events.
func takesOver(m int) []Step {
	return steps(
		join(m),
		poll(m),
		advance(11*time.Second), // the paused owner's session expires
		poll(m),
		poll(m), // m owns everything, recovers, folds
	)
}

// Scenario732 is kafka-flow#732 as steps: m0 folds events it has not
// flushed and pauses; m1 takes the partitions once m0's session expires,
// folds newer events and flushes; m0 wakes and flushes before it learns.
var Scenario732 = steps(
	ownsAfterFlush,
	pause(0),
	takesOver(1),
	produce("a", 100),
	poll(1),
	advance(10*time.Second),
	poll(1), // m1 flushes a=115 and commits
	resume(0),
	flush(0), // m0's stale a=15, the revoke-time flush of kafka-flow
)

// Scenarios are the design's named scenarios.
var Scenarios = []Scenario{
	{
		Name:    "stale-flush-on-revoke",
		Summary: "kafka-flow#732: a paused owner wakes and flushes what it held after another member took over",
		Steps:   Scenario732,
		Transactional: []Expectation{
			Fenced(0, len(Scenario732)-1), HoldsAll(),
		},
		Plain: []Expectation{Violates(1, 3)},
	},
	{
		Name:    "stale-periodic-flush",
		Summary: "a paused owner's persist timer fires before its next poll: a snapshot write with no offset advance",
		Steps: steps(
			ownsAfterFlush,
			pause(0),
			takesOver(1),
			produce("a", 100),
			poll(1),
			advance(10*time.Second),
			poll(1), // m1 flushes a=115 and commits
			resume(0),
			persist(0), // m0's stale a=15, written alone
		),
		Transactional: []Expectation{Fenced(0, 17), HoldsAll()},
		Plain:         []Expectation{Violates(1, 3)},
	},
	{
		Name:    "first-flush-gated-by-seeded-offset",
		Summary: "a stale owner that never committed: its first flush carries the offset seeded at assignment, so it is fenced too",
		Steps: steps(
			join(0),
			produce("a", 10),
			poll(0),
			poll(0), // owns everything, folds a=10; no commit yet
			pause(0),
			takesOver(1),
			produce("a", 5),
			poll(1),
			advance(10*time.Second),
			poll(1), // m1 flushes a=15 and commits
			resume(0),
			persist(0), // m0's first flush: a=10
		),
		Transactional: []Expectation{Fenced(0, 13), HoldsAll()},
		Plain:         []Expectation{Violates(1, 3)},
	},
	{
		Name:    "flush-before-first-join",
		Summary: "a member's flush and persist timers fire before its first poll: its client joined the group as it started and owns the partitions, but nothing was folded, so nothing goes out ungated, and it commits once it polled",
		Steps: steps(
			join(0),
			flush(0),
			persist(0),
			produce("a", 10),
			flush(0),
			poll(0),
			persist(0),
			poll(0),
			advance(10*time.Second),
			poll(0),
		),
		Transactional: []Expectation{NothingUngated(), Lands(0, 8), NeverFenced(), HoldsAll()},
		Plain:         []Expectation{NothingUngated(), Lands(0, 8), HoldsAll()},
	},
	{
		Name:    "two-overlapping-stale-owners",
		Summary: "two paused owners in a row wake after a third member took over, and both flush",
		Steps: steps(
			ownsAfterFlush,
			pause(0),
			takesOver(1),
			produce("a", 100),
			poll(1), // m1 folds a=115, not flushed
			pause(1),
			takesOver(2),
			produce("a", 1000),
			poll(2),
			advance(10*time.Second),
			poll(2), // m2 flushes a=1015 and commits
			resume(0),
			flush(0), // stale a=15
			resume(1),
			flush(1), // stale a=115
		),
		Transactional: []Expectation{Fenced(0, 24), Fenced(1, 26), HoldsAll()},
		Plain:         []Expectation{Violates(1, 3)},
	},
	{
		Name:     "generation-bump-keeps-partitions",
		Summary:  "cooperative-sticky: a third member joins, the generation moves on, m0 and m1 keep their partitions and are not fenced",
		Protocol: sim.ClassicCooperative,
		Steps: steps(
			join(0), join(1),
			poll(0), poll(1), poll(0), poll(1), poll(0), poll(1),
			produce("a", 10), produce("b", 7),
			poll(0), poll(1),
			advance(10*time.Second),
			poll(0), poll(1), // both flush and commit
			join(2),
			poll(2), poll(0), poll(1), poll(2), poll(0), poll(1), // the generation moves on; m2 gets nothing
			produce("a", 5), produce("b", 3),
			poll(0), poll(1),
			advance(10*time.Second),
			poll(0), poll(1), // both flush and commit under the new generation
		),
		Transactional: []Expectation{CommitsUnder(0, 2), CommitsUnder(1, 2), Lands(0, 16), Lands(1, 16), HoldsAll()},
		Plain:         []Expectation{CommitsUnder(0, 2), CommitsUnder(1, 2), Lands(0, 16), Lands(1, 16), HoldsAll()},
	},
	{
		Name:    "double-handover-crashed-owners",
		Summary: "two owners in a row crash, each leaving a transaction open; the third owner's recovery still returns the newest snapshot",
		Steps: steps(
			ownsAfterFlush,
			advance(10*time.Second),
			poll(0), // m0 flushes a=15 and commits
			crash(0),
			takesOver(1),
			produce("a", 100),
			poll(1),
			advance(10*time.Second),
			poll(1), // m1 flushes a=115 and commits
			crash(1),
			takesOver(2),
		),
		Transactional: []Expectation{Recovers(2, "a", "115"), NoStall(), HoldsAll()},
		Plain:         []Expectation{Recovers(2, "a", "115"), HoldsAll()},
	},
	{
		Name:    "takeover-abort-after-hard-crash",
		Summary: "an owner crashes with a transaction open; the next owner's takeover aborts it, and its recovery does not wait for the transaction timeout",
		Steps: steps(
			ownsAfterFlush,
			crash(0),
			takesOver(1),
		),
		Transactional: []Expectation{Recovers(1, "a", "10"), RecoveryTakes(1, 0, time.Second), HoldsAll()},
		Plain:         []Expectation{Recovers(1, "a", "10"), HoldsAll()},
	},
	{
		Name:    "foreign-open-transaction-across-recovery",
		Summary: "another producer's open transaction pins the snapshot log below a committed snapshot; the next owner's recovery waits it out and returns that snapshot",
		Steps: steps(
			ownsAfterFlush, // p1 holds a=10
			Step{Kind: ForeignOpen, Partition: int(PartitionOf("a", 2))},
			advance(10*time.Second),
			poll(0), // m0 flushes a=15 behind the open transaction and commits
			leave(0),
			join(1),
			poll(1), // m1's recovery waits behind the open transaction
			advance(20*time.Second),
			Step{Kind: ForeignEnd, Commit: true},
			poll(1),
		),
		Transactional: []Expectation{Recovers(1, "a", "15"), RecoveryTakes(1, 10*time.Second, 21*time.Second), HoldsAll()},
	},
	{
		Name:    "truncated-snapshot-log",
		Summary: "the snapshot log loses its tail under a recovery that captured the old end: the read stalls and names the truncation, then the restart recovers the shortened log",
		Steps: steps(
			ownsAfterFlush,
			leave(0), // flushes a=15 and commits
			Step{Kind: ForeignOpen, Partition: int(PartitionOf("a", 2)), Hang: true},
			join(1),
			poll(1), // m1's recovery waits behind the hanging transaction
			Step{Kind: Truncate, Partition: int(PartitionOf("a", 2))},
			advance(70*time.Second), // past the stall deadline (1 min)
			poll(1),
			poll(1), // the restarted recovery reads the shortened log
		),
		Transactional: []Expectation{Stalls(1, store.StallTruncation), Recovers(1, "a", "15"), HoldsAll()},
	},
	{
		Name:    "slow-progressing-recovery",
		Summary: "every snapshot fetch takes 20 s and returns one record: the recovery takes longer than its stall deadline but never stalls",
		Steps: steps(
			join(0),
			produce("a", 1), produce("b", 2), produce("c", 3), produce("d", 4), produce("e", 5), produce("f", 6), produce("g", 7), produce("h", 8),
			poll(0), poll(0),
			advance(10*time.Second),
			poll(0), // flush and commit eight keys
			leave(0),
			Step{Kind: SlowFetches, D: 20 * time.Second},
			join(1),
			poll(1),
			advance(2*time.Minute),
			poll(1),
			advance(2*time.Minute),
			poll(1),
		),
		Transactional: []Expectation{NoStall(), RecoveryTakes(1, time.Minute, 5*time.Minute), HoldsAll()},
		Plain:         []Expectation{NoStall(), HoldsAll()},
	},
	{
		Name:    "zombie-polls-before-its-news",
		Summary: "a paused owner wakes and polls, and its fetch beats the news of the takeover, as a zombie's may on a broker: it folds and flushes what was due before it hears it lost the partition; the fence refuses the write, which without it lands",
		Steps: steps(
			Scenario732[:len(Scenario732)-2], // up to m0's wake
			advance(6*time.Second),           // m0's persist is due when it wakes
			resume(0),
			Step{Kind: PollFirst, Member: 0},
		),
		Transactional: []Expectation{Fenced(0, len(Scenario732)), HoldsAll()},
		// The zombie folded what it fetched, so its write equals the new
		// owner's; without the fence it lands all the same.
		Plain:   []Expectation{WriteLands(0, len(Scenario732)), HoldsAll()},
		SimOnly: "whether a woken member's fetch or its heartbeat goes first is franz-go's to decide on kfake and on a broker",
	},
	{
		Name:     "zombie-restart-confirms-its-ownership",
		Summary:  "an owner evicted while paused wakes with a restart due (its write was fenced while it slept) and polls before it hears of its eviction: the restart asks the coordinator first, which no longer lists the member, so it takes nothing over and the live owner's producer is not fenced",
		Protocol: sim.Consumer,
		Steps: steps(
			join(0),
			produce("a", 7),
			Step{Kind: SlowFetches, D: 12 * time.Second},
			poll(0), // its fetch answers in 12s
			pause(0),
			join(1),
			advance(11*time.Second), // m0 evicted, m1 takes over
			advance(2*time.Second),  // m0 folds a=7, its flush is fenced: a restart is due
			Step{Kind: SlowFetches},
			advance(12*time.Second), // m1 recovers
			poll(1),                 // m1 folds a=7 and flushes it
			produce("a", 2),
			poll(1), // m1 folds a=9, not yet flushed
			resume(0),
			Step{Kind: PollFirst, Member: 0}, // m0 folds a=9; its flush is fenced: a restart is due
			Step{Kind: PollFirst, Member: 0}, // the restart, before m0 hears its news
			advance(6*time.Second),           // m0 rejoins; m1 flushes a=9
		),
		// Without the confirmation the restart's takeover fences m1's
		// producer of p1, and m1's flush with it.
		Transactional: []Expectation{Fenced(0, 7), Lands(1, 16), HoldsAll()},
		SimOnly:       "whether a woken member's fetch or its heartbeat goes first is franz-go's to decide on kfake and on a broker",
	},
	{
		Name:    "committed-reads-answer-durable-states",
		Summary: "members answer committed reads (the service's lookups) through a fold, a persist, a takeover and a stale owner's wake: each answer is a state some write made durable before it, never the fold in memory, and a member that lost the partition says it does not serve it once it hears so",
		Steps: steps(
			join(0),
			produce("a", 5),
			poll(0),
			query(0, "a"), // folded, not yet written: no state
			advance(6*time.Second),
			poll(0),
			query(0, "a"), // persisted: a=5@0
			pause(0),
			join(1),
			advance(11*time.Second),
			poll(1),
			produce("a", 3),
			poll(1),
			query(1, "a"), // recovered a=5@0; a=8@1 folded, not written
			advance(6*time.Second),
			poll(1),
			query(1, "a"), // a=8@1
			resume(0),
			query(0, "a"), // the stale owner's committed state, durable all the same
			poll(0),
			query(0, "a"), // it heard: not served here
		),
		Transactional: []Expectation{HoldsAll()},
		Plain:         []Expectation{HoldsAll()},
	},
	{
		Name:    "a-view-shows-committed-states",
		Summary: "another service's view of the snapshot topic reads through an owner's crash with its transaction open, the takeover that aborts it and the next owner's flush: it shows each committed state, never the crashed owner's open write",
		Steps: steps(
			ownsAfterFlush,
			Step{Kind: ReadView},
			crash(0), // a transaction left open on each snapshot partition
			Step{Kind: ReadView},
			takesOver(1),
			Step{Kind: ReadView},
			produce("a", 100),
			poll(1),
			advance(10*time.Second),
			poll(1),
			Step{Kind: ReadView},
		),
		Transactional: []Expectation{HoldsAll()},
	},
	{
		Name:    "a-pause-outlasts-a-waiting-poll",
		Summary: "an owner paused while its poll waits for records wakes after its persist fell due and another member took over: the poll ended while it slept, so the persist goes out as it wakes, before its next poll, as on kfake and a broker, and the fence refuses it",
		Steps: steps(
			join(0),
			advance(time.Second), // m0 takes over and recovers, on a broker too
			produce("a", 10),
			poll(0), // folds a=10
			poll(0), // nothing: the poll waits for records until the persist is due
			pause(0),
			join(1),
			poll(1),
			advance(11*time.Second), // m0 evicted, m1 takes over
			resume(0),
		),
		Transactional: []Expectation{Fenced(0, 9), HoldsAll()},
	},
	{
		Name:    "join-at-client-start",
		Summary: "a member joins its group when its client starts, not at its first poll, as franz-go does: m0, started first and never polled, takes over partitions before the quiesce (on the sim and kfake both, at its join; on a broker, as soon as its round completes)",
		Steps: steps(
			join(0),
			join(1),
			produce("a", 10),
			poll(1),
			advance(11*time.Second),
			poll(1),
		),
		Transactional: []Expectation{TakesOverBeforeQuiesce(0), HoldsAll()},
		Plain:         []Expectation{TakesOverBeforeQuiesce(0), HoldsAll()},
	},
	{
		Name:    "evicted-member-rejoins-in-the-background",
		Summary: "a member evicted while paused rejoins its group as soon as it wakes, from its client's background heartbeat, not at its next poll, as franz-go does: m0, evicted and never polled, takes over a partition while time passes",
		Steps: steps(
			join(0),
			join(1),
			produce("a", 10),
			Step{Kind: Evict, Member: 0},
			advance(3*time.Second),
			poll(1),
		),
		Transactional: []Expectation{TakesOverAfter(0, 4), HoldsAll()},
		Plain:         []Expectation{TakesOverAfter(0, 4), HoldsAll()},
	},
	revokeFlush("revoke-flush-classic-eager", sim.ClassicEager, history.OK,
		"classic eager revokes before the member rejoins: its revoke-time flush commits"),
	revokeFlush("revoke-flush-classic-cooperative", sim.ClassicCooperative, history.Fenced,
		"classic cooperative has moved the member to the new generation by revoke time: its revoke-time flush is fenced (safe: the new owner replays)"),
	revokeFlush("revoke-flush-consumer", sim.Consumer, history.OK,
		"KIP-848 keeps the member on its epoch until it acknowledges the revocation: its revoke-time flush commits"),
}

// revokeFlush: m0 owns both partitions with unflushed folds; m1 joins
// and takes one; m0's revoke-time flush of it has outcome.
func revokeFlush(name string, protocol sim.Protocol, outcome history.Outcome, summary string) Scenario {
	s := steps(
		join(0),
		poll(0), poll(0),
		produce("a", 10), produce("b", 7),
		poll(0),
		advance(10*time.Second),
		poll(0), // flush and commit
		produce("a", 5), produce("b", 3),
		poll(0), // unflushed folds on both partitions
		join(1),
		poll(1), poll(0), poll(1), poll(0), poll(1), poll(0), poll(1),
	)
	return Scenario{
		Name: name, Summary: summary, Protocol: protocol, Steps: s,
		Transactional: []Expectation{RevokeFlush(0, 1, outcome), HoldsAll()},
	}
}
