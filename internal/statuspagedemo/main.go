// Command statuspagedemo writes the engine's status page (the HTML
// Engine.HealthHandler serves at /) as it looks on a member in trouble,
// for `make html-check` to render with headless Chromium and check.
//
//	go run ./internal/statuspagedemo -html FILE
//
// On the simulated cluster, two engines of the group "bank", each keeping
// a standby replica of the other's partitions, fold a ledger of 4
// partitions to its end. Then more records come to the first engine's
// partitions and one of them is a record its fold fails on: that
// partition stops (and, under the default StopOnPoison, the member with
// it) while its other partition has folded records it has not committed
// yet, so it shows lag. The page is that member's, taken through the
// handler as a browser would get it. The command fails if the status is
// not that, so the check never renders a page that shows nothing.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/simsource"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/sim"
	"github.com/snapfence/snapfence/store/wire"
)

const (
	topic      = "accounts"
	partitions = 4
	group      = "bank"
)

func main() {
	out := flag.String("html", "", "write the status page to this file")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "usage: statuspagedemo -html FILE")
		os.Exit(2)
	}
	if err := run(*out, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "statuspagedemo:", err)
		os.Exit(1)
	}
}

// intCodec encodes an int as decimal text.
type intCodec struct{}

func (intCodec) Encode(n int) ([]byte, error) { return []byte(strconv.Itoa(n)), nil }
func (intCodec) Decode(b []byte) (int, error) { return strconv.Atoi(string(b)) }

// sum folds amounts into a balance; anything else fails.
func sum(_ []byte, state int, _ bool, rec engine.Record) (engine.Result[int], error) {
	n, err := strconv.Atoi(string(rec.Value))
	if err != nil {
		return engine.Result[int]{}, fmt.Errorf("bad amount %q", rec.Value)
	}
	return engine.Set(state + n), nil
}

// demo is the cluster and its two members.
type demo struct {
	c  *sim.Cluster
	es [2]*engine.Engine[int]
	rs [2]*engine.Member[int]
}

func run(out string, log io.Writer) error {
	ctx := context.Background()
	c := sim.New(sim.Config{Seed: 7})
	if err := c.CreateTopic(topic, sim.TopicConfig{Partitions: partitions}); err != nil {
		return err
	}
	b, err := c.NewBackend(sim.BackendConfig{Mode: store.Transactional, TransactionalIDPrefix: group, CreateTopics: true})
	if err != nil {
		return err
	}
	defer b.Close()
	d := &demo{c: c}
	for i := range d.es {
		e, err := engine.New(engine.Config[int]{Fold: sum, Codec: intCodec{}, Store: b, StandbyReplicas: 1,
			PersistInterval: 10 * time.Second, CommitInterval: 10 * time.Second})
		if err != nil {
			return err
		}
		defer e.Close()
		r, err := e.Join(simsource.New(c, group, sim.ClassicEager, 0, topic))
		if err != nil {
			return err
		}
		defer r.Close(ctx)
		d.es[i], d.rs[i] = e, r
	}

	for i := range 400 {
		if err := d.produce(int32(i%partitions), "acct-"+strconv.Itoa(i%97), strconv.Itoa(i%13)); err != nil {
			return err
		}
	}
	if err := d.stepUntil(ctx, 120, "the input committed to its end, with standby replicas caught up", d.settled); err != nil {
		return err
	}

	// More records for the first member's partitions; the 21st of its
	// first partition is poison.
	own := d.rs[0].Flows()
	if len(own) != 2 {
		return fmt.Errorf("the first member owns %v, want 2 partitions", own)
	}
	slices.SortFunc(own, func(a, b store.TopicPartition) int { return int(a.Partition - b.Partition) })
	for i := range 40 {
		if err := d.produce(own[1].Partition, "acct-"+strconv.Itoa(i), "+"+strconv.Itoa(i)); err != nil {
			return err
		}
	}
	for i := range 30 {
		v := "+1"
		if i == 20 {
			v = `<img src=x onerror=alert(1)>` // a value a page must not run
		}
		if err := d.produce(own[0].Partition, "acct-"+strconv.Itoa(i), v); err != nil {
			return err
		}
	}
	var st engine.Status
	if err := d.stepUntil(ctx, 30, "a partition stopped and one running with lag", func() bool {
		st = d.es[0].Status()
		stopped, lagging := false, false
		for _, p := range st.Partitions {
			stopped = stopped || p.State == engine.StateStopped && p.Err != nil
			lagging = lagging || p.State == engine.StateRunning && p.Lag > 0
		}
		return stopped && lagging && len(st.Standbys) > 0
	}); err != nil {
		return err
	}

	rec := httptest.NewRecorder()
	d.es[0].HealthHandler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusOK {
		return fmt.Errorf("GET / answered %d: %s", rec.Code, rec.Body)
	}
	if err := os.WriteFile(out, rec.Body.Bytes(), 0o644); err != nil {
		return err
	}
	for _, p := range st.Partitions {
		fmt.Fprintf(log, "%s: %s, lag %d\n", p.Input, p.State, p.Lag)
	}
	for _, s := range st.Standbys {
		fmt.Fprintf(log, "%s: standby, lag %d\n", s.Input, s.Lag)
	}
	fmt.Fprintf(log, "wrote %s (%d bytes)\n", out, rec.Body.Len())
	return nil
}

func (d *demo) produce(p int32, key, value string) error {
	_, err := d.c.Produce(store.TopicPartition{Topic: topic, Partition: p}, wire.Record{Key: []byte(key), Value: []byte(value)})
	return err
}

// stepUntil steps both members, a second of virtual time apart, until
// done holds, for at most steps seconds. A member's error (the poison)
// ends its own steps, not the demo's: the status tells what it did.
func (d *demo) stepUntil(ctx context.Context, steps int, what string, done func() bool) error {
	var errs []error
	for range steps {
		for _, r := range d.rs {
			if err := r.Step(ctx); err != nil && !slices.ContainsFunc(errs, func(e error) bool { return errors.Is(err, e) }) {
				errs = append(errs, err)
			}
		}
		d.c.Advance(time.Second)
		if done() {
			return nil
		}
	}
	return fmt.Errorf("not %s after %d s (errors %v): %+v, %+v", what, steps, errs, d.rs[0].Status(), d.rs[1].Status())
}

// settled: every partition is committed to its end and each member's
// replicas have read their partitions' snapshots to the end.
func (d *demo) settled() bool {
	for p := range int32(partitions) {
		tp := store.TopicPartition{Topic: topic, Partition: p}
		_, _, end, err := d.c.Offsets(tp)
		if off, _ := d.c.CommittedOffset(group, tp); err != nil || off != end {
			return false
		}
	}
	for _, e := range d.es {
		st := e.Status()
		if len(st.Standbys) != 2 {
			return false
		}
		for _, s := range st.Standbys {
			if s.Lag != 0 || !s.Vouched {
				return false
			}
		}
	}
	return true
}
