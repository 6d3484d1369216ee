// Package netfreeze switches a process's network connections off and on,
// as a long GC pause or a crash looks from the broker: the world's pause,
// evict and crash steps (internal/world/kfakeworld) and the end-to-end
// fence test on Kafka (engine/fence_it_test.go) use it.
package netfreeze

import (
	"context"
	"errors"
	"net"
	"sync"
)

// ErrDead is what a dead freezer's connections answer: the process is
// gone, its sockets with it.
var ErrDead = errors.New("netfreeze: the process crashed")

// Freezer is a switch over a set of a process's connections (its
// consumer's, or its store's). Frozen, their reads
// and writes and new dials block until it thaws (or the connection is
// closed, or the dial's context ends), deadlines ignored: a process in a
// long GC pause, as the broker sees it. Dead, every connection is closed
// and every read, write and dial fails: a crashed process. The waits are
// on channels, so a frozen client is durably blocked in a synctest bubble
// and virtual time moves on without it.
type Freezer struct {
	dialer func(ctx context.Context, network, host string) (net.Conn, error)

	mu     sync.Mutex
	thawed chan struct{} // non-nil while frozen; closed by thaw
	dead   bool
	conns  map[*frozenConn]struct{}
}

// New returns a thawed Freezer over the connections dialer makes.
func New(dialer func(ctx context.Context, network, host string) (net.Conn, error)) *Freezer {
	return &Freezer{dialer: dialer, conns: map[*frozenConn]struct{}{}}
}

// Freeze blocks the connections until Thaw.
func (f *Freezer) Freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.thawed == nil && !f.dead {
		f.thawed = make(chan struct{})
	}
}

// Thaw lets the connections go on.
func (f *Freezer) Thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.thawed != nil {
		close(f.thawed)
		f.thawed = nil
	}
}

// Kill closes every connection and fails what comes next; it thaws what
// was frozen, so blocked reads and writes fail too.
func (f *Freezer) Kill() {
	f.mu.Lock()
	f.dead = true
	conns := f.conns
	f.conns = map[*frozenConn]struct{}{}
	if f.thawed != nil {
		close(f.thawed)
		f.thawed = nil
	}
	f.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

// wait returns nil once not frozen; ErrDead if dead, net.ErrClosed if
// done closes first.
func (f *Freezer) wait(done <-chan struct{}) error {
	f.mu.Lock()
	thawed, dead := f.thawed, f.dead
	f.mu.Unlock()
	if dead {
		return ErrDead
	}
	if thawed == nil {
		return nil
	}
	select {
	case <-thawed:
		return f.wait(done)
	case <-done:
		return net.ErrClosed
	}
}

// Dial is a kgo.Dialer whose connections the freezer controls.
func (f *Freezer) Dial(ctx context.Context, network, host string) (net.Conn, error) {
	if err := f.wait(ctx.Done()); err != nil {
		return nil, err
	}
	c, err := f.dialer(ctx, network, host)
	if err != nil {
		return nil, err
	}
	fc := &frozenConn{Conn: c, f: f, closed: make(chan struct{})}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead {
		_ = c.Close()
		return nil, ErrDead
	}
	f.conns[fc] = struct{}{}
	return fc, nil
}

type frozenConn struct {
	net.Conn
	f         *Freezer
	closeOnce sync.Once
	closed    chan struct{}
}

func (c *frozenConn) Read(b []byte) (int, error) {
	if err := c.f.wait(c.closed); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	// A response that arrives during the pause is not seen until it ends.
	if werr := c.f.wait(c.closed); werr != nil {
		return 0, werr
	}
	return n, err
}

func (c *frozenConn) Write(b []byte) (int, error) {
	if err := c.f.wait(c.closed); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *frozenConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.f.mu.Lock()
		delete(c.f.conns, c)
		c.f.mu.Unlock()
	})
	return c.Conn.Close()
}
