//go:build it

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/internal/kafkatest"
)

// The example program against the real broker of the integration run, in
// both modes: it creates its topics under a fresh prefix, runs two
// instances with live views of the sellers table, updates a seller
// between the batches (both views show it), kills one instance
// mid-stream, and the read_committed check passes (exactly once: no
// duplicate; at least once: nothing missing; the first batch's records
// carry the seller's old row, the second's the new one).
func TestExampleOnKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	for _, c := range []struct {
		args    []string
		verdict string
	}{
		{nil, "exactly once: every input event has exactly one enriched record"},
		{[]string{"-at-least-once"}, "at least once: every input event has an enriched record"},
	} {
		t.Run(strings.Join(append([]string{"default"}, c.args...), " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var out bytes.Buffer
			args := append([]string{"-brokers", strings.Join(brokers, ","), "-prefix", "enrichment-it-" + time.Now().UTC().Format("20060102T150405.000000") + "-"}, c.args...)
			if err := run(ctx, args, &out); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			for _, want := range []string{c.verdict, "seller s-1 updated: commission 1200 -> 1500 bps; the views of instances A and B show it"} {
				if !strings.Contains(out.String(), want) {
					t.Fatalf("output lacks %q:\n%s", want, out.String())
				}
			}
			checkSellerUpdateShown(t, out.String())
			t.Logf("\n%s", out.String())
		})
	}
}
