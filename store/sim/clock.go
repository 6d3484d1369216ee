package sim

import (
	"sort"
	"time"
)

// Epoch is the virtual time at which every cluster starts, so that histories
// of the same seed are byte-identical.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// clock is the cluster's virtual clock. Only Cluster.Advance moves it;
// nothing in the sim reads the machine's time. Guarded by Cluster.mu.
type clock struct {
	now    time.Time
	seq    uint64
	timers []*timer
}

type timer struct {
	at  time.Time
	seq uint64 // ties fire in creation order
	ch  chan time.Time
}

// after returns a channel that receives once the virtual time reaches
// now+d.
func (c *clock) after(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.seq++
	c.timers = append(c.timers, &timer{at: c.now.Add(d), seq: c.seq, ch: ch})
	return ch
}

// nextTimer is the earliest pending timer's deadline.
func (c *clock) nextTimer() (time.Time, bool) {
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	sort.Slice(c.timers, func(i, j int) bool {
		if !c.timers[i].at.Equal(c.timers[j].at) {
			return c.timers[i].at.Before(c.timers[j].at)
		}
		return c.timers[i].seq < c.timers[j].seq
	})
	return c.timers[0].at, true
}

// set moves the clock to t and fires the timers due.
func (c *clock) set(t time.Time) {
	c.now = t
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if !tm.at.After(t) {
			tm.ch <- t
			continue
		}
		kept = append(kept, tm)
	}
	for i := len(kept); i < len(c.timers); i++ {
		c.timers[i] = nil
	}
	c.timers = kept
}
