package kfakeworld

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/sim"
)

// The real-broker mode (Config.Brokers): the same world on a Kafka
// cluster, in real time. See docs/testing.md, "On a real broker".

// Real-time bounds of the real-broker mode.
const (
	// connectTimeout bounds reaching the cluster and setting the world's
	// topics up (and deleting them at Close).
	connectTimeout = 15 * time.Second
	// pollTimeout is how long a poll step waits for its runner step to
	// return (kfake: pollSlices virtual milliseconds): a poll that has
	// records, or a flush that is due, returns well within it; one with
	// nothing to fold goes on in the background, as on kfake.
	pollTimeout = 2 * time.Second
	// settleTimeout bounds the wait after a step for the processes to be
	// idle (settle): past it, what still runs (a recovery waiting for a
	// foreign transaction, a slow fetch) goes on in the background, as it
	// would stay durably blocked on kfake.
	settleTimeout = 5 * time.Second
	// realCloseTimeout bounds Close's wait for the processes to shut down.
	realCloseTimeout = time.Minute
)

// realBroker is a world's real-broker state.
type realBroker struct {
	snapshot string // the world's snapshot topic
	// created are the topics the world created, which it deletes when it
	// closes.
	created []string
	// background are the poll steps left running past pollTimeout (by
	// their process, the step's busy channel): settle does not wait for
	// them, as synctest.Wait does not for a poll blocked waiting for
	// records.
	background map[*process]chan struct{}
	// conf are the broker's configs in milliseconds (checkBroker); nil if
	// they could not be described.
	conf map[string]time.Duration
	// endStores cancel the store clients' contexts (storeClientOpts).
	endStores []context.CancelFunc
}

// network is what the world's clients dial: kfake's virtual network, or
// a real cluster's (realNet).
type network interface {
	DialContext(ctx context.Context, network, host string) (net.Conn, error)
}

// wait lets the world settle after a step: on kfake, until every
// goroutine of the bubble is durably blocked (synctest.Wait); on a real
// broker, until every process is idle (settle).
func (w *World) wait() {
	if w.real != nil {
		w.settle()
		return
	}
	synctest.Wait()
}

// settle waits, at most settleTimeout, until every running process is
// idle (no runner step in flight, poll steps left in the background
// aside, no rebalance callback running, and no store call it started
// still in flight) and every process that left has shut down. Paused
// and crashed processes are not waited for: their
// connections are frozen, what they were doing stays blocked (on kfake
// too). A process becomes busy again when its callback starts, so the
// wait goes round until a whole round found every process idle.
func (w *World) settle() {
	timer := time.NewTimer(settleTimeout)
	defer timer.Stop()
	for again := true; again; {
		again = false
		for _, m := range w.members {
			p := m.p
			if p == nil || m.state != running {
				continue
			}
			if p.busy != nil && w.real.background[p] != p.busy {
				select {
				case <-p.busy:
					p.busy = nil // as idle does
					again = true
				case <-timer.C:
					return
				}
			}
			for idle := p.cbs.idleChan(); idle != nil; idle = p.cbs.idleChan() {
				select {
				case <-idle:
					again = true
				case <-timer.C:
					return
				}
			}
			// The store calls its steps started (writes in flight) end
			// too: a pause or a check must not come between.
			for rec := w.rec.Recorded(m.slot); rec != nil; rec = w.rec.Recorded(m.slot) {
				select {
				case <-rec:
					again = true
				case <-timer.C:
					return
				}
			}
		}
		for _, p := range w.retired {
			if p.crashed {
				continue
			}
			select {
			case <-p.down:
			case <-timer.C:
				return
			}
		}
	}
}

// idleChan is nil while no callback runs, else a channel closed when
// none does.
func (c *callbacks) idleChan() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		return nil
	}
	return c.idle
}

// storeClientOpts are the options of a store's clients (producers,
// recovery readers, admin): dial (a process's store freezer's, or the
// world's network for the view), and on a real broker a client context
// that Close cancels (endStoreClients).
func (w *World) storeClientOpts(dial func(ctx context.Context, network, host string) (net.Conn, error)) []kgo.Opt {
	opts := []kgo.Opt{kgo.Dialer(dial)}
	if w.real != nil {
		ctx, cancel := context.WithCancel(context.Background())
		w.real.endStores = append(w.real.endStores, cancel)
		opts = append(opts, kgo.WithContext(ctx))
	}
	return opts
}

