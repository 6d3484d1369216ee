package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/prom"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

// healthClient is a real HTTP client of an engine's HealthHandler.
type healthClient struct {
	t    *testing.T
	c    *http.Client
	base string
}

// serveHealth serves e's HealthHandler (with reg's metrics) on a real
// local server.
func serveHealth[S any](t *testing.T, e *engine.Engine[S], reg prometheus.Gatherer) healthClient {
	srv := httptest.NewServer(e.HealthHandler(prom.Handler(reg)))
	t.Cleanup(srv.Close)
	return healthClient{t: t, c: srv.Client(), base: srv.URL}
}

func (h healthClient) get(path string) (int, []byte) {
	h.t.Helper()
	resp, err := h.c.Get(h.base + path)
	if err != nil {
		h.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, body
}

// readyBody is /readyz's JSON, as a client reads it.
type readyBody struct {
	Live       bool   `json:"live"`
	Ready      bool   `json:"ready"`
	Joined     bool   `json:"joined"`
	Error      string `json:"error"`
	Group      string `json:"group"`
	Generation int32  `json:"generation"`
	Partitions []struct {
		Topic           string `json:"topic"`
		Partition       int32  `json:"partition"`
		State           string `json:"state"`
		CommittedOffset int64  `json:"committed_offset"`
		LogEndOffset    int64  `json:"log_end_offset"`
		Lag             int64  `json:"lag"`
		LastCommit      string `json:"last_commit"`
		Recovery        struct {
			Target    int64 `json:"target"`
			Position  int64 `json:"position"`
			Snapshots int64 `json:"snapshots"`
			Done      bool  `json:"done"`
		} `json:"recovery"`
		Error string `json:"error"`
	} `json:"partitions"`
}

func (h healthClient) ready() (int, readyBody) {
	h.t.Helper()
	code, body := h.get("/readyz")
	var rb readyBody
	if err := json.Unmarshal(body, &rb); err != nil {
		h.t.Fatalf("/readyz answered %d with %q: %v", code, body, err)
	}
	if (code == http.StatusOK) != rb.Ready {
		h.t.Fatalf("/readyz answered %d with ready=%v", code, rb.Ready)
	}
	return code, rb
}

func (h healthClient) live() (int, string) {
	h.t.Helper()
	code, body := h.get("/livez")
	var lb struct {
		Live  bool   `json:"live"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &lb); err != nil {
		h.t.Fatalf("/livez answered %d with %q: %v", code, body, err)
	}
	if (code == http.StatusOK) != lb.Live {
		h.t.Fatalf("/livez answered %d with live=%v", code, lb.Live)
	}
	return code, lb.Error
}

// metric reads one sample from /metrics: series is the name with its
// labels as the text format writes them (sorted by name), e.g.
// snapfence_consumer_lag{partition="0",topic="accounts"}.
func (h healthClient) metric(series string) (float64, bool) {
	h.t.Helper()
	code, body := h.get("/metrics")
	if code != http.StatusOK {
		h.t.Fatalf("/metrics answered %d: %s", code, body)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				h.t.Fatalf("%s: %v", sc.Text(), err)
			}
			return f, true
		}
	}
	return 0, false
}

func (h healthClient) wantMetric(series string, want float64) {
	h.t.Helper()
	if got, ok := h.metric(series); !ok || got != want {
		h.t.Fatalf("%s = %v (present %v), want %v", series, got, ok, want)
	}
}

// wantCaughtUp checks that /readyz is 200 with every partition of topic
// running at lag 0, its committed offset at its log end, ends[p] (and,
// with committed, committed by this member: a member that resumed at the
// end has nothing to commit, nor has a partition with no record).
func (h healthClient) wantCaughtUp(topic string, ends map[int32]int64, committed bool) {
	h.t.Helper()
	code, rb := h.ready()
	if code != http.StatusOK || !rb.Live || !rb.Joined || len(rb.Partitions) != len(ends) {
		h.t.Fatalf("/readyz %d: %+v, want ready with %d partitions", code, rb, len(ends))
	}
	for _, p := range rb.Partitions {
		if p.Topic != topic || p.State != "running" || p.Lag != 0 || p.CommittedOffset != ends[p.Partition] ||
			p.LogEndOffset != ends[p.Partition] || !p.Recovery.Done || (committed && ends[p.Partition] > 0 && p.LastCommit == "") || p.Error != "" {
			h.t.Fatalf("partition %+v, want running at lag 0, committed at the log end %d", p, ends[p.Partition])
		}
		h.wantMetric(`snapfence_consumer_lag{partition="`+strconv.Itoa(int(p.Partition))+`",topic="`+topic+`"}`, 0)
	}
}

func simEnds(t *testing.T, c *sim.Cluster, topic string, n int32) map[int32]int64 {
	ends := map[int32]int64{}
	for p := range n {
		_, _, end, err := c.Offsets(store.TopicPartition{Topic: topic, Partition: p})
		if err != nil {
			t.Fatal(err)
		}
		ends[p] = end
	}
	return ends
}

// On the simulated cluster, through a real HTTP client: before any runner
// the engine is live and not ready; after recovery and a drain it is ready
// with every partition at lag 0; records fetched and not committed show
// as lag; a recovery in progress is visible while it holds the runner
// inside the rebalance callback (the status never waits for the runner);
// a closed runner is not live.
func TestHealthHandlerOnSim(t *testing.T) {
	m, reg := newMetrics(t)
	c := sim.New(sim.Config{Seed: 5})
	if err := c.CreateTopic("accounts", sim.TopicConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	b, err := c.NewBackend(sim.BackendConfig{Mode: store.Transactional, TransactionalIDPrefix: "bank", CreateTopics: true,
		Observer: m.StoreObserver()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	w := &simWorld{t: t, c: c, store: b, want: ledger{}}
	e, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: b,
		PersistInterval: 10 * time.Second, CommitInterval: 10 * time.Second, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	h := serveHealth(t, e, reg)

	if code, _ := h.live(); code != http.StatusOK {
		t.Fatalf("/livez %d before any runner, want 200", code)
	}
	if code, rb := h.ready(); code != http.StatusServiceUnavailable || rb.Joined || len(rb.Partitions) != 0 {
		t.Fatalf("/readyz %d %+v before any runner, want 503, not joined", code, rb)
	}
	if code, _ := h.get("/nothing"); code != http.StatusNotFound {
		t.Fatalf("/nothing answered %d, want 404", code)
	}

	w.produce("alice=+1", "bob=+2", "carol=+3", "dave=+4", "erin=+5", "alice=+6")
	r := w.runner(e)
	w.drain(r)
	h.wantCaughtUp("accounts", simEnds(t, c, "accounts", 2), true)
	h.wantMetric(`snapfence_partitions{state="running"}`, 2)
	h.wantMetric(`snapfence_partitions{state="stopped"}`, 0)
	if n, ok := h.metric(`snapfence_transaction_seconds_count{outcome="committed"}`); !ok || n < 1 {
		t.Fatalf("transaction durations observed: %v (present %v), want at least 1", n, ok)
	}

	// Fetched, folded, not committed yet (the commit interval is 10 s,
	// the drain committed a second ago): the log end is ahead.
	w.produce("bob=+7", "bob=+8", "bob=+9") // partition 1
	if err := r.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := r.Status()
	if p := st.Partitions[1]; p.Lag != 3 || p.LogEndOffset != p.CommittedOffset+3 {
		t.Fatalf("after fetching 3 records and committing none: %+v, want lag 3", p)
	}
	h.wantMetric(`snapfence_consumer_lag{partition="1",topic="accounts"}`, 3)
	if code, _ := h.ready(); code != http.StatusOK {
		t.Fatalf("/readyz %d with lag, want 200: lag is not readiness", code)
	}
	r.FlushAll(context.Background())
	h.wantCaughtUp("accounts", simEnds(t, c, "accounts", 2), true)
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, _ := h.live(); code != http.StatusServiceUnavailable {
		t.Fatalf("/livez %d after the runner closed, want 503", code)
	}
	h.wantMetric(`snapfence_partitions{state="running"}`, 0)
	if _, ok := h.metric(`snapfence_consumer_lag{partition="1",topic="accounts"}`); ok {
		t.Fatal("a released partition's lag is still exported")
	}

	// A new member recovers both partitions, one snapshot record a fetch,
	// each fetch taking virtual time: the recovery parks inside the
	// assignment callback, holding the runner's lock, and the status
	// shows it.
	// The member is another engine's, whose cache is empty: a recovery
	// on e would be a delta from its cache's checkpoint, with nothing to
	// read.
	e2, err := engine.New(engine.Config[int]{Fold: balance, Codec: intCodec{}, Store: b,
		PersistInterval: 10 * time.Second, CommitInterval: 10 * time.Second, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.CloseAbandoning(e2) })
	h = serveHealth(t, e2, reg)
	c.SlowFetches(100*time.Millisecond, 1)
	r2 := w.runner(e2)
	sawRecovering := false
	for range 60 {
		stepParked(t, c, r2, func() {
			if sawRecovering {
				return
			}
			code, rb := h.ready()
			for _, p := range rb.Partitions {
				if p.State == "recovering" && p.Recovery.Target > 0 && p.Recovery.Position < p.Recovery.Target {
					sawRecovering = true
					if code != http.StatusServiceUnavailable {
						t.Fatalf("/readyz %d while recovering, want 503", code)
					}
					if code, _ := h.live(); code != http.StatusOK {
						t.Fatalf("/livez %d while recovering, want 200", code)
					}
					series := `snapfence_recovery_records_left{partition="` + strconv.Itoa(int(p.Partition)) + `",topic="accounts"}`
					if left, ok := h.metric(series); !ok || left != float64(p.Recovery.Target-p.Recovery.Position) {
						t.Fatalf("%s = %v (present %v) at %+v", series, left, ok, p.Recovery)
					}
				}
			}
		})
		if r2.Status().Ready() {
			break
		}
		c.Advance(time.Second)
	}
	if !sawRecovering {
		t.Fatal("never saw a partition recovering while its read was parked")
	}
	c.SlowFetches(0, 0)
	w.drain(r2)
	h.wantCaughtUp("accounts", simEnds(t, c, "accounts", 2), false)
	if code, rb := h.ready(); rb.Partitions[0].Recovery.Snapshots == 0 || rb.Partitions[1].Recovery.Snapshots == 0 {
		t.Fatalf("/readyz %d %+v: recovered snapshots not counted", code, rb)
	}
}

// stepParked runs one Step of r while its reads park in virtual time (the
// cluster's SlowFetches): each time the step is parked, whileParked runs,
// then the clock moves on and the read goes on.
func stepParked(t *testing.T, c *sim.Cluster, r *engine.Member[int], whileParked func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.Step(context.Background()) }()
	for {
		parked, woken, changed := c.Parked()
		switch {
		case woken > 0:
			c.Wake()
			continue
		case parked > 0:
			whileParked()
			c.Advance(100 * time.Millisecond)
			continue
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		case <-changed:
		}
	}
}

// A Run that cannot start is not live, and /livez names why; a Run that
// ended is not live either.
func TestLivezAfterRunReturns(t *testing.T) {
	w := newSimWorld(t)
	e := w.engine()
	h := serveHealth(t, e, nil)
	if code, _ := h.get("/metrics"); code != http.StatusNotFound {
		t.Fatalf("/metrics answered %d without a gatherer, want 404", code)
	}
	err := e.Run(context.Background(), kafkaio.Config{})
	if err == nil {
		t.Fatal("Run without brokers, group or topics returned nil")
	}
	code, msg := h.live()
	if code != http.StatusServiceUnavailable || msg != err.Error() {
		t.Fatalf("/livez %d %q after Run returned %v, want 503 naming it", code, msg, err)
	}
	if st := e.Status(); st.Live || !errors.Is(st.Err, err) || st.Ready() {
		t.Fatalf("status %+v after Run returned %v", st, err)
	}
}

// serveHealthOn serves e's HealthHandler over net (a kfake virtual
// network, so a synctest bubble can wait on it), with a real HTTP client
// that dials it.
func serveHealthOn[S any](t *testing.T, net *kfake.VirtualNetwork, e *engine.Engine[S], reg prometheus.Gatherer) healthClient {
	l, err := net.Listen("tcp", "127.0.0.1:9090") // the virtual network takes ports as given
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e.HealthHandler(prom.Handler(reg))}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	tr := &http.Transport{DialContext: net.DialContext, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return healthClient{t: t, c: &http.Client{Transport: tr}, base: "http://" + l.Addr().String()}
}

// ends is the log end of every partition of accounts.
func (w *fakeWorld) ends() map[int32]int64 {
	w.t.Helper()
	ends, err := w.adm.ListEndOffsets(context.Background(), "accounts")
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// On kfake with franz-go and store/kafka, under each consumer protocol,
// through a real HTTP client: not ready before the runner; ready
// once both partitions are recovered, with the log ends the fetches
// reported; lag while records are folded and not committed, 0 after the
// commit.
func TestHealthHandlerOnKfake(t *testing.T) {
	for name, protocol := range protocols {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t)
				m, reg := newMetrics(t)
				// Commits only when the test asks (FlushAll).
				e := w.engineWith(func(c *engine.Config[int]) {
					c.Observer, c.PersistInterval, c.CommitInterval = m, time.Hour, time.Hour
				})
				h := serveHealthOn(t, w.net, e, reg)
				w.produce("alice=+1", "bob=+2", "dave=+4", "erin=+5")
				if code, rb := h.ready(); code != http.StatusServiceUnavailable || rb.Joined || len(rb.Partitions) != 0 {
					t.Fatalf("/readyz %d %+v before the runner, want 503, not joined", code, rb)
				}
				// (franz-go joins, and may run the assignment
				// callback, before the first poll.)
				r := w.runner(e, protocol)
				ends := w.ends()
				// Step until both partitions run, their fetches have
				// reported the log ends, and their records are folded
				// (a partition runs once its own recovery has ended,
				// and its first fetch may follow a later poll).
				for i := 0; ; i++ {
					if i == 200 {
						t.Fatalf("not both partitions running with their log ends known: %+v", r.Status())
					}
					if err := r.Step(context.Background()); err != nil {
						t.Fatal(err)
					}
					st := r.Status()
					known := len(st.Partitions) == 2
					for _, p := range st.Partitions {
						known = known && p.LogEndOffset == ends[p.Input.Partition]
					}
					if st.Ready() && known && folded(r, w.want) {
						break
					}
				}
				code, rb := h.ready()
				if code != http.StatusOK || rb.Group != "bank" || rb.Generation < 0 {
					t.Fatalf("/readyz %d %+v, want ready in group bank", code, rb)
				}
				for _, p := range rb.Partitions {
					if p.Lag != ends[p.Partition] || p.CommittedOffset != 0 {
						t.Fatalf("partition %+v: nothing committed yet, want lag %d", p, ends[p.Partition])
					}
				}
				h.wantMetric(`snapfence_consumer_lag{partition="1",topic="accounts"}`, float64(ends[1]))
				r.FlushAll(context.Background())
				h.wantCaughtUp("accounts", ends, true)

				w.produce("bob=+7", "bob=+8", "bob=+9") // partition 1
				ends = w.ends()
				for i := 0; r.Status().Partitions[1].LogEndOffset != ends[1]; i++ {
					if i == 200 {
						t.Fatalf("the new log end %d never reported: %+v", ends[1], r.Status())
					}
					if err := r.Step(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				h.wantMetric(`snapfence_consumer_lag{partition="1",topic="accounts"}`, 3)
				r.FlushAll(context.Background())
				h.wantCaughtUp("accounts", ends, true)
				if err := r.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
				if code, _ := h.live(); code != http.StatusServiceUnavailable {
					t.Fatalf("/livez %d after Close, want 503", code)
				}
			})
		})
	}
}

// brokerCommitted is the group's committed offset of every partition of
// accounts as the broker answers (-1: none).
func (w *fakeWorld) brokerCommitted() map[int32]int64 {
	w.t.Helper()
	committed, err := w.adm.FetchOffsets(context.Background(), "bank")
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[int32]int64{0: -1, 1: -1}
	committed.Each(func(o kadm.OffsetResponse) {
		if o.Topic == "accounts" && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out
}

// On kfake, an idle partition's status and lag metric agree with the
// broker's committed offset within moments of the commit landing, not one
// commit interval later: the commit is reaped although no record comes.
// The runner runs (Run) while the test watches the broker and the status
// side by side, every 100 ms of virtual time.
func TestIdleStatusAgreesWithTheBrokerOnKfake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		m, reg := newMetrics(t)
		e := w.engineWith(func(c *engine.Config[int]) {
			c.Observer, c.PersistInterval, c.CommitInterval = m, time.Hour, 10*time.Second
		})
		h := serveHealthOn(t, w.net, e, reg)
		r := w.runner(e, protocols["classic-cooperative"])
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}()
		w.produce("alice=+1", "bob=+2", "dave=+4", "erin=+5", "bob=+7")
		ends := w.ends()
		const within = 2 * time.Second
		var agreedAt time.Time // when the broker first showed every partition committed at its end
		for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
			if time.Since(start) > time.Minute {
				t.Fatalf("the broker never showed the input committed to its end: %v, ends %v", w.brokerCommitted(), ends)
			}
			broker := w.brokerCommitted()
			if agreedAt.IsZero() && broker[0] == ends[0] && broker[1] == ends[1] {
				agreedAt = time.Now()
			}
			if agreedAt.IsZero() {
				continue
			}
			st := r.Status()
			agree := len(st.Partitions) == 2
			for _, p := range st.Partitions {
				agree = agree && p.CommittedOffset == broker[p.Input.Partition] && p.Lag == 0
			}
			if agree {
				for p := range int32(2) {
					h.wantMetric(`snapfence_consumer_lag{partition="`+strconv.Itoa(int(p))+`",topic="accounts"}`, 0)
				}
				return
			}
			if time.Since(agreedAt) > within {
				t.Fatalf("%v after the broker showed offsets %v the status still shows %+v", time.Since(agreedAt), broker, st.Partitions)
			}
		}
	})
}

// folded reports whether r's state of every key of want is want's.
func folded(r *engine.Member[int], want ledger) bool {
	for k, v := range want {
		tp := store.TopicPartition{Topic: "accounts", Partition: int32(len(k) % 2)}
		got, ok, err := r.State(tp, []byte(k))
		if err != nil || !ok || got != v {
			return false
		}
	}
	return true
}

// The status page at /, through a real HTTP client, on two members
// with standby replicas: each partition's row shows its state, lag and
// offsets as Status has them; a fold failure stops a partition, and its
// error, which carries the record's value, shows escaped; the replica a
// member keeps of the other's partition is listed. Other paths stay 404.
func TestStatusPageOnSim(t *testing.T) {
	w := newSimWorld(t)
	var es [2]*engine.Engine[int]
	var rs [2]*engine.Member[int]
	for i := range es {
		es[i] = w.engineWith(func(c *engine.Config[int]) { c.StandbyReplicas = 1 })
		rs[i] = w.runner(es[i])
	}
	w.produce("alice=+1", "bob=+2", "carol=+3", "dave=+4", "erin=+5")
	w.drain(rs[0], rs[1])
	in0 := store.TopicPartition{Topic: "accounts", Partition: 0}
	in1 := store.TopicPartition{Topic: "accounts", Partition: 1}
	owner := -1 // the member that owns in1, and keeps a replica of in0
	for i, r := range rs {
		if slices.Contains(r.Flows(), in1) {
			owner = i
		}
	}
	if owner < 0 || slices.Contains(rs[owner].Flows(), in0) {
		t.Fatalf("flows %v and %v, want one partition each", rs[0].Flows(), rs[1].Flows())
	}
	const poison = "<script>alert(1)</script>"
	if _, err := w.c.Produce(in1, wire.Record{Key: []byte("bob"), Value: []byte(poison)}, wire.Record{Key: []byte("bob"), Value: []byte("+1")}); err != nil {
		t.Fatal(err)
	}
	var st engine.Status
	for i := 0; ; i++ {
		if i == 60 {
			t.Fatalf("after 60 s: %+v, want %s stopped and a replica of %s", st, in1, in0)
		}
		for _, r := range rs {
			_ = r.Step(context.Background()) // the fold failure comes back from one step; the status tells the rest
		}
		w.c.Advance(time.Second)
		st = es[owner].Status()
		if len(st.Partitions) == 1 && st.Partitions[0].State == engine.StateStopped && st.Partitions[0].Lag > 0 &&
			len(st.Standbys) == 1 && st.Standbys[0].Input == in0 {
			break
		}
	}

	h := serveHealth(t, es[owner], nil)
	resp, err := h.c.Get(h.base + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	page := string(body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" ||
		resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("/ answered %d, %v, want 200 text/html, not cached", resp.StatusCode, resp.Header)
	}
	// Under the default StopOnPoison the fold failure ends the runner
	// too: the page says so, with the runner's error above the table.
	for _, want := range []string{`<meta http-equiv="refresh" content="5">`, `class="pill bad">not live<`, ">not ready<",
		"group <b>bank</b>", `<p class="err">engine: fold of accounts/1 offset 3 key &#34;bob&#34; failed: bad amount &#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34;</p>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "<script") {
		t.Errorf("the page has a script element: the error is not escaped:\n%s", page)
	}
	p := st.Partitions[0]
	row := pageRow(t, page, "accounts/1")
	for _, want := range []string{`>stopped<`, `class="pill state bad"`, `<td class="n lag">` + strconv.FormatInt(p.Lag, 10) + `<`,
		`<td class="n">` + strconv.FormatInt(p.CommittedOffset, 10) + `<`, `<td class="n">` + strconv.FormatInt(p.LogEndOffset, 10) + `<`,
		`offset ` + strconv.FormatInt(p.Recovery.Position, 10) + ` of `, `&lt;script&gt;`} {
		if !strings.Contains(row, want) {
			t.Errorf("the row of accounts/1 (%+v) lacks %q: %s", p, want, row)
		}
	}
	sb := st.Standbys[0]
	if row := pageRow(t, page, "accounts/0"); !strings.Contains(row, `<td class="n lag">`+strconv.FormatInt(sb.Lag, 10)+`<`) ||
		strings.Contains(row, ">vouched<") != sb.Vouched {
		t.Errorf("the standby row of accounts/0 (%+v): %s", sb, row)
	}

	// The other member: its partition runs, at the lag its status shows.
	other := es[1-owner].Status()
	if len(other.Partitions) != 1 || other.Partitions[0].Input != in0 {
		t.Fatalf("the other member holds %+v, want %s", other.Partitions, in0)
	}
	row = pageRow(t, string(servePage(t, es[1-owner])), "accounts/0")
	if q := other.Partitions[0]; q.State != engine.StateRunning || !strings.Contains(row, `class="pill state ok">running<`) ||
		!strings.Contains(row, `<td class="n lag">`+strconv.FormatInt(q.Lag, 10)+`<`) {
		t.Errorf("the other member's %+v shows as %s", q, row)
	}
	for _, path := range []string{"/nothing", "/index.html", "/status"} {
		if code, _ := h.get(path); code != http.StatusNotFound {
			t.Errorf("%s answered %d, want 404", path, code)
		}
	}
}

// servePage is e's status page, served as a client gets it.
func servePage[S any](t *testing.T, e *engine.Engine[S]) []byte {
	code, body := serveHealth(t, e, nil).get("/")
	if code != http.StatusOK {
		t.Fatalf("/ answered %d: %s", code, body)
	}
	return body
}

// pageRow is the first table row of page whose first cell starts with
// name.
func pageRow(t *testing.T, page, name string) string {
	t.Helper()
	for _, row := range strings.Split(page, "<tr>")[1:] {
		if strings.HasPrefix(row, "\n<td>"+name) {
			row, _, _ = strings.Cut(row, "</tr>")
			return row
		}
	}
	t.Fatalf("no row of %s in the page:\n%s", name, page)
	return ""
}
