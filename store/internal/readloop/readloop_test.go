package readloop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// script is a Source that answers from a fixed list of polls.
type script struct {
	hw, lso int64
	start   int64
	polls   []poll
	now     time.Time
}

type poll struct {
	recs []Fetched
	next int64
	took time.Duration
}

func (s *script) HighWatermark(context.Context) (int64, error) { return s.hw, nil }
func (s *script) LastStable(context.Context) (int64, error)    { return s.lso, nil }
func (s *script) LogStart(context.Context) (int64, error)      { return s.start, nil }
func (s *script) Poll(_ context.Context, wait time.Duration) ([]Fetched, int64, error) {
	p := s.polls[0]
	if len(s.polls) > 1 {
		s.polls = s.polls[1:]
	}
	s.now = s.now.Add(min(p.took, wait))
	return p.recs, p.next, nil
}

func at(off int64, key string) Fetched {
	return Fetched{Offset: off, Record: wire.EncodeSnapshot("", store.Snapshot{Key: []byte(key), Value: []byte("v"), Offset: off})}
}

func run(t *testing.T, s *script, stall time.Duration) (keys []string, logs string, err error) {
	return runWith(t, s, s, stall)
}

// runWith reads src on s's clock.
func runWith(t *testing.T, src Source, s *script, stall time.Duration) (keys []string, logs string, err error) {
	var buf bytes.Buffer
	cfg := Config{
		Snapshots: store.TopicPartition{Topic: "snaps", Partition: 0}, StallTimeout: stall, PollWait: time.Second,
		Now: func() time.Time { return s.now }, Logger: slog.New(slog.NewTextHandler(&buf, nil)),
	}
	for snap, err := range Read(context.Background(), cfg, src) {
		if err != nil {
			return keys, buf.String(), err
		}
		keys = append(keys, string(snap.Key))
	}
	return keys, buf.String(), nil
}

// A partition whose last entries are control markers never yields a record
// at target-1: the read ends on the position, not on a record.
func TestReadEndsOnThePositionOverTrailingMarkers(t *testing.T) {
	s := &script{hw: 4, lso: 4, polls: []poll{{recs: []Fetched{at(0, "a"), at(2, "b")}, next: 4}}}
	keys, _, err := run(t, s, time.Minute)
	if err != nil || strings.Join(keys, ",") != "a,b" {
		t.Fatalf("keys %v err %v", keys, err)
	}
}

func TestRecordsAtOrAboveTheTargetAreNotYielded(t *testing.T) {
	s := &script{hw: 2, lso: 2, polls: []poll{{recs: []Fetched{at(0, "a"), at(1, "b"), at(2, "late")}, next: 3}}}
	keys, _, err := run(t, s, time.Minute)
	if err != nil || strings.Join(keys, ",") != "a,b" {
		t.Fatalf("keys %v err %v: a record written after the read started was yielded", keys, err)
	}
}

func TestWarnsWhenTheTargetIsAboveTheLastStableOffset(t *testing.T) {
	s := &script{hw: 3, lso: 1, polls: []poll{{recs: []Fetched{at(0, "a")}, next: 1}, {next: 3, took: 10 * time.Second}}}
	_, logs, err := run(t, s, time.Minute)
	if err != nil || !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "last_stable=1") || !strings.Contains(logs, "target=3") {
		t.Fatalf("err %v, logs %q: want a warning naming target and last stable offset", err, logs)
	}
}

func TestEveryAdvanceResetsTheDeadline(t *testing.T) {
	var polls []poll
	for i := range 10 {
		polls = append(polls, poll{next: int64(i + 1), took: 50 * time.Second})
	}
	s := &script{hw: 10, lso: 10, polls: polls}
	_, _, err := run(t, s, time.Minute)
	if err != nil {
		t.Fatalf("a read advancing every 50s failed under a 1m deadline: %v", err)
	}
}

func TestNoDeadlineWhenStallTimeoutIsZero(t *testing.T) {
	polls := []poll{}
	for range 100 {
		polls = append(polls, poll{next: 0, took: time.Hour})
	}
	polls = append(polls, poll{next: 1})
	s := &script{hw: 1, lso: 1, polls: polls}
	if _, _, err := run(t, s, 0); err != nil {
		t.Fatalf("plain read failed: %v", err)
	}
}