// endStoreClients cancels the store clients' contexts (real broker only),
// at Close, once every process crashed: their requests, and a first
// produce to a topic whose metadata never came, fail. A process crashed
// while its step was producing has its connections dead, and franz-go
// retries for as long as the client lives, which the process's shutdown
// closes only once the step ended: on kfake the step stays blocked until
// the world closes, in virtual time, as a dead process's call never
// returns; in real time Close would wait for it. (Records franz-go holds
// for a known partition are failed only by the client's Close: such a
// step stays blocked, and Close gives up on it after realCloseTimeout.)
func (w *World) endStoreClients() {
	if w.real == nil {
		return
	}
	for _, cancel := range w.real.endStores {
		cancel()
	}
}

// endSteps lets the steps in flight end before Close crashes the
// processes (real broker only): it cancels them (a poll waiting for
// records returns; a flush that is writing finishes, on live
// connections) and waits for the world to settle. On kfake nothing is in
// flight but what is durably blocked.
func (w *World) endSteps() {
	if w.real == nil {
		return
	}
	for _, m := range w.members {
		if m.p != nil {
			m.p.cancel()
		}
	}
	clear(w.real.background)
	w.settle()
}

// realPoll waits, at most pollTimeout, for the poll step done ends; past
// it the step goes on in the background.
func (w *World) realPoll(p *process, done chan struct{}) {
	timer := time.NewTimer(pollTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		w.real.background[p] = done
	}
}

// openReal sets a world up on the real cluster of w.cfg.Brokers: it
// reaches the cluster, checks the broker's group and transaction settings
// against the world's, names the world's topics, group and
// transactional.ids uniquely and creates the topics. On an error nothing
// is left behind.
func (w *World) openReal() (err error) {
	cfg := &w.cfg
	rn := &realNet{tls: cfg.TLS, sasl: cfg.SASL}
	name := cfg.Name
	if name == "" {
		name = randomName()
	}
	base := "snapfence-simulate-" + name
	w.real = &realBroker{snapshot: kafka.LegacySnapshotTopic(base), background: map[*process]chan struct{}{}}
	w.net, w.seeds = rn, cfg.Brokers
	w.input, w.group, w.prefix, w.foreignID = base, base+"-group", base, base+"-foreign"
	if w.output != "" {
		w.output = base + "-outputs"
	}
	w.cl, err = kgo.NewClient(kgo.SeedBrokers(w.seeds...), kgo.Dialer(rn.DialContext),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0), kgo.RecordDeliveryTimeout(time.Minute))
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	w.adm = kadm.NewClient(w.cl)
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if _, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, w.cl); err != nil {
		w.cl.Close()
		if last := rn.lastErr(); last != nil {
			err = last
		}
		if ctx.Err() != nil {
			return fmt.Errorf("no answer from the brokers %s in %s: %w", strings.Join(w.seeds, ","), connectTimeout, err)
		}
		return fmt.Errorf("cannot reach the brokers %s: %w", strings.Join(w.seeds, ","), err)
	}
	if err := w.checkBroker(ctx); err != nil {
		w.cl.Close()
		return err
	}
	w.snapshotTopic = w.real.snapshot
	defer func() {
		if err != nil {
			w.closeReal()
		}
	}()
	if err := w.createTopics(ctx); err != nil {
		return err
	}
	if cfg.Protocol == sim.Consumer {
		w.consumerGroupConfig(ctx)
	}
	w.members = make([]*member, cfg.Members)
	for i := range w.members {
		w.members[i] = &member{slot: i}
	}
	w.logf("topics %s and %s (%d partitions), group %s, transactional.id prefix %s", w.input, w.real.snapshot, Partitions, w.group, w.prefix)
	if w.output != "" {
		w.logf("output topic %s (%d partitions)", w.output, Partitions)
	}
	return nil
}

func (w *World) logf(format string, args ...any) {
	if w.cfg.Logf != nil {
		w.cfg.Logf(format, args...)
	}
}

