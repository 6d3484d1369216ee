package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/storetest"
)

// groupRequests are what a group member sends: a backend client sending
// one has joined a group, or commits or fetches offsets as a member.
var groupRequests = []kmsg.Key{kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat, kmsg.LeaveGroup,
	kmsg.OffsetCommit, kmsg.OffsetFetch, kmsg.ConsumerGroupHeartbeat, kmsg.ShareGroupHeartbeat, kmsg.ShareFetch}

// requestLog counts the requests the backend's clients write, read from
// their connections (franz-go writes one request per Write: size, api
// key, ...). With block it also refuses to send a group request: on kfake
// a backend client that joined the user's group would leave the virtual
// clock unable to advance (franz-go's auto-commit loop waits on a mutex,
// which synctest does not count as blocked), so the test would hang
// instead of failing.
type requestLog struct {
	block bool
	mu    sync.Mutex
	sent  map[kmsg.Key]int
}

var errGroupRequestRefused = errors.New("group request refused by the test")

func (l *requestLog) dialer(dial func(ctx context.Context, network, host string) (net.Conn, error)) func(ctx context.Context, network, host string) (net.Conn, error) {
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		conn, err := dial(ctx, network, host)
		if err != nil {
			return nil, err
		}
		return loggedConn{conn, l}, nil
	}
}

type loggedConn struct {
	net.Conn
	l *requestLog
}

func (c loggedConn) Write(b []byte) (int, error) {
	if len(b) >= 6 {
		key := kmsg.Key(binary.BigEndian.Uint16(b[4:6]))
		c.l.mu.Lock()
		if c.l.sent == nil {
			c.l.sent = map[kmsg.Key]int{}
		}
		c.l.sent[key]++
		c.l.mu.Unlock()
		if c.l.block && slices.Contains(groupRequests, key) {
			return 0, errGroupRequestRefused
		}
	}
	return c.Conn.Write(b)
}

func (l *requestLog) count(key kmsg.Key) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent[key]
}

// groupOptsCase: the user's consumer options, reused for the backend in
// ClientOpts or in ReaderOpts.
type groupOptsCase struct {
	mode  store.Mode
	field string // "ClientOpts" or "ReaderOpts"
	// manual: the options of a consumer that commits by hand (auto-commit
	// off, a revoke callback), which franz-go rejects on a client without
	// a group; otherwise auto-commit is on, every 100 ms.
	manual bool
}

func (c groupOptsCase) String() string {
	commits := "autocommit"
	if c.manual {
		commits = "manual"
	}
	return fmt.Sprintf("%v/%s/%s", c.mode, c.field, commits)
}

func groupOptsCases() []groupOptsCase {
	var cases []groupOptsCase
	for _, mode := range []store.Mode{store.Transactional, store.Plain} {
		for _, field := range []string{"ClientOpts", "ReaderOpts"} {
			for _, manual := range []bool{false, true} {
				cases = append(cases, groupOptsCase{mode, field, manual})
			}
		}
	}
	return cases
}

// userConsumerOpts are the options of the user's own consumer of group.
func (c groupOptsCase) userConsumerOpts(group, topic string) []kgo.Opt {
	opts := []kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.Balancers(kgo.RangeBalancer())}
	if c.manual {
		return append(opts, kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
			kgo.OnPartitionsRevoked(func(context.Context, *kgo.Client, map[string][]int32) {}))
	}
	return append(opts, kgo.AutoCommitInterval(100*time.Millisecond))
}

