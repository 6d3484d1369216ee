// Package world assembles a simulated cluster for the property tests
// (props/) and the scenario runner (cmd/simulate): engine members in one
// consumer group, an input topic with a producer, a snapshot store, and
// fault controls, driven by a vocabulary of steps and checked against the
// design's invariants after every step.
//
// The world runs on store/sim's deterministic cluster and virtual clock: a
// seed and a list of steps replay to a byte-identical history. Members run
// their steps on goroutines of their own (a recovery can wait behind an
// open transaction), and the world waits after every step until each
// member's step has finished or parked on the cluster (sim.Cluster.Parked):
// nothing moves between two steps of the driver.
//
// A crash is simulated with what a killed process leaves behind: its
// member stalls for good (the group evicts it when its session expires),
// its runner is never stepped or closed again (no flush, no commit, no
// revoke), and its engine, with its cache, is closed. The engine has no
// call for it.
//
// With Config.WarmRestarts each member slot keeps its cache on disk
// across its processes, so a Join after a Crash or a Leave is a warm
// restart (a delta recovery from the cache's checkpoint when the store
// accepts it), and the engines' states are checked against the committed
// snapshots (invariant 9).
//
// With Config.Standby the members keep standby replicas, and a partition
// moved to a member must recover from its replica's copy (invariant 11);
// with Config.Tables the folds look their keys up in a table the world
// writes, through a View per process that the engine waits on (invariant
// 12).
//
// The variants in Config (CachedIdentity, LSOBoundRecovery, RestartsUnconfirmed, QueriesReadLatest,
// TrustCheckpoints, TombstonesAheadOfCommit, CommitAheadOfWrites,
// EmitsAckedEarly, TimerRemovalsLost, StandbySkipsRecords,
// StandbyCheckpointsDropped, FollowUncommitted, TablesNotAwaited) are
// broken designs, there for the negative controls; this package is
// internal, so they are never user options.
package world

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Kind names a step.
type Kind string

// The steps of the vocabulary.
const (
	// Produce appends an input event: Key, Delta (a deposit or a
	// withdrawal; Delta 0 closes the account, a delete); under
	// Config.Timers a D above 0 (and a Delta not 0) sets a timer for the
	// key that long after the event.
	Produce Kind = "produce"
	// Poll runs one engine step of Member: a poll, the fold of what it
	// fetched, and the flush and commit when due.
	Poll Kind = "poll"
	// PollFirst is Poll with the group's news last: Member's poll
	// fetches, folds and flushes what is due before its heartbeat tells it
	// what the group did meanwhile. A woken zombie's first poll can do so
	// on a real broker, where the fetch and the heartbeat race; the
	// simulated member otherwise always hears its news first. kfake and a
	// broker run it as Poll: there the race is their scheduler's.
	PollFirst Kind = "poll-first"
	// Advance moves virtual time by D: persist, commit and tick timers,
	// session timeouts, transaction timeouts, and the live members'
	// clients' group work (rejoins, completed rounds, rejoins after an
	// eviction), as a real client's heartbeat goroutine does it.
	Advance Kind = "advance"
	// Join starts Member (a new process: a new engine, an empty cache, or
	// under WarmRestarts the cache its slot's last process left).
	Join Kind = "join"
	// Flush runs Member's flush and commit of everything it holds without
	// a poll first: its flush timer fired before its next poll could tell
	// it what the group did meanwhile (after a pause, the kafka-flow#732
	// window).
	Flush Kind = "flush"
	// Persist runs Member's persist timer without a poll first: its dirty
	// keys are written, the offset is not advanced (a stale owner's
	// periodic flush).
	Persist Kind = "persist"
	// SlowFetches makes every snapshot fetch take D of virtual time and
	// return one record (D 0 lifts it): a slow but progressing recovery.
	SlowFetches Kind = "slow-fetches"
	// Leave stops Member cleanly: revoke (flush and commit), leave.
	Leave Kind = "leave"
	// Pause stops Member as a GC pause: it neither polls nor heartbeats.
	Pause Kind = "pause"
	// Resume wakes a paused Member; it carries on with what it held.
	Resume Kind = "resume"
	// Evict removes Member from the group: it misses its session (a pause
	// past the session timeout) and wakes a zombie.
	Evict Kind = "evict"
	// Crash kills Member: no revoke, no flush, no leave (the group evicts
	// it when its session expires), and a transaction of its flush left
	// open on each snapshot partition it owned.
	Crash Kind = "crash"
	// ForeignOpen opens a transaction of another producer on snapshot
	// Partition (it pins the last stable offset); Hang makes it never time
	// out.
	ForeignOpen Kind = "foreign-open"
	// ForeignEnd commits (Commit) or aborts the open foreign transaction.
	ForeignEnd Kind = "foreign-end"
	// Compact compacts snapshot Partition (never past its last stable
	// offset).
	Compact Kind = "compact"
	// Truncate loses snapshot Partition's tail above its last stable
	// offset, as a broker that lost unreplicated records would, when that
	// tail holds only records of open transactions (no committed snapshot
	// is lost, so every invariant still holds): a recovery that captured
	// the old high watermark then stalls on a truncation.
	Truncate Kind = "truncate"
	// Recreate deletes the snapshot topic and creates it again, with each
	// partition's latest committed snapshot of every key not deleted
	// (tombstones ahead of the committed offset kept) restored into it and
	// offset markers up to the old high watermark
	// (an operator's restore from a backup: the offsets go on, the topic
	// id is new). It does nothing while a member's step is in flight or a
	// transaction is open on a snapshot or output partition.
	Recreate Kind = "recreate"

	// Replicate lets Member's standby replicas read (Config.Standby): a
	// second of virtual time passes (a standby round is due once a
	// second) and Member polls; its round follows every partition it
	// does not own into its cache.
	Replicate Kind = "replicate"
	// Wipe loses Member's machine with its disk (Config.Standby with
	// WarmRestarts): a running or paused Member crashes, and its slot's
	// cache directory is emptied, so its next process starts with no
	// copy of any partition, neither an owner's nor a standby's.
	Wipe Kind = "wipe"

	// TablePut writes Key's row of the lookup table (Config.Tables): a
	// new version of it, or, with Delta 0, a delete (a null value).
	TablePut Kind = "table-put"
	// TableOpen writes Key's row (a delete with Delta 0) in a transaction
	// of the table's producer left open (it holds back the views, which
	// read read_committed), until TableEnd or its timeout.
	TableOpen Kind = "table-open"
	// TableEnd commits (Commit) or aborts the table's open transaction.
	TableEnd Kind = "table-end"
	// ReadTable lets Member's view of the table read once (View.Step):
	// what a view's Run does on its own, at its own pace.
	ReadTable Kind = "read-table"

	// ReadView lets the world's view of the snapshot topic read once: a
	// reader of the application's state (engine/view) as another
	// service runs one, opened at the first such step. The history
	// records each change it applies, and the checker that it is a
	// state some write made durable before it (invariant 4).
	ReadView Kind = "read-view"
	// Query asks running Member for Key's committed state
	// (engine.ReadCommitted, as an HTTP lookup of the service does): the
	// history records what it answered, and the checker that it is a
	// state some write made durable before it (invariant 4).
	Query Kind = "query"
)