// An empty partition, or one whose records are all below its log start,
// has nothing to read: the read ends at once.
func TestNothingToReadEndsAtOnce(t *testing.T) {
	for _, c := range []struct{ start, hw int64 }{{0, 0}, {7, 7}} {
		s := &script{hw: c.hw, lso: c.hw, start: c.start, polls: []poll{{next: c.start, took: time.Hour}}}
		if keys, _, err := run(t, s, time.Minute); err != nil || len(keys) != 0 || !s.now.IsZero() {
			t.Fatalf("start %d hw %d: keys %v err %v", c.start, c.hw, keys, err)
		}
	}
}

// Progress hears the start (target and log start), every advance, and one
// end: on reaching the target, or with the stall error.
func TestProgressReportsStartAdvancesAndEnd(t *testing.T) {
	var got []string
	progress := func(e store.RecoveryEvent) {
		got = append(got, fmt.Sprintf("%d/%d/%t/%v", e.Position, e.Target, e.Done, e.Err != nil))
	}
	read := func(s *script) {
		cfg := Config{Snapshots: store.TopicPartition{Topic: "snaps"}, StallTimeout: time.Minute, PollWait: time.Second,
			Now: func() time.Time { return s.now }, Progress: progress}
		for range Read(context.Background(), cfg, s) {
		}
	}
	read(&script{hw: 3, lso: 3, start: 1, polls: []poll{{recs: []Fetched{at(1, "a")}, next: 2}, {next: 2, took: time.Second}, {next: 3}}})
	if want := "[1/3/false/false 2/3/false/false 3/3/true/false]"; fmt.Sprint(got) != want {
		t.Fatalf("events %v, want %s", got, want)
	}
	got = nil
	read(&script{hw: 2, lso: 1, polls: []poll{{recs: []Fetched{at(0, "a")}, next: 1}, {next: 1, took: time.Hour}}})
	if want := "[0/2/false/false 1/2/false/false 1/2/true/true]"; fmt.Sprint(got) != want {
		t.Fatalf("events %v, want %s (a stall ends with its error)", got, want)
	}
	got = nil
	read(&script{hw: 0, lso: 0})
	if want := "[0/0/true/false]"; fmt.Sprint(got) != want {
		t.Fatalf("events %v, want %s (nothing to read ends at the start)", got, want)
	}
}

// pinned is a script whose PinChecker reports a hanging transaction, or
// ends it (the next polls then advance).
type pinned struct {
	*script
	checks int
	abort  bool
}

func (p *pinned) CheckPinned(context.Context, int64) (bool, Hanging) {
	p.checks++
	if p.abort {
		p.polls = []poll{{next: p.hw}}
		return true, nil
	}
	h := &hangingError{Snapshots: store.TopicPartition{Topic: "snaps"}}
	return false, func(se *store.RecoveryStalledError) error { h.Stall = se; return h }
}

// hangingError stands for a backend's error naming the hanging
// transactions it found (store/kafka's HangingTransactionError).
type hangingError struct {
	Snapshots store.TopicPartition
	Stall     *store.RecoveryStalledError
}

func (e *hangingError) Error() string { return "hanging transactions on " + e.Snapshots.String() }

func (e *hangingError) Unwrap() []error {
	if e.Stall == nil {
		return nil
	}
	return []error{e.Stall}
}

// A read pinned at the last stable offset asks its PinChecker once per
// interval; what it reports becomes the stall's error, and an abort lets
// the read finish.
func TestPinCheckerFindingsEndAStalledRead(t *testing.T) {
	s := &pinned{script: &script{hw: 2, lso: 1, polls: []poll{{recs: []Fetched{at(0, "a")}, next: 1}, {next: 1, took: time.Hour}}}}
	_, _, err := runWith(t, s, s.script, time.Minute)
	var he *hangingError
	if !errors.As(err, &he) || he.Stall == nil || !errors.Is(err, store.ErrRecoveryStalled) {
		t.Fatalf("err = %v, want the hanging transaction as the stall's error", err)
	}
	if s.checks != 12 { // every DefaultPinCheckInterval (5 s) of the minute
		t.Fatalf("%d checks in a minute, want 12", s.checks)
	}
	s = &pinned{script: &script{hw: 2, lso: 1, polls: []poll{{recs: []Fetched{at(0, "a")}, next: 1}, {next: 1, took: time.Hour}}}, abort: true}
	if keys, _, err := runWith(t, s, s.script, time.Minute); err != nil || fmt.Sprint(keys) != "[a]" || s.checks != 1 {
		t.Fatalf("keys %v err %v checks %d after an abort", keys, err, s.checks)
	}
}
