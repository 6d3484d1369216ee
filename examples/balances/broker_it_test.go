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

// The example program against the real broker of the integration run:
// it creates its topics, runs the engine, restarts it, and every balance
// matches the transactions.
func TestExampleOnKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"-brokers", strings.Join(brokers, ",")}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "all 10 accounts match") {
		t.Fatalf("output does not end with every account matching:\n%s", out.String())
	}
}
