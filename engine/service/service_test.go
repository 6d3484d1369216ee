package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/service"
	"github.com/snapfence/snapfence/store"
)

// sum folds decimal amounts into a running total and emits it.
func sum(key []byte, total int64, _ bool, rec engine.Record) (engine.Result[int64], error) {
	n, err := strconv.ParseInt(string(rec.Value), 10, 64)
	if err != nil {
		return engine.Result[int64]{}, err
	}
	total += n
	return engine.Set(total).With(engine.Output{Topic: "totals", Key: key, Value: []byte(strconv.FormatInt(total, 10))}), nil
}

func config() service.Config[int64] {
	return service.Config[int64]{
		Application: "totals-test",
		Brokers:     []string{service.Embedded},
		Input:       "orders",
		Engine:      engine.Config[int64]{Fold: sum, Codec: engine.Int64(), CommitInterval: 50 * time.Millisecond},
	}
}

// waitFor polls cond until it holds or the test's deadline nears: it
// waits for what it observes, not for a time.
func waitFor(t *testing.T, what string, cond func() bool, show ...*service.Service[int64]) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a bound on a hang, not a timing
	if d, ok := t.Deadline(); ok && d.Add(-5*time.Second).Before(deadline) {
		deadline = d.Add(-5 * time.Second)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			for _, svc := range show {
				st, _ := json.Marshal(svc.Status())
				t.Logf("%s: %s", svc.Endpoint(), st)
			}
			t.Fatalf("never observed: %s", what)
		}
		<-tick.C
	}
}

