package kafkatest

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Dialer is a kgo.Dialer's function.
type Dialer = func(ctx context.Context, network, host string) (net.Conn, error)

// SlowFetches wraps dial so that every Fetch request written on its
// connections first waits latency() (0: none). With one batch per fetch,
// a read that progresses slowly.
//
// The wait ends early when the client closes the connection: a client
// closed while a request waits must not leave its write goroutine behind
// (in a synctest bubble that goroutine outlives the test and fails it with
// "blocked goroutines remain").
func SlowFetches(dial Dialer, latency func() time.Duration) Dialer {
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		conn, err := dial(ctx, network, host)
		if err != nil {
			return nil, err
		}
		return &slowConn{Conn: conn, latency: latency, closed: make(chan struct{})}, nil
	}
}

type slowConn struct {
	net.Conn
	latency func() time.Duration
	closed  chan struct{}
	once    sync.Once
}

func (c *slowConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func (c *slowConn) Write(b []byte) (int, error) {
	// A request starts with its length (int32) and API key (int16).
	if d := c.latency(); d > 0 && len(b) >= 6 && int16(binary.BigEndian.Uint16(b[4:6])) == int16(kmsg.Fetch) {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.closed:
			t.Stop()
			return 0, net.ErrClosed
		}
		// The client's write deadline passed meanwhile; the latency
		// stands for time on the wire, not a dead broker.
		_ = c.Conn.SetWriteDeadline(time.Time{})
	}
	return c.Conn.Write(b)
}