// randomName is a time-based name with a random tail.
func randomName() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// checkBroker checks the broker's settings the world depends on: the
// classic protocols' session bounds (the members ask for
// SessionTimeout), and the transaction timeout bound (TransactionTimeout,
// and 15 min for a hanging foreign transaction). A broker that does not
// let its configs be described is taken as it is.
func (w *World) checkBroker(ctx context.Context) error {
	brokers, err := w.adm.ListBrokers(ctx)
	if err != nil || len(brokers) == 0 {
		return fmt.Errorf("listing the brokers: %v", err)
	}
	rcs, err := w.adm.DescribeBrokerConfigs(ctx, brokers[0].NodeID)
	if err == nil && len(rcs) == 1 {
		err = rcs[0].Err
	}
	if err != nil || len(rcs) != 1 {
		w.logf("the broker's configs cannot be described (%v): its group and transaction settings are not checked", err)
		return nil
	}
	conf := map[string]time.Duration{}
	for _, c := range rcs[0].Configs {
		if ms, err := strconv.ParseInt(c.MaybeValue(), 10, 64); err == nil {
			conf[c.Key] = time.Duration(ms) * time.Millisecond
		}
	}
	w.real.conf = conf
	session := w.cfg.SessionTimeout
	if w.cfg.Protocol != sim.Consumer {
		if lo, ok := conf["group.min.session.timeout.ms"]; ok && session < lo {
			return fmt.Errorf("the broker's group.min.session.timeout.ms is %s: the world's members ask for %s sessions, which the scenarios' steps are timed against", lo, session)
		}
		if hi, ok := conf["group.max.session.timeout.ms"]; ok && session > hi {
			return fmt.Errorf("the broker's group.max.session.timeout.ms is %s: the world's members ask for %s sessions", hi, session)
		}
	}
	if hi, ok := conf["transaction.max.timeout.ms"]; ok {
		if w.cfg.TransactionTimeout > hi {
			return fmt.Errorf("the broker's transaction.max.timeout.ms is %s: the world's producers ask for %s", hi, w.cfg.TransactionTimeout)
		}
		if hi < 15*time.Minute {
			w.logf("the broker's transaction.max.timeout.ms is %s: a hanging foreign transaction (15 min) cannot be opened", hi)
		}
	}
	if d := conf["group.initial.rebalance.delay.ms"]; d > 0 && w.cfg.Protocol != sim.Consumer {
		w.logf("the broker's group.initial.rebalance.delay.ms is %s: a first member's join takes that long", d)
	}
	return nil
}

// createTopics creates the input topic and its compacted snapshot topic
// (store/kafka checks cleanup.policy=compact and the partition count),
// and the output topic if any, with the broker's default replication,
// each served before the next (kafka.CreateTopic). A topic that already
// exists is refused: the world counts on topics of its own, and deletes
// only those it created.
func (w *World) createTopics(ctx context.Context) error {
	compact := "compact"
	type topic struct {
		name    string
		configs map[string]*string
	}
	topics := []topic{{w.input, nil}, {w.real.snapshot, map[string]*string{"cleanup.policy": &compact}}}
	if w.output != "" {
		topics = append(topics, topic{w.output, nil})
	}
	for _, t := range topics {
		listed, err := w.adm.ListTopics(ctx, t.name)
		if err != nil {
			return fmt.Errorf("describing topic %s: %w", t.name, err)
		}
		if td, ok := listed[t.name]; ok && !errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("creating topic %s: it already exists (%v)", t.name, td.Err)
		}
		err = kafka.CreateTopic(ctx, w.cl, t.name, Partitions, -1, t.configs)
		w.real.created = append(w.real.created, t.name) // it may exist even if it is not served
		if err != nil {
			return err
		}
	}
	return nil
}

// consumerGroupConfig sets the consumer protocol's session timeout and
// heartbeat interval, which are the broker's (group.consumer.*), for the
// world's group (KIP-848 group configs, Kafka 4.0): within the broker's
// bounds (group.consumer.min.session.timeout.ms, 45 s by default) and
// with the right to alter the group's configs. Otherwise the group keeps
// the broker's, which becomes the world's SessionTimeout (an evict step
// waits it out); scenarios that time a session's expiry by the default
// (an advance of 11 s) then see it expire later.
func (w *World) consumerGroupConfig(ctx context.Context) {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = w.group
	for key, d := range map[string]time.Duration{
		"consumer.session.timeout.ms":    w.cfg.SessionTimeout,
		"consumer.heartbeat.interval.ms": w.cfg.HeartbeatInterval,
	} {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op, c.Value = key, kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(strconv.FormatInt(d.Milliseconds(), 10))
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, w.cl)
	if err == nil && len(resp.Resources) == 1 {
		err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
		if err != nil && resp.Resources[0].ErrorMessage != nil {
			err = fmt.Errorf("%w: %s", err, *resp.Resources[0].ErrorMessage)
		}
	}
	if err == nil {
		return
	}
	if d, ok := w.real.conf["group.consumer.session.timeout.ms"]; ok {
		w.cfg.SessionTimeout = d
	}
	w.logf("the consumer protocol's session timeout could not be set for group %s (%v): the broker's, %s, applies", w.group, err, w.cfg.SessionTimeout)
}

