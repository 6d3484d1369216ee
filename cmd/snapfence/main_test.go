package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/service"
	"github.com/snapfence/snapfence/internal/operator/optest"
)

// snapfence runs the command and returns its exit code and output.
func snapfence(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestEveryVerbAnswersHelp(t *testing.T) {
	for _, v := range verbs {
		code, _, errOut := snapfence(v.name, "-h")
		if code != 0 || !strings.Contains(errOut, "usage: snapfence "+v.name) || !strings.Contains(errOut, "-brokers") {
			t.Fatalf("%s -h: exit %d\n%s", v.name, code, errOut)
		}
	}
	if code, _, errOut := snapfence("-h"); code != 0 || !strings.Contains(errOut, "verify") {
		t.Fatalf("-h: exit %d\n%s", code, errOut)
	}
}

func TestUsageErrorsExitTwoAndSayWhat(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: snapfence VERB"},
		{[]string{"frobnicate"}, `unknown verb "frobnicate"`},
		{[]string{"status", "-brokers", "127.0.0.1:1"}, "-app and -input are required"},
		{[]string{"status", "-app", "a", "-input", "i", "-brokers", ""}, "no brokers"},
		{[]string{"get", "-brokers", "127.0.0.1:1", "-app", "a", "-input", "i"}, "get takes one KEY"},
		{[]string{"dump", "-brokers", "127.0.0.1:1", "-app", "a", "-input", "i"}, "dump needs -partition"},
		{[]string{"reset", "-brokers", "127.0.0.1:1", "-app", "a", "-input", "i"}, "one of -to-earliest and -to-datetime"},
		{[]string{"reset", "-brokers", "127.0.0.1:1", "-app", "a", "-input", "i", "-to-datetime", "yesterday"}, "RFC 3339"},
		{[]string{"skip", "-brokers", "127.0.0.1:1", "-app", "a", "-input", "i"}, "skip needs -partition"},
		{[]string{"status", "-config", "/nonexistent/snapfence.json"}, "no such file"},
		{[]string{"status", "-brokers", "127.0.0.1:1", "-app", "a", "-input", "i", "-sasl", "GSSAPI", "-sasl-user", "u"}, "SASL mechanism"},
	} {
		code, _, errOut := snapfence(tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Fatalf("%q: exit %d, want 2 saying %q:\n%s", tc.args, code, tc.want, errOut)
		}
	}
}

// verbs runs every verb on an application that ran over a known input
// on brokers, as an operator would, and checks what each prints and how
// it exits.
func everyVerb(t *testing.T, brokers []string) {
	app := optest.App{Name: fmt.Sprint("cmd-", time.Now().UnixNano()), Input: fmt.Sprint("cmd-in-", time.Now().UnixNano()),
		Brokers: brokers, Partitions: 2}
	app.CreateInput(t)
	input := optest.Records(40, 5)
	app.Produce(t, input...)
	want := optest.Sums(input...)
	r := app.Start(t)
	r.AwaitCommitted(t, 2, 2*time.Minute)

	common := []string{"-brokers", strings.Join(brokers, ","), "-app", app.Name, "-input", app.Input}
	with := func(verb string, args ...string) []string { return append(append([]string{verb}, common...), args...) }

	// While it runs: served, and a reset is refused naming the member.
	code, out, errOut := snapfence(with("status", "-json")...)
	var st struct {
		Members    int `json:"members"`
		Partitions []struct {
			Member string `json:"member"`
			Lag    int64  `json:"lag"`
		} `json:"partitions"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Members != 1 || len(st.Partitions) != 2 || st.Partitions[0].Member == "" {
		t.Fatalf("status -json while running: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := snapfence(with("reset", "-to-earliest", "-dry-run=false")...); code != 1 || !strings.Contains(errOut, "live member") {
		t.Fatalf("reset while running: exit %d, want 1 naming the live member\n%s", code, errOut)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}

	code, out, errOut = snapfence(with("status")...)
	if code != 0 || !strings.Contains(out, "PARTITION") || !strings.Contains(out, "none") {
		t.Fatalf("status: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = snapfence(with("get", "-codec", "int64", "k1")...)
	if code != 0 || !strings.Contains(out, fmt.Sprint(want["k1"])) {
		t.Fatalf("get k1: exit %d, want its state %d\n%s\n%s", code, want["k1"], out, errOut)
	}
	if code, out, _ := snapfence(with("get", "nobody")...); code != 1 || !strings.Contains(out, "no committed state") {
		t.Fatalf("get nobody: exit %d\n%s", code, out)
	}
	got := map[string]int64{}
	for p := range 2 {
		code, out, errOut := snapfence(with("dump", "-json", "-codec", "int64", "-partition", fmt.Sprint(p))...)
		var es []struct {
			Key   string `json:"key"`
			State int64  `json:"state"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &es) != nil {
			t.Fatalf("dump -partition %d: exit %d\n%s\n%s", p, code, out, errOut)
		}
		for _, e := range es {
			got[e.Key] = e.State
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dumped %v, want %v", got, want)
	}
	if code, out, errOut := snapfence(with("verify")...); code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("verify: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := snapfence(with("hanging")...); code != 0 || !strings.Contains(out, "no hanging transaction") {
		t.Fatalf("hanging: exit %d\n%s\n%s", code, out, errOut)
	}
	// A dry run prints the plan and changes nothing.
	code, out, errOut = snapfence(with("reset", "-to-earliest")...)
	if code != 0 || !strings.Contains(out, "dry run") {
		t.Fatalf("reset dry run: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := snapfence(with("get", "-codec", "int64", "k1")...); code != 0 || !strings.Contains(out, fmt.Sprint(want["k1"])) {
		t.Fatalf("get k1 after the dry run: exit %d\n%s\n%s", code, out, errOut)
	}
	// Nothing to skip: the partitions are at their ends.
	if code, _, errOut := snapfence(with("skip", "-partition", "0")...); code != 1 || errOut == "" {
		t.Fatalf("skip at the end of the input: exit %d, want 1 saying why\n%s", code, errOut)
	}
}

func TestEveryVerbOnTheEmbeddedCluster(t *testing.T) {
	svc, err := service.New(context.Background(), service.Config[int64]{Application: "holder", Brokers: []string{service.Embedded},
		Input: "holder-input", Engine: engine.Config[int64]{Fold: optest.Sum, Codec: engine.Int64()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	everyVerb(t, svc.Brokers())
}
