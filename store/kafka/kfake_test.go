package kafka_test

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/storetest"
)

const (
	inputTopic = "orders"
	group      = "flow"
	prefix     = storetest.Application
)

// fakeWorld is a kfake cluster on a virtual network inside a synctest
// bubble: the real franz-go client against an in-process broker, in virtual
// time.
type fakeWorld struct {
	*world
	t   *testing.T
	net *kfake.VirtualNetwork
	dir string // the cluster's data directory, for restarts
	c   *kfake.Cluster
}

var errStorage = kerr.UnknownServerError

func newFakeWorld(t *testing.T) *fakeWorld {
	t.Helper()
	w := &fakeWorld{t: t, net: new(kfake.VirtualNetwork), dir: t.TempDir()}
	w.world = &world{
		input: inputTopic, group: group, prefix: prefix, foreignID: "foreign-producer",
		seeds: func() []string { return w.c.ListenAddrs() }, dial: w.net.DialContext,
	}
	w.start(t)
	t.Cleanup(func() { w.c.Close() })
	w.createTopics(t)
	return w
}

// start starts the cluster on its data directory: fresh, or restarted
// from what an earlier start left there.
func (w *fakeWorld) start(t *testing.T) {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.Ports(9092),
		kfake.ListenFn(w.net.Listen),
		kfake.DataDir(w.dir),
		kfake.GroupMinSessionTimeout(time.Second),
	)
	if err != nil {
		t.Fatal(err)
	}
	w.c = c
	w.installFaults()
}

// installFaults adds the control functions behind FailLogEndReads and
// SlowFetches; they pass everything through until switched on.
func (w *fakeWorld) installFaults() {
	w.c.ControlKey(int16(kmsg.ListOffsets), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		w.c.KeepControl()
		req := kreq.(*kmsg.ListOffsetsRequest)
		w.mu.Lock()
		fail := w.faults.failLogEnd
		w.mu.Unlock()
		if !fail || req.IsolationLevel != 0 {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, errStorage.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

type fakeHarness struct{}

func (fakeHarness) Run(t *testing.T, body func(t *testing.T, w storetest.World)) {
	synctest.Test(t, func(t *testing.T) {
		body(t, newFakeWorld(t))
	})
}

func TestContractOnKfake(t *testing.T) {
	storetest.Run(t, fakeHarness{})
}

// Truncate stops the cluster, cuts the partition's segment files at the
// first batch at or past end, and restarts the cluster from that data
// directory: the log end regresses, as after an unclean leader election
// that lost acknowledged records.
func (w *fakeWorld) Truncate(t *testing.T, in store.TopicPartition, end int64) {
	t.Helper()
	tp := snapTP(in)
	w.c.Close()
	pdir := filepath.Join(w.dir, "partitions", fmt.Sprintf("%s-%d", url.PathEscape(tp.Topic), tp.Partition))
	cutSegments(t, tp, filepath.Join(pdir, "*.dat"), end)
	_ = os.Remove(filepath.Join(pdir, "snapshot.json"))
	w.start(t)
	if _, hw := w.StableOffsets(t, in); hw != end {
		t.Fatalf("after truncating to %d the high watermark is %d", end, hw)
	}
}

func (w *fakeWorld) FailLogEndReads(t *testing.T) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.faults.failLogEnd = true
	return errStorage
}

func (w *fakeWorld) Advance(d time.Duration) {
	synctest.Wait()
	time.Sleep(d)
	synctest.Wait()
}

func (w *fakeWorld) Settle() { synctest.Wait() }

// StallTimeout: virtual time affords the production default and a second
// of slack.
func (w *fakeWorld) StallTimeout() (time.Duration, time.Duration) {
	return 3 * time.Minute, time.Second
}

func (w *fakeWorld) Now() time.Time { return time.Now() }
