package sim

import "time"

// deferredCall is a partition's started call (a write, a commit, a batch)
// in flight: its run reaches the cluster at due, or earlier when its
// caller waits for it.
type deferredCall struct {
	due time.Time
	run func()
	ran bool
}

// deferrer is the backend skeleton's Defer for a backend whose started
// calls take latency of virtual time (BackendConfig.WriteLatency); nil for
// none, so that they complete in the caller.
//
// The calls run one at a time in the order they were started, across
// every backend of the cluster: from Advance once due, or from the
// goroutine that waits for one (hurry), earlier ones first. A call's run
// waits for its writes' transactions and leads them; every entry of a
// call started earlier on the same partition is taken by a run before
// it, so no run waits for another. A world that runs one goroutine at a
// time (Parked) stays deterministic.
func (c *Cluster) deferrer(latency time.Duration) func(run func()) func() {
	if latency <= 0 {
		return nil
	}
	return func(run func()) func() {
		c.mu.Lock()
		dc := &deferredCall{due: c.clk.now.Add(latency), run: run}
		c.deferred = append(c.deferred, dc)
		c.mu.Unlock()
		return func() { c.runThrough(dc) }
	}
}

// runThrough runs the deferred calls up to and including dc, unless dc
// ran already.
func (c *Cluster) runThrough(dc *deferredCall) {
	for {
		c.mu.Lock()
		if dc.ran || len(c.deferred) == 0 {
			c.mu.Unlock()
			return
		}
		next := c.pop()
		c.mu.Unlock()
		next.run()
	}
}

// pop takes the oldest deferred call off the queue. Called with c.mu
// held.
func (c *Cluster) pop() *deferredCall {
	dc := c.deferred[0]
	c.deferred[0] = nil
	c.deferred = c.deferred[1:]
	dc.ran = true
	return dc
}

// runDueLocked runs the deferred calls that are due, oldest first,
// without the lock. Called with c.mu held; returns with it held.
func (c *Cluster) runDueLocked() {
	for len(c.deferred) > 0 && !c.deferred[0].due.After(c.clk.now) {
		next := c.pop()
		c.mu.Unlock()
		next.run()
		c.mu.Lock()
	}
}

// nextDeferred is when the oldest deferred call is due.
func (c *Cluster) nextDeferred() (time.Time, bool) {
	if len(c.deferred) == 0 {
		return time.Time{}, false
	}
	return c.deferred[0].due, true
}

// CallsInFlight is how many started calls (BackendConfig.WriteLatency)
// have not reached the cluster yet, across its backends.
func (c *Cluster) CallsInFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.deferred)
}
