// Package simsource is an engine.Input over a simulated cluster
// (store/sim): each member an engine opens on it is a member of the
// cluster's consumer group, and folds its input deterministically, in
// virtual time. It is a package of its own so that
// the engine, which users link into their services, imports no backend.
package simsource

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/internal/input"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// DefaultMaxPoll is how many records a poll fetches at most when New is
// given 0.
const DefaultMaxPoll = 500

// Source is a member of a simulated cluster's consumer group, as the
// engine drives it: rebalance callbacks run inside Poll, on the caller's
// goroutine, and time is the cluster's virtual time.
type Source struct {
	c     *sim.Cluster
	m     *sim.Member
	group string
	h     input.Handler
	// pos is the fetch position of each partition the engine has
	// positioned (Seek): as the engine's Kafka source does, a partition
	// is fetched only once the engine, having resolved its committed
	// offset itself, tells it where from, so a partition whose offset is
	// held is not fetched and the others are.
	pos      map[store.TopicPartition]int64
	paused   map[store.TopicPartition]bool
	maxPoll  int
	ctx      context.Context
	callback sim.Callbacks
	// newsLast makes the next Poll leave the group exchange out (NewsLast).
	newsLast bool
	// waitingUntil is when the last Poll's wait would have ended: it
	// fetched nothing, and a Kafka client's poll would still be waiting
	// for records (zero: it would not). endWait makes the next Poll that
	// wait's end (EndWait).
	waitingUntil time.Time
	endWait      bool
	// endedAt is the end of the wait the step in flight ends (EndWait),
	// in Unix nanoseconds (0: none): the engine decides what fell due as
	// of then, when the poll returned.
	endedAt atomic.Int64
	topics  []string
}

// New returns the input of group on c, subscribed to topics, for
// Engine.Run and Engine.Join: each opening is a new member, fetching
// at most maxPoll records a poll (0: DefaultMaxPoll).
func New(c *sim.Cluster, group string, protocol sim.Protocol, maxPoll int, topics ...string) engine.Input {
	return input.OpenFunc(func(o input.Opening) (input.Source, error) {
		h := o.Handler
		if maxPoll <= 0 {
			maxPoll = DefaultMaxPoll
		}
		s := &Source{c: c, m: c.NewMember(group, protocol, topics...), group: group, h: h,
			pos: map[store.TopicPartition]int64{}, paused: map[store.TopicPartition]bool{}, maxPoll: maxPoll, topics: topics}
		s.callback = sim.Callbacks{
			Assigned: func(_ *sim.Member, tps []store.TopicPartition) {
				for _, tp := range tps {
					delete(s.paused, tp)
				}
				h.Assigned(s.ctx, tps)
			},
			Revoked: func(_ *sim.Member, tps []store.TopicPartition) {
				h.Revoked(s.ctx, tps)
				s.forget(tps)
			},
			Lost: func(_ *sim.Member, tps []store.TopicPartition) {
				h.Lost(s.ctx, tps)
				s.forget(tps)
			},
		}
		return s, nil
	})
}

// Member is the simulated group member, for faults (Stall, Resume). A
// crash is a Stall never resumed, with the runner never stepped or closed
// again: the group evicts the member when its session expires, and
// nothing is flushed, committed or revoked.
func (s *Source) Member() *sim.Member { return s.m }

func (s *Source) forget(tps []store.TopicPartition) {
	for _, tp := range tps {
		delete(s.pos, tp)
		delete(s.paused, tp)
	}
}