// Step is one step of a scenario. Fields a kind does not use are zero.
type Step struct {
	Kind      Kind          `json:"kind"`
	Member    int           `json:"member,omitempty"`
	Key       string        `json:"key,omitempty"`
	Delta     int           `json:"delta,omitempty"`
	D         time.Duration `json:"d,omitempty"`
	Partition int           `json:"partition,omitempty"`
	Commit    bool          `json:"commit,omitempty"`
	Hang      bool          `json:"hang,omitempty"`
}

func (s Step) String() string {
	switch s.Kind {
	case Produce:
		if s.Delta == 0 {
			return fmt.Sprintf("produce %s=close", s.Key)
		}
		if s.D > 0 {
			return fmt.Sprintf("produce %s=%+d timer %s", s.Key, s.Delta, s.D)
		}
		return fmt.Sprintf("produce %s=%+d", s.Key, s.Delta)
	case Poll, PollFirst, Flush, Persist, Join, Leave, Pause, Resume, Evict, Crash, Replicate, Wipe, ReadTable:
		return fmt.Sprintf("%s m%d", s.Kind, s.Member)
	case TablePut, TableOpen:
		if s.Delta == 0 {
			return fmt.Sprintf("%s %s=delete", s.Kind, s.Key)
		}
		if s.Delta != 1 {
			return fmt.Sprintf("%s %s=%d", s.Kind, s.Key, s.Delta)
		}
		return fmt.Sprintf("%s %s", s.Kind, s.Key)
	case Query:
		return fmt.Sprintf("query m%d %s", s.Member, s.Key)
	case ReadView:
		return string(ReadView)
	case TableEnd:
		if s.Commit {
			return "table-end commit"
		}
		return "table-end abort"
	case Advance:
		return fmt.Sprintf("advance %s", s.D)
	case SlowFetches:
		if s.D == 0 {
			return "fetches fast again"
		}
		return fmt.Sprintf("slow fetches %s", s.D)
	case ForeignOpen:
		if s.Hang {
			return fmt.Sprintf("foreign-open p%d (hangs)", s.Partition)
		}
		return fmt.Sprintf("foreign-open p%d", s.Partition)
	case ForeignEnd:
		if s.Commit {
			return "foreign-end commit"
		}
		return "foreign-end abort"
	case Compact:
		return fmt.Sprintf("compact p%d", s.Partition)
	case Truncate:
		return fmt.Sprintf("truncate p%d", s.Partition)
	case Recreate:
		return "recreate the snapshot topic"
	}
	return string(s.Kind)
}

// Trace formats steps one per line, numbered from 1.
func Trace(steps []Step) string {
	var b strings.Builder
	for i, s := range steps {
		fmt.Fprintf(&b, "%3d  %s\n", i+1, s)
	}
	return b.String()
}

