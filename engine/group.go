package engine

import (
	"context"
	"slices"
	"time"

	"github.com/snapfence/snapfence/store"
)

// The group report: every member reads, every GroupReportInterval and
// right after every rebalance callback, the whole group's view of the
// input (committed offsets, log ends, and which partitions the
// coordinator has assigned to a member), so that a partition nobody
// serves (its owner dead, the group rebalancing) is still reported, with
// its lag, by every instance that is alive. A member's own status shows
// only its own partitions, and their series go with them; a member
// assigned none is ready only once a report finds nothing unserved
// (Status.Ready).

// DefaultGroupReportInterval is Config.GroupReportInterval's default.
const DefaultGroupReportInterval = 5 * time.Second

// groupReportTimeout bounds one report's requests: the report runs on the
// runner's goroutine, between polls.
const groupReportTimeout = 2 * time.Second

// GroupPartition is one input partition as the consumer group's
// coordinator and the partition's leader report it.
type GroupPartition struct {
	Input store.TopicPartition
	// CommittedOffset is the group's committed offset; -1 if none.
	CommittedOffset int64
	// LogStartOffset and LogEndOffset are the partition's log start and
	// end (high watermark).
	LogStartOffset, LogEndOffset int64
	// Assigned: the coordinator has the partition assigned to a member
	// of the group.
	Assigned bool
	// Endpoint is the endpoint its member advertises
	// (kafkaio.Config.Endpoint); "" if it advertises none, or the
	// partition is not assigned.
	Endpoint string
	// Owner is the member it is assigned to, by its name in the group:
	// its instance id if it is a static member, else its member id; ""
	// if the partition is not assigned.
	Owner string
}

// Lag is the records of the partition no commit covers: LogEndOffset
// minus the committed offset (or, with none, minus LogStartOffset, where
// the input resets to), never below 0.
func (p GroupPartition) Lag() int64 {
	from := p.CommittedOffset
	if from < 0 {
		from = p.LogStartOffset
	}
	return max(p.LogEndOffset-from, 0)
}

// UnservedPartition is an input partition that no member of the group
// folds, with its lag, as the last group reports read it: no member is
// assigned it, or (Stalled) its member is, but the partition lags and its
// committed offset has not moved for a while (its member stopped, as a
// static member in a restart does, holding its partitions; or stuck, or
// recovering a large state).
type UnservedPartition struct {
	Input store.TopicPartition
	// CommittedOffset is the group's committed offset; -1 if none.
	CommittedOffset int64
	LogEndOffset    int64
	// Lag is GroupPartition.Lag.
	Lag int64
	// Stalled: the partition is assigned to Owner (GroupPartition.Owner),
	// it lags, and its committed offset has been the same in every report
	// since Since, at least the larger of GroupReportInterval and three
	// CommitIntervals ago.
	Stalled bool
	Owner   string
	Since   time.Time
}

// groupReport reads the group's view of the input into the status and
// the metrics, if a report is due. A failure keeps the
// last report (its time tells its age), with the error.
func (r *Member[S]) groupReport(ctx context.Context) {
	now := r.src.Now()
	if r.e.cfg.GroupReportInterval < 0 || (!r.lastGroupReport.IsZero() && now.Before(r.lastGroupReport.Add(r.e.cfg.GroupReportInterval))) {
		return
	}
	r.lastGroupReport = now
	rctx, cancel := context.WithTimeout(ctx, groupReportTimeout)
	defer cancel()
	described, err := r.src.DescribeGroup(rctx)
	if err != nil {
		r.e.cfg.obs().groupReportFailed()
		if ok, n := r.logs.allow("group report", now); ok {
			r.e.log.Warn("reading the group's offsets and assignment failed; the unserved partitions are as last read",
				"err", err, "not_logged_since_last", n)
		}
		r.status.groupReport(nil, now, err)
		return
	}
	r.group, r.groupSeq = described, r.groupSeq+1
	parts := make([]GroupPartition, len(described.Partitions))
	for i, p := range described.Partitions {
		parts[i] = GroupPartition(p)
	}
	r.status.groupReport(parts, now, nil)
}

// groupReportDue is when the next group report is due (zero: none will
// be).
func (r *Member[S]) groupReportDue() (time.Time, bool) {
	if r.e.cfg.GroupReportInterval < 0 {
		return time.Time{}, false
	}
	return r.lastGroupReport.Add(r.e.cfg.GroupReportInterval), true
}

// groupReport records a group report read at at: parts (nil with err).
func (b *statusBoard) groupReport(parts []GroupPartition, at time.Time, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.groupErr = err
	if err != nil {
		return
	}
	b.groupAt = at
	b.unserved = b.unserved[:0:0]
	b.endpoints, b.counts = map[store.TopicPartition]string{}, map[string]int32{}
	seen := map[store.TopicPartition]seenCommit{}
	for _, p := range parts {
		b.counts[p.Input.Topic]++
		if !p.Assigned {
			b.unserved = append(b.unserved, UnservedPartition{Input: p.Input, CommittedOffset: p.CommittedOffset,
				LogEndOffset: p.LogEndOffset, Lag: p.Lag()})
			continue
		}
		b.endpoints[p.Input] = p.Endpoint
		c, ok := b.commits[p.Input]
		if !ok || c.offset != p.CommittedOffset || c.owner != p.Owner {
			c = seenCommit{offset: p.CommittedOffset, owner: p.Owner, since: at}
		}
		seen[p.Input] = c
		if p.Lag() > 0 && b.stallAfter > 0 && at.Sub(c.since) >= b.stallAfter {
			b.unserved = append(b.unserved, UnservedPartition{Input: p.Input, CommittedOffset: p.CommittedOffset,
				LogEndOffset: p.LogEndOffset, Lag: p.Lag(), Stalled: true, Owner: p.Owner, Since: c.since})
		}
	}
	b.commits = seen
	slices.SortFunc(b.unserved, func(a, c UnservedPartition) int { return compareTP(a.Input, c.Input) })
	b.o.groupReported(parts, len(b.unserved))
}

// seenCommit is an assigned partition's committed offset and owner as the
// group reports first read them together, since.
type seenCommit struct {
	offset int64
	owner  string
	since  time.Time
}