// Poll implements the engine's source: one poll of the member (a stalled member does
// nothing), then a read_committed fetch of every owned partition. It never
// waits: virtual time moves only when the caller advances it. A poll that
// fetched nothing notes instead when a Kafka client's would have stopped
// waiting for records (WaitEnded).
func (s *Source) Poll(ctx context.Context, wait func() time.Duration) ([]input.Record, error) {
	s.ctx = ctx
	s.waitingUntil = time.Time{}
	if s.endWait {
		s.endWait = false
		return nil, nil
	}
	if s.newsLast {
		s.newsLast = false
	} else {
		s.m.Poll(s.callback)
	}
	var out []input.Record
	for _, tp := range s.m.Owned() {
		pos, ok := s.pos[tp]
		if !ok || s.paused[tp] || len(out) >= s.maxPoll {
			continue
		}
		ents, next, err := s.c.Fetch(tp, pos, s.maxPoll-len(out), true)
		if err != nil {
			return out, err
		}
		for _, e := range ents {
			out = append(out, input.Record{
				Topic: tp.Topic, Partition: tp.Partition, Offset: e.Offset, Key: e.Record.Key, Value: e.Record.Value, Headers: e.Record.Headers,
				Timestamp: e.Appended, // the log append time: event time on the virtual clock
			})
		}
		s.pos[tp] = next
	}
	if len(out) == 0 && wait != nil {
		if d := wait(); d > 0 {
			s.waitingUntil = s.c.Now().Add(d)
		}
	}
	return out, nil
}

// WaitEnded reports whether the last Poll fetched nothing and the wait a
// Kafka client's poll would have gone on with has run out since, no
// record having come (RecordsCame) and the engine having done nothing
// else meanwhile: the poll would have returned, and the engine done what
// fell due (a flush, a persist, a timer), by now.
func (s *Source) WaitEnded() bool {
	return !s.waitingUntil.IsZero() && !s.c.Now().Before(s.waitingUntil)
}

// RecordsCame ends the last Poll's wait: records it would have fetched
// came, or the engine did something else, so the poll has returned.
func (s *Source) RecordsCame() { s.waitingUntil = time.Time{} }

// EndWait makes the next Poll the end of the last one's wait: it returns
// nothing at once, with no group exchange and no fetch, and the engine
// goes on with what fell due meanwhile. A paused process's poll ended so
// while its connections were frozen, and what fell due goes out as it
// wakes, before it hears what the group did meanwhile.
func (s *Source) EndWait() {
	s.endedAt.Store(s.waitingUntil.UnixNano())
	s.waitingUntil = time.Time{}
	s.endWait = true
}

// Background is the client's own group work between polls, as a Kafka
// client does it on goroutines of its own: it heartbeats, joins its group
// (at once when the client starts, not at its first poll), rejoins a
// round in preparation and takes the assignment of a completed one; the
// rebalance callbacks that result run now, on the caller's goroutine.
// Call it while no poll is in flight (the engine's callbacks run between
// polls).
func (s *Source) Background(ctx context.Context) {
	s.ctx = ctx
	s.m.Poll(s.callback)
}

// NewsLast makes the next Poll fetch what the member believes it owns
// without its group exchange first: its records are folded, and what is
// due flushed, before the member hears what the group did meanwhile (the
// Poll after it). On a real broker a woken zombie's fetch can beat the
// heartbeat that tells it of its eviction so.
func (s *Source) NewsLast() { s.newsLast = true }

// PollDone implements the engine's source.
func (s *Source) PollDone() { s.endedAt.Store(0) }

// Go implements the engine's source: f runs at once, on the caller's goroutine,
// so that a run is a function of its seed and steps.
func (s *Source) Go(f func()) { f() }

// Identity implements the engine's source.
func (s *Source) Identity() store.GroupIdentity { return s.m.Identity() }

// CommittedOffset implements the engine's source: the committed offset, or 0; an error
// wrapping store.ErrOffsetUnstable while a transaction holds it.
func (s *Source) CommittedOffset(_ context.Context, tp store.TopicPartition) (int64, error) {
	off, _, err := s.c.StableCommittedOffset(s.group, tp)
	if err != nil {
		return 0, fmt.Errorf("engine: committed offset of %s in group %s: %w: %w", tp, s.group, store.ErrOffsetUnstable, err)
	}
	return off, nil
}