// testGroupOptionsIgnored: a backend given the options of the user's
// consumer of the world's group (kgo.ConsumerGroup, kgo.ConsumeTopics of
// the input topic, the commit settings) recovers a partition twice in a
// row, each time every snapshot from the log start, and none of its
// clients joins the group, takes a partition from the user's member or
// commits an offset. wait lets whatever the clients would do happen: in
// virtual time, past the auto-commit interval and the heartbeats. block
// refuses the backend's group requests (requestLog), which are counted
// either way.
func testGroupOptionsIgnored(t *testing.T, w *world, c groupOptsCase, block bool, wait func()) {
	ctx := context.Background()
	user := w.Join(t) // the user's consumer, the group's only member
	before := user.Identity()
	log := &requestLog{block: block}
	cfg := kafka.Config{Mode: c.mode, SeedBrokers: w.seeds(), Application: storetest.Application, TransactionalIDPrefix: w.prefix,
		ClientOpts: []kgo.Opt{kgo.Dialer(log.dialer(w.dial))}}
	switch opts := c.userConsumerOpts(w.group, w.input); c.field {
	case "ClientOpts":
		cfg.ClientOpts = append(cfg.ClientOpts, opts...)
	case "ReaderOpts":
		cfg.ReaderOpts = opts
	}
	b, err := kafka.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	in := store.TopicPartition{Topic: w.input, Partition: 0}
	p, err := b.Acquire(ctx, store.Acquisition{Input: in, Identity: store.IdentityFunc(user.Identity)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	want := []string{"a=1@1", "b=2@2", "c=3@3"}
	for i, k := range []string{"a", "b", "c"} {
		s := store.Snapshot{Key: []byte(k), Value: fmt.Appendf(nil, "%d", i+1), Offset: int64(i + 1)}
		if err := writeOne(ctx, p, s); err != nil {
			t.Fatal(err)
		}
	}
	for read := range 2 {
		var got []string
		for s, err := range p.Recover(ctx, nil) {
			if err != nil {
				t.Fatalf("recovery %d: %v", read+1, err)
			}
			got = append(got, fmt.Sprintf("%s=%s@%d", s.Key, s.Value, s.Offset))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("recovery %d returned %v, want every snapshot from the log start: %v", read+1, got, want)
		}
	}
	wait()

	for _, key := range groupRequests {
		if n := log.count(key); n > 0 {
			t.Errorf("the backend's clients wrote %d %v requests: one acts as a group member", n, key.Name())
		}
	}
	if log.count(kmsg.Fetch) == 0 {
		t.Fatal("no Fetch seen from the backend's clients: the request log does not see their requests")
	}
	described, err := w.adm.DescribeGroups(ctx, w.group)
	if err != nil {
		t.Fatal(err)
	}
	g := described[w.group]
	var members []string
	for _, m := range g.Members {
		members = append(members, m.MemberID)
	}
	if g.State != "Stable" || !slices.Equal(members, []string{before.MemberID}) {
		t.Errorf("group %s is %s with members %v, want Stable with only the user's member %s", w.group, g.State, members, before.MemberID)
	}
	if after := user.Identity(); after != before {
		t.Errorf("the user's member went from %v to %v: the group rebalanced", before, after)
	}
	offs, err := w.adm.FetchOffsets(ctx, w.group)
	if err != nil {
		t.Fatal(err)
	}
	for topic := range offs {
		if topic != w.input {
			t.Errorf("group %s has offsets committed for %s: %v", w.group, topic, offs[topic])
		}
	}
}

// On kfake, in virtual time: the clients get a second past the last
// recovery, ten auto-commit intervals, to act as group members. (Their
// group requests are refused, so the group's checks hold by
// construction; the request counts are the test here, and the real
// broker's test checks the group.)
func TestGroupOptionsOfTheUserAreIgnoredOnKfake(t *testing.T) {
	for _, c := range groupOptsCases() {
		t.Run(c.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t)
				testGroupOptionsIgnored(t, w.world, c, true, func() { w.Advance(time.Second) })
			})
		})
	}
}

// kgo.ConsumeRegex cannot be turned off again: New refuses it, in either
// field, naming the field and the option.
func TestConsumeRegexIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		regex := []kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeRegex(), kgo.ConsumeTopics("^orders.*")}
		for _, field := range []string{"ClientOpts", "ReaderOpts"} {
			cfg := kafka.Config{Mode: store.Transactional, TransactionalIDPrefix: prefix}
			if field == "ClientOpts" {
				cfg.ClientOpts = regex
			} else {
				cfg.ReaderOpts = regex
			}
			_, err := newBackend(t, w, cfg)
			var oe *kafka.OptionError
			if !errors.Is(err, kafka.ErrUnsupportedOption) || !errors.As(err, &oe) || oe.Field != field || oe.Option != "kgo.ConsumeRegex" {
				t.Fatalf("%s: err = %v, want an OptionError for kgo.ConsumeRegex in %s", field, err, field)
			}
			if !strings.Contains(err.Error(), "Config."+field) || !strings.Contains(err.Error(), "kgo.ConsumeRegex") {
				t.Fatalf("%q does not name Config.%s and kgo.ConsumeRegex", err, field)
			}
		}
		// Consumer options franz-go rejects on any client are reported by
		// New, with the field, not at the first recovery.
		_, err := newBackend(t, w, kafka.Config{Mode: store.Plain, ReaderOpts: []kgo.Opt{kgo.ConsumeExcludeTopics("x")}})
		var oe *kafka.OptionError
		if !errors.As(err, &oe) || oe.Field != "ReaderOpts" || !strings.Contains(err.Error(), "ConsumeExcludeTopics") {
			t.Fatalf("ConsumeExcludeTopics without ConsumeRegex: %v", err)
		}
	})
}
