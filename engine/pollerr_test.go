package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/internal/input"
	"github.com/snapfence/snapfence/store"
)

// refusedPolls is a source whose polls fail: first transiently (a broker
// away) transient times, then for good (the group refused by an ACL: a
// *store.ConfigError, as engine's Kafka source makes of
// GROUP_AUTHORIZATION_FAILED).
type refusedPolls struct {
	unjoined
	transient int
	polls     int
}

func (s *refusedPolls) Poll(context.Context, func() time.Duration) ([]input.Record, error) {
	s.polls++
	if s.polls <= s.transient {
		return nil, errors.New("broker away")
	}
	return nil, &store.ConfigError{Subject: "kafkaio.Config.Group", Problem: `the consumer may not join group "g"`,
		Fix: "grant the principal READ on the group", Err: errors.New("GROUP_AUTHORIZATION_FAILED")}
}

func (s *refusedPolls) Now() time.Time { return time.Now() }

// A poll refused for good ends Run with the refusal, after the transient
// failures before it were retried; it is not retried for ever (it was,
// found on the secured cluster: engine/secured_it_test.go).
func TestAPollRefusedForGoodEndsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, e := keepingEngine(t)
		src := &refusedPolls{transient: 3}
		r, err := e.Join(input.OpenFunc(func(input.Opening) (input.Source, error) { return src, nil }))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		err = r.Run(ctx)
		var ce *store.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, store.ErrMisconfigured) || ce.Subject != "kafkaio.Config.Group" {
			t.Fatalf("Run = %v, want the poll's ConfigError", err)
		}
		if ctx.Err() != nil {
			t.Fatal("Run returned only at its context's deadline")
		}
		if src.polls != src.transient+1 {
			t.Fatalf("%d polls, want the %d transient failures retried and the refusal not", src.polls, src.transient)
		}
	})
}

// sleepingPolls is refusedPolls that records Run's waits between polls.
type sleepingPolls struct {
	refusedPolls
	sleeps []time.Duration
}

func (s *sleepingPolls) Sleep(_ context.Context, d time.Duration) { s.sleeps = append(s.sleeps, d) }

// Run's backoff between failed polls is the scheduler's, waited on the
// source's clock (Source.Sleep: virtual on the simulated cluster), not
// on a timer of its own.
func TestRunBacksOffFailedPollsOnTheSourcesClock(t *testing.T) {
	_, e := keepingEngine(t)
	src := &sleepingPolls{refusedPolls: refusedPolls{transient: 4}}
	r, err := e.Join(input.OpenFunc(func(input.Opening) (input.Source, error) { return src, nil }))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); !errors.Is(err, store.ErrMisconfigured) {
		t.Fatalf("Run = %v, want the poll's ConfigError", err)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}
	if !slices.Equal(src.sleeps, want) {
		t.Fatalf("Run slept %v between polls, want %v", src.sleeps, want)
	}
}
