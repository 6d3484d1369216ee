package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/snapfence/snapfence/internal/kafkatest"
)

// The default mode end to end, in process: kfake, two engine runs, the
// check. It must succeed, print every account's balance as the
// transactions give it, and leave no goroutine behind.
func TestDefaultModeRecoversAndMatches(t *testing.T) {
	before := goroutineIDs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, nil, &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	printed := out.String()

	// The balances the generated transactions give, computed here from
	// the generator alone.
	want := map[string]int{}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{300, 60} {
		for _, r := range transactions(rng, n) {
			if err := sumTransactions(want, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, acct := range accounts {
		v := "closed"
		if n, ok := want[acct]; ok {
			v = strconv.Itoa(n)
		}
		row := regexp.MustCompile(fmt.Sprintf(`(?m)^%s +%s +%s$`, acct, regexp.QuoteMeta(v), regexp.QuoteMeta(v)))
		if !row.MatchString(printed) {
			t.Errorf("no row %q with engine and expected %s\noutput:\n%s", acct, v, printed)
		}
	}
	for _, s := range []string{
		"run 1: folded 300 transactions",
		// The restart recovered the state: it folds only the new batch.
		"run 2: folded 60 transactions",
		fmt.Sprintf("all %d accounts match", len(accounts)),
	} {
		if !strings.Contains(printed, s) {
			t.Errorf("output lacks %q\noutput:\n%s", s, printed)
		}
	}
	checkNoLeak(t, before)
}

// goroutineIDs are the ids of the goroutines running now.
func goroutineIDs() map[string]bool {
	ids := map[string]bool{}
	for _, g := range goroutines() {
		ids[goroutineID(g)] = true
	}
	return ids
}

func goroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

func goroutineID(stack string) string {
	id, _, _ := strings.Cut(strings.TrimPrefix(stack, "goroutine "), " ")
	return id
}

// checkNoLeak fails if goroutines started since before are still running.
// Closed clients and the closed cluster finish their last goroutines
// (connection readers, the cluster's loop) asynchronously once their
// sockets are closed, so it re-checks, yielding, for up to 5s; it returns
// as soon as they are gone.
func checkNoLeak(t *testing.T, before map[string]bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var leaked []string
		for _, g := range goroutines() {
			if id := goroutineID(g); !before[id] && !strings.Contains(g, "checkNoLeak") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left behind:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
		runtime.Gosched()
	}
}

// A balance that differs from the transactions fails the run, naming it.
func TestReportFailsOnMismatch(t *testing.T) {
	var out bytes.Buffer
	err := report(&out, map[string]int{"alice": 5, "bob": 7}, map[string]int{"alice": 5, "bob": 8, "carol": 1})
	if err == nil || !strings.Contains(err.Error(), "2 of 3 accounts differ") {
		t.Fatalf("err = %v, want 2 of 3 accounts differ", err)
	}
	for _, row := range []string{"bob             7         8  MISMATCH", "carol      closed         1  MISMATCH"} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("output lacks %q:\n%s", row, out.String())
		}
	}
}

// On a cluster that serves new topics late, as Kafka does for a moment
// after it answers CreateTopics (kafkatest.ServeLate: a new topic's first
// three ListOffsets are refused), the program waits until its topics are
// served before it uses them.
func TestItsTopicsAreServedBeforeItUsesThem(t *testing.T) {
	before := goroutineIDs()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	late := kafkatest.ServeLate(c, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"-brokers", strings.Join(c.ListenAddrs(), ",")}, &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	if want := fmt.Sprintf("all %d accounts match", len(accounts)); !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q\noutput:\n%s", want, out.String())
	}
	// The fault was met: every topic's refusals were used up.
	for _, topic := range []string{inputTopic, snapshotTopic, outputTopic} {
		if !late.Served(topic) {
			t.Errorf("%s: only %d of its 3 ListOffsets were refused", topic, late.Refused(topic))
		}
	}
	c.Close()
	checkNoLeak(t, before)
}
