package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// tail is a read_committed consumer of the output topic that runs through
// the whole mode, from before the first member starts, as a downstream
// application would while the faults happen (Kafka's transactions_test.py
// checks such a consumer too). The verifier's read comes after the
// cluster is quiet; this one reads while transactions abort, members are
// fenced and leaders move. It must see exactly what the verifier's read
// sees: read_committed is the same log for every reader.
type tail struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	seen    map[[2]int64]int // input (partition, offset) -> outputs seen
	pos     map[int32]int64  // next offset read, control records counted
	strange int              // values that name no input
	err     error            // a fetch error that ended the tail
}

func startTail(seeds []string, topic string) (*tail, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &tail{cl: cl, cancel: cancel, done: make(chan struct{}), seen: map[[2]int64]int{}, pos: map[int32]int64{}}
	go t.run(ctx)
	return t, nil
}

func (t *tail) run(ctx context.Context) {
	defer close(t.done)
	for {
		fs := t.cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		var ferr error
		fs.EachError(func(topic string, p int32, err error) {
			// Retriable errors (a leader moving) franz-go retries itself;
			// what reaches here is not.
			if !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("%s/%d: %w", topic, p, err)
			}
		})
		t.mu.Lock()
		if ferr != nil && t.err == nil {
			t.err = ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			t.pos[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() {
				return
			}
			f := strings.Split(string(r.Value), "/")
			p, err1 := strconv.ParseInt(f[0], 10, 32)
			var off int64
			var err2 error
			if len(f) == 3 {
				off, err2 = strconv.ParseInt(f[1], 10, 64)
			}
			if len(f) != 3 || err1 != nil || err2 != nil {
				t.strange++
				return
			}
			t.seen[[2]int64{p, off}]++
		})
		t.mu.Unlock()
	}
}

// caughtUp says whether the tail has read every partition to ends.
func (t *tail) caughtUp(ends map[int32]int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for p, e := range ends {
		if t.pos[p] < e {
			return false
		}
	}
	return true
}

// behind describes how far the tail is from ends.
func (t *tail) behind(ends map[int32]int64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b []string
	for p, e := range ends {
		if t.pos[p] < e {
			b = append(b, fmt.Sprintf("p%d at %d of %d", p, t.pos[p], e))
		}
	}
	return strings.Join(b, ", ")
}

// stop ends the tail and waits for its goroutine.
func (t *tail) stop() {
	t.cancel()
	t.cl.Close()
	<-t.done
}

// awaitTail waits (observed, bounded by timeout) until the tail has read
// every output partition to ends, the ends the verifier read to.
func (c *chaos) awaitTail(t *tail, ends map[int32]int64) error {
	deadline := time.Now().Add(c.timeout)
	for !t.caughtUp(ends) {
		t.mu.Lock()
		err := t.err
		t.mu.Unlock()
		if err != nil {
			return fmt.Errorf("the concurrent read_committed consumer failed: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the concurrent read_committed consumer did not reach the end within %v: %s", c.timeout, t.behind(ends))
		}
		time.Sleep(200 * time.Millisecond) // polling the consumer's observed position, bounded by the deadline
	}
	return nil
}