// ConfirmOwner implements the engine's source: the coordinator's answer
// (sim.Cluster.ConfirmOwner).
func (s *Source) ConfirmOwner(_ context.Context, tp store.TopicPartition, id store.GroupIdentity) error {
	if why := s.c.ConfirmOwner(id, tp); why != "" {
		return &input.NotOwnerError{Input: tp, Identity: id, Why: why}
	}
	return nil
}

// Seek implements the engine's source: tp is fetched from offset on.
func (s *Source) Seek(tp store.TopicPartition, offset int64) { s.pos[tp] = offset }

// Resume implements the engine's source.
func (s *Source) Resume(tp store.TopicPartition) { delete(s.paused, tp) }

// Pause implements the engine's source.
func (s *Source) Pause(tp store.TopicPartition) { s.paused[tp] = true }

// LogEnd implements the engine's source: the partition's high watermark as the
// cluster answers now.
func (s *Source) LogEnd(tp store.TopicPartition) (int64, bool) {
	_, _, end, err := s.c.Offsets(tp)
	return end, err == nil
}

// Now implements the engine's source.
//
// In the step that ends a poll's wait (EndWait), it is when the wait ran
// out: what the engine does then is what fell due by then, as a Kafka
// client's poll would have returned then.
func (s *Source) Now() time.Time {
	if t := s.endedAt.Load(); t != 0 {
		return time.Unix(0, t)
	}
	return s.c.Now()
}

// Sleep implements the engine's source: d of virtual time, which passes only as
// the caller advances the cluster's clock.
func (s *Source) Sleep(ctx context.Context, d time.Duration) { s.c.Sleep(ctx, d) }

// Close implements the engine's source: a clean leave.
func (s *Source) Close(ctx context.Context) error {
	s.ctx = ctx
	s.m.Leave(s.callback)
	return nil
}

// CheckTopics implements the engine's source: a missing topic is a
// *store.ConfigError naming it.
func (s *Source) CheckTopics(_ context.Context, topics []string) error {
	for _, t := range topics {
		if _, ok := s.c.Topic(t); !ok {
			return &store.ConfigError{Subject: fmt.Sprintf("output topic %q", t), Problem: "does not exist", Fix: "create it"}
		}
	}
	return nil
}

// Partitions implements the engine's source: every partition of the
// member's topics.
func (s *Source) Partitions(context.Context) ([]store.TopicPartition, error) {
	var out []store.TopicPartition
	for _, t := range s.topics {
		cfg, ok := s.c.Topic(t)
		if !ok {
			return nil, fmt.Errorf("simsource: topic %q does not exist", t)
		}
		for p := range cfg.Partitions {
			out = append(out, store.TopicPartition{Topic: t, Partition: int32(p)})
		}
	}
	return out, nil
}

// DescribeGroup implements the engine's source: every partition of the
// member's topics with the group's committed offset, its log start and
// end, and whether the coordinator has it assigned to a member.
func (s *Source) DescribeGroup(ctx context.Context) (input.GroupReport, error) {
	tps, err := s.Partitions(ctx)
	if err != nil {
		return input.GroupReport{}, err
	}
	members, owners := s.c.GroupMembers(s.group)
	out := input.GroupReport{Partitions: make([]input.GroupPartition, 0, len(tps)), Members: members}
	for _, tp := range tps {
		start, _, end, err := s.c.Offsets(tp)
		if err != nil {
			return input.GroupReport{}, err
		}
		committed, ok := s.c.CommittedOffset(s.group, tp)
		if !ok {
			committed = -1
		}
		owner, assigned := owners[tp]
		out.Partitions = append(out.Partitions, input.GroupPartition{Input: tp, CommittedOffset: committed, LogStartOffset: start,
			LogEndOffset: end, Assigned: assigned, Owner: owner})
	}
	return out, nil
}