// closeReal deletes the topics the world created and closes its client.
func (w *World) closeReal() {
	defer w.cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	topics := w.real.created
	if len(topics) == 0 {
		return
	}
	resps, err := w.adm.DeleteTopics(ctx, topics...)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		w.logf("deleting topics %s: %v", strings.Join(topics, ", "), err)
		return
	}
	w.logf("deleted topics %s", strings.Join(topics, ", "))
}

// realNet dials a real cluster: TCP, then TLS and SASL if set. The world
// does both itself, under every client, rather than through franz-go's
// options: a kgo.Dialer (the world's freezers) excludes
// kgo.DialTLSConfig, and the world's own readers take no options.
type realNet struct {
	dialer net.Dialer
	tls    *tls.Config
	sasl   sasl.Mechanism

	mu   sync.Mutex
	last error // the last dial's error
}

func (n *realNet) lastErr() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.last
}

// DialContext dials host and does the TLS handshake and the SASL
// authentication on the connection.
func (n *realNet) DialContext(ctx context.Context, network, host string) (net.Conn, error) {
	c, err := n.dial(ctx, network, host)
	n.mu.Lock()
	n.last = err
	n.mu.Unlock()
	return c, err
}

func (n *realNet) dial(ctx context.Context, network, host string) (net.Conn, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second) // franz-go's default dial timeout
		defer cancel()
	}
	c, err := n.dialer.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	if n.tls != nil {
		cfg := n.tls.Clone()
		if cfg.ServerName == "" {
			if cfg.ServerName, _, err = net.SplitHostPort(host); err != nil {
				_ = c.Close()
				return nil, err
			}
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", host, err)
		}
		c = tc
	}
	if n.sasl != nil {
		if err := authenticate(ctx, c, n.sasl, host); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("SASL %s with %s: %w", n.sasl.Name(), host, err)
		}
	}
	return c, nil
}

// authenticate runs the SASL exchange on a new connection (KIP-152:
// SaslHandshake v1, then SaslAuthenticate v1 requests), as franz-go does
// after its own dial.
func authenticate(ctx context.Context, c net.Conn, mech sasl.Mechanism, host string) error {
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("snapfence-simulate"))
	var corr int32
	roundTrip := func(req kmsg.Request) (kmsg.Response, error) {
		corr++
		if _, err := c.Write(f.AppendRequest(nil, req, corr)); err != nil {
			return nil, err
		}
		var size [4]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return nil, err
		}
		n := binary.BigEndian.Uint32(size[:])
		if n < 4 || n > 1<<20 {
			return nil, fmt.Errorf("a response of %d bytes", n)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(c, body); err != nil {
			return nil, err
		}
		if got := int32(binary.BigEndian.Uint32(body)); got != corr {
			return nil, fmt.Errorf("response to request %d, want %d", got, corr)
		}
		resp := req.ResponseKind()
		resp.SetVersion(req.GetVersion())
		return resp, resp.ReadFrom(body[4:]) // versions 1: no tagged header fields
	}
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, mech.Name()
	raw, err := roundTrip(hs)
	if err != nil {
		return err
	}
	if resp := raw.(*kmsg.SASLHandshakeResponse); resp.ErrorCode != 0 {
		return fmt.Errorf("%w (the broker offers %s)", kerr.ErrorForCode(resp.ErrorCode), strings.Join(resp.SupportedMechanisms, ", "))
	}
	session, write, err := mech.Authenticate(ctx, host)
	if err != nil {
		return err
	}
	for done := false; !done || len(write) > 0; {
		req := kmsg.NewPtrSASLAuthenticateRequest()
		req.Version, req.SASLAuthBytes = 1, write
		raw, err := roundTrip(req)
		if err != nil {
			return err
		}
		resp := raw.(*kmsg.SASLAuthenticateResponse)
		if resp.ErrorCode != 0 {
			err := kerr.ErrorForCode(resp.ErrorCode)
			if resp.ErrorMessage != nil {
				err = fmt.Errorf("%w: %s", err, *resp.ErrorMessage)
			}
			return err
		}
		write = nil
		if !done {
			if done, write, err = session.Challenge(resp.SASLAuthBytes); err != nil {
				return err
			}
		}
	}
	return nil
}
