//go:build it

package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/storetest"
)

// The whole contract suite on Apache Kafka, in real time: every case on
// fresh topics, a fresh group and a fresh transactional.id prefix of the
// integration run's broker; the truncation case on a broker of its own,
// which it stops, cuts and restarts.
func TestContractOnKafka(t *testing.T) {
	storetest.Run(t, brokerHarness{kafkatest.Brokers(t)})
}

type brokerHarness struct{ brokers []string }

func (h brokerHarness) Run(t *testing.T, body func(t *testing.T, w storetest.World)) {
	h.run(t, nil, h.brokers, body)
}

// RunOnOwnCluster implements storetest.ClusterOfItsOwn: truncating a log
// means stopping its broker, so not the shared one.
func (h brokerHarness) RunOnOwnCluster(t *testing.T, body func(t *testing.T, w storetest.World)) {
	b, err := kafkatest.Start(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop() })
	h.run(t, b, []string{b.Addr}, body)
}

func (h brokerHarness) run(t *testing.T, own *kafkatest.Broker, seeds []string, body func(t *testing.T, w storetest.World)) {
	w := &brokerWorld{own: own}
	name := fmt.Sprintf("orders-%d", time.Now().UnixNano())
	w.world = &world{
		input: name, group: name + "-flow", prefix: "sf-" + name, foreignID: name + "-foreign",
		seeds: func() []string { return seeds }, dial: w.dialKafka, now: w.Now,
	}
	w.createTopics(t)
	body(t, w)
}

// brokerWorld is a contract-suite world on a real broker, in real time.
type brokerWorld struct {
	*world
	own *kafkatest.Broker // the test's own broker, for Truncate; nil on the shared one
	// truncating is the real time Truncate spent stopping, cutting and
	// restarting the broker. The world's clock (the backends' too) leaves
	// it out: in the suite's script a truncation is an instant event, as
	// it is in the sim's and kfake's virtual time, and a restart that
	// happens to outlast the stall deadline on a loaded machine must not
	// fire the deadline while the broker is down (the diagnosis would
	// find no log end to re-read).
	truncating atomic.Int64
}

// errLogEndUnavailable is what FailLogEndReads makes high-watermark reads
// fail with: the connection refuses to send them.
var errLogEndUnavailable = errors.New("log end read refused by the test (FailLogEndReads)")

// logEndConn fails the sending of every ListOffsets request at isolation
// level read_uncommitted (a high-watermark read) once the world's
// failLogEnd is set.
type logEndConn struct {
	net.Conn
	w *world
}

func (c logEndConn) Write(b []byte) (int, error) {
	c.w.mu.Lock()
	fail := c.w.faults.failLogEnd
	c.w.mu.Unlock()
	if fail && readUncommittedListOffsets(b) {
		return 0, errLogEndUnavailable
	}
	return c.Conn.Write(b)
}

// readUncommittedListOffsets reports whether b is a whole ListOffsets
// request (franz-go writes one request per Write) with isolation level 0.
// Layout: size int32, api key int16, version int16, correlation id int32,
// client id (int16 length, bytes), header tags if flexible (v6+; franz-go
// sends none: one zero byte), then the body: replica id int32, isolation
// level int8.
func readUncommittedListOffsets(b []byte) bool {
	if len(b) < 14 || int16(binary.BigEndian.Uint16(b[4:6])) != int16(kmsg.ListOffsets) {
		return false
	}
	version := int16(binary.BigEndian.Uint16(b[6:8]))
	pos := 14 + max(int(int16(binary.BigEndian.Uint16(b[12:14]))), 0)
	if version >= 6 {
		pos++
	}
	pos += 4 // replica id
	return version >= 2 && pos < len(b) && b[pos] == 0
}

func (w *brokerWorld) dialKafka(ctx context.Context, network, host string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	return logEndConn{conn, w.world}, nil
}

func (w *brokerWorld) FailLogEndReads(t *testing.T) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.faults.failLogEnd = true
	return errLogEndUnavailable
}

// StallTimeout: seconds, with a second of slack for scheduling; on a
// broker of the test's own, longer than its restart (Truncate), which the
// deadline must not catch half-way.
func (w *brokerWorld) StallTimeout() (time.Duration, time.Duration) {
	if w.own != nil {
		return 20 * time.Second, time.Second
	}
	return 3 * time.Second, time.Second
}

// Advance waits d: real time passes by itself.
func (w *brokerWorld) Advance(d time.Duration) { time.Sleep(d) }

// Settle cannot know when every goroutine is blocked; the suite orders its
// steps by what it observes instead.
func (w *brokerWorld) Settle() {}

func (w *brokerWorld) Now() time.Time { return time.Now().Add(-time.Duration(w.truncating.Load())) }

// Truncate stops the test's broker, cuts the snapshot partition's segment
// files at the first batch at or past end, removes the indexes and
// producer-state snapshots that the cut invalidates, and the clean-shutdown
// and recovery-point records so the broker recovers the log on start, then
// restarts it: the log end regresses, as after an unclean leader election
// that lost acknowledged records.
func (w *brokerWorld) Truncate(t *testing.T, in store.TopicPartition, end int64) {
	t.Helper()
	if w.own == nil {
		t.Fatal("Truncate needs a broker of the test's own (RunOnOwnCluster)")
	}
	tp := snapTP(in)
	began := time.Now()
	defer func() { w.truncating.Add(int64(time.Since(began))) }()
	w.cutAndRestart(t, tp, end)
}

// cutAndRestart stops the test's broker, cuts tp's segment files at the
// first batch at or past end, removes what the cut invalidates (indexes,
// producer-state snapshots, the clean-shutdown and recovery-point
// records, so the broker recovers the log on start), restarts it and
// waits until tp is served again, at end.
func (w *brokerWorld) cutAndRestart(t *testing.T, tp store.TopicPartition, end int64) {
	t.Helper()
	if err := w.own.Stop(); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(w.own.Dir, "data")
	pdir := filepath.Join(data, fmt.Sprintf("%s-%d", tp.Topic, tp.Partition))
	cutSegments(t, tp, filepath.Join(pdir, "*.log"), end)
	for _, pattern := range []string{"*.index", "*.timeindex", "*.txnindex", "*.snapshot"} {
		stale, _ := filepath.Glob(filepath.Join(pdir, pattern))
		for _, f := range stale {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, f := range []string{".kafka_cleanshutdown", "recovery-point-offset-checkpoint"} {
		if err := os.Remove(filepath.Join(data, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w.own.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// The partition is served once its leader is back; until then
	// ListOffsets answers a retriable error.
	for {
		hw, err := tryListEnd(ctx, w.admin, tp, 0)
		if err == nil {
			if hw != end {
				t.Fatalf("after truncating to %d the high watermark is %d", end, hw)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the restarted broker does not serve %s: %v", tp, err)
		}
		time.Sleep(100 * time.Millisecond) // polls the restarted broker
	}
}
