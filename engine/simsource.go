package engine

import (
	"context"
	"time"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
)

// SimSource is a member of a simulated cluster's consumer group, as a
// Source: rebalance callbacks run inside Poll, on the caller's goroutine,
// and time is the cluster's virtual time.
type SimSource struct {
	c        *sim.Cluster
	m        *sim.Member
	group    string
	h        Handler
	pos      map[store.TopicPartition]int64
	paused   map[store.TopicPartition]bool
	maxPoll  int
	ctx      context.Context
	callback sim.Callbacks
}

// NewSimSource returns a factory for Engine.NewRunner: a new member of
// group on c, subscribed to topics, fetching at most maxPoll records a
// poll (0: 500).
func NewSimSource(c *sim.Cluster, group string, protocol sim.Protocol, maxPoll int, topics ...string) func(Handler) (Source, error) {
	return func(h Handler) (Source, error) {
		if maxPoll <= 0 {
			maxPoll = 500
		}
		s := &SimSource{c: c, m: c.NewMember(group, protocol, topics...), group: group, h: h,
			pos: map[store.TopicPartition]int64{}, paused: map[store.TopicPartition]bool{}, maxPoll: maxPoll}
		s.callback = sim.Callbacks{
			Assigned: func(_ *sim.Member, tps []store.TopicPartition) {
				for _, tp := range tps {
					delete(s.paused, tp)
					off, _ := s.CommittedOffset(s.ctx, tp)
					s.pos[tp] = off
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
	}
}

// Member is the simulated group member, for faults (Stall, Resume).
func (s *SimSource) Member() *sim.Member { return s.m }

func (s *SimSource) forget(tps []store.TopicPartition) {
	for _, tp := range tps {
		delete(s.pos, tp)
		delete(s.paused, tp)
	}
}

// Poll implements Source: one poll of the member (a stalled member does
// nothing), then a read_committed fetch of every owned partition. It never
// waits: virtual time moves only when the caller advances it.
func (s *SimSource) Poll(ctx context.Context, _ time.Duration) ([]Record, error) {
	s.ctx = ctx
	s.m.Poll(s.callback)
	var out []Record
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
			out = append(out, Record{
				Topic: tp.Topic, Partition: tp.Partition, Offset: e.Offset, Key: e.Record.Key, Value: e.Record.Value, Headers: e.Record.Headers,
			})
		}
		s.pos[tp] = next
	}
	return out, nil
}

// PollDone implements Source.
func (s *SimSource) PollDone() {}

// Identity implements Source.
func (s *SimSource) Identity() store.GroupIdentity { return s.m.Identity() }

// CommittedOffset implements Source: the committed offset, or 0.
func (s *SimSource) CommittedOffset(_ context.Context, tp store.TopicPartition) (int64, error) {
	off, _ := s.c.CommittedOffset(s.group, tp)
	return off, nil
}

// Seek implements Source.
func (s *SimSource) Seek(tp store.TopicPartition, offset int64) { s.pos[tp] = offset }

// Resume implements Source.
func (s *SimSource) Resume(tp store.TopicPartition) { delete(s.paused, tp) }

// Pause implements Source.
func (s *SimSource) Pause(tp store.TopicPartition) { s.paused[tp] = true }

// Now implements Source.
func (s *SimSource) Now() time.Time { return s.c.Now() }

// Close implements Source: a clean leave.
func (s *SimSource) Close(ctx context.Context) error {
	s.ctx = ctx
	s.m.Leave(s.callback)
	return nil
}

// Crash stalls the member for good, as a killed process.
func (s *SimSource) Crash() { s.m.Stall() }