func TestServiceOnTheEmbeddedClusterFoldsAndAnswersQueries(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc, err := service.New(ctx, config())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()

	cl, err := kgo.NewClient(kgo.SeedBrokers(svc.Brokers()...), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	want := map[string]int64{}
	for i := range 60 {
		key := "c" + strconv.Itoa(i%7)
		want[key] += int64(i)
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(key), Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	for key, total := range want {
		waitFor(t, key+" committed at its total", func() bool {
			e, ok, err := svc.Get(ctx, []byte(key))
			return err == nil && ok && e.State == total
		})
		resp, err := http.Get(srv.URL + "/keys/" + key)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got struct {
			State int64 `json:"state"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &got) != nil || got.State != total {
			t.Fatalf("GET /keys/%s: %d %s, want 200 with state %d", key, resp.StatusCode, body, total)
		}
	}
	resp, err := http.Get(srv.URL + "/keys/nobody")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /keys/nobody: %d, want 404", resp.StatusCode)
	}
	for _, path := range []string{"/readyz", "/livez", "/metrics"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d, want 200", path, resp.StatusCode)
		}
	}
	// The status page, for people: the input's partitions, running.
	resp, err = http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(string(page), "orders/0") || !strings.Contains(string(page), "running") {
		t.Fatalf("GET /: %d %s, want the status page listing orders/0 running\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), page)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestServiceConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*service.Config[int64])
		field string
	}{
		{"no application", func(c *service.Config[int64]) { c.Application = "" }, "service.Config.Application"},
		{"no brokers", func(c *service.Config[int64]) { c.Brokers = nil }, "service.Config.Brokers"},
		{"bad broker", func(c *service.Config[int64]) { c.Brokers = []string{"localhost"} }, "service.Config.Brokers[0]"},
		{"no input", func(c *service.Config[int64]) { c.Input = "" }, "service.Config.Input"},
		{"a store of one's own", func(c *service.Config[int64]) {
			c.Engine.Emit = func(context.Context, []engine.Output) error { return nil }
		}, "service.Config.Engine.Emit"},
		{"a disk cache on the embedded cluster", func(c *service.Config[int64]) { c.Engine.Dir = t.TempDir() }, "service.Config.Engine.Dir"},
		{"a bad listen address", func(c *service.Config[int64]) { c.HTTP = "8080" }, "service.Config.HTTP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config()
			tc.edit(&cfg)
			_, err := service.New(context.Background(), cfg)
			var ce *store.ConfigError
			if !errors.As(err, &ce) || ce.Subject != tc.field {
				t.Fatalf("New: %v, want a *store.ConfigError naming %s", err, tc.field)
			}
		})
	}
}

// TestAnyInstanceAnswersForEveryKey runs two instances of one
// application and asks each for every key: a key the other serves is
// redirected to the endpoint its owner advertises, so every answer is
// the key's total whichever instance is asked.
func TestAnyInstanceAnswersForEveryKey(t *testing.T) {
	cfg := config()
	cfg.HTTP = "127.0.0.1:0"
	host, err := service.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	runService(t, host) // registered first: stopped last, with its cluster
	// The second instance creates topics, as the embedded host does.
	cfg.Brokers, cfg.CreateTopics = host.Brokers(), true
	checkEveryKeyAnsweredByEveryInstance(t, host, cfg)
}

// checkEveryKeyAnsweredByEveryInstance runs a second instance of a's
// application (cfg, its brokers), produces to the input, waits until both
// serve a share of it, asks each for every key, then stops the second
// and asks a again: it has taken every partition over.
func checkEveryKeyAnsweredByEveryInstance(t *testing.T, a *service.Service[int64], cfg service.Config[int64]) {
	b, err := service.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctxB, cancelB := context.WithCancel(context.Background())
	doneB := make(chan error, 1)
	go func() { doneB <- b.Run(ctxB) }()
	defer func() {
		cancelB()
		if err := <-doneB; err != nil {
			t.Errorf("Run b: %v", err)
		}
	}()
	want := map[string]int64{}
	var kv []string
	for i := range 40 {
		key := "c" + strconv.Itoa(i%10)
		want[key] += int64(i)
		kv = append(kv, key, strconv.Itoa(i))
	}
	produce(t, a.Brokers(), cfg.Input, kv...)
	waitFor(t, "both instances serving a share of the input", func() bool {
		return len(a.Status().Partitions) > 0 && len(b.Status().Partitions) > 0 && a.Status().Ready() && b.Status().Ready()
	}, a, b)
	redirected := 0
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { redirected++; return nil }}
	answers := func(svc *service.Service[int64]) {
		for key, total := range want {
			waitFor(t, key+" answered at its total by "+svc.Endpoint(), func() bool {
				resp, err := client.Get(svc.Endpoint() + "/keys/" + key)
				if err != nil {
					return false
				}
				defer resp.Body.Close()
				var got struct {
					State int64 `json:"state"`
				}
				return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&got) == nil && got.State == total
			})
		}
	}
	answers(a)
	answers(b)
	if redirected == 0 {
		t.Fatal("no query was redirected: one instance served every key")
	}
	cancelB()
	if err := <-doneB; err != nil {
		t.Fatalf("Run b: %v", err)
	}
	doneB <- nil
	answers(a) // once it has taken b's partitions over
}

// get is GET url's status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// runService runs svc until the test ends, and checks that Run returned
// nil once its context ended.
func runService[S any](t *testing.T, svc *service.Service[S]) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func produce(t *testing.T, brokers []string, topic string, kv ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i+1 < len(kv); i += 2 {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(kv[i]), Value: []byte(kv[i+1])}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestServiceMetricsCountTheStoresTransactions: the store's transactions
// reach /metrics with nothing wired but the service.
func TestServiceMetricsCountTheStoresTransactions(t *testing.T) {
	cfg := config()
	cfg.HTTP = "127.0.0.1:0"
	svc, err := service.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	runService(t, svc)
	produce(t, svc.Brokers(), "orders", "a", "1", "b", "2")
	waitFor(t, "a committed transaction in /metrics", func() bool {
		_, body := get(t, svc.Endpoint()+"/metrics")
		return strings.Contains(body, `snapfence_transactions_total{outcome="committed"}`) &&
			strings.Contains(body, "snapfence_records_folded_total")
	})
}

// TestServiceRefusesAMissingInputTopic: without CreateTopics, a missing
// input is a *store.ConfigError naming the field and the topic, at New.
func TestServiceRefusesAMissingInputTopic(t *testing.T) {
	host, err := service.New(context.Background(), config()) // an embedded cluster to point at
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	cfg := config()
	cfg.Brokers, cfg.Input = host.Brokers(), "no-such-topic"
	_, err = service.New(context.Background(), cfg)
	var ce *store.ConfigError
	if !errors.As(err, &ce) || ce.Subject != "service.Config.Input" || !strings.Contains(err.Error(), "no-such-topic") {
		t.Fatalf("New: %v, want a *store.ConfigError naming service.Config.Input and the topic", err)
	}
	cfg.CreateTopics = true
	svc, err := service.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New with CreateTopics: %v", err)
	}
	svc.Close()
}

// TestServiceRefusesATakenPort: New fails, naming the field, rather than
// Run starting without its probes.
func TestServiceRefusesATakenPort(t *testing.T) {
	cfg := config()
	cfg.HTTP = "127.0.0.1:0"
	first, err := service.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	cfg.HTTP = strings.TrimPrefix(first.Endpoint(), "http://")
	if _, err := service.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "service.Config.HTTP") {
		t.Fatalf("New on a taken port: %v, want an error naming service.Config.HTTP", err)
	}
}

// TestTwoApplicationsOnOneInputKeepTheirOwnState: a second application on
// the same input folds it into state of its own, named from its
// Application, and neither reads the other's.
func TestTwoApplicationsOnOneInputKeepTheirOwnState(t *testing.T) {
	cfgA := config()
	a, err := service.New(context.Background(), cfgA)
	if err != nil {
		t.Fatal(err)
	}
	runService(t, a)
	cfgB := config()
	cfgB.Application, cfgB.Brokers = "doubler", a.Brokers()
	cfgB.Engine.Fold = func(key []byte, n int64, exists bool, rec engine.Record) (engine.Result[int64], error) {
		return engine.Set(n + 2*int64(len(rec.Value))), nil
	}
	cfgB.CreateTopics = true
	b, err := service.New(context.Background(), cfgB)
	if err != nil {
		t.Fatal(err)
	}
	runService(t, b)
	produce(t, a.Brokers(), "orders", "k", "123", "k", "7")
	waitFor(t, "each application's own state of k", func() bool {
		ea, oka, erra := a.Get(context.Background(), []byte("k"))
		eb, okb, errb := b.Get(context.Background(), []byte("k"))
		return erra == nil && errb == nil && oka && okb && ea.State == 130 && eb.State == 8
	})
}

// TestServiceExactlyOnceIsOneField: with Engine.ExactlyOnce the outputs go
// through the store's transactions, and the output topic is created.
func TestServiceExactlyOnceIsOneField(t *testing.T) {
	cfg := config()
	cfg.Engine.ExactlyOnce, cfg.Engine.OutputTopics = true, []string{"totals"}
	svc, err := service.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	runService(t, svc)
	produce(t, svc.Brokers(), "orders", "a", "5", "a", "6")
	cl, err := kgo.NewClient(kgo.SeedBrokers(svc.Brokers()...), kgo.ConsumeTopics("totals"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []string
	for len(got) < 2 {
		fs := cl.PollFetches(context.Background())
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if strings.Join(got, ",") != "5,11" {
		t.Fatalf("read_committed outputs %q, want 5,11", got)
	}
}