// ParseStep reads a step as String writes it: the scenario language of
// the scripts under testdata. Its errors name the line's text.
func ParseStep(line string) (Step, error) {
	fail := func(why string) (Step, error) { return Step{}, fmt.Errorf("step %q: %s", line, why) }
	f := strings.Fields(line)
	if len(f) == 0 {
		return fail("empty")
	}
	member := func(arg string) (int, bool) {
		n, err := strconv.Atoi(strings.TrimPrefix(arg, "m"))
		return n, err == nil && strings.HasPrefix(arg, "m") && n >= 0
	}
	partition := func(arg string) (int, bool) {
		n, err := strconv.Atoi(strings.TrimPrefix(arg, "p"))
		return n, err == nil && strings.HasPrefix(arg, "p") && n >= 0
	}
	kind := Kind(f[0])
	switch {
	case line == "fetches fast again":
		return Step{Kind: SlowFetches}, nil
	case line == "recreate the snapshot topic" || line == string(Recreate):
		return Step{Kind: Recreate}, nil
	case line == string(ReadView):
		return Step{Kind: ReadView}, nil
	case len(f) == 3 && f[0] == "slow" && f[1] == "fetches":
		d, err := time.ParseDuration(f[2])
		if err != nil || d < 0 {
			return fail("want slow fetches DURATION")
		}
		return Step{Kind: SlowFetches, D: d}, nil
	}
	switch kind {
	case Produce:
		if len(f) != 2 && !(len(f) == 4 && f[2] == "timer") {
			return fail("want produce KEY=+N, KEY=-N or KEY=close, and optionally timer DURATION")
		}
		key, v, ok := strings.Cut(f[1], "=")
		if !ok || key == "" {
			return fail("want KEY=VALUE")
		}
		s := Step{Kind: Produce, Key: key}
		if v != "close" {
			n, err := strconv.Atoi(v)
			if err != nil || n == 0 || (v[0] != '+' && v[0] != '-') {
				return fail("the value is +N, -N (N not 0) or close")
			}
			s.Delta = n
		}
		if len(f) == 4 {
			d, err := time.ParseDuration(f[3])
			if err != nil || d <= 0 || s.Delta == 0 {
				return fail("a timer is a positive duration, on an event that does not close")
			}
			s.D = d
		}
		return s, nil
	case Poll, PollFirst, Flush, Persist, Join, Leave, Pause, Resume, Evict, Crash, Replicate, Wipe, ReadTable:
		if len(f) != 2 {
			return fail("want " + f[0] + " mN")
		}
		n, ok := member(f[1])
		if !ok {
			return fail("want " + f[0] + " mN")
		}
		return Step{Kind: kind, Member: n}, nil
	case Query:
		n, ok := 0, len(f) == 3
		if ok {
			n, ok = member(f[1])
		}
		if !ok || strings.Contains(f[2], "=") {
			return fail("want query mN KEY")
		}
		return Step{Kind: Query, Member: n, Key: f[2]}, nil
	case TablePut, TableOpen:
		if len(f) != 2 {
			return fail("want " + f[0] + " KEY, KEY=N or KEY=delete")
		}
		key, v, found := strings.Cut(f[1], "=")
		s := Step{Kind: kind, Key: key, Delta: 1}
		switch {
		case key == "":
			return fail("no key")
		case !found:
		case v == "delete":
			s.Delta = 0
		default:
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return fail("a row is a positive number or delete")
			}
			s.Delta = n
		}
		return s, nil
	case TableEnd, ForeignEnd:
		if len(f) != 2 || (f[1] != "commit" && f[1] != "abort") {
			return fail("want " + f[0] + " commit or " + f[0] + " abort")
		}
		return Step{Kind: kind, Commit: f[1] == "commit"}, nil
	case Advance:
		if len(f) != 2 {
			return fail("want advance DURATION")
		}
		d, err := time.ParseDuration(f[1])
		if err != nil || d <= 0 {
			return fail("want advance DURATION, above 0")
		}
		return Step{Kind: Advance, D: d}, nil
	case ForeignOpen:
		if len(f) != 2 && !(len(f) == 3 && f[2] == "(hangs)") {
			return fail("want foreign-open pN, optionally (hangs)")
		}
		n, ok := partition(f[1])
		if !ok {
			return fail("want foreign-open pN")
		}
		return Step{Kind: ForeignOpen, Partition: n, Hang: len(f) == 3}, nil
	case Compact, Truncate:
		if len(f) != 2 {
			return fail("want " + f[0] + " pN")
		}
		n, ok := partition(f[1])
		if !ok {
			return fail("want " + f[0] + " pN")
		}
		return Step{Kind: kind, Partition: n}, nil
	}
	return fail("no such step")
}

// ParseSteps reads one step a line; blank lines and lines starting with
// # are skipped.
func ParseSteps(text string) ([]Step, error) {
	var out []Step
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := ParseStep(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		out = append(out, s)
	}
	return out, nil
}
