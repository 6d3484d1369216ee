// Package chanmutex is a mutex a testing/synctest bubble sees blocked on.
package chanmutex

import "context"

// Mutex is a mutex made of a channel of one slot: make(Mutex, 1). The
// engine's runner holds its lock through a rebalance callback (a recovery
// can take a while): a step waiting for it must count as blocked in a
// testing/synctest bubble, so that virtual time moves and the recovery
// can finish. A goroutine waiting
// on a sync.Mutex does not count, and the bubble would hang; one waiting
// to send on a channel of the bubble does.
type Mutex chan struct{}

func (m Mutex) Lock()   { m <- struct{}{} }
func (m Mutex) Unlock() { <-m }

// LockContext is Lock unless ctx ends first (a query that gives up).
func (m Mutex) LockContext(ctx context.Context) error {
	select {
	case m <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
